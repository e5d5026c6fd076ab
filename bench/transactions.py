"""Transaction throughput, on one cluster, in one run: transactions/s and records/s with 1,
10 and 100 records per transaction, beside non-transactional produce.

A local ``cluster up`` (3 brokers, RF 3, ``min.insync.replicas`` 2, the 3-partition RF 3
``perf`` topic: :func:`bench.side_by_side.start_perf_cluster`) takes, from two writers:

- ``minibroker perf produce --transactional-id ID --transaction-records N`` over gRPC (a
  fresh id per run; its clock starts once the producer holds its producer id, so the one
  InitProducerId is not in the figure), beside ``perf produce`` on its defaults (acks=all,
  idempotent, one ``send`` per record);
- confluent-kafka's Producer through the Kafka listener with ``transactional.id``:
  ``init_transactions``, then per transaction ``begin_transaction``, N ``produce`` and
  ``commit_transaction`` (timed from after ``init_transactions``), beside the same client's
  non-transactional idempotent producer (``enable.idempotence``, acks=all).

The plain run of each writer comes before and after its transactional runs (best of the
two), so a change in the machine's load during the section shows. Each run is a
subprocess of this Python (:func:`bench.kafka_listener._client`: the client's and the
brokers' CPU seconds beside its figure) under a hard timeout; every confluent-kafka call
that can block has its own timeout too (:data:`CALL_TIMEOUT_S`). A run that fails or hangs
is reported in its row, and the section goes on.

Where a transaction's time goes is read from the coordinator's log
(:func:`transaction_phases`): each ``event=transaction_state_written`` line of the run's
transactional id (Ongoing, PrepareCommit, CompleteCommit) splits a transaction into the
records and EndTxn (Ongoing to PrepareCommit), the markers (PrepareCommit to
CompleteCommit) and the wait until the next transaction's first AddPartitionsToTxn is
written (CompleteCommit to the next Ongoing).

A confluent-kafka run is ``python -m bench.transactions confluent BOOTSTRAP TOPIC RECORDS
N`` (N 0: the idempotent producer, no transactions), printing its figures as JSON.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka

from bench.kafka_listener import _client, _process_cpu_s
from bench.scale import _log_time
from bench.side_by_side import RECORD_BYTES, TOPIC, start_perf_cluster
from client.producer_config import ProducerConfig
from deploy.local_cluster import LocalCluster

RECORDS_PER_TRANSACTION = (1, 10, 100)
TRANSACTIONS = 200
"""Transactions per transactional run: at the 9 a second minibroker's producer reaches, 22 s
each."""
PLAIN_RECORDS = 400_000
"""Records per non-transactional run: a few seconds at either writer's rate."""
RUN_TIMEOUT_S = 150.0
"""A run's hard bound, start-up included: a client still running then has hung."""
CALL_TIMEOUT_S = 30.0
"""Each blocking confluent-kafka call's bound (init_transactions, commit_transaction,
list_topics; flush gets RUN_TIMEOUT_S)."""
IDLE_S = 5.0
"""How long the brokers' idle CPU is measured."""
PERF = "perf produce"
CONFLUENT = "confluent-kafka"


@dataclass
class Phases:
    """Means over a run's transactions, from the coordinator's log (milliseconds): they add
    up to its time per transaction. Means, not medians: the wait is all or nothing (a
    transaction whose markers were done before its successor's first AddPartitionsToTxn
    arrived has no retry)."""

    transactions: int
    """Transactions whose three state writes were all found."""
    open_ms: float
    """Ongoing written to PrepareCommit written: the records, the flush, EndTxn."""
    markers_ms: float
    """PrepareCommit written to CompleteCommit written: the markers, then the completion."""
    next_ms: float | None
    """CompleteCommit written to the next transaction's Ongoing written (None: one
    transaction)."""
    partitions: float
    """Partitions per transaction (mean of the ``transaction_decided`` lines)."""


