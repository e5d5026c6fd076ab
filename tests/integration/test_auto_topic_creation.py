"""Topics that create themselves: a Metadata request for a missing topic that allows it
creates the topic (``auto.create.topics.enable``, ``num.partitions``,
``default.replication.factor``), through Kafka's clients, unchanged (confluent-kafka,
kafka-python, aiokafka, kcat), and through minibroker's own producer and consumer."""

from __future__ import annotations

import asyncio
import json
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiokafka
import confluent_kafka
import pytest
from kazoo.client import KazooClient
from kio.schema.metadata.v1 import request as metadata_v1
from kio.schema.metadata.v9 import request as metadata_v9
from kio.schema.types import TopicName

from client.consumer import Consumer, ConsumerConfig
from client.metadata import BrokerConnections
from client.producer import Producer
from proto.wire import minibroker_pb2 as pb
from proto.zk import znodes
from tests.cluster import Cluster, running_cluster
from tests.helpers import minibroker, wait_for
from tests.integration.test_kafka_listener import kafka_bootstrap, kafka_call, kcat, run

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

METADATA = 3
TWO_PARTITIONS = {"kafka.port": "0", "num.partitions": "2"}
AUTO_CREATE_OFF = {"kafka.port": "0", "auto.create.topics.enable": "false"}


@pytest.fixture
def cluster(zk_client: KazooClient, zk_connect: str, tmp_path: Path) -> Iterator[Cluster]:
    """Two brokers with Kafka's default (auto creation on), two partitions a topic."""
    with running_cluster(
        zk_client, zk_connect, tmp_path, broker_ids=(1, 2), overrides=TWO_PARTITIONS
    ) as running:
        yield running


