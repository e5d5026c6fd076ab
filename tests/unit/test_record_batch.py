"""Kafka record batch v2 codec: format pinned by golden bytes, validation, varints."""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proto.records.compression import Codec
from proto.records.record_batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    MAGIC,
    MAX_TIMESTAMP_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    CorruptRecordError,
    Record,
    assign_offsets,
    batch_tail,
    check_batch,
    client_count_problem,
    compute_crc,
    decode_batch,
    decode_rows,
    decode_varint,
    decode_varlong,
    encode_batch,
    encode_varint,
    encode_varlong,
    parse_header,
    retained_batch,
    scan_batches,
    stamp_batch,
    stamped_buffers,
    validate_batches,
    with_offsets,
)

# One batch assembled by hand from the spec (docs/storage.md, Kafka's v2 format):
#   record 0: key b"k", value b"v", timestamp 1000, one header ("h", b"x")
#   record 1: key None, value b"", timestamp 1005, no headers
GOLDEN_RECORDS = (
    "18"  # length 12 (zig-zag 24)
    "00"  # attributes
    "00"  # timestampDelta 0
    "00"  # offsetDelta 0
    "02"
    "6b"  # key length 1, "k"
    "02"
    "76"  # value length 1, "v"
    "02"  # 1 header
    "02"
    "68"
    "02"
    "78"  # header key "h", value "x"
    "0c"  # length 6
    "00"  # attributes
    "0a"  # timestampDelta 5
    "02"  # offsetDelta 1
    "01"  # key null (-1)
    "00"  # value length 0
    "00"  # no headers
)
GOLDEN_AFTER_CRC = (
    "0000"  # attributes
    "00000001"  # lastOffsetDelta
    "00000000000003e8"  # baseTimestamp 1000
    "00000000000003ed"  # maxTimestamp 1005
    "ffffffffffffffff"  # producerId -1
    "ffff"  # producerEpoch -1
    "ffffffff"  # baseSequence -1
    "00000002"  # recordCount
) + GOLDEN_RECORDS
GOLDEN_CRC = 0xAFB4817E
GOLDEN = bytes.fromhex(
    "0000000000000000"  # baseOffset 0
    "00000045"  # batchLength 69 = 81 - 12
    "ffffffff"  # partitionLeaderEpoch -1
    "02"  # magic
    f"{GOLDEN_CRC:08x}" + GOLDEN_AFTER_CRC
)
GOLDEN_INPUT = [
    Record(b"k", b"v", 1000, (("h", b"x"),)),
    Record(None, b"", 1005),
]


def recrc(batch: bytes | bytearray, pos: int = 0) -> bytearray:
    """Recompute the CRC of the batch at ``pos`` after editing covered fields."""
    out = bytearray(batch)
    (length,) = struct.unpack_from(">i", out, pos + 8)
    crc = crc32c.crc32c(bytes(out[pos + 21 : pos + 12 + length]))
    struct.pack_into(">I", out, pos + 17, crc)
    return out


def simple_batch(n: int = 3, **kwargs: int) -> bytes:
    return encode_batch([Record(b"key", b"value-%d" % i, 1000 + i) for i in range(n)], **kwargs)


# -- golden bytes ----------------------------------------------------------------------------


def test_golden_crc_is_crc32c_of_bytes_21_to_end() -> None:
    assert crc32c.crc32c(GOLDEN[21:]) == GOLDEN_CRC
    assert len(GOLDEN) == 81


def test_encode_matches_golden_bytes() -> None:
    assert encode_batch(GOLDEN_INPUT) == GOLDEN


def test_decode_golden_bytes() -> None:
    batch = decode_batch(GOLDEN)
    assert batch.header == BatchHeader(
        base_offset=0,
        batch_length=69,
        partition_leader_epoch=-1,
        magic=2,
        crc=GOLDEN_CRC,
        attributes=0,
        last_offset_delta=1,
        base_timestamp=1000,
        max_timestamp=1005,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        record_count=2,
    )
    assert batch.records == [
        Record(b"k", b"v", 1000, (("h", b"x"),), offset=0),
        Record(None, b"", 1005, (), offset=1),
    ]


