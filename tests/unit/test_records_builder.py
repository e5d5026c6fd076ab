"""RecordsBuilder: the producer's one-pass batch encoder is byte for byte what encode_batch
writes for the same records, its size is always the size of the batch it builds, and a
rebuild under another producer id changes the header only."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client.record_accumulator import record_size
from proto.records.builder import RecordsBuilder, batch_of_one_size, encode_record_tail
from proto.records.record_batch import (
    HEADER_SIZE,
    NO_TIMESTAMP,
    TRANSACTIONAL_FLAG_MASK,
    Record,
    check_batch,
    decode_batch,
    encode_batch,
)

BASE = 1_700_000_000_000

values_strategy = st.lists(st.none() | st.binary(max_size=300), min_size=1, max_size=40)
record_strategy = st.tuples(
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=200),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=10)), max_size=3),
)
OneRecord = tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]
ManyValues = tuple[list[bytes | None], int]
# A batch is built from single records and runs of bulk values, in any order.
steps_strategy = st.lists(
    record_strategy | st.tuples(values_strategy, st.integers(-1000, 1000)),
    min_size=1,
    max_size=8,
)


@settings(max_examples=300)
@given(steps_strategy, st.integers(0, 2**40), st.integers(0, 2**15 - 1), st.integers(0, 2**31 - 1))
def test_builder_writes_exactly_what_encode_batch_writes(
    steps: list[OneRecord | ManyValues], producer_id: int, epoch: int, sequence: int
) -> None:
    builder = RecordsBuilder()
    expected: list[Record] = []
    for step in steps:
        if len(step) == 4:
            key, value, dt, headers = step
            builder.append(BASE + dt, key, value, tuple(headers))
            expected.append(Record(key, value, BASE + dt, tuple(headers)))
        else:
            values, dt = step
            assert builder.append_values(values, 0, BASE + dt, 1 << 30) == len(values)
            expected += [Record(None, v, BASE + dt) for v in values]
    built = builder.build(producer_id, epoch, sequence)
    reference = encode_batch(
        expected, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence
    )
    assert built == reference
    assert builder.size == len(built)
    assert len(builder) == len(expected)


def test_offset_deltas_past_the_lookup_table_still_encode_exactly() -> None:
    values = [b""] * 20_000  # offset deltas beyond 16383 take 3-byte varints
    builder = RecordsBuilder()
    assert builder.append_values(values, 0, BASE, 1 << 30) == len(values)
    built = builder.build(-1, -1, -1)
    assert built == encode_batch([Record(None, b"", BASE)] * len(values))
    assert [r.offset for r in decode_batch(built).records][-3:] == [19_997, 19_998, 19_999]


def test_append_values_stops_at_the_limit_and_takes_one_record_into_an_empty_batch() -> None:
    builder = RecordsBuilder()
    values = [bytes(100)] * 50
    end = builder.append_values(values, 0, BASE, 1000)
    assert 0 < end < 50
    assert builder.size <= 1000
    # the next record would not have fitted
    single = RecordsBuilder()
    single.append_values(values, 0, BASE, 1 << 20)
    assert builder.size + (single.size - HEADER_SIZE) > 1000
    # resuming where it stopped, from another index
    assert builder.append_values(values, end, BASE, 1000) == end
    huge = RecordsBuilder()
    assert huge.append_values([bytes(5000), b"x"], 0, BASE, 1000) == 1
    assert huge.size > 1000


def test_append_refuses_a_record_over_the_limit_unless_the_batch_is_empty() -> None:
    builder = RecordsBuilder()
    assert builder.append(BASE, b"k", bytes(2000), (), limit=100)
    assert not builder.append(BASE, b"k", b"v", (), limit=100)
    assert len(builder) == 1
    size = record_size(1, 0, b"k", b"v")
    before = builder.size
    assert builder.append(BASE, b"k", b"v")  # no limit
    assert builder.size == before + size


def test_a_rebuild_under_a_new_producer_id_changes_only_the_header() -> None:
    builder = RecordsBuilder()
    builder.append_values([b"a", b"b", None], 0, BASE, 1 << 20)
    first = builder.build(7, 0, 0)
    second = builder.build(8, 1, 42)
    assert first[HEADER_SIZE:] == second[HEADER_SIZE:]
    assert first != second
    header = check_batch(second)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (8, 1, 42)
    builder.append(BASE + 5, None, b"c")  # more records after a build are still encoded
    third = decode_batch(builder.build(8, 1, 42))
    assert [r.value for r in third.records] == [b"a", b"b", None, b"c"]
    assert third.header.max_timestamp == BASE + 5


def test_an_empty_batch_cannot_be_built() -> None:
    builder = RecordsBuilder()
    assert builder.base_timestamp == NO_TIMESTAMP
    with pytest.raises(ValueError, match="at least one record"):
        builder.build(-1, -1, -1)


@settings(max_examples=150)
@given(
    st.integers(0, 150),  # records already in the batch
    st.integers(1, 400),  # values appended at once, all of one length
    st.sampled_from([0, 1, 7, 100, 200, 1000]),
    st.integers(200, 300_000),  # limit
    st.integers(-5, 5),  # the call's timestamp, from the first record's
)
def test_values_of_one_length_take_the_uniform_path_and_encode_exactly(
    before: int, count: int, length: int, limit: int, dt: int
) -> None:
    builder = RecordsBuilder()
    expected = []
    if before:
        builder.append_values([b"x" * 3] * before, 0, BASE, 1 << 30)
        expected = [Record(None, b"x" * 3, BASE)] * before
    values = [bytes([i % 256]) * length for i in range(count)]
    size_before = builder.size
    end = builder.append_values(values, 0, BASE + dt, limit)
    expected += [Record(None, v, BASE + dt) for v in values[:end]]
    if not expected:
        return
    built = builder.build(1, 0, 0)
    assert built == encode_batch(expected, producer_id=1, producer_epoch=0, base_sequence=0)
    assert builder.size == len(built)
    if end < count:  # it stopped at the limit: the next record would not have fitted
        one_more = RecordsBuilder()
        if before:
            one_more.append_values([b"x" * 3] * before, 0, BASE, 1 << 30)
        one_more.append_values(values[: end + 1], 0, BASE + dt, 1 << 30)
        assert one_more.size > limit
    if end and (before or end > 1):  # what it took beyond the one record it must take fits
        assert builder.size <= max(limit, size_before)


def test_offset_deltas_crossing_8192_take_the_uniform_path_exactly() -> None:
    values = [b"v" * 10] * 9000
    builder = RecordsBuilder()
    assert builder.append_values(values, 0, BASE, 1 << 30) == 9000
    assert builder.build(-1, -1, -1) == encode_batch([Record(None, b"v" * 10, BASE)] * 9000)


def test_a_call_that_appends_nothing_leaves_the_max_timestamp() -> None:
    builder = RecordsBuilder()
    builder.append_values([bytes(100)], 0, BASE, 1 << 20)
    assert builder.append_values([bytes(100)], 0, BASE + 50, builder.size) == 0
    assert builder.max_timestamp == BASE
    assert builder.build(-1, -1, -1) == encode_batch([Record(None, bytes(100), BASE)])


@settings(max_examples=200)
@given(record_strategy)
def test_a_record_tail_gives_the_exact_size_of_a_batch_of_one(record: OneRecord) -> None:
    key, value, _, headers = record
    tail = encode_record_tail(key, value, headers)
    assert batch_of_one_size(tail) == HEADER_SIZE + record_size(0, 0, key, value, headers)
    builder = RecordsBuilder()
    assert builder.append_tail(BASE, tail, 0) == batch_of_one_size(tail) - HEADER_SIZE
    assert builder.size == batch_of_one_size(tail)


@pytest.mark.parametrize(
    ("key", "value", "headers", "message"),
    [
        (None, "text", [], "value must be bytes or None, got str"),
        (bytearray(b"k"), b"v", [], "key must be bytes or None, got bytearray"),
        (None, b"v", [(1, b"x")], "header keys must be str, got int"),
        (None, b"v", [("h", "x")], "header 'h' must be bytes or None, got str"),
    ],
)
def test_a_record_tail_refuses_what_is_not_bytes(
    key: object, value: object, headers: list[tuple[object, object]], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        encode_record_tail(key, value, headers)  # type: ignore[arg-type]


@pytest.mark.parametrize("codec", [0, 3])  # none, lz4
def test_a_transactional_batch_is_what_encode_batch_writes_with_the_flag(codec: int) -> None:
    builder = RecordsBuilder(compression=codec) if codec else RecordsBuilder()
    records = [Record(b"k", b"v" * 50, BASE), Record(None, b"w", BASE + 1)]
    for record in records:
        builder.append(record.timestamp, record.key, record.value, ())
    built = builder.build(7, 2, 10, flags=TRANSACTIONAL_FLAG_MASK)
    assert decode_batch(built).header.is_transactional
    assert [(r.key, r.value) for r in decode_batch(built).records] == [
        (r.key, r.value) for r in records
    ]
    if not codec:
        assert built == encode_batch(
            records, producer_id=7, producer_epoch=2, base_sequence=10,
            flags=TRANSACTIONAL_FLAG_MASK,
        )  # fmt: skip
