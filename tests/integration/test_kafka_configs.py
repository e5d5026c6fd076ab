"""Topic and broker configs through the Kafka listener, with Kafka's own admin clients
(confluent-kafka's ``AdminClient``, kafka-python's ``KafkaAdminClient``) against real
brokers: CreateTopics with configs, DescribeConfigs (types, sources, synonyms, flags),
AlterConfigs and IncrementalAlterConfigs on topics and brokers, and their refusals; and
``minibroker configs --describe`` answering as DescribeConfigs does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from kazoo.client import KazooClient

from broker.kafka_listener.messages import build
from proto.zk import znodes
from proto.zk.sync_client import read_registered_broker
from tests.cluster import running_cluster
from tests.configs_cli import (
    DEFAULT,
    DYNAMIC_BROKER,
    DYNAMIC_TOPIC,
    KAFKA_PORT_FREE,
    STATIC,
    TIMEOUT_S,
    assert_cli_describes_as_describe_configs,
    cli_describe,
    kafka_error,
)
from tests.helpers import wait_for
from tests.integration.test_kafka_listener import kafka_bootstrap, kafka_call

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def topic_config(zk: KazooClient, topic: str) -> dict[str, str]:
    return znodes.decode_topic_config(zk.get(f"/config/topics/{topic}")[0])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_confluent_kafka_creates_describes_and_alters_configs_as_kafka_2_8_does(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
    from confluent_kafka.cimpl import NewTopic

    with running_cluster(zk_client, zk_connect, tmp_path, overrides=KAFKA_PORT_FREE) as cluster:
        cluster.wait_for_controller()
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap(cluster)})

        def knows_the_controller(client: AdminClient = admin) -> bool:
            return bool(client.list_topics(timeout=5).controller_id >= 0)

        wait_for(knows_the_controller, timeout=30, message="metadata with a controller")
        stored = {
            "segment.ms": "60000",
            "compression.type": "producer",
            "cleanup.policy": "delete",
            "leader.replication.throttled.replicas": "0:1",
        }
        wanted = [
            NewTopic("stored", 2, 3, config=stored),
            NewTopic("compacted", 1, 1, config={"cleanup.policy": "compact"}),
            NewTopic("appended", 1, 1, config={"message.timestamp.type": "LogAppendTime"}),
            NewTopic("odd-name", 1, 1, config={"no.such.config": "1"}),
            NewTopic("odd-value", 1, 1, config={"retention.ms": "soon"}),
        ]
        futures = admin.create_topics(wanted, operation_timeout=20, request_timeout=TIMEOUT_S)
        futures["stored"].result(timeout=TIMEOUT_S)
        futures["compacted"].result(timeout=TIMEOUT_S)
        assert topic_config(zk_client, "compacted") == {"cleanup.policy": "compact"}
        refusals = {
            name: kafka_error(futures[name]) for name in ("appended", "odd-name", "odd-value")
        }
        assert {n: e.name() for n, e in refusals.items()} == dict.fromkeys(
            refusals, "INVALID_CONFIG"
        )
        assert "does not stamp LogAppendTime yet" in refusals["appended"].str()
        assert "Unknown topic config name: no.such.config" in refusals["odd-name"].str()
        assert "Not a number of type LONG" in refusals["odd-value"].str()
        assert topic_config(zk_client, "stored") == stored

        (described,) = admin.describe_configs(
            [ConfigResource("topic", "stored")], request_timeout=TIMEOUT_S
        ).values()
        entries = described.result(timeout=TIMEOUT_S)
        assert len(entries) == 26  # every topic config of Kafka 2.8
        assert entries["segment.ms"].value == "60000"
        assert entries["segment.ms"].source == DYNAMIC_TOPIC
        assert entries["retention.ms"].value == "604800000"
        assert entries["retention.ms"].source == DEFAULT
        isr = entries["min.insync.replicas"]
        assert (isr.value, isr.is_read_only, isr.is_sensitive) == ("1", False, False)
        assert {s.name: s.source for s in isr.synonyms.values()} == {"min.insync.replicas": DEFAULT}

        # AlterConfigs replaces the topic's configs; IncrementalAlterConfigs edits them.
        resource = ConfigResource("topic", "stored", set_config={"retention.ms": "5000"})
        admin.alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(
            timeout=TIMEOUT_S
        )
        assert topic_config(zk_client, "stored") == {"retention.ms": "5000"}
        throttled = "leader.replication.throttled.replicas"
        ops = [
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("min.insync.replicas", "2", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry(throttled, "0:1,1:2", incremental_operation=AlterConfigOpType.APPEND),
        ]
        resource = ConfigResource("topic", "stored", incremental_configs=ops)
        admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(
            timeout=TIMEOUT_S
        )
        assert topic_config(zk_client, "stored") == {
            "min.insync.replicas": "2",
            throttled: "0:1,1:2",
        }
        ops = [ConfigEntry(throttled, "0:1", incremental_operation=AlterConfigOpType.SUBTRACT)]
        resource = ConfigResource("topic", "stored", incremental_configs=ops)
        admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(
            timeout=TIMEOUT_S
        )
        assert topic_config(zk_client, "stored")[throttled] == "1:2"

        def refused(
            configs: dict[str, str], topic: str = "stored", client: AdminClient = admin
        ) -> confluent_kafka.KafkaError:
            resource = ConfigResource("topic", topic, set_config=configs)
            return kafka_error(
                client.alter_configs([resource], request_timeout=TIMEOUT_S)[resource]
            )

        appended = refused({"message.timestamp.type": "LogAppendTime"})
        assert appended.name() == "INVALID_CONFIG"
        assert "does not stamp LogAppendTime yet" in appended.str()
        assert refused({"compression.type": "brotli"}).name() == "INVALID_REQUEST"
        assert refused({"no.such.config": "1"}).name() == "INVALID_CONFIG"
        bad = refused({"retention.ms": "-5"})  # Kafka wraps ConfigException: INVALID_REQUEST
        assert bad.name() == "INVALID_REQUEST"
        assert "Value must be at least -1" in bad.str()
        assert refused({"retention.ms": "1"}, topic="never-was").name() == "UNKNOWN_TOPIC_OR_PART"
        assert topic_config(zk_client, "stored")[throttled] == "1:2"  # refusals wrote nothing

        # Brokers: every config, the listeners among them; dynamic ones change, others not.
        (described,) = admin.describe_configs(
            [ConfigResource("broker", "1")], request_timeout=TIMEOUT_S
        ).values()
        entries = described.result(timeout=TIMEOUT_S)
        registered = read_registered_broker(zk_client, 1)
        assert registered is not None
        assert registered.kafka_endpoint is not None
        kafka_host, kafka_port = registered.kafka_endpoint
        assert entries["listeners"].value.endswith(f",KAFKA://{kafka_host}:{kafka_port}")
        assert entries["advertised.listeners"].value == entries["listeners"].value
        assert entries["listeners"].is_read_only
        assert entries["listeners"].source == STATIC
        assert entries["broker.id"].value == "1"
        assert entries["num.partitions"].source == DEFAULT
        assert entries["num.partitions"].is_read_only
        assert not entries["log.retention.bytes"].is_read_only

        ops = [
            ConfigEntry(
                "log.retention.bytes", "1000000", incremental_operation=AlterConfigOpType.SET
            )
        ]
        resource = ConfigResource("broker", "1", incremental_configs=ops)
        admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(
            timeout=TIMEOUT_S
        )
        assert znodes.decode_topic_config(zk_client.get("/config/brokers/1")[0]) == {
            "log.retention.bytes": "1000000"
        }
        resource = ConfigResource("broker", "1", set_config={"num.partitions": "3"})
        read_only = kafka_error(
            admin.alter_configs([resource], request_timeout=TIMEOUT_S)[resource]
        )
        assert read_only.name() == "INVALID_REQUEST"
        assert "Cannot update these configs dynamically: num.partitions" in read_only.str()
        # minibroker configs --describe reads ZooKeeper, and describes with the same code.
        # Out of its sight, as of kafka-configs --zookeeper's: the brokers' static properties
        # (on their command lines) and, for a topic, the dynamic config of the broker that
        # answers DescribeConfigs (broker 1's log.retention.bytes under retention.bytes).
        for entity_type, name, resource, unseen in (
            ("topics", "stored", ConfigResource("topic", "stored"), (STATIC, DYNAMIC_BROKER)),
            ("brokers", "1", ConfigResource("broker", "1"), (STATIC,)),
        ):
            _, cli = cli_describe(zk_connect, entity_type, name)
            (described,) = admin.describe_configs([resource], request_timeout=TIMEOUT_S).values()
            entries = described.result(timeout=TIMEOUT_S)
            assert_cli_describes_as_describe_configs(cli, entries, unseen)
        del admin


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_kafka_python_admin_creates_describes_and_alters_configs(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    from kafka.admin import ConfigResource, KafkaAdminClient, NewTopic
    from kafka.errors import InvalidConfigurationError, InvalidRequestError

    with running_cluster(zk_client, zk_connect, tmp_path, overrides=KAFKA_PORT_FREE) as cluster:
        cluster.wait_for_controller()
        admin = KafkaAdminClient(
            bootstrap_servers=kafka_bootstrap(cluster).split(","), request_timeout_ms=20_000
        )
        try:
            admin.create_topics(
                [
                    NewTopic(
                        "kp", 1, 2, topic_configs={"retention.ms": "60000", "preallocate": "true"}
                    )
                ],
                timeout_ms=20_000,
            )
            assert topic_config(zk_client, "kp") == {"retention.ms": "60000", "preallocate": "true"}
            with pytest.raises(InvalidConfigurationError, match="does not stamp LogAppendTime"):
                admin.create_topics(
                    [
                        NewTopic(
                            "kp-appended",
                            1,
                            1,
                            topic_configs={"message.timestamp.type": "LogAppendTime"},
                        )
                    ],
                    timeout_ms=20_000,
                )
            with pytest.raises(InvalidConfigurationError, match="Unknown topic config name"):
                admin.create_topics(
                    [NewTopic("kp-odd", 1, 1, topic_configs={"retention.minutes": "1"})],
                    timeout_ms=20_000,
                )

            described = admin.describe_configs(
                [ConfigResource("topic", "kp")], include_synonyms=True, config_filter="all"
            )["topic"]["kp"]
            assert len(described) == 26
            retention = described["retention.ms"]
            assert retention["value"] == "60000"
            assert retention["config_source"] == "DYNAMIC_TOPIC_CONFIG"
            assert retention["config_type"] == "LONG"
            assert retention["synonyms"][0]["name"] == "retention.ms"
            assert described["cleanup.policy"]["config_type"] == "LIST"
            assert described["preallocate"]["config_type"] == "BOOLEAN"
            assert described["min.cleanable.dirty.ratio"]["value"] == "0.5"
            assert described["min.cleanable.dirty.ratio"]["config_type"] == "DOUBLE"

            result = admin.alter_configs(
                [ConfigResource("topic", "kp", {"segment.bytes": "1048576"})],
                raise_on_unknown=False,
                incremental=False,
            )
            assert result == {"topic": {"kp": "OK"}}
            # kafka-python's AlterConfigs carries the other modified configs along.
            assert topic_config(zk_client, "kp")["segment.bytes"] == "1048576"
            refused = admin.alter_configs(
                [ConfigResource("topic", "kp", {"message.timestamp.type": "LogAppendTime"})],
                raise_on_unknown=False,
                incremental=True,
            )["topic"]["kp"]
            assert "InvalidConfigurationError" in refused
            assert "does not stamp LogAppendTime yet" in refused
            refused = admin.alter_configs(
                [ConfigResource("topic", "kp", {"segment.bytes": "tiny"})],
                raise_on_unknown=False,
                incremental=True,
            )["topic"]["kp"]
            assert "InvalidRequestError" in refused
            assert "Not a number of type INT" in refused

            broker = admin.describe_configs(
                [ConfigResource("broker", "2")], include_synonyms=True, config_filter="all"
            )["broker"]["2"]
            assert broker["broker.id"]["value"] == "2"
            assert broker["advertised.listeners"]["read_only"]
            assert broker["advertised.listeners"]["config_type"] == "STRING"
            assert "KAFKA://" in broker["advertised.listeners"]["value"]
            refused = admin.alter_configs(
                [ConfigResource("broker", "2", {"log.dirs": "/elsewhere"})],
                raise_on_unknown=False,
                incremental=True,
            )["broker"]["2"]
            assert "Cannot update these configs dynamically: log.dirs" in refused
            assert InvalidRequestError.__name__ in refused
        finally:
            admin.close()


def test_the_cluster_default_documentation_and_request_errors_over_the_wire(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    """What neither client library sends: the cluster-wide default (broker ``""``), the
    documentation (DescribeConfigs v3+), another broker's id, duplicate or non-list ops."""
    from kio.schema.alter_configs.v2 import request as alter_v2
    from kio.schema.create_topics.v5 import request as create_v5
    from kio.schema.describe_configs.v4 import request as describe_v4
    from kio.schema.incremental_alter_configs.v1 import request as incremental_v1

    with running_cluster(zk_client, zk_connect, tmp_path, overrides=KAFKA_PORT_FREE) as cluster:
        cluster.create_topic("wired", {0: [1, 2, 3]})
        registered = read_registered_broker(zk_client, 1)
        assert registered is not None
        assert registered.kafka_endpoint is not None
        host, port = registered.kafka_endpoint
        address = f"{host}:{port}"

        def describe(resource_type: int, name: str, keys: list[str] | None) -> Any:
            body = build(
                describe_v4.DescribeConfigsRequest,
                {
                    "resources": [
                        {"resource_type": resource_type, "resource_name": name,
                         "configuration_keys": keys}
                    ],
                    "include_synonyms": True,
                    "include_documentation": True,
                },
            )  # fmt: skip
            (result,) = kafka_call(address, 32, 4, body).results
            return result

        (retention,) = describe(2, "wired", ["retention.ms"]).configs
        assert retention.config_type == 5  # LONG
        assert "retain a log" in (retention.documentation or "")

        alter = build(
            alter_v2.AlterConfigsRequest,
            {
                "resources": [
                    {"resource_type": 4, "resource_name": "",
                     "configs": [{"name": "log.retention.ms", "value": "3600000"}]},
                    {"resource_type": 4, "resource_name": "2",
                     "configs": [{"name": "log.retention.ms", "value": "1"}]},
                ],
                "validate_only": False,
            },
        )  # fmt: skip
        default, other = kafka_call(address, 33, 2, alter).responses
        assert (default.error_code, other.error_code) == (0, 42)
        assert "Unexpected broker id, expected 1, but received 2" in (other.error_message or "")
        assert znodes.decode_topic_config(zk_client.get("/config/brokers/<default>")[0]) == {
            "log.retention.ms": "3600000"
        }
        (entry,) = describe(4, "", None).configs
        assert (entry.name, entry.value, entry.config_source) == ("log.retention.ms", "3600000", 3)
        # The topic's retention.ms follows the cluster default, once broker 1 applied it.
        wait_for(
            lambda: describe(2, "wired", ["retention.ms"]).configs[0].value == "3600000",
            timeout=30,
            message="the cluster default described under the topic",
        )

        incremental = build(
            incremental_v1.IncrementalAlterConfigsRequest,
            {
                "resources": [
                    {"resource_type": 2, "resource_name": "wired",
                     "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1"},
                                 {"name": "retention.ms", "config_operation": 1, "value": None}]},
                    {"resource_type": 2, "resource_name": "wired",
                     "configs": [{"name": "retention.ms", "config_operation": 2, "value": "1"}]},
                ],
                "validate_only": False,
            },
        )  # fmt: skip
        duplicate, not_a_list = kafka_call(address, 44, 1, incremental).responses
        assert duplicate.error_code == 42
        assert "duplicate config keys : retention.ms" in (duplicate.error_message or "")
        assert not_a_list.error_code == 42
        assert "append is not allowed for config key: retention.ms" in (
            not_a_list.error_message or ""
        )
        assert zk_client.exists("/config/topics/wired") is None

        create = build(
            create_v5.CreateTopicsRequest,
            {
                "topics": [
                    {"name": "nulled", "num_partitions": 1, "replication_factor": 1,
                     "assignments": [], "configs": [{"name": "retention.ms", "value": None}]},
                ],
                "timeout": 10_000,
                "validate_only": False,
            },
        )  # fmt: skip
        (nulled,) = kafka_call(address, 19, 5, create).topics
        assert nulled.error_code == 42
        assert nulled.error_message == "Null value not supported for topic configs : retention.ms"
        assert zk_client.exists("/brokers/topics/nulled") is None
        # CreateTopics v5 answers the new topic's configs (KIP-525), validate_only too.
        create = build(
            create_v5.CreateTopicsRequest,
            {
                "topics": [
                    {"name": "checked", "num_partitions": 1, "replication_factor": 1,
                     "assignments": [], "configs": [{"name": "retention.ms", "value": "1000"}]},
                ],
                "timeout": 10_000,
                "validate_only": True,
            },
        )  # fmt: skip
        (checked,) = kafka_call(address, 19, 5, create).topics
        assert checked.error_code == 0
        configs = {c.name: (c.value, c.config_source) for c in checked.configs}
        assert len(configs) == 26
        assert configs["retention.ms"] == ("1000", 1)
        assert configs["segment.bytes"] == (str(1024**3), 5)
        assert zk_client.exists("/brokers/topics/checked") is None
