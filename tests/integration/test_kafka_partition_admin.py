"""CreatePartitions, ElectLeaders, Alter/ListPartitionReassignments and DescribeLogDirs
on the Kafka listener, each through two of Kafka's client libraries (confluent-kafka's
AdminClient, kafka-python's KafkaAdminClient, a raw kio request as a client sends it),
with their error paths; ``minibroker topics`` and the Kafka API agree after a change."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewPartitions  # type: ignore[attr-defined]
from kazoo.client import KazooClient

from broker.kafka_listener.messages import build
from proto.topic_partition import TopicPartition
from proto.zk import znodes
from proto.zk.sync_client import read_registered_broker
from tests.cluster import Cluster, running_cluster
from tests.helpers import minibroker, wait_for
from tests.integration.test_kafka_listener import kafka_bootstrap, kafka_call

with warnings.catch_warnings():  # kafka-python reads its schemas with a deprecated call
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.errors import (
        InvalidPartitionsError,
        InvalidReplicationAssignmentError,
        UnknownTopicOrPartitionError,
    )

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

OVERRIDES = {"kafka.port": "0", "auto.leader.rebalance.enable": "false"}
INVALID_PARTITIONS, INVALID_REPLICA_ASSIGNMENT, UNKNOWN_TOPIC_OR_PARTITION = 37, 39, 3
INVALID_REQUEST, PREFERRED_LEADER_NOT_AVAILABLE, ELECTION_NOT_NEEDED = 42, 80, 84
NO_REASSIGNMENT_IN_PROGRESS, NOT_CONTROLLER, REASSIGNMENT_IN_PROGRESS = 85, 41, 60
ELIGIBLE_LEADERS_NOT_AVAILABLE = 83


def kafka_python_admin(cluster: Cluster) -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=kafka_bootstrap(cluster),
        request_timeout_ms=20_000,
    )


def described(admin: AdminClient, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr) as confluent-kafka's Metadata reports it."""
    metadata = admin.list_topics(topic, timeout=10).topics[topic]
    return {p: (m.leader, list(m.replicas), list(m.isrs)) for p, m in metadata.partitions.items()}