@dataclass
class TxnRun:
    """One run of one writer."""

    writer: str
    records_per_transaction: int
    """0: not transactional."""
    records: int = 0
    transactions: int = 0
    seconds: float = 0.0
    wall_s: float = 0.0
    """The client subprocess's whole life, start-up included (the brokers' CPU is over it)."""
    client_cpu_s: float = 0.0
    broker_cpu_s: float = 0.0
    problem: str = ""
    """Why the run has no figures (it failed or hung), else empty."""
    transactional_id: str = ""
    phases: Phases | None = None

    @property
    def label(self) -> str:
        n = self.records_per_transaction
        if not n:
            return f"{self.writer}, not transactional"
        return f"{self.writer}, {n} record{'s' if n > 1 else ''} per transaction"

    def broker_cpu_ms_per_transaction(self, idle_cpu: float) -> float:
        """The brokers' CPU per transaction, less what they spend idle (``idle_cpu`` CPU
        seconds a second) over the run."""
        if not self.transactions:
            return 0.0
        return max(0.0, self.broker_cpu_s - idle_cpu * self.wall_s) * 1000 / self.transactions

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def transactions_per_s(self) -> float:
        return self.transactions / self.seconds if self.seconds else 0.0

    def figures(self) -> dict[str, Any]:
        found = asdict(self)
        found["records_per_s"] = round(self.records_per_s, 1)
        found["transactions_per_s"] = round(self.transactions_per_s, 2)
        return found


@dataclass
class TransactionsBench:
    runs: list[TxnRun]
    """Every run, in the order run."""
    commands: list[str]
    librdkafka: str
    wall_s: float
    load: tuple[float, float] = (0.0, 0.0)
    """The 1-minute load average at the start and at the end of the section."""
    idle_broker_cpu: float = 0.0
    """The three brokers' CPU seconds a second with no client running."""
    log_findings: list[str] = field(default_factory=list)
    """The broker logs' WARNING/ERROR/traceback lines written during the runs."""
    best: dict[str, TxnRun] = field(init=False)
    """Label -> the run the table shows (the faster plain run of each writer)."""

    def __post_init__(self) -> None:
        self.best = best_runs(self.runs)

    def ratios(self) -> dict[str, float]:
        return ratios(self.best.values())

    def figures(self) -> dict[str, Any]:
        return {
            "runs": [r.figures() for r in self.runs],
            "ratios": self.ratios(),
            "record_bytes": RECORD_BYTES,
            "librdkafka": self.librdkafka,
            "load_average": {"start": self.load[0], "end": self.load[1]},
            "idle_broker_cpu_s_per_s": round(self.idle_broker_cpu, 3),
            "broker_log_findings": len(self.log_findings),
            "wall_s": round(self.wall_s, 1),
        }


def best_runs(runs: Iterable[TxnRun]) -> dict[str, TxnRun]:
    """Label -> its fastest run without a problem (else its first run), in first-run order."""
    best: dict[str, TxnRun] = {}
    for run in runs:
        held = best.get(run.label)
        better = not run.problem and (
            held is None or bool(held.problem) or run.records_per_s > held.records_per_s
        )
        if held is None or better:
            best[run.label] = run
    return best


def ratios(runs: Iterable[TxnRun]) -> dict[str, float]:
    """Each transactional run's records/s over its writer's non-transactional records/s,
    keyed ``WRITER N``; runs with a problem have none."""
    runs = [r for r in runs if not r.problem and r.seconds]
    plain = {r.writer: r for r in runs if not r.records_per_transaction}
    found = {}
    for r in runs:
        base = plain.get(r.writer)
        if r.records_per_transaction and base is not None and base.records_per_s:
            found[f"{r.writer} {r.records_per_transaction}"] = round(
                r.records_per_s / base.records_per_s, 5
            )
    return found


def ratio_text(ratio: float) -> str:
    """A ratio as the table shows it: two decimals, or ``1/N`` below 0.1."""
    if ratio >= 0.1 or ratio <= 0:
        return f"{ratio:.2f}"
    return f"1/{1 / ratio:,.0f}"


