"""DescribeConfigs' entries, as Kafka 2.8's ConfigHelper builds them: value, source,
synonyms highest first, read-only and sensitive flags, types."""

from __future__ import annotations

from pathlib import Path

from proto.config.broker_config import BrokerConfig
from proto.config.config_def import ConfigType
from proto.config.describe_configs import (
    BrokerLayers,
    ConfigSource,
    DescribedConfig,
    Synonym,
    describe_broker,
    describe_topic,
    listener_configs,
    static_broker_properties,
)
from proto.config.topic_config_def import TOPIC_CONFIGS

S = ConfigSource


def by_name(configs: list[DescribedConfig]) -> dict[str, DescribedConfig]:
    return {c.name: c for c in configs}


def test_a_topic_without_overrides_lists_every_config_with_kafkas_defaults() -> None:
    described = by_name(describe_topic({}, BrokerLayers()))
    assert set(described) == set(TOPIC_CONFIGS)
    retention = described["retention.ms"]
    # log.retention.ms has no default in Kafka: its synonyms start at it, so none are left.
    assert (retention.value, retention.source, retention.synonyms) == (
        "604800000",
        S.DEFAULT_CONFIG,
        (),
    )
    assert retention.type is ConfigType.LONG
    assert not retention.read_only
    isr = described["min.insync.replicas"]
    assert isr.synonyms == (Synonym("min.insync.replicas", "1", S.DEFAULT_CONFIG),)
    assert described["cleanup.policy"].value == "delete"
    assert described["leader.replication.throttled.replicas"].value == ""
    assert described["segment.ms"].value == "604800000"


def test_a_topic_override_comes_first_then_the_broker_layers() -> None:
    layers = BrokerLayers(
        dynamic_broker={"log.retention.ms": "7000"},
        dynamic_default={"log.retention.ms": "5000", "min.insync.replicas": "2"},
        static={"log.retention.hours": "1", "log.retention.ms": "9000"},
    )
    described = by_name(describe_topic({"retention.ms": " 100 "}, layers))
    assert described["retention.ms"].value == "100"
    assert described["retention.ms"].source is S.DYNAMIC_TOPIC_CONFIG
    assert described["retention.ms"].synonyms == (
        Synonym("retention.ms", "100", S.DYNAMIC_TOPIC_CONFIG),
        Synonym("log.retention.ms", "7000", S.DYNAMIC_BROKER_CONFIG),
        Synonym("log.retention.ms", "5000", S.DYNAMIC_DEFAULT_BROKER_CONFIG),
        Synonym("log.retention.ms", "9000", S.STATIC_BROKER_CONFIG),
        Synonym("log.retention.hours", "1", S.STATIC_BROKER_CONFIG),
        Synonym("log.retention.hours", "168", S.DEFAULT_CONFIG),
    )
    isr = described["min.insync.replicas"]
    assert (isr.value, isr.source) == ("2", S.DYNAMIC_DEFAULT_BROKER_CONFIG)


def test_a_static_hours_setting_gives_the_topic_its_value_in_milliseconds() -> None:
    described = by_name(describe_topic({}, BrokerLayers(static={"log.retention.hours": "2"})))
    assert described["retention.ms"].value == str(2 * 3600 * 1000)


def test_keys_select_configs_and_unknown_stored_names_are_still_described() -> None:
    described = describe_topic({"x.custom": "1"}, BrokerLayers(), ["x.custom", "segment.bytes"])
    assert [(c.name, c.type, c.source) for c in described] == [
        ("segment.bytes", ConfigType.INT, S.DEFAULT_CONFIG),
        ("x.custom", ConfigType.UNKNOWN, S.DYNAMIC_TOPIC_CONFIG),
    ]


