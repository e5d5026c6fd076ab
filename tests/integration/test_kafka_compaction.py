"""Compacted topics with Kafka's own clients: the log cleaner on real brokers.

A topic with ``cleanup.policy=compact`` written with repeated keys through the Kafka
listener is cleaned by every replica on its own (small segments, a low dirty ratio and a
short ``log.cleaner.backoff.ms`` so that it happens within the test); afterwards each
replica holds the latest record of every key at the offset its producer was told, and
consumers (confluent-kafka, aiokafka) read exactly that. A record without a key is refused,
as Kafka refuses it; a restarted broker recovers its cleaned segments.
"""

from __future__ import annotations

import asyncio
import functools
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from broker.log.log_loader import load_log
from deploy.zookeeper import ZooKeeperServer
from proto.config.log_config import LogConfig
from proto.records.record_batch import decode_batch
from proto.topic_partition import TopicPartition
from tests.cluster import Cluster, running_cluster
from tests.helpers import chrooted_client, minibroker, wait_for
from tests.integration.test_kafka_listener import kafka_bootstrap, kcat, run

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TIMEOUT_S = 60
KEYS = 20
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.01",
}

Row = tuple[int | None, bytes | None, bytes | None]


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("compaction")
    overrides = {"kafka.port": "0", "log.cleaner.backoff.ms": "100"}
    with (
        chrooted_client(zookeeper) as zk,
        running_cluster(zk, zookeeper.connect_string + zk.chroot, root, overrides=overrides) as c,
    ):
        yield c


@pytest.fixture(scope="module")
def bootstrap(cluster: Cluster) -> str:
    return kafka_bootstrap(cluster)


def create(bootstrap: str, topic: str, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, 1, 3, config=config)
    admin.create_topics([new], request_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)


