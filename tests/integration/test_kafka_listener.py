"""The Kafka listener against real broker processes, through Kafka's own clients, unchanged:
kcat (librdkafka, from Debian), aiokafka and confluent-kafka."""

from __future__ import annotations

import asyncio
import functools
import io
import json
import socket
import struct
import subprocess
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import confluent_kafka
import pytest
import uvloop
from kazoo.client import KazooClient
from kio.index import load_response_schema
from kio.schema.metadata.v1 import request as metadata_v1
from kio.serial import entity_reader, entity_writer

from broker.kafka_listener.messages import build
from client.consumer import Consumer, ConsumerConfig
from client.metadata import BrokerConnections
from client.producer import Producer, ProducerConfig
from proto.topic_partition import TopicPartition
from proto.zk import znodes
from proto.zk.sync_client import read_registered_broker
from tests.cluster import Cluster, running_cluster
from tests.helpers import (
    assert_keyed_lines_read_in_order,
    free_port_run,
    minibroker,
    recv_exactly,
    wait_for,
)
from tests.kafka_group_member import GroupMember

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

KAFKA_PORT_FREE = {"kafka.port": "0"}
T = TypeVar("T")


def kafka_bootstrap(cluster: Cluster) -> str:
    """Every live broker's Kafka listener, as its registration advertises it, once each
    plaintext one's Metadata names every live broker.

    A broker's Metadata lists the brokers of its last UpdateMetadata (as Kafka's does), and
    right after start-up, under load, that can still be fewer than are registered. A client
    told of no broker 1 waits for it: librdkafka's admin request for broker 1's configs
    waited out its 30 s timeout in a CI run (it refreshes metadata on no such wait)."""
    endpoints: dict[int, tuple[str, int]] = {}
    for broker_id in cluster.live():
        registered = read_registered_broker(cluster.zk, broker_id)
        endpoint = None if registered is None else registered.kafka_endpoint
        assert endpoint is not None, f"broker {broker_id} registered no Kafka listener"
        endpoints[broker_id] = endpoint
    for broker_id, (host, port) in endpoints.items():
        if _kafka_plaintext(cluster, broker_id):
            address = f"{host}:{port}"
            wait_for(
                functools.partial(_names_brokers, address, set(endpoints)),
                timeout=30,
                message=f"broker {broker_id}'s Metadata naming brokers {sorted(endpoints)}",
            )
    return ",".join(f"{host}:{port}" for host, port in endpoints.values())


def _kafka_plaintext(cluster: Cluster, broker_id: int) -> bool:
    protocols = cluster.brokers[broker_id].spec.overrides.get("listener.security.protocol.map", "")
    return not any(
        entry.strip().startswith("KAFKA:") and entry.strip() != "KAFKA:PLAINTEXT"
        for entry in protocols.split(",")
    )


def _names_brokers(address: str, brokers: set[int]) -> bool:
    """A Metadata v1 request for no topics names every one of ``brokers``."""
    answer = kafka_call(address, 3, 1, metadata_v1.MetadataRequest(topics=()))
    return {int(b.node_id) for b in answer.brokers} >= brokers


