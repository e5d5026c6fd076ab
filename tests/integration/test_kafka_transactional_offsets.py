"""Offsets committed inside a transaction (KIP-98's consume-transform-produce loop,
docs/transactions.md) through Kafka's own clients against real broker processes:
``send_offsets_to_transaction`` with confluent-kafka, aiokafka and kafka-python, the offsets
applied only when the transaction commits, and kept pending through the loss of the group
coordinator or of the transaction coordinator. Every client call has its own deadline."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from pathlib import Path

import aiokafka
import confluent_kafka
import pytest
from kazoo.client import KazooClient

from proto.coordinator.placement import partition_for
from proto.topic_partition import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, TopicPartition
from tests.cluster import Cluster, running_cluster
from tests.helpers import wait_for
from tests.integration.test_consumer_offsets_topic import (
    PARTITIONS,
    bootstrap_of,
    kafka_python_committed,
    produce_lines,
)
from tests.integration.test_kafka_listener import kafka_bootstrap
from tests.integration.test_kafka_transactions import read_all

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

OVERRIDES = {
    "kafka.port": "0",
    "group.initial.rebalance.delay.ms": "200",
    "group.min.session.timeout.ms": "1000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


@pytest.fixture
def cluster(zk_client: KazooClient, zk_connect: str, tmp_path: Path) -> Iterator[Cluster]:
    with running_cluster(zk_client, zk_connect, tmp_path, overrides=OVERRIDES) as c:
        yield c


def wait_for_committed(
    bootstrap: str, group: str, expected: dict[TopicPartition, int | None]
) -> None:
    """Poll the group's committed offsets (kafka-python, which does not ask for stable
    offsets) until they are ``expected``: EndTxn is answered once the commit is decided,
    and the marker that applies the offsets reaches the group's partition after it, later
    still when that partition's leader just moved."""
    tps = list(expected)
    wanted = {tp.partition: offset for tp, offset in expected.items()}
    wait_for(
        lambda: kafka_python_committed(bootstrap, group, tps) == wanted,
        timeout=60,
        message=f"the committed offsets of {group} to be {wanted}",
    )


