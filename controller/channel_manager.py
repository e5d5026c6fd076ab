"""The controller's connections to the brokers (Kafka's ``ControllerChannelManager``).

One gRPC channel per broker, reused for every request (a new channel costs a
connection and an HTTP/2 handshake), and one
sender task per broker draining a FIFO queue, one request at a time: Kafka's
``RequestSendThread``. So requests to one broker arrive in the order they were queued (a
LeaderAndIsr before the UpdateMetadata built with it; an older leader epoch before a newer
one), while different brokers are served concurrently and a slow or dead broker holds up
only its own queue.

A request is retried until it is answered or its broker is removed, as Kafka's send thread
does: the broker may be restarting, and the controller's decision still has to reach it.
Each attempt waits for the connection to be ready (gRPC ``wait_for_ready``) up to
``request_timeout_s`` (Kafka's ``controller.socket.timeout.ms``, 30 s); an attempt that ends
UNAVAILABLE, DEADLINE_EXCEEDED or CANCELLED (by the server) is retried after a backoff. A
retried request may reach the broker twice (the first attempt may have been applied before
its answer was lost): Control requests are idempotent for the broker (an equal leader epoch
is a harmless repeat), as they must be in Kafka too. Any other gRPC status fails the request.

An answered request is the broker's response, error codes and all: what a code means is the
controller's business. One code is the channel manager's too: ``STALE_CONTROLLER_EPOCH`` as
a request's top-level code means the broker has heard from a newer controller, and it is
reported to ``on_stale_controller_epoch`` (the controller resigns).

Example::

    manager = ControllerChannelManager(on_stale_controller_epoch=resign)
    for broker in live_brokers.values():
        manager.add_broker(broker.broker_id, broker.host, broker.port)
    results = await manager.send_batch(batch.build(my_id, my_epoch, live_brokers))
    ...
    await manager.close()
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, overload

import grpc
import grpc.aio

from controller.request_batch import BrokerRequest, ControlRequest, ControlResponse, request_kind
from proto.errors import MinibrokerError
from proto.process.event_log import log_event
from proto.transport.keepalive import CLIENT_KEEPALIVE_OPTIONS
from proto.transport.tls import TlsConfig, aio_channel
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.wire.minibroker_pb2 import ErrorCode
from proto.zk.znodes import BrokerInfo

__all__ = [
    "DEFAULT_REQUEST_TIMEOUT_S",
    "BrokerChannelClosedError",
    "ControllerChannelManager",
    "SendResult",
    "StaleControllerEpochCallback",
]

logger = logging.getLogger(__name__)

DEFAULT_REQUEST_TIMEOUT_S = 30.0
"""Kafka's ``controller.socket.timeout.ms`` (30000): one attempt's deadline."""
DEFAULT_RETRY_BACKOFF_S = 0.1
"""Kafka's send thread backs off 100 ms between attempts; here that doubles per retry..."""
DEFAULT_RETRY_BACKOFF_MAX_S = 1.0
"""... up to this."""
MAX_MESSAGE_BYTES = 104_857_600
"""The broker's default ``socket.request.max.bytes``: a full UpdateMetadata for a large
cluster must fit (gRPC's default receive limit is 4 MiB)."""

RETRIABLE_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,  # connection lost mid-call; the broker is stopping
        grpc.StatusCode.DEADLINE_EXCEEDED,  # not connected in time, or no answer in time
        # The channel manager never cancels a call through gRPC (it cancels the task that
        # awaits it, which raises asyncio.CancelledError), so CANCELLED comes from the server
        # going away mid-call.
        grpc.StatusCode.CANCELLED,
    }
)

_CHANNEL_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # Notice a frozen broker (SIGSTOP, a partition) before a call's deadline, and a
    # black-holed idle connection before the next request is sent into it.
    *CLIENT_KEEPALIVE_OPTIONS,
    # Reconnect quickly to a restarted broker: gRPC's defaults back off up to 120 s.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
    ("grpc.min_reconnect_backoff_ms", 1_000),
]

StaleControllerEpochCallback = Callable[[int, ControlRequest, ControlResponse], None]
"""Called with (broker id, request, response) when a broker answers STALE_CONTROLLER_EPOCH."""


class BrokerChannelClosedError(MinibrokerError):
    """The request was dropped: its broker was never added, was removed while the request
    was queued or in flight (it may or may not have been applied), or the manager closed."""

    def __init__(self, broker_id: int, reason: str) -> None:
        super().__init__(f"request to broker {broker_id} dropped: {reason}")
        self.broker_id = broker_id


