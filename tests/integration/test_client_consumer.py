"""The consumer against real broker processes: starting positions (earliest, latest, an
offset, out of range), several partitions on several leaders, an unknown topic, and reading
on through a kill -9 of the partition's leader."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvloop
from kazoo.client import KazooClient

from client.consumer import Consumer, ConsumerConfig, ConsumerRecord
from client.metadata import BrokerConnections, ClientError
from proto.topic_partition import TopicPartition
from tests.cluster import Cluster, running_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

T = TypeVar("T")
TP = TopicPartition("orders", 0)
SESSION_TIMEOUT_S = 2.0  # tests/cluster.py's zookeeper.session.timeout.ms
FAILOVER_S = SESSION_TIMEOUT_S + 15


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a test coroutine on uvloop, as the CLI does (pytest-asyncio is not used)."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def connections_to(cluster: Cluster) -> BrokerConnections:
    address = cluster.brokers[min(cluster.brokers)].address
    return BrokerConnections.from_bootstrap(address, request_timeout_s=5)


def produce_until_acked(cluster: Cluster, tp: TopicPartition, values: list[bytes]) -> int:
    """Produce acks=all to the current leader, retrying through leadership changes; returns
    the base offset."""
    return cluster.produce_until_acked(tp, values)


async def poll_until(consumer: Consumer, count: int, timeout_s: float = 20) -> list[ConsumerRecord]:
    """Poll until exactly ``count`` records arrived (each poll asks for no more than that)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    out: list[ConsumerRecord] = []
    while len(out) < count:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise AssertionError(
                f"got {len(out)} of {count} records in {timeout_s}s: "
                f"{[(r.partition, r.offset, r.value) for r in out][-5:]}"
            )
        timeout_ms = int(min(remaining, 0.5) * 1000)
        out += await consumer.poll(timeout_ms=timeout_ms, max_records=count - len(out))
    return out


