"""Reading a Kafka connection's frames within the listener's limits
(docs/resource-limits.md).

A frame is a big-endian int32 size and that many bytes. :class:`FrameReader` reads one:

1. its size, waiting at most until the connection has been idle for
   ``connections.max.idle.ms`` (nothing read, nothing owed to the client: Kafka's
   ``Selector`` closes such a connection). A connection with answers still owed is not idle;
2. refuses a size outside ``0..socket.request.max.bytes`` or larger than the whole memory
   pool (the connection is closed);
3. waits for the pool (``queued.max.request.bytes``, :mod:`broker.kafka_listener.memory_pool`)
   to have room for the size, reading nothing meanwhile;
4. reads the body within ``socket.request.read.timeout.ms`` (minibroker's own): a frame
   whose bytes stop coming is closed after it, not held for ever.

Both deadlines are kept by one watchdog timer per connection, which looks every quarter
of the shorter limit and cancels the read that is past its deadline (so a deadline is met
within a quarter of it late); a request sets two attributes instead of arming two timers.

The body goes into one buffer of its size, not a buffer grown as the bytes arrive: one
allocation, which the allocator serves from ``mmap`` and gives back whole when it is large
(:func:`proto.process.tuning.release_free_memory_soon` returns what the heap kept after
a large one).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from broker.kafka_listener.memory_pool import MemoryPool
from broker.kafka_listener.wire_request import CloseConnection
from proto.config.broker_config import BrokerConfig, connection_overrides
from proto.process.tuning import release_free_memory_soon

__all__ = ["FrameReader", "IdleConnectionError", "ListenerLimits"]

_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class ListenerLimits:
    """The Kafka listener's resource limits, under Kafka's property names."""

    max_connections: int = 2**31 - 1
    max_connections_per_ip: int = 2**31 - 1
    max_connections_per_ip_overrides: str = ""
    connections_max_idle_ms: int = 600_000
    queued_max_request_bytes: int = 209_715_200
    """-1: unbounded."""
    socket_request_read_timeout_ms: int = 30_000

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ListenerLimits:
        return cls(
            config.max_connections,
            config.max_connections_per_ip,
            config.max_connections_per_ip_overrides,
            config.connections_max_idle_ms,
            config.queued_max_request_bytes,
            config.socket_request_read_timeout_ms,
        )

    @property
    def overrides(self) -> dict[str, int]:
        return connection_overrides(self.max_connections_per_ip_overrides)

    def memory_pool(self) -> MemoryPool:
        pool_bytes = self.queued_max_request_bytes
        return MemoryPool(None if pool_bytes < 0 else pool_bytes)


class IdleConnectionError(CloseConnection):
    """Nothing came and nothing was owed for ``connections.max.idle.ms``."""


class Activity:
    """When a connection last did something, and how many answers it is owed."""

    __slots__ = ("last", "owed")

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.owed = 0

    def requested(self) -> None:
        self.last = time.monotonic()
        self.owed += 1

    def answered(self) -> None:
        self.last = time.monotonic()
        self.owed -= 1


class FrameReader:
    """One connection's frames, within the limits; the pool's bytes of the frame last
    returned are held until :meth:`staged` (or :meth:`close`)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        limits: ListenerLimits,
        pool: MemoryPool,
        max_request_bytes: int,
        describe_head: Callable[[bytes], str] = lambda head: "",
    ) -> None:
        self._reader = reader
        self._limits = limits
        self._pool = pool
        self._max_request_bytes = max_request_bytes
        self._describe_head = describe_head
        """What a refused size most likely is, for the log line (" (an HTTP request)")."""
        self.activity = Activity()
        self._held = 0
        self._waiting_since: float | None = None
        """When the wait for the next request's size began (None: not waiting for one)."""
        self._body_since: float | None = None
        """When the read of a request's body began (None: not reading one)."""
        self._body_size = 0
        self._expired: CloseConnection | None = None
        self._task: asyncio.Task[object] | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._tick_s = (
            min(limits.connections_max_idle_ms, limits.socket_request_read_timeout_ms) / 4000
        )
        """How often the deadlines are checked: a quarter of the shorter one. One timer per
        connection, not one per request: a request costs two attribute writes."""

    async def next_frame(self) -> bytes | None:
        """The next frame's bytes (after its size), or None when the client closed the
        connection between frames. Raises CloseConnection for a frame to refuse, an idle
        connection, or a frame not complete in time; asyncio.IncompleteReadError for a
        connection closed inside a frame."""
        self._task = asyncio.current_task()
        if self._watchdog is None and self._expired is None:
            self._watchdog = asyncio.get_running_loop().call_later(self._tick_s, self._check)
        try:
            return await self._next_frame()
        except asyncio.CancelledError:
            if self._expired is None or self._task is None:
                raise
            self._task.uncancel()  # our own deadline, not a cancellation from outside
            raise self._expired from None
        finally:
            self._waiting_since = self._body_since = None

    async def _next_frame(self) -> bytes | None:
        # The idle time counts from when the connection could send again: a muted
        # (throttled) connection, or one whose answer queue was full, was not idle.
        self._waiting_since = time.monotonic()
        try:
            head = await self._reader.readexactly(4)
        except asyncio.IncompleteReadError as err:
            if err.partial:
                raise
            return None
        self._waiting_since = None
        size = int.from_bytes(head, "big", signed=True)
        if size < 0 or size > self._max_request_bytes:
            raise CloseConnection(
                f"request size {size} is not in 0..socket.request.max.bytes "
                f"({self._max_request_bytes}){self._describe_head(head)}"
            )
        if not self._pool.fits(size):
            raise CloseConnection(
                f"request size {size} is over queued.max.request.bytes ({self._pool.capacity})"
            )
        await self._pool.acquire(size)
        self._held = size
        self._body_size = size
        self._body_since = time.monotonic()
        frame = await self._read_body(size)
        self._body_since = None
        self.activity.requested()
        return frame

    def _check(self) -> None:
        """The watchdog: close a connection idle for ``connections.max.idle.ms`` (with no
        answer owed) or a frame not complete ``socket.request.read.timeout.ms`` after its
        read began, by cancelling the reader (:meth:`next_frame` raises the reason)."""
        now = time.monotonic()
        limits = self._limits
        if self._waiting_since is not None and self.activity.owed == 0:
            idle_ms = (now - max(self.activity.last, self._waiting_since)) * 1000
            if idle_ms >= limits.connections_max_idle_ms:
                self._expire(
                    IdleConnectionError(
                        f"idle for connections.max.idle.ms ({limits.connections_max_idle_ms})"
                    )
                )
                return
        reading_ms = None if self._body_since is None else (now - self._body_since) * 1000
        if reading_ms is not None and reading_ms >= limits.socket_request_read_timeout_ms:
            self._expire(
                CloseConnection(
                    f"request of {self._body_size} bytes not complete after "
                    f"socket.request.read.timeout.ms ({limits.socket_request_read_timeout_ms})"
                )
            )
            return
        self._watchdog = asyncio.get_running_loop().call_later(self._tick_s, self._check)

    def _expire(self, reason: CloseConnection) -> None:
        self._expired = reason
        self._watchdog = None
        if self._task is not None:
            self._task.cancel()

    def staged(self) -> None:
        """The frame last read is staged: its bytes go back to the pool."""
        held, self._held = self._held, 0
        if held:
            self._pool.release(held)
        release_free_memory_soon(held)

    def close(self) -> None:
        """The connection is done: give back what the frame being read holds, stop the
        watchdog."""
        self.staged()
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    async def _read_body(self, size: int) -> bytes:
        if size <= _CHUNK:
            return await self._reader.readexactly(size)
        body = bytearray(size)
        done = 0
        try:
            with memoryview(body) as view:
                while done < size:
                    chunk = await self._reader.read(min(size - done, _CHUNK))
                    if not chunk:
                        raise asyncio.IncompleteReadError(b"", size)
                    view[done : done + len(chunk)] = chunk
                    done += len(chunk)
        except BaseException:
            # The exception's traceback keeps this frame, and the exception is in a cycle
            # with its handler's frames: without this the buffer would wait for the
            # cyclic collector (rare here, proto/process/tuning.py) however large it is.
            del body
            raise
        return bytes(body)
