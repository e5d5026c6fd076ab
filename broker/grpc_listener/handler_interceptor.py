"""A gRPC server interceptor that wraps each method's handler once.

grpc.aio calls ``intercept_service`` for every call; building the wrapped handler anew
each time would cost the produce path a handler per request, so each method's is built
on its first call and cached (a broker has a handful of methods). Subclasses say how to
wrap one handler (:meth:`HandlerInterceptor.wrap`), and which kinds of method they wrap:
unary ones, streaming ones (the produce and fetch sessions), or both.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

__all__ = ["HandlerInterceptor"]

if TYPE_CHECKING:
    _ServerInterceptor = grpc.aio.ServerInterceptor[Any, Any]
else:  # generic only in the type stubs
    _ServerInterceptor = grpc.aio.ServerInterceptor


class HandlerInterceptor(_ServerInterceptor, abc.ABC):
    """Wraps methods' handlers once each (see the module docstring); unknown methods
    (UNIMPLEMENTED) pass through unchanged."""

    def __init__(self) -> None:
        self._handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}

    @abc.abstractmethod
    def wrap(
        self, method: str, handler: grpc.RpcMethodHandler[Any, Any]
    ) -> grpc.RpcMethodHandler[Any, Any]:
        """The handler to use for ``method`` instead of ``handler`` (``handler`` itself for
        a kind of method this interceptor leaves alone)."""

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
        handler: grpc.RpcMethodHandler[Any, Any] | None = await continuation(handler_call_details)
        if handler is None:  # a method no servicer has: gRPC answers UNIMPLEMENTED
            return handler  # type: ignore[return-value]
        wrapped = self.wrap(method, handler)
        self._handlers[method] = wrapped
        return wrapped
