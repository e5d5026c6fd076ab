"""The cluster id: made once in ZooKeeper's ``/cluster/id`` by the first broker, written to
every broker's ``meta.properties``, answered alike through Kafka's Metadata and
DescribeCluster, gRPC Metadata and ``cluster status``; a data dir of another cluster is
refused at start-up."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kio.schema.describe_cluster.v1 import request as describe_cluster_v1

from broker.kafka_listener.messages import build
from broker.log.checkpoints import read_broker_metadata
from deploy.broker_process import BrokerProcessError
from proto.wire import minibroker_pb2 as pb
from proto.zk.sync_client import read_cluster_id
from tests.cluster import running_cluster
from tests.helpers import minibroker
from tests.integration.test_kafka_listener import KAFKA_PORT_FREE, kafka_bootstrap, kafka_call

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

DESCRIBE_CLUSTER_SCRIPT = textwrap.dedent(
    """
    import sys
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": sys.argv[1]})
    described = admin.describe_cluster(request_timeout=20).result(timeout=30)
    print(f"cluster_id={described.cluster_id} brokers={len(described.nodes)}")
    """
)


# kafka-python 3.0 calls importlib.resources' legacy API when imported (its own warning).
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_every_door_answers_the_cluster_id_kept_in_zookeeper(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    import kafka

    with running_cluster(
        zk_client, zk_connect, tmp_path, (1, 2), overrides=KAFKA_PORT_FREE
    ) as cluster:
        cluster_id = read_cluster_id(zk_client)
        assert cluster_id is not None
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id)
        data, _ = zk_client.get("/cluster/id")
        assert data == b'{"version":"1","id":"%s"}' % cluster_id.encode()
        for broker in cluster.brokers.values():
            stored = read_broker_metadata(broker.spec.data_dir)
            assert stored is not None
            assert (stored.broker_id, stored.cluster_id) == (broker.broker_id, cluster_id)
        bootstrap = kafka_bootstrap(cluster)

        # librdkafka crashed on a null id: in a subprocess, so a crash fails only this test.
        described = subprocess.run(
            [sys.executable, "-c", DESCRIBE_CLUSTER_SCRIPT, bootstrap],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert described.returncode == 0, f"describe_cluster died: {described.stderr}"
        assert described.stdout.strip() == f"cluster_id={cluster_id} brokers=2"

        # kafka-python's describe_cluster asks DescribeCluster (KIP-700) first.
        admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20000)
        try:
            answer = admin.describe_cluster()
            assert answer["cluster_id"] == cluster_id
            assert sorted(b["broker_id"] for b in answer["brokers"]) == [1, 2]
        finally:
            admin.close()
        consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=20000)
        try:
            consumer.topics()  # a Metadata request
            assert consumer._client.cluster.cluster_id == cluster_id
        finally:
            consumer.close()

        # KIP-919: a broker describes brokers; controllers are KRaft's, refused as Kafka does.
        for endpoint_type, code in ((1, 0), (2, 114), (7, 115)):
            body = build(
                describe_cluster_v1.DescribeClusterRequest,
                {"include_cluster_authorized_operations": False, "endpoint_type": endpoint_type},
            )
            answer = kafka_call(bootstrap, 60, 1, body)
            assert answer.error_code == code
            assert answer.cluster_id == (cluster_id if code == 0 else "")

        for broker_id in (1, 2):
            grpc_answer = cluster.broker_stub(broker_id).Metadata(pb.MetadataRequest(), timeout=10)
            assert grpc_answer.cluster_id == cluster_id

        status = minibroker("cluster", "status", "--zookeeper", zk_connect, timeout=60)
        assert status.returncode == 0, status.stderr
        assert f"Cluster id: {cluster_id}" in status.stdout


def test_a_data_dir_of_another_cluster_is_refused_at_start_up(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path, (1, 2)) as cluster:
        cluster_id = read_cluster_id(zk_client)
        broker = cluster.brokers[2]
        broker.stop()
        meta = broker.spec.data_dir / "meta.properties"
        meta.write_text(meta.read_text().replace(f"cluster.id={cluster_id}", "cluster.id=other"))
        with pytest.raises(BrokerProcessError) as refused:
            broker.start(zk_client, timeout=30)
        log = broker.log_tail()
        assert (
            f"the cluster ID {cluster_id} (/cluster/id in ZooKeeper) does not match cluster.id "
            "other in" in log
        ), str(refused.value)
        assert "wrong cluster" in log
        assert broker.returncode not in (None, 0)
        assert read_cluster_id(zk_client) == cluster_id  # ZooKeeper's id never moves
