"""Connection and memory floods against a broker with resource limits
(docs/resource-limits.md): it keeps its descriptors and memory within them, keeps its log dir
online, and keeps serving legitimate Kafka clients (confluent-kafka in a subprocess,
aiokafka) and gRPC ones.

The broker runs with a low ``RLIMIT_NOFILE`` (400, as in test_fd_exhaustion.py) and limits
scaled to it, so each flood takes seconds: before the limits, any of them ran it out of
descriptors (a connection and its half-sent frame were held for ever) or grew it by the
sum of the frames (8 connections sending 95 MB of a 100 MB frame: +800 MB, kept).
"""

from __future__ import annotations

import asyncio
import datetime
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from proto.records.record_batch import Record, encode_batch
from proto.topic_partition import TopicPartition
from proto.wire.minibroker_pb2 import ErrorCode
from proto.zk.sync_client import read_registered_broker
from tests.cluster import Cluster
from tests.helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

NOFILE_LIMIT = 400
MAX_CONNECTIONS = 120
PER_IP = 30
LIMITS = {
    "kafka.port": "0",
    "max.connections": str(MAX_CONNECTIONS),
    "max.connections.per.ip": str(PER_IP),
    # The legitimate clients' address; the floods come from other loopback addresses.
    "max.connections.per.ip.overrides": "127.0.0.1:1000",
    "connections.max.idle.ms": "3000",
    "socket.request.read.timeout.ms": "2000",
    "connections.handshake.timeout.ms": "1000",
}
TP = TopicPartition("limits", 0)
HALF_FRAME = (4096).to_bytes(4, "big") + b"\x00\x12"
"""A frame length announcing 4 kB, then two bytes of it."""


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def kafka_address(cluster: Cluster, broker_id: int = 1) -> tuple[str, int]:
    registered = read_registered_broker(cluster.zk, broker_id)
    assert registered is not None
    assert registered.kafka_endpoint is not None
    return registered.kafka_endpoint[0], registered.kafka_endpoint[1]


def start(zk_client: KazooClient, zk_connect: str, tmp_path: Path, **extra: str) -> Cluster:
    cluster = Cluster(zk_client, zk_connect, tmp_path, (1,), overrides={**LIMITS, **extra})
    cluster.brokers[1].spec.nofile_limit = NOFILE_LIMIT
    cluster.start()
    cluster.create_topic(TP.topic, {0: [1]})
    cluster.wait_for_isr(TP, {1})
    return cluster


def connect_from(source: str, address: tuple[str, int], payload: bytes) -> socket.socket | None:
    """A connection from loopback address ``source`` that sent ``payload``; None if the
    kernel refused it (a full listen backlog)."""
    sock = socket.socket()
    sock.settimeout(2)
    try:
        sock.bind((source, 0))
        sock.connect(address)
        if payload:
            sock.sendall(payload)
    except OSError:
        sock.close()
        return None
    sock.setblocking(False)
    return sock


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


@contextmanager
def flooding(
    address: tuple[str, int], sources: list[str], payload: bytes, per_round: int
) -> Iterator[dict[str, int]]:
    """A thread opening ``per_round`` connections from each source again and again (each
    sends ``payload``) until the block ends; counts opened and closed by the broker."""
    stop = threading.Event()
    counts = {"opened": 0, "closed": 0}
    held: list[socket.socket] = []

    def run() -> None:
        while not stop.is_set():
            for source in sources:
                for _ in range(per_round):
                    sock = connect_from(source, address, payload)
                    if sock is not None:
                        held.append(sock)
                        counts["opened"] += 1
            for sock in list(held):
                if closed_by_peer(sock):
                    held.remove(sock)
                    sock.close()
                    counts["closed"] += 1
            stop.wait(0.2)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield counts
    finally:
        stop.set()
        thread.join(30)
        for sock in held:
            sock.close()


CONFLUENT_ROUNDTRIP = """
import sys, confluent_kafka
bootstrap, topic, value = sys.argv[1:4]
p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                              "message.timeout.ms": 30000})
p.produce(topic, value.encode(), partition=0)
assert p.flush(40) == 0, "not delivered"
c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "limits-" + value,
                              "auto.offset.reset": "earliest", "enable.auto.commit": False})
c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
seen = set()
import time
deadline = time.monotonic() + 40
while value.encode() not in seen and time.monotonic() < deadline:
    m = c.poll(1.0)
    if m is not None and m.error() is None:
        seen.add(m.value())
c.close()
assert value.encode() in seen, "not read back"
"""


