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
(``ControllerZkClient``) both build on these; neither adds threads of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self, TypeVar

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

from broker.config import split_zookeeper_connect
from broker.zk_data import ZkDataError

if TYPE_CHECKING:
    from broker.config import BrokerConfig

T = TypeVar("T")

__all__ = [
    "RECONNECT_MAX_DELAY_S",
    "KazooSessionClient",
    "ZkConnectionError",
    "ZkError",
    "ZkSessionExpiredError",
    "bridge",
    "connect_session",
    "on_loop",
    "start_kazoo",
    "stop_kazoo",
]

RECONNECT_MAX_DELAY_S = 1.0
"""Cap on kazoo's reconnect backoff: a session must find a restarted server well within
its timeout, or it expires for nothing."""


class ZkError(Exception):
    """Root of the ZooKeeper clients' errors."""


class ZkConnectionError(ZkError):
    """ZooKeeper could not be reached in time, or the client is closed."""


class ZkSessionExpiredError(ZkError):
    """The session expired while the operation was pending; it may or may not have been
    applied. Wait for the new session (on_session_established) before retrying."""


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
