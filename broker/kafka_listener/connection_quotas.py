"""The Kafka listener's connection limits and its acceptor (Kafka's ``ConnectionQuotas`` and
``Acceptor`` in ``SocketServer``).

- ``max.connections``: at the limit the acceptor stops accepting until a connection
  closes; the next clients wait in the kernel's listen backlog (then time out or are
  refused by the kernel), holding no descriptor of the broker's. Kafka's acceptor waits
  the same way (``waitForConnectionSlot``).
- ``max.connections.per.ip`` and ``max.connections.per.ip.overrides``: a connection from an
  address that already has its maximum is accepted, counted, and closed at once, with a
  log line (Kafka's ``TooManyConnectionsException``, which its acceptor catches to close
  the socket). Override hosts are resolved once, when the quotas are made, as Kafka does.

A connection counts from its accept until its socket is closed. An accept that fails
because the process is out of descriptors (EMFILE, ENFILE) or memory is retried after a
second, with one log line per failure; on EMFILE the acceptor first gives up a descriptor
it keeps in reserve, accepts and closes the connections waiting in the backlog and takes
the reserve back (libuv's trick, which uvloop's own server used), so that clients are
refused at once instead of waiting out their connect timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import ssl as ssl_module
from collections.abc import Awaitable, Callable, Mapping

from proto.errors import MinibrokerError

__all__ = ["Acceptor", "ConnectionQuotas", "TooManyConnectionsError"]

logger = logging.getLogger(__name__)

ACCEPT_RETRY_S = 1.0
"""The pause after an accept that failed for want of a descriptor or memory."""
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_LISTEN_BACKLOG = 128

ConnectionHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class TooManyConnectionsError(MinibrokerError):
    """An address already has its ``max.connections.per.ip``."""

    def __init__(self, address: str, limit: int) -> None:
        super().__init__(f"Too many connections from {address} (maximum = {limit})")
        self.address = address
        self.limit = limit


class ConnectionQuotas:
    """Connections counted per address and in all, against the limits."""

    def __init__(
        self,
        max_connections: int,
        max_connections_per_ip: int,
        overrides: Mapping[str, int] | None = None,
    ) -> None:
        self.max_connections = max_connections
        """``max.connections``."""
        self.max_connections_per_ip = max_connections_per_ip
        """``max.connections.per.ip``."""
        self.overrides = {_resolve(host): count for host, count in (overrides or {}).items()}
        """``max.connections.per.ip.overrides``, by IP address."""
        self.total = 0
        self._counts: dict[str, int] = {}
        self._freed = asyncio.Event()

    def count(self, address: str) -> int:
        """Connections from ``address``."""
        return self._counts.get(address, 0)

    def limit(self, address: str) -> int:
        """The most connections ``address`` may have."""
        return self.overrides.get(address, self.max_connections_per_ip)

    def slot_available(self) -> bool:
        return self.total < self.max_connections

    async def wait_for_slot(self) -> None:
        """Return when the broker has room for one more connection."""
        while not self.slot_available():
            self._freed.clear()
            await self._freed.wait()

    def inc(self, address: str) -> None:
        """Count a connection accepted from ``address``. Raises TooManyConnectionsError
        when that address had its maximum already; the connection is counted all the
        same, and the caller closes it and calls :meth:`dec` (as Kafka's acceptor)."""
        count = self._counts.get(address, 0)
        self._counts[address] = count + 1
        self.total += 1
        limit = self.limit(address)
        if count >= limit:
            raise TooManyConnectionsError(address, limit)

    def dec(self, address: str) -> None:
        """A connection from ``address`` is closed."""
        count = self._counts.get(address, 0)
        if count <= 0:
            raise ValueError(f"no connection from {address} to count down")
        if count == 1:
            del self._counts[address]
        else:
            self._counts[address] = count - 1
        self.total -= 1
        self._freed.set()


class Acceptor:
    """Accepts connections on one listening socket, within ``quotas``, and runs
    ``handler(reader, writer)`` for each; the connection is counted until the handler
    returns (it closes the writer)."""

    def __init__(
        self,
        broker_id: int,
        quotas: ConnectionQuotas,
        handler: ConnectionHandler,
        *,
        ssl: ssl_module.SSLContext | None = None,
        ssl_handshake_timeout_s: float | None = None,
        stream_limit: int = 2**16,
    ) -> None:
        self.broker_id = broker_id
        self.quotas = quotas
        self._handler = handler
        self._ssl = ssl
        self._ssl_handshake_timeout_s = ssl_handshake_timeout_s
        self._stream_limit = stream_limit
        self._socket: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.refused = 0
        """Connections closed at once for ``max.connections.per.ip``."""
        self._reserve: int | None = None
        """A descriptor kept to give up when the process runs out (see the module)."""

    async def start(self, host: str, port: int) -> int:
        """Bind and accept; returns the bound port. Raises OSError when it cannot bind."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(_LISTEN_BACKLOG)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._socket = sock
        self._reserve = _open_reserve()
        self._accepting = asyncio.create_task(self._accept_loop(sock), name="kafka-acceptor")
        bound: int = sock.getsockname()[1]
        return bound

    async def stop(self) -> None:
        """Stop accepting and cancel every connection's handler."""
        if self._accepting is not None:
            self._accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
        if self._socket is not None:
            self._socket.close()
        if self._reserve is not None:
            os.close(self._reserve)
            self._reserve = None
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections))

    async def _accept_loop(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self.quotas.wait_for_slot()
            try:
                conn, peer = await loop.sock_accept(sock)
            except OSError as err:
                if err.errno not in _OUT_OF_RESOURCES:
                    raise
                dropped = self._drop_backlog(sock) if err.errno == errno.EMFILE else 0
                logger.warning(
                    "event=kafka_accept_failed broker=%d error=%s retry_ms=%d dropped=%d",
                    self.broker_id,
                    errno.errorcode.get(err.errno or 0, err.errno),
                    ACCEPT_RETRY_S * 1000,
                    dropped,
                )
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            address = str(peer[0])
            try:
                self.quotas.inc(address)
            except TooManyConnectionsError as err:
                self.quotas.dec(address)
                conn.close()
                self.refused += 1
                logger.info(
                    "event=kafka_connection_refused broker=%d peer=%s reason=%r",
                    self.broker_id,
                    address,
                    str(err),
                )
                continue
            task = loop.create_task(self._serve(conn, address))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    def _drop_backlog(self, sock: socket.socket) -> int:
        """Out of descriptors: close the connections waiting to be accepted, with the one
        descriptor of the reserve; how many."""
        if self._reserve is None:
            return 0
        os.close(self._reserve)
        self._reserve = None
        dropped = 0
        try:
            while True:
                conn, _ = sock.accept()
                conn.close()
                dropped += 1
        except OSError:
            pass  # the backlog is empty (EAGAIN), or the descriptor went elsewhere
        finally:
            with contextlib.suppress(OSError):
                self._reserve = _open_reserve()
        return dropped

    async def _serve(self, conn: socket.socket, address: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            conn.setblocking(False)
            reader = asyncio.StreamReader(limit=self._stream_limit)
            protocol = asyncio.StreamReaderProtocol(reader)
            try:
                transport, _ = await loop.connect_accepted_socket(
                    lambda: protocol,
                    conn,
                    ssl=self._ssl,
                    ssl_handshake_timeout=self._ssl_handshake_timeout_s
                    if self._ssl is not None
                    else None,
                )
            except (OSError, ssl_module.SSLError, TimeoutError) as err:
                conn.close()
                logger.info(
                    "event=kafka_connection_setup_failed broker=%d peer=%s error=%r",
                    self.broker_id,
                    address,
                    str(err),
                )
                return
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            await self._handler(reader, writer)
        finally:
            self.quotas.dec(address)


def _open_reserve() -> int:
    return os.open(os.devnull, os.O_RDONLY)


def _resolve(host: str) -> str:
    """An override's host as the address its connections come from (a name resolved now,
    as Kafka's ``InetAddress.getByName``; unresolvable, kept as written)."""
    try:
        return str(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0])
    except (OSError, UnicodeError):
        return host
