"""Kafka's record batch v2 (magic 2): the one format on the wire and on disk.

A batch is a 61-byte big-endian header followed by its records::

    offset size field                   covered by the CRC
    0      8    baseOffset i64          no   (the leader assigns it)
    8      4    batchLength i32         no   (bytes after this field: size = batchLength + 12)
    12     4    partitionLeaderEpoch    no   (the leader stamps it)
    16     1    magic i8 = 2            no
    17     4    crc u32                 no   (CRC-32C of bytes 21..end)
    21     2    attributes i16          yes  (bits 0-2 compression, 3 timestamp type,
                                              4 transactional, 5 control)
    23     4    lastOffsetDelta i32     yes
    27     8    baseTimestamp i64       yes
    35     8    maxTimestamp i64        yes
    43     8    producerId i64          yes
    51     2    producerEpoch i16       yes
    53     4    baseSequence i32        yes
    57     4    recordCount i32         yes
    61     ...  records                 yes

Each record is ``length varint, attributes i8, timestampDelta varlong, offsetDelta varint,
keyLength varint (-1 = null), key, valueLength varint (-1 = null), value, headerCount varint,
headers (keyLength varint, key UTF-8, valueLength varint (-1 = null), value)``, varints being
zig-zag encoded base-128 (at most 5 bytes, varlongs at most 10).

Because baseOffset and partitionLeaderEpoch lie outside the CRC, the broker validates a
produced batch (:func:`check_batch`: header, length, magic, CRC, record count; then, on the
leader, broker.log.log_validator walks the records) and gives it its two fields without
re-encoding it: :func:`assign_offsets` (or :func:`with_offsets`, for batches checked before)
says which, and the log writes them with :func:`stamped_buffers`, which patches the first 16
bytes on the way to disk instead of copying the batch to patch it (:func:`stamp_batch` does
that, in place). :func:`encode_batch` and :func:`decode_batch` are for clients, tools and tests.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from itertools import repeat
from typing import Any, NamedTuple, TypeVar

import crc32c

from proto.records.compression import (
    CODEC_NAMES,
    CompressedRecordsError,
    compress,
    decompress,
)
from proto.records.corruption import CorruptRecordError
from proto.records.layout import same_layout_run

__all__ = [
    "ATTRIBUTES_OFFSET",
    "BASE_OFFSET_OFFSET",
    "BASE_SEQUENCE_OFFSET",
    "BASE_TIMESTAMP_OFFSET",
    "BATCH_LENGTH_OFFSET",
    "COMPRESSION_CODEC_MASK",
    "COMPRESSION_NAMES",
    "CONTROL_FLAG_MASK",
    "CRC_OFFSET",
    "HEADER_SIZE",
    "LAST_OFFSET_DELTA_OFFSET",
    "LOG_OVERHEAD",
    "MAGIC",
    "MAGIC_OFFSET",
    "MAX_TIMESTAMP_OFFSET",
    "MIN_BATCH_LENGTH",
    "MIN_RECORD_SIZE",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "PRODUCER_EPOCH_OFFSET",
    "PRODUCER_ID_OFFSET",
    "RECORDS_COUNT_OFFSET",
    "RECORDS_OFFSET",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_FLAG_MASK",
    "BatchHeader",
    "BatchScan",
    "CorruptRecordError",
    "DecodedBatch",
    "Record",
    "ScannedBatch",
    "assign_offsets",
    "check_batch",
    "compute_crc",
    "decode_batch",
    "decode_rows",
    "decode_varint",
    "decode_varlong",
    "encode_batch",
    "encode_record",
    "encode_varint",
    "encode_varlong",
    "parse_header",
    "scan_batches",
    "stamp_batch",
    "stamped_buffers",
    "validate_batches",
    "with_offsets",
]

# -- layout ----------------------------------------------------------------------------------

BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61

HEADER_SIZE = RECORDS_OFFSET
"""Size of the batch header; a batch is never smaller."""
LOG_OVERHEAD = BATCH_LENGTH_OFFSET + 4
"""baseOffset + batchLength: the bytes not counted by batchLength."""
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
"""The smallest sane batchLength (49): a header without records."""
MIN_RECORD_SIZE = 7
"""Smallest encoded record: length, attributes, timestampDelta, offsetDelta, keyLength,
valueLength and headerCount, one byte each. Lets a record count be sanity-checked without
decoding the records."""

MAGIC = 2
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
COMPRESSION_NAMES = CODEC_NAMES

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qiibI")  # baseOffset .. crc: the part outside the CRC
_STAMPED_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
_CRC_COVERED_HEADER = struct.Struct(">hiqqqhii")  # attributes .. recordCount
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
assert _HEADER.size == HEADER_SIZE
assert _PREFIX.size == ATTRIBUTES_OFFSET
assert _STAMPED_PREFIX.size == MAGIC_OFFSET


_crc32c = crc32c.crc32c  # called directly by the validation of every produced batch


def compute_crc(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli) of ``data``, hardware-accelerated by the ``crc32c`` package."""
    value: int = _crc32c(data)
    return value


# -- header ----------------------------------------------------------------------------------


