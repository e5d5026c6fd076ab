"""ControllerChannelManager against stand-in brokers: real gRPC servers in this process whose
Control service records what arrives and answers as each test scripts it (a status to abort
with, a delay, a response code). Order, retries, withdrawal, removal and close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import grpc
import grpc.aio
import pytest

from controller.channel_manager import (
    BrokerChannelClosedError,
    ControllerChannelManager,
)
from controller.request_batch import BrokerRequest, ControlRequest, ControlResponse
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.wire.minibroker_pb2 import ErrorCode

pytestmark = pytest.mark.timeout(60)

T = TypeVar("T")
LOGGER = "controller.channel_manager"
Script = Callable[[ControlRequest], Awaitable["ErrorCode.ValueType | grpc.StatusCode | None"]]
"""Decides one answer: a gRPC status to abort with, an ErrorCode to answer, None for NONE."""


class StandInBroker(pb_grpc.ControlServicer):
    """Records every Control request that reaches it, in arrival order."""

    def __init__(self) -> None:
        self.received: list[ControlRequest] = []
        self.script: Script | None = None

    async def _answer(
        self, request: ControlRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> ErrorCode.ValueType:
        self.received.append(request)
        outcome = await self.script(request) if self.script is not None else None
        if isinstance(outcome, grpc.StatusCode):
            await context.abort(outcome, "scripted")
        return ErrorCode.NONE if outcome is None else outcome

    async def LeaderAndIsr(
        self, request: pb.LeaderAndIsrRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.LeaderAndIsrResponse:
        return pb.LeaderAndIsrResponse(error_code=await self._answer(request, context))

    async def UpdateMetadata(
        self, request: pb.UpdateMetadataRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.UpdateMetadataResponse:
        return pb.UpdateMetadataResponse(error_code=await self._answer(request, context))

    async def StopReplica(
        self, request: pb.StopReplicaRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.StopReplicaResponse:
        return pb.StopReplicaResponse(error_code=await self._answer(request, context))

    async def ControlledShutdown(
        self, request: pb.ControlledShutdownRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ControlledShutdownResponse:
        return pb.ControlledShutdownResponse(error_code=ErrorCode.NOT_CONTROLLER)

    async def WriteTxnMarkers(
        self, request: pb.WriteTxnMarkersRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.WriteTxnMarkersResponse:
        return pb.WriteTxnMarkersResponse()  # the controller never sends it

    def epochs(self) -> list[int]:
        """The controller_epoch of every request received (tests use it as a sequence no.)."""
        return [r.controller_epoch for r in self.received]


async def serve(broker: StandInBroker, port: int = 0) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    pb_grpc.add_ControlServicer_to_server(broker, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    assert bound != 0, f"could not bind 127.0.0.1:{port}"
    await server.start()
    return server, bound


def um(seq: int) -> pb.UpdateMetadataRequest:
    """An UpdateMetadata told apart by its controller_epoch."""
    return pb.UpdateMetadataRequest(controller_id=1, controller_epoch=seq)


async def eventually(predicate: Callable[[], T], within: float = 5.0, what: str = "") -> T:
    deadline = time.monotonic() + within
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {within}s: {what}")
        await asyncio.sleep(0.01)


def run(
    scenario: Callable[[contextlib.AsyncExitStack, ControllerChannelManager], Awaitable[None]],
    **manager_args: Any,
) -> None:
    async def main() -> None:
        async with contextlib.AsyncExitStack() as stack:
            manager = ControllerChannelManager(**manager_args)
            stack.push_async_callback(manager.close)
            await scenario(stack, manager)

    asyncio.run(main())


async def start_broker(
    stack: contextlib.AsyncExitStack, manager: ControllerChannelManager, broker_id: int
) -> tuple[StandInBroker, grpc.aio.Server, int]:
    broker = StandInBroker()
    server, port = await serve(broker)
    stack.push_async_callback(server.stop, None)
    manager.add_broker(broker_id, "127.0.0.1", port)
    return broker, server, port


def events(caplog: pytest.LogCaptureFixture, event: str) -> list[dict[str, str]]:
    out = []
    for record in caplog.records:
        message = record.getMessage().partition(" ")[2]  # after "channel_manager"
        if record.name == LOGGER and message.startswith(f"event={event} "):
            out.append(dict(part.split("=", 1) for part in message.split()))
    return out


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        yield caplog


# -- tests -----------------------------------------------------------------------------------


def test_send_returns_the_response_and_logs_the_request(logs: pytest.LogCaptureFixture) -> None:
    async def scenario(stack: contextlib.AsyncExitStack, m: ControllerChannelManager) -> None:
        broker, _, _ = await start_broker(stack, m, 1)
        request = pb.LeaderAndIsrRequest(controller_id=5, controller_epoch=3, broker_epoch=7)
        request.partition_states.add(topic_name="t", partition_index=0, leader=1)
        response = await m.send(1, request)
        assert response == pb.LeaderAndIsrResponse(error_code=ErrorCode.NONE)
        assert broker.received == [request]
        assert m.queue_size(1) == 0

    run(scenario)
    assert events(logs, "send") == [
        {
            "event": "send",
            "broker": "1",
            "kind": "LeaderAndIsr",
            "partitions": "1",
            "controller_epoch": "3",
            "attempt": "1",
        }
    ]


def test_requests_to_one_broker_arrive_in_order_while_brokers_run_concurrently() -> None:
    async def scenario(stack: contextlib.AsyncExitStack, m: ControllerChannelManager) -> None:
        slow, _, _ = await start_broker(stack, m, 1)
        fast, _, _ = await start_broker(stack, m, 2)
        release = asyncio.Event()

        async def hold_first(request: ControlRequest) -> None:
            if request.controller_epoch == 0:
                await release.wait()

        slow.script = hold_first
        slow_futures = [m.send(1, um(i)) for i in range(30)]
        fast_futures = [m.send(2, um(i)) for i in range(30)]
        # Broker 2 is served in full while broker 1 sits on its first request, and broker 1
        # gets nothing more until it answers (one request in flight per broker).
        await asyncio.gather(*fast_futures)
        assert fast.epochs() == list(range(30))
        assert slow.epochs() == [0]
        assert m.queue_size(1) == 30
        release.set()
        await asyncio.gather(*slow_futures)
        assert slow.epochs() == list(range(30))

    run(scenario)


def test_unavailable_and_deadline_are_retried_until_answered(
    logs: pytest.LogCaptureFixture,
) -> None:
    async def scenario(stack: contextlib.AsyncExitStack, m: ControllerChannelManager) -> None:
        broker, _, _ = await start_broker(stack, m, 1)
        answers: list[grpc.StatusCode | None] = [grpc.StatusCode.UNAVAILABLE, None, None]

        async def flaky(request: ControlRequest) -> grpc.StatusCode | None:
            if len(broker.received) == 2:
                await asyncio.Event().wait()  # never answers: the 0.5 s deadline passes
            return answers[len(broker.received) - 1]

        broker.script = flaky
        response = await m.send(1, um(1))
        assert response.error_code == ErrorCode.NONE
        assert broker.epochs() == [1, 1, 1]

    run(scenario, request_timeout_s=0.5, retry_backoff_s=0.01)
    retries = events(logs, "retry")
    assert [(r["code"], r["attempt"]) for r in retries] == [
        ("UNAVAILABLE", "1"),
        ("DEADLINE_EXCEEDED", "2"),
    ]
    assert [r["backoff_ms"] for r in retries] == ["10", "20"]


def test_a_request_queued_while_the_broker_is_down_reaches_it_when_it_returns(
    logs: pytest.LogCaptureFixture,
) -> None:
    async def scenario(stack: contextlib.AsyncExitStack, m: ControllerChannelManager) -> None:
        broker, server, port = await start_broker(stack, m, 1)
        assert (await m.send(1, um(1))).error_code == ErrorCode.NONE
        await server.stop(None)
        first, second = m.send(1, um(2)), m.send(1, um(3))
        await eventually(lambda: events(logs, "retry"), what="an attempt to fail while down")
        assert not first.done()
        restarted, _ = await serve(broker, port)
        stack.push_async_callback(restarted.stop, None)
        assert (await first).error_code == ErrorCode.NONE
        assert (await second).error_code == ErrorCode.NONE
        assert broker.epochs() == [1, 2, 3]

    run(scenario, request_timeout_s=0.3)


def test_other_statuses_fail_the_request_and_the_queue_goes_on() -> None:
    async def scenario(stack: contextlib.AsyncExitStack, m: ControllerChannelManager) -> None:
        broker, _, _ = await start_broker(stack, m, 1)

        async def refuse_first(request: ControlRequest) -> grpc.StatusCode | None:
            return grpc.StatusCode.INVALID_ARGUMENT if request.controller_epoch == 1 else None

        broker.script = refuse_first
        bad, good = m.send(1, um(1)), m.send(1, um(2))
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await bad
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (await good).error_code == ErrorCode.NONE
        assert broker.epochs() == [1, 2]

    run(scenario)


def test_stale_controller_epoch_is_reported_and_still_answered() -> None:
    reported: list[tuple[int, ControlRequest, ControlResponse]] = []

    async def scenario(stack: contextlib.AsyncExitStack, m: ControllerChannelManager) -> None:
        broker, _, _ = await start_broker(stack, m, 1)

        async def stale_below_5(request: ControlRequest) -> ErrorCode.ValueType | None:
            return ErrorCode.STALE_CONTROLLER_EPOCH if request.controller_epoch < 5 else None

        broker.script = stale_below_5
        assert (await m.send(1, um(5))).error_code == ErrorCode.NONE
        assert not reported
        stale = pb.StopReplicaRequest(controller_id=1, controller_epoch=4)
        response = await m.send(1, stale)
        assert response.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
        assert reported == [(1, stale, response)]

    run(scenario, on_stale_controller_epoch=lambda *args: reported.append(args))


def test_cancelling_the_future_withdraws_the_request() -> None:
    async def scenario(stack: contextlib.AsyncExitStack, m: ControllerChannelManager) -> None:
        broker, _, _ = await start_broker(stack, m, 1)
        release = asyncio.Event()

        async def hold(request: ControlRequest) -> None:
            if request.controller_epoch == 1:
                await release.wait()

        broker.script = hold
        in_flight, queued, last = m.send(1, um(1)), m.send(1, um(2)), m.send(1, um(3))
        await eventually(lambda: broker.epochs() == [1], what="the first request in flight")
        queued.cancel()
        in_flight.cancel()  # abandoned: the sender moves on without waiting for the answer
        assert (await last).error_code == ErrorCode.NONE
        assert broker.epochs() == [1, 3]
        release.set()

    run(scenario)


def test_remove_broker_fails_its_pending_requests_and_later_sends() -> None:
    async def scenario(stack: contextlib.AsyncExitStack, m: ControllerChannelManager) -> None:
        broker, _, _ = await start_broker(stack, m, 1)
        release = asyncio.Event()

        async def hold(request: ControlRequest) -> None:
            await release.wait()

        broker.script = hold
        in_flight, queued = m.send(1, um(1)), m.send(1, um(2))
        await eventually(lambda: broker.received, what="the first request in flight")
        await m.remove_broker(1)
        for future in (in_flight, queued):
            with pytest.raises(BrokerChannelClosedError, match="broker 1 dropped: broker removed"):
                await future
        with pytest.raises(BrokerChannelClosedError, match="unknown broker"):
            await m.send(1, um(3))
        assert m.brokers() == {}
        await m.remove_broker(1)  # unknown: nothing to do
        release.set()

    run(scenario)


def test_add_broker_is_idempotent_for_the_same_address_only() -> None:
    async def scenario(stack: contextlib.AsyncExitStack, m: ControllerChannelManager) -> None:
        _, _, port = await start_broker(stack, m, 1)
        m.add_broker(1, "127.0.0.1", port)
        with pytest.raises(ValueError, match="remove it before adding it"):
            m.add_broker(1, "127.0.0.1", port + 1)
        assert (await m.send(1, um(1))).error_code == ErrorCode.NONE

    run(scenario)


def test_send_batch_answers_per_request_in_batch_order() -> None:
    async def scenario(stack: contextlib.AsyncExitStack, m: ControllerChannelManager) -> None:
        one, _, _ = await start_broker(stack, m, 1)
        two, _, _ = await start_broker(stack, m, 2)

        async def refuse(request: ControlRequest) -> ErrorCode.ValueType:
            return ErrorCode.STALE_CONTROLLER_EPOCH

        two.script = refuse
        lai = pb.LeaderAndIsrRequest(controller_epoch=1)
        batch = [
            BrokerRequest(1, lai),
            BrokerRequest(2, um(1)),
            BrokerRequest(1, um(1)),
            BrokerRequest(3, um(1)),
        ]
        results = await m.send_batch(batch)
        assert [r[:3] for r in results] == [
            (1, lai, pb.LeaderAndIsrResponse(error_code=ErrorCode.NONE)),
            (2, um(1), pb.UpdateMetadataResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)),
            (1, um(1), pb.UpdateMetadataResponse(error_code=ErrorCode.NONE)),
            (3, um(1), None),
        ]
        assert [r.error is None for r in results] == [True, True, True, False]
        assert isinstance(results[3].error, BrokerChannelClosedError)
        assert [type(r) for r in one.received] == [pb.LeaderAndIsrRequest, pb.UpdateMetadataRequest]

    run(scenario)


def test_cancelling_send_batch_does_not_withdraw_the_requests() -> None:
    async def scenario(stack: contextlib.AsyncExitStack, m: ControllerChannelManager) -> None:
        broker, _, _ = await start_broker(stack, m, 1)
        release = asyncio.Event()

        async def hold(request: ControlRequest) -> None:
            await release.wait()

        broker.script = hold
        waiting = asyncio.create_task(m.send_batch([BrokerRequest(1, um(i)) for i in range(3)]))
        await eventually(lambda: broker.received, what="the first request in flight")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release.set()
        await eventually(lambda: broker.epochs() == [0, 1, 2], what="all three delivered")

    run(scenario)


def test_close_fails_pending_requests_survives_cancellation_and_is_idempotent() -> None:
    async def scenario(stack: contextlib.AsyncExitStack, m: ControllerChannelManager) -> None:
        broker, _, _ = await start_broker(stack, m, 1)
        await start_broker(stack, m, 2)
        release = asyncio.Event()

        async def hold(request: ControlRequest) -> None:
            await release.wait()

        broker.script = hold
        pending = m.send(1, um(1))
        await eventually(lambda: broker.received, what="the request in flight")
        closing = asyncio.create_task(m.close())
        await asyncio.sleep(0)
        closing.cancel()  # the close goes on in the background
        with pytest.raises(asyncio.CancelledError):
            await closing
        with pytest.raises(BrokerChannelClosedError, match="channel manager closed"):
            await pending
        await m.close()
        await m.close()
        assert m.brokers() == {}
        with pytest.raises(BrokerChannelClosedError, match="the channel manager is closed"):
            await m.send(2, um(2))
        with pytest.raises(RuntimeError, match="closed"):
            m.add_broker(3, "127.0.0.1", 1)
        release.set()

    run(scenario)
