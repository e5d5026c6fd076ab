"""Produced batches a leader must refuse, built byte by byte.

Every batch here has a valid CRC, so that the CRC check cannot mask the rule it breaks.
Shared by the validator's and the log's unit tests and the broker's bad-input test.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import cramjam
import crc32c

from proto.records.compression import Codec, compress
from proto.records.record_batch import (
    MAX_RECORDS_BYTES,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    encode_varint,
)
from proto.wire.minibroker_pb2 import ErrorCode

_CRC_COVERED_HEADER = struct.Struct(">hiqqqhii")  # attributes .. recordCount
_PREFIX = struct.Struct(">qiibI")  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc


def _sized(data: bytes | None, length: int | None = None) -> bytes:
    if data is None:
        return encode_varint(-1 if length is None else length)
    return encode_varint(len(data) if length is None else length) + data


def raw_record(
    offset_delta: int,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: tuple[tuple[bytes | None, bytes | None], ...] = (),
    *,
    length_delta: int = 0,
    key_length: int | None = None,
    header_count: int | None = None,
) -> bytes:
    """One record's bytes; the keyword arguments make it lie about its sizes."""
    body = bytearray(b"\x00\x00")  # attributes, timestampDelta 0
    body += encode_varint(offset_delta)
    body += _sized(key, key_length)
    body += _sized(value)
    body += encode_varint(len(headers) if header_count is None else header_count)
    for header_key, header_value in headers:
        body += _sized(header_key)
        body += _sized(header_value)
    return encode_varint(len(body) + length_delta) + bytes(body)


def raw_records(count: int) -> bytes:
    """``count`` well-formed records, offset deltas 0 .. count - 1."""
    return b"".join(raw_record(i, b"k%d" % i, b"value-%d" % i) for i in range(count))


def raw_batch(
    records: bytes,
    count: int,
    *,
    attributes: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
) -> bytes:
    """A batch of ``records`` (raw bytes) claiming ``count`` records, with a valid CRC."""
    covered = (
        _CRC_COVERED_HEADER.pack(
            attributes, count - 1, 0, 0, producer_id, producer_epoch, base_sequence, count
        )
        + records
    )
    return _PREFIX.pack(0, len(covered) + 9, -1, 2, crc32c.crc32c(covered)) + covered


@dataclass(frozen=True)
class Poison:
    """A batch the leader must refuse, and how."""

    name: str
    batch: bytes
    code: int
    """The ErrorCode the partition's produce response must carry."""
    fragment: str
    """Part of the error message (lower case), saying what is wrong."""


def gzip_batch_claiming_2_31_records() -> bytes:
    """The probe's 91-byte "gzip" batch claiming 2^31 - 1 records: 30 bytes of junk where a
    compressed payload would be. Stored, it would move the log end offset by 2^31."""
    batch = raw_batch(b"\x1f\x8b" + b"\x00" * 28, 2**31 - 1, attributes=1)
    assert len(batch) == 91
    return batch


def zstd_bomb(*, content_size: bool) -> bytes:
    """A zstd batch of 2 KiB whose records inflate to one byte more than MAX_RECORDS_BYTES
    of zeros; with ``content_size`` its frame header says so (one-shot compression writes
    the size), without it (a streaming compressor's frame) only inflating finds out."""
    zeros = bytes(MAX_RECORDS_BYTES + 1)
    if content_size:
        payload = compress(Codec.ZSTD, zeros)
    else:
        compressor = cramjam.zstd.Compressor(3)
        compressor.compress(zeros)
        payload = bytes(compressor.finish())
    return raw_batch(payload, 3, attributes=Codec.ZSTD)


