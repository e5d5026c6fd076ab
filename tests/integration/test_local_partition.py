"""Network partitions of a local cluster (``LocalCluster.isolate``): real ZooKeeper and real
brokers, each in a cgroup of its own, cut apart by the cluster's iptables chain.

What must hold, as on Docker (where a container is taken off the network):

- an isolated broker is unreachable from clients (a request under a short timeout gets no
  answer) while the others answer; ZooKeeper expires its session (``/brokers/ids/<id>``
  goes) and the controller elects new leaders for the partitions it led; healed, it
  registers again and every ISR is whole;
- a split-off group keeps its links within itself and loses everything else; a partition
  whose maker died without healing it is removed when the next run starts;
- ``cluster down`` leaves no chain and no cgroup behind.

CI runs these as root on a machine with cgroup v2 and iptables; where that is missing the
tests fail saying what is missing (they do not skip: a partition that silently does
nothing would pass every assertion about the brokers it failed to cut).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from kazoo.client import KazooClient

from chaos.local_backend import LocalBackend
from deploy import process_cgroups
from deploy.cluster_probe import create_topic
from deploy.local_cluster import LocalCluster, partition_problem
from deploy.loopback_firewall import chain_name
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.zk import znodes
from proto.zk.sync_client import kazoo_client, read_partition_state
from tests.helpers import free_port_run, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
SESSION_TIMEOUT_S = 3.0
TOPIC = "cut"
ASSIGNMENT = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
"""Each broker the preferred leader of one partition."""
CUT_OFF_S = 1.0
"""How long a request to a cut-off broker waits for an answer that must not come."""
ANSWER_S = 5.0
"""How long a reachable broker may take to answer."""
EXPIRY_S = SESSION_TIMEOUT_S + 30
"""The session timeout, then the controller's reaction, on a loaded machine."""
RECOVERY_S = 60.0


def _iptables() -> str:
    return subprocess.run(
        ["iptables", "-w", "-S"], capture_output=True, text=True, timeout=30, check=True
    ).stdout


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    problem = partition_problem()
    assert problem is None, f"this machine cannot partition a local cluster: {problem}"
    base = free_port_run(7)
    local = LocalCluster(tmp_path / "cluster")
    local.up(
        3,
        base_port=base,
        zookeeper_port=base + 3,
        kafka_base_port=base + 4,
        overrides={
            "zookeeper.session.timeout.ms": str(int(SESSION_TIMEOUT_S * 1000)),
            "replica.lag.time.max.ms": str(int(SESSION_TIMEOUT_S * 1000)),
            "replica.fetch.wait.max.ms": "200",
            "request.timeout.ms": "5000",
        },
        timeout=120,
    )
    try:
        with kazoo_client(local.zookeeper_connect, connect_timeout_s=30) as zk:
            create_topic(zk, TOPIC, ASSIGNMENT, {"min.insync.replicas": "2"})
            _wait_whole(zk, "the topic's leaders and full ISRs")
        yield local
    finally:
        if local.state_path.exists():
            local.down()


def _address(cluster: LocalCluster, broker_id: int, kafka: bool = False) -> tuple[str, int]:
    servers = cluster.kafka_bootstrap_servers if kafka else cluster.bootstrap_servers
    assert servers is not None
    host, _, port = servers.split(",")[broker_id - 1].rpartition(":")
    return host, int(port)


def _answers_metadata(cluster: LocalCluster, broker_id: int, timeout: float) -> bool:
    """Whether broker ``broker_id`` answers a gRPC Metadata request within ``timeout``."""
    host, port = _address(cluster, broker_id)
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        try:
            pb_grpc.BrokerStub(channel).Metadata(pb.MetadataRequest(topics=[]), timeout=timeout)
        except grpc.RpcError as err:
            code = err.code()
            if code not in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
                raise
            return False
    return True


def _connects(address: tuple[str, int], timeout: float) -> bool:
    """Whether a TCP connection to ``address`` is accepted within ``timeout``."""
    try:
        with socket.create_connection(address, timeout=timeout):
            return True
    except OSError:
        return False


def _states(zk: KazooClient) -> dict[int, znodes.PartitionState | None]:
    return {p: read_partition_state(zk, TopicPartition(TOPIC, p)) for p in ASSIGNMENT}


def _wait_whole(zk: KazooClient, what: str) -> None:
    """Until every broker is registered and every partition has a leader and its whole
    replica set in the ISR."""

    def whole() -> bool:
        if sorted(zk.get_children(znodes.BROKER_IDS_PATH)) != ["1", "2", "3"]:
            return False
        states = _states(zk)
        return all(
            s is not None and s.leader != znodes.LEADER_NONE and sorted(s.isr) == [1, 2, 3]
            for s in states.values()
        )

    wait_for(whole, RECOVERY_S, message=lambda: f"{what}: {_states(zk)}")


def _leaves_no_trace(cluster: LocalCluster) -> None:
    cluster.down()
    assert chain_name(cluster.network_key) not in _iptables()
    cgroups = process_cgroups.ClusterCgroups.of(cluster.data_dir)
    assert cgroups is not None
    assert not cgroups.parent.exists(), list(cgroups.parent.iterdir())