def cli_described(
    cluster: Cluster, zk_connect: str, topic: str
) -> dict[int, tuple[int, list[int], list[int]]]:
    """The same from ``minibroker topics describe``."""
    env = {
        "MINIBROKER_BOOTSTRAP": ",".join(cluster.brokers[b].address for b in cluster.live()),
        "MINIBROKER_ZOOKEEPER": zk_connect,
    }
    result = minibroker("topics", "describe", topic, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    found = {}
    for line in result.stdout.splitlines():
        fields = dict(f.split(": ", 1) for f in line.strip().split("\t") if ": " in f)
        if "Partition" in fields:
            found[int(fields["Partition"])] = (
                int(fields["Leader"]),
                [int(r) for r in fields["Replicas"].split(",")],
                [int(r) for r in fields["Isr"].split(",") if r],
            )
    return found


def kafka_address(cluster: Cluster, broker_id: int) -> str:
    """One broker's Kafka listener, as its registration advertises it."""
    registered = read_registered_broker(cluster.zk, broker_id)
    assert registered is not None
    assert registered.kafka_endpoint is not None
    host, port = registered.kafka_endpoint
    return f"{host}:{port}"


def kafka_error_code(future: Any) -> int:
    with pytest.raises(confluent_kafka.KafkaException) as raised:
        future.result(timeout=30)
    return int(raised.value.args[0].code())


def test_create_partitions_through_confluent_kafka_kafka_python_and_the_cli_agree(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path, overrides=OVERRIDES) as cluster:
        cluster.create_topic("grow", {0: [1, 2]})
        cluster.wait_for_leader(TopicPartition("grow", 0))
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap(cluster)})
        clients = {"confluent": admin}  # what the lambdas use; emptied with ``del admin``
        kp = kafka_python_admin(cluster)
        try:
            # validate_only: checked, nothing written
            futures = admin.create_partitions([NewPartitions("grow", 3)], validate_only=True)
            futures["grow"].result(timeout=30)
            assert set(described(admin, "grow")) == {0}

            futures = admin.create_partitions([NewPartitions("grow", 3)], operation_timeout=20)
            futures["grow"].result(timeout=30)
            # each broker's metadata learns of them in its own time
            wait_for(lambda: len(described(clients["confluent"], "grow")) == 3, 30, interval=0.2)
            after = described(admin, "grow")
            assert set(after) == {0, 1, 2}
            assert all(leader >= 0 and len(replicas) == 2 for leader, replicas, _ in after.values())

            # confluent-kafka's error paths
            assert (
                kafka_error_code(admin.create_partitions([NewPartitions("grow", 3)])["grow"])
                == INVALID_PARTITIONS
            )
            assert (
                kafka_error_code(admin.create_partitions([NewPartitions("grow", 2)])["grow"])
                == INVALID_PARTITIONS
            )
            assert (
                kafka_error_code(admin.create_partitions([NewPartitions("nope", 2)])["nope"])
                == UNKNOWN_TOPIC_OR_PARTITION
            )
            unknown_broker = admin.create_partitions([NewPartitions("grow", 4, [[1, 9]])])["grow"]
            assert kafka_error_code(unknown_broker) == INVALID_REPLICA_ASSIGNMENT
            wrong_count = admin.create_partitions([NewPartitions("grow", 5, [[1, 2]])])["grow"]
            assert kafka_error_code(wrong_count) == INVALID_REPLICA_ASSIGNMENT
            assert set(described(admin, "grow")) == {0, 1, 2}

            # kafka-python: explicit assignments
            kp.create_partitions(
                {"grow": {"count": 5, "assignments": [[3, 1], [2, 3]]}}, timeout_ms=20_000
            )
            wait_for(lambda: len(described(clients["confluent"], "grow")) == 5, 30, interval=0.2)
            grown = described(admin, "grow")
            assert grown[3][1] == [3, 1]
            assert grown[4][1] == [2, 3]
            with pytest.raises(InvalidPartitionsError):
                kp.create_partitions({"grow": 4})
            with pytest.raises(InvalidReplicationAssignmentError):
                kp.create_partitions({"grow": {"count": 6, "assignments": [[1, 1]]}})
            with pytest.raises(UnknownTopicOrPartitionError):
                kp.create_partitions({"nope": 2})
            failed = kp.create_partitions({"grow": 5}, raise_errors=False)
            assert [r.error_code for r in failed.results] == [INVALID_PARTITIONS]
            illegal = kp.create_partitions({"no/such": 2, "a" * 300: 2}, raise_errors=False)
            assert [r.error_code for r in illegal.results] == [UNKNOWN_TOPIC_OR_PARTITION] * 2

            # the CLI's door goes through the same code; both views agree
            env = {
                "MINIBROKER_BOOTSTRAP": ",".join(
                    cluster.brokers[b].address for b in cluster.live()
                ),
                "MINIBROKER_ZOOKEEPER": zk_connect,
            }
            altered = minibroker(
                "topics", "alter", "grow", "--partitions", "6", env=env, timeout=60
            )
            assert altered.returncode == 0, altered.stderr
            refused = minibroker(
                "topics", "alter", "grow", "--partitions", "6", env=env, timeout=60
            )
            assert "can only be increased" in refused.stderr
            wait_for(
                lambda: (
                    described(clients["confluent"], "grow")
                    == cli_described(cluster, zk_connect, "grow")
                ),
                30,
                interval=0.5,
                message="topics describe and Metadata agree",
            )
            assert set(described(admin, "grow")) == set(range(6))
        finally:
            kp.close()
            clients.clear()
            del admin


