"""What a log cleaner keeps of a compacted log: Kafka's ``Cleaner.buildOffsetMap`` and
``Cleaner.cleanInto``, pure over batches (no files; :mod:`broker.log.log_cleaner` reads and
writes them).

1. The **offset map** of the dirty section (the offsets from where the last cleaning
   ended to the first uncleanable one): each key, by its 16-byte MD5 digest as Kafka's
   ``SkimpyOffsetMap`` keeps it, to the offset of its latest record. The map holds at
   most ``capacity`` keys (Kafka: ``log.cleaner.dedupe.buffer.size`` / 24 bytes per
   entry); when it is full the dirty section ends before the batch that did not fit, and
   the next cleaning goes on from there.
2. **Cleaning** a run of batches (those of the segments being rewritten, from the log's
   start): a record stays when it lies past the map's last offset, or its key's latest
   offset is its own, or no later record of its key is in the map, and, for a tombstone
   (a null value), when its segment is still within ``delete.retention.ms`` of the
   horizon. A record without a key goes (Kafka counts it invalid; the leader refuses such
   records on compacted topics). A batch keeps its offsets whatever it loses: all its
   records kept, its bytes are written as they are; some, it is rebuilt with those
   (:func:`proto.records.record_batch.retained_batch`); none, and it was the last batch of
   a producer the log still tracks, it stays as an empty batch with its producer fields,
   so the producer's last sequence survives (Kafka's ``RETAIN_EMPTY``). Batches removed
   whole leave placeholders: one empty batch per run of them with one partition leader
   epoch (:func:`proto.records.record_batch.offsets_placeholder`), so that the log's
   batches still cover every offset. Kafka leaves such gaps empty; here the followers'
   continuity checks, recovery's and the audit's stay as strict as on any log, for
   61 bytes per run of removed batches.

Transactions (docs/transactions.md): a transactional batch or a marker is kept whole, and
its keys are not mapped, so that no aborted record ever replaces a committed one and no
marker goes (the markers all share a few keys, and a marker removed would reopen its
transaction on the next load). Kafka removes aborted records, and markers once
``delete.retention.ms`` passed; here a compacted log keeps every transactional batch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from proto.records.record_batch import (
    NO_TIMESTAMP,
    BatchHeader,
    decode_batch,
    offsets_placeholder,
    retained_batch,
)

__all__ = ["CleanStats", "OffsetMap", "build_offset_map", "clean_batches", "key_digest"]

ENTRY_BYTES = 24
"""What one key costs Kafka's offset map (a 16-byte MD5 digest and an 8-byte offset): the
capacity is ``log.cleaner.dedupe.buffer.size`` divided by this."""


def key_digest(key: bytes) -> bytes:
    return hashlib.md5(key, usedforsecurity=False).digest()


@dataclass
class OffsetMap:
    """Key digest -> the offset of its latest record in the dirty section."""

    capacity: int
    offsets: dict[bytes, int] = field(default_factory=dict)
    latest_offset: int = -1
    """The last offset mapped (-1: none)."""

    def get(self, key: bytes) -> int | None:
        return self.offsets.get(key_digest(key))


def build_offset_map(
    batches: Iterable[tuple[BatchHeader, bytes]], start: int, end: int, capacity: int
) -> tuple[OffsetMap, int]:
    """The map of the keys of the batches' records in [``start``, ``end``) and the offset
    where mapping stopped: ``end``, or the base offset of the first batch whose new keys
    did not fit (a batch is mapped whole or not at all)."""
    mapped = OffsetMap(capacity)
    offsets = mapped.offsets
    for header, data in batches:
        if header.next_offset <= start:
            continue
        if header.base_offset >= end:
            break
        if header.is_control or header.is_transactional:
            continue  # kept whole by clean_batches: its keys replace nothing
        batch: dict[bytes, int] = {}
        for record in decode_batch(data).records:
            if start <= record.offset < end and record.key is not None:
                batch[key_digest(record.key)] = record.offset
        if len(offsets) + sum(1 for k in batch if k not in offsets) > capacity:
            return mapped, max(start, header.base_offset)
        offsets.update(batch)
        mapped.latest_offset = min(header.last_offset, end - 1)
    return mapped, end


@dataclass
class CleanStats:
    """What one cleaning did, for its log line and the tests."""

    batches_read: int = 0
    records_read: int = 0
    records_kept: int = 0
    tombstones_removed: int = 0
    placeholders: int = 0
    bytes_read: int = 0
    bytes_written: int = 0


@dataclass
class _Gap:
    """Batches removed whole, one after another, all of one partition leader epoch."""

    base_offset: int
    last_offset: int
    epoch: int
    max_timestamp: int


def clean_batches(
    batches: Iterable[tuple[BatchHeader, bytes]],
    offset_map: OffsetMap,
    *,
    retain_tombstones: bool,
    producer_last_offsets: frozenset[tuple[int, int]],
    stats: CleanStats,
) -> Iterator[bytes]:
    """The bytes the batches become, in order (see the module docstring).

    ``retain_tombstones``: whether the batches' segment lies within ``delete.retention.ms``
    of the horizon. ``producer_last_offsets``: (producer id, last offset) of the last
    batch of each producer the log tracks."""
    gap: _Gap | None = None
    for header, data in batches:
        stats.batches_read += 1
        stats.bytes_read += len(data)
        if header.is_control or header.is_transactional:
            if gap is not None:
                yield _placeholder(gap, stats)
                gap = None
            stats.bytes_written += len(data)
            yield data
            continue
        records = decode_batch(data).records
        stats.records_read += len(records)
        kept = []
        for r in records:
            if _retained(r.offset, r.key, r.value is None, offset_map, retain_tombstones):
                kept.append(r)
            elif r.value is None and r.key is not None:
                stats.tombstones_removed += 1
        stats.records_kept += len(kept)
        last_of_producer = (header.producer_id, header.last_offset) in producer_last_offsets
        if kept or last_of_producer:
            if gap is not None:
                yield _placeholder(gap, stats)
                gap = None
            out = data if len(kept) == len(records) else retained_batch(header, kept)
            stats.bytes_written += len(out)
            yield out
            continue
        if gap is not None and gap.epoch != header.partition_leader_epoch:
            yield _placeholder(gap, stats)
            gap = None
        if gap is None:
            gap = _Gap(
                header.base_offset, header.last_offset, header.partition_leader_epoch, NO_TIMESTAMP
            )
        gap.last_offset = header.last_offset
        gap.max_timestamp = max(gap.max_timestamp, header.max_timestamp)
    if gap is not None:
        yield _placeholder(gap, stats)


def _retained(
    offset: int, key: bytes | None, tombstone: bool, offset_map: OffsetMap, retain: bool
) -> bool:
    """Kafka's ``Cleaner.shouldRetainRecord``."""
    if offset > offset_map.latest_offset:
        return True
    if key is None:
        return False
    latest = offset_map.get(key)
    return (latest is None or offset >= latest) and (not tombstone or retain)


def _placeholder(gap: _Gap, stats: CleanStats) -> bytes:
    stats.placeholders += 1
    out = offsets_placeholder(gap.base_offset, gap.last_offset, gap.epoch, gap.max_timestamp)
    stats.bytes_written += len(out)
    return out
