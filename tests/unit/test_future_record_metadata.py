"""FutureRecordMetadata and ProduceRequestResult: one outcome per batch, read by a light
handle per record. Offsets per record across batches and partitions, one error for every
record of a failed batch, callbacks, and silence for handles nobody looks at."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from client.producer import FutureRecordMetadata, ProducerClosedError, RecordAccumulator
from client.producer_config import RecordMetadata
from proto import errors
from proto.records.record_batch import Record
from proto.topic_partition import TopicPartition
from proto.wire.minibroker_pb2 import ErrorCode

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


def append(acc: RecordAccumulator, tp: TopicPartition, value: bytes) -> FutureRecordMetadata:
    handle = acc.append(tp, Record(None, value, 1000 + len(value)), now=0.0)
    assert handle is not None
    return handle


def test_each_record_reads_base_offset_plus_its_index_across_batches_and_partitions() -> None:
    async def scenario() -> None:
        acc = RecordAccumulator(200, 0, 120_000)  # a few 30-byte records per batch
        handles = [(tp, append(acc, tp, bytes(30))) for _ in range(12) for tp in (TP0, TP1)]
        bases = {TP0: 100, TP1: 7}
        for tp in (TP0, TP1):
            batches = acc.queued(tp)
            assert len(batches) > 2, "the test needs several batches per partition"
            for batch in batches:
                batch.complete(base_offset=bases[tp])
                bases[tp] += batch.record_count
        for tp, start in ((TP0, 100), (TP1, 7)):
            mine = [h for t, h in handles if t == tp]
            assert all(h.done() for h in mine)
            assert [h.result().offset for h in mine] == list(range(start, start + 12))
            assert [(await h).offset for h in mine] == list(range(start, start + 12))
            assert {h.result().partition for h in mine} == {tp.partition}
            assert all(isinstance(h.result(), RecordMetadata) for h in mine)

    run(scenario)


def test_a_handle_waits_for_its_batch_and_has_no_result_before() -> None:
    async def scenario() -> None:
        acc = RecordAccumulator(16384, 0, 120_000)
        handle = append(acc, TP0, b"v")
        assert not handle.done()
        assert not handle.cancelled()
        with pytest.raises(asyncio.InvalidStateError):
            handle.result()
        with pytest.raises(asyncio.InvalidStateError):
            handle.exception()
        waiter = asyncio.create_task(_await(handle))
        await asyncio.sleep(0)
        assert not waiter.done()
        acc.queued(TP0)[0].complete(base_offset=5, log_append_time_ms=-1)
        assert (await waiter) == RecordMetadata("t", 0, 5, 1001)
        assert handle.cancel() is False
        assert handle.exception() is None

    run(scenario)


async def _await(handle: FutureRecordMetadata) -> RecordMetadata:
    return await handle


def test_a_failed_batch_fails_every_record_with_its_error() -> None:
    async def scenario() -> None:
        acc = RecordAccumulator(16384, 0, 120_000)
        handles = [append(acc, TP0, b"%d" % i) for i in range(3)]
        error = errors.for_code(ErrorCode.CORRUPT_MESSAGE, "refused")
        assert error is not None
        acc.queued(TP0)[0].fail(error)
        for handle in handles:
            assert handle.done()
            assert handle.exception() is error
            with pytest.raises(type(error), match="refused"):
                handle.result()
            with pytest.raises(type(error)):
                await handle
        # Raising it again and again does not pile frames onto its traceback.
        depth = _traceback_depth(handles[0])
        assert _traceback_depth(handles[0]) == depth

    run(scenario)


def _traceback_depth(handle: FutureRecordMetadata) -> int:
    try:
        handle.result()
    except Exception as e:
        tb, depth = e.__traceback__, 0
        while tb is not None:
            tb, depth = tb.tb_next, depth + 1
        return depth
    raise AssertionError("the handle did not raise")


def test_done_callbacks_run_once_each_from_the_loop_after_the_outcome() -> None:
    async def scenario() -> None:
        acc = RecordAccumulator(16384, 0, 120_000)
        handles = [append(acc, TP0, b"%d" % i) for i in range(3)]
        seen: list[int] = []
        for handle in handles:
            handle.add_done_callback(lambda h: seen.append(h.result().offset))
        acc.queued(TP0)[0].complete(base_offset=10)
        assert seen == []  # not inside the completion: from the loop
        await asyncio.sleep(0)
        assert seen == [10, 11, 12]
        handles[0].add_done_callback(lambda h: seen.append(-h.result().offset))
        await asyncio.sleep(0)
        assert seen == [10, 11, 12, -10]

    run(scenario)


def test_handles_never_looked_at_say_nothing_when_dropped_whatever_their_outcome() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        reported: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _, context: reported.append(context))
        acc = RecordAccumulator(16384, 0, 120_000)
        for _ in range(3):
            append(acc, TP0, b"ok")
            append(acc, TP1, b"lost")
        acc.queued(TP0)[0].complete(base_offset=0)
        acc.queued(TP1)[0].fail(ProducerClosedError("closed before delivery"))
        acc.remove_all()
        gc.collect()
        await asyncio.sleep(0)
        assert reported == []  # no "exception was never retrieved"

    run(scenario)  # and no warning either: the suite turns warnings into errors