def test_elect_leaders_preferred_and_unclean_through_confluent_kafka_and_kafka_python(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    from confluent_kafka import ElectionType
    from confluent_kafka import TopicPartition as CkTopicPartition

    with running_cluster(zk_client, zk_connect, tmp_path, overrides=OVERRIDES) as cluster:
        cluster.create_topic("pref", {0: [1, 2, 3], 1: [1, 3, 2]})
        for p in (0, 1):
            cluster.wait_for_isr(TopicPartition("pref", p), {1, 2, 3})
        # Leadership leaves broker 1 and does not come back by itself.
        cluster.brokers[1].stop()
        wait_for(
            lambda: all(
                (s := cluster.state(TopicPartition("pref", p))) is not None and s.leader != 1
                for p in (0, 1)
            ),
            30,
        )
        cluster.brokers[1].start(zk_client)
        for p in (0, 1):
            cluster.wait_for_isr(TopicPartition("pref", p), {1, 2, 3}, timeout=40)
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap(cluster)})
        clients = {"confluent": admin}  # what the lambdas use; emptied with ``del admin``
        kp = kafka_python_admin(cluster)
        try:
            assert described(admin, "pref")[0][0] != 1
            result = admin.elect_leaders(
                ElectionType.PREFERRED, [CkTopicPartition("pref", 0)]
            ).result(timeout=30)
            assert [(tp.topic, tp.partition, err) for tp, err in result.items()] == [
                ("pref", 0, None)
            ]
            wait_for(lambda: described(clients["confluent"], "pref")[0][0] == 1, 30, interval=0.2)
            # again: nothing to do
            again = admin.elect_leaders(
                ElectionType.PREFERRED, [CkTopicPartition("pref", 0)]
            ).result(timeout=30)
            assert [err.code() for err in again.values()] == [ELECTION_NOT_NEEDED]
            unknown = admin.elect_leaders(
                ElectionType.PREFERRED, [CkTopicPartition("pref", 7)]
            ).result(timeout=30)
            assert [err.code() for err in unknown.values()] == [UNKNOWN_TOPIC_OR_PARTITION]
            # unclean: the leader is live, so no election is needed
            unclean = admin.elect_leaders(
                ElectionType.UNCLEAN, [CkTopicPartition("pref", 0)]
            ).result(timeout=30)
            assert [err.code() for err in unclean.values()] == [ELECTION_NOT_NEEDED]

            # kafka-python: partition 1 back to broker 1
            response = kp.elect_leaders(0, {"pref": [1]}, timeout_ms=20_000, raise_errors=False)
            codes = {
                (r.topic, p.partition_id): p.error_code
                for r in response.replica_election_results
                for p in r.partition_result
            }
            assert codes == {("pref", 1): 0}
            wait_for(lambda: described(clients["confluent"], "pref")[1][0] == 1, 30, interval=0.2)
            response = kp.elect_leaders(0, {"pref": [0, 1]}, raise_errors=False)
            assert {
                p.error_code for r in response.replica_election_results for p in r.partition_result
            } == {ELECTION_NOT_NEEDED}
            # confluent-kafka asks for every partition (null): those that needed no
            # election are left out of the answer, as by Kafka
            everything = admin.elect_leaders(ElectionType.PREFERRED, None).result(timeout=30)
            assert everything == {}
            # kafka-python names every partition itself when given None
            response = kp.elect_leaders(0, None, raise_errors=False)
            assert {
                p.error_code for r in response.replica_election_results for p in r.partition_result
            } == {ELECTION_NOT_NEEDED}
            # the preferred replica is down: PREFERRED_LEADER_NOT_AVAILABLE
            cluster.brokers[1].stop()
            wait_for(
                lambda: described(clients["confluent"], "pref")[0][0] not in (1, -1),
                30,
                interval=0.3,
            )
            down = admin.elect_leaders(
                ElectionType.PREFERRED, [CkTopicPartition("pref", 0)]
            ).result(timeout=30)
            assert [err.code() for err in down.values()] == [PREFERRED_LEADER_NOT_AVAILABLE]
            response = kp.elect_leaders(0, {"pref": [0]}, raise_errors=False)
            assert [
                p.error_code for r in response.replica_election_results for p in r.partition_result
            ] == [PREFERRED_LEADER_NOT_AVAILABLE]
        finally:
            kp.close()
            clients.clear()
            del admin


