"""Opening a partition's log directory and recovering it after a crash (Kafka's
``LogLoader``).

:func:`load_log` is what :meth:`broker.log.log.Log.open` runs before it builds the
``Log``: stray files removed, segments opened, the unflushed tail recovered batch by batch,
the epoch cache reconciled with what the recovered batches carry. See ``Log.open`` for the
rules.
"""

from __future__ import annotations

import logging
import re
from bisect import bisect_right
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from broker.log.checkpoints import fsync_directory
from broker.log.epoch_entry import EpochEntry
from broker.log.leader_epoch_cache import CheckpointError, LeaderEpochFileCache
from broker.log.log_segment import INDEX_SUFFIX, LOG_SUFFIX, TXN_INDEX_SUFFIX, LogSegment
from broker.log.segment_files import SegmentFilePool
from broker.log.segment_swap import recover_swaps
from proto.config.log_config import LogConfig
from proto.records.record_batch import CorruptRecordError
from proto.topic_partition import TopicPartition

__all__ = [
    "LEADER_EPOCH_CHECKPOINT_FILE",
    "STRAY_SUFFIXES",
    "LoadedLog",
    "create_segment",
    "load_log",
]

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
STRAY_SUFFIXES = (".tmp", ".deleted", ".cleaned", ".swap")
"""Leftovers of interrupted writes, deleted on load (Kafka's cleaned and deleted files).
A cleaner's committed swap is finished first (:func:`broker.log.segment_swap.recover_swaps`),
so none of its files is left to delete here."""

_SEGMENT_FILE = re.compile(r"(\d{20})(\.log|\.index|\.txnindex)")


class LoadedLog(NamedTuple):
    """What loading a log directory found (Kafka's ``LoadedLogOffsets`` and segments)."""

    topic_partition: TopicPartition
    segments: list[LogSegment]
    """Contiguous, recovered where needed, never empty."""
    epoch_cache: LeaderEpochFileCache
    log_start_offset: int
    directory_synced: bool
    """False for a directory this load created: its new files' entries are not yet durable
    (the log's first flush fsyncs the directory before it moves the recovery point)."""
    recovered_from: int | None = None
    """The base offset of the first segment recovery read (None: none was): what lies
    from there on may have lost transaction index entries with the page cache, so the
    producer state's replay must start at or below it."""


def load_log(
    directory: Path,
    config: LogConfig,
    *,
    recovery_point: int,
    log_start_offset: int,
    clean_shutdown: bool,
    files: SegmentFilePool | None = None,
) -> LoadedLog:
    """Load and recover the log in ``directory`` (created if missing), its segment files
    drawn from ``files``; see :meth:`broker.log.log.Log.open`. Never raises on corrupt data,
    only on I/O errors (OSError), and ValueError when the directory name is not
    ``<topic>-<partition>``."""
    topic_partition = TopicPartition.from_dir_name(directory.name)
    # A directory made here holds nothing to recover or lose, so its fsync waits for the
    # log's first flush: one fsync per new partition was most of the cost of creating
    # thousands of them (a LeaderAndIsr for a new topic, docs/storage.md).
    fresh = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    recover_swaps(directory)
    _remove_stray_files(directory)
    epoch_cache, cache_lost = _open_epoch_cache(directory / LEADER_EPOCH_CHECKPOINT_FILE)
    segments: list[LogSegment] = []
    try:
        for base in _segment_base_offsets(directory):
            segments.append(
                LogSegment.open(
                    directory, base, index_interval_bytes=config.index_interval_bytes, files=files
                )
            )
        segments, recovered_from, epoch_starts = _recover(
            segments,
            start=_recovery_start(segments, recovery_point, clean_shutdown, cache_lost),
        )
        if not segments:
            segments = [create_segment(directory, config, log_start_offset, files)]
        elif segments[-1].next_offset < log_start_offset:
            # As Kafka's recoverLog: segment files were deleted from the file system
            # under the checkpointed log start offset; start over there.
            log.warning(
                "%s: log end offset %d is below the log start offset %d; deleting all segments",
                directory,
                segments[-1].next_offset,
                log_start_offset,
            )
            for segment in segments:
                segment.delete()
            segments = [create_segment(directory, config, log_start_offset, files)]
            recovered_from, epoch_starts = None, []
            epoch_cache.clear_and_flush()
        log_end_offset = segments[-1].next_offset
        start = max(log_start_offset, segments[0].base_offset)
        if recovered_from is not None:
            _reconcile_epochs(epoch_cache, recovered_from, log_end_offset, epoch_starts)
            # The recovery point becomes the LEO: make that true even if the OS crashes
            # before writing back what the crashed process left in the page cache.
            for segment in segments:
                if segment.base_offset >= recovered_from:
                    segment.flush()
        if not fresh:
            fsync_directory(directory)
        epoch_cache.truncate_from_end(log_end_offset)
        epoch_cache.truncate_from_start(start)
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    return LoadedLog(
        topic_partition,
        segments,
        epoch_cache,
        start,
        directory_synced=not fresh,
        recovered_from=recovered_from,
    )


def create_segment(
    directory: Path, config: LogConfig, base_offset: int, files: SegmentFilePool | None = None
) -> LogSegment:
    """A new, empty segment file (and index) starting at ``base_offset``."""
    return LogSegment.create(
        directory, base_offset, index_interval_bytes=config.index_interval_bytes, files=files
    )


