"""``minibroker chaos soak``: one cluster broken for hours, judged in windows.

A run's audit reads every segment of the cluster and the whole history, so one run of
hours would end in one enormous audit, and a violation in its first minutes would be found
only at its end. The soak instead keeps one cluster (its own, started once with the run's
settings) and runs ``chaos run`` against it window after window (:func:`run_chaos` with
``--data-dir``/``--project`` naming it): each window has topics of its own, its own
workload processes and a schedule of faults (every nemesis the backend can do, from a seed
of its own, so the nemeses rotate), and is audited when it ends, from copies of the data
dirs that hold only its topics and the internal ones. The soak stops at the first window
whose audit finds a violation (its run directory kept whole), at the first that cannot
run (``--keep-going``: past violations too), or once ``--faults`` faults have struck; a
clean window's copied data dirs are
deleted (its history, timeline and report stay). A ``resent`` of values only Kafka-client
producers wrote (:func:`~chaos.workload.is_kafka_client_resend`: librdkafka's behaviour,
not a broker's fault) does not stop it: it is counted (``kafka_client_resends``) and its
window's run directory kept whole, to be read.

``soak.json`` in the soak's directory is rewritten after every window: per window its
status, faults by nemesis, acknowledged writes, reads checked, violations and heal times,
and the totals. Ctrl-C ends the window in progress as ``chaos run`` does (every fault
healed) and then the soak, which stops the cluster it started.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import shutil
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.backend import ClusterBackend
from chaos.run_dir import EXIT_CANNOT_RUN, EXIT_NOTHING_TESTED
from chaos.run_stats import run_stats
from chaos.runner import (
    EXIT_VIOLATIONS,
    RunSettings,
    run_chaos,
    start_docker_cluster,
    start_local_cluster,
)
from chaos.workload import GRPC, is_kafka_client_resend

__all__ = ["SoakResult", "SoakSettings", "WindowResult", "run_soak", "stop_reason", "window_result"]

SOAK_FILE = "soak.json"


@dataclass(frozen=True)
class SoakSettings:
    """``chaos soak``'s options: each window's run settings, and when to stop."""

    run: RunSettings
    """A window's settings (``out`` is the soak's directory, ``duration_s`` a window's
    fault window, ``seed`` the first window's seed)."""
    faults: int = 1000
    """Stop once this many faults have struck."""
    max_hours: float | None = None
    """Stop after this long, whatever the count (None: no limit)."""
    max_windows: int | None = None
    keep_going: bool = False
    """Go on past windows that found violations (each kept whole): what a soak in
    high-watermark mode, whose anomalies are expected, needs to show them arising."""


@dataclass
class WindowResult:
    """One window: a ``chaos run`` of its own against the soak's cluster."""

    index: int
    run_dir: str
    status: int
    seconds: float
    faults: dict[str, int] = field(default_factory=dict)
    skipped: int = 0
    acked: int = 0
    reads: int = 0
    violations: dict[str, int] = field(default_factory=dict)
    heal_to_isr_s: list[float] = field(default_factory=list)
    groups: dict[str, Any] | None = None
    kafka_client_resends: int = 0
    """Records the Kafka clients' producers resent under a new epoch (not violations)."""

    @property
    def faults_done(self) -> int:
        return sum(self.faults.values())


@dataclass
class SoakResult:
    """The windows so far and what stopped the soak."""

    windows: list[WindowResult] = field(default_factory=list)
    stopped: str = ""
    started: float = field(default_factory=time.time)

    @property
    def faults_done(self) -> int:
        return sum(w.faults_done for w in self.windows)

    def status(self) -> int:
        """1 a violation, 2 a window could not run, 3 no fault struck, 0 clean."""
        statuses = {w.status for w in self.windows}
        if EXIT_VIOLATIONS in statuses:
            return EXIT_VIOLATIONS
        if EXIT_CANNOT_RUN in statuses or not self.windows:
            return EXIT_CANNOT_RUN
        return 0 if self.faults_done else EXIT_NOTHING_TESTED

    def to_json(self) -> dict[str, Any]:
        faults: Counter[str] = Counter()
        violations: Counter[str] = Counter()
        heals: list[float] = []
        for w in self.windows:
            faults.update(w.faults)
            violations.update(w.violations)
            heals += w.heal_to_isr_s
        redelivered = sum((w.groups or {}).get("redelivered", 0) for w in self.windows)
        pauses = [
            r["pause_s"]
            for w in self.windows
            for r in (w.groups or {}).get("rebalances", [])
            if r.get("pause_s") is not None
        ]
        return {
            "started": self.started,
            "seconds": round(time.time() - self.started, 1),
            "stopped": self.stopped,
            "status": self.status(),
            "totals": {
                "windows": len(self.windows),
                "faults": self.faults_done,
                "faults_by_nemesis": dict(sorted(faults.items())),
                "skipped": sum(w.skipped for w in self.windows),
                "acked": sum(w.acked for w in self.windows),
                "reads_checked": sum(w.reads for w in self.windows),
                "violations": sum(violations.values()),
                "violations_by_kind": dict(sorted(violations.items())),
                "kafka_client_resends": sum(w.kafka_client_resends for w in self.windows),
                "heal_to_isr_s": _spread(heals),
                "group_redelivered": redelivered,
                "rebalance_pause_s": _spread(pauses),
            },
            "windows": [
                {**dataclasses.asdict(w), "heal_to_isr_s": _spread(w.heal_to_isr_s)}
                for w in self.windows
            ],
        }


def _spread(values: list[float]) -> dict[str, float | int | None]:
    """Count, median, 99th percentile and largest of ``values``."""
    if not values:
        return {"count": 0, "median": None, "p99": None, "max": None}
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "median": round(statistics.median(ordered), 3),
        "p99": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 3),
        "max": round(ordered[-1], 3),
    }


