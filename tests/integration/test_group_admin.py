"""ListGroups, DescribeGroups, DeleteGroups, OffsetDelete and the commit metadata string,
through Kafka's own admin clients (confluent-kafka's ``AdminClient``, kafka-python's
``KafkaAdminClient``) against real brokers, compared with ``minibroker consumer-groups``.

Every group call is bounded (each client's request timeout, ``.result(timeout=...)``) under
the test's hard timeout: a client that hangs fails the test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient
from kio.schema.types import GroupId, TopicName

from proto.zk.sync_client import read_registered_broker
from tests.cluster import Cluster, running_cluster
from tests.helpers import minibroker, wait_for
from tests.integration.test_kafka_listener import KAFKA_PORT_FREE, kafka_bootstrap, kafka_call
from tests.kafka_group_member import GroupMember

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

OVERRIDES = {
    **KAFKA_PORT_FREE,
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
}
CALL_S = 30
"""The longest any one admin call may take."""
UNKNOWN_TOPIC_OR_PARTITION, NOT_COORDINATOR, GROUP_ID_NOT_FOUND = 3, 16, 69
GROUP_SUBSCRIBED_TO_TOPIC = 86


def grpc_bootstrap(cluster: Cluster) -> str:
    addresses = []
    for broker_id in cluster.live():
        registered = read_registered_broker(cluster.zk, broker_id)
        assert registered is not None
        addresses.append(f"{registered.registration.host}:{registered.registration.port}")
    return ",".join(addresses)


def cli(cluster: Cluster, zk_connect: str, *args: str) -> str:
    done = cli_run(cluster, zk_connect, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def cli_run(cluster: Cluster, zk_connect: str, *args: str) -> subprocess.CompletedProcess[str]:
    return minibroker(
        "consumer-groups",
        *args,
        "--bootstrap-server",
        grpc_bootstrap(cluster),
        "--zookeeper",
        zk_connect,
        timeout=60,
    )


def table(out: str) -> list[list[str]]:
    """The rows of a CLI table under its header line (cells split on blanks)."""
    lines = [line for line in out.splitlines() if line.strip()]
    header = next(i for i, line in enumerate(lines) if line.startswith("GROUP"))
    return [line.split() for line in lines[header + 1 :]]


def setup_groups(cluster: Cluster, bootstrap: str) -> GroupMember:
    """Topic ``orders`` (3 partitions) with records; group ``left`` whose assign()ing
    consumer committed offsets (one with metadata) and closed; group ``live`` with one
    subscribed member (returned) that holds all three partitions."""
    cluster.create_topic("orders", {p: [1 + (p + r) % 3 for r in range(2)] for p in range(3)})
    cluster.create_topic("audit", {0: [1, 2]})
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(30):
        producer.produce("orders", f"v{i}".encode(), partition=i % 3)
    assert producer.flush(CALL_S) == 0
    committer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "left", "enable.auto.commit": False}
    )
    committer.commit(
        offsets=[
            confluent_kafka.TopicPartition("orders", 0, 4, metadata="ckpt 1"),
            confluent_kafka.TopicPartition("orders", 1, 2),
            confluent_kafka.TopicPartition("audit", 0, 0),
        ],
        asynchronous=False,
    )
    committer.close()
    member = GroupMember(bootstrap, "live", "orders")
    wait_for(
        lambda: sorted(member.snapshot()[0]) == [0, 1, 2],
        timeout=60,
        message="the live member to hold all three partitions",
    )
    return member


def test_confluent_admin_lists_describes_fetches_and_deletes_groups_as_the_cli_shows_them(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions

    with running_cluster(zk_client, zk_connect, tmp_path, overrides=OVERRIDES) as cluster:
        bootstrap = kafka_bootstrap(cluster)
        member = setup_groups(cluster, bootstrap)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        try:
            listed = admin.list_consumer_groups(request_timeout=10).result(timeout=CALL_S)
            assert listed.errors == []
            groups = {g.group_id: g for g in listed.valid}
            assert sorted(groups) == ["left", "live"]
            assert groups["live"].state == ConsumerGroupState.STABLE
            assert not groups["live"].is_simple_consumer_group
            assert groups["left"].state == ConsumerGroupState.EMPTY

            # The CLI lists the same groups in the same states.
            rows = {r[0]: (r[1], r[2]) for r in table(cli(cluster, zk_connect, "--list"))}
            assert rows == {"left": ("kafka", "Empty"), "live": ("kafka", "Stable")}

            described = admin.describe_consumer_groups(
                ["live", "left", "nobody"], request_timeout=10
            )
            # An unknown group is Dead with no members (Kafka's DescribeGroups answer).
            nobody = described["nobody"].result(timeout=CALL_S)
            assert (nobody.state, nobody.members) == (ConsumerGroupState.DEAD, [])
            live = described["live"].result(timeout=CALL_S)
            assert live.state == ConsumerGroupState.STABLE
            assert live.partition_assignor == "range"
            [m] = live.members
            assert m.client_id == "rdkafka"
            assert sorted(tp.partition for tp in m.assignment.topic_partitions) == [0, 1, 2]
            left = described["left"].result(timeout=CALL_S)
            assert (left.state, left.members) == (ConsumerGroupState.EMPTY, [])

            # The CLI's members view shows the same member, host and partitions.
            members = table(cli(cluster, zk_connect, "--describe", "--group", "live", "--members"))
            assert members == [["live", m.member_id, m.host, "rdkafka", "3"]]

            fetched = admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions("left")], request_timeout=10
            )["left"].result(timeout=CALL_S)
            offsets = {
                (tp.topic, tp.partition): (tp.offset, tp.metadata)
                for tp in fetched.topic_partitions
            }
            assert offsets == {
                ("audit", 0): (0, None),
                ("orders", 0): (4, "ckpt 1"),
                ("orders", 1): (2, None),
            }
            # The CLI's commits view shows the same offsets and metadata, as stored: librdkafka
            # sends the metadata with its C string's NUL (which its reader drops again).
            commits = cli(cluster, zk_connect, "--describe", "--group", "left", "--commits")
            shown = {(r[1], int(r[2])): (int(r[3]), " ".join(r[5:])) for r in table(commits)}
            assert shown == {
                ("audit", 0): (0, "-"),
                ("orders", 0): (4, "ckpt 1\\x00"),
                ("orders", 1): (2, "-"),
            }

            # The CLI refuses to delete the live group, as the brokers do.
            refused = cli_run(cluster, zk_connect, "--delete", "--group", "live")
            assert refused.returncode != 0
            assert "NON_EMPTY_GROUP" in refused.stderr
            deleted = admin.delete_consumer_groups(["live", "left", "nobody"], request_timeout=10)
            deleted["left"].result(timeout=CALL_S)
            outcomes = {}
            for group in ("live", "nobody"):
                with pytest.raises(confluent_kafka.KafkaException) as err:
                    deleted[group].result(timeout=CALL_S)
                outcomes[group] = err.value.args[0].name()
            assert outcomes == {"live": "NON_EMPTY_GROUP", "nobody": "GROUP_ID_NOT_FOUND"}
            assert zk_client.exists("/consumers/left") is None
            listed = admin.list_consumer_groups(request_timeout=10).result(timeout=CALL_S)
            assert [g.group_id for g in listed.valid] == ["live"]
        finally:
            member.stop()
            del admin


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's own imports
def test_kafka_python_admin_lists_describes_deletes_groups_and_their_offsets(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.errors import GroupIdNotFoundError, NonEmptyGroupError

    with running_cluster(zk_client, zk_connect, tmp_path, overrides=OVERRIDES) as cluster:
        bootstrap = kafka_bootstrap(cluster)
        member = setup_groups(cluster, bootstrap)
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
        try:
            listed = {g["group_id"]: g for g in admin.list_groups()}
            assert sorted(listed) == ["left", "live"]
            assert listed["live"]["protocol_type"] == "consumer"
            empty = admin.list_groups(states_filter=["Empty"])
            assert [g["group_id"] for g in empty] == ["left"]

            described = admin.describe_groups(["live", "left", "nobody"])
            assert described["live"]["group_state"] == "Stable"
            [m] = described["live"]["members"]
            assert m["client_id"] == "rdkafka"
            assert described["left"]["group_state"] == "Empty"
            assert (described["nobody"]["group_state"], described["nobody"]["error"]) == (
                "Dead",
                None,
            )

            offsets = admin.list_group_offsets(["left"])["left"]
            assert {
                (tp.topic, tp.partition): (o.offset, o.metadata) for tp, o in offsets.items()
            } == {
                ("audit", 0): (0, ""),
                ("orders", 0): (4, "ckpt 1\x00"),  # as librdkafka committed it
                ("orders", 1): (2, ""),
            }

            # OffsetDelete: a topic the live member subscribes to is refused per partition;
            # another topic's offsets go; a group that does not exist is a group error.
            answers = admin.delete_group_offsets(
                "live", [TopicPartition("orders", 0), TopicPartition("audit", 0)]
            )
            assert {tp.topic: e.__name__ for tp, e in answers.items()} == {
                "orders": "GroupSubscribedToTopicError",
                "audit": "NoError",
            }
            answers = admin.delete_group_offsets("left", [TopicPartition("orders", 0)])
            assert {tp: e.__name__ for tp, e in answers.items()} == {
                TopicPartition("orders", 0): "NoError"
            }
            assert committed(bootstrap, "left", "orders", [0]) == [None]
            assert None not in committed(bootstrap, "left", "orders", [1])
            with pytest.raises(GroupIdNotFoundError):
                admin.delete_group_offsets("nobody", [TopicPartition("orders", 0)])

            results = admin.delete_groups(["live", "left", "nobody"])
            assert results == {
                "live": NonEmptyGroupError.__name__,
                "left": "OK",
                "nobody": GroupIdNotFoundError.__name__,
            }
            assert zk_client.exists("/consumers/left") is None
        finally:
            member.stop()
            admin.close()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's own imports
def test_a_zookeeper_group_is_a_stable_simple_group_to_kafka_tools_and_not_deletable_while_live(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    """minibroker's own consumer group (members in ``/consumers/<g>/ids``) as Kafka's admin
    clients see it: listed Stable with protocol type "" (a "simple" group), described with
    its member, its offsets and the group undeletable while the member runs, deletable
    once it has left; ``consumer-groups --list`` says the same."""
    from confluent_kafka import ConsumerGroupState
    from kafka import KafkaAdminClient, TopicPartition

    with running_cluster(zk_client, zk_connect, tmp_path, overrides=OVERRIDES) as cluster:
        bootstrap = kafka_bootstrap(cluster)
        cluster.create_topic("orders", {0: [1, 2], 1: [2, 3]})
        out = (tmp_path / "consumer.out").open("wb")
        consumer = subprocess.Popen(
            [sys.executable, "-m", "client.cli", "consume", "orders", "--group", "zkg",
             "--bootstrap-server", grpc_bootstrap(cluster), "--zookeeper", zk_connect],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        confluent = AdminClient({"bootstrap.servers": bootstrap})
        kp = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
        try:
            wait_for(
                lambda: (
                    bool(zk_client.get_children("/consumers/zkg/ids"))
                    if zk_client.exists("/consumers/zkg/ids")
                    else False
                ),
                timeout=60,
                message="the ZooKeeper group's member to register",
            )
            [member_id] = zk_client.get_children("/consumers/zkg/ids")

            listed = confluent.list_consumer_groups(request_timeout=10).result(timeout=CALL_S)
            [zkg] = [g for g in listed.valid if g.group_id == "zkg"]
            assert (zkg.state, zkg.is_simple_consumer_group) == (ConsumerGroupState.STABLE, True)
            rows = {r[0]: (r[1], r[2]) for r in table(cli(cluster, zk_connect, "--list"))}
            assert rows["zkg"] == ("zookeeper", "Stable")

            described = confluent.describe_consumer_groups(["zkg"], request_timeout=10)
            group = described["zkg"].result(timeout=CALL_S)
            assert [m.member_id for m in group.members] == [member_id]

            with pytest.raises(confluent_kafka.KafkaException, match="NON_EMPTY_GROUP"):
                confluent.delete_consumer_groups(["zkg"], request_timeout=10)["zkg"].result(
                    timeout=CALL_S
                )
            answers = kp.delete_group_offsets("zkg", [TopicPartition("orders", 0)])
            assert {tp.partition: e.__name__ for tp, e in answers.items()} == {
                0: "GroupSubscribedToTopicError"
            }
            assert kp.delete_groups(["zkg"]) == {"zkg": "NonEmptyGroupError"}
            refused = cli_run(cluster, zk_connect, "--delete", "--group", "zkg")
            assert "NON_EMPTY_GROUP" in refused.stderr

            consumer.terminate()
            consumer.wait(timeout=30)
            wait_for(
                lambda: not zk_client.get_children("/consumers/zkg/ids"),
                timeout=30,
                message="the member's ephemeral znode to go",
            )
            assert [g["group_state"] for g in kp.list_groups() if g["group_id"] == "zkg"] == [
                "Empty"
            ]
            # Deleted with the CLI: gone for Kafka's clients too.
            assert "was successful" in cli(cluster, zk_connect, "--delete", "--group", "zkg")
            assert zk_client.exists("/consumers/zkg") is None
            assert "zkg" not in [g["group_id"] for g in kp.list_groups()]
            assert kp.delete_groups(["zkg"]) == {"zkg": "GroupIdNotFoundError"}
        finally:
            if consumer.poll() is None:
                consumer.kill()
                consumer.wait(timeout=10)
            out.close()
            kp.close()
            del confluent


def committed(bootstrap: str, group: str, topic: str, partitions: list[int]) -> list[int | None]:
    """The group's committed offsets as Kafka's clients read them (None: nothing)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        asked = [confluent_kafka.TopicPartition(topic, p) for p in partitions]
        found = consumer.committed(asked, timeout=CALL_S)
    finally:
        consumer.close()
    return [tp.offset if tp.offset >= 0 else None for tp in found]


