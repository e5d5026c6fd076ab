"""proto.transport.fetch_session against a real grpc.aio server: one stream, abandoned fetches,
timeouts, brokers without the method, and what the requests of an incremental fetch session
name."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import grpc
import grpc.aio
import pytest

from proto.topic_partition import TopicPartition
from proto.transport.fetch_session import FetchSession, PartitionFetch
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from tests.helpers import broker_methods_served


class Broker:
    """Fetch and FetchSession of the Broker service (the other methods are UNIMPLEMENTED):
    each fetch is answered with its fetch offset as the high watermark; a fetch at offset
    -1 is never answered (a long poll that outlives its fetcher)."""

    def __init__(self, *, sessions: bool = True) -> None:
        self.with_sessions = sessions
        self.sessions = 0
        self.unary = 0

    @staticmethod
    def answer(request: pb.FetchRequest) -> pb.FetchResponse:
        response = pb.FetchResponse()
        offset = request.topics[0].partitions[0].fetch_offset
        response.responses.add(topic="t").partitions.add(high_watermark=offset)
        return response

    async def FetchSession(
        self,
        request_iterator: AsyncIterator[pb.FetchRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> None:
        if not self.with_sessions:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        self.sessions += 1
        async for request in request_iterator:
            if self.never_answered(request):
                await asyncio.Event().wait()
            await context.write(self.answer(request))

    @staticmethod
    def never_answered(request: pb.FetchRequest) -> bool:
        return request.topics[0].partitions[0].fetch_offset < 0

    async def Fetch(
        self, request: pb.FetchRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.FetchResponse:
        self.unary += 1
        return self.answer(request)


def fetch_at(offset: int) -> pb.FetchRequest:
    request = pb.FetchRequest(replica_id=-1)
    request.topics.add(topic="t").partitions.add(partition=0, fetch_offset=offset)
    return request


def hw(response: pb.FetchResponse) -> int:
    return response.responses[0].partitions[0].high_watermark


def run(broker: Broker, scenario: Callable[[FetchSession], Coroutine[Any, Any, None]]) -> None:
    async def main() -> None:
        methods = {
            "FetchSession": grpc.stream_stream_rpc_method_handler(
                broker.FetchSession,
                request_deserializer=pb.FetchRequest.FromString,
                response_serializer=pb.FetchResponse.SerializeToString,
            ),
            "Fetch": grpc.unary_unary_rpc_method_handler(
                broker.Fetch,
                request_deserializer=pb.FetchRequest.FromString,
                response_serializer=pb.FetchResponse.SerializeToString,
            ),
        }
        async with broker_methods_served(methods) as channel:
            session = FetchSession(pb_grpc.BrokerStub(channel))
            try:
                await scenario(session)
            finally:
                session.close()

    asyncio.run(main())


def test_fetches_share_one_stream() -> None:
    broker = Broker()

    async def scenario(session: FetchSession) -> None:
        for offset in range(50):
            assert hw(await session.fetch(fetch_at(offset), 5)) == offset

    run(broker, scenario)
    assert (broker.sessions, broker.unary) == (1, 0)


def test_a_fetch_started_while_an_abandoned_one_unwinds_gets_its_own_stream() -> None:
    broker = Broker()

    async def scenario(session: FetchSession) -> None:
        stuck = asyncio.ensure_future(session.fetch(fetch_at(-1), 30))
        await asyncio.sleep(0.1)
        stuck.cancel()  # as a consumer's seek abandons its fetch; the task has not run yet
        fresh = asyncio.ensure_future(session.fetch(fetch_at(7), 5))
        with pytest.raises(asyncio.CancelledError):
            await stuck
        assert hw(await fresh) == 7
        assert hw(await session.fetch(fetch_at(8), 5)) == 8

    run(broker, scenario)
    assert broker.sessions == 2


def test_a_fetch_past_its_timeout_ends_the_stream_and_the_next_opens_another() -> None:
    broker = Broker()

    async def scenario(session: FetchSession) -> None:
        with pytest.raises(TimeoutError):
            await session.fetch(fetch_at(-1), 0.2)
        assert hw(await session.fetch(fetch_at(3), 5)) == 3

    run(broker, scenario)
    assert broker.sessions == 2


def test_a_broker_without_fetch_sessions_gets_unary_fetches() -> None:
    broker = Broker(sessions=False)

    async def scenario(session: FetchSession) -> None:
        for offset in range(3):
            assert hw(await session.fetch(fetch_at(offset), 5)) == offset
        assert not session.streaming

    run(broker, scenario)
    assert (broker.sessions, broker.unary) == (0, 3)


# -- incremental fetch sessions (KIP-227): what each request names --------------------------


class SessionBroker(Broker):
    """Records each request's named partitions and forgotten ones; answers every named
    partition, with UNKNOWN_TOPIC_OR_PARTITION for partition 9; a fetch offset of -1
    is never answered."""

    def __init__(self, *, sessions: bool = True) -> None:
        super().__init__(sessions=sessions)
        self.requests: list[tuple[bool, dict[int, int], list[int]]] = []
        """(incremental, {partition: fetch offset}, forgotten partitions) per request."""

    def answer(self, request: pb.FetchRequest) -> pb.FetchResponse:  # type: ignore[override]
        named = {p.partition: p.fetch_offset for t in request.topics for p in t.partitions}
        forgotten = [p for t in request.forgotten_topics for p in t.partitions]
        self.requests.append((request.incremental, named, forgotten))
        response = pb.FetchResponse()
        topic = response.responses.add(topic="t")
        for partition, offset in named.items():
            code = pb.UNKNOWN_TOPIC_OR_PARTITION if partition == 9 else pb.NONE
            topic.partitions.add(partition_index=partition, error_code=code, high_watermark=offset)
        return response

    @staticmethod
    def never_answered(request: pb.FetchRequest) -> bool:
        return any(p.fetch_offset < 0 for t in request.topics for p in t.partitions)


def wanted(**offsets: int) -> dict[TopicPartition, PartitionFetch]:
    return {TopicPartition("t", int(p[1:])): (3, o, 0, 1024) for p, o in offsets.items()}


HEADER = pb.FetchRequest(replica_id=2, max_wait_ms=0)


def test_a_session_names_everything_first_then_only_changes_and_what_it_drops() -> None:
    broker = SessionBroker()

    async def scenario(session: FetchSession) -> None:
        await session.fetch_partitions(HEADER, wanted(p0=0, p1=0, p2=0), 5)
        await session.fetch_partitions(HEADER, wanted(p0=0, p1=0, p2=0), 5)
        await session.fetch_partitions(HEADER, wanted(p0=5, p1=0, p2=0), 5)
        await session.fetch_partitions(HEADER, wanted(p0=5, p2=0), 5)
        await session.fetch_partitions(HEADER, wanted(p0=5, p1=7, p2=0), 5)

    run(broker, scenario)
    assert broker.requests == [
        (True, {0: 0, 1: 0, 2: 0}, []),
        (True, {}, []),
        (True, {0: 5}, []),
        (True, {}, [1]),
        (True, {1: 7}, []),
    ]
    assert broker.sessions == 1


def test_a_new_stream_starts_a_new_session_named_in_full() -> None:
    broker = SessionBroker()

    async def scenario(session: FetchSession) -> None:
        await session.fetch_partitions(HEADER, wanted(p0=0, p1=0), 5)
        with pytest.raises(TimeoutError):  # the stream is abandoned with its session
            await session.fetch_partitions(HEADER, wanted(p0=-1, p1=0), 0.2)
        await session.fetch_partitions(HEADER, wanted(p0=1, p1=0), 5)

    run(broker, scenario)
    assert broker.requests == [(True, {0: 0, 1: 0}, []), (True, {0: 1, 1: 0}, [])]
    assert broker.sessions == 2


def test_a_partition_answered_with_an_error_is_named_again() -> None:
    broker = SessionBroker()

    async def scenario(session: FetchSession) -> None:
        for _ in range(3):
            await session.fetch_partitions(HEADER, wanted(p0=0, p9=0), 5)

    run(broker, scenario)
    assert broker.requests == [
        (True, {0: 0, 9: 0}, []),
        (True, {9: 0}, []),
        (True, {9: 0}, []),
    ]


def test_a_broker_without_fetch_sessions_is_asked_in_full_every_time() -> None:
    broker = SessionBroker(sessions=False)

    async def scenario(session: FetchSession) -> None:
        await session.fetch_partitions(HEADER, wanted(p0=0, p1=0), 5)
        await session.fetch_partitions(HEADER, wanted(p0=1, p1=0), 5)

    run(broker, scenario)
    assert broker.requests == [(False, {0: 0, 1: 0}, []), (False, {0: 1, 1: 0}, [])]
    assert broker.unary == 2
