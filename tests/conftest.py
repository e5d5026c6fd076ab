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
from collections.abc import Iterator
from pathlib import Path

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
