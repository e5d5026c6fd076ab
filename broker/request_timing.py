"""Per-API request counts, errors and total time (Kafka's ``RequestMetrics``), as a gRPC
server interceptor so that every method is measured the same way, refused ones included."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

from broker.broker_metrics import RequestMetrics

__all__ = ["RequestTiming"]

if TYPE_CHECKING:
    _ServerInterceptor = grpc.aio.ServerInterceptor[Any, Any]
else:  # generic only in the type stubs
    _ServerInterceptor = grpc.aio.ServerInterceptor


class RequestTiming(_ServerInterceptor):
    """Times each unary call from the handler's start to its answer into ``metrics``; a call
    ending with a gRPC status other than OK (INVALID_ARGUMENT, INTERNAL, a cancellation)
    also counts as an error of that status. Wrapped handlers are cached per method."""

    def __init__(self, metrics: RequestMetrics) -> None:
        self._metrics = metrics
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
        if handler is None or handler.unary_unary is None:
            return handler
        wrapped = grpc.unary_unary_rpc_method_handler(
            self._timed(method.rsplit("/", 1)[-1], handler.unary_unary),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
        self._handlers[method] = wrapped
        return wrapped

    def _timed(
        self, api: str, behavior: Callable[[Any, Any], Any]
    ) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]:
        metrics = self._metrics

        async def handle(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            started = time.perf_counter()
            status: grpc.StatusCode | None = grpc.StatusCode.UNKNOWN  # an unexpected raise
            try:
                response = await behavior(request, context)
                status = context.code()
                return response
            except grpc.aio.AbortError:
                status = context.code()
                raise
            except asyncio.CancelledError:
                status = grpc.StatusCode.CANCELLED
                raise
            finally:
                metrics.observe(api, (time.perf_counter() - started) * 1000)
                if status is not None and status != grpc.StatusCode.OK:
                    metrics.errors.labels(api, status.name).inc()

        return handle
