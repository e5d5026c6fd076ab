"""The chaos runner's schedule loop, console and verdict, with stand-in nemeses and cluster.

The schedule loop runs for real (real threads, real sleeps, the real timeline file); only
the cluster is replaced: the nemeses strike nothing, and whether the ISRs are whole comes
from a stand-in for the ZooKeeper query. What a real cluster does is in
tests/integration/test_chaos_run.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any, cast

import pytest

from chaos import runner
from chaos.history_recorder import TimelineRecorder
from chaos.nemesis import NEMESES, Fault, Nemesis, NemesisContext, NoTargetError
from chaos.run_dir import EXIT_CANNOT_RUN, EXIT_NOTHING_TESTED, RunDir
from chaos.run_stats import RunStats
from chaos.runner import RunSettings, _Progress, _Run, no_fault_fits, run_verdict
from chaos.schedule import Schedule, ScheduledFault, make_schedule
from proto.topic_partition import TopicPartition
from tests.helpers import wait_for

TPS = [TopicPartition("t", 0)]


class _Healing(Nemesis):
    """Strikes broker 7 (taking ``strike_s`` to do it), heals at once."""

    name = "stand-in"

    def __init__(self, strike_s: float = 0.0, until: Any = None) -> None:
        self.strike_s = strike_s
        self.until = until

    def strike(self, ctx: NemesisContext, pick: float) -> Fault:
        if self.until is not None:
            wait_for(self.until, 60, message="the condition the strike waits for")
        time.sleep(self.strike_s)
        return Fault(self.name, 7, lambda: None)


class _NoTarget(Nemesis):
    name = "stand-in-no-target"

    def strike(self, ctx: NemesisContext, pick: float) -> Fault:
        raise NoTargetError("nothing to hit")


def _run(tmp_path: Path, *, every_s: float = 10.0) -> _Run:
    run = _Run(RunSettings(out=tmp_path / "run"), RunDir.create(tmp_path / "run"), None)
    run.backend = cast(Any, object())
    run.zk = cast(Any, object())
    run.progress = _Progress(False, run._count_acks, tty=False, every_s=every_s)
    return run


def _timeline(run: _Run) -> list[dict[str, Any]]:
    return [json.loads(line) for line in run.run.timeline.read_text().splitlines()]


def _execute(run: _Run, faults: list[ScheduledFault], duration_s: float = 0.0) -> None:
    timeline = TimelineRecorder(run.run.timeline)
    try:
        run._run_schedule(Schedule(0, duration_s, 1.0, tuple(faults)), timeline, TPS)
    finally:
        run.progress.stop()
        timeline.close()


@pytest.fixture
def isr_checks(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """ISRs not whole on the first two looks after each heal, whole on the third; returns
    the times of the looks."""
    looks: list[float] = []
    calls = {"n": 0}

    def under_replicated(zk: object, tps: object) -> dict[TopicPartition, str]:
        looks.append(time.time())
        calls["n"] += 1
        if calls["n"] % 3:
            return {TPS[0]: "lacks 2"}
        return {}

    monkeypatch.setattr(runner, "under_replicated", under_replicated)
    return looks


def test_each_fault_is_struck_held_from_its_strike_healed_and_the_next_waits_for_whole_isrs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    isr_checks: list[float],
) -> None:
    monkeypatch.setitem(NEMESES, "stand-in", _Healing(strike_s=0.3))
    monkeypatch.setitem(NEMESES, "stand-in-no-target", _NoTarget())
    run = _run(tmp_path)
    _execute(
        run,
        [  # all due at once: each must still wait for the one before
            ScheduledFault(0.0, "stand-in", 0.3, 0.0),
            ScheduledFault(0.0, "stand-in-no-target", 0.3, 0.0),
            ScheduledFault(0.0, "stand-in", 0.2, 0.0),
        ],
    )
    events = _timeline(run)
    assert [e["f"] for e in events] == [
        "run-start",
        "strike", "fault", "healed", "isr-whole",
        "strike", "skipped",
        "strike", "fault", "healed", "isr-whole",
        "run-end",
    ]  # fmt: skip
    strikes = [e for e in events if e["f"] == "strike"]
    assert [(e["target"], e["nemesis"], e["hold_s"]) for e in strikes] == [
        (None, "stand-in", 0.3),
        (None, "stand-in-no-target", 0.3),
        (None, "stand-in", 0.2),
    ]
    skipped = next(e for e in events if e["f"] == "skipped")
    assert skipped == {
        **skipped,
        "type": "info",
        "target": None,
        "nemesis": "stand-in-no-target",
        "reason": "nothing to hit",
    }
    faults = [e for e in events if e["f"] == "fault"]
    healed = [e for e in events if e["f"] == "healed"]
    assert [(e["target"], e["nemesis"]) for e in healed] == [(7, "stand-in")] * 2
    # The hold counts from the end of the strike (which took 0.3 s), not from its plan.
    for fault, heal in zip(faults, healed, strict=True):
        assert heal["time"] - fault["time"] >= fault["hold_s"]
    # The next strike came only once the ISRs were whole (the third look after the heal).
    assert len(isr_checks) == 6
    assert strikes[1]["time"] >= isr_checks[2]

    # One line per strike, heal and skip, each when it happens (stdout is not a terminal).
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("chaos:")]
    expected = [
        "fault 1/3: stand-in 7 struck (the strike took",
        "stand-in 7 healed (in",
        "every ISR whole",
        "fault 2/3, stand-in-no-target, skipped: nothing to hit",
        "fault 3/3: stand-in 7 struck",
        "stand-in 7 healed",
        "every ISR whole",
    ]
    assert len(said) == len(expected), said
    for line, part in zip(said, expected, strict=True):
        assert part in line, said


def test_isrs_not_whole_in_time_are_said_and_the_schedule_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(NEMESES, "stand-in", _Healing())
    monkeypatch.setattr(runner, "READY_TIMEOUT_S", 0.3)
    monkeypatch.setattr(runner, "under_replicated", lambda zk, tps: {TPS[0]: "lacks 2"})
    run = _run(tmp_path)
    _execute(run, [ScheduledFault(0.0, "stand-in", 0.0, 0.0)] * 2)
    events = _timeline(run)
    assert [e["f"] for e in events].count("isr-not-whole") == 2
    assert [e["f"] for e in events].count("strike") == 2
    assert next(e for e in events if e["f"] == "isr-not-whole")["missing"] == {"t-0": "lacks 2"}
    out = capsys.readouterr().out
    assert "not every ISR whole 0.3 s after the heal (t-0: lacks 2); the next fault strikes" in out


def test_the_progress_line_goes_on_while_a_strike_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a terminal (stdout captured here), with a progress line due every 0 s: the
    stand-in strike returns only once a progress line was printed while it blocked."""
    monkeypatch.setattr(runner, "under_replicated", lambda zk, tps: {})
    run = _run(tmp_path, every_s=0.0)
    monkeypatch.setitem(NEMESES, "stand-in", _Healing(until=lambda: run.progress.printed > 0))
    _execute(run, [ScheduledFault(0.0, "stand-in", 0.0, 0.0)])
    out = capsys.readouterr().out.splitlines()
    progress = [line for line in out if "acked so far" in line]
    assert progress, out
    assert "acked so far  faults: 0 done, 0 skipped  now: striking stand-in" in progress[0]


