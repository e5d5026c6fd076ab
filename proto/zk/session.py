"""The one ZooKeeper access layer: a session on an asyncio loop, one retry loop, standing
watches (Kafka's ``ZooKeeperClient``).

Every ZooKeeper user of the project builds on :class:`ZooKeeperClient` and only adds its
operations: the broker's registration and ISR notifications (``broker.zk_client``), the
controller's candidacy and fenced writes (``controller.controller_zk``), a consumer group
member (``client.group``) and the admin client (``client.admin``). It lives with the
contracts so that the client does not depend on the broker. The znodes several of them
share (partition states, broker registrations, consumer offsets) are read and written
here once, by the rules of :mod:`proto.zk.znode_reads`, which the tools' synchronous
:mod:`proto.zk.sync_client` follows too.

kazoo has no asyncio handler: its ``*_async`` calls
return an ``IAsyncResult`` completed on kazoo's own threads, and its watches and state
listeners also run there. Code on an event loop must therefore

- turn each ``IAsyncResult`` into an asyncio future settled on the loop (:func:`bridge`);
- hand every kazoo callback to the loop with ``call_soon_threadsafe`` (:func:`on_loop`),
  never run its own logic on kazoo's thread (kazoo's docs: a listener must not block);
- run kazoo's only blocking calls, connect and close, in an executor
  (:func:`start_kazoo`, :func:`stop_kazoo`).

Standing watches (:class:`ZkWatch`) are re-registered after every fire and reconnect; see
:mod:`controller.controller_zk` for the promise they keep.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, ClassVar, Protocol, Self, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType
from kazoo.retry import KazooRetry
from kazoo.security import ACL, OPEN_ACL_UNSAFE

from proto.errors import MinibrokerError
from proto.process.event_log import log_event
from proto.zk.credentials import SECURE_ACL, SENSITIVE_ACL, ZkCredentials
from proto.zk.znode_limits import JUTE_MAXBUFFER, SizeCheckedKazooClient
from proto.zk.znode_reads import (
    decode_znode,
)
from proto.zk.znodes import CONSUMERS_PATH, is_sensitive_path

T = TypeVar("T")

log = logging.getLogger(__name__)

__all__ = [
    "RECONNECT_MAX_DELAY_S",
    "RETRY_MAX_S",
    "RETRY_MIN_S",
    "SessionCallback",
    "WatchCallback",
    "WatchKind",
    "ZkConnectionError",
    "ZkError",
    "ZkNoChrootError",
    "ZkSessionExpiredError",
    "ZkSettings",
    "ZkState",
    "ZkWatch",
    "ZooKeeperClient",
    "bridge",
    "connect_session",
    "on_loop",
    "split_zookeeper_connect",
    "start_kazoo",
    "stop_kazoo",
]

RETRY_MIN_S = 0.05
RETRY_MAX_S = 1.0
"""Pause between resends after a connection loss: doubling from the first to the second."""

RECONNECT_MAX_DELAY_S = 1.0
"""Cap on kazoo's reconnect backoff: a session must find a restarted server well within
its timeout, or it expires for nothing."""

SessionCallback = Callable[[], Awaitable[object] | None]
"""Called on the event loop thread; a coroutine function's coroutine is run as a task."""

WatchCallback = Callable[[], object]
"""Called with no arguments on the event loop thread; an awaitable it returns is run as a
task. The caller re-reads ZooKeeper: the call only says "something may have changed"."""


class ZkError(MinibrokerError):
    """Root of the ZooKeeper clients' errors."""


class ZkConnectionError(ZkError):
    """ZooKeeper could not be reached in time, or the client is closed."""


class ZkSessionExpiredError(ZkError):
    """The session expired while the operation was pending; it may or may not have been
    applied. Wait for the new session (on_session_established) before retrying."""


class WatchKind(enum.Enum):
    """What a :class:`ZkWatch` reports."""

    CHILDREN = "children"
    """A child was created or deleted (the watched znode need not exist yet)."""
    DATA = "data"
    """The znode was created, changed or deleted."""


