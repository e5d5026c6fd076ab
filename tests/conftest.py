"""Shared fixtures: one real ZooKeeper per test session, a chrooted kazoo client per test.

The ZooKeeper is the project's own harness (deploy/zookeeper.py) running Debian's
package, so tests see real sessions, ephemerals and watches. It starts lazily: unit
tests that use no ZooKeeper fixture never start a JVM.

Hypothesis runs under the ``bounded`` profile: a fixed seed (the same examples on every run,
so a red CI run is reproducible) and a bounded example count. ``HYPOTHESIS_PROFILE=fuzz``
(``make fuzz``) draws fresh random examples, many more of them, for a long fuzzing run.
"""

from __future__ import annotations

import os
import random
import socket
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kazoo.protocol.connection
import kazoo.retry
import pytest
from hypothesis import settings
from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperConfig, ZooKeeperServer
from tests.helpers import chrooted_client, minibroker

settings.register_profile("bounded", derandomize=True, deadline=None, print_blob=True)
settings.register_profile(
    "fuzz", max_examples=int(os.environ.get("FUZZ_EXAMPLES", "5000")), deadline=None
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "bounded"))

# kazoo's connection and retry loops draw their jitter from the global `random`, in kazoo's
# own thread. Hypothesis checks that the global random state does not change while a
# strategy draws, so a ZooKeeper ping of a test's client landing mid-draw failed a fuzz
# test as "flaky" (HypothesisDeprecationWarning, an error here): a race of the tests, seen
# under CPU load, not of the product. kazoo gets private generators: the same jitter, no
# state shared with the test thread.
kazoo.protocol.connection.random = random.Random()
kazoo.retry.random = random.Random()


def _close_kafka_python_sockets_that_fail_to_connect() -> None:
    """kafka-python 3.0's ``KafkaNetSocket.connect`` creates a socket and awaits its
    connection without closing it when that raises: its connection deadline passing (seen
    under CPU load) or the client closing meanwhile. The socket, by then often connected,
    is left to the garbage collector, whose ResourceWarning (an error here) then fails
    whichever test happens to be running: a leak of the client library, not of the broker,
    and not of the test. The wrapper closes the socket and re-raises, as the library
    should; every other unclosed socket still fails the suite."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            from kafka.net.inet import KafkaNetSocket
        except ImportError:  # kafka-python 2.x connects elsewhere, without the leak
            return
    connect_socket = KafkaNetSocket.sock_connect

    async def sock_connect(
        self: Any, net: Any, sock: socket.socket, sockaddr: Any, timeout_at: Any = None
    ) -> Any:
        try:
            return await connect_socket(self, net, sock, sockaddr, timeout_at=timeout_at)
        except BaseException:
            sock.close()
            raise

    KafkaNetSocket.sock_connect = sock_connect


_close_kafka_python_sockets_that_fail_to_connect()


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[ZooKeeperServer]:
    """One standalone ZooKeeper for the whole test session (on a free port).

    Tests must not pause, kill or stop it: those that inject ZooKeeper faults start
    their own ZooKeeperServer. A missing installation fails with a message that says to
    run `make setup`, rather than skipping the integration tests silently.
    """
    server = ZooKeeperServer(ZooKeeperConfig())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperServer, zk_client: KazooClient) -> str:
    """The connect string (with this test's chroot) for brokers started by the test."""
    return f"{zookeeper.connect_string}{zk_client.chroot}"


@pytest.fixture
def zk_client(zookeeper: ZooKeeperServer) -> Iterator[KazooClient]:
    """A chrooted kazoo client for one test (see :func:`chrooted_client`)."""
    with chrooted_client(zookeeper) as client:
        yield client


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    """A data dir for ``minibroker cluster up``; the cluster is brought down after the test."""
    data_dir = tmp_path / "cluster"
    yield data_dir
    if (data_dir / "cluster.json").exists():
        minibroker("cluster", "down", "--data-dir", str(data_dir))
