"""What Kafka's admin clients do beyond the APIs minibroker serves: every such call fails at
once with the client's own "not supported by this broker" error, never a hang or a crash,
and the calls that are served answer Kafka 2.8's errors (an offset commit for a partition
that does not exist: UNKNOWN_TOPIC_OR_PARTITION)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.cluster import running_cluster
from tests.integration.test_kafka_listener import KAFKA_PORT_FREE, kafka_bootstrap

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

PROMPT_S = 15
"""A refusal is prompt: well under the clients' own request timeouts (30 s and more)."""
SERVED_SCRAM_CALLS = {"describe_user_scram_credentials", "alter_user_scram_credentials"}
"""KIP-554's APIs, served since SCRAM credentials live in ZooKeeper (docs/security.md)."""


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's own imports
def test_admin_calls_beyond_the_served_apis_fail_at_once_and_commits_need_a_partition(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    import kafka.admin as kafka_admin  # kafka-python warns while importing: not at collection
    import kafka.errors
    from kafka import TopicPartition as KpTopicPartition
    from kafka.structs import OffsetAndMetadata

    with running_cluster(zk_client, zk_connect, tmp_path, overrides=KAFKA_PORT_FREE) as cluster:
        cluster.wait_for_controller()
        bootstrap = kafka_bootstrap(cluster)

        swept = subprocess.run(
            [sys.executable, "-m", "tests.confluent_admin_sweep", bootstrap],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert swept.returncode == 0, f"librdkafka's sweep ended {swept.returncode}: {swept.stderr}"
        results = {r["call"]: r for r in map(json.loads, swept.stdout.splitlines())}
        assert set(results) >= SERVED_SCRAM_CALLS | {"alter_consumer_group_offsets"}
        slow = {name: r["seconds"] for name, r in results.items() if r["seconds"] > PROMPT_S}
        assert slow == {}
        for name in SERVED_SCRAM_CALLS:
            assert results[name]["outcome"] == "ok", results[name]
        for name in ("create_acls", "delete_acls"):
            # Served, as by Kafka's brokers without authorizer.class.name (docs/security.md).
            assert results[name]["outcome"] == "SECURITY_DISABLED", results[name]
        # librdkafka drops DescribeAcls' top-level error (kafka-python raises it, below).
        assert results["describe_acls"]["detail"] == "[]", results["describe_acls"]
        assert results["describe_cluster"]["outcome"] == "ok"
        assert results["describe_topics"]["outcome"] == "UNKNOWN_TOPIC_OR_PART"
        assert "UNKNOWN_TOPIC_OR_PART" in results["alter_consumer_group_offsets"]["detail"]

        admin = kafka_admin.KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
        try:
            any_topic = kafka_admin.ResourcePatternFilter(
                kafka_admin.ResourceType.TOPIC, None, kafka_admin.ACLResourcePatternType.ANY
            )
            with pytest.raises(kafka.errors.SecurityDisabledError):
                admin.describe_acls(
                    kafka_admin.ACLFilter(
                        principal=None,
                        host="*",
                        operation=kafka_admin.ACLOperation.ANY,
                        permission_type=kafka_admin.ACLPermissionType.ANY,
                        resource_pattern=any_topic,
                    )
                )
            refused: dict[str, Callable[[], object]] = {
                "list_transactions": admin.list_transactions,
                "describe_metadata_quorum": admin.describe_metadata_quorum,
            }
            for name, call in refused.items():
                started = time.monotonic()
                with pytest.raises(kafka.errors.IncompatibleBrokerVersion):
                    call()
                assert time.monotonic() - started < PROMPT_S, name

            started = time.monotonic()
            answer = admin.alter_group_offsets(
                "sweep-group", {KpTopicPartition("never-made", 0): OffsetAndMetadata(1, "", -1)}
            )
            assert time.monotonic() - started < PROMPT_S
            codes = {tp: getattr(error, "errno", error) for tp, error in answer.items()}
            assert codes == {
                KpTopicPartition("never-made", 0): kafka.errors.UnknownTopicOrPartitionError.errno
            }
        finally:
            admin.close()
