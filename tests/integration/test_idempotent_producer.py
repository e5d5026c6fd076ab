"""The idempotent producer against real broker processes: producer ids from InitProducerId
(blocks reserved in ZooKeeper), a retried batch written once and answered with its original
offset, a sequence gap refused, and a retry after kill -9 of the leader recognised by the new
leader from the producer state it rebuilt from the replicated log."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from proto.records.record_batch import Record, encode_batch
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.zk import znodes
from tests.cluster import Cluster, running_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TP = TopicPartition("idempotent", 0)


def init_producer_id(cluster: Cluster, broker_id: int) -> int:
    response = cluster.broker_stub(broker_id).InitProducerId(pb.InitProducerIdRequest(), timeout=30)
    assert response.error_code == pb.NONE, response
    assert response.producer_epoch == 0
    return response.producer_id


def batch(producer_id: int, sequence: int, values: list[bytes]) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch(
        [Record(None, v, now) for v in values],
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
    )


def send(
    cluster: Cluster, broker_id: int, records: bytes, *, acks: int = -1
) -> tuple[int, int, str]:
    response = cluster.produce_raw(broker_id, TP, records, acks=acks)
    return response.error_code, response.base_offset, response.error_message


def test_producer_ids_come_from_distinct_blocks_reserved_in_zookeeper(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path, (1, 2)) as cluster:
        first = init_producer_id(cluster, 1)
        second = init_producer_id(cluster, 2)
        assert (first, second) == (0, 1000)  # block 0-999 to broker 1, 1000-1999 to broker 2
        assert init_producer_id(cluster, 1) == 1  # the same block: no new reservation
        data, _ = zk_client.get(znodes.LATEST_PRODUCER_ID_BLOCK_PATH)
        assert data == b'{"version":1,"broker":2,"block_start":"1000","block_end":"1999"}'

        # With a transactional id it is the transaction coordinator's request
        # (tests/integration/test_grpc_transactions.py), which wants a timeout.
        refused = cluster.broker_stub(1).InitProducerId(
            pb.InitProducerIdRequest(transactional_id="tx"), timeout=10
        )
        assert refused.error_code == pb.INVALID_TRANSACTION_TIMEOUT


def test_retries_are_written_once_even_after_kill_9_of_the_leader(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        cluster.create_topic(TP.topic, {0: [1, 2, 3]})
        leader = cluster.wait_for_leader(TP)
        producer_id = init_producer_id(cluster, 2)

        first = batch(producer_id, 0, [b"a0", b"a1"])
        assert send(cluster, leader, first)[:2] == (pb.NONE, 0)
        assert send(cluster, leader, first)[:2] == (pb.NONE, 0)  # the retry: same offset
        assert send(cluster, leader, first, acks=1)[:2] == (pb.NONE, 0)
        plain = encode_batch([Record(None, b"p", 0)])  # no producer id: never deduplicated
        assert send(cluster, leader, plain)[:2] == (pb.NONE, 2)
        assert send(cluster, leader, plain)[:2] == (pb.NONE, 3)

        code, _, message = send(cluster, leader, batch(producer_id, 3, [b"gap"]))
        assert code == pb.OUT_OF_ORDER_SEQUENCE, message
        code, _, _ = send(cluster, leader, batch(producer_id, 3, [b"gap"]), acks=0)
        assert code == pb.OUT_OF_ORDER_SEQUENCE  # acks=0 is checked too (answered anyway)
        assert [v for _, v in cluster.replica_records(leader, TP)] == [b"a0", b"a1", b"p", b"p"]

        last = batch(producer_id, 2, [b"b0", b"b1", b"b2"])
        assert send(cluster, leader, last)[:2] == (pb.NONE, 4)
        # acks=all: every ISR follower has appended it (and learnt the producer's sequence).
        cluster.brokers[leader].kill()
        new_leader = cluster.wait_for_leader(TP, accept=set(cluster.brokers) - {leader})

        # The producer never saw the answer and retries against the new leader.
        assert send(cluster, new_leader, last)[:2] == (pb.NONE, 4)
        assert send(cluster, new_leader, first)[:2] == (pb.NONE, 0)
        code, _, message = send(cluster, new_leader, batch(producer_id, 6, [b"gap"]))
        assert code == pb.OUT_OF_ORDER_SEQUENCE, message
        assert send(cluster, new_leader, batch(producer_id, 5, [b"c0"]))[:2] == (pb.NONE, 7)

        values = [v for _, v in cluster.consume_all(new_leader, TP)]
        assert values == [b"a0", b"a1", b"p", b"p", b"b0", b"b1", b"b2", b"c0"]
