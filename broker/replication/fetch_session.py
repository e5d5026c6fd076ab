"""The leader's side of an incremental fetch session (KIP-227): one per FetchSession stream.

A follower fetches every partition it follows on a leader in one request, and while the
cluster is idle it does so twice a second (the long poll ends after
``replica.fetch.wait.max.ms``). A full fetch costs the leader a read, a long-poll watch and an
answer entry for every partition, and the follower the same again: at 10,000 partitions per
leader that had kept the brokers of an idle cluster half busy (docs/replication.md, "Many
partitions"). A session remembers the fetcher's partitions with their last fetch offsets and
what it last answered for each. A request names only what changed; the replica manager marks
the partitions that changed since (appends, high watermark, leadership), only those are read,
and the answer carries only what is new.

What this class holds is plain bookkeeping; :meth:`ReplicaManager.fetch_in_session` does the
reads. Everything runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.replication.partition import SessionClock
from proto.topic_partition import TopicPartition

if TYPE_CHECKING:
    from broker.replication.partition import Partition

__all__ = ["AnsweredState", "FetchSessionState", "FetchSpec"]

AnsweredState = tuple[int, int, int, int]
"""(high watermark, log start offset, log end offset, leader epoch) as last answered."""


@dataclass(frozen=True)
class FetchSpec:
    """One partition of a fetch request (and of a session, as last named)."""

    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int | None = None
    log_start_offset: int = -1
    read_committed: bool = False
    """isolation.level=read_committed: read up to the LSO, not the high watermark."""


class FetchSessionState:
    """One fetcher's partitions and its last answers, as the leader keeps them.

    ``specs`` are the partitions of the session with the spec last named for each.
    :meth:`partition_changed` is called by the replica manager for every change of a
    partition of the session; it marks the partition dirty (to be read at the next fetch) and
    ends the session's long poll once the dirty partitions hold ``min_bytes`` or one of them
    changed leadership. Like DelayedFetch, the bytes are an estimate without disk I/O: a wrong
    one only ends a long poll early or late.
    """

    def __init__(self, replica_id: int) -> None:
        self.replica_id = replica_id
        self.specs: dict[TopicPartition, FetchSpec] = {}
        self.started = False
        """False until the first request (the full one) has been answered."""
        self.last_full_read = 0.0
        """Loop time of the last fetch that read every partition of the session."""
        self.clock = SessionClock()
        """When the session last fetched: a follower's fetch state, for the partitions not
        read since (``ReplicaState.session_clock``)."""
        self._answered: dict[TopicPartition, AnsweredState] = {}
        self._watched: dict[TopicPartition, tuple[int, bool]] = {}
        """Per partition, (leader epoch, is leader) at its last read: a change ends the wait."""
        self._dirty: set[TopicPartition] = set()
        self._woken = asyncio.Event()
        self._armed = False
        self._min_bytes = 1
        self._pending_bytes = 0

    def __repr__(self) -> str:
        return f"FetchSessionState(replica={self.replica_id}, partitions={len(self.specs)})"

    # -- the fetcher's requests --------------------------------------------------------------

    def name(self, changed: Mapping[TopicPartition, FetchSpec]) -> list[TopicPartition]:
        """Apply a request's named partitions; returns those new to the session."""
        joined = [tp for tp in changed if tp not in self.specs]
        self.specs.update(changed)
        return joined

    def forget(self, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Drop partitions from the session; returns those it held."""
        left = []
        for tp in tps:
            if self.specs.pop(tp, None) is not None:
                left.append(tp)
                self._answered.pop(tp, None)
                self._watched.pop(tp, None)
                self._dirty.discard(tp)
        return left

    def take_dirty(self) -> set[TopicPartition]:
        """The partitions changed since the last call (those still in the session)."""
        dirty, self._dirty = self._dirty, set()
        return dirty

    def watch(self, tp: TopicPartition, partition: Partition | None) -> None:
        """Remember the partition's leadership as of its read (see :meth:`partition_changed`)."""
        if partition is None:
            self._watched.pop(tp, None)
        else:
            self._watched[tp] = (partition.leader_epoch, partition.is_leader)

    def needs_answer(self, tp: TopicPartition, state: AnsweredState) -> bool:
        """Whether ``state`` differs from the last answer for ``tp`` (then it becomes it)."""
        if self._answered.get(tp) == state:
            return False
        self._answered[tp] = state
        return True

    # -- changes of its partitions -----------------------------------------------------------

    def partition_changed(self, tp: TopicPartition, partition: Partition | None) -> None:
        if tp not in self.specs:
            return
        if partition is not None and self.replica_id >= 0:
            partition.settle_follower(self.replica_id)
        self._dirty.add(tp)
        if self._armed and not self._woken.is_set() and self._ends_wait(tp, partition):
            self._woken.set()

    def _ends_wait(self, tp: TopicPartition, partition: Partition | None) -> bool:
        if partition is None or partition.fenced:
            return True
        if self._watched.get(tp) != (partition.leader_epoch, partition.is_leader):
            return True
        spec = self.specs[tp]
        self._pending_bytes += partition.bytes_available(spec.fetch_offset, self.replica_id >= 0)
        return self._pending_bytes >= self._min_bytes

    async def wait(
        self,
        timeout_s: float,
        min_bytes: int,
        partitions: Mapping[TopicPartition, Partition | None],
    ) -> None:
        """The long poll: until the changed partitions hold ``min_bytes`` (or changed
        leadership) or ``timeout_s`` passed. ``partitions`` looks up the dirty ones already
        marked. Cancelling only abandons the wait."""
        self._min_bytes = max(1, min_bytes)
        self._pending_bytes = 0
        self._woken.clear()
        self._armed = True
        try:
            for tp in list(self._dirty):
                if self._ends_wait(tp, partitions.get(tp)):
                    return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._woken.wait()
        finally:
            self._armed = False