def reading(bench: TransactionsBench) -> list[str]:
    """The bullets under the section's tables: what a transaction costs, from the code and
    from the figures of this run."""
    bullets = [
        "- what every transaction costs, whatever its size (the producer id comes once, "
        "from InitProducerId before the clock starts): the coordinator appends three records "
        "to `__transaction_state` (Ongoing at the first AddPartitionsToTxn, and again at each "
        "further partition's; PrepareCommit at EndTxn; CompleteCommit once the markers are "
        "in) and each partition's leader appends a marker batch, every one acks=all, so each "
        "waits for the followers' next fetch. The producer waits for AddPartitionsToTxn, its "
        "flush (the records acks=all) and EndTxn, one after the other; and as the coordinator "
        "answers CONCURRENT_TRANSACTIONS to an AddPartitionsToTxn until the previous "
        "transaction's CompleteCommit is written, the next transaction waits for the markers "
        "too, then for the producer's retry backoff. With 1 record per transaction that is "
        "five replicated appends and five round trips in turn per record, where the "
        "non-transactional producer keeps batches of thousands of records in flight",
    ]
    for writer in (PERF, CONFLUENT):
        rows = [
            r
            for r in bench.best.values()
            if r.writer == writer and r.records_per_transaction and not r.problem and r.seconds
        ]
        if not rows:
            continue
        rates = ", ".join(
            f"{r.transactions_per_s:,.1f} ({r.records_per_transaction})" for r in rows
        )
        ms = statistics.median(1000 / r.transactions_per_s for r in rows)
        text = (
            f"- {writer}: {rates} transactions/s (records per transaction): the time of a "
            f"transaction hardly depends on its records ({ms:,.1f} ms, the median of the "
            f"{len(rows)}), so records/s grows about as the records per transaction"
        )
        waits = [
            (r.phases.next_ms, r.phases.next_ms * r.transactions_per_s / 1000)
            for r in rows
            if r.phases and r.phases.next_ms is not None
        ]
        if waits:
            gap = statistics.median(w for w, _ in waits)
            share = statistics.median(f for _, f in waits)
            text += (
                f"; {gap:,.0f} ms of it on average ({share:.0%}) is from CompleteCommit to the "
                "next Ongoing: the next transaction's first AddPartitionsToTxn, answered "
                "CONCURRENT_TRANSACTIONS until CompleteCommit is written, waits for the "
                "producer's retry backoff"
            )
        bullets.append(text)
    bullets.append(
        "- the retry backoff: minibroker's producer (client/transaction_manager.py) retries "
        "every CONCURRENT_TRANSACTIONS after `retry_backoff_ms` "
        f"({ProducerConfig().retry_backoff_ms} ms by default); Kafka's Java producer, and "
        "kafka-python, retry the first AddPartitionsToTxn of a transaction after 20 ms "
        "(`ADD_PARTITIONS_RETRY_BACKOFF_MS`)"
    )
    findings = bench.log_findings
    bullets.append(
        "- broker log WARNING/ERROR/traceback lines during the runs: "
        + (f"{len(findings)}, the first: `{findings[0][:300]}`" if findings else "none")
    )
    failed = [r for r in bench.runs if r.problem]
    bullets.append(
        "- runs that failed or hung: "
        + ("; ".join(f"{r.label}: {r.problem}" for r in failed) if failed else "none")
    )
    bullets.append(f"- wall time of this section (start-up to clean-up): {bench.wall_s:.0f} s")
    return bullets


# -- the coordinator's log ---------------------------------------------------------------------


def _field(line: str, name: str) -> str | None:
    for token in line.split():
        if token.startswith(f"{name}="):
            return token[len(name) + 1 :]
    return None


def transaction_phases(log_text: str, transactional_id: str) -> Phases | None:
    """The means of :class:`Phases` for ``transactional_id`` from broker log lines (the
    three brokers' logs joined: only its coordinator writes them). None when the log has no
    complete transaction of the id."""
    writes: list[tuple[float, str]] = []
    partitions: list[int] = []
    for line in log_text.splitlines():
        if f" transactional_id={transactional_id} " not in f"{line} ":
            continue
        if "event=transaction_state_written " in line:
            when, state = _log_time(line), _field(line, "state")
            if when is not None and state is not None:
                writes.append((when, state))
        elif "event=transaction_decided " in line:
            count = _field(line, "partitions")
            if count is not None and count.isdigit():
                partitions.append(int(count))
    writes.sort(key=lambda w: w[0])  # stable: one broker's lines keep their order
    # Each transaction: the Ongoing of its first AddPartitionsToTxn (a later one for a
    # further partition writes Ongoing again), its PrepareCommit, its CompleteCommit.
    done: list[tuple[float, float, float]] = []
    ongoing: float | None = None
    prepared: float | None = None
    for when, state in writes:
        if state == "Ongoing":
            if ongoing is None:
                ongoing = when
        elif state == "PrepareCommit":
            prepared = when if ongoing is not None else None
        elif state == "CompleteCommit":
            if ongoing is not None and prepared is not None:
                done.append((ongoing, prepared, when))
            ongoing = prepared = None
        else:  # Empty (InitProducerId), aborts: not a committed transaction
            ongoing = prepared = None
    if not done:
        return None
    gaps = [nxt[0] - cur[2] for cur, nxt in itertools.pairwise(done)]
    return Phases(
        transactions=len(done),
        open_ms=round(statistics.fmean(p - o for o, p, _ in done) * 1000, 1),
        markers_ms=round(statistics.fmean(c - p for _, p, c in done) * 1000, 1),
        next_ms=round(statistics.fmean(gaps) * 1000, 1) if gaps else None,
        partitions=round(statistics.fmean(partitions), 2) if partitions else 0.0,
    )


