"""The ZooKeeper harness against a real ZooKeeper: start, serve, stop, port clash, and a
real session expiry driven by pausing the server (SIGSTOP) past the session timeout."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from deploy.zookeeper import (
    ZooKeeperConfig,
    ZooKeeperPortInUseError,
    ZooKeeperServer,
)
from tests.helpers import wait_for

pytestmark = pytest.mark.integration

ServerFactory = Callable[..., ZooKeeperServer]


@pytest.fixture
def make_server() -> Iterator[ServerFactory]:
    """Build ZooKeeperServers that this test owns; every one is stopped afterwards."""
    servers: list[ZooKeeperServer] = []

    def factory(**config: object) -> ZooKeeperServer:
        server = ZooKeeperServer(ZooKeeperConfig(**config))  # type: ignore[arg-type]
        servers.append(server)
        return server

    yield factory
    for server in servers:
        server.stop()


@pytest.fixture
def clients() -> Iterator[Callable[..., KazooClient]]:
    """Build kazoo clients that are stopped and closed after the test."""
    made: list[KazooClient] = []

    def factory(hosts: str, timeout: float = 10.0, **kwargs: object) -> KazooClient:
        client = KazooClient(hosts=hosts, timeout=timeout, **kwargs)
        made.append(client)
        return client

    yield factory
    for client in made:
        client.stop()
        client.close()


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.timeout(60)
def test_start_serves_ephemeral_znodes_and_stop_removes_process_and_data(
    make_server: ServerFactory,
    clients: Callable[..., KazooClient],
    capfd: pytest.CaptureFixture[str],
) -> None:
    server = make_server()
    server.start(timeout=30)
    pid = server.pid
    data_dir = server.data_dir
    assert pid is not None
    assert server.port > 0
    assert server.connect_string == f"127.0.0.1:{server.port}"
    assert server.startup_seconds is not None

    assert server.four_letter_word("ruok") == "imok"
    assert server.is_ok()
    assert "Mode: standalone" in server.four_letter_word("srvr")

    client = clients(server.connect_string)
    client.start(timeout=10)
    client.create("/ephemeral", b"hello", ephemeral=True)
    value, stat = client.get("/ephemeral")
    assert value == b"hello"
    assert stat.ephemeralOwner == client.client_id[0]

    # The JVM's output goes to its log file, never to the test's stdout/stderr.
    assert server.log_path.is_file()
    assert "org.apache.zookeeper" in server.log_path.read_text()
    captured = capfd.readouterr()
    assert "org.apache.zookeeper" not in captured.out + captured.err

    server.stop()
    assert server.pid is None
    assert not server.is_running
    assert not _process_exists(pid)
    assert not data_dir.exists()
    assert not server.is_ok()
    server.stop()  # idempotent


@pytest.mark.timeout(30)
def test_start_on_a_port_bound_by_another_socket_fails_fast(make_server: ServerFactory) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        server = make_server(port=port)
        started = time.monotonic()
        with pytest.raises(ZooKeeperPortInUseError, match=f"127.0.0.1:{port} is already in use"):
            server.start(timeout=30)
        assert time.monotonic() - started < 2.0
        assert server.pid is None


@pytest.mark.timeout(30)
def test_second_zookeeper_on_the_port_of_a_running_one_fails_fast(
    zookeeper: ZooKeeperServer, make_server: ServerFactory
) -> None:
    second = make_server(port=zookeeper.port)
    started = time.monotonic()
    with pytest.raises(ZooKeeperPortInUseError):
        second.start(timeout=30)
    assert time.monotonic() - started < 2.0
    assert zookeeper.is_ok()


@pytest.mark.timeout(60)
def test_server_paused_past_session_timeout_expires_the_session_after_resume(
    make_server: ServerFactory,
    clients: Callable[..., KazooClient],
    tmp_path: Path,
) -> None:
    session_timeout = 1.0
    server = make_server(tick_time_ms=200, data_dir=tmp_path / "zk")
    server.start(timeout=30)

    owner = clients(server.connect_string, timeout=session_timeout)
    owner_states: list[KazooState] = []
    owner.add_listener(owner_states.append)  # list.append is atomic; kazoo calls from its thread
    owner.start(timeout=10)
    session_id, password = owner.client_id
    owner.create("/owned-by-paused-session", b"x", ephemeral=True)

    server.pause()
    paused_at = time.monotonic()
    wait_for(lambda: KazooState.SUSPENDED in owner_states, 10, message="client never saw SUSPENDED")
    # The owner must stop knocking while the server is stopped. A reconnect attempt that
    # is queued in the kernel's accept backlog at SIGCONT races the server's expiry sweep:
    # if it is processed first, reopenSession -> SessionTracker.touchSession revives the
    # session, and a client that keeps reconnecting keeps it (seen once in ~20 runs on 2
    # busy cores). stop() cannot reach the paused server, so it closes nothing there; an
    # attempt already queued can at most extend the session by one timeout.
    owner.stop()
    # The pause itself is the fault under test: the server must stay stopped until the
    # session's deadline (last contact + timeout, rounded up to a tick) has passed.
    wait_for(lambda: time.monotonic() - paused_at > 2 * session_timeout + 0.2, 10)
    server.resume()
    wait_for(server.is_serving, 10, message="server did not serve again after SIGCONT")

    observer = clients(server.connect_string)
    observer.start(timeout=10)
    wait_for(
        lambda: observer.exists("/owned-by-paused-session") is None,
        10,
        message="the ephemeral of the expired session is still there",
    )

    # The server says why: its session tracker expired the session (not a client close).
    wait_for(
        lambda: f"Expiring session 0x{session_id:x}," in server.log_path.read_text(),
        10,
        message="no 'Expiring session' line in the ZooKeeper log",
    )
    # The owner coming back with its session id and password cannot resume the session:
    # the server refuses it as expired and kazoo opens a new one, without the ephemeral.
    # (Kazoo starts in state LOST, so this client's listener sees no LOST transition.)
    returning = clients(
        server.connect_string, timeout=session_timeout, client_id=(session_id, password)
    )
    returning.start(timeout=10)
    assert returning.client_id[0] != session_id
    assert returning.exists("/owned-by-paused-session") is None


@pytest.mark.timeout(60)
def test_killed_server_restarts_on_the_same_port_with_its_data(
    make_server: ServerFactory, clients: Callable[..., KazooClient]
) -> None:
    server = make_server()
    server.start(timeout=30)
    port = server.port
    client = clients(server.connect_string)
    client.start(timeout=10)
    client.create("/persistent", b"kept")
    client.stop()

    old_pid = server.pid
    assert old_pid is not None
    server.kill()
    assert server.pid is None
    assert not _process_exists(old_pid)

    server.start(timeout=30)
    assert server.port == port
    again = clients(server.connect_string)
    again.start(timeout=10)
    assert again.get("/persistent")[0] == b"kept"


def test_zk_client_fixture_is_chrooted(zk_client: KazooClient, zookeeper: ZooKeeperServer) -> None:
    zk_client.create("/only-here", b"1")
    assert zk_client.get_children("/") == ["only-here"]
    assert zk_client.chroot.startswith("/t-")
    assert zookeeper.is_ok()