class ZkWatch:
    """A standing watch set by a client's ``watch_*`` methods (``ZooKeeperClient._watch``).

    Its callback runs on the event loop thread at least once after every change (see
    :class:`WatchKind`) and once after every reconnect. A ZooKeeper watch fires once, so
    on each event a new registration is sent first, and the callback runs only once
    ZooKeeper has acknowledged it. So when the callback runs the watch is set again: a
    change made later fires it again, and one made before is seen by the callback's
    re-read. Registrations that kazoo dropped with a connection are superseded by a new
    generation on the next CONNECTED; late events of older generations are ignored.
    :meth:`cancel` stops it (Kafka unregisters its handlers on resignation).
    """

    def __init__(
        self,
        owner: ZooKeeperClient,
        name: str,
        kind: WatchKind,
        path: str,
        callback: WatchCallback,
    ) -> None:
        self._owner = owner
        self.name = name
        """Short label for logs, e.g. ``brokers``."""
        self.kind = kind
        self.path = path
        self._callback = callback
        self._generation = 0
        self._cancelled = False
        self._parent_missing = False
        """A children watch on a missing znode watches for its creation instead."""
        self._report: str | None = None
        """Why the callback is due once the pending registration is acknowledged."""
        self._armed = asyncio.Event()
        self._arm_error: BaseException | None = None

    def __repr__(self) -> str:
        state = "cancelled" if self._cancelled else "active"
        return f"ZkWatch({self.name}, {self.kind.value} {self.path}, {state})"

    @property
    def active(self) -> bool:
        """False once cancelled or the client closed."""
        return not self._cancelled and not self._owner.closed

    def cancel(self) -> None:
        """Stop calling the callback (a registration already sent fires into nothing)."""
        self._cancelled = True
        self._owner._watches.discard(self)
        self._armed.set()

    async def _wait_armed(self) -> None:
        await self._armed.wait()
        if self._arm_error is not None:
            raise self._arm_error
        if self._owner.closed:
            raise ZkConnectionError(f"watch {self.name}: the ZooKeeper client is closed")

    def _arm(self, report: str | None = None) -> None:
        """Send a new generation of the ZooKeeper watch (on the loop thread); once it is
        acknowledged, call the callback if a ``report`` is due."""
        owner = self._owner
        client = owner._client
        if self._cancelled or owner.closed or client is None:
            return
        if report is not None:
            self._report = report
        loop = owner._require_loop()
        self._generation += 1
        generation = self._generation
        watcher = on_loop(loop, functools.partial(self._on_event, generation))
        if self.kind is WatchKind.CHILDREN and not self._parent_missing:
            result = client.get_children_async(self.path, watch=watcher)
        else:
            # exists() sets a watch whether or not the znode exists: created, changed, deleted.
            result = client.exists_async(self.path, watch=watcher)
        bridge(loop, result).add_done_callback(functools.partial(self._on_armed, generation))

    def _on_armed(self, generation: int, future: asyncio.Future[Any]) -> None:
        if future.cancelled() or self._cancelled or generation != self._generation:
            return
        error = future.exception()
        if error is None:
            if self._parent_missing and future.result() is not None:
                # Created between our get_children and exists: watch its children now.
                self._parent_missing = False
                self._arm("created")
                return
            self._armed.set()
            self._report_due()
        elif isinstance(error, NoNodeError) and self.kind is WatchKind.CHILDREN:
            self._parent_missing = True
            self._arm()
        elif isinstance(error, ConnectionLoss):
            # kazoo dropped the registration with the connection; the next CONNECTED re-arms
            # it and reports (any report due now is covered by that one).
            self._owner._log(logging.DEBUG, "watch_arm_interrupted", watch=self.name)
        elif isinstance(error, SessionExpiredError):  # ConnectionClosedError too
            # Armed in the next session (or never, if closed): waiting longer helps nobody.
            self._armed.set()
        else:
            self._owner._log(logging.ERROR, "watch_arm_failed", watch=self.name, error=repr(error))
            self._arm_error = error
            self._armed.set()
            self._report_due()  # the caller's re-read will meet the error itself

    def _report_due(self) -> None:
        report, self._report = self._report, None
        if report is not None:
            self._owner._deliver(self, report)

    def _on_event(self, generation: int, event: Any) -> None:
        """A ZooKeeper watch event, on the loop thread."""
        if self._cancelled or generation != self._generation or self._owner.closed:
            return
        if event.type == EventType.NONE:
            return  # kazoo dropped the watch with the connection: CONNECTED re-arms it
        self._parent_missing = False
        self._arm(str(event.type).lower())

    def _reconnected(self) -> None:
        self._parent_missing = False
        self._arm("reconnected")


