"""What DescribeConfigs answers for a topic or a broker (Kafka 2.8's ``ConfigHelper``), from
the layers a config can be set in: the topic's own override (``/config/topics/<t>``), this
broker's dynamic config (``/config/brokers/<id>``), the cluster-wide dynamic default
(``/config/brokers/<default>``), the broker's static properties, the built-in defaults.

Both front doors describe through here: the Kafka listener's DescribeConfigs, with every
layer, and ``minibroker configs --describe``, which reads ZooKeeper as Kafka 2.x's
``kafka-configs --zookeeper`` did and so sees every layer but the brokers' static
properties (they are on each broker's command line).

Kafka's rules, kept as they are: a config's source is that of its first synonym, DEFAULT_CONFIG
when it has none; a broker config's synonyms are its own name and its lower-precedence
spellings (``log.retention.ms`` <- ``log.retention.minutes`` <- ``log.retention.hours``), each
layer in turn, from the first entry of the config's own name on (Kafka drops the ones before,
``allSynonyms.dropWhile(s => s.name != name)``); built-in defaults of null are listed with a
null value. A topic config's synonyms are its override, then those of its broker-level name
(``LogConfig.TopicConfigSynonyms``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from proto.config.broker_config import BROKER_PROPERTIES, PROPERTY_KINDS, BrokerConfig
from proto.config.broker_config_def import (
    ALTERABLE_BROKER_CONFIGS,
    DYNAMIC_BROKER_CONFIG_KEYS,
    STATIC_BROKER_CONFIG_KEYS,
    broker_config_key,
)
from proto.config.config_def import ConfigType, ConfigValueError, parse, to_string
from proto.config.topic_config_def import (
    BROKER_LOG_CONFIGS,
    TOPIC_CONFIG_SYNONYMS,
    TOPIC_CONFIGS,
    broker_config_synonyms,
)

__all__ = [
    "LISTENER_CONFIGS",
    "BrokerLayers",
    "ConfigSource",
    "DescribedConfig",
    "Synonym",
    "builtin_broker_defaults",
    "describe_broker",
    "describe_topic",
    "listener_configs",
    "static_broker_properties",
]

LISTENER_CONFIGS = ("listeners", "advertised.listeners", "listener.security.protocol.map")
"""Kafka's listener configs, built from a broker's endpoints (read-only here)."""

_UNIT_MS = {
    "log.retention.minutes": 60_000,
    "log.retention.hours": 3_600_000,
    "log.roll.hours": 3_600_000,
    "log.roll.jitter.hours": 3_600_000,
}


class ConfigSource(enum.IntEnum):
    """``DescribeConfigsResponse.ConfigSource``, with Kafka's ids."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


