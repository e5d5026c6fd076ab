"""The two pre-0.11 failure scenarios of docs/replication.md, run as ``minibroker chaos scenario``
runs them (:mod:`chaos.scenario`): real ZooKeeper and broker processes, driven step by step.

Each scenario runs in both ``replication.truncation.mode`` settings: ``high-watermark``
(Kafka before 0.11) shows the bug, ``leader-epoch`` (KIP-101/KIP-279) shows it fixed. The
outcome is read twice: from the replicas' segment files (the data dirs copied into the run
directory after the clean stop), and from the audit's verdict on the run. One SparkSession
serves the four audits. Ctrl-C and SIGTERM during a run must leave no process behind.
"""

from __future__ import annotations

import html
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from broker.replication.truncation import TruncationMode
from chaos.audit.report import JSON_NAME
from chaos.audit.session import start_session
from chaos.run_dir import RunDir
from chaos.scenario.cluster import A, B
from chaos.scenario.play import TP
from chaos.scenario.runner import ScenarioResult, run_scenario
from chaos.scenario.verdict import Found, read_findings
from deploy.cluster_probe import replica_records

# A run is 15-30 s of processes, its audit 30-120 s on two loaded cores (the first one also
# starts Spark): more than the suite's default 300 s per test is possible.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

HW, LE = TruncationMode.HIGH_WATERMARK, TruncationMode.LEADER_EPOCH
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = start_session("local[2]", {"spark.sql.shuffle.partitions": "4"})
    try:
        yield session
    finally:
        session.stop()


def _values(run: RunDir, broker_id: int) -> list[bytes | None]:
    records = replica_records(run.data / f"broker-{broker_id}" / TP.dir_name)
    assert [o for o, _ in records] == list(range(len(records))), "gap in the replica's log"
    return [v for _, v in records]


def _timeline(run: RunDir) -> list[tuple[str, int]]:
    """The faults and elections of the timeline (its roles and marks left out)."""
    events = [json.loads(line) for line in run.timeline.read_text().splitlines()]
    return [(e["f"], e["target"]) for e in events if e["f"] not in ("roles", "mark")]


def _marks(run: RunDir) -> list[str]:
    """The scenario's key events, checked named on the report's time axis as well, with
    the narration's A and B mapped to broker ids."""
    events = [json.loads(line) for line in run.timeline.read_text().splitlines()]
    assert events[0]["f"] == "roles"
    assert events[0]["names"] == {"A": A, "B": B}
    page = run.report.read_text()
    assert f"Who is who: <b>A</b> = broker {A}, <b>B</b> = broker {B}" in page
    marks = [e["label"] for e in events if e["f"] == "mark"]
    for label in marks:
        assert '<text class="mark"' in page
        assert f">{html.escape(label)}</text>" in page
    return marks


def _acknowledged(run: RunDir) -> list[tuple[str, int]]:
    ops = [json.loads(line) for line in run.history.read_text().splitlines()]
    assert all(op["type"] == "ok" and op["process"] == 0 for op in ops), ops
    return [(op["value"], op["offset"]) for op in ops]


def _check_run(result: ScenarioResult, out: str, findings: set[Found]) -> None:
    """What every judged run leaves: the audit's findings, the verdict, the layout."""
    run = result.run
    assert set(read_findings(run.audit_dir / JSON_NAME)) == findings
    assert result.status == (1 if findings else 0)
    assert result.as_predicted, out
    assert "as the design notes predict" in out
    assert "UNEXPECTED" not in out
    assert out.rstrip().splitlines()[-1] == f"report: {run.report}"
    assert run.report.exists()
    assert {p.name for p in run.logs.iterdir()} == {"broker-1.log", "broker-2.log", "zookeeper.log"}
    assert not (run.path / "cluster").exists(), "the live cluster's dir is left after the copy"


