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

With ``client`` :data:`KAFKA` the producers and consumers are Kafka's own clients
(confluent-kafka and aiokafka, through the brokers' Kafka listeners:
:mod:`chaos.kafka_workload` has them), and with :data:`MIXED` both kinds run side by side
(:meth:`WorkloadSpec.producer_client` says which producer is which).

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
import re
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos import kafka_workload, transactional_workload
from chaos.history_recorder import HistoryRecorder
from chaos.kafka_workload import PRODUCER_CLIENTS
from chaos.workload_records import record_for
from client.cli.common import compression_type_argument
from client.consumer import Consumer, ConsumerConfig
from client.metadata import BrokerConnections
from client.producer import FutureRecordMetadata, Producer, ProducerConfig
from proto.topic_partition import TopicPartition

__all__ = [
    "CLIENTS",
    "COPIER_GROUP",
    "GROUP",
    "GRPC",
    "KAFKA",
    "KAFKA_GROUP",
    "MIXED",
    "PLAIN",
    "TRANSACTIONS",
    "WORKLOADS",
    "Workload",
    "WorkloadSpec",
    "producer_client",
    "transactional_id",
]

PLAIN = "plain"
"""Idempotent producers and read_uncommitted consumers."""
TRANSACTIONS = "transactions"
"""Transactional producers and read_committed consumers."""
WORKLOADS = (PLAIN, TRANSACTIONS)
COPIER_GROUP = "chaos-copiers"
"""The consumer group whose offsets the copiers commit in their transactions."""
GROUP = "chaos-readers"
"""The gRPC consumers' group (minibroker's own, in ZooKeeper)."""
KAFKA_GROUP = "chaos-kafka-readers"
"""The Kafka-protocol consumer group of the confluent-kafka members (the brokers' group
coordinators): another group id, so that the two kinds of group never meet."""
GRPC = "grpc"
"""Every process through minibroker's gRPC client."""
KAFKA = "kafka"
"""Every process through the Kafka listeners, with Kafka's own clients."""
MIXED = "mixed"
"""Both: producers of the three clients, both groups, both readers."""
CLIENTS = (GRPC, KAFKA, MIXED)
READ_COMMITTED = transactional_workload.READ_COMMITTED
KAFKA_ROLES = ("kafka-producer", "kafka-group-consumer", "kafka-reader")
"""The roles of :mod:`chaos.kafka_workload`'s processes."""

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
    client: str = GRPC
    """:data:`GRPC`, :data:`KAFKA` or :data:`MIXED`: which clients the processes use."""
    kafka_bootstrap: str | None = None
    """The brokers' Kafka listeners (``host:port,...``): needed by every client but gRPC."""
    kafka_session_timeout_ms: int = 10_000
    """The Kafka group members' ``session.timeout.ms`` (the brokers' default
    ``group.min.session.timeout.ms`` is 6000)."""

    def __post_init__(self) -> None:
        if self.client not in CLIENTS:
            raise ValueError(f"unknown client {self.client!r}: choose {', '.join(CLIENTS)}")
        if self.client != GRPC and self.kafka_bootstrap is None:
            raise ValueError(f"client {self.client} needs the Kafka listeners' addresses")
        if self.client != GRPC and self.workload == TRANSACTIONS:
            raise ValueError("the transactions workload runs through the gRPC client only")

    def producer_client(self, process: int) -> str:
        """The client producer ``process`` writes with (:func:`producer_client`)."""
        return producer_client(self.client, process)

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


def producer_client(client: str, process: int) -> str:
    """The client that producer ``process`` of a workload of ``client`` writes with:
    :data:`GRPC`, or one of :data:`chaos.kafka_workload.PRODUCER_CLIENTS`. :data:`KAFKA`
    alternates confluent-kafka (even numbers) and aiokafka (odd); :data:`MIXED` rotates
    gRPC, confluent-kafka and aiokafka (``process % 3``)."""
    if client == KAFKA:
        return PRODUCER_CLIENTS[process % 2]
    if client == MIXED:
        return (GRPC, *PRODUCER_CLIENTS)[process % 3]
    return GRPC


_WRITTEN_VALUE = re.compile(r"'p(\d+)-\d+'")
"""A workload value quoted in a violation's sentence: ``'p<process>-<n>'``."""


