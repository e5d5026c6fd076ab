"""The asyncio bridge for kazoo, shared by the broker's and the controller's ZooKeeper clients.

kazoo has no asyncio handler (reference/perf-ecosystem.md §A4): its ``*_async`` calls
return an ``IAsyncResult`` completed on kazoo's own threads, and its watches and state
listeners also run there. Code on an event loop must therefore

- turn each ``IAsyncResult`` into an asyncio future settled on the loop (:func:`bridge`);
- hand every kazoo callback to the loop with ``call_soon_threadsafe`` (:func:`on_loop`),
  never run its own logic on kazoo's thread (kazoo's docs: a listener must not block);
- run kazoo's only blocking calls, connect and close, in an executor
  (:func:`start_kazoo`, :func:`stop_kazoo`).

:mod:`broker.zk_client` (``BrokerZkClient``) and :mod:`controller.controller_zk`
(``ControllerZkClient``) both build on these; neither adds threads of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

__all__ = ["bridge", "on_loop", "start_kazoo", "stop_kazoo"]


def bridge(loop: asyncio.AbstractEventLoop, result: Any) -> asyncio.Future[Any]:
    """An asyncio future settled, on ``loop``, by kazoo's IAsyncResult ``result``.

    Cancelling the future only stops the waiting: the request has been queued by kazoo
    already and ZooKeeper may still apply it.
    """
    future: asyncio.Future[Any] = loop.create_future()

    def on_done(done: Any) -> None:
        # On kazoo's completion thread (or inline if kazoo's handler is stopped).
        error = None if done.successful() else done.exception
        value = done.value if error is None else None
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits the result
            loop.call_soon_threadsafe(_settle, future, value, error)

    result.rawlink(on_done)
    return future


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():  # cancelled by the awaiting side
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def on_loop(
    loop: asyncio.AbstractEventLoop, callback: Callable[..., object]
) -> Callable[..., None]:
    """A function for kazoo to call (a watch or state listener) that runs
    ``callback(*args)`` on ``loop``'s thread instead of kazoo's; once the loop is closed
    the calls are dropped, as nobody is listening any more."""

    def forward(*args: Any) -> None:
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(callback, *args)

    return forward


def start_kazoo(client: Any, timeout_s: float) -> bool:
    """Blocking (run in an executor): start ``client``, True once connected in time."""
    event = client.start_async()
    event.wait(timeout_s)
    return bool(client.connected)


def stop_kazoo(client: Any) -> None:
    """Blocking (run in an executor): close the session and release kazoo's threads."""
    try:
        client.stop()
    finally:
        client.close()
