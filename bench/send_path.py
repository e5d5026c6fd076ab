"""The producer's per-record path against its bulk path, on one real local cluster.

A local ``cluster up`` (3 brokers, ZooKeeper, ``min.insync.replicas`` 2), one topic of 3
partitions with RF 3, and in this process one :class:`Producer` on its defaults (acks=all,
idempotent) per round. The variants alternate round by round on the same cluster, so that
the load of a shared machine weighs on each alike and their ratio means something where a
single figure does not:

- ``send``: ``await producer.send(topic, value, key=key)`` once per record, as an
  application writes it; the futures are kept and checked after the flush;
- ``send+headers``: the same with one header per record;
- ``send_many``: ``producer.send_many`` of a batch's worth of keyless values at a time (what
  ``perf produce --bulk`` does).

Every variant sends ``records`` records of ``RECORD_BYTES`` random bytes; keys are
``key-<n>`` over ``KEYS`` distinct values (keyed records spread over the 3 partitions by
murmur2, as Kafka's partitioner does). A round's rate is records over the time from the
first call to the end of the flush.

Run: ``python -m bench.send_path [--records N] [--rounds R] [--variants send,send_many]``.

``--cpu`` measures the client alone instead: the same variants against a sender that takes
nothing (it drains the full batches, encodes them and completes them at once, in this
process: no network, no broker), the producer's CPU per record by ``time.process_time``
from the first call to the end of the flush. Each round is a fresh process (tuned as the
cluster rounds are: ``tune_process``), so that a round does not inherit the garbage
collector's state of the one before.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import uvloop

from bench.cli_runner import run_minibroker
from client.metadata import BrokerConnections
from client.producer import FutureRecordMetadata, Producer, ProducerConfig
from client.record_accumulator import RecordAccumulator
from deploy.local_cluster import LocalCluster
from deploy.ports import free_port_block
from proto.process.tuning import tune_process
from proto.topic_partition import TopicPartition

TOPIC = "send-path"
RECORD_BYTES = 100
KEYS = 10_000
WORK_DIR = Path(__file__).resolve().parent / "out" / "send_path"


def _keys() -> list[bytes]:
    return [b"key-%d" % i for i in range(KEYS)]


async def _send(producer: Producer, records: int, headers: bool) -> None:
    value = os.urandom(RECORD_BYTES)
    keys = _keys()
    header = [("trace", b"0123456789abcdef")] if headers else []
    futures: list[FutureRecordMetadata] = []
    append = futures.append
    send = producer.send
    for i in range(records):
        append(await send(TOPIC, value, key=keys[i % KEYS], headers=header))
    await producer.flush()
    _check(futures)


async def _send_many(producer: Producer, records: int) -> None:
    values = [os.urandom(RECORD_BYTES)] * 150
    futures = []
    sent = 0
    while sent < records:
        count = min(len(values), records - sent)
        futures += await producer.send_many(TOPIC, values[:count])
        sent += count
    await producer.flush()
    if sum(f.result().count for f in futures) != records:
        raise RuntimeError("send_many: not every record was acknowledged")


def _check(futures: list[FutureRecordMetadata]) -> None:
    failed = [f for f in futures if f.exception() is not None]
    if failed:
        raise RuntimeError(f"{len(failed)} records failed: {failed[0].exception()}")


VARIANTS: dict[str, Callable[[Producer, int], Awaitable[None]]] = {
    "send": lambda p, n: _send(p, n, headers=False),
    "send+headers": lambda p, n: _send(p, n, headers=True),
    "send_many": _send_many,
}


async def _round(bootstrap: str, variant: str, records: int) -> float:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    async with (
        BrokerConnections([(host, int(port))]) as connections,
        Producer(connections, ProducerConfig()) as producer,
    ):
        await producer.send(TOPIC, b"warm-up", key=b"warm-up")  # metadata, producer id
        await producer.flush()
        started = time.perf_counter()
        await VARIANTS[variant](producer, records)
        return records / (time.perf_counter() - started)


# -- the client alone -------------------------------------------------------------------------

_PARTITIONS = 3


class _KnownTopic:
    """The producer's metadata, reduced to what ``send`` asks: one topic of 3 partitions."""

    refreshes_done = 0
    on_update = None
    last_error = None

    def partitions(self, topic: str) -> int | None:
        return _PARTITIONS if topic == TOPIC else None

    def available(self, topic: str) -> list[int]:
        return list(range(_PARTITIONS))

    async def close(self) -> None:
        pass


