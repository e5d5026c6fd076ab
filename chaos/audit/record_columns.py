"""The records of many v2 batches as columns (numpy), for the audit's comparisons.

:func:`decode_columns` gives, for every record of the batches it is handed, its batch, its
offset and timestamp, and where its key and value lie in the buffer (start and length, -1
for null), plus the headers of the few records that have some. It decodes exactly what
:func:`proto.records.record_batch.decode_rows` decodes and rejects exactly what it rejects, with
its message, but it builds no Python object per record:

- the first record of each run of one layout (see :mod:`proto.records.layout`) is parsed
  in Python, with decode_rows's checks, and :func:`~proto.records.layout.same_layout_run`
  says how far the run goes; the rest of the run is a *run descriptor* (where it starts,
  its stride, where its fields lie in a record), so a batch of fixed-size records costs a
  few Python steps whatever its record count;
- the runs become columns in numpy at the end, all at once: positions by arithmetic,
  timestamps by decoding their varint columns.

A batch whose records do not parse is left out; its error is decode_rows's own (the
first failure sends the batch to decode_rows, which names it).
"""

from __future__ import annotations

import mmap
from collections.abc import Container, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from proto.records.layout import same_layout_run
from proto.records.record_batch import (
    RECORDS_OFFSET,
    BatchHeader,
    CorruptRecordError,
    decode_rows,
    decode_varint,
    decode_varlong,
)

__all__ = ["RecordColumns", "decode_columns"]

I64 = npt.NDArray[np.int64]
Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(slots=True)
class RecordColumns:
    """The records of the decoded batches, in batch order, one array element each."""

    batch: npt.NDArray[np.int32]
    """Index of the record's batch in the list handed to :func:`decode_columns`."""
    offset: I64
    timestamp: I64
    key_start: I64
    """Position of the key in the buffer; -1 for a null key."""
    key_length: I64
    value_start: I64
    """Position of the value in the buffer; -1 for a null value."""
    value_length: I64
    headers: dict[int, Headers] = field(default_factory=dict)
    """Record index -> its headers, for the records that have any."""
    errors: dict[int, str] = field(default_factory=dict)
    """Batch index -> why its records do not parse (decode_rows's message); such a batch
    has no records here."""

    def __len__(self) -> int:
        return len(self.offset)


_Entry = tuple[int, int, int, int, int, int, int, int, int, int, int, int]
"""A single record or a run of records sharing the first one's layout, as
:func:`decode_columns` gathers them before building the columns: (batch, position of the
first record covered, count, stride (0 for a single record), offset of the first record
covered, timestamp (a run's: its base timestamp or LogAppendTime), timestampDelta position
within a run's records (-1: a single record, or LogAppendTime) and width, key position and
length (a single record's: absolute; a run's: within a record; -1 null), value position
and length)."""
_ENTRY_FIELDS = 12


def _bytes_field(data: bytes | bytearray, p: int, limit: int) -> tuple[int, int, int]:
    """(start, length, position after) of a key or value; start -1 for null. Raises
    CorruptRecordError (or IndexError) where decode_rows's ``_decode_bytes`` would."""
    length, p = decode_varint(data, p)
    if length == -1:
        return -1, 0, p
    if length < -1 or p + length > limit:
        raise CorruptRecordError("bytes field does not fit in its record")
    return p, length, p + length


def _headers(data: bytes | bytearray, p: int, record_end: int) -> tuple[Headers, int]:
    count, p = decode_varint(data, p)
    if count < 0:
        raise CorruptRecordError("negative header count")
    headers = []
    for _ in range(count):
        key_at, key_length, p = _bytes_field(data, p, record_end)
        if key_at < 0:
            raise CorruptRecordError("null header key")
        value_at, value_length, p = _bytes_field(data, p, record_end)
        value = None if value_at < 0 else bytes(data[value_at : value_at + value_length])
        try:
            headers.append((bytes(data[key_at : key_at + key_length]).decode("utf-8"), value))
        except UnicodeDecodeError:
            raise CorruptRecordError("header key is not UTF-8") from None
    if p != record_end:
        raise CorruptRecordError("header fields do not end with the record")
    return tuple(headers), p


