"""A DeleteRecords waiting for the replicas to follow (Kafka's ``DelayedDeleteRecords``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from broker.replication.partition import Partition
from broker.replication.purgatory import DelayedPartitionsOperation
from proto import errors
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb

INVALID_LOW_WATERMARK = -1
"""Kafka's ``DeleteRecordsResponse.INVALID_LOW_WATERMARK``: the answer of a failed partition."""


@dataclass
class DeleteRecordsPartitionStatus:
    """One partition of a DeleteRecords request."""

    required_offset: int
    """The log start offset the leader moved to: the low watermark must reach it."""
    low_watermark: int = INVALID_LOW_WATERMARK
    error_code: int | None = None
    """None while waiting; then NONE or the error the partition ended with."""
    error_message: str = ""


class DelayedDeleteRecords(
    DelayedPartitionsOperation[TopicPartition, DeleteRecordsPartitionStatus, Partition]
):
    """Completes when every partition's low watermark (the smallest log start offset over
    the leader and its replicas on live brokers) reached the offset asked for, or failed.

    A partition no longer hosted is UNKNOWN_TOPIC_OR_PARTITION, one no longer led here
    NOT_LEADER_OR_FOLLOWER. At the timeout what still waits is REQUEST_TIMED_OUT with the
    low watermark reached so far; the leader's records are deleted all the same, and the
    followers catch up with their next fetches.
    """

    def __init__(
        self,
        timeout_ms: int,
        statuses: dict[TopicPartition, DeleteRecordsPartitionStatus],
        get_partition: Callable[[TopicPartition], Partition | None],
        is_alive: Callable[[int], bool],
    ) -> None:
        super().__init__(timeout_ms, statuses, get_partition)
        self._is_alive = is_alive

    def partition_gone(self, status: DeleteRecordsPartitionStatus) -> None:
        super().partition_gone(status)
        status.low_watermark = INVALID_LOW_WATERMARK

    def check_partition(self, partition: Partition, status: DeleteRecordsPartitionStatus) -> None:
        try:
            low = partition.low_watermark_if_leader(self._is_alive)
        except errors.NotLeaderOrFollowerError as err:
            status.error_code = err.code
            status.error_message = str(err)
            status.low_watermark = INVALID_LOW_WATERMARK
            return
        status.low_watermark = low
        if low >= status.required_offset:
            status.error_code = pb.NONE

    def on_complete(self) -> None:
        """Nothing to build: the caller reads :attr:`statuses`."""

    def on_expiration(self) -> None:
        for tp, status in self.statuses.items():
            if status.error_code is None:
                status.error_code = pb.REQUEST_TIMED_OUT
                status.error_message = (
                    f"{tp}: the replicas did not reach log start offset "
                    f"{status.required_offset} in {self.timeout_ms} ms "
                    f"(low watermark {status.low_watermark})"
                )
