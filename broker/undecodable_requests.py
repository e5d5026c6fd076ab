"""Requests whose bytes are not the message the method expects: INVALID_ARGUMENT, one log line.

gRPC decodes a request before any handler runs. Left to itself, grpcio logs a full
traceback for every request that fails to decode and answers UNKNOWN, which tells the
sender nothing and lets anyone fill the broker's log at will. :class:`UndecodableRequests`
is a server interceptor that gives every unary method a deserializer that cannot raise:
it hands the handler a marker instead, and the handler answers INVALID_ARGUMENT naming the
method and the decoding error, logging one WARNING line.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

__all__ = ["UndecodableRequests"]

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    _ServerInterceptor = grpc.aio.ServerInterceptor[Any, Any]
else:  # generic only in the type stubs
    _ServerInterceptor = grpc.aio.ServerInterceptor


class _Undecodable:
    """Stands for a request that did not decode."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


class UndecodableRequests(_ServerInterceptor):
    """Answers requests that do not decode with INVALID_ARGUMENT (see the module docstring).

    The wrapped handler of each method is built once and cached: a broker has a handful of
    methods, and the produce path should not pay for building handlers per call.
    """

    def __init__(self, broker_id: int) -> None:
        self._broker_id = broker_id
        self._handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        method = handler_call_details.method
        cached = self._handlers.get(method)
        if cached is not None:
            return cached
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None or handler.request_deserializer is None:
            return handler  # unknown method (UNIMPLEMENTED) or a kind this server does not use
        wrapped = grpc.unary_unary_rpc_method_handler(
            self._guard(method, handler.unary_unary),
            request_deserializer=_never_raising(handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )
        self._handlers[method] = wrapped
        return wrapped

    def _guard(
        self, method: str, behavior: Callable[[Any, Any], Any]
    ) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]:
        async def handle(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            if isinstance(request, _Undecodable):
                logger.warning(
                    "undecodable request event=request_undecodable broker=%d rpc=%s peer=%s "
                    "error=%r",
                    self._broker_id,
                    method,
                    context.peer(),
                    str(request.error),
                )
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{method}: the request does not decode as that method's message "
                    f"({request.error})",
                )
            return await behavior(request, context)

        return handle


def _never_raising(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as err:
            return _Undecodable(err)

    return decode
