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

TP = TopicPartition("t", 0)
LIVE = {1, 2, 3}


def judge(
    replicas: Sequence[int] | None,
    current: list[int] | None,
    ongoing: dict[TopicPartition, list[int]] | None = None,
) -> int:
    code, _ = PartitionAdminApis._judge_reassignment(TP, replicas, current, ongoing or {}, LIVE)
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


def test_cancelling_a_running_reassignment_is_refused_with_the_reason() -> None:
    code, message = PartitionAdminApis._judge_reassignment(TP, None, [2, 3, 1], {TP: [2, 3]}, LIVE)
    assert code == pb.INVALID_REQUEST
    assert message is not None
    assert "original replicas are not kept" in message


def test_a_finished_reassignment_still_in_the_znode_is_not_in_progress() -> None:
    """The znode keeps finished partitions until the last one is done."""
    assert judge(None, [2, 3], {TP: [2, 3]}) == NO_REASSIGNMENT_IN_PROGRESS
