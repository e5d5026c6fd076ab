"""A cluster on a ZooKeeper ensemble under ZooKeeper faults: real processes throughout.

``cluster up --zookeeper-nodes 3`` (LocalCluster, one per module): three ZooKeeper JVMs,
three brokers with a 2 s ZooKeeper session, a topic with three partitions, replication
factor 3 and ``min.insync.replicas=2``. A writer thread produces unique values with
acks=all to each partition's leader (from the brokers' Metadata: they answer it from their
cache even without ZooKeeper) and records every answer. What must hold:

- one ZooKeeper node killed, even the leader: the other two elect a new leader, the
  brokers' sessions move to them, acks=all writes go on (perhaps after a short pause), and
  the node restarts and rejoins;
- two of three killed (quorum lost): within about one session timeout no write is
  acknowledged any more (the brokers' session lease, broker/zk_client.py), the producer
  gets the retriable NOT_LEADER_OR_FOLLOWER instead, committed data can still be read;
  when quorum returns, writes are acknowledged again within a bounded time;
- in the end every acknowledged record is in its partition's log at its offset, once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from kazoo.client import KazooClient

from deploy.cluster_probe import create_topic
from deploy.local_cluster import LocalCluster
from proto.records.record_batch import Record, decode_batch, encode_batch, scan_batches
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from tests.helpers import free_port_run, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SESSION_TIMEOUT_S = 2.0
TOPIC = "zk-faults"
PARTITIONS = 3
ACK_AFTER_LOSS_SLACK_S = 1.5
"""What an acknowledgement may take to reach the writer beyond the lease on a loaded
machine: the broker decides within one session timeout of the loss; the answer travels."""
RECOVERY_BOUND_S = 30.0
"""Quorum back to acks=all writes acknowledged again: ZooKeeper's election, the brokers'
reconnection (or a new session, registration and controller election), a few retries."""


@dataclass
class Outcome:
    sent: float
    received: float
    partition: int
    value: bytes
    code: int
    """pb.NONE when acknowledged; -1 when no answer came (a gRPC error)."""
    offset: int = -1
    message: str = ""


@dataclass
class Writer:
    """Produces ``<prefix>-<n>`` values acks=all, one record per request, round robin over
    the partitions, each to the leader the brokers' Metadata names; never sends a value
    twice."""

    bootstrap: list[str]
    prefix: str
    outcomes: list[Outcome] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _channels: dict[str, grpc.Channel] = field(default_factory=dict)
    _leaders: dict[int, str] = field(default_factory=dict)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=30)
        for channel in self._channels.values():
            channel.close()

    def acked(self, since: float = 0.0) -> list[Outcome]:
        return [o for o in list(self.outcomes) if o.code == pb.NONE and o.received >= since]

    def _stub(self, address: str) -> pb_grpc.BrokerStub:
        if address not in self._channels:
            self._channels[address] = grpc.insecure_channel(address)
        return pb_grpc.BrokerStub(self._channels[address])

    def _refresh(self) -> None:
        for address in self.bootstrap:
            try:
                meta = self._stub(address).Metadata(pb.MetadataRequest(topics=[TOPIC]), timeout=3)
            except grpc.RpcError:
                continue
            brokers = {b.node_id: f"{b.host}:{b.port}" for b in meta.brokers}
            for topic in meta.topics:
                for p in topic.partitions:
                    if p.leader_id in brokers:
                        self._leaders[p.partition_index] = brokers[p.leader_id]
            return

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            partition = n % PARTITIONS
            value = f"{self.prefix}-{n}".encode()
            n += 1
            leader = self._leaders.get(partition)
            if leader is None:
                self._refresh()
                leader = self._leaders.get(partition)
                if leader is None:
                    time.sleep(0.1)
                    continue
            request = pb.ProduceRequest(acks=-1, timeout_ms=1500)
            request.topics.add(name=TOPIC).partitions.add(
                index=partition,
                records=encode_batch([Record(None, value, int(time.time() * 1000))]),
            )
            sent = time.monotonic()
            try:
                response = self._stub(leader).Produce(request, timeout=5)
            except grpc.RpcError as e:
                self.outcomes.append(
                    Outcome(sent, time.monotonic(), partition, value, -1, -1, str(e))
                )
                self._leaders.pop(partition, None)
                time.sleep(0.05)
                continue
            part = response.responses[0].partitions[0]
            self.outcomes.append(
                Outcome(
                    sent,
                    time.monotonic(),
                    partition,
                    value,
                    part.error_code,
                    part.base_offset,
                    part.error_message,
                )
            )
            if part.error_code != pb.NONE:
                self._leaders.pop(partition, None)
                time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    base = free_port_run(9)
    local = LocalCluster(tmp_path_factory.mktemp("zk-faults") / "cluster")
    local.up(
        3,
        base_port=base,
        zookeeper_port=base + 3,
        kafka_base_port=base + 6,
        zookeeper_nodes=3,
        overrides={
            "zookeeper.session.timeout.ms": str(int(SESSION_TIMEOUT_S * 1000)),
            "replica.lag.time.max.ms": "5000",
            "replica.fetch.wait.max.ms": "200",
            "replica.high.watermark.checkpoint.interval.ms": "200",
            "controlled.shutdown.retry.backoff.ms": "100",
            "request.timeout.ms": "5000",
        },
        timeout=120,
    )
    try:
        zk = KazooClient(hosts=local.zookeeper_connect, timeout=10)
        zk.start(timeout=30)
        try:
            create_topic(
                zk, TOPIC, {p: [1, 2, 3] for p in range(PARTITIONS)}, {"min.insync.replicas": "2"}
            )
        finally:
            zk.stop()
            zk.close()
        yield local
    finally:
        local.down()


@pytest.fixture
def writer(cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[Writer]:
    """A writer over a healthy cluster: every ZooKeeper node serving, writes acknowledged.
    At the end, every record it had acknowledged must be in the logs (of all the module's
    writers: its values are unique in the module)."""
    cluster.wait_for_zookeeper(timeout=60)
    assert all(cluster.zookeeper_node_running(n) for n in cluster.zookeeper_nodes())
    w = Writer(cluster.bootstrap_servers.split(","), request.node.name)
    w.start()
    try:
        _wait_for_acks(w, since=0.0, count=3 * PARTITIONS, timeout=60, what="first acks")
        yield w
    finally:
        w.stop()
    _check_acked_records_are_in_the_logs(cluster, w)


def _wait_for_acks(w: Writer, since: float, count: int, timeout: float, what: str) -> float:
    """Wait until ``count`` writes sent after ``since`` are acknowledged; return the time
    the first of them was."""
    wait_for(
        lambda: len(w.acked(since)) >= count,
        timeout,
        message=lambda: (
            f"{what}: {len(w.acked(since))} of {count} acks, last answers "
            f"{[(o.code, o.message[:120]) for o in w.outcomes[-3:]]}"
        ),
    )
    return w.acked(since)[0].received


def _read_committed(cluster: LocalCluster, partition: int) -> dict[int, bytes | None]:
    """Every record below the HW of ``partition``, read from its leader as a consumer."""
    for address in cluster.bootstrap_servers.split(","):
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.BrokerStub(channel)
            try:
                meta = stub.Metadata(pb.MetadataRequest(topics=[TOPIC]), timeout=5)
            except grpc.RpcError:
                continue
        brokers = {b.node_id: f"{b.host}:{b.port}" for b in meta.brokers}
        leader = next(
            p.leader_id for p in meta.topics[0].partitions if p.partition_index == partition
        )
        with grpc.insecure_channel(brokers[leader]) as channel:
            return _fetch_all(pb_grpc.BrokerStub(channel), partition)
    raise AssertionError("no broker answered Metadata")


def _fetch_all(stub: pb_grpc.BrokerStub, partition: int) -> dict[int, bytes | None]:
    records: dict[int, bytes | None] = {}
    offset = 0
    while True:
        request = pb.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20)
        request.topics.add(topic=TOPIC).partitions.add(
            partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20
        )
        data = stub.Fetch(request, timeout=10).responses[0].partitions[0]
        assert data.error_code == pb.NONE, data.error_message
        if not data.records:
            return records
        for scanned in scan_batches(data.records):
            for record in decode_batch(data.records, scanned.position).records:
                if record.offset >= offset:
                    assert record.offset < data.high_watermark
                    records[record.offset] = record.value
        offset = max(records) + 1


def _check_acked_records_are_in_the_logs(cluster: LocalCluster, w: Writer) -> None:
    """Every acknowledged value at its offset, and no value twice."""
    acked = w.acked()
    logs = {p: _read_committed(cluster, p) for p in range(PARTITIONS)}
    lost = [
        (o.partition, o.offset, o.value)
        for o in acked
        if logs[o.partition].get(o.offset) != o.value
    ]
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged records lost: {lost[:10]}"
    for p, records in logs.items():
        values = [v for v in records.values() if v is not None]
        assert len(values) == len(set(values)), f"partition {p} holds a value twice"


def test_killing_one_zookeeper_node_even_the_leader_loses_no_acknowledged_write_and_it_rejoins(
    cluster: LocalCluster, writer: Writer
) -> None:
    leader = next(n for n in cluster.zookeeper_nodes() if cluster.zookeeper_mode(n) == "leader")
    killed = time.monotonic()
    cluster.kill_zookeeper(leader)
    assert not cluster.zookeeper_node_running(leader)
    cluster.wait_for_zookeeper(timeout=60)  # the other two elect a leader

    first = _wait_for_acks(writer, killed, 5 * PARTITIONS, 60, "acks with one node down")
    sent_after_kill = [o for o in writer.outcomes if o.sent >= killed]
    refused = [o for o in sent_after_kill if o.code != pb.NONE]
    print(
        f"\nZooKeeper leader {leader} killed: first ack {first - killed:.2f} s later; "
        f"{len(refused)} of {len(sent_after_kill)} writes since refused "
        f"{sorted({o.message[:90] for o in refused})}"
    )

    cluster.start_zookeeper(leader, timeout=90)
    assert cluster.zookeeper_mode(leader) == "follower"
    restarted = time.monotonic()
    _wait_for_acks(writer, restarted, 3 * PARTITIONS, 60, "acks after the node rejoined")
    status = cluster.status()
    assert status.zookeeper_serving == 3
    assert all(b.registered for b in status.brokers), status.brokers
    assert status.controller is not None


def test_quorum_loss_fences_writes_within_a_session_timeout_and_they_resume_when_it_returns(
    cluster: LocalCluster, writer: Writer, tmp_path: Path
) -> None:
    modes = {n: cluster.zookeeper_mode(n) for n in cluster.zookeeper_nodes()}
    leader = next(n for n, m in modes.items() if m == "leader")
    follower = next(n for n, m in modes.items() if m == "follower")
    cluster.kill_zookeeper(follower)  # still a majority: nothing changes for anyone
    lost = time.monotonic()
    cluster.kill_zookeeper(leader)  # the last one can make no majority alone

    # The lease: nothing acknowledged later than one session timeout after the loss
    # (plus the answer's way back), and from then on the retriable refusal.
    fenced_by = lost + SESSION_TIMEOUT_S + ACK_AFTER_LOSS_SLACK_S
    wait_for(lambda: time.monotonic() > fenced_by + 2.0, 30)
    late = [o for o in writer.acked(since=fenced_by)]
    assert not late, f"acknowledged {late[0].received - lost:.2f} s after the quorum loss"
    refusals = [o for o in writer.outcomes if o.sent >= fenced_by]
    assert refusals, "the writer made no attempt while ZooKeeper was lost"
    assert all(o.code == pb.NOT_LEADER_OR_FOLLOWER for o in refusals), {
        (o.code, o.message[:100]) for o in refusals
    }
    assert all("cannot confirm its ZooKeeper session" in o.message for o in refusals)
    last_ack = max((o.received for o in writer.acked(since=lost)), default=lost)
    first_refusal = min(o.received for o in writer.outcomes if o.sent >= lost and o.code != pb.NONE)
    print(
        f"\nquorum lost: last ack {last_ack - lost:.2f} s after, first refusal "
        f"{first_refusal - lost:.2f} s after"
    )

    # Committed data stays readable: a leader serves reads without asking ZooKeeper.
    readable = {p: len(_read_committed(cluster, p)) for p in range(PARTITIONS)}
    assert all(readable.values()), readable

    # Quorum back (two of three): writes are acknowledged again within a bound.
    restore = time.monotonic()
    cluster.start_zookeeper(leader, timeout=90)
    served = time.monotonic()
    first = _wait_for_acks(writer, served, 3 * PARTITIONS, RECOVERY_BOUND_S, "acks after quorum")
    print(
        f"quorum back {served - restore:.2f} s after the restart began; first ack "
        f"{first - served:.2f} s after that"
    )
    cluster.start_zookeeper(follower, timeout=90)
    _wait_for_acks(writer, time.monotonic(), 3 * PARTITIONS, 60, "acks with every node back")
    status = cluster.status()
    assert status.zookeeper_serving == 3
    assert status.controller is not None
    assert all(b.registered for b in status.brokers), status.brokers
