"""Cleaning one compacted log (Kafka's ``Cleaner.clean`` / ``doClean``).

:func:`clean_log` runs on the cleaner's own thread, never the event loop: it reads the
segments below the first uncleanable offset (the active segment, the high watermark and
``min.compaction.lag.ms`` bound it, and the first unstable offset: an open transaction's
outcome is not known yet), maps the dirty section's keys
(:func:`broker.log.compaction.build_offset_map`), then rewrites the segments from the
log's start in groups that fit ``segment.bytes``, each group into one cleaned segment
(:mod:`broker.log.segment_swap`), and swaps each in under the log's lock
(:meth:`broker.log.log.Log.replace_segments`), which takes milliseconds: the reading,
decoding and writing happen outside it. A truncation or another swap meanwhile makes the
swap give up; the next cleaning starts over.

Tombstones go once their segment is older than ``delete.retention.ms`` before the
horizon: the modification time of the last segment the previous cleanings had cleaned
(Kafka 2.8's rule; a log cleaned for the first time keeps them all).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from broker.log.compaction import (
    CleanedTransactions,
    CleanStats,
    OffsetMap,
    build_offset_map,
    clean_batches,
)
from broker.log.log import Log
from broker.log.log_segment import LogSegment
from broker.log.segment_swap import write_cleaned_segment, write_cleaned_txn_index
from proto.records.record_batch import BatchHeader
from proto.topic_partition import TopicPartition

__all__ = ["CleanResult", "clean_log", "cleanable_range", "dirty_ratio"]

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1
READ_CHUNK = 4 * 1024 * 1024
"""Bytes of a segment the cleaner reads at a time (Kafka's ``log.cleaner.io.buffer.size``
plays this part there)."""


@dataclass
class CleanResult:
    """What :func:`clean_log` did."""

    topic_partition: TopicPartition
    first_dirty: int
    end_offset: int
    """Where the next cleaning's dirty section starts (the cleaner offset checkpoint)."""
    segments_cleaned: int
    groups_swapped: int
    groups_abandoned: int
    stats: CleanStats


def cleanable_range(
    segments: Sequence[LogSegment], limit_offset: int, now_ms: int, min_lag_ms: int
) -> int:
    """The first uncleanable offset: the active segment's base, the high watermark
    (``limit_offset``), or the base of the first segment with a record newer than
    ``min.compaction.lag.ms``, whichever is lowest."""
    first = min(segments[-1].base_offset, limit_offset)
    if min_lag_ms > 0:
        for segment in segments[:-1]:
            if now_ms - segment.max_timestamp() < min_lag_ms:
                first = min(first, segment.base_offset)
                break
    return first


def dirty_ratio(segments: Sequence[LogSegment], first_dirty: int, first_uncleanable: int) -> float:
    """The share of the cleanable bytes (segments below ``first_uncleanable``) that lies at or
    above ``first_dirty``, by whole segments, as Kafka's ``LogToClean.cleanableRatio``."""
    clean = dirty = 0
    for i, segment in enumerate(segments[:-1]):
        upper = segments[i + 1].base_offset
        if upper > first_uncleanable:
            break
        if upper <= first_dirty:
            clean += segment.size
        else:
            dirty += segment.size
    total = clean + dirty
    return dirty / total if total else 0.0