class ZkState(enum.StrEnum):
    """The connection states kazoo reports (``KazooState``)."""

    CONNECTED = "CONNECTED"
    """Connected, in a session (the same one as before, or a new one after LOST)."""
    SUSPENDED = "SUSPENDED"
    """Connection lost; the session and its ephemerals may still be alive."""
    LOST = "LOST"
    """The session expired (or was closed): its ephemerals are gone."""


class ZkNoChrootError(ZkConnectionError):
    """The connect string names a chroot that does not exist, and the client was told not
    to create it (a tool looking for a cluster there must not make an empty one)."""


def split_zookeeper_connect(connect: str) -> tuple[str, str | None]:
    """``"h1:2181,h2:2181/kafka"`` -> ``("h1:2181,h2:2181", "/kafka")``; no chroot -> None.

    Raises ValueError for an empty host list, an empty host, a non-numeric port, or a
    chroot ending in ``/`` or holding an empty segment.
    """
    text = connect.strip()
    hosts, slash, chroot = text.partition("/")
    if not hosts:
        raise ValueError(f"invalid value for zookeeper.connect: {connect!r} names no host")
    for entry in hosts.split(","):
        address = entry.strip()
        host, port = address, ""
        if address.startswith("["):  # [ipv6]:port
            host, _, rest = address[1:].partition("]")
            port = rest.removeprefix(":")
        elif ":" in address:
            host, _, port = address.rpartition(":")
        if not host or (port and not (port.isascii() and port.isdigit())):
            raise ValueError(
                f"invalid value for zookeeper.connect: {connect!r} has a bad host {entry!r} "
                "(expected host:port)"
            )
    if not slash or chroot == "":
        return hosts, None
    chroot = "/" + chroot
    if chroot.endswith("/") or "//" in chroot:
        raise ValueError(f"invalid value for zookeeper.connect: bad chroot path {chroot!r}")
    return hosts, chroot


class ZkSettings(Protocol):
    """The ``zookeeper.*`` settings of a broker config (``proto.config.broker_config``),
    as a session needs them; a protocol so that ZooKeeper sits below the config modules."""

    @property
    def zookeeper_connect(self) -> str: ...
    @property
    def broker_id(self) -> int: ...
    @property
    def zookeeper_session_timeout_ms(self) -> int: ...
    @property
    def zookeeper_connection_timeout_ms(self) -> int | None: ...
    @property
    def zookeeper_jute_maxbuffer(self) -> int: ...
    def zookeeper_credentials(self) -> ZkCredentials | None: ...