async def poll_forever(consumer: Consumer, timeout_s: float) -> None:
    """Poll until poll raises (the test expects it to) or ``timeout_s`` passes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        await consumer.poll(timeout_ms=200)


def values(records: list[ConsumerRecord]) -> list[bytes | None]:
    return [r.value for r in records]


def test_consumer_starts_at_earliest_latest_an_offset_and_resets_out_of_range(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        cluster.create_topic(TP.topic, {0: [1, 2, 3]})
        first = [f"m{i}".encode() for i in range(10)]
        produce_until_acked(cluster, TP, first[:6])
        produce_until_acked(cluster, TP, first[6:])  # two batches: offsets 0-5 and 6-9

        async def main() -> None:
            async with connections_to(cluster) as connections:
                earliest = Consumer(connections, ConsumerConfig(auto_offset_reset="earliest"))
                latest = Consumer(connections, ConsumerConfig(auto_offset_reset="latest"))
                at_offset = Consumer(connections)
                out_of_range = Consumer(connections, ConsumerConfig(auto_offset_reset="earliest"))
                async with earliest, latest, at_offset, out_of_range:
                    earliest.assign([TP])
                    got = await poll_until(earliest, 10)
                    assert [(r.offset, r.value) for r in got] == list(enumerate(first))
                    assert await earliest.position(TP) == 10

                    latest.assign([TP])
                    assert await latest.position(TP) == 10  # the high watermark
                    at_offset.assign([TP])
                    at_offset.seek(TP, 8)  # inside the second batch: 6 and 7 are skipped
                    out_of_range.assign([TP])
                    out_of_range.seek(TP, 1000)

                    await asyncio.to_thread(produce_until_acked, cluster, TP, [b"n0", b"n1"])
                    assert values(await poll_until(latest, 2)) == [b"n0", b"n1"]
                    assert values(await poll_until(at_offset, 4)) == [b"m8", b"m9", b"n0", b"n1"]
                    reset = await poll_until(out_of_range, 12)
                    assert [r.offset for r in reset] == list(range(12))
                    assert values(await earliest.poll(timeout_ms=50)) in ([], [b"n0", b"n1"])

        run(main())


def test_consumer_reads_partitions_of_several_leaders_and_caps_each_poll(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        cluster.create_topic("spread", {0: [1, 2], 1: [2, 3], 2: [3, 1]})
        tps = [TopicPartition("spread", p) for p in range(3)]
        for tp in tps:
            produce_until_acked(cluster, tp, [f"{tp.partition}-{i}".encode() for i in range(20)])

        async def main() -> None:
            async with (
                connections_to(cluster) as connections,
                Consumer(
                    connections, ConsumerConfig(auto_offset_reset="earliest", max_poll_records=7)
                ) as consumer,
            ):
                assert await consumer.partitions_for("spread") == tps
                consumer.assign(tps)
                got: list[ConsumerRecord] = []
                deadline = asyncio.get_running_loop().time() + 30
                while len(got) < 60:
                    # An empty poll is no failure (the first needs metadata and offsets from
                    # three leaders); only the deadline is.
                    assert asyncio.get_running_loop().time() < deadline, f"{len(got)} of 60"
                    batch = await consumer.poll(timeout_ms=2000)
                    assert len(batch) <= 7
                    got += batch
                small = await consumer.poll(timeout_ms=100, max_records=1)
                assert small == []
                by_partition = {
                    tp.partition: [r.value for r in got if r.partition == tp.partition]
                    for tp in tps
                }
                assert by_partition == {
                    p: [f"{p}-{i}".encode() for i in range(20)] for p in range(3)
                }
                assert [await consumer.position(tp) for tp in tps] == [20, 20, 20]

        run(main())


def test_unknown_topic_is_an_error_after_a_bounded_wait(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path, broker_ids=(1,)) as cluster:

        async def main() -> None:
            # A consumer that lets the brokers create topics would create it (the
            # default, as Kafka's): this one asks them not to.
            config = ConsumerConfig(default_api_timeout_ms=1000, allow_auto_create_topics=False)
            async with (
                connections_to(cluster) as connections,
                Consumer(connections, config) as consumer,
            ):
                with pytest.raises(ClientError, match="unknown topic 'ghost'"):
                    await consumer.partitions_for("ghost")
                consumer.assign([TopicPartition("ghost", 0)])
                loop = asyncio.get_running_loop()
                started = loop.time()
                with pytest.raises(ClientError, match="unknown topic 'ghost'"):
                    await poll_forever(consumer, 10)
                assert loop.time() - started >= 0.9

        run(main())


def test_consumer_keeps_reading_after_kill_9_of_the_leader(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        cluster.create_topic(TP.topic, {0: [1, 2, 3]})
        before = [f"before-{i}".encode() for i in range(20)]
        after = [f"after-{i}".encode() for i in range(20)]
        produce_until_acked(cluster, TP, before)
        old_leader = cluster.wait_for_leader(TP)

        async def main() -> None:
            config = ConsumerConfig(auto_offset_reset="earliest", fetch_max_wait_ms=200)
            async with (
                connections_to(cluster) as connections,
                Consumer(connections, config) as consumer,
            ):
                consumer.assign([TP])
                assert values(await poll_until(consumer, 20)) == before
                # A fetch is now long-polling on the leader that dies.
                await consumer.poll(timeout_ms=50)
                cluster.brokers[old_leader].kill()
                survivors = [b for b in cluster.brokers if b != old_leader]
                await asyncio.to_thread(cluster.wait_for_leader, TP, survivors, FAILOVER_S)
                await asyncio.to_thread(produce_until_acked, cluster, TP, after)
                got = await poll_until(consumer, 20, timeout_s=FAILOVER_S)
                assert values(got) == after
                assert [r.offset for r in got] == list(range(20, 40))
                assert await consumer.poll(timeout_ms=300) == []

        run(main())
