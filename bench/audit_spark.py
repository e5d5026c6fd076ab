"""The Spark audit on a standalone master and worker in Docker, against ``local[2]``.

The audit benchmark's data (:func:`bench.audit.write_data`: 3 brokers' data dirs and a
history) is audited by ``minibroker audit`` as a user runs it, once per run, in the
``minibroker-spark`` image of the compose profile "spark" (``make spark-image``): on a
master and a worker in containers of a private network, the data bind-mounted read-only
at the same path in the worker and the driver's container, and on ``local[2]`` in the same
image (no network). Each audit's own time (``report.json``'s ``seconds``, Spark's start-up
excluded) gives records/s. On one machine the cluster can only add overhead (RPC, the
executor in its own JVM); the point is that the same job runs beyond one machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from bench.audit import BROKERS, RECORDS, write_data

__all__ = ["SparkAuditResult", "measure"]

IMAGE = os.environ.get("MINIBROKER_SPARK_IMAGE", "minibroker-spark:latest")
RUNS = 2
"""Audits on each master, alternating."""
WORKER_CORES = 2
WORKER_MEMORY = "2g"
_READY_TIMEOUT_S = 120
_AUDIT_TIMEOUT_S = 1200
REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class SparkAuditResult:
    records_decoded: int
    seconds: dict[str, tuple[float, ...]]
    """Master label -> each audit's own seconds (report.json), start-up excluded."""
    phases: dict[str, dict[str, float]]
    """Master label -> the phases of its fastest audit."""
    build_s: float
    """`make spark-image` (cached layers: seconds)."""

    def records_per_s(self, label: str) -> float:
        return self.records_decoded / min(self.seconds[label])


def _docker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=True
    )


def _alive_workers(master: str) -> int:
    probe = (
        "import json, socket, urllib.request as u; "
        "r = u.urlopen('http://%s:8080/json/' % socket.gethostbyname('spark-master'), timeout=4); "
        "print(json.load(r)['aliveworkers'])"
    )
    done = subprocess.run(
        ["docker", "exec", master, "python3", "-c", probe],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return int(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else 0


def _audit(data: Path, history: Path, report: Path, network: str, master: str) -> dict[str, object]:
    shutil.rmtree(report, ignore_errors=True)
    report.mkdir(parents=True)
    dirs = [str(data / f"broker-{b}") for b in BROKERS]
    _docker(
        "run", "--rm", "--network", network,
        "-v", f"{data}:{data}:ro", "-v", f"{report}:/report", IMAGE,
        "minibroker", "audit", "--master", master, "--data", *dirs,
        "--history", str(history), "--report", "/report",
        timeout=_AUDIT_TIMEOUT_S,
    )  # fmt: skip
    summary: dict[str, object] = json.loads((report / "report.json").read_text())["summary"]
    return summary


def measure(work_dir: Path, records: int = RECORDS) -> SparkAuditResult:
    """Build the image, write the data, start the master and worker, audit RUNS times on
    each master; every container and the network are removed at the end."""
    started = time.perf_counter()
    subprocess.run(
        ["make", "--no-print-directory", "spark-image"], cwd=REPO, check=True, timeout=3600
    )
    build_s = time.perf_counter() - started
    root = (work_dir / "audit-spark").resolve()
    shutil.rmtree(root, ignore_errors=True)
    data = root / "data"
    data.mkdir(parents=True)
    history = write_data(data, records)
    tag = uuid.uuid4().hex[:8]
    network, master, worker = f"mb-bench-{tag}", f"mb-bench-{tag}-master", f"mb-bench-{tag}-worker"
    _docker("network", "create", network)
    try:
        _docker(
            "run", "-d", "--name", master, "--hostname", "spark-master", "--network", network,
            IMAGE, "spark-master",
        )  # fmt: skip
        _docker(
            "run", "-d", "--name", worker, "--network", network, "-v", f"{data}:{data}:ro",
            "-e", "SPARK_MASTER_URL=spark://spark-master:7077",
            "-e", f"SPARK_WORKER_CORES={WORKER_CORES}",
            "-e", f"SPARK_WORKER_MEMORY={WORKER_MEMORY}",
            IMAGE, "spark-worker",
        )  # fmt: skip
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while _alive_workers(master) < 1:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no Spark worker registered in {_READY_TIMEOUT_S} s")
            time.sleep(1)
        masters = {
            "standalone (Docker)": ("spark://spark-master:7077", network),
            "local[2]": ("local[2]", "none"),
        }
        seconds: dict[str, list[float]] = {label: [] for label in masters}
        phases: dict[str, dict[str, float]] = {}
        decoded = 0
        for _ in range(RUNS):
            for label, (url, net) in masters.items():
                summary = _audit(data, history, root / "report", net, url)
                took = float(summary["seconds"])  # type: ignore[arg-type]
                if not seconds[label] or took < min(seconds[label]):
                    phases[label] = dict(summary["phases"])  # type: ignore[call-overload]
                seconds[label].append(took)
                decoded = int(summary["records_decoded"])  # type: ignore[call-overload]
                if not summary["clean"]:
                    raise RuntimeError(f"the audit on {label} found violations in clean data")
    finally:
        subprocess.run(["docker", "rm", "-f", master, worker], capture_output=True, timeout=120)
        subprocess.run(["docker", "network", "rm", network], capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)
    return SparkAuditResult(
        records_decoded=decoded,
        seconds={label: tuple(s) for label, s in seconds.items()},
        phases=phases,
        build_s=build_s,
    )
