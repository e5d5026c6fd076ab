"""The ensemble harness against three real ZooKeeper JVMs: a leader killed, a member
restarted, a majority lost and regained; and a taken port refused before anything starts."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from deploy.zookeeper import (
    NOT_SERVING,
    ZooKeeperConfig,
    ZooKeeperEnsemble,
    ZooKeeperPortInUseError,
)
from tests.helpers import free_port_run, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def ensemble() -> Iterator[ZooKeeperEnsemble]:
    zk = ZooKeeperEnsemble(3, ZooKeeperConfig())
    try:
        yield zk
    finally:
        zk.stop()


@pytest.mark.timeout(240)
def test_ensemble_survives_its_leaders_kill_and_serves_again_once_a_majority_is_back(
    ensemble: ZooKeeperEnsemble,
) -> None:
    ensemble.start(timeout=120)
    modes = ensemble.modes()
    assert sorted(m or "-" for m in modes.values()) == ["follower", "follower", "leader"], modes
    data_dir = ensemble.data_dir
    for node in ensemble.node_ids:
        assert (data_dir / f"zookeeper-{node}" / "myid").read_text().strip() == str(node)

    # A session opened through the connect string outlives the leader: its client moves
    # to another member, which the new leader's session tracker knows.
    client = KazooClient(hosts=ensemble.connect_string, timeout=6.0)
    client.start(timeout=30)
    try:
        client.create("/kept", b"before")
        session = client.client_id
        leader = ensemble.leader()
        assert leader is not None
        ensemble.kill(leader)
        wait_for(ensemble.has_quorum, 60, message=lambda: f"a new quorum: {ensemble.modes()}")
        assert ensemble.leader() != leader
        assert client.get("/kept")[0] == b"before"
        assert client.client_id == session
        assert client.state == KazooState.CONNECTED

        # The killed leader comes back with its data and follows.
        ensemble.start_node(leader, timeout=90)
        assert ensemble.server(leader).mode() == "follower"

        # Two of three gone: the last one serves nobody.
        followers = [n for n in ensemble.node_ids if n != ensemble.leader()]
        second_leader = ensemble.leader()
        assert second_leader is not None
        ensemble.kill(followers[0])
        ensemble.kill(second_leader)
        last = followers[1]
        wait_for(
            lambda: ensemble.server(last).mode() == NOT_SERVING,
            30,
            message=lambda: f"member {last} to stop serving: {ensemble.modes()}",
        )
        assert not ensemble.has_quorum()

        # One member back is a majority again; nothing written before is lost.
        started = time.monotonic()
        ensemble.start_node(second_leader, timeout=90)
        ensemble.wait_for_quorum(timeout=60)
        print(f"quorum back {time.monotonic() - started:.2f} s after the restart began")
        wait_for(lambda: client.state == KazooState.CONNECTED, 30, message="client reconnected")
        assert client.get("/kept")[0] == b"before"
        ensemble.start_node(followers[0], timeout=90)
        assert sorted(m or "-" for m in ensemble.modes().values()) == [
            "follower",
            "follower",
            "leader",
        ]
    finally:
        client.stop()
        client.close()
    ensemble.stop()
    assert not data_dir.exists()
    assert all(not server.is_running for server in ensemble.servers.values())


@pytest.mark.timeout(30)
def test_ensemble_on_a_taken_client_port_fails_fast_naming_it() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        free = free_port_run(1), free_port_run(1)
        ensemble = ZooKeeperEnsemble(3, client_ports=[free[0], port, free[1]])
        started = time.monotonic()
        with pytest.raises(ZooKeeperPortInUseError, match=f"member 2's client port {port} "):
            ensemble.start(timeout=30)
        assert time.monotonic() - started < 2.0
        assert ensemble.servers == {}
        ensemble.stop()