def test_an_unclean_election_brings_back_a_partition_whose_isr_is_gone(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    from confluent_kafka import ElectionType
    from confluent_kafka import TopicPartition as CkTopicPartition
    from kio.schema.elect_leaders.v2 import request as elect_v2

    tp = TopicPartition("lost", 0)
    with running_cluster(zk_client, zk_connect, tmp_path, overrides=OVERRIDES) as cluster:
        cluster.create_topic(tp.topic, {0: [2, 3]})
        cluster.wait_for_isr(tp, {2, 3})
        cluster.brokers[3].stop()
        wait_for(lambda: (s := cluster.state(tp)) is not None and s.isr == (2,), 30)
        cluster.brokers[2].stop()
        wait_for(lambda: (s := cluster.state(tp)) is not None and s.leader == -1, 30)
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap(cluster)})
        clients = {"confluent": admin}  # what the lambdas use; emptied with ``del admin``
        kp = kafka_python_admin(cluster)
        try:
            none_live = admin.elect_leaders(
                ElectionType.UNCLEAN, [CkTopicPartition(tp.topic, 0)]
            ).result(timeout=30)
            assert [err.code() for err in none_live.values()] == [ELIGIBLE_LEADERS_NOT_AVAILABLE]
            cluster.brokers[3].start(zk_client)  # out of sync: a clean election cannot pick it
            assert (s := cluster.state(tp)) is not None
            assert s.leader == -1
            preferred = kp.elect_leaders(0, {tp.topic: [0]}, raise_errors=False)
            assert [
                p.error_code for r in preferred.replica_election_results for p in r.partition_result
            ] == [PREFERRED_LEADER_NOT_AVAILABLE]
            result = admin.elect_leaders(
                ElectionType.UNCLEAN, [CkTopicPartition(tp.topic, 0)]
            ).result(timeout=30)
            assert list(result.values()) == [None]
            wait_for(lambda: described(clients["confluent"], tp.topic)[0][0] == 3, 30, interval=0.2)
            response = kp.elect_leaders(1, {tp.topic: [0]}, raise_errors=False)
            assert [
                p.error_code for r in response.replica_election_results for p in r.partition_result
            ] == [ELECTION_NOT_NEEDED]
            # only the controller runs unclean elections: any other broker says so
            controller = cluster.wait_for_controller()
            [other] = [b for b in cluster.live() if b != controller]
            raw = kafka_call(
                kafka_address(cluster, other),
                43,
                2,
                build(
                    elect_v2.ElectLeadersRequest,
                    {
                        "election_type": 1,
                        "topic_partitions": [{"topic": tp.topic, "partitions": [0]}],
                        "timeout": 10_000,
                    },
                ),
            )
            assert raw.error_code == 0
            assert [
                p.error_code for r in raw.replica_election_results for p in r.partition_result
            ] == [NOT_CONTROLLER]
        finally:
            kp.close()
            clients.clear()
            del admin