def _remove_stray_files(directory: Path) -> None:
    """Delete leftovers of interrupted writes, and indexes whose log file is gone."""
    names = {entry.name for entry in directory.iterdir() if entry.is_file()}
    for name in names:
        match = _SEGMENT_FILE.fullmatch(name)
        orphan = (
            match is not None
            and match.group(2) in (INDEX_SUFFIX, TXN_INDEX_SUFFIX)
            and match.group(1) + LOG_SUFFIX not in names
        )
        if orphan or name.endswith(STRAY_SUFFIXES):
            log.warning("%s: removing stray file %s", directory, name)
            (directory / name).unlink(missing_ok=True)


def _segment_base_offsets(directory: Path) -> list[int]:
    bases = []
    for entry in directory.iterdir():
        match = _SEGMENT_FILE.fullmatch(entry.name)
        if match is not None and match.group(2) == LOG_SUFFIX and entry.is_file():
            bases.append(int(match.group(1)))
    return sorted(bases)


def _open_epoch_cache(path: Path) -> tuple[LeaderEpochFileCache, bool]:
    """The epoch cache, and whether its checkpoint was unreadable (and so discarded)."""
    try:
        return LeaderEpochFileCache(path), False
    except CheckpointError as e:
        log.warning("discarding %s, to be rebuilt from the log: %s", path, e)
        path.unlink(missing_ok=True)
        return LeaderEpochFileCache(path), True


def _recovery_start(
    segments: Sequence[LogSegment], recovery_point: int, clean_shutdown: bool, cache_lost: bool
) -> int:
    """Index of the first segment to recover (len(segments) for none)."""
    if cache_lost:
        return 0
    if clean_shutdown:
        start = len(segments)
    else:
        bases = [segment.base_offset for segment in segments]
        start = max(bisect_right(bases, recovery_point) - 1, 0)
    for i, segment in enumerate(segments[:start]):
        if not segment.index_valid:
            return i  # recovering from there keeps the recovered range contiguous
    return start


def _recover(
    segments: list[LogSegment], *, start: int
) -> tuple[list[LogSegment], int | None, list[tuple[int, int]]]:
    """Recover ``segments[start:]``; return the kept segments, the base offset where
    recovery began (None if nothing was recovered) and the recovered epoch changes.

    The segments before ``start`` are trusted as Kafka trusts them; only the last batch of
    the last one is read, for the offset and epoch the recovered part must continue.
    """
    previous_epoch: int | None = None
    expected_base: int | None = None
    while start > 0:
        try:
            last = segments[start - 1].last_batch()
        except CorruptRecordError as e:
            log.warning("%s: recovering it too: %s", segments[start - 1].log_path, e)
            start -= 1
            continue
        if last is None:
            expected_base = segments[start - 1].base_offset
        else:
            previous_epoch = last[1].partition_leader_epoch
            expected_base = last[1].next_offset
        if start == len(segments):
            segments[-1].load_next_offset()
        break
    kept = segments[:start]
    epoch_starts: list[tuple[int, int]] = []
    recovered_from = segments[start].base_offset if start < len(segments) else None
    for i in range(start, len(segments)):
        segment = segments[i]
        if expected_base is not None and segment.base_offset != expected_base:
            log.warning(
                "%s: segment starts at %d but the log before it ends at %d; deleting it and "
                "the %d segments after it",
                segment.log_path,
                segment.base_offset,
                expected_base,
                len(segments) - i - 1,
            )
            for doomed in segments[i:]:
                doomed.delete()
            break
        result = segment.recover(previous_epoch=previous_epoch)
        kept.append(segment)
        epoch_starts.extend(result.epoch_starts)
        previous_epoch = result.last_epoch
        expected_base = result.next_offset
        if result.truncated_bytes and i + 1 < len(segments):
            log.warning(
                "%s: deleting the %d segments after the truncated one",
                segment.log_path,
                len(segments) - i - 1,
            )
            for doomed in segments[i + 1 :]:
                doomed.delete()
            break
    return kept, recovered_from, epoch_starts


def _reconcile_epochs(
    cache: LeaderEpochFileCache,
    recovered_from: int,
    log_end_offset: int,
    epoch_starts: Sequence[tuple[int, int]],
) -> None:
    """Make the cache's entries in ``[recovered_from, LEO)`` the epoch changes of the
    recovered batches, keeping the entries below (which cover unrecovered segments).

    Writes nothing when the checkpoint already agrees, the normal case.
    """
    entries = cache.entries()
    below = [entry for entry in entries if entry.start_offset < recovered_from]
    current = below[-1].epoch if below else None
    wanted = []
    for epoch, offset in epoch_starts:
        if epoch >= 0 and epoch != current:
            wanted.append(EpochEntry(epoch, offset))
            current = epoch
    held = [entry for entry in entries if recovered_from <= entry.start_offset < log_end_offset]
    if held == wanted:
        return
    log.warning(
        "leader epoch cache %s disagrees with the recovered log: %s instead of %s",
        cache.checkpoint_path,
        held,
        wanted,
    )
    cache.truncate_from_end(recovered_from)
    for entry in wanted:
        cache.assign(entry.epoch, entry.start_offset)
