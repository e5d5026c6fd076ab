"""Control requests no controller would send: path traversal, forged epochs, undecodable bytes.

Each test is a finding of a probe of a running cluster (the first security review), replayed
against real broker processes under their real controller: the broker refuses the request
with a clear error, nothing on disk outside (or inside) its data dir is touched, the cluster
keeps its controller and its data.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperServer
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.zk import znodes
from proto.zk.sync_client import read_registered_broker
from tests.cluster import Cluster, running_cluster
from tests.helpers import chrooted_client, wait_for
from tests.integration.test_kafka_listener import kafka_call

pytestmark = pytest.mark.integration

TP = TopicPartition("precious", 0)
INT32_MAX = 2**31 - 1
ACKED = [f"m{i}".encode() for i in range(500)]


@pytest.fixture(scope="module")
def zk(zookeeper: ZooKeeperServer) -> Iterator[KazooClient]:
    with chrooted_client(zookeeper) as client:
        yield client


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer, zk: KazooClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """Three brokers under their own controller, laid out as ``cluster up`` lays them out
    (``D/broker-N``), with 500 acknowledged records on every replica of ``precious-0``."""
    root = tmp_path_factory.mktemp("hostile")
    connect = zookeeper.connect_string + zk.chroot
    with running_cluster(zk, connect, root, overrides={"kafka.port": "0"}) as c:
        c.create_topic(TP.topic, {0: [1, 2, 3]})
        for start in range(0, len(ACKED), 100):
            response = c.produce(1, TP, ACKED[start : start + 100])
            assert response.error_code == pb.NONE, response.error_message
        c.wait_for_isr(TP, {1, 2, 3})
        yield c


def broker_epoch(zk: KazooClient, broker_id: int) -> int:
    """What a reader of the open ZooKeeper learns: the broker's KIP-380 epoch."""
    stat = zk.exists(znodes.broker_path(broker_id))
    assert stat is not None
    return int(stat.czxid)


def intact(cluster: Cluster) -> None:
    """Every replica still holds the 500 records, and the leader serves them."""
    for b in (1, 2, 3):
        assert [v for _, v in cluster.replica_records(b, TP)][: len(ACKED)] == ACKED, b
    leader = cluster.wait_for_leader(TP)
    assert [v for _, v in cluster.consume_all(leader, TP)][: len(ACKED)] == ACKED


def log_of(cluster: Cluster, broker_id: int) -> str:
    return cluster.brokers[broker_id].log_path.read_text(errors="replace")


def test_path_traversal_in_stop_replica_deletes_nothing_outside_the_data_dir(
    cluster: Cluster, zk: KazooClient, tmp_path: Path
) -> None:
    # A sibling of the data dirs (as `cluster up` lays out D/broker-N, another broker's dir
    # is one `..` away) and a directory named by an absolute path.
    sibling = cluster.root / "victim-0"
    sibling.mkdir()
    (sibling / "keep").write_text("mine")
    absolute = tmp_path / "elsewhere-0"
    absolute.mkdir()
    (absolute / "keep").write_text("mine")
    topics = ["../victim", "../broker-2/precious", str(tmp_path / "elsewhere"), "..", "a/b"]
    for topic in topics:
        request = pb.StopReplicaRequest(
            controller_id=1,
            controller_epoch=cluster.controller_epoch(),
            broker_epoch=broker_epoch(zk, 1),
        )
        request.partition_states.add(
            topic_name=topic, partition_index=0, leader_epoch=-2, delete_partition=True
        )
        answer = cluster.control_stub(1).StopReplica(request, timeout=10)
        assert answer.error_code == pb.INVALID_REQUEST, (topic, answer)
    assert (sibling / "keep").read_text() == "mine"
    assert (absolute / "keep").read_text() == "mine"
    assert cluster.partition_dir(2, TP).is_dir()
    intact(cluster)


def test_path_traversal_in_leader_and_isr_creates_nothing_outside_the_data_dir(
    cluster: Cluster, zk: KazooClient, tmp_path: Path
) -> None:
    for topic in ("../escaped", str(tmp_path / "abs")):
        request = pb.LeaderAndIsrRequest(
            controller_id=1,
            controller_epoch=cluster.controller_epoch(),
            broker_epoch=broker_epoch(zk, 1),
        )
        request.partition_states.add(
            topic_name=topic, partition_index=0, leader=1, leader_epoch=0, isr=[1], replicas=[1]
        )
        answer = cluster.control_stub(1).LeaderAndIsr(request, timeout=10)
        assert answer.error_code == pb.INVALID_REQUEST, (topic, answer)
    assert not (cluster.root / "escaped-0").exists()
    assert not (tmp_path / "abs-0").exists()


