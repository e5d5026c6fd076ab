"""``minibroker perf produce|consume``: throughput and latency (Kafka's perf-test tools).

``perf produce`` sends ``--num-records`` records of ``--record-size`` bytes as fast as the
producer takes them (or at ``--throughput`` records/s) and reports records/s, MB/s and the
latency of each acknowledgement (send to ack): p50, p95, p99 and max. As Kafka's
producer-perf-test it calls the producer's ``send`` once per record, what an application
does; ``--bulk`` hands the records over a batch's worth at a time (``send_many``), the
producer's ceiling. ``--compression-type`` is the producer's ``compression.type``.

What the values hold (``--payload``): ``random``, one value of random bytes sent as every
record (Kafka's producer-perf-test also repeats one value), what the uncompressed figures
have always measured; ``json``, JSON-like event text whose fields vary from record to record
(an id, a timestamp, a user, an event type, a path, a country, an amount, a session token,
then words), each value ``--record-size`` bytes, no two alike within a batch. With a codec
the default is ``json``: one repeated value would compress to almost nothing and random
bytes not at all, so neither says what compression costs or saves. ``perf consume``
reads ``--num-records`` records from the beginning and reports records/s and MB/s. Both show
a progress bar on stderr. Both take the count as ``--num-records`` (kafka-producer-perf-test)
or ``--messages`` (kafka-consumer-perf-test), and the topic as TOPIC or ``--topic``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TimeElapsedColumn

from client.cli.common import (
    acks_argument,
    add_bootstrap_option,
    add_compression_type_option,
    add_topic_argument,
    check_reachable,
    connections,
    run_async,
)
from client.consumer import Consumer, ConsumerConfig
from client.metadata import ClientError
from client.producer import (
    FutureRecordMetadata,
    Producer,
    ProducerConfig,
    RecordRange,
)
from client.producer_config import DEFAULT_BATCH_SIZE
from proto.errors import UsageError


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("perf", help="measure produce or consume throughput and latency")
    kinds = parser.add_subparsers(dest="kind", metavar="KIND", required=True)
    produce = kinds.add_parser("produce", help="produce records and measure")
    add_topic_argument(produce)
    _add_count_option(produce)
    produce.add_argument("--record-size", type=int, default=100, help="value bytes")
    produce.add_argument(
        "--throughput", type=int, default=-1, help="records/s limit (-1: as fast as possible)"
    )
    produce.add_argument("--acks", type=acks_argument, default=-1)
    produce.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    produce.add_argument("--linger-ms", type=int, default=0)
    add_compression_type_option(produce)
    produce.add_argument(
        "--payload",
        choices=PAYLOADS,
        default=None,
        help="random: one value of random bytes for every record; json: JSON-like event text "
        "with varying fields, --record-size bytes each (default: json with a "
        "--compression-type, else random)",
    )
    produce.add_argument(
        "--bulk",
        action="store_true",
        help="hand the records over a batch's worth at a time (Producer.send_many, keyless) "
        "instead of one send() per record as an application does (the default, as Kafka's "
        "producer-perf-test measures its send)",
    )
    produce.add_argument(
        "--transactional-id",
        default=None,
        help="produce as this transactional producer, committing every "
        "--transaction-records records (docs/transactions.md)",
    )
    produce.add_argument(
        "--transaction-records",
        type=int,
        default=100,
        metavar="N",
        help="with --transactional-id: records per transaction (default 100)",
    )
    produce.set_defaults(run=lambda a: run_async(perf_produce(a)))
    consume = kinds.add_parser("consume", help="consume records from the beginning and measure")
    add_topic_argument(consume)
    _add_count_option(consume)
    consume.add_argument(
        "--timeout-ms", type=int, default=10_000, help="give up after this long without records"
    )
    consume.set_defaults(run=lambda a: run_async(perf_consume(a)))
    for sub in (produce, consume):
        sub.add_argument(
            "--json",
            action="store_true",
            help="print the result as one JSON object (records, seconds, records_per_s, "
            "mb_per_s, latency_ms), so runs can be compared",
        )
        add_bootstrap_option(sub)


def _add_count_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--num-records",
        "--messages",
        dest="num_records",
        type=int,
        default=100_000,
        metavar="N",
        help="how many records (default 100000; --messages is the same, as Kafka's "
        "consumer-perf-test spells it)",
    )


@dataclass(frozen=True)
class PerfResult:
    records: int
    seconds: float
    value_bytes: int
    latencies_ms: list[tuple[float, int]]
    """(latency, how many records had it): records given to the producer together share
    the moment they were given and the acknowledgement of their batch."""
    transactions: int = 0
    """Transactions committed (``--transactional-id``); 0: none."""

    def percentiles(self) -> dict[str, float]:
        ordered = sorted(self.latencies_ms)
        return {
            "p50": percentile(ordered, 50),
            "p95": percentile(ordered, 95),
            "p99": percentile(ordered, 99),
            "max": ordered[-1][0] if ordered else 0.0,
        }

    def to_json(self) -> dict[str, object]:
        """The result as ``perf ... --json`` prints it."""
        rate = self.records / self.seconds if self.seconds else 0.0
        result: dict[str, object] = {
            "records": self.records,
            "seconds": round(self.seconds, 3),
            "records_per_s": round(rate, 1),
            "mb_per_s": round(self.value_bytes / self.seconds / 1e6, 3) if self.seconds else 0.0,
        }
        if self.latencies_ms:
            result["latency_ms"] = {k: round(v, 3) for k, v in self.percentiles().items()}
        if self.transactions:
            result["transactions"] = self.transactions
            result["transactions_per_s"] = (
                round(self.transactions / self.seconds, 1) if self.seconds else 0.0
            )
        return result

    def report(self, as_json: bool) -> str:
        return json.dumps(self.to_json()) if as_json else self.summary()

    def summary(self) -> str:
        rate = self.records / self.seconds if self.seconds else 0.0
        mb = self.value_bytes / self.seconds / 1e6 if self.seconds else 0.0
        text = (
            f"{self.records} records in {self.seconds:.2f} s: {rate:,.0f} records/s, {mb:.2f} MB/s"
        )
        if self.latencies_ms:
            p = self.percentiles()
            text += (
                f"; latency ms p50 {p['p50']:.1f}, p95 {p['p95']:.1f}"
                f", p99 {p['p99']:.1f}, max {p['max']:.1f}"
            )
        if self.transactions:
            per_s = self.transactions / self.seconds if self.seconds else 0.0
            text += f"; {self.transactions} transactions, {per_s:,.1f} transactions/s"
        return text


def percentile(ordered: list[tuple[float, int]], p: float) -> float:
    """Nearest-rank percentile of ascending (value, weight) pairs: the value below which
    ``p`` percent of the weight lies."""
    total = sum(weight for _, weight in ordered)
    if not total:
        return 0.0
    rank = max(1, min(total, -(-p * total // 100)))
    seen = 0
    for value, weight in ordered:
        seen += weight
        if seen >= rank:
            return value
    return ordered[-1][0]


def _progress() -> Progress:
    return Progress(
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(file=sys.stderr),
        transient=True,
    )


class _Acks:
    """What ``perf produce`` learns from the acknowledgements: latencies and failures."""

    def __init__(self) -> None:
        self.latencies: list[tuple[float, int]] = []
        self.acknowledged = 0
        self.first_error: BaseException | None = None

    def on_record(self, sent_at: float, future: FutureRecordMetadata) -> None:
        """One record's outcome (the per-record path): its latency from ``send``."""
        if future.cancelled():
            self.first_error = self.first_error or asyncio.CancelledError()
        elif future.exception() is not None:
            self.first_error = self.first_error or future.exception()
        else:
            self.acknowledged += 1
            self.latencies.append(((time.monotonic() - sent_at) * 1000, 1))

    def on_ack(self, sent_at: float, future: asyncio.Future[RecordRange]) -> None:
        """A run of records' outcome: their latency from ``send_many`` (as Kafka's
        ProducerPerformance measures it, from the call), or their error."""
        if future.cancelled():
            self.first_error = self.first_error or asyncio.CancelledError()
        elif future.exception() is not None:
            self.first_error = self.first_error or future.exception()
        else:
            count = future.result().count
            self.acknowledged += count
            self.latencies.append(((time.monotonic() - sent_at) * 1000, count))


