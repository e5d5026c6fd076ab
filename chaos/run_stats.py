"""What a chaos run's files say about availability: acknowledgements per second through the
faults, the seconds without any, and how long the cluster took to be whole after each heal.

Read from ``history.jsonl`` (the ``ok`` lines' times) and ``timeline.jsonl`` (the
``run-start``/``run-end`` marks around the schedule, the strikes, and the ``isr-whole``
lines the runner writes after each heal), so a finished run directory can be summed up
again later.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RunStats", "run_stats"]

WINDOW_S = 10


@dataclass
class RunStats:
    duration_s: float
    faults: Counter[str] = field(default_factory=Counter)
    """Faults struck, by nemesis."""
    acked: int = 0
    """``ok`` operations within the schedule's window."""
    acked_total: int = 0
    """``ok`` operations in the whole run (warm-up and wind-down included)."""
    worst_window_acks_per_s: float = 0.0
    """The lowest rate over any 10 s window of the schedule."""
    seconds_without_ack: int = 0
    """Whole seconds of the schedule in which nothing was acknowledged."""
    heal_to_isr_s: list[float] = field(default_factory=list)
    """After each heal, seconds until every ISR was whole again."""
    not_whole_before_next_fault: int = 0
    violations: int | None = None
    """The audit's count, None if the audit did not run."""

    @property
    def acks_per_s(self) -> float:
        return self.acked / self.duration_s if self.duration_s > 0 else 0.0

    def summary(self) -> str:
        heals = self.heal_to_isr_s
        heal = (
            f"heal to full ISR median {statistics.median(heals):.1f} s, max {max(heals):.1f} s"
            if heals
            else "no heal measured"
        )
        return (
            f"{sum(self.faults.values())} faults, {self.acked:,} acked in {self.duration_s:.0f} s "
            f"({self.acks_per_s:,.0f}/s, worst {WINDOW_S} s window "
            f"{self.worst_window_acks_per_s:,.0f}/s), {self.seconds_without_ack} s without an "
            f"ack, {heal}"
        )


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def run_stats(run_dir: Path) -> RunStats:
    """Sum up the run in ``run_dir`` (see the module docstring)."""
    timeline = _lines(run_dir / "timeline.jsonl")
    marks = {e["f"]: float(e["time"]) for e in timeline if e.get("f") in ("run-start", "run-end")}
    acks = sorted(
        float(h["time"]) for h in _lines(run_dir / "history.jsonl") if h.get("type") == "ok"
    )
    start = marks.get("run-start", acks[0] if acks else 0.0)
    end = marks.get("run-end", acks[-1] if acks else start)
    stats = RunStats(duration_s=max(end - start, 0.0), acked_total=len(acks))
    for e in timeline:
        if e.get("f") == "fault":  # one per fault struck, however many strikes it took
            stats.faults[str(e.get("nemesis"))] += 1
        if e.get("f") == "isr-whole":
            stats.heal_to_isr_s.append(float(e["after_heal_s"]))
        if e.get("f") == "isr-not-whole":
            stats.not_whole_before_next_fault += 1
    seconds = max(math.ceil(stats.duration_s), 0)
    per_second = [0] * seconds
    for t in acks:
        if start <= t < end:
            stats.acked += 1
            per_second[min(int(t - start), seconds - 1)] += 1
    stats.seconds_without_ack = sum(1 for n in per_second if n == 0)
    if seconds >= WINDOW_S:
        window = sum(per_second[:WINDOW_S])
        worst = window
        for i in range(WINDOW_S, seconds):
            window += per_second[i] - per_second[i - WINDOW_S]
            worst = min(worst, window)
        stats.worst_window_acks_per_s = worst / WINDOW_S
    report = run_dir / "audit" / "report.json"
    if report.exists():
        try:
            stats.violations = len(json.loads(report.read_text())["violations"])
        except (ValueError, KeyError):
            stats.violations = None
    return stats
