"""The workload's processes that go through the brokers' Kafka listeners with Kafka's own
clients (``chaos run --client kafka|mixed``; :mod:`chaos.workload` starts them and has
their options, docs/chaos.md "Kafka's own clients" says what a run starts). They write the
same history as the gRPC ones (:class:`~chaos.history_recorder.HistoryRecorder`, the values
of :func:`~chaos.workload_records.record_for`), so that the audit judges what Kafka's
clients were told by the same rules, and the outcomes come from the clients' own reports
(:mod:`chaos.kafka_outcomes` maps them, never guessing ``ok`` or ``fail``):

- a **confluent-kafka producer** (librdkafka: ``enable.idempotence``, ``acks=all``,
  ``message.timeout.ms`` the delivery timeout) and an **aiokafka producer**
  (``enable_idempotence``, ``acks="all"``, ``request_timeout_ms`` the delivery timeout,
  which is how long aiokafka lets a batch wait) write round-robin over the partitions at
  ``--rate``. ``fail`` only when ``produce()``/``send()`` raised (nothing was queued);
  a delivery report with an error is ``info``. A producer whose idempotent state is lost
  for good (librdkafka's fatal errors; aiokafka's ``send()`` refusing for anything but a
  full buffer) is replaced by a new one, after the old one's outcomes are in.
- a **group member** (confluent-kafka, ``subscribe``, the eager ``range`` assignor,
  ``enable.auto.commit=false``) reads with ``poll()``, one record at a time, so that each
  record is known to come after any rebalance callback of that call: its read lines name
  the member's group, member id and generation at the poll. It commits the next offset of
  every partition it read, only after their read lines are written: every
  :data:`COMMIT_EVERY_S` or :data:`COMMIT_EVERY_RECORDS` records, and when its partitions
  are revoked; asynchronously, each outcome recorded when librdkafka reports it (a
  synchronous commit waits for minutes while no coordinator is known, polling nothing).
  Its assignments, revocations, losses and commits are lines of their own (``f``), and its
  ``session`` goes up at each of the first three.
- a **reader** (aiokafka, no group: ``assign`` to every partition, from the beginning)
  reads everything in one session.

SIGTERM (or SIGINT) stops a process: a producer stops sending and waits (up to its delivery
timeout) for the outcomes of what it sent, recording what it never learnt as ``info``; a
group member stops polling and closes its consumer, which revokes (and commits) its
partitions as it leaves the group.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import random
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NamedTuple

from chaos.history_recorder import HistoryRecorder
from chaos.kafka_outcomes import (
    GroupMetadata,
    Outcome,
    commit_outcome,
    delivery_outcome,
    parse_group_metadata,
)
from chaos.transactional_workload import paced
from chaos.workload_records import record_for

if TYPE_CHECKING:
    import confluent_kafka

__all__ = [
    "AIOKAFKA",
    "CONFLUENT",
    "PRODUCER_CLIENTS",
    "consume_in_group",
    "produce_with_aiokafka",
    "produce_with_confluent",
    "read_everything",
]

CONFLUENT = "confluent"
"""confluent-kafka, Kafka's protocol as librdkafka speaks it."""
AIOKAFKA = "aiokafka"
"""aiokafka, a pure-Python implementation of it."""
PRODUCER_CLIENTS = (CONFLUENT, AIOKAFKA)
COMMIT_EVERY_S = 0.5
COMMIT_EVERY_RECORDS = 200
_POLL_S = 0.2
_START_TIMEOUT_S = 30.0
"""How long an aiokafka client may take to start (bootstrap its metadata) or stop."""
_RETRY_S = 1.0


class _Sent(NamedTuple):
    """A record given to a producer, until its outcome is in the history."""

    topic: str
    partition: int
    key: str | None
    value: str | None
    at: float
    """When it was handed to the client (``time.time()``)."""


def _partitions(args: argparse.Namespace) -> list[tuple[str, int]]:
    return [(t, p) for t in args.topics.split(",") for p in range(args.partitions)]


def _targets(args: argparse.Namespace) -> Iterator[tuple[str, int]]:
    """The producers' partitions, round-robin."""
    return itertools.cycle(_partitions(args))