def stop_reason(
    result: SoakResult, settings: SoakSettings, deadline: float | None, now: float
) -> str | None:
    """Why the soak stops before its next window (None: it goes on): the last window found
    violations or could not run, enough faults struck, the time or window limit."""
    if result.windows:
        last = result.windows[-1]
        if last.status == EXIT_VIOLATIONS and not settings.keep_going:
            return f"window {last.index} found violations: {last.run_dir} is kept"
        if last.status == EXIT_CANNOT_RUN:
            return f"window {last.index} could not run or be judged: see {last.run_dir}"
    if result.faults_done >= settings.faults:
        return f"{result.faults_done} faults struck (--faults {settings.faults})"
    if deadline is not None and now >= deadline:
        return f"--max-hours {settings.max_hours:g} reached"
    if settings.max_windows is not None and len(result.windows) >= settings.max_windows:
        return f"--max-windows {settings.max_windows} done"
    return None


def window_result(
    index: int, run_dir: Path, status: int, seconds: float, client: str = GRPC
) -> WindowResult:
    """What one window's run directory says (its timeline, history and report); the
    Kafka clients' resends of a workload of ``client`` are counted apart, and a window
    whose only findings they are is clean."""
    stats = run_stats(run_dir)
    result = WindowResult(
        index,
        str(run_dir),
        status,
        round(seconds, 1),
        dict(stats.faults),
        len(stats.skipped),
        stats.acked_total,
        heal_to_isr_s=list(stats.heal_to_isr_s),
    )
    report = run_dir / "audit" / "report.json"
    if report.exists():
        try:
            report_json = json.loads(report.read_text())
            summary = report_json["summary"]
        except (ValueError, KeyError):
            return result
        result.reads = int(summary.get("operations", {}).get("read", 0))
        result.groups = summary.get("groups")
        violations: Counter[str] = Counter()
        for violation in report_json.get("violations", []):
            if is_kafka_client_resend(violation, client):
                result.kafka_client_resends += int(violation.get("count", 1))
            else:
                violations[violation.get("kind", "?")] += 1
        result.violations = dict(violations)
        if status == EXIT_VIOLATIONS and not violations:
            result.status = 0
    return result


def run_soak(settings: SoakSettings, say: Callable[[str], None] = print) -> SoakResult:
    """Window after window against one cluster until a stop condition (module docstring)."""
    root = settings.run.out
    root.mkdir(parents=True, exist_ok=True)
    base = settings.run
    result = SoakResult()
    cluster, attach = _start_cluster(base, root, say)
    deadline = None if settings.max_hours is None else time.monotonic() + settings.max_hours * 3600
    try:
        for index in itertools.count():
            result.stopped = stop_reason(result, settings, deadline, time.monotonic()) or ""
            if result.stopped:
                break
            window = root / f"window-{index:04d}"
            say(
                f"soak: window {index} ({result.faults_done}/{settings.faults} faults so "
                f"far) in {window}"
            )
            began = time.monotonic()
            status = run_chaos(
                dataclasses.replace(base, out=window, seed=base.seed + index, **attach)
            )
            judged = window_result(index, window, status, time.monotonic() - began, base.client)
            result.windows.append(judged)
            _write(root, result)
            if status not in (EXIT_VIOLATIONS, EXIT_CANNOT_RUN):
                shutil.rmtree(window / "data", ignore_errors=True)  # clean: not needed
    except KeyboardInterrupt:
        result.stopped = "interrupted"
    finally:
        _stop(cluster)
        _write(root, result)
    say(f"soak: {result.stopped}; {summary_line(result)}; {root / SOAK_FILE}")
    return result


def _start_cluster(
    settings: RunSettings, root: Path, say: Callable[[str], None]
) -> tuple[ClusterBackend, dict[str, Any]]:
    """The soak's cluster, and what names it to each window's run (``data_dir`` or
    ``project``). Three ZooKeeper nodes when ZooKeeper faults may come; never the small log
    dirs of ``disk-full``, which a soak's hours of writes would fill."""
    zookeepers = 3 if any(n == "all" or n.startswith("zk-") for n in settings.nemeses) else 1
    if settings.backend == "local":
        local = start_local_cluster(
            settings, root / "cluster", zookeepers=zookeepers, small_log_dirs=False, say=say
        )
        return local, {"data_dir": root / "cluster"}
    docker = start_docker_cluster(settings, root / "cluster-logs", zookeepers=zookeepers, say=say)
    return docker, {"project": docker.project}


def _stop(cluster: ClusterBackend) -> None:
    """Stop the soak's cluster, healed first, whatever state a window left it in."""
    for step in (cluster.heal_network, cluster.stop_cluster, cluster.dispose):
        with contextlib.suppress(Exception):
            step()


def summary_line(result: SoakResult) -> str:
    totals = result.to_json()["totals"]
    heal = totals["heal_to_isr_s"]
    by_kind = ", ".join(f"{k} {n}" for k, n in totals["faults_by_nemesis"].items())
    return (
        f"{totals['windows']} windows, {totals['faults']} faults ({by_kind}), "
        f"{totals['acked']:,} acknowledged writes, {totals['reads_checked']:,} reads checked, "
        f"{totals['violations']} violations"
        + (
            f", heal to full ISR median {heal['median']:.1f} s, max {heal['max']:.1f} s"
            if heal["count"]
            else ""
        )
    )


def _write(root: Path, result: SoakResult) -> None:
    path = root / SOAK_FILE
    temp = path.with_suffix(".tmp")
    temp.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    temp.replace(path)