def test_header_properties() -> None:
    header = parse_header(simple_batch(5, base_offset=100, base_sequence=2**31 - 3))
    assert header.size == len(simple_batch(5))
    assert header.last_offset == 104
    assert header.next_offset == 105
    assert header.last_sequence == 1  # 2**31-3, -2, -1, then wraps to 0, 1 (Kafka)
    assert header.compression == 0
    assert header.compression_name == "none"
    assert not header.is_transactional
    assert not header.is_control
    assert not header.is_log_append_time
    assert not header.has_producer_id
    assert parse_header(simple_batch()).last_sequence == -1


def test_parse_header_rejects_short_buffer() -> None:
    with pytest.raises(CorruptRecordError, match="truncated header"):
        parse_header(GOLDEN[:60])


# -- round trips -----------------------------------------------------------------------------

optional_bytes = st.none() | st.binary(max_size=64) | st.binary(min_size=1000, max_size=5000)
headers = st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3)
records = st.lists(
    st.builds(
        Record,
        key=optional_bytes,
        value=optional_bytes,
        timestamp=st.integers(0, 2**45),
        headers=headers.map(tuple),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=150, deadline=None)
@given(
    records=records,
    base_offset=st.integers(0, 2**62),
    epoch=st.integers(-1, 2**31 - 1),
    producer_id=st.integers(-1, 2**63 - 1),
    producer_epoch=st.integers(-1, 2**15 - 1),
    base_sequence=st.integers(-1, 2**31 - 1),
)
def test_encode_decode_round_trip(
    records: list[Record],
    base_offset: int,
    epoch: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> None:
    data = encode_batch(
        records,
        base_offset=base_offset,
        partition_leader_epoch=epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )
    assert validate_batches(data) == [check_batch(data)]
    batch = decode_batch(data)
    header = batch.header
    assert header.size == len(data)
    assert header.base_offset == base_offset
    assert header.partition_leader_epoch == epoch
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        producer_id,
        producer_epoch,
        base_sequence,
    )
    assert header.record_count == len(records)
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert batch.records == [r._replace(offset=base_offset + i) for i, r in enumerate(records)]


def test_decode_uses_log_append_time() -> None:
    data = bytearray(simple_batch(3))
    struct.pack_into(">h", data, 21, 0x08)  # timestamp type: LogAppendTime
    struct.pack_into(">q", data, 35, 5555)  # maxTimestamp, the broker's append time
    batch = decode_batch(recrc(data))
    assert [r.timestamp for r in batch.records] == [5555, 5555, 5555]


def test_decode_rejects_a_batch_marked_gzip_whose_records_are_not() -> None:
    data = bytearray(simple_batch())
    struct.pack_into(">h", data, 21, 1)  # gzip
    data = recrc(data)
    check_batch(data)  # framing and CRC are fine ...
    with pytest.raises(CorruptRecordError, match=r"gzip payload of .* does not decompress"):
        decode_batch(data)  # ... but the records cannot be read


def test_decode_rejects_record_with_wrong_length() -> None:
    data = bytearray(GOLDEN)
    data[61] = 0x16  # record 0 claims 11 bytes instead of 12
    with pytest.raises(CorruptRecordError, match="batch at position 0: record 0: "):
        decode_batch(recrc(data))


def test_decode_rejects_bytes_after_last_record() -> None:
    data = bytearray(simple_batch(1)) + b"\x00" * 7
    struct.pack_into(">i", data, 8, len(data) - 12)
    with pytest.raises(CorruptRecordError, match="7 bytes after the last record"):
        decode_batch(recrc(data))


def test_encode_rejects_empty_batch() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        encode_batch([])


# -- varints ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (63, "7e"),
        (-64, "7f"),
        (64, "8001"),
        (300, "d804"),
        (2**31 - 1, "feffffff0f"),
        (-(2**31), "ffffffff0f"),
    ],
)
def test_varint_known_encodings(value: int, encoded: str) -> None:
    assert encode_varint(value).hex() == encoded
    assert decode_varint(bytes.fromhex(encoded), 0) == (value, len(encoded) // 2)


def test_varlong_extremes() -> None:
    assert encode_varlong(2**63 - 1).hex() == "feffffffffffffffff01"
    assert encode_varlong(-(2**63)).hex() == "ffffffffffffffffff01"
    assert decode_varlong(bytes.fromhex("ffffffffffffffffff01"), 0) == (-(2**63), 10)


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(value: int) -> None:
    data = b"\xaa" + encode_varint(value) + b"\xbb"
    assert decode_varint(data, 1) == (value, len(data) - 1)


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(value: int) -> None:
    data = encode_varlong(value)
    assert decode_varlong(data, 0) == (value, len(data))


def test_encode_rejects_out_of_range() -> None:
    with pytest.raises(ValueError, match="32 bits"):
        encode_varint(2**31)
    with pytest.raises(ValueError, match="64 bits"):
        encode_varlong(-(2**63) - 1)


def test_over_long_varints_are_rejected() -> None:
    with pytest.raises(CorruptRecordError, match="longer than 5 bytes"):
        decode_varint(bytes.fromhex("808080808001"), 0)
    with pytest.raises(CorruptRecordError, match="longer than 10 bytes"):
        decode_varlong(bytes.fromhex("8080808080808080808001"), 0)


def test_overflowing_varints_are_rejected() -> None:
    with pytest.raises(CorruptRecordError, match="overflows 32 bits"):
        decode_varint(bytes.fromhex("ffffffff1f"), 0)
    with pytest.raises(CorruptRecordError, match="overflows 64 bits"):
        decode_varlong(bytes.fromhex("ffffffffffffffffff03"), 0)


def test_truncated_varint_is_rejected() -> None:
    with pytest.raises(CorruptRecordError, match="runs past the end"):
        decode_varint(bytes.fromhex("8080"), 0)
    with pytest.raises(CorruptRecordError, match="runs past the end"):
        decode_varint(b"", 0)


# -- check_batch -----------------------------------------------------------------------------


def test_check_batch_accepts_valid_batch_at_offset() -> None:
    data = b"xyz" + GOLDEN
    assert check_batch(data, 3).crc == GOLDEN_CRC


def test_check_batch_rejects_bad_crc() -> None:
    data = bytearray(GOLDEN)
    data[70] ^= 0x01
    crc = crc32c.crc32c(bytes(data[21:]))
    with pytest.raises(CorruptRecordError) as info:
        check_batch(data)
    assert str(info.value) == (
        f"batch at position 0: CRC mismatch (stored 0x{GOLDEN_CRC:08x}, computed 0x{crc:08x})"
    )


def test_check_batch_rejects_wrong_magic() -> None:
    data = bytearray(GOLDEN)
    data[16] = 1
    with pytest.raises(CorruptRecordError, match="magic byte is 1, only 2"):
        check_batch(data)


def test_check_batch_rejects_length_below_minimum() -> None:
    data = bytearray(GOLDEN)
    struct.pack_into(">i", data, 8, 48)
    with pytest.raises(CorruptRecordError, match="batch length 48 is below the minimum 49"):
        check_batch(data)
    struct.pack_into(">i", data, 8, -5)
    with pytest.raises(CorruptRecordError, match="batch length -5 is below"):
        check_batch(data)


def test_check_batch_rejects_length_beyond_buffer() -> None:
    data = bytearray(GOLDEN)
    struct.pack_into(">i", data, 8, 70)
    with pytest.raises(CorruptRecordError, match="needs 82 bytes but only 81 remain"):
        check_batch(data)
    struct.pack_into(">i", data, 8, 2**31 - 1)
    with pytest.raises(CorruptRecordError, match="only 81 remain"):
        check_batch(data)


def test_check_batch_rejects_length_too_short_for_content() -> None:
    # A lying length that still lies inside the buffer: the CRC then covers the wrong bytes.
    data = bytearray(GOLDEN)
    struct.pack_into(">i", data, 8, 68)
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        check_batch(data)


def test_check_batch_rejects_truncated_buffer() -> None:
    with pytest.raises(CorruptRecordError, match="truncated header \\(30 of 61 bytes\\)"):
        check_batch(GOLDEN[:30])
    with pytest.raises(CorruptRecordError, match="needs 81 bytes but only 80 remain"):
        check_batch(GOLDEN[:80])


def test_check_batch_rejects_more_records_than_offsets() -> None:
    data = bytearray(GOLDEN)
    struct.pack_into(">i", data, 57, 3)
    with pytest.raises(CorruptRecordError, match="record count 3 exceeds the 2 offsets"):
        check_batch(recrc(data))


def test_check_batch_rejects_a_batch_of_no_offsets() -> None:
    data = bytearray(GOLDEN)
    struct.pack_into(">i", data, 23, -1)
    struct.pack_into(">i", data, 57, 0)
    with pytest.raises(CorruptRecordError, match="lastOffsetDelta is -1"):
        check_batch(recrc(data))


def test_a_stored_batch_may_hold_fewer_records_than_offsets_but_not_a_produced_one() -> None:
    """The cleaner's batches keep their offset range with fewer records (or none)."""
    header = check_batch(GOLDEN)
    assert header.record_count == header.last_offset_delta + 1 == 2
    assert client_count_problem(header) is None
    fewer = header._replace(record_count=1)
    assert client_count_problem(fewer) == (
        "record count 1 does not match lastOffsetDelta 1 (which implies 2 records)"
    )
    assert client_count_problem(header._replace(record_count=0)) == (
        "record count is 0, a batch holds at least one record"
    )


def test_check_batch_rejects_count_too_large_for_bytes() -> None:
    # 2**20 records claimed in 20 bytes of records, consistent with lastOffsetDelta: a
    # client could otherwise make the leader skip a million offsets.
    data = bytearray(GOLDEN)
    struct.pack_into(">i", data, 23, 2**20 - 1)
    struct.pack_into(">i", data, 57, 2**20)
    with pytest.raises(CorruptRecordError, match="cannot fit in 20 bytes of records"):
        check_batch(recrc(data))


def test_validate_batches_checks_every_batch() -> None:
    data = simple_batch(2) + GOLDEN + simple_batch(4)
    headers = validate_batches(data)
    assert [h.record_count for h in headers] == [2, 2, 4]
    assert validate_batches(b"") == []
    bad = bytearray(data)
    bad[len(simple_batch(2)) + 70] ^= 0xFF
    with pytest.raises(CorruptRecordError, match=f"batch at position {len(simple_batch(2))}: CRC"):
        validate_batches(bad)


def test_validate_batches_rejects_trailing_bytes() -> None:
    with pytest.raises(CorruptRecordError, match="batch at position 81: truncated header"):
        validate_batches(GOLDEN + b"\x00" * 5)
    with pytest.raises(CorruptRecordError, match="batch at position 81"):
        validate_batches(GOLDEN + GOLDEN[:70])


def spec_valid(data: bytes) -> bool:
    """Whether check_batch must accept the batch at the start of ``data``, from the spec."""
    if len(data) < 61:
        return False
    _, length, _, magic, crc, attributes, last_delta, *_, count = struct.unpack_from(
        ">qiibIhiqqqhii", data
    )
    size = length + 12
    return bool(
        length >= 49
        and size <= len(data)
        and magic == 2
        and crc32c.crc32c(data[21:size]) == crc
        and last_delta >= 0
        and 0 <= count <= last_delta + 1
        and (attributes & 7 != 0 or count * 7 <= size - 61)
    )


@settings(max_examples=500)
@given(
    position=st.integers(0, len(GOLDEN) - 1),
    value=st.integers(0, 255),
    fix_crc=st.booleans(),
    cut=st.integers(0, 3),
)
def test_check_batch_agrees_with_the_spec_after_any_byte_change(
    position: int, value: int, fix_crc: bool, cut: int
) -> None:
    # check_batch tests its conditions in one expression and names a failure with separate
    # functions: both must agree with the spec, whatever byte changes.
    data = bytearray(GOLDEN)
    data[position] = value
    if fix_crc:
        data = recrc(data)
    data = data[: len(data) - cut]
    if spec_valid(bytes(data)):
        assert check_batch(data) == parse_header(data)
    else:
        with pytest.raises(CorruptRecordError, match="batch at position 0: "):
            check_batch(data)
    # validate_batches and assign_offsets want the buffer to be whole batches.
    if spec_valid(bytes(data)) and struct.unpack_from(">i", data, 8)[0] + 12 == len(data):
        assert validate_batches(data) == [parse_header(data)]
        assert assign_offsets(data, 7, 1) == [parse_header(data).stamped(7, 1)]
    else:
        with pytest.raises(CorruptRecordError):
            validate_batches(data)
        with pytest.raises(CorruptRecordError):
            assign_offsets(data, 7, 1)


def test_assign_offsets_numbers_batches_from_the_base_offset() -> None:
    data = simple_batch(2) + GOLDEN + simple_batch(4, base_offset=99, partition_leader_epoch=3)
    headers = assign_offsets(data, 1000, 5)
    assert [(h.base_offset, h.last_offset, h.partition_leader_epoch) for h in headers] == [
        (1000, 1001, 5),
        (1002, 1003, 5),
        (1004, 1007, 5),
    ]
    assert headers == [
        h.stamped(offset, 5)
        for h, offset in zip(validate_batches(data), [1000, 1002, 1004], strict=True)
    ]
    assert assign_offsets(b"", 1000, 5) == []
    bad = bytearray(data)
    bad[len(simple_batch(2)) + 70] ^= 0xFF
    with pytest.raises(CorruptRecordError, match=f"batch at position {len(simple_batch(2))}: CRC"):
        assign_offsets(bad, 1000, 5)
    with pytest.raises(CorruptRecordError, match="batch at position 81: truncated header"):
        assign_offsets(GOLDEN + b"\x00" * 5, 0, 0)


def test_with_offsets_numbers_checked_headers_as_assign_offsets_does() -> None:
    data = simple_batch(2) + GOLDEN + simple_batch(4, base_offset=99, partition_leader_epoch=3)
    assert with_offsets(validate_batches(data), 1000, 5) == assign_offsets(data, 1000, 5)
    assert with_offsets([], 7, 1) == []


def test_batch_header_is_an_immutable_record() -> None:
    header = parse_header(GOLDEN)
    with pytest.raises(AttributeError):
        header.base_offset = 5  # type: ignore[misc]
    assert header._replace(base_offset=9, partition_leader_epoch=2) == header.stamped(9, 2)
    assert header.stamped(9, 2).size == header.size == len(GOLDEN)


# -- stamping and scanning -------------------------------------------------------------------


def test_stamp_batch_keeps_crc_valid() -> None:
    data = bytearray(b"\x00" * 5 + GOLDEN)
    stamp_batch(data, 5, 123456789012, 7)
    header = check_batch(data, 5)
    assert (header.base_offset, header.partition_leader_epoch) == (123456789012, 7)
    assert header.crc == GOLDEN_CRC
    assert bytes(data[5 + 17 :]) == GOLDEN[17:]
    assert parse_header(GOLDEN).stamped(123456789012, 7) == header


def test_stamped_buffers_give_the_bytes_of_a_stamped_copy() -> None:
    data = simple_batch(2) + GOLDEN + simple_batch(4)
    headers = assign_offsets(data, 2**40, 7)
    buffers = stamped_buffers(data, headers)
    assert len(buffers) == 2 * len(headers)
    assert [len(b) for b in buffers[::2]] == [16, 16, 16]  # only the prefixes are new bytes
    assert all(isinstance(b, memoryview) for b in buffers[1::2])  # the rest is not copied
    expected = bytearray(data)
    position = 0
    for header in headers:
        stamp_batch(expected, position, header.base_offset, 7)
        position += header.size
    assert b"".join(buffers) == expected
    assert validate_batches(b"".join(buffers)) == headers
    assert stamped_buffers(b"", []) == []


def test_scan_reports_crc_failures_and_continues() -> None:
    first = simple_batch(2)
    data = bytearray(first + GOLDEN + simple_batch(1))
    data[len(first) + 70] ^= 0x01
    scan = scan_batches(data)
    found = list(scan)
    assert [(b.position, b.crc_ok) for b in found] == [
        (0, True),
        (len(first), False),
        (len(first) + 81, True),
    ]
    assert "CRC mismatch" in str(found[1].problem)
    assert scan.stop_reason is None
    assert scan.end_position == len(data)
    assert not scan.incomplete


def test_scan_stops_at_torn_tail() -> None:
    data = GOLDEN + GOLDEN[:50]
    scan = scan_batches(data)
    assert [b.position for b in scan] == [0]
    assert scan.end_position == 81
    assert scan.incomplete
    assert scan.needed == 81
    assert scan.stop_reason == "batch at position 81: truncated header (50 of 61 bytes)"


def test_scan_stops_at_bad_framing() -> None:
    data = bytearray(GOLDEN + GOLDEN)
    data[81 + 16] = 0
    scan = scan_batches(data)
    assert len(list(scan)) == 1
    assert not scan.incomplete
    assert "magic byte is 0" in str(scan.stop_reason)
    short = bytearray(GOLDEN + GOLDEN[:20])
    struct.pack_into(">i", short, 81 + 8, 3)
    scan = scan_batches(short)
    assert len(list(scan)) == 1
    assert scan.stop_reason == "batch at position 81: batch length 3 is below the minimum 49"
    assert not scan.incomplete


def test_magic_constant_and_header_size() -> None:
    assert (MAGIC, HEADER_SIZE) == (2, 61)


# -- decode_rows: the consumer's bulk path --------------------------------------------------


class _Row(NamedTuple):
    topic: str
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...]


