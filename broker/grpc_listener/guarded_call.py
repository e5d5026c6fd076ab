"""One gRPC call of either service, guarded: a request malformed as a whole is answered
INVALID_ARGUMENT with the reason, and any other exception is logged and answered INTERNAL,
so that nothing a client or a controller sends can crash the broker."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from proto import errors

logger = logging.getLogger(__name__)

__all__ = ["MalformedRequestError", "guarded"]

_Response = TypeVar("_Response")


class MalformedRequestError(errors.MinibrokerError):
    """The request as a whole is malformed: answered with gRPC INVALID_ARGUMENT."""


async def guarded(
    context: grpc.aio.ServicerContext[object, object],
    name: str,
    handle: Callable[[], Awaitable[_Response]],
) -> _Response:
    try:
        return await handle()
    except MalformedRequestError as err:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{name}: {err}")
    except grpc.aio.AbortError:
        raise
    except Exception:
        logger.exception("request failed event=request_error rpc=%s", name)
        await context.abort(grpc.StatusCode.INTERNAL, f"{name}: internal broker error (see log)")
    raise AssertionError("unreachable: context.abort raises")