def coordinator_address(bootstrap: str, group: str) -> str:
    """The group's coordinator, as a client finds it: FindCoordinator (kio, v2)."""
    from kio.schema.find_coordinator.v2.request import FindCoordinatorRequest

    found = kafka_call(bootstrap, 10, 2, FindCoordinatorRequest(key=group))
    assert found.error_code == 0, found
    return f"{found.host}:{found.port}"


def offset_delete(address: str, group: str, partitions: dict[str, list[int]]) -> Any:
    """One OffsetDelete (v0, the only version) as a client library would send it (kio)."""
    from kio.schema.offset_delete.v0.request import (
        OffsetDeleteRequest,
        OffsetDeleteRequestPartition,
        OffsetDeleteRequestTopic,
    )
    from kio.static.primitive import i32

    topics = tuple(
        OffsetDeleteRequestTopic(
            name=TopicName(topic),
            partitions=tuple(OffsetDeleteRequestPartition(partition_index=i32(p)) for p in ps),
        )
        for topic, ps in partitions.items()
    )
    return kafka_call(address, 47, 0, OffsetDeleteRequest(group_id=GroupId(group), topics=topics))


def partition_codes(response: Any) -> dict[tuple[str, int], int]:
    return {
        (t.name, p.partition_index): int(p.error_code)
        for t in response.topics
        for p in t.partitions
    }


