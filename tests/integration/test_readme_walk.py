"""The README's walk through Kafka's tools ("Use your Kafka tools"), run as it stands: its
shell block through the minibroker command line, then its Python block in a separate
process (librdkafka inside), both against a real cluster whose Kafka listener replaces the
walk's 127.0.0.1:19091."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.cluster import running_cluster
from tests.helpers import minibroker
from tests.integration.test_kafka_listener import KAFKA_PORT_FREE, kafka_bootstrap

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

README = Path(__file__).resolve().parents[2] / "README.md"
WALK_BOOTSTRAP = "127.0.0.1:19091"


def walk_blocks() -> tuple[str, str]:
    """The shell and Python blocks that follow the README's ``<!-- walk -->`` marker."""
    text = README.read_text()
    after = text[text.index("<!-- walk -->") :]
    shell, python = re.findall(r"```(?:sh|python)\n(.*?)```", after, flags=re.S)[:2]
    return shell, python


def test_the_readme_walk_runs_against_a_cluster(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    shell, python = walk_blocks()
    commands = [line for line in shell.splitlines() if line and not line.startswith("#")]
    assert commands
    assert all(c.startswith("minibroker ") for c in commands)
    with running_cluster(zk_client, zk_connect, tmp_path, overrides=KAFKA_PORT_FREE) as cluster:
        cluster.wait_for_controller()
        for command in commands:
            done = minibroker(*shlex.split(command)[1:], "--zookeeper", zk_connect, timeout=60)
            assert done.returncode == 0, done.stderr
        script = tmp_path / "walk.py"
        script.write_text(python.replace(WALK_BOOTSTRAP, kafka_bootstrap(cluster)))
        walked = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
        assert walked.returncode == 0, walked.stderr
        out = walked.stdout
        assert "'walkers'" in out
        assert re.search(r"^walk-0 committed \d+ end 50 lag \d+$", out, flags=re.M), out
        assert "86400000" in out
        assert re.search(r"^10$", out, flags=re.M), out
        throttles = re.search(r"^150 kB in ([\d.]+) s, throttled (\d+) times$", out, flags=re.M)
        assert throttles is not None, out
        assert int(throttles.group(2)) > 0
        # 150 kB at 10 kB/s is 15 s, less the 10 s the first window's rate is spread over
        assert float(throttles.group(1)) >= 2.0
