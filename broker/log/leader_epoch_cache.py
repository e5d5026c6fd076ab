"""The leader epoch cache: which leader epoch wrote which offsets of a partition's log.

Kafka's ``LeaderEpochFileCache`` (KIP-101, with the KIP-279 and KAFKA-7415 changes of 2.1):
an ordered list of ``EpochEntry(epoch, start_offset)``, where ``start_offset`` is the first
offset written in that epoch. Epochs and start offsets both increase strictly along the list.
Entry ``i`` covers the offsets ``[entries[i].start_offset, entries[i + 1].start_offset)``; the
latest entry covers everything from its start offset to the log end offset.

A follower truncating after a leader change asks the leader ``end_offset_for(its latest
epoch)`` (OffsetsForLeaderEpoch) instead of trusting its high watermark; that is what keeps
acknowledged records from being lost and replicas from diverging (KAFKA-1211).

Every change is persisted at once by rewriting ``leader-epoch-checkpoint`` atomically (with
fsync, as Kafka 2.x and again since KAFKA-16541). The in-memory entries always equal the last
file written: a change whose write fails is not applied, and the OSError propagates so the
caller can take the log dir offline as Kafka does.
"""

from __future__ import annotations

import bisect
import logging
import threading
from pathlib import Path

from broker.log.checkpoints import CheckpointError, LeaderEpochCheckpointFile
from broker.log.epoch_entry import EpochEntry

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "CheckpointError",  # re-exported: what the constructor raises for a corrupt file
    "EpochEntry",  # re-exported: the entries it holds
    "LeaderEpochFileCache",
]

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
"""No epoch: asked by a follower without a cache, or answered when no epoch fits."""
UNDEFINED_EPOCH_OFFSET = -1
"""No end offset: the follower then falls back to its high watermark."""


