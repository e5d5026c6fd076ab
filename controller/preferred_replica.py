"""The leader-imbalance check behind ``auto.leader.rebalance.enable``.

Leadership drifts away from the preferred replicas (the first of each assignment,
spread round-robin by :mod:`proto.replica_assignment`) every time a broker fails or
shuts down, and nothing moves it back on its own: after a rolling restart one broker can
end up leading everything. Kafka's controller therefore checks every
``leader.imbalance.check.interval.seconds`` (300) and runs a preferred replica election
for the partitions of each broker whose imbalance is too high
(``KafkaController.checkAndTriggerAutoLeaderRebalance``):

    imbalance(b) = |partitions whose preferred replica is b but whose leader is not b|
                   / |partitions whose preferred replica is b|

and it triggers when ``imbalance(b) > leader.imbalance.per.broker.percentage / 100``
(default 10). Strictly greater: at exactly 10 % nothing moves. Partitions without a
leader count as not led by b. Of b's imbalanced partitions only those whose preferred
replica can actually lead (live and in the ISR, ``canPreferredReplicaBeLeader``) are
elected; the others would fail the election anyway.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from proto.topic_partition import TopicPartition
from proto.zk.znodes import PartitionStateData

__all__ = [
    "DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE",
    "BrokerLeaderImbalance",
    "leader_imbalance",
    "partitions_to_rebalance",
]

DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE = 10
"""Kafka's default for ``leader.imbalance.per.broker.percentage``."""


@dataclass(frozen=True, slots=True)
class BrokerLeaderImbalance:
    """How far one broker's leadership is from what the assignment prefers."""

    broker: int
    preferred: tuple[TopicPartition, ...] = ()
    """Partitions whose preferred (first) replica is this broker."""
    not_led: tuple[TopicPartition, ...] = ()
    """Of those, the ones another broker leads, or no broker does."""

    @property
    def ratio(self) -> float:
        """``len(not_led) / len(preferred)``, the value Kafka logs."""
        return len(self.not_led) / len(self.preferred) if self.preferred else 0.0

    def exceeds(self, percentage: int) -> bool:
        """``ratio > percentage / 100``, compared in integers so 1 of 10 at 10 % is not
        above the threshold because of floating-point rounding."""
        return len(self.not_led) * 100 > percentage * len(self.preferred)


def leader_imbalance(
    assignments: Mapping[TopicPartition, Sequence[int]],
    states: Mapping[TopicPartition, PartitionStateData],
) -> dict[int, BrokerLeaderImbalance]:
    """Preferred broker -> its imbalance, over every partition with a non-empty assignment.

    A partition with no state znode yet (still New) counts in the denominator but not as
    imbalanced, as in Kafka, where it has no leadership info to compare.
    """
    preferred: dict[int, list[TopicPartition]] = {}
    not_led: dict[int, list[TopicPartition]] = {}
    for tp in sorted(assignments):
        replicas = assignments[tp]
        if not replicas:
            continue
        broker = replicas[0]
        preferred.setdefault(broker, []).append(tp)
        state = states.get(tp)
        if state is not None and state.leader != broker:
            not_led.setdefault(broker, []).append(tp)
    return {
        broker: BrokerLeaderImbalance(broker, tuple(tps), tuple(not_led.get(broker, ())))
        for broker, tps in sorted(preferred.items())
    }


def partitions_to_rebalance(
    assignments: Mapping[TopicPartition, Sequence[int]],
    states: Mapping[TopicPartition, PartitionStateData],
    live_brokers: Collection[int],
    imbalance_percentage: int = DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE,
    *,
    topics_being_deleted: Collection[str] = (),
    reassignment_in_progress: bool = False,
) -> list[TopicPartition]:
    """The partitions an auto-rebalance run should give back to their preferred replica,
    in sorted order; run :func:`~controller.leader_election.preferred_replica_leader_election`
    on each.

    Topics queued for deletion are left out entirely (Kafka filters them before
    grouping). While any reassignment is in progress nothing is returned: a reassignment
    moves leadership itself, and Kafka 2.x skips the rebalance rather than race it.
    """
    if imbalance_percentage < 0:
        raise ValueError(
            f"leader.imbalance.per.broker.percentage must be >= 0, got {imbalance_percentage}"
        )
    if reassignment_in_progress:
        return []
    deleted = set(topics_being_deleted)
    considered = {tp: r for tp, r in assignments.items() if tp.topic not in deleted}
    live = set(live_brokers)
    result: list[TopicPartition] = []
    for broker, imbalance in leader_imbalance(considered, states).items():
        if not imbalance.exceeds(imbalance_percentage):
            continue
        for tp in imbalance.not_led:
            isr = states[tp].isr
            # canPreferredReplicaBeLeader: the preferred replica must be live and in sync.
            if broker in live and broker in isr:
                result.append(tp)
    return sorted(result)
