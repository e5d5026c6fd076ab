"""An acks=all produce waiting in the purgatory for the ISR (Kafka's ``DelayedProduce``)."""

from __future__ import annotations

from dataclasses import dataclass

from broker.replication.partition import Partition
from broker.replication.purgatory import DelayedPartitionsOperation
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb


@dataclass
class ProducePartitionStatus:
    """One partition of a waiting produce request."""

    required_offset: int
    """The HW must reach this (the last appended offset + 1) for the write to be acked."""
    base_offset: int
    error_code: int | None = None
    """None while waiting; then NONE or the error the partition ended with."""


class DelayedProduce(DelayedPartitionsOperation[TopicPartition, ProducePartitionStatus, Partition]):
    """Completes when every partition's HW passed its ``required_offset`` or failed.

    A partition that is gone or no longer led by this broker fails with its error; one whose
    HW arrived while the ISR is below ``min.insync.replicas`` is answered
    NOT_ENOUGH_REPLICAS_AFTER_APPEND (written, but not as safe as acks=all promises). What
    is still waiting at the timeout gets REQUEST_TIMED_OUT: the records may or may not
    become committed, so a producer must treat that as unknown, not as failed.
    """

    def check_partition(self, partition: Partition, status: ProducePartitionStatus) -> None:
        status.error_code = partition.produce_status(status.required_offset)

    def on_complete(self) -> None:
        """Nothing to build: the handler reads :attr:`statuses`."""

    def on_expiration(self) -> None:
        for status in self.statuses.values():
            if status.error_code is None:
                status.error_code = pb.REQUEST_TIMED_OUT
