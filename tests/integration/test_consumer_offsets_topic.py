"""Consumer groups of the Kafka listener keep their offsets and generations in the
compacted internal topic ``__consumer_offsets`` (docs/consumer-groups.md), through Kafka's
own clients (confluent-kafka, kafka-python) against real broker processes."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource
from kazoo.client import KazooClient

from proto.coordinator.group_records import (
    OffsetCommitKey,
    decode_key,
    decode_offset_commit_value,
)
from proto.coordinator.placement import partition_for
from proto.records.record_batch import decode_batch, scan_batches
from proto.topic_partition import OFFSETS_TOPIC, TopicPartition
from proto.zk import znodes
from proto.zk.sync_client import read_registered_broker
from tests.cluster import Cluster, running_cluster
from tests.helpers import wait_for
from tests.integration.test_kafka_listener import kafka_bootstrap
from tests.kafka_group_member import GroupMember

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import kafka

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

OVERRIDES = {
    "kafka.port": "0",
    "group.initial.rebalance.delay.ms": "200",
    "group.min.session.timeout.ms": "1000",
}
PARTITIONS = 5
"""``offsets.topic.num.partitions`` of the test clusters (tests/cluster.py)."""


def bootstrap_of(cluster: Cluster, ids: list[int] | None = None) -> str:
    """The Kafka listeners of ``ids`` (default: every live broker)."""
    if ids is None:
        return kafka_bootstrap(cluster)
    addresses = []
    for broker_id in ids:
        registered = read_registered_broker(cluster.zk, broker_id)
        assert registered is not None
        assert registered.kafka_endpoint is not None
        host, port = registered.kafka_endpoint
        addresses.append(f"{host}:{port}")
    return ",".join(addresses)


@pytest.fixture
def cluster(zk_client: KazooClient, zk_connect: str, tmp_path: Path) -> Iterator[Cluster]:
    with running_cluster(zk_client, zk_connect, tmp_path, overrides=OVERRIDES) as c:
        yield c


def produce_lines(bootstrap: str, topic: str, values: list[str], partitions: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=i % partitions)
        producer.poll(0)
    assert producer.flush(30) == 0


def consume_and_commit(bootstrap: str, group: str, topic: str, count: int) -> list[str]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    read: list[str] = []
    try:
        consumer.subscribe([topic])

        def got_all() -> bool:
            for message in consumer.consume(100, timeout=0.5):
                assert message.error() is None, message.error()
                value = message.value()
                assert value is not None
                read.append(value.decode())
            return len(read) >= count

        wait_for(got_all, timeout=60, message=f"{count} records for {group}")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return read


def kafka_python_committed(
    bootstrap: str, group: str, tps: list[TopicPartition]
) -> dict[int, int | None]:
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap.split(","),
        group_id=group,
        enable_auto_commit=False,
        request_timeout_ms=20000,
    )
    try:
        return {
            tp.partition: consumer.committed(kafka.TopicPartition(tp.topic, tp.partition))
            for tp in tps
        }
    finally:
        consumer.close()


def commit_records(
    cluster: Cluster, broker_id: int, partition: int
) -> list[tuple[str, str, int, int]]:
    """(group, topic, partition, offset) of every commit record in a replica's segments."""
    path = cluster.partition_dir(broker_id, TopicPartition(OFFSETS_TOPIC, partition))
    found = []
    for segment in sorted(path.glob("*.log")):
        data = segment.read_bytes()
        for scanned in scan_batches(data):
            for record in decode_batch(data, scanned.position).records:
                assert record.key is not None
                key = decode_key(record.key)
                if isinstance(key, OffsetCommitKey) and record.value is not None:
                    value = decode_offset_commit_value(record.value)
                    found.append((key.group, key.topic, key.partition, value.offset))
    return found


def _holds(
    cluster: Cluster, broker_id: int, partition: int, expected: set[tuple[str, str, int, int]]
) -> bool:
    return expected <= set(commit_records(cluster, broker_id, partition))


def coordinator_partition(group: str) -> TopicPartition:
    return TopicPartition(OFFSETS_TOPIC, partition_for(group, PARTITIONS))


