"""The control paths at a few thousand partitions (correctness, not speed: bench/scale.py
times them): 3 brokers, one topic of :data:`PARTITIONS` partitions with RF 3, every one led
and in sync; a controlled shutdown (SIGTERM) of a broker that is not the controller moves
every leadership it had to a live broker; a SIGKILL of the controller's broker leaves every
partition led by a live broker under a new controller; and nothing acknowledged (acks=all,
to a sample of partitions before each step) is lost.

``max.broker.partitions`` (default 1,000) is raised past the replicas each broker hosts, and
the descriptor budget (a pool of open segment files plus sockets, not a number per replica:
broker/log/resource_limits.py) fits the harness's ``RLIMIT_NOFILE``."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from broker.log.resource_limits import default_max_open_segment_files, fds_needed
from deploy.cluster_probe import create_topic, partition_states
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from tests.cluster import Cluster, running_cluster
from tests.helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

TOPIC = "many"
PARTITIONS = 2_000
RF = 3
BROKERS = (1, 2, 3)
SAMPLE = [TopicPartition(TOPIC, p) for p in range(0, PARTITIONS, PARTITIONS // 12)]
"""The partitions produced to: spread over the topic, so over every broker's leaderships."""
OVERRIDES = {
    "max.broker.partitions": str(PARTITIONS + 100),
    # A preferred-replica rebalance would move leaders while the test counts them.
    "auto.leader.rebalance.enable": "false",
}
STEP_TIMEOUT_S = 240.0
"""Per step: generous, the machine is shared and the sizes are large for it."""


def _assignment() -> dict[int, list[int]]:
    """Replicas rotated over the brokers, so leaderships are spread evenly (as Kafka's
    assignment without racks does)."""
    return {p: [BROKERS[(p + i) % len(BROKERS)] for i in range(RF)] for p in range(PARTITIONS)}


def _served(cluster: Cluster, live: list[int]) -> set[int]:
    """Partitions whose state znode names a live leader that serves them (its Metadata
    shows itself leading at the state's epoch, hosting the replica)."""
    states = partition_states(cluster.zk, TOPIC, PARTITIONS)
    served: set[int] = set()
    for broker_id in live:
        meta = cluster.broker_stub(broker_id).Metadata(
            pb.MetadataRequest(topics=[TOPIC]), timeout=30
        )
        for topic in meta.topics:
            for part in topic.partitions:
                state = states[part.partition_index]
                if (
                    state is not None
                    and state.leader == broker_id
                    and part.leader_id == broker_id
                    and part.leader_epoch == state.leader_epoch
                    and broker_id not in part.offline_replicas
                ):
                    served.add(part.partition_index)
    return served


def _wait_all_served(cluster: Cluster, *, full_isr: bool) -> None:
    live = cluster.live()
    seen: list[str] = []

    def done() -> bool:
        served = _served(cluster, live)
        states = partition_states(cluster.zk, TOPIC, PARTITIONS)
        full = sum(1 for s in states if s is not None and len(set(s.isr)) == RF)
        seen[:] = [f"{len(served)} of {PARTITIONS} served by a live leader, {full} full ISRs"]
        return len(served) == PARTITIONS and (not full_isr or full == PARTITIONS)

    wait_for(done, STEP_TIMEOUT_S, interval=0.5, message=lambda: f"live {live}: {seen}")


def _wait_replicas_hosted(cluster: Cluster) -> None:
    """Every broker made every replica's directory (the ISR in the state znode is all the
    replicas from the creation on, before any follower has its replica)."""

    def hosted() -> bool:
        return all(
            sum(1 for d in b.spec.data_dir.glob(f"{TOPIC}-*")) == PARTITIONS
            for b in cluster.brokers.values()
        )

    wait_for(hosted, STEP_TIMEOUT_S, interval=0.5, message="every replica directory made")


def _produce_sample(
    cluster: Cluster, acked: dict[TopicPartition, dict[int, bytes]], tag: str
) -> None:
    for tp in SAMPLE:
        value = f"{tag} {tp}".encode()
        offset = cluster.produce_until_acked(tp, [value], timeout=60)
        acked.setdefault(tp, {})[offset] = value


def _assert_nothing_lost(cluster: Cluster, acked: dict[TopicPartition, dict[int, bytes]]) -> None:
    for tp, records in acked.items():

        def all_read(
            tp: TopicPartition = tp, records: dict[int, bytes] = records
        ) -> dict[int, bytes | None] | None:
            # The leader as ZooKeeper names it now: a broker's failure noticed late by the
            # new controller (its registration outlives its controller session) moves
            # epochs on after every partition was seen served.
            leader = cluster.wait_for_leader(tp, accept=cluster.live(), timeout=60)
            held = cluster.try_consume_all(leader, tp)
            if held is None or not all(dict(held).get(o) == v for o, v in records.items()):
                return None
            return dict(held)

        wait_for(all_read, 30, message=f"{tp}: acknowledged records {records} on its leader")


def _controller_load_lines(log: Path) -> list[str]:
    return [
        line
        for line in log.read_text(errors="replace").splitlines()
        if "event=failover_done" in line
    ]


@pytest.mark.skipif(
    0
    <= resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    < fds_needed(min(PARTITIONS + 100, default_max_open_segment_files())),
    reason="RLIMIT_NOFILE below the descriptor budget of the segment files each broker opens",
)
def test_thousands_of_partitions_survive_a_controlled_shutdown_and_a_controller_failover(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path, BROKERS, OVERRIDES) as cluster:
        create_topic(zk_client, TOPIC, _assignment())
        _wait_replicas_hosted(cluster)
        _wait_all_served(cluster, full_isr=True)
        acked: dict[TopicPartition, dict[int, bytes]] = {}
        _produce_sample(cluster, acked, "before the shutdown")

        controller = cluster.wait_for_controller()
        victim = next(i for i in BROKERS if i != controller)
        assert cluster.brokers[victim].stop(timeout=STEP_TIMEOUT_S) == 0
        _wait_all_served(cluster, full_isr=False)
        states = partition_states(zk_client, TOPIC, PARTITIONS)
        assert not [p for p, s in enumerate(states) if s is None or s.leader == victim]
        _produce_sample(cluster, acked, "while one broker is down")

        cluster.start(victim)
        _wait_all_served(cluster, full_isr=True)
        _produce_sample(cluster, acked, "before the failover")

        controller = cluster.wait_for_controller()
        cluster.brokers[controller].kill()
        new_controller = cluster.wait_for_controller(
            accept=[i for i in BROKERS if i != controller], timeout=STEP_TIMEOUT_S
        )
        _wait_all_served(cluster, full_isr=False)
        states = partition_states(zk_client, TOPIC, PARTITIONS)
        assert not [p for p, s in enumerate(states) if s is None or s.leader == controller]
        assert _controller_load_lines(cluster.brokers[new_controller].log_path)
        _assert_nothing_lost(cluster, acked)
        # The Kafka view of the same: a live broker's Metadata names a live leader for all.
        meta = pb_grpc.BrokerStub(cluster.channel(new_controller)).Metadata(
            pb.MetadataRequest(topics=[TOPIC]), timeout=30
        )
        leaders = {p.partition_index: p.leader_id for t in meta.topics for p in t.partitions}
        assert len(leaders) == PARTITIONS
        assert set(leaders.values()) <= set(cluster.live())