async def _take_nothing(producer: Producer, accumulator: RecordAccumulator) -> None:
    """A sender without a network: full batches (every partition counts as busy, as under
    load) are encoded and completed at once; a flush takes the rest."""
    busy = {TopicPartition(TOPIC, p) for p in range(_PARTITIONS)}
    offsets = [0] * _PARTITIONS
    while True:
        accumulator.wakeup.clear()
        while True:
            ready, _ = accumulator.ready(0.0, (), busy)
            if not ready:
                break
            for batch in ready:
                accumulator.drain(batch)
                batch.encode(-1, -1, -1)
                batch.complete(offsets[batch.tp.partition])
                offsets[batch.tp.partition] += batch.record_count
                producer._done(batch)
        await accumulator.wakeup.wait()


async def _cpu_round(variant: str, records: int) -> float:
    """The client's CPU per record, in microseconds, for ``variant`` without a network."""
    config = ProducerConfig(acks=1)
    producer = Producer(None, config)  # type: ignore[arg-type]  # never connects
    accumulator = RecordAccumulator(
        config.batch_size,
        config.linger_ms,
        config.delivery_timeout_ms,
        producer.partitioner.on_batch_closed,
    )
    producer._metadata = _KnownTopic()  # type: ignore[assignment]
    producer._accumulator = accumulator
    producer._accumulator_append = accumulator.append_tail
    sender = asyncio.create_task(_take_nothing(producer, accumulator))
    producer._sender_task = sender
    started = time.process_time()
    await VARIANTS[variant](producer, records)
    used = time.process_time() - started
    sender.cancel()
    return used / records * 1e6


def _cpu(variants: list[str], records: int, rounds: int) -> None:
    for r in range(rounds):
        for variant in variants:
            out = subprocess.run(
                [sys.executable, "-m", "bench.send_path", "--cpu-round", variant,
                 "--records", str(records)],
                check=True, capture_output=True, text=True,
            ).stdout.strip()  # fmt: skip
            load = os.getloadavg()[0]
            print(f"round {r + 1} {variant}: {float(out):.2f} us of client CPU per record "
                  f"(load {load:.1f})")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.send_path", description=__doc__)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default="send,send_many")
    parser.add_argument("--bootstrap", help="an already running cluster (else one is started)")
    parser.add_argument("--cpu", action="store_true", help="the client alone, without network")
    parser.add_argument("--cpu-round", metavar="VARIANT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cpu_round:
        tune_process()  # as the rounds on a cluster (and the CLI) run
        print(uvloop.run(_cpu_round(args.cpu_round, args.records)))
        return 0
    variants = args.variants.split(",")
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; known: {sorted(VARIANTS)}")
    if args.cpu:
        _cpu(variants, args.records, args.rounds)
        return 0
    tune_process()
    cluster = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        shutil.rmtree(WORK_DIR, ignore_errors=True)
        WORK_DIR.mkdir(parents=True)
        base = free_port_block(7)
        cluster = LocalCluster(WORK_DIR)
        cluster.up(
            3,
            base_port=base,
            zookeeper_port=base + 3,
            kafka_base_port=base + 4,
            overrides={"min.insync.replicas": "2"},
        )
        bootstrap = cluster.bootstrap_servers
        run_minibroker(
            "topics", "create", TOPIC, "--partitions", "3", "--replication-factor", "3",
            data_dir=WORK_DIR,
        )  # fmt: skip
    rates: dict[str, list[float]] = {v: [] for v in variants}
    try:
        for r in range(args.rounds):
            for variant in variants:
                rate = uvloop.run(_round(bootstrap, variant, args.records))
                rates[variant].append(rate)
                load = os.getloadavg()[0]
                print(f"round {r + 1} {variant}: {rate:,.0f} records/s (load {load:.1f})")
    finally:
        if cluster is not None:
            cluster.down()
    first = variants[0]
    for variant in variants:
        median = statistics.median(rates[variant])
        ratios = [a / b for a, b in zip(rates[variant], rates[first], strict=True)]
        print(
            f"{variant}: median {median:,.0f} records/s; per round / {first}: "
            + ", ".join(f"{x:.2f}" for x in ratios)
        )
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
