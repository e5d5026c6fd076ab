"""The producer's ``compression.type`` against real broker processes: records sent with each
codec, through ``send`` (keyed, with headers) and ``send_many``, read back by the gRPC
consumer; every replica's segment holds batches that carry the codec (``dump-log --json``);
an idempotent producer whose compressed batches are retried through a kill -9 of their
leader writes each record exactly once; ``perf produce --compression-type`` end to end."""

from __future__ import annotations

import asyncio
import functools
import io
import json
import logging
from collections import Counter
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvloop
from kazoo.client import KazooClient

from client.cli.dump_log import dump
from client.consumer import Consumer, ConsumerConfig, ConsumerRecord
from client.metadata import BrokerConnections
from client.producer import Producer, ProducerConfig, RecordMetadata
from proto.topic_partition import TopicPartition
from tests.cluster import Cluster, running_cluster
from tests.helpers import minibroker, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

T = TypeVar("T")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
RECORDS = 400


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a test coroutine on uvloop, as the CLI does."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def bootstrap(cluster: Cluster) -> str:
    return ",".join(b.address for b in cluster.brokers.values())


def value_of(codec: str, i: int) -> bytes:
    return json.dumps(
        {"codec": codec, "n": i, "user": f"user-{i % 23}", "event": "checkout", "total": i * 7}
    ).encode()


async def poll_until(consumer: Consumer, count: int, timeout_s: float = 30) -> list[ConsumerRecord]:
    """Poll until ``count`` records arrived, with a deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    out: list[ConsumerRecord] = []
    while len(out) < count:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise AssertionError(f"got {len(out)} of {count} records within {timeout_s} s")
        out += await consumer.poll(
            timeout_ms=int(min(remaining, 0.5) * 1000), max_records=count - len(out)
        )
    return out


def stored_batches(cluster: Cluster, broker_id: int, tp: TopicPartition) -> list[dict[str, Any]]:
    """The batches of a replica's segment files, as ``minibroker dump-log --json`` prints
    them (in this process); not a torn tail's line (a follower caught mid-write)."""
    out = io.StringIO()
    dump(cluster.partition_dir(broker_id, tp), out=out, as_json=True, print_data=False)
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]
    return [b for b in lines if "count" in b]


def replicated(cluster: Cluster, broker_id: int, tp: TopicPartition) -> list[dict[str, Any]] | None:
    """The replica's stored batches once they hold all ``RECORDS`` records, else None."""
    batches = stored_batches(cluster, broker_id, tp)
    return batches if sum(b["count"] for b in batches) == RECORDS else None


