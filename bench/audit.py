"""The Spark audit's throughput: records audited per second on ``local[2]``.

Three brokers' data dirs are written with the project's ``Log`` (:mod:`chaos.audit.testing`):
one topic, a partition led by each broker, every partition replicated to all three (RF 3),
100-byte unique values in batches of about 16 KiB, high watermarks at the log end, and a
history with one ``ok`` line per record. The audit then runs :data:`RUNS` times on one
SparkSession; the start-up of that session is timed separately and left out of the audit
times. Every check runs (nothing is planted, so the audit must come out clean).

Besides wall time, each run's CPU is read from ``/proc`` for the driver, its JVM and the
Python workers (the machine's two cores are shared with other work: CPU seconds say what
the audit costs whatever the load).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from chaos.audit.testing import BrokerDataDir, history_line, write_lines
from proto.config.log_config import LogConfig
from proto.topic_partition import TopicPartition

__all__ = ["AuditBenchResult", "measure", "write_data"]

BROKERS = (1, 2, 3)
TOPIC = "audit"
PARTITIONS = 3
RECORDS = 1_000_000
"""Unique records in all; each replica holds them all, so the audit decodes three times as
many."""
VALUE_BYTES = 100
PER_BATCH = 150
"""Records per batch: 150 100-byte records make a batch of about 16 KiB."""
SEGMENT_BYTES = 64 * 1024**2
MASTER = "local[2]"
RUNS = 5


@dataclass(frozen=True)
class AuditBenchResult:
    records: int
    """Unique records (and ok operations in the history)."""
    decoded: int
    """Records the audit decoded: every replica's."""
    segments: int
    data_bytes: int
    """Segment bytes across the three data dirs."""
    history_bytes: int
    write_s: float
    """Writing the data dirs and the history (not part of the audit)."""
    startup_s: float
    """SparkSession start-up."""
    audit_s: tuple[float, ...]
    """Each audit run, start-up excluded."""
    cpu_s: tuple[dict[str, float], ...]
    """Each run's CPU seconds: ``driver`` (this process), ``jvm``, ``workers`` (Python);
    empty without /proc."""
    load: tuple[float, ...]
    """The 1-minute load average after each run."""
    violations: int
    phases: dict[str, float]
    """Wall seconds per phase of the fastest run (chaos.audit.model.AuditResult.phases)."""
    master: str
    spark_version: str
    java_version: str

    def records_per_s(self, run: int) -> float:
        return self.decoded / self.audit_s[run]

    @property
    def median_s(self) -> float:
        return statistics.median(self.audit_s)


def _value(partition: int, i: int) -> str:
    return f"p{partition}-{i:09d}-".ljust(VALUE_BYTES, "x")


def write_data(root: Path, records: int) -> Path:
    """The three data dirs under ``root`` and the history; returns the history file."""
    dirs = {
        b: BrokerDataDir(root / f"broker-{b}", b, LogConfig(segment_bytes=SEGMENT_BYTES))
        for b in BROKERS
    }
    history = []
    t0 = time.time()
    for p in range(PARTITIONS):
        tp = TopicPartition(TOPIC, p)
        leader = dirs[BROKERS[p % len(BROKERS)]]
        count = records // PARTITIONS + (1 if p < records % PARTITIONS else 0)
        values = [_value(p, i) for i in range(count)]
        leader.produce(tp, values, epoch=0, per_batch=PER_BATCH)
        for d in dirs.values():
            if d is not leader:
                d.replicate(tp, leader)
            d.high_watermarks[tp] = count
        history += [
            history_line("ok", tp, v, i, time=t0 + i / 10_000, process=p)
            for i, v in enumerate(values)
        ]
    for d in dirs.values():
        d.close()
    return write_lines(root / "history.jsonl", history)


def _java_version() -> str:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown Java"
    return out.stderr.splitlines()[0].strip() if out.stderr else "unknown Java"


def _process_tree_cpu() -> dict[str, float]:
    """CPU seconds so far of this process and its descendants (those gone included), by
    kind: the driver (this interpreter), the JVM, the Python workers."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[tuple[int, list[str]]]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        children[int(fields[1])].append((int(entry), fields))
    totals = {"driver": 0.0, "jvm": 0.0, "workers": 0.0}

    def walk(pid: int, fields: list[str]) -> None:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()[:300]
        except OSError:
            command = b""
        kind = "jvm" if b"java" in command else "workers" if b"pyspark" in command else "driver"
        # utime, stime, and those of reaped children
        totals[kind] += sum(int(x) for x in fields[11:15]) / tick
        for child, child_fields in children.get(pid, []):
            walk(child, child_fields)

    me = os.getpid()
    stat = Path(f"/proc/{me}/stat").read_text()
    walk(me, stat[stat.rindex(")") + 2 :].split())
    return totals


def _cpu() -> dict[str, float]:
    try:
        return _process_tree_cpu()
    except OSError:
        return {}


def measure(work_dir: Path, records: int = RECORDS, master: str = MASTER) -> AuditBenchResult:
    """Write the data, start Spark, audit ``RUNS`` times."""
    from chaos.audit.data_dirs import read_data_dirs
    from chaos.audit.job import audit
    from chaos.audit.session import start_session

    root = work_dir / "audit"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    try:
        started = time.perf_counter()
        history = write_data(root, records)
        write_s = time.perf_counter() - started
        data = [root / f"broker-{b}" for b in BROKERS]
        segments = sorted(root.glob("broker-*/*/*.log"))

        started = time.perf_counter()
        spark = start_session(master)
        startup_s = time.perf_counter() - started
        try:
            times: list[float] = []
            cpu: list[dict[str, float]] = []
            load: list[float] = []
            phases: dict[str, float] = {}
            for _ in range(RUNS):
                before = _cpu()
                started = time.perf_counter()
                result = audit(spark, read_data_dirs(data), history)
                times.append(time.perf_counter() - started)
                after = _cpu()
                cpu.append({k: after[k] - before[k] for k in after if k in before})
                load.append(os.getloadavg()[0])
                if times[-1] == min(times):
                    phases = result.phases
            version = spark.version
        finally:
            spark.stop()
        return AuditBenchResult(
            records=records,
            decoded=result.records_decoded,
            segments=len(segments),
            data_bytes=sum(s.stat().st_size for s in segments),
            history_bytes=history.stat().st_size,
            write_s=write_s,
            startup_s=startup_s,
            audit_s=tuple(times),
            cpu_s=tuple(cpu),
            load=tuple(load),
            violations=len(result.violations),
            phases=phases,
            master=master,
            spark_version=version,
            java_version=_java_version(),
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
