"""How many partitions a request may create: KIP-578's ``max.partitions`` (the cluster) and
``max.broker.partitions`` (one broker's replicas), checked by CreateTopics, CreatePartitions
and auto topic creation, ``validate_only`` included (docs/zookeeper.md#partition-limits).

Kafka 2.8 has no limit: a CreateTopics of a million partitions is placed, encoded and
written as one ``/brokers/topics/<t>`` znode larger than ZooKeeper accepts, and ten
thousand are accepted and keep every broker busy opening logs for minutes. KIP-578 proposed
these two configs (never released in Kafka); minibroker takes them as static broker
properties. A request that would take the cluster past ``max.partitions`` or any broker
past ``max.broker.partitions`` is refused POLICY_VIOLATION with the numbers, before
anything is written.

The checks run in two steps, so that a huge request is refused before its assignment is
computed (placing a million partitions takes seconds): :meth:`PartitionBudget.precheck`
on the counts alone (the busiest broker carries at least the average of the live brokers'
replicas), then :meth:`PartitionBudget.check` on the assignment itself; what passes is
counted (:meth:`PartitionBudget.add`) against the topics that follow in the same request.

``max.broker.partitions`` defaults to 1000 for the CPU a broker spends on its replicas
(docs/zookeeper.md#partition-limits), not for descriptors: a hosted partition keeps none of
its own, its segment files coming from a bounded pool (broker.log.segment_files), so the
cap may be raised to 30,000 and more within a ``ulimit -n`` of 20,000.

The existing counts are this broker's metadata (the controller's last UpdateMetadata), so
two requests on two brokers at the same moment may both pass: the limits are a guard
against mistakes, not a quota.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from proto.errors import BrokerResponseError

__all__ = ["POLICY_VIOLATION", "PartitionBudget", "PartitionLimitError"]

POLICY_VIOLATION = 44


class PartitionLimitError(BrokerResponseError):
    """Kafka's ``PolicyViolationException``: the request would pass a partition limit."""

    code = POLICY_VIOLATION

    def __str__(self) -> str:
        return self.args[0] if self.args else "POLICY_VIOLATION"


@dataclass
class PartitionBudget:
    """One request's view of the limits: the partitions and replicas that exist, plus those
    the request's earlier topics were admitted with."""

    max_partitions: int
    """``max.partitions``: partitions in the cluster, over all topics."""
    max_broker_partitions: int
    """``max.broker.partitions``: partition replicas one broker may host."""
    partitions: int
    """Partitions in the cluster now."""
    replicas: Counter[int] = field(default_factory=Counter)
    """Partition replicas per broker now."""

    @classmethod
    def of(
        cls,
        max_partitions: int,
        max_broker_partitions: int,
        existing: Iterable[Sequence[int]],
    ) -> PartitionBudget:
        """The budget left by ``existing`` (every partition's replicas)."""
        replicas: Counter[int] = Counter()
        count = 0
        for partition_replicas in existing:
            count += 1
            replicas.update(partition_replicas)
        return cls(max_partitions, max_broker_partitions, count, replicas)

    def precheck(
        self, what: str, new_partitions: int, replication_factor: int, live: Sequence[int]
    ) -> None:
        """Raise PartitionLimitError if ``new_partitions`` partitions of
        ``replication_factor`` replicas over the ``live`` brokers cannot fit, whatever the
        placement; ``what`` names the request's topic in the message."""
        if self.partitions + new_partitions > self.max_partitions:
            raise PartitionLimitError(
                f"{what}: {new_partitions} new partitions would take the cluster to "
                f"{self.partitions + new_partitions} partitions, more than max.partitions "
                f"({self.max_partitions})"
            )
        if not live or replication_factor < 1:
            return  # the caller's own checks refuse these
        total = sum(self.replicas[b] for b in live) + new_partitions * replication_factor
        busiest = -(-total // len(live))
        if busiest > self.max_broker_partitions:
            raise PartitionLimitError(
                f"{what}: {new_partitions} new partitions with replication factor "
                f"{replication_factor} would put at least {busiest} partition replicas on a "
                f"broker of the {len(live)} live brokers, more than max.broker.partitions "
                f"({self.max_broker_partitions})"
            )

    def check(self, what: str, assignment: Mapping[int, Sequence[int]]) -> None:
        """Raise PartitionLimitError if the new partitions ``assignment`` (partition ->
        replicas) pass a limit."""
        self.precheck(what, len(assignment), 0, ())
        added = _replicas(assignment)
        over = sorted(
            (b, self.replicas[b] + n)
            for b, n in added.items()
            if self.replicas[b] + n > self.max_broker_partitions
        )
        if over:
            broker, count = over[0]
            raise PartitionLimitError(
                f"{what}: the assignment would put {count} partition replicas on broker "
                f"{broker}, more than max.broker.partitions ({self.max_broker_partitions})"
            )

    def add(self, assignment: Mapping[int, Sequence[int]]) -> None:
        """Count the new partitions ``assignment`` against the request's next topics."""
        self.partitions += len(assignment)
        self.replicas.update(_replicas(assignment))

    def admit(self, what: str, assignment: Mapping[int, Sequence[int]]) -> None:
        """:meth:`check`, then :meth:`add`."""
        self.check(what, assignment)
        self.add(assignment)


def _replicas(assignment: Mapping[int, Sequence[int]]) -> Counter[int]:
    counted: Counter[int] = Counter()
    for replicas in assignment.values():
        counted.update(replicas)
    return counted
