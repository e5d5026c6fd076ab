"""Produce answers, packed without kio (broker/kafka_listener/produce_response.py), against
real brokers: the bytes are those kio writes for the same response, in every version
served, and Kafka's own clients read the offsets and errors in them."""

from __future__ import annotations

import io
import json
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kio.serial import entity_reader, entity_writer

from broker.kafka_listener.apis import SUPPORTED_VERSIONS
from broker.kafka_listener.messages import build
from broker.kafka_listener.request_codec import request_schema, response_schema
from proto.records.builder import RecordsBuilder
from proto.zk.sync_client import read_registered_broker
from tests.cluster import Cluster, running_cluster
from tests.helpers import recv_exactly

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PRODUCE = 0
NONE, UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS = 0, 3, 19
KAFKA_PORT_FREE = {"kafka.port": "0"}
RECORDS_PER_REQUEST = 10


def kafka_address(cluster: Cluster, broker_id: int) -> tuple[str, int]:
    registered = read_registered_broker(cluster.zk, broker_id)
    assert registered is not None
    assert registered.kafka_endpoint is not None
    return registered.kafka_endpoint


def batch(count: int) -> bytes:
    builder = RecordsBuilder()
    builder.append_values([b"v%d" % i for i in range(count)], 0, 1_700_000_000_000, 1 << 20)
    return builder.build(-1, -1, -1)


def produce_frame(version: int, correlation_id: int) -> bytes:
    """The request frame (after its size): for versions 0-2, version 3's without its first
    field, the null transactional id (2 bytes), which is their whole difference."""
    schema = request_schema(PRODUCE, max(version, 3))
    assert schema is not None
    header_schema = schema.__header_schema__
    records = batch(RECORDS_PER_REQUEST)
    body = {
        "acks": -1,
        "timeout": 10_000,
        "topic_data": [
            {"name": "answered", "partition_data": [{"index": 0, "records": records}]},
            {"name": "short", "partition_data": [{"index": 0, "records": records}]},
            {"name": "answered", "partition_data": [{"index": 9, "records": records}]},
        ],
    }
    header = {
        "request_api_key": PRODUCE,
        "request_api_version": version,
        "correlation_id": correlation_id,
        "client_id": "t",
    }
    out = io.BytesIO()
    entity_writer(header_schema)(out, build(header_schema, header))
    at = out.tell()
    entity_writer(schema)(out, build(schema, body))
    data = out.getvalue()
    return data if version >= 3 else data[:at] + data[at + 2 :]


def exchange(address: tuple[str, int], frame: bytes) -> bytes:
    with socket.create_connection(address, timeout=20) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        (size,) = struct.unpack(">i", recv_exactly(sock, 4))
        return recv_exactly(sock, size)


