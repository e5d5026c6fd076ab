"""The Kafka listener's judgement of an AlterPartitionReassignments entry, in the order of
Kafka's ``KafkaController.processApiPartitionReassignment``: the replica list first, then
whether there is a reassignment to cancel, then whether the partition exists."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from broker.kafka_listener.partition_admin_apis import (
    NO_REASSIGNMENT_IN_PROGRESS,
    PartitionAdminApis,
)
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.zk.znodes import ReplicaAssignment

TP = TopicPartition("t", 0)
LIVE = {1, 2, 3}


def judge(replicas: Sequence[int] | None, current: list[int] | ReplicaAssignment | None) -> int:
    full = ReplicaAssignment(tuple(current)) if isinstance(current, list) else current
    code, _ = PartitionAdminApis._judge_reassignment(TP, replicas, full, LIVE)
    return code


@pytest.mark.parametrize(
    ("replicas", "current", "expected"),
    [
        ([2, 3], [1, 2], pb.NONE),
        ([1, 2], [1, 2], pb.NONE),  # already there: the controller finishes at once
        ([], [1, 2], pb.INVALID_REPLICA_ASSIGNMENT),
        ([2, 2], [1, 2], pb.INVALID_REPLICA_ASSIGNMENT),
        ([-1], [1, 2], pb.INVALID_REPLICA_ASSIGNMENT),
        ([1, 9], [1, 2], pb.INVALID_REPLICA_ASSIGNMENT),  # adds a broker that is not live
        ([1], None, pb.UNKNOWN_TOPIC_OR_PARTITION),
        ([], None, pb.INVALID_REPLICA_ASSIGNMENT),  # the list is checked first, as in Kafka
        (None, None, NO_REASSIGNMENT_IN_PROGRESS),
        (None, [1, 2], NO_REASSIGNMENT_IN_PROGRESS),
    ],
)
def test_each_partition_gets_kafkas_error(
    replicas: list[int] | None, current: list[int] | None, expected: int
) -> None:
    assert judge(replicas, current) == expected


def test_a_replica_already_assigned_may_be_down() -> None:
    """Only the replicas a reassignment adds must be live (``validateReplicas``)."""
    assert judge([4, 1], [4, 2]) == pb.NONE  # broker 4 is down but already a replica
    assert judge([5, 1], [4, 2]) == pb.INVALID_REPLICA_ASSIGNMENT  # 5 would be added


def test_a_running_reassignment_can_be_cancelled() -> None:
    """The topic znode's adding/removing replicas say a reassignment runs."""
    running = ReplicaAssignment((2, 3, 1), adding_replicas=(), removing_replicas=(1,))
    assert judge(None, running) == pb.NONE
    assert judge(None, ReplicaAssignment((2, 3))) == NO_REASSIGNMENT_IN_PROGRESS


def test_a_new_target_counts_added_replicas_from_the_original_ones() -> None:
    """Replacing [1, 2] -> [1, 4] (4 since died): 4 would be added again, so it must be
    live, as Kafka's ``validateReplicas`` judges ``reassignTo(target).addingReplicas``."""
    running = ReplicaAssignment((1, 4, 2), adding_replicas=(4,), removing_replicas=(2,))
    assert judge([1, 4, 3], running) == pb.INVALID_REPLICA_ASSIGNMENT
    assert judge([1, 3], running) == pb.NONE
