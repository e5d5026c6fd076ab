"""The Docker end-to-end tests' cluster: `make up` of deploy/docker-compose.yml.

Every test here is marked ``docker`` and ``slow``; run them alone with ``pytest tests/docker``
(or ``-m docker``). Without a Docker engine they are skipped, except under CI (``CI=true``),
where a missing engine is a failure: CI's machines have one, so its absence is a broken
machine, not a reason to pass.

The cluster runs under its own compose project (``minibroker-test``) on free ports (the
Kafka protocol listeners' too), so it neither collides with a cluster a developer started
with ``make up`` (project ``minibroker``, ports 9091-9093, 19091-19093 and 2181) or
``minibroker cluster up`` nor with local clusters of other test runs, and it is removed with
its volumes at the end.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers import minibroker as run_cli

REPO = Path(__file__).resolve().parents[2]
COMPOSE_SH = REPO / "deploy" / "docker" / "compose.sh"
PROJECT = "minibroker-test"
UP_TIMEOUT_S = 1500
"""`make up` builds the image first: on a new machine that is the offline base
(debootstrap, about a minute) and a cold image build (two to three minutes)."""


CLI_TIMEOUT_S = 300


def minibroker(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI of this checkout, as a user on the host runs it; it must succeed."""
    result = run_cli(*args, input_text=stdin, timeout=CLI_TIMEOUT_S)
    assert result.returncode == 0, (
        f"minibroker {' '.join(args)} exited {result.returncode}:\n"
        f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.docker)
            item.add_marker(pytest.mark.slow)


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _engine_problem() -> str | None:
    """Why Docker cannot be used here, or None when an engine answers."""
    if shutil.which("docker") is None:
        return "the docker command is not installed"
    try:
        subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            check=True,
            capture_output=True,
            timeout=30,
        )
    except subprocess.CalledProcessError as err:
        return f"no Docker engine answers: {err.stderr.decode(errors='replace').strip()}"
    except subprocess.TimeoutExpired:
        return "the Docker engine did not answer `docker info` within 30 s"
    if shutil.which("make") is None:
        return "make is not installed"
    return None


@pytest.fixture(scope="session")
def docker_engine() -> None:
    problem = _engine_problem()
    if problem is None:
        return
    if _in_ci():
        pytest.fail(f"CI=true and {problem}: the Docker end-to-end tests cannot run")
    pytest.skip(problem)


def kafka_port_env(ports: Sequence[int]) -> dict[str, str]:
    """MINIBROKER_KAFKA_PORT_1..3 for ``ports``: every cluster of these tests moves its
    Kafka ports off the defaults (19091-19093), which `make up` or `cluster up` may hold."""
    return {f"MINIBROKER_KAFKA_PORT_{i}": str(port) for i, port in enumerate(ports, start=1)}