async def _paced_records(
    args: argparse.Namespace, stopping: asyncio.Event
) -> AsyncIterator[tuple[int, _Sent]]:
    """The producer's records, ``--rate`` a second round-robin over the partitions, until
    ``stopping``: the ``n``-th with its value (:func:`record_for`, keys from the process's
    own sequence) and the moment it is handed to the client."""
    targets = _targets(args)
    keys = random.Random(args.process)  # each producer its own sequence of keys
    interval = 1.0 / args.rate
    next_at = time.monotonic()
    for n in itertools.count():
        if stopping.is_set():
            return
        topic, partition = next(targets)
        key, value = record_for(args, keys, n)
        yield n, _Sent(topic, partition, key, value, time.time())
        next_at = await paced(next_at + interval, stopping)


def _encoded(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def _write_outcome(
    history: HistoryRecorder,
    outcome: Outcome,
    sent: _Sent,
    offset: int | None,
    error: object | None = None,
) -> None:
    """The record's line; a ``fail`` or ``info`` names the client's ``error`` (for a
    person reading the history: the audit does not read it)."""
    said = None if error is None else str(error)[:200]
    if outcome == "ok":
        assert offset is not None
        history.ok(sent.topic, sent.partition, sent.value, offset, key=sent.key, sent=sent.at)
    elif outcome == "fail":
        history.fail(sent.topic, sent.partition, sent.value, key=sent.key, sent=sent.at, error=said)
    else:
        history.info(sent.topic, sent.partition, sent.value, key=sent.key, sent=sent.at, error=said)


def _flush_timeout_s(args: argparse.Namespace) -> float:
    """How long a stopping producer waits for its last outcomes."""
    return float(args.delivery_timeout_ms / 1000 + 5)


# -- confluent-kafka's producer ------------------------------------------------------------


def _confluent_producer_config(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "bootstrap.servers": args.bootstrap,
        "client.id": f"chaos-p{args.process}",
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": args.delivery_timeout_ms,
        "request.timeout.ms": max(1000, min(10_000, args.delivery_timeout_ms - 5)),
        "compression.type": args.compression_type,
    }


async def produce_with_confluent(args: argparse.Namespace, stopping: asyncio.Event) -> None:
    """A confluent-kafka producer process until ``stopping``. Delivery reports arrive
    inside ``poll()``/``flush()``, called after every ``produce()`` and at the end."""
    import confluent_kafka

    pending: dict[int, _Sent] = {}
    with HistoryRecorder(Path(args.history), args.process) as history:

        def report(
            n: int, error: confluent_kafka.KafkaError | None, message: confluent_kafka.Message
        ) -> None:
            sent = pending.pop(n, None)
            if sent is None:
                return
            offset = message.offset() if error is None else None
            _write_outcome(history, delivery_outcome(error, offset), sent, offset, error)

        def drained(producer: confluent_kafka.Producer) -> None:
            """Every outcome ``producer`` will report, reported; the rest unknown."""
            producer.flush(_flush_timeout_s(args))
            for n in list(pending):
                _write_outcome(history, "info", pending.pop(n), None)  # never reported

        producer = confluent_kafka.Producer(_confluent_producer_config(args))
        try:
            async for n, sent in _paced_records(args, stopping):
                topic, partition, key, value = sent.topic, sent.partition, sent.key, sent.value
                try:
                    producer.produce(
                        topic,
                        value=_encoded(value),
                        key=_encoded(key),
                        partition=partition,
                        on_delivery=functools.partial(report, n),
                    )
                except (BufferError, confluent_kafka.KafkaException) as e:
                    _write_outcome(history, "fail", sent, None)  # never queued
                    if _is_fatal(e):  # the idempotent producer is done for: a new one
                        print(f"producer {args.process}: fatal: {e}; a new producer", flush=True)
                        drained(producer)
                        producer = confluent_kafka.Producer(_confluent_producer_config(args))
                else:
                    pending[n] = sent
                producer.poll(0)
        finally:
            drained(producer)


def _is_fatal(error: Exception) -> bool:
    import confluent_kafka

    if not isinstance(error, confluent_kafka.KafkaException) or not error.args:
        return False
    kafka_error = error.args[0]
    return isinstance(kafka_error, confluent_kafka.KafkaError) and bool(kafka_error.fatal())


# -- aiokafka's producer -------------------------------------------------------------------


async def _started(client: Any, what: str, stopping: asyncio.Event) -> bool:
    """Start an aiokafka client, again and again while no broker answers; False if stopped
    first."""
    while not stopping.is_set():
        try:
            async with asyncio.timeout(_START_TIMEOUT_S):
                await client.start()
            return True
        except Exception as e:
            print(f"{what}: start failed: {e!r}; again", flush=True)
            with contextlib.suppress(Exception):
                async with asyncio.timeout(_START_TIMEOUT_S):
                    await client.stop()
            await paced(time.monotonic() + _RETRY_S, stopping)
    return False


def _aiokafka_producer(args: argparse.Namespace) -> Any:
    from aiokafka import AIOKafkaProducer

    return AIOKafkaProducer(
        bootstrap_servers=args.bootstrap,
        client_id=f"chaos-p{args.process}",
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
        request_timeout_ms=args.delivery_timeout_ms,
        compression_type=None if args.compression_type == "none" else args.compression_type,
    )


async def produce_with_aiokafka(args: argparse.Namespace, stopping: asyncio.Event) -> None:
    """An aiokafka producer process until ``stopping``."""
    from aiokafka.errors import KafkaTimeoutError

    pending: dict[asyncio.Future[Any], _Sent] = {}
    with HistoryRecorder(Path(args.history), args.process) as history:

        def report(future: asyncio.Future[Any]) -> None:
            sent = pending.pop(future, None)
            if sent is None:
                return
            error = "cancelled" if future.cancelled() else future.exception()
            offset = None if error is not None else int(future.result().offset)
            _write_outcome(history, delivery_outcome(error, offset), sent, offset, error)

        async def drained(producer: Any) -> None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_flush_timeout_s(args)):
                    await producer.flush()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(_START_TIMEOUT_S):
                    await producer.stop()

        producer = _aiokafka_producer(args)
        if not await _started(producer, f"producer {args.process}", stopping):
            return
        try:
            async for _, sent in _paced_records(args, stopping):
                topic, partition, key, value = sent.topic, sent.partition, sent.key, sent.value
                try:
                    future = await producer.send(
                        topic, _encoded(value), key=_encoded(key), partition=partition
                    )
                except Exception as e:  # before a future existed: never queued
                    _write_outcome(history, "fail", sent, None)
                    if not isinstance(e, KafkaTimeoutError):  # not a full buffer: a new one
                        print(
                            f"producer {args.process}: send refused: {e!r}; a new one", flush=True
                        )
                        await drained(producer)
                        producer = _aiokafka_producer(args)
                        if not await _started(producer, f"producer {args.process}", stopping):
                            break
                else:
                    pending[future] = sent
                    future.add_done_callback(report)
        finally:
            await drained(producer)
            for future in list(pending):
                _write_outcome(history, "info", pending.pop(future), None)  # never learnt


