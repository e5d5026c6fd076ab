"""The chaos workload: producer and consumer processes that record what they were told.

Each runs as its own process (``python -m chaos.workload producer|consumer ...``, started by
:class:`Workload`), as a client on another machine would, and writes its own history file
(:class:`~chaos.history_recorder.HistoryRecorder`):

- a **producer** (acks=all, the idempotent producer, ``compression.type`` as
  ``--compression-type`` says) writes unique values ``p<process>-<n>`` at a bounded rate,
  round-robin over the topics' partitions (on compacted topics, ``--keys``: each record
  with a key drawn from ``k0`` .. ``k<keys - 1>``, every ``--tombstone-every``-th a
  tombstone, a null value, the history naming its key), and records each outcome:
  ``ok`` with the offset the broker acknowledged; ``fail`` only when the record was never
  queued (``send`` itself refused it); ``info`` for every other failure (a delivery timeout
  or an error after a send may hide a write: never guessed either way).
- a **consumer** reads all the topics, as a member of a group (subscribe, rebalances) or
  alone (``assign`` to every partition from the earliest offset), and records every record
  it polls as a ``read`` line. Its ``session`` is the consumer's position epoch
  (:attr:`client.consumer.Consumer.position_epoch`), doubled, plus one for a poll during
  which the epoch moved: the audit compares offsets only within one session.

The ``transactions`` workload (:data:`TRANSACTIONS`; the default is :data:`PLAIN`) runs
transactional producers and, with ``copiers``, consume-transform-produce copiers
(:mod:`chaos.transactional_workload` has them), and its consumers read with
``isolation.level=read_committed``, their read lines saying so.

SIGTERM (or SIGINT) stops a process: a producer stops sending, waits for the outcomes of
what it sent (up to its delivery timeout) and records them (a transactional one ends its
current transaction first, as it planned to); a consumer stops polling.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from chaos import transactional_workload
from chaos.history_recorder import HistoryRecorder
from client.cli.common import compression_type_argument
from client.consumer import Consumer, ConsumerConfig
from client.metadata import BrokerConnections
from client.producer import FutureRecordMetadata, Producer, ProducerConfig
from proto.topic_partition import TopicPartition

__all__ = [
    "COPIER_GROUP",
    "PLAIN",
    "TRANSACTIONS",
    "WORKLOADS",
    "Workload",
    "WorkloadSpec",
    "transactional_id",
]

PLAIN = "plain"
"""Idempotent producers and read_uncommitted consumers."""
TRANSACTIONS = "transactions"
"""Transactional producers and read_committed consumers."""
WORKLOADS = (PLAIN, TRANSACTIONS)
COPIER_GROUP = "chaos-copiers"
"""The consumer group whose offsets the copiers commit in their transactions."""
READ_COMMITTED = transactional_workload.READ_COMMITTED

_STOP_GRACE_S = 45.0
"""How long a stopped producer may take to learn its last outcomes before it is killed."""


@dataclass(frozen=True)
class WorkloadSpec:
    """What the workload does; the same for every process it starts."""

    bootstrap: str
    zookeeper: str
    topics: Sequence[str]
    partitions: int
    producers: int = 3
    rate: float = 100.0
    """Records per second, per producer."""
    group_consumers: int = 2
    """Members of the consumer group ``chaos-readers`` (0: none)."""
    assign_consumer: bool = True
    """One more consumer reading every partition with ``assign``."""
    delivery_timeout_ms: int = 30_000
    zookeeper_session_timeout_ms: int = 6000
    """The consumer group members' sessions."""
    compression_type: str = "none"
    """The producers' ``compression.type`` (none, gzip, snappy, lz4, zstd): the audit then
    reads compressed batches from the replica logs."""
    keys: int = 0
    """Keys the producers draw from (a compacted topic's records need one); 0: no keys."""
    tombstone_every: int = 0
    """With ``keys``: every so many records of a producer is a tombstone (0: none)."""
    workload: str = PLAIN
    """:data:`PLAIN` or :data:`TRANSACTIONS`."""
    transaction_records: int = 5
    """Records per transaction (transactions)."""
    abort_probability: float = 0.2
    """How often a transactional producer aborts a transaction it could commit."""
    transaction_timeout_ms: int = 10_000
    """The transactional producers' ``transaction.timeout.ms``: a transaction a killed
    producer left open is aborted by its coordinator this long after it began."""
    copiers: int = 0
    """Consume-transform-produce processes (transactions): they copy ``topics`` to
    ``copy_topic``."""
    copy_topic: str | None = None
    """Where the copiers write (the consumers read it too)."""

    @property
    def isolation_level(self) -> str:
        """The consumers' ``isolation.level``."""
        return READ_COMMITTED if self.workload == TRANSACTIONS else "read_uncommitted"

    @property
    def copier_count(self) -> int:
        """The copiers this workload runs (none but in the transactions one, with a copy
        topic)."""
        return self.copiers if self.workload == TRANSACTIONS and self.copy_topic else 0

    def transactional_ids(self) -> dict[int, str]:
        """Each transactional process's number (the producers', then the copiers') and
        ``transactional.id``: none in the plain workload."""
        if self.workload != TRANSACTIONS:
            return {}
        return {p: transactional_id(p) for p in range(self.producers + self.copier_count)}


