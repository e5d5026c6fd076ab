"""deploy.local_cluster without servers: cluster.json of a single ZooKeeper (as written before
ensembles) and of an ensemble, the connect string the brokers and the CLI get, the Kafka
listeners' ports, the ``--zookeeper-nodes`` and port checks, and which process counts as a
node's JVM."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from client.cli.common import finish_args
from client.cli.main import build_parser
from deploy.broker_process import BrokerProcess, BrokerSpec
from deploy.local_cluster import (
    ClusterAlreadyRunningError,
    LocalCluster,
    LocalClusterError,
    _Process,
    _State,
    _ZooKeeperNode,
    check_zookeeper_nodes,
)
from deploy.ports import free_port_block
from deploy.zookeeper import QuorumPeer
from tests.helpers import wait_for

OLD_CLUSTER_JSON = {
    "zookeeper": {"pid": 11, "port": 2181, "host": "127.0.0.1"},
    "brokers": {"1": {"pid": 12, "port": 9091, "host": "127.0.0.1"}},
    "overrides": {"min.insync.replicas": "2"},
}


def _ensemble_state() -> _State:
    return _State(
        {n: _ZooKeeperNode(100 + n, 2180 + n, "127.0.0.1", 2880 + n, 3880 + n) for n in (1, 2, 3)},
        {},
    )


def test_cluster_json_written_before_ensembles_is_read_as_a_single_node_1() -> None:
    state = _State.from_json(json.dumps(OLD_CLUSTER_JSON))
    assert state.zookeeper == {1: _ZooKeeperNode(11, 2181, "127.0.0.1")}
    assert not state.is_ensemble
    assert state.quorum_peers() == ()
    assert state.zookeeper_connect == "127.0.0.1:2181"
    assert state.overrides == {"min.insync.replicas": "2"}
    # Written back, it names its node the new way and reads the same.
    assert _State.from_json(state.to_json()) == state
    assert "zookeeper_nodes" in json.loads(state.to_json())


def test_cluster_json_records_each_brokers_kafka_port_and_old_files_have_none() -> None:
    old = _State.from_json(json.dumps(OLD_CLUSTER_JSON))
    assert old.brokers[1].kafka_port is None
    assert old.kafka_bootstrap_servers is None
    state = _ensemble_state()
    state.brokers = {i: _Process(10 + i, 9090 + i, kafka_port=19090 + i) for i in (2, 1)}
    written = json.loads(state.to_json())
    assert written["brokers"]["1"] == {
        "pid": 11,
        "port": 9091,
        "host": "127.0.0.1",
        "kafka_port": 19091,
    }
    again = _State.from_json(state.to_json())
    assert again == state
    assert again.bootstrap_servers == "127.0.0.1:9091,127.0.0.1:9092"
    assert again.kafka_bootstrap_servers == "127.0.0.1:19091,127.0.0.1:19092"


def _cluster_up(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "client.cli", "cluster", "up", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cluster_up_refuses_kafka_ports_that_clash_or_are_taken_and_starts_nothing(
    tmp_path: Path,
) -> None:
    base = free_port_block(7)
    ports = ["--base-port", str(base), "--zookeeper-port", str(base + 6)]
    clash = _cluster_up("--data-dir", str(tmp_path), *ports, "--kafka-base-port", str(base + 2))
    assert clash.returncode == 1
    assert clash.stderr.strip().count("\n") == 0, clash.stderr
    assert "broker 1 Kafka, broker 3 would share a port" in clash.stderr
    assert "--kafka-base-port" in clash.stderr
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", base + 4))
        squatter.listen()
        taken = _cluster_up("--data-dir", str(tmp_path), *ports, "--kafka-base-port", str(base + 3))
    assert taken.returncode == 1
    assert f"broker 2 Kafka port {base + 4} already in use" in taken.stderr
    assert not (tmp_path / "cluster.json").exists()


def test_a_broker_process_gets_a_kafka_port_of_its_own_and_keeps_it(tmp_path: Path) -> None:
    spec = BrokerSpec(
        1, tmp_path / "broker-1", "127.0.0.1:2181", kafka_port=0, overrides={"kafka.port": "7"}
    )
    process = BrokerProcess(spec)
    process._choose_free_ports()
    assert process.port > 0
    assert process.kafka_port is not None
    assert process.kafka_port > 0
    assert process.kafka_port != process.port
    # The harness's choice comes last, so it wins over an override of the same key.
    assert process.command()[-2:] == ["--override", f"kafka.port={process.kafka_port}"]
    assert process.kafka_address == f"127.0.0.1:{process.kafka_port}"
    fixed = BrokerProcess(BrokerSpec(1, tmp_path / "broker-1", "127.0.0.1:2181", port=0))
    fixed._choose_free_ports()
    assert fixed.kafka_port is None
    assert fixed.kafka_address is None
    assert not any(arg.startswith("kafka.port=") for arg in fixed.command())


def test_ensemble_state_round_trips_and_names_every_node() -> None:
    state = _ensemble_state()
    again = _State.from_json(state.to_json())
    assert again == state
    assert again.is_ensemble
    assert again.zookeeper_connect == "127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183"
    assert again.quorum_peers() == tuple(
        QuorumPeer(n, 2180 + n, 2880 + n, 3880 + n) for n in (1, 2, 3)
    )


def test_cluster_json_without_a_zookeeper_node_is_damaged(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text(json.dumps({"zookeeper_nodes": {}, "brokers": {}}))
    with pytest.raises(LocalClusterError, match="damaged: no ZooKeeper node recorded"):
        LocalCluster(tmp_path).zookeeper_nodes()


def test_cli_defaults_name_every_zookeeper_node_of_an_ensemble(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("MINIBROKER_BOOTSTRAP", "MINIBROKER_ZOOKEEPER"):
        monkeypatch.delenv(name, raising=False)
    state = _ensemble_state()
    state.brokers = {}
    (tmp_path / "cluster.json").write_text(state.to_json())
    monkeypatch.setenv("MINIBROKER_DATA_DIR", str(tmp_path))
    args = build_parser().parse_args(["topics", "list"])
    finish_args(args)
    assert args.zookeeper == "127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183"
    cluster = LocalCluster(tmp_path)
    assert cluster.zookeeper_nodes() == [1, 2, 3]
    assert cluster.addresses() == ("", "127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183")


@pytest.mark.parametrize("nodes", [0, -1, 2, 4, 9])
def test_zookeeper_nodes_must_be_an_odd_number_from_1_to_7(nodes: int) -> None:
    with pytest.raises(LocalClusterError, match="--zookeeper-nodes"):
        check_zookeeper_nodes(nodes)


def test_cluster_up_with_an_even_ensemble_is_one_line_and_starts_nothing(tmp_path: Path) -> None:
    up = ["cluster", "up", "--data-dir", str(tmp_path), "--zookeeper-nodes", "2"]
    result = subprocess.run(
        [sys.executable, "-m", "client.cli", *up],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "--zookeeper-nodes must be odd, not 2" in lines[0]
    assert not (tmp_path / "cluster.json").exists()


def test_already_running_advice_names_the_zookeeper_nodes_and_brokers_to_start() -> None:
    partly = ClusterAlreadyRunningError(Path("/d"), [2], [1, 3], zookeeper_nodes=3)
    assert "`minibroker cluster start-zookeeper 1`" in str(partly)
    assert "`minibroker cluster start-zookeeper 3`" in str(partly)
    assert "`minibroker cluster start 2`" in str(partly)
    assert not partly.complete
    single = ClusterAlreadyRunningError(Path("/d"), [], [1], zookeeper_nodes=1)
    assert "ZooKeeper is not running: `minibroker cluster down`" in str(single)
    assert ClusterAlreadyRunningError(Path("/d"), [], []).complete


@pytest.fixture
def fake_jvm(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process whose command line names node 1's zoo.cfg, as a member's JVM does."""
    config = tmp_path / "zookeeper-1" / "zoo.cfg"
    process = subprocess.Popen(
        [sys.executable, "-c", "import signal; signal.pause()", str(config)],  # until killed
    )
    # /proc/<pid>/cmdline may read empty for a moment after Popen returns (exec under way).
    cmdline = Path(f"/proc/{process.pid}/cmdline")
    wait_for(lambda: str(config).encode() in cmdline.read_bytes(), 10, message="exec")
    yield process
    process.kill()
    process.wait()


def test_a_nodes_pid_is_ours_only_with_that_nodes_exact_config(
    tmp_path: Path, fake_jvm: subprocess.Popen[bytes]
) -> None:
    cluster = LocalCluster(tmp_path)
    state = _ensemble_state()
    state.zookeeper[1].pid = fake_jvm.pid
    state.zookeeper[2].pid = fake_jvm.pid  # a pid recorded for node 2 that runs node 1
    assert cluster._zookeeper_ours(state, 1)
    assert not cluster._zookeeper_ours(state, 2)
    # A single node's dir is a prefix of node 1's: zookeeper/zoo.cfg must not match it.
    single = _State({1: _ZooKeeperNode(fake_jvm.pid, 2181)}, {})
    assert not cluster._zookeeper_ours(single, 1)