class BatchHeader(NamedTuple):
    """The 61-byte header of one v2 batch, field by field (no validation implied).

    A NamedTuple rather than a frozen dataclass because the broker builds one for every
    batch produced or fetched: a frozen dataclass of 13 fields takes about 1.3 µs to
    construct, ten times as long as a tuple and a fifth of the time the write of a 16 KiB
    batch to the page cache takes.
    """

    base_offset: int
    batch_length: int
    """Bytes following the batchLength field; the batch occupies ``batch_length + 12``."""
    partition_leader_epoch: int
    """Epoch of the leader that appended the batch; -1 until a leader stamps it."""
    magic: int
    crc: int
    """Stored CRC-32C of bytes 21..end (unsigned)."""
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    def stamped(self, base_offset: int, partition_leader_epoch: int) -> BatchHeader:
        """This header with the two fields :func:`stamp_batch` writes replaced."""
        return _new_header(
            BatchHeader, (base_offset, self.batch_length, partition_leader_epoch, *self[3:])
        )

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """The offset right after this batch (the LEO once it is appended)."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping past INT32_MAX to 0 as Kafka's producer does.

        NO_SEQUENCE when the batch carries none.
        """
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (_INT32_MAX + 1)

    @property
    def compression(self) -> int:
        """Compression codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def compression_name(self) -> str:
        return COMPRESSION_NAMES.get(self.compression, f"unknown({self.compression})")

    @property
    def is_log_append_time(self) -> bool:
        """True when the timestamps are the broker's LogAppendTime (maxTimestamp)."""
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_producer_id(self) -> bool:
        """True for a batch from an idempotent producer."""
        return self.producer_id != NO_PRODUCER_ID


_new_header = tuple.__new__
"""``_new_header(BatchHeader, fields)`` is ``BatchHeader(*fields)`` without the argument
parsing of the generated ``__new__``: the fields come whole from ``_HEADER.unpack_from``."""


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """The header of the batch at ``pos``, unchecked.

    Raises CorruptRecordError when fewer than HEADER_SIZE bytes are left.
    """
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(
            f"batch at position {pos}: truncated header "
            f"({max(len(buf) - pos, 0)} of {HEADER_SIZE} bytes)"
        )
    return _new_header(BatchHeader, _HEADER.unpack_from(buf, pos))


# -- validation ------------------------------------------------------------------------------


# The checks, split by what a scanner can do after a failure (see BatchScan). check_batch
# runs the same checks in one expression and calls these only to name a failure.


def _framing_problem(header: BatchHeader, available: int) -> str | None:
    """What makes the batch unusable as a unit: its length or magic (None when fine).

    Past a framing problem nothing after the batch can be located, so scanners stop there.
    """
    if header.batch_length < MIN_BATCH_LENGTH:
        return f"batch length {header.batch_length} is below the minimum {MIN_BATCH_LENGTH}"
    if header.size > available:
        return (
            f"batch length {header.batch_length} needs {header.size} bytes "
            f"but only {available} remain"
        )
    if header.magic != MAGIC:
        return f"magic byte is {header.magic}, only {MAGIC} (record batch v2) is supported"
    return None


def _crc_problem(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> str | None:
    with memoryview(buf) as view:
        computed = compute_crc(view[pos + ATTRIBUTES_OFFSET : pos + header.size])
    if computed != header.crc:
        return f"CRC mismatch (stored 0x{header.crc:08x}, computed 0x{computed:08x})"
    return None


def _count_problem(header: BatchHeader) -> str | None:
    """Record count against the offset range and the space the records occupy.

    A stored batch holds at most ``lastOffsetDelta + 1`` records: fewer once the log
    cleaner removed some (it keeps the batch's offsets, so its last offset stays), none in
    the empty batch it keeps for a producer's last sequence (docs/storage.md, "Compacted
    logs"). A produced batch must hold exactly that many (:func:`client_count_problem`).
    The size bound catches a count too large for the bytes without decoding the records
    (only for uncompressed batches).
    """
    count = header.record_count
    if header.last_offset_delta < 0:
        return f"lastOffsetDelta is {header.last_offset_delta}: a batch spans one offset or more"
    if count < 0:
        return f"record count is {count}"
    if count > header.last_offset_delta + 1:
        return (
            f"record count {count} exceeds the {header.last_offset_delta + 1} offsets its "
            f"lastOffsetDelta {header.last_offset_delta} spans"
        )
    records_size = header.size - HEADER_SIZE
    if header.compression == 0 and count * MIN_RECORD_SIZE > records_size:
        return f"record count {count} cannot fit in {records_size} bytes of records"
    return None


def client_count_problem(header: BatchHeader) -> str | None:
    """What is wrong with a produced batch's record count, or None: Kafka's LogValidator
    refuses a v2 batch whose count is not ``lastOffsetDelta + 1`` ("Inconsistent batch
    offset range and record count"), so no client can make the leader skip offsets."""
    count = header.record_count
    if count < 1:
        return f"record count is {count}, a batch holds at least one record"
    if count != header.last_offset_delta + 1:
        return (
            f"record count {count} does not match lastOffsetDelta {header.last_offset_delta} "
            f"(which implies {header.last_offset_delta + 1} records)"
        )
    return None


def check_batch(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Validate the batch at ``pos`` without decoding its records; return its header.

    Checks, in order: a whole header is present, batchLength >= 49, the whole batch is
    present, magic == 2, the CRC-32C, and 0 <= recordCount <= lastOffsetDelta + 1 (plus,
    uncompressed, that many records fit in the bytes). The broker runs it on every produced
    and fetched batch (the leader then checks the records: broker.log.log_validator). Raises
    CorruptRecordError naming the problem.
    """
    with memoryview(buf) as view:
        return _new_header(BatchHeader, _checked_fields(view, pos))


def _checked_fields(view: memoryview, pos: int) -> tuple[int, ...]:
    """The header fields of the batch at ``pos``, once it passes check_batch's checks."""
    available = len(view) - pos
    if available < HEADER_SIZE:
        parse_header(view, pos)  # raises, naming the truncated header
    fields: tuple[int, ...] = _HEADER.unpack_from(view, pos)
    _, length, _, magic, crc, attributes, last_offset_delta, _, _, _, _, _, count = fields
    size = length + LOG_OVERHEAD
    # The checks of _framing_problem, _crc_problem and _count_problem in their order, as
    # one expression on local names: on the produce path, calling those and reading the
    # header's properties took half as long as the CRC of a 16 KiB batch.
    if (
        size >= HEADER_SIZE
        and size <= available
        and magic == MAGIC
        and _crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size]) == crc
        and 0 <= count <= last_offset_delta + 1
        and last_offset_delta >= 0
        and (attributes & COMPRESSION_CODEC_MASK or count * MIN_RECORD_SIZE <= size - HEADER_SIZE)
    ):
        return fields
    header = _new_header(BatchHeader, fields)
    problem = (
        _framing_problem(header, available)
        or _crc_problem(view, pos, header)
        or _count_problem(header)
    )
    raise CorruptRecordError(f"batch at position {pos}: {problem}")


