"""Dynamic broker configs: which names may change at run time, the values they accept, and
the precedence of their layers (Kafka's DynamicBrokerConfig)."""

from __future__ import annotations

import pytest

from proto.config.broker_config import BrokerConfig
from proto.config.dynamic_broker_config import (
    DYNAMIC_BROKER_CONFIGS,
    check_dynamic_broker_config,
    effective_broker_config,
)


def static(**properties: str) -> BrokerConfig:
    return BrokerConfig.from_properties(
        {"broker.id": "1", "zookeeper.connect": "zk:2181", "log.dirs": "/d", **properties}
    )


def test_dynamic_configs_are_the_broker_synonyms_of_the_topic_configs_that_exist_here() -> None:
    assert set(DYNAMIC_BROKER_CONFIGS) == {
        "log.segment.bytes",
        "log.retention.ms",
        "log.retention.bytes",
        "log.index.interval.bytes",
        "log.flush.interval.messages",
        "message.max.bytes",
        "min.insync.replicas",
        "unclean.leader.election.enable",
    }


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
    with pytest.raises(ValueError, match=r"invalid value for min.insync.replicas"):
        check_dynamic_broker_config({"min.insync.replicas": "0"})
    with pytest.raises(ValueError, match=r"invalid value for log.segment.bytes"):
        check_dynamic_broker_config({"log.segment.bytes": "many"})
    with pytest.raises(ValueError, match=r"unclean.leader.election.enable"):
        check_dynamic_broker_config({"unclean.leader.election.enable": "maybe"})
    assert check_dynamic_broker_config({" log.retention.ms ": " 1000 "}) == {
        "log.retention.ms": "1000"
    }
