"""A CreateTopics or CreatePartitions of a million partitions (librdkafka: its most,
100,000), ``validate_only`` or not, is
refused at once with POLICY_VIOLATION and the limit it passes (``max.broker.partitions``;
with the limits raised, ``zookeeper.jute.maxbuffer``), through confluent-kafka's
``AdminClient`` (in a subprocess under a hard timeout: librdkafka may crash or hang),
kafka-python's ``KafkaAdminClient`` and ``minibroker topics``; nothing is written, and no
broker's ZooKeeper session drops (its registration keeps its session, its log shows no
suspended connection), where before the broker wrote a 13 MB znode that ZooKeeper refused
by dropping the session, again and again."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from proto.zk import znodes
from tests.cluster import Cluster, running_cluster
from tests.helpers import minibroker, wait_for
from tests.integration.test_kafka_listener import kafka_bootstrap

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

OVERRIDES = {"kafka.port": "0", "auto.leader.rebalance.enable": "false"}
MILLION = 1_000_000
LIBRDKAFKA_MAX = 100_000
"""The most partitions librdkafka lets a NewTopic ask for: still past every limit (and, at
replication factor 1, more than one znode holds)."""
FAST_S = 15.0
"""Refused well within this (it took minutes of session loops before)."""

_CONFLUENT = textwrap.dedent(
    """
    import json, sys, time
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": sys.argv[1]})
    results = {}

    def outcome(name, future):
        started = time.monotonic()
        try:
            future.result(timeout=30)
            results[name] = {"error": None}
        except KafkaException as err:
            error = err.args[0]
            results[name] = {"error": error.name(), "message": error.str()}
        results[name]["seconds"] = time.monotonic() - started

    for validate_only in (True, False):
        (future,) = admin.create_topics(
            [NewTopic("huge", num_partitions=int(sys.argv[2]), replication_factor=1)],
            validate_only=validate_only, request_timeout=30,
        ).values()
        outcome(f"create validate_only={validate_only}", future)
    (future,) = admin.create_partitions(
        [NewPartitions("small", int(sys.argv[2]))], request_timeout=30
    ).values()
    outcome("create_partitions", future)
    print(json.dumps(results))
    """
)


def sessions(zk: KazooClient, cluster: Cluster) -> dict[int, int]:
    """Each live broker's registration's session (its ephemeral owner)."""
    owners = {}
    for broker_id in cluster.live():
        _, stat = zk.get(f"/brokers/ids/{broker_id}")
        owners[broker_id] = stat.ephemeralOwner
    return owners


def assert_no_session_dropped(zk: KazooClient, cluster: Cluster, before: dict[int, int]) -> None:
    assert sessions(zk, cluster) == before
    for broker_id in cluster.live():
        log = cluster.brokers[broker_id].log_path.read_text(errors="replace")
        for event in ("event=suspended", "event=session_lost", "event=session_expired"):
            assert event not in log, (broker_id, event)


def confluent_create(bootstrap: str, partitions: int) -> dict[str, dict[str, object]]:
    """The subprocess' outcomes of CreateTopics (validate_only, then not) and
    CreatePartitions of topic ``small`` to ``partitions``."""
    done = subprocess.run(
        [sys.executable, "-c", _CONFLUENT, bootstrap, str(partitions)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    results: dict[str, dict[str, object]] = json.loads(done.stdout)
    return results


def cli_env(cluster: Cluster) -> dict[str, str]:
    return {"MINIBROKER_BOOTSTRAP": ",".join(cluster.brokers[b].address for b in cluster.live())}


def create_small_topic(zk_connect: str, cluster: Cluster) -> None:
    result = minibroker(
        "topics", "create", "small", "--partitions", "2", "--zookeeper", zk_connect,
        env=cli_env(cluster), timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_confluent_kafka_gets_policy_violation_for_a_million_partitions_and_no_session_drops(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path, overrides=OVERRIDES) as cluster:
        cluster.wait_for_controller()
        create_small_topic(zk_connect, cluster)
        before = sessions(zk_client, cluster)
        results = confluent_create(kafka_bootstrap(cluster), LIBRDKAFKA_MAX)
        for name, result in results.items():
            assert result["error"] == "POLICY_VIOLATION", (name, result)
            assert "more than max.broker.partitions (1000)" in str(result["message"]), result
            assert float(str(result["seconds"])) < FAST_S, (name, result)
        assert "validate_only=True" in " ".join(results)
        assert zk_client.exists(znodes.topic_path("huge")) is None
        assert zk_client.exists(znodes.topic_config_path("huge")) is None
        assert len(znodes.decode_topic_assignment(zk_client.get("/brokers/topics/small")[0])) == 2
        assert_no_session_dropped(zk_client, cluster, before)


def test_past_raised_limits_the_znode_size_check_refuses_before_zookeeper_does(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    raised = {**OVERRIDES, "max.broker.partitions": "100000000", "max.partitions": "100000000"}
    with running_cluster(zk_client, zk_connect, tmp_path, overrides=raised) as cluster:
        cluster.wait_for_controller()
        create_small_topic(zk_connect, cluster)
        before = sessions(zk_client, cluster)
        results = confluent_create(kafka_bootstrap(cluster), LIBRDKAFKA_MAX)
        for name, result in results.items():
            assert result["error"] == "POLICY_VIOLATION", (name, result)
            message = str(result["message"])
            assert "more than zookeeper.jute.maxbuffer (1048575 bytes)" in message, result
            assert "/brokers/topics/" in message, result
            assert float(str(result["seconds"])) < FAST_S, (name, result)
        assert zk_client.exists(znodes.topic_path("huge")) is None
        assert_no_session_dropped(zk_client, cluster, before)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_kafka_python_and_the_cli_are_refused_and_a_topic_within_the_limits_is_created(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    from kafka import KafkaAdminClient
    from kafka.errors import PolicyViolationError

    with running_cluster(zk_client, zk_connect, tmp_path, overrides=OVERRIDES) as cluster:
        cluster.wait_for_controller()
        create_small_topic(zk_connect, cluster)
        before = sessions(zk_client, cluster)
        admin = KafkaAdminClient(
            bootstrap_servers=kafka_bootstrap(cluster).split(","), request_timeout_ms=30_000
        )
        try:
            for partitions in (MILLION, 10_500):
                for validate_only in (True, False):
                    started = time.monotonic()
                    with pytest.raises(PolicyViolationError, match=r"max\.broker\.partitions"):
                        admin.create_topics(
                            {"huge": {"num_partitions": partitions, "replication_factor": 1}},
                            timeout_ms=30_000,
                            validate_only=validate_only,
                        )
                    assert time.monotonic() - started < FAST_S
            started = time.monotonic()
            with pytest.raises(PolicyViolationError, match=r"max\.broker\.partitions"):
                admin.create_partitions({"small": MILLION}, timeout_ms=30_000)
            assert time.monotonic() - started < FAST_S
            # Two topics of one request share the budget: the second passes the limit.
            response = admin.create_topics(
                {
                    "half-a": {"num_partitions": 1500, "replication_factor": 1},
                    "half-b": {"num_partitions": 1500, "replication_factor": 1},
                },
                timeout_ms=30_000,
                validate_only=True,
                raise_errors=False,
            )
            codes = {t["name"]: t["error_code"] for t in response["topics"]}
            assert codes == {"half-a": 0, "half-b": 44}, response
            admin.create_topics(
                {"fits": {"num_partitions": 30, "replication_factor": 1}}, timeout_ms=30_000
            )
        finally:
            admin.close()
        wait_for(
            lambda: zk_client.exists(znodes.topic_path("fits")) is not None,
            timeout=30,
            message="topic fits written",
        )

        # minibroker topics writes ZooKeeper itself (as kafka-topics --zookeeper): the znode
        # size check refuses it, before the assignment is computed or a config is written.
        started = time.monotonic()
        result = minibroker(
            "topics", "create", "huge", "--partitions", str(MILLION),
            "--config", "retention.ms=60000", "--zookeeper", zk_connect,
            env=cli_env(cluster), timeout=60,
        )  # fmt: skip
        assert result.returncode != 0
        assert "more than zookeeper.jute.maxbuffer (1048575 bytes)" in result.stderr, result
        assert time.monotonic() - started < FAST_S
        result = minibroker(
            "topics", "alter", "small", "--partitions", str(MILLION), "--zookeeper", zk_connect,
            env=cli_env(cluster), timeout=60,
        )  # fmt: skip
        assert result.returncode != 0
        assert "more than zookeeper.jute.maxbuffer" in result.stderr, result
        assert zk_client.exists(znodes.topic_path("huge")) is None
        assert zk_client.exists(znodes.topic_config_path("huge")) is None
        assert len(znodes.decode_topic_assignment(zk_client.get("/brokers/topics/small")[0])) == 2
        assert_no_session_dropped(zk_client, cluster, before)
