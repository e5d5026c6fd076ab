"""The asyncio purgatory completes operations on key changes, on timeout, or abandons them."""

from __future__ import annotations

import asyncio

import pytest

from broker.replication.purgatory import DelayedOperation, DelayedOperationPurgatory


class WaitForValue(DelayedOperation):
    def __init__(self, box: dict[str, int], target: int, timeout_ms: int) -> None:
        super().__init__(timeout_ms)
        self.box = box
        self.target = target
        self.outcome: str | None = None
        self.completions = 0

    def try_complete(self) -> bool:
        if self.box["value"] >= self.target:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.completions += 1
        if self.outcome is None:
            self.outcome = "satisfied"

    def on_expiration(self) -> None:
        self.outcome = "expired"


def test_completes_at_once_when_already_satisfied() -> None:
    async def scenario() -> None:
        purgatory: DelayedOperationPurgatory[str] = DelayedOperationPurgatory("test")
        op = WaitForValue({"value": 5}, 3, timeout_ms=10_000)
        assert purgatory.try_complete_else_watch(op, ["k"])
        assert op.outcome == "satisfied"
        assert purgatory.watched("k") == 0

    asyncio.run(scenario())


def test_completes_when_its_key_is_checked_after_a_change() -> None:
    async def scenario() -> None:
        purgatory: DelayedOperationPurgatory[str] = DelayedOperationPurgatory("test")
        box = {"value": 0}
        op = WaitForValue(box, 3, timeout_ms=10_000)
        assert not purgatory.try_complete_else_watch(op, ["a", "b"])
        assert purgatory.check_and_complete("a") == 0
        box["value"] = 3
        assert purgatory.check_and_complete("b") == 1
        await asyncio.wait_for(op.wait(), 1)
        assert op.outcome == "satisfied"
        assert purgatory.check_and_complete("a") == 0  # already done: dropped, not re-run
        assert op.completions == 1
        assert purgatory.watched("a") == purgatory.watched("b") == 0

    asyncio.run(scenario())


def test_expires_at_its_timeout_exactly_once() -> None:
    async def scenario() -> None:
        purgatory: DelayedOperationPurgatory[str] = DelayedOperationPurgatory("test")
        box = {"value": 0}
        op = WaitForValue(box, 3, timeout_ms=20)
        purgatory.try_complete_else_watch(op, ["k"])
        await asyncio.wait_for(op.wait(), 2)
        assert op.outcome == "expired"
        box["value"] = 10
        assert purgatory.check_and_complete("k") == 0
        assert op.completions == 1

    asyncio.run(scenario())


def test_cancelled_waiter_abandons_the_operation() -> None:
    async def scenario() -> None:
        purgatory: DelayedOperationPurgatory[str] = DelayedOperationPurgatory("test")
        box = {"value": 0}
        op = WaitForValue(box, 3, timeout_ms=10_000)
        purgatory.try_complete_else_watch(op, ["k"])
        waiter = asyncio.create_task(op.wait())
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert op.is_completed
        box["value"] = 5
        assert purgatory.check_and_complete("k") == 0
        assert op.completions == 0
        purgatory.purge_completed()
        assert purgatory.watched("k") == 0

    asyncio.run(scenario())


def test_sizes_count_watch_entries_and_distinct_waiting_operations() -> None:
    """PurgatorySize counts an operation once per key; NumDelayedOperations once."""

    async def scenario() -> None:
        purgatory: DelayedOperationPurgatory[str] = DelayedOperationPurgatory("test")
        box = {"value": 0}
        both = WaitForValue(box, 3, timeout_ms=10_000)
        one = WaitForValue(box, 5, timeout_ms=10_000)
        purgatory.try_complete_else_watch(both, ["a", "b"])
        purgatory.try_complete_else_watch(one, ["a"])
        assert (purgatory.purgatory_size, purgatory.num_delayed_operations) == (3, 2)
        box["value"] = 3
        purgatory.check_and_complete("a")
        assert (purgatory.purgatory_size, purgatory.num_delayed_operations) == (2, 1)
        purgatory.purge_completed()
        assert (purgatory.purgatory_size, purgatory.num_delayed_operations) == (1, 1)
        one.force_complete()

    asyncio.run(scenario())