def _free_ports(count: int) -> list[int]:
    """Distinct ports free on 127.0.0.1 now (held together while choosing)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass(frozen=True)
class DockerCluster:
    project: str
    zookeeper: str
    """host:port of ZooKeeper, published on 127.0.0.1."""
    broker_ports: dict[int, int]
    env: dict[str, str]
    """The environment that `make` and compose.sh need to address this cluster."""
    up_messages: list[str]
    """What each `make up` of this cluster printed on stderr, in order."""
    kafka_ports: dict[int, int] = field(default_factory=dict)
    """Broker id -> its Kafka protocol port, host and container alike (published even
    where no broker listens on it, as in the TLS variant)."""

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for _, port in sorted(self.broker_ports.items()))

    @property
    def kafka_bootstrap(self) -> str:
        """The Kafka protocol listeners, for Kafka's own clients (kcat, aiokafka)."""
        return ",".join(f"127.0.0.1:{port}" for _, port in sorted(self.kafka_ports.items()))

    def container(self, broker_id: int) -> str:
        return f"{self.project}-broker-{broker_id}"

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(COMPOSE_SH), *args],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def make(
        self, target: str, timeout: float = 300, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`make TARGET` on this cluster (``env``: this cluster's and more)."""
        return subprocess.run(
            ["make", "--no-print-directory", target],
            cwd=REPO,
            env=self.env if env is None else env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@contextmanager
def profile_up(
    cluster: DockerCluster, target: str, env: dict[str, str], services: Sequence[str]
) -> Iterator[subprocess.CompletedProcess[str]]:
    """`make TARGET` (a compose profile's `up-*`) on the session's cluster with ``env``, which
    must succeed; the profile's ``services`` are removed at the end (with their anonymous
    volumes), whatever happened."""
    up = cluster.make(target, timeout=UP_TIMEOUT_S, env=env)
    try:
        assert up.returncode == 0, (
            f"make {target} failed:\n{up.stdout[-4000:]}\n{up.stderr[-4000:]}"
        )
        yield up
    finally:
        subprocess.run(
            [str(COMPOSE_SH), "rm", "-s", "-f", "-v", *services],
            cwd=REPO,
            env=env,
            capture_output=True,
            timeout=120,
        )


@pytest.fixture(scope="session")
def docker_cluster(docker_engine: None, request: pytest.FixtureRequest) -> Iterator[DockerCluster]:
    """`make up` under the test project on free ports; `make down-volumes` at the end."""
    zk_port, *ports = _free_ports(7)
    ports, kafka_ports = ports[:3], ports[3:]
    env = {
        **os.environ,
        "MINIBROKER_PROJECT": PROJECT,
        "MINIBROKER_ZOOKEEPER_PORT": str(zk_port),
        "MINIBROKER_PORT_1": str(ports[0]),
        "MINIBROKER_PORT_2": str(ports[1]),
        "MINIBROKER_PORT_3": str(ports[2]),
        **kafka_port_env(kafka_ports),
        "MINIBROKER_UP_TIMEOUT": "240",
    }
    for name in ("MINIBROKER_BOOTSTRAP", "MINIBROKER_ZOOKEEPER", "MINIBROKER_OVERRIDES"):
        env.pop(name, None)
    cluster = DockerCluster(
        project=PROJECT,
        zookeeper=f"127.0.0.1:{zk_port}",
        broker_ports={1: ports[0], 2: ports[1], 3: ports[2]},
        env=env,
        up_messages=[],
        kafka_ports={1: kafka_ports[0], 2: kafka_ports[1], 3: kafka_ports[2]},
    )
    # Leftovers of an interrupted earlier run of this test would hold the names.
    cluster.compose("down-volumes")
    failed_before = request.session.testsfailed
    up = cluster.make("up", timeout=UP_TIMEOUT_S)
    cluster.up_messages.append(up.stderr)
    try:
        if up.returncode != 0:
            pytest.fail(
                f"make up failed (exit {up.returncode}):\n{up.stdout[-6000:]}\n{up.stderr[-6000:]}"
            )
        assert cluster.bootstrap in up.stdout, f"make up did not print the bootstrap:\n{up.stdout}"
        assert f"kafka bootstrap:   {cluster.kafka_bootstrap}" in up.stdout, up.stdout
        yield cluster
    finally:
        if request.session.testsfailed > failed_before or up.returncode != 0:
            _show_logs(cluster, request)
        down = cluster.make("down-volumes")
        assert down.returncode == 0, f"make down-volumes failed:\n{down.stdout}\n{down.stderr}"


def _show_logs(cluster: DockerCluster, request: pytest.FixtureRequest) -> None:
    """The containers' state and logs, straight to the terminal (not captured)."""
    ps = cluster.compose("ps")
    logs = cluster.compose("logs", "--no-color", "--tail=150")
    capture = request.config.pluginmanager.getplugin("capturemanager")
    text = f"\n---- {cluster.project}: compose ps\n{ps.stdout}{ps.stderr}\n---- logs\n{logs.stdout}"
    if capture is None:
        print(text, file=sys.stderr)
        return
    with capture.global_and_fixture_disabled():
        print(text, file=sys.stderr)
