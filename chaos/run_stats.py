"""What a chaos run's files say about availability: acknowledgements per second through the
faults, the seconds without any, the longest time without one around each fault, how long
the cluster took to be whole after each heal, and which faults could not strike.

Read from ``history.jsonl`` (the ``ok`` writes' times; a transactions run's steps give each
transaction's outcome, counted) and ``timeline.jsonl`` (the
``run-start``/``run-end`` marks around the schedule; per fault ``strike`` when its strike
begins, ``fault`` once it is in place, ``healed`` once its heal is done, or ``skipped``
with the reason it could not strike; the ``isr-whole`` lines the runner writes after each
heal), so a finished run directory can be summed up again later.
"""

from __future__ import annotations

import bisect
import json
import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["FaultGap", "RunStats", "run_stats", "transaction_outcomes"]

WINDOW_S = 10


@dataclass(frozen=True)
class FaultGap:
    """The longest time without any acknowledgement (from any producer) around one fault:
    from its strike until the next fault's strike (or the end of the schedule)."""

    nemesis: str
    target: object
    struck_s: float
    """When its strike began, seconds after ``run-start``."""
    healed_s: float | None
    """When its heal was done, seconds after ``run-start`` (None: never healed in the
    schedule, e.g. an interrupted run)."""
    gap_s: float
    """The longest time between two consecutive acknowledgements overlapping the fault's
    window (0 when there were none around it)."""
    gap_start_s: float
    """When that gap began (the last acknowledgement before it), after ``run-start``."""

    @property
    def when(self) -> str:
        """``during`` the fault (the gap began before its heal was done) or ``after`` it."""
        return "during" if self.healed_s is None or self.gap_start_s < self.healed_s else "after"

    def __str__(self) -> str:
        target = (
            " ".join(str(t) for t in self.target)
            if isinstance(self.target, list)
            else str(self.target)
        )
        return (
            f"longest ack gap {self.gap_s:.2f} s from {self.gap_start_s:.1f} s "
            f"({self.when} {self.nemesis} {target} at {self.struck_s:.1f} s)"
        )


@dataclass
class RunStats:
    duration_s: float
    faults: Counter[str] = field(default_factory=Counter)
    """Faults struck, by nemesis."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """Faults that could not strike: (nemesis, why), in the order they were due."""
    fault_gaps: list[FaultGap] = field(default_factory=list)
    """The longest time without an acknowledgement around each fault struck."""
    acked: int = 0
    """``ok`` operations within the schedule's window."""
    acked_total: int = 0
    """``ok`` operations in the whole run (warm-up and wind-down included): what the
    history, and so the audit's report, holds."""
    worst_window_acks_per_s: float = 0.0
    """The lowest rate over any 10 s window of the schedule."""
    seconds_without_ack: int = 0
    """Whole seconds of the schedule in which nothing was acknowledged."""
    heal_to_isr_s: list[float] = field(default_factory=list)
    """After each heal, seconds until every ISR was whole again."""
    not_whole_before_next_fault: int = 0
    """Heals after which the ISRs were not whole within the runner's wait."""
    violations: int | None = None
    """The audit's count, None if the audit did not run."""
    transactions: Counter[str] = field(default_factory=Counter)
    """Transactions by outcome (``committed``, ``aborted``, ``unknown``): none but in a
    transactions run."""

    @property
    def acks_per_s(self) -> float:
        return self.acked / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def faults_done(self) -> int:
        return sum(self.faults.values())

    def faults_line(self) -> str:
        """``N faults done, M skipped: cascade (why)``."""
        done = f"{self.faults_done} fault{'' if self.faults_done == 1 else 's'} done"
        if not self.skipped:
            return done
        why = Counter(self.skipped)
        shown = ", ".join(
            f"{nemesis}{f' x{n}' if n > 1 else ''} ({reason})"
            for (nemesis, reason), n in why.items()
        )
        return f"{done}, {len(self.skipped)} skipped: {shown}"

    def summary(self) -> str:
        """One line of figures, then one line per fault with its longest ack gap."""
        heals = self.heal_to_isr_s
        heal = (
            f"heal to full ISR median {statistics.median(heals):.1f} s, max {max(heals):.1f} s"
            if heals
            else "no heal measured"
        )
        if self.not_whole_before_next_fault:
            heal += f" ({self.not_whole_before_next_fault} not whole in time)"
        lines = [
            f"{self.faults_line()}; {self.acked_total:,} acknowledged in all, "
            f"{self.acked:,} of them in the {self.duration_s:.0f} s fault window "
            f"({self.acks_per_s:,.0f}/s, worst {WINDOW_S} s window "
            f"{self.worst_window_acks_per_s:,.0f}/s), {self.seconds_without_ack} s without an "
            f"ack, {heal}"
        ]
        if self.transactions:
            t = self.transactions
            lines.append(
                f"transactions: {t['committed']:,} committed, {t['aborted']:,} aborted, "
                f"{t['unknown']:,} of unknown outcome"
            )
        lines += [f"  {gap}" for gap in self.fault_gaps]
        return "\n".join(lines)


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
    history = _lines(run_dir / "history.jsonl")
    # Writes: a transaction's steps ("f": begin, commit, ...) acknowledge no record.
    acks = sorted(float(h["time"]) for h in history if h.get("type") == "ok" and "f" not in h)
    start = marks.get("run-start", acks[0] if acks else 0.0)
    end = marks.get("run-end", acks[-1] if acks else start)
    stats = RunStats(
        duration_s=max(end - start, 0.0),
        acked_total=len(acks),
        transactions=transaction_outcomes(history),
    )
    for e in timeline:
        if e.get("f") == "fault":  # one per fault struck, however many strikes it took
            stats.faults[str(e.get("nemesis"))] += 1
        if e.get("f") == "skipped":
            stats.skipped.append((str(e.get("nemesis")), str(e.get("reason"))))
        elif e.get("type") == "fail" and "error" in e:  # a run directory of older versions
            stats.skipped.append((str(e.get("f")), str(e["error"])))
        if e.get("f") == "isr-whole":
            stats.heal_to_isr_s.append(float(e["after_heal_s"]))
        if e.get("f") == "isr-not-whole":
            stats.not_whole_before_next_fault += 1
    stats.fault_gaps = _fault_gaps(timeline, acks, start, end)
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


