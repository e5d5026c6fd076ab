"""``make bench``: run the benchmarks and write bench/RESULTS.md.

``python -m bench.run --only NAME`` runs one benchmark and rewrites only its section: each
section sits between ``<!-- bench:NAME -->`` markers, and the others keep their text from the
previous RESULTS.md. Every section says when and on what machine it was measured.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import log_append, replication
from bench.machine import describe

BENCH_DIR = Path(__file__).resolve().parent
RESULTS = BENCH_DIR / "RESULTS.md"
WORK_DIR = BENCH_DIR / "out"


@dataclass
class _Run:
    """What one ``bench.run`` invocation shares between its sections."""

    stamp: list[str]
    """The run/command/machine lines every section written in this run starts with."""
    raw_write: log_append.AppendResult | None = None
    """The log_append no-fsync result, whose plain-file MB/s is the raw-write figure."""


def _log_append_section(run: _Run) -> list[str]:
    results = [
        log_append.measure(WORK_DIR, fsync_every=None),
        log_append.measure(WORK_DIR, batches=4000, fsync_every=100),
    ]
    run.raw_write = results[0]
    lines = [
        "## Log append vs plain file writes",
        "",
        *run.stamp,
        "",
        f"`Log.append_as_leader` of one {results[0].batch_bytes}-byte v2 batch (100-byte "
        "records) per call, against unbuffered writes of the same bytes to a plain file in "
        "the same directory, alternating, best of 3. Target: ratio >= 0.8.",
        "",
        "| fsync policy | batches | Log MB/s | plain MB/s | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.label} | {r.batches} | {r.log_mb_s:,.0f} | {r.plain_mb_s:,.0f} | {r.ratio:.2f} |"
        )
        print(
            f"log append, {r.label}: log {r.log_mb_s:,.0f} MB/s, plain "
            f"{r.plain_mb_s:,.0f} MB/s, ratio {r.ratio:.2f}"
        )
    return lines


def _replication_section(run: _Run) -> list[str]:
    if run.raw_write is None:  # --only replication: measure the raw-write figure here too
        run.raw_write = log_append.measure(WORK_DIR, fsync_every=None)
    raw = run.raw_write
    r = replication.measure(WORK_DIR)
    lat = r.latency
    settings = ", ".join(f"`{k}` {v}" for k, v in r.broker_settings.items())
    cpu = ", ".join(f"{name} {pct:.0f}" for name, pct in r.cpu_percent.items())
    slow, median, fast = r.per_second
    partitions = len(replication.ASSIGNMENT)
    lines = [
        f"## Replicated produce: {len(replication.BROKER_IDS)} brokers, RF 3, acks=all",
        "",
        *run.stamp,
        "",
        f"One producer process (this bench, grpc.aio on uvloop) and {len(replication.BROKER_IDS)} "
        f"broker processes plus ZooKeeper on this machine. Topic `{replication.TOPIC}`, "
        f"{partitions} partitions led by brokers 1, 2, 3, RF 3, acks=all. "
        f"{log_append.RECORD_VALUE_BYTES}-byte records, {r.records_per_batch} per "
        f"{r.batch_bytes:,}-byte batch, one batch per Produce request, "
        f"{r.in_flight // partitions} requests in flight per partition ({r.in_flight} in all). "
        f"{r.warmup_s:.0f} s warm-up, then {r.window_s:.0f} s measured. Latency: from the call "
        f"to the acknowledgement, per request ({r.requests:,} requests). Brokers on their "
        f"defaults: {settings}.",
        "",
        "| records/s | MB/s (values) | MB/s (batches) | p50 ms | p95 ms | p99 ms | max ms "
        "| in flight | batch bytes | record bytes |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {r.records_per_s:,.0f} | {r.value_mb_s:.1f} | {r.batch_mb_s:.1f} | {lat.p50:.1f} "
        f"| {lat.p95:.1f} | {lat.p99:.1f} | {lat.max:.1f} | {r.in_flight} | {r.batch_bytes:,} "
        f"| {log_append.RECORD_VALUE_BYTES} |",
        "",
        "MB/s (values) counts record values only, as Kafka's published benchmarks do; MB/s "
        "(batches) counts whole v2 batches, the bytes each replica's log writes.",
        "",
        "Next to the foundation's raw-write figure (log_append's plain-file writes of the same "
        "16 KiB batches, no fsync, this run):",
        "",
        "| raw write MB/s | replicated MB/s (batches) | ratio |",
        "|---:|---:|---:|",
        f"| {raw.plain_mb_s:,.0f} | {r.batch_mb_s:.1f} | {r.batch_mb_s / raw.plain_mb_s:.4f} |",
        "",
        f"- throughput per whole second: slowest {slow:,}, median {median:,}, "
        f"fastest {fast:,} records/s",
        f"- CPU over the window, % of one core: {cpu}",
        "- checks passed: every response NONE; acknowledged offsets tile each partition from 0 "
        "without gap or overlap; every ISR still has all 3 replicas after the run; after a "
        "clean stop, every replica's files hold exactly its partition's acknowledged records, "
        f"CRCs valid ({r.records_on_disk:,} records per replica set, warm-up included)",
        f"- broker log WARNING/ERROR/traceback lines: {_findings_summary(r.log_findings)}",
        f"- wall time of this bench (start-up to clean-up): {r.wall_s:.0f} s",
        "- for scale (Kreps 2014, 3 dedicated brokers, 1 producer, RF 3, acks=all): "
        "421,823 records/s, 40.2 MB/s",
    ]
    print(
        f"replication: {r.records_per_s:,.0f} records/s, {r.value_mb_s:.1f} MB/s values, "
        f"{r.batch_mb_s:.1f} MB/s batches, p50 {lat.p50:.1f} ms, p95 {lat.p95:.1f} ms, "
        f"p99 {lat.p99:.1f} ms, max {lat.max:.1f} ms, {r.in_flight} in flight; raw write "
        f"{raw.plain_mb_s:,.0f} MB/s, ratio {r.batch_mb_s / raw.plain_mb_s:.4f}; "
        f"wall {r.wall_s:.0f} s"
    )
    print(f"replication: per second {slow:,}/{median:,}/{fast:,} records/s; CPU % {cpu}")
    for line in r.log_findings[:_PRINTED_LOG_LINES]:
        print(f"replication: broker log: {line}")
    if len(r.log_findings) > _PRINTED_LOG_LINES:
        print(f"replication: ... and {len(r.log_findings) - _PRINTED_LOG_LINES} more")
    return lines


_PRINTED_LOG_LINES = 20


def _findings_summary(findings: list[str]) -> str:
    if not findings:
        return "none"
    during_run = sum(1 for line in findings if "(run):" in line)
    return (
        f"{during_run} during the run, {len(findings) - during_run} while the brokers stopped "
        "(the bench prints them)"
    )


SECTIONS: dict[str, Callable[[_Run], list[str]]] = {
    "log_append": _log_append_section,
    "replication": _replication_section,
}
"""In RESULTS.md order; log_append first, since replication quotes its raw-write figure."""


def _previous_sections(text: str) -> dict[str, str]:
    return {
        m.group(1): m.group(0)
        for m in re.finditer(r"<!-- bench:(\w+) -->\n.*?<!-- /bench:\1 -->", text, re.DOTALL)
    }


def _wrap(name: str, lines: list[str]) -> str:
    return "\n".join([f"<!-- bench:{name} -->", *lines, f"<!-- /bench:{name} -->"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument(
        "--only", choices=list(SECTIONS), help="run one benchmark; keep the others' sections"
    )
    args = parser.parse_args(argv)
    WORK_DIR.mkdir(exist_ok=True)
    cli = [
        Path(sys.executable).name,
        "-m",
        "bench.run",
        *(["--only", args.only] if args.only else []),
    ]
    command = ("make bench  # " if not args.only else "") + shlex.join(cli)
    run = _Run(
        stamp=[
            f"- run: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
            f"- command: `{command}`",
            f"- machine: {describe(WORK_DIR)}",
        ]
    )
    previous = _previous_sections(RESULTS.read_text()) if RESULTS.exists() else {}
    sections = []
    for name, build in SECTIONS.items():
        if args.only in (None, name):
            sections.append(_wrap(name, build(run)))
        else:
            sections.append(
                previous.get(name)
                or _wrap(name, [f"_Not run yet: `python -m bench.run --only {name}`._"])
            )
    header = (
        "# Benchmark results\n\n"
        "`make bench` runs every section; `python -m bench.run --only NAME` reruns one and "
        "keeps the others, so each section says when and where it was measured.\n\n"
    )
    RESULTS.write_text(header + "\n\n".join(sections) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
