"""Small test helpers shared by unit and integration tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

import grpc
import grpc.aio
from kazoo.client import KazooClient

from deploy.ports import free_port_block
from deploy.zookeeper import ZooKeeperServer
from proto.zk.sync_client import kazoo_client

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T],
    timeout: float,
    interval: float = 0.05,
    message: str | Callable[[], str] = "condition not met",
) -> T:
    """Poll ``predicate`` until it returns a truthy value, and return that value.

    Tests wait on conditions with a deadline, never with fixed sleeps: a fixed sleep is
    either too short on a busy CI machine (flaky) or too long everywhere else (slow).
    The predicate is always tried once more after the deadline, so a condition that
    became true while we slept is not reported as a timeout. Exceptions from the
    predicate propagate. ``message`` may be a callable, to describe the state at the
    moment of failure (e.g. the last value seen).

    :raises AssertionError: with ``message`` and the elapsed time when time runs out.
    """
    start = time.monotonic()
    deadline = start + timeout
    while True:
        result = predicate()
        if result:
            return result
        now = time.monotonic()
        if now >= deadline:
            text = message() if callable(message) else message
            raise AssertionError(f"{text} (waited {now - start:.2f}s, timeout {timeout:.2f}s)")
        time.sleep(min(interval, max(0.0, deadline - now)))


@contextmanager
def chrooted_client(zookeeper: ZooKeeperServer) -> Iterator[KazooClient]:
    """A connected kazoo client chrooted to a fresh ``/t-<uuid>``, so tests sharing the
    session's ZooKeeper cannot see each other's znodes. The chroot is removed after."""
    chroot = f"/t-{uuid.uuid4().hex}"
    with kazoo_client(zookeeper.connect_string) as root:
        root.ensure_path(chroot)
        try:
            with kazoo_client(zookeeper.connect_string + chroot) as client:
                yield client
        finally:
            root.delete(chroot, recursive=True)


def close_session_from_another_client(hosts: str, client_id: tuple[int, bytes]) -> None:
    """Expire a session for real: attach a second client to it (same id and password) and
    close it there. The server ends the session and deletes its ephemerals; the owner learns
    it is gone when it reconnects. kazoo.testing's expire_session()
    only fakes the event on the client side. The owner may win its session back before the
    close lands (it reconnects by itself), so callers retry until they see LOST."""
    thief = KazooClient(hosts=hosts, client_id=client_id, timeout=10.0)
    thief.start(timeout=10)
    try:
        thief.stop()  # sends closeSession for the session it holds
    finally:
        thief.close()


def minibroker(
    *args: str,
    input_text: str | None = None,
    timeout: float = 120,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the ``minibroker`` CLI as a user does (a subprocess of this interpreter)."""
    return subprocess.run(
        [sys.executable, "-m", "client.cli", *args],
        capture_output=True,
        text=True,
        input=input_text,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


def cluster_up_on_free_ports(cluster_dir: os.PathLike[str], *extra: str) -> tuple[int, str]:
    """``minibroker cluster up`` in ``cluster_dir`` on seven free ports from a base: gRPC
    base..base+2, ZooKeeper base+3, Kafka base+4..base+6. It must succeed; returns the base
    and what it printed."""
    base = free_port_run(7)
    up = minibroker(
        "cluster", "up", "--data-dir", str(cluster_dir), "--base-port", str(base),
        "--zookeeper-port", str(base + 3), "--kafka-base-port", str(base + 4), *extra,
    )  # fmt: skip
    assert up.returncode == 0, up.stderr
    return base, up.stdout


def free_port_run(count: int) -> int:
    """A base port such that ``count`` consecutive ports are free right now."""
    return free_port_block(count)


def assert_keyed_lines_read_in_order(sent: list[str], got: list[str]) -> None:
    """``key:value`` lines read back (by kcat): all of them, once, and in the order sent
    within each key (a key always lands on one partition, which keeps the order)."""
    assert sorted(got) == sorted(sent)
    order = {line: i for i, line in enumerate(sent)}
    for key in {line.split(":")[0] for line in sent}:
        seen = [order[line] for line in got if line.split(":")[0] == key]
        assert seen == sorted(seen), f"{key} read out of order"


@asynccontextmanager
async def broker_methods_served(
    methods: Mapping[str, grpc.RpcMethodHandler[Any, Any]],
) -> AsyncIterator[grpc.aio.Channel]:
    """A real grpc.aio server on a free loopback port serving ``methods`` of the Broker
    service (a test's stand-in broker), and a channel to it; both closed afterwards."""
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("minibroker.Broker", dict(methods)),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel
    finally:
        await server.stop(None)


def recv_exactly(sock: socket.socket, count: int) -> bytes:
    """``count`` bytes from ``sock``, failing the test if the peer closes first."""
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return data