@settings(max_examples=300)
@given(
    st.lists(
        st.tuples(
            st.none() | st.binary(max_size=200),
            st.none() | st.binary(max_size=300),
            st.integers(min_value=-(2**40), max_value=2**40),
            st.lists(
                st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=10)), max_size=3
            ),
        ),
        min_size=1,
        max_size=30,
    ),
    st.integers(0, 40),
)
def test_decode_rows_agrees_with_decode_batch(
    fields: list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]],
    skip: int,
) -> None:
    base = 1_700_000_000_000
    records = [Record(k, v, base + dt, tuple(h)) for k, v, dt, h in fields]
    data = encode_batch(records, base_offset=100)
    header = check_batch(data)
    rows = decode_rows(data, 0, header, _Row, ("t",), min_offset=100 + skip)
    expected = [
        _Row("t", r.offset, r.key, r.value, r.timestamp, r.headers)
        for r in decode_batch(data).records
        if r.offset >= 100 + skip
    ]
    assert rows == expected


@pytest.mark.parametrize("cut", range(HEADER_SIZE + 1, HEADER_SIZE + 12))
def test_decode_rows_refuses_records_that_lie_as_decode_batch_does(cut: int) -> None:
    """A batch whose records are damaged but whose CRC was recomputed (so the header checks
    pass) gets the same kind of error from both decoders, never an IndexError."""
    data = bytearray(encode_batch([Record(b"k", b"value", 1), Record(None, b"v2", 2)]))
    data[cut] ^= 0x7F
    crc = compute_crc(bytes(data[ATTRIBUTES_OFFSET:]))
    data[CRC_OFFSET : CRC_OFFSET + 4] = crc.to_bytes(4, "big")
    damaged = bytes(data)
    header = parse_header(damaged)
    try:
        decode_batch(damaged)
    except CorruptRecordError:
        with pytest.raises(CorruptRecordError, match="batch at position 0"):
            decode_rows(damaged, 0, header, _Row, ("t",))
    else:  # a damage the format cannot see (a value byte, a delta): the same records
        rows = decode_rows(damaged, 0, header, _Row, ("t",), min_offset=-(2**63))
        assert [(r.offset, r.value) for r in rows] == [
            (r.offset, r.value) for r in decode_batch(damaged).records
        ]


