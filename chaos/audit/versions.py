"""The records of a range's distinct copies as columns, and the version the log holds at each
offset.

:func:`decode_copies` decodes each copy (:mod:`chaos.audit.copies`) once
(:func:`~chaos.audit.record_columns.decode_columns`) and hashes what identifies its records
(:mod:`chaos.audit.hashing`): the value; the write, (producer id, producer epoch, sequence)
for an idempotent producer's record; a digest of timestamp, key and headers; and the
*version*, all of these with the batch's leader epoch. Two replicas hold the same record at
an offset when their versions agree.

:func:`top_versions` finds, per offset, the version with the highest leader epoch, the one a
leader-epoch truncation (KIP-101) makes every replica keep, which lost_ack and the read
checks judge by, and whether the replicas holding the offset disagree (``disputed``, what
divergence reports below the high watermark). Where one copy holds every batch in order,
the common case, each record is its offset's version and nothing is sorted.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt

from chaos.audit.copies import Copy
from chaos.audit.hashing import NULL, U64, combine, hash_bytes, hash_spans
from chaos.audit.record_columns import Headers, decode_columns

__all__ = ["Decoded", "Offsets", "Records", "bits", "decode_copies", "top_versions"]

I64 = npt.NDArray[np.int64]
_SEQUENCE_WRAP = 2**31
"""Kafka's producer wraps sequences past INT32_MAX to 0."""
_LENGTH = struct.Struct(">i")


def bits(mask: int) -> list[int]:
    """The replicas (bit positions) of a holders mask."""
    return [r for r in range(mask.bit_length()) if mask >> r & 1]


@dataclass(slots=True)
class Records:
    """Decoded records (each copy's once), as columns."""

    offset: I64
    epoch: I64
    """The batch's partitionLeaderEpoch."""
    value: U64
    """Hash of the value (NULL: a null value)."""
    write: U64
    """Hash of (producer id, producer epoch, sequence); NULL without an idempotent producer."""
    version: U64
    digest: U64
    """Hash of timestamp, key and headers."""
    holders: U64
    """Bit r: replica r of the range holds the record."""
    producer: I64
    """Per record: producer id, producer epoch, sequence (-1 without)."""
    copy: I64
    """The copy the record's bytes are in."""
    value_start: I64
    """The value's position in its copy's bytes; -1 for a null value."""
    value_length: I64
    key: U64 | None = None
    """Hash of the key (NULL: a null key); decoded for a compacted partition only
    (:func:`decode_copies`' ``keys``), whose checks go by key."""
    key_start: I64 | None = None
    """The key's position in its copy's bytes (-1: null), with ``key`` only."""
    key_length: I64 | None = None
    timestamp: I64 | None = None
    """The record's timestamp, with ``key`` only (a tombstone's age)."""

    def __len__(self) -> int:
        return len(self.offset)

    def take(self, chosen: npt.NDArray[np.intp]) -> Records:
        return Records(
            *(getattr(self, f.name)[chosen] for f in _COLUMNS),
            *(None if (c := getattr(self, f.name)) is None else c[chosen] for f in _OPTIONAL),
        )

    @staticmethod
    def concat(parts: Sequence[Records]) -> Records:
        if not parts:
            z, u = np.zeros(0, np.int64), np.zeros(0, np.uint64)
            return Records(z, z, u, u, u, u, u, np.zeros((0, 3), np.int64), z, z, z)
        if len(parts) == 1:
            return parts[0]
        return Records(
            *(np.concatenate([getattr(p, f.name) for p in parts]) for f in _COLUMNS),
            *(
                np.concatenate([getattr(p, f.name) for p in parts])
                if all(getattr(p, f.name) is not None for p in parts)
                else None
                for f in _OPTIONAL
            ),
        )


_OPTIONAL = tuple(
    f for f in fields(Records) if f.name in ("key", "key_start", "key_length", "timestamp")
)
"""The columns only a compacted partition's records have."""
_COLUMNS = tuple(f for f in fields(Records) if f not in _OPTIONAL)


@dataclass(slots=True)
class Decoded:
    """What decoding a range's copies gives."""

    records: Records
    """The records with offsets in the range."""
    counts: list[int]
    """Per replica of the range: its records decoded (those of batches owned by the range)."""
    errors: list[tuple[int, int, str]]
    """(copy, batch, reason) of owned batches whose records do not parse or, compressed, do
    not inflate (:attr:`Copy.errors <chaos.audit.copies.Copy.errors>`)."""


def _headers_hash(headers: Headers) -> int:
    """A hash of a record's headers: each key and value length-prefixed, so that no two
    header lists encode alike (a null value is length -1)."""
    parts = []
    for key, value in headers:
        encoded = key.encode("utf-8")
        parts += [_LENGTH.pack(len(encoded)), encoded]
        parts += [_LENGTH.pack(-1)] if value is None else [_LENGTH.pack(len(value)), value]
    return int(hash_bytes([b"".join(parts)])[0])


