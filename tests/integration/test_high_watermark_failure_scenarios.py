"""The two pre-0.11 failure scenarios of DESIGN.md §8, driven with real broker processes.

RF=2, min.insync.replicas=1, A (broker 1) leads and B (broker 2) follows. The divergence
scenario runs under the brokers' own controller (an unclean election, as §8 says). The
data-loss scenario needs B truncated yet still in the ISR when A dies, which the real
controller's KIP-380 bounce handling never produces (a restarted B leaves the ISR), so
there a scripted controller holds the election and dictates each LeaderAndIsr, as a
controller that missed B's fast restart (Kafka before 2.2) would have. Each scenario runs
in both ``replication.truncation.mode`` settings: ``high-watermark`` (Kafka before 0.11)
shows the bug, ``leader-epoch`` (KIP-101/KIP-279) shows it fixed. Outcomes are read from the
replicas' segment files, not from what the brokers report.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.client import KazooClient

from broker.topic_partition import TopicPartition
from proto import minibroker_pb2 as pb
from tests.cluster import Cluster, running_cluster
from tests.helpers import wait_for

pytestmark = pytest.mark.integration

TP = TopicPartition("scenario", 0)
A, B = 1, 2
MODES = ["high-watermark", "leader-epoch"]


def _values(cluster: Cluster, broker_id: int) -> list[bytes | None]:
    records = cluster.replica_records(broker_id, TP)
    assert [o for o, _ in records] == list(range(len(records))), "gap in the replica's log"
    return [v for _, v in records]


@pytest.mark.parametrize("mode", MODES)
def test_data_loss_when_the_restarted_follower_truncates_to_its_hw(
    mode: str, zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    # B learns each HW 3 s late: it will hold m1 while its HW still says 1.
    overrides = {"replication.truncation.mode": mode}
    with running_cluster(
        zk_client, zk_connect, tmp_path, (A, B), overrides,
        broker_overrides={B: {"test.follower.hw.update.delay.ms": "3000"}},
        scripted_controller=True,
    ) as cluster:  # fmt: skip
        controller = cluster.controller
        controller.create_topic(TP.topic, {0: [A, B]})
        assert cluster.produce(A, TP, [b"m0"]).error_code == pb.NONE
        wait_for(lambda: cluster.checkpointed_hw(B, TP) == 1, 15, message="B's HW to reach 1")

        acked = cluster.produce(A, TP, [b"m1"])  # acks=all: B has fetched m1
        assert acked.error_code == pb.NONE
        assert acked.base_offset == 1
        wait_for(lambda: cluster.checkpointed_hw(A, TP) == 2, 5, message="A's HW 2 on disk")
        assert _values(cluster, B) == [b"m0", b"m1"]
        assert cluster.checkpointed_hw(B, TP) == 1  # the state of DESIGN.md §8

        # B restarts; A freezes before B can fetch m1 again, then dies.
        cluster.brokers[B].kill()
        cluster.brokers[A].pause()
        cluster.brokers[B].start(zk_client)
        controller.push([TP], to=[B])  # B follows A again (epoch 0)
        if mode == "high-watermark":
            wait_for(lambda: _values(cluster, B) == [b"m0"], 10, message="B to truncate to HW 1")
        cluster.brokers[A].kill()
        controller.elect(TP, B, isr=[B])  # a clean election: B is in the ISR

        cluster.brokers[A].start(zk_client)
        controller.push([TP], to=[A])  # A follows B
        controller.wait_for_isr(TP, {A, B})
        if mode == "high-watermark":
            # A found its offset 1 beyond B's log end and truncated: acked m1 is gone.
            wait_for(lambda: _values(cluster, A) == [b"m0"], 10, message="A to lose m1")
            assert _values(cluster, B) == [b"m0"]
        else:
            assert _values(cluster, B) == [b"m0", b"m1"]
            assert _values(cluster, A) == [b"m0", b"m1"]


@pytest.mark.parametrize("mode", MODES)
def test_divergence_after_an_unclean_election(
    mode: str, zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    # Here the brokers' own controller makes every decision, unclean election included.
    overrides = {"replication.truncation.mode": mode}
    with running_cluster(zk_client, zk_connect, tmp_path, (A, B), overrides) as cluster:
        cluster.create_topic(TP.topic, {0: [A, B]}, {"unclean.leader.election.enable": "true"})
        assert cluster.produce(A, TP, [b"m0"]).error_code == pb.NONE
        wait_for(lambda: cluster.checkpointed_hw(B, TP) == 1, 10, message="B's HW to reach 1")

        # B stalls and leaves the ISR; A alone commits m1 (HW 2).
        cluster.brokers[B].pause()
        assert cluster.produce(A, TP, [b"m1"]).error_code == pb.NONE
        cluster.wait_for_isr(TP, {A})
        wait_for(lambda: cluster.checkpointed_hw(A, TP) == 2, 5, message="A's HW 2 on disk")

        # Both die; B returns first and the controller elects it although it is not in
        # the ISR (the topic allows unclean election).
        cluster.brokers[B].kill()
        cluster.brokers[A].kill()
        cluster.brokers[B].start(zk_client)
        cluster.wait_for_leader(TP, [B])
        m2 = cluster.produce(B, TP, [b"m2"], acks=1)
        assert m2.error_code == pb.NONE
        assert m2.base_offset == 1  # the offset A used for m1

        cluster.brokers[A].start(zk_client)
        cluster.wait_for_isr(TP, {A, B})
        assert _values(cluster, B) == [b"m0", b"m2"]
        if mode == "high-watermark":
            # A kept offset 1 = m1 below its HW: the replicas disagree for good.
            assert _values(cluster, A) == [b"m0", b"m1"]
        else:
            # A asked for the end of epoch 0 (offset 1), truncated m1 and copied m2.
            wait_for(lambda: _values(cluster, A) == [b"m0", b"m2"], 10, message="A to match B")
