"""Replication between real broker processes: HW, ISR, acks=all and min.insync.replicas."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.client import KazooClient

from proto.records.record_batch import scan_batches
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.zk import znodes
from tests.cluster import Cluster, running_cluster
from tests.helpers import wait_for

pytestmark = pytest.mark.integration

TP = TopicPartition("replicated", 0)


def replica_batches(
    cluster: Cluster, broker_id: int, tp: TopicPartition
) -> list[tuple[int, int, bytes]]:
    """(base offset, leader epoch, bytes from the CRC on) of every batch in the replica's files."""
    out: list[tuple[int, int, bytes]] = []
    for segment in sorted(cluster.partition_dir(broker_id, tp).glob("*.log")):
        data = segment.read_bytes()
        scan = scan_batches(data)
        for b in scan:
            assert b.crc_ok, f"broker {broker_id} {segment.name}: bad CRC at {b.position}"
            h = b.header
            out.append(
                (
                    h.base_offset,
                    h.partition_leader_epoch,
                    data[b.position + 17 : b.position + h.size],
                )
            )
        assert scan.stop_problem is None, scan.stop_reason
    return out


def log_end_offset(cluster: Cluster, broker_id: int, tp: TopicPartition) -> int:
    """The replica's log end offset as its files show it, while it may still be appending:
    a batch half written at the end of the last segment is not counted (yet)."""
    out = 0
    for segment in sorted(cluster.partition_dir(broker_id, tp).glob("*.log")):
        for b in scan_batches(segment.read_bytes()):
            out = b.header.base_offset + b.header.last_offset_delta + 1
    return out


def test_acks_all_records_reach_every_replica_byte_for_byte(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        cluster.create_topic(TP.topic, {0: [1, 2, 3]})
        offsets = []
        for i in range(100):
            values = [f"record-{i}-{j}".encode() for j in range(100)]
            response = cluster.produce(1, TP, values, acks=-1)
            assert response.error_code == pb.NONE, response.error_message
            offsets.append(response.base_offset)
        assert offsets == list(range(0, 10_000, 100))  # no offset assigned twice, no gap

        consumed = cluster.consume_all(1, TP)  # asserts every offset is below the HW
        assert [o for o, _ in consumed] == list(range(10_000))
        assert consumed[1234][1] == b"record-12-34"

        wait_for(
            lambda: all(log_end_offset(cluster, b, TP) == 10_000 for b in (2, 3)),
            20,
            message="followers to hold all 10,000 records",
        )
        leader = replica_batches(cluster, 1, TP)
        assert len(leader) == 100
        assert all(epoch == 0 for _, epoch, _ in leader)
        assert replica_batches(cluster, 2, TP) == leader
        assert replica_batches(cluster, 3, TP) == leader
        wait_for(
            lambda: all(cluster.checkpointed_hw(b, TP) == 10_000 for b in (1, 2, 3)),
            20,
            message="every replica to checkpoint HW 10000",
        )


def test_min_insync_replicas_refuses_acks_all_then_followers_rejoin(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        cluster.create_topic(TP.topic, {0: [1, 2, 3]}, config={"min.insync.replicas": "2"})
        assert cluster.produce(1, TP, [b"a"]).error_code == pb.NONE

        # A dead follower leaves the ISR once it has missed replica.lag.time.max.ms of
        # writes (Kafka's rule); the write that waited for it then completes.
        cluster.brokers[3].kill()
        assert cluster.produce(1, TP, [b"b"]).error_code == pb.NONE
        cluster.wait_for_isr(TP, {1, 2})

        cluster.brokers[2].kill()
        after_append = cluster.produce(1, TP, [b"c"])
        assert after_append.error_code == pb.NOT_ENOUGH_REPLICAS_AFTER_APPEND, after_append
        cluster.wait_for_isr(TP, {1})
        refused = cluster.produce(1, TP, [b"d"])
        assert refused.error_code == pb.NOT_ENOUGH_REPLICAS, refused
        assert cluster.produce(1, TP, [b"e"], acks=1).error_code == pb.NONE

        for broker_id in (2, 3):
            cluster.brokers[broker_id].start(zk_client)
        # The controller sees them register and sends them LeaderAndIsr: they follow again.
        cluster.wait_for_isr(TP, {1, 2, 3})
        assert cluster.produce(1, TP, [b"f"]).error_code == pb.NONE
        wait_for(
            lambda: (
                replica_batches(cluster, 2, TP)
                == replica_batches(cluster, 1, TP)
                == replica_batches(cluster, 3, TP)
            ),
            20,
            message="rejoined followers to match the leader",
        )
        assert [v for _, v in cluster.consume_all(1, TP)] == [b"a", b"b", b"c", b"e", b"f"]

        # The leader told the controller about its ISR changes (isr_change_notification);
        # the controller told every broker (UpdateMetadata) and deleted the notifications.
        def isr_in_metadata(broker_id: int) -> set[int]:
            meta = cluster.broker_stub(broker_id).Metadata(
                pb.MetadataRequest(topics=[TP.topic]), timeout=5
            )
            return set(meta.topics[0].partitions[0].isr_nodes)

        wait_for(
            lambda: all(isr_in_metadata(b) == {1, 2, 3} for b in (1, 2, 3)),
            20,
            message="every broker's metadata to show the ISR [1, 2, 3]",
        )
        path = znodes.ISR_CHANGE_NOTIFICATION_PATH
        wait_for(lambda: not zk_client.get_children(path), 20, message="notifications processed")


def test_acks_zero_writes_and_stop_replica_deletes_the_partition(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    # The test sends StopReplica itself: the scripted controller holds the election.
    with running_cluster(
        zk_client, zk_connect, tmp_path, (1, 2), scripted_controller=True
    ) as cluster:
        cluster.controller.create_topic(TP.topic, {0: [1, 2]})
        fire_and_forget = cluster.produce(1, TP, [b"a", b"b"], acks=0)
        assert fire_and_forget.error_code == pb.NONE
        wait_for(
            lambda: [v for _, v in cluster.replica_records(2, TP)] == [b"a", b"b"],
            10,
            message="the acks=0 records to replicate",
        )

        # The topic deletion the StopReplica stands for (the brokers check ZooKeeper).
        zk_client.create(znodes.delete_topic_path(TP.topic), makepath=True)
        request = pb.StopReplicaRequest(controller_id=0, controller_epoch=1)
        request.partition_states.add(
            topic_name=TP.topic, partition_index=0, leader_epoch=-2, delete_partition=True
        )
        for broker_id in (2, 1):
            request.broker_epoch = cluster.controller.broker_epoch(broker_id)
            response = cluster.control_stub(broker_id).StopReplica(request, timeout=10)
            assert response.error_code == pb.NONE
            assert [e.error_code for e in response.partition_errors] == [pb.NONE]
            assert not cluster.partition_dir(broker_id, TP).exists()
        gone = cluster.produce(1, TP, [b"c"], acks=1)
        assert gone.error_code == pb.UNKNOWN_TOPIC_OR_PARTITION