def test_commits_are_replicated_records_of_the_offsets_topic_and_outlive_their_coordinator(
    cluster: Cluster,
) -> None:
    topic, group = "orders", "billing"
    cluster.create_topic(topic, {p: [1 + (p + r) % 3 for r in range(3)] for p in range(3)})
    bootstrap = bootstrap_of(cluster)
    produce_lines(bootstrap, topic, [f"v{i}" for i in range(300)], 3)
    assert sorted(consume_and_commit(bootstrap, group, topic, 300)) == sorted(
        f"v{i}" for i in range(300)
    )
    tps = [TopicPartition(topic, p) for p in range(3)]
    assert kafka_python_committed(bootstrap, group, tps) == {0: 100, 1: 100, 2: 100}

    # The topic was made on the first coordinator lookup, with Kafka's settings for it.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.list_topics(OFFSETS_TOPIC, timeout=20).topics[OFFSETS_TOPIC]
    assert len(described.partitions) == PARTITIONS
    assert all(len(p.replicas) == 3 for p in described.partitions.values())
    resource = ConfigResource(ConfigResource.Type.TOPIC, OFFSETS_TOPIC)
    configs = admin.describe_configs([resource])[resource].result(timeout=20)
    assert configs["cleanup.policy"].value == "compact"
    client = kafka.KafkaAdminClient(bootstrap_servers=bootstrap.split(","))
    try:
        [offsets_topic] = client.describe_topics([OFFSETS_TOPIC])
        assert offsets_topic["is_internal"] is True
    finally:
        client.close()

    # Every replica of the group's partition holds the commit records.
    tp = coordinator_partition(group)
    expected = {(group, topic, p, 100) for p in range(3)}
    for broker_id in (1, 2, 3):
        wait_for(
            functools.partial(_holds, cluster, broker_id, tp.partition, expected),
            timeout=20,
            message=f"the commits on broker {broker_id}",
        )

    # A client may not write the internal topic.
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    errors: list[confluent_kafka.KafkaError | None] = []
    producer.produce(OFFSETS_TOPIC, b"forged", key=b"k", on_delivery=lambda e, _: errors.append(e))
    producer.flush(30)
    assert errors
    assert errors[0] is not None
    assert errors[0].code() == confluent_kafka.KafkaError.TOPIC_EXCEPTION

    # The coordinator dies: the new leader of the partition loads it, and the group
    # resumes where it committed.
    state = cluster.state(tp)
    assert state is not None
    old = state.leader
    cluster.brokers[old].kill()
    survivors = [b for b in (1, 2, 3) if b != old]
    wait_for(
        lambda: (s := cluster.state(tp)) is not None and s.leader in survivors,
        timeout=30,
        message="a new coordinator",
    )
    bootstrap = bootstrap_of(cluster, survivors)
    assert kafka_python_committed(bootstrap, group, tps) == {0: 100, 1: 100, 2: 100}
    produce_lines(bootstrap, topic, [f"w{i}" for i in range(30)], 3)
    assert sorted(consume_and_commit(bootstrap, group, topic, 30)) == sorted(
        f"w{i}" for i in range(30)
    )
    assert kafka_python_committed(bootstrap, group, tps) == {0: 110, 1: 110, 2: 110}


def test_offsets_committed_in_zookeeper_before_are_read_until_the_group_commits_again(
    cluster: Cluster,
) -> None:
    topic, group = "legacy", "migrating"
    cluster.create_topic(topic, {0: [1, 2, 3]})
    bootstrap = bootstrap_of(cluster)
    produce_lines(bootstrap, topic, [f"v{i}" for i in range(20)], 1)
    tp = TopicPartition(topic, 0)
    # What an earlier minibroker (or minibroker's own ZooKeeper consumer) committed.
    cluster.zk.create(
        znodes.consumer_offset_path(group, tp),
        znodes.encode_consumer_offset(15, ""),
        makepath=True,
    )
    assert kafka_python_committed(bootstrap, group, [tp]) == {0: 15}
    assert consume_and_commit(bootstrap, group, topic, 5) == [f"v{i}" for i in range(15, 20)]
    assert kafka_python_committed(bootstrap, group, [tp]) == {0: 20}

    # Deleting the group deletes it from both: nothing comes back from ZooKeeper.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.delete_consumer_groups([group], request_timeout=20).values()
    future.result(timeout=30)
    assert kafka_python_committed(bootstrap, group, [tp]) == {0: None}
    assert cluster.zk.exists(f"/consumers/{group}") is None


def test_a_group_keeps_its_members_and_generation_when_its_coordinator_moves(
    cluster: Cluster,
) -> None:
    topic, group = "steady", "keepers"
    cluster.create_topic(topic, {p: [1 + (p + r) % 3 for r in range(3)] for p in range(4)})
    bootstrap = bootstrap_of(cluster)
    members = [GroupMember(bootstrap, group, topic) for _ in range(2)]
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def member_ids() -> set[str]:
        [future] = admin.describe_consumer_groups([group], request_timeout=10).values()
        described = future.result(timeout=20)
        if described.state != confluent_kafka.ConsumerGroupState.STABLE:
            return set()
        return {m.member_id for m in described.members}

    try:

        def split() -> bool:
            # Each member holds some of the 4 partitions: one member holding all 4 (the
            # first generation, before the other joined) is not yet the split group.
            held = [m.snapshot()[0] for m in members]
            return all(held) and sorted(p for h in held for p in h) == [0, 1, 2, 3]

        wait_for(
            lambda: split() and len(member_ids()) == 2,
            timeout=60,
            message="the group to split 4 partitions between its 2 members",
        )
        before = member_ids()
        assert len(before) == 2
        tp = coordinator_partition(group)
        state = cluster.state(tp)
        assert state is not None
        cluster.brokers[state.leader].kill()
        survivors = [b for b in (1, 2, 3) if b != state.leader]
        admin = AdminClient({"bootstrap.servers": bootstrap_of(cluster, survivors)})

        def same_members() -> bool:
            try:
                return member_ids() == before
            except confluent_kafka.KafkaException:
                return False

        wait_for(same_members, timeout=60, message="the same members at the new coordinator")
    finally:
        for member in members:
            member.stop()