# -- confluent-kafka's group member --------------------------------------------------------


class _PendingCommit(NamedTuple):
    """A commit sent: the membership it was sent under and the next offsets it commits."""

    membership: GroupMetadata
    offsets: dict[tuple[str, int], int]


class _GroupMember:
    """One member of a Kafka-protocol group: its reads, commits and rebalances, recorded."""

    def __init__(
        self,
        args: argparse.Namespace,
        history: HistoryRecorder,
        consumer: confluent_kafka.Consumer,
    ) -> None:
        self.args = args
        self.history = history
        self.consumer = consumer
        self.session = 0
        """Bumped at every assignment, revocation and loss: the reads of one assignment are
        one session."""
        self.uncommitted: dict[tuple[str, int], int] = {}
        """The next offset to read of each partition read since the last commit."""
        self.read_since_commit = 0
        self.committed_at = time.monotonic()
        self.assignment: GroupMetadata | None = None
        """The membership of the current assignment (its ``assigned`` line's)."""
        self.pending: list[_PendingCommit] = []
        """Commits sent whose outcome librdkafka has not reported yet, oldest first."""

    def metadata(self) -> GroupMetadata | None:
        """The member's group, member id and generation now; None while it is no member
        (before its first join, or after librdkafka reset them on losing its membership)."""
        md = parse_group_metadata(self.consumer.consumer_group_metadata())
        return md if md.generation >= 0 and md.member else None

    def run(self, stopping: threading.Event) -> None:
        self.consumer.subscribe(
            self.args.topics.split(","),
            on_assign=self._assigned,
            on_revoke=self._revoked,
            on_lost=self._lost,
        )
        try:
            while not stopping.is_set():
                message = self.consumer.poll(_POLL_S)
                if message is not None:
                    self._read(message)
                if self.uncommitted and (
                    self.read_since_commit >= COMMIT_EVERY_RECORDS
                    or time.monotonic() - self.committed_at >= COMMIT_EVERY_S
                ):
                    self.commit()
        finally:
            self.consumer.close()  # revokes (and so commits) as it leaves the group
            self.unreported()

    def _read(self, message: confluent_kafka.Message) -> None:
        error = message.error()
        if error is not None:
            print(f"consumer {self.args.process}: {error}", flush=True)
            return
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        if topic is None or partition is None or offset is None:
            return  # not a record (librdkafka says records always have all three)
        raw = message.value()
        value = None if raw is None else bytes(raw).decode("utf-8", "replace")
        # Any callback of this poll ran before it returned the record: the membership now
        # is the one it was read under (that of its assignment if librdkafka reset it).
        md = self.metadata() or self.assignment
        if md is None:
            print(f"consumer {self.args.process}: a record outside any assignment", flush=True)
            return
        self.history.read(
            topic,
            partition,
            offset,
            value,
            session=self.session,
            isolation=self.args.isolation_level,
            group=(md.group, md.member, md.generation),
        )
        self.uncommitted[(topic, partition)] = offset + 1
        self.read_since_commit += 1

    def commit(self) -> None:
        """Commit the next offsets of what was read (its read lines written before),
        asynchronously: a synchronous commit waits for as long as librdkafka knows no
        coordinator (minutes, when the coordinator's broker is down and the session times
        out), and a member that waits polls nothing. Each commit's outcome is recorded when
        librdkafka reports it (:meth:`committed`), or as unknown at the end."""
        import confluent_kafka

        offsets = sorted(self.uncommitted.items())
        self.uncommitted.clear()
        self.read_since_commit = 0
        self.committed_at = time.monotonic()
        md = self.metadata()
        if not offsets or md is None:
            return  # no membership to commit under (a generation of -1 is no group's)
        request = [confluent_kafka.TopicPartition(t, p, o) for (t, p), o in offsets]
        self.pending.append(_PendingCommit(md, dict(offsets)))
        try:
            self.consumer.commit(offsets=request, asynchronous=True)
        except confluent_kafka.KafkaException as e:  # refused before it was sent
            error = e.args[0] if e.args else None
            code = error.code() if isinstance(error, confluent_kafka.KafkaError) else -1
            print(f"consumer {self.args.process}: commit refused: {e}", flush=True)
            self._record(self.pending.pop(), {tp: code for tp, _ in offsets})

    def committed(
        self,
        error: confluent_kafka.KafkaError | None,
        partitions: list[confluent_kafka.TopicPartition],
    ) -> None:
        """librdkafka's report of one commit (``on_commit``, served inside ``poll``):
        the whole request's ``error``, or each partition's."""
        asked = {(tp.topic, tp.partition): tp.offset for tp in partitions}
        pending = next((c for c in self.pending if c.offsets == asked), None)
        if pending is None:
            pending = next((c for c in self.pending if asked.keys() <= c.offsets.keys()), None)
        if pending is None:
            return  # not one of ours (librdkafka commits nothing on its own here)
        self.pending.remove(pending)
        codes: dict[tuple[str, int], int | None] = {}
        for tp in partitions:
            own = tp.error.code() if tp.error is not None else None
            codes[(tp.topic, tp.partition)] = own if error is None else error.code()
        if error is not None:
            print(f"consumer {self.args.process}: commit failed: {error}", flush=True)
        self._record(pending, codes)

    def _record(self, pending: _PendingCommit, codes: dict[tuple[str, int], int | None]) -> None:
        """A commit's lines, one per outcome; a partition the report leaves out is
        unknown."""
        outcomes: dict[Outcome, list[list[object]]] = {}
        for (t, p), o in sorted(pending.offsets.items()):
            kind: Outcome = commit_outcome(codes[(t, p)]) if (t, p) in codes else "info"
            outcomes.setdefault(kind, []).append([t, p, o])
        md = pending.membership
        for kind, entries in outcomes.items():
            self.history.group_step(
                "commit_offsets", kind, md.group, md.member, md.generation, offsets=entries
            )

    def unreported(self) -> None:
        """The commits librdkafka never reported on (the consumer closed first): unknown."""
        while self.pending:
            self._record(self.pending.pop(0), {})

    def _step(
        self, f: str, md: GroupMetadata | None, partitions: list[confluent_kafka.TopicPartition]
    ) -> None:
        if md is None:
            print(f"consumer {self.args.process}: {f} outside any membership", flush=True)
            return
        self.history.group_step(
            f,
            "ok",
            md.group,
            md.member,
            md.generation,
            partitions=sorted([tp.topic, tp.partition] for tp in partitions),
        )

    def _assigned(
        self, _: confluent_kafka.Consumer, partitions: list[confluent_kafka.TopicPartition]
    ) -> None:
        self.session += 1
        self.uncommitted.clear()
        self.assignment = self.metadata()
        self._step("assigned", self.assignment, partitions)

    def _revoked(
        self, _: confluent_kafka.Consumer, partitions: list[confluent_kafka.TopicPartition]
    ) -> None:
        self.commit()  # still a member of this generation: what it read is its to commit
        self.session += 1
        self._step("revoked", self.assignment, partitions)  # the generation it ends
        self.assignment = None

    def _lost(
        self, _: confluent_kafka.Consumer, partitions: list[confluent_kafka.TopicPartition]
    ) -> None:
        self.uncommitted.clear()  # no longer its to commit: another member may hold them
        self.session += 1
        self._step("lost", self.assignment, partitions)
        self.assignment = None


