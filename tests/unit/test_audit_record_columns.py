"""The audit's column decoder (chaos.audit.record_columns) against the codec's decode_batch and
decode_rows: the same records, field for field, and the same batches rejected, with the same
reason."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from chaos.audit.record_columns import RecordColumns, decode_columns
from proto.records.compression import Codec
from proto.records.record_batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
    CorruptRecordError,
    Record,
    compute_crc,
    decode_batch,
    decode_rows,
    encode_batch,
    inflated,
    parse_header,
    stamp_batch,
)

BASE_TIMESTAMP = 1_700_000_000_000

values = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(
    st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=2
).map(tuple)
records = st.lists(
    st.builds(
        Record,
        key=st.one_of(st.none(), st.binary(max_size=8)),
        value=values,
        timestamp=st.integers(BASE_TIMESTAMP - 10**6, BASE_TIMESTAMP + 10**12),
        headers=headers,
    ),
    min_size=1,
    max_size=30,
)


@st.composite
def uniform_records(draw: st.DrawFn) -> list[Record]:
    """Records of one layout, as producers send them: the same value length, no key, no
    headers, timestamps a few ms apart: the runs the decoder cuts at their stride."""
    count = draw(st.integers(1, 300))
    size = draw(st.integers(0, 30))
    step = draw(st.sampled_from([0, 1, 3, 70_000]))
    return [
        Record(
            key=None,
            value=draw(st.binary(min_size=size, max_size=size)) if i % 97 else bytes(size),
            timestamp=BASE_TIMESTAMP + i * step,
        )
        for i in range(count)
    ]


def _batch(
    records: list[Record], base_offset: int = 1000, epoch: int = 3, compression: int = 0
) -> bytes:
    data = bytearray(
        encode_batch(
            records, producer_id=7, producer_epoch=1, base_sequence=5, compression=compression
        )
    )
    stamp_batch(data, 0, base_offset, epoch)
    return bytes(data)


def _rows(cols: RecordColumns, data: bytes) -> list[tuple[Any, ...]]:
    def field(start: int, length: int) -> bytes | None:
        return None if start < 0 else data[start : start + length]

    return [
        (
            int(cols.batch[i]),
            int(cols.offset[i]),
            field(int(cols.key_start[i]), int(cols.key_length[i])),
            field(int(cols.value_start[i]), int(cols.value_length[i])),
            int(cols.timestamp[i]),
            cols.headers.get(i, ()),
        )
        for i in range(len(cols))
    ]


def _expected(data: bytes, positions: list[int]) -> list[tuple[Any, ...]]:
    rows = []
    for b, at in enumerate(positions):
        for r in decode_batch(data, at).records:
            rows.append((b, r.offset, r.key, r.value, r.timestamp, r.headers))
    return rows


def _decode(data: bytes, positions: list[int]) -> RecordColumns:
    return decode_columns(bytearray(data), [(at, parse_header(data, at)) for at in positions])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(records, uniform_records()), min_size=1, max_size=4))
def test_columns_hold_the_records_decode_batch_decodes(batches: list[list[Record]]) -> None:
    data = b""
    positions = []
    offset = 0
    for batch in batches:
        positions.append(len(data))
        data += _batch(batch, base_offset=offset)
        offset += len(batch)
    cols = _decode(data, positions)
    assert not cols.errors
    assert _rows(cols, data) == _expected(data, positions)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.one_of(records, uniform_records()), st.sampled_from(list(Codec))),
        min_size=1,
        max_size=4,
    )
)
def test_inflated_batches_hold_the_records_decode_batch_finds_compressed(
    batches: list[tuple[list[Record], Codec]],
) -> None:
    """The audit reads compressed batches inflated, one after another in one buffer (and
    uncompressed ones copied there): the records are those decode_batch finds in the
    batches as stored."""
    stored = b""
    positions = []
    offset = 0
    for batch, codec in batches:
        positions.append(len(stored))
        stored += _batch(batch, base_offset=offset, compression=codec)
        offset += len(batch)
    buffer = bytearray()
    read = []
    for at in positions:
        header = parse_header(stored, at)
        piece = stored[at : at + header.size]
        if header.compression:
            piece, header = inflated(stored, at, header)
        read.append((len(buffer), header))
        buffer += piece
    cols = decode_columns(buffer, read)
    assert not cols.errors
    assert _rows(cols, bytes(buffer)) == _expected(stored, positions)


def test_batches_to_skip_are_not_read_and_give_no_record_nor_error() -> None:
    first = _batch([Record(None, b"a", BASE_TIMESTAMP)], base_offset=0)
    junk = bytes(len(first))  # not a batch at all: never read
    last = _batch([Record(None, b"c", BASE_TIMESTAMP)], base_offset=2)
    data = first + junk + last
    batches = [
        (0, parse_header(first)),
        (len(first), parse_header(first)),
        (2 * len(first), parse_header(last)),
    ]
    cols = decode_columns(data, batches, skip={1})
    assert not cols.errors
    assert cols.batch.tolist() == [0, 2]
    assert cols.offset.tolist() == [0, 2]


def test_a_batch_of_fixed_size_records_is_cut_into_runs_of_its_layouts() -> None:
    records = [Record(None, b"v%03d" % i, BASE_TIMESTAMP + i) for i in range(150)]
    data = _batch(records)
    cols = _decode(data, [0])
    assert cols.offset.tolist() == list(range(1000, 1150))
    assert cols.timestamp.tolist() == [BASE_TIMESTAMP + i for i in range(150)]
    assert _rows(cols, data) == _expected(data, [0])


def test_log_append_time_gives_every_record_the_batchs_max_timestamp() -> None:
    records = [Record(None, b"x" * 10, BASE_TIMESTAMP + i) for i in range(100)]
    data = bytearray(_batch(records))
    data[ATTRIBUTES_OFFSET + 1] |= TIMESTAMP_TYPE_MASK  # attributes is big-endian i16
    data[CRC_OFFSET : CRC_OFFSET + 4] = compute_crc(data[ATTRIBUTES_OFFSET:]).to_bytes(4, "big")
    cols = _decode(bytes(data), [0])
    assert set(cols.timestamp.tolist()) == {BASE_TIMESTAMP + 99}
    assert _rows(cols, bytes(data)) == _expected(bytes(data), [0])


def _reason(data: bytes) -> str | None:
    """decode_rows's verdict on a batch: None when its records parse."""
    try:
        decode_rows(data, 0, parse_header(data), tuple, min_offset=-(2**63))
    except CorruptRecordError as e:
        return e.reason
    return None


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(records, uniform_records()),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=3),
)
def test_a_batch_whose_records_are_damaged_is_judged_as_decode_rows_judges_it(
    batch: list[Record], flips: list[tuple[int, int]]
) -> None:
    # Bytes of the records changed and the CRC recomputed: what a buggy producer sends and
    # a broker that does not walk the records accepts.
    data = bytearray(_batch(batch))
    for where, mask in flips:
        data[RECORDS_OFFSET + where % (len(data) - RECORDS_OFFSET)] ^= mask
    data[CRC_OFFSET : CRC_OFFSET + 4] = compute_crc(data[ATTRIBUTES_OFFSET:]).to_bytes(4, "big")
    damaged = bytes(data)
    good = _batch([Record(None, b"ok", BASE_TIMESTAMP)], base_offset=0)
    both = good + damaged
    cols = _decode(both, [0, len(good)])
    reason = _reason(damaged)
    event("records parse" if reason is None else "records rejected")
    if reason is None:
        assert not cols.errors
        assert _rows(cols, both) == _expected(both, [0, len(good)])
    else:
        assert cols.errors == {1: reason}
        assert cols.batch.tolist() == [0]  # the damaged batch contributes no record


def test_a_count_larger_than_the_records_is_an_error_naming_the_record() -> None:
    data = bytearray(_batch([Record(None, b"a", BASE_TIMESTAMP)] * 3))
    data[RECORDS_OFFSET - 4 : RECORDS_OFFSET] = (4).to_bytes(4, "big")  # recordCount
    data[CRC_OFFSET : CRC_OFFSET + 4] = compute_crc(data[ATTRIBUTES_OFFSET:]).to_bytes(4, "big")
    cols = _decode(bytes(data), [0])
    assert cols.errors[0] == _reason(bytes(data))
    assert "record 3" in cols.errors[0]
    assert len(cols) == 0


@pytest.mark.parametrize("width", [1, 2, 3, 9])
def test_timestamp_deltas_of_every_width_decode(width: int) -> None:
    delta = {1: 5, 2: 5_000, 3: 500_000, 9: 2**62}[width]
    records = [Record(None, b"v", BASE_TIMESTAMP + delta) for _ in range(80)]
    records[0] = Record(None, b"v", BASE_TIMESTAMP)
    data = _batch(records)
    assert _rows(_decode(data, [0]), data) == _expected(data, [0])
    assert np.all(_decode(data, [0]).timestamp[1:] == BASE_TIMESTAMP + delta)
