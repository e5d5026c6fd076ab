"""Produced batches whose broker-owned fields a client forged: the LogAppendTime attribute,
the base offset and partition leader epoch, a producer id no broker handed out. Sent through
both doors (raw Kafka Produce v8 requests with kio on the Kafka listener, and gRPC) to the
leader of a three-broker cluster; Kafka's own idempotent producers (confluent-kafka and
aiokafka) still produce with the ids their InitProducerId got."""

from __future__ import annotations

import asyncio
import datetime
import struct
import time
from collections.abc import Iterator

import confluent_kafka
import pytest
from aiokafka import AIOKafkaProducer
from kio.schema.produce.v8 import request as produce_v8
from kio.schema.types import TopicName
from kio.static.primitive import Records, i16, i32, i32Timedelta

from deploy.zookeeper import ZooKeeperServer
from proto.records.record_batch import Record, decode_batch, encode_batch, scan_batches
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.zk.sync_client import read_registered_broker
from tests.cluster import Cluster, running_cluster
from tests.helpers import chrooted_client
from tests.integration.test_kafka_listener import kafka_bootstrap, kafka_call
from tests.poison_batches import raw_batch, raw_records

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TP = TopicPartition("forged", 0)
PRODUCE = 0


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("forged-batches")
    with (
        chrooted_client(zookeeper) as zk,
        running_cluster(
            zk, zookeeper.connect_string + zk.chroot, root, overrides={"kafka.port": "0"}
        ) as c,
    ):
        c.create_topic(TP.topic, {0: [1, 2, 3]})
        c.wait_for_isr(TP, {1, 2, 3})
        assert c.produce(c.wait_for_leader(TP), TP, [b"first"]).error_code == pb.NONE
        yield c


def kafka_address(cluster: Cluster, broker_id: int) -> str:
    registered = read_registered_broker(cluster.zk, broker_id)
    assert registered is not None
    assert registered.kafka_endpoint is not None
    host, port = registered.kafka_endpoint
    return f"{host}:{port}"