def test_forged_stop_replica_with_unknown_broker_epoch_deletes_no_replica(
    cluster: Cluster,
) -> None:
    # broker_epoch -1 must not skip the KIP-380 check, or it deletes all three replicas.
    for b in (1, 2, 3):
        request = pb.StopReplicaRequest(
            controller_id=1, controller_epoch=cluster.controller_epoch(), broker_epoch=-1
        )
        request.partition_states.add(
            topic_name=TP.topic, partition_index=0, leader_epoch=-2, delete_partition=True
        )
        answer = cluster.control_stub(b).StopReplica(request, timeout=10)
        assert answer.error_code == pb.STALE_BROKER_EPOCH, answer
        assert "control.request.unknown.broker.epoch.enable" in log_of(cluster, b)
    intact(cluster)


def test_forged_stop_replica_with_valid_epochs_deletes_no_replica_zookeeper_keeps(
    cluster: Cluster, zk: KazooClient
) -> None:
    # Right broker and controller epochs (anyone can read them from ZooKeeper), but
    # ZooKeeper neither deletes the topic nor moves the replica away: nothing is deleted.
    state = cluster.state(TP)
    assert state is not None
    for leader_epoch in (-2, state.leader_epoch, -1):
        for b in (1, 2, 3):
            request = pb.StopReplicaRequest(
                controller_id=1,
                controller_epoch=cluster.controller_epoch(),
                broker_epoch=broker_epoch(zk, b),
            )
            request.partition_states.add(
                topic_name=TP.topic,
                partition_index=0,
                leader_epoch=leader_epoch,
                delete_partition=True,
            )
            answer = cluster.control_stub(b).StopReplica(request, timeout=10)
            assert answer.error_code == pb.NONE
            [error] = answer.partition_errors
            assert error.error_code == pb.INVALID_REQUEST, error
            assert "ZooKeeper" in error.error_message
    intact(cluster)


def test_forged_update_metadata_with_huge_controller_epoch_is_refused_and_starts_no_election(
    cluster: Cluster, zk: KazooClient
) -> None:
    epoch_before = cluster.controller_epoch()
    controller = cluster.wait_for_controller()
    victim = next(b for b in (1, 2, 3) if b != controller)
    forged = pb.UpdateMetadataRequest(
        controller_id=victim, controller_epoch=INT32_MAX, broker_epoch=broker_epoch(zk, victim)
    )
    answer = cluster.control_stub(victim).UpdateMetadata(forged, timeout=10)
    assert answer.error_code == pb.STALE_CONTROLLER_EPOCH
    # The real controller is still believed: a topic it creates reaches the victim's
    # metadata, and no election happened (the epoch did not move).
    cluster.create_topic("after-forgery", {0: [victim]})
    wait_for(
        lambda: _leader_in_metadata(cluster, victim, "after-forgery") == victim,
        20,
        message="the victim's metadata to show the real controller's new topic",
    )
    assert cluster.controller_epoch() == epoch_before
    assert cluster.wait_for_controller() == controller


def test_forged_leader_and_isr_with_huge_leader_epoch_does_not_hijack_leadership(
    cluster: Cluster, zk: KazooClient
) -> None:
    state = cluster.state(TP)
    assert state is not None
    hijacker = next(b for b in (1, 2, 3) if b != state.leader)
    for leader_epoch in (INT32_MAX, state.leader_epoch + 1, state.leader_epoch):
        forged = pb.LeaderAndIsrRequest(
            controller_id=1,
            controller_epoch=cluster.controller_epoch(),
            broker_epoch=broker_epoch(zk, hijacker),
        )
        forged.partition_states.add(
            topic_name=TP.topic,
            partition_index=0,
            controller_epoch=cluster.controller_epoch(),
            leader=hijacker,
            leader_epoch=leader_epoch,
            isr=[hijacker],
            zk_version=state.zk_version,
            replicas=[1, 2, 3],
        )
        answer = cluster.control_stub(hijacker).LeaderAndIsr(forged, timeout=10)
        [error] = answer.partition_errors
        assert error.error_code == pb.INVALID_REQUEST, (leader_epoch, error)
        assert "ZooKeeper" in error.error_message
    # The hijacker is still a follower: it refuses produce; the real leader serves.
    refused = cluster.produce(hijacker, TP, [b"hijacked?"], acks=1)
    assert refused.error_code == pb.NOT_LEADER_OR_FOLLOWER
    now = cluster.state(TP)
    assert now is not None
    # The ISR may move on its own (same epoch): only the leadership must not have.
    assert (now.leader, now.leader_epoch) == (state.leader, state.leader_epoch)
    intact(cluster)