def run(coro: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def kcat(bootstrap: str, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["kcat", "-b", bootstrap, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"kcat {' '.join(args)} failed: {done.stderr}"
    return done.stdout


def test_kcat_lists_produces_and_consumes_keyed_lines(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path, overrides=KAFKA_PORT_FREE) as cluster:
        cluster.create_topic("lines", {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
        bootstrap = kafka_bootstrap(cluster)
        listing = json.loads(kcat(bootstrap, "-L", "-J", "-t", "lines"))
        assert sorted(b["id"] for b in listing["brokers"]) == [1, 2, 3]
        (topic,) = listing["topics"]
        assert sorted(p["partition"] for p in topic["partitions"]) == [0, 1, 2]
        lines = [f"key-{i % 97}:value-{i}" for i in range(10_000)]
        produce = ["-P", "-t", "lines", "-K", ":", "-X", "acks=all"]
        kcat(bootstrap, *produce, stdin="\n".join(lines) + "\n")
        consume = ["-C", "-t", "lines", "-o", "beginning", "-e", "-q", "-K", ":", "-f", "%k:%s\n"]
        out = kcat(bootstrap, *consume)
        assert_keyed_lines_read_in_order(lines, out.splitlines())


def test_the_cli_pointed_at_a_kafka_port_says_it_is_a_kafka_listener(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    """minibroker's commands speak gRPC; given a Kafka port, saying only "(unavailable)"
    would read as a cluster that is down: they name the Kafka listener instead."""
    with running_cluster(
        zk_client, zk_connect, tmp_path, broker_ids=(1,), overrides=KAFKA_PORT_FREE
    ) as cluster:
        kafka = kafka_bootstrap(cluster)
        done = minibroker("topics", "list", "--bootstrap-server", kafka, timeout=60)
        assert done.returncode == 1, done
        assert f"{kafka} is a Kafka listener" in done.stderr, done.stderr
        assert "gRPC port" in done.stderr
        grpc_side = minibroker("topics", "list", "--bootstrap-server", cluster.brokers[1].address)
        assert grpc_side.returncode == 0, grpc_side.stderr


Record = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]
"""key, value, headers, timestamp (ms)."""


def sample_records(tag: str, count: int) -> list[Record]:
    """Keys, values and headers of all shapes: null key, null value, empty, binary, a header
    with a null value, several headers."""
    base_ms = 1_700_000_000_000
    out: list[Record] = []
    for i in range(count):
        key = None if i % 7 == 0 else f"{tag}-key-{i}".encode()
        value = None if i % 11 == 0 else bytes(range(i % 256)) + f"{tag}-{i}".encode()
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if i % 3 == 1:
            headers = (("trace", f"t{i}".encode()), ("empty", b""))
        elif i % 3 == 2:
            headers = (("nothing", None),)
        out.append((key, value, headers, base_ms + i))
    return out


def confluent_headers(record: confluent_kafka.Message) -> tuple[tuple[str, bytes | None], ...]:
    headers = record.headers() or []
    assert isinstance(headers, list)
    return tuple(
        (name, value.encode() if isinstance(value, str) else value) for name, value in headers
    )


def test_records_cross_between_grpc_and_kafka_byte_for_byte(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path, overrides=KAFKA_PORT_FREE) as cluster:
        cluster.create_topic("cross", {0: [1, 2, 3], 1: [2, 3, 1]})
        bootstrap = kafka_bootstrap(cluster)
        grpc_bootstrap = ",".join(b.address for b in cluster.brokers.values())
        via_grpc, via_kafka = sample_records("grpc", 500), sample_records("kafka", 500)

        async def produce_over_grpc() -> None:
            async with (
                BrokerConnections.from_bootstrap(grpc_bootstrap) as connections,
                Producer(connections, ProducerConfig(acks=-1)) as producer,
            ):
                futures = [
                    await producer.send("cross", v, key=k, partition=0, headers=h, timestamp_ms=t)
                    for k, v, h, t in via_grpc
                ]
                await asyncio.gather(*futures)

        run(produce_over_grpc())

        producer = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True}
        )
        failures: list[str] = []

        def delivered(err: confluent_kafka.KafkaError | None, _: confluent_kafka.Message) -> None:
            if err is not None:
                failures.append(str(err))

        for k, v, h, t in via_kafka:
            producer.produce(
                "cross", v, k, partition=1, headers=list(h), timestamp=t, on_delivery=delivered
            )
        assert producer.flush(30) == 0
        assert failures == []

        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
        )
        try:
            consumer.assign([confluent_kafka.TopicPartition("cross", 0, 0)])
            read: list[Record] = []
            deadline = time.monotonic() + 30
            while len(read) < len(via_grpc) and time.monotonic() < deadline:
                for m in consumer.consume(500, timeout=1):
                    assert m.error() is None, m.error()
                    read.append((m.key(), m.value(), confluent_headers(m), m.timestamp()[1]))
            assert read == via_grpc
        finally:
            consumer.close()

        async def consume_over_grpc() -> list[Record]:
            async with BrokerConnections.from_bootstrap(grpc_bootstrap) as connections:
                consumer = Consumer(connections, ConsumerConfig(auto_offset_reset="earliest"))
                async with consumer:
                    consumer.assign([TopicPartition("cross", 1)])
                    out: list[Record] = []
                    async with asyncio.timeout(30):
                        while len(out) < len(via_kafka):
                            for r in await consumer.poll(timeout_ms=500):
                                out.append((r.key, r.value, tuple(r.headers), r.timestamp))
                    return out

        assert run(consume_over_grpc()) == via_kafka


def test_aiokafka_idempotent_producer_survives_a_leader_kill_exactly_once(
    cluster_dir: Path,
) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    base = free_port_run(7)
    data = ["--data-dir", str(cluster_dir)]
    up = minibroker(
        "cluster", "up", *data, "--base-port", str(base), "--zookeeper-port", str(base + 3),
        "--kafka-base-port", str(base + 4), "--override", "min.insync.replicas=2",
    )  # fmt: skip
    assert up.returncode == 0, up.stderr
    bootstrap = f"127.0.0.1:{base + 4},127.0.0.1:{base + 5},127.0.0.1:{base + 6}"
    topic = "survive"
    create = minibroker(
        "topics", "create", topic, "--partitions", "3", "--replication-factor", "3",
        *data,
    )  # fmt: skip
    assert create.returncode == 0, create.stderr
    listing = json.loads(kcat(bootstrap, "-L", "-J", "-t", topic))
    (described,) = listing["topics"]
    victim = next(p["leader"] for p in described["partitions"] if p["partition"] == 0)
    acked: dict[bytes, tuple[int, int]] = {}

    async def produce() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            enable_idempotence=True,
            acks="all",
            request_timeout_ms=60_000,
            linger_ms=5,
        )
        await producer.start()
        try:
            sent = 0
            for round_ in range(30):
                if round_ == 10:
                    killed = await asyncio.to_thread(
                        minibroker, "cluster", "kill", str(victim), *data
                    )
                    assert killed.returncode == 0, killed.stderr
                futures = {}
                for _ in range(200):
                    value = b"v%06d" % sent
                    futures[value] = await producer.send(topic, value, key=b"k%d" % (sent % 9))
                    sent += 1
                for value, future in futures.items():
                    meta = await future
                    acked[value] = (meta.partition, meta.offset)
        finally:
            await producer.stop()

    async def consume() -> list[tuple[int, int, bytes]]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            tps = [AioTopicPartition(topic, p) for p in range(3)]
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps)
            out: list[tuple[int, int, bytes]] = []

            async def behind() -> bool:
                return any([await consumer.position(tp) < ends[tp] for tp in tps])

            async with asyncio.timeout(60):
                while await behind():
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        out += [(r.partition, r.offset, r.value) for r in records]
            return out
        finally:
            await consumer.stop()

    run(produce())
    assert len(acked) == 6000
    read = run(consume())
    values = [value for _, _, value in read]
    assert len(values) == len(set(values)), "a record was written twice"
    where = {value: (partition, offset) for partition, offset, value in read}
    assert {v: where.get(v) for v in acked} == acked, "an acknowledged record is missing"


