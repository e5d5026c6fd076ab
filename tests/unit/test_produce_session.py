"""client.produce_session against a real grpc.aio server: answers matched by correlation id,
requests in flight failing together, and nothing left unretrieved."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import grpc
import grpc.aio

from client.produce_session import ProduceSession, ProduceSessionEndedError
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from tests.helpers import broker_methods_served


class Broker:
    """ProduceSession of the Broker service: answers each request, in reverse order of
    arrival per pair (answers may overtake one another), unless ``silent``."""

    def __init__(self) -> None:
        self.silent = False
        self.stalled = False
        """Reads nothing: a large request's write waits on flow control."""
        self.sessions = 0

    async def ProduceSession(
        self,
        request_iterator: AsyncIterator[pb.ProduceRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> None:
        self.sessions += 1
        if self.stalled:
            await asyncio.Event().wait()
        held: list[pb.ProduceRequest] = []
        async for request in request_iterator:
            if self.silent:
                continue
            held.append(request)
            if len(held) == 2:
                for r in reversed(held):
                    response = pb.ProduceResponse(correlation_id=r.correlation_id)
                    response.responses.add(name=r.topics[0].name).partitions.add(
                        index=r.topics[0].partitions[0].index
                    )
                    await context.write(response)
                held.clear()


def request(partition: int, records: bytes = b"x") -> pb.ProduceRequest:
    r = pb.ProduceRequest(acks=-1, timeout_ms=1000)
    r.topics.add(name="t").partitions.add(index=partition, records=records)
    return r


def run(broker: Broker, scenario: Callable[[ProduceSession], Coroutine[Any, Any, None]]) -> None:
    async def main() -> None:
        unretrieved: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _, c: unretrieved.append(c))
        handler = grpc.stream_stream_rpc_method_handler(
            broker.ProduceSession,
            request_deserializer=pb.ProduceRequest.FromString,
            response_serializer=pb.ProduceResponse.SerializeToString,
        )
        async with broker_methods_served({"ProduceSession": handler}) as channel:
            session = ProduceSession(pb_grpc.BrokerStub(channel))
            try:
                await scenario(session)
            finally:
                session.close()
        await asyncio.sleep(0)
        gc.collect()  # an exception nobody retrieved is reported when its future goes
        await asyncio.sleep(0)
        assert unretrieved == []

    asyncio.run(main())


def test_answers_that_overtake_each_other_reach_their_requests() -> None:
    broker = Broker()

    async def scenario(session: ProduceSession) -> None:
        answers = await asyncio.gather(*(session.produce(request(p), 5) for p in range(20)))
        assert [a.responses[0].partitions[0].index for a in answers] == list(range(20))

    run(broker, scenario)
    assert broker.sessions == 1


def test_requests_timing_out_together_end_the_stream_and_leave_nothing_unretrieved() -> None:
    """A silent broker: every request in flight fails (its own timeout, or the stream that
    another's timeout ended), no exception is left on a future nobody awaits, and the next
    request opens a new stream."""
    broker = Broker()

    async def scenario(session: ProduceSession) -> None:
        broker.silent = True
        outcomes = await asyncio.gather(
            *(session.produce(request(p), 0.2) for p in range(10)), return_exceptions=True
        )
        assert all(isinstance(o, TimeoutError | ProduceSessionEndedError) for o in outcomes)
        broker.silent = False
        answers = await asyncio.gather(
            session.produce(request(0), 5), session.produce(request(1), 5)
        )
        assert len(answers) == 2

    run(broker, scenario)
    assert broker.sessions == 2


def test_a_request_cancelled_while_others_wait_leaves_nothing_unretrieved() -> None:
    broker = Broker()

    async def scenario(session: ProduceSession) -> None:
        broker.silent = True
        tasks = [asyncio.ensure_future(session.produce(request(p), 30)) for p in range(5)]
        await asyncio.sleep(0.1)
        tasks[0].cancel()
        session.close()  # as the sender's close: the rest fail with the stream
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(outcomes[0], asyncio.CancelledError)
        assert all(isinstance(o, ProduceSessionEndedError) for o in outcomes[1:])

    run(broker, scenario)


def test_a_write_cancelled_mid_way_ends_the_stream_and_leaves_nothing_unretrieved() -> None:
    """A broker that reads nothing: a large request's write waits on flow control; cancelled
    there, the request's fate is unknown, so the stream ends (the request queued behind it
    goes on a new one) and no exception is left on a future nobody awaits."""
    broker = Broker()

    async def scenario(session: ProduceSession) -> None:
        broker.stalled = True
        big = bytes(8 * 1024 * 1024)
        writing = asyncio.ensure_future(session.produce(request(0, big), 30))
        behind = asyncio.ensure_future(session.produce(request(1), 0.5))
        await asyncio.sleep(0.3)
        assert not writing.done()
        writing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writing
        (outcome,) = await asyncio.gather(behind, return_exceptions=True)
        assert isinstance(outcome, TimeoutError)

    run(broker, scenario)
    assert broker.sessions == 2