def transform_in_transactions(
    bootstrap: str, group: str, source: str, sink: str, count: int, per_txn: int
) -> None:
    """confluent-kafka's consume-transform-produce loop: each batch read from ``source`` is
    written upper-cased to ``sink`` and its offsets committed in the same transaction."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "session.timeout.ms": 6000,
        }
    )
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"{group}-txn"}
    )
    done = 0
    try:
        consumer.subscribe([source])
        producer.init_transactions(60)

        def one_transaction() -> bool:
            nonlocal done
            messages = [m for m in consumer.consume(per_txn, timeout=1) if m.error() is None]
            if not messages:
                return done >= count
            producer.begin_transaction()
            for message in messages:
                value = message.value()
                assert value is not None
                producer.produce(sink, value.upper(), partition=0)
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
            )
            producer.commit_transaction(60)
            done += len(messages)
            return done >= count

        wait_for(one_transaction, timeout=120, interval=0, message=f"{count} transformed")
    finally:
        consumer.close()
    assert done == count


def test_confluent_kafka_commits_a_consumers_offsets_with_its_transaction(
    cluster: Cluster,
) -> None:
    source, sink, group = "raw", "cooked", "cooks"
    cluster.create_topic(source, {0: [1, 2, 3], 1: [2, 3, 1]})
    cluster.create_topic(sink, {0: [3, 1, 2]})
    bootstrap = kafka_bootstrap(cluster)
    produce_lines(bootstrap, source, [f"v{i}" for i in range(40)], 2)

    transform_in_transactions(bootstrap, group, source, sink, 40, 7)
    tps = [TopicPartition(source, p) for p in range(2)]
    wait_for_committed(bootstrap, group, dict.fromkeys(tps, 20))
    assert sorted(read_all(bootstrap, sink, "read_committed", 40)) == sorted(
        f"V{i}" for i in range(40)
    )

    # An aborted transaction's offsets are never applied; while it is open they are
    # pending, and a read of the committed offsets sees the last committed ones.
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "rewinder"}
    )
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.produce(sink, b"never", partition=0)
        producer.send_offsets_to_transaction(
            [confluent_kafka.TopicPartition(source, 0, 3)], consumer.consumer_group_metadata(), 30
        )
        assert kafka_python_committed(bootstrap, group, tps) == {0: 20, 1: 20}
        producer.abort_transaction(60)
        # The next transaction of the id starts only once the abort's markers are all
        # written: when its offsets show, the aborted ones had their chance to.
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [confluent_kafka.TopicPartition(source, 1, 21)], consumer.consumer_group_metadata(), 30
        )
        producer.commit_transaction(60)
    finally:
        consumer.close()
    wait_for_committed(bootstrap, group, {tps[0]: 20, tps[1]: 21})


def test_aiokafka_and_kafka_python_send_offsets_to_their_transactions(cluster: Cluster) -> None:
    topic = "tasks"
    cluster.create_topic(topic, {0: [1, 2, 3]})
    bootstrap = kafka_bootstrap(cluster)
    tp = aiokafka.TopicPartition(topic, 0)

    async def aiokafka_side() -> tuple[int | None, int | None]:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id="aio-offsets", request_timeout_ms=15000
        )
        await asyncio.wait_for(producer.start(), 60)
        try:
            async with asyncio.timeout(90):
                async with producer.transaction():
                    await producer.send_and_wait(topic, b"t0", partition=0)
                    await producer.send_offsets_to_transaction({tp: 7}, "aio-workers")
                await producer.begin_transaction()
                await producer.send_offsets_to_transaction({tp: 99}, "aio-workers")
                await producer.abort_transaction()
                await producer.begin_transaction()
                await producer.send_offsets_to_transaction({tp: 11}, "kp-workers")
                await producer.commit_transaction()
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id="aio-workers", enable_auto_commit=False
        )
        await asyncio.wait_for(consumer.start(), 60)
        try:
            async with asyncio.timeout(60):
                first = await consumer.committed(tp)
            other = aiokafka.AIOKafkaConsumer(
                bootstrap_servers=bootstrap, group_id="kp-workers", enable_auto_commit=False
            )
            await asyncio.wait_for(other.start(), 60)
            try:
                # The last commit's marker may still be on its way to the group's partition.
                second = None
                async with asyncio.timeout(60):
                    for _ in range(600):
                        second = await other.committed(tp)
                        if second is not None:
                            break
                        await asyncio.sleep(0.1)
            finally:
                await other.stop()
        finally:
            await consumer.stop()
        return first, second

    assert asyncio.run(aiokafka_side()) == (7, 11)

    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id="kp-offsets", request_timeout_ms=20000
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"kp", partition=0)
        producer.send_offsets_to_transaction(
            {kafka.TopicPartition(topic, 0): kafka.OffsetAndMetadata(2, "", -1)}, "kp-workers"
        )
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            {kafka.TopicPartition(topic, 0): kafka.OffsetAndMetadata(50, "", -1)}, "kp-workers"
        )
        producer.abort_transaction()
    finally:
        producer.close(timeout=10)
    wait_for_committed(bootstrap, "kp-workers", {TopicPartition(topic, 0): 2})


def leader_of(cluster: Cluster, tp: TopicPartition) -> int:
    state = cluster.state(tp)
    assert state is not None, f"no state for {tp}"
    return state.leader


def wait_for_new_leader(cluster: Cluster, tp: TopicPartition, old: int) -> None:
    wait_for(
        lambda: (s := cluster.state(tp)) is not None and s.leader not in (old, -1),
        timeout=30,
        message=f"a new leader of {tp}",
    )


def test_pending_offsets_outlive_their_group_coordinator(cluster: Cluster) -> None:
    """The transaction's offsets are written to the group's partition before the commit;
    its coordinator is SIGKILLed; the partition's new leader loads them pending, and the
    commit marker it then writes applies them."""
    topic, group = "jobs", "job-runners"
    cluster.create_topic(topic, {0: [1, 2, 3]})
    bootstrap = kafka_bootstrap(cluster)
    offsets_tp = TopicPartition(OFFSETS_TOPIC, partition_for(group, PARTITIONS))
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "job-txn"}
    )
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.produce(topic, b"j0", partition=0)
        producer.send_offsets_to_transaction(
            [confluent_kafka.TopicPartition(topic, 0, 42)], consumer.consumer_group_metadata(), 30
        )
        old = leader_of(cluster, offsets_tp)
        cluster.brokers[old].kill()
        wait_for_new_leader(cluster, offsets_tp, old)
        producer.commit_transaction(90)
    finally:
        consumer.close()
    survivors = bootstrap_of(cluster, [b for b in (1, 2, 3) if b != old])
    wait_for_committed(survivors, group, {TopicPartition(topic, 0): 42})
    assert read_all(survivors, topic, "read_committed", 1) == ["j0"]


def test_a_transaction_survives_its_coordinator_sigkilled_mid_transaction(
    cluster: Cluster,
) -> None:
    """The transaction coordinator is SIGKILLed between the writes and the commit: the
    new coordinator loads the transaction (Ongoing, its partitions) from
    ``__transaction_state`` and the producer's commit completes there; a second
    transaction whose producer dies with the coordinator is aborted at its timeout by the
    new coordinator, so read_committed consumers are not held back by it."""
    topic, group = "payments", "payers"
    cluster.create_topic(topic, {0: [1, 2, 3], 1: [2, 3, 1]})
    bootstrap = kafka_bootstrap(cluster)
    txn_tp = TopicPartition(TRANSACTION_STATE_TOPIC, partition_for("pay-txn", PARTITIONS))
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "pay-txn"}
    )
    orphan = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": "orphan-txn",
            "transaction.timeout.ms": 4000,
        }
    )
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        producer.init_transactions(60)
        orphan.init_transactions(60)
        producer.begin_transaction()
        for i in range(6):
            producer.produce(topic, f"p{i}".encode(), partition=i % 2)
        producer.send_offsets_to_transaction(
            [confluent_kafka.TopicPartition(topic, 1, 5)], consumer.consumer_group_metadata(), 30
        )
        assert producer.flush(30) == 0
        orphan.begin_transaction()
        orphan.produce(topic, b"orphaned", partition=0)
        assert orphan.flush(30) == 0
        old = leader_of(cluster, txn_tp)
        cluster.brokers[old].kill()
        wait_for_new_leader(cluster, txn_tp, old)
        producer.commit_transaction(90)
    finally:
        consumer.close()
    # The orphan never ends its transaction: its timeout passes, the new coordinator aborts
    # it, and what is written after it on partition 0 becomes readable.
    survivors = bootstrap_of(cluster, [b for b in (1, 2, 3) if b != old])
    produce_lines(survivors, topic, ["after"], 1)
    read = read_all(survivors, topic, "read_committed", 7)
    assert sorted(read) == sorted([f"p{i}" for i in range(6)] + ["after"])
    wait_for_committed(survivors, group, {TopicPartition(topic, 1): 5})
    del orphan