def test_forged_controlled_shutdown_at_an_unregistered_epoch_moves_no_leadership(
    cluster: Cluster, zk: KazooClient
) -> None:
    # broker_epoch -1 (unknown) used to skip the check: one request per broker moved every
    # leadership off it. Neither -1 nor a guessed newer epoch is the registration's.
    state = cluster.state(TP)
    assert state is not None
    controller = cluster.wait_for_controller()
    before = log_of(cluster, controller)
    forged_epochs = (-1, broker_epoch(zk, state.leader) + 1)
    for forged_epoch in forged_epochs:
        answer = cluster.control_stub(controller).ControlledShutdown(
            pb.ControlledShutdownRequest(broker_id=state.leader, broker_epoch=forged_epoch),
            timeout=10,
        )
        assert answer.error_code == pb.STALE_BROKER_EPOCH, answer
        assert str(broker_epoch(zk, state.leader)) in answer.error_message
    now = cluster.state(TP)
    assert now is not None
    assert (now.leader, now.leader_epoch) == (state.leader, state.leader_epoch)
    assert state.leader in now.isr
    assert cluster.produce(state.leader, TP, [b"still-led"], acks=-1).error_code == pb.NONE
    new_lines = log_of(cluster, controller)[len(before) :]
    assert new_lines.count("event=refused_controlled_shutdown") == len(forged_epochs), new_lines


def registered_endpoints(zk: KazooClient) -> dict[int, tuple[str, int, tuple[str, int] | None]]:
    endpoints = {}
    for b in (1, 2, 3):
        registered = read_registered_broker(zk, b)
        assert registered is not None
        endpoints[b] = (registered.host, registered.port, registered.kafka_endpoint)
    return endpoints


def test_forged_update_metadata_with_real_epochs_names_no_leader_or_endpoint_zookeeper_denies(
    cluster: Cluster, zk: KazooClient
) -> None:
    # Real epochs (anyone reads them from ZooKeeper), but broker 9 at evil.example:1 as the
    # leader and every broker moved to the attacker's host: ZooKeeper names neither.
    from kio.schema.metadata.v9 import request as metadata_v9
    from kio.schema.types import TopicName

    state = cluster.state(TP)
    assert state is not None
    controller = cluster.wait_for_controller()
    victim = next(b for b in (1, 2, 3) if b != controller)
    real = registered_endpoints(zk)
    before = log_of(cluster, victim)
    forged = pb.UpdateMetadataRequest(
        controller_id=controller,
        controller_epoch=cluster.controller_epoch(),
        broker_epoch=broker_epoch(zk, victim),
    )
    forged.live_brokers.add(
        node_id=9, host="evil.example", port=1, kafka_host="evil.example", kafka_port=1
    )
    for b in (1, 2, 3):
        forged.live_brokers.add(
            node_id=b,
            host="evil.example",
            port=1000 + b,
            kafka_host="evil.example",
            kafka_port=2000 + b,
        )
    for leader_epoch in (state.leader_epoch, state.leader_epoch + 1):
        forged.partition_states.add(
            topic_name=TP.topic,
            partition_index=0,
            controller_epoch=cluster.controller_epoch(),
            leader=9,
            leader_epoch=leader_epoch,
            isr=[9],
            zk_version=state.zk_version,
            replicas=[9],
        )
        answer = cluster.control_stub(victim).UpdateMetadata(forged, timeout=10)
        assert answer.error_code == pb.NONE  # the parts ZooKeeper agrees with are applied
        del forged.partition_states[:]

    grpc_metadata = cluster.broker_stub(victim).Metadata(
        pb.MetadataRequest(topics=[TP.topic]), timeout=5
    )
    assert {
        b.node_id: (b.host, b.port, (b.kafka_host, b.kafka_port)) for b in grpc_metadata.brokers
    } == real
    [topic] = grpc_metadata.topics
    assert topic.partitions[0].leader_id == state.leader
    victim_kafka = real[victim][2]
    assert victim_kafka is not None
    kafka_metadata = kafka_call(
        f"{victim_kafka[0]}:{victim_kafka[1]}",
        3,
        9,
        metadata_v9.MetadataRequest(
            topics=(metadata_v9.MetadataRequestTopic(name=TopicName(TP.topic)),),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        ),
    )
    assert {b.node_id: (b.host, b.port) for b in kafka_metadata.brokers} == {
        b: e[2] for b, e in real.items()
    }
    assert kafka_metadata.topics[0].partitions[0].leader_id == state.leader
    new_lines = log_of(cluster, victim)[len(before) :]
    assert new_lines.count("event=refused_update_metadata_broker") == 4 * 2, new_lines
    assert new_lines.count("event=refused_update_metadata_partition") == 2, new_lines
    assert "broker 9" in new_lines
    assert "evil.example" in new_lines
    intact(cluster)


