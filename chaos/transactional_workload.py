"""The transactions workload's processes (:mod:`chaos.workload` starts them and has their
options): transactional producers and consume-transform-produce copiers, through the
gRPC client (docs/chaos.md, "The transactions workload").

- a **transactional producer** loops: begin, send ``--transaction-records`` unique values
  round-robin over the partitions (so each transaction spans several), then commit, or
  abort with probability ``--abort-probability`` (drawn from a generator seeded with the
  process number). Each write names its transaction (``p<process>-t<n>``) and each step is
  a line of its own, recorded as the client told it: ``ok`` when acknowledged, ``fail``
  only when it certainly did not happen (the client refused a commit before it reached the
  coordinator: a record failed, :class:`~client.producer.TransactionAbortableError`, or
  the producer is fenced, :class:`~client.producer.TransactionFencedError`), ``info``
  otherwise (a timeout, a lost coordinator: never guessed). After an abortable error it
  aborts and goes on; after a fence, or a step whose outcome it cannot know, it closes the
  producer and starts another with the same id, whose ``init_transactions`` fences the old
  epoch (and the coordinator aborts or completes what it left open). A commit whose outcome
  is unknown is tried once more first, as Kafka advises after a timeout.
- a **copier** (KIP-447's loop) reads the producers' topics read_committed (its share of
  their partitions, ``assign``), and for each poll of at most ``--transaction-records``
  records runs one transaction: its reads name it (``c<process>-t<n>``), each record read
  becomes a write of a unique value ``c<process>-<n>`` to the copy topic (the input's
  partition number), and the next offsets to read go to the transaction
  (``send_offsets``, a line of its own) before it commits or, by the same draw, aborts.
  After an abort it reads those records again; after a new producer, from the offsets
  the group committed (FetchGroupOffsets, once ``init_transactions`` has completed what
  the old producer left).

A stop (the ``stopping`` event) ends the current transaction as planned, then the process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from chaos.history_recorder import HistoryRecorder
from client.admin import AdminClient
from client.consumer import Consumer, ConsumerConfig, ConsumerRecord
from client.metadata import BrokerConnections
from client.producer import (
    FutureRecordMetadata,
    Producer,
    ProducerConfig,
    TransactionAbortableError,
    TransactionFencedError,
)
from proto.topic_partition import TopicPartition

__all__ = ["copy", "produce_transactions"]

READ_COMMITTED = "read_committed"


@dataclass
class _Write:
    """A record sent in a transaction, until its outcome is in the history."""

    tp: TopicPartition
    value: str
    future: FutureRecordMetadata
    recorded: bool = False

    @property
    def failed(self) -> bool:
        return self.future.done() and self.future.exception() is not None


@dataclass
class _Transactions:
    """One transactional producer process's transactions, across the producers it starts."""

    args: argparse.Namespace
    history: HistoryRecorder
    targets: Iterator[TopicPartition]
    aborts: random.Random
    """Whether a transaction is aborted on purpose: seeded per process."""
    transactions: int = 0
    records: int = 0
    committed: bool = False
    """Whether the last transaction's commit was acknowledged."""
    role = "producer"

    def say(self, what: str) -> None:
        print(f"{self.role} {self.args.process}: {what}", flush=True)

    async def run(self, producer: Producer, stopping: asyncio.Event) -> bool:
        """Transactions with ``producer`` until stopped (True) or until it must be replaced
        (False: fenced, or a step whose outcome it does not know)."""
        interval = self.args.transaction_records / self.args.rate
        next_at = time.monotonic()
        while not stopping.is_set():
            if not await self.transaction(producer):
                return False
            next_at = await paced(next_at + interval, stopping)
        return True

    async def transaction(self, producer: Producer) -> bool:
        """One transaction, begun, written and ended; False if the producer must go."""
        txn = f"p{self.args.process}-t{self.transactions}"
        self.transactions += 1
        abort = self.aborts.random() < self.args.abort_probability  # drawn for every one
        history = self.history
        try:
            producer.begin_transaction()
        except Exception as e:  # refused by the client (fenced, closed): nothing began
            history.step("begin", txn, "fail")
            self.say(f"{txn} begin refused: {e!r}")
            return False
        history.step("begin", txn, "ok", timeout_ms=self.args.transaction_timeout_ms)
        writes: list[_Write] = []
        for _ in range(self.args.transaction_records):
            tp = next(self.targets)
            value = f"p{self.args.process}-{self.records}"
            self.records += 1
            if not await self._send(producer, tp, value, txn, writes):
                abort = True
                break
        await producer.flush()
        for write in writes:  # every outcome in the history before the step that ends it
            self._record(write, txn, write.future)
        if any(w.failed for w in writes):
            abort = True  # abortable: the client would refuse the commit
        return await (self._abort(producer, txn) if abort else self._commit(producer, txn))

    async def _send(
        self, producer: Producer, tp: TopicPartition, value: str, txn: str, writes: list[_Write]
    ) -> bool:
        """Send one record of ``txn``; False (a ``fail`` line) if it was never queued
        (AddPartitionsToTxn refused, fenced, ...). Its outcome is recorded as it is
        acknowledged: what a transaction wrote is in the history while it is open
        (kill-leader-mid-txn looks there for its moment)."""
        try:
            future = await producer.send(tp.topic, value.encode(), partition=tp.partition)
        except Exception as e:
            self.history.fail(tp.topic, tp.partition, value, txn=txn)
            self.say(f"{txn} send to {tp} refused: {e!r}")
            return False
        write = _Write(tp, value, future)
        writes.append(write)
        future.add_done_callback(functools.partial(self._record, write, txn))
        return True

    def _record(self, write: _Write, txn: str, future: FutureRecordMetadata) -> None:
        if write.recorded or not future.done():
            return
        write.recorded = True
        tp = write.tp
        if future.exception() is not None:  # sent: it may have been written
            self.history.info(tp.topic, tp.partition, write.value, txn=txn)
        else:
            self.history.ok(tp.topic, tp.partition, write.value, future.result().offset, txn=txn)

    async def _commit(self, producer: Producer, txn: str) -> bool:
        self.committed = False
        for attempt in (1, 2):
            try:
                await producer.commit_transaction()
            except TransactionAbortableError as e:  # refused before the coordinator heard
                self.history.step("commit", txn, "fail")
                self.say(f"{txn} commit refused, aborting: {e}")
                return await self._abort(producer, txn)
            except TransactionFencedError as e:  # a newer epoch: this one can never commit
                self.history.step("commit", txn, "fail")
                self.say(f"{txn} commit fenced: {e}")
                return False
            except Exception as e:  # the coordinator may or may not have decided it
                self.history.step("commit", txn, "info")
                self.say(f"{txn} commit attempt {attempt} unknown: {e!r}")
                continue
            self.history.step("commit", txn, "ok")
            self.committed = True
            return True
        return False

    async def _abort(self, producer: Producer, txn: str) -> bool:
        self.committed = False
        try:
            await producer.abort_transaction()
        except Exception as e:
            # Unknown: a timeout or a lost coordinator; or fenced, when the coordinator
            # that fenced this producer aborts the transaction, not this step.
            self.history.step("abort", txn, "info")
            self.say(f"{txn} abort unknown: {e!r}")
            return False
        self.history.step("abort", txn, "ok")
        return True