@pytest.mark.parametrize("odd_one", [None, 8191, 8192, 9000])
def test_decode_rows_cuts_runs_past_offset_delta_8192_exactly_as_decode_batch_decodes(
    odd_one: int | None,
) -> None:
    """Records from 8192 on carry three-byte offsetDeltas and are cut out by column too."""
    records = [Record(None, b"%05d" % i, 1_700_000_000_000) for i in range(9500)]
    if odd_one is not None:
        records[odd_one] = Record(b"k", b"odd", 1_700_000_000_000)
    batch = encode_batch(records, base_offset=10)
    rows = decode_rows(batch, 0, check_batch(batch), _Row, ("t",), min_offset=0)
    assert rows == [
        _Row("t", r.offset, r.key, r.value, r.timestamp, r.headers)
        for r in decode_batch(batch).records
    ]


@settings(max_examples=200)
@given(
    st.integers(1, 300),
    st.sampled_from([0, 1, 5, 100, 200]),
    st.none() | st.binary(min_size=0, max_size=8),
    st.lists(st.integers(0, 299), max_size=4),
    st.sampled_from([(0, 0), (0, 50), (-60, 60), (0, 10_000)]),
    st.data(),
)
def test_decode_rows_cuts_runs_of_one_layout_exactly_as_decode_batch_decodes(
    count: int,
    value_size: int,
    key: bytes | None,
    odd_ones: list[int],
    timestamp_range: tuple[int, int],
    data: st.DataObject,
) -> None:
    """Batches of equal records (the bulk path's case), with a few records of another
    size, a null value or a key among them, and timestamps of one or several widths."""
    base = 1_700_000_000_000
    low, high = timestamp_range
    records = []
    for i in range(count):
        ts = base + data.draw(st.integers(low, high))
        value: bytes | None = bytes([i % 256]) * value_size
        record_key = key
        if i in odd_ones:
            value = None if i % 2 else b"odd" * 7
            record_key = b"other-key"
        records.append(Record(record_key, value, ts))
    batch = encode_batch(records, base_offset=5000)
    header = check_batch(batch)
    skip = data.draw(st.integers(0, count))
    rows = decode_rows(batch, 0, header, _Row, ("t",), min_offset=5000 + skip)
    assert rows == [
        _Row("t", r.offset, r.key, r.value, r.timestamp, r.headers)
        for r in decode_batch(batch).records
        if r.offset >= 5000 + skip
    ]


