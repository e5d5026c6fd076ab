"""What the authenticated mode costs: ``minibroker perf produce --bulk`` against a
local 3-broker cluster, PLAINTEXT and ``cluster up --tls``, in one run.

What a user runs, as a user runs it: ``cluster up`` (``--tls`` or not) in a scratch data dir
on free ports, a topic with 3 partitions and RF 3, then the ``perf produce`` subprocess
with acks=all, 100-byte records and ``--bulk`` (the brokers' load, not a Python call per
record, so that TLS's share shows), its defaults otherwise (in TLS mode the CLI finds the
cluster's ``tls/admin.properties`` itself). The two modes alternate, ``ROUNDS`` times each,
each round on a fresh cluster; the table keeps every round, the ratio compares the best.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from bench.cli_runner import run_minibroker
from deploy.local_cluster import LocalCluster
from deploy.ports import free_port_block

RECORDS = 2_000_000
"""Two seconds or more of a saturating producer: 200,000 records, as the producer before
the batch-oriented rewrite took a fifth of a second and measured its start more than its
steady state."""
RECORD_BYTES = 100
ROUNDS = 3
TOPIC = "perf"
_SUMMARY = re.compile(r"([\d,]+) records/s, ([\d.]+) MB/s; latency ms p50 ([\d.]+), p95 ([\d.]+)")


@dataclass(frozen=True)
class PerfRound:
    mode: str
    records_per_s: float
    mb_per_s: float
    p50_ms: float
    p95_ms: float


@dataclass(frozen=True)
class TlsResult:
    rounds: list[PerfRound]
    command: str

    def best(self, mode: str) -> PerfRound:
        return max((r for r in self.rounds if r.mode == mode), key=lambda r: r.records_per_s)

    def spread(self, mode: str) -> float:
        """Slowest round of ``mode`` against its fastest (1.0: no noise)."""
        rates = [r.records_per_s for r in self.rounds if r.mode == mode]
        return min(rates) / max(rates)

    @property
    def ratio(self) -> float:
        return self.best("TLS").records_per_s / self.best("PLAINTEXT").records_per_s


def _cli(*args: str, data_dir: Path) -> str:
    out, err = run_minibroker(*args, data_dir=data_dir, timeout=600)
    return out + err


def _round(work_dir: Path, tls: bool) -> PerfRound:
    data_dir = work_dir / ("tls" if tls else "plaintext")
    shutil.rmtree(data_dir, ignore_errors=True)
    base = free_port_block(7)
    cluster = LocalCluster(data_dir)
    cluster.up(3, base_port=base, zookeeper_port=base + 3, kafka_base_port=base + 4, tls=tls)
    try:
        _cli("topics", "create", TOPIC, "--partitions", "3", "--replication-factor", "3",
             data_dir=data_dir)  # fmt: skip
        output = _cli(
            "perf", "produce", TOPIC, "--num-records", str(RECORDS),
            "--record-size", str(RECORD_BYTES), "--acks", "all", "--bulk", data_dir=data_dir,
        )  # fmt: skip
    finally:
        cluster.down()
    found = _SUMMARY.search(output)
    if found is None:
        raise RuntimeError(f"no perf summary in: {output[-2000:]}")
    rate, mb, p50, p95 = found.groups()
    return PerfRound(
        "TLS" if tls else "PLAINTEXT", float(rate.replace(",", "")), float(mb), float(p50),
        float(p95),
    )  # fmt: skip


def measure(work_dir: Path) -> TlsResult:
    work_dir.mkdir(parents=True, exist_ok=True)
    rounds = []
    for _ in range(ROUNDS):
        for tls in (False, True):
            rounds.append(_round(work_dir, tls))
            time.sleep(1)  # let the stopped cluster's ports and page cache settle
    command = (
        f"minibroker cluster up [--tls]; minibroker topics create {TOPIC} --partitions 3 "
        f"--replication-factor 3; minibroker perf produce {TOPIC} --num-records {RECORDS} "
        f"--record-size {RECORD_BYTES} --acks all --bulk"
    )
    return TlsResult(rounds, command)
