"""Compressed batches through the Kafka listener, with Kafka's own clients unchanged.

confluent-kafka, aiokafka, kafka-python and kcat produce with each codec Kafka has; the
leader stores each batch as sent (``compression.type=producer``), the followers copy its
bytes, and the records read back through two other clients. A topic's ``compression.type``
naming a codec makes the leader recompress whatever arrives, and it can change while the
topic is written to. kafka-python produces gzip and lz4 only: its snappy and zstd codecs
need python-snappy and zstandard, which minibroker does not depend on.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.cimpl import NewTopic

from deploy.zookeeper import ZooKeeperServer
from proto.records.compression import Codec, codec_named
from proto.records.record_batch import validate_batches
from proto.topic_partition import TopicPartition
from tests.cluster import Cluster, running_cluster
from tests.helpers import chrooted_client, minibroker, wait_for
from tests.integration.test_kafka_listener import kafka_bootstrap, kcat, run

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CODECS = ("gzip", "snappy", "lz4", "zstd")
COUNT = 400
TIMEOUT_S = 30
SET = AlterConfigOpType.SET

Records = list[tuple[bytes | None, bytes | None]]


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("compression")
    with (
        chrooted_client(zookeeper) as zk,
        running_cluster(
            zk, zookeeper.connect_string + zk.chroot, root, overrides={"kafka.port": "0"}
        ) as c,
    ):
        yield c


@pytest.fixture(scope="module")
def bootstrap(cluster: Cluster) -> str:
    return kafka_bootstrap(cluster)


def orders(tag: str, count: int = COUNT) -> Records:
    """Keyed records of realistic, compressible text (JSON orders whose fields vary)."""
    return [
        (
            b"customer-%d" % (i % 37),
            json.dumps(
                {
                    "order": i,
                    "tag": tag,
                    "item": f"widget-{i * 7 % 101}",
                    "qty": i % 9 + 1,
                    "note": "deliver to the back door" if i % 3 else "leave with the neighbour",
                }
            ).encode(),
        )
        for i in range(count)
    ]


# -- producers ---------------------------------------------------------------------------------


def confluent_produce(bootstrap: str, topic: str, codec: str, records: Records) -> None:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "compression.type": codec,
         "linger.ms": 50}
    )  # fmt: skip
    failed: list[confluent_kafka.KafkaError] = []

    def delivered(err: confluent_kafka.KafkaError | None, _: confluent_kafka.Message) -> None:
        if err is not None:
            failed.append(err)

    for key, value in records:
        producer.produce(topic, value, key, 0, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    assert failed == []


def aiokafka_produce(bootstrap: str, topic: str, codec: str, records: Records) -> None:
    from aiokafka import AIOKafkaProducer

    async def produce() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks="all", compression_type=codec, linger_ms=50
        )
        await producer.start()
        try:
            async with asyncio.timeout(TIMEOUT_S):
                sent = [await producer.send(topic, v, key=k, partition=0) for k, v in records]
                await asyncio.gather(*sent)
        finally:
            await producer.stop()

    run(produce())


def kafka_python_produce(bootstrap: str, topic: str, codec: str, records: Records) -> None:
    with warnings.catch_warnings():
        # kafka-python 3.0 calls importlib.resources' legacy API when imported.
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka

    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap.split(","), acks="all", compression_type=codec, linger_ms=50
    )
    try:
        sent = [producer.send(topic, v, key=k, partition=0) for k, v in records]
        for future in sent:
            future.get(timeout=TIMEOUT_S)
    finally:
        producer.close(timeout=TIMEOUT_S)


def kcat_produce(bootstrap: str, topic: str, codec: str, records: Records) -> None:
    lines = "".join(f"{(k or b'').decode()}\t{(v or b'').decode()}\n" for k, v in records)
    kcat(bootstrap, "-P", "-t", topic, "-p", "0", "-K", "\t", "-z", codec,
         "-X", "linger.ms=50", "-X", "acks=all", stdin=lines)  # fmt: skip


PRODUCERS: dict[str, Callable[[str, str, str, Records], None]] = {
    "confluent-kafka": confluent_produce,
    "aiokafka": aiokafka_produce,
    "kafka-python": kafka_python_produce,
    "kcat": kcat_produce,
}
CASES = [
    (client, codec)
    for client in PRODUCERS
    for codec in CODECS
    if client != "kafka-python" or codec in ("gzip", "lz4")
]


# -- consumers ---------------------------------------------------------------------------------


def confluent_read(bootstrap: str, topic: str, count: int) -> Records:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "enable.auto.commit": False}
    )
    try:
        consumer.assign(
            [confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)]
        )
        got: Records = []
        wait_for(
            lambda: _polled(consumer, got) >= count,
            timeout=TIMEOUT_S,
            message=f"{count} records of {topic} through confluent-kafka",
        )
        return got
    finally:
        consumer.close()


def _polled(consumer: confluent_kafka.Consumer, got: Records) -> int:
    for message in consumer.consume(1000, timeout=0.5):
        assert message.error() is None, message.error()
        got.append((message.key(), message.value()))
    return len(got)


def kcat_read(bootstrap: str, topic: str, count: int) -> Records:
    out = kcat(bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-c", str(count),
               "-e", "-f", "%k\t%s\n")  # fmt: skip
    return [tuple(line.encode().split(b"\t", 1)) for line in out.splitlines()]  # type: ignore[misc]


def aiokafka_read(bootstrap: str, topic: str, count: int) -> Records:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    async def read() -> Records:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = AioTopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: Records = []
            async with asyncio.timeout(TIMEOUT_S):
                while len(got) < count:
                    for batch in (await consumer.getmany(timeout_ms=500)).values():
                        got += [(r.key, r.value) for r in batch]
            return got
        finally:
            await consumer.stop()

    return run(read())


# -- what the replicas store -------------------------------------------------------------------


def stored_codecs(cluster: Cluster, topic: str, count: int) -> list[int]:
    """The codec of every batch of ``topic``'s partition 0, once every replica holds
    ``count`` records; the replicas' segment files must be byte for byte the same."""
    tp = TopicPartition(topic, 0)

    def replica_bytes() -> list[bytes]:
        return [
            b"".join(p.read_bytes() for p in sorted(cluster.partition_dir(b, tp).glob("*.log")))
            for b in cluster.brokers
        ]

    def caught_up() -> bool:
        return all(
            sum(h.record_count for h in validate_batches(data)) >= count for data in replica_bytes()
        )

    wait_for(caught_up, timeout=TIMEOUT_S, message=f"every replica of {tp} at {count} records")
    copies = replica_bytes()
    assert all(data == copies[0] for data in copies), "the replicas' logs differ"
    return [h.compression for h in validate_batches(copies[0])]