def transactional_id(process: int) -> str:
    """The ``transactional.id`` of the workload's producer ``process``: one per process,
    kept by the producers it starts again after a fence."""
    return f"chaos-txn-{process}"


@dataclass
class Workload:
    """The workload's processes for one run; their histories go to ``history_dir``."""

    spec: WorkloadSpec
    history_dir: Path
    log_dir: Path
    _processes: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def start(self) -> None:
        spec = self.spec
        common = [
            "--bootstrap", spec.bootstrap,
            "--zookeeper", spec.zookeeper,
            "--topics", ",".join(spec.topics),
            "--partitions", str(spec.partitions),
        ]  # fmt: skip
        transactional = spec.transactional_ids()
        process = 0
        for _ in range(spec.producers):
            txn = [] if process not in transactional else [
                "--transactional-id", transactional[process],
                "--transaction-records", str(spec.transaction_records),
                "--abort-probability", str(spec.abort_probability),
                "--transaction-timeout-ms", str(spec.transaction_timeout_ms),
            ]  # fmt: skip
            self._spawn(
                f"producer-{process}",
                [
                    "producer", *common, "--process", str(process), "--rate", str(spec.rate),
                    "--delivery-timeout-ms", str(spec.delivery_timeout_ms),
                    "--compression-type", spec.compression_type,
                    "--keys", str(spec.keys), "--tombstone-every", str(spec.tombstone_every),
                    *txn,
                ],
                process,
            )  # fmt: skip
            process += 1
        for index in range(spec.copier_count):
            assert spec.copy_topic is not None
            self._spawn(
                f"copier-{process}",
                [
                    "copier", *common, "--process", str(process),
                    "--transactional-id", transactional[process],
                    "--transaction-records", str(spec.transaction_records),
                    "--abort-probability", str(spec.abort_probability),
                    "--transaction-timeout-ms", str(spec.transaction_timeout_ms),
                    "--delivery-timeout-ms", str(spec.delivery_timeout_ms),
                    "--copy-topic", spec.copy_topic, "--group", COPIER_GROUP,
                    "--copier-index", str(index), "--copiers", str(spec.copier_count),
                ],
                process,
            )  # fmt: skip
            process += 1
        copies = [spec.copy_topic] if spec.copy_topic is not None and spec.copier_count else []
        common[common.index("--topics") + 1] = ",".join([*spec.topics, *copies])  # read too
        isolation = ["--isolation-level", spec.isolation_level]
        for _ in range(spec.group_consumers):
            self._spawn(
                f"consumer-{process}",
                [
                    "consumer", *common, "--process", str(process), "--group", "chaos-readers",
                    "--session-timeout-ms", str(spec.zookeeper_session_timeout_ms), *isolation,
                ],
                process,
            )  # fmt: skip
            process += 1
        if spec.assign_consumer:
            self._spawn(
                f"consumer-{process}",
                ["consumer", *common, "--process", str(process), *isolation],
                process,
            )

    def _spawn(self, name: str, args: list[str], process: int) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        history = self.history_dir / f"{process}.jsonl"
        with (self.log_dir / f"{name}.log").open("ab") as log:
            popen = subprocess.Popen(
                [sys.executable, "-m", "chaos.workload", *args, "--history", str(history)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=Path(__file__).resolve().parent.parent,
                start_new_session=True,  # the run's Ctrl-C is the run's to handle
            )
        self._processes.append((name, popen))

    def alive(self) -> list[str]:
        return [name for name, p in self._processes if p.poll() is None]

    def stop(self, consumers_too: bool = True) -> None:
        """SIGTERM the producers (and consumers), wait for them to record their last
        outcomes, SIGKILL what is still there after the grace period."""
        writers = ("producer", "copier")
        chosen = [(n, p) for n, p in self._processes if consumers_too or n.startswith(writers)]
        for _, p in chosen:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + _STOP_GRACE_S
        for _, p in chosen:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


# -- the processes -------------------------------------------------------------------------


def _stop_event() -> asyncio.Event:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    return stopping


async def _produce(args: argparse.Namespace) -> None:
    topics = args.topics.split(",")
    targets = itertools.cycle(
        [TopicPartition(t, p) for t in topics for p in range(args.partitions)]
    )
    stopping = _stop_event()
    config = ProducerConfig(
        acks=-1,
        linger_ms=5,
        request_timeout_ms=min(10_000, args.delivery_timeout_ms - 5),
        delivery_timeout_ms=args.delivery_timeout_ms,
        max_block_ms=args.delivery_timeout_ms,
        compression_type=args.compression_type,
    )
    pending: set[FutureRecordMetadata] = set()
    keys = random.Random(args.process)  # each producer its own sequence of keys
    with HistoryRecorder(Path(args.history), args.process) as history:

        def outcome(
            tp: TopicPartition, value: str | None, key: str | None, future: FutureRecordMetadata
        ) -> None:
            pending.discard(future)
            if future.cancelled() or future.exception() is not None:
                # sent: it may have been written
                history.info(tp.topic, tp.partition, value, key=key)
                return
            history.ok(tp.topic, tp.partition, value, future.result().offset, key=key)

        async with (
            BrokerConnections.from_bootstrap(args.bootstrap) as connections,
            Producer(connections, config) as producer,
        ):
            interval = 1.0 / args.rate
            next_at = time.monotonic()
            for n in itertools.count():
                if stopping.is_set():
                    break
                tp = next(targets)
                key, value = _record(args, keys, n)
                try:
                    future = await producer.send(
                        tp.topic,
                        None if value is None else value.encode(),
                        key=None if key is None else key.encode(),
                        partition=tp.partition,
                    )
                except Exception:
                    history.fail(tp.topic, tp.partition, value, key=key)  # never queued
                else:
                    pending.add(future)
                    future.add_done_callback(functools.partial(outcome, tp, value, key))
                next_at = await transactional_workload.paced(next_at + interval, stopping)
            if pending:  # every record's outcome in the history before it closes
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(args.delivery_timeout_ms / 1000 + 5):
                        await producer.flush()


async def _until_stopped(
    process: Callable[[argparse.Namespace, asyncio.Event], Awaitable[None]],
    args: argparse.Namespace,
) -> None:
    await process(args, _stop_event())


def _record(args: argparse.Namespace, keys: random.Random, n: int) -> tuple[str | None, str | None]:
    """The ``n``-th record's key and value: a unique value, without a key unless the topics
    are compacted (``--keys``); then every ``--tombstone-every``-th is a tombstone (a null
    value, told apart in the history by its key and offset)."""
    value = f"p{args.process}-{n}"
    if not args.keys:
        return None, value
    key = f"k{keys.randrange(args.keys)}"
    if args.tombstone_every and n % args.tombstone_every == args.tombstone_every - 1:
        return key, None
    return key, value


async def _consume(args: argparse.Namespace) -> None:
    topics = args.topics.split(",")
    stopping = _stop_event()
    config = ConsumerConfig(
        group_id=args.group,
        auto_offset_reset="earliest",
        zookeeper_session_timeout_ms=args.session_timeout_ms,
        fetch_max_wait_ms=200,
        isolation_level=args.isolation_level,
    )
    with HistoryRecorder(Path(args.history), args.process) as history:
        async with (
            BrokerConnections.from_bootstrap(args.bootstrap) as connections,
            Consumer(connections, config, args.zookeeper if args.group else None) as consumer,
        ):
            if args.group:
                consumer.subscribe(topics)
            else:
                consumer.assign(
                    [TopicPartition(t, p) for t in topics for p in range(args.partitions)]
                )
                consumer.seek_to_beginning()
            while not stopping.is_set():
                before = consumer.position_epoch
                try:
                    records = await consumer.poll(timeout_ms=200)
                except Exception as e:  # a rebalance failed, no broker reachable: go on
                    print(f"consumer {args.process}: poll failed: {e}", flush=True)
                    await asyncio.sleep(0.5)
                    continue
                after = consumer.position_epoch
                session = 2 * after + (0 if before == after else 1)
                for r in records:
                    value = None if r.value is None else r.value.decode("utf-8", "replace")
                    history.read(
                        r.topic,
                        r.partition,
                        r.offset,
                        value,
                        session=session,
                        isolation=args.isolation_level,
                    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.workload")
    parser.add_argument("role", choices=["producer", "copier", "consumer"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--zookeeper", required=True)
    parser.add_argument("--topics", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--process", type=int, required=True)
    parser.add_argument("--history", required=True)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--delivery-timeout-ms", type=int, default=30_000)
    parser.add_argument(
        "--compression-type",
        type=compression_type_argument,
        default="none",
        help="the producers' compression.type: none (default), gzip, snappy, lz4, zstd",
    )
    parser.add_argument(
        "--keys", type=int, default=0, help="keys to draw from (compacted topics); 0: none"
    )
    parser.add_argument(
        "--tombstone-every", type=int, default=0, help="with --keys: every N-th a tombstone"
    )
    parser.add_argument("--group", default=None)
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument(
        "--isolation-level",
        choices=["read_uncommitted", "read_committed"],
        default="read_uncommitted",
        help="a consumer's isolation.level",
    )
    parser.add_argument(
        "--transactional-id", default=None, help="a transactional producer with this id"
    )
    parser.add_argument("--transaction-records", type=int, default=5)
    parser.add_argument("--abort-probability", type=float, default=0.2)
    parser.add_argument("--transaction-timeout-ms", type=int, default=10_000)
    parser.add_argument("--copy-topic", default=None, help="a copier's output topic")
    parser.add_argument("--copier-index", type=int, default=0)
    parser.add_argument("--copiers", type=int, default=1)
    args = parser.parse_args(argv)
    import uvloop

    if args.role == "consumer":
        run = _consume
    elif args.role == "copier":
        run = functools.partial(_until_stopped, transactional_workload.copy)
    elif args.transactional_id is not None:
        run = functools.partial(_until_stopped, transactional_workload.produce_transactions)
    else:
        run = _produce
    print(f"{args.role} {args.process} pid {os.getpid()} started", flush=True)
    uvloop.run(run(args))
    print(f"{args.role} {args.process} stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
