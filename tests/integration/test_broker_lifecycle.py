"""A broker process's life with real ZooKeeper and real broker processes: start-up and
registration, clean shutdown (SIGTERM) and restart without recovery, a crash (SIGKILL) of a
follower, a ZooKeeper session lost while paused (the zombie leader), a port already taken,
and the read-only RPCs: OffsetsForLeaderEpoch, ListOffsets, Metadata and the Fetch long poll.

Every wait polls with a deadline; each test stops the processes it started.
"""

from __future__ import annotations

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from kazoo.client import KazooClient

from broker.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from broker.log.log_manager import CLEAN_SHUTDOWN_FILE
from chaos.scripted_controller import CONTROLLER_ID
from deploy.broker_process import BrokerProcess, BrokerSpec
from deploy.zookeeper import ZooKeeperConfig, ZooKeeperServer
from proto.records.record_batch import decode_batch, scan_batches
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.zk.znodes import broker_path
from tests.cluster import Cluster, running_cluster
from tests.helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TP = TopicPartition("lifecycle", 0)
LATEST, EARLIEST = -1, -2
CONSUMER = -1


def _values(records: list[tuple[int, bytes | None]]) -> list[bytes | None]:
    assert [o for o, _ in records] == list(range(len(records))), "gap in the offsets"
    return [v for _, v in records]


def _produce_ok(cluster: Cluster, broker_id: int, values: list[bytes], acks: int = -1) -> int:
    response = cluster.produce(broker_id, TP, values, acks=acks)
    assert response.error_code == pb.NONE, response
    return response.base_offset


def _log_from(broker: BrokerProcess, position: int) -> str:
    """The broker's log written after ``position`` (the file is appended to on restart)."""
    with broker.log_path.open("rb") as f:
        f.seek(position)
        return f.read().decode(errors="replace")


def _log_size(broker: BrokerProcess) -> int:
    return broker.log_path.stat().st_size if broker.log_path.exists() else 0


def _czxid(zk: KazooClient, broker_id: int) -> int | None:
    stat = zk.exists(broker_path(broker_id))
    return None if stat is None else int(stat.czxid)


