"""ControllerZkClient's pure helpers, and its watch re-registration logic driven by a fake
kazoo client whose answers and watch events the test releases one by one (the real thing
is tested against ZooKeeper in tests/integration/test_controller_zk.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.protocol.states import KazooState, WatchedEvent

from controller.controller_zk import (
    ControllerMovedError,
    ControllerZkClient,
    WatchKind,
    ZkWatch,
    fenced_results,
)
from proto.zk.znodes import check_admin_path, isr_change_notification_path

# -- fenced_results --------------------------------------------------------------------------


def test_fenced_results_strips_the_passed_epoch_check() -> None:
    assert fenced_results([True, "/a", "stat"], expected_version=3) == ["/a", "stat"]
    # The check passed and a later op failed: the caller sees that op's own error.
    failed = [RolledBackError(), NodeExistsError(), RuntimeInconsistency()]
    assert fenced_results(failed, expected_version=3) == failed[1:]


@pytest.mark.parametrize("check", [BadVersionError(), NoNodeError()])
def test_fenced_results_raises_controller_moved_when_the_check_failed(check: Exception) -> None:
    with pytest.raises(ControllerMovedError, match="zkVersion 7"):
        fenced_results([check, RuntimeInconsistency()], expected_version=7)


def test_fenced_results_propagates_other_check_errors() -> None:
    with pytest.raises(NoAuthError):
        fenced_results([NoAuthError(), RuntimeInconsistency()], expected_version=1)
    with pytest.raises(Exception, match="no results"):
        fenced_results([], expected_version=1)


# -- path validation -------------------------------------------------------------------------


def test_isr_change_notification_path() -> None:
    assert (
        isr_change_notification_path("isr_change_0000000042")
        == "/isr_change_notification/isr_change_0000000042"
    )
    non_ascii_digit = "isr_change_\u0661"
    for bad in ("isr_change_", "isr_change_12/../x", "other_1", "../controller", non_ascii_digit):
        with pytest.raises(ValueError, match="not an ISR change notification"):
            isr_change_notification_path(bad)


def test_check_admin_path() -> None:
    for good in (
        "/admin/reassign_partitions",
        "/admin/preferred_replica_election",
        "/admin/delete_topics/orders",
    ):
        assert check_admin_path(good) == good
    for bad in (
        "/controller",
        "/admin",
        "/admin/delete_topics",
        "/admin/delete_topics/a/b",
        "/x/y",
    ):
        with pytest.raises(ValueError, match="not an admin request"):
            check_admin_path(bad)


# -- watches, with a fake kazoo client -------------------------------------------------------


@dataclass
class FakeResult:
    """kazoo's IAsyncResult, as proto.zk.session.bridge uses it."""

    value: Any = None
    exception: BaseException | None = None
    callbacks: list[Callable[[Any], None]] = field(default_factory=list)

    def rawlink(self, callback: Callable[[Any], None]) -> None:
        self.callbacks.append(callback)

    def successful(self) -> bool:
        return self.exception is None

    def answer(self, value: Any = None, exception: BaseException | None = None) -> None:
        self.value, self.exception = value, exception
        for callback in self.callbacks:
            callback(self)


@dataclass
class Request:
    op: str
    path: str
    watch: Callable[[WatchedEvent], None]
    result: FakeResult


class FakeKazoo:
    """Records watch registrations; the test answers them and fires their events."""

    connected = True
    client_id = (0x51, b"pw")

    def __init__(self) -> None:
        self.requests: list[Request] = []

    def _request(self, op: str, path: str, watch: Callable[[WatchedEvent], None]) -> FakeResult:
        result = FakeResult()
        self.requests.append(Request(op, path, watch, result))
        return result

    def get_children_async(self, path: str, watch: Callable[[WatchedEvent], None]) -> FakeResult:
        return self._request("get_children", path, watch)

    def exists_async(self, path: str, watch: Callable[[WatchedEvent], None]) -> FakeResult:
        return self._request("exists", path, watch)


async def settle() -> None:
    """Let call_soon_threadsafe hand-overs run (a few loop iterations)."""
    for _ in range(5):
        await asyncio.sleep(0)


def event(kind: str, path: str) -> WatchedEvent:
    return WatchedEvent(kind, KazooState.CONNECTED, path)