def kafka_produce(cluster: Cluster, broker_id: int, records: bytes) -> tuple[int, int, str]:
    """One Produce v8 request (acks=all) on the broker's Kafka listener: (error code, base
    offset, error message)."""
    request = produce_v8.ProduceRequest(
        acks=i16(-1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        topic_data=(
            produce_v8.TopicProduceData(
                name=TopicName(TP.topic),
                partition_data=(
                    produce_v8.PartitionProduceData(index=i32(0), records=Records(records)),
                ),
            ),
        ),
    )
    response = kafka_call(kafka_address(cluster, broker_id), PRODUCE, 8, request)
    [partition] = response.responses[0].partition_responses
    return int(partition.error_code), int(partition.base_offset), partition.error_message or ""


def grpc_produce(cluster: Cluster, broker_id: int, records: bytes) -> tuple[int, int, str]:
    response = cluster.produce_raw(broker_id, TP, records)
    return response.error_code, response.base_offset, response.error_message


DOORS = {"kafka": kafka_produce, "grpc": grpc_produce}


def log_end_offset(cluster: Cluster, leader: int) -> int:
    return cluster.fetch(leader, TP, 0).log_end_offset


def init_producer_id(cluster: Cluster, broker_id: int) -> int:
    response = cluster.broker_stub(broker_id).InitProducerId(pb.InitProducerIdRequest(), timeout=30)
    assert response.error_code == pb.NONE, response
    return response.producer_id


def idempotent_batch(producer_id: int, values: list[bytes]) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch(
        [Record(None, v, now) for v in values],
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=0,
    )


@pytest.mark.parametrize("door", DOORS)
def test_a_producer_setting_log_append_time_gets_invalid_timestamp(
    cluster: Cluster, door: str
) -> None:
    leader = cluster.wait_for_leader(TP)
    before = log_end_offset(cluster, leader)
    code, offset, message = DOORS[door](cluster, leader, raw_batch(raw_records(2), 2, attributes=8))
    assert (code, offset) == (pb.INVALID_TIMESTAMP, -1), message
    assert "LogAppendTime" in message
    assert log_end_offset(cluster, leader) == before


@pytest.mark.parametrize("door", DOORS)
def test_the_leader_overwrites_a_forged_base_offset_and_partition_leader_epoch(
    cluster: Cluster, door: str
) -> None:
    leader = cluster.wait_for_leader(TP)
    state = cluster.state(TP)
    assert state is not None
    before = log_end_offset(cluster, leader)
    forged = bytearray(encode_batch([Record(None, b"forged-" + door.encode(), 1)]))
    # Both fields lie before the CRC: the batch stays valid with any values in them.
    struct.pack_into(">q", forged, 0, 123_456_789)
    struct.pack_into(">i", forged, 12, 2**31 - 1)
    code, offset, message = DOORS[door](cluster, leader, bytes(forged))
    assert (code, offset) == (pb.NONE, before), message
    stored = cluster.fetch(leader, TP, before).records
    [scanned, *_] = list(scan_batches(stored))
    assert scanned.header.base_offset == before
    assert scanned.header.partition_leader_epoch == state.leader_epoch
    assert decode_batch(stored, scanned.position).records[0].value == b"forged-" + door.encode()


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("producer_id", [10**12, 2**63 - 1, -5])
def test_a_producer_id_no_broker_handed_out_is_refused(
    cluster: Cluster, door: str, producer_id: int
) -> None:
    leader = cluster.wait_for_leader(TP)
    before = log_end_offset(cluster, leader)
    forged = raw_batch(
        raw_records(1), 1, producer_id=producer_id, producer_epoch=0, base_sequence=0
    )
    code, offset, message = DOORS[door](cluster, leader, forged)
    assert (code, offset) == (pb.UNKNOWN_PRODUCER_ID, -1), message
    assert str(producer_id) in message
    assert log_end_offset(cluster, leader) == before
    log = cluster.brokers[leader].log_path.read_text(errors="replace")
    assert "event=refused_unknown_producer_id" in log


@pytest.mark.parametrize("door", DOORS)
def test_a_producer_id_another_broker_just_handed_out_is_accepted(
    cluster: Cluster, door: str
) -> None:
    # The other broker reserves a new block the leader has not cached: the leader reads
    # /latest_producer_id_block again before judging the id.
    leader = cluster.wait_for_leader(TP)
    other = next(b for b in (1, 2, 3) if b != leader)
    producer_id = init_producer_id(cluster, other)
    code, _, message = DOORS[door](cluster, leader, idempotent_batch(producer_id, [b"issued"]))
    assert code == pb.NONE, message


def test_kafka_idempotent_producers_still_produce(cluster: Cluster) -> None:
    bootstrap = kafka_bootstrap(cluster)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"}
    )
    delivered: list[object] = []
    for i in range(20):
        producer.produce(
            TP.topic,
            b"rdkafka-%d" % i,
            partition=0,
            on_delivery=lambda err, _msg: delivered.append(err),
        )
    assert producer.flush(30) == 0
    assert delivered == [None] * 20

    async def aiokafka_produce() -> None:
        aio = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
        await aio.start()
        try:
            for i in range(20):
                await aio.send_and_wait(TP.topic, b"aiokafka-%d" % i, partition=0)
        finally:
            await aio.stop()

    asyncio.run(asyncio.wait_for(aiokafka_produce(), 60))
    values = [v for _, v in cluster.consume_all(cluster.wait_for_leader(TP), TP)]
    assert [b"rdkafka-%d" % i for i in range(20)] == [
        v for v in values if v and v.startswith(b"rdk")
    ]
    assert [b"aiokafka-%d" % i for i in range(20)] == [
        v for v in values if v and v.startswith(b"aio")
    ]
