"""Requests whose bytes are not the message the method expects: INVALID_ARGUMENT, one log line.

gRPC decodes a request before any handler runs. Left to itself, grpcio logs a full
traceback for every request that fails to decode and answers UNKNOWN, which tells the
sender nothing and lets anyone fill the broker's log at will. :class:`UndecodableRequests`
is a server interceptor that gives every unary and stream-request method a deserializer
that cannot raise: it hands the handler a marker instead, and the handler answers
INVALID_ARGUMENT naming the method and the decoding error, logging one WARNING line. In a
stream (ProduceSession, FetchSession) the first request that does not decode ends the
call that way; the requests before it were answered.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from broker.grpc_listener.handler_interceptor import HandlerInterceptor

__all__ = ["UndecodableRequests"]

logger = logging.getLogger(__name__)


class _Undecodable:
    """Stands for a request that did not decode."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


class UndecodableRequests(HandlerInterceptor):
    """Answers requests that do not decode with INVALID_ARGUMENT (see the module
    docstring); each method's wrapped handler is built once (:class:`HandlerInterceptor`)."""

    def __init__(self, broker_id: int) -> None:
        super().__init__()
        self._broker_id = broker_id

    def wrap(
        self, method: str, handler: grpc.RpcMethodHandler[Any, Any]
    ) -> grpc.RpcMethodHandler[Any, Any]:
        if handler.request_deserializer is None:
            return handler
        deserializer = _never_raising(handler.request_deserializer)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._guard(method, handler.unary_unary),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._guard_stream(method, handler.stream_stream),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler

    async def _refuse(
        self, method: str, request: _Undecodable, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        logger.warning(
            "undecodable request event=request_undecodable broker=%d rpc=%s peer=%s error=%r",
            self._broker_id,
            method,
            context.peer(),
            str(request.error),
        )
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{method}: the request does not decode as that method's message ({request.error})",
        )

    def _guard_stream(
        self, method: str, behavior: Callable[[Any, Any], Any]
    ) -> Callable[[AsyncIterator[Any], grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]:
        async def handle(
            requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
        ) -> Any:
            async def decoded() -> AsyncIterator[Any]:
                async for request in requests:
                    if isinstance(request, _Undecodable):
                        await self._refuse(method, request, context)
                    yield request

            return await behavior(decoded(), context)

        return handle

    def _guard(
        self, method: str, behavior: Callable[[Any, Any], Any]
    ) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]:
        async def handle(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            if isinstance(request, _Undecodable):
                await self._refuse(method, request, context)
            return await behavior(request, context)

        return handle


def _never_raising(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as err:
            return _Undecodable(err)

    return decode
