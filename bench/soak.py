"""The chaos soak (docs/chaos.md, "The soak"): one cluster broken window after window until
:data:`FAULTS` faults have struck, each window audited on its own; the figures come from
the soak's ``soak.json`` (:mod:`chaos.soak`), so a kept soak directory can be summed up
again (``python -m bench.run --only chaos_soak --soak-from DIR``).

By default it is the issue's soak: on Docker, leader-epoch truncation, the mixed workload
(minibroker's gRPC clients and Kafka's own, both consumer groups), every nemesis the
backend can do, a fault every :data:`INTERVAL_S` seconds in windows of :data:`WINDOW_S`.
Hours long: ``make bench`` leaves it out; ``--only chaos_soak`` runs it.

The shorter soak in high-watermark mode (:func:`measure_high_watermark`, ``--only
chaos_soak_hw``) runs on local processes with ``--keep-going``: its anomalies (acknowledged
writes lost and replicas that diverge, what ``chaos scenario hw-data-loss|hw-divergence``
plays, docs/replication.md) are expected, and it shows them arising from random faults,
and how often.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.runner import RunSettings
from chaos.soak import SOAK_FILE, SoakSettings, run_soak

__all__ = [
    "FAULTS",
    "INTERVAL_S",
    "SEED",
    "WINDOW_S",
    "SoakFigures",
    "measure",
    "measure_high_watermark",
    "read",
]

FAULTS = 1000
WINDOW_S = 600.0
INTERVAL_S = 5.0
SEED = 32


@dataclass(frozen=True)
class SoakFigures:
    """A soak's command, its soak.json and where it is."""

    command: str
    summary: dict[str, Any]
    soak_dir: Path


HW_FAULTS = 150
HW_WINDOW_S = 300.0


def command(
    backend: str,
    truncation_mode: str,
    client: str,
    faults: int = FAULTS,
    window_s: float = WINDOW_S,
    keep_going: bool = False,
) -> str:
    return (
        f"minibroker chaos soak --backend {backend} --client {client} --faults {faults} "
        f"--duration {window_s:.0f} --interval {INTERVAL_S:.0f} --truncation-mode "
        f"{truncation_mode} --seed {SEED}" + (" --keep-going" if keep_going else "")
    )


def measure(work: Path, backend: str = "docker", client: str = "mixed") -> SoakFigures:
    """Run the soak in ``work/soak`` (what was there is removed first)."""
    run = RunSettings(
        out=work / "soak",
        backend=backend,
        nemeses=("all",),
        duration_s=WINDOW_S,
        interval_s=INTERVAL_S,
        seed=SEED,
        truncation_mode="leader-epoch",
        client=client,
    )
    return _soak(SoakSettings(run, faults=FAULTS), command(backend, "leader-epoch", client))


def measure_high_watermark(work: Path) -> SoakFigures:
    """The shorter soak in high-watermark mode, local processes, the gRPC workload, going
    on past violations, in ``work/soak-hw``."""
    run = RunSettings(
        out=work / "soak-hw",
        backend="local",
        nemeses=("all",),
        duration_s=HW_WINDOW_S,
        interval_s=INTERVAL_S,
        seed=SEED,
        truncation_mode="high-watermark",
    )
    said = command("local", "high-watermark", "grpc", HW_FAULTS, HW_WINDOW_S, keep_going=True)
    return _soak(SoakSettings(run, faults=HW_FAULTS, keep_going=True), said)


def _soak(settings: SoakSettings, said: str) -> SoakFigures:
    """Run the soak in its ``out`` (what was there is removed first); its figures."""
    shutil.rmtree(settings.run.out, ignore_errors=True)
    began = time.monotonic()
    run_soak(settings)
    print(f"bench soak: {time.monotonic() - began:.0f} s", flush=True)
    return read(settings.run.out, said)


def read(soak_dir: Path, said: str | None = None) -> SoakFigures:
    """The figures of a kept soak directory; ``said``: its command (else the soak.json's
    settings are not known and the command is given as the directory)."""
    summary = json.loads((soak_dir / SOAK_FILE).read_text())
    return SoakFigures(said or f"(the soak in {soak_dir})", summary, soak_dir)
