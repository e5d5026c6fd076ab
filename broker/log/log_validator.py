"""Kafka's ``LogValidator`` for leader appends: the leader stores only batches it can serve.

A follower copies the leader's batches byte for byte (checking their CRC only, as Kafka's
replica fetcher does), consumers and the audit decode them with
:func:`proto.records.record_batch.decode_batch`, and none of them can refuse a committed batch:
one batch they cannot decode makes its partition unreadable from that batch on. So the
leader checks every produced batch, records included, before any of it is written, and
refuses the whole append (nothing of it is written) with the error its first problem
gets. Both steps are pure over the bytes, so :class:`broker.log.log.Log` runs them before it
takes its lock:

1. :func:`proto.records.record_batch.validate_batches` (Kafka's ``Log.analyzeAndValidateRecords``):
   every batch whole, batchLength >= 49, magic 2, the CRC-32C, and 0 <= recordCount <=
   lastOffsetDelta + 1 (plus, uncompressed, room for that many records): what any stored
   batch satisfies, a cleaned one included.
   CORRUPT_MESSAGE (Kafka: INVALID_RECORD for the count against lastOffsetDelta, and for
   a magic other than 2 in a Produce request).
2. :func:`validate_client_batches` (``LogValidator`` with origin ``Client``), per batch:

   ======================================================= ===============================
   check                                                   error (Kafka's, where it differs)
   ======================================================= ===============================
   recordCount == lastOffsetDelta + 1 >= 1 (a cleaned      CORRUPT_MESSAGE (Kafka:
   batch may hold fewer; a produced one may not)           INVALID_RECORD, "Inconsistent
                                                           batch offset range and record
                                                           count")
   compression codec id is one of Kafka's (0-4)            CORRUPT_MESSAGE (Kafka: an
                                                           IllegalArgumentException from
                                                           ``CompressionType.forId``, which
                                                           its ReplicaManager answers
                                                           UNKNOWN_SERVER_ERROR, no message)
   not a control batch ("Clients are not allowed to        INVALID_RECORD
   write control records")
   not LogAppendTime (attribute bit 3): "Producer should   INVALID_TIMESTAMP
   not set timestamp type to LogAppendTime" (Kafka's
   ``validateTimestamp`` on a CreateTime topic, the only
   timestamp type here)
   a producer id comes with a sequence (baseSequence >= 0) INVALID_RECORD
   not transactional: there is no transaction             INVALID_RECORD (Kafka accepts
   coordinator here (KIP-98), so no marker would ever      them from a producer its
   end the transaction                                     coordinator knows)
   compressed (codec 1-4: gzip, snappy, lz4, zstd): the    CORRUPT_MESSAGE (Kafka:
   records inflate whole, within ``MAX_RECORDS_BYTES``     CORRUPT_MESSAGE for a payload
   (64 MiB: a bomb is refused without inflating past       its codec cannot read; it has
   it), and the checks below run on the inflated           no bound)
   records, as Kafka decompresses every record to check
   it
   every record parses as ``DefaultRecord.readFrom``       INVALID_RECORD
   reads it: its length varint and every field's
   varint/varlong whole and in range; length >= 0 and
   inside the batch; key and value lengths >= -1 and
   inside the record; header count >= 0 and no more than
   the bytes left; each header key non-null and UTF-8
   (as ``decode_batch`` requires: Kafka's Java decodes
   with replacement); header value lengths >= -1; the
   fields take exactly the record's length
   key or value length below -1                            INVALID_RECORD (Kafka reads a
                                                           null)
   each record's offsetDelta is its index                  INVALID_RECORD (Kafka does not
                                                           check it in an uncompressed
                                                           batch; it rewrites compressed
                                                           ones whose inner offsets are not
                                                           consecutive. The leader here
                                                           never rewrites records, so a
                                                           wrong delta would give readers
                                                           offsets it did not assign)
   exactly recordCount records, ending at the batch end    CORRUPT_MESSAGE (Kafka:
   (none missing, no bytes after the last)                 INVALID_RECORD, "Incorrect
                                                           declared batch size")
   ======================================================= ===============================

Kafka's checks not reproduced, and why:

- timestamp bounds (``message.timestamp.difference.max.ms``, KIP-937's before/after
  bounds): this broker has no ``message.timestamp.type`` and keeps the producer's
  timestamps; no timestamp makes a batch undecodable.
- a key on every record of a compacted topic: there is no log compaction
  (``cleanup.policy=compact``) here.
- one batch per partition per request (``ProduceRequest.validateRecords``, "Compressed
  outer record has more than one batch"): minibroker's Produce carries "one or more"
  concatenated batches per partition (proto/wire/minibroker.proto), and each is checked alone.
- message format conversion (magic 0 and 1): only magic 2 exists here.
- rewriting fields: Kafka's leader sets each batch's baseOffset, lastOffset, partition leader
  epoch and (for LogAppendTime) its timestamp type. Here the leader overwrites baseOffset and
  partitionLeaderEpoch, the two fields before the CRC
  (:func:`proto.records.record_batch.with_offsets`, stamped by the segment's write), whatever
  the producer sent in them; lastOffset is baseOffset + lastOffsetDelta in format v2; and a
  LogAppendTime attribute, which lies under the CRC, is refused instead of rewritten.
- producer ids: the leader's replica manager, not this module, refuses an id no broker
  handed out (:mod:`broker.replication.issued_producer_ids`); Kafka accepts any id.
- per-record error details (KIP-467's ``record_errors``): the Produce response has one
  error message per partition, which names the batch and the record.

Speed: checking the records is a walk over their varints in Python, with as little Python
per record as it can have (no object per record, local names, inline paths for one- and
two-byte varints): about 0.7 µs per record. Runs of records with one layout (the same
length, key and value sizes and varint widths, no headers: a batch of fixed-size records
has two, below and from index 64, where offsetDelta grows a byte) are checked as a whole
instead (proto.records.layout), a column of bytes at a time with extended slices: a few µs
per run, about 0.1 µs per record for 100-byte records. bench/RESULTS.md has the measured figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

from proto import errors
from proto.records.compression import codec_named
from proto.records.layout import same_layout_run
from proto.records.record_batch import (
    COMPRESSION_CODEC_MASK,
    COMPRESSION_NAMES,
    CONTROL_FLAG_MASK,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    CorruptRecordError,
    client_count_problem,
    decode_varint,
    decode_varlong,
    inflated,
    recompressed,
)

__all__ = ["recompressed_batches", "validate_client_batches"]

_REFUSED_ATTRIBUTES = (
    COMPRESSION_CODEC_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK | TIMESTAMP_TYPE_MASK
)
"""Attribute bits of which any one set needs a closer look (most batches have none)."""


class _Malformed(Exception):
    """The fast walk met something it does not accept; the slow one says what."""


def validate_client_batches(
    records: bytes | bytearray | memoryview, headers: Sequence[BatchHeader]
) -> None:
    """Check produced batches as Kafka's LogValidator does (see the module docstring).

    ``headers`` are the batches of ``records`` in order, as
    :func:`proto.records.record_batch.validate_batches` returns them (framing and CRC already
    checked). Raises, for the first problem found:

    - :class:`proto.records.record_batch.CorruptRecordError` (CORRUPT_MESSAGE): a codec id that
      does not exist, or records that do not number recordCount or do not end at the
      batch's end;
    - :class:`proto.records.compression.CompressedRecordsError` (a CorruptRecordError): a
      compressed batch whose records do not inflate, or inflate past MAX_RECORDS_BYTES;
    - :class:`proto.errors.InvalidTimestampError`: a batch with the LogAppendTime attribute;
    - :class:`proto.errors.InvalidRecordError`: a control or transactional batch, a
      producer id without a sequence, or a record that does not parse or whose
      offsetDelta is not its index.

    Each message names the batch's position in ``records`` (and its codec) and, for a
    record, its index.
    """
    data = records if not isinstance(records, memoryview) else records.tobytes()
    pos = 0
    for header in headers:
        size = header.batch_length + LOG_OVERHEAD
        if header.record_count != header.last_offset_delta + 1 or header.record_count < 1:
            raise CorruptRecordError(f"batch at position {pos}: {client_count_problem(header)}")
        if header.attributes & _REFUSED_ATTRIBUTES:
            _check_attributes(header, pos)
        if header.producer_id != NO_PRODUCER_ID and header.base_sequence < 0:
            raise errors.InvalidRecordError(
                f"batch at position {pos}: invalid sequence number {header.base_sequence} "
                f"in a batch with producer id {header.producer_id}"
            )
        if header.compression:
            _walk_compressed(data, pos, header)
        else:
            _walk_records(data, pos, pos + size, header.record_count)
        pos += size


def _walk_compressed(data: bytes | bytearray, pos: int, header: BatchHeader) -> None:
    """Inflate the compressed batch at ``pos`` and walk its records, as Kafka's
    ``validateMessagesAndAssignOffsetsCompressed`` reads every inner record."""
    batch, plain = inflated(data, pos, header)
    where = f"batch at position {pos} ({header.compression_name})"
    _walk_records(batch, 0, plain.size, plain.record_count, where)


def _check_attributes(header: BatchHeader, pos: int) -> None:
    where = f"batch at position {pos}"
    codec = header.attributes & COMPRESSION_CODEC_MASK
    if codec not in COMPRESSION_NAMES:
        # Kafka's CompressionType.forId throws IllegalArgumentException here, which its
        # ReplicaManager answers UNKNOWN_SERVER_ERROR: no codec, so no decodable records.
        raise CorruptRecordError(
            f"{where}: compression codec id {codec} does not exist "
            f"(attributes 0x{header.attributes & 0xFFFF:04x}; codec ids are 0-4)"
        )
    if header.is_control:
        raise errors.InvalidRecordError(
            f"{where}: clients are not allowed to write control records"
        )
    if header.attributes & TIMESTAMP_TYPE_MASK:
        raise errors.InvalidTimestampError(
            f"{where}: invalid timestamp type: a producer must not set the timestamp type to "
            f"LogAppendTime (attributes 0x{header.attributes & 0xFFFF:04x}); only a broker sets it"
        )
    if header.is_transactional and not header.has_producer_id:
        raise errors.InvalidRecordError(
            f"{where}: a transactional batch needs its producer's id and epoch"
        )


def recompressed_batches(
    records: bytes | bytearray | memoryview, headers: Sequence[BatchHeader], compression_type: str
) -> bytes | None:
    """The batches of ``records`` (checked by :func:`validate_client_batches`) as the leader
    stores them under the topic's ``compression.type``, or None when that is every batch as
    sent: ``producer``, or every batch already in the named codec. Otherwise each batch in
    another codec is recompressed (``uncompressed``: inflated) and the others kept, as
    Kafka's ``LogValidator`` recompresses when the target codec differs from the source's."""
    if compression_type == "producer":
        return None
    codec = codec_named(compression_type)
    if all(header.compression == codec for header in headers):
        return None
    out = bytearray()
    pos = 0
    for header in headers:
        end = pos + header.size
        if header.compression == codec:
            out += records[pos:end]
        else:
            out += recompressed(records, pos, header, codec)
        pos = end
    return bytes(out)


# -- the record walk -------------------------------------------------------------------------


def _walk_records(
    data: bytes | bytearray, batch_pos: int, end: int, count: int, where: str = ""
) -> None:
    """Check that the records of the batch at ``batch_pos`` (ending at ``end``) are exactly
    ``count`` well-formed records with offset deltas 0, 1, 2, ...

    ``where`` names the batch in errors (by default "batch at position ``batch_pos``").

    Varints are handled raw (zig-zag encoded, ``u``): a length n >= 0 is ``2n``, -1 is
    ``1``, any other odd value is negative; an offsetDelta equal to the index i is ``2i``.
    Every byte read is consumed before ``p`` is compared with the record's end, so a field
    reaching past the record (or past ``end``, into the next batch of ``data``) fails that
    comparison. Anything amiss goes to :func:`_record_problem`, which says what it is.
    """
    where = where or f"batch at position {batch_pos}"
    p = start = batch_pos + RECORDS_OFFSET
    index = 0
    try:
        while index < count:
            first = u = data[p]  # length
            if u < 0x80:
                p += 1
            else:
                b = data[p + 1]
                if b < 0x80:
                    u += (b << 7) - 0x80
                    p += 2
                else:
                    u, p = _varint(data, p, 5)
            record_end = p + (u >> 1)
            if u & 1 or record_end > end:
                break
            if data[p + 1] < 0x80:  # attributes (unused in v2), timestampDelta
                p += 2
            else:
                p = _varint(data, p + 1, 10)[1]
            u = data[p]  # offsetDelta
            if u < 0x80:
                p += 1
            else:
                b = data[p + 1]
                if b < 0x80:
                    u += (b << 7) - 0x80
                    p += 2
                else:
                    u, p = _varint(data, p, 5)
            if u != index << 1:
                break
            u = data[p]  # key length
            if u < 0x80:
                p += 1
            else:
                b = data[p + 1]
                if b < 0x80:
                    u += (b << 7) - 0x80
                    p += 2
                else:
                    u, p = _varint(data, p, 5)
            if not u & 1:
                p += u >> 1
            elif u != 1:
                break
            u = data[p]  # value length
            if u < 0x80:
                p += 1
            else:
                b = data[p + 1]
                if b < 0x80:
                    u += (b << 7) - 0x80
                    p += 2
                else:
                    u, p = _varint(data, p, 5)
            if not u & 1:
                p += u >> 1
            elif u != 1:
                break
            if data[p]:  # header count
                p = _skip_headers(data, p, record_end)
            else:
                p += 1
            if p != record_end:
                break
            index += 1
            size = p - start
            start = p
            if index < count and data[p] == first and p + size <= end and not data[p + size - 1]:
                # The next record may have this one's layout (its length begins alike and
                # a header count of 0 would end it): check the run at once.
                previous = p - size
                remaining = min(count - index + 1, (end - previous) // size)
                run = same_layout_run(data, previous, size, index - 1, remaining)
                start = p = previous + run * size
                index += run - 1
        else:
            if p == end:
                return
            raise CorruptRecordError(
                f"{where}: {end - p} bytes follow its last record (recordCount is {count})"
            )
    except (IndexError, _Malformed):
        pass
    _record_problem(data, where, start, end, index, count)


def _varint(data: bytes | bytearray, p: int, max_bytes: int) -> tuple[int, int]:
    """The raw (still zig-zag encoded) varint at ``p`` and the position after it.

    ``max_bytes`` is 5 for a varint (32 bits) and 10 for a varlong (64 bits); longer or
    overflowing ones raise _Malformed, as decode_varint rejects them.
    """
    raw = shift = 0
    for i in range(p, p + max_bytes):
        b = data[i]
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            if raw >> (32 if max_bytes == 5 else 64):
                raise _Malformed
            return raw, i + 1
        shift += 7
    raise _Malformed


def _skip_headers(data: bytes | bytearray, p: int, record_end: int) -> int:
    """Check a record's headers (count at ``p``); the position after them."""
    u, p = _varint(data, p, 5)
    if u & 1 or u > record_end - p:  # u is twice the count; a header takes two bytes or more
        raise _Malformed
    for _ in range(u >> 1):
        u, p = _varint(data, p, 5)  # key length: never null
        key_end = p + (u >> 1)
        if u & 1 or key_end > record_end:
            raise _Malformed
        try:
            data[p:key_end].decode("utf-8")
        except UnicodeDecodeError:
            raise _Malformed from None
        u, p = _varint(data, key_end, 5)  # value length
        if not u & 1:
            p += u >> 1
        elif u != 1:
            raise _Malformed
    return p


