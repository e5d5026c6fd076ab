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

A builder made with a codec (``RecordsBuilder(Codec.LZ4)``) appends exactly as an
uncompressed one does: records are encoded plain as they arrive, and the records section is
compressed once, when the batch is sealed (:meth:`RecordsBuilder.seal`, or the first
:meth:`RecordsBuilder.build`). Kafka's Java producer instead writes each record through a
compressing stream as it is appended; compressing once per batch keeps the per-record path
the same for every codec, and costs the loop one call per batch (its measured cost is in
``ProducerConfig.compression_type``'s docstring). The compressed records are kept, so a
rebuild under a new producer id or sequence still re-encodes only the header.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from itertools import chain, repeat

import crc32c

from proto.records.compression import compress
from proto.records.record_batch import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_TIMESTAMP,
    encode_varint,
    encode_varlong,
)

__all__ = ["RecordsBuilder", "batch_of_one_size", "encode_record_tail"]

_crc32c = crc32c.crc32c  # (data, crc) continues a CRC: the header's, then the records'

_PREFIX = struct.Struct(">qiibI")  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc
_COVERED_HEADER = struct.Struct(">hiqqqhii")  # attributes .. recordCount
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_NULL = b"\x01"  # zig-zag -1: a null key or value
_NO_HEADERS = b"\x00"
_ZERO_ATTRIBUTES = b"\x00"

_VARINTS = [encode_varint(n) for n in range(1 << 14)]
"""Varints of 0..16383: record lengths, value lengths and offset deltas, looked up in the
bulk path instead of encoded (a list index costs a twentieth of a call)."""


_TIMESTAMP_DELTAS = [_ZERO_ATTRIBUTES + encode_varlong(n) for n in range(1 << 14)]
"""The attributes byte and the timestamp delta of 0..16383 ms, as a record starts: a
producer's records arrive within a few seconds of their batch's first one."""


def _varint(n: int) -> bytes:
    return _VARINTS[n] if 0 <= n < 16384 else encode_varint(n)


def encode_record_tail(
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes | None]] = (),
) -> bytes:
    """A record's key, value and headers as a v2 batch holds them: everything after its
    offset delta, and all of it that does not depend on the batch the record goes into.
    :meth:`RecordsBuilder.append_tail` adds the rest (length, attributes, the deltas).

    The producer's ``send`` encodes a record once, here, and knows its exact size from
    the result. Raises TypeError for a key or value that is not bytes or None, a header
    key that is not str, or a header value that is not bytes or None.
    """
    # ``type(x) is bytes`` and the table first: the common case costs no call but len().
    if type(value) is bytes and len(value) < 16384:
        value_length = _VARINTS[len(value)]
    elif value is None:
        value_length = _NULL
        value = b""
    elif isinstance(value, bytes):
        value_length = encode_varint(len(value))
    else:
        raise TypeError(f"value must be bytes or None, got {type(value).__name__}")
    if type(key) is bytes and len(key) < 16384:
        key_length = _VARINTS[len(key)]
    elif key is None:
        key_length = _NULL
        key = b""
    elif isinstance(key, bytes):
        key_length = encode_varint(len(key))
    else:
        raise TypeError(f"key must be bytes or None, got {type(key).__name__}")
    if not headers:  # () or []: a generator is truthy and takes the loop below
        return b"".join((key_length, key, value_length, value, _NO_HEADERS))
    parts = [key_length, key, value_length, value, _NO_HEADERS]
    count = 0
    for header_key, header_value in headers:
        if type(header_key) is not str and not isinstance(header_key, str):
            raise TypeError(f"header keys must be str, got {type(header_key).__name__}")
        encoded_key = header_key.encode()
        n = len(encoded_key)
        parts += (_VARINTS[n] if n < 16384 else encode_varint(n), encoded_key)
        if type(header_value) is bytes or isinstance(header_value, bytes):
            n = len(header_value)
            parts += (_VARINTS[n] if n < 16384 else encode_varint(n), header_value)
        elif header_value is None:
            parts.append(_NULL)
        else:
            raise TypeError(
                f"header {header_key!r} must be bytes or None, got {type(header_value).__name__}"
            )
        count += 1
    parts[4] = _VARINTS[count] if count < 16384 else encode_varint(count)
    return b"".join(parts)


def batch_of_one_size(tail: bytes) -> int:
    """The exact size of a batch holding only the record of ``tail``
    (:func:`encode_record_tail`): its deltas are 0, one byte each."""
    body = 3 + len(tail)  # attributes, timestamp delta 0, offset delta 0, the tail
    return HEADER_SIZE + len(_varint(body)) + body


