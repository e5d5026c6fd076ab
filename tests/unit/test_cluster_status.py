"""cluster_status: reading `docker ps` for `cluster status --project`, and the status as
`cluster status` prints it (a single ZooKeeper, an ensemble with and without a quorum)."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from client.cli.cluster import print_status
from deploy import cluster_status
from deploy.cluster_status import (
    BrokerStatus,
    ClusterStatus,
    ZooKeeperNodeStatus,
    ZooKeeperView,
    docker_zookeeper_containers,
    parse_docker_ps,
)
from deploy.zookeeper import NOT_SERVING


def test_docker_ps_lines_give_each_containers_state_and_health() -> None:
    lines = [
        {"Names": "mb-broker-1", "State": "running", "Status": "Up 12 minutes (healthy)"},
        {"Names": "mb-broker-2", "State": "exited", "Status": "Exited (137) 3 minutes ago"},
        {"Names": "mb-zookeeper", "State": "running", "Status": "Up 13 minutes"},
    ]
    output = "\n".join(json.dumps(line) for line in lines) + "\n"
    assert parse_docker_ps(output) == {
        "mb-broker-1": "running (healthy)",
        "mb-broker-2": "exited (137)",
        "mb-zookeeper": "running",
    }


def test_docker_ps_asks_only_for_the_fields_it_reads_never_for_sizes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`{{json .}}` (or any template naming .Size) makes Docker compute every container's
    disk usage: 15-27 s for `cluster status --project` on a busy machine."""
    calls: list[tuple[str, ...]] = []
    line = '{"Names":"mb-broker-1","State":"running","Status":"Up 2 minutes (healthy)"}\n'

    def docker(*args: str) -> str:
        calls.append(args)
        return line

    monkeypatch.setattr(cluster_status, "_docker", docker)
    assert cluster_status._docker_containers("mb") == {"mb-broker-1": "running (healthy)"}
    (args,) = calls
    assert args[:2] == ("ps", "--all")
    assert "label=com.docker.compose.project=mb" in args
    template = args[args.index("--format") + 1]
    fields = {part.split("}}")[0].split()[-1] for part in template.split("{{")[1:]}
    assert fields == {".Names", ".State", ".Status"}, template


def _printed(status: ClusterStatus) -> str:
    out = io.StringIO()
    print_status(status, Console(file=out, width=120, highlight=False, soft_wrap=True))
    return out.getvalue()


ENSEMBLE = "127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183"


def test_status_of_an_ensemble_shows_each_nodes_mode_and_the_quorum() -> None:
    nodes = [
        ZooKeeperNodeStatus(1, 2181, 101, "follower"),
        ZooKeeperNodeStatus(2, 2182, None, None),
        ZooKeeperNodeStatus(3, 2183, 103, "leader"),
    ]
    view = ZooKeeperView({1: ("127.0.0.1", 9091)}, 1, 4, 0, 0, [], [], [])
    text = _printed(ClusterStatus.of(ENSEMBLE, [BrokerStatus(1, 9091, 7, True)], view, nodes))
    assert f"ZooKeeper {ENSEMBLE}: running (2 of 3 nodes serve, 2 needed)" in text
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert any("│ 1" in r and "pid 101" in r and "follower" in r for r in rows), text
    assert any("│ 2" in r and "not running" in r for r in rows), text
    assert any("│ 3" in r and "leader" in r for r in rows), text
    assert "Controller: 1 (epoch 4)" in text


def test_status_without_a_quorum_says_how_many_nodes_serve_and_knows_no_controller() -> None:
    nodes = [
        ZooKeeperNodeStatus(1, 2181, None, None),
        ZooKeeperNodeStatus(2, 2182, None, None),
        ZooKeeperNodeStatus(3, 2183, 103, NOT_SERVING),
    ]
    status = ClusterStatus.of(ENSEMBLE, [BrokerStatus(1, 9091, 7, False)], None, nodes)
    text = _printed(status)
    assert f"ZooKeeper {ENSEMBLE}: NO QUORUM (0 of 3 nodes serve, 2 needed)" in text
    assert "not serving" in text
    assert "Controller: none" in text


def test_single_zookeeper_status_reads_as_before() -> None:
    up = ClusterStatus.of(
        "127.0.0.1:2181", [], ZooKeeperView({}, None, None, 0, 0, [], [], []),
        [ZooKeeperNodeStatus(1, 2181, 5, "standalone")],
    )  # fmt: skip
    assert "ZooKeeper 127.0.0.1:2181: running\n" in _printed(up)
    assert "ZooKeeper node" not in _printed(up)
    down = ClusterStatus.of("127.0.0.1:2181", [], None, [ZooKeeperNodeStatus(1, 2181, None, None)])
    assert "ZooKeeper 127.0.0.1:2181: NOT RUNNING" in _printed(down)
    paused = ClusterStatus.of("127.0.0.1:2181", [], None, [ZooKeeperNodeStatus(1, 2181, 5, None)])
    assert "ZooKeeper 127.0.0.1:2181: NOT SERVING" in _printed(paused)


def test_docker_zookeeper_containers_of_make_up_and_make_up_ha() -> None:
    single = ["mb-zookeeper", "mb-broker-1"]
    assert docker_zookeeper_containers("mb", single) == {1: "mb-zookeeper"}
    ha = ["mb-zookeeper-1", "mb-zookeeper-2", "mb-zookeeper-3", "mb-broker-1", "mbx-zookeeper-4"]
    assert docker_zookeeper_containers("mb", ha) == {
        1: "mb-zookeeper-1",
        2: "mb-zookeeper-2",
        3: "mb-zookeeper-3",
    }
    assert docker_zookeeper_containers("mb", ["mb-broker-1"]) == {}


def test_status_of_a_local_cluster_names_both_bootstraps() -> None:
    status = ClusterStatus.of(
        "127.0.0.1:2181",
        [BrokerStatus(1, 9091, 7, True)],
        ZooKeeperView({1: ("127.0.0.1", 9091)}, 1, 4, 0, 0, [], [], []),
        [ZooKeeperNodeStatus(1, 2181, 5, "standalone")],
        bootstrap_servers="127.0.0.1:9091",
        kafka_bootstrap_servers="127.0.0.1:19091",
    )
    text = _printed(status)
    assert "Bootstrap servers: 127.0.0.1:9091\n" in text
    assert "Kafka bootstrap servers: 127.0.0.1:19091\n" in text
    # Without Kafka listeners (a --tls cluster) there is no such line.
    plain = ClusterStatus.of("127.0.0.1:2181", [], None, bootstrap_servers="127.0.0.1:9091")
    assert "Kafka" not in _printed(plain)


def test_status_shows_the_cluster_id_zookeeper_keeps() -> None:
    view = ZooKeeperView({}, None, None, 0, 0, [], [], [], "CbawmYOaSS6IfE6RMp9FMw")
    assert "Cluster id: CbawmYOaSS6IfE6RMp9FMw\n" in _printed(
        ClusterStatus.of("127.0.0.1:2181", [], view)
    )
    fresh = ClusterStatus.of("127.0.0.1:2181", [], ZooKeeperView({}, None, None, 0, 0, [], [], []))
    assert "Cluster id: none yet (no broker has started)\n" in _printed(fresh)
    assert "Cluster id" not in _printed(ClusterStatus.of("127.0.0.1:2181", [], None))
