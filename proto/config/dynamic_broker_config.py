"""Which broker configs change without a restart, and how their layers combine (Kafka's
``DynamicBrokerConfig``).

``minibroker configs --alter --entity-type brokers`` changes a broker's settings while it
runs, for one broker (``/config/brokers/<id>``) or as the cluster-wide default
(``/config/brokers/<default>``), as ``kafka-configs`` does since Kafka 1.1 (KIP-226). Every
dynamic broker config of Kafka 2.8 is accepted and typed
(:mod:`proto.config.broker_config_def`); a broker applies the log defaults it implements,
:data:`APPLIED_BROKER_CONFIGS`, the broker-level synonyms of the topic configs it applies::

    log.segment.bytes  log.retention.ms  log.retention.bytes  log.index.interval.bytes
    log.flush.interval.messages  message.max.bytes  min.insync.replicas
    unclean.leader.election.enable  compression.type  log.cleanup.policy
    log.cleaner.min.cleanable.ratio  log.cleaner.delete.retention.ms
    log.cleaner.min.compaction.lag.ms  log.cleaner.max.compaction.lag.ms

and keeps the others stored and described, not applied. Every other broker property
(``broker.id``, ``port``, ``zookeeper.connect``, ``log.dirs``, ``replica.*``,
``log.retention.hours``, ...) is read-only and refused with Kafka's message,
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

from collections.abc import Mapping
from pathlib import Path

from proto.config.broker_config import BROKER_PROPERTIES, BrokerConfig
from proto.config.broker_config_def import (
    APPLIED_BROKER_CONFIGS,
    DYNAMIC_BROKER_CONFIG_KEYS,
    STATIC_BROKER_CONFIG_KEYS,
    validate_broker_config,
)
from proto.config.topic_config_def import BROKER_LOG_CONFIGS

__all__ = [
    "APPLIED_BROKER_CONFIGS",
    "DYNAMIC_BROKER_CONFIGS",
    "READ_ONLY_BROKER_CONFIGS",
    "TOPIC_CONFIG_SYNONYMS",
    "check_dynamic_broker_config",
    "effective_broker_config",
    "not_applied",
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
    "compression.type": "compression.type",
    "cleanup.policy": "log.cleanup.policy",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
}
"""The topic configs this broker applies -> the broker config that is their default (the part
of Kafka's ``TopicConfigSynonyms`` minibroker implements; :mod:`proto.config.topic_config_def`
has all of it)."""

DYNAMIC_BROKER_CONFIGS = tuple(DYNAMIC_BROKER_CONFIG_KEYS)
"""The broker configs that can change at run time (Kafka 2.8's, see the module docstring)."""

READ_ONLY_BROKER_CONFIGS = frozenset(
    {*BROKER_PROPERTIES, *BROKER_LOG_CONFIGS, *STATIC_BROKER_CONFIG_KEYS}
) - set(DYNAMIC_BROKER_CONFIGS)
"""The broker configs known here that only a restart changes."""

_RETENTION_SYNONYMS = ("log.retention.ms", "log.retention.minutes", "log.retention.hours")

# Only used for checking values and for built-in defaults: no broker has these settings.
_TEMPLATE = BrokerConfig(broker_id=0, zookeeper_connect="localhost:2181", log_dir=Path())


def check_dynamic_broker_config(
    overrides: Mapping[str, str], *, per_broker: bool = True
) -> dict[str, str]:
    """``overrides`` with surrounding whitespace stripped, if every name is a dynamic broker
    config and every value valid (Kafka's ``DynamicBrokerConfig.validateConfigs``);
    ``per_broker``: for one broker's entity, else the cluster-wide default. ValueError with
    one line naming the problem; InvalidConfigError (a ValueError) for behaviour minibroker
    lacks (:func:`proto.config.broker_config_def.validate_broker_config`)."""
    cleaned = {name.strip(): value.strip() for name, value in overrides.items()}
    validate_broker_config(cleaned, read_only=READ_ONLY_BROKER_CONFIGS, per_broker=per_broker)
    applied = {n: v for n, v in cleaned.items() if n in APPLIED_BROKER_CONFIGS}
    effective_broker_config(_TEMPLATE, {}, applied)  # this broker's own bounds
    return cleaned


def not_applied(layer: Mapping[str, str]) -> list[str]:
    """The names in a dynamic broker config layer that are stored but not applied."""
    return sorted(n for n in layer if n not in APPLIED_BROKER_CONFIGS)


def effective_broker_config(
    static: BrokerConfig,
    cluster_default: Mapping[str, str],
    per_broker: Mapping[str, str],
) -> BrokerConfig:
    """The broker's config with the dynamic layers applied: ``per_broker``
    (``/config/brokers/<id>``) over ``cluster_default`` (``/config/brokers/<default>``) over
    ``static``. Names that are not applied are ignored (stored and described only). Raises
    ValueError, naming the property, for a value that is invalid."""
    merged = static.to_properties()
    for layer in (cluster_default, per_broker):
        for name, value in layer.items():
            if name not in APPLIED_BROKER_CONFIGS:
                continue
            if name in _RETENTION_SYNONYMS:
                for synonym in _RETENTION_SYNONYMS:
                    merged.pop(synonym, None)
            merged[name] = value
    return BrokerConfig.from_properties(merged)
