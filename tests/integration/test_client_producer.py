"""The Producer against real broker processes: keyed records on murmur2's partition in key
order, riding through kill -9 of a partition leader without losing an acknowledged record,
and a lost acknowledgement retried without a duplicate (idempotence) or with one (without).
Records are read back with plain Fetch RPCs (tests/cluster.py), not with the consumer."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, cast

import grpc
import grpc.aio
import pytest
from kazoo.client import KazooClient

from client.metadata import BrokerConnections, ClientError
from client.partitioner import partition_for_key
from client.producer import FutureRecordMetadata, Producer, ProducerConfig, RecordMetadata
from proto.topic_partition import TopicPartition
from tests.cluster import Cluster, running_cluster
from tests.helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PRODUCE_METHOD = "/minibroker.Broker/Produce"
PRODUCE_SESSION_METHOD = "/minibroker.Broker/ProduceSession"


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


def bootstrap(cluster: Cluster) -> str:
    return ",".join(b.address for b in cluster.brokers.values())


def consumed(cluster: Cluster, tp: TopicPartition) -> list[tuple[int, bytes | None]]:
    """Every (offset, value) of ``tp`` below the HW, read from its current leader."""
    leader = cluster.wait_for_leader(tp)
    return cluster.consume_all(leader, tp)


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_keyed_records_land_on_murmur2_partitions_in_key_order(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path, idempotent: bool
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        cluster.create_topic("keyed", {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2], 3: [1, 2, 3]})
        keys = [f"user-{i % 37}".encode() for i in range(1000)]
        results: list[RecordMetadata] = []

        async def scenario() -> None:
            config = ProducerConfig(acks=-1, enable_idempotence=idempotent)
            async with (
                BrokerConnections.from_bootstrap(bootstrap(cluster)) as connections,
                Producer(connections, config) as producer,
            ):
                futures = [
                    await producer.send("keyed", b"%d" % i, key=key) for i, key in enumerate(keys)
                ]
                results.extend(await asyncio.gather(*futures))
                assert producer.requests_sent < 500  # batching happened

        run(scenario)

        by_offset = {}
        for p in range(4):
            tp = TopicPartition("keyed", p)
            for offset, value in consumed(cluster, tp):
                by_offset[(p, offset)] = value
        assert len(by_offset) == 1000  # every record once
        seen_per_key: dict[bytes, list[int]] = {}
        for i, (key, meta) in enumerate(zip(keys, results, strict=True)):
            assert meta.topic == "keyed"
            assert meta.partition == partition_for_key(key, 4)
            assert by_offset[(meta.partition, meta.offset)] == b"%d" % i
            seen_per_key.setdefault(key, []).append(meta.offset)
        for offsets in seen_per_key.values():
            assert offsets == sorted(offsets)  # per-key order = send order


def test_producer_rides_through_kill_9_of_a_partition_leader(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="client.sender")
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        assignment = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
        cluster.create_topic("failover", assignment, {"min.insync.replicas": "2"})
        victim = cluster.wait_for_leader(TopicPartition("failover", 0))
        acked: list[tuple[bytes, RecordMetadata]] = []
        failed: list[BaseException] = []

        async def scenario() -> None:
            config = ProducerConfig(request_timeout_ms=5000, delivery_timeout_ms=60_000)
            async with (
                BrokerConnections.from_bootstrap(bootstrap(cluster)) as connections,
                Producer(connections, config) as producer,
            ):
                for chunk in range(30):
                    values = [b"v-%d-%d" % (chunk, i) for i in range(100)]
                    futures = [
                        await producer.send("failover", v, partition=i % 3)
                        for i, v in enumerate(values)
                    ]
                    # Awaiting each chunk paces the sends across the failover.
                    outcomes = await asyncio.gather(*futures, return_exceptions=True)
                    for value, outcome in zip(values, outcomes, strict=True):
                        if isinstance(outcome, BaseException):
                            failed.append(outcome)
                        else:
                            acked.append((value, outcome))
                    if chunk == 10:
                        await asyncio.to_thread(cluster.brokers[victim].kill)

        run(scenario)

        assert failed == []  # delivery_timeout_ms is far longer than the failover
        retries = [r for r in caplog.records if r.getMessage().startswith("retrying")]
        assert retries, "the kill went unnoticed: no batch was retried"
        assert len(acked) == 3000
        new_leader = cluster.wait_for_leader(TopicPartition("failover", 0))
        assert new_leader != victim
        logs = {p: dict(consumed(cluster, TopicPartition("failover", p))) for p in range(3)}
        for value, meta in acked:
            assert logs[meta.partition].get(meta.offset) == value, (
                f"acknowledged {value!r} at {meta.partition}/{meta.offset} is not in the log"
            )
        # Idempotence (the default): retries across the failover wrote nothing twice.
        counts = Counter(v for log in logs.values() for v in log.values())
        assert [v for v, n in counts.items() if n > 1] == []
        assert sum(counts.values()) == 3000


def _lost() -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(),
        details="test: acknowledgement lost",
        debug_error_string="test",
    )


class LostAckStream:
    """A ProduceSession call whose next ``drops[0]`` answers are read from the broker and
    then lost: the stream reports UNAVAILABLE instead, as a connection that broke after the
    broker wrote the answer."""

    def __init__(self, call: Any, drops: list[int]) -> None:
        self._call = call
        self._drops = drops
        self._broken = False

    async def read(self) -> Any:
        if self._broken:
            raise _lost()
        response = await self._call.read()
        if self._drops[0] > 0 and response is not grpc.aio.EOF:  # type: ignore[attr-defined]
            self._drops[0] -= 1
            self._broken = True
            self._call.cancel()
            raise _lost()
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._call, name)


class LostAckChannel:
    """A channel that delivers the next ``drop`` Produce requests to the broker and then
    reports UNAVAILABLE as if the connection broke before the answer came back (on the
    produce session's stream and on unary Produce calls alike)."""

    def __init__(self, channel: grpc.aio.Channel, drops: list[int]) -> None:
        self._channel = channel
        self._drops = drops

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        real = self._channel.unary_unary(method, *args, **kwargs)
        if method != PRODUCE_METHOD:
            return real
        drops = self._drops

        async def call(request: Any, **call_kwargs: Any) -> Any:
            response = await real(request, **call_kwargs)
            if drops and drops[0] > 0:
                drops[0] -= 1
                raise _lost()
            return response

        return call

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        real = self._channel.stream_stream(method, *args, **kwargs)
        if method != PRODUCE_SESSION_METHOD:
            return real
        return lambda *a, **kw: LostAckStream(real(*a, **kw), self._drops)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._channel, name)