def confluent_roundtrip(bootstrap: str, value: str) -> None:
    """Produce ``value`` and read it back with confluent-kafka, in a subprocess (a hang or
    crash of librdkafka fails this test only)."""
    done = subprocess.run(
        [sys.executable, "-c", CONFLUENT_ROUNDTRIP, bootstrap, TP.topic, value],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def aiokafka_roundtrip(bootstrap: str, value: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    async def main() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            await producer.send_and_wait(TP.topic, value.encode(), partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = AioTopicPartition(TP.topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            while True:
                batch = await consumer.getmany(tp, timeout_ms=1000)
                if any(m.value == value.encode() for m in batch.get(tp, [])):
                    return
        finally:
            await consumer.stop()

    asyncio.run(asyncio.wait_for(main(), 60))


def assert_serving(cluster: Cluster, tag: str) -> None:
    host, port = kafka_address(cluster)
    bootstrap = f"{host}:{port}"
    confluent_roundtrip(bootstrap, f"confluent-{tag}")
    aiokafka_roundtrip(bootstrap, f"aiokafka-{tag}")
    assert cluster.produce(1, TP, [f"grpc-{tag}".encode()]).error_code == ErrorCode.NONE


def assert_log_dir_online(cluster: Cluster) -> None:
    text = cluster.brokers[1].log_path.read_text(errors="replace")
    assert "event=log_dir_offline" not in text
    assert "event=resource_exhausted" not in text
    assert cluster.brokers[1].is_running


def test_a_flood_from_one_address_is_cut_at_max_connections_per_ip_while_clients_are_served(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    cluster = start(zk_client, zk_connect, tmp_path)
    try:
        pid = cluster.brokers[1].pid
        assert pid is not None
        baseline = open_fds(pid)
        address = kafka_address(cluster)
        peak = 0
        with flooding(address, ["127.0.0.2"], HALF_FRAME, 60) as counts:
            wait_for(lambda: counts["opened"] > 3 * NOFILE_LIMIT, 60, message="the flood")
            for _ in range(20):
                peak = max(peak, open_fds(pid))
                time.sleep(0.05)
            assert_serving(cluster, "during")  # legitimate clients, meanwhile
            peak = max(peak, open_fds(pid))
        # Never more than the address's quota held (plus the clients' own connections).
        assert peak < baseline + PER_IP + 30, (baseline, peak)
        text = cluster.brokers[1].log_path.read_text(errors="replace")
        assert "event=kafka_connection_refused" in text
        assert "Too many connections from 127.0.0.2 (maximum = 30)" in text
        assert "not complete after socket.request.read.timeout.ms (2000)" in text
        wait_for(lambda: open_fds(pid) < baseline + 20, 20, message="the flood's sockets closed")
        assert_log_dir_online(cluster)
        assert_serving(cluster, "after")
    finally:
        cluster.stop_all()


def test_connections_past_max_connections_wait_and_bare_or_half_sent_ones_are_closed(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    cluster = start(zk_client, zk_connect, tmp_path)
    try:
        pid = cluster.brokers[1].pid
        assert pid is not None
        baseline = open_fds(pid)
        address = kafka_address(cluster)
        sources = [f"127.0.0.{i}" for i in range(10, 20)]  # 10 x 25: under the per-ip quota
        peak = 0
        with (
            flooding(address, sources[:5], b"", 25) as bare,
            flooding(address, sources[5:], HALF_FRAME, 25) as half,
        ):
            deadline = time.monotonic() + 12
            while time.monotonic() < deadline:
                peak = max(peak, open_fds(pid))
                time.sleep(0.05)
            assert bare["opened"] + half["opened"] > 2 * MAX_CONNECTIONS
            # The broker closed some of each kind: idle ones, half-sent frames.
            assert bare["closed"] > 0
            assert half["closed"] > 0
        # The broker's descriptors stay within max.connections (the rest wait in the
        # kernel's backlog, not in the broker).
        assert peak < baseline + MAX_CONNECTIONS + 20, (baseline, peak)
        assert open_fds(pid) < NOFILE_LIMIT
        text = cluster.brokers[1].log_path.read_text(errors="replace")
        assert "event=kafka_connection_idle" in text
        wait_for(lambda: open_fds(pid) < baseline + 20, 30, message="the flood's sockets closed")
        assert_log_dir_online(cluster)
        assert_serving(cluster, "after")
    finally:
        cluster.stop_all()


def test_bare_connections_to_the_grpc_port_are_closed_after_the_handshake_timeout(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    cluster = start(zk_client, zk_connect, tmp_path)
    try:
        pid = cluster.brokers[1].pid
        assert pid is not None
        baseline = open_fds(pid)
        grpc_address = ("127.0.0.1", cluster.brokers[1].port)
        held = [connect_from("127.0.0.3", grpc_address, b"") for _ in range(2 * MAX_CONNECTIONS)]
        socks = [s for s in held if s is not None]
        assert len(socks) > MAX_CONNECTIONS
        assert open_fds(pid) < baseline + MAX_CONNECTIONS + 20
        # gRPC's default would keep each for 120 s; connections.handshake.timeout.ms=1000.
        still = list(socks)

        def all_closed() -> bool:
            still[:] = [s for s in still if not closed_by_peer(s)]
            return not still

        def unclosed() -> str:
            return f"{len(still)} of {len(socks)} open, broker fds {open_fds(pid)}/{baseline}"

        wait_for(all_closed, 20, message=unclosed)
        for sock in socks:
            sock.close()
        wait_for(lambda: open_fds(pid) < baseline + 10, 10, message="descriptors released")
        assert_log_dir_online(cluster)
        assert cluster.produce(1, TP, [b"grpc"]).error_code == ErrorCode.NONE
    finally:
        cluster.stop_all()


FRAME = 100 * 1024 * 1024
"""socket.request.max.bytes (the default)."""
SENT = 95 * 1024 * 1024
KAFKA_MARGIN_MB = 40
"""RSS after the Kafka flood, over the RSS before (measured: 0 to 1 MB)."""
GRPC_MARGIN_MB = 100
"""RSS after the 99 MB gRPC produce, over the RSS before (measured: 13 to 79 MB that
malloc_trim does not return; bench/RESULTS.md)."""


def half_send_large(address: tuple[str, int], results: list[str]) -> None:
    """95 MB of a 100 MB frame, then wait for the broker to close the connection."""
    try:
        with socket.create_connection(address, timeout=60) as sock:
            sock.sendall(FRAME.to_bytes(4, "big"))
            chunk = b"\x00" * (1 << 20)
            for _ in range(SENT // len(chunk)):
                sock.sendall(chunk)
            results.append("eof" if sock.recv(1) == b"" else "data")
    except OSError as err:
        results.append(type(err).__name__)


def test_large_half_frames_wait_for_the_memory_pool_and_the_memory_is_given_back(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    """8 connections x 95 MB of a 100 MB frame: at most queued.max.request.bytes (200 MB)
    read at once, the rest wait in their sockets; then a 99 MB gRPC produce. RSS before,
    at its peak and after each is printed (bench/RESULTS.md, "Memory after a flood")."""
    cluster = start(zk_client, zk_connect, tmp_path, **{"socket.request.read.timeout.ms": "3000"})
    try:
        pid = cluster.brokers[1].pid
        assert pid is not None
        assert_serving(cluster, "warm")  # the clients' own allocations happen before
        before = rss_mb(pid)
        address = kafka_address(cluster)
        results: list[str] = []
        senders = [
            threading.Thread(target=half_send_large, args=(address, results), daemon=True)
            for _ in range(8)
        ]
        for thread in senders:
            thread.start()
        peak = before
        while any(t.is_alive() for t in senders):
            peak = max(peak, rss_mb(pid))
            time.sleep(0.05)
        assert results == ["eof"] * 8, results
        settled = wait_for_rss(pid, before + KAFKA_MARGIN_MB)
        print(f"kafka flood: RSS before {before:.0f} MB, peak {peak:.0f} MB, after {settled:.0f}")
        # Two 100 MB frames in the pool at once, each 95 MB touched; never eight.
        assert peak < before + 2 * 100 + 60, (before, peak)
        assert settled < before + KAFKA_MARGIN_MB, (before, settled)

        before = rss_mb(pid)
        batch = encode_batch([Record(key=None, value=b"\x07" * (99 << 20))])
        sampling = threading.Event()
        samples: list[float] = []

        def sample() -> None:
            while not sampling.is_set():
                samples.append(rss_mb(pid))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        answer = cluster.produce_raw(1, TP, batch)
        sampling.set()
        sampler.join()
        assert answer.error_code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE)
        peak = max(samples, default=before)
        settled = wait_for_rss(pid, before + GRPC_MARGIN_MB)
        print(
            f"grpc 99 MB produce: RSS before {before:.0f} MB, peak {peak:.0f}, after {settled:.0f}"
        )
        assert settled < before + GRPC_MARGIN_MB, (before, settled)
        assert_log_dir_online(cluster)
        assert_serving(cluster, "after")
    finally:
        cluster.stop_all()


def wait_for_rss(pid: int, target_mb: float, timeout: float = 15) -> float:
    """The broker's RSS once it is under ``target_mb`` (or the last seen after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while (now := rss_mb(pid)) >= target_mb and time.monotonic() < deadline:
        time.sleep(0.1)
    return now


CONFLUENT_GROUP = """
import sys, time, confluent_kafka
bootstrap, topic = sys.argv[1:3]
errors = []
def consumer(name):
    return confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": "capped", "client.id": name,
        "session.timeout.ms": 6000, "auto.offset.reset": "earliest",
        "error_cb": lambda err: errors.append(err.code()),
    })
members = [consumer(n) for n in ("a", "b")]
for m in members:
    m.subscribe([topic])
deadline = time.monotonic() + 30
def stable():  # one partition: one of the two has it
    return all(m.memberid() for m in members) and any(m.assignment() for m in members)
while time.monotonic() < deadline and not stable():
    for m in members:
        m.poll(0.2)
third = consumer("c")
third.subscribe([topic])
seen = set()
deadline = time.monotonic() + 20
while time.monotonic() < deadline and 81 not in seen and 81 not in errors:
    for m in (*members, third):
        msg = m.poll(0.2)
        if msg is not None and msg.error() is not None:
            seen.add(msg.error().code())
print("stable", stable(), "third", third.assignment(),
      "errors", sorted(seen | set(errors)))
for m in (*members, third):
    m.close()
"""


def test_group_limits_refuse_huge_metadata_and_a_member_past_group_max_size(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol

    from tests.integration.test_kafka_listener import kafka_call

    cluster = start(
        zk_client,
        zk_connect,
        tmp_path,
        **{
            "group.max.size": "2",
            "group.max.protocol.metadata.bytes": "65536",
            "group.initial.rebalance.delay.ms": "0",
            "connections.max.idle.ms": "600000",
        },
    )
    try:
        pid = cluster.brokers[1].pid
        assert pid is not None
        host, port = kafka_address(cluster)
        bootstrap = f"{host}:{port}"

        def join(metadata: bytes) -> int:
            request = JoinGroupRequest(
                group_id="huge",  # type: ignore[arg-type]
                session_timeout=datetime.timedelta(seconds=10),  # type: ignore[arg-type]
                rebalance_timeout=datetime.timedelta(seconds=10),  # type: ignore[arg-type]
                member_id="",
                group_instance_id=None,
                protocol_type="consumer",
                protocols=(JoinGroupRequestProtocol(name="range", metadata=metadata),),
            )
            return int(kafka_call(bootstrap, 11, 5, request).error_code)

        before = rss_mb(pid)
        assert join(b"\x00" * (30 << 20)) == ErrorCode.INVALID_REQUEST  # the probe's 30 MB
        assert rss_mb(pid) < before + 100  # not kept (the frame itself came and went)
        assert join(b"\x00" * 100) == ErrorCode.NONE
        assert "event=group_metadata_refused" in cluster.brokers[1].log_path.read_text()

        done = subprocess.run(
            [sys.executable, "-c", CONFLUENT_GROUP, bootstrap, TP.topic],
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "stable True third []" in done.stdout, done.stdout
        assert "81" in done.stdout.split("errors", 1)[1], done.stdout  # GROUP_MAX_SIZE_REACHED
        assert "event=member_refused" in cluster.brokers[1].log_path.read_text()
        assert_log_dir_online(cluster)
    finally:
        cluster.stop_all()