def test_offset_delete_by_a_raw_request_and_the_cli_with_its_error_paths(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    """OffsetDelete as a client sends it on the Kafka listener (kio) and as
    ``consumer-groups --delete-offsets`` asks for it over gRPC: the same code answers, with
    GROUP_SUBSCRIBED_TO_TOPIC for a topic the live member subscribes to,
    UNKNOWN_TOPIC_OR_PARTITION for one that does not exist, GROUP_ID_NOT_FOUND for a group
    that does not, NOT_COORDINATOR away from the coordinator."""
    with running_cluster(zk_client, zk_connect, tmp_path, overrides=OVERRIDES) as cluster:
        bootstrap = kafka_bootstrap(cluster)
        member = setup_groups(cluster, bootstrap)
        try:
            # The raw request, at the coordinator of "live" and elsewhere.
            live_at = coordinator_address(bootstrap, "live")
            answer = offset_delete(live_at, "live", {"orders": [0], "audit": [0], "ghost": [0]})
            assert int(answer.error_code) == 0
            assert partition_codes(answer) == {
                ("orders", 0): GROUP_SUBSCRIBED_TO_TOPIC,
                ("audit", 0): 0,
                ("ghost", 0): UNKNOWN_TOPIC_OR_PARTITION,
            }
            elsewhere = next(a for a in bootstrap.split(",") if a != live_at)
            refused = offset_delete(elsewhere, "live", {"audit": [0]})
            assert (int(refused.error_code), refused.topics) == (NOT_COORDINATOR, ())
            missing = offset_delete(
                coordinator_address(bootstrap, "nobody"), "nobody", {"orders": [0]}
            )
            assert (int(missing.error_code), missing.topics) == (GROUP_ID_NOT_FOUND, ())

            left_at = coordinator_address(bootstrap, "left")
            assert partition_codes(offset_delete(left_at, "left", {"orders": [1]})) == {
                ("orders", 1): 0
            }
            assert committed(bootstrap, "left", "orders", [1]) == [None]
            assert None not in committed(bootstrap, "left", "orders", [0])

            # The CLI: the same answers through the gRPC door.
            subscribed = cli_run(cluster, zk_connect, "--delete-offsets", "--group", "live",
                                 "--topic", "orders:0,2")  # fmt: skip
            assert subscribed.returncode == 1, subscribed.stderr
            assert "Encounter some partition level error" in subscribed.stderr
            rows = [line.split(maxsplit=2) for line in subscribed.stdout.splitlines()[1:]]
            forbidden = (
                "Error: Deleting offsets of a topic is forbidden while the consumer group is "
                "actively subscribed to it."
            )
            assert rows == [["orders", "0", forbidden], ["orders", "2", forbidden]]

            done = cli(
                cluster, zk_connect, "--delete-offsets", "--group", "left", "--topic", "orders"
            )
            assert "Request succeed for deleting offsets with topic orders group left" in done
            assert [line.split() for line in done.splitlines()[-3:]] == [
                ["orders", "0", "Successful"],
                ["orders", "1", "Successful"],
                ["orders", "2", "Successful"],
            ]
            assert committed(bootstrap, "left", "orders", [0, 1, 2]) == [None, None, None]
            assert None not in committed(bootstrap, "left", "audit", [0])

            ghost = cli_run(cluster, zk_connect, "--delete-offsets", "--group", "left",
                            "--topic", "ghost", "--topic", "audit")  # fmt: skip
            assert ghost.returncode == 1, ghost.stderr
            shown = {tuple(line.split(maxsplit=2)[:2]) for line in ghost.stdout.splitlines()}
            assert {("ghost", "Not"), ("audit", "0")} <= shown
            assert "Error: This server does not host this topic-partition." in ghost.stdout
            assert committed(bootstrap, "left", "audit", [0]) == [None]

            nobody = cli_run(cluster, zk_connect, "--delete-offsets", "--group", "nobody",
                             "--topic", "orders")  # fmt: skip
            assert nobody.returncode != 0
            assert "'nobody' does not exist." in nobody.stderr
            assert "Traceback" not in nobody.stderr

            # Deleted by the CLI at the coordinator, then unknown to both doors.
            assert "was successful" in cli(cluster, zk_connect, "--delete", "--group", "left")
            gone = cli_run(cluster, zk_connect, "--delete", "--group", "left")
            assert "GROUP_ID_NOT_FOUND" in gone.stderr
            again = offset_delete(left_at, "left", {"orders": [0]})
            assert int(again.error_code) == GROUP_ID_NOT_FOUND
        finally:
            member.stop()
