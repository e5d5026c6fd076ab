"""``minibroker chaos run`` on the local backend: real processes broken and healed, judged
by the audit.

One run strikes every nemesis the local backend can do, each once and briefly (a replayed
schedule makes it deterministic), but the network's; a short run of ``partition`` and
``split`` has them (the brokers' cgroups cut apart by iptables, root only); another is
interrupted in the middle of a pause and must heal and stop everything; bad input is one
line and exit status 2 before anything starts.
"""

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

from chaos.runner import RunSettings, run_chaos
from chaos.schedule import Schedule, ScheduledFault
from deploy import process_cgroups
from deploy.local_cluster import partition_problem
from deploy.loopback_firewall import chain_name
from tests.helpers import cluster_up_on_free_ports, minibroker, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
SESSION_TIMEOUT_MS = 2000
LOCAL_NEMESES = [
    "cascade",  # first: it needs every ISR whole
    "kill",
    "bounce",
    "pause",
    "leader",
    "controller",
    "zk-expire",
    "torn-write",
    "zk-kill",
    "zk-quorum-loss",
]
"""Healing verb each nemesis writes to the timeline after its strike."""
STRIKES = {
    "cascade": "kill",
    "kill": "kill",
    "bounce": "stop",
    "pause": "pause",
    "leader": "kill",
    "controller": "kill",
    "zk-expire": "zk-expire",
    "torn-write": "torn-write",
    "zk-kill": "zk-kill",
    "zk-quorum-loss": "zk-kill",
}


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from chaos.audit.session import start_session

    session = start_session("local[2]", {})
    yield session
    session.stop()


def _schedule(path: Path, faults: list[tuple[str, float]], gap: float = 2.0) -> Path:
    """Each fault once, in order, ``gap`` seconds apart, held as given."""
    at, planned = gap, []
    for i, (name, hold) in enumerate(faults):
        planned.append(ScheduledFault(at, name, hold, (i * 0.37) % 1))
        at += hold + gap
    path.write_text(Schedule(0, at, gap, tuple(planned)).to_json())
    return path


def _processes_of(run_dir: Path) -> list[str]:
    """Command lines of processes still running with the run directory in them."""
    found = subprocess.run(
        ["pgrep", "-af", str(run_dir)], capture_output=True, text=True, check=False
    ).stdout
    return [line for line in found.splitlines() if "pgrep" not in line]


def _broker_stopped(run_dir: Path, broker_id: int) -> bool:
    """Whether the run's broker ``broker_id`` is in the stopped state (SIGSTOP)."""
    for line in _processes_of(run_dir):
        pid, _, command = line.partition(" ")
        if f"broker --id {broker_id} " in command:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                return False
            return stat.rpartition(")")[2].split()[0] == "T"
    return False


def _timeline(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "timeline.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_every_local_nemesis_strikes_heals_and_the_audit_finds_nothing(
    tmp_path: Path, spark: Any
) -> None:
    holds = {"pause": SESSION_TIMEOUT_MS / 1000 * 1.5 + 1}
    replay = _schedule(tmp_path / "schedule.json", [(n, holds.get(n, 2.0)) for n in LOCAL_NEMESES])
    run_dir = tmp_path / "run"
    status = run_chaos(
        RunSettings(
            out=run_dir,
            replay=replay,
            producers=2,
            rate=50,
            consumers=1,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            spark=spark,
        )
    )
    assert status == 0, (run_dir / "audit" / "summary.txt").read_text()

    events = _timeline(run_dir)
    for name, strike in STRIKES.items():
        assert any(e["f"] == strike and e.get("nemesis") == name for e in events), name
    assert not [e for e in events if e["f"] == "skipped"], events
    # Each fault: its strike begins, it is in place, it is healed, in that order.
    per_fault = [e["f"] for e in events if e["f"] in ("strike", "fault", "healed")]
    assert per_fault == ["strike", "fault", "healed"] * len(LOCAL_NEMESES), per_fault
    # Healed: every broker that was killed, stopped or paused came back.
    assert sum(e["f"] == "start" for e in events) >= 5
    assert any(e["f"] == "resume" for e in events)
    assert sum(e["f"] == "zk-start" for e in events) == 3  # one node, then two

    for name in ("history.jsonl", "timeline.jsonl", "schedule.json"):
        assert (run_dir / name).is_file(), name
    for broker in (1, 2, 3):
        assert (run_dir / "data" / f"broker-{broker}" / "meta.properties").is_file()
        assert (run_dir / "logs" / f"broker-{broker}.log").is_file()
    report = json.loads((run_dir / "audit" / "report.json").read_text())
    assert report["violations"] == []
    assert (run_dir / "audit" / "report.html").is_file()
    history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    acked = [h for h in history if h["type"] == "ok"]
    assert len(acked) > 100
    assert sum(h["type"] == "read" for h in history) >= len(acked)  # consumers + final read
    assert not _processes_of(run_dir), "the run left processes behind"