def create(bootstrap: str, topic: str, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, 1, 3, config=config or {})
    admin.create_topics([new], request_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)


@pytest.mark.parametrize(("client", "codec"), CASES, ids=[f"{c}-{z}" for c, z in CASES])
def test_kafka_clients_produce_each_codec_and_read_back(
    cluster: Cluster, bootstrap: str, client: str, codec: str
) -> None:
    topic = f"{client}-{codec}"
    create(bootstrap, topic)
    records = orders(topic)
    PRODUCERS[client](bootstrap, topic, codec, records)
    codecs = stored_codecs(cluster, topic, COUNT)
    # Stored as the producer sent it. librdkafka keeps a batch uncompressed when compressing
    # does not make it smaller; these records always compress.
    assert set(codecs) == {codec_named(codec)}, codecs
    assert confluent_read(bootstrap, topic, COUNT) == records
    reader = aiokafka_read if client == "kcat" else kcat_read
    assert reader(bootstrap, topic, COUNT) == records


def test_a_topics_compression_type_recompresses_and_can_change_while_written(
    cluster: Cluster, bootstrap: str
) -> None:
    topic = "recompressed"
    create(bootstrap, topic, {"compression.type": "zstd"})
    first, second, third = orders("a", 100), orders("b", 100), orders("c", 100)
    confluent_produce(bootstrap, topic, "none", first)
    aiokafka_produce(bootstrap, topic, "gzip", second)
    assert set(stored_codecs(cluster, topic, 200)) == {Codec.ZSTD}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry("compression.type", "uncompressed", incremental_operation=SET)
    resource = ConfigResource("topic", topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(
        TIMEOUT_S
    )

    written = 200

    def applied() -> bool:
        """A gzip batch (aiokafka always compresses) is stored uncompressed."""
        nonlocal written
        aiokafka_produce(bootstrap, topic, "gzip", orders("probe", 10))
        written += 10
        return stored_codecs(cluster, topic, written)[-1] == Codec.NONE

    wait_for(applied, timeout=TIMEOUT_S, message="compression.type=uncompressed applied")
    kcat_produce(bootstrap, topic, "snappy", third)
    written += len(third)
    assert stored_codecs(cluster, topic, written)[-1] == Codec.NONE
    got = confluent_read(bootstrap, topic, written)
    assert got[:200] == first + second
    assert got[-100:] == third
    assert aiokafka_read(bootstrap, topic, written) == got


def test_a_timestamp_finds_the_exact_record_inside_a_compressed_batch(
    cluster: Cluster, bootstrap: str
) -> None:
    topic = "timed"
    create(bootstrap, topic)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "compression.type": "lz4", "linger.ms": 200}
    )
    for i in range(50):
        producer.produce(topic, b"v%d" % i, partition=0, timestamp=1_700_000_000_000 + 10 * i)
    assert producer.flush(TIMEOUT_S) == 0
    assert stored_codecs(cluster, topic, 50) == [Codec.LZ4]
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "timed"})
    try:
        wanted = confluent_kafka.TopicPartition(topic, 0, 1_700_000_000_000 + 10 * 17 - 3)
        (found,) = consumer.offsets_for_times([wanted], timeout=TIMEOUT_S)
        assert found.offset == 17
    finally:
        consumer.close()
    listed = subprocess.run(
        ["kcat", "-b", bootstrap, "-Q", "-t", f"{topic}:0:{1_700_000_000_000 + 10 * 42}"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "offset 42" in listed.stdout, listed.stdout


def test_dump_log_names_the_codec_of_each_batch(cluster: Cluster, bootstrap: str) -> None:
    topic = "dumped"
    create(bootstrap, topic)
    for codec in CODECS:
        confluent_produce(bootstrap, topic, codec, orders(codec, 50))
    stored_codecs(cluster, topic, 200)
    directory: Path = cluster.partition_dir(1, TopicPartition(topic, 0))
    done = minibroker("dump-log", str(directory))
    assert done.returncode == 0, done.stderr
    dumped = done.stdout
    assert [line.split("compresscodec: ")[1].split()[0] for line in dumped.splitlines()
            if "compresscodec" in line] == list(CODECS)  # fmt: skip