def produce_lines(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=i % 6)
        producer.poll(0)
    assert producer.flush(30) == 0


def test_confluent_kafka_group_splits_rebalances_on_a_crash_and_resumes_from_commits(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    overrides = {
        **KAFKA_PORT_FREE,
        "group.initial.rebalance.delay.ms": "300",
        "group.min.session.timeout.ms": "1000",
    }
    with running_cluster(zk_client, zk_connect, tmp_path, overrides=overrides) as cluster:
        topic, group = "six", "readers"
        cluster.create_topic(topic, {p: [1 + (p + r) % 3 for r in range(3)] for p in range(6)})
        bootstrap = kafka_bootstrap(cluster)
        first = [f"first-{i}" for i in range(3000)]
        produce_lines(bootstrap, topic, first)
        members = [GroupMember(bootstrap, group, topic) for _ in range(3)]
        try:
            # Three members split the six partitions, two each, and read everything once.
            def split() -> bool:
                assigned = [m.snapshot()[0] for m in members]
                return sorted(p for a in assigned for p in a) == list(range(6)) and all(
                    len(a) == 2 for a in assigned
                )

            wait_for(split, timeout=60, message="the group to split 6 partitions 2-2-2")

            def values_read() -> list[str]:
                return [v for m in members for _, _, v in m.snapshot()[1]]

            wait_for(lambda: len(values_read()) >= len(first), timeout=60, message="first records")
            assert sorted(values_read()) == sorted(first)

            # A member crashes: the other two take its partitions after its session expires,
            # and start on them where it committed.
            victim, survivors = members[0], members[1:]
            lost = victim.snapshot()[0]
            victim.kill()
            committed = run(committed_offsets(cluster, group, topic))

            def taken_over() -> bool:
                assigned = [m.snapshot()[0] for m in survivors]
                return sorted(p for a in assigned for p in a) == list(range(6))

            wait_for(taken_over, timeout=60, message="the survivors to take all 6 partitions")
            before = {id(m): len(m.snapshot()[1]) for m in survivors}
            second = [f"second-{i}" for i in range(600)]
            produce_lines(bootstrap, topic, second)

            def new_records() -> list[tuple[int, int, str]]:
                return [r for m in survivors for r in m.snapshot()[1][before[id(m)] :]]

            wait_for(
                lambda: {v for _, _, v in new_records()} >= set(second),
                timeout=60,
                message="the second records",
            )
            for partition in lost:
                offsets = [o for p, o, _ in new_records() if p == partition]
                assert min(offsets) == committed[partition], (
                    f"partition {partition} resumed at {min(offsets)}, "
                    f"committed {committed[partition]}"
                )
        finally:
            for member in members:
                member.stop()

        # A new member of the same group starts at the group's committed offsets: it reads
        # only what was produced after everyone stopped.
        third = [f"third-{i}" for i in range(60)]
        produce_lines(bootstrap, topic, third)
        late = GroupMember(bootstrap, group, topic)
        try:
            wait_for(
                lambda: len(late.snapshot()[1]) >= len(third), timeout=60, message="the late reader"
            )
            assert sorted(v for _, _, v in late.snapshot()[1]) == sorted(third)
        finally:
            late.stop()


async def committed_offsets(cluster: Cluster, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets, as Kafka's clients read them (OffsetFetch, answered
    from ``__consumer_offsets``)."""

    def fetch() -> dict[int, int]:
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": kafka_bootstrap(cluster), "group.id": group}
        )
        try:
            asked = [confluent_kafka.TopicPartition(topic, p) for p in range(6)]
            return {tp.partition: tp.offset for tp in consumer.committed(asked, timeout=30)}
        finally:
            consumer.close()

    return await asyncio.to_thread(fetch)


def test_admin_client_creates_describes_and_deletes_topics_through_zookeeper(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._config import ConfigResource
    from confluent_kafka.cimpl import NewTopic

    with running_cluster(zk_client, zk_connect, tmp_path, overrides=KAFKA_PORT_FREE) as cluster:
        cluster.wait_for_controller()
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap(cluster)})

        def brokers_know_the_controller(client: AdminClient = admin) -> bool:
            # CreateTopics goes to the controller that Metadata names; before a broker's first
            # UpdateMetadata its Metadata names none (as Kafka's does), and under load that
            # can outlast the admin client's timeout.
            metadata = client.list_topics(timeout=5)
            return metadata.controller_id >= 0 and len(metadata.brokers) == 3

        wait_for(brokers_know_the_controller, timeout=30, message="metadata with a controller")
        wanted = [
            NewTopic("made", 4, 3, config={"min.insync.replicas": "2"}),
            NewTopic("too-wide", 1, 9),
            NewTopic("odd-config", 1, 1, config={"no.such.property": "x"}),
            NewTopic("bad/name", 1, 1),
        ]
        outcomes = {}
        for name, future in admin.create_topics(wanted, operation_timeout=20).items():
            try:
                future.result()
                outcomes[name] = "created"
            except confluent_kafka.KafkaException as err:
                outcomes[name] = err.args[0].name()
        assert outcomes == {
            "made": "created",
            "too-wide": "INVALID_REPLICATION_FACTOR",
            "odd-config": "INVALID_CONFIG",
            "bad/name": "TOPIC_EXCEPTION",
        }
        # As Kafka 2.x's brokers do: the config and the assignment are in ZooKeeper, and
        # the controller made leaders (create_topics waited for them).
        assignment = znodes.decode_topic_assignment(zk_client.get("/brokers/topics/made")[0])
        assert sorted(assignment) == [0, 1, 2, 3]
        assert all(len(set(r)) == 3 for r in assignment.values())
        config = znodes.decode_topic_config(zk_client.get("/config/topics/made")[0])
        assert config == {"min.insync.replicas": "2"}
        for p in range(4):
            assert cluster.state(TopicPartition("made", p)) is not None

        (described,) = admin.describe_configs([ConfigResource("topic", "made")]).values()
        entries = described.result()
        assert entries["min.insync.replicas"].value == "2"
        assert entries["min.insync.replicas"].source == 1  # DYNAMIC_TOPIC_CONFIG
        assert entries["retention.ms"].source == 5  # DEFAULT_CONFIG

        deleted = admin.delete_topics(["made", "never-was"], operation_timeout=30)
        deleted["made"].result()
        with pytest.raises(confluent_kafka.KafkaException, match="UNKNOWN_TOPIC"):
            deleted["never-was"].result()
        wait_for(
            lambda: zk_client.exists("/brokers/topics/made") is None,
            timeout=30,
            message="the controller to delete the topic",
        )
        del admin  # its threads stop before the brokers do


def kafka_call(address: str, api_key: int, version: int, body: Any) -> Any:
    """One request over a fresh connection, as a client library would send it (kio, Kafka's
    own schemas); returns the decoded response."""
    schema = type(body)
    header_schema = schema.__header_schema__
    out = io.BytesIO()
    header = header_schema(
        request_api_key=api_key, request_api_version=version, correlation_id=1, client_id="t"
    )
    entity_writer(header_schema)(out, header)
    entity_writer(schema)(out, body)
    data = out.getvalue()
    response_schema = load_response_schema(api_key, version)
    host, port = address.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(data)) + data)
        (size,) = struct.unpack(">i", recv_exactly(sock, 4))
        frame = recv_exactly(sock, size)
    _, header_size = entity_reader(response_schema.__header_schema__)(frame, 0)
    response, _ = entity_reader(response_schema)(frame, header_size)
    return response


def test_fetch_names_the_diverging_epoch_when_the_leaders_log_ends_before_the_fetch_offset(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    from kio.schema.fetch.v12 import request as fetch_v12

    with running_cluster(zk_client, zk_connect, tmp_path, overrides=KAFKA_PORT_FREE) as cluster:
        tp = TopicPartition("epochs", 0)
        cluster.create_topic(tp.topic, {0: [1, 2, 3]})
        cluster.produce_until_acked(tp, [b"r%d" % i for i in range(10)])
        leader = cluster.wait_for_leader(tp)
        registered = read_registered_broker(zk_client, leader)
        endpoint = None if registered is None else registered.kafka_endpoint
        assert endpoint is not None
        epoch = cluster.state(tp).leader_epoch  # type: ignore[union-attr]

        def fetch(offset: int, last_fetched_epoch: int) -> Any:
            body = build(
                fetch_v12.FetchRequest,
                {
                    "replica_id": -1,
                    "max_wait": 0,
                    "min_bytes": 0,
                    "max_bytes": 1 << 20,
                    "session_epoch": -1,
                    "topics": [
                        {
                            "topic": tp.topic,
                            "partitions": [
                                {
                                    "partition": 0,
                                    "current_leader_epoch": epoch,
                                    "fetch_offset": offset,
                                    "last_fetched_epoch": last_fetched_epoch,
                                    "log_start_offset": -1,
                                    "partition_max_bytes": 1 << 20,
                                }
                            ],
                        }
                    ],
                },
            )
            response = kafka_call(f"{endpoint[0]}:{endpoint[1]}", 1, 12, body)
            return response.responses[0].partitions[0]

        # The client says it last read epoch `epoch` up to offset 15: the leader's log of
        # that epoch ends at 10, so those 5 records were truncated away here.
        diverged = fetch(15, epoch)
        assert diverged.error_code == 0
        assert (diverged.diverging_epoch.epoch, diverged.diverging_epoch.end_offset) == (epoch, 10)
        assert not diverged.records
        assert diverged.high_watermark == 10
        # Consistent with the leader's log: an ordinary fetch.
        plain = fetch(4, epoch)
        assert plain.diverging_epoch.epoch == -1
        assert plain.records


# kafka-python 3.0 calls importlib.resources' legacy API when imported (its own warning).
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_kafka_python_produces_and_reads_back_with_assign(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    import kafka  # kafka-python

    with running_cluster(zk_client, zk_connect, tmp_path, overrides=KAFKA_PORT_FREE) as cluster:
        cluster.create_topic("kp", {0: [1, 2, 3], 1: [2, 3, 1]})
        bootstrap = kafka_bootstrap(cluster).split(",")
        producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        try:
            sent = [producer.send("kp", b"v%d" % i, key=b"k%d" % i) for i in range(200)]
            for future in sent:
                future.get(timeout=30)
        finally:
            producer.close()
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000
        )
        try:
            consumer.assign([kafka.TopicPartition("kp", 0), kafka.TopicPartition("kp", 1)])
            consumer.seek_to_beginning()
            got = {(m.key, m.value) for m in consumer}
        finally:
            consumer.close()
        assert got == {(b"k%d" % i, b"v%d" % i) for i in range(200)}