# -- saying what is wrong --------------------------------------------------------------------


def _record_problem(
    data: bytes | bytearray, where: str, start: int, end: int, index: int, count: int
) -> NoReturn:
    """Raise the error for record ``index`` at ``start`` of the batch ``where`` names,
    which the fast walk refused.

    The slow, careful parse of one record, field by field, each bounded by the record.
    """
    if start >= end:
        raise CorruptRecordError(
            f"{where}: its records end after {index} of the {count} its recordCount says"
        )
    rec = f"{where}: record {index}"
    batch = bytes(data[:end])

    def field(p: int, limit: int, what: str, *, wide: bool = False) -> tuple[int, int]:
        try:
            return (decode_varlong if wide else decode_varint)(batch[:limit], p)
        except CorruptRecordError as e:
            if "past the end" in e.reason:
                edge = "batch" if what == "length" else "record"
                problem = f"runs past the end of the {edge}"
            else:  # "varint at position N is longer than 5 bytes", "... overflows 32 bits"
                problem = "is malformed (" + e.reason.split(" ", 4)[-1] + ")"
            raise errors.InvalidRecordError(f"{rec}: its {what} varint {problem}") from None

    def sized(p: int, limit: int, what: str, *, nullable: bool = True) -> int:
        n, p = field(p, limit, f"{what} length")
        if n == -1 and nullable:
            return p
        if n == -1:
            raise errors.InvalidRecordError(f"{rec}: its {what} is null")
        if n < 0:
            raise errors.InvalidRecordError(f"{rec}: its {what} length is {n}")
        if p + n > limit:
            raise errors.InvalidRecordError(
                f"{rec}: its {what} length {n} does not fit in the record "
                f"({_bytes(limit - p)} left)"
            )
        return p + n

    length, p = field(start, end, "length")
    if length < 0:
        raise errors.InvalidRecordError(f"{rec}: its length is {length}")
    record_end = p + length
    if record_end > end:
        raise errors.InvalidRecordError(
            f"{rec}: its length {length} runs past the end of the batch ({_bytes(end - p)} left)"
        )
    fields_start = p
    p = field(p + 1, record_end, "timestampDelta", wide=True)[1]
    delta, p = field(p, record_end, "offsetDelta")
    if delta != index:
        raise errors.InvalidRecordError(
            f"{rec}: its offsetDelta is {delta}, not its index {index} (offset deltas "
            "count the records of a batch from 0)"
        )
    p = sized(p, record_end, "key")
    p = sized(p, record_end, "value")
    header_count, p = field(p, record_end, "header count")
    if header_count < 0:
        raise errors.InvalidRecordError(f"{rec}: its header count is {header_count}")
    if header_count * 2 > record_end - p:
        raise errors.InvalidRecordError(
            f"{rec}: its header count {header_count} cannot fit in the record "
            f"({_bytes(record_end - p)} left, and a header takes at least 2)"
        )
    for h in range(header_count):
        key_start = field(p, record_end, f"header {h} key length")[1]
        p = sized(p, record_end, f"header {h} key", nullable=False)
        try:
            batch[key_start:p].decode("utf-8")
        except UnicodeDecodeError:
            raise errors.InvalidRecordError(f"{rec}: its header {h} key is not UTF-8") from None
        p = sized(p, record_end, f"header {h} value")
    if p != record_end:
        raise errors.InvalidRecordError(
            f"{rec}: its length is {length} but its fields take {_bytes(p - fields_start)}"
        )
    # The fast walk refused a record this parse accepts: a bug in one of them.
    raise CorruptRecordError(f"{rec}: refused by the record walk (please report this)")


def _bytes(n: int) -> str:
    return f"{n} byte" if n == 1 else f"{n} bytes"
