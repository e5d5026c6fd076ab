"""The configs command's parsing of --add-config and its --describe layout."""

from __future__ import annotations

import pytest

from client.admin import EntityConfig
from client.cli.configs import describe_lines, parse_add_config
from client.metadata import ClientError


def test_add_config_is_comma_separated_with_bracketed_values_holding_commas() -> None:
    assert parse_add_config("min.insync.replicas=2, retention.ms = 1000") == {
        "min.insync.replicas": "2",
        "retention.ms": "1000",
    }
    assert parse_add_config("a=[x,y],b=z=w") == {"a": "x,y", "b": "z=w"}
    for bad in ("novalue", "=3"):
        with pytest.raises(ClientError, match="expected key=value"):
            parse_add_config(bad)


def test_describe_shows_each_config_with_its_layers_highest_first() -> None:
    default = {"min.insync.replicas": "2", "log.retention.ms": "5000"}
    lines = describe_lines(
        [
            EntityConfig("topics", "orders", {"retention.ms": "100"}, default),
            EntityConfig("brokers", "1", {"min.insync.replicas": "3"}, default),
            EntityConfig("brokers", "<default>", default, default),
        ]
    )
    assert lines == [
        "Dynamic configs for topic orders are:",
        "  retention.ms=100 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=100, "
        "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=5000, "
        "DEFAULT_CONFIG:log.retention.hours=168}",
        "Dynamic configs for broker 1 are:",
        "  log.retention.ms=5000 sensitive=false synonyms={"
        "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=5000, "
        "DEFAULT_CONFIG:log.retention.hours=168}",
        "  min.insync.replicas=3 sensitive=false synonyms={"
        "DYNAMIC_BROKER_CONFIG:min.insync.replicas=3, "
        "DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.replicas=2, "
        "DEFAULT_CONFIG:min.insync.replicas=1}",
        "Default configs for brokers in the cluster are:",
        "  log.retention.ms=5000 sensitive=false synonyms={"
        "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=5000}",
        "  min.insync.replicas=2 sensitive=false synonyms={"
        "DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.replicas=2}",
    ]
