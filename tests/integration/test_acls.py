"""ACLs (docs/security.md) on a PLAINTEXT cluster with ``authorizer.class.name`` and
``allow.everyone.if.no.acl.found=false``, where every client is ``User:ANONYMOUS``: refusals
on both listeners, prefixed and deny ACLs, CreateAcls/DescribeAcls/DeleteAcls through
confluent-kafka (in a subprocess) and kafka-python and ``minibroker acls``, a change made
through one broker enforced by another once its notification arrives; and with mutual TLS,
principals from the certificates."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from kazoo.client import KazooClient
from kio.schema.find_coordinator.v3 import request as find_coordinator_v3
from kio.schema.produce.v9 import request as produce_v9
from kio.static.primitive import i8, i16, i32Timedelta

from deploy.tls_certs import generate
from proto.records.record_batch import Record, encode_batch
from proto.topic_partition import TopicPartition
from proto.transport.tls import TlsConfig, sync_channel
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.zk.sync_client import read_registered_broker
from tests.cluster import Cluster, running_cluster
from tests.helpers import minibroker, wait_for
from tests.integration.test_kafka_listener import kafka_bootstrap, kafka_call
from tests.integration.test_kafka_quotas import alter as alter_quotas
from tests.integration.test_kafka_quotas import entry as quota_entry
from tests.integration.test_tls import DIGEST, digest_client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ACLS = {
    "kafka.port": "0",
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "false",
}
ANONYMOUS = "User:ANONYMOUS"
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED = 29, 30, 31
PRODUCE, FIND_COORDINATOR = 0, 10


def acls(zk_connect: str, *args: str) -> str:
    """``minibroker acls`` against the test's ZooKeeper; it must succeed."""
    done = minibroker("acls", "--zookeeper", zk_connect, *args, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def the_brokers_may_act_as_brokers(zk_connect: str) -> None:
    """Every connection is ANONYMOUS here, the brokers' own too: they need ClusterAction
    (and this test Alter and Describe on the Cluster, for the ACL APIs, and Describe on
    every topic) before they start."""
    for operation in ("ClusterAction", "Alter", "Describe"):
        acls(zk_connect, "--add", "--allow-principal", ANONYMOUS, "--operation", operation,
             "--cluster")  # fmt: skip
    # The harness finds the leaders with Metadata (Describe), as any client would.
    acls(zk_connect, "--add", "--allow-principal", ANONYMOUS, "--operation", "Describe",
         "--topic", "*")  # fmt: skip


def kafka_address(cluster: Cluster, broker_id: int) -> str:
    registered = read_registered_broker(cluster.zk, broker_id)
    assert registered is not None
    assert registered.kafka_endpoint is not None
    host, port = registered.kafka_endpoint
    return f"{host}:{port}"


def kafka_produce(address: str, topic: str) -> int:
    """One record produced through the Kafka listener (kio, Produce v9): its error code."""
    batch = encode_batch([Record(key=None, value=b"v", timestamp=int(time.time() * 1000))])
    body = produce_v9.ProduceRequest(
        transactional_id=None,
        acks=i16(1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        topic_data=(
            produce_v9.TopicProduceData(
                name=topic,  # type: ignore[arg-type]
                partition_data=(produce_v9.PartitionProduceData(index=0, records=batch),),  # type: ignore[arg-type]
            ),
        ),
    )
    response = kafka_call(address, PRODUCE, 9, body)
    return int(response.responses[0].partition_responses[0].error_code)


def find_coordinator(address: str, group: str) -> int:
    body = find_coordinator_v3.FindCoordinatorRequest(key=group, key_type=i8(0))
    return int(kafka_call(address, FIND_COORDINATOR, 3, body).error_code)


def grpc_describe_group(cluster: Cluster, broker_id: int, group: str) -> int:
    request = pb.DescribeGroupsRequest(groups=[group])
    return int(
        cluster.broker_stub(broker_id).DescribeGroups(request, timeout=10).groups[0].error_code
    )


def grpc_produce(cluster: Cluster, broker_id: int, topic: str) -> int:
    return int(cluster.produce(broker_id, TopicPartition(topic, 0), [b"v"], acks=1).error_code)


def refusals(cluster: Cluster, broker_id: int) -> str:
    return "\n".join(
        line for line in cluster.brokers[broker_id].log_path.read_text().splitlines()
        if "event=acl_denied" in line
    )  # fmt: skip


def test_write_is_refused_without_an_acl_on_both_listeners_granted_by_prefix_and_denied_by_deny(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    the_brokers_may_act_as_brokers(zk_connect)
    with running_cluster(zk_client, zk_connect, tmp_path, (1,), overrides=ACLS) as cluster:
        for topic in ("orders", "team-a.x", "team-a.y"):
            cluster.create_topic(topic, {0: [1]})
        address = kafka_address(cluster, 1)

        # No ACL: refused at either door, each refusal logged once.
        assert kafka_produce(address, "orders") == TOPIC_AUTHORIZATION_FAILED
        assert grpc_produce(cluster, 1, "orders") == pb.TOPIC_AUTHORIZATION_FAILED
        logged = refusals(cluster, 1)
        assert logged.count("resource=Topic:orders") == 2, logged
        assert f"principal={ANONYMOUS}" in logged
        assert "operation=Write" in logged

        # A prefixed ACL grants the family, nothing else.
        acls(zk_connect, "--add", "--allow-principal", ANONYMOUS, "--operation", "Write",
             "--topic", "team-a.", "--resource-pattern-type", "prefixed")  # fmt: skip
        wait_for(
            lambda: kafka_produce(address, "team-a.x") == pb.NONE, 20, message="prefixed ACL seen"
        )
        assert grpc_produce(cluster, 1, "team-a.y") == pb.NONE
        assert kafka_produce(address, "orders") == TOPIC_AUTHORIZATION_FAILED

        # A deny beats the allow, whatever its pattern.
        acls(zk_connect, "--add", "--deny-principal", ANONYMOUS, "--operation", "Write",
             "--topic", "team-a.y")  # fmt: skip
        wait_for(
            lambda: grpc_produce(cluster, 1, "team-a.y") == pb.TOPIC_AUTHORIZATION_FAILED,
            20,
            message="deny ACL seen",
        )
        assert kafka_produce(address, "team-a.y") == TOPIC_AUTHORIZATION_FAILED
        assert kafka_produce(address, "team-a.x") == pb.NONE

        listed = acls(zk_connect, "--list", "--topic", "team-a.y", "--resource-pattern-type",
                      "match")  # fmt: skip
        assert "name=team-a., patternType=PREFIXED" in listed
        assert "permissionType=DENY" in listed
        assert "permissionType=ALLOW" in listed

        acls(zk_connect, "--remove", "--topic", "team-a.y")
        wait_for(
            lambda: grpc_produce(cluster, 1, "team-a.y") == pb.NONE, 20, message="deny removed"
        )

        # A cluster-wide API: AlterConfigs on the Cluster, refused entry by entry.
        refused = alter_quotas(
            address, [quota_entry([("client-id", "app")], [("request_percentage", 5.0)])]
        )
        assert [e.error_code for e in refused.entries] == [CLUSTER_AUTHORIZATION_FAILED]

        # Groups: Describe (implied by Read) on the group, at either door.
        assert find_coordinator(address, "billing") == GROUP_AUTHORIZATION_FAILED
        assert grpc_describe_group(cluster, 1, "billing") == GROUP_AUTHORIZATION_FAILED
        acls(zk_connect, "--add", "--allow-principal", ANONYMOUS, "--consumer", "--topic",
             "orders", "--group", "billing")  # fmt: skip
        wait_for(lambda: find_coordinator(address, "billing") == pb.NONE, 20, message="group ACL")
        assert grpc_describe_group(cluster, 1, "billing") == pb.NONE
        assert find_coordinator(address, "shipping") == GROUP_AUTHORIZATION_FAILED
        assert "resource=Group:shipping" in refusals(cluster, 1)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's own imports
def test_kafka_clients_create_describe_and_delete_acls_and_another_broker_enforces_them(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    import kafka.admin as kafka_admin  # kafka-python warns while importing: not at collection

    the_brokers_may_act_as_brokers(zk_connect)
    with running_cluster(zk_client, zk_connect, tmp_path, (1, 2), overrides=ACLS) as cluster:
        cluster.create_topic("shared", {0: [2]})
        bootstrap = kafka_bootstrap(cluster)

        # confluent-kafka (librdkafka, in its own process under a hard timeout).
        done = subprocess.run(
            [sys.executable, "-m", "tests.confluent_acls", bootstrap, "carol-"],
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        steps = [json.loads(line) for line in done.stdout.splitlines()]
        carol = "TOPIC:PREFIXED:carol-:User:carol:*:WRITE:ALLOW"
        assert steps == [
            {"step": "created"},
            {"step": "described", "acls": [carol]},
            {"step": "deleted", "acls": [carol]},
            {"step": "described", "acls": []},
        ]

        # kafka-python, through broker 1 only; broker 2 must enforce it after the notice.
        admin: Any = kafka_admin.KafkaAdminClient(
            bootstrap_servers=kafka_address(cluster, 1), request_timeout_ms=10_000
        )
        try:
            shared = kafka_admin.ResourcePattern(kafka_admin.ResourceType.TOPIC, "shared")
            write = kafka_admin.ACL(
                ANONYMOUS,
                "*",
                kafka_admin.ACLOperation.WRITE,
                kafka_admin.ACLPermissionType.ALLOW,
                shared,
            )
            created = admin.create_acls([write])
            assert created["failed"] == [], created
            assert len(created["succeeded"]) == 1, created
            mine = kafka_admin.ACLFilter(
                ANONYMOUS,
                None,
                kafka_admin.ACLOperation.ANY,
                kafka_admin.ACLPermissionType.ANY,
                kafka_admin.ResourcePatternFilter(
                    kafka_admin.ResourceType.TOPIC,
                    "shared",
                    kafka_admin.ACLResourcePatternType.MATCH,
                ),
            )
            found, error = admin.describe_acls(mine)
            assert error.errno == 0
            # MATCH: the ACLs that apply to the topic, the "*" one the harness needs too.
            assert sorted((a.resource_pattern.resource_name, a.operation.name) for a in found) == [
                ("*", "DESCRIBE"),
                ("shared", "WRITE"),
            ]
            assert "operation=WRITE, permissionType=ALLOW" in acls(
                zk_connect, "--list", "--topic", "shared"
            )
            wait_for(
                lambda: grpc_produce(cluster, 2, "shared") == pb.NONE, 20, message="broker 2 saw it"
            )
            assert kafka_produce(kafka_address(cluster, 2), "shared") == pb.NONE

            literal = kafka_admin.ACLFilter(
                ANONYMOUS,
                None,
                kafka_admin.ACLOperation.ANY,
                kafka_admin.ACLPermissionType.ANY,
                kafka_admin.ResourcePatternFilter(
                    kafka_admin.ResourceType.TOPIC,
                    "shared",
                    kafka_admin.ACLResourcePatternType.LITERAL,
                ),
            )
            [(_, deleted, error)] = admin.delete_acls([literal])
            assert error.errno == 0
            assert len(deleted) == 1
        finally:
            admin.close()
        second = kafka_address(cluster, 2)
        wait_for(
            lambda: kafka_produce(second, "shared") == TOPIC_AUTHORIZATION_FAILED,
            20,
            message="broker 2 saw the delete",
        )
        assert "resource=Topic:shared" in refusals(cluster, 2)


def test_tls_principals_are_their_certificates_and_brokers_need_no_acl_as_super_users(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    """mutual TLS (the harness of test_tls.py) with ACLs: the brokers are super users,
    the test's own client a super user too (the harness reads metadata), ``alice`` gets
    only what her ACLs give, and the ACLs are written with the brokers' digest."""
    certs = generate(tmp_path / "tls", (1,), clients=("client", "alice"))
    digest_file = tmp_path / "zookeeper-digest"
    digest_file.write_text(DIGEST + "\n")
    secured = {"zookeeper.set.acl": "true", "zookeeper.auth.digest.file": str(digest_file)}
    properties = {
        **certs.broker_properties(1, (1,)),
        **secured,
        **{k: v for k, v in ACLS.items() if k != "kafka.port"},
    }
    properties["super.users"] += ";User:CN=client"
    command_config = tmp_path / "admin.properties"
    command_config.write_text("".join(f"{k}={v}\n" for k, v in secured.items()))
    connect = zk_connect + "/secure"
    alice = TlsConfig.from_files(certs.ca, certs.directory / "alice.pem")
    with (
        digest_client(connect) as zk,
        running_cluster(
            zk,
            connect,
            tmp_path,
            (1,),
            broker_overrides={1: properties},
            tls=TlsConfig.from_files(certs.ca, certs.client),
        ) as cluster,
    ):
        cluster.create_topic("ledger", {0: [1]})
        batch = encode_batch([Record(key=None, value=b"v", timestamp=int(time.time() * 1000))])

        def alice_produces() -> int:
            request = pb.ProduceRequest(acks=1, timeout_ms=10_000)
            request.topics.add(name="ledger").partitions.add(index=0, records=batch)
            with sync_channel(cluster.brokers[1].address, alice) as channel:
                response = pb_grpc.BrokerStub(channel).Produce(request, timeout=10)
            return int(response.responses[0].partitions[0].error_code)

        assert alice_produces() == pb.TOPIC_AUTHORIZATION_FAILED
        assert 'principal="User:CN=alice"' in refusals(cluster, 1)
        # Without the digest the ACL znodes cannot be written; with it they can.
        grant = ["--add", "--allow-principal", "User:CN=alice", "--operation", "Write"]
        without = minibroker("acls", "--zookeeper", connect, *grant, "--topic", "ledger")
        assert without.returncode == 1
        assert "NoAuth" in without.stderr, without.stderr
        acls(connect, "--command-config", str(command_config), "--add", "--allow-principal",
             "User:CN=alice", "--operation", "Write", "--topic", "ledger")  # fmt: skip
        wait_for(lambda: alice_produces() == pb.NONE, 20, message="alice's ACL seen")

        # alice may not act as a broker: ClusterAction is the brokers' (super.users).
        fetch = pb.FetchRequest(replica_id=1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20)
        fetch.topics.add(topic="ledger").partitions.add(partition=0, partition_max_bytes=1 << 20)
        with (
            sync_channel(cluster.brokers[1].address, alice) as channel,
            pytest.raises(grpc.RpcError) as refused,
        ):
            pb_grpc.BrokerStub(channel).Fetch(fetch, timeout=10)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "CLUSTER_AUTHORIZATION_FAILED" in str(refused.value.details())