def test_startup_registers_kafka_json_and_serves_grpc_on_the_registered_port(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    before_ms = int(time.time() * 1000)
    with running_cluster(
        zk_client, zk_connect, tmp_path, (1,), scripted_controller=True
    ) as cluster:
        data, stat = zk_client.get(broker_path(1))
        registration = json.loads(data)
        port = registration["port"]
        assert registration == {
            "version": 1,
            "host": "127.0.0.1",
            "port": port,
            "timestamp": registration["timestamp"],
            "endpoints": [f"GRPC://127.0.0.1:{port}"],
        }
        assert isinstance(port, int)
        assert port > 0
        # Kafka writes the timestamp as a string of epoch milliseconds.
        assert isinstance(registration["timestamp"], str)
        assert before_ms <= int(registration["timestamp"]) <= int(time.time() * 1000)
        assert stat.ephemeralOwner != 0, "the registration must be ephemeral"

        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            response = pb_grpc.BrokerStub(channel).Metadata(pb.MetadataRequest(), timeout=10)
        assert response.controller_id == -1  # no UpdateMetadata yet
        assert cluster.brokers[1].is_running


def test_sigterm_shuts_down_cleanly_and_restart_skips_recovery(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(
        zk_client, zk_connect, tmp_path, (1, 2), scripted_controller=True
    ) as cluster:
        cluster.controller.create_topic(TP.topic, {0: [1, 2]})
        sent = [f"clean-{i}-{j}".encode() for i in range(10) for j in range(10)]
        for i in range(10):
            assert _produce_ok(cluster, 1, sent[i * 10 : (i + 1) * 10]) == i * 10
        leo = len(sent)

        leader = cluster.brokers[1]
        assert leader.stop() == 0
        # Deregistered by the broker itself, not by the session timing out 2 s later.
        zk_client.sync(broker_path(1))
        assert zk_client.exists(broker_path(1)) is None

        data_dir = leader.spec.data_dir
        entry = f"{TP.topic} {TP.partition} {leo}\n"
        assert (data_dir / REPLICATION_OFFSET_CHECKPOINT).read_text() == f"0\n1\n{entry}"
        assert (data_dir / RECOVERY_POINT_OFFSET_CHECKPOINT).read_text() == f"0\n1\n{entry}"
        # As Kafka, only logs whose start offset is past their first segment are listed.
        assert (data_dir / LOG_START_OFFSET_CHECKPOINT).read_text() == "0\n0\n"
        assert (data_dir / CLEAN_SHUTDOWN_FILE).exists()

        position = _log_size(leader)
        leader.start(zk_client)
        restart_log = _log_from(leader, position)
        assert "clean shutdown: True" in restart_log, restart_log
        # KAFKA-10471: the marker is consumed at start-up, so a crash now counts as unclean.
        assert not (data_dir / CLEAN_SHUTDOWN_FILE).exists()

        cluster.controller.push([TP])
        assert _values(cluster.consume_all(1, TP)) == sent
        assert _produce_ok(cluster, 1, [b"after-restart"]) == leo


def test_sigterm_while_zookeeper_is_unreachable_still_exits_cleanly(tmp_path: Path) -> None:
    # Its own ZooKeeper: the session's shared one must not be killed.
    with ZooKeeperServer(ZooKeeperConfig()) as zookeeper:
        zk = KazooClient(hosts=zookeeper.connect_string)
        zk.start(timeout=10)
        broker = BrokerProcess(
            BrokerSpec(
                1,
                tmp_path / "broker-1",
                zookeeper.connect_string,
                overrides={"zookeeper.session.timeout.ms": "2000"},
            )
        )
        try:
            try:
                broker.start(zk)
            finally:
                zk.stop()
                zk.close()
            # Registered is not started: the controller candidate connects its own session
            # after registering, and a ZooKeeper gone before that fails the start (exit 1),
            # which is right, but not this test's story.
            wait_for(
                lambda: "event=started" in broker.log_path.read_text(errors="replace"),
                30,
                message="the broker to finish starting",
            )
            zookeeper.kill()
            started = time.monotonic()
            status = broker.stop(timeout=20)
            took = time.monotonic() - started
        finally:
            broker.kill()
    # Deregistering is given up after the session timeout (2 s), not retried for ever.
    assert status == 0, broker.log_tail()
    assert took < 15, took
    assert (broker.spec.data_dir / CLEAN_SHUTDOWN_FILE).exists()


def test_sigkill_of_a_follower_loses_nothing_replicated(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path, scripted_controller=True) as cluster:
        controller = cluster.controller
        controller.create_topic(TP.topic, {0: [1, 2, 3]})
        acked = [f"acked-{i}-{j}".encode() for i in range(20) for j in range(10)]
        for i in range(20):
            _produce_ok(cluster, 1, acked[i * 10 : (i + 1) * 10])

        # acks=all: broker 3 had appended every acked record before the acks, so they are
        # in its page cache, which a SIGKILL does not lose.
        follower = cluster.brokers[3]
        follower.kill()
        assert _values(cluster.replica_records(3, TP)) == acked

        later = [f"while-down-{i}".encode() for i in range(30)]
        for i in range(3):
            _produce_ok(cluster, 1, later[i * 10 : (i + 1) * 10], acks=1)

        position = _log_size(follower)
        follower.start(zk_client)
        restart_log = _log_from(follower, position)
        assert "clean shutdown: False" in restart_log, restart_log
        # Recovery (done before registering) kept every record.
        assert _values(cluster.replica_records(3, TP)) == acked

        controller.push([TP], to=[3])
        wait_for(
            lambda: cluster.replica_records(3, TP) == cluster.replica_records(1, TP),
            20,
            message="the restarted follower to catch up with the leader",
        )
        controller.wait_for_isr(TP, {1, 2, 3})
        # The HW passes `later` at the leader's next look at 3's fetches, a moment after.
        wait_for(
            lambda: _values(cluster.consume_all(1, TP)) == acked + later,
            10,
            message="every acknowledged record committed at the leader",
        )
        assert _values(cluster.replica_records(1, TP)) == acked + later


def test_leader_whose_session_expired_while_paused_acks_nothing_until_leader_and_isr(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path, scripted_controller=True) as cluster:
        controller = cluster.controller
        controller.create_topic(TP.topic, {0: [1, 2, 3]})
        _produce_ok(cluster, 1, [b"before"])
        registered = _czxid(zk_client, 1)
        assert registered is not None

        leader = cluster.brokers[1]
        leader.pause()
        # zookeeper.session.timeout.ms is 2000 in the Cluster: ZooKeeper expires the frozen
        # broker's session and deletes its ephemeral registration.
        wait_for(
            lambda: zk_client.exists(broker_path(1)) is None,
            15,
            message="the paused broker's registration to disappear",
        )
        leader.resume()
        wait_for(
            lambda: _czxid(zk_client, 1) not in (None, registered),
            15,
            message="the resumed broker to register again with its new session",
        )
        data, _ = zk_client.get(broker_path(1))
        assert json.loads(data)["port"] == leader.port

        # No zombie leader: it may have been replaced while its session was gone.
        for acks in (1, -1):
            refused = cluster.produce(1, TP, [b"zombie"], acks=acks, timeout_ms=2000)
            assert refused.error_code == pb.NOT_LEADER_OR_FOLLOWER, (acks, refused)

        controller.push([TP])  # the controller tells it its role again (same epoch)
        _produce_ok(cluster, 1, [b"after"])
        assert _values(cluster.consume_all(1, TP)) == [b"before", b"after"]


def test_zombie_leader_replaced_while_paused_acks_nothing_and_loses_its_tail(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    # Kafka's sequence: the controller sees the leader's session expire and elects another
    # ISR member; the old leader wakes up believing it still leads.
    with running_cluster(zk_client, zk_connect, tmp_path, scripted_controller=True) as cluster:
        controller = cluster.controller
        controller.create_topic(TP.topic, {0: [1, 2, 3]})
        _produce_ok(cluster, 1, [b"m0"])
        registered = _czxid(zk_client, 1)

        zombie = cluster.brokers[1]
        zombie.pause()
        wait_for(
            lambda: zk_client.exists(broker_path(1)) is None,
            15,
            message="the paused leader's registration to disappear",
        )
        assert controller.elect(TP, 2, isr=[2, 3]).leader_epoch == 1
        assert _produce_ok(cluster, 2, [b"m1"]) == 1
        zombie.resume()

        # At once, before it may even have noticed its session is gone: its session lease
        # ran out while it was frozen, so it acknowledges nothing, not even acks=1.
        for acks in (1, 1, 1, -1):
            refused = cluster.produce(1, TP, [b"zombie"], acks=acks, timeout_ms=5000)
            assert refused.error_code == pb.NOT_LEADER_OR_FOLLOWER, refused
        wait_for(
            lambda: _czxid(zk_client, 1) not in (None, registered),
            15,
            message="the old leader to register again",
        )

        controller.push([TP], to=[1])  # follow broker 2 at epoch 1
        # KIP-101: it truncates to the end of epoch 0 (offset 1) and copies the new leader.
        wait_for(
            lambda: cluster.replica_records(1, TP) == cluster.replica_records(2, TP),
            15,
            message="the old leader to drop its unacknowledged tail and follow",
        )
        assert _values(cluster.replica_records(1, TP)) == [b"m0", b"m1"]
        controller.wait_for_isr(TP, {1, 2, 3})

        assert controller.elect(TP, 1).leader_epoch == 2  # told it leads again
        _produce_ok(cluster, 1, [b"m2"])
        assert _values(cluster.consume_all(1, TP)) == [b"m0", b"m1", b"m2"]


def test_port_already_in_use_fails_fast_with_a_clear_error(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        # SO_REUSEPORT on this socket: gRPC's default (on) would let the broker share the
        # port silently; the broker turns it off, so its bind must fail.
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = BrokerProcess(
            BrokerSpec(
                1,
                tmp_path / "broker-1",
                zk_connect,
                port=port,
                overrides={"zookeeper.session.timeout.ms": "2000"},
            )
        )
        started = time.monotonic()
        broker.start()  # no ZooKeeper client: it must not come up, so do not wait for it
        try:
            wait_for(
                lambda: broker.returncode is not None,
                20,
                message=lambda: f"the broker to exit; its log:\n{broker.log_tail()}",
            )
        finally:
            broker.kill()
        elapsed = time.monotonic() - started
    assert broker.returncode == 1
    assert elapsed < 15
    text = broker.log_path.read_text()
    # The broker's own words, not only gRPC's core log line.
    reason = f"broker 1 cannot listen on 127.0.0.1:{port}: the port is already in use"
    assert f"ERROR broker broker failed to start event=start_failed {reason}" in text, text
    assert "Traceback" not in text, text
    assert zk_client.exists(broker_path(1)) is None


def _offsets_for_epoch(
    cluster: Cluster, broker_id: int, leader_epoch: int, current_leader_epoch: int | None = None
) -> tuple[int, int, int]:
    request = pb.OffsetsForLeaderEpochRequest(replica_id=CONSUMER)
    part = request.topics.add(topic=TP.topic).partitions.add(
        partition=TP.partition, leader_epoch=leader_epoch
    )
    if current_leader_epoch is not None:
        part.current_leader_epoch = current_leader_epoch
    response = cluster.broker_stub(broker_id).OffsetsForLeaderEpoch(request, timeout=10)
    answer = response.topics[0].partitions[0]
    return answer.error_code, answer.leader_epoch, answer.end_offset


def _list_offset(
    cluster: Cluster,
    broker_id: int,
    timestamp: int,
    current_leader_epoch: int | None = None,
    replica_id: int = CONSUMER,
) -> tuple[int, int]:
    request = pb.ListOffsetsRequest(replica_id=replica_id)
    part = request.topics.add(name=TP.topic).partitions.add(
        partition_index=TP.partition, timestamp=timestamp
    )
    if current_leader_epoch is not None:
        part.current_leader_epoch = current_leader_epoch
    response = cluster.broker_stub(broker_id).ListOffsets(request, timeout=10)
    answer = response.topics[0].partitions[0]
    return answer.error_code, answer.offset


def test_offsets_for_leader_epoch_and_list_offsets_across_two_epochs(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    # A long lag time keeps a paused follower in the ISR, so the HW stays below the LEO.
    overrides = {"replica.lag.time.max.ms": "30000"}
    with running_cluster(
        zk_client, zk_connect, tmp_path, (1, 2), overrides, scripted_controller=True
    ) as cluster:
        controller = cluster.controller
        controller.create_topic(TP.topic, {0: [1, 2]})
        _produce_ok(cluster, 1, [b"e0-a", b"e0-b", b"e0-c"])  # epoch 0: offsets 0-2
        assert controller.elect(TP, 1).leader_epoch == 1  # the same leader, a new epoch
        assert _produce_ok(cluster, 1, [b"e1-a", b"e1-b"]) == 3  # epoch 1: offsets 3-4

        not_leader = pb.NOT_LEADER_OR_FOLLOWER
        assert _offsets_for_epoch(cluster, 2, 1)[0] == not_leader
        assert _list_offset(cluster, 2, LATEST)[0] == not_leader
        assert _list_offset(cluster, 2, EARLIEST)[0] == not_leader

        cluster.brokers[2].pause()
        _produce_ok(cluster, 1, [b"e1-unreplicated"], acks=1)  # LEO 6, HW stays 5
        hw, leo = 5, 6

        # KIP-101/279: an epoch's end offset is the start offset of the next epoch.
        assert _offsets_for_epoch(cluster, 1, 0) == (pb.NONE, 0, 3)
        assert _offsets_for_epoch(cluster, 1, 1) == (pb.NONE, 1, leo)
        assert _offsets_for_epoch(cluster, 1, 0, current_leader_epoch=1) == (pb.NONE, 0, 3)
        # KIP-320: the requester's idea of the current epoch is checked first.
        assert _offsets_for_epoch(cluster, 1, 1, current_leader_epoch=0)[0] == (
            pb.FENCED_LEADER_EPOCH
        )
        assert _offsets_for_epoch(cluster, 1, 1, current_leader_epoch=2)[0] == (
            pb.UNKNOWN_LEADER_EPOCH
        )

        assert _list_offset(cluster, 1, EARLIEST) == (pb.NONE, 0)
        assert _list_offset(cluster, 1, LATEST) == (pb.NONE, hw)  # consumers: the HW
        assert _list_offset(cluster, 1, LATEST, replica_id=2) == (pb.NONE, leo)
        assert _list_offset(cluster, 1, LATEST, current_leader_epoch=1) == (pb.NONE, hw)
        assert _list_offset(cluster, 1, LATEST, current_leader_epoch=0)[0] == (
            pb.FENCED_LEADER_EPOCH
        )
        assert _list_offset(cluster, 1, EARLIEST, current_leader_epoch=2)[0] == (
            pb.UNKNOWN_LEADER_EPOCH
        )

        cluster.brokers[2].resume()
        wait_for(
            lambda: _list_offset(cluster, 1, LATEST) == (pb.NONE, leo),
            15,
            message="the HW to reach the LEO once the follower fetches again",
        )


def _metadata(cluster: Cluster, broker_id: int, *topics: str) -> pb.MetadataResponse:
    request = pb.MetadataRequest(topics=list(topics))
    return cluster.broker_stub(broker_id).Metadata(request, timeout=10)


def _partitions(
    response: pb.MetadataResponse,
) -> dict[tuple[str, int], tuple[int, int, list[int], list[int]]]:
    """(topic, partition) -> (leader, leader epoch, replicas, ISR)."""
    return {
        (t.name, p.partition_index): (
            p.leader_id,
            p.leader_epoch,
            list(p.replica_nodes),
            list(p.isr_nodes),
        )
        for t in response.topics
        for p in t.partitions
        if t.error_code == pb.NONE and p.error_code == pb.NONE
    }


def test_metadata_lists_brokers_controller_and_partitions_as_pushed(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path, scripted_controller=True) as cluster:
        controller = cluster.controller
        controller.create_topic("alpha", {0: [1, 2, 3], 1: [2, 3, 1]})
        controller.create_topic("beta", {0: [3, 1]})
        controller.elect(TopicPartition("alpha", 1), 3, isr=[3, 1, 2])

        expected = {
            ("alpha", 0): (1, 0, [1, 2, 3], [1, 2, 3]),
            ("alpha", 1): (3, 1, [2, 3, 1], [3, 1, 2]),
            ("beta", 0): (3, 0, [3, 1], [3, 1]),
        }
        brokers = [(i, "127.0.0.1", cluster.brokers[i].port) for i in (1, 2, 3)]
        for broker_id in (1, 2, 3):
            response = _metadata(cluster, broker_id)
            assert [(b.node_id, b.host, b.port) for b in response.brokers] == brokers
            assert response.controller_id == CONTROLLER_ID
            assert sorted(t.name for t in response.topics) == ["alpha", "beta"]
            assert _partitions(response) == expected, broker_id

        response = _metadata(cluster, 2, "beta", "no-such-topic", "bad/name")
        assert [(t.name, t.error_code) for t in response.topics] == [
            ("beta", pb.NONE),
            ("no-such-topic", pb.UNKNOWN_TOPIC_OR_PARTITION),
            ("bad/name", pb.INVALID_TOPIC),
        ]
        assert _partitions(response) == {("beta", 0): expected[("beta", 0)]}


def _fetch_request(offset: int, max_wait_ms: int) -> pb.FetchRequest:
    request = pb.FetchRequest(
        replica_id=CONSUMER, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20
    )
    request.topics.add(topic=TP.topic).partitions.add(
        partition=TP.partition, fetch_offset=offset, partition_max_bytes=1 << 20
    )
    return request


def _records(part: pb.FetchPartitionData) -> list[tuple[int, bytes | None]]:
    return [
        (r.offset, r.value)
        for scanned in scan_batches(part.records)
        for r in decode_batch(part.records, scanned.position).records
    ]


def test_consumer_fetch_long_poll_wakes_on_produce_and_times_out_empty(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(
        zk_client, zk_connect, tmp_path, (1, 2), scripted_controller=True
    ) as cluster:
        cluster.controller.create_topic(TP.topic, {0: [1, 2]})
        _produce_ok(cluster, 1, [b"first"])
        hw = 1
        stub = cluster.broker_stub(1)

        # Nothing arrives: the fetch waits its max_wait_ms and returns empty.
        started = time.monotonic()
        response = stub.Fetch(_fetch_request(hw, max_wait_ms=2000), timeout=15)
        waited = time.monotonic() - started
        part = response.responses[0].partitions[0]
        assert part.error_code == pb.NONE, part
        assert part.records == b""
        assert part.high_watermark == hw
        # 1.9: the broker's timer granularity; the upper bound only catches a hang.
        assert 1.9 <= waited < 10.0, waited

        # A record produced (acks=all) by another thread while the fetch waits wakes it.
        with ThreadPoolExecutor(max_workers=1) as pool:
            started = time.monotonic()
            call = stub.Fetch.future(_fetch_request(hw, max_wait_ms=20_000), timeout=40)
            produced = pool.submit(cluster.produce, 1, TP, [b"wake-up"])
            response = call.result()
            waited = time.monotonic() - started
            assert produced.result().error_code == pb.NONE
        part = response.responses[0].partitions[0]
        assert part.error_code == pb.NONE, part
        assert _records(part) == [(hw, b"wake-up")]
        assert part.high_watermark == hw + 1
        assert waited < 10.0, waited  # woken by the record, well before max_wait_ms