def kafka_python() -> Any:
    """kafka-python, imported without the warning its 3.0 raises when imported
    (importlib.resources' legacy API)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka  # kafka-python

    return kafka


def partitions_in_zookeeper(cluster: Cluster, topic: str) -> dict[int, list[int]] | None:
    if cluster.zk.exists(znodes.topic_path(topic)) is None:
        return None
    data, _ = cluster.zk.get(znodes.topic_path(topic))
    return {p: list(r) for p, r in znodes.decode_topic_assignment(data).items()}


def metadata_v9_request(*names: str, allow: bool) -> Any:
    return metadata_v9.MetadataRequest(
        topics=tuple(metadata_v9.MetadataRequestTopic(name=TopicName(n)) for n in names),
        allow_auto_topic_creation=allow,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def topic_errors(response: Any) -> dict[str, int]:
    return {str(t.name): int(t.error_code) for t in response.topics}


def test_confluent_kafka_producer_and_consumer_create_the_topics_they_use(
    cluster: Cluster,
) -> None:
    bootstrap = kafka_bootstrap(cluster)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "message.timeout.ms": 30000, "acks": "all"}
    )
    delivered: list[tuple[str | None, int | None]] = []
    producer.produce(
        "made-by-producer",
        b"v1",
        on_delivery=lambda err, msg: delivered.append((str(err) if err else None, msg.offset())),
    )
    assert producer.flush(60) == 0
    assert delivered == [(None, 0)]
    assert partitions_in_zookeeper(cluster, "made-by-producer") is not None
    assert len(partitions_in_zookeeper(cluster, "made-by-producer") or {}) == 2

    # librdkafka's consumer asks for creation only with allow.auto.create.topics (its
    # default is false, the Java consumer's true), and only in the metadata requests of
    # topics it holds a handle of (a subscription alone never creates: rdkafka_metadata.c);
    # asking for the topic's metadata is one.
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "auto-sub",
            "auto.offset.reset": "earliest",
            "allow.auto.create.topics": True,
            "session.timeout.ms": 6000,
        }
    )
    consumer.list_topics("made-by-consumer", timeout=30)
    assert len(partitions_in_zookeeper(cluster, "made-by-consumer") or {}) == 2
    consumer.subscribe(["made-by-consumer"])
    deadline = time.monotonic() + 60
    # flush() counts what is still queued, not what failed: the delivery report tells.
    delivered.clear()
    producer.produce(
        "made-by-consumer",
        b"hello",
        partition=1,
        on_delivery=lambda err, msg: delivered.append((str(err) if err else None, msg.offset())),
    )
    assert producer.flush(60) == 0
    assert delivered == [(None, 0)]
    got = None
    while got is None:
        assert time.monotonic() < deadline, "the consumer read nothing from its new topic"
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got = (message.topic(), message.partition(), message.value())
    assert got == ("made-by-consumer", 1, b"hello")
    consumer.close()
    del consumer, producer  # their threads stop before the brokers do


def test_kafka_python_and_aiokafka_create_the_topics_they_use(cluster: Cluster) -> None:
    kafka = kafka_python()
    bootstrap = kafka_bootstrap(cluster)
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap, request_timeout_ms=20000, max_block_ms=30000
    )
    try:
        sent = producer.send("made-by-kafka-python", b"v", partition=1).get(timeout=60)
        assert (sent.topic, sent.partition, sent.offset) == ("made-by-kafka-python", 1, 0)
    finally:
        producer.close(timeout=10)
    consumer = kafka.KafkaConsumer(
        "made-by-kafka-python-consumer",
        bootstrap_servers=bootstrap,
        group_id="kp-auto",
        request_timeout_ms=20000,
        allow_auto_create_topics=True,  # its default, as the Java consumer's
    )
    try:
        deadline = time.monotonic() + 60
        while partitions_in_zookeeper(cluster, "made-by-kafka-python-consumer") is None:
            assert time.monotonic() < deadline, "kafka-python's subscription created no topic"
            consumer.poll(timeout_ms=200)
        while len(consumer.assignment()) < 2:
            assert time.monotonic() < deadline, "kafka-python's consumer was assigned nothing"
            consumer.poll(timeout_ms=200)
    finally:
        consumer.close()

    async def aiokafka_side() -> list[bytes | None]:
        aio_producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap)
        await aio_producer.start()
        try:
            async with asyncio.timeout(60):
                await aio_producer.send_and_wait("made-by-aiokafka", b"aio", partition=0)
        finally:
            await aio_producer.stop()
        aio_consumer = aiokafka.AIOKafkaConsumer(
            "made-by-aiokafka",
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            group_id="aio-auto",
        )
        await aio_consumer.start()
        try:
            async with asyncio.timeout(60):
                message = await aio_consumer.getone()
        finally:
            await aio_consumer.stop()
        return [message.value]

    assert run(aiokafka_side()) == [b"aio"]
    assert len(partitions_in_zookeeper(cluster, "made-by-aiokafka") or {}) == 2


def test_kcat_produces_to_a_new_topic(cluster: Cluster) -> None:
    bootstrap = kafka_bootstrap(cluster)
    kcat(bootstrap, "-P", "-t", "made-by-kcat", "-p", "0", stdin="a\nb\nc\n")
    out = kcat(bootstrap, "-C", "-t", "made-by-kcat", "-p", "0", "-o", "beginning", "-e", "-q")
    assert out.split() == ["a", "b", "c"]
    listing = json.loads(kcat(bootstrap, "-L", "-J", "-t", "made-by-kcat"))
    (topic,) = listing["topics"]
    assert len(topic["partitions"]) == 2


def test_the_metadata_answers_of_a_missing_topic(cluster: Cluster) -> None:
    """LEADER_NOT_AVAILABLE for a topic just created, until it has leaders; nothing created
    when the request does not allow it (v4+), always allowed before v4; illegal and
    internal names never created."""
    address = kafka_bootstrap(cluster)
    refused = kafka_call(address, METADATA, 9, metadata_v9_request("not-allowed", allow=False))
    assert topic_errors(refused) == {"not-allowed": pb.UNKNOWN_TOPIC_OR_PARTITION}
    assert partitions_in_zookeeper(cluster, "not-allowed") is None

    asked = kafka_call(
        address,
        METADATA,
        9,
        metadata_v9_request("fresh", "bad/name", "__consumer_offsets", allow=True),
    )
    assert topic_errors(asked) == {
        "fresh": pb.LEADER_NOT_AVAILABLE,
        "bad/name": pb.INVALID_TOPIC,
        "__consumer_offsets": pb.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert partitions_in_zookeeper(cluster, "__consumer_offsets") is None
    assert len(partitions_in_zookeeper(cluster, "fresh") or {}) == 2
    wait_for(
        lambda: (
            topic_errors(kafka_call(address, METADATA, 9, metadata_v9_request("fresh", allow=True)))
            == {"fresh": pb.NONE}
        ),
        timeout=30,
        message="the new topic to get its leaders",
    )

    old = metadata_v1.MetadataRequest(
        topics=(metadata_v1.MetadataRequestTopic(name=TopicName("by-v1")),)
    )
    assert topic_errors(kafka_call(address, METADATA, 1, old)) == {"by-v1": pb.LEADER_NOT_AVAILABLE}
    assert partitions_in_zookeeper(cluster, "by-v1") is not None


def test_two_brokers_creating_one_topic_at_once_both_answer_leader_not_available(
    cluster: Cluster,
) -> None:
    addresses = kafka_bootstrap(cluster).split(",")
    assert len(addresses) == 2

    async def both() -> list[Any]:
        calls = [
            asyncio.to_thread(
                kafka_call, a, METADATA, 9, metadata_v9_request("contended", allow=True)
            )
            for a in addresses
            for _ in range(3)
        ]
        return list(await asyncio.gather(*calls))

    answers = [topic_errors(r)["contended"] for r in run(both())]
    # LEADER_NOT_AVAILABLE for each writer and for whoever lost the race to write the
    # znode; a broker's concurrent second request sees its first in flight (Kafka's
    # UNKNOWN_TOPIC_OR_PARTITION); once it has leaders, NONE.
    allowed = {pb.LEADER_NOT_AVAILABLE, pb.UNKNOWN_TOPIC_OR_PARTITION, pb.NONE}
    assert set(answers) <= allowed, answers
    assert pb.LEADER_NOT_AVAILABLE in answers
    assert len(partitions_in_zookeeper(cluster, "contended") or {}) == 2


def test_too_few_brokers_for_the_default_replication_factor(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    overrides = {"kafka.port": "0", "default.replication.factor": "3"}
    with running_cluster(
        zk_client, zk_connect, tmp_path, broker_ids=(1, 2), overrides=overrides
    ) as cluster:
        address = kafka_bootstrap(cluster)
        answer = kafka_call(address, METADATA, 9, metadata_v9_request("wide", allow=True))
        assert topic_errors(answer) == {"wide": pb.INVALID_REPLICATION_FACTOR}
        env = {"MINIBROKER_BOOTSTRAP": cluster.brokers[1].address}
        done = minibroker("produce", "wide", input_text="x\n", env=env, timeout=60)
        assert done.returncode == 1, done
        assert "unknown topic 'wide': the brokers cannot create it" in done.stderr
        assert partitions_in_zookeeper(cluster, "wide") is None


def test_with_auto_creation_off_nothing_is_created(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(
        zk_client, zk_connect, tmp_path, broker_ids=(1,), overrides=AUTO_CREATE_OFF
    ) as cluster:
        kafka = kafka_python()
        address = kafka_bootstrap(cluster)
        answer = kafka_call(address, METADATA, 9, metadata_v9_request("stays-away", allow=True))
        assert topic_errors(answer) == {"stays-away": pb.UNKNOWN_TOPIC_OR_PARTITION}
        old = metadata_v1.MetadataRequest(
            topics=(metadata_v1.MetadataRequestTopic(name=TopicName("stays-away")),)
        )
        assert topic_errors(kafka_call(address, METADATA, 1, old)) == {
            "stays-away": pb.UNKNOWN_TOPIC_OR_PARTITION
        }
        producer = kafka.KafkaProducer(
            bootstrap_servers=address, request_timeout_ms=5000, max_block_ms=3000
        )
        try:
            with pytest.raises(kafka.errors.KafkaTimeoutError):
                producer.send("stays-away", b"v").get(timeout=10)
        finally:
            producer.close(timeout=10)
        env = {"MINIBROKER_BOOTSTRAP": cluster.brokers[1].address}
        done = minibroker("produce", "stays-away", input_text="x\n", env=env, timeout=60)
        assert done.returncode == 1, done
        assert "unknown topic 'stays-away'" in done.stderr
        assert partitions_in_zookeeper(cluster, "stays-away") is None


def test_the_grpc_metadata_request_creates_only_when_it_allows_it(cluster: Cluster) -> None:
    stub = cluster.broker_stub(2)
    refused = stub.Metadata(pb.MetadataRequest(topics=["grpc-new"]), timeout=10)
    assert [(t.name, t.error_code) for t in refused.topics] == [
        ("grpc-new", pb.UNKNOWN_TOPIC_OR_PARTITION)
    ]
    assert partitions_in_zookeeper(cluster, "grpc-new") is None
    allowed = pb.MetadataRequest(topics=["grpc-new", "bad/name"], allow_auto_topic_creation=True)
    assert [(t.name, t.error_code) for t in stub.Metadata(allowed, timeout=10).topics] == [
        ("grpc-new", pb.LEADER_NOT_AVAILABLE),
        ("bad/name", pb.INVALID_TOPIC),
    ]
    assert len(partitions_in_zookeeper(cluster, "grpc-new") or {}) == 2
    wait_for(
        lambda: (
            [len(t.partitions) for t in stub.Metadata(allowed, timeout=10).topics if t.partitions]
            == [2]
        ),
        timeout=30,
        message="the new topic's partitions in broker 2's metadata",
    )


def test_the_minibroker_cli_produces_to_and_consumes_from_new_topics(cluster: Cluster) -> None:
    env = {"MINIBROKER_BOOTSTRAP": cluster.brokers[1].address}
    produced = minibroker("produce", "cli-new", input_text="one\ntwo\n", env=env, timeout=60)
    assert produced.returncode == 0, produced.stderr
    assert len(partitions_in_zookeeper(cluster, "cli-new") or {}) == 2
    consumed = minibroker(
        "consume", "cli-new", "--from-beginning", "--max-messages", "2", "--timeout-ms", "20000",
        env=env, timeout=60,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.split()) == ["one", "two"]

    # As Kafka's console consumer (allow.auto.create.topics defaults to true): the topic
    # is created and read until --timeout-ms passes without a record.
    idle = minibroker("consume", "cli-sub", "--timeout-ms", "1000", env=env, timeout=60)
    assert idle.returncode == 0, idle.stderr
    assert "Processed a total of 0 messages" in idle.stderr
    assert len(partitions_in_zookeeper(cluster, "cli-sub") or {}) == 2


def test_minibroker_consumer_group_subscription_creates_its_topic(
    cluster: Cluster, zk_connect: str
) -> None:
    """The library's group consumer (ZooKeeper membership): a subscribed topic that does not
    exist is created, and the next rebalance assigns its partitions (``zk_connect``: the
    chrooted ZooKeeper the cluster's brokers use)."""

    async def scenario() -> None:
        async with (
            BrokerConnections.from_bootstrap(cluster.brokers[1].address) as connections,
            Consumer(
                connections,
                ConsumerConfig(group_id="sub-new", auto_offset_reset="earliest"),
                zk_connect,
            ) as consumer,
        ):
            consumer.subscribe(["group-new"])
            async with asyncio.timeout(60):
                while not consumer.assignment():
                    await consumer.poll(timeout_ms=200)
                assert {tp.partition for tp in consumer.assignment()} == {0, 1}
                async with Producer(connections) as producer:
                    await (await producer.send("group-new", b"v", partition=0))
                records: list[Any] = []
                while not records:
                    records = await consumer.poll(timeout_ms=500)
            assert [(r.topic, r.partition, r.value) for r in records] == [("group-new", 0, b"v")]

    run(scenario())