@dataclass
class _Copier(_Transactions):
    """One copier process's transactions: each the records of one poll, copied."""

    role = "copier"

    async def run_copies(
        self, producer: Producer, consumer: Consumer, stopping: asyncio.Event
    ) -> bool:
        """Copy with ``producer`` until stopped (True) or until it must be replaced."""
        while not stopping.is_set():
            before = consumer.position_epoch
            try:
                records = await consumer.poll(timeout_ms=200)
            except Exception as e:  # no leader reachable: go on
                self.say(f"poll failed: {e!r}")
                await asyncio.sleep(0.5)
                continue
            after = consumer.position_epoch
            session = 2 * after + (0 if before == after else 1)
            if records and not await self.copy_records(producer, consumer, records, session):
                return False
        return True

    async def copy_records(
        self, producer: Producer, consumer: Consumer, records: list[ConsumerRecord], session: int
    ) -> bool:
        """One transaction copying ``records``; False if the producer must go."""
        args, history = self.args, self.history
        txn = f"c{args.process}-t{self.transactions}"
        self.transactions += 1
        abort = self.aborts.random() < args.abort_probability
        first: dict[TopicPartition, int] = {}
        for r in records:
            first.setdefault(TopicPartition(r.topic, r.partition), r.offset)
        try:
            producer.begin_transaction()
        except Exception as e:
            history.step("begin", txn, "fail")
            self._reads(records, session, None)  # polled, processed by no transaction
            self.say(f"{txn} begin refused: {e!r}")
            return False
        history.step("begin", txn, "ok", timeout_ms=args.transaction_timeout_ms)
        self._reads(records, session, txn)
        writes: list[_Write] = []
        for r in records:
            tp = TopicPartition(args.copy_topic, r.partition % args.partitions)
            value = f"c{args.process}-{self.records}"
            self.records += 1
            if not await self._send(producer, tp, value, txn, writes):
                abort = True
                break
        if len(writes) == len(records):  # every input copied: its offsets go with them
            abort |= not await self._send_offsets(producer, txn, records)
        await producer.flush()
        for write in writes:
            self._record(write, txn, write.future)
        if any(w.failed for w in writes):
            abort = True
        go_on = await (self._abort(producer, txn) if abort else self._commit(producer, txn))
        if go_on and not self.committed:  # aborted: those records are to copy again
            for tp, offset in first.items():
                consumer.seek(tp, offset)
        return go_on

    def _reads(self, records: list[ConsumerRecord], session: int, txn: str | None) -> None:
        for r in records:
            value = None if r.value is None else r.value.decode("utf-8", "replace")
            self.history.read(
                r.topic, r.partition, r.offset, value, session=session,
                isolation=READ_COMMITTED, txn=txn,
            )  # fmt: skip

    async def _send_offsets(
        self, producer: Producer, txn: str, records: list[ConsumerRecord]
    ) -> bool:
        """The next offsets to read of the records' partitions, sent to the transaction;
        False if they may not have been (the transaction must then abort)."""
        offsets: dict[TopicPartition, int] = {}
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            offsets[tp] = max(offsets.get(tp, 0), r.offset + 1)
        sent = [[tp.topic, tp.partition, o] for tp, o in sorted(offsets.items())]
        group = self.args.group
        try:
            await producer.send_offsets_to_transaction(offsets, group)
        except TransactionFencedError as e:  # refused: the offsets are not in it
            self.history.step("send_offsets", txn, "fail", group=group, offsets=sent)
            self.say(f"{txn} send_offsets fenced: {e}")
            return False
        except Exception as e:
            self.history.step("send_offsets", txn, "info", group=group, offsets=sent)
            self.say(f"{txn} send_offsets unknown: {e!r}")
            return False
        self.history.step("send_offsets", txn, "ok", group=group, offsets=sent)
        return True


