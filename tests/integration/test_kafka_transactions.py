"""Transactions through Kafka's own clients (confluent-kafka, aiokafka, kafka-python)
against real broker processes (docs/transactions.md): commits, aborts, and a zombie fenced
by a new instance of its transactional id, read back by read_committed and
read_uncommitted consumers, Kafka's and minibroker's own over gRPC. Every client call has
its own deadline."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from pathlib import Path

import aiokafka
import confluent_kafka
import pytest
from kazoo.client import KazooClient

from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from tests.cluster import Cluster, running_cluster
from tests.helpers import minibroker, wait_for
from tests.integration.test_group_admin import grpc_bootstrap
from tests.integration.test_kafka_listener import kafka_bootstrap

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture
def cluster(zk_client: KazooClient, zk_connect: str, tmp_path: Path) -> Iterator[Cluster]:
    with running_cluster(zk_client, zk_connect, tmp_path, overrides={"kafka.port": "0"}) as c:
        yield c


def read_all(bootstrap: str, topic: str, isolation: str, count: int) -> list[str]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{isolation}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    read: list[str] = []
    try:
        consumer.subscribe([topic])

        def enough() -> bool:
            for message in consumer.consume(100, timeout=0.5):
                if message.error() is not None:
                    continue
                value = message.value()
                assert value is not None
                read.append(value.decode())
            return len(read) >= count

        wait_for(enough, timeout=60, message=f"{count} records ({isolation})")
        # Nothing more comes.
        assert not [m for m in consumer.consume(100, timeout=2) if m.error() is None]
    finally:
        consumer.close()
    return read


def test_confluent_kafka_commits_and_aborts_and_a_zombie_is_fenced(cluster: Cluster) -> None:
    topic = "ledger"
    cluster.create_topic(topic, {0: [1, 2, 3], 1: [2, 3, 1]})
    bootstrap = kafka_bootstrap(cluster)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "ledger-app"}
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, f"c{i}".encode(), partition=i % 2)
    producer.commit_transaction(60)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, f"a{i}".encode(), partition=i % 2)
    producer.flush(30)
    producer.abort_transaction(60)

    # A new instance of the id fences the old one.
    successor = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "ledger-app"}
    )
    successor.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, b"zombie", partition=0)
    with pytest.raises(confluent_kafka.KafkaException) as fenced:
        producer.commit_transaction(30)
    assert fenced.value.args[0].fatal() or "fenced" in str(fenced.value).lower()
    successor.begin_transaction()
    successor.produce(topic, b"s0", partition=1)
    successor.commit_transaction(60)

    committed = read_all(bootstrap, topic, "read_committed", 11)
    assert sorted(committed) == sorted([f"c{i}" for i in range(10)] + ["s0"])
    everything = read_all(bootstrap, topic, "read_uncommitted", 16)
    assert {f"a{i}" for i in range(5)} <= set(everything)


def test_aiokafka_and_kafka_python_transactions_commit_and_abort(cluster: Cluster) -> None:
    topic = "orders-txn"
    cluster.create_topic(topic, {0: [1, 2, 3]})
    bootstrap = kafka_bootstrap(cluster)

    async def aiokafka_side() -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id="aio-app", request_timeout_ms=15000
        )
        await asyncio.wait_for(producer.start(), 60)
        try:
            async with producer.transaction():
                for i in range(3):
                    await producer.send_and_wait(topic, f"aio{i}".encode(), partition=0)
            await producer.begin_transaction()
            await producer.send_and_wait(topic, b"aio-aborted", partition=0)
            await asyncio.wait_for(producer.abort_transaction(), 60)
        finally:
            await producer.stop()

    asyncio.run(aiokafka_side())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kp-app")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"kp0", partition=0)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"kp-aborted", partition=0)
        producer.abort_transaction()
    finally:
        producer.close(timeout=10)

    async def read_committed() -> list[bytes]:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            values: list[bytes] = []
            async with asyncio.timeout(60):
                while len(values) < 4:
                    found = await consumer.getmany(tp, timeout_ms=1000)
                    values += [r.value for r in found.get(tp, []) if r.value is not None]
            return values
        finally:
            await consumer.stop()

    assert asyncio.run(read_committed()) == [b"aio0", b"aio1", b"aio2", b"kp0"]


def test_minibroker_consumers_read_committed_through_the_grpc_door(cluster: Cluster) -> None:
    """Transactions written by confluent-kafka, read by ``minibroker consume`` over gRPC:
    read_committed skips the aborted ones and stops at an open one's first offset (the
    LSO, which ListOffsets answers as the latest offset), read_uncommitted reads all."""
    topic = "mixed"
    cluster.create_topic(topic, {0: [1, 2, 3]})
    bootstrap = kafka_bootstrap(cluster)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "mixed-app"}
    )
    producer.init_transactions(60)
    for values, commit in ((["c0", "c1"], True), (["a0"], False), (["c2"], True)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value.encode(), partition=0)
        producer.flush(30)
        if commit:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
    # Left open: read_committed stops before it.
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    assert producer.flush(30) == 0
    grpc = grpc_bootstrap(cluster)

    def consume(isolation: str, count: int) -> list[str]:
        done = minibroker(
            "consume", topic, "--bootstrap-server", grpc, "--from-beginning",
            "--isolation-level", isolation, "--max-messages", str(count), "--timeout-ms", "5000",
            timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert consume("read_committed", 10) == ["c0", "c1", "c2"]
    assert consume("read_uncommitted", 5) == ["c0", "c1", "a0", "c2", "open"]

    leader = cluster.leader_serving(TopicPartition(topic, 0))
    assert leader is not None
    stub = cluster.broker_stub(leader)

    def latest(isolation_level: int) -> int:
        request = pb.ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level)
        request.topics.add(name=topic).partitions.add(partition_index=0, timestamp=-1)
        [answer] = stub.ListOffsets(request, timeout=10).topics[0].partitions
        assert answer.error_code == pb.NONE
        return int(answer.offset)

    # c0 c1 marker a0 marker c2 marker open: the open transaction starts at offset 7.
    assert (latest(1), latest(0)) == (7, 8)
    producer.commit_transaction(60)
    assert consume("read_committed", 4) == ["c0", "c1", "c2", "open"]
