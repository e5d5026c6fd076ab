"""End to end in Docker, the HA variant: `make up-ha`, then one ZooKeeper container killed.

Its own compose project (``minibroker-test-ha``), image tag and free ports, so it disturbs
neither `make up` (project ``minibroker``) nor the other Docker test's cluster
(``minibroker-test``); `make down-volumes` removes it at the end. Three ZooKeeper
containers form an ensemble and every broker connects to all three; with the ensemble's
leader killed (`docker kill`), the other two elect a leader and acks=all produce and
consume go on through the CLI on the host; the container started again rejoins.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from tests.docker.conftest import (
    UP_TIMEOUT_S,
    DockerCluster,
    _free_ports,
    _show_logs,
    kafka_port_env,
    minibroker,
)
from tests.helpers import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]

PROJECT = "minibroker-test-ha"
IMAGE = "minibroker-test-ha:latest"
LINES = 1000


def _project_leftovers() -> list[str]:
    """The project's containers and volumes (compose labels both)."""
    found = []
    for kind in (["ps", "-a"], ["volume", "ls"]):
        out = subprocess.run(
            ["docker", *kind, "-q", "--filter", f"label=com.docker.compose.project={PROJECT}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        found += out.split()
    return found


@pytest.fixture(scope="module")
def ha_cluster(docker_engine: None, request: pytest.FixtureRequest) -> Iterator[DockerCluster]:
    """`make up-ha` under the test project on free ports; `make down-volumes` at the end."""
    zk1, zk2, zk3, *ports = _free_ports(9)
    ports, kafka_ports = ports[:3], ports[3:]
    env = {
        **os.environ,
        "MINIBROKER_PROJECT": PROJECT,
        "MINIBROKER_IMAGE": IMAGE,
        "MINIBROKER_ZOOKEEPER_PORT": str(zk1),
        "MINIBROKER_ZOOKEEPER_PORT_2": str(zk2),
        "MINIBROKER_ZOOKEEPER_PORT_3": str(zk3),
        "MINIBROKER_PORT_1": str(ports[0]),
        "MINIBROKER_PORT_2": str(ports[1]),
        "MINIBROKER_PORT_3": str(ports[2]),
        **kafka_port_env(kafka_ports),
        "MINIBROKER_UP_TIMEOUT": "300",
    }
    for name in (
        "MINIBROKER_BOOTSTRAP",
        "MINIBROKER_ZOOKEEPER",
        "MINIBROKER_OVERRIDES",
        "MINIBROKER_ZOOKEEPER_NODES",
    ):
        env.pop(name, None)
    cluster = DockerCluster(
        project=PROJECT,
        zookeeper=f"127.0.0.1:{zk1},127.0.0.1:{zk2},127.0.0.1:{zk3}",
        broker_ports={1: ports[0], 2: ports[1], 3: ports[2]},
        env=env,
        up_messages=[],
        kafka_ports={1: kafka_ports[0], 2: kafka_ports[1], 3: kafka_ports[2]},
    )
    cluster.compose("down-volumes")  # leftovers of an interrupted earlier run
    failed_before = request.session.testsfailed
    up = cluster.make("up-ha", timeout=UP_TIMEOUT_S)
    cluster.up_messages.append(up.stderr)
    try:
        if up.returncode != 0:
            pytest.fail(
                f"make up-ha failed (exit {up.returncode}):\n{up.stdout[-6000:]}\n"
                f"{up.stderr[-6000:]}"
            )
        assert "A ZooKeeper ensemble of 3 and 3 brokers are healthy" in up.stdout, up.stdout
        assert cluster.zookeeper in up.stdout, up.stdout
        yield cluster
    finally:
        if request.session.testsfailed > failed_before or up.returncode != 0:
            _show_logs(cluster, request)
        down = cluster.make("down-volumes")
        assert down.returncode == 0, f"make down-volumes failed:\n{down.stdout}\n{down.stderr}"
        assert not _project_leftovers()


def _zookeeper_modes(cluster: DockerCluster) -> dict[str, str]:
    """Container -> mode, from each ZooKeeper container's own `srvr` (its health check)."""
    modes = {}
    for node in (1, 2, 3):
        name = f"{PROJECT}-zookeeper-{node}"
        result = subprocess.run(
            ["docker", "exec", name, "minibroker-healthcheck", "zookeeper"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        text = result.stdout.strip()
        modes[name] = text.split("Mode: ", 1)[1].rstrip(")") if "Mode: " in text else "down"
    return modes


def _healthy(container: str) -> bool:
    out = subprocess.run(
        ["docker", "inspect", "-f", "{{json .State.Health.Status}}", container],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stdout.strip()
    return bool(out) and json.loads(out) == "healthy"


def test_ha_compose_serves_through_the_kill_of_the_zookeeper_leaders_container(
    ha_cluster: DockerCluster,
) -> None:
    cluster = ha_cluster
    modes = _zookeeper_modes(cluster)
    assert sorted(modes.values()) == ["follower", "follower", "leader"], modes
    status = minibroker("cluster", "status", "--project", PROJECT).stdout
    assert status.count("follower") == 2, status
    assert status.count("leader") == 1, status
    assert "3 of 3 nodes serve" in status, status

    where = ["--bootstrap-server", cluster.bootstrap]
    topic = f"ha-{uuid.uuid4().hex[:8]}"
    minibroker(
        "topics", "create", topic, "--partitions", "3", "--replication-factor", "3",
        "--config", "min.insync.replicas=2", "--zookeeper", cluster.zookeeper, *where,
    )  # fmt: skip
    lines = [f"before-{i}" for i in range(LINES)]
    minibroker("produce", topic, "--acks", "all", *where, stdin="\n".join(lines) + "\n")

    leader = next(name for name, mode in modes.items() if mode == "leader")
    subprocess.run(["docker", "kill", leader], check=True, capture_output=True, timeout=120)
    wait_for(
        lambda: sorted(_zookeeper_modes(cluster).values()) == ["down", "follower", "leader"],
        120,
        interval=1,
        message=lambda: f"a new ZooKeeper leader: {_zookeeper_modes(cluster)}",
    )
    more = [f"after-{i}" for i in range(LINES)]
    minibroker("produce", topic, "--acks", "all", *where, stdin="\n".join(more) + "\n")
    consumed = minibroker(
        "consume", topic, "--from-beginning", "--timeout-ms", "10000", *where
    ).stdout.split()
    assert sorted(consumed) == sorted(lines + more)
    described = minibroker(
        "topics", "describe", topic, "--zookeeper", cluster.zookeeper, *where
    ).stdout
    assert described.count("Isr: ") == 3, described

    subprocess.run(["docker", "start", leader], check=True, capture_output=True, timeout=120)
    wait_for(lambda: _healthy(leader), 180, interval=1, message=f"{leader} healthy again")
    assert sorted(_zookeeper_modes(cluster).values()) == ["follower", "follower", "leader"]
