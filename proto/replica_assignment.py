"""Where a new topic's replicas go, and whether a user-given assignment is acceptable.

docs/replication.md fixes the placement rule of the design notes: sort the n live brokers;
partition i starts at broker ``i mod n`` and its replica j sits on broker ``(i + j) mod n``.
The first replica of each list is the *preferred* replica, the leader the controller aims for
(:mod:`controller.preferred_replica`), so preferred leadership is spread round-robin.

Kafka's own ``AdminUtils.assignReplicasToBrokersRackUnaware`` starts at a *random*
broker and shifts the followers by an offset that grows every n partitions, so the
followers of one broker's partitions are spread over several brokers. The notes' rule is
deterministic (reproducible placements for tests, chaos and the audit) at a price worth
knowing: the followers of broker b's preferred partitions are always b+1 .. b+RF-1, so
when b fails, every partition it led moves to the same broker b+1 (mod n).

Errors are Kafka's admin errors (``InvalidPartitionsException``,
``InvalidReplicationFactorException``, ``InvalidReplicaAssignmentException``) with their
wire codes, and are also ValueErrors, since they all mean "bad argument"::

    BrokerResponseError (proto.errors), ValueError
    ├── InvalidPartitionsError          INVALID_PARTITIONS
    ├── InvalidReplicationFactorError   INVALID_REPLICATION_FACTOR
    └── InvalidReplicaAssignmentError   INVALID_REPLICA_ASSIGNMENT
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from proto.errors import BrokerResponseError
from proto.wire.minibroker_pb2 import ErrorCode

__all__ = [
    "InvalidPartitionsError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "assign_new_partitions",
    "assign_replicas",
    "check_replica_list",
    "validate_replica_assignment",
]


class InvalidPartitionsError(BrokerResponseError, ValueError):
    """The partition count (or the set of partition ids) is unusable."""

    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(BrokerResponseError, ValueError):
    """The replication factor is < 1 or larger than the number of live brokers."""

    code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(BrokerResponseError, ValueError):
    """A replica list names a broker twice, an unknown broker, or differs in length."""

    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


def _ids(brokers: Iterable[int]) -> str:
    return ", ".join(str(b) for b in brokers)


def assign_replicas(
    num_partitions: int, replication_factor: int, live_brokers: Sequence[int]
) -> dict[int, list[int]]:
    """Partition -> replicas (preferred replica first) for a new topic.

    Replica j of partition i is ``brokers[(i + j) mod n]`` over the sorted, de-duplicated
    live brokers, so each partition gets ``replication_factor`` distinct brokers and every
    broker is the preferred replica of ``num_partitions // n`` or one more partitions.

    Raises InvalidPartitionsError for ``num_partitions < 1`` and
    InvalidReplicationFactorError for a factor < 1 or above the number of live brokers
    (Kafka refuses rather than under-replicating a topic from its first write).
    """
    if num_partitions < 1:
        raise InvalidPartitionsError(
            f"number of partitions must be larger than 0, got {num_partitions}"
        )
    if replication_factor < 1:
        raise InvalidReplicationFactorError(
            f"replication factor must be larger than 0, got {replication_factor}"
        )
    brokers = sorted(set(live_brokers))
    n = len(brokers)
    if replication_factor > n:
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} larger than available brokers {n}"
        )
    return {
        i: [brokers[(i + j) % n] for j in range(replication_factor)] for i in range(num_partitions)
    }


def assign_new_partitions(
    topic: str,
    existing: Mapping[int, Sequence[int]],
    total: int,
    live_brokers: Sequence[int],
    assignments: Sequence[Sequence[int]] | None = None,
) -> dict[int, list[int]]:
    """The replicas of the partitions added when ``topic`` grows to ``total`` partitions
    (Kafka's ``AdminZkClient.addPartitions``): partitions ``len(existing)`` .. ``total - 1``,
    each with as many replicas as partition 0 has, placed by :func:`assign_replicas`' rule
    continued from the existing partitions (partition i starts at broker ``i mod n``), so a
    topic grown to N partitions is placed as one created with N would have been.

    ``assignments``, if given, are the new partitions' replicas in partition order
    (CreatePartitions' ``assignments``, Kafka's ``ZkAdminManager.createPartitions``): one
    list per new partition, each as long as the topic's replication factor, of distinct
    live brokers.

    Raises InvalidPartitionsError when ``total`` is not above the current count (Kafka's
    message) or the existing partitions are not 0..n-1, InvalidReplicationFactorError when
    fewer brokers are live than the topic's replication factor, and
    InvalidReplicaAssignmentError for an unusable ``assignments``.
    """
    partitions = sorted(existing)
    if partitions != list(range(len(partitions))) or not partitions:
        raise InvalidPartitionsError(
            f"unexpected existing replica assignment for topic '{topic}': partitions "
            f"{_ids(partitions)} (partition ids 0..n-1 expected)"
        )
    if total <= len(partitions):
        raise InvalidPartitionsError(
            "The number of partitions for a topic can only be increased. "
            f"Topic {topic} currently has {len(partitions)} partitions, "
            f"{total} would not be an increase."
        )
    replication_factor = len(existing[0])
    if assignments is not None:
        return _given_new_partitions(existing, total, live_brokers, assignments)
    grown = assign_replicas(total, replication_factor, live_brokers)
    return {p: grown[p] for p in range(len(partitions), total)}


def _given_new_partitions(
    existing: Mapping[int, Sequence[int]],
    total: int,
    live_brokers: Sequence[int],
    assignments: Sequence[Sequence[int]],
) -> dict[int, list[int]]:
    live = set(live_brokers)
    unknown = sorted({r for replicas in assignments for r in replicas if r not in live})
    if unknown:
        raise InvalidReplicaAssignmentError(
            f"Unknown broker(s) in replica assignment: {_ids(unknown)}."
        )
    increment = total - len(existing)
    if len(assignments) != increment:
        raise InvalidReplicaAssignmentError(
            f"Increasing the number of partitions by {increment} but {len(assignments)} "
            "assignments provided."
        )
    replication_factor = len(existing[0])
    added: dict[int, list[int]] = {}
    for index, replicas in enumerate(assignments):
        partition = len(existing) + index
        check_replica_list(replicas, f"replica list of partition {partition}")
        if len(replicas) != replication_factor:
            raise InvalidReplicaAssignmentError(
                f"Inconsistent replication factor between partitions, partition 0 has "
                f"{replication_factor} while partition {partition} has {len(replicas)}."
            )
        added[partition] = list(replicas)
    return added


def check_replica_list(replicas: Sequence[int], what: str) -> None:
    """Raise InvalidReplicaAssignmentError unless ``replicas`` is a non-empty list of
    distinct, non-negative broker ids; ``what`` names the list in the message.

    The per-partition checks Kafka applies both at topic creation
    (``AdminZkClient.validateTopicCreate``) and to a reassignment target
    (``KafkaController.validateReplicas``): one partition has at most one replica per
    broker, because the broker id is the replica id.
    """
    if not replicas:
        raise InvalidReplicaAssignmentError(f"{what} is empty")
    duplicates = sorted({r for r in replicas if replicas.count(r) > 1})
    if duplicates:
        raise InvalidReplicaAssignmentError(
            f"{what} {list(replicas)} names broker(s) {_ids(duplicates)} more than once"
        )
    negative = [r for r in replicas if r < 0]
    if negative:
        raise InvalidReplicaAssignmentError(
            f"{what} {list(replicas)} has invalid broker id(s) {_ids(negative)}"
        )


def validate_replica_assignment(
    assignment: Mapping[int, Sequence[int]], live_brokers: Collection[int]
) -> dict[int, list[int]]:
    """Check a user-given assignment (``--replica-assignment``) and return it as
    partition -> replicas in partition order.

    Kafka's rules (``AdminZkClient.validateTopicCreate``): partitions are 0..n-1 with no
    gap (a gap would be a partition no one can produce to); every partition has the same
    number of replicas (the topic has one replication factor); no broker appears twice in
    a list; and here also every broker is live, since a replica on an unknown broker
    would start offline and make the topic under-replicated from birth.
    """
    if not assignment:
        raise InvalidPartitionsError("the replica assignment has no partitions")
    partitions = sorted(assignment)
    if partitions != list(range(len(partitions))):
        raise InvalidPartitionsError(
            f"partitions must be consecutive from 0, got {_ids(partitions)}"
        )
    sizes = {len(assignment[p]) for p in partitions}
    if len(sizes) > 1:
        by_partition = ", ".join(f"{p}: {len(assignment[p])}" for p in partitions)
        raise InvalidReplicaAssignmentError(
            f"all partitions must have the same number of replicas, got {by_partition}"
        )
    live = set(live_brokers)
    for p in partitions:
        replicas = assignment[p]
        check_replica_list(replicas, f"replica list of partition {p}")
        unknown = [r for r in replicas if r not in live]
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"replica list of partition {p} {list(replicas)} names broker(s) "
                f"{_ids(unknown)} that are not live (live brokers: {_ids(sorted(live))})"
            )
    return {p: list(assignment[p]) for p in partitions}