def log_findings(log_text: str) -> list[str]:
    """The WARNING, ERROR and CRITICAL lines and tracebacks of broker logs."""
    return [
        line
        for line in log_text.splitlines()
        if any(f" {level} " in line for level in ("WARNING", "ERROR", "CRITICAL"))
        or line.startswith("Traceback")
    ]


def _broker_logs(cluster: LocalCluster) -> str:
    return "\n".join(
        cluster.broker_log(b).read_text(errors="replace") for b in cluster.broker_ids()
    )


# -- the runs ----------------------------------------------------------------------------------


def _run(run: TxnRun, args: list[str], broker_pids: list[int]) -> TxnRun:
    """Run a client subprocess (``python ARGS``) into ``run``'s figures, or its problem."""
    try:
        found, used = _client(args, broker_pids, timeout_s=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        run.problem = f"hung: no answer within {RUN_TIMEOUT_S:g} s (killed)"
    except (RuntimeError, ValueError, IndexError) as err:
        run.problem = f"failed: {' '.join(str(err).split())[-400:]}"
    else:
        run.records = int(found["records"])
        run.transactions = int(found.get("transactions", 0))
        run.seconds = float(found["seconds"])
        run.wall_s = used.wall_s
        run.client_cpu_s, run.broker_cpu_s = used.client_cpu_s, used.broker_cpu_s
    print(f"transactions: {run.label}: {run.figures()}", flush=True)
    return run


def perf_run(data_dir: Path, broker_pids: list[int], per_txn: int) -> TxnRun:
    run = TxnRun(PERF, per_txn)
    args = ["-m", "client.cli", "perf", "produce", TOPIC, "--record-size", str(RECORD_BYTES)]
    if per_txn:
        run.transactional_id = f"bench-perf-{per_txn}-{uuid.uuid4().hex[:8]}"
        args += ["--num-records", str(TRANSACTIONS * per_txn)]
        args += ["--transactional-id", run.transactional_id]
        args += ["--transaction-records", str(per_txn)]
    else:
        args += ["--num-records", str(PLAIN_RECORDS)]
    return _run(run, [*args, "--json", "--data-dir", str(data_dir)], broker_pids)


def confluent_run(bootstrap: str, broker_pids: list[int], per_txn: int) -> TxnRun:
    run = TxnRun(CONFLUENT, per_txn)
    records = TRANSACTIONS * per_txn if per_txn else PLAIN_RECORDS
    args = ["-m", "bench.transactions", "confluent", bootstrap, TOPIC, str(records), str(per_txn)]
    if per_txn:
        run.transactional_id = f"bench-confluent-{per_txn}-{uuid.uuid4().hex[:8]}"
        args.append(run.transactional_id)
    return _run(run, args, broker_pids)


def measure(work_dir: Path) -> TransactionsBench:
    work_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    load_start = _load()
    cluster = start_perf_cluster(work_dir)
    data_dir = work_dir / "cluster"
    runs: list[TxnRun] = []
    try:
        bootstrap = cluster.kafka_bootstrap_servers
        assert bootstrap is not None, "cluster up gives every broker a Kafka listener"
        pids = [b.pid for b in cluster.status().brokers if b.pid is not None]
        runs.append(perf_run(data_dir, pids, 0))
        idle = _idle_cpu(pids)
        runs += [perf_run(data_dir, pids, n) for n in RECORDS_PER_TRANSACTION]
        runs.append(perf_run(data_dir, pids, 0))
        runs.append(confluent_run(bootstrap, pids, 0))
        runs += [confluent_run(bootstrap, pids, n) for n in RECORDS_PER_TRANSACTION]
        runs.append(confluent_run(bootstrap, pids, 0))
        logs = _broker_logs(cluster)  # before the brokers stop: their shutdown warns too
        findings = log_findings(logs)
        for run in runs:
            if run.transactional_id:
                run.phases = transaction_phases(logs, run.transactional_id)
    finally:
        cluster.down()
    commands = [
        f"minibroker cluster up --override min.insync.replicas=2; minibroker topics create "
        f"{TOPIC} --partitions 3 --replication-factor 3",
        f"minibroker perf produce {TOPIC} --num-records {PLAIN_RECORDS} --record-size "
        f"{RECORD_BYTES} (its defaults: acks=all, idempotent, one send() per record)",
        f"minibroker perf produce {TOPIC} --num-records {TRANSACTIONS}*N --record-size "
        f"{RECORD_BYTES} --transactional-id ID --transaction-records N, N = "
        + ", ".join(str(n) for n in RECORDS_PER_TRANSACTION),
        f"confluent-kafka Producer({{'enable.idempotence': True, 'acks': 'all'}}): "
        f"{PLAIN_RECORDS} records, produce() + poll(0) each, flush()",
        f"confluent-kafka Producer({{'transactional.id': ID}}): init_transactions(), then "
        f"{TRANSACTIONS} times begin_transaction(), N produce() + poll(0), "
        "commit_transaction()",
        "each writer's plain run before and after its transactional runs, best of the two",
    ]
    return TransactionsBench(
        runs,
        commands,
        confluent_kafka.libversion()[0],
        time.perf_counter() - started,
        (load_start, _load()),
        idle,
        findings,
    )


def _idle_cpu(broker_pids: list[int]) -> float:
    """The brokers' CPU seconds a second over IDLE_S with no client (their fetchers'
    long polls, ZooKeeper pings, timers): what a slow run's broker CPU holds besides its
    transactions."""
    before = sum(_process_cpu_s(p) for p in broker_pids)
    time.sleep(IDLE_S)
    return (sum(_process_cpu_s(p) for p in broker_pids) - before) / IDLE_S


def _load() -> float:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return 0.0


# -- confluent-kafka, in its own process ---------------------------------------------------------


def confluent(
    bootstrap: str, topic: str, records: int, per_txn: int, transactional_id: str | None
) -> dict[str, Any]:
    """``records`` records of RECORD_BYTES from confluent-kafka's Producer: ``per_txn`` per
    transaction with ``transactional_id``, or (``per_txn`` 0) idempotent without
    transactions. Raises if a record failed or a call did not finish within its timeout."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": "all"}
    if per_txn:
        config["transactional.id"] = transactional_id
    else:
        config["enable.idempotence"] = True
    producer = confluent_kafka.Producer(config)
    failed: list[str] = []

    def delivered(err: confluent_kafka.KafkaError | None, _: confluent_kafka.Message) -> None:
        if err is not None:
            failed.append(str(err))

    def produce(value: bytes) -> None:
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:  # queue.buffering.max.messages: let deliveries drain
                producer.poll(0.01)
        producer.poll(0)

    value = b"x" * RECORD_BYTES
    producer.list_topics(topic, timeout=CALL_TIMEOUT_S)  # metadata first, as perf has it
    transactions = 0
    if per_txn:
        producer.init_transactions(CALL_TIMEOUT_S)
        started = time.perf_counter()
        for first in range(0, records, per_txn):
            producer.begin_transaction()
            for _ in range(min(per_txn, records - first)):
                produce(value)
            producer.commit_transaction(CALL_TIMEOUT_S)
            transactions += 1
    else:
        started = time.perf_counter()
        for _ in range(records):
            produce(value)
        if producer.flush(RUN_TIMEOUT_S) != 0:
            raise RuntimeError(f"confluent-kafka: flush left records after {RUN_TIMEOUT_S} s")
    seconds = time.perf_counter() - started
    if failed:
        raise RuntimeError(f"confluent-kafka: {len(failed)} records failed: {failed[:3]}")
    return {"records": records, "transactions": transactions, "seconds": round(seconds, 3)}


def main(argv: list[str]) -> None:
    if argv[:1] == ["confluent"] and len(argv) in (5, 6):
        bootstrap, topic, records, per_txn = argv[1:5]
        tid = argv[5] if len(argv) == 6 else None
        print(json.dumps(confluent(bootstrap, topic, int(records), int(per_txn), tid)))
        return
    raise SystemExit(
        "usage: python -m bench.transactions confluent BOOTSTRAP TOPIC RECORDS N [TRANSACTIONAL_ID]"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