def validate_batches(buf: bytes | bytearray | memoryview) -> list[BatchHeader]:
    """Check every batch of a buffer of concatenated batches; return their headers.

    The buffer must consist of whole valid batches only: trailing bytes that do not form a
    batch raise CorruptRecordError like any other problem. An empty buffer gives ``[]``.
    """
    headers = []
    pos = 0
    with memoryview(buf) as view:
        end = len(view)
        while pos < end:
            header = _new_header(BatchHeader, _checked_fields(view, pos))
            headers.append(header)
            pos += header.batch_length + LOG_OVERHEAD
    return headers


def assign_offsets(
    buf: bytes | bytearray | memoryview, base_offset: int, partition_leader_epoch: int
) -> list[BatchHeader]:
    """Check every batch as :func:`validate_batches` does; return the headers the leader
    writes: base offsets consecutive from ``base_offset``, and ``partition_leader_epoch``.

    Kafka's ``LogValidator.assignOffsetsNonCompressed``, except that ``buf`` is not
    changed: :func:`stamped_buffers` gives the bytes with these headers to write.
    """
    headers = []
    pos = 0
    offset = base_offset
    with memoryview(buf) as view:
        end = len(view)
        while pos < end:
            fields = _checked_fields(view, pos)
            header = _new_header(
                BatchHeader, (offset, fields[1], partition_leader_epoch, *fields[3:])
            )
            headers.append(header)
            pos += header.batch_length + LOG_OVERHEAD
            offset += header.last_offset_delta + 1
    return headers


def with_offsets(
    headers: Sequence[BatchHeader], base_offset: int, partition_leader_epoch: int
) -> list[BatchHeader]:
    """``headers`` (of batches already checked) as the leader writes them: base offsets
    consecutive from ``base_offset``, and ``partition_leader_epoch``.

    :func:`assign_offsets` without the checks, for batches validated before (the leader
    validates outside its log's lock and assigns offsets under it).
    """
    stamped = []
    offset = base_offset
    for header in headers:
        stamped.append(
            _new_header(BatchHeader, (offset, header[1], partition_leader_epoch, *header[3:]))
        )
        offset += header.last_offset_delta + 1
    return stamped


def stamp_batch(
    buf: bytearray | memoryview, pos: int, base_offset: int, partition_leader_epoch: int
) -> None:
    """Write baseOffset and partitionLeaderEpoch of the batch at ``pos`` in place.

    Both fields lie outside the CRC, so the batch stays valid without re-encoding.
    """
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)


def stamped_buffers(
    buf: bytes | bytearray | memoryview, headers: Sequence[BatchHeader]
) -> list[bytes | memoryview]:
    """The batches of ``buf`` with the baseOffset and partitionLeaderEpoch of ``headers``,
    as buffers for one vectored write (``os.pwritev``), leaving ``buf`` unchanged.

    ``headers`` are those of the batches of ``buf``, in order, with the two fields to write
    (:meth:`BatchHeader.stamped`). Per batch there are two buffers: its first 16 bytes
    (baseOffset, batchLength, partitionLeaderEpoch) packed anew, and a view of the rest of
    ``buf``. Writing them gives the bytes :func:`stamp_batch` gives on a copy, without
    copying the batch: the stamp costs one small ``bytes`` instead of a copy of the whole.
    """
    buffers: list[bytes | memoryview] = []
    pos = 0
    view = memoryview(buf)  # not released here: the slices returned hold the buffer anyway
    for header in headers:
        end = pos + header.batch_length + LOG_OVERHEAD
        buffers.append(
            _STAMPED_PREFIX.pack(
                header.base_offset, header.batch_length, header.partition_leader_epoch
            )
        )
        buffers.append(view[pos + MAGIC_OFFSET : end])
        pos = end
    return buffers


# -- scanning --------------------------------------------------------------------------------


class ScannedBatch(NamedTuple):
    """One batch found by :func:`scan_batches`."""

    position: int
    """Byte position of the batch in the scanned buffer."""
    header: BatchHeader
    crc_ok: bool
    problem: str | None
    """Why check_batch would reject the batch (CRC or record count), None if it is valid."""