class SendResult(NamedTuple):
    """The outcome of one request of a :meth:`ControllerChannelManager.send_batch`."""

    broker_id: int
    request: ControlRequest
    response: ControlResponse | None
    """The broker's answer; None if the request failed."""
    error: BaseException | None
    """Why there is no answer: :class:`BrokerChannelClosedError`, or a grpc.aio.AioRpcError
    with a status that is not retried."""


@dataclass(eq=False)
class _Pending:
    request: ControlRequest
    future: asyncio.Future[ControlResponse]
    queued_at: float = field(default_factory=time.monotonic)


def _log(level: int, event: str, *, exc_info: object = False, **fields: object) -> None:
    """One line: ``channel_manager event=<e> key=value ...`` (see proto.process.event_log)."""
    log_event(logger, level, "channel_manager", event, exc_info=exc_info, **fields)


def _request_fields(broker_id: int, request: ControlRequest) -> dict[str, object]:
    return {
        "broker": broker_id,
        "kind": request_kind(request),
        "partitions": len(request.partition_states),
        "controller_epoch": request.controller_epoch,
    }


def _code_name(code: int) -> str:
    try:
        return ErrorCode.Name(ErrorCode.ValueType(code))
    except ValueError:
        return f"ERROR_{code}"


def _fail(future: asyncio.Future[ControlResponse], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


class _RequestSender:
    """One broker's channel, queue and sender task (Kafka's ``RequestSendThread``)."""

    def __init__(
        self,
        broker: BrokerInfo,
        request_timeout_s: float,
        retry_backoff_s: float,
        retry_backoff_max_s: float,
        on_stale_controller_epoch: StaleControllerEpochCallback | None,
        tls: TlsConfig | None,
    ) -> None:
        self.broker = broker
        self._request_timeout_s = request_timeout_s
        self._retry_backoff_s = retry_backoff_s
        self._retry_backoff_max_s = retry_backoff_max_s
        self._on_stale_controller_epoch = on_stale_controller_epoch
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._current: _Pending | None = None
        self._channel = aio_channel(f"{broker.host}:{broker.port}", tls, _CHANNEL_OPTIONS)
        self._stub = pb_grpc.ControlStub(self._channel)
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"controller-request-sender-{broker.broker_id}"
        )
        self._closing: asyncio.Task[None] | None = None

    @property
    def pending(self) -> int:
        return self._queue.qsize() + (self._current is not None)

    def enqueue(self, request: ControlRequest) -> asyncio.Future[ControlResponse]:
        pending = _Pending(request, asyncio.get_running_loop().create_future())
        self._queue.put_nowait(pending)
        return pending.future

    def stop(self, reason: str) -> asyncio.Task[None]:
        """Fail every queued and in-flight request now; the returned task finishes the job
        (stops the sender, closes the channel)."""
        if self._closing is None:
            broker_id = self.broker.broker_id
            _log(logging.INFO, "remove_broker", broker=broker_id, dropped=self.pending)
            if self._current is not None:
                _fail(self._current.future, BrokerChannelClosedError(broker_id, reason))
            while not self._queue.empty():
                _fail(self._queue.get_nowait().future, BrokerChannelClosedError(broker_id, reason))
            self._task.cancel()
            self._closing = asyncio.get_running_loop().create_task(self._close())
        return self._closing

    async def _close(self) -> None:
        await asyncio.wait([self._task])
        await self._channel.close(None)

    async def _run(self) -> None:
        while True:
            pending = await self._queue.get()
            if pending.future.done():
                continue  # withdrawn by the caller while queued
            self._current = pending
            try:
                await self._deliver(pending)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                # A bug here must not silence the broker's queue for good.
                _log(
                    logging.ERROR,
                    "send_error",
                    exc_info=True,
                    **_request_fields(self.broker.broker_id, pending.request),
                )
                _fail(pending.future, err)
            finally:
                self._current = None

    async def _deliver(self, pending: _Pending) -> None:
        broker_id = self.broker.broker_id
        request = pending.request
        backoff = self._retry_backoff_s
        attempt = 0
        while True:
            attempt += 1
            _log(logging.INFO, "send", **_request_fields(broker_id, request), attempt=attempt)
            call = asyncio.get_running_loop().create_task(self._call(request))
            try:
                # The caller may withdraw the request (cancel its future) mid-attempt.
                await asyncio.wait([call, pending.future], return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not call.done():
                    call.cancel()
                    await asyncio.wait([call])
            if pending.future.done():
                _log(logging.INFO, "withdrawn", **_request_fields(broker_id, request))
                return
            try:
                response = call.result()
            except grpc.aio.AioRpcError as err:
                if err.code() not in RETRIABLE_CODES:
                    _log(
                        logging.ERROR,
                        "failed",
                        **_request_fields(broker_id, request),
                        code=err.code().name,
                        details=repr(err.details()),
                    )
                    pending.future.set_exception(err)
                    return
                _log(
                    logging.WARNING,
                    "retry",
                    **_request_fields(broker_id, request),
                    attempt=attempt,
                    code=err.code().name,
                    backoff_ms=round(backoff * 1000),
                )
                # Sleep, but wake up if the caller withdraws the request meanwhile.
                await asyncio.wait([pending.future], timeout=backoff)
                if pending.future.done():
                    return
                backoff = min(backoff * 2, self._retry_backoff_max_s)
                continue
            self._answered(pending, response, attempt)
            return

    def _answered(self, pending: _Pending, response: ControlResponse, attempts: int) -> None:
        broker_id = self.broker.broker_id
        request = pending.request
        _log(
            logging.DEBUG,
            "response",
            **_request_fields(broker_id, request),
            error=_code_name(response.error_code),
            attempts=attempts,
            elapsed_ms=round((time.monotonic() - pending.queued_at) * 1000),
        )
        if response.error_code == ErrorCode.STALE_CONTROLLER_EPOCH:
            _log(logging.WARNING, "stale_controller_epoch", **_request_fields(broker_id, request))
            if self._on_stale_controller_epoch is not None:
                try:
                    self._on_stale_controller_epoch(broker_id, request, response)
                except Exception:
                    logger.exception("event=callback_error broker=%d", broker_id)
        pending.future.set_result(response)

    async def _call(self, request: ControlRequest) -> ControlResponse:
        timeout = self._request_timeout_s
        stub = self._stub
        if isinstance(request, pb.LeaderAndIsrRequest):
            return await stub.LeaderAndIsr(request, timeout=timeout, wait_for_ready=True)
        if isinstance(request, pb.UpdateMetadataRequest):
            return await stub.UpdateMetadata(request, timeout=timeout, wait_for_ready=True)
        return await stub.StopReplica(request, timeout=timeout, wait_for_ready=True)


class ControllerChannelManager:
    """Channels, queues and sender tasks to the brokers the controller talks to.

    Lives on one event loop: create it, and call every method, on the loop it serves (gRPC
    aio channels belong to the loop they were made on). Not thread-safe.
    """

    def __init__(
        self,
        *,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_S,
        retry_backoff_max_s: float = DEFAULT_RETRY_BACKOFF_MAX_S,
        on_stale_controller_epoch: StaleControllerEpochCallback | None = None,
        tls: TlsConfig | None = None,
    ) -> None:
        """``tls``: the broker's own certificate, presented to every broker (None:
        plaintext)."""
        if request_timeout_s <= 0 or retry_backoff_s <= 0 or retry_backoff_max_s < retry_backoff_s:
            raise ValueError(
                "request_timeout_s and retry_backoff_s must be > 0, "
                "retry_backoff_max_s >= retry_backoff_s"
            )
        self._request_timeout_s = request_timeout_s
        self._retry_backoff_s = retry_backoff_s
        self._retry_backoff_max_s = retry_backoff_max_s
        self._on_stale_controller_epoch = on_stale_controller_epoch
        self._tls = tls
        self._senders: dict[int, _RequestSender] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self._closed = False
        self._close_task: asyncio.Task[None] | None = None

    # -- brokers ---------------------------------------------------------------------------

    def brokers(self) -> dict[int, BrokerInfo]:
        """The brokers added and not removed, by id."""
        return {broker_id: s.broker for broker_id, s in self._senders.items()}

    def queue_size(self, broker_id: int) -> int:
        """Requests to ``broker_id`` not yet answered (in flight included); 0 if unknown."""
        sender = self._senders.get(broker_id)
        return 0 if sender is None else sender.pending

    def add_broker(self, broker_id: int, host: str, port: int) -> None:
        """Open a channel to the broker and start its sender (on the running loop).

        Adding a broker already added at the same address does nothing (Kafka's
        ``addBroker`` is idempotent too); at another address it raises ValueError: remove it
        first, which drops what was queued for the old incarnation.
        """
        if self._closed:
            raise RuntimeError("the channel manager is closed")
        broker = BrokerInfo(broker_id, host, port)
        existing = self._senders.get(broker_id)
        if existing is not None:
            if existing.broker == broker:
                return
            raise ValueError(
                f"broker {broker_id} is already added at {existing.broker.host}:"
                f"{existing.broker.port}; remove it before adding it at {host}:{port}"
            )
        self._senders[broker_id] = _RequestSender(
            broker,
            self._request_timeout_s,
            self._retry_backoff_s,
            self._retry_backoff_max_s,
            self._on_stale_controller_epoch,
            self._tls,
        )
        _log(logging.INFO, "add_broker", broker=broker_id, host=host, port=port)

    async def remove_broker(self, broker_id: int) -> None:
        """Stop sending to the broker and close its channel; unknown ids are ignored.

        Every request queued or in flight for it fails at once with
        :class:`BrokerChannelClosedError` (an in-flight one may have been applied). The
        broker is removed when this is called, before the first ``await``: a later
        :meth:`send` to it fails. Cancelling the caller does not interrupt closing the
        channel, which finishes in the background (:meth:`close` waits for it).
        """
        sender = self._senders.pop(broker_id, None)
        if sender is None:
            return
        task = sender.stop("broker removed")
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)
        await asyncio.shield(task)

    # -- sending ---------------------------------------------------------------------------

    @overload
    def send(
        self, broker_id: int, request: pb.LeaderAndIsrRequest
    ) -> asyncio.Future[pb.LeaderAndIsrResponse]: ...
    @overload
    def send(
        self, broker_id: int, request: pb.UpdateMetadataRequest
    ) -> asyncio.Future[pb.UpdateMetadataResponse]: ...
    @overload
    def send(
        self, broker_id: int, request: pb.StopReplicaRequest
    ) -> asyncio.Future[pb.StopReplicaResponse]: ...
    @overload
    def send(self, broker_id: int, request: ControlRequest) -> asyncio.Future[ControlResponse]: ...
    def send(self, broker_id: int, request: ControlRequest) -> asyncio.Future[Any]:
        """Queue ``request`` for ``broker_id``; the future resolves to the broker's response.

        Queued at once, in call order: a request never overtakes one sent before it to the
        same broker. The future fails with :class:`BrokerChannelClosedError` if the broker
        is unknown or removed before answering, or with grpc.aio.AioRpcError for a status
        that is not retried. Cancelling the future withdraws the request: it is not sent if
        still queued, and an attempt in flight is abandoned (the broker may have applied
        it). So ``await manager.send(...)`` in a task that gets cancelled withdraws it;
        wrap it in ``asyncio.shield`` to stop waiting without withdrawing.
        """
        sender = self._senders.get(broker_id)
        if sender is None:
            future: asyncio.Future[ControlResponse] = asyncio.get_running_loop().create_future()
            reason = "the channel manager is closed" if self._closed else "unknown broker"
            _log(logging.WARNING, "not_sent", **_request_fields(broker_id, request), reason=reason)
            future.set_exception(BrokerChannelClosedError(broker_id, reason))
            return future
        return sender.enqueue(request)

    async def send_batch(self, batch: Iterable[BrokerRequest]) -> list[SendResult]:
        """Send every request of ``batch`` (e.g. ControllerBrokerRequestBatch.build's) and wait
        for all the answers; one :class:`SendResult` per request, in the batch's order.

        Requests are queued in the batch's order, so those to one broker arrive in it; the
        brokers are served concurrently. Never raises for a request's failure (see each
        result's ``error``). Cancelling the caller only stops the wait: the requests stay
        queued and are still delivered, so a batch is not half withdrawn.
        """
        requests = list(batch)
        futures = [self.send(broker_id, request) for broker_id, request in requests]
        outcomes = await asyncio.shield(asyncio.gather(*futures, return_exceptions=True))
        results = []
        for (broker_id, request), outcome in zip(requests, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                results.append(SendResult(broker_id, request, None, outcome))
            else:
                results.append(SendResult(broker_id, request, outcome, None))
        return results

    # -- shutdown --------------------------------------------------------------------------

    async def close(self) -> None:
        """Remove every broker (their pending requests fail with BrokerChannelClosedError)
        and wait until every sender has stopped and every channel is closed. Idempotent.

        Cancelling the caller does not interrupt the close: it completes in the background,
        and a later call waits for it.
        """
        if self._close_task is None:
            self._closed = True
            senders, self._senders = self._senders, {}
            tasks = [s.stop("channel manager closed") for s in senders.values()]
            self._close_task = asyncio.get_running_loop().create_task(
                self._wait_closed([*tasks, *self._stopping])
            )
        await asyncio.shield(self._close_task)

    @staticmethod
    async def _wait_closed(tasks: list[asyncio.Task[None]]) -> None:
        if tasks:
            await asyncio.wait(tasks)