def test_an_isolated_broker_is_cut_off_expires_loses_its_leadership_and_rejoins(
    cluster: LocalCluster,
) -> None:
    victim = 2
    led = [p for p, replicas in ASSIGNMENT.items() if replicas[0] == victim]
    with kazoo_client(cluster.zookeeper_connect, connect_timeout_s=30) as zk:
        assert all(_states(zk)[p].leader == victim for p in led)  # type: ignore[union-attr]
        before = zk.exists(znodes.broker_path(victim))
        assert before is not None

        cluster.isolate([[1, 3], [victim]])
        assert chain_name(cluster.network_key) in _iptables()

        assert not _answers_metadata(cluster, victim, CUT_OFF_S)
        assert not _connects(_address(cluster, victim, kafka=True), CUT_OFF_S)
        for other in (1, 3):
            assert _answers_metadata(cluster, other, ANSWER_S), other
            assert _connects(_address(cluster, other, kafka=True), ANSWER_S), other
        wait_for(
            lambda: zk.exists(znodes.broker_path(victim)) is None,
            EXPIRY_S,
            message=f"ZooKeeper to expire broker {victim}'s session",
        )
        assert cluster.is_running(victim)  # cut off, not dead

        def moved() -> bool:
            states = _states(zk)
            return all(
                (s := states[p]) is not None and s.leader in (1, 3) and victim not in s.isr
                for p in led
            )

        wait_for(moved, EXPIRY_S, message=lambda: f"new leaders for {led}: {_states(zk)}")
        assert not _answers_metadata(cluster, victim, CUT_OFF_S)  # still cut off

        cluster.heal_network()
        assert chain_name(cluster.network_key) not in _iptables()
        wait_for(
            lambda: zk.exists(znodes.broker_path(victim)) is not None,
            RECOVERY_S,
            message=f"broker {victim} to register again",
        )
        _wait_whole(zk, "every ISR whole after the heal")
    assert _answers_metadata(cluster, victim, ANSWER_S)
    _leaves_no_trace(cluster)


def _connects_from(cgroup: Path, addresses: list[tuple[str, int]]) -> list[bool]:
    """Whether a process in ``cgroup`` connects to each of ``addresses`` (a child of its
    own: a socket is the cgroup's of the process that creates it)."""
    code = (
        "import socket, sys\n"
        "for a in sys.argv[1:]:\n"
        "    host, port = a.rsplit(':', 1)\n"
        "    try:\n"
        f"        socket.create_connection((host, int(port)), timeout={CUT_OFF_S}).close()\n"
        "        print('yes')\n"
        "    except OSError:\n"
        "        print('no')\n"
    )
    command = [sys.executable, "-c", code, *(f"{h}:{p}" for h, p in addresses)]
    done = subprocess.run(
        process_cgroups.command_in(cgroup, command),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert not done.stderr, done.stderr
    return [line == "yes" for line in done.stdout.split()]


def test_a_split_keeps_its_group_together_and_a_dead_makers_split_goes_at_the_next_run(
    cluster: LocalCluster,
) -> None:
    cut = [2, 3]
    # Made by a process that exits without healing it, as a chaos run killed with SIGKILL.
    subprocess.run(
        [
            sys.executable, "-c",
            "import sys; from pathlib import Path; from deploy.local_cluster import LocalCluster;"
            "LocalCluster(Path(sys.argv[1])).isolate([[1], [2, 3]])",
            str(cluster.data_dir),
        ],
        cwd=REPO,
        timeout=60,
        check=True,
    )  # fmt: skip
    assert chain_name(cluster.network_key) in _iptables()
    cgroups = process_cgroups.ClusterCgroups.of(cluster.data_dir)
    assert cgroups is not None
    zookeeper = cluster.zookeeper_connect.split(",")[0].rpartition(":")
    reached = _connects_from(
        cgroups.directory(cgroups.broker_member(2)),
        [
            _address(cluster, 3),
            _address(cluster, 3, kafka=True),
            _address(cluster, 1),
            _address(cluster, 1, kafka=True),
            (zookeeper[0], int(zookeeper[2])),
        ],
    )
    assert reached == [True, True, False, False, False]
    assert _answers_metadata(cluster, 1, ANSWER_S)
    for broker in cut:
        assert not _answers_metadata(cluster, broker, CUT_OFF_S), broker

    with kazoo_client(cluster.zookeeper_connect, connect_timeout_s=30) as zk:
        wait_for(
            lambda: sorted(zk.get_children(znodes.BROKER_IDS_PATH)) == ["1"],
            EXPIRY_S,
            message=lambda: f"only broker 1 registered: {zk.get_children(znodes.BROKER_IDS_PATH)}",
        )
        wait_for(
            lambda: all(s is not None and s.leader == 1 for s in _states(zk).values()),
            EXPIRY_S,
            message=lambda: f"broker 1 to lead every partition: {_states(zk)}",
        )
        LocalBackend(cluster)  # how every chaos run on the local backend starts
        assert chain_name(cluster.network_key) not in _iptables()
        _wait_whole(zk, "every ISR whole after the split's maker's partition went")
    _leaves_no_trace(cluster)
