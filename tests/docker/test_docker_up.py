"""`make up`'s own logic on the real engine (deploy/docker/compose.sh): every taken port
named at once with free suggestions, health checks that fail for a while are waited out,
a cluster that never gets healthy is reported (ps, the last health check and the logs, by
container name), a mere image named like a profile's container switches no profile on, and
`down` leaves none of the project's anonymous volumes behind.

Each test runs its own compose project on free ports (not the session's cluster), with an
override file (MINIBROKER_COMPOSE_OVERRIDE) that makes the health checks misbehave.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docker.conftest import COMPOSE_SH, REPO, UP_TIMEOUT_S, _free_ports

CONTAINER_ID = re.compile(r"\b[0-9a-f]{12}\b")


@pytest.fixture(scope="module")
def image(docker_engine: None) -> None:
    """minibroker:latest of this checkout (`make up` builds it the same way)."""
    built = subprocess.run(
        ["make", "--no-print-directory", "image"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=UP_TIMEOUT_S,
    )
    assert built.returncode == 0, f"make image failed:\n{built.stdout[-3000:]}\n{built.stderr}"


def _env(project: str, ports: list[int], **more: str) -> dict[str, str]:
    env = {
        **os.environ,
        "MINIBROKER_PROJECT": project,
        "MINIBROKER_ZOOKEEPER_PORT": str(ports[0]),
        **{f"MINIBROKER_PORT_{i}": str(ports[i]) for i in (1, 2, 3)},
        **{f"MINIBROKER_KAFKA_PORT_{i}": str(ports[3 + i]) for i in (1, 2, 3)},
        **more,
    }
    for name in ("MINIBROKER_BOOTSTRAP", "MINIBROKER_ZOOKEEPER", "MINIBROKER_OVERRIDES"):
        env.pop(name, None)
    return env


def _compose(
    env: dict[str, str], *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(COMPOSE_SH), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def _containers(project: str) -> list[str]:
    out = subprocess.run(
        [
            "docker",
            "ps",
            "-a",
            "--filter",
            f"label=com.docker.compose.project={project}",
            "--format",
            "{{.Names}}",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return out.split()


@pytest.fixture
def project(image: None, request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, str]]]:
    """A compose project of its own on free ports; down with its volumes at the end."""
    name = "mbt-up-" + re.sub(r"[^a-z0-9]", "", request.node.name.lower())[-20:]
    env = _env(name, _free_ports(7))
    _compose(env, "down-volumes")
    try:
        yield name, env
    finally:
        down = _compose(env, "down-volumes")
        assert down.returncode == 0, down.stderr
        assert _containers(name) == []


def test_every_taken_port_is_named_with_free_ports_to_use_instead(
    project: tuple[str, dict[str, str]],
) -> None:
    name, env = project
    holders = []
    try:
        for variable in (
            "MINIBROKER_ZOOKEEPER_PORT",
            "MINIBROKER_PORT_2",
            "MINIBROKER_KAFKA_PORT_3",
        ):
            sock = socket.socket()
            sock.bind(("127.0.0.1", int(env[variable])))
            sock.listen()
            holders.append((variable, sock))
        up = _compose(env, "up")
        assert up.returncode == 1, up.stderr
        for variable, sock in holders:
            assert f"{sock.getsockname()[1]} ({variable}," in up.stderr, up.stderr
        suggested = dict(re.findall(r"(MINIBROKER_\w+)=(\d+)", up.stderr))
        assert set(suggested) == {variable for variable, _ in holders}, up.stderr
        configured = {
            int(value) for key, value in env.items() if re.fullmatch(r"MINIBROKER_\w*PORT\w*", key)
        }
        ports = [int(port) for port in suggested.values()]
        assert len(set(ports)) == len(ports), up.stderr
        for port in ports:
            assert port not in configured, up.stderr
            with socket.socket() as probe:
                assert probe.connect_ex(("127.0.0.1", port)) != 0, f"{port} is not free"
        assert _containers(name) == []
    finally:
        for _, sock in holders:
            sock.close()


def _fails_at_first(role: str, failures: int = 5) -> str:
    """A health check that fails the first ``failures`` times it runs, then is the real one,
    and counts as unhealthy from its first failure (compose's `$$` is a `$`)."""
    check = (
        "n=$$(cat /tmp/hc 2>/dev/null || echo 0); echo $$((n + 1)) >/tmp/hc; "
        f"[ $$n -ge {failures} ] && minibroker-healthcheck {role}"
    )
    return f"""
    healthcheck:
      test: ["CMD-SHELL", "{check}"]
      interval: 1s
      retries: 1
      start_period: 0s
"""


FLAKY = f"""
services:
  zookeeper:{_fails_at_first("zookeeper")}
  broker-1:{_fails_at_first("broker")}
"""


def test_up_waits_out_health_checks_that_fail_for_a_while(
    project: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    """Unhealthy is not final while MINIBROKER_UP_TIMEOUT runs: neither ZooKeeper's (on
    which compose's `up` of the brokers gives up) nor a broker's. An image named like the
    metrics profile's container must not start that profile."""
    name, env = project
    override = tmp_path / "override.yml"
    override.write_text(FLAKY)
    env |= {
        "MINIBROKER_COMPOSE_OVERRIDE": str(override),
        "MINIBROKER_UP_TIMEOUT": "600",
    }
    subprocess.run(["docker", "tag", "minibroker:latest", f"{name}-prometheus"], check=True)
    try:
        up = _compose(env, "up", timeout=900)
    finally:
        subprocess.run(["docker", "rmi", f"{name}-prometheus"], capture_output=True, check=False)
    assert up.returncode == 0, f"{up.stdout}\n{up.stderr}"
    assert f"broker-1 ({name}-broker-1) is unhealthy for now" in up.stderr, up.stderr
    assert not CONTAINER_ID.search(up.stderr), up.stderr
    assert "3 brokers are healthy" in up.stdout, up.stdout
    assert sorted(_containers(name)) == [
        f"{name}-{c}" for c in ("broker-1", "broker-2", "broker-3", "zookeeper")
    ]


NEVER_HEALTHY = """
services:
  zookeeper:
    healthcheck:
      test: ["CMD-SHELL", "echo 'planted failure'; exit 1"]
      interval: 1s
      retries: 1
      start_period: 0s
"""


def test_up_that_times_out_reports_every_container_by_name(
    project: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    name, env = project
    override = tmp_path / "override.yml"
    override.write_text(NEVER_HEALTHY)
    env |= {"MINIBROKER_COMPOSE_OVERRIDE": str(override), "MINIBROKER_UP_TIMEOUT": "30"}
    up = _compose(env, "up", timeout=600)
    assert up.returncode == 1, up.stderr
    assert "not healthy after 30 s" in up.stderr, up.stderr
    assert f"---- zookeeper ({name}-zookeeper): unhealthy; last health check:" in up.stderr
    assert "planted failure" in up.stderr
    assert "---- logs of zookeeper:" in up.stderr
    assert f"---- broker-1 ({name}-broker-1): " in up.stderr, up.stderr
    assert "(MINIBROKER_UP_TIMEOUT)" in up.stderr
    assert not CONTAINER_ID.search(up.stderr), up.stderr


SCRATCH = """
services:
  scratch:
    image: ${MINIBROKER_IMAGE:-minibroker:latest}
    entrypoint: ["sleep", "600"]
    networks: [minibroker]
    volumes:
      - scratch-data:/named
volumes:
  scratch-data: {}
"""


def _anonymous_volumes(container: str) -> list[str]:
    out = subprocess.run(
        [
            "docker",
            "container",
            "inspect",
            "-f",
            '{{range .Mounts}}{{if eq .Type "volume"}}{{println .Name}}{{end}}{{end}}',
            container,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return [v for v in out.split() if re.fullmatch(r"[0-9a-f]{64}", v)]


def _volume_exists(volume: str) -> bool:
    return (
        subprocess.run(["docker", "volume", "inspect", volume], capture_output=True).returncode == 0
    )


def test_down_removes_the_anonymous_volumes_and_keeps_the_named_ones(
    project: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    """The minibroker image declares VOLUME /data; a service that mounts no named volume
    there (Prometheus', Spark's) gets an anonymous one, which `compose down` keeps."""
    name, env = project
    override = tmp_path / "override.yml"
    override.write_text(SCRATCH)
    env |= {"MINIBROKER_COMPOSE_OVERRIDE": str(override)}
    started = _compose(env, "run", "-d", "--no-deps", "scratch")
    assert started.returncode == 0, started.stderr
    (container,) = _containers(name)
    (anonymous,) = _anonymous_volumes(container)
    down = _compose(env, "down")
    assert down.returncode == 0, down.stderr
    assert _containers(name) == []
    assert not _volume_exists(anonymous), f"down left the anonymous volume {anonymous}"
    assert _volume_exists(f"{name}_scratch-data"), "down removed a named volume"