@pytest.mark.parametrize("mode", ["high-watermark", "leader-epoch"])
def test_a_cascade_loses_acknowledged_writes_only_without_leader_epochs(
    tmp_path: Path, spark: Any, mode: str
) -> None:
    """KIP-101's first case under real faults: the leader and its successor die in turn,
    and the last in-sync follower, told to follow the dead successor, cuts its log to its
    high watermark before it leads (high-watermark mode), or keeps it (leader-epoch mode).
    The followers' high watermarks are held 500 ms behind (a test-only setting) so that
    acknowledged records certainly sit above them when the leader dies."""
    replay = _schedule(tmp_path / "schedule.json", [("cascade", 3.0)], gap=4.0)
    run_dir = tmp_path / "run"
    status = run_chaos(
        RunSettings(
            out=run_dir,
            replay=replay,
            producers=2,
            rate=50,
            consumers=1,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            truncation_mode=mode,
            extra_overrides={"test.follower.hw.update.delay.ms": "500"},
            spark=spark,
        )
    )
    events = _timeline(run_dir)
    cascade = [e for e in events if e["f"] == "cascade"]
    assert len(cascade) == 1, events
    leader, successor, follower = cascade[0]["target"]
    assert [e["target"] for e in events if e["f"] == "kill"] == [leader, successor]
    tp = cascade[0]["tp"]
    followed = f"event=became_follower broker={follower} tp={tp} leader={successor} "
    log = (run_dir / "logs" / f"broker-{follower}.log").read_text()
    assert followed in log, f"broker {follower} never followed {successor} for {tp}"
    kinds = {
        v["kind"] for v in json.loads((run_dir / "audit" / "report.json").read_text())["violations"]
    }
    if mode == "high-watermark":
        assert status == 1
        assert "lost_ack" in kinds, kinds
    else:
        assert status == 0, (run_dir / "audit" / "summary.txt").read_text()
        assert kinds == set()


FAULT_EVENTS = {"strike", "fault", "healed", "skipped"}
"""The runner's own lines about a fault as a whole (docs/chaos.md), beside the broker steps."""


@pytest.mark.skipif(os.geteuid() != 0, reason="disk-full mounts a tmpfs per broker (root only)")
def test_a_full_disk_takes_a_log_dir_offline_and_the_audit_finds_nothing_lost(
    tmp_path: Path, spark: Any
) -> None:
    """disk-full on a cluster the run starts with a tmpfs per broker: the struck broker's
    next write fails, its log dir goes offline, the controller moves its leaderships, and
    after the space is freed and the broker restarted it rejoins; nothing acknowledged is
    lost, and `cluster down` leaves the data on disk for the audit."""
    replay = _schedule(tmp_path / "schedule.json", [("disk-full", 4.0)], gap=4.0)
    run_dir = tmp_path / "run"
    status = run_chaos(
        RunSettings(
            out=run_dir,
            replay=replay,
            producers=2,
            rate=50,
            consumers=1,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            spark=spark,
        )
    )
    assert status == 0, (run_dir / "audit" / "summary.txt").read_text()
    events = _timeline(run_dir)
    full = [e for e in events if e["f"] == "disk-full"]
    assert len(full) == 1, events
    broker = full[0]["target"]
    steps = [e["f"] for e in events if e.get("target") == broker and e["f"] not in FAULT_EVENTS]
    assert steps[-3:] == ["disk-freed", "kill", "start"]
    assert [e["f"] for e in events if e.get("nemesis") == "disk-full"][-1] == "healed"
    log = (run_dir / "logs" / f"broker-{broker}.log").read_text()
    assert "event=log_dir_offline" in log
    assert "No space left on device" in log
    for b in (1, 2, 3):
        data = run_dir / "data" / f"broker-{b}"
        assert not os.path.ismount(data)
        assert (data / "meta.properties").is_file()
    assert json.loads((run_dir / "audit" / "report.json").read_text())["violations"] == []
    assert not _processes_of(run_dir), "the run left processes behind"


