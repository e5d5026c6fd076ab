"""A fetch long-polling for ``min_bytes`` (Kafka's ``DelayedFetch``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from broker.replication.partition import Partition
from broker.replication.purgatory import DelayedOperation
from proto.topic_partition import TopicPartition


@dataclass(frozen=True)
class FetchPartitionStatus:
    """One partition of a waiting fetch, as it was when the fetch started waiting."""

    fetch_offset: int
    leader_epoch: int
    """The partition's leader epoch then: a change completes the fetch at once."""
    was_leader: bool
    read_committed: bool = False


class DelayedFetch(DelayedOperation):
    """Completes when ``min_bytes`` can be read, or leadership of a partition changed.

    The availability check is an estimate without disk I/O (see
    :meth:`Partition.bytes_available`); the handler reads for real once completed, so a
    wrong estimate only ends a long poll early or late, never returns wrong data.
    """

    def __init__(
        self,
        timeout_ms: int,
        min_bytes: int,
        is_follower_fetch: bool,
        statuses: dict[TopicPartition, FetchPartitionStatus],
        get_partition: Callable[[TopicPartition], Partition | None],
    ) -> None:
        super().__init__(timeout_ms)
        self.min_bytes = min_bytes
        self.is_follower_fetch = is_follower_fetch
        self.statuses = statuses
        self._get_partition = get_partition

    def try_complete(self) -> bool:
        accumulated = 0
        for tp, status in self.statuses.items():
            partition = self._get_partition(tp)
            if (
                partition is None
                or partition.leader_epoch != status.leader_epoch
                or partition.is_leader != status.was_leader
                or partition.fenced
            ):
                return self.force_complete()
            end = partition.fetch_end_offset(self.is_follower_fetch)
            if status.fetch_offset > end or status.fetch_offset < partition.log.log_start_offset:
                return self.force_complete()  # out of range now: answer with the error
            accumulated += partition.bytes_available(
                status.fetch_offset, self.is_follower_fetch, status.read_committed
            )
            if accumulated >= self.min_bytes:
                return self.force_complete()
        return False

    def on_complete(self) -> None:
        """Nothing to build: the handler reads the partitions after completion."""
