"""Per-API request counts, errors and total time (Kafka's ``RequestMetrics``), as a gRPC
server interceptor so that every unary method is measured the same way, refused ones
included. The sessions (ProduceSession, FetchSession) carry many requests per call: their
handlers time each request themselves under the unary method's name (Produce, Fetch)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from broker.broker_metrics import RequestMetrics
from broker.grpc_listener.handler_interceptor import HandlerInterceptor

__all__ = ["RequestTiming"]


class RequestTiming(HandlerInterceptor):
    """Times each unary call from the handler's start to its answer into ``metrics``; a call
    ending with a gRPC status other than OK (INVALID_ARGUMENT, INTERNAL, a cancellation)
    also counts as an error of that status."""

    def __init__(self, metrics: RequestMetrics) -> None:
        super().__init__()
        self._metrics = metrics

    def wrap(
        self, method: str, handler: grpc.RpcMethodHandler[Any, Any]
    ) -> grpc.RpcMethodHandler[Any, Any]:
        if handler.unary_unary is None:
            return handler
        return grpc.unary_unary_rpc_method_handler(
            self._timed(method.rsplit("/", 1)[-1], handler.unary_unary),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

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
