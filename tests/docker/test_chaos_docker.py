"""``minibroker chaos run --backend docker``: the faults only containers can have (network
partitions, a ZooKeeper ensemble losing nodes), and the transaction path's faults through
the same Backend interface, on a cluster the run starts under its own compose project,
judged by the audit; nothing of it is left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.matrix import run_matrix
from chaos.runner import RunSettings, run_chaos
from chaos.schedule import Schedule, ScheduledFault
from chaos.workload import MIXED, is_kafka_client_resend
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(1800)

REPO = Path(__file__).resolve().parents[2]

SESSION_TIMEOUT_MS = 3000
KAFKA_CLIENT_RESENDS = "resent"
"""The one finding a run with Kafka's own clients may have: librdkafka resends a record in
doubt under a new epoch (docs/chaos.md, "Idempotent producers and duplicates"); never
one of a gRPC producer's values."""


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from chaos.audit.session import start_session

    session = start_session("local[2]", {})
    yield session
    session.stop()


def _docker_names(kind: str) -> list[str]:
    listed = subprocess.run(
        ["docker", kind, "ls", "--format", "{{.Name}}"] if kind != "ps" else
        ["docker", "ps", "-a", "--format", "{{.Names}}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return listed.stdout.split()


def test_partitions_and_zookeeper_faults_on_containers_heal_and_the_audit_finds_nothing(
    docker_engine: None, tmp_path: Path, spark: Any
) -> None:
    faults = [("partition", 5.0), ("split", 5.0), ("zk-kill", 5.0), ("pause", 6.0)]
    at, planned = 5.0, []
    for i, (name, hold) in enumerate(faults):
        planned.append(ScheduledFault(at, name, hold, (0.2 + i * 0.3) % 1))
        at += hold + 3.0
    replay = tmp_path / "schedule.json"
    replay.write_text(Schedule(0, at, 3.0, tuple(planned)).to_json())
    before = {kind: set(_docker_names(kind)) for kind in ("ps", "network", "volume")}

    run_dir = tmp_path / "run"
    status = run_chaos(
        RunSettings(
            out=run_dir,
            backend="docker",
            replay=replay,
            producers=2,
            rate=50,
            consumers=1,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            spark=spark,
        )
    )
    assert status == 0, (run_dir / "audit" / "summary.txt").read_text()
    events = [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()]
    struck = {e["f"] for e in events}
    assert {"partition", "split", "heal", "zk-kill", "zk-start", "pause", "resume"} <= struck
    assert not [e for e in events if e["f"] == "skipped"], events
    for broker in (1, 2, 3):
        assert (run_dir / "data" / f"broker-{broker}" / "meta.properties").is_file()
    assert json.loads((run_dir / "audit" / "report.json").read_text())["violations"] == []
    # The run's own project is gone: containers, networks (the split one too) and volumes.
    after = {kind: set(_docker_names(kind)) for kind in ("ps", "network", "volume")}
    for kind in after:
        assert not [n for n in after[kind] - before[kind] if n.startswith("chaos-")], kind


def test_the_transaction_coordinator_killed_and_frozen_in_containers(
    docker_engine: None, tmp_path: Path, spark: Any
) -> None:
    """The transactions workload on containers: a producer's transaction coordinator
    ``docker kill``ed, then frozen past its session timeout, found in ZooKeeper as on the
    local backend; the run waits out the transaction timeout and the audit finds it clean
    (what each transaction check finds is its own tests' to say)."""
    faults = (
        ScheduledFault(4.0, "kill-txn-coordinator", 3.0, 0.3),
        ScheduledFault(10.0, "pause-txn-coordinator", 6.0, 0.8),
    )
    replay = tmp_path / "schedule.json"
    replay.write_text(Schedule(0, 19.0, 3.0, faults).to_json())
    run_dir = tmp_path / "run"
    status = run_chaos(
        RunSettings(
            out=run_dir,
            backend="docker",
            replay=replay,
            producers=2,
            rate=50,
            consumers=1,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            workload="transactions",
            transaction_timeout_ms=5000,
            spark=spark,
        )
    )
    assert status == 0, (run_dir / "audit" / "summary.txt").read_text()  # clean
    events = [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()]
    struck = {e.get("nemesis"): e for e in events if e["f"] in ("kill", "pause")}
    assert struck["kill-txn-coordinator"]["tp"].startswith("__transaction_state-"), events
    assert struck["pause-txn-coordinator"]["f"] == "pause"
    assert not [e for e in events if e["f"] == "skipped"], events
    assert events[-1]["f"] == "transactions-settled"
    history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    ended = {(h["f"], h["type"]) for h in history if h.get("f") in ("commit", "abort")}
    assert {("commit", "ok"), ("abort", "ok")} <= ended


def test_every_other_docker_nemesis_with_kafkas_own_clients(
    docker_engine: None, tmp_path: Path, spark: Any
) -> None:
    """The nemeses the first chaos issue left untested on Docker: a cascade (first: it
    needs every ISR whole), ZooKeeper's quorum lost and a broker's session expired on a
    3-node ensemble, a torn write, each once, under the mixed workload (gRPC producers,
    confluent-kafka and aiokafka through the containers' published Kafka listeners, both
    consumer groups): every fault strikes and heals and the audit, the group checks
    included, finds nothing but the Kafka clients' resends (:data:`KAFKA_CLIENT_RESENDS`)."""
    faults = [("cascade", 4.0), ("zk-quorum-loss", 5.0), ("zk-expire", 4.0), ("torn-write", 3.0)]
    at, planned = 5.0, []
    for i, (name, hold) in enumerate(faults):
        planned.append(ScheduledFault(at, name, hold, (0.4 + i * 0.3) % 1))
        at += hold + 4.0
    replay = tmp_path / "schedule.json"
    replay.write_text(Schedule(0, at, 4.0, tuple(planned)).to_json())
    run_dir = tmp_path / "run"
    status = run_chaos(
        RunSettings(
            out=run_dir,
            backend="docker",
            replay=replay,
            producers=3,
            rate=40,
            consumers=1,
            client="mixed",
            session_timeout_ms=SESSION_TIMEOUT_MS,
            spark=spark,
        )
    )
    report = json.loads((run_dir / "audit" / "report.json").read_text())
    found = {v["kind"] for v in report["violations"]}
    assert found <= {KAFKA_CLIENT_RESENDS}, (run_dir / "audit" / "summary.txt").read_text()
    for violation in report["violations"]:
        assert is_kafka_client_resend(violation, MIXED), violation
    assert status == (1 if found else 0)
    events = [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()]
    assert not [e for e in events if e["f"] == "skipped"], events
    struck = {e.get("nemesis") for e in events if e["f"] == "fault"}
    assert struck == {name for name, _ in faults}, events
    assert {"kill", "zk-kill", "zk-start", "zk-expire", "torn-write"} <= {e["f"] for e in events}
    groups = report["summary"]["groups"]
    assert groups["commits"]["ok"] > 0
    assert groups["reads"] > 0
    history = (run_dir / "history.jsonl").read_text()
    assert '"f":"commit_offsets"' in history
    assert '"group":"chaos-kafka-readers"' in history


def test_ctrl_c_on_docker_heals_and_removes_the_runs_project(
    docker_engine: None, tmp_path: Path
) -> None:
    """SIGINT while a container is paused: the run resumes it, stops the workload, removes
    its own compose project (containers, networks, volumes) and exits 2 saying where its
    files are."""
    before = {kind: set(_docker_names(kind)) for kind in ("ps", "network", "volume")}
    replay = tmp_path / "schedule.json"
    replay.write_text(Schedule(0, 120.0, 5.0, (ScheduledFault(3.0, "pause", 90.0, 0.5),)).to_json())
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "client.cli", "chaos", "run", "--backend", "docker",
         "--replay", str(replay), "--producers", "1", "--rate", "20", "--out", str(run_dir)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        timeline = run_dir / "timeline.jsonl"

        def paused() -> bool:
            assert process.poll() is None, process.communicate()[0]
            return '"f":"pause"' in (timeline.read_text() if timeline.exists() else "")

        wait_for(paused, 900, interval=0.5, message="the pause never struck")
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 2, out
    assert "interrupted" in out
    events = [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()]
    assert "resume" in {e["f"] for e in events}, events
    after = {kind: set(_docker_names(kind)) for kind in ("ps", "network", "volume")}
    for kind in after:
        assert not [n for n in after[kind] - before[kind] if n.startswith("chaos-")], kind


def test_no_engine_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """With DOCKER_HOST naming no engine, ``chaos run --backend docker`` starts nothing and
    says so in one line."""
    done = subprocess.run(
        [sys.executable, "-m", "client.cli", "chaos", "run", "--backend", "docker",
         "--duration", "10", "--out", str(tmp_path / "run")],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "DOCKER_HOST": f"unix://{tmp_path / 'no-engine.sock'}"},
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "docker" in lines[0].lower()


def test_chaos_matrix_on_docker_runs_its_cells_on_containers_and_audits_them(
    docker_engine: None, tmp_path: Path, spark: Any
) -> None:
    """``chaos matrix --backend docker``, two of its cells (a hard bounce of the leader, a
    clean shutdown of the controller: both failure kinds, both targets), each on a compose
    project of its own: the fault strikes and heals and the audit finds nothing."""
    out = tmp_path / "matrix"
    cells = ["hard-bounce-leader", "clean-shutdown-controller"]
    before = {kind: set(_docker_names(kind)) for kind in ("ps", "network", "volume")}
    status = run_matrix(
        out, backend="docker", cell_duration_s=14, producers=1, rate=40, spark=spark,
        quiet=True, only=cells,
    )  # fmt: skip
    found = json.loads((out / "matrix.json").read_text())["cells"]
    assert status == 0, found
    assert [(c["failure_mode"], c["broker_type"]) for c in found] == [
        ("hard_bounce", "leader"),
        ("clean_shutdown", "controller"),
    ]
    for cell in found:
        assert (cell["status"], cell["violations"]) == (0, 0), cell
        assert cell["acked"] > 0, cell
        events = [
            json.loads(line)
            for line in (Path(cell["run_dir"]) / "timeline.jsonl").read_text().splitlines()
        ]
        assert [e["f"] for e in events if e["f"] in ("strike", "healed")] == ["strike", "healed"]
    after = {kind: set(_docker_names(kind)) for kind in ("ps", "network", "volume")}
    for kind in after:
        assert not [n for n in after[kind] - before[kind] if n.startswith("chaos-")], kind