async def paced(next_at: float, stopping: asyncio.Event) -> float:
    """Wait until ``next_at`` (monotonic) or until stopped; the next pacing base: ``next_at``,
    or now when behind (a late process does not burst to catch up)."""
    delay = next_at - time.monotonic()
    if delay <= 0:
        return time.monotonic()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(delay):
            await stopping.wait()
    return next_at


async def copy(args: argparse.Namespace, stopping: asyncio.Event) -> None:
    """A copier process (``python -m chaos.workload copier``) until ``stopping``."""
    inputs = [TopicPartition(t, p) for t in args.topics.split(",") for p in range(args.partitions)]
    mine = inputs[args.copier_index :: args.copiers]
    config = _transactional_config(args)
    reading = ConsumerConfig(
        auto_offset_reset="earliest",
        fetch_max_wait_ms=200,
        isolation_level=READ_COMMITTED,
        max_poll_records=args.transaction_records,
    )
    with HistoryRecorder(Path(args.history), args.process) as history:
        copier = _Copier(args, history, iter(()), random.Random(args.process))
        async with (
            BrokerConnections.from_bootstrap(args.bootstrap) as connections,
            AdminClient(connections, args.zookeeper) as admin,
            Consumer(connections, reading) as consumer,
        ):
            consumer.assign(mine)
            while not stopping.is_set():
                producer = await _transactional_producer(connections, config, stopping)
                if producer is None:
                    break
                try:
                    # After init_transactions: what the last producer left is complete, so
                    # the group's offsets are those of its last committed transaction.
                    ready = await _seek_to_committed(admin, consumer, args.group, mine, stopping)
                    if ready and await copier.run_copies(producer, consumer, stopping):
                        break
                finally:
                    await producer.close(timeout_s=args.delivery_timeout_ms / 1000 + 5)
                copier.say("a new producer for the transactional id")