class RecordsBuilder:
    """The records of one v2 batch, encoded as appended; CreateTime timestamps; compressed
    once, when sealed, if made with a codec (``compression``, a
    :class:`~proto.records.compression.Codec` id; 0: none).

    ``size`` is always the exact size of the batch *uncompressed*: what :meth:`build`
    returns without a codec, and what ``batch.size`` bounds either way (the producer's
    limit counts records before compression; see ``ProducerConfig.batch_size``). With a
    codec the built batch is :meth:`seal`'s size, known only once sealed.
    """

    __slots__ = (
        "_body",
        "_parts",
        "_stored",
        "base_timestamp",
        "compression",
        "count",
        "max_timestamp",
        "size",
    )

    def __init__(self, compression: int = 0) -> None:
        self._parts: list[bytes] = []
        self._body = b""
        """The records joined so far (``_parts`` holds what came after)."""
        self.compression = compression
        self._stored: bytes | None = None
        """With a codec, once sealed: the records section as the batch stores it,
        compressed (``_body`` is then dropped)."""
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
        tail = encode_record_tail(key, value, headers)
        return self.append_tail(timestamp, tail, _INT64_MAX if limit is None else limit) > 0

    def append_tail(self, timestamp: int, tail: bytes, limit: int) -> int:
        """Append the record of ``tail`` (:func:`encode_record_tail`) at ``timestamp``
        unless the batch would then exceed ``limit`` bytes (the first record is always
        taken). Returns the bytes it added, 0 if it did not fit. The record's first bytes
        (length, attributes, timestamp and offset deltas) mostly come from tables."""
        count = self.count
        if count:
            delta = timestamp - self.base_timestamp
            head = (
                _TIMESTAMP_DELTAS[delta]
                if 0 <= delta < 16384
                else _ZERO_ATTRIBUTES + encode_varlong(delta)
            )
            head += _VARINTS[count] if count < 16384 else encode_varint(count)
        else:
            self.base_timestamp = timestamp
            head = b"\x00\x00\x00"  # attributes, timestamp delta 0, offset delta 0
        length = len(head) + len(tail)
        head = (_VARINTS[length] if length < 16384 else encode_varint(length)) + head
        total = len(head) + len(tail)
        if count and self.size + total > limit:
            return 0
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        self._parts += (head, tail)
        self.count = count + 1
        self.size += total
        return total

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

    @property
    def sealed(self) -> bool:
        """A compressing builder whose records were compressed: nothing more may be
        appended."""
        return self._stored is not None

    def seal(self) -> int:
        """Compress the records section now, once, and return the size of the batch
        :meth:`build` will return (without a codec: ``size``, nothing done). No record may
        be appended after it with a codec (:meth:`build` refuses the batch then). Raises
        ValueError for an empty batch."""
        if self.count == 0:
            raise ValueError("a record batch needs at least one record")
        if not self.compression:
            return self.size
        if self._stored is None:
            if self._parts:
                self._body = b"".join([self._body, *self._parts])
                self._parts = []
            self._stored = compress(self.compression, self._body)
            self._body = b""
        return HEADER_SIZE + len(self._stored)

    def build(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        *,
        base_offset: int = 0,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        flags: int = 0,
    ) -> bytes:
        """The batch: header, CRC and the records appended so far (compressed, with a
        codec: sealed first if it was not). Raises ValueError for an empty batch. Cheap to
        call again (a retry under a new producer id): the records are joined, and
        compressed, once. ``flags``: attribute bits besides the codec
        (``TRANSACTIONAL_FLAG_MASK`` for a transactional producer's batch)."""
        if self.compression:
            return self._build_compressed(
                producer_id,
                producer_epoch,
                base_sequence,
                base_offset,
                partition_leader_epoch,
                flags,
            )
        if self.count == 0:
            raise ValueError("a record batch needs at least one record")
        if self._parts:
            self._body = b"".join([self._body, *self._parts])
            self._parts = []
        # attributes: no compression, CreateTime, not control; transactional per ``flags``
        return self._framed(
            flags, self._body, self.size, producer_id, producer_epoch, base_sequence,
            base_offset, partition_leader_epoch,
        )  # fmt: skip

    def _framed(
        self,
        attributes: int,
        body: bytes,
        size: int,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        base_offset: int,
        partition_leader_epoch: int,
    ) -> bytes:
        """The batch of ``body`` (its records as stored, ``size`` bytes in all): the
        header with ``attributes``, batchLength and the CRC of attributes to the end."""
        if size - LOG_OVERHEAD > _INT32_MAX:
            raise ValueError(f"batch of {size} bytes is too large for the format")
        covered = _COVERED_HEADER.pack(
            attributes,
            self.count - 1,
            self.base_timestamp,
            self.max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            self.count,
        )
        crc: int = _crc32c(body, _crc32c(covered))
        prefix = _PREFIX.pack(base_offset, size - LOG_OVERHEAD, partition_leader_epoch, MAGIC, crc)
        assert len(prefix) == ATTRIBUTES_OFFSET
        return b"".join((prefix, covered, body))

    def _build_compressed(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        base_offset: int,
        partition_leader_epoch: int,
        flags: int = 0,
    ) -> bytes:
        """:meth:`build` with a codec: the header of the uncompressed batch with the codec in
        its attributes, the stored (compressed) records, batchLength and the CRC (attributes
        to the end, as stored) of those bytes, as ``encode_batch(..., compression=)``."""
        if self._stored is not None and self._parts:
            raise ValueError("records were appended to a compressed batch after it was sealed")
        size = self.seal()
        stored = self._stored
        assert stored is not None
        # attributes: the codec, CreateTime, transactional per ``flags``
        return self._framed(
            self.compression | flags, stored, size, producer_id, producer_epoch,
            base_sequence, base_offset, partition_leader_epoch,
        )  # fmt: skip
