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
(``ControllerZkClient``) both build on these; neither adds threads of its own. Both also set
standing watches through :class:`ZkWatch` (re-registered after every fire and reconnect;
see :mod:`controller.controller_zk` for the promise they keep).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NoNodeError, SessionExpiredError
from kazoo.protocol.states import EventType
from kazoo.retry import KazooRetry

from broker.config import split_zookeeper_connect
from proto.zk_data import ZkDataError

if TYPE_CHECKING:
    from broker.config import BrokerConfig

T = TypeVar("T")

log = logging.getLogger(__name__)

__all__ = [
    "RECONNECT_MAX_DELAY_S",
    "KazooSessionClient",
    "WatchCallback",
    "WatchKind",
    "ZkConnectionError",
    "ZkError",
    "ZkSessionExpiredError",
    "ZkWatch",
    "bridge",
    "connect_session",
    "on_loop",
    "start_kazoo",
    "stop_kazoo",
]

RECONNECT_MAX_DELAY_S = 1.0
"""Cap on kazoo's reconnect backoff: a session must find a restarted server well within
its timeout, or it expires for nothing."""

WatchCallback = Callable[[], object]
"""Called with no arguments on the event loop thread; an awaitable it returns is run as a
task. The caller re-reads ZooKeeper: the call only says "something may have changed"."""


class ZkError(Exception):
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
    """A standing watch set by a client's ``watch_*`` methods (``KazooSessionClient._watch``).

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
        owner: KazooSessionClient,
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


class KazooSessionClient:
    """What the broker's and the controller's ZooKeeper clients share: the connect string
    and timeouts, the kazoo client and the loop it reports to, the session id, and the
    small helpers around them. Subclasses add their own requests and callbacks."""

    def __init__(
        self,
        connect: str,
        *,
        broker_id: int,
        session_timeout_ms: int = 6000,
        connection_timeout_ms: int | None = None,
    ) -> None:
        """``connect`` is ``host:port[,host:port...][/chroot]`` (``zookeeper.connect``); a
        chroot that does not exist yet is created on start, as Kafka does. ``broker_id``
        labels the log lines. Raises ValueError for a malformed connect string."""
        self._hosts, self._chroot = split_zookeeper_connect(connect)
        self._connect = connect.strip()
        self._broker_id = broker_id
        self._session_timeout_ms = session_timeout_ms
        self._connection_timeout_ms = (
            session_timeout_ms if connection_timeout_ms is None else connection_timeout_ms
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Any = None
        self._closing = False
        self._session_id: int | None = None
        """The current session (kept while SUSPENDED, cleared on LOST); loop thread only."""
        self._tasks: set[asyncio.Future[Any]] = set()
        self._watches: set[ZkWatch] = set()
        """The standing watches (see :meth:`_watch`); loop thread only."""

    @classmethod
    def from_config(cls, config: BrokerConfig) -> Self:
        """A client with the config's ``zookeeper.*`` settings and broker id."""
        return cls(
            config.zookeeper_connect,
            broker_id=config.broker_id,
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            connection_timeout_ms=config.zookeeper_connection_timeout_ms,
        )

    async def start(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

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
    def session_id(self) -> int | None:
        """The current session's id (still set while SUSPENDED); None after LOST or close."""
        return self._session_id

    async def _open_session(
        self, listener: Callable[[KazooClient, asyncio.AbstractEventLoop], Callable[..., Any]]
    ) -> bool:
        """Connect (see :func:`connect_session`) and adopt the client and the running loop;
        returns whether the chroot had to be created."""
        if self._client is not None:
            raise RuntimeError(f"{type(self).__name__}.start() called twice")
        self._loop = asyncio.get_running_loop()
        client, created = await connect_session(
            self._connect,
            hosts=self._hosts,
            chroot=self._chroot,
            session_timeout_ms=self._session_timeout_ms,
            connection_timeout_ms=self._connection_timeout_ms,
            listener=listener,
        )
        self._client = client
        return created

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
        """Run ``watch``'s callback (its registration is set again); an awaitable it returns
        runs as a task, whose failure is logged."""
        self._log(logging.DEBUG, "watch_fired", watch=watch.name, path=watch.path, reason=reason)
        try:
            result = watch._callback()
        except Exception:
            log.exception("zk watch_callback_failed broker=%s watch=%s", self._broker_id, watch)
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._watch_task_done, watch))

    def _watch_task_done(self, watch: ZkWatch, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "zk watch_callback_failed broker=%s watch=%s",
                self._broker_id,
                watch,
                exc_info=task.exception(),
            )

    def _log(self, level: int, event: str, **fields: object) -> None:
        """One log line per event, in the subclass's format."""
        raise NotImplementedError

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
        try:
            return decode(data)
        except ZkDataError as e:
            raise ZkDataError(f"znode {path}: {e}") from None


async def connect_session(
    connect: str,
    *,
    hosts: str,
    chroot: str | None,
    session_timeout_ms: int,
    connection_timeout_ms: int,
    listener: Callable[[KazooClient, asyncio.AbstractEventLoop], Callable[..., Any]],
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
            None, _ensure_chroot, hosts, chroot, session_timeout_ms, timeout_s, unreachable
        )
    session_timeout_s = session_timeout_ms / 1000
    client = KazooClient(
        hosts=connect,
        timeout=session_timeout_s,
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
    hosts: str, chroot: str, session_timeout_ms: int, timeout_s: float, unreachable: str
) -> bool:
    """Blocking (executor): create the chroot with a client outside it."""
    root = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000)
    try:
        if not start_kazoo(root, timeout_s):
            raise ZkConnectionError(unreachable)
        if root.exists(chroot) is not None:
            return False
        root.ensure_path(chroot)
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
