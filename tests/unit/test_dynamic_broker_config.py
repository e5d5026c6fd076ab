"""Dynamic broker configs: which names may change at run time, the values they accept, and
the precedence of their layers (Kafka's DynamicBrokerConfig)."""

from __future__ import annotations

import pytest

from proto.config.broker_config import BrokerConfig
from proto.config.dynamic_broker_config import (
    APPLIED_BROKER_CONFIGS,
    DYNAMIC_BROKER_CONFIGS,
    READ_ONLY_BROKER_CONFIGS,
    check_dynamic_broker_config,
    effective_broker_config,
    not_applied,
)
from proto.config.topic_config_def import InvalidConfigError


def static(**properties: str) -> BrokerConfig:
    return BrokerConfig.from_properties(
        {"broker.id": "1", "zookeeper.connect": "zk:2181", "log.dirs": "/d", **properties}
    )


def test_every_kafka_dynamic_broker_config_is_dynamic_and_fourteen_are_applied() -> None:
    assert set(APPLIED_BROKER_CONFIGS) == {
        "log.segment.bytes",
        "log.retention.ms",
        "log.retention.bytes",
        "log.index.interval.bytes",
        "log.flush.interval.messages",
        "message.max.bytes",
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "compression.type",
        "log.cleanup.policy",
        "log.cleaner.min.cleanable.ratio",
        "log.cleaner.delete.retention.ms",
        "log.cleaner.min.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
    }
    # A sample of each of Kafka 2.8's groups (AllDynamicConfigs, DynamicConfig.Broker).
    for name in (
        *APPLIED_BROKER_CONFIGS,
        "log.cleanup.policy",
        "log.roll.ms",
        "log.roll.jitter.ms",
        "log.flush.interval.ms",
        "log.cleaner.threads",
        "log.cleaner.io.max.bytes.per.second",
        "num.io.threads",
        "num.network.threads",
        "num.replica.fetchers",
        "background.threads",
        "max.connections",
        "max.connections.per.ip.overrides",
        "metric.reporters",
        "follower.replication.throttled.rate",
        "ssl.keystore.location",
        "listeners",
        "sasl.enabled.mechanisms",
    ):
        assert name in DYNAMIC_BROKER_CONFIGS, name
    assert "log.message.format.version" not in DYNAMIC_BROKER_CONFIGS  # Kafka excludes it
    assert "log.message.format.version" in READ_ONLY_BROKER_CONFIGS


def test_precedence_per_broker_over_cluster_default_over_static() -> None:
    base = static(**{"min.insync.replicas": "1", "log.segment.bytes": "5000"})
    config = effective_broker_config(
        base,
        cluster_default={"min.insync.replicas": "2", "log.retention.bytes": "100"},
        per_broker={"min.insync.replicas": "3"},
    )
    assert config.min_insync_replicas == 3  # per-broker beats the cluster default
    assert config.default_log_config.retention_bytes == 100  # cluster default beats static
    assert config.default_log_config.segment_bytes == 5000  # static where nothing else
    assert config.broker_id == 1
    assert config.zookeeper_connect == "zk:2181"
    # ...and a topic's own override beats every broker layer.
    topic = config.topic_config({"min.insync.replicas": "2", "segment.bytes": "9000"})
    assert (topic.min_insync_replicas, topic.log_config.segment_bytes) == (2, 9000)
    assert topic.log_config.retention_bytes == 100


def test_a_dynamic_retention_ms_hides_a_static_retention_hours() -> None:
    base = static(**{"log.retention.hours": "1"})
    config = effective_broker_config(base, {"log.retention.ms": "5000"}, {})
    assert config.default_log_config.retention_ms == 5000
    assert config.default_log_config.compression_type == "producer"
    zstd = effective_broker_config(static(), {"compression.type": "zstd"}, {})
    assert zstd.default_log_config.compression_type == "zstd"
    assert static(**{"compression.type": "lz4"}).default_log_config.compression_type == "lz4"
    assert "log.retention.hours" not in config.log_properties


def test_unknown_layers_entries_are_ignored_by_the_broker() -> None:
    # Written by hand into /config/brokers/<default>: not dynamic, so not applied.
    config = effective_broker_config(static(), {"broker.id": "7", "port": "1"}, {})
    assert (config.broker_id, config.port) == (1, 9091)


def test_read_only_broker_configs_are_refused_with_kafkas_message() -> None:
    wanted = "^Cannot update these configs dynamically: broker.id, log.dirs$"
    with pytest.raises(ValueError, match=wanted):
        check_dynamic_broker_config({"broker.id": "2", "log.dirs": "/x", "log.retention.ms": "1"})
    with pytest.raises(ValueError, match=r"dynamically: log.retention.hours"):
        check_dynamic_broker_config({"log.retention.hours": "1"})