def clean_log(
    target: Log,
    *,
    first_dirty: int,
    limit_offset: int,
    now_ms: int,
    capacity: int,
    throttle: Callable[[int], None] = lambda _: None,
) -> CleanResult | None:
    """Clean ``target`` once (see the module docstring); None when it has nothing to clean.

    ``first_dirty``: where the last cleaning ended (0 for a log never cleaned);
    ``limit_offset``: the high watermark; ``capacity``: the offset map's keys;
    ``throttle(n)``: called with the bytes read and written, to hold the cleaner to
    ``log.cleaner.io.max.bytes.per.second``."""
    config = target.config
    segments, log_start, generation = target.cleaning_view()
    first_dirty = max(first_dirty, log_start)
    unstable = target.first_unstable_offset  # an open transaction's outcome is not known
    if unstable is not None:
        limit_offset = min(limit_offset, unstable)
    first_uncleanable = cleanable_range(
        segments, limit_offset, now_ms, config.min_compaction_lag_ms
    )
    if first_dirty >= first_uncleanable:
        return None
    cleanable = [
        s for i, s in enumerate(segments[:-1]) if segments[i + 1].base_offset <= first_uncleanable
    ]
    dirty = [s for s in cleanable if s.next_offset > first_dirty]
    aborted = [txn for s in segments for txn in s.txn_index.entries()]
    offset_map, end = build_offset_map(
        _batches(dirty, throttle),
        first_dirty,
        first_uncleanable,
        capacity,
        CleanedTransactions([t for t in aborted if t.last_offset >= first_dirty]),
    )
    if end <= first_dirty:
        log.warning(
            "%s: the cleaner's offset map (%d keys) cannot hold one batch at offset %d: "
            "raise log.cleaner.dedupe.buffer.size",
            target.topic_partition,
            capacity,
            first_dirty,
        )
        return None
    horizon = _tombstone_horizon(cleanable, first_dirty, config.delete_retention_ms)
    producers = target.producer_last_offsets()
    stats = CleanStats()
    transactions = CleanedTransactions(aborted)
    to_clean = [s for s in cleanable if s.base_offset < end]
    swapped = abandoned = 0
    for group in _groups(to_clean, config.segment_bytes):
        modified = max(s.last_modified_ms for s in group)
        retain = [s.last_modified_ms > horizon for s in group]
        cleaned = write_cleaned_segment(
            target.directory,
            group[0].base_offset,
            _cleaned(group, retain, offset_map, producers, stats, transactions, throttle),
            index_interval_bytes=config.index_interval_bytes,
            modified_ms=modified,
        )
        # the aborts whose markers the group kept: its cleaned transaction index
        write_cleaned_txn_index(
            target.directory,
            cleaned.base_offset,
            [
                t
                for t in transactions.kept_aborts
                if cleaned.base_offset <= t.last_offset < cleaned.next_offset
            ],
        )
        if target.replace_segments(group, cleaned, generation):
            swapped += 1
            generation += 1
        else:
            abandoned += 1
            break
    log.debug(
        "%s: cleaned offsets %d..%d: %d segments in %d groups (%d abandoned), records %d -> "
        "%d, %d tombstones removed, %d aborted records and %d markers removed, bytes %d -> %d",
        target.topic_partition,
        log_start,
        end,
        len(to_clean),
        swapped,
        abandoned,
        stats.records_read,
        stats.records_kept,
        stats.tombstones_removed,
        stats.aborted_removed,
        stats.markers_removed,
        stats.bytes_read,
        stats.bytes_written,
    )
    # A group abandoned (the log moved on under it) leaves its records unmatched against the
    # map: the next cleaning maps the same dirty section again.
    return CleanResult(
        target.topic_partition,
        first_dirty,
        first_dirty if abandoned else end,
        len(to_clean),
        swapped,
        abandoned,
        stats,
    )


def _batches(
    segments: Sequence[LogSegment], throttle: Callable[[int], None]
) -> Iterator[tuple[BatchHeader, bytes]]:
    """Every batch of the segments, with its bytes, read READ_CHUNK bytes at a time (or one
    larger batch whole), so that a cleaning holds a few MiB of a segment, not all of it."""
    for segment in segments:
        window = b""
        window_start = 0
        for position, header in segment.batch_headers():
            end = position + header.size
            if position < window_start or end > window_start + len(window):
                size = min(max(READ_CHUNK, header.size), segment.size - position)
                window = segment.read_at(position, size)
                window_start = position
                throttle(len(window))
            yield header, window[position - window_start : end - window_start]


def _cleaned(
    group: Sequence[LogSegment],
    retain: Sequence[bool],
    offset_map: OffsetMap,
    producers: frozenset[tuple[int, int]],
    stats: CleanStats,
    transactions: CleanedTransactions,
    throttle: Callable[[int], None],
) -> Iterator[bytes]:
    for segment, keep_tombstones in zip(group, retain, strict=True):
        for out in clean_batches(
            _batches([segment], throttle),
            offset_map,
            retain_tombstones=keep_tombstones,
            producer_last_offsets=producers,
            stats=stats,
            transactions=transactions,
        ):
            throttle(len(out))
            yield out


def _tombstone_horizon(cleanable: Sequence[LogSegment], first_dirty: int, retention_ms: int) -> int:
    """Kafka's ``deleteHorizonMs``: the last already-clean segment's modification time less
    ``delete.retention.ms`` (0, keeping every tombstone, when none is clean yet)."""
    clean = [s for s in cleanable if s.next_offset <= first_dirty]
    return clean[-1].last_modified_ms - retention_ms if clean else 0


def _groups(segments: Sequence[LogSegment], max_bytes: int) -> Iterator[list[LogSegment]]:
    """Consecutive segments whose sizes add up to ``segment.bytes`` at most, and whose
    offsets stay within one segment's relative range (Kafka's ``groupSegmentsBySize``)."""
    group: list[LogSegment] = []
    size = 0
    for segment in segments:
        if group and (
            size + segment.size > max_bytes
            or segment.next_offset - 1 - group[0].base_offset > _INT32_MAX
        ):
            yield group
            group, size = [], 0
        group.append(segment)
        size += segment.size
    if group:
        yield group
