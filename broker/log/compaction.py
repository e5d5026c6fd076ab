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

Transactions (docs/transactions.md), as Kafka 2.8's cleaner (``CleanedTransactionMetadata``)
treats them, tracked by :class:`CleanedTransactions` from the log's aborted transactions
(its ``.txnindex`` entries) while the batches are read in offset order; the cleaner never
reads past the first unstable offset, so every transaction it meets has ended:

- a batch of an **aborted** transaction is removed (its records never mapped, so they
  replace nothing), kept empty only as a producer's last batch;
- a batch of a **committed** transaction is a batch like any other: its keys are mapped and
  its records kept or removed by them;
- a **marker** stays while any batch of its transaction is still in the log when the
  cleaning reads it (a marker removed before its data would leave them open on the next
  load, or, for an abort, show them to read_committed consumers), and after that until its
  segment is older than ``delete.retention.ms`` before the horizon, as a tombstone; then it
  goes, and an abort's index entry with it (:attr:`CleanedTransactions.kept_aborts` are the
  entries the cleaned segments keep). A control batch of an unknown type stays.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from proto.records.aborted_txn import AbortedTxn
from proto.records.control_records import ControlRecordError, ControlType, decode_control_type
from proto.records.record_batch import (
    NO_TIMESTAMP,
    BatchHeader,
    decode_batch,
    offsets_placeholder,
    retained_batch,
)

__all__ = [
    "CleanStats",
    "CleanedTransactions",
    "OffsetMap",
    "build_offset_map",
    "clean_batches",
    "key_digest",
]

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


@dataclass(slots=True)
class _Aborted:
    """A producer's aborted transaction the cleaning has reached."""

    txn: AbortedTxn
    read: bool = False
    """Whether a batch of it was read: its marker must stay."""


class CleanedTransactions:
    """Which transaction each batch a cleaning reads belongs to, and how it ended (Kafka's
    ``CleanedTransactionMetadata``): fed the batches in offset order, from the log's
    aborted transactions whose markers lie at or past the first batch read."""

    def __init__(self, aborted: Sequence[AbortedTxn]) -> None:
        self._aborted = sorted(aborted, key=lambda t: t.first_offset)
        self._next = 0
        self._ongoing_aborted: dict[int, _Aborted] = {}
        self._ongoing_committed: set[int] = set()
        """Producer ids with a batch read of a transaction that is not aborted."""
        self.kept_aborts: list[AbortedTxn] = []
        """The aborts whose markers the cleaning kept, in offset order."""

    def _consume_up_to(self, offset: int) -> None:
        while self._next < len(self._aborted) and self._aborted[self._next].first_offset <= offset:
            txn = self._aborted[self._next]
            self._next += 1
            self._ongoing_aborted.setdefault(txn.producer_id, _Aborted(txn))

    def aborted(self, header: BatchHeader) -> bool:
        """Whether a data batch belongs to an aborted transaction (its records go)."""
        self._consume_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing.read = True
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def marker_removable(self, header: BatchHeader, control_type: ControlType | None) -> bool:
        """Whether a marker may go (no batch of its transaction was read): subject to
        ``delete.retention.ms`` besides. An abort kept stays in :attr:`kept_aborts`."""
        self._consume_up_to(header.last_offset)
        producer_id = header.producer_id
        if control_type is ControlType.ABORT:
            ongoing = self._ongoing_aborted.pop(producer_id, None)
            if ongoing is not None and ongoing.read:
                self.kept_aborts.append(ongoing.txn)
                return False
            return True
        if control_type is ControlType.COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False

    def keep_abort(self, header: BatchHeader) -> None:
        """A removable abort marker kept all the same (within ``delete.retention.ms``):
        its index entry stays with it."""
        for txn in self._aborted:
            if txn.producer_id == header.producer_id and txn.last_offset == header.base_offset:
                self.kept_aborts.append(txn)
                return


def _control_type(data: bytes) -> ControlType | None:
    """A control batch's marker type; None for an unknown type or a batch without its
    record (an unknown control batch stays)."""
    try:
        records = decode_batch(data).records
        return decode_control_type(records[0].key) if records else None
    except (ControlRecordError, ValueError):
        return None


def build_offset_map(
    batches: Iterable[tuple[BatchHeader, bytes]],
    start: int,
    end: int,
    capacity: int,
    transactions: CleanedTransactions | None = None,
) -> tuple[OffsetMap, int]:
    """The map of the keys of the batches' records in [``start``, ``end``) and the offset
    where mapping stopped: ``end``, or the base offset of the first batch whose new keys
    did not fit (a batch is mapped whole or not at all). Markers and aborted
    transactions' records (``transactions``) are not mapped: they replace nothing."""
    mapped = OffsetMap(capacity)
    offsets = mapped.offsets
    tracked = transactions or CleanedTransactions(())
    for header, data in batches:
        if header.next_offset <= start:
            continue
        if header.base_offset >= end:
            break
        if header.is_control:
            tracked.marker_removable(header, _control_type(data))
            continue
        if tracked.aborted(header):
            continue
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
    aborted_removed: int = 0
    """Records of aborted transactions removed."""
    markers_removed: int = 0
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
    transactions: CleanedTransactions | None = None,
) -> Iterator[bytes]:
    """The bytes the batches become, in order (see the module docstring).

    ``retain_tombstones``: whether the batches' segment lies within ``delete.retention.ms``
    of the horizon (its markers too). ``producer_last_offsets``: (producer id, last
    offset) of the last batch of each producer the log tracks. ``transactions``: the
    cleaning's, fed every batch from the log's start (none: no aborted transaction)."""
    tracked = transactions or CleanedTransactions(())
    gap: _Gap | None = None
    for header, data in batches:
        stats.batches_read += 1
        stats.bytes_read += len(data)
        if header.is_control:
            removable = tracked.marker_removable(header, _control_type(data))
            if removable and retain_tombstones:
                tracked.keep_abort(header)
            if not removable or retain_tombstones:
                if gap is not None:
                    yield _placeholder(gap, stats)
                    gap = None
                stats.bytes_written += len(data)
                yield data
                continue
            stats.markers_removed += 1
            gap, flushed = _into_gap(gap, header)
            if flushed is not None:
                yield _placeholder(flushed, stats)
            continue
        records = decode_batch(data).records
        stats.records_read += len(records)
        kept = []
        if tracked.aborted(header):
            stats.aborted_removed += len(records)
        else:
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
        gap, flushed = _into_gap(gap, header)
        if flushed is not None:
            yield _placeholder(flushed, stats)
    if gap is not None:
        yield _placeholder(gap, stats)


def _into_gap(gap: _Gap | None, header: BatchHeader) -> tuple[_Gap, _Gap | None]:
    """``gap`` with the removed batch added, and the gap to write first when the batch's
    partition leader epoch starts another (one placeholder per epoch)."""
    flushed = None
    if gap is not None and gap.epoch != header.partition_leader_epoch:
        flushed, gap = gap, None
    if gap is None:
        gap = _Gap(
            header.base_offset, header.last_offset, header.partition_leader_epoch, NO_TIMESTAMP
        )
    gap.last_offset = header.last_offset
    gap.max_timestamp = max(gap.max_timestamp, header.max_timestamp)
    return gap, flushed


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
