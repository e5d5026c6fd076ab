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

:func:`measure_transactions` does the same with ``--workload transactions``
(docs/chaos.md): transactional producers, a consume-transform-produce copier,
read_committed consumers, and its default nemeses, those of the transaction path (the
transaction coordinator killed and paused, a partition leader killed inside a transaction)
with the broker faults.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from chaos.nemesis import TRANSACTION_DEFAULT_NEMESES
from chaos.run_stats import RunStats, run_stats
from chaos.runner import RunSettings, run_chaos
from chaos.workload import PLAIN, TRANSACTIONS

__all__ = [
    "DURATION_S",
    "INTERVAL_S",
    "SEED",
    "TRANSACTIONS_SEED",
    "ChaosResult",
    "measure",
    "measure_transactions",
]

DURATION_S = 600.0
INTERVAL_S = 15.0
SEED = 11
"""Chosen, and said so, because its schedule has every kind of network fault (``partition``
and ``split``) and ``cascade`` among its 27 faults; most seeds lack one of them."""
TRANSACTIONS_SEED = 7
"""The transactions runs' seed (their nemeses are the transaction path's and the broker
faults, which any seed's schedule mixes)."""


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
    work: Path,
    label: str,
    truncation_mode: str,
    unclean: bool,
    replay: Path | None,
    workload: str = PLAIN,
) -> ChaosResult:
    run_dir = work / label
    shutil.rmtree(run_dir, ignore_errors=True)
    transactions = workload == TRANSACTIONS
    seed = TRANSACTIONS_SEED if transactions else SEED
    settings = RunSettings(
        out=run_dir,
        backend="docker",
        nemeses=TRANSACTION_DEFAULT_NEMESES if transactions else ("all",),
        duration_s=DURATION_S,
        interval_s=INTERVAL_S,
        seed=seed,
        truncation_mode=truncation_mode,
        unclean=unclean,
        replay=replay,
        workload=workload,
    )
    command = (
        "minibroker chaos run --backend docker "
        + ("--workload transactions" if transactions else "--nemesis all")
        + f" --duration {DURATION_S:.0f} --interval {INTERVAL_S:.0f} "
        f"--truncation-mode {truncation_mode}"
        + (" --unclean" if unclean else "")
        + (f" --replay {replay.name}" if replay else f" --seed {seed}")
    )
    print(f"bench chaos: {command}", flush=True)
    status = run_chaos(settings)
    stats = run_stats(run_dir)
    return ChaosResult(
        label, command, status, stats, _violations(run_dir), len(stats.skipped), run_dir
    )


def measure(work: Path, workload: str = PLAIN) -> list[ChaosResult]:
    """The leader-epoch run, then the high-watermark --unclean replay of its schedule."""
    work.mkdir(parents=True, exist_ok=True)
    prefix = "txn" if workload == TRANSACTIONS else "chaos"
    epochs = _one(work, f"{prefix}-leader-epoch", "leader-epoch", False, None, workload)
    schedule = work / f"{prefix}-schedule.json"
    shutil.copyfile(epochs.run_dir / "schedule.json", schedule)
    watermark = _one(work, f"{prefix}-high-watermark", "high-watermark", True, schedule, workload)
    return [epochs, watermark]


def measure_transactions(work: Path) -> list[ChaosResult]:
    """:func:`measure` with the transactions workload."""
    return measure(work, TRANSACTIONS)
