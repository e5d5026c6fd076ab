"""Kafka 2.8's dynamic broker configs through the Kafka listener, with confluent-kafka's
``AdminClient`` and kafka-python's ``KafkaAdminClient`` against real brokers: one applied,
one stored and described but not applied (with its log line), one refused with what
minibroker lacks, a read-only one; and ``minibroker configs`` on the same znodes
(``--describe --all``, a user and client-id quota pair)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from broker.kafka_listener.messages import build
from proto.zk import znodes
from proto.zk.sync_client import read_registered_broker
from tests.cluster import running_cluster
from tests.configs_cli import (
    DEFAULT,
    DYNAMIC_BROKER,
    DYNAMIC_DEFAULT,
    KAFKA_PORT_FREE,
    TIMEOUT_S,
    cli_describe,
    kafka_error,
)
from tests.helpers import minibroker, wait_for
from tests.integration.test_kafka_listener import kafka_bootstrap, kafka_call

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def broker_config(zk: KazooClient, entity: str) -> dict[str, str]:
    return znodes.decode_topic_config(zk.get(f"/config/brokers/{entity}")[0])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_confluent_kafka_alters_and_describes_every_kind_of_dynamic_broker_config(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource

    with running_cluster(zk_client, zk_connect, tmp_path, overrides=KAFKA_PORT_FREE) as cluster:
        cluster.wait_for_controller()
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap(cluster)})

        def alter(name: str, configs: dict[str, str]) -> ConfigResource:
            ops = [
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                for k, v in configs.items()
            ]
            return ConfigResource("broker", name, incremental_configs=ops)

        # Applied (log.retention.bytes) and stored, not applied (num.io.threads, log.roll.ms).
        resource = alter("1", {"num.io.threads": "16", "log.retention.bytes": "1000000"})
        admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(
            timeout=TIMEOUT_S
        )
        # librdkafka names no cluster-wide default (an empty broker name): written as
        # kafka-configs --entity-default writes it, and described through broker 1.
        result = minibroker(
            "configs", "--alter", "--entity-type", "brokers", "--entity-default",
            "--add-config", "log.roll.ms=60000,max.connections=500",
            "--zookeeper", zk_connect, timeout=60,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert broker_config(zk_client, "1") == {
            "num.io.threads": "16",
            "log.retention.bytes": "1000000",
        }
        assert broker_config(zk_client, "<default>") == {
            "log.roll.ms": "60000",
            "max.connections": "500",
        }
        (described,) = admin.describe_configs(
            [ConfigResource("broker", "1")], request_timeout=TIMEOUT_S
        ).values()
        entries = described.result(timeout=TIMEOUT_S)
        threads = entries["num.io.threads"]
        assert (threads.value, threads.source, threads.is_read_only) == (
            "16",
            DYNAMIC_BROKER,
            False,
        )
        assert list(threads.synonyms) == ["num.io.threads"]  # confluent-kafka keys by name
        roll = entries["log.roll.ms"]
        assert (roll.value, roll.source) == ("60000", DYNAMIC_DEFAULT)
        assert entries["max.connections"].value == "500"
        assert entries["log.cleaner.threads"].source == DEFAULT
        assert entries["delete.topic.enable"].is_read_only
        log = cluster.brokers[1].log_path

        def logged_not_applied() -> bool:
            text = log.read_text()
            return bool(
                re.search(r"event=broker_config_not_applied .*num\.io\.threads", text)
                and "stored, not applied" in text
            )

        wait_for(logged_not_applied, timeout=30, message="the 'stored, not applied' line")

        # Refused with what is missing (INVALID_CONFIG), and Kafka's own refusals.
        refusals = {
            ("1", "log.message.timestamp.type", "LogAppendTime"): (
                "INVALID_CONFIG",
                "does not stamp LogAppendTime",
            ),
            ("1", "listeners", "PLAINTEXT://:1"): ("INVALID_CONFIG", "listeners, TLS or SASL"),
            ("1", "log.dirs", "/elsewhere"): (
                "INVALID_REQUEST",
                "Cannot update these configs dynamically: log.dirs",
            ),
            ("1", "num.io.threads", "many"): ("INVALID_REQUEST", "Not a number of type INT"),
            ("1", "ssl.keystore.location", "/k"): ("INVALID_REQUEST", "using the listener prefix"),
        }
        for (name, key, value), (code, message) in refusals.items():
            resource = alter(name, {key: value})
            error = kafka_error(
                admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource]
            )
            assert error.name() == code, (key, error)
            assert message in error.str(), (key, error)
        assert broker_config(zk_client, "1")["num.io.threads"] == "16"
        assert "log.message.timestamp.type" not in broker_config(zk_client, "1")

        # minibroker configs: --describe --all lists them with the same code.
        header, cli = cli_describe(zk_connect, "brokers", "1", all_configs=True)
        assert header == "All configs for broker 1 are:"
        assert cli["num.io.threads"] == (
            "16",
            "false",
            "DYNAMIC_BROKER_CONFIG:num.io.threads=16",
            "DEFAULT_CONFIG:num.io.threads=8",
        )
        assert cli["log.cleaner.threads"][0] == "1"
        del admin


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_kafka_python_alters_broker_configs_and_the_cli_sets_a_user_client_quota(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    from kafka.admin import ConfigResource, KafkaAdminClient
    from kio.schema.incremental_alter_configs.v1 import request as incremental_v1

    with running_cluster(zk_client, zk_connect, tmp_path, overrides=KAFKA_PORT_FREE) as cluster:
        cluster.wait_for_controller()
        admin = KafkaAdminClient(
            bootstrap_servers=kafka_bootstrap(cluster).split(","), request_timeout_ms=20_000
        )
        try:
            result = admin.alter_configs(
                [ConfigResource("broker", "2", {"follower.replication.throttled.rate": "1048576"})],
                raise_on_unknown=False,
                incremental=True,
            )
            assert result == {"broker": {"2": "OK"}}
            assert broker_config(zk_client, "2") == {
                "follower.replication.throttled.rate": "1048576"
            }
            described = admin.describe_configs(
                [ConfigResource("broker", "2")], include_synonyms=True, config_filter="all"
            )["broker"]["2"]
            rate = described["follower.replication.throttled.rate"]
            assert (rate["value"], rate["config_source"]) == ("1048576", "DYNAMIC_BROKER_CONFIG")
            assert rate["config_type"] == "LONG"
            assert described["log.cleaner.io.buffer.load.factor"]["config_type"] == "DOUBLE"
            assert described["metric.reporters"]["config_type"] == "LIST"
            assert described["log.message.format.version"]["read_only"]
            refused = admin.alter_configs(
                [ConfigResource("broker", "2", {"log.message.timestamp.type": "LogAppendTime"})],
                raise_on_unknown=False,
                incremental=True,
            )["broker"]["2"]
            assert "InvalidConfigurationError" in refused
            assert "does not stamp LogAppendTime yet" in refused
            refused = admin.alter_configs(
                [ConfigResource("broker", "2", {"log.message.format.version": "2.8"})],
                raise_on_unknown=False,
                incremental=True,
            )["broker"]["2"]
            assert "InvalidRequestError" in refused
            assert "Cannot update these configs dynamically: log.message.format.version" in refused
        finally:
            admin.close()

        # The cluster-wide default (broker ""), which neither library sends: over the wire.
        registered = read_registered_broker(zk_client, 1)
        assert registered is not None
        assert registered.kafka_endpoint is not None
        host, port = registered.kafka_endpoint
        incremental = build(
            incremental_v1.IncrementalAlterConfigsRequest,
            {
                "resources": [
                    {"resource_type": 4, "resource_name": "",
                     "configs": [{"name": "log.cleaner.threads", "config_operation": 0,
                                  "value": "2"}]},
                    {"resource_type": 4, "resource_name": "",
                     "configs": [{"name": "advertised.listeners", "config_operation": 0,
                                  "value": "X://h:1"}]},
                ],
                "validate_only": False,
            },
        )  # fmt: skip
        stored, per_broker = kafka_call(f"{host}:{port}", 44, 1, incremental).responses
        assert stored.error_code == 0, stored.error_message
        assert per_broker.error_code == 42
        assert (per_broker.error_message or "").endswith(
            "Cannot update these configs at default cluster level, broker id must be specified: "
            "advertised.listeners"
        )
        assert broker_config(zk_client, "<default>") == {"log.cleaner.threads": "2"}

        # A user and client-id pair, as kafka-configs names it.
        alter = minibroker(
            "configs", "--alter", "--entity-type", "users", "--entity-name", "alice",
            "--entity-type", "clients", "--entity-default",
            "--add-config", "producer_byte_rate=1024", "--zookeeper", zk_connect, timeout=60,
        )  # fmt: skip
        assert alter.returncode == 0, alter.stderr
        assert "user-principal 'alice', the default client-id" in alter.stdout
        data, _ = zk_client.get("/config/users/alice/clients/<default>")
        assert znodes.decode_topic_config(data) == {"producer_byte_rate": "1024"}
        describe = minibroker(
            "configs", "--describe", "--entity-type", "users", "--entity-name", "alice",
            "--entity-type", "clients", "--entity-default", "--zookeeper", zk_connect, timeout=60,
        )  # fmt: skip
        assert describe.returncode == 0, describe.stderr
        wanted = (
            "Quota configs for user-principal 'alice', the default client-id are "
            "producer_byte_rate=1024.0"
        )
        assert describe.stdout.strip() == wanted
        # Without a client name: alice's client ids; not alice's own quota, nor a client's.
        for argv in (
            ["--alter", "--entity-type", "users", "--entity-name", "alice",
             "--add-config", "consumer_byte_rate=2048"],
            ["--alter", "--entity-type", "clients", "--entity-name", "app",
             "--add-config", "consumer_byte_rate=4096"],
        ):  # fmt: skip
            done = minibroker("configs", *argv, "--zookeeper", zk_connect, timeout=60)
            assert done.returncode == 0, done.stderr
        describe = minibroker(
            "configs", "--describe", "--entity-type", "users", "--entity-name", "alice",
            "--entity-type", "clients", "--zookeeper", zk_connect, timeout=60,
        )  # fmt: skip
        assert describe.returncode == 0, describe.stderr
        assert describe.stdout.strip() == wanted