def test_without_a_terminal_a_progress_line_comes_every_period_whatever_the_clock_reads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    progress = _Progress(False, lambda: 0, tty=False, every_s=10.0)
    for now in (1003.7, 1005.0, 1013.6, 1013.8, 1024.0):
        progress.show(f"line at {now}", now)
    assert capsys.readouterr().out.splitlines() == [
        "line at 1003.7",
        "line at 1013.8",
        "line at 1024.0",
    ]


class _Backend:
    """What the end of a run asks of a backend, recorded."""

    name = "local"

    def __init__(self, copy_fails: bool = False) -> None:
        self.calls: list[str] = []
        self.copy_fails = copy_fails

    def stop_cluster(self) -> None:
        self.calls.append("stop_cluster")

    def copy_data_dirs(self, into: Path, topics: Collection[str] | None = None) -> dict[int, Path]:
        self.calls.append("copy_data_dirs")
        if self.copy_fails:
            raise OSError("disk full")
        return {}

    def copy_logs(self, into: Path) -> None:
        self.calls.append("copy_logs")

    def dispose(self) -> None:
        self.calls.append("dispose")


@pytest.mark.parametrize(
    ("given", "calls"),
    [
        ({}, ["stop_cluster", "copy_logs", "dispose"]),  # its data dirs are the run's own
        ({"data_dir": Path("d")}, ["copy_data_dirs", "copy_logs", "dispose"]),
        ({"project": "p"}, ["copy_data_dirs", "copy_logs", "dispose"]),
    ],
)
def test_the_end_of_a_run_stops_only_a_cluster_it_started(
    tmp_path: Path, given: dict[str, Any], calls: list[str]
) -> None:
    settings = RunSettings(out=tmp_path / "run", **given)
    run = _Run(settings, RunDir.create(tmp_path / "run"), None)
    backend = _Backend()
    run.backend = cast(Any, backend)
    assert run._wind_down(final=True) is None
    assert backend.calls == calls