def test_a_broker_describes_static_dynamic_and_listener_configs() -> None:
    config = BrokerConfig.from_properties(
        {
            "broker.id": "1",
            "zookeeper.connect": "zk:2181",
            "log.dirs": "/d",
            "num.partitions": "3",
            "log.retention.hours": "24",
        }
    )
    static = static_broker_properties(config, listener_configs("h", 9091, 9092, tls=False))
    assert "replica.lag.time.max.ms" not in static  # left at its default
    layers = BrokerLayers(dynamic_broker={"min.insync.replicas": "2"}, static=static)
    described = by_name(describe_broker(layers, per_broker=True))
    assert described["listeners"].value == "GRPC://h:9091,KAFKA://h:9092"
    assert described["advertised.listeners"].source is S.STATIC_BROKER_CONFIG
    assert described["listeners"].read_only
    assert described["num.partitions"].source is S.STATIC_BROKER_CONFIG
    assert described["num.partitions"].type is ConfigType.INT
    assert described["replica.lag.time.max.ms"].source is S.DEFAULT_CONFIG
    isr = described["min.insync.replicas"]
    assert (isr.value, isr.source, isr.read_only) == ("2", S.DYNAMIC_BROKER_CONFIG, False)
    assert described["log.retention.hours"].value == "24"
    assert described["log.retention.ms"].value is None  # Kafka's null default
    assert described["log.cleanup.policy"].value == "delete"
    assert described["auto.leader.rebalance.enable"].type is ConfigType.BOOLEAN


def test_the_cluster_default_lists_only_its_own_layer() -> None:
    layers = BrokerLayers(
        dynamic_broker={"min.insync.replicas": "3"},
        dynamic_default={"min.insync.replicas": "2"},
    )
    (isr,) = describe_broker(layers, per_broker=False)
    assert (isr.value, isr.source) == ("2", S.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert isr.synonyms == (Synonym("min.insync.replicas", "2", S.DYNAMIC_DEFAULT_BROKER_CONFIG),)


def test_static_properties_hold_the_required_ones() -> None:
    config = BrokerConfig(broker_id=4, zookeeper_connect="zk:2181", log_dir=Path("/d"))
    assert static_broker_properties(config) == {
        "broker.id": "4",
        "zookeeper.connect": "zk:2181",
        "log.dirs": "/d",
    }


def test_every_dynamic_broker_config_is_described_typed_with_its_layers() -> None:
    layers = BrokerLayers(
        dynamic_broker={"num.io.threads": "16"},
        dynamic_default={"log.roll.ms": "60000", "num.io.threads": "4"},
    )
    configs = by_name(describe_broker(layers, per_broker=True))
    threads = configs["num.io.threads"]
    assert (threads.value, threads.source, threads.type) == (
        "16",
        ConfigSource.DYNAMIC_BROKER_CONFIG,
        ConfigType.INT,
    )
    assert not threads.read_only
    assert [(s.value, s.source) for s in threads.synonyms] == [
        ("16", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("4", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("8", ConfigSource.DEFAULT_CONFIG),
    ]
    roll = configs["log.roll.ms"]
    assert (roll.value, roll.source) == ("60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert [s.name for s in roll.synonyms] == ["log.roll.ms", "log.roll.hours"]
    for name, kind in {
        "log.cleaner.io.max.bytes.per.second": ConfigType.DOUBLE,
        "metric.reporters": ConfigType.LIST,
        "follower.replication.throttled.rate": ConfigType.LONG,
        "max.connections": ConfigType.INT,
        "log.cleanup.policy": ConfigType.LIST,
    }.items():
        assert configs[name].type is kind, name
        assert configs[name].source is ConfigSource.DEFAULT_CONFIG
        assert configs[name].documentation
        assert not configs[name].read_only
    assert configs["max.connections"].value == str(2**31 - 1)
    # Refused here (no run-time listener or TLS change): described read-only, passwords hidden.
    assert configs["listeners"].read_only
    assert configs["ssl.keystore.password"].sensitive
    assert configs["ssl.keystore.password"].value is None


def test_read_only_kafka_broker_configs_users_look_for_are_described() -> None:
    configs = by_name(describe_broker(BrokerLayers(), per_broker=True))
    for name, value in {
        "delete.topic.enable": "true",
        "log.cleaner.enable": "true",
        "inter.broker.protocol.version": "2.8-IV1",
        "log.message.format.version": "2.8-IV1",
        "log.retention.hours": "168",
    }.items():
        assert configs[name].value == value, name
        assert configs[name].read_only, name
        assert configs[name].source is ConfigSource.DEFAULT_CONFIG
    assert configs["delete.topic.enable"].type is ConfigType.BOOLEAN
