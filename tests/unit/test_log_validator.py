"""LogValidator: the leader refuses every produced batch it could not serve.

Each poison batch has a valid CRC (tests/poison_batches.py), so only the rule it breaks can
refuse it; the error is what the broker answers (``replica_manager._error_of``).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.log.log_validator import validate_client_batches
from broker.replication.replica_manager import _error_of
from proto.records.compression import Codec, compress
from proto.records.record_batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    RECORDS_COUNT_OFFSET,
    RECORDS_OFFSET,
    CorruptRecordError,
    Record,
    compute_crc,
    decode_batch,
    encode_batch,
    validate_batches,
)
from proto.wire.minibroker_pb2 import ErrorCode
from tests.poison_batches import POISONS, Poison, raw_batch, raw_record, raw_records


def validate(records: bytes | bytearray | memoryview) -> None:
    validate_client_batches(records, validate_batches(records))


def refusal(records: bytes) -> tuple[int, str]:
    """The error code and message the broker answers for ``records``."""
    try:
        validate(records)
    except Exception as err:
        return _error_of(err)
    raise AssertionError("the batch was accepted")


def with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


@pytest.mark.parametrize("poison", POISONS, ids=[p.name for p in POISONS])
def test_poison_batch_is_refused_saying_what_is_wrong(poison: Poison) -> None:
    validate_batches(poison.batch)  # framing, CRC and count pass: the new checks refuse it
    code, message = refusal(poison.batch)
    assert code == poison.code, message
    assert poison.fragment in message.lower()
    assert "batch at position 0" in message


COMPRESSED = [codec for codec in Codec if codec != Codec.NONE]


@pytest.mark.parametrize("codec", COMPRESSED, ids=[c.name.lower() for c in COMPRESSED])
def test_every_codec_of_kafka_is_accepted(codec: Codec) -> None:
    records = [
        Record(b"k%d" % i, b"value %d " % i * (i % 7), i, (("h", b"v"),) if i % 3 else ())
        for i in range(500)
    ]
    validate(encode_batch(records, compression=codec) + encode_batch(records[:1]))


PLAIN_POISONS = [p for p in POISONS if p.batch[ATTRIBUTES_OFFSET + 1] == 0]


@pytest.mark.parametrize("codec", COMPRESSED, ids=[c.name.lower() for c in COMPRESSED])
@pytest.mark.parametrize("poison", PLAIN_POISONS, ids=[p.name for p in PLAIN_POISONS])
def test_records_refused_plain_are_refused_compressed(poison: Poison, codec: Codec) -> None:
    """The records inside a compressed batch meet every check an uncompressed batch's do,
    with the same error, naming the codec."""
    header = validate_batches(poison.batch)[0]
    records = poison.batch[RECORDS_OFFSET:]
    squeezed = raw_batch(
        compress(codec, records),
        header.record_count,
        attributes=header.attributes | codec,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
    )
    code, message = refusal(squeezed)
    assert code == poison.code, message
    assert poison.fragment in message.lower()
    if poison.code != ErrorCode.INVALID_RECORD or "record" in poison.fragment:
        assert f"batch at position 0 ({codec.name.lower()}): " in message


@given(st.binary(max_size=300), st.sampled_from(COMPRESSED))
def test_any_compressed_payload_is_accepted_only_if_its_records_are(
    payload: bytes, codec: Codec
) -> None:
    """Garbage (or garbage that inflates) gets CORRUPT_MESSAGE or INVALID_RECORD, nothing
    else escapes."""
    for candidate in (payload, compress(codec, payload)):
        outcome = attempt(raw_batch(candidate, 2, attributes=codec))
        assert outcome in (None, ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)


def attempt(records: bytes) -> int | None:
    """None if ``records`` are accepted, else the error code the broker answers."""
    try:
        validate(records)
    except Exception as err:
        return _error_of(err)[0]
    return None


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_codec_ids_5_to_7_do_not_exist_and_are_corrupt_message(codec: int) -> None:
    # Kafka's CompressionType.forId throws IllegalArgumentException for them, which its
    # ReplicaManager answers UNKNOWN_SERVER_ERROR; here the batch is named corrupt.
    code, message = refusal(raw_batch(raw_records(2), 2, attributes=codec | 0x08))
    assert code == ErrorCode.CORRUPT_MESSAGE
    assert f"compression codec id {codec} does not exist" in message


def test_key_or_value_length_below_minus_one_is_invalid_record() -> None:
    # Kafka's DefaultRecord reads any negative length as null; decode_batch refuses them.
    assert refusal(raw_batch(raw_record(0, None, key_length=-2), 1)) == (
        ErrorCode.INVALID_RECORD,
        "batch at position 0: record 0: its key length is -2",
    )
    value_of_length_minus_3 = raw_record(0, b"k", None)[:-2] + b"\x05\x00"
    assert refusal(raw_batch(value_of_length_minus_3, 1)) == (
        ErrorCode.INVALID_RECORD,
        "batch at position 0: record 0: its value length is -3",
    )


def test_a_poison_batch_after_good_ones_is_named_by_its_position() -> None:
    good = encode_batch([Record(b"k", b"v", 0)] * 3)
    bad = raw_batch(raw_record(0) + raw_record(0), 2)
    code, message = refusal(good + good + bad)
    assert code == ErrorCode.INVALID_RECORD
    assert message.endswith(
        f"batch at position {2 * len(good)}: record 1: its offsetDelta is 0, not its index 1 "
        "(offset deltas count the records of a batch from 0)"
    )


def test_buffers_of_every_kind_are_validated_alike() -> None:
    batch = encode_batch([Record(None, b"x" * 100, 0)] * 150)
    for records in (batch, bytearray(batch), memoryview(batch)):
        validate(records)
    bad = bytearray(raw_batch(raw_record(0) + raw_record(2), 2))
    for records in (bytes(bad), bad, memoryview(bad)):
        with pytest.raises(Exception, match="offsetDelta is 2"):
            validate(records)


# -- runs of records with one layout, checked a column at a time -----------------------------


def uniform_records(count: int, value_size: int = 100) -> list[bytes]:
    return [raw_record(i, None, b"x" * value_size) for i in range(count)]


def positions(records: list[bytes]) -> list[int]:
    """Where each record starts in its batch."""
    out, at = [], RECORDS_OFFSET
    for record in records:
        out.append(at)
        at += len(record)
    return out


@pytest.mark.parametrize(
    ("index", "field", "byte", "fragment"),
    [
        # Records 0-63: length (2 bytes), attributes, timestampDelta, offsetDelta, key,
        # value length (2 bytes), value, header count; from 64 on offsetDelta takes 2 bytes.
        (30, 4, 0x3E, "record 30: its offsetDelta is 31, not its index 30"),
        (100, 4, 0xCA, "record 100: its offsetDelta is 101, not its index 100"),
        (63, 3, 0x80, "record 63: "),  # timestampDelta now runs into the offsetDelta
        (70, 0, 0xDA, "record 70: its length is 109 but its fields take 108 bytes"),
        (5, 5, 0x05, "record 5: its key length is -3"),
        (120, 7, 0xCC, "record 120: its value length 102 does not fit in the record"),
        (147, -1, 0x02, "record 147: its header count 1 cannot fit in the record"),
    ],
)
def test_a_bad_field_deep_in_a_run_of_same_layout_records_is_found(
    index: int, field: int, byte: int, fragment: str
) -> None:
    """148 records of 100-byte values share a layout (one below index 64, one above), so they
    are checked a column at a time; one bad byte in any column is still found."""
    records = uniform_records(148)
    validate(raw_batch(b"".join(records), 148))
    batch = bytearray(raw_batch(b"".join(records), 148))
    start = positions(records)[index]
    at = start + field if field >= 0 else start + len(records[index]) + field
    assert batch[at] != byte
    batch[at] = byte
    code, message = refusal(with_crc(batch))
    assert code == ErrorCode.INVALID_RECORD
    assert fragment in message


@pytest.mark.parametrize("field", [0, 3, 4, 5, 7, -1])  # length, offsetDelta, value length, ...
def test_a_bad_byte_among_records_with_three_byte_offset_deltas_is_found(field: int) -> None:
    """From record 8192 on the offsetDelta takes three bytes; 9,000 small records of one
    layout are still checked a column at a time there, and one bad byte is still found."""
    records = uniform_records(9000, value_size=10)
    validate(raw_batch(b"".join(records), 9000))
    assert decodes_to_exactly_its_records(raw_batch(b"".join(records), 9000))
    batch = bytearray(raw_batch(b"".join(records), 9000))
    start = positions(records)[8500]
    at = start + field if field >= 0 else start + len(records[8500]) + field
    batch[at] ^= 0x01
    code, message = refusal(with_crc(batch))
    assert code == ErrorCode.INVALID_RECORD
    assert "record 8500" in message


@pytest.mark.parametrize("field", [2, 30, 90])  # attributes, inside the value
def test_bytes_no_rule_covers_may_differ_inside_a_run(field: int) -> None:
    records = uniform_records(148)
    batch = bytearray(raw_batch(b"".join(records), 148))
    for start in positions(records)[::7]:
        batch[start + field] ^= 0x5A
    validate(with_crc(batch))


def test_records_with_wider_varints_than_needed_are_accepted() -> None:
    """Kafka and decode_batch read a varint with needless continuation bytes (0x80 0x00 is 0)
    like the short one; a record so written may sit among others of its size."""
    padded = bytearray(raw_record(0, None, b"y" * 99))  # length, attributes, ts, delta 0, ...
    padded[0] += 2  # one byte longer: zig-zag length + 2
    padded[3:4] = b"\x80\x00"  # offsetDelta 0 in two bytes
    records = [bytes(padded), *uniform_records(80)[1:]]
    assert len(records[0]) == len(records[1])
    batch = raw_batch(b"".join(records), 80)
    validate(batch)
    assert decodes_to_exactly_its_records(batch)


# -- properties ------------------------------------------------------------------------------

_BYTES = st.one_of(
    st.none(),
    st.just(b""),
    st.binary(max_size=40),
    st.sampled_from([63, 64, 127, 128, 8191, 8192, 20_000]).map(lambda n: b"b" * n),
)
_HEADERS = st.lists(st.tuples(st.text(max_size=5), _BYTES), max_size=3).map(tuple)
_TIMESTAMPS = st.one_of(st.integers(0, 70), st.integers(-(2**40), 2**40))
_RECORDS = st.builds(Record, _BYTES, _BYTES, _TIMESTAMPS, _HEADERS)


@st.composite
def batches(draw: st.DrawFn) -> bytes:
    """Batches encode_batch makes: varied records, or many records of one layout."""
    if draw(st.booleans()):
        records = draw(st.lists(_RECORDS, min_size=1, max_size=20))
    else:
        count = draw(st.integers(1, 300))
        record = draw(st.builds(Record, _BYTES, _BYTES, st.integers(0, 70), _HEADERS))
        # Same layout, timestamps drifting apart as a producer's do during linger.ms.
        records = [record._replace(timestamp=record.timestamp + i % 3) for i in range(count)]
    return encode_batch(records)


def decodes_to_exactly_its_records(batch: bytes) -> bool:
    """The consumers' view: decode_batch succeeds with recordCount records at consecutive
    offsets from the base offset."""
    try:
        decoded = decode_batch(batch)
    except CorruptRecordError:
        return False
    offsets = [record.offset for record in decoded.records]
    return offsets == list(range(decoded.header.record_count))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_every_batch_encode_batch_makes_passes(batch: bytes) -> None:
    validate(batch)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches(),
    st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=3),
    st.one_of(st.none(), st.integers(1, 400)),
)
def test_a_batch_the_validator_accepts_decodes_to_exactly_record_count_records(
    batch: bytes, damage: list[tuple[float, int]], count: int | None
) -> None:
    """Damage the records (bytes, or the count) under a valid CRC: the validator accepts
    exactly the batches the consumers' decoder reads whole, with offsets as assigned."""
    tampered = bytearray(batch)
    for where, byte in damage:
        tampered[RECORDS_OFFSET + int(where * (len(batch) - RECORDS_OFFSET))] = byte
    if count is not None:
        struct.pack_into(">i", tampered, RECORDS_COUNT_OFFSET, count)
        struct.pack_into(">i", tampered, LAST_OFFSET_DELTA_OFFSET, count - 1)
    records = with_crc(tampered)
    try:
        validate_batches(records)
    except CorruptRecordError:
        return  # refused by framing or count checks before the records are walked
    try:
        validate(records)
        accepted = True
    except Exception as err:
        code, _ = _error_of(err)
        assert code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)
        accepted = False
    assert accepted == decodes_to_exactly_its_records(records)
