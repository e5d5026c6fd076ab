"""Shared fixtures: one real ZooKeeper per test session, a chrooted kazoo client per test.

The ZooKeeper is the project's own harness (deploy/zookeeper.py) running Debian's
package, so tests see real sessions, ephemerals and watches. It starts lazily: unit
tests that use no ZooKeeper fixture never start a JVM.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperConfig, ZooKeeperServer
from tests.helpers import chrooted_client


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
