"""`make up-spark` and `make audit-spark`: the audit of the Docker cluster's logs in place, on
Spark's standalone master and worker of the compose profile "spark".

Run on the session's Docker cluster (already up): records are produced with acks=all to a
topic of its own, `make up-spark` adds the master and a worker (mounting the brokers' data
volumes read-only), and `make audit-spark` runs the audit's driver in a one-off container on
that master. The report must show every replica of the topic decoded by the cluster's
executors, record for record, and no violation in it. The Spark containers are removed at
the end.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docker.conftest import DockerCluster, _free_ports, minibroker, profile_up

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(2400)]

PARTITIONS = 3
RECORDS = 30_000
AUDIT_TIMEOUT_S = 900


@pytest.fixture
def spark_env(docker_cluster: DockerCluster, tmp_path: Path) -> Iterator[dict[str, str]]:
    """`make up-spark` on the session's cluster; the Spark containers removed at the end."""
    (ui_port,) = _free_ports(1)
    env = {
        **docker_cluster.env,
        "MINIBROKER_SPARK_UI_PORT": str(ui_port),
        "MINIBROKER_AUDIT_REPORT_DIR": str(tmp_path / "report"),
    }
    with profile_up(docker_cluster, "up-spark", env, ["spark-master", "spark-worker"]) as up:
        assert f"http://127.0.0.1:{ui_port}" in up.stdout
        # The audit's one-off service is not started by `up` (it stayed as <project>_audit_1).
        assert not [name for name in _project_containers(docker_cluster.project) if "audit" in name]
        yield env


def _project_containers(project: str) -> list[str]:
    return subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label=com.docker.compose.project={project}",
         "--format", "{{.Names}}"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split()  # fmt: skip


def test_the_audit_runs_on_the_spark_profile_over_the_brokers_volumes(
    docker_cluster: DockerCluster, spark_env: dict[str, str]
) -> None:
    topic = f"spark-{uuid.uuid4().hex[:8]}"
    connect = ("--bootstrap-server", docker_cluster.bootstrap)
    minibroker(
        "topics", "create", topic, "--partitions", str(PARTITIONS), "--replication-factor", "3",
        *connect, "--zookeeper", docker_cluster.zookeeper,
    )  # fmt: skip
    minibroker(
        "perf", "produce", topic, "--num-records", str(RECORDS), "--record-size", "100",
        "--acks", "all", *connect,
    )  # fmt: skip

    audit = docker_cluster.make("audit-spark", timeout=AUDIT_TIMEOUT_S, env=spark_env)
    # 0 clean; 1 when another test's topic on this session's cluster shows a violation.
    assert audit.returncode in (0, 1), (
        f"make audit-spark exited {audit.returncode}:\n"
        f"{audit.stdout[-4000:]}\n{audit.stderr[-4000:]}"
    )
    report_dir = spark_env["MINIBROKER_AUDIT_REPORT_DIR"]
    # The paths it prints are the host's, not the container's mount point.
    assert f"{report_dir}" in audit.stdout + audit.stderr, audit.stdout + audit.stderr
    assert " /report" not in audit.stdout + audit.stderr
    report = json.loads((Path(report_dir) / "report.json").read_text())
    summary = report["summary"]
    assert summary["brokers"] == {str(b): f"/data/broker-{b}" for b in (1, 2, 3)}
    ours = [p for p in summary["partitions"] if p["topic"] == topic]
    assert sorted(p["partition"] for p in ours) == list(range(PARTITIONS))
    for partition in ours:
        assert partition["violations"] == 0, partition
        replicas = partition["replicas"]
        assert sorted(r["broker"] for r in replicas) == [1, 2, 3]
        # Every replica decoded in full by the executors: as many records as its log holds.
        assert {r["records"] for r in replicas} == {replicas[0]["log_end_offset"]}, replicas
    assert sum(p["replicas"][0]["records"] for p in ours) == RECORDS
    assert not [v for v in report.get("violations", []) if v.get("topic") == topic]
