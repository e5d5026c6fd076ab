"""Kafka's purgatory on asyncio: requests that wait for a condition or a timeout.

An acks=all produce waits until the high watermark passes its last offset; a fetch waits
until ``min_bytes`` are readable. Each is a :class:`DelayedOperation` watched under the
keys (topic-partitions) whose changes may complete it. Whoever changes a partition (an
append, a follower fetch moving the HW, a leadership change) calls
:meth:`DelayedOperationPurgatory.check_and_complete` for it; a timer expires what is left.

Everything runs on the event loop thread, so, unlike Kafka's, this purgatory needs no locks:
``try_complete`` and ``force_complete`` can never race.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, Protocol, TypeVar

from proto.wire import minibroker_pb2 as pb

logger = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


class PartitionStatus(Protocol):
    """What :class:`DelayedPartitionsOperation` needs of a partition's status."""

    error_code: int | None
    """None while waiting; then NONE or the error the partition ended with."""


S = TypeVar("S", bound=PartitionStatus)
P = TypeVar("P")


class DelayedOperation(ABC):
    """An operation that completes when :meth:`try_complete` says so, or at its timeout.

    Await :meth:`wait` for the outcome. Cancelling the awaiting task (the client went
    away) marks the operation completed, so it stops being checked; what it has already
    done (e.g. the produce's append) stays done.
    """

    def __init__(self, timeout_ms: int) -> None:
        self.timeout_ms = timeout_ms
        self._done = asyncio.get_running_loop().create_future()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def is_completed(self) -> bool:
        return self._done.done()

    @abstractmethod
    def try_complete(self) -> bool:
        """Check the condition; if it holds, call :meth:`force_complete` and return True."""

    @abstractmethod
    def on_complete(self) -> None:
        """Build the outcome. Called exactly once, whether satisfied or expired."""

    def on_expiration(self) -> None:  # noqa: B027  (optional hook, empty by default)
        """Called before :meth:`on_complete` when the timeout completed the operation."""

    def force_complete(self) -> bool:
        """Complete now; False if it already was."""
        if self._done.done():
            return False
        if self._timer is not None:
            self._timer.cancel()
        self.on_complete()
        if not self._done.done():
            self._done.set_result(None)
        return True

    def start_timer(self) -> None:
        """Expire the operation after its timeout unless it completes first."""
        if self._timer is None and not self._done.done():
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(max(0, self.timeout_ms) / 1000, self._expire)

    def _expire(self) -> None:
        if not self._done.done():
            self.on_expiration()
            self.force_complete()

    async def wait(self) -> None:
        """Until completed. Cancellation abandons the operation (see the class docstring)."""
        try:
            await asyncio.shield(self._done)
        except asyncio.CancelledError:
            if not self._done.done():
                if self._timer is not None:
                    self._timer.cancel()
                self._done.cancel()
            raise


class DelayedPartitionsOperation(DelayedOperation, Generic[K, S, P]):
    """An operation over several partitions, each settled on its own (the loop Kafka's
    ``DelayedProduce.tryComplete`` and ``DelayedDeleteRecords.tryComplete`` share).

    A waiting partition no longer hosted fails with :meth:`partition_gone`; a hosted one is
    asked :meth:`check_partition`. The operation completes once no partition waits.
    """

    def __init__(
        self, timeout_ms: int, statuses: dict[K, S], get_partition: Callable[[K], P | None]
    ) -> None:
        super().__init__(timeout_ms)
        self.statuses = statuses
        self._get_partition = get_partition

    def try_complete(self) -> bool:
        pending = False
        for key, status in self.statuses.items():
            if status.error_code is not None:
                continue
            partition = self._get_partition(key)
            if partition is None:
                self.partition_gone(status)
            else:
                self.check_partition(partition, status)
            pending = pending or status.error_code is None
        return False if pending else self.force_complete()

    def partition_gone(self, status: S) -> None:
        """The partition is no longer hosted here: UNKNOWN_TOPIC_OR_PARTITION."""
        status.error_code = pb.UNKNOWN_TOPIC_OR_PARTITION

    @abstractmethod
    def check_partition(self, partition: P, status: S) -> None:
        """Settle ``status`` (set its ``error_code``) if the partition is done; leave it
        None while it still waits."""


class DelayedOperationPurgatory(Generic[K]):
    """Watches delayed operations by key and completes them when their key changes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[K, list[DelayedOperation]] = {}

    def try_complete_else_watch(self, operation: DelayedOperation, keys: Iterable[K]) -> bool:
        """Complete ``operation`` at once if it can; otherwise watch it under ``keys`` and
        start its timer. Returns True if it completed at once."""
        if operation.try_complete():
            return True
        for key in keys:
            self._watchers.setdefault(key, []).append(operation)
        operation.start_timer()
        return False

    def check_and_complete(self, key: K) -> int:
        """Try to complete every operation watched under ``key``; returns how many did."""
        watching = self._watchers.get(key)
        if not watching:
            return 0
        completed = 0
        remaining = []
        for operation in watching:
            if operation.is_completed:
                continue
            if operation.try_complete():
                completed += 1
            else:
                remaining.append(operation)
        if remaining:
            self._watchers[key] = remaining
        else:
            del self._watchers[key]
        return completed

    def watched(self, key: K) -> int:
        """How many incomplete operations wait on ``key``."""
        return sum(1 for op in self._watchers.get(key, ()) if not op.is_completed)

    @property
    def purgatory_size(self) -> int:
        """Watch entries, completed ones not yet purged included (Kafka's PurgatorySize)."""
        return sum(len(watching) for watching in self._watchers.values())

    @property
    def num_delayed_operations(self) -> int:
        """Incomplete operations, each counted once however many keys it waits on (Kafka's
        NumDelayedOperations)."""
        return len(
            {
                id(op)
                for watching in self._watchers.values()
                for op in watching
                if not op.is_completed
            }
        )

    def purge_completed(self) -> None:
        """Drop completed operations that nobody checked since (timeouts, cancellations)."""
        for key in list(self._watchers):
            live = [op for op in self._watchers[key] if not op.is_completed]
            if live:
                self._watchers[key] = live
            else:
                del self._watchers[key]