def test_a_copy_that_fails_is_the_reason_the_audit_cannot_run_not_swallowed(
    tmp_path: Path,
) -> None:
    run = _Run(
        RunSettings(out=tmp_path / "run", data_dir=Path("d")),
        RunDir.create(tmp_path / "run"),
        None,
    )
    backend = _Backend(copy_fails=True)
    run.backend = cast(Any, backend)
    problem = run._wind_down(final=True)
    assert problem is not None
    assert "cannot copy the brokers' data dirs" in problem
    assert "disk full" in problem
    assert "stop_cluster" not in backend.calls


def _stats(faults: int, skipped: list[tuple[str, str]]) -> RunStats:
    stats = RunStats(duration_s=60.0, skipped=skipped)
    if faults:
        stats.faults["kill"] = faults
    return stats


def test_a_clean_audit_of_a_run_where_no_fault_struck_is_nothing_tested() -> None:
    why = "no partition whose ISR is whole"
    status, line = run_verdict(
        0, _stats(0, [("cascade", why)]), truncation_mode="leader-epoch", unclean=False
    )
    assert status == EXIT_NOTHING_TESTED
    assert line.startswith("nothing tested: no fault struck (0 faults done, 1 skipped: cascade")
    assert why in line
    status, line = run_verdict(0, _stats(0, []), truncation_mode=None, unclean=False)
    assert (status, "the schedule held no fault" in line) == (EXIT_NOTHING_TESTED, True)
    # Violations and an audit that could not run keep their own statuses.
    assert run_verdict(1, _stats(0, []), truncation_mode=None, unclean=False)[0] == 1
    assert run_verdict(2, _stats(3, []), truncation_mode=None, unclean=False)[0] == EXIT_CANNOT_RUN


def test_a_clean_high_watermark_run_says_what_it_did_not_show() -> None:
    status, line = run_verdict(
        0, _stats(2, [("cascade", "why")]), truncation_mode="high-watermark", unclean=True
    )
    assert status == 0
    assert line.startswith("clean: 2 faults done, 1 skipped: cascade (why)")
    assert "does not make high-watermark truncation or unclean leader election safe" in line
    assert "a leader and its successor fail in turn" in line
    assert "every in-sync replica is down" in line
    assert line.endswith("none of this run's faults produced those conditions")
    status, line = run_verdict(0, _stats(2, []), truncation_mode="leader-epoch", unclean=False)
    assert (status, line) == (0, "clean: 2 faults done, and the audit found no violations")


def test_a_duration_too_short_for_any_fault_is_explained() -> None:
    assert make_schedule(["disk-full"], 5, 10, 1, 3.0).faults == ()
    why = no_fault_fits(["disk-full"], 5, 10, 3.0)
    assert why == (
        "no fault fits in --duration 5 s: the first strikes 5 to 10 s in (--interval 10 s) "
        "and is held 5 s or more; give --duration 15 or more, or a shorter --interval"
    )
    # The advice holds: every seed's schedule has a fault then, whatever the nemeses.
    nemeses = ["kill", "pause", "disk-full"]
    enough = float(no_fault_fits(nemeses, 5, 10, 3.0).split("give --duration ")[1].split()[0])
    assert all(make_schedule(nemeses, enough, 10, seed, 3.0).faults for seed in range(50))


def test_on_a_terminal_the_progress_line_is_rewritten_and_cleared_before_a_line_said(
    capsys: pytest.CaptureFixture[str],
) -> None:
    progress = _Progress(False, lambda: 0, tty=True)
    progress.show("progress one", 1.0)
    progress.show("progress two", 1.5)  # on a terminal every second, in place
    progress.say("kill 2 struck")
    progress.show("progress three", 2.5)
    progress.stop()
    width = runner._STATUS_WIDTH
    assert capsys.readouterr().out == (
        f"\r{'progress one':<{width}}"
        f"\r{'progress two':<{width}}"
        f"\r{' ' * width}\rchaos: kill 2 struck\n"
        f"\r{'progress three':<{width}}"
        "\n"  # stop ends the line rewritten in place
    )