def test_produce_v0_to_v2_are_served(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    """Kafka 2.8's oldest Produce versions (kio has no classes for them), read as version
    3 without its transactional id and answered in their own layout."""
    with running_cluster(zk_client, zk_connect, tmp_path, overrides=KAFKA_PORT_FREE) as cluster:
        cluster.create_topic("answered", {0: [1]})
        cluster.create_topic("short", {0: [1]}, {"min.insync.replicas": "2"})
        address = kafka_address(cluster, 1)
        for version in range(3):
            reply = io.BytesIO(exchange(address, produce_frame(version, 50 + version)))

            def read(fmt: str, reply: io.BytesIO = reply) -> Any:
                size = struct.calcsize(fmt)
                return struct.unpack(fmt, reply.read(size))[0]

            assert read(">i") == 50 + version
            answers = {}
            for _ in range(read(">i")):
                name = reply.read(read(">h")).decode()
                for _ in range(read(">i")):
                    index, code, base = read(">i"), read(">h"), read(">q")
                    if version >= 2:
                        assert read(">q") == -1  # log append time: CreateTime
                    answers[name, index] = (code, base)
            if version >= 1:
                assert read(">i") == 0  # throttle time
            assert reply.read() == b""
            assert answers == {
                ("answered", 0): (NONE, version * RECORDS_PER_REQUEST),
                ("short", 0): (NOT_ENOUGH_REPLICAS, -1),
                ("answered", 9): (UNKNOWN_TOPIC_OR_PARTITION, -1),
            }


def produce(address: tuple[str, int], version: int, correlation_id: int) -> tuple[bytes, Any]:
    """One acks=all Produce request in ``version`` to three partitions: one that takes it,
    one under its min.insync.replicas, one that does not exist. Returns the response frame
    (after its size) and kio's reading of it."""
    frame = exchange(address, produce_frame(version, correlation_id))
    reply = response_schema(PRODUCE, version)
    assert reply is not None
    decoded_header, at = entity_reader(reply.__header_schema__)(frame, 0)
    assert decoded_header.correlation_id == correlation_id
    response, _ = entity_reader(reply)(frame, at)
    return frame, response


def kio_bytes(version: int, correlation_id: int, response: Any) -> bytes:
    """What kio writes for ``response`` as it read it: the packed bytes must survive the
    round trip unchanged (no field kio would write otherwise, nothing left over)."""
    reply = response_schema(PRODUCE, version)
    assert reply is not None
    out = io.BytesIO()
    header_schema = reply.__header_schema__
    entity_writer(header_schema)(out, header_schema(correlation_id=correlation_id))
    entity_writer(reply)(out, response)
    return out.getvalue()


def test_every_version_served_is_answered_in_kios_bytes(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path, overrides=KAFKA_PORT_FREE) as cluster:
        cluster.create_topic("answered", {0: [1]})
        cluster.create_topic("short", {0: [1]}, {"min.insync.replicas": "2"})
        address = kafka_address(cluster, 1)
        low, high = SUPPORTED_VERSIONS[PRODUCE]
        assert low == 0  # 0-2 have no kio classes: test_produce_v0_to_v2_are_served
        for n, version in enumerate(range(3, high + 1)):
            frame, response = produce(address, version, 1000 + version)
            assert frame == kio_bytes(version, 1000 + version, response), f"v{version}"
            answers = {
                (t.name, p.index): p for t in response.responses for p in t.partition_responses
            }
            taken = answers["answered", 0]
            assert (taken.error_code, taken.base_offset) == (NONE, n * RECORDS_PER_REQUEST)
            assert getattr(taken, "log_start_offset", 0) == 0  # v5+ have it
            assert taken.log_append_time is None  # -1: CreateTime
            assert getattr(taken, "error_message", None) is None
            assert response.throttle_time.total_seconds() == 0
            short = answers["short", 0]
            assert (short.error_code, short.base_offset) == (NOT_ENOUGH_REPLICAS, -1)
            assert answers["answered", 9].error_code == UNKNOWN_TOPIC_OR_PARTITION
            if version >= 8:
                assert short.error_message


CONFLUENT_PRODUCER = """
import json, sys
import confluent_kafka
producer = confluent_kafka.Producer({"bootstrap.servers": sys.argv[1], "acks": "all"})
offsets, errors = [], []
def delivered(err, msg):
    if err is not None:
        errors.append(str(err))
    else:
        offsets.append(msg.offset())
for i in range(int(sys.argv[2])):
    producer.produce("clients", b"c%d" % i, partition=0, on_delivery=delivered)
    producer.poll(0)
left = producer.flush(30)
print(json.dumps({"offsets": offsets, "errors": errors, "left": left}))
"""


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's importlib use
def test_kafkas_clients_read_the_offsets_of_packed_answers(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    import kafka  # kafka-python

    with running_cluster(zk_client, zk_connect, tmp_path, overrides=KAFKA_PORT_FREE) as cluster:
        cluster.create_topic("clients", {0: [1, 2, 3]})
        host, port = kafka_address(cluster, 1)
        bootstrap = f"{host}:{port}"
        done = subprocess.run(
            [sys.executable, "-c", CONFLUENT_PRODUCER, bootstrap, "3000"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout.strip().splitlines()[-1])
        assert found["errors"] == []
        assert found["left"] == 0
        assert found["offsets"] == list(range(3000))  # delivery order is send order

        producer = kafka.KafkaProducer(bootstrap_servers=[bootstrap], acks="all", linger_ms=5)
        try:
            sent = [producer.send("clients", b"k%d" % i, partition=0) for i in range(300)]
            offsets = [future.get(timeout=30).offset for future in sent]
        finally:
            producer.close()
        assert offsets == list(range(3000, 3300))
