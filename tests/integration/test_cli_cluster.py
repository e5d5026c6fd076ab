"""``minibroker cluster ...`` as a user runs it: subprocesses against real processes."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import free_port_run, minibroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    data_dir = tmp_path / "cluster"
    yield data_dir
    if (data_dir / "cluster.json").exists():
        minibroker("cluster", "down", "--data-dir", str(data_dir))


def test_cluster_up_status_kill_start_stop_down(cluster_dir: Path) -> None:
    base = free_port_run(4)
    data = ["--data-dir", str(cluster_dir)]
    up = minibroker(
        "cluster", "up", *data, "--base-port", str(base), "--zookeeper-port", str(base + 3)
    )
    assert up.returncode == 0, up.stderr
    assert f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}" in up.stdout
    assert (cluster_dir / "cluster.json").exists()
    assert (cluster_dir / "logs" / "broker-1.log").exists()

    status = minibroker("cluster", "status", *data)
    assert status.returncode == 0, status.stderr
    assert "Controller: " in status.stdout
    assert status.stdout.count("yes") == 3

    # `make run` then the README's `cluster up`: the second up has nothing to do.
    again = minibroker("cluster", "up", *data, "--base-port", str(base))
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stdout
    assert f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}" in again.stdout

    assert minibroker("cluster", "kill", "2", *data).returncode == 0
    after_kill = minibroker("cluster", "status", *data).stdout
    assert "not running" in after_kill
    partly = minibroker("cluster", "up", *data, "--base-port", str(base))
    assert partly.returncode == 1
    assert "already running" in partly.stderr
    assert "`minibroker cluster start 2`" in partly.stderr
    assert "Traceback" not in partly.stderr
    assert minibroker("cluster", "start", "2", *data).returncode == 0
    assert minibroker("cluster", "stop", "3", *data).returncode == 0
    stopped = minibroker("cluster", "status", *data).stdout
    assert stopped.count("not running") == 1

    no_such = minibroker("cluster", "kill", "7", *data)
    assert no_such.returncode == 1
    assert "not part of this cluster" in no_such.stderr

    down = minibroker("cluster", "down", *data)
    assert down.returncode == 0, down.stderr
    assert not (cluster_dir / "cluster.json").exists()
    gone = minibroker("cluster", "status", *data)
    assert gone.returncode == 1
    assert "no cluster" in gone.stderr


def test_cluster_up_refuses_a_taken_port_with_one_line(cluster_dir: Path) -> None:
    base = free_port_run(4)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", base + 1))
        squatter.listen()
        result = minibroker(
            "cluster", "up", "--data-dir", str(cluster_dir),
            "--base-port", str(base), "--zookeeper-port", str(base + 3),
        )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert f"broker 2 port {base + 1} already in use" in result.stderr
    assert not (cluster_dir / "cluster.json").exists()
