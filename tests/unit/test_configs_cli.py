"""The configs command's parsing of --add-config and its --describe layout."""

from __future__ import annotations

import argparse

import pytest

from client.admin import EntityConfig
from client.cli.configs import add_parser, describe_lines, entity_parts, parse_add_config
from client.metadata import ClientError
from proto.config.topic_config_def import TOPIC_CONFIGS


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


def test_describe_all_lists_every_config_defaults_included() -> None:
    lines = describe_lines(
        [
            EntityConfig("topics", "orders", {"retention.ms": "100"}, {}),
            EntityConfig("brokers", "1", {"num.io.threads": "16"}, {}),
        ],
        describe_all=True,
    )
    topic_end = lines.index("All configs for broker 1 are:")
    assert lines[0] == "All configs for topic orders are:"
    topic = lines[1:topic_end]
    assert len(topic) == len(TOPIC_CONFIGS)
    assert (
        "  retention.ms=100 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=100}"
        in topic
    )
    policy = "synonyms={DEFAULT_CONFIG:log.cleanup.policy=delete}"
    assert f"  cleanup.policy=delete sensitive=false {policy}" in topic
    broker = lines[topic_end + 1 :]
    assert (
        "  num.io.threads=16 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:num.io.threads=16, "
        "DEFAULT_CONFIG:num.io.threads=8}" in broker
    )
    assert (
        "  log.roll.hours=168 sensitive=false synonyms={DEFAULT_CONFIG:log.roll.hours=168}"
        in broker
    )
    assert any(line.startswith("  ssl.keystore.password=null sensitive=true") for line in broker)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["configs", *argv])


def test_a_user_and_client_id_pair_is_named_as_kafka_configs_names_it() -> None:
    args = parse(["--alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type",
                  "clients", "--entity-default", "--add-config", "a=1"])  # fmt: skip
    assert entity_parts(args) == [("users", "alice", True), ("clients", None, True)]
    args = parse(["--describe", "--entity-type", "clients", "--entity-default",
                  "--entity-type", "users"])  # fmt: skip
    assert entity_parts(args) == [("clients", None, True), ("users", None, False)]
    args = parse(["--describe", "--entity-type", "topics", "--entity-name", "t"])
    assert entity_parts(args) == [("topics", "t", True)]
    refused = {
        "Only 'users' and 'clients' entity types may be specified together": [
            "--describe", "--entity-type", "topics", "--entity-type", "clients",
        ],
        "More entity names specified than entity types": [
            "--describe", "--entity-type", "clients", "--entity-name", "a", "--entity-name", "b",
        ],
        "must be specified with each --entity-type for --alter": [
            "--alter", "--entity-type", "users", "--entity-name", "u", "--entity-type", "clients",
            "--add-config", "a=1",
        ],
    }  # fmt: skip
    for message, argv in refused.items():
        with pytest.raises(ClientError, match=message):
            entity_parts(parse(argv))
