"""Each broker's Prometheus endpoint (``metrics.prometheus.port``), scraped over HTTP.

Three brokers, one partition replicated on all of them. The leader's
``kafka_server_replicamanager_underreplicatedpartitions`` is 0, goes above 0 when a
follower is killed, and back to 0 when it has returned and caught up; meanwhile the
controller's election timer, the leader's ISR-expand counter, the per-API request metrics
and the partition gauges say what happened.
"""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families

from deploy.ports import free_port_block
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from tests.cluster import Cluster, running_cluster
from tests.helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TP = TopicPartition("watched", 0)
URP = "kafka_server_replicamanager_underreplicatedpartitions"


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    """Every sample of ``http://127.0.0.1:<port>/metrics``, by name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def of_partition(samples: Samples, name: str) -> float:
    return value(samples, name, topic=TP.topic, partition=str(TP.partition))


@dataclass
class MeteredCluster:
    cluster: Cluster
    metrics_ports: dict[int, int]

    def scrape(self, broker_id: int) -> Samples:
        return scrape(self.metrics_ports[broker_id])


@pytest.fixture
def metered(zk_client: KazooClient, zk_connect: str, tmp_path: Path) -> Iterator[MeteredCluster]:
    ports = {i: free_port_block(1) for i in (1, 2, 3)}
    per_broker = {i: {"metrics.prometheus.port": str(port)} for i, port in ports.items()}
    with running_cluster(zk_client, zk_connect, tmp_path, broker_overrides=per_broker) as c:
        yield MeteredCluster(c, ports)


def test_under_replicated_partitions_follow_a_killed_follower(metered: MeteredCluster) -> None:
    cluster = metered.cluster
    cluster.create_topic(TP.topic, {0: [1, 2, 3]})
    assert cluster.wait_for_leader(TP) == 1
    cluster.wait_for_isr(TP, {1, 2, 3})
    for i in range(3):
        assert cluster.produce(1, TP, [b"m-%d" % i]).error_code == pb.NONE

    leader = metered.scrape(1)
    assert value(leader, URP) == 0
    assert value(leader, "kafka_server_replicamanager_leadercount") == 1
    assert of_partition(leader, "kafka_log_log_logendoffset") == 3
    assert of_partition(leader, "kafka_cluster_partition_insyncreplicascount") == 3
    assert value(leader, "kafka_network_requestmetrics_requests_total", request="Produce") >= 3
    assert value(leader, "kafka_network_requestmetrics_totaltimems_count", request="Produce") >= 3
    assert value(leader, "kafka_network_requestmetrics_requests_total", request="Fetch") > 0
    wait_for(
        lambda: of_partition(metered.scrape(1), "kafka_cluster_partition_highwatermark") == 3,
        10,
        message="the leader's high watermark to reach 3",
    )
    active = "kafka_controller_kafkacontroller_activecontrollercount"
    controllers = {i: value(metered.scrape(i), active) for i in (1, 2, 3)}
    assert sorted(controllers.values()) == [0, 0, 1], controllers
    controller = next(i for i, count in controllers.items() if count == 1)
    victim = next(i for i in (2, 3) if i != controller)

    cluster.brokers[victim].kill()
    wait_for(lambda: value(metered.scrape(1), URP) == 1, 20, message="URP to rise above 0")
    assert of_partition(metered.scrape(1), "kafka_cluster_partition_underreplicated") == 1
    elections = metered.scrape(controller)
    election_time = "kafka_controller_controllerstats_leaderelectionrateandtimems_count"
    assert value(elections, election_time) >= 1
    assert value(elections, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0

    cluster.brokers[victim].start(cluster.zk)
    wait_for(lambda: value(metered.scrape(1), URP) == 0, 30, message="URP to return to 0")
    assert value(metered.scrape(1), "kafka_server_replicamanager_isrexpands_total") >= 1


def test_a_taken_metrics_port_stops_the_broker_at_start_up(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        overrides = {1: {"metrics.prometheus.port": str(port)}}
        cluster = Cluster(zk_client, zk_connect, tmp_path, (1,), broker_overrides=overrides)
        try:
            with pytest.raises(Exception, match="cannot serve metrics"):
                cluster.start()
        finally:
            cluster.stop_all()
