"""A returning follower whose log ends inside a batch of its new leader's (docs/replication.md,
"A batch across the follower's log end"), with real ZooKeeper and broker processes and the
brokers' own controller.

The divergence scenario of the design notes, but the new leader's first write after the
unclean election is one batch of two records: A holds m0, m1 (HW 2), B leads with m0 and
writes m2, m3 at offsets 1-2 in one batch. A comes back; in ``high-watermark`` mode it
truncates to its HW, 2, which lies inside B's batch, so B answers its fetch at 2 with the
batch from offset 1. A refused that batch at every fetch and stayed out of the ISR for good;
now it cuts the batch at 2, keeps its own m1 below (the divergence the mode shows) and
rejoins the ISR. In ``leader-epoch`` mode A truncates to 1 and copies the batch whole.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.client import KazooClient

from broker.replication.truncation import TruncationMode
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from tests.cluster import running_cluster
from tests.helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

A, B = 1, 2
TP = TopicPartition("straddled", 0)


@pytest.mark.parametrize("mode", [TruncationMode.HIGH_WATERMARK, TruncationMode.LEADER_EPOCH])
def test_a_follower_whose_hw_falls_inside_the_new_leaders_batch_rejoins_the_isr(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path, mode: TruncationMode
) -> None:
    overrides = {"replication.truncation.mode": mode.value, "min.insync.replicas": "1"}
    with running_cluster(zk_client, zk_connect, tmp_path, (A, B), overrides) as cluster:
        cluster.create_topic(TP.topic, {0: [A, B]}, {"unclean.leader.election.enable": "true"})
        cluster.wait_for_leader(TP, accept=[A])
        assert cluster.produce(A, TP, [b"m0"]).error_code == pb.NONE
        wait_for(lambda: cluster.checkpointed_hw(B, TP) == 1, 20, message="B's HW 1")

        # B stalls; A drops it from the ISR and acknowledges m1 alone (HW 2).
        cluster.brokers[B].pause()
        answer = cluster.produce(A, TP, [b"m1"])
        assert (answer.error_code, answer.base_offset) == (pb.NONE, 1)
        wait_for(lambda: cluster.checkpointed_hw(A, TP) == 2, 20, message="A's HW 2")
        cluster.brokers[B].kill()
        cluster.brokers[A].kill()

        # B returns first and leads through an unclean election; m2, m3 go in one batch.
        cluster.brokers[B].start(zk_client)
        cluster.wait_for_leader(TP, accept=[B], timeout=30)
        answer = cluster.produce(B, TP, [b"m2", b"m3"], acks=1)
        assert (answer.error_code, answer.base_offset) == (pb.NONE, 1)

        cluster.brokers[A].start(zk_client)
        cluster.wait_for_isr(TP, {A, B}, timeout=30)
        wait_for(
            lambda: len(cluster.replica_records(A, TP)) == 3,
            20,
            message=lambda: f"A holding 3 records: {cluster.replica_records(A, TP)}",
        )
        log_lines = cluster.brokers[A].log_path.read_text().splitlines()

    assert cluster.replica_records(B, TP) == [(0, b"m0"), (1, b"m2"), (2, b"m3")]
    cut = [line for line in log_lines if "event=straddling_batch_cut" in line]
    if mode is TruncationMode.LEADER_EPOCH:
        assert cluster.replica_records(A, TP) == [(0, b"m0"), (1, b"m2"), (2, b"m3")]
        assert not cut
        return
    # Offset 1 differs from the leader's for good: the high-watermark mode's divergence.
    assert cluster.replica_records(A, TP) == [(0, b"m0"), (1, b"m1"), (2, b"m3")]
    assert len(cut) == 1, cut
    fields = dict(part.split("=", 1) for part in cut[0].split() if "=" in part)
    assert {k: fields[k] for k in ("broker", "tp", "leader", "batch_base", "leo", "own_to")} == {
        "broker": str(A),
        "tp": str(TP),
        "leader": str(B),
        "batch_base": "1",
        "leo": "2",
        "own_to": "1",
    }
    assert int(fields["batch_epoch"]) == int(fields["leader_epoch"]) > int(fields["local_epoch"])