async def _seek_to_committed(
    admin: AdminClient,
    consumer: Consumer,
    group: str,
    tps: Sequence[TopicPartition],
    stopping: asyncio.Event,
) -> bool:
    """Each partition of ``tps`` sought to the group's committed offset (its start when
    none); again until the coordinator answers, False if stopped first."""
    while not stopping.is_set():
        try:
            answer = await admin.fetch_group_offsets(group)
        except Exception as e:  # the group's coordinator moving: again
            print(f"the offsets of {group} not fetched: {e!r}", flush=True)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await stopping.wait()
            continue
        committed = {
            TopicPartition(o.topic, o.partition): o.offset
            for o in answer.offsets
            if o.offset >= 0 and o.error_code == 0
        }
        for tp in tps:
            if tp in committed:
                consumer.seek(tp, committed[tp])
            else:
                consumer.seek_to_beginning([tp])
        return True
    return False


def _transactional_config(args: argparse.Namespace) -> ProducerConfig:
    return ProducerConfig(
        acks=-1,
        linger_ms=5,
        request_timeout_ms=min(10_000, args.delivery_timeout_ms - 5),
        delivery_timeout_ms=args.delivery_timeout_ms,
        max_block_ms=args.delivery_timeout_ms,
        compression_type=args.compression_type,
        transactional_id=args.transactional_id,
        transaction_timeout_ms=args.transaction_timeout_ms,
    )


async def produce_transactions(args: argparse.Namespace, stopping: asyncio.Event) -> None:
    """A transactional producer process (``python -m chaos.workload producer
    --transactional-id ...``) until ``stopping``."""
    topics = args.topics.split(",")
    targets = itertools.cycle(
        [TopicPartition(t, p) for t in topics for p in range(args.partitions)]
    )
    config = _transactional_config(args)
    with HistoryRecorder(Path(args.history), args.process) as history:
        transactions = _Transactions(args, history, targets, random.Random(args.process))
        async with BrokerConnections.from_bootstrap(args.bootstrap) as connections:
            while not stopping.is_set():
                producer = await _transactional_producer(connections, config, stopping)
                if producer is None:
                    break
                try:
                    done = await transactions.run(producer, stopping)
                finally:
                    await producer.close(timeout_s=args.delivery_timeout_ms / 1000 + 5)
                if not done:
                    transactions.say("a new producer for the transactional id")


async def _transactional_producer(
    connections: BrokerConnections, config: ProducerConfig, stopping: asyncio.Event
) -> Producer | None:
    """A producer with ``init_transactions`` done (again until it is, or stopped: None)."""
    while not stopping.is_set():
        producer = Producer(connections, config)
        try:
            await producer.init_transactions()
        except Exception as e:  # no coordinator yet (killed, paused, moving): again
            print(f"init_transactions({config.transactional_id}) failed: {e!r}", flush=True)
            await producer.close(timeout_s=0)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await stopping.wait()
            continue
        return producer
    return None
