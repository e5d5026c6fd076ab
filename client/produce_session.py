"""The producer's side of the ``ProduceSession`` stream: requests in order, answers by id.

Kafka's producer writes its requests to one connection per broker and matches the answers
by correlation id. A :class:`ProduceSession` does that over one gRPC bidirectional stream
per broker: :meth:`ProduceSession.produce` writes a request (the writes keep the order of
the calls, so the broker appends them in that order, as the stream promises), and one
reader task hands each answer to the call that waits for it. A message on an open stream
costs far less than a unary call (measured here with grpc.aio: 153 against 367 µs of the
server's CPU for a 16 KiB message), which the brokers' CPU, shared with the producer on a
small machine, feels at every request.

When the stream fails (the broker died, a request timed out), every request waiting on it
fails with that error, as Kafka fails the requests in flight on a connection it drops; the
next request opens a new stream. A broker that does not know the method (an older one) is
sent unary ``Produce`` calls from then on.
"""

from __future__ import annotations

import asyncio
import logging

import grpc
import grpc.aio

from proto.errors import MinibrokerError
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc

__all__ = ["ProduceSession", "ProduceSessionEndedError"]

logger = logging.getLogger(__name__)

_CORRELATION_MASK = 0x7FFF_FFFF


class ProduceSessionEndedError(MinibrokerError):
    """The stream ended before the request was answered (the broker closed it, or a request
    on it timed out): whether the request was appended is unknown."""

    retriable = True


class _Stream:
    """One ProduceSession call: its requests waiting for answers and the task reading them."""

    def __init__(self, call: grpc.aio.StreamStreamCall[pb.ProduceRequest, pb.ProduceResponse]):
        self.call = call
        self.waiting: dict[int, asyncio.Future[pb.ProduceResponse]] = {}
        self.reader = asyncio.get_running_loop().create_task(self._read_answers())

    async def _read_answers(self) -> None:
        error: BaseException
        try:
            while True:
                response = await self.call.read()
                if response is grpc.aio.EOF:  # type: ignore[attr-defined]  # not in grpc-stubs
                    error = ProduceSessionEndedError("the broker ended the produce session")
                    break
                assert isinstance(response, pb.ProduceResponse)
                future = self.waiting.pop(response.correlation_id, None)
                if future is not None and not future.done():
                    future.set_result(response)
        except asyncio.CancelledError:
            error = ProduceSessionEndedError("the produce session was closed")
            raise
        except grpc.aio.AioRpcError as err:
            error = err
        except Exception as err:
            error = err
        finally:
            self.fail(error)

    def fail(self, error: BaseException) -> None:
        """Fail every request still waiting, with ``error``."""
        waiting, self.waiting = self.waiting, {}
        for future in waiting.values():
            if not future.done():
                future.set_exception(error)

    def close(self) -> None:
        self.call.cancel()
        self.reader.cancel()
        self.fail(ProduceSessionEndedError("the produce session was closed"))


class ProduceSession:
    """Produce requests to one broker over one stream (see the module docstring)."""

    def __init__(self, stub: pb_grpc.BrokerAsyncStub) -> None:
        self._stub = stub
        self._stream: _Stream | None = None
        self._writing = asyncio.Lock()
        self._next_id = 0
        self._unary = False
        """The broker does not know ProduceSession: every request is a unary Produce."""

    async def produce(self, request: pb.ProduceRequest, timeout_s: float) -> pb.ProduceResponse:
        """Send ``request`` (its correlation id is set here) and return the broker's answer.

        Calls are written to the stream in the order they are made: the broker appends
        their batches in that order. Raises grpc.aio.AioRpcError (the stream's status),
        ProduceSessionEndedError, or TimeoutError once ``timeout_s`` passes without an
        answer, which also ends the stream, failing the other requests on it: all of those
        may or may not have been appended. Cancelling the call abandons the answer; the
        request may still be appended.
        """
        if self._unary:
            return await self._stub.Produce(request, timeout=timeout_s)
        answer: asyncio.Future[pb.ProduceResponse] = asyncio.get_running_loop().create_future()
        try:
            async with self._writing:
                stream = self._stream
                if stream is None or stream.call.done():
                    stream = self._stream = _Stream(self._stub.ProduceSession(None))
                correlation_id = self._next_id
                self._next_id = (correlation_id + 1) & _CORRELATION_MASK
                request.correlation_id = correlation_id
                stream.waiting[correlation_id] = answer
                try:
                    await stream.call.write(request)
                except asyncio.InvalidStateError:
                    pass  # the call already ended: its reader fails the answer with its status
                except BaseException:
                    # Cancelled or failed mid-write: what the broker got is unknown, so the
                    # stream cannot be trusted with the requests behind this one.
                    self._end(stream)
                    raise
            return await self._answer(stream, correlation_id, answer, request, timeout_s)
        finally:
            if answer.done() and not answer.cancelled():
                # Retrieved whatever happened: the stream's end may have set an error on
                # it while this call was being cancelled, or after it gave up writing.
                answer.exception()

    async def _answer(
        self,
        stream: _Stream,
        correlation_id: int,
        answer: asyncio.Future[pb.ProduceResponse],
        request: pb.ProduceRequest,
        timeout_s: float,
    ) -> pb.ProduceResponse:
        try:
            async with asyncio.timeout(timeout_s):
                return await answer
        except TimeoutError:
            self._end(stream)  # Kafka drops the connection of a request that timed out
            raise
        except grpc.aio.AioRpcError as err:
            self._end(stream)
            if err.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
            if not self._unary:
                logger.info("ProduceSession not known to the broker; using unary Produce calls")
                self._unary = True
            return await self._stub.Produce(request, timeout=timeout_s)
        finally:
            stream.waiting.pop(correlation_id, None)

    def _end(self, stream: _Stream) -> None:
        if self._stream is stream:
            self._stream = None
        stream.close()

    def close(self) -> None:
        """End the stream, failing what waits on it. Idempotent; the next produce opens a
        new one."""
        if self._stream is not None:
            self._end(self._stream)