def test_undecodable_requests_get_invalid_argument_and_one_log_line(cluster: Cluster) -> None:
    garbage = b"\xff\xff\xff\xff\x0f not a protobuf message"
    before = log_of(cluster, 1)
    for method in ("/minibroker.Broker/Produce", "/minibroker.Control/LeaderAndIsr"):
        call = cluster.channel(1).unary_unary(
            method, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )
        with pytest.raises(grpc.RpcError) as raised:
            call(garbage, timeout=10)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert method in str(raised.value.details())
    new_lines = log_of(cluster, 1)[len(before) :]
    assert new_lines.count("event=request_undecodable") == 2, new_lines
    assert "Traceback" not in new_lines
    assert cluster.produce(1, TP, [b"still-served"], acks=1).error_code in (
        pb.NONE,
        pb.NOT_LEADER_OR_FOLLOWER,
    )


def _leader_in_metadata(cluster: Cluster, broker_id: int, topic: str) -> int | None:
    response = cluster.broker_stub(broker_id).Metadata(
        pb.MetadataRequest(topics=[topic]), timeout=5
    )
    [found] = response.topics
    if found.error_code != pb.NONE or not found.partitions:
        return None
    return found.partitions[0].leader_id


def test_forged_update_metadata_names_no_controller_or_replicas_zookeeper_denies(
    cluster: Cluster, zk: KazooClient
) -> None:
    # Real epochs and the leader the state znode names, but another broker as the controller
    # (clients would send it their admin requests), and the partition's replicas replaced by
    # broker 9 with every real replica marked offline.
    state = cluster.state(TP)
    assert state is not None
    controller = cluster.wait_for_controller()
    victim = next(b for b in (1, 2, 3) if b != controller)
    real = registered_endpoints(zk)
    before = log_of(cluster, victim)
    forged = pb.UpdateMetadataRequest(
        controller_id=victim,
        controller_epoch=cluster.controller_epoch(),
        broker_epoch=broker_epoch(zk, victim),
    )
    for b, (host, port, kafka) in real.items():
        assert kafka is not None
        forged.live_brokers.add(
            node_id=b, host=host, port=port, kafka_host=kafka[0], kafka_port=kafka[1]
        )
    forged.partition_states.add(
        topic_name=TP.topic,
        partition_index=0,
        controller_epoch=cluster.controller_epoch(),
        leader=state.leader,
        leader_epoch=state.leader_epoch,
        isr=list(state.isr),
        zk_version=state.zk_version,
        replicas=[state.leader, 9],
        offline_replicas=[1, 2, 3],
    )
    answer = cluster.control_stub(victim).UpdateMetadata(forged, timeout=10)
    assert answer.error_code == pb.NONE  # the parts ZooKeeper agrees with are applied

    grpc_metadata = cluster.broker_stub(victim).Metadata(
        pb.MetadataRequest(topics=[TP.topic]), timeout=5
    )
    assert grpc_metadata.controller_id == controller
    [topic] = grpc_metadata.topics
    partition = topic.partitions[0]
    assert list(partition.replica_nodes) == [1, 2, 3]
    assert list(partition.offline_replicas) == []
    assert partition.leader_id == state.leader
    new_lines = log_of(cluster, victim)[len(before) :]
    assert new_lines.count("event=refused_update_metadata_controller") == 1, new_lines
    assert new_lines.count("event=refused_update_metadata_replicas") == 1, new_lines
    intact(cluster)