# -- batch_tail: a leader's batch cut at a follower's LEO ------------------------------------


@pytest.mark.parametrize("codec", [0, Codec.GZIP, Codec.LZ4, Codec.ZSTD])
def test_batch_tail_keeps_each_record_at_its_offset_timestamp_and_sequence(codec: int) -> None:
    records = [
        Record(b"k%d" % i, b"v%d" % i, 1_700_000_000_000 + 10 * i, (("h", b"x"),)) for i in range(5)
    ]
    batch = encode_batch(
        records,
        base_offset=100,
        partition_leader_epoch=7,
        producer_id=42,
        producer_epoch=3,
        base_sequence=2**31 - 3,  # the tail's base sequence wraps past INT32_MAX to 0
        compression=codec,
        flags=TRANSACTIONAL_FLAG_MASK,
    )
    tail = batch_tail(batch, 0, 103)
    header, kept = decode_batch(tail)
    original = decode_batch(batch)
    assert (header.base_offset, header.last_offset, header.record_count) == (103, 104, 2)
    assert kept == original.records[3:]
    assert header.partition_leader_epoch == 7
    assert (header.producer_id, header.producer_epoch) == (42, 3)
    assert header.base_sequence == 0  # 2**31 - 3 + 3, wrapped
    assert header.last_sequence == original.header.last_sequence
    assert header.attributes == original.header.attributes  # codec and transactional flag
    assert header.max_timestamp == records[4].timestamp
    assert validate_batches(tail) == [header]


