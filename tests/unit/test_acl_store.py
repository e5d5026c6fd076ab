"""proto/zk/acl_store.py's writes and broker/security/acl_authorizer.py's cache over an
in-memory ZooKeeper: conditional rewrites, change notifications, and a broker that learns
another's change from its notification."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from broker.security.acl_authorizer import AclAuthorizer, Session
from broker.zk_client import BrokerZkClient
from proto.zk.acl_bindings import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    EntryFilter,
    PatternFilter,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from proto.zk.acl_store import create_acls, delete_acls, describe_acls, read_acls
from proto.zk.session import ZooKeeperClient

ALICE = Session("User:alice", "10.0.0.1")
ORDERS = ResourcePattern(ResourceType.TOPIC, "orders")
TEAM = ResourcePattern(ResourceType.TOPIC, "team-", PatternType.PREFIXED)


def allow(operation: AclOperation, principal: str = "User:alice") -> AccessControlEntry:
    return AccessControlEntry(principal, "*", operation, Permission.ALLOW)


class MemoryZooKeeper:
    """The ``request`` calls acl_store and the authorizer make, on a dict of znodes."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = {"/": (b"", 0)}
        self.sequence = 0
        self.races = 0
        """Writes to fail with BadVersionError first, as if another writer came first."""

    def _parent(self, path: str) -> str:
        return path.rsplit("/", 1)[0] or "/"

    async def request(self, op: str, path: str, *args: Any, **kwargs: Any) -> Any:
        if op == "get":
            if path not in self.nodes:
                raise NoNodeError
            data, version = self.nodes[path]
            return data, SimpleNamespace(version=version, ctime=0)
        if op == "get_children":
            if path not in self.nodes:
                raise NoNodeError
            prefix = path.rstrip("/") + "/"
            return [
                p[len(prefix) :]
                for p in self.nodes
                if p.startswith(prefix) and "/" not in p[len(prefix) :]
            ]
        if op == "create":
            data = args[0] if args else b""
            if kwargs.get("sequence"):
                path = f"{path}{self.sequence:010d}"
                self.sequence += 1
            if path in self.nodes:
                raise NodeExistsError
            if self._parent(path) not in self.nodes:
                if not kwargs.get("makepath"):
                    raise NoNodeError
                await self.request("create", self._parent(path), b"", makepath=True)
            self.nodes[path] = (data, 0)
            return path
        if op in ("set", "delete"):
            if path not in self.nodes:
                raise NoNodeError
            expected = args[-1] if args else -1
            if self.races:
                self.races -= 1
                raise BadVersionError
            if expected not in (-1, self.nodes[path][1]):
                raise BadVersionError
            if op == "delete":
                del self.nodes[path]
            else:
                self.nodes[path] = (args[0], self.nodes[path][1] + 1)
            return None
        raise AssertionError(f"unexpected op {op}")

    def changes(self) -> list[str]:
        return sorted(p for p in self.nodes if "/acl_changes_" in p)


def test_writes_are_conditional_notified_and_read_back() -> None:
    zk = MemoryZooKeeper()
    session = cast(ZooKeeperClient, zk)

    async def main() -> None:
        bad = AclBinding(ResourcePattern(ResourceType.GROUP, "g"), allow(AclOperation.WRITE))
        results = await create_acls(
            session,
            [
                AclBinding(ORDERS, allow(AclOperation.WRITE)),
                bad,
                AclBinding(TEAM, allow(AclOperation.READ)),
            ],
        )
        assert results[0] is None
        assert results[2] is None
        assert "does not apply" in (results[1] or "")
        assert zk.changes() == [
            "/kafka-acl-changes/acl_changes_0000000000",
            "/kafka-acl-extended-changes/acl_changes_0000000001",
        ]
        zk.races = 2  # two other writers come first: the rewrite reads again and wins
        await create_acls(session, [AclBinding(ORDERS, allow(AclOperation.READ, "User:bob"))])
        entries, version = await read_acls(session, ORDERS)
        assert entries == {allow(AclOperation.WRITE), allow(AclOperation.READ, "User:bob")}
        assert version == 1
        found = await describe_acls(
            session,
            AclBindingFilter(PatternFilter(ResourceType.TOPIC, "team-x", PatternType.MATCH)),
        )
        assert found == [AclBinding(TEAM, allow(AclOperation.READ))]
        [deleted] = await delete_acls(
            session, [AclBindingFilter(PatternFilter(), EntryFilter(principal="User:alice"))]
        )
        assert {b.pattern for b in deleted} == {ORDERS, TEAM}
        assert "/kafka-acl-extended/prefixed/Topic/team-" not in zk.nodes  # emptied: gone
        assert (await read_acls(session, ORDERS))[0] == {allow(AclOperation.READ, "User:bob")}

    asyncio.run(main())


def test_a_broker_learns_another_brokers_change_from_its_notification() -> None:
    zk = MemoryZooKeeper()

    async def main() -> None:
        authorizer = AclAuthorizer(1, cast(BrokerZkClient, zk), enabled=True)
        wakes: list[object] = []

        async def watch_acl_changes(callback: object) -> list[object]:
            wakes.append(callback)
            return []

        zk.watch_acl_changes = watch_acl_changes  # type: ignore[attr-defined]
        await create_acls(
            cast(ZooKeeperClient, zk), [AclBinding(ORDERS, allow(AclOperation.WRITE))]
        )
        await authorizer.start()  # loads what is there
        try:
            assert authorizer.authorize(ALICE, AclOperation.DESCRIBE, ResourceType.TOPIC, "orders")
            assert not authorizer.authorize(ALICE, AclOperation.WRITE, ResourceType.TOPIC, "team-a")
            # Another broker (or minibroker acls) writes; the watch fires here.
            await create_acls(
                cast(ZooKeeperClient, zk), [AclBinding(TEAM, allow(AclOperation.WRITE))]
            )
            authorizer._wake.set()
            for _ in range(100):
                if authorizer.authorize(
                    ALICE, AclOperation.WRITE, ResourceType.TOPIC, "team-a", log_denied=False
                ):
                    break
                await asyncio.sleep(0.01)
            assert authorizer.authorize(ALICE, AclOperation.WRITE, ResourceType.TOPIC, "team-a")
        finally:
            await authorizer.stop()
        assert wakes, "the authorizer watches the change notifications"

    asyncio.run(main())