def test_partitions_on_the_local_backend_heal_and_the_audit_finds_nothing(
    tmp_path: Path, spark: Any
) -> None:
    """``chaos run --nemesis partition,split`` on a cluster the run starts: a broker cut off
    alone, then two together (held past the session timeout, so ZooKeeper expires them and
    the controller elects new leaders), each healed; the audit is clean and the run leaves
    no chain, cgroup or process behind."""
    problem = partition_problem()
    assert problem is None, f"this machine cannot partition a local cluster: {problem}"
    run_dir = tmp_path / "run"
    status = run_chaos(
        RunSettings(
            out=run_dir,
            nemeses=("partition", "split"),
            duration_s=30,
            interval_s=8,
            seed=1,  # a partition at 4.5 s, a split at 16.5 s, each held 4 s
            producers=2,
            rate=50,
            consumers=1,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            spark=spark,
        )
    )
    assert status == 0, (run_dir / "audit" / "summary.txt").read_text()
    events = _timeline(run_dir)
    struck = [(e["f"], e["target"]) for e in events if e["f"] in ("partition", "split")]
    assert [f for f, _ in struck] == ["partition", "split"], events
    assert [len(groups[1]) for _, groups in struck] == [1, 2], struck  # who was cut off
    assert [e["target"] for e in events if e["f"] == "heal"] == [t for _, t in struck]
    per_fault = [e["f"] for e in events if e["f"] in ("strike", "fault", "healed")]
    assert per_fault == ["strike", "fault", "healed"] * 2, per_fault
    assert json.loads((run_dir / "audit" / "report.json").read_text())["violations"] == []

    cluster_key = process_cgroups.cluster_key(run_dir / "data")
    iptables = subprocess.run(
        ["iptables", "-w", "-S"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    assert chain_name(cluster_key) not in iptables
    cgroups = process_cgroups.ClusterCgroups.of(run_dir / "data")
    assert cgroups is not None
    assert not cgroups.parent.exists()
    assert not _processes_of(run_dir), "the run left processes behind"


def test_an_interrupted_run_heals_the_paused_broker_and_stops_everything(
    tmp_path: Path,
) -> None:
    replay = _schedule(tmp_path / "schedule.json", [("pause", 120.0)])
    run_dir = tmp_path / "run"
    run = subprocess.Popen(
        [
            sys.executable, "-m", "client.cli", "chaos", "run", "--replay", str(replay),
            "--out", str(run_dir), "--producers", "1", "--rate", "20",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        wait_for(
            lambda: any(e["f"] == "pause" for e in _timeline(run_dir)),
            180,
            message="the pause to strike",
        )
        paused = next(e["target"] for e in _timeline(run_dir) if e["f"] == "pause")
        wait_for(
            lambda: _broker_stopped(run_dir, paused),
            30,
            message=f"broker {paused} to be frozen (SIGSTOP) in the fault's hold",
        )
        run.send_signal(signal.SIGINT)
        output, _ = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 2, output
    assert "interrupted" in output
    assert str(run_dir) in output.splitlines()[-1]
    events = _timeline(run_dir)
    assert any(e["f"] == "resume" and e["target"] == paused for e in events), events
    assert not _processes_of(run_dir), "the interrupted run left processes behind"
    assert (run_dir / "history.jsonl").is_file()


def test_a_run_on_a_running_cluster_leaves_it_running_and_audits_its_data(
    tmp_path: Path, cluster_dir: Path
) -> None:
    """``chaos run --data-dir`` on the user's cluster (`cluster up`): the run heals its fault
    and leaves every broker running, copies the data dirs after the final read and audits
    them; its output, piped (no terminal), has one line per strike and heal."""
    cluster_up_on_free_ports(cluster_dir)
    data = ["--data-dir", str(cluster_dir)]
    replay = _schedule(tmp_path / "schedule.json", [("kill", 2.0)])
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [
            sys.executable, "-m", "client.cli", "chaos", "run", "--replay", str(replay),
            *data, "--out", str(run_dir), "--producers", "1", "--rate", "20",
            "--master", "local[1]",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output

    status = minibroker("cluster", "status", *data)
    assert status.returncode == 0, status.stderr
    assert status.stdout.count("yes") == 3, status.stdout  # every broker still running

    assert (run_dir / "audit" / "report.html").is_file(), output
    assert done.stdout.strip().splitlines()[-1].endswith(str(run_dir / "audit" / "report.html"))
    report = json.loads((run_dir / "audit" / "report.json").read_text())
    assert report["violations"] == []
    assert sorted(report["summary"]["brokers"]) == ["1", "2", "3"]
    chaos = [p for p in report["summary"]["partitions"] if p["topic"].startswith("chaos-")]
    assert chaos, report["summary"]["partitions"]
    assert sum(p["acked_checked"] for p in chaos) > 0  # the audit saw the acknowledged data
    assert all(len(p["replicas"]) == 3 for p in chaos)

    killed = next(e["target"] for e in _timeline(run_dir) if e["f"] == "fault")
    lines = done.stdout.splitlines()
    assert any(f"kill {killed} struck" in line for line in lines), done.stdout
    assert any(f"kill {killed} healed" in line for line in lines), done.stdout


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--nemesis", "cleaner-crash"], "run with --compacted"),
        (["--nemesis", "meteor"], "unknown nemesis 'meteor'"),
    ],
)
def test_what_the_backend_cannot_do_is_one_line_and_exit_2(
    tmp_path: Path, args: list[str], problem: str
) -> None:
    done = minibroker("chaos", "run", "--out", str(tmp_path / "run"), *args, timeout=60)
    assert done.returncode == 2
    assert problem in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run" / "data").exists()  # nothing was started


def test_an_out_dir_holding_a_run_and_a_bad_replay_are_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    held = tmp_path / "held"
    held.mkdir()
    (held / "history.jsonl").write_text("")
    done = minibroker("chaos", "run", "--out", str(held), timeout=60)
    assert done.returncode == 2
    assert "already holds a run" in done.stderr

    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    done = minibroker(
        "chaos", "run", "--replay", str(bad), "--out", str(tmp_path / "fresh"), timeout=60
    )
    assert done.returncode == 2
    assert "not JSON" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