def produce(bootstrap: str, topic: str, rows: Sequence[tuple[bytes, bytes | None]]) -> list[int]:
    """Each row acknowledged (acks=all); the offsets the producer was told, in order."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1024}
    )
    told: dict[int, int] = {}
    failed: list[confluent_kafka.KafkaError | None] = []

    def delivered(
        i: int, err: confluent_kafka.KafkaError | None, msg: confluent_kafka.Message
    ) -> None:
        offset = msg.offset()
        if err is not None or offset is None:
            failed.append(err)
        else:
            told[i] = offset

    for i, (key, value) in enumerate(rows):
        producer.produce(topic, value, key, 0, on_delivery=functools.partial(delivered, i))
        producer.poll(0)
        if i % 50 == 49:
            producer.flush(TIMEOUT_S)  # several batches, so that segments roll
    assert producer.flush(TIMEOUT_S) == 0
    assert failed == []
    return [told[i] for i in range(len(rows))] if len(told) == len(rows) else []


def replica_rows(cluster: Cluster, broker_id: int, tp: TopicPartition) -> list[Row]:
    """Every record in the replica's segment files, with its offset, read from disk. The
    cleaner may swap a segment between the listing and the read (the file listed is gone,
    its cleaned replacement has another name): the listing is then read again."""
    for _ in range(20):
        try:
            return _segment_rows(sorted(cluster.partition_dir(broker_id, tp).glob("*.log")))
        except FileNotFoundError:
            continue
    raise AssertionError(f"broker {broker_id}'s segments of {tp} kept changing under the read")


def _segment_rows(paths: list[Path]) -> list[Row]:
    rows: list[Row] = []
    for path in paths:
        data = path.read_bytes()
        position = 0
        while position < len(data):
            batch = decode_batch(data, position)
            rows += [(r.offset, r.key, r.value) for r in batch.records]
            position += batch.header.size
    return rows


def latest(rows: Sequence[Row]) -> dict[bytes | None, Row]:
    return {key: (offset, key, value) for offset, key, value in rows}


def test_a_compacted_topic_keeps_the_latest_value_of_each_key_on_every_replica(
    cluster: Cluster, bootstrap: str
) -> None:
    topic = "table"
    create(bootstrap, topic, COMPACTED)
    rows: list[tuple[bytes, bytes | None]] = [
        (b"key-%02d" % (i % KEYS), b"value %d of a row that repeats" % i) for i in range(600)
    ]
    rows.append((b"key-03", None))  # a tombstone
    rows += [(b"key-%02d" % (i % 3), b"late %d" % i) for i in range(60)]
    offsets = produce(bootstrap, topic, rows)
    assert offsets == list(range(len(rows)))
    written: list[Row] = [(o, k, v) for o, (k, v) in zip(offsets, rows, strict=True)]
    tp = TopicPartition(topic, 0)

    def cleaned_everywhere() -> bool:
        return all(len(replica_rows(cluster, b, tp)) < len(written) / 2 for b in cluster.brokers)

    wait_for(cleaned_everywhere, timeout=TIMEOUT_S, message=f"every replica of {tp} cleaned")
    want = latest(written)
    for broker_id in cluster.brokers:
        held = replica_rows(cluster, broker_id, tp)
        assert set(held) <= set(written), "a record changed or moved"
        assert latest(held) == want, f"broker {broker_id} lost the latest value of a key"
    dumped = minibroker("dump-log", str(cluster.partition_dir(1, tp)))
    assert dumped.returncode == 0, dumped.stderr
    assert "Cleaner: cleaned up to offset " in dumped.stdout
    assert " count: 0 " in dumped.stdout  # a placeholder for batches removed whole
    consumed = read_confluent(bootstrap, topic, len(written))
    assert set(consumed) <= set(written)
    assert latest(consumed) == want
    assert latest(read_aiokafka(bootstrap, topic, len(written))) == want
    listed = kcat(bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-Z", "-f", "%o\t%k\t%S\n")
    by_kcat = {}
    for line in listed.splitlines():
        offset, key, size = line.split("\t")
        by_kcat[key.encode()] = int(offset), int(size)
    assert by_kcat == {k: (o, -1 if v is None else len(v)) for k, (o, _, v) in want.items()}


def test_a_record_without_a_key_is_refused_on_a_compacted_topic(
    cluster: Cluster, bootstrap: str
) -> None:
    topic = "keyed-only"
    create(bootstrap, topic, COMPACTED)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    errors: list[confluent_kafka.KafkaError] = []

    def delivered(err: confluent_kafka.KafkaError | None, _: confluent_kafka.Message) -> None:
        if err is not None:
            errors.append(err)

    producer.produce(topic, b"no key", partition=0, on_delivery=delivered)
    assert producer.flush(TIMEOUT_S) == 0
    assert [e.name() for e in errors] == ["INVALID_RECORD"]
    listed = kcat(bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%k:%s\n")
    assert listed == ""


def test_a_restarted_broker_recovers_its_cleaned_segments(cluster: Cluster, bootstrap: str) -> None:
    topic = "recovered"
    create(bootstrap, topic, COMPACTED)
    rows: list[tuple[bytes, bytes | None]] = [
        (b"k%d" % (i % 7), b"value %d, long enough to fill a few segments" % i) for i in range(600)
    ]
    produce(bootstrap, topic, rows)
    tp = TopicPartition(topic, 0)
    victim = 2
    wait_for(
        lambda: len(replica_rows(cluster, victim, tp)) < 100,
        timeout=TIMEOUT_S,
        message=f"broker {victim}'s replica of {tp} cleaned",
    )
    cluster.brokers[victim].kill()
    directory = cluster.partition_dir(victim, tp)
    loaded = load_log(  # what recovery makes of the cleaned files after a kill
        directory, LogConfig(), recovery_point=0, log_start_offset=0, clean_shutdown=False
    )
    assert loaded.segments[-1].next_offset == len(rows)
    for segment in loaded.segments:
        segment.close()
    cluster.start(victim)
    cluster.wait_for_isr(tp, {1, 2, 3}, timeout=TIMEOUT_S)
    assert latest(replica_rows(cluster, victim, tp)) == latest(
        [(i, k, v) for i, (k, v) in enumerate(rows)]
    )


def read_confluent(bootstrap: str, topic: str, end: int) -> list[Row]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "enable.auto.commit": False}
    )
    try:
        consumer.assign(
            [confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)]
        )
        got: list[Row] = []

        def reached_end() -> bool:
            for message in consumer.consume(1000, timeout=0.5):
                assert message.error() is None, message.error()
                got.append((message.offset(), message.key(), message.value()))
            position = consumer.position([confluent_kafka.TopicPartition(topic, 0)])[0].offset
            return position >= end

        wait_for(reached_end, timeout=TIMEOUT_S, message=f"confluent-kafka at offset {end}")
        return got
    finally:
        consumer.close()


def read_aiokafka(bootstrap: str, topic: str, end: int) -> list[Row]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    async def read() -> list[Row]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = AioTopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list[Row] = []
            async with asyncio.timeout(TIMEOUT_S):
                while await consumer.position(tp) < end:
                    for batch in (await consumer.getmany(timeout_ms=500)).values():
                        got += [(r.offset, r.key, r.value) for r in batch]
            return got
        finally:
            await consumer.stop()

    return run(read())


def test_a_replica_rebuilt_from_nothing_copies_the_leaders_cleaned_log(
    cluster: Cluster, bootstrap: str
) -> None:
    """A follower whose log is gone fetches the leader's cleaned batches (fewer records than
    offsets, placeholders) from offset 0 and appends them: its log covers every offset and
    holds the latest record of every key."""
    topic = "rebuilt"
    create(bootstrap, topic, COMPACTED)
    rows: list[tuple[bytes, bytes | None]] = [
        (b"k%d" % (i % 11), b"value %d, long enough to fill a few segments" % i) for i in range(600)
    ]
    produce(bootstrap, topic, rows)
    tp = TopicPartition(topic, 0)
    wait_for(
        lambda: all(len(replica_rows(cluster, b, tp)) < 150 for b in cluster.brokers),
        timeout=TIMEOUT_S,
        message=f"every replica of {tp} cleaned",
    )
    state = cluster.state(tp)
    assert state is not None
    victim = next(b for b in cluster.brokers if b != state.leader)
    cluster.brokers[victim].kill()
    shutil.rmtree(cluster.partition_dir(victim, tp))
    cluster.start(victim)
    cluster.wait_for_isr(tp, {1, 2, 3}, timeout=TIMEOUT_S)
    want = latest([(i, k, v) for i, (k, v) in enumerate(rows)])
    wait_for(
        lambda: latest(replica_rows(cluster, victim, tp)) == want,
        timeout=TIMEOUT_S,
        message=f"broker {victim}'s rebuilt replica of {tp} holding every key's latest record",
    )
    assert len(replica_rows(cluster, victim, tp)) < len(rows)  # it copied cleaned batches