class BatchScan:
    """Walk the batches of a buffer, reporting where and why the walk ended.

    Iterating yields every batch that is framed soundly (whole, sane length, magic 2),
    whether or not its CRC holds, so that ``dump-log`` can show damaged batches and go on.
    It stops without raising at the end of the buffer or at the first framing problem; then
    :attr:`end_position`, :attr:`stop_problem` (:attr:`stop_reason` with the position),
    :attr:`incomplete` and :attr:`needed` say
    where and why. Recovery stops earlier itself, at the first batch with a ``problem``.
    """

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> None:
        self._buf = buf
        self._start = pos
        self.end_position = pos
        """Position after the last batch yielded: where the valid framing ends."""
        self.stop_problem: str | None = None
        """Why the walk stopped early, without the position; None when it reached the end of
        the buffer exactly at a batch boundary."""
        self.incomplete = False
        """True when the buffer ended inside a batch (a torn tail, or more data to read)."""
        self.needed = 0
        """When incomplete: bytes needed from end_position to hold the batch (or its header)."""

    @property
    def stop_reason(self) -> str | None:
        """``stop_problem`` with the position: ``batch at position N: ...``."""
        if self.stop_problem is None:
            return None
        return f"batch at position {self.end_position}: {self.stop_problem}"

    def __iter__(self) -> Iterator[ScannedBatch]:
        buf = self._buf
        end = len(buf)
        pos = self._start
        while pos < end:
            available = end - pos
            if available < HEADER_SIZE:
                self._stop_incomplete(pos, available)
                return
            header = parse_header(buf, pos)
            problem = _framing_problem(header, available)
            if problem is not None:
                self.end_position = pos
                self.stop_problem = problem
                if header.batch_length >= MIN_BATCH_LENGTH and header.size > available:
                    self.incomplete = True
                    self.needed = header.size
                return
            crc_problem = _crc_problem(buf, pos, header)
            yield ScannedBatch(
                pos, header, crc_problem is None, crc_problem or _count_problem(header)
            )
            pos += header.size
            self.end_position = pos

    def _stop_incomplete(self, pos: int, available: int) -> None:
        self.end_position = pos
        self.incomplete = True
        self.needed = HEADER_SIZE
        if available >= LOG_OVERHEAD:
            (length,) = _INT32.unpack_from(self._buf, pos + BATCH_LENGTH_OFFSET)
            if length < MIN_BATCH_LENGTH:
                self.incomplete = False
                self.needed = 0
                self.stop_problem = f"batch length {length} is below the minimum {MIN_BATCH_LENGTH}"
                return
            self.needed = length + LOG_OVERHEAD
        self.stop_problem = f"truncated header ({available} of {HEADER_SIZE} bytes)"


def scan_batches(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchScan:
    """A :class:`BatchScan` of ``buf`` from ``pos``; iterate it, then read its stop fields."""
    return BatchScan(buf, pos)


# -- varints ---------------------------------------------------------------------------------


def _unsigned_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Record lengths, offset deltas, key/value sizes and small timestamp deltas fall here.
_SMALL_MIN, _SMALL_MAX = -64, 8192
_SMALL_VARINTS = [_unsigned_varint((n << 1) ^ (n >> 63)) for n in range(_SMALL_MIN, _SMALL_MAX)]


def encode_varint(value: int) -> bytes:
    """Zig-zag base-128 encoding of a signed 32-bit value (1 to 5 bytes)."""
    if _SMALL_MIN <= value < _SMALL_MAX:
        return _SMALL_VARINTS[value - _SMALL_MIN]
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ValueError(f"varint value {value} does not fit in 32 bits")
    return _unsigned_varint((value << 1) ^ (value >> 31))


def encode_varlong(value: int) -> bytes:
    """Zig-zag base-128 encoding of a signed 64-bit value (1 to 10 bytes)."""
    if _SMALL_MIN <= value < _SMALL_MAX:
        return _SMALL_VARINTS[value - _SMALL_MIN]
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"varlong value {value} does not fit in 64 bits")
    return _unsigned_varint((value << 1) ^ (value >> 63))


def _decode_zigzag(
    buf: bytes | bytearray | memoryview, pos: int, max_bytes: int, bits: int
) -> tuple[int, int]:
    raw = 0
    shift = 0
    end = len(buf)
    for i in range(max_bytes):
        if pos + i >= end:
            raise CorruptRecordError(f"varint at position {pos} runs past the end of the data")
        byte = buf[pos + i]
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            if raw >> bits:
                raise CorruptRecordError(f"varint at position {pos} overflows {bits} bits")
            return (raw >> 1) ^ -(raw & 1), pos + i + 1
        shift += 7
    raise CorruptRecordError(f"varint at position {pos} is longer than {max_bytes} bytes")


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zig-zag varint at ``pos``: (value, position after it).

    Raises CorruptRecordError for a varint longer than 5 bytes, one overflowing 32 bits, or
    one cut off by the end of the buffer.
    """
    if pos < len(buf) and buf[pos] < 0x80:
        byte = buf[pos]
        return (byte >> 1) ^ -(byte & 1), pos + 1
    return _decode_zigzag(buf, pos, 5, 32)


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zig-zag varlong at ``pos`` (at most 10 bytes, 64 bits); see decode_varint."""
    if pos < len(buf) and buf[pos] < 0x80:
        byte = buf[pos]
        return (byte >> 1) ^ -(byte & 1), pos + 1
    return _decode_zigzag(buf, pos, 10, 64)


# -- records ---------------------------------------------------------------------------------


class Record(NamedTuple):
    """One record: what a producer sends and a consumer gets back.

    When encoding, ``offset`` is ignored (a record's offset delta is its index in the batch)
    and ``timestamp`` is the record's CreateTime in ms. When decoding, both are absolute.
    """

    key: bytes | None
    value: bytes | None
    timestamp: int = NO_TIMESTAMP
    headers: tuple[tuple[str, bytes | None], ...] = ()
    offset: int = 0


class DecodedBatch(NamedTuple):
    """A batch decoded by :func:`decode_batch`."""

    header: BatchHeader
    records: list[Record]


