"""Latency at a low rate, in parts: what an acks=all acknowledgement and an end-to-end
delivery cost on this machine, hop by hop.

One 3-broker cluster (``cluster up``, ``min.insync.replicas`` 2), two topics of one
partition (RF 3, and RF 1 for the path without followers), and:

- ``perf produce --throughput 1000`` (the user's command) with acks=all on RF 3, acks=1 on
  RF 3 and acks=all on RF 1: the acknowledgement's latency with and without the followers'
  round trip (acks=all waits for a follower to fetch the batch and then to fetch again,
  reporting its new offset, before the high watermark covers it);
- a gRPC unary echo of a 100-byte message, one in flight (bench/echo_server.py, its own
  process): the floor of one request and answer between two Python processes here;
- end to end: records sent at 1,000/s with acks=all carry their send time; a consumer on
  the same loop polling the partition notes when each arrives (produce, replicate, the
  high watermark moving, the consumer's waiting fetch answered).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import uvloop

from bench.echo_server import CHANNEL_OPTIONS, SERVICE
from bench.side_by_side import _cli, _settle_page_cache, echo_server, start_perf_cluster
from client.consumer import Consumer, ConsumerConfig
from client.metadata import BrokerConnections, parse_bootstrap
from client.producer import Producer, ProducerConfig
from proto.topic_partition import TopicPartition

RATE = 1000
"""Records per second, the issue's low rate."""
SECONDS = 10
RECORD_BYTES = 100
TOPICS = {"lat-rf3": 3, "lat-rf1": 1}


@dataclass
class Latencies:
    """p50/p99/max in ms of one measurement, and what it was."""

    what: str
    p50: float
    p99: float
    max: float
    count: int


@dataclass
class LatencyResult:
    rows: list[Latencies] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)


def _summary(what: str, samples_ms: list[float]) -> Latencies:
    ordered = sorted(samples_ms)

    def at(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]

    return Latencies(what, at(50), at(99), ordered[-1], len(ordered))


def _perf_latency(data_dir: Path, what: str, topic: str, acks: str) -> Latencies:
    _settle_page_cache()
    out = _cli(
        data_dir, "perf", "produce", topic, "--num-records", str(RATE * SECONDS),
        "--record-size", str(RECORD_BYTES), "--throughput", str(RATE), "--acks", acks, "--json",
    )  # fmt: skip
    figures = json.loads(out.strip().splitlines()[-1])
    ms = figures["latency_ms"]
    return Latencies(what, ms["p50"], ms["p99"], ms["max"], RATE * SECONDS)


async def _echo_latency(port: int) -> list[float]:
    payload = os.urandom(RECORD_BYTES)
    samples: list[float] = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS) as ch:
        await ch.channel_ready()
        unary = ch.unary_unary(f"/{SERVICE}/Unary", None, None)
        for _ in range(200):  # warm-up
            await unary(payload)
        started = time.perf_counter()
        while len(samples) < RATE * SECONDS:
            t0 = time.perf_counter()
            await unary(payload)
            samples.append((time.perf_counter() - t0) * 1000)
            # the same pacing as the produce measurements: one request per millisecond
            due = started + len(samples) / RATE
            if (wait := due - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
    return samples


def grpc_echo_latency() -> list[float]:
    with echo_server() as port:
        return uvloop.run(_echo_latency(port))


async def _end_to_end(bootstrap: str, topic: str) -> list[float]:
    """Send-to-poll latency of records paced at :data:`RATE`, each carrying its send time
    (``perf_counter`` of this process, in the value's first 8 bytes)."""
    tp = TopicPartition(topic, 0)
    samples: list[float] = []
    total = RATE * SECONDS
    async with BrokerConnections(parse_bootstrap(bootstrap)) as connections:
        producer = Producer(connections, ProducerConfig(acks=-1))
        consumer = Consumer(connections, ConsumerConfig(fetch_max_wait_ms=500))
        async with producer, consumer:
            consumer.assign([tp])
            consumer.seek_to_end([tp])
            await consumer.position(tp)

            async def consume() -> None:
                while len(samples) < total:
                    for record in await consumer.poll(timeout_ms=1000):
                        now = time.perf_counter()
                        assert record.value is not None
                        sent = int.from_bytes(record.value[:8], "big") / 1e9
                        samples.append((now - sent) * 1000)

            reading = asyncio.create_task(consume())
            padding = b"x" * (RECORD_BYTES - 8)
            started = time.perf_counter()
            pending = []
            for i in range(total):
                due = started + i / RATE
                if (wait := due - time.perf_counter()) > 0:
                    await asyncio.sleep(wait)
                stamp = time.perf_counter_ns().to_bytes(8, "big")
                pending.append(await producer.send(topic, stamp + padding, partition=0))
            await asyncio.gather(*pending)
            async with asyncio.timeout(60):
                await reading
    return samples


def measure(work_dir: Path) -> LatencyResult:
    result = LatencyResult()
    cluster = start_perf_cluster(work_dir)
    data_dir = work_dir / "cluster"
    try:
        for topic, rf in TOPICS.items():
            _cli(
                data_dir, "topics", "create", topic, "--partitions", "1",
                "--replication-factor", str(rf), "--config", f"min.insync.replicas={min(rf, 2)}",
            )  # fmt: skip
        rows = result.rows
        rows.append(_perf_latency(data_dir, "perf produce acks=all, RF 3", "lat-rf3", "all"))
        rows.append(_perf_latency(data_dir, "perf produce acks=1, RF 3", "lat-rf3", "1"))
        rows.append(_perf_latency(data_dir, "perf produce acks=all, RF 1", "lat-rf1", "all"))
        e2e = uvloop.run(_end_to_end(cluster.bootstrap_servers, "lat-rf3"))
        rows.append(_summary("end to end (send to poll), acks=all, RF 3", e2e))
    finally:
        cluster.down()
    rows.append(_summary("gRPC unary echo, 100 B, one in flight", grpc_echo_latency()))
    result.commands = [
        "minibroker cluster up --override min.insync.replicas=2",
        "minibroker topics create lat-rf3|lat-rf1 --partitions 1 --replication-factor 3|1 "
        "--config min.insync.replicas=2|1",
        f"minibroker perf produce lat-rf3|lat-rf1 --num-records {RATE * SECONDS} "
        f"--record-size {RECORD_BYTES} --throughput {RATE} --acks all|1",
        "end to end: bench/latency.py, client.Producer (acks=all) and client.Consumer "
        f"(assign) on one loop, {RATE} records/s for {SECONDS} s",
        "gRPC: bench/echo_server.py, one 100-byte unary call at a time, paced at 1,000/s",
    ]
    return result