def transaction_outcomes(history: list[dict[str, Any]]) -> Counter[str]:
    """How many transactions of the history ended each way, as docs/audit.md decides a
    transaction's outcome from its steps: ``committed`` if a ``commit`` line is ``ok``,
    ``aborted`` if an ``abort`` line is ``ok`` or a ``commit`` line is ``fail``, ``unknown``
    otherwise (begun, and never known to end)."""
    outcome: dict[str, str] = {}
    for h in history:
        txn, f, kind = h.get("txn"), h.get("f"), h.get("type")
        if not isinstance(txn, str) or f not in ("begin", "commit", "abort"):
            continue
        known = outcome.setdefault(txn, "unknown")
        if f == "commit" and kind == "ok":
            outcome[txn] = "committed"
        elif known == "unknown" and (
            (f == "abort" and kind == "ok") or (f == "commit" and kind == "fail")
        ):
            outcome[txn] = "aborted"
    return Counter(outcome.values())


@dataclass
class _Window:
    nemesis: str
    struck: float
    target: object = None
    healed: float | None = None


def _fault_windows(timeline: list[dict[str, Any]], end: float) -> list[tuple[_Window, float]]:
    """Each fault struck, with the end of its window (the next strike, or ``end``)."""
    windows: list[_Window] = []
    pending: _Window | None = None
    for e in timeline:
        f, t = e.get("f"), float(e.get("time", 0.0))
        if f == "strike":
            pending = _Window(str(e.get("nemesis")), t)
        elif f == "skipped":
            pending = None
        elif f == "fault":
            window = pending if pending is not None else _Window(str(e.get("nemesis")), t)
            window.target, pending = e.get("target"), None
            windows.append(window)
        elif f == "healed" and windows and windows[-1].healed is None:
            windows[-1].healed = t
    ends = [w.struck for w in windows[1:]] + [end]
    return [(w, max(until, w.struck)) for w, until in zip(windows, ends, strict=False)]


def _fault_gaps(
    timeline: list[dict[str, Any]], acks: list[float], start: float, end: float
) -> list[FaultGap]:
    """The longest gap between consecutive acknowledgements (``acks``, sorted) that
    overlaps each fault's window."""
    gaps = []
    for window, until in _fault_windows(timeline, end):
        longest, longest_from = 0.0, window.struck
        i = max(bisect.bisect_right(acks, window.struck) - 1, 0)
        while i + 1 < len(acks) and acks[i] < until:
            gap = acks[i + 1] - acks[i]
            if gap > longest:
                longest, longest_from = gap, acks[i]
            i += 1
        gaps.append(
            FaultGap(
                window.nemesis,
                window.target,
                round(window.struck - start, 3),
                None if window.healed is None else round(window.healed - start, 3),
                round(longest, 3),
                round(longest_from - start, 3),
            )
        )
    return gaps