class ZooKeeperClient:
    """One ZooKeeper session used from an asyncio event loop: what every ZooKeeper user of
    the project (the broker's registration, the controller, the admin client, a consumer
    group member) shares, as Kafka's ``ZooKeeperClient`` is shared by its broker and
    controller. Subclasses only add their operations (and a few hooks, below).

    - The session: :meth:`start` connects (creating a missing chroot, unless told not to),
      :meth:`close` ends it; kazoo's state changes reach :meth:`_on_state` on the loop
      thread, the one place that tells a reconnect from a new session, re-arms the standing
      watches and runs :meth:`on_session_lost`, :meth:`on_session_established` and
      :meth:`add_state_listener` callbacks.
    - Requests: :meth:`_pipeline` is the one retry loop (resend what a connection loss
      interrupted until the session expires or the client closes); a single request is a
      one-element pipeline (:meth:`_call`, :meth:`request`).
    - Standing watches: :meth:`_watch` (see :class:`ZkWatch`).
    - The typed znodes several users share: ``read_partition_state(s)``,
      ``read_registered_broker(s)``, ``read_consumer_offsets``, ``commit_consumer_offsets``
      and the conditional partition state update (rules: :mod:`proto.zk.znode_reads`).

    Hooks for subclasses, all on the loop thread: :meth:`_started` (after the first
    session), :meth:`_closing_now` (when :meth:`close` begins), :meth:`_session_ended` (a
    session expired; returns extra fields for its log line) and :meth:`_answered` (a
    request sent at loop time ``sent`` in the current session was answered).

    All coroutines must be awaited on the loop that ran :meth:`start`.
    """

    _log_name: ClassVar[str] = "zk"
    """The first word of this client's log lines."""

    def __init__(
        self,
        connect: str,
        *,
        broker_id: int,
        session_timeout_ms: int = 6000,
        connection_timeout_ms: int | None = None,
        create_chroot: bool = True,
        credentials: ZkCredentials | None = None,
        jute_maxbuffer: int = JUTE_MAXBUFFER,
    ) -> None:
        """``credentials``: the digest to authenticate the session with and whether to
        create znodes with the secure ACL (``zookeeper.set.acl``; see :class:`ZkCredentials`).
        ``jute_maxbuffer``: a longer write fails with ZnodeTooLargeError before it is sent
        (``zookeeper.jute.maxbuffer``; :mod:`proto.zk.znode_limits`).

        ``connect`` is ``host:port[,host:port...][/chroot]`` (``zookeeper.connect``); a
        chroot that does not exist yet is created on start, as Kafka does, unless
        ``create_chroot`` is False (then :meth:`start` raises ZkNoChrootError). ``broker_id``
        labels the log lines (-1 for a client). Raises ValueError for a malformed connect
        string."""
        self._hosts, self._chroot = split_zookeeper_connect(connect)
        self._connect = connect.strip()
        self._broker_id = broker_id
        self._session_timeout_ms = session_timeout_ms
        self._connection_timeout_ms = (
            session_timeout_ms if connection_timeout_ms is None else connection_timeout_ms
        )
        self._create_chroot = create_chroot
        self._credentials = credentials
        self._jute_maxbuffer = jute_maxbuffer
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Any = None
        self._closing = False
        self._session_id: int | None = None
        """The current session (kept while SUSPENDED, cleared on LOST); loop thread only."""
        self._last_session_id: int | None = None
        """The latest session ever established, to tell a new session from a reconnect."""
        self._tasks: set[asyncio.Future[Any]] = set()
        self._watches: set[ZkWatch] = set()
        """The standing watches (see :meth:`_watch`); loop thread only."""
        self._lost_callbacks: list[SessionCallback] = []
        self._established_callbacks: list[SessionCallback] = []
        self._state_listeners: list[Callable[[ZkState], Awaitable[object] | None]] = []

    @classmethod
    def from_config(cls, config: ZkSettings) -> Self:
        """A client with a broker config's ``zookeeper.*`` settings and broker id."""
        return cls(
            config.zookeeper_connect,
            broker_id=config.broker_id,
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            connection_timeout_ms=config.zookeeper_connection_timeout_ms,
            credentials=config.zookeeper_credentials(),
            jute_maxbuffer=config.zookeeper_jute_maxbuffer,
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self._connect!r}, broker={self._broker_id}, "
            f"session={self._session_hex()})"
        )

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect and open a session, waiting up to ``zookeeper.connection.timeout.ms``.

        Creates the chroot first if it is missing (see ``create_chroot``). Raises
        ZkConnectionError on timeout. Cancelling it leaves the client unstarted (a session
        opened meanwhile is closed).
        """
        if self._client is not None:
            raise RuntimeError(f"{type(self).__name__}.start() called twice")
        self._loop = asyncio.get_running_loop()
        client, created = await connect_session(
            self._connect,
            hosts=self._hosts,
            chroot=self._chroot,
            session_timeout_ms=self._session_timeout_ms,
            connection_timeout_ms=self._connection_timeout_ms,
            listener=self._kazoo_listener,
            create_chroot=self._create_chroot,
            credentials=self._credentials,
            jute_maxbuffer=self._jute_maxbuffer,
        )
        self._client = client
        if created:
            self._log(logging.INFO, "chroot_created", path=self._chroot)
        client_id = client.client_id
        if client_id is not None and self._session_id is None:
            self._session_id = self._last_session_id = int(client_id[0])
        self._started()
        self._log(logging.INFO, "connected", connect=self._connect, session=self._session_hex())

    async def close(self) -> None:
        """Close the session (ZooKeeper deletes its ephemerals at once) and stop kazoo.

        No session callbacks and no watches run for this closing. Idempotent; cancelling it
        does not stop the closing.
        """
        if self._client is None or self._closing:
            return
        self._closing = True
        self._closing_now()
        self._cancel_watches()
        await asyncio.shield(self._require_loop().run_in_executor(None, stop_kazoo, self._client))
        for task in list(self._tasks):
            task.cancel()
        self._log(logging.INFO, "closed", session=self._session_hex())
        self._session_id = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def connected(self) -> bool:
        """True while connected to a ZooKeeper server (False while SUSPENDED or closed)."""
        return self._client is not None and not self._closing and bool(self._client.connected)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closing

    @property
    def hosts(self) -> str:
        """The connect string's ``host:port[,host:port...]``, without the chroot."""
        return self._hosts

    @property
    def chroot(self) -> str | None:
        """The connect string's chroot (``/minibroker``), or None."""
        return self._chroot

    @property
    def session_id(self) -> int | None:
        """The current session's id (still set while SUSPENDED); None after LOST or close."""
        return self._session_id

    # -- hooks -----------------------------------------------------------------------------

    def _started(self) -> None:
        """The first session is open (loop thread)."""

    def _closing_now(self) -> None:
        """:meth:`close` has begun (loop thread); the session is still open."""

    def _session_ended(self) -> dict[str, object]:
        """A session expired (loop thread), before the lost callbacks run; returns extra
        fields for the ``session_lost`` log line."""
        return {}

    def _answered(self, sent: float, session: int | None) -> None:
        """A request sent at loop time ``sent`` in session ``session`` was answered."""

    # -- session callbacks -----------------------------------------------------------------

    def on_session_lost(self, callback: SessionCallback) -> None:
        """Call ``callback()`` when the session expires (LOST): our ephemerals are gone.

        Runs on the event loop thread, once per lost session, never for :meth:`close`.
        """
        self._lost_callbacks.append(callback)

    def on_session_established(self, callback: SessionCallback) -> None:
        """Call ``callback()`` when a new session replaces an expired one (ephemerals must be
        created again). Not called for the first session, nor for a reconnect that kept the
        session (SUSPENDED then CONNECTED)."""
        self._established_callbacks.append(callback)

    def add_state_listener(self, listener: Callable[[ZkState], Awaitable[object] | None]) -> None:
        """Call ``listener(state)`` on the event loop thread for every state change."""
        self._state_listeners.append(listener)

    def _kazoo_listener(
        self, client: Any, loop: asyncio.AbstractEventLoop
    ) -> Callable[[str], None]:
        forward = on_loop(loop, self._on_state)

        def listener(state: str) -> None:
            # On kazoo's connection thread: must not block. The session id is read here,
            # where kazoo has just set it, then everything is handed to the loop.
            client_id = client.client_id if state == ZkState.CONNECTED else None
            forward(ZkState(state), None if client_id is None else int(client_id[0]))

        return listener

    def _on_state(self, state: ZkState, session_id: int | None) -> None:
        """Runs on the loop thread, in the order kazoo reported the changes."""
        if self._closing:
            return
        if state is ZkState.SUSPENDED:
            self._log(logging.WARNING, "suspended", session=self._session_hex())
        elif state is ZkState.LOST:
            self._session_lost()
        elif session_id is not None:
            if session_id == self._session_id:
                self._log(logging.INFO, "reconnected", session=self._session_hex())
            else:
                if self._session_id is not None:  # a new session without LOST first
                    self._session_lost()
                previous, self._last_session_id = self._last_session_id, session_id
                self._session_id = session_id
                if previous is not None:
                    self._log(
                        logging.WARNING,
                        "new_session",
                        session=self._session_hex(),
                        previous=f"0x{previous:x}",
                    )
                    self._fire(self._established_callbacks)
            self._rearm_watches()
        self._fire(self._state_listeners, state)

    def _session_lost(self) -> None:
        lost, self._session_id = self._session_id, None
        if lost is None:
            return
        fields: dict[str, Any] = {"session": f"0x{lost:x}", **self._session_ended()}
        self._log(logging.ERROR, "session_lost", **fields)
        self._fire(self._lost_callbacks)

    def _fire(
        self, callbacks: Iterable[Callable[..., Awaitable[object] | object]], *args: Any
    ) -> None:
        """Call each callback; an awaitable one returns runs as a task, whose failure is
        logged (a callback's failure never reaches kazoo or the other callbacks)."""
        for callback in list(callbacks):
            try:
                result = callback(*args)
            except Exception:
                self._log(logging.ERROR, "callback_failed", callback=repr(callback), exc_info=True)
                continue
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                self._tasks.add(task)
                task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._log(logging.ERROR, "callback_failed", exc_info=task.exception())

    # -- requests --------------------------------------------------------------------------

    async def request(self, op: str, path: str, *args: Any, **kwargs: Any) -> Any:
        """kazoo's ``<op>_async(path, *args, **kwargs)`` (``get``, ``create``, ...) awaited,
        retried after a connection loss (see :meth:`_pipeline`); ZooKeeper's error answers
        (NoNodeError, NodeExistsError, BadVersionError, ...) are raised."""
        if op == "create" and "acl" not in kwargs and len(args) < 2:
            acl = self._acl_for(path)
            if acl is not None:
                kwargs["acl"] = acl
        return await self._call(
            op, path, lambda client: getattr(client, f"{op}_async")(path, *args, **kwargs)
        )

    async def multi(self, what: str, build: Callable[[Any], None]) -> list[Any]:
        """One atomic multi-op (kazoo's ``transaction()``): ``build(transaction)`` adds the
        ops (``check``, ``create``, ``set_data``, ``delete``; a create gets kazoo's default
        ACL, so none under ``/consumers``). Resent after a connection loss like any
        request, so one that was applied may come again: make its ops conditional.
        Returns each op's result; when one fails ZooKeeper applies none, and the failed
        op's error (RolledBackError for the others) is returned in its place, not raised."""

        def start(client: Any) -> Any:
            transaction = client.transaction()
            build(transaction)
            return transaction.commit_async()

        return list(await self._call("multi", what, start))

    def _acl_for(self, path: str) -> list[ACL] | None:
        """Kafka's ``ZkData.defaultAcls``: with ``zookeeper.set.acl`` every znode is the
        credentials' to change and the world's to read, except under ``/consumers``, which
        the consumers of ZooKeeper groups write without credentials, and the sensitive
        paths (``/config/users``: SCRAM keys), which only the credentials may read. A
        ``makepath`` create gives the missing parents the same ACL. None: kazoo's default
        (the secure ACL with credentials, else open)."""
        if self._credentials is None or not self._credentials.set_acl:
            return None
        if path == CONSUMERS_PATH or path.startswith(CONSUMERS_PATH + "/"):
            return list(OPEN_ACL_UNSAFE)
        if is_sensitive_path(path):
            return list(SENSITIVE_ACL)
        return None

    async def _call(self, op: str, path: str, start: Callable[[Any], Any]) -> Any:
        """``start(kazoo_client)`` (an ``*_async`` call) as a one-element pipeline; an error
        answer is raised."""
        [result] = await self._pipeline(f"{op} {path}", [start])
        if isinstance(result, BaseException):
            raise result
        return result

    async def _pipeline(self, what: str, requests: Sequence[Callable[[Any], Any]]) -> list[Any]:
        """Send every request (``request(kazoo_client)`` starts an ``*_async`` call) at once
        and return their results in order; ZooKeeper answers one session's requests in the
        order sent. A ZooKeeper error answer (NoNodeError, ...) is returned as the result,
        not raised. Requests lost to a connection loss are resent until the session
        expires (ZkSessionExpiredError) or the client is closed (ZkConnectionError); kazoo
        queues requests made while it reconnects, so a resend waits for the connection,
        and the pause between rounds only keeps a flapping connection from spinning."""
        loop = self._require_loop()
        results: list[Any] = [None] * len(requests)
        pending = list(range(len(requests)))
        delay = RETRY_MIN_S
        while pending:
            if self._closing:
                raise ZkConnectionError(f"{what}: the ZooKeeper client is closed")
            sent, session = loop.time(), self._session_id
            futures: list[asyncio.Future[Any]] = []
            try:
                for index in pending:
                    futures.append(bridge(loop, requests[index](self._client)))
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
            outcomes = await asyncio.gather(*futures, return_exceptions=True)
            lost: list[int] = []
            for index, outcome in zip(pending, outcomes, strict=True):
                if isinstance(outcome, ConnectionLoss):
                    lost.append(index)
                elif isinstance(outcome, ConnectionClosedError):  # a SessionExpiredError: first
                    raise ZkConnectionError(f"{what}: the ZooKeeper client is closed") from outcome
                elif isinstance(outcome, SessionExpiredError):
                    raise ZkSessionExpiredError(
                        f"{what}: the ZooKeeper session expired before it completed"
                    ) from outcome
                elif isinstance(outcome, BaseException) and not isinstance(outcome, KazooException):
                    raise outcome
                else:
                    results[index] = outcome
            if len(lost) < len(pending):
                # An answer proves the session alive after `sent`.
                self._answered(sent, session)
            pending = lost
            if pending:
                self._log(logging.DEBUG, "retry_after_connection_loss", op=what, count=len(lost))
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
        return results

    # -- standing watches ------------------------------------------------------------------

    async def _watch(
        self, name: str, kind: WatchKind, path: str, callback: WatchCallback
    ) -> ZkWatch:
        """Set a standing watch and return once ZooKeeper holds it, so a read made after
        this returns cannot miss a later change. Not called for the current state: read it.
        If the session expires meanwhile, it returns anyway (the watch is set, and fires,
        in the next session). Cancelling the coroutine cancels the watch."""
        self._require_loop()
        if self._closing:
            raise ZkConnectionError(f"watch {name}: the ZooKeeper client is closed")
        watch = ZkWatch(self, name, kind, path, callback)
        self._watches.add(watch)
        watch._arm()
        try:
            await watch._wait_armed()
        except BaseException:
            watch.cancel()
            raise
        self._log(logging.INFO, "watch_set", watch=name, path=path, kind=kind.value)
        return watch

    def _rearm_watches(self) -> None:
        """After a (re)connect: kazoo dropped every watch with the connection, so set them
        again, and report, since nobody reports what changed while we were away."""
        for watch in list(self._watches):
            watch._reconnected()

    def _cancel_watches(self) -> None:
        for watch in list(self._watches):
            watch.cancel()

    def _deliver(self, watch: ZkWatch, reason: str) -> None:
        """Run ``watch``'s callback (its registration is set again)."""
        self._log(logging.DEBUG, "watch_fired", watch=watch.name, path=watch.path, reason=reason)
        self._fire([watch._callback])

    # -- helpers ---------------------------------------------------------------------------

    def _logger(self) -> logging.Logger:
        """The logger of the subclass's module (``broker.zk_client``, ...)."""
        return logging.getLogger(type(self).__module__)

    def _log_context(self) -> dict[str, object]:
        """The fields every log line of this client starts with."""
        return {"broker": self._broker_id}

    def _log(
        self,
        level: int,
        event: str,
        *,
        exc_info: object = False,
        **fields: object,
    ) -> None:
        """One log line per event: ``<_log_name> event=<event> broker=<id> ... key=value``
        (see :mod:`proto.process.event_log`)."""
        log_event(
            self._logger(),
            level,
            self._log_name,
            event,
            exc_info=exc_info,
            **{**self._log_context(), **fields},
        )

    def _require_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None or self._client is None:
            raise ZkConnectionError(f"{type(self).__name__} is not started")
        return self._loop

    def _current_session_id(self) -> int | None:
        """kazoo's session id right now (the loop's view may lag a state change)."""
        client_id = self._client.client_id if self._client is not None else None
        return self._session_id if client_id is None else int(client_id[0])

    def _session_hex(self) -> str:
        return "none" if self._session_id is None else f"0x{self._session_id:x}"

    def _decode(self, path: str, decode: Callable[[bytes], T], data: bytes) -> T:
        return decode_znode(path, decode, data)