def _group_consumer(
    args: argparse.Namespace, on_commit: Callable[..., None]
) -> confluent_kafka.Consumer:
    import confluent_kafka

    return confluent_kafka.Consumer(
        {
            "on_commit": on_commit,
            "bootstrap.servers": args.bootstrap,
            "client.id": f"chaos-c{args.process}",
            "group.id": args.group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "range",  # eager: all revoked, then assigned
            "session.timeout.ms": args.session_timeout_ms,
            "heartbeat.interval.ms": max(100, args.session_timeout_ms // 10),
            "fetch.wait.max.ms": 200,
            "isolation.level": args.isolation_level,
            "socket.timeout.ms": 10_000,
        }
    )


def consume_in_group(args: argparse.Namespace) -> None:
    """A group member process until SIGTERM or SIGINT."""
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    with HistoryRecorder(Path(args.history), args.process) as history:
        members: list[_GroupMember] = []
        consumer = _group_consumer(args, lambda error, tps: members[0].committed(error, tps))
        members.append(_GroupMember(args, history, consumer))
        members[0].run(stopping)


# -- aiokafka's reader ---------------------------------------------------------------------


async def read_everything(args: argparse.Namespace, stopping: asyncio.Event) -> None:
    """An aiokafka reader process until ``stopping``: every partition from its beginning,
    without a group, in one session."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap,
        client_id=f"chaos-r{args.process}",
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=200,
        isolation_level=args.isolation_level,
    )
    if not await _started(consumer, f"reader {args.process}", stopping):
        return
    with HistoryRecorder(Path(args.history), args.process) as history:
        try:
            consumer.assign([TopicPartition(t, p) for t, p in _partitions(args)])
            await consumer.seek_to_beginning()
            while not stopping.is_set():
                try:
                    async with asyncio.timeout(_START_TIMEOUT_S):
                        batches = await consumer.getmany(timeout_ms=int(_POLL_S * 1000))
                except Exception as e:  # no broker reachable, a poll that timed out: go on
                    print(f"reader {args.process}: poll failed: {e!r}", flush=True)
                    await paced(time.monotonic() + _RETRY_S, stopping)
                    continue
                for tp, records in batches.items():
                    for r in records:
                        value = None if r.value is None else r.value.decode("utf-8", "replace")
                        history.read(
                            tp.topic, tp.partition, r.offset, value, isolation=args.isolation_level
                        )
        finally:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(_START_TIMEOUT_S):
                    await consumer.stop()