POISONS = [
    Poison(
        "gzip-bits-over-plain-records",
        raw_batch(raw_records(3), 3, attributes=Codec.GZIP),
        ErrorCode.CORRUPT_MESSAGE,
        "gzip payload of 48 bytes does not decompress",
    ),
    Poison(
        "zstd-bomb-with-content-size",
        zstd_bomb(content_size=True),
        ErrorCode.CORRUPT_MESSAGE,
        "decompresses to more than 67108864 bytes",
    ),
    Poison(
        "zstd-bomb-without-content-size",
        zstd_bomb(content_size=False),
        ErrorCode.CORRUPT_MESSAGE,
        "decompresses to more than 67108864 bytes",
    ),
    Poison(
        "lz4-fewer-records-than-record-count",
        raw_batch(compress(Codec.LZ4, raw_records(2)), 3, attributes=Codec.LZ4),
        ErrorCode.CORRUPT_MESSAGE,
        "(lz4): its records end after 2 of the 3 its recordcount says",
    ),
    Poison(
        "zstd-more-records-than-record-count",
        raw_batch(compress(Codec.ZSTD, raw_records(3)), 2, attributes=Codec.ZSTD),
        ErrorCode.CORRUPT_MESSAGE,
        "(zstd): ",
    ),
    Poison(
        "gzip-wrong-offset-delta",
        raw_batch(compress(Codec.GZIP, raw_record(0) + raw_record(2)), 2, attributes=Codec.GZIP),
        ErrorCode.INVALID_RECORD,
        "(gzip): record 1: its offsetdelta is 2, not its index 1",
    ),
    Poison(
        "snappy-truncated-payload",
        raw_batch(compress(Codec.SNAPPY, raw_records(300))[:-3], 300, attributes=Codec.SNAPPY),
        ErrorCode.CORRUPT_MESSAGE,
        "snappy-java block at byte 16",
    ),
    Poison(
        "lz4-key-length-past-the-record",
        raw_batch(compress(Codec.LZ4, raw_record(0, b"abc", key_length=50)), 1, attributes=3),
        ErrorCode.INVALID_RECORD,
        "(lz4): record 0: its key length 50 does not fit in the record",
    ),
    Poison(
        "codec-7",
        raw_batch(raw_records(3), 3, attributes=7),
        ErrorCode.CORRUPT_MESSAGE,
        "compression codec id 7 does not exist",
    ),
    Poison(
        "control-bit",
        raw_batch(raw_records(1), 1, attributes=0x20),
        ErrorCode.INVALID_RECORD,
        "not allowed to write control records",
    ),
    Poison(
        "log-append-time-bit",
        raw_batch(raw_records(2), 2, attributes=0x08),
        ErrorCode.INVALID_TIMESTAMP,
        "must not set the timestamp type to logappendtime",
    ),
    Poison(
        "transactional-bit-without-producer",
        raw_batch(raw_records(2), 2, attributes=0x10),
        ErrorCode.INVALID_RECORD,
        "a transactional batch needs its producer's id and epoch",
    ),
    Poison(
        "length-longer-than-fields",
        raw_batch(raw_record(0, length_delta=1) + raw_record(1), 2),
        ErrorCode.INVALID_RECORD,
        "record 0: its length is 9 but its fields take 8 bytes",
    ),
    Poison(
        "length-shorter-than-fields",
        raw_batch(raw_record(0, length_delta=-1) + raw_record(1), 2),
        ErrorCode.INVALID_RECORD,
        "record 0: its header count varint runs past the end of the record",
    ),
    Poison(
        "length-past-the-batch",
        raw_batch(raw_record(0) + raw_record(1, length_delta=3), 2),
        ErrorCode.INVALID_RECORD,
        "record 1: its length 11 runs past the end of the batch (8 bytes left)",
    ),
    Poison(
        "key-length-past-the-record",
        raw_batch(raw_record(0, b"abc", key_length=50), 1),
        ErrorCode.INVALID_RECORD,
        "record 0: its key length 50 does not fit in the record",
    ),
    Poison(
        "negative-header-count",
        raw_batch(raw_record(0, header_count=-1), 1),
        ErrorCode.INVALID_RECORD,
        "record 0: its header count is -1",
    ),
    Poison(
        "fewer-records-than-record-count",
        raw_batch(raw_records(2), 3),
        ErrorCode.CORRUPT_MESSAGE,
        "its records end after 2 of the 3 its recordcount says",
    ),
    Poison(
        "more-records-than-record-count",
        raw_batch(raw_records(3), 2),
        ErrorCode.CORRUPT_MESSAGE,
        "bytes follow its last record (recordcount is 2)",
    ),
    Poison(
        "trailing-bytes-after-the-records",
        raw_batch(raw_records(1) + b"\x00\x00", 1),
        ErrorCode.CORRUPT_MESSAGE,
        "2 bytes follow its last record",
    ),
    Poison(
        "wrong-offset-delta",
        raw_batch(raw_record(0) + raw_record(2), 2),
        ErrorCode.INVALID_RECORD,
        "record 1: its offsetdelta is 2, not its index 1",
    ),
    Poison(
        "null-header-key",
        raw_batch(raw_record(0, headers=((None, b"v"),)), 1),
        ErrorCode.INVALID_RECORD,
        "record 0: its header 0 key is null",
    ),
    Poison(
        "header-key-not-utf8",
        raw_batch(raw_record(0, headers=((b"\xff\xfe", b"v"),)), 1),
        ErrorCode.INVALID_RECORD,
        "record 0: its header 0 key is not utf-8",
    ),
    Poison(
        "producer-id-without-sequence",
        raw_batch(raw_records(1), 1, producer_id=7, producer_epoch=0),
        ErrorCode.INVALID_RECORD,
        "invalid sequence number -1",
    ),
    Poison(
        "gzip-batch-claiming-2^31-1-records",
        gzip_batch_claiming_2_31_records(),
        ErrorCode.CORRUPT_MESSAGE,
        "gzip payload of 30 bytes does not decompress",
    ),
]
