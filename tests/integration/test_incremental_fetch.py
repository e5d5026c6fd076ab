"""Incremental fetch sessions (KIP-227) on real brokers: the FetchSession stream as the
replica fetchers use it (proto.transport.fetch_session), and a follower's ISR membership
across a quiet spell longer than replica.lag.time.max.ms.

The leader's bookkeeping is tested on its own in tests/unit/test_leader_fetch_session.py;
here the wire and the processes are real.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from functools import partial

import grpc
import grpc.aio
import pytest

from deploy.cluster_probe import wait_until
from deploy.zookeeper import ZooKeeperServer
from proto.records.record_batch import decode_batch
from proto.topic_partition import TopicPartition
from proto.transport.fetch_session import FetchSession, PartitionFetch
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from tests.cluster import Cluster, running_cluster
from tests.helpers import chrooted_client

pytestmark = pytest.mark.integration

TOPIC = "incremental"
TPS = [TopicPartition(TOPIC, i) for i in range(3)]
LAG_MS = 1500


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("incremental")
    with (
        chrooted_client(zookeeper) as zk,
        running_cluster(
            zk,
            zookeeper.connect_string + zk.chroot,
            root,
            (1, 2),
            {"replica.lag.time.max.ms": str(LAG_MS)},
        ) as c,
    ):
        c.create_topic(TOPIC, {tp.partition: [1, 2] for tp in TPS})
        for tp in TPS:
            c.wait_for_isr(tp, {1, 2})
        yield c


def answered(response: pb.FetchResponse) -> dict[TopicPartition, pb.FetchPartitionData]:
    return {
        TopicPartition(t.topic, p.partition_index): p
        for t in response.responses
        for p in t.partitions
    }


def values(data: pb.FetchPartitionData) -> list[bytes | None]:
    return [r.value for r in decode_batch(data.records).records] if data.records else []


def test_a_session_answers_only_what_changed_and_names_failed_partitions_again(
    cluster: Cluster,
) -> None:
    for tp in TPS:
        assert cluster.produce(1, tp, [b"before"]).error_code == pb.NONE
    ends = {tp: cluster.consume_all(1, tp)[-1][0] + 1 for tp in TPS}
    leaders = {tp: cluster.leader_serving(tp) for tp in TPS}
    assert set(leaders.values()) == {1}
    unknown = TopicPartition(TOPIC, 99)

    async def scenario() -> None:
        async with grpc.aio.insecure_channel(cluster.brokers[1].address) as channel:
            session = FetchSession(pb_grpc.BrokerStub(channel))
            header = pb.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20)

            def at(offsets: dict[TopicPartition, int]) -> dict[TopicPartition, PartitionFetch]:
                return {tp: (None, o, 0, 1 << 20) for tp, o in offsets.items()}

            first = answered(await session.fetch_partitions(header, at({**ends, unknown: 0}), 10))
            assert set(first) == {*TPS, unknown}
            assert first[unknown].error_code == pb.UNKNOWN_TOPIC_OR_PARTITION
            assert all(first[tp].high_watermark == ends[tp] for tp in TPS)
            # Nothing changed: an empty answer after the long poll, the failed one again.
            header.max_wait_ms = 200
            quiet = answered(await session.fetch_partitions(header, at({**ends, unknown: 0}), 10))
            assert set(quiet) == {unknown}
            # A write ends the long poll and is the whole answer.
            header.max_wait_ms = 20_000
            started = time.monotonic()
            polling = asyncio.ensure_future(session.fetch_partitions(header, at(ends), 30))
            await asyncio.sleep(0.2)
            assert not polling.done()
            produced = await asyncio.to_thread(cluster.produce, 1, TPS[1], [b"wakes it"])
            assert produced.error_code == pb.NONE
            woken = answered(await polling)
            assert time.monotonic() - started < 20
            assert list(woken) == [TPS[1]]
            assert values(woken[TPS[1]]) == [b"wakes it"]
            # A forgotten partition is not answered for.
            header.max_wait_ms = 200
            rest = {tp: ends[tp] for tp in TPS if tp != TPS[2]}
            rest[TPS[1]] = ends[TPS[1]] + 1
            assert set(answered(await session.fetch_partitions(header, at(rest), 10))) <= {TPS[1]}
            assert cluster.produce(1, TPS[2], [b"not asked for"]).error_code == pb.NONE
            assert answered(await session.fetch_partitions(header, at(rest), 10)) == {}
            session.close()

    asyncio.run(scenario())


def test_an_incremental_fetch_outside_a_fetch_session_is_invalid(cluster: Cluster) -> None:
    request = pb.FetchRequest(replica_id=-1, max_wait_ms=0, incremental=True)
    with pytest.raises(grpc.RpcError) as raised:
        cluster.broker_stub(1).Fetch(request, timeout=10)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "FetchSession" in str(raised.value.details())


def test_an_idle_follower_stays_in_the_isr_and_takes_the_next_write(cluster: Cluster) -> None:
    """The leader reads nothing of a quiet session's partitions, yet counts them as fetched:
    after three lag times of quiet, acks=all writes are acknowledged, the follower gets
    them and stays in every ISR (a stale caught-up time would drop it at the first write)."""
    deadline = time.monotonic() + 3 * LAG_MS / 1000
    while time.monotonic() < deadline:  # a window of quiet, watched: the ISR must hold
        assert all(set(cluster.state(tp).isr) == {1, 2} for tp in TPS)  # type: ignore[union-attr]
        time.sleep(0.1)
    for i in range(20):
        for tp in TPS:
            assert cluster.produce(1, tp, [b"after the quiet %d" % i]).error_code == pb.NONE
    deadline = time.monotonic() + 2 * LAG_MS / 1000
    while time.monotonic() < deadline:  # and the ISR holds after them
        assert all(set(cluster.state(tp).isr) == {1, 2} for tp in TPS)  # type: ignore[union-attr]
        time.sleep(0.1)
    for tp in TPS:
        leader_records = cluster.replica_records(1, tp)
        assert wait_until(partial(_replicated, cluster, tp, leader_records), 20), tp


def _replicated(
    cluster: Cluster, tp: TopicPartition, records: list[tuple[int, bytes | None]]
) -> bool:
    return cluster.replica_records(2, tp) == records