def test_reassignments_and_log_dirs_through_kafka_python_and_raw_requests(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    from kio.schema.alter_partition_reassignments.v0 import request as alter_v0
    from kio.schema.describe_log_dirs.v1 import request as log_dirs_v1
    from kio.schema.list_partition_reassignments.v0 import request as list_v0

    tp = TopicPartition("moving", 0)
    with running_cluster(zk_client, zk_connect, tmp_path, overrides=OVERRIDES) as cluster:
        cluster.create_topic(tp.topic, {0: [1, 2]})
        cluster.produce_until_acked(tp, [b"r%d" % i for i in range(20)])
        cluster.wait_for_isr(tp, {1, 2})
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap(cluster)})
        clients = {"confluent": admin}  # what the lambdas use; emptied with ``del admin``
        kp = kafka_python_admin(cluster)
        try:
            # DescribeLogDirs: each broker its own dir; leader and in-sync follower lag 0
            wait_for(
                lambda: all(
                    p["partition_size"] > 0
                    for b in kp.describe_log_dirs()
                    for d in b["log_dirs"]
                    for t in d["topics"]
                    for p in t["partitions"]
                ),
                30,
            )
            by_broker = {
                b["broker"]: {
                    (t["name"], p["partition_index"]): (
                        p["partition_size"],
                        p["offset_lag"],
                        p["is_future_key"],
                    )
                    for d in b["log_dirs"]
                    for t in d["topics"]
                    for p in t["partitions"]
                }
                for b in kp.describe_log_dirs()
            }
            assert set(by_broker[1]) == set(by_broker[2]) == {("moving", 0)}
            assert by_broker[3] == {}
            size, lag, future = by_broker[1][("moving", 0)]
            assert size > 0
            assert lag == 0
            assert future is False
            raw = kafka_call(
                kafka_bootstrap(cluster),
                35,
                1,
                build(
                    log_dirs_v1.DescribeLogDirsRequest,
                    {"topics": [{"topic": "moving", "partitions": [0, 5]}]},
                ),
            )
            [result] = raw.results
            assert result.error_code == 0
            assert result.log_dir.startswith("/")
            names = [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics]
            assert names in ([("moving", [0])], [])  # the first bootstrap broker may hold none

            # AlterPartitionReassignments: kafka-python moves it to [2, 3]
            assert kp.alter_partition_reassignments({KafkaTopicPartition("moving", 0): [2, 3]}) == {
                KafkaTopicPartition("moving", 0): None
            }
            wait_for(
                lambda: described(clients["confluent"], "moving")[0][1] == [2, 3], 60, interval=0.3
            )
            wait_for(lambda: kp.list_partition_reassignments() == {}, 30, interval=0.3)
            assert cluster.replica_records(3, tp)[-1][1] == b"r19"

            errors = kp.alter_partition_reassignments(
                {
                    KafkaTopicPartition("moving", 0): [2, 9],
                    KafkaTopicPartition("moving", 4): [1],
                    KafkaTopicPartition("nope", 0): [1],
                }
            )
            assert {
                tp_.partition if tp_.topic == "moving" else -1: e.errno for tp_, e in errors.items()
            } == {
                0: INVALID_REPLICA_ASSIGNMENT,
                4: UNKNOWN_TOPIC_OR_PARTITION,
                -1: UNKNOWN_TOPIC_OR_PARTITION,
            }
            cancel = kp.alter_partition_reassignments({KafkaTopicPartition("moving", 0): None})
            assert [e.errno for e in cancel.values()] == [NO_REASSIGNMENT_IN_PROGRESS]

            # the same through raw requests, as any client sends them
            bootstrap = kafka_bootstrap(cluster)
            response = kafka_call(
                bootstrap,
                45,
                0,
                build(
                    alter_v0.AlterPartitionReassignmentsRequest,
                    {
                        "timeout": 30_000,
                        "topics": [
                            {
                                "name": "moving",
                                "partitions": [
                                    {"partition_index": 0, "replicas": [3, 1]},
                                    {"partition_index": 1, "replicas": None},
                                    {"partition_index": 2, "replicas": []},
                                ],
                            }
                        ],
                    },
                ),
            )
            assert response.error_code == 0
            assert {
                p.partition_index: p.error_code for t in response.responses for p in t.partitions
            } == {
                0: 0,
                1: NO_REASSIGNMENT_IN_PROGRESS,
                2: INVALID_REPLICA_ASSIGNMENT,
            }
            wait_for(
                lambda: described(clients["confluent"], "moving")[0][1] == [3, 1], 60, interval=0.3
            )

            def listed() -> Any:
                return kafka_call(
                    bootstrap,
                    46,
                    0,
                    build(list_v0.ListPartitionReassignmentsRequest, {"topics": None}),
                )

            wait_for(lambda: listed().topics == (), 30, interval=0.3)
            assert listed().error_code == 0
            cluster.wait_for_isr(tp, {1, 3}, timeout=30)
            assert cluster.replica_records(1, tp)[-1][1] == b"r19"
        finally:
            kp.close()
            clients.clear()
            del admin


def topic_znode(cluster: Cluster, topic: str) -> dict[int, znodes.ReplicaAssignment]:
    data, _ = cluster.zk.get(znodes.topic_path(topic))
    return znodes.decode_topic_replica_assignment(data)