def test_forged_leader_and_isr_names_no_leader_endpoint_zookeeper_denies(
    cluster: Cluster, zk: KazooClient
) -> None:
    # The partition state repeats ZooKeeper's, but the leader's endpoint is the attacker's:
    # a follower that started fetching on it would take the attacker's records.
    state = cluster.state(TP)
    assert state is not None
    follower = next(b for b in (1, 2, 3) if b != state.leader)
    before = log_of(cluster, follower)
    forged = pb.LeaderAndIsrRequest(
        controller_id=cluster.wait_for_controller(),
        controller_epoch=cluster.controller_epoch(),
        broker_epoch=broker_epoch(zk, follower),
    )
    forged.live_leaders.add(
        node_id=state.leader, host="evil.example", port=1, kafka_host="evil.example", kafka_port=2
    )
    forged.live_leaders.add(node_id=9, host="evil.example", port=3)
    forged.partition_states.add(
        topic_name=TP.topic,
        partition_index=0,
        controller_epoch=cluster.controller_epoch(),
        leader=state.leader,
        leader_epoch=state.leader_epoch,
        isr=list(state.isr),
        zk_version=state.zk_version,
        replicas=[1, 2, 3],
    )
    answer = cluster.control_stub(follower).LeaderAndIsr(forged, timeout=10)
    assert answer.error_code == pb.NONE
    new_lines = log_of(cluster, follower)[len(before) :]
    assert new_lines.count("event=refused_leader_and_isr_endpoint") == 2, new_lines
    assert "evil.example" in new_lines
    # The follower still replicates from the real leader.
    acked = cluster.produce(state.leader, TP, [b"after-forged-endpoint"], acks=-1)
    assert acked.error_code == pb.NONE, acked.error_message
    wait_for(
        lambda: (
            (acked.base_offset, b"after-forged-endpoint") in cluster.replica_records(follower, TP)
        ),
        20,
        message="the follower to copy the record from the real leader",
    )


def test_forged_stop_replica_without_delete_takes_no_replica_zookeeper_has_serving_offline(
    cluster: Cluster, zk: KazooClient
) -> None:
    # Real epochs, delete_partition=false, sent to every replica: each used to stop hosting
    # the partition (produce and fetch UNKNOWN_TOPIC_OR_PARTITION) while ZooKeeper, Metadata
    # and `cluster status` still showed it led and fully in sync.
    state = cluster.state(TP)
    assert state is not None
    before = {b: log_of(cluster, b) for b in (1, 2, 3)}
    for b in (1, 2, 3):
        request = pb.StopReplicaRequest(
            controller_id=cluster.wait_for_controller(),
            controller_epoch=cluster.controller_epoch(),
            broker_epoch=broker_epoch(zk, b),
        )
        request.partition_states.add(
            topic_name=TP.topic,
            partition_index=0,
            leader_epoch=state.leader_epoch,
            delete_partition=False,
        )
        answer = cluster.control_stub(b).StopReplica(request, timeout=10)
        assert answer.error_code == pb.NONE
        [error] = answer.partition_errors
        assert error.error_code == pb.INVALID_REQUEST, error
        assert "ZooKeeper has broker" in error.error_message
        new_lines = log_of(cluster, b)[len(before[b]) :]
        assert new_lines.count("event=refused_to_stop_replica") == 1, new_lines
    acked = cluster.produce(state.leader, TP, [b"after-forged-stop"], acks=-1)
    assert acked.error_code == pb.NONE, acked.error_message
    written = (acked.base_offset, b"after-forged-stop")
    for b in (1, 2, 3):

        def holds(broker: int = b) -> bool:
            return written in cluster.replica_records(broker, TP)

        wait_for(holds, 20, message=f"broker {b} to hold the record written after the forgery")
        metadata = cluster.broker_stub(b).Metadata(pb.MetadataRequest(topics=[TP.topic]), timeout=5)
        assert list(metadata.topics[0].partitions[0].offline_replicas) == []
    intact(cluster)
