"""What the config tests share: ``minibroker configs --describe`` read back as data, and
compared with what DescribeConfigs (confluent-kafka's ``AdminClient``) answers."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

import confluent_kafka
import pytest

from tests.helpers import minibroker

KAFKA_PORT_FREE = {"kafka.port": "0"}
TIMEOUT_S = 30
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 1, 2, 3, 4, 5
"""DescribeConfigs' ``config_source`` numbers."""

CliConfig = tuple[str, ...]
"""(value, sensitive, synonym, ...) as one line of ``configs --describe`` shows a config."""


def kafka_error(future: Any) -> confluent_kafka.KafkaError:
    """The error a confluent-kafka admin future fails with."""
    with pytest.raises(confluent_kafka.KafkaException) as raised:
        future.result(timeout=TIMEOUT_S)
    error: confluent_kafka.KafkaError = raised.value.args[0]
    return error


def cli_describe(
    zk_connect: str, entity_type: str, name: str, *, all_configs: bool = False
) -> tuple[str, dict[str, CliConfig]]:
    """``minibroker configs --describe [--all]``: its header line, and name -> config."""
    result = minibroker(
        "configs", "--describe", *(["--all"] if all_configs else []),
        "--entity-type", entity_type, "--entity-name", name,
        "--zookeeper", zk_connect, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    header, *lines = result.stdout.splitlines()
    described = {}
    for line in lines:
        found = re.fullmatch(r"  ([^=]+)=(.*) sensitive=(\w+) synonyms=\{(.*)\}", line)
        assert found is not None, line
        name_, value, sensitive, synonyms = found.groups()
        described[name_] = (value, sensitive, *(s for s in synonyms.split(", ") if s))
    return header, described


def assert_cli_describes_as_describe_configs(
    cli: Mapping[str, CliConfig], entries: Mapping[str, Any], unseen: Collection[int]
) -> None:
    """The CLI lists exactly the dynamic configs DescribeConfigs answered (``entries``, as
    confluent-kafka keeps them), with their values, sensitivity and synonyms; sources in
    ``unseen`` are out of the CLI's sight (it reads ZooKeeper, not a broker's command line)."""
    dynamic = {
        n
        for n, e in entries.items()
        if e.source in (DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT) and e.source not in unseen
    }
    assert set(cli) == dynamic
    assert dynamic  # something to compare
    for config_name, (value, sensitive, *synonyms) in cli.items():
        entry = entries[config_name]
        assert (value, sensitive) == (entry.value, str(entry.is_sensitive).lower())
        # By name, as confluent-kafka keeps the synonyms.
        listed = {s.partition(":")[2].partition("=")[0] for s in synonyms}
        seen = {s.name for s in entry.synonyms.values() if s.source not in unseen}
        assert listed == seen, config_name