async def perf_produce(args: argparse.Namespace) -> int:
    if args.num_records < 1 or args.record_size < 0:
        raise UsageError("--num-records must be >= 1 and --record-size >= 0")
    transactional = args.transactional_id is not None
    if transactional and args.transaction_records < 1:
        raise UsageError("--transaction-records must be >= 1")
    config = ProducerConfig(
        acks=args.acks,
        batch_size=args.batch_size,
        linger_ms=args.linger_ms,
        compression_type=args.compression_type,
        transactional_id=args.transactional_id,
    )
    # Records go to the producer a batch's worth per send_many call when unthrottled, and
    # as they fall due (at most a millisecond's worth at a time) with --throughput.
    values = perf_values(
        payload_of(args), args.record_size, max(1, args.batch_size // (args.record_size + 8))
    )
    acks = _Acks()
    async with connections(args) as conns:
        await check_reachable(conns, [args.topic])
        async with Producer(conns, config) as producer:
            with _progress() as progress:
                task = progress.add_task("produce", total=args.num_records)
                # The bar follows the acks a few times a second, not per record: a
                # callback into rich per record cost a seventh of the client's CPU.
                ticker = asyncio.create_task(_follow(progress, task, lambda: acks.acknowledged))
                started = time.monotonic()
                committed = 0
                txn_open = False
                try:
                    sent = 0
                    while sent < args.num_records:
                        count = min(len(values), args.num_records - sent)
                        if transactional:
                            in_txn = sent % args.transaction_records
                            count = min(count, args.transaction_records - in_txn)
                            if not txn_open:
                                producer.begin_transaction()
                                txn_open = True
                        if args.throughput > 0:
                            # Hand over a millisecond's worth at a time, not each record as
                            # it falls due: a call per record costs more than the record.
                            want = min(count, max(1, args.throughput // 1000))
                            due = _due(started, sent, args.throughput)
                            if due < want:
                                next_due = started + (sent + want - 1) / args.throughput
                                await asyncio.sleep(max(0.0, next_due - time.monotonic()))
                                continue
                            count = min(count, due)
                        sent_at = time.monotonic()
                        chunk = _window(values, sent, count)
                        if args.bulk:
                            futures = await producer.send_many(args.topic, chunk)
                            on_ack = functools.partial(acks.on_ack, sent_at)
                            for future in futures:
                                future.add_done_callback(on_ack)
                        else:
                            await _send_each(producer, args.topic, chunk, acks)
                        sent += count
                        if transactional and (
                            sent % args.transaction_records == 0 or sent == args.num_records
                        ):
                            await producer.commit_transaction()
                            committed += 1
                            txn_open = False
                    await producer.flush()
                    elapsed = time.monotonic() - started
                finally:
                    ticker.cancel()
                progress.update(task, completed=acks.acknowledged)
    if acks.first_error is not None:
        failed = args.num_records - acks.acknowledged
        raise ClientError(f"{failed} of {args.num_records} records failed: {acks.first_error}")
    value_bytes = args.num_records * args.record_size
    result = PerfResult(args.num_records, elapsed, value_bytes, acks.latencies, committed)
    print(result.report(args.json))
    return 0


async def _send_each(producer: Producer, topic: str, values: list[bytes], acks: _Acks) -> None:
    """One record per value, one ``send`` each, as an application produces; the latency of
    each is from its own ``send``."""
    send = producer.send
    on_record = acks.on_record
    monotonic = time.monotonic
    partial = functools.partial
    for value in values:
        sent_at = monotonic()
        future = await send(topic, value)
        future.add_done_callback(partial(on_record, sent_at))


def _window(values: list[bytes], start: int, count: int) -> list[bytes]:
    """``count`` (at most ``len(values)``) values from ``start`` on, cyclically: the run
    goes on through the pool where the last call stopped, so that small calls
    (``--throughput``) do not send its first values again and again."""
    start %= len(values)
    chunk = values[start : start + count]
    if len(chunk) < count:
        chunk += values[: count - len(chunk)]
    return chunk


PAYLOADS = ("random", "json")
"""``--payload``'s choices (the module docstring says what each holds)."""


def payload_of(args: argparse.Namespace) -> str:
    """``--payload``, or its default: ``json`` when the producer compresses, else ``random``."""
    if args.payload is not None:
        return str(args.payload)
    return "random" if args.compression_type == "none" else "json"


def perf_values(payload: str, size: int, count: int, seed: int = 0) -> list[bytes]:
    """The ``count`` values ``perf produce`` cycles through, ``size`` bytes each (see the
    module docstring): ``random`` is one random value ``count`` times, ``json`` as many
    different ones, drawn from ``seed`` so that runs compare."""
    if payload == "random":
        return [os.urandom(size)] * count
    if payload != "json":
        raise ValueError(f"unknown payload {payload!r}: one of {', '.join(PAYLOADS)}")
    rng = random.Random(seed)
    timestamp = 1_700_000_000_000
    values = []
    for n in range(count):
        timestamp += rng.randrange(5)
        text = (
            f'{{"id":{n},"ts":{timestamp},"user":"user-{rng.randrange(10_000)}",'
            f'"event":"{rng.choice(_EVENTS)}","path":"/{rng.choice(_SECTIONS)}/'
            f'{rng.randrange(5000)}","country":"{rng.choice(_COUNTRIES)}",'
            f'"amount":{rng.randrange(100, 50_000) / 100},"session":"{rng.getrandbits(64):016x}"'
        )
        room = size - len(text) - len(',"note":""}')
        if room > 0:  # a note of words fills the value to its size: exactly JSON
            note = rng.choice(_WORDS)[:room]
            while True:
                word = rng.choice(_WORDS)
                if len(note) + 1 + len(word) > room:
                    break
                note += " " + word
            text += ',"note":"' + note.ljust(room) + '"'
        values.append((text + "}").encode()[:size].ljust(size, b" "))  # smaller: cut
    return values


_EVENTS = ("page_view", "search", "add_to_cart", "remove_from_cart", "checkout", "purchase",
           "login", "logout", "click", "scroll")  # fmt: skip
_SECTIONS = ("products", "category", "cart", "account", "search", "help", "orders")
_COUNTRIES = ("DE", "US", "FR", "GB", "JP", "BR", "IN", "NL", "SE", "ES", "IT", "CA")
_WORDS = (
    "the", "of", "and", "to", "in", "is", "for", "on", "with", "as", "by", "at", "from",
    "that", "this", "be", "are", "was", "it", "or", "an", "not", "order", "customer",
    "payment", "shipping", "delivery", "item", "product", "price", "total", "discount",
    "coupon", "account", "user", "session", "request", "response", "error", "warning", "retry",
    "timeout", "latency", "cache", "server", "client", "service", "queue", "message", "event",
    "stream", "topic", "partition", "offset", "record", "batch", "replica", "leader",
    "follower", "commit", "write", "read", "fetch", "produce", "consume", "group", "member",
    "red", "green", "blue", "small", "medium", "large", "new", "used", "express", "standard",
    "returned", "cancelled", "pending", "confirmed", "shipped", "delivered", "refunded",
    "Monday", "Tuesday", "Friday", "morning", "evening",
)  # fmt: skip


def _due(started: float, sent: int, throughput: int) -> int:
    """How many more records are due at ``throughput`` records/s by now."""
    return int((time.monotonic() - started) * throughput) + 1 - sent


async def _follow(progress: Progress, task: TaskID, done: Callable[[], int]) -> None:
    while True:
        progress.update(task, completed=done())
        await asyncio.sleep(0.1)


async def perf_consume(args: argparse.Namespace) -> int:
    if args.num_records < 1:
        raise UsageError("--num-records must be >= 1")
    count = value_bytes = 0
    config = ConsumerConfig(auto_offset_reset="earliest", max_poll_records=5000)
    async with connections(args) as conns, Consumer(conns, config) as consumer:
        consumer.assign(await consumer.partitions_for(args.topic))
        with _progress() as progress:
            task = progress.add_task("consume", total=args.num_records)
            started = last = time.monotonic()
            while count < args.num_records:
                records = await consumer.poll(timeout_ms=500, max_records=args.num_records - count)
                now = time.monotonic()
                if not records:
                    if (now - last) * 1000 >= args.timeout_ms:
                        break
                    continue
                last = now
                count += len(records)
                value_bytes += sum(len(r.value or b"") for r in records)
                progress.advance(task, len(records))
            elapsed = last - started
    print(PerfResult(count, elapsed, value_bytes, []).report(args.json))
    if count < args.num_records:
        raise ClientError(f"only {count} of {args.num_records} records arrived within --timeout-ms")
    return 0