def test_each_codec_is_written_read_back_and_stored_compressed_on_every_replica(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        for codec in CODECS:
            cluster.create_topic(codec, {0: [1, 2, 3], 1: [2, 3, 1]})
        for codec in CODECS:
            for p in (0, 1):
                cluster.wait_for_leader(TopicPartition(codec, p))
        sent: dict[str, tuple[list[RecordMetadata], int]] = {}

        async def produce() -> None:
            async with BrokerConnections.from_bootstrap(bootstrap(cluster)) as connections:
                for codec in CODECS:
                    config = ProducerConfig(compression_type=codec, linger_ms=20)
                    async with Producer(connections, config) as producer:
                        handles = [
                            await producer.send(
                                codec,
                                value_of(codec, i),
                                key=b"k-%d" % (i % 7),
                                partition=0,
                                headers=[("trace", b"%08d" % i)],
                            )
                            for i in range(RECORDS)
                        ]
                        ranges = await producer.send_many(
                            codec, [value_of(codec, RECORDS + i) for i in range(RECORDS)],
                            partition=1,
                        )  # fmt: skip
                        metadata = list(await asyncio.gather(*handles))
                        counted = sum(r.count for r in await asyncio.gather(*ranges))
                    sent[codec] = (metadata, counted)

        async def consume(codec: str) -> list[ConsumerRecord]:
            config = ConsumerConfig(auto_offset_reset="earliest")
            async with (
                BrokerConnections.from_bootstrap(bootstrap(cluster)) as connections,
                Consumer(connections, config) as consumer,
            ):
                consumer.assign([TopicPartition(codec, 0), TopicPartition(codec, 1)])
                return await poll_until(consumer, 2 * RECORDS)

        run(produce())
        for codec in CODECS:
            metadata, counted = sent[codec]
            assert [m.offset for m in metadata] == list(range(RECORDS))
            assert counted == RECORDS
            records = run(consume(codec))
            by_partition = {
                p: sorted((r for r in records if r.partition == p), key=lambda r: r.offset)
                for p in (0, 1)
            }
            assert [(r.offset, r.key, r.value, r.headers) for r in by_partition[0]] == [
                (i, b"k-%d" % (i % 7), value_of(codec, i), (("trace", b"%08d" % i),))
                for i in range(RECORDS)
            ]
            assert [(r.offset, r.key, r.value) for r in by_partition[1]] == [
                (i, None, value_of(codec, RECORDS + i)) for i in range(RECORDS)
            ]
            for p in (0, 1):
                tp = TopicPartition(codec, p)
                for broker_id in (1, 2, 3):  # the leader and both followers' copies
                    batches = wait_for(
                        functools.partial(replicated, cluster, broker_id, tp),
                        30,
                        message=f"{tp}'s {RECORDS} records in broker {broker_id}'s segments",
                    )
                    assert batches is not None
                    assert {b["compression"] for b in batches} == {codec}, (tp, broker_id)
                    assert all(b["crc_valid"] for b in batches)
                    assert all(b["producer_id"] >= 0 for b in batches)  # idempotent


def test_compressed_idempotent_batches_ride_through_kill_9_of_their_leader_exactly_once(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="client.sender")
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        assignment = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
        cluster.create_topic("zfail", assignment, {"min.insync.replicas": "2"})
        victim = cluster.wait_for_leader(TopicPartition("zfail", 0))
        acked: list[tuple[bytes, RecordMetadata]] = []
        failed: list[BaseException] = []

        async def scenario() -> None:
            config = ProducerConfig(
                compression_type="zstd", request_timeout_ms=5000, delivery_timeout_ms=60_000
            )
            async with (
                BrokerConnections.from_bootstrap(bootstrap(cluster)) as connections,
                Producer(connections, config) as producer,
            ):
                for chunk in range(30):
                    values = [value_of("zstd", chunk * 100 + i) for i in range(100)]
                    futures = [
                        await producer.send("zfail", v, partition=i % 3)
                        for i, v in enumerate(values)
                    ]
                    outcomes = await asyncio.gather(*futures, return_exceptions=True)
                    for value, outcome in zip(values, outcomes, strict=True):
                        if isinstance(outcome, BaseException):
                            failed.append(outcome)
                        else:
                            acked.append((value, outcome))
                    if chunk == 10:
                        await asyncio.to_thread(cluster.brokers[victim].kill)

        run(scenario())
        assert failed == []
        retries = [r for r in caplog.records if r.getMessage().startswith("retrying")]
        assert retries, "the kill went unnoticed: no batch was retried"
        assert len(acked) == 3000
        logs = {}
        for p in range(3):
            tp = TopicPartition("zfail", p)
            logs[p] = dict(cluster.consume_all(cluster.wait_for_leader(tp), tp))
        for value, meta in acked:
            assert logs[meta.partition].get(meta.offset) == value
        counts = Counter(v for log in logs.values() for v in log.values())
        assert [v for v, n in counts.items() if n > 1] == []
        assert sum(counts.values()) == 3000
        for p in range(3):
            tp = TopicPartition("zfail", p)
            leader = cluster.wait_for_leader(tp)
            assert {b["compression"] for b in stored_batches(cluster, leader, tp)} == {"zstd"}


def test_perf_produce_with_a_compression_type_stores_compressed_json_records(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        cluster.create_topic("perf-lz4", {0: [1, 2, 3]})
        tp = TopicPartition("perf-lz4", 0)
        leader = cluster.wait_for_leader(tp)
        done = minibroker(
            "perf", "produce", "perf-lz4", "--num-records", "5000", "--record-size", "200",
            "--compression-type", "lz4", "--bulk", "--json",
            "--bootstrap-server", bootstrap(cluster), timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.strip().splitlines()[-1])["records"] == 5000
        batches = stored_batches(cluster, leader, tp)
        assert sum(b["count"] for b in batches) == 5000
        assert {b["compression"] for b in batches} == {"lz4"}
        stored = sum(b["size"] for b in batches)
        assert stored < 5000 * 200 / 2  # JSON-like values compress: not random, not one
        values = [v for _, v in cluster.consume_all(leader, tp)]
        assert len(values) == 5000
        assert len(set(values)) > 1000
        assert all(v is not None and len(v) == 200 and v.startswith(b'{"id":') for v in values)