@pytest.mark.parametrize("mode", [HW, LE])
def test_data_loss_when_the_restarted_follower_truncates_to_its_hw(
    mode: TruncationMode,
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = run_scenario("hw-data-loss", mode, tmp_path / "run", spark=spark)
    out = capsys.readouterr().out
    run = result.run
    assert _acknowledged(run) == [("m0", 0), ("m1", 1)]
    assert _timeline(run) == [
        ("start", A), ("start", B), ("kill", B), ("pause", A), ("start", B), ("kill", A),
        ("elect", B), ("start", A),
    ]  # fmt: skip
    if mode is HW:
        # B truncated to its stale HW 1 on restart; A, following B, cut m1 too.
        assert _values(run, A) == _values(run, B) == [b"m0"]
        _check_run(result, out, {Found("lost_ack", 1)})
        assert "the acknowledged m1 is lost (lost_ack at offset 1)" in out
        assert _marks(run) == [
            "m1 acknowledged", "B truncates m1", "B elected", "A truncates m1: m1 lost"
        ]  # fmt: skip
    else:
        assert _values(run, A) == _values(run, B) == [b"m0", b"m1"]
        _check_run(result, out, set())
        assert "nothing acknowledged is lost" in out
        assert _marks(run) == ["m1 acknowledged", "B keeps m1", "B elected", "A keeps m1"]


@pytest.mark.parametrize("mode", [HW, LE])
def test_divergence_after_an_unclean_election(
    mode: TruncationMode,
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = run_scenario("hw-divergence", mode, tmp_path / "run", spark=spark)
    out = capsys.readouterr().out
    run = result.run
    # m1 was acknowledged by A alone, m2 by B at the same offset after the unclean election.
    assert _acknowledged(run) == [("m0", 0), ("m1", 1), ("m2", 1)]
    assert _timeline(run) == [
        ("start", A), ("start", B), ("pause", B), ("kill", B), ("kill", A), ("start", B),
        ("unclean-elect", B), ("start", A),
    ]  # fmt: skip
    assert _values(run, B) == [b"m0", b"m2"]
    if mode is HW:
        # A kept offset 1 = m1 below its HW: the replicas disagree for good.
        assert _values(run, A) == [b"m0", b"m1"]
        _check_run(result, out, {Found("divergence", 1), Found("lost_ack", 1)})
        last = "A keeps m1: divergence"
    else:
        # A asked for the end of epoch 0 (offset 1), truncated m1 and copied m2.
        assert _values(run, A) == [b"m0", b"m2"]
        _check_run(result, out, {Found("lost_ack", 1)})
        assert "no divergence" in out
        last = "A truncates m1, copies m2"
    assert "the lost_ack is the price of the unclean election" in out
    assert _marks(run) == [
        "m1 acknowledged by A alone", "B elected uncleanly", "m2 at offset 1 on B", last
    ]  # fmt: skip


def _processes_of(run_dir: Path, but: int) -> set[int]:
    """Pids whose command line names ``run_dir`` (its brokers and ZooKeeper), but ``but``."""
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == but:
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        if str(run_dir).encode() in cmdline:
            found.add(int(proc.name))
    return found


@pytest.mark.parametrize(
    ("scenario", "during", "processes", "signum"),
    [
        # While the run waits for B's delayed HW: ZooKeeper, A and B run.
        ("hw-data-loss", "topic scenario:", 3, signal.SIGINT),
        # While m1 waits for A to drop the paused B from the ISR: B is SIGSTOPped.
        ("hw-divergence", "pause B (SIGSTOP)", 3, signal.SIGTERM),
    ],
)
def test_an_interrupted_scenario_leaves_no_process_behind(
    scenario: str, during: str, processes: int, signum: signal.Signals, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    command = [
        sys.executable, "-m", "client.cli", "chaos", "scenario", scenario,
        "--truncation-mode", "high-watermark", "--out", str(out),
    ]  # fmt: skip
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if during in line:
                break
        else:
            pytest.fail(f"the run ended before {during!r}: {''.join(seen)}")
        started = _processes_of(out, but=proc.pid)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(started) == processes, started
    assert proc.returncode == 128 + signum, err
    assert err.rstrip().splitlines()[-1] == (
        f"minibroker chaos scenario: interrupted ({signum.name}); every process it started "
        "is stopped"
    )
    assert "Traceback" not in err, err
    left = {pid for pid in started if os.path.exists(f"/proc/{pid}")}
    left |= _processes_of(out, but=proc.pid)
    assert not {pid for pid in left if str(out).encode() in _cmdline(pid)}, left


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