def decode_copies(
    copies: Sequence[Copy], replicas: int, low: int, high: int, *, keys: bool = False
) -> Decoded:
    """The records of ``copies`` with offsets in [low, high); with ``keys``, their key
    hashes and timestamps too (a compacted partition's checks need them)."""
    parts = []
    counts = [0] * replicas
    errors = []
    for c, copy in enumerate(copies):
        if not copy.batches:
            continue
        markers = {b for b, (_, h) in enumerate(copy.batches) if h.is_control}
        # a control batch's record is a marker, not data: no consumer is served it
        cols = decode_columns(copy.data, copy.batches, skip=copy.errors.keys() | markers)
        problems = sorted({**copy.errors, **cols.errors}.items())
        errors += [(c, b, reason) for b, reason in problems if copy.owned[b]]
        keep = np.flatnonzero((cols.offset >= low) & (cols.offset < high))
        if not len(keep):
            continue
        headers = [h for _, h in copy.batches]
        batch = cols.batch[keep]
        per_batch = np.bincount(batch, minlength=len(headers))
        for b in np.flatnonzero(per_batch).tolist():
            for r in bits(copy.holders[b]):
                counts[r] += int(per_batch[b])

        def column(values: list[int], batch: npt.NDArray[np.int32] = batch) -> I64:
            return np.array(values, dtype=np.int64)[batch]

        array = np.frombuffer(copy.data, dtype=np.uint8)
        offset = cols.offset[keep]
        epoch = column([h.partition_leader_epoch for h in headers])
        value = hash_spans(array, cols.value_start[keep], cols.value_length[keep])
        key = hash_spans(array, cols.key_start[keep], cols.key_length[keep])
        header_hash = np.zeros(len(keep), dtype=np.uint64)
        if cols.headers:
            position = {int(k): i for i, k in enumerate(keep.tolist())}
            for record, record_headers in cols.headers.items():
                if record in position:
                    header_hash[position[record]] = _headers_hash(record_headers)
        digest = combine(cols.timestamp[keep], key, header_hash)
        producer_id = column([h.producer_id for h in headers])
        producer_epoch = column([h.producer_epoch for h in headers])
        base_sequence = column([h.base_sequence for h in headers])
        has_write = (producer_id >= 0) & (base_sequence >= 0)
        # A record's sequence: its batch's base sequence plus its offset delta, wrapped.
        delta = offset - column([h.base_offset for h in headers])
        sequence = np.where(has_write, (base_sequence + delta) % _SEQUENCE_WRAP, -1)
        write = np.where(has_write, combine(producer_id, producer_epoch, sequence), np.uint64(NULL))
        write[has_write & (write == NULL)] = 1
        parts.append(
            Records(
                offset,
                epoch,
                value,
                write,
                combine(epoch, digest, value, write),
                digest,
                np.array(copy.holders, dtype=np.uint64)[batch],
                np.stack([producer_id, producer_epoch, sequence], axis=1),
                np.full(len(keep), c, dtype=np.int64),
                cols.value_start[keep],
                cols.value_length[keep],
                *(
                    (key, cols.key_start[keep], cols.key_length[keep], cols.timestamp[keep])
                    if keys
                    else (None, None, None, None)
                ),
            )
        )
    return Decoded(Records.concat(parts), counts, errors)


@dataclass(slots=True)
class Offsets:
    """Per offset held in the range (sorted): the version the log holds there."""

    offset: I64
    top_epoch: I64
    top_value: U64
    top_write: U64
    disputed: npt.NDArray[np.bool_]
    first: npt.NDArray[np.intp]
    """Index of the offset's first record in the (offset-sorted) records."""
    count: npt.NDArray[np.intp]
    top_record: npt.NDArray[np.intp]
    """A record holding the top version (its value shows what the log holds)."""

    def records(self, i: int) -> range:
        """The records (indices) at offset ``self.offset[i]``."""
        return range(int(self.first[i]), int(self.first[i] + self.count[i]))


def top_versions(records: Records) -> tuple[Records, Offsets]:
    """The records sorted by offset, and the top version of each offset: the highest epoch;
    where records of that epoch disagree, the greatest value (and write) hash among them, a
    choice made the same way on every run."""
    n = len(records)
    if n == 0 or bool(np.all(records.offset[1:] > records.offset[:-1])):
        index = np.arange(n)
        return records, Offsets(
            records.offset,
            records.epoch,
            records.value,
            records.write,
            np.zeros(n, dtype=np.bool_),
            index,
            np.ones(n, dtype=np.intp),
            index,
        )
    records = records.take(np.argsort(records.offset, kind="stable"))
    offset, first, count = np.unique(records.offset, return_index=True, return_counts=True)
    top_epoch = np.maximum.reduceat(records.epoch, first)
    disputed = np.minimum.reduceat(records.version, first) != np.maximum.reduceat(
        records.version, first
    )
    at_top = records.epoch == np.repeat(top_epoch, count)
    top_value = np.maximum.reduceat(np.where(at_top, records.value, np.uint64(NULL)), first)
    top_write = np.maximum.reduceat(np.where(at_top, records.write, np.uint64(NULL)), first)
    showing = at_top & (records.value == np.repeat(top_value, count))
    positions = np.arange(n)
    top_record = np.minimum.reduceat(np.where(showing, positions, n), first)
    return records, Offsets(
        offset, top_epoch, top_value, top_write, disputed, first, count, top_record
    )