@dataclass(frozen=True, slots=True)
class Synonym:
    """One layer that sets a config, under the name it has there."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class DescribedConfig:
    """One config entry of a DescribeConfigs answer."""

    name: str
    value: str | None
    """None for a sensitive config, or one that nothing sets (a null default)."""
    source: ConfigSource
    read_only: bool
    sensitive: bool
    type: ConfigType
    documentation: str | None
    synonyms: tuple[Synonym, ...]
    """All of them, highest precedence first (whether to send them is the caller's)."""


@dataclass(frozen=True, slots=True)
class BrokerLayers:
    """A broker's config layers, highest precedence first."""

    dynamic_broker: Mapping[str, str] = field(default_factory=dict)
    """``/config/brokers/<id>`` of the broker described."""
    dynamic_default: Mapping[str, str] = field(default_factory=dict)
    """``/config/brokers/<default>``."""
    static: Mapping[str, str] = field(default_factory=dict)
    """The properties the broker was started with (:func:`static_broker_properties`)."""
    defaults: Mapping[str, str] = field(default_factory=lambda: builtin_broker_defaults())
    """Kafka's ``staticDefaultConfigs``: the built-in defaults that are not null."""

    def _sources(self) -> tuple[tuple[Mapping[str, str], ConfigSource], ...]:
        return (
            (self.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (self.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self.static, ConfigSource.STATIC_BROKER_CONFIG),
            (self.defaults, ConfigSource.DEFAULT_CONFIG),
        )

    def synonyms(self, name: str, only: ConfigSource | None = None) -> list[Synonym]:
        """``ConfigHelper.configSynonyms`` of broker config ``name``."""
        names = broker_config_synonyms(name)
        found = [
            Synonym(n, layer[n], source)
            for layer, source in self._sources()
            if only is None or source is only
            for n in names
            if n in layer
        ]
        while found and found[0].name != name:
            found.pop(0)
        return found

    def effective(self, name: str) -> str | None:
        """The value a broker applies for broker config ``name``, in milliseconds for the
        retention and roll times: the dynamic layers over the static ones, and within a
        layer the highest-precedence spelling (as Kafka's ``KafkaConfig`` reads
        ``log.retention.ms``, else ``.minutes``, else ``.hours``)."""
        for layer, _ in self._sources():
            for n in broker_config_synonyms(name):
                value = layer.get(n)
                if value is not None:
                    unit = _UNIT_MS.get(n, 1)
                    return value if unit == 1 else _scaled(value, unit)
        return None


def _scaled(text: str, unit: int) -> str:
    try:
        number = int(text.strip())
    except ValueError:
        return text
    return str(number if number < 0 else number * unit)


_TEMPLATE = BrokerConfig(broker_id=0, zookeeper_connect="localhost:2181", log_dir=Path())
_REQUIRED = ("broker.id", "zookeeper.connect", "log.dirs")


def builtin_broker_defaults() -> dict[str, str]:
    """The built-in defaults of the broker configs: minibroker's properties, and Kafka's
    of the broker-level log configs; those whose default is null (``log.retention.ms``,
    ``log.roll.ms``, ...) are left out, as in Kafka's ``staticDefaultConfigs``."""
    defaults = {
        k: key.default
        for keys in (BROKER_LOG_CONFIGS, DYNAMIC_BROKER_CONFIG_KEYS, STATIC_BROKER_CONFIG_KEYS)
        for k, key in keys.items()
        if key.default is not None
    }
    for name, value in _TEMPLATE.to_properties().items():
        if name not in _REQUIRED:
            defaults[name] = value
    defaults["broker.id"] = "-1"
    return defaults


def static_broker_properties(
    config: BrokerConfig, listeners: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The properties ``config`` was given (Kafka's ``staticBrokerConfigs``): the required
    ones, the ``log.*`` ones, every other whose value is not the default; plus the listener
    configs built from the broker's bound endpoints."""
    defaults = BrokerConfig(
        broker_id=config.broker_id,
        zookeeper_connect=config.zookeeper_connect,
        log_dir=config.log_dir,
        zookeeper_session_timeout_ms=config.zookeeper_session_timeout_ms,
    ).to_properties()
    given = {
        name: value
        for name, value in config.to_properties().items()
        if name in _REQUIRED or name in config.log_properties or defaults.get(name) != value
    }
    return {**given, **(listeners or {})}


def listener_configs(
    host: str, grpc_port: int, kafka_port: int | None, tls: bool, kafka_protocol: str = "PLAINTEXT"
) -> dict[str, str]:
    """``listeners``, ``advertised.listeners`` and ``listener.security.protocol.map`` of a
    broker, under the listener names of its registration (``GRPC``, ``KAFKA``)."""
    endpoints = [f"GRPC://{host}:{grpc_port}"]
    protocols = [f"GRPC:{'SSL' if tls else 'PLAINTEXT'}"]
    if kafka_port is not None:
        endpoints.append(f"KAFKA://{host}:{kafka_port}")
        protocols.append(f"KAFKA:{kafka_protocol}")
    return {
        "listeners": ",".join(endpoints),
        "advertised.listeners": ",".join(endpoints),
        "listener.security.protocol.map": ",".join(protocols),
    }


def _normalized(kind: ConfigType, name: str, text: str | None) -> str | None:
    """``ConfigDef.convertToString`` of the parsed value, as Kafka shows it."""
    key = TOPIC_CONFIGS.get(name) or BROKER_LOG_CONFIGS.get(name)
    if text is None or key is None:
        return text
    try:
        return to_string(parse(key, text), kind)
    except ConfigValueError:
        return text


def describe_topic(
    overrides: Mapping[str, str], layers: BrokerLayers, keys: Iterable[str] | None = None
) -> list[DescribedConfig]:
    """Every config of a topic with ``overrides``, or those named in ``keys``."""
    wanted = set(keys) if keys else None
    described = []
    for name in sorted({*TOPIC_CONFIGS, *overrides}):
        if wanted is not None and name not in wanted:
            continue
        key = TOPIC_CONFIGS.get(name)
        kind = key.type if key is not None else ConfigType.UNKNOWN
        sensitive = kind is ConfigType.PASSWORD
        broker_name = TOPIC_CONFIG_SYNONYMS.get(name)
        synonyms = [] if broker_name is None else layers.synonyms(broker_name)
        if name in overrides:
            value = _normalized(kind, name, overrides[name])
            synonyms.insert(0, Synonym(name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
        elif broker_name is not None:
            value = _normalized(kind, name, layers.effective(broker_name))
        else:
            value = key.default if key is not None else None
        described.append(
            DescribedConfig(
                name,
                None if sensitive else value,
                synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                False,
                sensitive,
                kind,
                key.documentation if key is not None else None,
                tuple(synonyms),
            )
        )
    return described


def describe_broker(
    layers: BrokerLayers, *, per_broker: bool, keys: Iterable[str] | None = None
) -> list[DescribedConfig]:
    """A broker's configs (``per_broker``: every one, as the broker applies them) or the
    cluster-wide default's (only those set in ``/config/brokers/<default>``, with only
    that layer among the synonyms), as ``ConfigHelper.createBrokerConfigEntry``."""
    wanted = set(keys) if keys else None
    if per_broker:
        names: Sequence[str] = sorted(
            {
                *BROKER_LOG_CONFIGS,
                *DYNAMIC_BROKER_CONFIG_KEYS,
                *STATIC_BROKER_CONFIG_KEYS,
                *layers.defaults,
                *layers.static,
                *layers.dynamic_default,
                *layers.dynamic_broker,
            }
        )
    else:
        names = sorted(layers.dynamic_default)
    only = None if per_broker else ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    described = []
    for name in names:
        if wanted is not None and name not in wanted:
            continue
        kind = broker_config_type(name)
        sensitive = kind is ConfigType.PASSWORD
        synonyms = layers.synonyms(name, only)
        exact = [s for s in synonyms if s.name == name and s.value is not None]
        value = exact[0].value if exact else None
        described.append(
            DescribedConfig(
                name,
                None if sensitive else value,
                synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                name not in ALTERABLE_BROKER_CONFIGS,
                sensitive,
                kind,
                _broker_documentation(name),
                tuple(Synonym(s.name, None, s.source) if sensitive else s for s in synonyms),
            )
        )
    return described


def broker_config_type(name: str) -> ConfigType:
    """The ``config_type`` of broker config ``name``."""
    if "password" in name or name.endswith("sasl.jaas.config"):
        return ConfigType.PASSWORD
    if name in BROKER_LOG_CONFIGS:
        return BROKER_LOG_CONFIGS[name].type
    if name in LISTENER_CONFIGS:
        return ConfigType.STRING
    if name in PROPERTY_KINDS:
        kind, high = PROPERTY_KINDS[name]
        if kind == "bool":
            return ConfigType.BOOLEAN
        if kind == "int":
            return ConfigType.INT if high < 2**31 else ConfigType.LONG
        if kind == "float":
            return ConfigType.DOUBLE
        return ConfigType.STRING
    key = broker_config_key(name)
    if key is not None:
        return key.type
    if name in BROKER_PROPERTIES:  # the log.* defaults
        return ConfigType.LONG
    return ConfigType.UNKNOWN


def _broker_documentation(name: str) -> str | None:
    if name in BROKER_LOG_CONFIGS:
        return BROKER_LOG_CONFIGS[name].documentation
    if name == "listeners":
        return "The broker's listeners: its gRPC endpoint and its Kafka protocol endpoint."
    if name == "advertised.listeners":
        return "The listeners registered in ZooKeeper for clients and other brokers to use."
    if name == "listener.security.protocol.map":
        return "The security protocol of each listener."
    key = broker_config_key(name)
    return key.documentation if key is not None else None
