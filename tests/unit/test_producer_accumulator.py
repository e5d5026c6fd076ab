"""RecordAccumulator: batching by batch_size and linger_ms, readiness, retries, expiry; the
record size arithmetic behind batch_size; IdempotenceState's sequence numbers. The clock is
passed in, so nothing here sleeps."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client.producer import (
    IdempotenceState,
    ProducerBatch,
    RecordAccumulator,
    record_size,
)
from proto.records.record_batch import HEADER_SIZE, Record, decode_batch, encode_batch
from proto.topic_partition import TopicPartition

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


def rec(value: bytes, key: bytes | None = None, ts: int = 1_700_000_000_000) -> Record:
    return Record(key, value, ts)


def first_value(batch: ProducerBatch) -> bytes | None:
    """The value of a batch's first record, decoded from the bytes it would send."""
    return decode_batch(batch.builder.build(-1, -1, -1)).records[0].value


def one_record_size(value: bytes) -> int:
    return record_size(0, 0, None, value)


# -- record size --------------------------------------------------------------------------------


records_strategy = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=300),
        st.none() | st.binary(max_size=300),
        st.integers(min_value=-(2**40), max_value=2**40),
        st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=200)
@given(records_strategy)
def test_record_size_is_exactly_what_encode_batch_writes(
    fields: list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]],
) -> None:
    base = 1_700_000_000_000
    records = [Record(k, v, base + dt, tuple(h)) for k, v, dt, h in fields]
    expected = HEADER_SIZE + sum(
        record_size(i, r.timestamp - records[0].timestamp, r.key, r.value, r.headers)
        for i, r in enumerate(records)
    )
    assert len(encode_batch(records)) == expected


def test_batch_size_tracks_the_encoded_size() -> None:
    async def scenario() -> None:
        batch = ProducerBatch(TP0, 0.0, 100.0)
        for i in range(10):
            assert batch.try_append(rec(b"v" * i, key=b"k"), 1 << 20) is not None
        assert batch.size == len(batch.encode(-1, -1, -1))

    run(scenario)


# -- batching -----------------------------------------------------------------------------------


def test_records_share_a_batch_until_batch_size() -> None:
    async def scenario() -> None:
        value = b"x" * 100
        per_record = one_record_size(value)
        acc = RecordAccumulator(HEADER_SIZE + 3 * per_record, 1000, 120_000)
        for _ in range(7):
            assert acc.append(TP0, rec(value), now=0.0) is not None
        sizes = [b.record_count for b in acc.queued(TP0)]
        assert sizes == [3, 3, 1]
        full = acc.queued(TP0)
        assert [b.closed for b in full] == [True, True, False]
        assert all(b.size <= acc.batch_size for b in full)

    run(scenario)


def test_a_record_larger_than_batch_size_gets_a_batch_of_its_own() -> None:
    async def scenario() -> None:
        acc = RecordAccumulator(200, 1000, 120_000)
        acc.append(TP0, rec(b"small"), now=0.0)
        acc.append(TP0, rec(b"L" * 1000), now=0.0)
        acc.append(TP0, rec(b"small"), now=0.0)
        assert [b.record_count for b in acc.queued(TP0)] == [1, 1, 1]
        assert acc.queued(TP0)[1].closed  # full at once

    run(scenario)


def test_batch_size_zero_sends_every_record_alone() -> None:
    async def scenario() -> None:
        acc = RecordAccumulator(0, 1000, 120_000)
        for _ in range(3):
            acc.append(TP0, rec(b"v"), now=0.0)
        batches = acc.queued(TP0)
        assert [b.record_count for b in batches] == [1, 1, 1]
        assert all(b.closed for b in batches)

    run(scenario)


def test_a_batch_that_is_not_full_waits_for_linger() -> None:
    async def scenario() -> None:
        acc = RecordAccumulator(16384, 5, 120_000)
        acc.append(TP0, rec(b"a"), now=10.0)
        acc.append(TP0, rec(b"b"), now=10.003)
        ready, next_time = acc.ready(10.004)
        assert ready == []
        assert next_time == pytest.approx(10.005)  # linger counts from the first record
        ready, _ = acc.ready(10.005)
        assert [b.record_count for b in ready] == [2]

    run(scenario)


def test_a_full_batch_is_ready_before_linger() -> None:
    async def scenario() -> None:
        value = b"x" * 50
        acc = RecordAccumulator(HEADER_SIZE + 2 * one_record_size(value), 10_000, 120_000)
        acc.append(TP0, rec(value), now=0.0)
        assert acc.ready(0.0)[0] == []
        acc.append(TP0, rec(value), now=0.0)
        ready, _ = acc.ready(0.0)
        assert [b.record_count for b in ready] == [2]

    run(scenario)


def test_only_the_head_of_each_partition_is_ready_and_muted_partitions_wait() -> None:
    async def scenario() -> None:
        acc = RecordAccumulator(0, 0, 120_000)
        acc.append(TP0, rec(b"1"), now=0.0)
        acc.append(TP0, rec(b"2"), now=0.0)
        acc.append(TP1, rec(b"3"), now=0.0)
        ready, _ = acc.ready(0.0)
        assert sorted((b.tp, first_value(b)) for b in ready) == [(TP0, b"1"), (TP1, b"3")]
        ready, _ = acc.ready(0.0, muted={TP0})
        assert [b.tp for b in ready] == [TP1]

    run(scenario)


def test_flush_makes_every_batch_ready_at_once() -> None:
    async def scenario() -> None:
        acc = RecordAccumulator(16384, 60_000, 120_000)
        acc.append(TP0, rec(b"a"), now=0.0)
        assert acc.ready(0.0)[0] == []
        acc.flushing += 1
        assert len(acc.ready(0.0)[0]) == 1

    run(scenario)