class LossyConnections(BrokerConnections):
    def __init__(self, servers: str, drops: int) -> None:
        parsed = BrokerConnections.from_bootstrap(servers)
        super().__init__(parsed.bootstrap)
        self.drops = [drops]

    def channel(self, address: str) -> grpc.aio.Channel:
        return cast(grpc.aio.Channel, LostAckChannel(super().channel(address), self.drops))


def test_a_clean_bounce_of_the_leader_costs_the_producer_one_not_leader_per_batch(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGTERM of the leader (controlled shutdown), then its start, under a steady acks=all
    producer: every batch the leaving leader got is answered NOT_LEADER_OR_FOLLOWER and
    retried on the new leader; none is left without an answer until the leaving broker's
    sessions end (which stalled every producer of its partitions for the gRPC server's 5 s
    shutdown grace, the stalls of the chaos runs' bounces)."""
    caplog.set_level(logging.DEBUG, logger="client.sender")
    tp = TopicPartition("bounced", 0)
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        cluster.create_topic(tp.topic, {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
        cluster.wait_for_isr(tp, {1, 2, 3}, timeout=30)
        leader = cluster.wait_for_leader(tp)
        outcomes: list[RecordMetadata | BaseException] = []

        async def scenario() -> None:
            config = ProducerConfig(request_timeout_ms=30_000, delivery_timeout_ms=120_000)
            async with (
                BrokerConnections.from_bootstrap(bootstrap(cluster)) as connections,
                Producer(connections, config) as producer,
            ):
                futures: list[FutureRecordMetadata] = []
                stop = asyncio.Event()

                async def steady() -> None:
                    while not stop.is_set():
                        futures.append(await producer.send(tp.topic, b"%d" % len(futures)))
                        await asyncio.sleep(0.005)

                futures.append(await producer.send(tp.topic, b"0"))
                await futures[0]
                sending = asyncio.create_task(steady())
                await asyncio.to_thread(cluster.brokers[leader].stop)
                await asyncio.to_thread(cluster.brokers[leader].start, zk_client)
                await asyncio.to_thread(cluster.wait_for_isr, tp, {1, 2, 3}, 30)
                stop.set()
                await sending
                outcomes.extend(await asyncio.gather(*futures, return_exceptions=True))

        run(scenario)

        assert [o for o in outcomes if isinstance(o, BaseException)] == []
        assert cluster.wait_for_leader(tp) != leader
        retries = [r.getMessage() for r in caplog.records if r.getMessage().startswith("retrying")]
        assert retries, "the leadership moved without the producer noticing"
        assert [m for m in retries if "NOT_LEADER_OR_FOLLOWER" not in m] == []
        written = sorted(int(v or b"") for _, v in consumed(cluster, tp))
        assert written == list(range(len(outcomes)))  # each record once


@pytest.mark.parametrize(("idempotent", "copies"), [(True, 1), (False, 2)])
def test_a_lost_acknowledgement_is_retried_and_idempotence_drops_the_duplicate(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path, idempotent: bool, copies: int
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path, (1, 2)) as cluster:
        tp = TopicPartition("lost-ack", 0)
        cluster.create_topic(tp.topic, {0: [1, 2]})
        metas: list[RecordMetadata] = []

        async def scenario() -> None:
            config = ProducerConfig(enable_idempotence=idempotent, retry_backoff_ms=20)
            connections = LossyConnections(bootstrap(cluster), drops=0)
            async with connections, Producer(connections, config) as producer:
                metas.append(await (await producer.send(tp.topic, b"first")))
                connections.drops[0] = 1  # the next request is written, its answer lost
                metas.append(await (await producer.send(tp.topic, b"second")))
                metas.append(await (await producer.send(tp.topic, b"third")))

        run(scenario)

        log = consumed(cluster, tp)
        values = [v for _, v in log]
        assert values == [b"first"] + [b"second"] * copies + [b"third"]
        # The metadata names where the acknowledged copy is: the retry's.
        assert [m.offset for m in metas] == [0, copies, copies + 1]


def test_unknown_topic_and_partition_out_of_range(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    # The producer lets the brokers create a topic it writes to: these ones do not.
    no_auto_create = {"auto.create.topics.enable": "false"}
    with running_cluster(zk_client, zk_connect, tmp_path, (1,), no_auto_create) as cluster:
        cluster.create_topic("known", {0: [1], 1: [1]})

        async def scenario() -> None:
            config = ProducerConfig(max_block_ms=1000)
            async with (
                BrokerConnections.from_bootstrap(bootstrap(cluster)) as connections,
                Producer(connections, config) as producer,
            ):
                with pytest.raises(ClientError, match=r"^unknown topic 'nope'$"):
                    await producer.send("nope", b"v")
                with pytest.raises(ClientError, match=r"partition 2 out of range"):
                    await producer.send("known", b"v", partition=2)
                meta = await (await producer.send("known", b"v", partition=1))
                assert (meta.partition, meta.offset) == (1, 0)

        run(scenario)
        wait_for(lambda: consumed(cluster, TopicPartition("known", 1)) == [(0, b"v")], 10)
