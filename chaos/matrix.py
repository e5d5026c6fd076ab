"""``minibroker chaos matrix``: Kafka's replication test matrix, with the audit as validator.

Kafka's ducktape ``replication_test.py`` runs a producer and a consumer while it shuts down
or bounces, cleanly or hard, the leader of a partition or the controller, and then checks
that every acknowledged message was consumed. Here each of the eight cells is a chaos run
of its own (:mod:`chaos.runner`) on a new cluster of 3 brokers, RF 3, ``min.insync.replicas``
2, with that one failure mode (:data:`chaos.nemesis.KAFKA_FAILURE_MODES`), and the audit
judges the replica logs and the history. The table goes to stdout and ``matrix.json``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from chaos.nemesis import KAFKA_FAILURE_MODES
from chaos.run_dir import EXIT_CANNOT_RUN, EXIT_NOTHING_TESTED, RunDir, RunDirError
from chaos.runner import RunSettings, run_chaos
from chaos.schedule import Schedule, ScheduledFault

__all__ = ["MatrixCell", "run_matrix"]

STRIKE_AT_S = 3.0
SHUTDOWN_HOLD_S = 8.0


@dataclass
class MatrixCell:
    """One cell's outcome."""

    failure_mode: str
    """``clean_shutdown``, ``hard_shutdown``, ``clean_bounce`` or ``hard_bounce``."""
    broker_type: str
    """``leader`` or ``controller``."""
    status: int
    """The run's exit status: 0 clean, 1 violations, 2 could not run, 3 nothing tested
    (the cell's fault did not strike)."""
    acked: int
    violations: int
    run_dir: str

    @property
    def verdict(self) -> str:
        return {0: "clean", 1: "VIOLATIONS", EXIT_NOTHING_TESTED: "nothing tested"}.get(
            self.status, "could not run"
        )


def run_matrix(
    out: Path,
    *,
    backend: str = "local",
    project: str | None = None,
    cell_duration_s: float = 20.0,
    producers: int = 2,
    rate: float = 50.0,
    spark: Any = None,
    quiet: bool = False,
    only: Sequence[str] | None = None,
) -> int:
    """Run every cell (``only``: the cells of these failure modes, by nemesis name, e.g.
    ``hard-bounce-leader``); returns 0 when all are clean, 1 if any found a violation, 2
    if any could not run, 3 if a cell's fault did not strike (nothing tested there)."""
    names = [n.name for n in KAFKA_FAILURE_MODES]
    unknown = sorted(set(only or ()) - set(names))
    if unknown:
        raise RunDirError(f"no matrix cell {', '.join(unknown)}: the cells are {', '.join(names)}")
    if (out / "matrix.json").exists():
        raise RunDirError(f"{out} already holds a matrix: choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    cells: list[MatrixCell] = []
    for nemesis in KAFKA_FAILURE_MODES:
        if only and nemesis.name not in only:
            continue
        mode = nemesis.name.rsplit("-", 1)[0].replace("-", "_")
        cell_dir = out / nemesis.name
        hold = 0.0 if nemesis.bounce else SHUTDOWN_HOLD_S
        schedule = Schedule(
            0,
            cell_duration_s,
            cell_duration_s,
            (ScheduledFault(STRIKE_AT_S, nemesis.name, hold, 0.0),),
        )
        cell_dir.mkdir(parents=True, exist_ok=True)
        replay = out / f"{nemesis.name}.schedule.json"
        replay.write_text(schedule.to_json())
        if not quiet:
            print(f"chaos matrix: {mode} of the {nemesis.target_kind}", flush=True)
        started = time.monotonic()
        status = run_chaos(
            RunSettings(
                out=cell_dir,
                backend=backend,
                project=project,
                replay=replay,
                producers=producers,
                rate=rate,
                consumers=1,
                spark=spark,
                quiet=quiet,
            )
        )
        run = RunDir(cell_dir)
        cells.append(
            MatrixCell(
                mode, nemesis.target_kind, status, _acked(run), _violations(run), str(cell_dir)
            )
        )
        if not quiet:
            print(f"chaos matrix: {nemesis.name}: {cells[-1].verdict} "
                  f"({time.monotonic() - started:.0f} s)", flush=True)  # fmt: skip
    (out / "matrix.json").write_text(
        json.dumps({"cells": [asdict(c) for c in cells]}, indent=2) + "\n"
    )
    _print_table(cells)
    if any(c.status not in (0, 1, EXIT_NOTHING_TESTED) for c in cells):
        return EXIT_CANNOT_RUN
    if any(c.status == 1 for c in cells):
        return 1
    return EXIT_NOTHING_TESTED if any(c.status == EXIT_NOTHING_TESTED for c in cells) else 0


def _acked(run: RunDir) -> int:
    if not run.history.exists():
        return 0
    with run.history.open("rb") as f:
        return sum(line.count(b'"type":"ok"') for line in f)


def _violations(run: RunDir) -> int:
    report = run.audit_dir / "report.json"
    try:
        return len(json.loads(report.read_text())["violations"])
    except (OSError, ValueError, KeyError):
        return -1


def _print_table(cells: list[MatrixCell]) -> None:
    table = Table(title="Kafka's replication test matrix, judged by the audit")
    for column in ("failure mode", "broker", "acked", "violations", "verdict"):
        table.add_column(column)
    for c in cells:
        table.add_row(
            c.failure_mode,
            c.broker_type,
            f"{c.acked:,}",
            "-" if c.violations < 0 else str(c.violations),
            c.verdict,
        )
    Console(highlight=False).print(table)
