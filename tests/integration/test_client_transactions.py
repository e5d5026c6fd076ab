"""minibroker's own transactional producer over gRPC (client/transaction_manager.py,
docs/transactions.md) against real broker processes: commit, abort, offsets sent to a
transaction, a zombie fenced by a second instance, and ``minibroker produce
--transactional-id``; read back by minibroker's read_committed consumer and by
confluent-kafka's through the Kafka listener (one coordinator behind both doors)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from client.metadata import BrokerConnections, ClientError
from client.producer import Producer
from client.producer_config import ProducerConfig
from proto.errors import MinibrokerError
from proto.topic_partition import TopicPartition
from tests.cluster import Cluster, running_cluster
from tests.helpers import minibroker
from tests.integration.test_group_admin import grpc_bootstrap
from tests.integration.test_kafka_listener import kafka_bootstrap
from tests.integration.test_kafka_transactional_offsets import wait_for_committed
from tests.integration.test_kafka_transactions import read_all

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture
def cluster(zk_client: KazooClient, zk_connect: str, tmp_path: Path) -> Iterator[Cluster]:
    with running_cluster(zk_client, zk_connect, tmp_path, overrides={"kafka.port": "0"}) as c:
        yield c


def consume(cluster: Cluster, topic: str, isolation: str) -> list[str]:
    done = minibroker(
        "consume", topic, "--bootstrap-server", grpc_bootstrap(cluster), "--from-beginning",
        "--isolation-level", isolation, "--timeout-ms", "3000", timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_transactional_producer_commits_aborts_sends_offsets_and_is_fenced(
    cluster: Cluster,
) -> None:
    topic = "txn-orders"
    cluster.create_topic(topic, {0: [1, 2, 3], 1: [2, 3, 1]})

    async def scenario() -> None:
        async with BrokerConnections.from_bootstrap(grpc_bootstrap(cluster)) as conns:
            config = ProducerConfig(transactional_id="orders-app", max_block_ms=30000)
            producer = Producer(conns, config)
            async with asyncio.timeout(120):
                await producer.init_transactions()
                producer.begin_transaction()
                for i in range(6):
                    await producer.send(topic, f"c{i}".encode(), partition=i % 2)
                await producer.send_offsets_to_transaction(
                    {TopicPartition(topic, 0): 4}, "order-readers"
                )
                await producer.commit_transaction()
                producer.begin_transaction()
                await producer.send(topic, b"aborted", partition=0)
                await producer.send_offsets_to_transaction(
                    {TopicPartition(topic, 0): 99}, "order-readers"
                )
                await producer.abort_transaction()

                # A second instance fences the first.
                successor = Producer(conns, config)
                await successor.init_transactions()
                producer.begin_transaction()
                # Adding the partition to its transaction is refused: the send raises,
                # and the producer is fenced for good.
                with pytest.raises(ClientError, match="fenced"):
                    await producer.send(topic, b"zombie", partition=1)
                with pytest.raises(ClientError, match="fenced"):
                    await producer.commit_transaction()
                await producer.close()
                successor.begin_transaction()
                await successor.send(topic, b"s0", partition=1)
                await successor.commit_transaction()
                await successor.close()

    asyncio.run(scenario())
    committed = sorted([f"c{i}" for i in range(6)] + ["s0"])
    assert sorted(consume(cluster, topic, "read_committed")) == committed
    everything = consume(cluster, topic, "read_uncommitted")
    assert "aborted" in everything
    # Kafka's read_committed consumer, through the other door, sees the same.
    assert sorted(read_all(kafka_bootstrap(cluster), topic, "read_committed", 7)) == committed
    wait_for_committed(kafka_bootstrap(cluster), "order-readers", {TopicPartition(topic, 0): 4})


def test_produce_with_a_transactional_id_commits_every_n_records(cluster: Cluster) -> None:
    topic = "txn-lines"
    cluster.create_topic(topic, {0: [1, 2, 3]})
    lines = "".join(f"l{i}\n" for i in range(25))
    done = minibroker(
        "produce", topic, "--bootstrap-server", grpc_bootstrap(cluster),
        "--transactional-id", "lines-app", "--transaction-records", "10",
        input_text=lines, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert consume(cluster, topic, "read_committed") == [f"l{i}" for i in range(25)]
    refused = minibroker(
        "produce", topic, "--bootstrap-server", grpc_bootstrap(cluster),
        "--transaction-records", "10", input_text="x\n", timeout=60,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "--transaction-records needs --transactional-id" in refused.stderr


@pytest.mark.parametrize("bulk", [False, True])
def test_perf_produce_counts_its_committed_transactions(cluster: Cluster, bulk: bool) -> None:
    topic = "txn-perf"
    cluster.create_topic(topic, {0: [1, 2, 3], 1: [2, 3, 1]})
    done = minibroker(
        "perf", "produce", topic, "--bootstrap-server", grpc_bootstrap(cluster),
        "--num-records", "450", "--record-size", "20", "--payload", "json",
        "--transactional-id", "perf-app",
        "--transaction-records", "100", "--json", *(["--bulk"] if bulk else []),
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["records"], result["transactions"]) == (450, 5)
    assert len(consume(cluster, topic, "read_committed")) == 450


def test_a_failed_record_makes_the_transaction_abortable_and_the_abort_goes_on(
    cluster: Cluster,
) -> None:
    """A record that cannot be delivered (its partition's only replica is down, past
    ``delivery_timeout_ms``) fails its transaction: the commit raises; the abort, once
    the partition is back for its marker, aborts the rest, and the next transaction
    commits."""
    cluster.create_topic("txn-doomed", {0: [3]})
    cluster.create_topic("txn-safe", {0: [1, 2]})
    cluster.wait_for_leader(TopicPartition("txn-doomed", 0))

    async def scenario() -> None:
        async with BrokerConnections.from_bootstrap(grpc_bootstrap(cluster)) as conns:
            config = ProducerConfig(
                transactional_id="doomed-app",
                max_block_ms=30000,
                delivery_timeout_ms=3000,
                request_timeout_ms=1000,
            )
            async with asyncio.timeout(120), Producer(conns, config) as producer:
                await producer.init_transactions()
                producer.begin_transaction()
                await producer.send("txn-safe", b"lost-with-its-transaction", partition=0)
                cluster.brokers[3].kill()
                doomed = await producer.send("txn-doomed", b"never", partition=0)
                with pytest.raises((ClientError, MinibrokerError)):  # no leader, then expired
                    await doomed
                with pytest.raises(ClientError, match="abort"):
                    await producer.commit_transaction()
                # The abort's markers must reach every partition of the transaction, the
                # doomed one too (as in Kafka): it completes once that replica is back.
                await asyncio.to_thread(cluster.brokers[3].start, cluster.zk)
                await producer.abort_transaction()
                producer.begin_transaction()
                await producer.send("txn-safe", b"kept", partition=0)
                await producer.commit_transaction()

    asyncio.run(scenario())
    assert consume(cluster, "txn-safe", "read_committed") == ["kept"]