def test_a_running_reassignment_is_listed_blocks_create_partitions_and_can_be_cancelled(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    """A target replica that cannot catch up (its broker paused) keeps the reassignment
    running: ListPartitionReassignments shows it exactly as the topic znode (version 2)
    records it, CreatePartitions on its topic is REASSIGNMENT_IN_PROGRESS; a cancellation
    (null replicas) puts the original replicas and leader back, the paused broker's
    replica is deleted once it resumes, and no acknowledged record is lost."""
    from kio.schema.alter_partition_reassignments.v0 import request as alter_v0
    from kio.schema.create_partitions.v3 import request as create_partitions_v3
    from kio.schema.list_partition_reassignments.v0 import request as list_v0

    tp = TopicPartition("slow", 0)
    with running_cluster(zk_client, zk_connect, tmp_path, overrides=OVERRIDES) as cluster:
        controller = cluster.wait_for_controller()
        # the paused broker must not be the controller: it would stop the reassignment too
        stay, paused = [b for b in (1, 2, 3) if b != controller]
        leave = controller
        cluster.create_topic(tp.topic, {0: [stay, leave]})
        cluster.wait_for_isr(tp, {stay, leave})
        cluster.produce_until_acked(tp, [b"s%d" % i for i in range(5)])
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap(cluster)})
        clients = {"confluent": admin}
        kp = kafka_python_admin(cluster)
        # Raw requests to the controller's listener while a broker is paused: a client
        # library may pick the paused broker for its next metadata request and wait on it.
        address = kafka_address(cluster, controller)

        def listed(topics: list[Any] | None) -> dict[tuple[str, int], tuple[list[int], ...]]:
            response = kafka_call(
                address, 46, 0, build(list_v0.ListPartitionReassignmentsRequest, {"topics": topics})
            )
            assert response.error_code == 0
            return {
                (t.name, p.partition_index): (
                    list(p.replicas),
                    list(p.adding_replicas),
                    list(p.removing_replicas),
                )
                for t in response.topics
                for p in t.partitions
            }

        def alter(replicas: list[int] | None) -> int:
            response = kafka_call(
                address,
                45,
                0,
                build(
                    alter_v0.AlterPartitionReassignmentsRequest,
                    {
                        "timeout": 10_000,
                        "topics": [
                            {
                                "name": tp.topic,
                                "partitions": [{"partition_index": 0, "replicas": replicas}],
                            }
                        ],
                    },
                ),
            )
            assert response.error_code == 0
            [[partition]] = [t.partitions for t in response.responses]
            return int(partition.error_code)

        try:
            cluster.brokers[paused].pause()
            try:
                # still registered for zookeeper.session.timeout.ms: the target is valid
                assert alter([stay, paused]) == 0
                running = ([stay, paused, leave], [paused], [leave])
                # answered once the controller has recorded it, as Kafka's controller does
                assert listed(None).get((tp.topic, 0)) == running
                assert listed([{"name": tp.topic, "partition_indexes": [5]}]) == {}
                assert listed([{"name": tp.topic, "partition_indexes": [0]}]) == {
                    (tp.topic, 0): running
                }
                refused = kafka_call(
                    address,
                    37,
                    3,
                    build(
                        create_partitions_v3.CreatePartitionsRequest,
                        {
                            "topics": [{"name": tp.topic, "count": 2, "assignments": None}],
                            "timeout": 10_000,
                            "validate_only": False,
                        },
                    ),
                )
                assert [r.error_code for r in refused.results] == [REASSIGNMENT_IN_PROGRESS]
                assert topic_znode(cluster, tp.topic)[0] == znodes.ReplicaAssignment(
                    (stay, paused, leave), (paused,), (leave,)
                )
                cluster.produce_until_acked(tp, [b"m%d" % i for i in range(5)])
                assert alter(None) == 0  # KIP-455's cancellation
                assert listed(None) == {}
                assert topic_znode(cluster, tp.topic) == {
                    0: znodes.ReplicaAssignment((stay, leave))
                }
                cluster.wait_for_isr(tp, {stay, leave}, timeout=30)
                state = cluster.state(tp)
                assert state is not None
                assert state.leader == stay
                cluster.produce_until_acked(tp, [b"c%d" % i for i in range(5)])
                assert alter(None) == NO_REASSIGNMENT_IN_PROGRESS
            finally:
                cluster.brokers[paused].resume()
            acked = [b"s%d" % i for i in range(5)] + [b"m%d" % i for i in range(5)]
            acked += [b"c%d" % i for i in range(5)]

            def held_by_both() -> bool:
                return all(
                    [v for _, v in cluster.replica_records(b, tp)] == acked for b in (stay, leave)
                )

            wait_for(held_by_both, 30, interval=0.2, message="every acked record on both")
            wait_for(
                lambda: described(clients["confluent"], tp.topic)[0][:2] == (stay, [stay, leave]),
                30,
                interval=0.3,
            )
            # the cancelled replica got StopReplica(delete) once its broker answered again
            wait_for(lambda: not cluster.partition_dir(paused, tp).exists(), 60, interval=0.3)
            assert kp.list_partition_reassignments() == {}
            cancel = kp.alter_partition_reassignments({KafkaTopicPartition(tp.topic, 0): None})
            assert [e.errno for e in cancel.values()] == [NO_REASSIGNMENT_IN_PROGRESS]
        finally:
            kp.close()
            clients.clear()
            del admin