async def connect_session(
    connect: str,
    *,
    hosts: str,
    chroot: str | None,
    session_timeout_ms: int,
    connection_timeout_ms: int,
    listener: Callable[[KazooClient, asyncio.AbstractEventLoop], Callable[..., Any]],
    create_chroot: bool = True,
    credentials: ZkCredentials | None = None,
    jute_maxbuffer: int = JUTE_MAXBUFFER,
) -> tuple[KazooClient, bool]:
    """A connected kazoo client for ``connect`` (``hosts[/chroot]``), and whether the
    chroot had to be created first (kazoo cannot create its own root; Kafka creates a
    missing chroot too). ``listener(client, loop)`` builds the state listener added before
    connecting. Raises ZkConnectionError after ``connection_timeout_ms``; cancelling it
    leaves nothing connected."""
    loop = asyncio.get_running_loop()
    timeout_s = connection_timeout_ms / 1000
    unreachable = (
        f"could not connect to ZooKeeper at {connect} within "
        f"{connection_timeout_ms} ms (zookeeper.connection.timeout.ms)"
    )
    created = False
    if chroot is not None:
        created = await loop.run_in_executor(
            None,
            _ensure_chroot,
            hosts,
            chroot,
            session_timeout_ms,
            timeout_s,
            unreachable,
            create_chroot,
            credentials,
        )
    session_timeout_s = session_timeout_ms / 1000
    client = SizeCheckedKazooClient(
        hosts=connect,
        jute_maxbuffer=jute_maxbuffer,
        timeout=session_timeout_s,
        auth_data=None if credentials is None else credentials.auth_data,
        default_acl=SECURE_ACL if credentials is not None and credentials.set_acl else None,
        connection_retry=KazooRetry(
            max_tries=-1, max_delay=min(RECONNECT_MAX_DELAY_S, session_timeout_s / 3)
        ),
    )
    client.add_listener(listener(client, loop))
    connected = False
    try:
        connected = await loop.run_in_executor(None, start_kazoo, client, timeout_s)
    finally:
        if not connected:
            await asyncio.shield(loop.run_in_executor(None, stop_kazoo, client))
    if not connected:
        raise ZkConnectionError(unreachable)
    return client, created


def _ensure_chroot(
    hosts: str,
    chroot: str,
    session_timeout_ms: int,
    timeout_s: float,
    unreachable: str,
    create: bool,
    credentials: ZkCredentials | None = None,
) -> bool:
    """Blocking (executor): create the chroot with a client outside it (or, with
    ``create`` False, raise ZkNoChrootError if it is missing). With ``zookeeper.set.acl``
    the chroot gets the secure ACL, so nobody without the credentials creates anything in
    it."""
    root = KazooClient(
        hosts=hosts,
        timeout=session_timeout_ms / 1000,
        auth_data=None if credentials is None else credentials.auth_data,
    )
    try:
        if not start_kazoo(root, timeout_s):
            raise ZkConnectionError(unreachable)
        if root.exists(chroot) is not None:
            return False
        if not create:
            raise ZkNoChrootError(f"ZooKeeper at {hosts}: {chroot} does not exist")
        secure = credentials is not None and credentials.set_acl
        root.ensure_path(chroot, acl=SECURE_ACL if secure else None)
        return True
    finally:
        stop_kazoo(root)


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