async def started_watch(kind: WatchKind, path: str) -> tuple[FakeKazoo, ZkWatch, list[int]]:
    """A client wired to a FakeKazoo, and a watch on ``path`` whose first registration the
    test has answered (the znode exists); calls are appended to the returned list."""
    zk = ControllerZkClient("127.0.0.1:1", broker_id=1)
    fake = FakeKazoo()
    zk._loop, zk._client = asyncio.get_running_loop(), fake
    calls: list[int] = []
    watching = asyncio.ensure_future(zk._watch("test", kind, path, lambda: calls.append(1)))
    await settle()
    fake.requests[-1].result.answer([] if kind is WatchKind.CHILDREN else object())
    return fake, await watching, calls


def test_a_fire_re_registers_and_calls_back_only_once_zookeeper_acknowledged() -> None:
    async def scenario() -> None:
        fake, watch, calls = await started_watch(WatchKind.CHILDREN, "/brokers/ids")
        assert calls == []  # not called for the current state
        first = fake.requests[-1]
        first.watch(event("CHILD", "/brokers/ids"))
        await settle()
        assert len(fake.requests) == 2  # re-registered at once...
        assert calls == []  # ...but the callback waits for the acknowledgement
        fake.requests[-1].result.answer(["1"])
        await settle()
        assert calls == [1]
        # A connection loss: kazoo calls every watch with a NONE event, which is ignored...
        fake.requests[-1].watch(event("NONE", ""))
        await settle()
        assert (len(fake.requests), calls) == (2, [1])
        # ...and CONNECTED re-registers every watch and reports once acknowledged.
        zk = watch._owner
        assert isinstance(zk, ControllerZkClient)
        zk._on_state(KazooState.CONNECTED, 0x51)
        await settle()
        assert len(fake.requests) == 3
        fake.requests[-1].result.answer(["1"])
        await settle()
        assert calls == [1, 1]
        # An event of a superseded registration is ignored (the new one covers it).
        first.watch(event("CHILD", "/brokers/ids"))
        fake.requests[1].watch(event("CHILD", "/brokers/ids"))
        await settle()
        assert (len(fake.requests), calls) == (3, [1, 1])
        watch.cancel()
        fake.requests[-1].watch(event("CHILD", "/brokers/ids"))
        await settle()
        assert (len(fake.requests), calls) == (3, [1, 1])

    asyncio.run(scenario())


def test_a_children_watch_on_a_missing_znode_waits_for_its_creation() -> None:
    async def scenario() -> None:
        zk = ControllerZkClient("127.0.0.1:1", broker_id=1)
        fake = FakeKazoo()
        zk._loop, zk._client = asyncio.get_running_loop(), fake
        calls: list[int] = []
        watching = asyncio.ensure_future(zk.watch_isr_change_notifications(lambda: calls.append(1)))
        await settle()
        fake.requests[-1].result.answer(exception=NoNodeError())
        await settle()
        assert [(r.op, r.path) for r in fake.requests] == [
            ("get_children", "/isr_change_notification"),
            ("exists", "/isr_change_notification"),
        ]
        fake.requests[-1].result.answer(None)  # still missing: exists() set its watch
        await watching
        fake.requests[-1].watch(event("CREATED", "/isr_change_notification"))
        await settle()
        assert fake.requests[-1].op == "get_children"
        fake.requests[-1].result.answer(["isr_change_0000000000"])
        await settle()
        assert calls == [1]

    asyncio.run(scenario())


def test_an_interrupted_registration_is_redone_by_the_next_connected() -> None:
    async def scenario() -> None:
        fake, watch, calls = await started_watch(WatchKind.DATA, "/controller")
        fake.requests[-1].watch(event("DELETED", "/controller"))
        await settle()
        fake.requests[-1].result.answer(exception=ConnectionLoss())
        await settle()
        assert calls == []  # not yet set again: the report waits for it
        zk = watch._owner
        assert isinstance(zk, ControllerZkClient)
        zk._on_state(KazooState.CONNECTED, 0x51)
        await settle()
        assert fake.requests[-1].op == "exists"
        fake.requests[-1].result.answer(None)
        await settle()
        assert calls == [1]

    asyncio.run(scenario())
