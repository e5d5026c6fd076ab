"""Encode a v2 batch as its records arrive (Kafka's ``MemoryRecordsBuilder``).

:func:`proto.records.record_batch.encode_batch` encodes a finished list of :class:`Record` objects;
a producer instead appends records one call at a time and sends the batch later, perhaps
several times (a retry, a new producer id). :class:`RecordsBuilder` writes each record's
bytes when it is appended, so the work per record happens once and the batch is finished
by :meth:`RecordsBuilder.build` with one header and one CRC: a retry under a new producer id
or sequence re-encodes the 61-byte header, never the records.

:meth:`RecordsBuilder.append_values` is the bulk path: keyless records without
headers that share one timestamp, as ``Producer.send_many`` and ``perf produce`` hand them
over, cost a few list operations each instead of a Record, a size computation and an
encoding pass apiece. The output is byte for byte what ``encode_batch`` writes for the same
records (``tests/unit/test_records_builder.py`` checks it).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import chain, repeat

import crc32c

from proto.records.record_batch import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_TIMESTAMP,
    encode_record,
    encode_varint,
    encode_varlong,
)

__all__ = ["RecordsBuilder"]

_crc32c = crc32c.crc32c  # (data, crc) continues a CRC: the header's, then the records'

_PREFIX = struct.Struct(">qiibI")  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc
_COVERED_HEADER = struct.Struct(">hiqqqhii")  # attributes .. recordCount
_INT32_MAX = 2**31 - 1
_NULL = b"\x01"  # zig-zag -1: a null key or value
_NO_HEADERS = b"\x00"
_ZERO_ATTRIBUTES = b"\x00"

_VARINTS = [encode_varint(n) for n in range(1 << 14)]
"""Varints of 0..16383: record lengths, value lengths and offset deltas, looked up in the
bulk path instead of encoded (a list index costs a twentieth of a call)."""


def _varint(n: int) -> bytes:
    return _VARINTS[n] if 0 <= n < 16384 else encode_varint(n)


class RecordsBuilder:
    """The records of one uncompressed v2 batch, encoded as appended; CreateTime timestamps.

    ``size`` is always the exact size of the batch :meth:`build` would return, so a
    producer can hold batches to ``batch.size`` without encoding twice.
    """

    __slots__ = ("_body", "_parts", "base_timestamp", "count", "max_timestamp", "size")

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._body = b""
        """The records joined so far (``_parts`` holds what came after)."""
        self.count = 0
        self.size = HEADER_SIZE
        self.base_timestamp = NO_TIMESTAMP
        """The first record's timestamp; every timestamp delta is taken from it."""
        self.max_timestamp = NO_TIMESTAMP

    def __len__(self) -> int:
        return self.count

    def append(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        limit: int | None = None,
    ) -> bool:
        """Append one record, unless the batch would then exceed ``limit`` bytes (the first
        record is always taken). Returns whether it was."""
        base = timestamp if self.count == 0 else self.base_timestamp
        encoded = encode_record(self.count, timestamp - base, key, value, headers)
        if limit is not None and self.count and self.size + len(encoded) > limit:
            return False
        if self.count == 0:
            self.base_timestamp = timestamp
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        self._parts.append(encoded)
        self.count += 1
        self.size += len(encoded)
        return True

    def append_values(
        self, values: Sequence[bytes | None], start: int, timestamp: int, limit: int
    ) -> int:
        """Append keyless, header-less records ``values[start:]`` with one timestamp until
        the batch would exceed ``limit`` bytes (at least one record if the batch is empty).
        Returns the index of the first value not appended (``len(values)``: all were)."""
        end = len(values)
        if start >= end:
            return start
        if self.count == 0:
            self.base_timestamp = timestamp
        head = _ZERO_ATTRIBUTES + encode_varlong(timestamp - self.base_timestamp)
        first = values[start]
        try:
            lengths = set(map(len, values[start:end]))  # type: ignore[arg-type]
            uniform = first is not None and lengths == {len(first)}
        except TypeError:  # a None among them
            uniform = False
        if uniform:
            assert first is not None
            i = self._append_uniform(values, start, end, head, len(first), limit)
        else:
            i = self._append_varied(values, start, end, head, limit)
        if i > start and timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        return i

    def _append_uniform(
        self,
        values: Sequence[bytes | None],
        start: int,
        end: int,
        head: bytes,
        n: int,
        limit: int,
    ) -> int:
        """``append_values`` for values of one length (the bulk producer's case): within a
        run of offset deltas of one varint width every record is the same five pieces but
        its delta and value, so the list of pieces is built by zip and chain, in C, with
        no Python per record. How many fit is arithmetic."""
        tail = _NULL + _varint(n)  # the null key, then the value's length
        parts = self._parts
        count = self.count
        size = self.size
        i = start
        while i < end:
            delta_width = len(_varint(count))
            length = len(head) + delta_width + len(tail) + n + 1
            prefix = _varint(length) + head
            total = len(prefix) + delta_width + len(tail) + n + 1
            width_ends = 64 if count < 64 else 8192 if count < 8192 else 1 << 20
            k = min(end - i, width_ends - count)
            fit = (limit - size) // total
            if fit < k:
                k = max(fit, 0 if count else 1)  # an empty batch takes one record
                end = i + k  # and stops there
            if k <= 0:
                break
            deltas = (
                _VARINTS[count : count + k]
                if count + k <= len(_VARINTS)
                else [encode_varint(d) for d in range(count, count + k)]
            )
            parts.extend(
                chain.from_iterable(  # values[i : i + k] are all bytes here
                    zip(repeat(prefix, k), deltas, repeat(tail, k), values[i : i + k],  # type: ignore[arg-type]
                        repeat(_NO_HEADERS, k), strict=True)
                )
            )  # fmt: skip
            i += k
            count += k
            size += k * total
        self.count = count
        self.size = size
        return i

    def _append_varied(
        self, values: Sequence[bytes | None], start: int, end: int, head: bytes, limit: int
    ) -> int:
        """``append_values`` for values of several lengths or nulls: record by record."""
        count = self.count
        # A record: length, attributes, timestampDelta, offsetDelta, null key, value
        # length, value, header count 0. Records whose value length and offset-delta width
        # match the previous one's share every byte but the delta and the value, so the
        # rest is encoded once per run of them.
        varints = _VARINTS
        parts = self._parts
        extend = parts.extend
        size = self.size
        last_n = last_width = -2
        prefix = middle = b""
        total = 0
        i = start
        while i < end:
            value = values[i]
            delta = varints[count] if count < 16384 else encode_varint(count)
            n = -1 if value is None else len(value)
            if n != last_n or len(delta) != last_width:
                last_n, last_width = n, len(delta)
                middle = _NULL + (_NULL if value is None else _varint(n))
                length = len(head) + len(delta) + len(middle) + max(n, 0) + 1
                prefix = _varint(length) + head
                total = len(prefix) - len(head) + length
            if size + total > limit and count > 0:
                break
            extend((prefix, delta, middle, value or b"", _NO_HEADERS))
            size += total
            count += 1
            i += 1
        self.size = size
        self.count = count
        return i

    def build(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        *,
        base_offset: int = 0,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    ) -> bytes:
        """The batch: header, CRC and the records appended so far. Raises ValueError for
        an empty batch. Cheap to call again (a retry under a new producer id): the records
        are joined once."""
        if self.count == 0:
            raise ValueError("a record batch needs at least one record")
        if self._parts:
            self._body = b"".join([self._body, *self._parts])
            self._parts = []
        body = self._body
        if self.size - LOG_OVERHEAD > _INT32_MAX:
            raise ValueError(f"batch of {self.size} bytes is too large for the format")
        covered = _COVERED_HEADER.pack(
            0,  # attributes: no compression, CreateTime, not transactional, not control
            self.count - 1,
            self.base_timestamp,
            self.max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            self.count,
        )
        crc: int = _crc32c(body, _crc32c(covered))
        prefix = _PREFIX.pack(
            base_offset,
            self.size - LOG_OVERHEAD,
            partition_leader_epoch,
            MAGIC,
            crc,
        )
        assert len(prefix) == ATTRIBUTES_OFFSET
        return b"".join((prefix, covered, body))
