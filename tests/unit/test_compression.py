"""The record codecs (proto/records/compression.py): every codec round-trips, reads what
Kafka's clients write, and refuses bombs, truncated and corrupt payloads without inflating
past its limit."""

from __future__ import annotations

import gzip
import multiprocessing
import random
import resource
import struct
import warnings
import zlib

import cramjam
import lz4.frame
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

with warnings.catch_warnings():  # kafka-python 3.0 loads its schemas with read_text
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.codec

from proto.records.compression import (
    XERIAL_HEADER,
    Codec,
    CompressedRecordsError,
    DecompressedTooLargeError,
    codec_named,
    compress,
    decompress,
)
from proto.records.corruption import CorruptRecordError
from proto.records.record_batch import (
    ATTRIBUTES_OFFSET,
    LOG_OVERHEAD,
    MAX_RECORDS_BYTES,
    RECORDS_OFFSET,
    Record,
    check_batch,
    compute_crc,
    decode_batch,
    decode_rows,
    encode_batch,
    validate_batches,
)
from tests.unit.test_record_batch import _Row

CODECS = [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
LIMIT = 8 * 1024 * 1024


def records_like(n: int) -> bytes:
    """Compressible bytes shaped like records (a random part and a repeated part), the same
    on every run."""
    rng = random.Random(n)
    return b"".join(
        rng.randbytes(8) + f"user-{i % 97} order {i} status shipped".encode() for i in range(n)
    )


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
@pytest.mark.parametrize("size", [0, 1, 100, 70_000, 300_000, 3_000_000])
def test_each_codec_round_trips(codec: Codec, size: int) -> None:
    data = records_like(size // 20 + 1)[:size]
    assert decompress(codec, compress(codec, data), LIMIT) == data


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=5000))
def test_any_bytes_round_trip(codec: Codec, data: bytes) -> None:
    assert decompress(codec, compress(codec, data), LIMIT) == data


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_a_payload_of_exactly_the_limit_is_taken_and_one_byte_more_is_refused(
    codec: Codec,
) -> None:
    for size in (1000, 300_000):
        data = records_like(size // 20 + 1)[:size]
        assert len(data) == size
        packed = compress(codec, data)
        assert decompress(codec, packed, size) == data
        with pytest.raises(DecompressedTooLargeError, match=f"more than {size - 1} bytes"):
            decompress(codec, packed, size - 1)


BOMB_MIB = 400


def bomb(codec: Codec, mib: int) -> bytes:
    """``mib`` MiB of zeros compressed a MiB at a time, so that making it stays small."""
    chunk = bytes(1024 * 1024)
    if codec == Codec.GZIP:
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        return b"".join(z.compress(chunk) for _ in range(mib)) + z.flush()
    if codec == Codec.ZSTD:
        c = cramjam.zstd.Compressor()
        for _ in range(mib):
            c.compress(chunk)
        return bytes(c.finish())
    if codec == Codec.LZ4:
        f = lz4.frame.LZ4FrameCompressor()
        framed: bytes = f.begin() + b"".join(f.compress(chunk) for _ in range(mib)) + f.flush()
        return framed
    block = bytes(cramjam.snappy.compress_raw(bytes(32 * 1024)))
    return XERIAL_HEADER + (struct.pack(">i", len(block)) + block) * (mib * 32)


def peak_growth_kib(codec: Codec) -> int:
    """In a fresh process: how far decompressing a bomb under a 1 MiB limit raised the
    process's peak RSS."""
    packed = bomb(codec, BOMB_MIB)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        decompress(codec, packed, 1024 * 1024)
    except DecompressedTooLargeError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    raise AssertionError("the bomb was not refused")


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_a_bomb_is_refused_without_inflating_past_the_limit(codec: Codec) -> None:
    with pytest.raises(DecompressedTooLargeError, match="the limit for one batch's records"):
        decompress(codec, bomb(codec, 8), 1024 * 1024)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        grown_kib = pool.apply(peak_growth_kib, (codec,))
    assert grown_kib < 32 * 1024  # not the 400 MiB it would inflate to


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_truncated_and_corrupt_payloads_are_refused(codec: Codec) -> None:
    packed = compress(codec, records_like(5000))
    with pytest.raises(CompressedRecordsError, match=codec.name.lower()):
        decompress(codec, packed[: len(packed) // 2], LIMIT)
    with pytest.raises(CompressedRecordsError):
        decompress(codec, b"not a compressed payload at all" * 3, LIMIT)
    flipped = bytearray(packed)
    flipped[len(flipped) // 2] ^= 0xFF
    flipped[len(flipped) // 3] ^= 0x55
    try:
        out = decompress(codec, bytes(flipped), LIMIT)
    except CompressedRecordsError:
        return
    # Codecs without a checksum of their own (lz4 as Kafka frames it, raw snappy) may
    # decode damaged bytes to other bytes: the batch's CRC-32C, over the compressed
    # payload, is what refuses those.
    assert out != records_like(5000)


def test_concatenated_members_and_frames_are_one_stream() -> None:
    assert decompress(Codec.GZIP, gzip.compress(b"one") + gzip.compress(b"two"), 100) == (b"onetwo")
    zstd = bytes(cramjam.zstd.compress(b"one")) + bytes(cramjam.zstd.compress(b"two"))
    assert decompress(Codec.ZSTD, zstd, 100) == b"onetwo"
    lz4s = lz4.frame.compress(b"one") + lz4.frame.compress(b"two")
    assert decompress(Codec.LZ4, lz4s, 100) == b"onetwo"


def test_snappy_reads_librdkafkas_raw_blocks_and_writes_snappy_javas_framing() -> None:
    data = records_like(3000)
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(Codec.SNAPPY, raw, LIMIT) == data
    framed = compress(Codec.SNAPPY, data)
    assert framed.startswith(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    # blocks of at most 32 KiB of input, each a length and a raw block
    pos, blocks = len(XERIAL_HEADER), []
    while pos < len(framed):
        (n,) = struct.unpack_from(">i", framed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(framed[pos + 4 : pos + 4 + n])))
        pos += 4 + n
    assert b"".join(blocks) == data
    assert max(len(b) for b in blocks) == 32 * 1024


def test_a_snappy_java_block_that_runs_past_the_payload_is_refused() -> None:
    framed = compress(Codec.SNAPPY, records_like(100))
    with pytest.raises(CompressedRecordsError, match="snappy-java block at byte 16"):
        decompress(Codec.SNAPPY, framed[:-1], LIMIT)
    with pytest.raises(CompressedRecordsError, match="header"):
        decompress(Codec.SNAPPY, framed[:12], LIMIT)


def test_lz4_is_written_as_kafkas_java_writer_frames_it() -> None:
    framed = compress(Codec.LZ4, records_like(5000))
    assert framed[:4] == b"\x04\x22\x4d\x18"  # the LZ4 frame magic
    flg, bd = framed[4], framed[5]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20  # independent blocks
    assert not flg & 0x08
    assert not flg & 0x04
    assert (bd >> 4) & 0x7 == 4  # 64 KiB blocks


def test_kafka_pythons_encodings_are_read_and_ours_are_read_by_it() -> None:
    data = records_like(4000)
    assert decompress(Codec.GZIP, kafka.codec.gzip_encode(data), LIMIT) == data
    assert decompress(Codec.LZ4, kafka.codec.lz4_encode(data), LIMIT) == data
    assert kafka.codec.gzip_decode(compress(Codec.GZIP, data)) == data
    assert kafka.codec.lz4_decode(compress(Codec.LZ4, data)) == data


def test_compression_type_names() -> None:
    assert codec_named("zstd") is Codec.ZSTD
    assert codec_named("LZ4") is Codec.LZ4
    assert codec_named("uncompressed") is Codec.NONE
    assert codec_named("none") is Codec.NONE
    with pytest.raises(ValueError, match="one of none, gzip, snappy, lz4, zstd"):
        codec_named("brotli")


def test_none_is_not_a_compressing_codec() -> None:
    with pytest.raises(ValueError, match="not a compressing codec"):
        compress(Codec.NONE, b"x")
    with pytest.raises(ValueError, match="not a compressing codec"):
        decompress(7, b"x", 10)


# -- compressed batches: the format's decoders inflate them -----------------------------------


def _records(n: int) -> list[Record]:
    base = 1_700_000_000_000
    return [
        Record(f"key-{i % 7}".encode(), records_like(i % 5 + 1), base + i, (("h", b"v"),))
        for i in range(n)
    ]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_a_compressed_batch_decodes_to_its_records(codec: Codec) -> None:
    records = _records(500)
    plain = encode_batch(records, base_offset=40)
    packed = encode_batch(records, base_offset=40, compression=codec)
    assert len(packed) < len(plain)
    header = check_batch(packed)
    assert header.compression == codec
    assert validate_batches(packed) == [header]
    decoded = decode_batch(b"x" * 9 + packed, 9)
    assert decoded.header == header
    assert decoded.records == decode_batch(plain).records
    rows = decode_rows(packed, 0, header, _Row, ("t",), min_offset=300)
    expected = [
        _Row("t", r.offset, r.key, r.value, r.timestamp, r.headers)
        for r in decode_batch(plain).records
        if r.offset >= 300
    ]
    assert rows == expected


def _with_records_payload(batch: bytes, payload: bytes, record_count: int | None = None) -> bytes:
    """``batch`` with its records replaced by ``payload`` (and its count), CRC and length
    recomputed: a batch whose framing is right and whose records are what a test says."""
    covered = bytearray(batch[ATTRIBUTES_OFFSET:RECORDS_OFFSET]) + payload
    if record_count is not None:  # and lastOffsetDelta, which must agree with it
        struct.pack_into(">i", covered, RECORDS_OFFSET - 4 - ATTRIBUTES_OFFSET, record_count)
        struct.pack_into(">i", covered, 2, record_count - 1)
    prefix = bytearray(batch[:ATTRIBUTES_OFFSET])
    struct.pack_into(">i", prefix, 8, len(covered) + ATTRIBUTES_OFFSET - LOG_OVERHEAD)
    struct.pack_into(">I", prefix, ATTRIBUTES_OFFSET - 4, compute_crc(covered))
    return bytes(prefix + covered)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_a_compressed_batch_whose_records_do_not_inflate_is_corrupt(codec: Codec) -> None:
    batch = encode_batch(_records(3), compression=codec)
    damaged = _with_records_payload(batch, b"\x00garbage, not a compressed stream" * 4)
    check_batch(damaged)  # the framing and the CRC are right
    name = codec.name.lower()
    with pytest.raises(CompressedRecordsError, match=f"batch at position 0: {name} payload"):
        decode_batch(damaged)
    with pytest.raises(CompressedRecordsError, match=f"batch at position 0: {name} payload"):
        decode_rows(damaged, 0, check_batch(damaged), _Row, ("t",))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_a_compressed_batch_with_fewer_records_than_its_count_is_corrupt(codec: Codec) -> None:
    batch = encode_batch(_records(3), compression=codec)
    lying = _with_records_payload(batch, batch[RECORDS_OFFSET:], record_count=4)
    name = codec.name.lower()
    with pytest.raises(CorruptRecordError, match=rf"batch at position 0 \({name}\): record 3"):
        decode_batch(lying)
    with pytest.raises(CorruptRecordError, match=rf"batch at position 0 \({name}\)"):
        decode_rows(lying, 0, check_batch(lying), _Row, ("t",))


def test_a_batch_inflating_past_the_readers_limit_is_refused() -> None:
    batch = encode_batch(_records(1), compression=Codec.ZSTD)
    huge = _with_records_payload(batch, bomb(Codec.ZSTD, MAX_RECORDS_BYTES // 2**20 + 1))
    with pytest.raises(DecompressedTooLargeError, match=f"more than {MAX_RECORDS_BYTES} bytes"):
        decode_batch(huge)