def _encode_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += b"\x01"  # zig-zag -1: null
    else:
        out += encode_varint(len(data))
        out += data


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> bytes:
    """One record as a v2 batch holds it, its length varint first."""
    part = bytearray(b"\x00")  # record attributes: unused in v2
    part += encode_varlong(timestamp_delta)
    part += encode_varint(offset_delta)
    _encode_bytes(part, key)
    _encode_bytes(part, value)
    part += encode_varint(len(headers))
    for header_key, header_value in headers:
        _encode_bytes(part, header_key.encode("utf-8"))
        _encode_bytes(part, header_value)
    return encode_varint(len(part)) + part


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    base_timestamp: int | None = None,
    compression: int = 0,
    flags: int = 0,
) -> bytes:
    """Encode ``records`` as one v2 batch (CreateTime timestamps), its records compressed
    with the codec id ``compression`` (0: none; proto.records.compression), with the
    attribute ``flags`` given (TRANSACTIONAL_FLAG_MASK for a transactional producer's batch,
    with CONTROL_FLAG_MASK for a marker's).

    ``base_timestamp`` defaults to the first record's timestamp, as Kafka's builder does;
    maxTimestamp is the largest record timestamp. Raises ValueError for an empty batch or
    a field that does not fit the format.
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    if base_timestamp is None:
        base_timestamp = records[0].timestamp
    body = bytearray()
    max_timestamp = NO_TIMESTAMP
    for delta, record in enumerate(records):
        timestamp = record.timestamp
        if timestamp > max_timestamp:
            max_timestamp = timestamp
        body += encode_record(
            delta, timestamp - base_timestamp, record.key, record.value, record.headers
        )
    count = len(records)
    producer = (producer_id, producer_epoch, base_sequence)
    if compression:
        body = bytearray(compress(compression, body))
    if HEADER_SIZE + len(body) - LOG_OVERHEAD > _INT32_MAX:
        raise ValueError(f"batch of {len(body)} bytes of records is too large for the format")
    # attributes: the codec, CreateTime, the transactional and control flags
    if flags & ~(TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK):
        raise ValueError(f"attribute flags {flags:#x} are not the transactional and control bits")
    fields = (compression | flags, count - 1, base_timestamp, max_timestamp)
    return _framed(base_offset, partition_leader_epoch, (*fields, *producer), count, body)


def _framed(
    base_offset: int,
    partition_leader_epoch: int,
    fields: tuple[int, ...],
    count: int,
    body: bytes | bytearray,
) -> bytes:
    """A batch of ``body`` (its records, as stored): ``fields`` are attributes ..
    baseSequence, the batch length and CRC are computed."""
    covered = _CRC_COVERED_HEADER.pack(*fields, count) + body
    prefix = _PREFIX.pack(
        base_offset,
        len(covered) + ATTRIBUTES_OFFSET - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC,
        compute_crc(covered),
    )
    return prefix + covered


MAX_RECORDS_BYTES = 64 * 1024 * 1024
"""The most a compressed batch's records may inflate to: the leader refuses a batch that
holds more (docs/storage.md, "Compressed records"), so every reader can inflate what a
leader stored. Kafka has no such bound; a producer's batch is far smaller (batch.size is
16 KiB for Kafka's Java producer and 1 MB for librdkafka, before compression)."""


def inflated(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader
) -> tuple[bytes, BatchHeader]:
    """The compressed batch at ``pos`` (``header``, already checked) as the uncompressed
    batch it holds: the same header fields with codec 0 and the batch length of the
    inflated records, and its bytes from position 0. Its CRC is not recomputed: it is only
    for decoding the records, never for storing. Raises CorruptRecordError
    (CompressedRecordsError) for records that do not inflate within MAX_RECORDS_BYTES, or
    a codec id that names no codec (5-7)."""
    if header.compression not in COMPRESSION_NAMES:
        raise CompressedRecordsError(
            f"batch at position {pos}: compression codec id {header.compression} does not "
            "exist (codec ids are 0-4)"
        )
    start = pos + RECORDS_OFFSET
    try:
        records = decompress(header.compression, buf[start : pos + header.size], MAX_RECORDS_BYTES)
    except CompressedRecordsError as e:
        raise type(e)(f"batch at position {pos}: {e.reason}") from None
    plain = header._replace(
        attributes=header.attributes & ~COMPRESSION_CODEC_MASK,
        batch_length=RECORDS_OFFSET - LOG_OVERHEAD + len(records),
    )
    return bytes(buf[pos:start]) + records, plain


def recompressed(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader, codec: int
) -> bytes:
    """The batch at ``pos`` (``header``, already checked) with its records stored in ``codec``
    (0: uncompressed): every header field kept but the codec bits, the batch length and the
    CRC, which the new bytes get. Records are codec-independent bytes, so they are inflated
    and compressed again, never re-encoded (Kafka's leader rebuilds them record by record
    when a topic's ``compression.type`` names another codec). Raises as :func:`inflated`."""
    if header.compression:
        records: bytes | bytearray | memoryview = inflated(buf, pos, header)[0][RECORDS_OFFSET:]
    else:
        records = buf[pos + RECORDS_OFFSET : pos + header.size]
    body = compress(codec, records) if codec else bytes(records)
    attributes = (header.attributes & ~COMPRESSION_CODEC_MASK) | codec
    fields = (attributes, header.last_offset_delta, header.base_timestamp, header.max_timestamp)
    producer = (header.producer_id, header.producer_epoch, header.base_sequence)
    return _framed(
        header.base_offset,
        header.partition_leader_epoch,
        (*fields, *producer),
        header.record_count,
        body,
    )