def test_unknown_and_invalid_broker_configs_are_one_line_errors() -> None:
    with pytest.raises(
        ValueError, match=r"unknown broker config 'min.insync.replica'.*did you mean"
    ):
        check_dynamic_broker_config({"min.insync.replica": "2"})
    with pytest.raises(
        ValueError, match=r"^Invalid value 0 for configuration min.insync.replicas: Value must"
    ):
        check_dynamic_broker_config({"min.insync.replicas": "0"})
    with pytest.raises(ValueError, match=r"Invalid value many for configuration log.segment.bytes"):
        check_dynamic_broker_config({"log.segment.bytes": "many"})
    with pytest.raises(ValueError, match=r"unclean.leader.election.enable"):
        check_dynamic_broker_config({"unclean.leader.election.enable": "maybe"})
    assert check_dynamic_broker_config({" log.retention.ms ": " 1000 "}) == {
        "log.retention.ms": "1000"
    }


@pytest.mark.parametrize(
    ("configs", "wanted"),
    [
        ({"num.io.threads": "0"}, "Invalid value 0 for configuration num.io.threads: "
         "Value must be at least 1"),
        ({"max.connections": "lots"}, "Invalid value lots for configuration max.connections: "
         "Not a number of type INT"),
        ({"log.cleaner.io.buffer.load.factor": "x"}, "Not a number of type DOUBLE"),
        ({"log.roll.ms": "-1"}, "Value must be at least 1"),
        ({"log.cleanup.policy": "forever"}, "String must be one of: compact, delete"),
    ],
)  # fmt: skip
def test_every_dynamic_config_is_typed_and_validated(configs: dict[str, str], wanted: str) -> None:
    with pytest.raises(ValueError, match=wanted):
        check_dynamic_broker_config(configs)


def test_configs_minibroker_does_not_apply_are_accepted_and_not_applied() -> None:
    stored = {
        "log.roll.ms": "60000",
        "num.io.threads": "16",
        "max.connections": "100",
        "log.cleaner.threads": "2",
        "metric.reporters": "a.B,c.D",
        "follower.replication.throttled.rate": "1048576",
    }
    assert check_dynamic_broker_config(stored) == stored
    assert check_dynamic_broker_config(stored, per_broker=False) == stored
    assert not_applied({**stored, "log.retention.ms": "1"}) == sorted(stored)
    config = effective_broker_config(static(), stored, {"log.retention.ms": "5000"})
    assert config.default_log_config.retention_ms == 5000
    assert (
        config.to_properties()
        == effective_broker_config(static(), {}, {"log.retention.ms": "5000"}).to_properties()
    )


@pytest.mark.parametrize(
    ("configs", "missing"),
    [
        ({"log.message.timestamp.type": "LogAppendTime"}, "does not stamp LogAppendTime"),
        ({"listeners": "PLAINTEXT://:9092"}, "does not reconfigure its listeners, TLS or SASL"),
        ({"listener.name.kafka.ssl.keystore.location": "/k"}, "listeners, TLS or SASL"),
        ({"sasl.enabled.mechanisms": "PLAIN"}, "listeners, TLS or SASL"),
    ],
)
def test_behaviour_minibroker_lacks_is_refused_naming_what_is_missing(
    configs: dict[str, str], missing: str
) -> None:
    with pytest.raises(InvalidConfigError, match=missing) as refused:
        check_dynamic_broker_config(configs)
    assert next(iter(configs)) in str(refused.value)


def test_kafkas_own_refusals_of_dynamic_broker_configs() -> None:
    with pytest.raises(
        ValueError,
        match=r"^These security configs can be dynamically updated "
        r"only per-listener using the listener prefix: ssl.keystore.location$",
    ):
        check_dynamic_broker_config({"ssl.keystore.location": "/k"})
    with pytest.raises(
        ValueError,
        match=r"^Cannot update these configs at default cluster "
        r"level, broker id must be specified: advertised.listeners$",
    ):
        check_dynamic_broker_config({"advertised.listeners": "X://h:1"}, per_broker=False)
    with pytest.raises(
        ValueError,
        match=r"^Cannot update these configs dynamically: "
        r"delete.topic.enable, log.message.format.version$",
    ):
        check_dynamic_broker_config(
            {"delete.topic.enable": "false", "log.message.format.version": "2.8"}
        )