def _walk(
    data: bytes | bytearray,
    header: BatchHeader,
    batch: int,
    base: int,
    entries: list[_Entry],
    headers_of: list[tuple[int, Headers]],
) -> None:
    """Add the records of one checked, uncompressed (or inflated) batch (``data`` holds
    exactly its bytes; ``base`` is where they start in the caller's buffer) to ``entries``
    (and the headers of records with some to ``headers_of``, by entry index): decode_rows's
    walk, with its checks, recording positions instead of building rows. Raises
    CorruptRecordError or IndexError where decode_rows fails."""
    end = len(data)
    p = RECORDS_OFFSET
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    append_time = header.max_timestamp if header.is_log_append_time else None
    count = header.record_count
    previous = -1
    index = 0
    while index < count:
        start = p
        length, p = decode_varint(data, p)
        record_end = p + length
        if length < 0 or record_end > end:
            raise CorruptRecordError("length does not fit in the batch")
        p += 1  # attributes: unused in v2
        timestamp_at = p
        timestamp_delta, p = decode_varlong(data, p)
        timestamp_width = p - timestamp_at
        offset_delta, p = decode_varint(data, p)
        if not previous < offset_delta <= header.last_offset_delta:
            raise CorruptRecordError("offsetDelta out of order")  # decode_rows says more
        previous = offset_delta
        key_at, key_length, p = _bytes_field(data, p, record_end)
        value_at, value_length, p = _bytes_field(data, p, record_end)
        if data[p] == 0 and p + 1 == record_end:
            headers: Headers = ()
            p += 1
        else:
            headers, p = _headers(data, p, record_end)
        timestamp = base_timestamp + timestamp_delta if append_time is None else append_time
        if headers:
            headers_of.append((len(entries), headers))
        entries.append(
            (
                batch,
                base + start,
                1,
                0,
                base_offset + offset_delta,
                timestamp,
                -1,
                0,
                -1 if key_at < 0 else base + key_at,
                key_length,
                -1 if value_at < 0 else base + value_at,
                value_length,
            )
        )
        index += 1
        size = p - start
        if (
            index < count
            and not headers
            and data[p] == data[start]
            and p + size <= end
            and not data[p + size - 1]
        ):
            run = same_layout_run(
                data, start, size, index - 1, min(count - index + 1, (end - start) // size)
            )
            if run > 1:
                # Records index .. index + run - 2: offsets one apart from the first one's
                # (same_layout_run checked their offsetDeltas), fields at the same places.
                entries.append(
                    (
                        batch,
                        base + start + size,
                        run - 1,
                        size,
                        base_offset + offset_delta + 1,
                        base_timestamp if append_time is None else append_time,
                        -1 if append_time is not None else timestamp_at - start,
                        timestamp_width,
                        -1 if key_at < 0 else key_at - start,
                        key_length,
                        -1 if value_at < 0 else value_at - start,
                        value_length,
                    )
                )
                index += run - 1
                previous = offset_delta + run - 1
                p = start + run * size
    if p != end:
        raise CorruptRecordError("bytes after the last record")


def _varlong_column(buffer: npt.NDArray[np.uint8], at: I64, width: int) -> I64:
    """The zig-zag varlongs of ``width`` bytes at positions ``at`` (already validated)."""
    raw = np.zeros(len(at), dtype=np.uint64)
    for k in range(width):
        raw |= (buffer[at + k].astype(np.uint64) & np.uint64(0x7F)) << np.uint64(7 * k)
    value = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return value


def decode_columns(
    buffer: bytes | bytearray | mmap.mmap,
    batches: Sequence[tuple[int, BatchHeader]],
    skip: Container[int] = (),
) -> RecordColumns:
    """The records of ``batches`` as columns: each ``(position, header)`` a batch in
    ``buffer`` that passed check_batch and is uncompressed there (a compressed batch is
    handed over inflated, :func:`~proto.records.record_batch.inflated`), but the batches
    of ``skip`` (indices), which are not read and contribute no record: the caller knows
    why (a compressed batch that does not inflate).

    A batch whose records do not parse is in ``errors`` with decode_rows's message and
    contributes no record.
    """
    array = np.frombuffer(buffer, dtype=np.uint8)
    entries: list[_Entry] = []
    headers_of: list[tuple[int, Headers]] = []
    errors: dict[int, str] = {}
    for batch, (position, header) in enumerate(batches):
        if batch in skip:
            continue
        size = len(entries)
        piece = buffer[position : position + header.size]
        try:
            _walk(piece, header, batch, position, entries, headers_of)
        except (CorruptRecordError, IndexError):
            del entries[size:]
            while headers_of and headers_of[-1][0] >= size:
                headers_of.pop()
            try:
                decode_rows(bytes(piece), 0, header, tuple, min_offset=-(2**63))
            except CorruptRecordError as e:
                errors[batch] = e.reason
                continue
            raise AssertionError(  # the walk and decode_rows disagree: a bug here
                f"batch at position {position}: decoded by decode_rows but not here"
            ) from None
    return _columns(array, entries, headers_of, errors)


def _columns(
    array: npt.NDArray[np.uint8],
    entries: list[_Entry],
    headers_of: list[tuple[int, Headers]],
    errors: dict[int, str],
) -> RecordColumns:
    table = np.array(entries, dtype=np.int64).reshape(-1, _ENTRY_FIELDS)
    (batch, start, count, stride, offset, timestamp, timestamp_at, width) = table[:, :8].T
    key_at, key_length, value_at, value_length = table[:, 8:].T
    total = int(count.sum())
    entry = np.repeat(np.arange(len(count)), count)
    first = np.cumsum(count) - count
    within = np.arange(total, dtype=np.int64) - first[entry]
    record = start[entry] + within * stride[entry]
    is_run = stride[entry] > 0

    def located(at: I64) -> I64:
        relative = at[entry]
        return np.where(relative < 0, -1, np.where(is_run, record + relative, relative))

    stamps = timestamp[entry]
    decoded = timestamp_at >= 0
    for w in np.unique(width[decoded]):
        chosen = np.flatnonzero((decoded & (width == w))[entry])
        stamps[chosen] += _varlong_column(
            array, record[chosen] + timestamp_at[entry[chosen]], int(w)
        )
    return RecordColumns(
        batch=batch[entry].astype(np.int32),
        offset=offset[entry] + within,
        timestamp=stamps,
        key_start=located(key_at),
        key_length=key_length[entry],
        value_start=located(value_at),
        value_length=value_length[entry],
        headers={int(first[e]): h for e, h in headers_of},
        errors=errors,
    )