def retained_batch(header: BatchHeader, records: Sequence[Record]) -> bytes:
    """The batch ``header`` heads holding only ``records`` (some of its own, in order, with
    their offsets and timestamps): what the log cleaner writes for a batch it removed
    records from. Its base offset, lastOffsetDelta (so its last offset and, for an
    idempotent producer, its last sequence), partition leader epoch, producer fields and
    codec stay; maxTimestamp is the retained records' (Kafka's ``buildRetainedRecordsInto``).
    An empty ``records`` gives the empty batch Kafka keeps for a producer's last batch."""
    base = header.base_offset
    body = bytearray()
    max_timestamp = NO_TIMESTAMP if records else header.max_timestamp
    for record in records:
        if record.timestamp > max_timestamp:
            max_timestamp = record.timestamp
        body += encode_record(
            record.offset - base,
            record.timestamp - header.base_timestamp,
            record.key,
            record.value,
            record.headers,
        )
    if header.is_log_append_time:
        max_timestamp = header.max_timestamp
    if header.compression and records:
        body = bytearray(compress(header.compression, body))
    fields = (header.attributes, header.last_offset_delta, header.base_timestamp, max_timestamp)
    producer = (header.producer_id, header.producer_epoch, header.base_sequence)
    return _framed(base, header.partition_leader_epoch, (*fields, *producer), len(records), body)


def batch_tail(buf: bytes | bytearray | memoryview, pos: int, offset: int) -> bytes:
    """The batch at ``pos`` cut at ``offset``: a batch starting at ``offset`` that holds
    the records from ``offset`` on, each at its own offset, with its own timestamp and (for
    an idempotent producer) its own sequence.

    For a follower whose log ends inside a batch of the leader's (the high-watermark
    truncation mode, docs/replication.md): it can hold the rest of that batch, never the
    part that overlaps its log. The last offset, partition leader epoch, producer fields,
    codec and flags stay; the base sequence moves with the base offset (a record's sequence
    is baseSequence + offsetDelta); maxTimestamp is the kept records' (a LogAppendTime
    batch's stays). Records are decoded and encoded again, so this is for the rare batch
    that needs it, never the hot path. Raises ValueError unless the batch holds ``offset``
    above its base offset, CorruptRecordError for a batch that does not decode.
    """
    header, records = decode_batch(buf, pos)
    if not header.base_offset < offset <= header.last_offset:
        raise ValueError(
            f"offset {offset} is not inside the batch {header.base_offset}..{header.last_offset} "
            "above its base offset"
        )
    kept = [record for record in records if record.offset >= offset]
    body = bytearray()
    max_timestamp = NO_TIMESTAMP if kept else header.max_timestamp
    for record in kept:
        if record.timestamp > max_timestamp:
            max_timestamp = record.timestamp
        body += encode_record(
            record.offset - offset,
            record.timestamp - header.base_timestamp,
            record.key,
            record.value,
            record.headers,
        )
    if header.is_log_append_time:
        max_timestamp = header.max_timestamp
    if header.compression and kept:
        body = bytearray(compress(header.compression, body))
    sequence = header.base_sequence
    if sequence != NO_SEQUENCE:
        sequence = (sequence + offset - header.base_offset) % (_INT32_MAX + 1)
    fields = (header.attributes, header.last_offset - offset, header.base_timestamp, max_timestamp)
    producer = (header.producer_id, header.producer_epoch, sequence)
    return _framed(offset, header.partition_leader_epoch, (*fields, *producer), len(kept), body)


def offsets_placeholder(
    base_offset: int, last_offset: int, partition_leader_epoch: int, max_timestamp: int
) -> bytes:
    """An empty batch (no records, no producer) spanning ``base_offset`` .. ``last_offset``:
    it stands for batches the log cleaner removed whole, so that a log's batches still
    cover every offset from its start to its end (docs/storage.md, "Compacted logs")."""
    fields = (0, last_offset - base_offset, max_timestamp, max_timestamp)
    producer = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE)
    return _framed(base_offset, partition_leader_epoch, (*fields, *producer), 0, b"")


def holds_codec(buf: bytes | bytearray | memoryview, codec: int) -> bool:
    """Whether any whole batch header of ``buf`` (concatenated batches, a fetch's records
    possibly ending in part of one) names ``codec``. Headers only: nothing is checked."""
    pos = 0
    end = len(buf) - RECORDS_OFFSET
    while pos <= end:
        (length,) = _INT32.unpack_from(buf, pos + BATCH_LENGTH_OFFSET)
        (attributes,) = _INT16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
        if attributes & COMPRESSION_CODEC_MASK == codec:
            return True
        if length < MIN_BATCH_LENGTH:
            return False
        pos += LOG_OVERHEAD + length
    return False


def decode_batch(buf: bytes | bytearray | memoryview, pos: int = 0) -> DecodedBatch:
    """Validate (as check_batch) and decode the batch at ``pos``, compressed or not.

    Records get absolute offsets (baseOffset + offsetDelta) and timestamps (baseTimestamp +
    timestampDelta, or maxTimestamp for LogAppendTime batches, as Kafka's consumer does).
    Raises CorruptRecordError for an invalid batch, compressed records that do not inflate,
    or records that do not parse to exactly the batch's end. The header returned is the
    batch's as stored (its codec included).
    """
    header = check_batch(buf, pos)
    where = f"batch at position {pos}"
    if header.compression != 0:
        inflated_data, plain = inflated(buf, pos, header)
        records = _decode_records(inflated_data, 0, plain, f"{where} ({header.compression_name})")
        return DecodedBatch(header, records)
    data = bytes(buf[pos : pos + header.size]) if not isinstance(buf, bytes) else buf
    return DecodedBatch(header, _decode_records(data, pos if data is buf else 0, header, where))


