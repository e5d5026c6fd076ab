"""Ten minutes of random faults on the Docker cluster, twice: with leader epochs, then with
the pre-0.11 high-watermark truncation and unclean elections, on the same seeded schedule.

Each run is ``minibroker chaos run --backend docker --nemesis all`` with the options below
(:data:`DURATION_S`, :data:`INTERVAL_S`, :data:`SEED`, the runner's default workload):
its own compose project with a 3-node ZooKeeper ensemble (the ZooKeeper faults are in
``all``), three brokers, RF 3, ``min.insync.replicas`` 2, the producers' acks=all
idempotent writes and the consumers' reads recorded in the history; at the end the faults
are healed, the ISRs waited for, everything read once, the brokers stopped, and the Spark
audit judges the replica logs. The figures come from the run directory
(:func:`chaos.run_stats.run_stats` and the audit's report.json), so they can be recomputed
from a kept run.

The second run replays the first run's ``schedule.json``: the same faults at the same
times against the same choice of victims, so the difference is the truncation rule (and
what unclean elections let through), not the luck of the draw.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from chaos.run_stats import RunStats, run_stats
from chaos.runner import RunSettings, run_chaos

__all__ = ["DURATION_S", "INTERVAL_S", "SEED", "ChaosResult", "measure"]

DURATION_S = 600.0
INTERVAL_S = 15.0
SEED = 11
"""Chosen, and said so, because its schedule has every kind of network fault (``partition``
and ``split``) and ``cascade`` among its 27 faults; most seeds lack one of them."""


@dataclass(frozen=True)
class ChaosResult:
    """One run: its settings, what its files say, and the audit's findings."""

    label: str
    command: str
    status: int
    stats: RunStats
    violations_by_kind: Counter[str]
    skipped: int
    """Scheduled faults that found no target when their time came."""
    run_dir: Path


def _violations(run_dir: Path) -> Counter[str]:
    report = run_dir / "audit" / "report.json"
    if not report.exists():
        return Counter()
    return Counter(str(v.get("kind")) for v in json.loads(report.read_text())["violations"])


def _one(
    work: Path, label: str, truncation_mode: str, unclean: bool, replay: Path | None
) -> ChaosResult:
    run_dir = work / label
    shutil.rmtree(run_dir, ignore_errors=True)
    settings = RunSettings(
        out=run_dir,
        backend="docker",
        nemeses=("all",),
        duration_s=DURATION_S,
        interval_s=INTERVAL_S,
        seed=SEED,
        truncation_mode=truncation_mode,
        unclean=unclean,
        replay=replay,
    )
    command = (
        f"minibroker chaos run --backend docker --nemesis all --duration {DURATION_S:.0f} "
        f"--interval {INTERVAL_S:.0f} --truncation-mode {truncation_mode}"
        + (" --unclean" if unclean else "")
        + (f" --replay {replay.name}" if replay else f" --seed {SEED}")
    )
    print(f"bench chaos: {command}", flush=True)
    status = run_chaos(settings)
    stats = run_stats(run_dir)
    return ChaosResult(
        label, command, status, stats, _violations(run_dir), len(stats.skipped), run_dir
    )


def measure(work: Path) -> list[ChaosResult]:
    """The leader-epoch run, then the high-watermark --unclean replay of its schedule."""
    work.mkdir(parents=True, exist_ok=True)
    epochs = _one(work, "chaos-leader-epoch", "leader-epoch", False, None)
    schedule = work / "chaos-schedule.json"
    shutil.copyfile(epochs.run_dir / "schedule.json", schedule)
    watermark = _one(work, "chaos-high-watermark", "high-watermark", True, schedule)
    return [epochs, watermark]