def test_cancelling_while_an_adding_replica_leads_gives_leadership_back_to_an_original(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    """[a, b] -> [x, y]: x catches up, y dies, then a dies: the offline election prefers
    the target replicas (RS lists them first), so x, an adding replica, leads. kafka-python
    cancels: the controller moves leadership to b (the first live original replica in the
    ISR) before x and y are stopped, the topic znode names [a, b] again with no
    adding/removing replicas, and every acknowledged record is on b and, once restarted, a."""
    tp = TopicPartition("back", 0)
    brokers = (1, 2, 3, 4)
    with running_cluster(
        zk_client, zk_connect, tmp_path, broker_ids=brokers, overrides=OVERRIDES
    ) as cluster:
        x = cluster.wait_for_controller()
        a, y, b = [i for i in brokers if i != x]
        cluster.create_topic(tp.topic, {0: [a, b]})
        cluster.wait_for_isr(tp, {a, b})
        acked = [b"a%d" % i for i in range(10)]
        cluster.produce_until_acked(tp, acked)
        kp = kafka_python_admin(cluster)

        def isr() -> tuple[int, ...]:
            state = cluster.state(tp)
            return () if state is None else state.isr

        def leader() -> int | None:
            state = cluster.state(tp)
            return None if state is None else state.leader

        try:
            assert kp.alter_partition_reassignments({KafkaTopicPartition(tp.topic, 0): [x, y]}) == {
                KafkaTopicPartition(tp.topic, 0): None
            }
            running = znodes.ReplicaAssignment((x, y, a, b), (x, y), (a, b))
            assert topic_znode(cluster, tp.topic)[0] == running
            cluster.brokers[y].kill()  # y never catches up: the reassignment keeps running
            wait_for(lambda: x in isr(), 30, interval=0.2)
            assert topic_znode(cluster, tp.topic)[0] == running
            listed = kp.list_partition_reassignments()
            assert [
                (k.topic, k.partition, v["replicas"], v["adding_replicas"], v["removing_replicas"])
                for k, v in listed.items()
            ] == [(tp.topic, 0, [x, y, a, b], [x, y], [a, b])]
            cluster.brokers[a].kill()
            wait_for(lambda: leader() == x, 30, interval=0.2)
            more = [b"x%d" % i for i in range(5)]
            cluster.produce_until_acked(tp, more)
            acked += more

            cancel = kp.alter_partition_reassignments({KafkaTopicPartition(tp.topic, 0): None})
            assert cancel == {KafkaTopicPartition(tp.topic, 0): None}
            assert kp.list_partition_reassignments() == {}
            assert topic_znode(cluster, tp.topic) == {0: znodes.ReplicaAssignment((a, b))}
            state = cluster.state(tp)
            assert state is not None
            assert (state.leader, state.isr) == (b, (b,))
            after = [b"b%d" % i for i in range(5)]
            cluster.produce_until_acked(tp, after)
            acked += after
            assert [v for _, v in cluster.consume_all(b, tp)] == acked
            wait_for(lambda: not cluster.partition_dir(x, tp).exists(), 30, interval=0.3)

            cluster.brokers[a].start(zk_client)
            cluster.wait_for_isr(tp, {a, b}, timeout=60)
            assert [v for _, v in cluster.replica_records(a, tp)] == acked
        finally:
            kp.close()


def test_a_cancellation_is_not_written_over_a_changed_topic_znode(
    zk_client: KazooClient, zk_connect: str
) -> None:
    """The cancellation's target (the original replicas) is decided from the topic znode;
    the admin znode is written in one multi-op with a check of that znode's version, so
    a move that finished meanwhile is not turned into a move back."""
    import asyncio

    from proto.zk import partition_admin
    from proto.zk.session import ZooKeeperClient

    tp = TopicPartition("t", 0)
    running = znodes.ReplicaAssignment((2, 1), (2,), (1,))
    zk_client.create(
        znodes.topic_path(tp.topic), znodes.encode_topic_assignment({0: running}), makepath=True
    )

    async def cancel(version: int) -> bool:
        async with ZooKeeperClient(zk_connect, broker_id=1) as zk:
            return await partition_admin.request_reassignments(
                zk, {tp: [1]}, unless_changed={tp.topic: version}
            )

    # the controller finishes the move: version 0 -> 1
    zk_client.set(znodes.topic_path(tp.topic), znodes.encode_topic_assignment({0: [2]}))
    assert asyncio.run(cancel(0)) is False
    assert zk_client.exists(znodes.REASSIGN_PARTITIONS_PATH) is None
    assert asyncio.run(cancel(1)) is True  # no /admin yet: made, then written
    data, _ = zk_client.get(znodes.REASSIGN_PARTITIONS_PATH)
    assert znodes.decode_reassign_partitions(data) == {tp: [1]}