class LeaderEpochFileCache:
    """The epoch cache of one partition replica, backed by its ``leader-epoch-checkpoint``.

    Thread-safe: every method holds one re-entrant lock, because the Log calls it both from
    the event loop thread and from the executor thread that does its disk I/O. Methods that
    change the cache write the checkpoint (fsync included) while holding the lock.
    """

    def __init__(self, checkpoint_path: Path) -> None:
        """Load the checkpoint if it exists; nothing is created until the first change.

        Entries are loaded the way Kafka loads them, by re-assigning each in file order, so a
        file that breaks the ordering rules is repaired in memory (and logged), not rejected.
        Raises CheckpointError when the file cannot be parsed; whether that takes the log dir
        offline (Kafka's choice) or rebuilds the cache from the log is the Log's decision.
        """
        self._checkpoint = LeaderEpochCheckpointFile(checkpoint_path)
        self._lock = threading.RLock()
        self._entries: list[EpochEntry] = []
        loaded = self._checkpoint.read()
        for entry in loaded:
            if self._needs_update(entry):
                self._entries = self._assigned(self._entries, entry)
        if self._entries != loaded:
            log.warning(
                "%s held non-monotonic entries %s; using %s", checkpoint_path, loaded, self._entries
            )

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({str(self.checkpoint_path)!r}, {self.entries()})"

    @property
    def checkpoint_path(self) -> Path:
        """The ``leader-epoch-checkpoint`` file behind this cache."""
        return self._checkpoint.path

    # -- changes ---------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (Kafka >= 2.1 semantics).

        Called for every appended batch (leader or follower) with its partition leader epoch
        and base offset, and by a new leader with (its epoch, its LEO) the moment it takes
        over (KAFKA-7415: then a follower holding a newer epoch than the leader's log can
        still find its truncation point).

        A batch of the latest epoch at or after its start offset is the common case and
        changes nothing, without any file write. Otherwise every tail entry whose epoch or
        start offset is >= the new one is dropped before the new entry is appended, so both
        sequences stay strictly increasing (``5@11, 6@12, 7@13`` + ``7@12`` -> ``5@11,
        7@12``). Before 2.1 Kafka ignored such assignments instead, leaving stale entries
        that misdirected truncation.

        Raises ValueError for a negative epoch or offset; OSError if the checkpoint write
        fails (the cache is then unchanged).
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {epoch}@{start_offset}")
        entry = EpochEntry(epoch, start_offset)
        with self._lock:
            if not self._needs_update(entry):
                return
            new = self._assigned(self._entries, entry)
            removed = self._entries[len(new) - 1 :]
            # Kafka warns only when the removal was more than "the same start offset under a
            # new epoch": several entries, or one that started elsewhere.
            if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
                log.warning(
                    "%s: assigning %s removed non-monotonic entries %s",
                    self.checkpoint_path,
                    entry,
                    removed,
                )
            self._flush(new)

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop the entries starting at or after ``end_offset`` (the log was truncated to it).

        Called by log truncation (a follower cutting its divergent tail) and after log
        recovery with the recovered LEO. A negative offset or one past the latest entry's
        start changes nothing.
        """
        with self._lock:
            if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
                return
            new = [e for e in self._entries if e.start_offset < end_offset]
            log.info(
                "%s: truncated from end at %d, removed %s",
                self.checkpoint_path,
                end_offset,
                self._entries[len(new) :],
            )
            self._flush(new)

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget offsets below ``start_offset`` (retention raised the log start offset).

        The entries starting at or before ``start_offset`` are removed and the last of them is
        put back starting at ``start_offset``, because its epoch still covers the offsets from
        there to the next entry (``0@0, 1@5, 2@10`` from 7 -> ``1@7, 2@10``). An entry starting
        exactly at ``start_offset`` therefore stays as it is. Kafka rewrites the file whenever
        it removed an entry; this writes only when the entries actually changed.
        """
        with self._lock:
            split = bisect.bisect_right(self._entries, start_offset, key=_start_offset)
            if split == 0:
                return
            first = EpochEntry(self._entries[split - 1].epoch, start_offset)
            new = [first, *self._entries[split:]]
            if new == self._entries:
                return
            log.info(
                "%s: truncated from start at %d, removed %s",
                self.checkpoint_path,
                start_offset,
                self._entries[:split],
            )
            self._flush(new)

    def clear_and_flush(self) -> None:
        """Remove every entry and write the empty checkpoint.

        Used when the log is truncated fully and restarted at a new offset
        (``truncateFullyAndStartAt``): no epoch is known for an empty log.
        """
        with self._lock:
            self._flush([])

    # -- queries ---------------------------------------------------------------------------

    def entries(self) -> list[EpochEntry]:
        """A copy of the entries, in increasing epoch (and start offset) order."""
        with self._lock:
            return list(self._entries)

    def latest_entry(self) -> EpochEntry | None:
        """The entry with the highest epoch, or None when the cache is empty."""
        with self._lock:
            return self._entries[-1] if self._entries else None

    def latest_epoch(self) -> int | None:
        """The highest cached epoch (what a follower asks its leader about), or None."""
        latest = self.latest_entry()
        return None if latest is None else latest.epoch

    def earliest_entry(self) -> EpochEntry | None:
        """The entry with the lowest epoch, or None when the cache is empty."""
        with self._lock:
            return self._entries[0] if self._entries else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's ``endOffsetFor``: (the largest epoch <= requested, that epoch's end offset).

        The leader's answer to OffsetsForLeaderEpoch (KIP-279). The end offset of an epoch is
        the start offset of the next higher cached epoch, or ``log_end_offset`` for the latest
        one. Exactly as Kafka 2.1+ code (the KIP-279 loop on the follower relies on it):

        - ``UNDEFINED_EPOCH`` asked: ``(-1, -1)`` (KAFKA-6857; a follower without epochs).
        - the latest cached epoch: ``(requested, log_end_offset)``.
        - above every cached epoch, or an empty cache: ``(-1, -1)``; the follower then falls
          back to its high watermark.
        - below the first cached epoch: ``(requested, first.start_offset)``. Retention removed
          that epoch's data; the follower keeps nothing past where the leader's known history
          starts. (Kafka's doc comment still says "undefined" here, its code does this.)
        - otherwise ``(floor.epoch, higher.start_offset)``, where floor is the largest cached
          epoch <= requested and higher the smallest > requested; an uncached epoch between
          two cached ones is answered for the one below it.
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if self._entries and self._entries[-1].epoch == requested_epoch:
                return requested_epoch, log_end_offset
            higher = bisect.bisect_right(self._entries, requested_epoch, key=_epoch)
            if higher == len(self._entries):
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            higher_entry = self._entries[higher]
            if higher == 0:
                return requested_epoch, higher_entry.start_offset
            return self._entries[higher - 1].epoch, higher_entry.start_offset

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch of the entry whose range holds ``offset``, or None below the first entry.

        The latest entry's range is open-ended: the cache does not know the log end offset,
        so checking ``offset < LEO`` is the caller's job.
        """
        with self._lock:
            index = bisect.bisect_right(self._entries, offset, key=_start_offset)
            return self._entries[index - 1].epoch if index else None

    # -- internals -------------------------------------------------------------------------

    def _needs_update(self, entry: EpochEntry) -> bool:
        """False for the common case: the latest epoch again, at or after its start."""
        if not self._entries:
            return True
        latest = self._entries[-1]
        return entry.epoch != latest.epoch or entry.start_offset < latest.start_offset

    @staticmethod
    def _assigned(entries: list[EpochEntry], entry: EpochEntry) -> list[EpochEntry]:
        """``entries`` with the non-monotonic tail removed and ``entry`` appended."""
        keep = len(entries)
        while keep and (
            entries[keep - 1].epoch >= entry.epoch
            or entries[keep - 1].start_offset >= entry.start_offset
        ):
            keep -= 1
        return [*entries[:keep], entry]

    def _flush(self, new: list[EpochEntry]) -> None:
        """Write ``new`` to the checkpoint, then make it the cache's content."""
        self._checkpoint.write(new)
        self._entries = new


def _epoch(entry: EpochEntry) -> int:
    return entry.epoch


def _start_offset(entry: EpochEntry) -> int:
    return entry.start_offset
