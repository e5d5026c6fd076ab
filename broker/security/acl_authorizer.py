"""Who may do what, below both listeners: Kafka 2.8's ``AclAuthorizer`` (docs/security.md).

With ``authorizer.class.name`` set, every request of either listener is checked here
before it acts: the Kafka listener's handlers and the gRPC services ask
:meth:`AclAuthorizer.authorize` with the request's :class:`Session` (its principal and
the host it came from), an operation and a resource, as Kafka's ``KafkaApis`` asks its
authorizer. The decision is :class:`~broker.security.acl_matching.AclSnapshot`'s over the
ACLs this broker caches; each refusal is one log line (``event=acl_denied``).

Without it, everything is allowed, except that on a TLS broker the cluster actions (the
control requests and replica fetches) stay the ``super.users``' only, as before ACLs
existed (:meth:`AclAuthorizer.authorize_cluster_action`).

The cache is every ACL in ZooKeeper (:mod:`proto.zk.acl_store`), loaded at start-up and
kept current by the change notifications: on each new one the pattern it names is read
again (Kafka's ``AclChangedNotificationHandler``). A write made through this broker
(CreateAcls, DeleteAcls) is applied to its cache at once, as Kafka's are. Everything runs
on the broker's event loop; one task processes the notifications.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from kazoo.exceptions import NodeExistsError, NoNodeError

from broker.security.acl_matching import AclSnapshot
from broker.zk_client import BrokerZkClient
from proto.process.event_log import log_event
from proto.zk.acl_bindings import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclOperation,
    ResourcePattern,
    ResourceType,
)
from proto.zk.acl_store import (
    ACL_CHANGE_PATHS,
    ACL_CHANGE_PREFIX,
    ACL_PATHS,
    decode_acl_change,
    read_acls,
    read_all_acls,
)
from proto.zk.session import ZkError, ZkWatch
from proto.zk.znodes import ZkDataError

__all__ = ["ANONYMOUS_SESSION", "AclAuthorizer", "Session", "host_of"]

log = logging.getLogger(__name__)

CHANGE_EXPIRATION_MS = 15 * 60 * 1000
"""Notifications older than this are deleted (Kafka's ``changeExpirationMs``)."""
_RETRY_BACKOFF_S = 1.0


@dataclass(frozen=True, slots=True)
class Session:
    """Who sent a request and from where (Kafka's ``RequestContext`` principal and client
    address): ``User:ANONYMOUS`` on a listener that authenticates no one."""

    principal: str
    host: str
    """The client's IP address, as ACL hosts name it (``127.0.0.1``)."""


ANONYMOUS_SESSION = Session("User:ANONYMOUS", "")
"""Who a request comes from where nobody asked (in-process callers, tests)."""


def host_of(peer: str) -> str:
    """A client's IP address from a Kafka ``client_host`` (``/127.0.0.1``) or a gRPC peer
    (``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``)."""
    if peer.startswith("/"):
        return peer[1:]
    for scheme in ("ipv4:", "ipv6:"):
        if peer.startswith(scheme):
            address = peer[len(scheme) :]
            if address.startswith("["):
                return address[1 : address.index("]")]
            return address.rsplit(":", 1)[0]
    return peer


class AclAuthorizer:
    """The ACL cache and the decisions of one broker (see the module docstring).

    Create, ``await start()`` after the ZooKeeper session is open and before the listeners
    serve; ``await stop()`` before closing the session. Disabled (no
    ``authorizer.class.name``) it reads nothing from ZooKeeper."""

    def __init__(
        self,
        broker_id: int,
        zk: BrokerZkClient | None,
        *,
        enabled: bool,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        tls_enabled: bool = False,
    ) -> None:
        self.broker_id = broker_id
        self.enabled = enabled
        """``authorizer.class.name`` is set: ACLs are enforced."""
        self.tls_enabled = tls_enabled
        self._zk = zk
        self._super_users = frozenset(super_users)
        self._allow_if_none = allow_everyone_if_no_acl_found
        self.snapshot = AclSnapshot(
            {}, super_users=self._super_users, allow_everyone_if_no_acl_found=self._allow_if_none
        )
        """The ACLs in force (replaced whole on each change)."""
        self._last_sequence: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._refreshing = asyncio.Lock()
        self._watches: list[ZkWatch] = []
        self._task: asyncio.Task[None] | None = None

    # -- decisions ---------------------------------------------------------------------

    def authorize(
        self,
        session: Session,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str = CLUSTER_NAME,
        *,
        log_denied: bool = True,
    ) -> bool:
        """Whether ``session`` may do ``operation`` on the resource; a refusal is logged
        (``log_denied`` False: a filter, such as Metadata's listing of every topic)."""
        if not self.enabled:
            return True
        allowed = self.snapshot.authorize(
            session.principal, session.host, operation, resource_type, name
        )
        if not allowed and log_denied:
            self._denied(session, operation, resource_type, name)
        return allowed

    def authorized(
        self,
        session: Session,
        operation: AclOperation,
        resource_type: ResourceType,
        names: Iterable[str],
        *,
        log_denied: bool = True,
    ) -> set[str]:
        """The names among ``names`` that ``session`` may act on (Kafka's
        ``filterByAuthorized``), each refusal logged once."""
        return {
            n
            for n in set(names)
            if self.authorize(session, operation, resource_type, n, log_denied=log_denied)
        }

    def authorize_any(
        self, session: Session, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether ``session`` may do ``operation`` on some resource of the type (KIP-679's
        ``authorizeByResourceType``; Kafka 2.8's idempotent producers need Write on some
        topic or IdempotentWrite on the cluster)."""
        if not self.enabled:
            return True
        return self.snapshot.authorize_any(
            session.principal, session.host, operation, resource_type
        )

    def authorize_cluster_action(self, principal: str | None, host: str) -> bool:
        """A control request or replica fetch: ClusterAction on the Cluster with ACLs;
        without them, on a TLS broker, only ``super.users``; else anyone. Refusals are for
        the caller to log (it knows the request)."""
        if self.enabled:
            return self.snapshot.authorize(
                principal or "",
                host,
                AclOperation.CLUSTER_ACTION,
                ResourceType.CLUSTER,
                CLUSTER_NAME,
            )
        if self.tls_enabled:
            return principal is not None and principal in self._super_users
        return True

    def _denied(
        self, session: Session, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> None:
        log_event(
            log,
            logging.INFO,
            "authorizer",
            "acl_denied",
            broker=self.broker_id,
            principal=session.principal,
            host=session.host,
            operation=operation.title,
            resource=f"{resource_type.title}:{name}",
        )

    # -- the cache ---------------------------------------------------------------------

    async def start(self) -> None:
        """Make sure of the ACL znodes' parents, watch the change notifications, mark
        those there as seen, load every ACL; then follow the notifications in the
        background (the watch is set before the load, so no change falls between)."""
        if not self.enabled or self._zk is None:
            return
        zk = self._zk
        for path in ACL_PATHS:
            with contextlib.suppress(NodeExistsError):
                await zk.request("create", path, b"", makepath=True)
        self._watches = await zk.watch_acl_changes(self._wake.set)
        for parent in ACL_CHANGE_PATHS:
            names = await self._change_names(parent)
            self._last_sequence[parent] = _sequence(names[-1]) if names else -1
        self._install(await read_all_acls(zk))
        log_event(
            log,
            logging.INFO,
            "authorizer",
            "acls_loaded",
            broker=self.broker_id,
            patterns=len(self.snapshot.acls),
        )
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"broker-{self.broker_id}-acl-changes"
        )

    async def stop(self) -> None:
        """Stop following the notifications. Idempotent."""
        for watch in self._watches:
            watch.cancel()
        self._watches = []
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _install(self, acls: dict[ResourcePattern, frozenset[AccessControlEntry]]) -> None:
        self.snapshot = AclSnapshot(
            acls, super_users=self._super_users, allow_everyone_if_no_acl_found=self._allow_if_none
        )

    async def refresh(self, patterns: Iterable[ResourcePattern]) -> None:
        """Read ``patterns`` again from ZooKeeper into the cache (after this broker wrote
        them, and on a notification). Refreshes run one at a time, so a later read is never
        overwritten by an earlier one (Kafka holds its authorizer's lock likewise)."""
        if self._zk is None or not self.enabled:
            return
        async with self._refreshing:
            read: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
            for pattern in set(patterns):
                try:
                    read[pattern], _ = await read_acls(self._zk, pattern)
                except ZkDataError as err:
                    log_event(log, logging.WARNING, "authorizer", "malformed_acls", error=str(err))
            acls = dict(self.snapshot.acls)
            for pattern, entries in read.items():
                if entries:
                    acls[pattern] = entries
                else:
                    acls.pop(pattern, None)
            self._install(acls)

    async def _change_names(self, parent: str) -> list[str]:
        assert self._zk is not None
        try:
            children = await self._zk.request("get_children", parent)
        except NoNodeError:
            return []
        return sorted(c for c in children if c.startswith(ACL_CHANGE_PREFIX))

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._process_notifications()
            except ZkError as err:
                log_event(log, logging.WARNING, "authorizer", "acl_changes_failed", error=repr(err))
                await asyncio.sleep(_RETRY_BACKOFF_S)
                self._wake.set()
            except Exception:
                log.exception("authorizer event=acl_changes_failed broker=%d", self.broker_id)
                await asyncio.sleep(_RETRY_BACKOFF_S)

    async def _process_notifications(self) -> None:
        """Each new notification's pattern read again, in sequence order; expired ones
        purged (Kafka's ``ZkNodeChangeNotificationListener``)."""
        assert self._zk is not None
        now_ms = time.time_ns() // 1_000_000
        changed: list[ResourcePattern] = []
        for parent in ACL_CHANGE_PATHS:
            for name in await self._change_names(parent):
                path = f"{parent}/{name}"
                try:
                    data, stat = await self._zk.request("get", path)
                except NoNodeError:
                    continue  # purged by another broker meanwhile
                sequence = _sequence(name)
                if sequence > self._last_sequence.get(parent, -1):
                    try:
                        changed.append(decode_acl_change(parent, bytes(data)))
                    except ZkDataError as err:
                        log_event(
                            log, logging.WARNING, "authorizer", "bad_acl_change", error=str(err)
                        )
                    self._last_sequence[parent] = sequence
                if now_ms - int(stat.ctime) > CHANGE_EXPIRATION_MS:
                    with contextlib.suppress(NoNodeError):
                        await self._zk.request("delete", path)
        if changed:
            await self.refresh(changed)
            log_event(
                log,
                logging.INFO,
                "authorizer",
                "acls_changed",
                broker=self.broker_id,
                patterns=",".join(sorted(map(str, set(changed)))),
            )


def _sequence(name: str) -> int:
    try:
        return int(name[len(ACL_CHANGE_PREFIX) :])
    except ValueError:
        return -1