def test_batch_tail_of_a_log_append_time_batch_keeps_its_time() -> None:
    batch = bytearray(encode_batch([Record(None, b"a", 5), Record(None, b"b", 6)]))
    # The leader's LogAppendTime: the timestamp type bit and maxTimestamp, CRC recomputed.
    header = parse_header(batch)
    struct.pack_into(">h", batch, ATTRIBUTES_OFFSET, header.attributes | TIMESTAMP_TYPE_MASK)
    struct.pack_into(">q", batch, MAX_TIMESTAMP_OFFSET, 9_999)
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch[ATTRIBUTES_OFFSET:]))
    header, kept = decode_batch(batch_tail(batch, 0, 1))
    assert header.is_log_append_time
    assert header.max_timestamp == 9_999
    assert kept == [Record(None, b"b", 9_999, (), 1)]


def test_batch_tail_of_a_compacted_batch_keeps_its_last_offset() -> None:
    """The cleaner removed offsets 1 and 4 of 0..4 (the batch keeps its last offset)."""
    full = encode_batch([Record(None, b"v%d" % i, 1_000 + i) for i in range(5)])
    header, records = decode_batch(full)
    cleaned = retained_batch(header, [records[0], records[2], records[3]])
    tail_header, kept = decode_batch(batch_tail(cleaned, 0, 1))
    assert (tail_header.base_offset, tail_header.last_offset) == (1, 4)
    assert [(r.offset, r.value) for r in kept] == [(2, b"v2"), (3, b"v3")]
    # Nothing left from offset 4 on: an empty batch still covering offset 4.
    empty_header, none = decode_batch(batch_tail(cleaned, 0, 4))
    assert (empty_header.base_offset, empty_header.last_offset, none) == (4, 4, [])


@pytest.mark.parametrize("offset", [0, 3])
def test_batch_tail_needs_an_offset_inside_the_batch_above_its_base(offset: int) -> None:
    batch = encode_batch([Record(None, b"a", 1), Record(None, b"b", 2), Record(None, b"c", 3)])
    with pytest.raises(ValueError, match=r"not inside the batch 0\.\.2"):
        batch_tail(batch, 0, offset)
