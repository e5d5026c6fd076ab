"""More replicas than open segment files: eviction under replication loses nothing.

Every broker keeps at most 4 segment files open (``log.segment.open.files.max``), hosts 12
replicas of small segments (several per log) and replicates them to the others, so leaders'
appends, followers' appends and every fetch keep closing and reopening segment files. Every
acknowledged record is then on every replica, a consumer reads them all back in order, the
brokers' descriptors stayed within the pool and their sockets, and a restarted broker
(loading every log again) catches up.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from proto.topic_partition import TopicPartition
from proto.wire.minibroker_pb2 import ErrorCode
from tests.cluster import Cluster
from tests.helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TOPIC = "pooled"
PARTITIONS = 12
POOL = 4
ROUNDS = 6
OVERRIDES = {"log.segment.open.files.max": str(POOL), "log.segment.bytes": "1024"}


def open_segment_files(pid: int) -> int:
    """The process's descriptors on ``.log`` files of the topic."""
    count = 0
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except FileNotFoundError:
            continue
        if f"/{TOPIC}-" in target and target.endswith(".log"):
            count += 1
    return count


def replicated(cluster: Cluster, broker_id: int, tp: TopicPartition, values: list[bytes]) -> bool:
    """Whether the replica's segment files hold exactly ``values``."""
    return [v for _, v in cluster.replica_records(broker_id, tp)] == values


def test_replicas_beyond_the_pool_of_open_segment_files_lose_no_acknowledged_record(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    cluster = Cluster(zk_client, zk_connect, tmp_path, (1, 2, 3), overrides=OVERRIDES)
    brokers = [1, 2, 3]
    assignment = {p: brokers[p % 3 :] + brokers[: p % 3] for p in range(PARTITIONS)}
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    try:
        cluster.start()
        cluster.create_topic(TOPIC, assignment)
        for tp in tps:
            cluster.wait_for_isr(tp, set(brokers))
        acked: dict[TopicPartition, list[bytes]] = {tp: [] for tp in tps}
        peak = 0
        for round_ in range(ROUNDS):
            for tp in tps:
                values = [b"%d-%d-%d" % (tp.partition, round_, i) + b"." * 200 for i in range(3)]
                leader = assignment[tp.partition][0]
                response = cluster.produce(leader, tp, values)
                assert response.error_code == ErrorCode.NONE, response.error_message
                acked[tp].extend(values)
            for broker in cluster.brokers.values():
                assert broker.pid is not None
                peak = max(peak, open_segment_files(broker.pid))
        # A descriptor in use is never closed, so a broker may briefly hold a few more.
        assert peak <= POOL + 4, f"{peak} segment files open at once, pool of {POOL}"

        for tp in tps:
            leader = assignment[tp.partition][0]
            assert [v for _, v in cluster.consume_all(leader, tp)] == acked[tp]
            for broker_id in brokers:
                wait_for(
                    functools.partial(replicated, cluster, broker_id, tp, acked[tp]),
                    20,
                    message=f"{tp} replicated to broker {broker_id}",
                )
        segments = sum(
            1 for path in cluster.partition_dir(1, tps[0]).iterdir() if path.suffix == ".log"
        )
        assert segments > 1, "the logs rolled, so old segments are read too"

        cluster.brokers[2].stop()
        cluster.brokers[2].start(cluster.zk)
        for tp in tps:
            cluster.wait_for_isr(tp, set(brokers), timeout=30)
            serving = cluster.leader_serving(tp)
            assert serving is not None
            assert [v for _, v in cluster.consume_all(serving, tp)] == acked[tp]
        log_text = cluster.brokers[2].log_path.read_text(errors="replace")
        assert "event=log_dir_offline" not in log_text
        assert "max_open_segment_files=4" in log_text
    finally:
        cluster.stop_all()
