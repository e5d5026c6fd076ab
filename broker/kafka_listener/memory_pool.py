"""The Kafka listener's request memory pool: ``queued.max.request.bytes`` (KIP-72).

One pool for all the listener's connections. A connection that has read a request's size
asks the pool for that many bytes before it reads the body, and gives them back once the
request is staged (decoded and handed to its handler, see :mod:`broker.kafka_listener.server`).
While the pool has no room the connection reads nothing more: the client's bytes wait in
the kernel's socket buffers and TCP holds the client back, so many large requests at once
make requests wait instead of the broker's memory grow (docs/resource-limits.md).

Waiting requests are granted as room appears, any that fits first (Kafka's
``SimpleMemoryPool`` has no queue either): a flood of large half-sent frames that holds most
of the pool until ``socket.request.read.timeout.ms`` closes them still leaves the rest to
the small requests of everybody else. A request larger than the whole pool could never be
read: :meth:`MemoryPool.fits` says so and the connection is closed, as for a size over
``socket.request.max.bytes``.
"""

from __future__ import annotations

import asyncio

__all__ = ["MemoryPool"]


class MemoryPool:
    """Bytes of requests being read or staged, at most ``capacity`` (None: unbounded)."""

    def __init__(self, capacity: int | None) -> None:
        if capacity is not None and capacity <= 0:
            raise ValueError(f"a memory pool of {capacity} bytes")
        self.capacity = capacity
        self.used = 0
        """Bytes granted and not yet released."""
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []
        """(size, granted) of the requests waiting for room, oldest first."""

    @property
    def waiting(self) -> int:
        """Requests waiting for room."""
        return len(self._waiting)

    def fits(self, size: int) -> bool:
        """Whether a request of ``size`` bytes can ever be granted."""
        return self.capacity is None or size <= self.capacity

    def try_acquire(self, size: int) -> bool:
        """Take ``size`` bytes if there is room now."""
        if self.capacity is not None and self.used + size > self.capacity:
            return False
        self.used += size
        return True

    async def acquire(self, size: int) -> None:
        """Wait until ``size`` bytes are free and take them. Cancelled, it takes nothing.
        ``size`` must :meth:`fits`, or this never returns."""
        if self.try_acquire(size):
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, granted)
        self._waiting.append(entry)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.release(size)  # granted just as we were cancelled: give it back
            elif entry in self._waiting:
                self._waiting.remove(entry)
            raise

    def release(self, size: int) -> None:
        """Give back ``size`` bytes taken by :meth:`acquire` or :meth:`try_acquire`, and
        grant the waiting requests that now fit, oldest first."""
        self.used -= size
        assert self.used >= 0, "released more than was acquired"
        still = []
        for entry in self._waiting:
            wanted, granted = entry
            if not granted.done() and self.try_acquire(wanted):
                granted.set_result(None)
            elif not granted.done():
                still.append(entry)
        self._waiting = still
