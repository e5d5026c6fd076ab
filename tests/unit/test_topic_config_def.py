"""Kafka 2.8's topic configs: every name, typed values with Kafka's messages, the
broker-level synonyms, and the refusal of behaviour minibroker lacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from proto.config.broker_config import BrokerConfig
from proto.config.config_def import ConfigType, ConfigValueError
from proto.config.topic_config_def import (
    BROKER_LOG_CONFIGS,
    TOPIC_CONFIG_SYNONYMS,
    TOPIC_CONFIGS,
    InvalidConfigError,
    broker_config_synonyms,
    check_topic_config,
    validate_topic_config,
)

KAFKA_28_TOPIC_CONFIGS = """cleanup.policy compression.type delete.retention.ms
file.delete.delay.ms flush.messages flush.ms follower.replication.throttled.replicas
index.interval.bytes leader.replication.throttled.replicas max.compaction.lag.ms
max.message.bytes message.downconversion.enable message.format.version
message.timestamp.difference.max.ms message.timestamp.type min.cleanable.dirty.ratio
min.compaction.lag.ms min.insync.replicas preallocate retention.bytes retention.ms
segment.bytes segment.index.bytes segment.jitter.ms segment.ms
unclean.leader.election.enable""".split()  # noqa: SIM905


def test_every_topic_config_of_kafka_2_8_is_defined_with_a_broker_synonym() -> None:
    assert sorted(TOPIC_CONFIGS) == sorted(KAFKA_28_TOPIC_CONFIGS)
    no_synonym = set(TOPIC_CONFIGS) - set(TOPIC_CONFIG_SYNONYMS)
    assert no_synonym == {
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
    }
    assert set(TOPIC_CONFIG_SYNONYMS.values()) <= set(BROKER_LOG_CONFIGS)
    assert TOPIC_CONFIGS["retention.ms"].type is ConfigType.LONG
    assert TOPIC_CONFIGS["cleanup.policy"].type is ConfigType.LIST
    assert TOPIC_CONFIGS["min.cleanable.dirty.ratio"].type is ConfigType.DOUBLE


def test_every_default_is_accepted_as_a_value() -> None:
    defaults = {n: k.default for n, k in TOPIC_CONFIGS.items() if k.default is not None}
    assert set(validate_topic_config(defaults)) == set(TOPIC_CONFIGS)


def test_broker_synonyms_run_from_milliseconds_to_hours() -> None:
    assert broker_config_synonyms("log.retention.hours") == (
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
    )
    assert broker_config_synonyms("log.roll.ms") == ("log.roll.ms", "log.roll.hours")
    assert broker_config_synonyms("min.insync.replicas") == ("min.insync.replicas",)


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"retention.ms": "abc"}, "Invalid value abc for configuration retention.ms: "
         "Not a number of type LONG"),
        ({"retention.ms": "-2"}, "Invalid value -2 for configuration retention.ms: "
         "Value must be at least -1"),
        ({"segment.bytes": "3000000000"}, "Not a number of type INT"),
        ({"preallocate": "yes"}, "Expected value to be either true or false"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "Value must be no more than 1"),
        ({"message.timestamp.type": "Now"}, "String must be one of: CreateTime, LogAppendTime"),
        ({"cleanup.policy": "delete,forever"}, "Invalid value forever for configuration "
         "cleanup.policy: String must be one of: compact, delete"),
        ({"message.format.version": "9.9"}, "Version `9.9` is not a valid version"),
        ({"leader.replication.throttled.replicas": "0:1,x"}, "must be the literal '*'"),
    ],
)  # fmt: skip
def test_bad_values_get_kafkas_message(configs: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigValueError, match=message.replace("*", r"\*")):
        validate_topic_config(configs)


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"no.such.config": "1"}, "Unknown topic config name: no.such.config"),
        ({"message.timestamp.type": "LogAppendTime"}, "does not stamp LogAppendTime yet"),
        ({"message.format.version": "0.10.2"}, "writes only record format v2"),
        ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, "conflict topic config"),
    ],
)
def test_unknown_names_and_missing_behaviour_are_invalid_config(
    configs: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        validate_topic_config(configs)


def test_stored_but_not_applied_configs_are_accepted() -> None:
    accepted = {
        "cleanup.policy": "delete",
        "compression.type": "producer",
        "message.format.version": "2.8",
        "segment.ms": "60000",
        "preallocate": "true",
        "leader.replication.throttled.replicas": "0:1,1:2",
        "follower.replication.throttled.replicas": "*",
    }
    assert validate_topic_config(accepted)["leader.replication.throttled.replicas"] == [
        "0:1",
        "1:2",
    ]


def test_check_adds_this_brokers_own_bounds_and_strips() -> None:
    broker = BrokerConfig(broker_id=1, zookeeper_connect="zk:2181", log_dir=Path("/d"))
    assert check_topic_config({"retention.ms": " 5 "}, broker) == {"retention.ms": "5"}
    with pytest.raises(InvalidConfigError, match=r"flush\.messages"):
        check_topic_config({"flush.messages": "0"}, broker)  # Kafka allows 0; the log does not
