"""What ``Producer.send`` hands back: one light handle per record, one outcome per batch.

Kafka's producer does not give each record a future of its own: a batch has one
``ProduceRequestResult`` and each record a ``FutureRecordMetadata`` that holds that result
and the record's place in the batch, its offset computed only when asked for
(base offset + index). Here likewise: :class:`ProduceRequestResult` is the outcome of one
:class:`~client.record_accumulator.ProducerBatch` (its asyncio future is the batch's
``done``), and :class:`FutureRecordMetadata` is three slots per record. Creating it costs a
quarter of an asyncio future, and the batch's completion costs nothing per record: an
asyncio future per record, created and then completed, had been about 40% of the client's
CPU per ``send`` (``bench/RESULTS.md``).

A handle behaves as a future of :class:`RecordMetadata` for what callers of ``send`` do
with one: ``await``, ``done``, ``result``, ``exception``, ``cancelled``,
``add_done_callback``. It is not an ``asyncio.Future``: ``asyncio.wait`` and
``asyncio.gather`` take it (they wrap it in a task), ``asyncio.isfuture`` says no.

A failed record: every handle of the batch fails with the batch's one exception. A handle
never awaited nor asked for its exception says nothing when it is dropped (no "exception
was never retrieved"), whether its record succeeded or failed: as with Kafka's future
without a callback, the outcome is for whoever asks (``result``, ``exception``, ``await``,
``add_done_callback``). A warning of the producer's own would not do: the command line
prints a failed record's error as its one line (``minibroker produce``), and an
application that checks its handles would hear of each failure twice. The sender logs
failed batches at DEBUG.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Generator
from types import TracebackType
from typing import Any

from client.producer_config import RecordMetadata

__all__ = ["FutureRecordMetadata", "ProduceRequestResult"]

log = logging.getLogger("client.producer")

_new_metadata = functools.partial(tuple.__new__, RecordMetadata)
"""RecordMetadata from a tuple of its fields, without the Python-level ``__new__`` a
NamedTuple adds."""


_Callback = tuple[Callable[["FutureRecordMetadata"], object], "FutureRecordMetadata"]


class ProduceRequestResult:
    """The outcome of one batch (Kafka's ``ProduceRequestResult``), shared by the handles of
    its records. Holds no record bytes, so handles kept by a caller keep no batch alive."""

    __slots__ = (
        "base_offset",
        "callbacks",
        "error",
        "future",
        "log_append_time",
        "partition",
        "topic",
        "traceback",
    )

    def __init__(self, topic: str, partition: int, loop: asyncio.AbstractEventLoop) -> None:
        self.topic = topic
        self.partition = partition
        self.base_offset = -1
        """The first record's offset once acknowledged (-1: unknown, as with acks=0)."""
        self.log_append_time = -1
        """The broker's LogAppendTime (-1: the records keep their CreateTime)."""
        self.error: BaseException | None = None
        self.traceback: TracebackType | None = None
        """``error``'s traceback when it was set: each handle raises it afresh from there,
        as an asyncio future does, rather than growing it at every ``result()``."""
        self.future: asyncio.Future[None] = loop.create_future()
        """Settled (always with None, so it never warns) once the batch has an outcome."""
        self.callbacks: list[_Callback] | None = None
        """Handles' done callbacks, run together in one loop callback when the batch ends."""

    def done(self) -> bool:
        return self.future.done()

    def complete(self, base_offset: int, log_append_time: int) -> None:
        if self.future.done():
            return
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self._settle()

    def fail(self, error: BaseException) -> None:
        if self.future.done():
            return
        self.error = error
        self.traceback = error.__traceback__
        self._settle()

    def _settle(self) -> None:
        self.future.set_result(None)
        if self.callbacks:
            self.future.get_loop().call_soon(self._run_callbacks)

    def _run_callbacks(self) -> None:
        callbacks, self.callbacks = self.callbacks, None
        for fn, handle in callbacks or ():
            try:
                fn(handle)
            except Exception:  # as asyncio's callbacks: one failing does not stop the rest
                log.exception("a done callback of a record failed")


class FutureRecordMetadata:
    """The future :class:`RecordMetadata` of one record given to ``Producer.send`` (Kafka's
    ``FutureRecordMetadata``): its batch's :class:`ProduceRequestResult`, its offset delta in
    the batch and its timestamp. ``await`` it, or ask ``result()`` once ``done()``.

    Cancelling is not possible (``cancel`` returns False): the record is in a batch and
    goes with it. Cancelling a task that awaits a handle only stops that task's waiting.
    """

    __slots__ = ("_delta", "_result", "_timestamp")

    def __init__(self, result: ProduceRequestResult, delta: int, timestamp: int) -> None:
        self._result = result
        self._delta = delta
        self._timestamp = timestamp

    def __repr__(self) -> str:
        r = self._result
        if not r.future.done():
            state = "pending"
        elif r.error is not None:
            state = f"failed: {r.error!r}"
        else:
            state = repr(self._metadata())
        return f"<FutureRecordMetadata {r.topic}-{r.partition} #{self._delta} {state}>"

    def _metadata(self) -> RecordMetadata:
        r = self._result
        return _new_metadata(
            (
                r.topic,
                r.partition,
                r.base_offset + self._delta if r.base_offset >= 0 else -1,
                r.log_append_time if r.log_append_time >= 0 else self._timestamp,
            )
        )

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        r = self._result
        if not r.future.done():
            yield from r.future.__await__()
        return self.result()

    def done(self) -> bool:
        return self._result.future.done()

    def cancelled(self) -> bool:
        """Always False: a record cannot be taken back from its batch."""
        return False

    def cancel(self, msg: object = None) -> bool:
        """Does nothing and returns False (see the class docstring)."""
        return False

    def result(self) -> RecordMetadata:
        """Where the record was written; raises its batch's error if it failed, and
        ``asyncio.InvalidStateError`` before the outcome is known."""
        r = self._result
        if not r.future.done():
            raise asyncio.InvalidStateError("the record has no outcome yet")
        if r.error is not None:
            raise r.error.with_traceback(r.traceback)
        return self._metadata()

    def exception(self) -> BaseException | None:
        """The batch's error (None: written); ``asyncio.InvalidStateError`` before the
        outcome is known."""
        r = self._result
        if not r.future.done():
            raise asyncio.InvalidStateError("the record has no outcome yet")
        return r.error

    def add_done_callback(self, fn: Callable[[FutureRecordMetadata], object]) -> None:
        """Call ``fn(self)`` from the loop once the record has an outcome (at once, through
        the loop, if it has one). The callbacks of one batch run in one loop turn."""
        r = self._result
        if r.future.done():
            r.future.get_loop().call_soon(fn, self)
            return
        if r.callbacks is None:
            r.callbacks = []
        r.callbacks.append((fn, self))
