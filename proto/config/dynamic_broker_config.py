"""Which broker configs change without a restart, and how their layers combine (Kafka's
``DynamicBrokerConfig``).

``minibroker configs --alter --entity-type brokers`` changes a broker's settings while it
runs, for one broker (``/config/brokers/<id>``) or as the cluster-wide default
(``/config/brokers/<default>``), as ``kafka-configs`` does since Kafka 1.1 (KIP-226). Only
settings a running broker can re-apply are dynamic. Kafka's list of dynamic log settings
(``DynamicLogConfig.ReconfigurableConfigs``) is the set of broker-level synonyms of the topic
configs (``LogConfig.TopicConfigSynonyms``); those that exist here are
:data:`TOPIC_CONFIG_SYNONYMS`' values::

    log.segment.bytes  log.retention.ms  log.retention.bytes  log.index.interval.bytes
    log.flush.interval.messages  message.max.bytes  min.insync.replicas
    unclean.leader.election.enable

Every other broker property (``broker.id``, ``port``, ``zookeeper.connect``, ``log.dirs``,
``replica.*``, ``log.retention.hours``, ...) is read-only and refused with Kafka's message,
``Cannot update these configs dynamically: ...``.

Precedence, as Kafka's ``DynamicBrokerConfig.updateCurrentConfig`` and ``LogConfig.fromProps``
apply it: a topic's own override (``/config/topics/<t>``) > the broker's dynamic config >
the cluster-wide dynamic default > the static properties > the built-in default. A dynamic
``log.retention.ms`` also hides a static ``log.retention.hours`` or ``.minutes`` (Kafka's
``brokerConfigSynonyms``), which would otherwise be read in its place.

Pure functions, no I/O: :mod:`broker.dynamic_config` (the broker's change listener), the Kafka
listener's AlterConfigs and the ``configs`` command (:mod:`client.cli.configs`) share them;
:mod:`proto.config.describe_configs` describes the layers.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path

from proto.config.broker_config import BROKER_PROPERTIES, BrokerConfig

__all__ = [
    "DYNAMIC_BROKER_CONFIGS",
    "TOPIC_CONFIG_SYNONYMS",
    "check_dynamic_broker_config",
    "effective_broker_config",
]

TOPIC_CONFIG_SYNONYMS: Mapping[str, str] = {
    "segment.bytes": "log.segment.bytes",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "flush.messages": "log.flush.interval.messages",
    "max.message.bytes": "message.max.bytes",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}
"""The topic configs this broker applies -> the broker config that is their default (the part
of Kafka's ``TopicConfigSynonyms`` minibroker implements; :mod:`proto.config.topic_config_def`
has all of it)."""

DYNAMIC_BROKER_CONFIGS = tuple(TOPIC_CONFIG_SYNONYMS.values())
"""The broker configs that can change at run time (see the module docstring)."""

_RETENTION_SYNONYMS = ("log.retention.ms", "log.retention.minutes", "log.retention.hours")

# Only used for checking values and for built-in defaults: no broker has these settings.
_TEMPLATE = BrokerConfig(broker_id=0, zookeeper_connect="localhost:2181", log_dir=Path())


def check_dynamic_broker_config(overrides: Mapping[str, str]) -> dict[str, str]:
    """``overrides`` with surrounding whitespace stripped, if every name is a dynamic broker
    config and every value valid; else ValueError with one line naming the problem (Kafka's
    ``DynamicBrokerConfig.validateConfigs``)."""
    cleaned = {name.strip(): value.strip() for name, value in overrides.items()}
    read_only = sorted(
        n for n in cleaned if n in BROKER_PROPERTIES and n not in DYNAMIC_BROKER_CONFIGS
    )
    if read_only:
        raise ValueError(f"Cannot update these configs dynamically: {', '.join(read_only)}")
    unknown = sorted(n for n in cleaned if n not in DYNAMIC_BROKER_CONFIGS)
    if unknown:
        close = difflib.get_close_matches(unknown[0], DYNAMIC_BROKER_CONFIGS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown broker config {unknown[0]!r}{hint}")
    effective_broker_config(_TEMPLATE, {}, cleaned)  # raises for a bad value
    return cleaned


def effective_broker_config(
    static: BrokerConfig,
    cluster_default: Mapping[str, str],
    per_broker: Mapping[str, str],
) -> BrokerConfig:
    """The broker's config with the dynamic layers applied: ``per_broker``
    (``/config/brokers/<id>``) over ``cluster_default`` (``/config/brokers/<default>``) over
    ``static``. Names that are not dynamic are ignored (nothing writes them but a hand
    edit). Raises ValueError, naming the property, for a value that is invalid."""
    merged = static.to_properties()
    for layer in (cluster_default, per_broker):
        for name, value in layer.items():
            if name not in DYNAMIC_BROKER_CONFIGS:
                continue
            if name in _RETENTION_SYNONYMS:
                for synonym in _RETENTION_SYNONYMS:
                    merged.pop(synonym, None)
            merged[name] = value
    return BrokerConfig.from_properties(merged)