def _decode_records(data: bytes, pos: int, header: BatchHeader, where: str) -> list[Record]:
    end = pos + header.size
    p = pos + RECORDS_OFFSET
    append_time = header.max_timestamp if header.is_log_append_time else None
    records: list[Record] = []
    previous = header.base_offset - 1
    for index in range(header.record_count):
        try:
            record, p = _decode_record(data, p, end, header, append_time)
            _check_offset(record.offset - header.base_offset, previous - header.base_offset, header)
        except CorruptRecordError as e:
            raise CorruptRecordError(f"{where}: record {index}: {e.reason}") from None
        previous = record.offset
        records.append(record)
    if p != end:
        raise CorruptRecordError(f"{where}: {end - p} bytes after the last record")
    return records


_RowT = TypeVar("_RowT", bound=tuple[Any, ...])


def decode_rows(
    data: bytes,
    pos: int,
    header: BatchHeader,
    row_type: type[_RowT],
    prefix: tuple[Any, ...] = (),
    min_offset: int = 0,
    where: str | None = None,
) -> list[_RowT]:
    """The records of a batch already checked (``check_batch`` or a clean ``scan_batches``
    entry at ``pos`` with ``header``) as rows ``row_type(*prefix, offset, key, value,
    timestamp, headers)``, skipping records below ``min_offset``: the consumer's bulk path.

    Validates every record as :func:`decode_batch` does, with the same messages, but
    decodes short varints inline, builds one object per record, not two (a ``row_type``
    NamedTuple is made with ``tuple.__new__``), and cuts runs of records of one layout
    (fixed-size records: :mod:`proto.records.layout`) out at their stride once their
    columns are checked, without walking each. A compressed batch is inflated first
    (:func:`inflated`). Raises CorruptRecordError.
    """
    where = where or f"batch at position {pos}"
    if header.compression != 0:
        inflated_data, plain = inflated(data, pos, header)
        named = f"{where} ({header.compression_name})"
        return decode_rows(inflated_data, 0, plain, row_type, prefix, min_offset, named)
    end = pos + header.size
    p = pos + RECORDS_OFFSET
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    append_time = header.max_timestamp if header.is_log_append_time else None
    new = tuple.__new__
    rows: list[_RowT] = []
    append = rows.append
    count = header.record_count
    last_delta = header.last_offset_delta
    previous = -1
    index = 0
    try:
        while index < count:
            start = p
            # Varints of one or two bytes are decoded inline (lengths up to 8191 and
            # offset deltas up to 8191 take two); longer ones by decode_varint.
            b = data[p]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                raw = (b & 0x7F) | (data[p + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                p += 2
            else:
                length, p = decode_varint(data, p)
            record_end = p + length
            if length < 0 or record_end > end:
                raise CorruptRecordError(f"length {length} does not fit in the batch")
            p += 1  # attributes: unused in v2
            timestamp_at = p
            b = data[p]
            if b < 0x80:
                timestamp_delta = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                timestamp_delta, p = decode_varlong(data, p)
            timestamp_width = p - timestamp_at
            b = data[p]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                raw = (b & 0x7F) | (data[p + 1] << 7)
                offset_delta = (raw >> 1) ^ -(raw & 1)
                p += 2
            else:
                offset_delta, p = decode_varint(data, p)
            if not previous < offset_delta <= last_delta:
                _check_offset(offset_delta, previous, header)
            previous = offset_delta
            if data[p] == 1:  # the common null key
                key = None
                p += 1
            else:
                key, p = _decode_bytes(data, p, record_end, "key")
            key_at = p - len(key) if key is not None else 0
            b = data[p]
            if b < 0x80:
                raw = b
                p += 1
            elif data[p + 1] < 0x80:
                raw = (b & 0x7F) | (data[p + 1] << 7)
                p += 2
            else:
                raw = -1
            if raw >= 0 and not raw & 1:  # a length >= 0 of one or two bytes
                n = raw >> 1
                if p + n > record_end:
                    raise CorruptRecordError(f"value length {n} does not fit in its record")
                value: bytes | None = data[p : p + n]
                p += n
            else:
                if raw >= 0:
                    p -= 1 if b < 0x80 else 2  # null or negative: decode_bytes says which
                value, p = _decode_bytes(data, p, record_end, "value")
            value_at = p - len(value) if value is not None else 0
            if data[p] == 0 and p + 1 == record_end:  # no headers: the common case
                headers: tuple[tuple[str, bytes | None], ...] = ()
                p += 1
            else:
                headers, p = _decode_headers(data, p, record_end, length)
            offset = base_offset + offset_delta
            if offset >= min_offset:
                timestamp = base_timestamp + timestamp_delta if append_time is None else append_time
                append(new(row_type, (*prefix, offset, key, value, timestamp, headers)))
            index += 1
            size = p - start
            if (
                index < count
                and not headers
                and data[p] == data[start]
                and p + size <= end
                and not data[p + size - 1]
            ):
                # The next records may share this one's layout: then they sit at this
                # stride and are cut out of it without a walk (proto.records.layout checks
                # every column of the run first, as the broker's validator does).
                run = same_layout_run(
                    data, start, size, index - 1, min(count - index + 1, (end - start) // size)
                )
                if run > 1:
                    _cut_run(
                        rows, data, start, size, run, base_offset + offset_delta,
                        (timestamp_at - start, timestamp_width, base_timestamp, append_time),
                        key_at - start if key is not None else -1, len(key or b""),
                        value_at - start if value is not None else -1, len(value or b""),
                        row_type, prefix, min_offset,
                    )  # fmt: skip
                    index += run - 1
                    previous = offset_delta + run - 1
                    p = start + run * size
    except CorruptRecordError as e:
        raise CorruptRecordError(f"{where}: record {index}: {e.reason}") from None
    except IndexError:
        raise CorruptRecordError(
            f"{where}: record {index}: runs past the end of the batch"
        ) from None
    if p != end:
        raise CorruptRecordError(f"{where}: {end - p} bytes after the last record")
    return rows


def _cut_run(
    rows: list[_RowT],
    data: bytes,
    start: int,
    size: int,
    run: int,
    first_offset: int,
    timestamps: tuple[int, int, int, int | None],
    key_at: int,
    key_length: int,
    value_at: int,
    value_length: int,
    row_type: type[_RowT],
    prefix: tuple[Any, ...],
    min_offset: int,
) -> None:
    """Append the rows of records 1 .. ``run - 1`` after the one at ``start``, which share
    its layout (``size`` bytes each; key and value at the same places, -1: null; the
    timestampDelta at the same place and as wide; offsets one apart).

    Every column is built by ``map``, ``zip`` and ``repeat``, in C: the values (and keys)
    are slices at the stride, the timestamps one value when their column is constant (one
    producer call's records share one), and each row is made by ``tuple.__new__`` over
    the zipped columns. Only timestamps that differ are decoded one by one.
    """
    timestamp_at, width, base_timestamp, append_time = timestamps
    skip = max(0, min_offset - first_offset - 1)
    first = 1 + skip
    if first >= run:
        return
    count = run - first
    begin = start + first * size
    stop = start + run * size
    offsets = range(first_offset + first, first_offset + run)
    values: Iterable[bytes | None] = (
        map(data.__getitem__, map(slice, range(begin + value_at, stop, size),
                                  range(begin + value_at + value_length, stop + size, size)))
        if value_at >= 0
        else repeat(None, count)
    )  # fmt: skip
    keys: Iterable[bytes | None] = (
        map(data.__getitem__, map(slice, range(begin + key_at, stop, size),
                                  range(begin + key_at + key_length, stop + size, size)))
        if key_at >= 0
        else repeat(None, count)
    )  # fmt: skip
    stamps: Iterable[int]
    if append_time is not None:
        stamps = repeat(append_time, count)
    elif width == 1:
        column = data[begin + timestamp_at : stop : size]
        if column.count(column[:1]) == count:
            b = column[0]
            stamps = repeat(base_timestamp + ((b >> 1) ^ -(b & 1)), count)
        else:
            stamps = [base_timestamp + ((b >> 1) ^ -(b & 1)) for b in column]
    else:
        stamps = [
            base_timestamp + decode_varlong(data, q + timestamp_at)[0]
            for q in range(begin, stop, size)
        ]
    columns = zip(
        *(repeat(field, count) for field in prefix), offsets, keys, values, stamps,
        repeat((), count), strict=True,
    )  # fmt: skip
    rows.extend(map(partial(tuple.__new__, row_type), columns))


def _decode_headers(
    data: bytes, p: int, record_end: int, length: int
) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    header_count, p = decode_varint(data, p)
    if header_count < 0:
        raise CorruptRecordError("negative header count")
    headers = []
    for _ in range(header_count):
        header_key, p = _decode_bytes(data, p, record_end, "header key")
        if header_key is None:
            raise CorruptRecordError("null header key")
        header_value, p = _decode_bytes(data, p, record_end, "header value")
        try:
            headers.append((header_key.decode("utf-8"), header_value))
        except UnicodeDecodeError:
            raise CorruptRecordError("header key is not UTF-8") from None
    if p != record_end:
        raise CorruptRecordError(
            f"length is {length} bytes but its fields take {p - record_end + length}"
        )
    return tuple(headers), p


def _check_offset(delta: int, previous: int, header: BatchHeader) -> None:
    """A record's offsetDelta must follow the one before it (``previous``, -1 for the first)
    and stay in the batch's offset range: equal to its index in a produced batch, with gaps
    where the log cleaner removed records."""
    if not previous < delta <= header.last_offset_delta:
        raise CorruptRecordError(
            f"offsetDelta {delta} does not follow {previous} within lastOffsetDelta "
            f"{header.last_offset_delta}"
        )


def _decode_record(
    data: bytes, p: int, end: int, header: BatchHeader, append_time: int | None
) -> tuple[Record, int]:
    length, p = decode_varint(data, p)
    record_end = p + length
    if length < 0 or record_end > end:
        raise CorruptRecordError(f"length {length} does not fit in the batch")
    p += 1  # attributes: unused in v2
    timestamp_delta, p = decode_varlong(data, p)
    offset_delta, p = decode_varint(data, p)
    key, p = _decode_bytes(data, p, record_end, "key")
    value, p = _decode_bytes(data, p, record_end, "value")
    headers, p = _decode_headers(data, p, record_end, length)
    timestamp = header.base_timestamp + timestamp_delta if append_time is None else append_time
    return Record(key, value, timestamp, headers, header.base_offset + offset_delta), p


def _decode_bytes(data: bytes, pos: int, limit: int, what: str) -> tuple[bytes | None, int]:
    length, pos = decode_varint(data, pos)
    if length == -1:
        return None, pos
    if length < -1 or pos + length > limit:
        raise CorruptRecordError(f"{what} length {length} does not fit in its record")
    return data[pos : pos + length], pos + length