def test_drain_closes_the_open_batch_and_tells_the_partitioner() -> None:
    async def scenario() -> None:
        closed: list[TopicPartition] = []
        acc = RecordAccumulator(16384, 0, 120_000, lambda tp, size, limit: closed.append(tp))
        acc.append(TP0, rec(b"a"), now=0.0)
        (head,), _ = acc.ready(0.0)
        acc.drain(head)
        assert closed == [TP0]
        assert acc.queued(TP0) == []
        acc.append(TP0, rec(b"b"), now=0.0)
        assert acc.queued(TP0)[0] is not head  # a new batch; the drained one is sealed

    run(scenario)


def test_abort_on_new_batch_closes_the_full_batch_and_returns_none() -> None:
    async def scenario() -> None:
        closed: list[TopicPartition] = []
        value = b"x" * 50
        batch_size = HEADER_SIZE + one_record_size(value) + 10  # room for one record only
        acc = RecordAccumulator(
            batch_size, 1000, 120_000, lambda tp, size, limit: closed.append(tp)
        )
        assert acc.append(TP0, rec(value), now=0.0, abort_on_new_batch=True) is not None
        assert closed == []  # the first batch of a partition is not a reason to move on
        assert acc.append(TP0, rec(value), now=0.0, abort_on_new_batch=True) is None
        assert closed == [TP0]
        assert [b.record_count for b in acc.queued(TP0)] == [1]
        assert acc.append(TP0, rec(value), now=0.0) is not None  # without abort: new batch
        assert [b.record_count for b in acc.queued(TP0)] == [1, 1]

    run(scenario)


def test_a_retried_batch_goes_back_to_the_head_after_its_backoff() -> None:
    async def scenario() -> None:
        acc = RecordAccumulator(0, 0, 120_000)
        acc.append(TP0, rec(b"first"), now=0.0)
        acc.append(TP0, rec(b"second"), now=0.0)
        (head,), _ = acc.ready(0.0)
        acc.drain(head)
        acc.reenqueue(head, retry_at=0.1)
        ready, next_time = acc.ready(0.05)
        assert ready == []  # the second batch must not overtake the first
        assert next_time == pytest.approx(0.1)
        (again,), _ = acc.ready(0.1)
        assert again is head

    run(scenario)


def test_batches_past_their_delivery_deadline_expire_oldest_first() -> None:
    async def scenario() -> None:
        acc = RecordAccumulator(0, 0, 1000)
        acc.append(TP0, rec(b"a"), now=0.0)
        acc.append(TP0, rec(b"b"), now=0.5)
        acc.append(TP1, rec(b"c"), now=0.7)
        assert acc.ready(0.0, muted={TP0, TP1})[1] == pytest.approx(1.0)
        expired = acc.expire(1.2)
        assert [first_value(b) for b in expired] == [b"a"]
        expired = acc.expire(1.7)
        assert sorted(first_value(b) or b"" for b in expired) == [b"b", b"c"]
        assert acc.ready(2.0) == ([], math.inf)

    run(scenario)


def test_completing_a_batch_resolves_every_record_handle_in_order() -> None:
    async def scenario() -> None:
        acc = RecordAccumulator(16384, 0, 120_000)
        futures = [acc.append(TP0, rec(bytes([i]), ts=1000 + i), now=0.0) for i in range(3)]
        (batch,) = acc.queued(TP0)
        batch.complete(base_offset=40)
        results = [await f for f in futures if f is not None]
        assert [(m.partition, m.offset, m.timestamp) for m in results] == [
            (0, 40, 1000),
            (0, 41, 1001),
            (0, 42, 1002),
        ]
        assert batch.done.done()

    run(scenario)


def test_log_append_time_replaces_the_create_time() -> None:
    async def scenario() -> None:
        acc = RecordAccumulator(16384, 0, 120_000)
        future = acc.append(TP0, rec(b"a", ts=1000), now=0.0)
        acc.queued(TP0)[0].complete(base_offset=0, log_append_time_ms=5000)
        assert future is not None
        assert (await future).timestamp == 5000

    run(scenario)


def test_encoded_batch_carries_producer_id_epoch_and_sequence() -> None:
    async def scenario() -> None:
        batch = ProducerBatch(TP0, 0.0, 1.0)
        batch.try_append(rec(b"a"), 16384)
        batch.try_append(rec(b"b"), 16384)
        header = decode_batch(batch.encode(77, 3, 12)).header
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 12)
        assert header.record_count == 2

    run(scenario)


# -- sequence numbers ----------------------------------------------------------------------------


def test_sequences_count_records_per_partition() -> None:
    state = IdempotenceState()
    state.set_producer_id(5, 0)
    assert state.next_sequence(TP0, 3) == 0
    assert state.next_sequence(TP0, 2) == 3
    assert state.next_sequence(TP1, 4) == 0
    assert state.next_sequence(TP0, 1) == 5
    assert state.sequence_of(TP1) == 4


def test_sequences_wrap_past_int32_max_as_kafkas() -> None:
    state = IdempotenceState()
    state.set_producer_id(5, 0)
    state.next_sequence(TP0, 2**31 - 2)
    assert state.next_sequence(TP0, 5) == 2**31 - 2
    assert state.sequence_of(TP0) == 3


def test_a_new_producer_id_restarts_every_sequence() -> None:
    state = IdempotenceState()
    state.set_producer_id(5, 0)
    state.next_sequence(TP0, 10)
    state.needs_reset = True
    state.set_producer_id(6, 0)
    assert (state.producer_id, state.needs_reset, state.sequence_of(TP0)) == (6, False, 0)