def is_kafka_client_resend(violation: dict[str, Any], client: str) -> bool:
    """Whether a report's violation is a ``resent`` of values only Kafka-client producers
    of a workload of ``client`` wrote: librdkafka's resend of a record in doubt under a new
    epoch, the client's behaviour (docs/chaos.md, "Idempotent producers and duplicates").
    A gRPC producer never resends, so one of its values in a ``resent`` is a defect."""
    if violation.get("kind") != "resent":
        return False
    processes = {int(p) for p in _WRITTEN_VALUE.findall(str(violation.get("detail", "")))}
    return bool(processes) and all(producer_client(client, p) != GRPC for p in processes)


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
            client = spec.producer_client(process)
            txn = [] if process not in transactional else [
                "--transactional-id", transactional[process],
                "--transaction-records", str(spec.transaction_records),
                "--abort-probability", str(spec.abort_probability),
                "--transaction-timeout-ms", str(spec.transaction_timeout_ms),
            ]  # fmt: skip
            role = ["producer"] if client == GRPC else ["kafka-producer", "--kafka-client", client]
            self._spawn(
                f"producer-{process}" + ("" if client == GRPC else f"-{client}"),
                [
                    *role, *self._through(client, common), "--process", str(process),
                    "--rate", str(spec.rate),
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
        grpc_readers = spec.client in (GRPC, MIXED)
        kafka_readers = spec.client in (KAFKA, MIXED)
        for _ in range(spec.group_consumers if grpc_readers else 0):
            self._spawn(
                f"consumer-{process}",
                [
                    "consumer", *common, "--process", str(process), "--group", GROUP,
                    "--session-timeout-ms", str(spec.zookeeper_session_timeout_ms), *isolation,
                ],
                process,
            )  # fmt: skip
            process += 1
        for _ in range(spec.group_consumers if kafka_readers else 0):
            self._spawn(
                f"consumer-{process}-kafka-group",
                [
                    "kafka-group-consumer", *self._through(KAFKA, common),
                    "--process", str(process), "--group", KAFKA_GROUP,
                    "--session-timeout-ms", str(spec.kafka_session_timeout_ms), *isolation,
                ],
                process,
            )  # fmt: skip
            process += 1
        if spec.assign_consumer and grpc_readers:
            self._spawn(
                f"consumer-{process}",
                ["consumer", *common, "--process", str(process), *isolation],
                process,
            )
            process += 1
        if spec.assign_consumer and kafka_readers:
            self._spawn(
                f"consumer-{process}-aiokafka",
                [
                    "kafka-reader", *self._through(KAFKA, common), "--process", str(process),
                    *isolation,
                ],
                process,
            )  # fmt: skip

    def _through(self, client: str, common: list[str]) -> list[str]:
        """``common`` for a process of ``client``: a Kafka client's bootstrap is the Kafka
        listeners'."""
        if client == GRPC:
            return common
        assert self.spec.kafka_bootstrap is not None
        through = list(common)
        through[through.index("--bootstrap") + 1] = self.spec.kafka_bootstrap
        return through

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
            tp: TopicPartition,
            value: str | None,
            key: str | None,
            sent: float,
            future: FutureRecordMetadata,
        ) -> None:
            pending.discard(future)
            if future.cancelled() or future.exception() is not None:
                # sent: it may have been written
                error = "cancelled" if future.cancelled() else str(future.exception())[:200]
                history.info(tp.topic, tp.partition, value, key=key, sent=sent, error=error)
                return
            offset = future.result().offset
            history.ok(tp.topic, tp.partition, value, offset, key=key, sent=sent)

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
                key, value = record_for(args, keys, n)
                sent = time.time()
                try:
                    future = await producer.send(
                        tp.topic,
                        None if value is None else value.encode(),
                        key=None if key is None else key.encode(),
                        partition=tp.partition,
                    )
                except Exception as e:  # never queued
                    said = str(e)[:200]
                    history.fail(tp.topic, tp.partition, value, key=key, sent=sent, error=said)
                else:
                    pending.add(future)
                    future.add_done_callback(functools.partial(outcome, tp, value, key, sent))
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
    parser.add_argument(
        "role",
        choices=["producer", "copier", "consumer", *KAFKA_ROLES],
        help="kafka-*: through the Kafka listeners (--bootstrap names them), with Kafka's "
        "own clients",
    )
    parser.add_argument(
        "--kafka-client",
        choices=PRODUCER_CLIENTS,
        default=PRODUCER_CLIENTS[0],
        help="a kafka-producer's client: confluent (librdkafka) or aiokafka",
    )
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
    print(f"{args.role} {args.process} pid {os.getpid()} started", flush=True)
    if args.role == "kafka-group-consumer":  # synchronous: librdkafka's own threads
        kafka_workload.consume_in_group(args)
        print(f"{args.role} {args.process} stopped", flush=True)
        return 0
    import uvloop

    run: Callable[[argparse.Namespace], Coroutine[Any, Any, None]]
    if args.role == "kafka-producer":
        produce = (
            kafka_workload.produce_with_aiokafka
            if args.kafka_client == kafka_workload.AIOKAFKA
            else kafka_workload.produce_with_confluent
        )
        run = functools.partial(_until_stopped, produce)
    elif args.role == "kafka-reader":
        run = functools.partial(_until_stopped, kafka_workload.read_everything)
    elif args.role == "consumer":
        run = _consume
    elif args.role == "copier":
        run = functools.partial(_until_stopped, transactional_workload.copy)
    elif args.transactional_id is not None:
        run = functools.partial(_until_stopped, transactional_workload.produce_transactions)
    else:
        run = _produce
    uvloop.run(run(args))
    print(f"{args.role} {args.process} stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
