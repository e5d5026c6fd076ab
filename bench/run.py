"""``make bench``: run the benchmarks and write bench/RESULTS.md.

``python -m bench.run --only NAME`` runs one benchmark and rewrites only its section: each
section sits between ``<!-- bench:NAME -->`` markers, and the others keep their text from the
previous RESULTS.md. Every section says when and on what machine it was measured.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import (
    audit,
    audit_spark,
    codecs,
    compression,
    failover,
    kafka_listener,
    latency,
    log_append,
    replication,
    scale,
    side_by_side,
)
from bench import chaos as chaos_bench
from bench import soak as soak_bench
from bench import tls as tls_bench
from bench import transactions as txn_bench
from bench.machine import describe
from chaos.run_stats import WINDOW_S
from chaos.runner import MIN_INSYNC_REPLICAS, RunSettings
from proto.process.tuning import tune_process

BENCH_DIR = Path(__file__).resolve().parent
RESULTS = BENCH_DIR / "RESULTS.md"
RESULTS_JSON = BENCH_DIR / "results.json"
WORK_DIR = BENCH_DIR / "out"


@dataclass
class _Run:
    """What one ``bench.run`` invocation shares between its sections."""

    stamp: list[str]
    """The run/command/machine lines every section written in this run starts with."""
    raw_write: log_append.AppendResult | None = None
    """The log_append no-fsync result, whose plain-file MB/s is the raw-write figure."""
    figures: dict[str, Any] = field(default_factory=dict)
    """Section name -> its figures, for results.json."""
    scale_sizes: tuple[int, ...] = scale.DEFAULT_SIZES
    """The partition counts of the scale section (``--scale-partitions``)."""
    soak_from: Path | None = None
    """A kept soak directory the chaos_soak section sums up instead of running one."""
    soak_command: str | None = None
    """The command that soak was run with."""


def _log_append_section(run: _Run) -> list[str]:
    kib256, mib = log_append.PRODUCER_BATCH_BYTES, 1024 * 1024
    results = [
        log_append.measure(WORK_DIR, fsync_every=None),
        log_append.measure(WORK_DIR, batches=1000, fsync_every=None, batch_bytes=kib256),
        log_append.measure(WORK_DIR, batches=256, fsync_every=None, batch_bytes=mib),
        log_append.measure(WORK_DIR, batches=4000, fsync_every=100),
        log_append.measure(WORK_DIR, batches=500, fsync_every=16, batch_bytes=kib256),
    ]
    run.raw_write = results[0]
    run.figures["log_append"] = {
        f"{r.batch_bytes} bytes, {r.label}": {
            "batch_bytes": r.batch_bytes,
            "log_mb_s": r.log_mb_s,
            "plain_mb_s": r.plain_mb_s,
            "ratio": r.ratio,
        }
        for r in results
    }
    lines = [
        "## Log append vs plain file writes",
        "",
        *run.stamp,
        "",
        "`Log.append_as_leader` of one v2 batch (100-byte records) per call, validated as "
        "Kafka's LogValidator does (header, CRC and every record: broker/log/log_validator.py), "
        "against unbuffered writes of the same bytes to a plain file in the same directory, "
        "alternating, best of 3; for batches of Kafka's default `batch.size` (16 KiB), "
        "minibroker's producer default (256 KiB) and 1 MiB. Target: ratio >= 0.9.",
        "",
        "| batch bytes | fsync policy | batches | Log MB/s | plain MB/s | ratio |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.batch_bytes:,} | {r.label} | {r.batches} | {r.log_mb_s:,.0f} | "
            f"{r.plain_mb_s:,.0f} | {r.ratio:.2f} |"
        )
        print(
            f"log append, {r.batch_bytes} bytes, {r.label}: log {r.log_mb_s:,.0f} MB/s, plain "
            f"{r.plain_mb_s:,.0f} MB/s, ratio {r.ratio:.2f}"
        )
    cost = log_append.validator_cost()
    lines += [
        "",
        "The record checks alone (`validate_client_batches` on one 16 KiB batch, timeit, best "
        "of 7): records of one layout are checked a column at a time, records of varied sizes "
        "one by one.",
        "",
        "| batch | µs per record |",
        "|---|---:|",
        f"| 100-byte values (this benchmark's) | {cost.one_layout_us:.3f} |",
        f"| 50- to 150-byte values | {cost.varied_us:.3f} |",
    ]
    print(
        f"validator: {cost.one_layout_us:.3f} µs/record (one layout), "
        f"{cost.varied_us:.3f} µs/record (varied sizes)"
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
    run.figures["replication"] = {
        "records_per_s": r.records_per_s,
        "batch_bytes": r.batch_bytes,
        "in_flight": r.in_flight,
        "latency_ms": {"p50": lat.p50, "p95": lat.p95, "p99": lat.p99, "max": lat.max},
        "raw_write_mb_s": raw.plain_mb_s,
    }
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


def _failover_section(run: _Run) -> list[str]:
    r = failover.measure(WORK_DIR)
    kills = r.kills
    total, expiry, elected = r.failover, r.expiry, r.elected
    run.figures["failover"] = {
        "median_ms": total.median * 1000,
        "p90_ms": total.p90 * 1000,
        "max_ms": total.max * 1000,
        "session_timeout_ms": r.session_timeout_ms,
        "kills": len(r.kills),
        "clean_move_median_ms": r.moved.median * 1000 if r.moved else None,
        "clean_move_max_ms": r.moved.max * 1000 if r.moved else None,
        "clean_moves": len(r.moves),
    }
    settings = ", ".join(f"`{k}` {v}" for k, v in r.broker_overrides.items())
    topic_config = ", ".join(f"`{k}` {v}" for k, v in r.topic_config.items())
    lines = [
        f"## Failover: kill -9 of the leader, {len(failover.BROKER_IDS)} brokers, RF 3, acks=all",
        "",
        *run.stamp,
        "",
        f"{len(failover.BROKER_IDS)} broker processes, each running its controller candidate, "
        f"plus ZooKeeper (tickTime {r.tick_ms} ms) on this machine. Topic `{failover.TOPIC}`: "
        f"1 partition, replicas {failover.ASSIGNMENT[0]}, {topic_config}, created through "
        f"ZooKeeper and led as the controller decides. Brokers: {settings}. Each of "
        f"{len(kills)} rounds: wait until the leader named by the state znode serves the "
        "partition and the ISR has all 3 replicas; one acks=all produce acknowledged by that "
        "leader; `t0`, then SIGKILL the leader; then, like a client refreshing its metadata, "
        "read the state znode and send one acks=all produce (1 record, request timeout "
        f"{failover.PRODUCE_TIMEOUT_MS} ms) to the leader it names, every "
        f"{failover.RETRY_BACKOFF_S * 1000:.0f} ms, until a broker other than the killed one "
        "acknowledges: `t1`. Failover time = `t1 - t0`. Then restart the killed broker and "
        "wait until it is back in the ISR. Two timestamps split each failover: the bench's "
        "ZooKeeper watch on `/brokers/ids` firing (the killed broker's session expired: the "
        "event the controller acts on) and the new state znode's mtime (the controller has "
        "written the new leader).",
        "",
        "| from the kill to | median ms | p90 ms | min ms | max ms |",
        "|---|---:|---:|---:|---:|",
        _summary_row("the first acks=all acknowledgement by the new leader", total),
    ]
    if expiry is not None:
        lines.append(_summary_row("the killed broker's session expiry (watch fired)", expiry))
    lines += [
        _summary_row("the new state znode (its mtime)", elected),
        *(
            [
                _summary_row(
                    f"clean move: SIGTERM of the leader (controlled shutdown), "
                    f"{len(r.moves)} rounds, to the first ack by the new leader",
                    r.moved,
                )
            ]
            if r.moved is not None
            else []
        ),
        "",
        "| session timeout ms | median failover ms | median / session timeout | kills |",
        "|---:|---:|---:|---:|",
        f"| {r.session_timeout_ms:,} | {total.median * 1000:,.0f} "
        f"| {r.median_over_session_timeout:.2f} | {len(kills)} |",
        "",
        f"p90 is the nearest rank ({math.ceil(0.9 * len(kills))}th of {len(kills)}).",
        "",
        "| round | killed | killed the controller too | new leader | leader epoch "
        "| expiry ms | elected ms | first ack ms | failed produces |",
        "|---:|---:|---|---:|---|---:|---:|---:|---:|",
    ]
    for k in kills:
        lines.append(
            f"| {k.round} | {k.victim} | {'yes' if k.victim_was_controller else 'no'} "
            f"| {k.new_leader} | {k.old_epoch} -> {k.new_epoch} | {_ms(k.expiry_s)} "
            f"| {_ms(k.elected_s)} | {_ms(k.failover_s)} | {k.attempts - 1} |"
        )
    if r.moves:
        lines += [
            "",
            "Clean moves: SIGTERM of the leader, whose controlled shutdown asks the controller "
            "to move its leaderships before it exits; the same producer loop, from the signal "
            "to the first acks=all acknowledgement by another broker (the stopping leader may "
            "still acknowledge until the move: those count as its, not the new leader's).",
            "",
            "| move | stopped | the controller too | new leader | leader epoch | first ack ms "
            "| acknowledged by the stopping leader |",
            "|---:|---:|---|---:|---|---:|---:|",
        ]
        for m in r.moves:
            lines.append(
                f"| {m.round} | {m.victim} | {'yes' if m.victim_was_controller else 'no'} "
                f"| {m.new_leader} | {m.old_epoch} -> {m.new_epoch} | {_ms(m.failover_s)} "
                f"| {m.errors.get('acknowledged by the stopping leader', 0)} |"
            )
    lines += ["", *_failover_findings(r)]
    print(
        f"failover: median {total.median * 1000:,.0f} ms, p90 {total.p90 * 1000:,.0f} ms, "
        f"min {total.min * 1000:,.0f} ms, max {total.max * 1000:,.0f} ms over {len(kills)} "
        f"kills; session timeout {r.session_timeout_ms:,} ms, median/timeout "
        f"{r.median_over_session_timeout:.2f}; wall {r.wall_s:.0f} s"
    )
    for line in r.log_findings[:_PRINTED_LOG_LINES]:
        print(f"failover: broker log: {line}")
    if len(r.log_findings) > _PRINTED_LOG_LINES:
        print(f"failover: ... and {len(r.log_findings) - _PRINTED_LOG_LINES} more")
    return lines


def _failover_findings(r: failover.FailoverResult) -> list[str]:
    """The bullets under the failover tables: what dominates, checks, logs."""
    kills = r.kills
    total = r.failover
    bullets = []
    timed = [(k, k.expiry_s) for k in kills if k.expiry_s is not None]
    if timed:
        expiry = statistics.median(expired for _, expired in timed)
        elect = statistics.median(k.elected_s - expired for k, expired in timed)
        ack = statistics.median(k.failover_s - k.elected_s for k in kills)
        bullets.append(
            f"- what dominates: detecting the death. The median kill-to-expiry, "
            f"{expiry * 1000:,.0f} ms, is {expiry / total.median:.0%} of the median failover; "
            f"ZooKeeper expires a session one timeout ({r.session_timeout_ms:,} ms) after it "
            f"last heard from the client, checked every tick ({r.tick_ms} ms), so the expiry "
            "falls a little before the timeout (the broker's last ping preceded the kill) or "
            "up to a tick after it. After the expiry, the controller needs a median "
            f"{elect * 1000:,.0f} ms to write the new leader, and the new leader's first "
            f"acks=all acknowledgement comes a median {ack * 1000:,.0f} ms after that write "
            "(LeaderAndIsr, the follower re-fetching from the new leader, and this producer's "
            f"{failover.RETRY_BACKOFF_S * 1000:.0f} ms retry period)."
        )
    co = [k.failover_s for k in kills if k.victim_was_controller]
    alone = [k.failover_s for k in kills if not k.victim_was_controller]
    if co and alone:
        bullets.append(
            f"- {len(co)} of {len(kills)} kills also killed the controller (a new one is "
            "elected from the same session expiry, then loads the cluster and elects the "
            f"leader): median {statistics.median(co) * 1000:,.0f} ms, against "
            f"{statistics.median(alone) * 1000:,.0f} ms for the others"
        )
    elif co:
        bullets.append(
            "- every kill also killed the controller: a new one was elected from the same "
            "session expiry before it elected the leader"
        )
    else:
        controllers = sorted({k.controller_after for k in kills if k.controller_after is not None})
        bullets.append(
            f"- no killed leader was also the controller (controller: broker "
            f"{', '.join(map(str, controllers)) or 'unknown'}); the bench records it per kill, "
            "since such a kill adds a controller election from the same expiry"
        )
    causes: Counter[str] = Counter()
    for k in kills:
        causes.update(k.errors)
    if causes:
        bullets.append(
            "- failed produces after the kills, by cause: "
            + ", ".join(f"{cause} {count:,}" for cause, count in causes.most_common())
            + " (UNAVAILABLE: sent to the killed broker while the state znode still named it)"
        )
    rejoin = statistics.median(k.rejoin_s for k in kills)
    bullets += [
        "- checks passed: every new leader's epoch was the old one + 1; every new leader's "
        "first acknowledged offset was past the killed leader's last acknowledged one; after "
        f"every restart the ISR had all 3 replicas again (median {rejoin * 1000:,.0f} ms from "
        "the restart)",
        f"- broker log ERROR/traceback lines: {_findings_summary(r.log_findings)}",
        f"- wall time of this bench (start-up to clean-up): {r.wall_s:.0f} s",
    ]
    return bullets


def _summary_row(label: str, s: failover.Summary) -> str:
    return (
        f"| {label} | {s.median * 1000:,.0f} | {s.p90 * 1000:,.0f} | {s.min * 1000:,.0f} "
        f"| {s.max * 1000:,.0f} |"
    )


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.0f}"


_PRINTED_LOG_LINES = 20


def _findings_summary(findings: list[str]) -> str:
    if not findings:
        return "none"
    during_run = sum(1 for line in findings if "(run):" in line)
    return (
        f"{during_run} during the run, {len(findings) - during_run} while the brokers stopped "
        "(the bench prints them)"
    )


def _audit_section(run: _Run) -> list[str]:
    r = audit.measure(WORK_DIR)
    first, best, median = r.audit_s[0], min(r.audit_s), r.median_s
    steady = r.cpu_s[1:] or r.cpu_s
    cpu = {k: statistics.median(c[k] for c in steady) for k in (steady[0] if steady else {})}
    run.figures["audit"] = {
        "records_decoded": r.decoded,
        "records_per_s_best": r.decoded / best,
        "records_per_s_median": r.decoded / median,
        "records_per_s_first": r.decoded / first,
        "audit_s": list(r.audit_s),
        "cpu_s_median": cpu,
        "load_after_runs": list(r.load),
        "spark_startup_s": r.startup_s,
        "master": r.master,
        "violations": r.violations,
    }
    lines = [
        f"## Spark audit: {r.records:,} records x {len(audit.BROKERS)} replicas, {r.master}",
        "",
        *run.stamp,
        "",
        f"`minibroker audit`'s job (chaos/audit/job.py) on data dirs written with the project's "
        f"`Log`: {len(audit.BROKERS)} brokers, topic `{audit.TOPIC}` with {audit.PARTITIONS} "
        f"partitions (one led by each broker), every partition on all {len(audit.BROKERS)} "
        f"brokers; {audit.VALUE_BYTES}-byte unique values, {audit.PER_BATCH} per batch "
        f"(about 16 KiB), {audit.SEGMENT_BYTES // 1024**2} MiB segments; high watermarks at "
        "the log end; a history with one `ok` line per record. Every check runs (lost_ack, "
        "divergence, duplicate, gap, crc, epoch_cache, hw_above_leo, phantom). One "
        f"SparkSession on `{r.master}`; its start-up is timed apart and excluded from the "
        f"audit times. The audit runs {len(r.audit_s)} times on that session: the first "
        "includes starting the Python workers and importing numpy and pyarrow in them.",
        "",
        "| records on disk (all replicas) | segments | data MB | history MB | Spark start-up s "
        "| audit s (first) | audit s (median) | audit s (best) | records/s (median) "
        "| records/s (best) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {r.decoded:,} | {r.segments} | {r.data_bytes / 1e6:,.0f} | "
        f"{r.history_bytes / 1e6:,.0f} | {r.startup_s:.1f} | {first:.1f} | {median:.2f} | "
        f"{best:.2f} | {r.decoded / median:,.0f} | {r.decoded / best:,.0f} |",
        "",
        "records/s counts the records decoded and compared across all replicas (each unique "
        f"record {len(audit.BROKERS)} times); acknowledged records checked per second are a "
        f"third of that: {r.records / best:,.0f} (best run).",
        "",
        "- each run, s: "
        + ", ".join(f"{t:.2f}" for t in r.audit_s)
        + "; load average (1 min) after each: "
        + ", ".join(f"{x:.1f}" for x in r.load),
        "- CPU per run after the first (median), s: "
        + (", ".join(f"{k} {v:.2f}" for k, v in cpu.items()) or "not measured")
        + " (from /proc: the driver, its JVM, the Python workers; what the audit costs "
        "whatever else runs on the machine)",
        "- where the fastest run spent its time: "
        + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in r.phases.items())
        + " (plan: list the data dirs' files and pack the map tasks; job: the one Spark job, "
        "segments scanned and the history parsed in the map tasks, each partition's replicas "
        "compared, decoded and judged in its reduce task; checks: merging the findings on the "
        "driver, and the lookup job when findings need the history's text; statistics: "
        "per-partition and per-second counts)",
        f"- violations found: {r.violations} (none planted)",
        f"- Spark {r.spark_version}, {r.java_version}",
        f"- writing the data dirs and the history (not timed in the audit): {r.write_s:.0f} s",
    ]
    print(
        f"audit: {r.decoded:,} records in {first:.1f} s (first), {median:.2f} s (median), "
        f"{best:.2f} s (best): {r.decoded / best:,.0f} records/s best, "
        f"{r.decoded / median:,.0f} median; Spark start-up {r.startup_s:.1f} s; "
        f"violations {r.violations}"
    )
    return lines


def _audit_spark_section(run: _Run) -> list[str]:
    r = audit_spark.measure(WORK_DIR)
    run.figures["audit_spark"] = {
        label: {"seconds": list(seconds), "records_per_s_best": r.records_per_s(label)}
        for label, seconds in r.seconds.items()
    } | {"records_decoded": r.records_decoded}
    lines = [
        "## Spark audit on a standalone master and worker in Docker, against local[2]",
        "",
        *run.stamp,
        "",
        "The audit section's data (the same writer, "
        f"{r.records_decoded:,} records on disk and a history of a third as many lines), "
        "audited by `minibroker audit` once per run in the `minibroker-spark` image of the "
        'compose profile "spark": on Spark\'s standalone master and one worker '
        f"({audit_spark.WORKER_CORES} cores, {audit_spark.WORKER_MEMORY}) in containers, "
        "the data bind-mounted read-only at the same path in the worker and the driver's "
        "container, and on `local[2]` in the same image; the two alternate, "
        f"{audit_spark.RUNS} runs each. Seconds are the audit's own (report.json), Spark's "
        "start-up excluded; each run is a new session, so each includes starting the "
        "executors' Python workers (numpy and pyarrow imported in each) and the JVMs' first "
        'compilations (the audit section\'s "first" column).',
        "",
        "| master | audit s (each run) | records/s (best) | phases of the best run |",
        "|---|---|---:|---|",
    ]
    for label, seconds in r.seconds.items():
        phases = ", ".join(f"{n} {v:.1f} s" for n, v in r.phases[label].items())
        lines.append(
            f"| {label} | {', '.join(f'{s:.1f}' for s in seconds)} | "
            f"{r.records_per_s(label):,.0f} | {phases} |"
        )
    lines += [
        "",
        "Both on this one machine's cores, so the standalone cluster can only add its "
        "overhead (the executor in a JVM of its own, RPC between the containers); what it "
        "shows is that the job the Docker cluster's `make audit-spark` runs reads the files "
        "where they lie.",
        "",
        f"- `make spark-image` before the runs: {r.build_s:.0f} s",
    ]
    for label in r.seconds:
        print(f"audit_spark: {label}: {r.records_per_s(label):,.0f} records/s {r.seconds[label]}")
    return lines


def _chaos_section(run: _Run) -> list[str]:
    results = chaos_bench.measure(WORK_DIR / "chaos")
    defaults = RunSettings(out=WORK_DIR)
    intro = (
        "Each column is one `minibroker chaos run` (bench/chaos.py) on a cluster it starts "
        "under its own compose project: 3 brokers, a 3-node ZooKeeper ensemble, RF 3, "
        f"`min.insync.replicas` {MIN_INSYNC_REPLICAS}, `zookeeper.session.timeout.ms` "
        f"{defaults.session_timeout_ms}; {defaults.producers} producer processes (acks=all, "
        f"idempotent) writing unique values at {defaults.rate:.0f} records/s each over "
        f"{defaults.topics} topics x {defaults.partitions} partitions, {defaults.consumers} "
        "consumers in a group plus one `assign()` reader. Every nemesis the docker backend "
        "has (`--nemesis all`), one fault at a time on a seeded schedule "
        f"(`--interval {chaos_bench.INTERVAL_S:.0f}`); the second run replays the first "
        "one's schedule.json, so the same faults strike at the same times. The seed is "
        "chosen so that the schedule holds `partition`, `split` and `cascade` faults (most "
        "seeds lack one of them); a fault the cluster offers no target for at its moment "
        "(e.g. `cascade` while an ISR is not whole) is skipped and counted apart. Acks count `ok` "
        "outcomes within the schedule's window; a heal's time to full ISR runs from the "
        "heal to the first moment every partition's state znode lists all its replicas."
    )
    heading = (
        f"## Chaos: {chaos_bench.DURATION_S / 60:.0f} minutes of random faults on the Docker "
        "cluster, leader epochs against high watermarks"
    )
    return _chaos_lines(run, results, "chaos", heading, intro, [])


def _chaos_transactions_section(run: _Run) -> list[str]:
    results = chaos_bench.measure_transactions(WORK_DIR / "chaos-transactions")
    defaults = RunSettings(out=WORK_DIR)
    intro = (
        "Each column is one `minibroker chaos run --workload transactions` (bench/chaos.py, "
        "docs/chaos.md) on a cluster it starts under its own compose project, set up as the "
        f"chaos section's: {defaults.producers} transactional producers (gRPC client, "
        f"{defaults.transaction_records} records per transaction over the run's partitions, "
        f"{defaults.abort_probability:.0%} aborted on purpose, `transaction.timeout.ms` "
        f"{defaults.transaction_timeout_ms}), {defaults.copiers} consume-transform-produce "
        "copier committing its input offsets in its transactions, read_committed consumers; "
        "the transactions workload's default nemeses (the transaction coordinator killed and "
        "paused, a partition leader killed inside an open transaction, kill, bounce, pause, "
        "leader and controller faults) on a seeded schedule, the second run replaying the "
        'first one\'s. The audit judges the transactions as docs/audit.md, "Transactions", '
        "says (lost_committed, committed_abort, aborted_read, dirty_read, partial_txn, "
        "hanging_txn) besides every other check."
    )
    heading = (
        f"## Chaos, transactions: {chaos_bench.DURATION_S / 60:.0f} minutes of faults on the "
        "transaction path, leader epochs against high watermarks"
    )

    def outcomes(r: chaos_bench.ChaosResult) -> str:
        t = r.stats.transactions
        return (
            f"{t.get('committed', 0):,} committed, {t.get('aborted', 0):,} aborted, "
            f"{t.get('unknown', 0):,} unknown"
        )

    def checked(r: chaos_bench.ChaosResult) -> str:
        report = r.run_dir / "audit" / "report.json"
        if not report.exists():
            return "-"
        counts = json.loads(report.read_text())["summary"].get("transactions") or {}
        return (
            f"{counts.get('writes_checked', 0):,} writes, "
            f"{counts.get('reads_checked', 0):,} read_committed reads"
        )

    extra: list[tuple[str, Callable[[chaos_bench.ChaosResult], str]]] = [
        ("transactions (the history's outcomes)", outcomes),
        ("checked", checked),
    ]
    return _chaos_lines(run, results, "chaos_transactions", heading, intro, extra)


def _soak_section(
    key: str, heading: str, measure: Callable[[Path], soak_bench.SoakFigures]
) -> Callable[[_Run], list[str]]:
    """A soak's section: the kept soak directory of ``--soak-from``, else ``measure``'s."""

    def section(run: _Run) -> list[str]:
        figures = (
            soak_bench.read(run.soak_from, run.soak_command)
            if run.soak_from is not None
            else measure(WORK_DIR)
        )
        return _soak_lines(run, key, heading, figures)

    return section


def _soak_lines(run: _Run, key: str, heading: str, figures: soak_bench.SoakFigures) -> list[str]:
    summary, totals = figures.summary, figures.summary["totals"]
    run.figures[key] = {"command": figures.command, **totals}

    def spread(values: dict[str, Any], unit: str = "s") -> str:
        if not values.get("count"):
            return "none measured"
        return (
            f"median {values['median']:.1f} {unit}, p99 {values['p99']:.1f} {unit}, max "
            f"{values['max']:.1f} {unit} ({values['count']:,})"
        )

    kinds = ", ".join(f"{k} {n}" for k, n in totals["violations_by_kind"].items())
    lines = [
        heading,
        "",
        *run.stamp,
        "",
        '`minibroker chaos soak` (chaos/soak.py, docs/chaos.md "The soak") starts one cluster '
        "and runs `chaos run` against it window after window, each window with topics, "
        "workload processes and a seeded schedule of its own drawn from every nemesis the "
        "backend can do, audited at its end from copies of its own topics; it stops at the "
        "first violation (with `--keep-going`, goes on past it) or once enough faults "
        "struck. Reads checked are the history's read lines the windows' audits judged.",
        "",
        "| | |",
        "|---|---:|",
        f"| command | `{figures.command}` |",
        f"| stopped | {summary['stopped']} |",
        f"| windows | {totals['windows']} |",
        f"| time | {summary['seconds'] / 3600:.2f} h |",
        f"| faults injected | {totals['faults']:,} |",
        f"| faults skipped (no target at the time) | {totals['skipped']:,} |",
        "| faults by nemesis | "
        + ", ".join(f"{k} {n}" for k, n in totals["faults_by_nemesis"].items())
        + " |",
        f"| acknowledged writes | {totals['acked']:,} |",
        f"| reads checked | {totals['reads_checked']:,} |",
        f"| heal to full ISR | {spread(totals['heal_to_isr_s'])} |",
        f"| consumer group redeliveries | {totals['group_redelivered']:,} |",
        f"| rebalance pauses | {spread(totals['rebalance_pause_s'])} |",
        f"| violations | {totals['violations']}" + (f" ({kinds})" if kinds else "") + " |",
        "| records Kafka-client producers resent under a new epoch (librdkafka; not "
        f"violations, docs/chaos.md) | {totals.get('kafka_client_resends', 0):,} |",
        f"| exit status | {summary['status']} |",
        "",
        f"The soak directory (each window's history, timeline, logs and report; a window with "
        f"violations whole) is `{figures.soak_dir}`.",
    ]
    print(f"{key}: {lines[-3]}")
    return lines


def _chaos_lines(
    run: _Run,
    results: list[chaos_bench.ChaosResult],
    key: str,
    heading: str,
    intro: str,
    extra: list[tuple[str, Callable[[chaos_bench.ChaosResult], str]]],
) -> list[str]:
    run.figures[key] = {
        r.label: {
            "acked": r.stats.acked,
            "acks_per_s": r.stats.acks_per_s,
            "violations": r.stats.violations,
            "exit_status": r.status,
            **({"transactions": dict(r.stats.transactions)} if r.stats.transactions else {}),
        }
        for r in results
    }

    def row(label: str, cell: Callable[[chaos_bench.ChaosResult], str]) -> str:
        return f"| {label} | " + " | ".join(cell(r) for r in results) + " |"

    def heals(r: chaos_bench.ChaosResult) -> str:
        h = r.stats.heal_to_isr_s
        if not h:
            return "none measured"
        return f"median {statistics.median(h):.1f} s, max {max(h):.1f} s ({len(h)} heals)"

    def verdict(r: chaos_bench.ChaosResult) -> str:
        if r.stats.violations is None:
            return f"audit did not run (exit {r.status})"
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(r.violations_by_kind.items()))
        return f"{r.stats.violations} violations" + (f" ({kinds})" if kinds else "")

    lines = [
        heading,
        "",
        *run.stamp,
        "",
        intro,
        "",
        "| | " + " | ".join(f"`{r.label}`" for r in results) + " |",
        "|---|" + "---:|" * len(results),
        row("command", lambda r: f"`{r.command}`"),
        row("faults injected", lambda r: f"{sum(r.stats.faults.values())}"),
        row("faults skipped (no target at the time)", lambda r: f"{r.skipped}"),
        row(
            "faults by nemesis",
            lambda r: ", ".join(f"{k} {n}" for k, n in sorted(r.stats.faults.items())),
        ),
        row("acknowledged writes", lambda r: f"{r.stats.acked:,}"),
        *(row(label, cell) for label, cell in extra),
        row("acks/s overall", lambda r: f"{r.stats.acks_per_s:,.0f}"),
        row(
            f"acks/s, worst {WINDOW_S} s window",
            lambda r: f"{r.stats.worst_window_acks_per_s:,.0f}",
        ),
        row("seconds with no acknowledgement", lambda r: f"{r.stats.seconds_without_ack}"),
        row("heal to full ISR", heals),
        row(
            "heals not whole before the next fault",
            lambda r: f"{r.stats.not_whole_before_next_fault}",
        ),
        row("audit verdict", verdict),
        row("exit status", lambda r: f"{r.status}"),
        "",
        "The run directories (history, timeline, schedule, brokers' logs and data dirs, "
        f"audit report) are kept under `bench/out/{results[0].run_dir.parent.name}/`.",
    ]
    for r in results:
        print(f"{key} {r.label}: {verdict(r)}; {r.stats.summary()}")
    return lines


def _tls_section(run: _Run) -> list[str]:
    r = tls_bench.measure(WORK_DIR / "tls")
    run.figures["tls"] = {
        "rounds": [{"mode": p.mode, "records_per_s": p.records_per_s} for p in r.rounds],
        "best_tls_over_best_plaintext": r.ratio,
    }
    lines = [
        "## The authenticated mode: `perf produce` with TLS on and off",
        "",
        *run.stamp,
        "",
        f"`{r.command}`: 3 brokers, ZooKeeper, the perf producer, all on this machine; "
        "`--tls` adds mutual TLS on every channel (EC P-256 certificates), the broker "
        "authorizer and ZooKeeper ACLs. The modes alternate, each round on a fresh cluster.",
        "",
        "| round | mode | records/s | MB/s (values) | p50 ms | p95 ms |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for i, p in enumerate(r.rounds):
        lines.append(
            f"| {i // 2 + 1} | {p.mode} | {p.records_per_s:,.0f} | {p.mb_per_s:.2f} "
            f"| {p.p50_ms:,.1f} | {p.p95_ms:,.1f} |"
        )
    lines += [
        "",
        f"Best TLS against best PLAINTEXT: {r.ratio:.2f}. Rounds of one mode differ too: "
        f"the slowest PLAINTEXT round made {r.spread('PLAINTEXT'):.2f} of the fastest, the "
        f"slowest TLS round {r.spread('TLS'):.2f}. Both modes run a saturating producer "
        "on the brokers' cores, so the ratio is what TLS costs a user of this machine: the "
        "encryption on every channel (client to leader, leader to followers) on top of "
        "the brokers' own work.",
    ]
    print(f"tls: best TLS / best PLAINTEXT {r.ratio:.2f}")
    return lines


def _side_by_side_section(run: _Run) -> list[str]:
    r = side_by_side.measure(WORK_DIR / "side_by_side")
    run.figures["side_by_side"] = r.figures()

    def row(name: str, rate: side_by_side.Rate, unit: str = "records/s") -> str:
        lat = rate.latency_ms
        cells = " | ".join(f"{lat[k]:,.1f}" if k in lat else "" for k in ("p50", "p99"))
        return f"| {name} | {rate.per_s:,.0f} {unit} | {rate.mb_per_s:,.1f} | {cells} |"

    lines = [
        "## Side by side: perf, the ceilings of this machine, NATS JetStream",
        "",
        *run.stamp,
        "",
        "One run (bench/side_by_side.py), 100-byte records. minibroker: a local `cluster up` "
        "(3 brokers, ZooKeeper), RF 3, `min.insync.replicas` 2, 3 partitions, the CLI on its "
        "defaults, as a user runs it:",
        "",
        *(f"- `{c}`" for c in r.perf_commands),
        "",
        "| what | throughput | MB/s (payload) | p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|",
        *(row(name, rate) for name, rate in r.minibroker.items()),
    ]
    if r.nats is not None:
        lines.append(row("NATS JetStream R3, nats-py publish_async", r.nats, "messages/s"))
    lines += [
        "",
        "Ceilings (the same run): what the disk, gRPC itself and the brokers allow.",
        "",
        "| ceiling | throughput | MB/s (payload) |",
        "|---|---:|---:|",
    ]
    for name, rate in r.ceilings.items():
        unit = "messages/s" if rate.note == "messages/s" else "records/s"
        lines.append(f"| {name} | {rate.per_s:,.0f} {unit} | {rate.mb_per_s:,.1f} |")
    ratios = r.ratios()
    lines += [
        "",
        "- plain append: unbuffered writes of one pre-built 256 KiB batch, no fsync; gRPC "
        "echo: raw bytes to bench/echo_server.py in its own process, 4 in flight; raw "
        "batches: pre-built 256 KiB batches as Produce requests, acks=all, on produce "
        "sessions with 5 in flight per partition (as the producer keeps them)",
        f"- `perf produce --bulk` acks=all against the raw batches: "
        f"{ratios['perf_produce_over_raw_batches']:.2f} (goal >= 0.8)",
        f"- `perf produce` (one `send()` per record) against `perf produce --bulk`: "
        f"{ratios['per_record_over_bulk']:.2f} (goal >= 0.5)",
    ]
    if "perf_produce_over_nats" in ratios:
        lines.append(
            f"- `perf produce --bulk` acks=all against NATS JetStream R3: "
            f"{ratios['perf_produce_over_nats']:.1f}x (goal >= 20x)"
        )
    else:
        lines.append(f"- NATS JetStream not measured: {r.nats_problem}")
    for name, rate in r.minibroker.items():
        print(f"side by side: {name}: {rate.per_s:,.0f}/s {rate.latency_ms}")
    for name, rate in r.ceilings.items():
        print(f"side by side: ceiling {name}: {rate.per_s:,.0f}/s, {rate.mb_per_s:,.1f} MB/s")
    print(f"side by side: nats {r.nats or r.nats_problem}; ratios {ratios}")
    return lines


SCALE_PROFILE = [
    "What the first round's profile found (py-spy 0.4 `record --nonblocking`, 50 Hz, 40 s of "
    "each broker during the 10,000-partition create of 2026-11-28, which did not finish in "
    '720 s) and what answers each now (docs/replication.md, "Many partitions"; '
    "docs/zookeeper.md; docs/storage.md):",
    "",
    "- **per-partition logging of fetch errors** (52-63% of two brokers: 1.0-1.3 million "
    "`partition-error` lines each): a follower logs a partition's fetch error when the "
    "leader's answer changes, not at every retry;",
    "- **one await per partition in a LeaderAndIsr** (a ZooKeeper read of the topic config and "
    "an executor hop per new log, the new leader's epoch checkpoint written on the loop, a "
    "fetcher wait each; 3,000 partitions took 20 s): each state judged alone, then for all at "
    "once the topic configs read once, the logs made in one executor call, one fetcher wait, "
    "the epoch checkpoints written on 4 executor threads first (a leader staying leader "
    "fenced meanwhile); a call the controller's deadline cancels still runs to its end;",
    "- **one ZooKeeper request per znode**: kazoo hands the GIL between its two threads per "
    "request (6,000 reads 2.4 s, 2.2 s of it the loop blocked waking kazoo's connection "
    "thread); many znodes are now read with ZooKeeper's `multiRead`, 500 per request (0.13 s "
    "for the same 6,000), and the controller writes state znodes 100 per fenced multi "
    "(20,000 multis to create 10,000 partitions before); the `UpdateMetadata` after a "
    "`LeaderAndIsr` is vouched for by the states that `LeaderAndIsr` read;",
    "- **serial ISR writes that lose** (58,517 rejected conditional updates, KAFKA-2729): a "
    "leader that loses an ISR race reads the znode and starts from it if it still names it "
    "leader at its epoch, or is fenced by it if not, instead of retrying its stale version "
    "at every fetch;",
    "- **the descriptor limit** (19,998 of 20,000 files at 10,000 partitions: two per "
    "replica): segment files come from a pool of half of `RLIMIT_NOFILE` (10,036-10,040 "
    "open files per broker at 10,000 and at 30,000 replicas), indexes open their file only "
    "to write;",
    "- **restart**: a partition that led with nothing written rewrites its epoch checkpoint "
    "at load (Kafka's `truncateFromEnd`), two fsyncs each; `num.recovery.threads.per.data.dir` "
    "(4 here, Kafka's default 1) overlaps them; a new partition's directory is fsynced at "
    "its log's first flush, not when it is made.",
    "",
    "Before, on this machine (3 brokers, RF 3, load 5-14 while other work shared it): 3,000 "
    "partitions created in 31.3 s, controlled shutdown 4.4 s to lead nothing and 9.2 s to "
    "exit, rejoin 12.7 s, failover 14.1 s; 6,000 (load 4-14): created in 51.2 s, 17.6 / 41.3 "
    "s, rejoin 91.5 s, failover 71.4 s, state load 11.6 s; 10,000 did not finish creating.",
    "",
    "The second round (2026-12-02; py-spy 200 Hz of every broker for 10-14 s after the "
    "SIGTERM of a controlled shutdown at 30,000 partitions and after the SIGKILL of a "
    "failover at 10,000): the controller's per-partition state lines were a fifth of its "
    "loop in a failover (now one line of counts above 100 partitions, as Kafka logs them "
    "at TRACE); a controlled shutdown now writes and sends the leaderships before the ISRs "
    "it leaves (10,000 partitions: 1.9 s to lead nothing before, 0.9-1.2 s after).",
    "",
    "The third round (2026-12-02): replication runs over incremental fetch sessions "
    '(KIP-227, docs/replication.md, "Incremental fetch sessions"): a follower names only '
    "the partitions whose fetch changed, the leader reads only the partitions changed since "
    "(plus all of them every 30 s) and answers only what is new, and a session's unread "
    "partitions count as fetched through one clock per session rather than a write per "
    "partition per fetch. Idle CPU per broker went from 51-54% to 6% at 10,000 and from "
    "64-70% to 7% at 30,000, and with it everything that shares the loop (produce beside "
    "the 10,000-partition topic 20,836 -> 185,449 records/s, Metadata of all topics at "
    "30,000 1,018 -> 99 ms). A broker failure now elects the leaderless partitions and "
    "sends their LeaderAndIsr before it writes the ISRs it shrinks (Kafka's order), and new "
    "leaders' epoch checkpoints are written on 16 threads (concurrent fsyncs share journal "
    "commits: 891 us per checkpoint on 4 threads, 355 on 16).",
    "",
    "The failover row is now measured as a client sees it: a broker's Metadata named a "
    "partition's new role as soon as its LeaderAndIsr was accepted, before the epoch "
    "checkpoints were written and the role taken, so the earlier rows (10.5 s at 10,000 and "
    "15.9 s at 30,000 before this round) counted partitions that still refused produce. A "
    "broker now names a role once it has taken it. Measured that way the failover at "
    "30,000 took 32.7 s with the epoch checkpoints on 4 threads and 22.6 s on 16.",
    "",
    "What is left at 30,000 (the issue's goals: created within 60 s, 3 s to move 10,000 "
    "leaderships, failover within the session timeout + 5 s, a state load within 10 s, back "
    "in every ISR within 60 s): only the failover. Its timeline (the logs of a run at 30,000 "
    "under py-spy, kill at 0): the new controller elected at 7.5 s (the 6 s session), its "
    "state loaded at 8.4 s, the 10,000 leaderless partitions written and sent at 9.5 s, the "
    "other 20,000 (the dead broker leaves their ISRs, a leader epoch bump each, as Kafka 2.8 "
    "does) at 13.8 s; each survivor then makes 10,000 to 20,000 leaders at a new epoch, a "
    "leader-epoch checkpoint each (two fsyncs, Kafka's `LeaderEpochFileCache.assign`), which "
    "is most of the 9-12 s its LeaderAndIsr takes to apply. Met at 30,000: creation (42.1 s),"
    " moving 10,000 leaderships (1.8 s), the state load (2.2 s), the rejoin (37.5 s), the "
    "descriptors (10,036-10,040 of 20,000 per broker); at 10,000 the failover too (10.7 s).",
]
"""What the profile of the scale run showed (bench/scale.py does not run py-spy: attach it
by hand to the broker pids it prints under its data dir, as that run did)."""


def _scale_section(run: _Run) -> list[str]:
    r = scale.measure(WORK_DIR, run.scale_sizes)
    steps = {
        "create": "CreateTopics to every partition led, full ISR",
        "shutdown_leads_nothing": "controlled shutdown (SIGTERM): until it leads nothing",
        "shutdown_exited": "controlled shutdown: until its process exited",
        "rejoin": "restarted: until every ISR is full",
        "failover_all_led": "SIGKILL of the controller's broker: until every partition is "
        f"led by a live broker (session timeout {r.session_timeout_ms / 1000:.0f} s)",
    }
    settings = ", ".join(f"`{k}` {v}" for k, v in r.broker_overrides.items())
    header = "| step | " + " | ".join(f"{s.partitions:,} partitions" for s in r.sizes) + " |"
    lines = [
        "## Scale: partition count, 3 brokers, RF 3",
        "",
        *run.stamp,
        "",
        "3 broker processes (each with its controller candidate) and ZooKeeper on this "
        f"machine, a fresh cluster per size; one topic of N partitions, RF 3, created by "
        "confluent-kafka's AdminClient through the Kafka listener (plus a 3-partition topic "
        f"beside it). Brokers: {settings}, `max.broker.partitions` raised to N. Times in "
        "seconds, each step under a deadline (bench/scale.py). Load average (1 min) at "
        "the start and the end of each size beside the figures: the machine is shared.",
        "",
        header,
        "|---|" + "---:|" * len(r.sizes),
    ]

    def row(label: str, cell: Callable[[scale.SizeResult], str]) -> str:
        return f"| {label} | " + " | ".join(cell(s) for s in r.sizes) + " |"

    def step(name: str) -> Callable[[scale.SizeResult], str]:
        def cell(s: scale.SizeResult) -> str:
            if s.not_run is not None:
                return "not run"
            seconds = s.steps.get(name)
            return "did not finish" if seconds is None else f"{seconds:.1f}"

        return cell

    def resources(attr: str, fmt: str) -> Callable[[scale.SizeResult], str]:
        return lambda s: (
            " / ".join(format(getattr(s.resources[i], attr), fmt) for i in sorted(s.resources))
            or "-"
        )

    lines += [
        row("load average, start / end", lambda s: f"{s.loadavg_start:.1f} / {s.loadavg_end:.1f}"),
        row("CreateTopics answered", step("create_accepted")),
        *(row(label, step(name)) for name, label in steps.items()),
        row(
            "new controller's state load (`elected` to `failover_done` in its log)",
            lambda s: "-" if s.controller_load_s is None else f"{s.controller_load_s:.2f}",
        ),
        row(
            "Metadata, all topics (gRPC, median ms)",
            lambda s: "-" if s.metadata_ms is None else f"{s.metadata_ms:.1f}",
        ),
        row("RSS MiB per broker (1 / 2 / 3)", resources("rss_mib", ".0f")),
        row("open files per broker", resources("open_files", "d")),
        row("threads per broker", resources("threads", "d")),
        row(
            f"CPU % of a core per broker, idle ({scale.IDLE_SECONDS:.0f} s after the create)",
            resources("idle_cpu_pct", ".0f"),
        ),
        row(
            "`perf produce` records/s (acks=all) to the N-partition topic",
            lambda s: f"{s.produce[s.partitions]:,.0f}" if s.partitions in s.produce else "-",
        ),
        row(
            "`perf produce` records/s to a 3-partition topic beside it",
            lambda s: f"{s.produce[3]:,.0f}" if 3 in s.produce else "-",
        ),
        row("wall time of the size", lambda s: f"{s.wall_s:.0f}"),
        "",
    ]
    for s in r.sizes:
        if s.not_run is not None:
            lines.append(f"- {s.partitions:,} partitions not run: {s.not_run}.")
        if s.fd_note is not None:
            lines.append(f"- {s.partitions:,} partitions: {s.fd_note}.")
        if s.did_not_finish is not None:
            lines.append(f"- {s.partitions:,} partitions: {s.did_not_finish}.")
        if s.log_findings:
            lines.append(
                f"- {s.partitions:,} partitions, broker log ERROR/CRITICAL/traceback lines (the "
                f"whole logs, the final stop included): {len(s.log_findings)}, the first: "
                f"`{s.log_findings[0][:240]}`"
            )
    lines += ["", *SCALE_PROFILE]
    run.figures["scale"] = {
        str(s.partitions): {
            "not_run": s.not_run,
            "did_not_finish": s.did_not_finish,
            "steps_s": s.steps,
            "controller_load_s": s.controller_load_s,
            "metadata_ms": s.metadata_ms,
            "produce_records_per_s": {str(k): v for k, v in s.produce.items()},
            "loadavg": [s.loadavg_start, s.loadavg_end],
        }
        for s in r.sizes
    }
    for line in lines[-len(r.sizes) * 3 :]:
        if line.startswith("- "):
            print(f"scale: {line[2:]}")
    return lines


def _kafka_listener_section(run: _Run) -> list[str]:
    r = kafka_listener.measure(WORK_DIR / "kafka_listener")
    run.figures["kafka_listener"] = r.figures()
    records = side_by_side.PERF_RECORDS / 1e6
    lines = [
        "## Kafka listener against gRPC: confluent-kafka and perf on one cluster",
        "",
        *run.stamp,
        "",
        "One run (bench/kafka_listener.py), 100-byte records, a local `cluster up` (3 "
        "brokers, RF 3, `min.insync.replicas` 2, 3 partitions):",
        "",
        *(f"- `{c}`" for c in r.commands),
        "",
        "| what | best records/s | MB/s | rounds records/s | client CPU s | brokers' CPU s "
        "| brokers' CPU s per M records |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for name, best in r.best.items():
        rounds = ", ".join(f"{x.rate.per_s:,.0f}" for x in r.rounds[name])
        lines.append(
            f"| {name} | {best.rate.per_s:,.0f} | {best.rate.mb_per_s:,.1f} | {rounds} "
            f"| {best.client_cpu_s:.2f} | {best.broker_cpu_s:.2f} "
            f"| {best.broker_cpu_s / records:.2f} |"
        )
    ratios = r.ratios()
    lines += [
        "",
        f"- confluent-kafka's produce() + poll(0) loop with no broker: "
        f"{r.client_loop.per_s:,.0f} records/s (the client's own ceiling on this machine)",
        f"- the listener's own cost (bench/kafka_listener.py `door`: a KafkaListener "
        f"answering at once, {r.door.request_bytes:,}-byte Produce v9 requests, 5 in flight): "
        f"{r.door.server_cpu_us_per_request:,.0f} µs of server CPU per request; encoding one "
        f"Produce answer: {r.door.encode_answer_us:.1f} µs",
        f"- confluent-kafka producer against `perf produce`: "
        f"{ratios['confluent_produce_over_perf_produce']:.2f}, against `perf produce --bulk`: "
        f"{ratios['confluent_produce_over_perf_produce_bulk']:.2f} (goal >= 1)",
        f"- confluent-kafka consumer against `perf consume`: "
        f"{ratios['confluent_consume_over_perf_consume']:.2f} (goal >= 1)",
    ]
    for name, best in r.best.items():
        print(f"kafka listener: {name}: {best.rate.per_s:,.0f}/s {asdict(best)}")
    print(f"kafka listener: client loop {r.client_loop.per_s:,.0f}/s; ratios {ratios}")
    return lines


def _transactions_section(run: _Run) -> list[str]:
    r = txn_bench.measure(WORK_DIR / "transactions")
    run.figures["transactions"] = r.figures()
    ratios = r.ratios()
    lines = [
        "## Transactions: transactions/s and records/s, 1, 10 and 100 records per transaction",
        "",
        *run.stamp,
        "",
        f"One run (bench/transactions.py), {side_by_side.RECORD_BYTES}-byte records, a local "
        "`cluster up` (3 brokers, RF 3, `min.insync.replicas` 2, 3 partitions; "
        "`__transaction_state` RF 3), each writer's transactional runs beside its "
        "non-transactional one on the same cluster; confluent-kafka "
        f"(librdkafka {r.librdkafka}) through the Kafka listener:",
        "",
        *(f"- `{c}`" for c in r.commands),
        "",
        f"The machine is shared: load average {r.load[0]:.2f} at the section's start, "
        f"{r.load[1]:.2f} at its end; the ratios (measured in this run) say more than the "
        "absolute figures.",
        "",
        "| writer | records per transaction | transactions | records/s | transactions/s "
        "| records/s vs not transactional | client CPU s | brokers' CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in r.best.values():
        per = row.records_per_transaction
        key = f"{row.writer} {per}"
        if row.problem:
            lines.append(f"| {row.writer} | {per or '-'} | {row.problem} | | | | | |")
            continue
        lines.append(
            f"| {row.writer} | {per or 'not transactional'} "
            f"| {f'{row.transactions:,}' if per else '-'} | {row.records_per_s:,.0f} "
            f"| {f'{row.transactions_per_s:,.1f}' if per else '-'} "
            f"| {txn_bench.ratio_text(ratios[key]) if key in ratios else '-'} "
            f"| {row.client_cpu_s:.2f} | {row.broker_cpu_s:.2f} |"
        )
    plain = [x for x in r.runs if not x.records_per_transaction]
    lines += [
        "",
        "Non-transactional runs, before and after the transactional ones (the table has the "
        "faster): "
        + "; ".join(f"{x.writer} {x.problem or f'{x.records_per_s:,.0f} records/s'}" for x in plain)
        + ".",
        "",
        "Where a transaction's time goes, from the coordinator's `event=transaction_state_written` "
        "log lines (millisecond stamps; means over the run's transactions): Ongoing "
        "(written at the first AddPartitionsToTxn) to PrepareCommit (written at EndTxn) is "
        "the records, the producer's flush and EndTxn; PrepareCommit to CompleteCommit is the "
        "markers (WriteTxnMarkers to each partition's leader, one marker batch appended "
        "there acks=all) and the completion; CompleteCommit to the next Ongoing is how long "
        "the producer's next AddPartitionsToTxn takes to be accepted. The brokers' CPU is "
        f"less what they spend idle ({r.idle_broker_cpu:.3f} CPU s a second for the three, "
        f"measured over {txn_bench.IDLE_S:.0f} s with no client) over the run's wall time.",
        "",
        "| writer | records per transaction | ms per transaction | Ongoing to PrepareCommit "
        "| PrepareCommit to CompleteCommit | CompleteCommit to next Ongoing "
        "| partitions per transaction | brokers' CPU ms per transaction, less idle |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in r.best.values():
        p = row.phases
        if not row.records_per_transaction or row.problem or p is None:
            continue
        gap = "-" if p.next_ms is None else f"{p.next_ms:,.1f}"
        lines.append(
            f"| {row.writer} | {row.records_per_transaction} "
            f"| {1000 / row.transactions_per_s:,.1f} | {p.open_ms:,.1f} | {p.markers_ms:,.1f} "
            f"| {gap} | {p.partitions:.2f} "
            f"| {row.broker_cpu_ms_per_transaction(r.idle_broker_cpu):,.1f} |"
        )
    lines += ["", *txn_bench.reading(r)]
    for row in r.runs:
        print(f"transactions: {row.label}: {row.figures()}")
    print(f"transactions: ratios {ratios}; wall {r.wall_s:.0f} s")
    return lines


def _latency_section(run: _Run) -> list[str]:
    r = latency.measure(WORK_DIR / "latency")
    run.figures["latency"] = {row.what: asdict(row) for row in r.rows}
    lines = [
        "## Latency at 1,000 records/s, in parts",
        "",
        *run.stamp,
        "",
        "One run (bench/latency.py), 100-byte records, a local `cluster up` (3 brokers, "
        "`min.insync.replicas` 2), one-partition topics:",
        "",
        *(f"- `{c}`" for c in r.commands),
        "",
        "| what | p50 ms | p99 ms | max ms | samples |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in r.rows:
        lines.append(
            f"| {row.what} | {row.p50:.2f} | {row.p99:.2f} | {row.max:.2f} | {row.count:,} |"
        )
        print(f"latency: {row}")
    by = {row.what: row for row in r.rows}
    rf3, rf1 = by["perf produce acks=all, RF 3"], by["perf produce acks=all, RF 1"]
    echo = by["gRPC unary echo, 100 B, one in flight"]
    lines += [
        "",
        f"- the followers' round trip (acks=all RF 3 less RF 1): p50 "
        f"{rf3.p50 - rf1.p50:.2f} ms, p99 {rf3.p99 - rf1.p99:.2f} ms",
        f"- one gRPC request and answer between two Python processes: p50 {echo.p50:.2f} ms; "
        f"an acks=all acknowledgement is at least four such hops (producer to leader, the "
        f"leader's answer to a waiting follower fetch, the follower's next fetch, the answer "
        f"to the producer): {4 * echo.p50:.2f} ms at p50 before any work",
    ]
    return lines


def _codecs_section(run: _Run) -> list[str]:
    size, rows = codecs.measure()
    run.figures["codecs"] = {f"{r.library}, {r.codec}": asdict(r) for r in rows}
    lines = [
        "## Record codecs: minibroker's bounded codecs against the other bindings",
        "",
        *run.stamp,
        "",
        f"One process (bench/codecs.py): {size:,} bytes of JSON order events (random ids, "
        "users and prices: compressible as real records are), compressed and decompressed "
        "whole, best of 5 timings of 10 calls. minibroker's rows are "
        "proto/records/compression.py as the broker runs it: Kafka's framings (snappy-java "
        "blocks, lz4 frames of independent 64 KiB blocks, gzip level 6, zstd level 3) and "
        "decompression bounded by an 8 MiB limit; the others are the same codecs' unbounded "
        "calls of the libraries that could have been chosen.",
        "",
        "| library | codec | compressed / input | compress MB/s | decompress MB/s |",
        "|---|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.library} | {r.codec} | {r.ratio:.3f} | {r.compress_mb_s:,.0f} "
            f"| {r.decompress_mb_s:,.0f} |"
        )
        print(f"codecs: {r}")
    return lines


def _compression_section(run: _Run) -> list[str]:
    rows = compression.measure(WORK_DIR / "compression")
    run.figures["compression"] = {f"{r.writer}, {r.codec}": asdict(r) for r in rows}
    plain = {r.writer: r for r in rows if r.codec == "none"}
    lines = [
        "## Compressed produce: throughput and bytes on disk per codec",
        "",
        *run.stamp,
        "",
        f"bench/compression.py: one `cluster up` (3 brokers, RF 3, min.insync.replicas 2), a "
        f"fresh 3-partition topic per writer and codec; {compression.PERF_RECORDS:,} records "
        f"of {side_by_side.RECORD_BYTES} B of perf produce's `json` payload (event text whose "
        "fields vary) by `minibroker perf produce --compression-type C --payload json` on its "
        f"defaults and with `--bulk`, and {compression.CONFLUENT_RECORDS:,} of the same "
        "values by confluent-kafka through the Kafka listener (`compression.type` C, "
        "librdkafka's defaults, acks=all). Bytes on disk: one replica's segment files; the "
        "ratio is to the same writer's uncompressed topic. The leader inflates every "
        "compressed batch to check its records and stores it as sent.",
        "",
        "| writer | codec | records/s | vs none | bytes on disk | vs none |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        base = plain[r.writer]
        lines.append(
            f"| {r.writer} | {r.codec} | {r.records_per_s:,.0f} "
            f"| {r.records_per_s / base.records_per_s:.2f} | {r.bytes_on_disk:,} "
            f"| {r.bytes_on_disk / base.bytes_on_disk:.2f} |"
        )
    return lines


SECTIONS: dict[str, Callable[[_Run], list[str]]] = {
    "log_append": _log_append_section,
    "codecs": _codecs_section,
    "compression": _compression_section,
    "replication": _replication_section,
    "failover": _failover_section,
    "audit": _audit_section,
    "audit_spark": _audit_spark_section,
    "chaos": _chaos_section,
    "chaos_transactions": _chaos_transactions_section,
    "chaos_soak": _soak_section(
        "chaos_soak",
        "## Chaos soak: faults for hours, one cluster, audited window by window",
        soak_bench.measure,
    ),
    "chaos_soak_hw": _soak_section(
        "chaos_soak_hw",
        "## Chaos soak in high-watermark mode: the seed scenarios' anomalies, unprompted",
        soak_bench.measure_high_watermark,
    ),
    "tls": _tls_section,
    "side_by_side": _side_by_side_section,
    "kafka_listener": _kafka_listener_section,
    "transactions": _transactions_section,
    "latency": _latency_section,
    "scale": _scale_section,
}
"""In RESULTS.md order; log_append first, since replication quotes its raw-write figure."""
ONLY_ALONE = frozenset({"chaos_soak", "chaos_soak_hw"})
"""Sections ``make bench`` leaves out (hours long): ``--only NAME`` runs them."""


def _previous_sections(text: str) -> dict[str, str]:
    return {
        m.group(1): m.group(0)
        for m in re.finditer(r"<!-- bench:(\w+) -->\n.*?<!-- /bench:\1 -->", text, re.DOTALL)
    }


def _previous_notes(text: str) -> dict[str, str]:
    """What a person wrote by hand after a section (up to the next section): kept after
    that section when the results are written again, rerun or not."""
    return {
        m.group(1): m.group(2).strip()
        for m in re.finditer(
            r"<!-- /bench:(\w+) -->\n(.*?)(?=<!-- bench:\w+ -->|\Z)", text, re.DOTALL
        )
        if m.group(2).strip()
    }


def _wrap(name: str, lines: list[str]) -> str:
    return "\n".join([f"<!-- bench:{name} -->", *lines, f"<!-- /bench:{name} -->"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument(
        "--only", choices=list(SECTIONS), help="run one benchmark; keep the others' sections"
    )
    parser.add_argument(
        "--scale-partitions",
        default=",".join(str(n) for n in scale.DEFAULT_SIZES),
        help="the scale section's partition counts, comma-separated (default %(default)s)",
    )
    parser.add_argument(
        "--soak-from",
        type=Path,
        default=None,
        metavar="DIR",
        help="chaos_soak, chaos_soak_hw: sum up this kept soak directory instead of running "
        "the soak",
    )
    parser.add_argument(
        "--soak-command", default=None, help="with --soak-from: the command it was run with"
    )
    args = parser.parse_args(argv)
    sizes = tuple(int(n) for n in args.scale_partitions.split(",") if n.strip())
    tune_process()  # as every minibroker process: the benchmarks' own clients measure alike
    WORK_DIR.mkdir(exist_ok=True)
    cli = [
        Path(sys.executable).name,
        "-m",
        "bench.run",
        *(["--only", args.only] if args.only else []),
        *(["--scale-partitions", args.scale_partitions] if sizes != scale.DEFAULT_SIZES else []),
        *(["--soak-from", str(args.soak_from)] if args.soak_from is not None else []),
    ]
    command = ("make bench  # " if not args.only else "") + shlex.join(cli)
    run = _Run(
        stamp=[
            f"- run: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
            f"- command: `{command}`",
            f"- machine: {describe(WORK_DIR)}",
        ],
        scale_sizes=sizes,
        soak_from=args.soak_from,
        soak_command=args.soak_command,
    )
    text = RESULTS.read_text() if RESULTS.exists() else ""
    previous, notes = _previous_sections(text), _previous_notes(text)
    sections = []
    for name, build in SECTIONS.items():
        if args.only == name or (args.only is None and name not in ONLY_ALONE):
            sections.append(_wrap(name, build(run)))
        else:
            sections.append(
                previous.get(name)
                or _wrap(name, [f"_Not run yet: `python -m bench.run --only {name}`._"])
            )
        if name in notes:
            sections.append(notes[name])
    # Sections written by other tools (e.g. the Docker build times of
    # deploy/docker/build-image.sh) are kept as they are, after ours, with their notes.
    for name, kept in previous.items():
        if name not in SECTIONS:
            sections += [kept, *([notes[name]] if name in notes else [])]
    header = (
        "# Benchmark results\n\n"
        "`make bench` runs every section but the hours-long soak; `python -m bench.run "
        "--only NAME` reruns one (the soak too) and keeps the others, so each section says "
        "when and where it was measured.\n\n"
    )
    RESULTS.write_text(header + "\n\n".join(sections) + "\n")
    print(f"wrote {RESULTS}")
    _write_figures(run)
    return 0


def _write_figures(run: _Run) -> None:
    """results.json: every section's figures, with the stamp of the run that measured them;
    sections not run this time keep their previous entry, as in RESULTS.md."""
    previous: dict[str, Any] = {}
    if RESULTS_JSON.exists():
        try:
            previous = json.loads(RESULTS_JSON.read_text())
        except ValueError:
            previous = {}
    stamp = [line.removeprefix("- ") for line in run.stamp]
    for name, figures in run.figures.items():
        previous[name] = {"measured": stamp, **figures}
    RESULTS_JSON.write_text(json.dumps(previous, indent=2, sort_keys=True) + "\n")
    print(f"wrote {RESULTS_JSON}")


if __name__ == "__main__":
    sys.exit(main())
