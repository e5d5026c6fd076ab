"""Every topic config of Kafka 2.8 (``LogConfig.configDef``), its broker-level synonyms
(``LogConfig.TopicConfigSynonyms`` and ``DynamicBrokerConfig.brokerConfigSynonyms``), and
the check a topic's configs pass before they are written (``LogConfig.validate``).

Every name of Kafka 2.8 is accepted, stored in ``/config/topics/<t>`` and described, also
those minibroker does not apply (``segment.ms``, ``flush.ms``, ``preallocate``, ...: they
change nothing a client can see, or only timing). A value that asks for behaviour
minibroker lacks is refused INVALID_CONFIG with what is missing, rather than accepted and
silently not done: ``message.timestamp.type=LogAppendTime``,
and a ``message.format.version`` older than record format v2 (0.11.0). A name Kafka does not
know is refused as Kafka refuses it, ``Unknown topic config name: <name>``, with the closest
known name when there is one.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from proto.config.broker_config import TOPIC_PROPERTIES, BrokerConfig
from proto.config.config_def import (
    BOOL,
    DOUBLE,
    INT,
    LIST,
    LONG,
    LONG_MAX,
    STR,
    ConfigKey,
    ConfigType,
    ConfigValue,
    ConfigValueError,
    at_least,
    between,
    in_list,
    one_of,
    parse,
)
from proto.errors import MinibrokerError

__all__ = [
    "BROKER_LOG_CONFIGS",
    "TOPIC_CONFIGS",
    "TOPIC_CONFIG_SYNONYMS",
    "InvalidConfigError",
    "broker_config_synonyms",
    "check_topic_config",
    "unsupported_reason",
    "validate_topic_config",
]

_WEEK_MS = str(7 * 24 * 3600 * 1000)


class InvalidConfigError(MinibrokerError, ValueError):
    """Kafka's ``InvalidConfigurationException`` (INVALID_CONFIG): an unknown name, values
    that contradict each other, or behaviour this broker does not have."""


# Kafka 2.8's ApiVersion.allVersions; a short form ("2.8", "0.10.0") names the newest of its
# release. Record format v2 starts at 0.11.0.
_API_VERSIONS = [
    "0.8.0",
    "0.8.1",
    "0.8.2",
    "0.9.0",
    "0.10.0-IV0",
    "0.10.0-IV1",
    "0.10.1-IV0",
    "0.10.1-IV1",
    "0.10.1-IV2",
    "0.10.2-IV0",
    "0.11.0-IV0",
    "0.11.0-IV1",
    "0.11.0-IV2",
    "1.0-IV0",
    "1.1-IV0",
    "2.0-IV0",
    "2.0-IV1",
    "2.1-IV0",
    "2.1-IV1",
    "2.1-IV2",
    "2.2-IV0",
    "2.2-IV1",
    "2.3-IV0",
    "2.3-IV1",
    "2.4-IV0",
    "2.4-IV1",
    "2.5-IV0",
    "2.6-IV0",
    "2.7-IV0",
    "2.7-IV1",
    "2.7-IV2",
    "2.8-IV0",
    "2.8-IV1",
]
_SHORT_VERSIONS = {v.partition("-")[0] for v in _API_VERSIONS}


def _api_version(text: str) -> str | None:
    """``ApiVersion.apply``: the canonical version ``text`` names, or None."""
    parts = text.split(".")
    short = ".".join(parts[:3] if parts[0] == "0" else parts[:2])
    if short in _API_VERSIONS or short in _SHORT_VERSIONS:
        return short
    return None


def _check_api_version(name: str, value: ConfigValue) -> None:
    if not isinstance(value, str) or _api_version(value) is None:
        raise ConfigValueError(name, value, f"Version `{value}` is not a valid version")


def _check_throttled_replicas(name: str, value: ConfigValue) -> None:
    """``ThrottledReplicaListValidator``: ``*`` or ``partition:broker`` pairs."""
    assert isinstance(value, list)
    if value == ["*"] or all(
        len(pair := item.strip().split(":")) == 2 and all(p.strip().isdigit() for p in pair)
        for item in value
    ):
        return
    raise ConfigValueError(
        name,
        ",".join(value),
        f"{name} must be the literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
    )


def _key(
    name: str, kind: ConfigType, default: str, doc: str, validator: object = None
) -> ConfigKey:
    return ConfigKey(name, kind, default, doc, validator)  # type: ignore[arg-type]


_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

TOPIC_CONFIGS: Mapping[str, ConfigKey] = {
    k.name: k
    for k in (
        _key("cleanup.policy", LIST, "delete",
             'A string that is either "delete" or "compact" or both. This string designates '
             "the retention policy to use on old log segments.",
             in_list(("compact", "delete"))),
        _key("compression.type", STR, "producer",
             "Specify the final compression type for a given topic. 'uncompressed' is "
             "equivalent to no compression; 'producer' means retain the original compression "
             "codec set by the producer.",
             one_of(*_COMPRESSION_TYPES)),
        _key("delete.retention.ms", LONG, "86400000",
             "The amount of time to retain delete tombstone markers for log compacted topics.",
             at_least(0)),
        _key("file.delete.delay.ms", LONG, "60000",
             "The time to wait before deleting a file from the filesystem", at_least(0)),
        _key("flush.messages", LONG, LONG_MAX,
             "This setting allows specifying an interval at which we will force an fsync of "
             "data written to the log.", at_least(0)),
        _key("flush.ms", LONG, LONG_MAX,
             "This setting allows specifying a time interval at which we will force an fsync "
             "of data written to the log.", at_least(0)),
        _key("follower.replication.throttled.replicas", LIST, "",
             "A list of replicas for which log replication should be throttled on the "
             "follower side.", _check_throttled_replicas),
        _key("index.interval.bytes", INT, "4096",
             "This setting controls how frequently Kafka adds an index entry to its offset "
             "index.", at_least(0)),
        _key("leader.replication.throttled.replicas", LIST, "",
             "A list of replicas for which log replication should be throttled on the leader "
             "side.", _check_throttled_replicas),
        _key("max.compaction.lag.ms", LONG, LONG_MAX,
             "The maximum time a message will remain ineligible for compaction in the log.",
             at_least(1)),
        _key("max.message.bytes", INT, "1048588",
             "The largest record batch size allowed by Kafka (after compression if "
             "compression is enabled).", at_least(0)),
        _key("message.downconversion.enable", BOOL, "true",
             "This configuration controls whether down-conversion of message formats is "
             "enabled to satisfy consume requests."),
        _key("message.format.version", STR, "2.8-IV1",
             "Specify the message format version the broker will use to append messages to "
             "the logs. The value should be a valid ApiVersion.", _check_api_version),
        _key("message.timestamp.difference.max.ms", LONG, LONG_MAX,
             "The maximum difference allowed between the timestamp when a broker receives a "
             "message and the timestamp specified in the message.", at_least(0)),
        _key("message.timestamp.type", STR, "CreateTime",
             "Define whether the timestamp in the message is message create time or log "
             "append time.", one_of("CreateTime", "LogAppendTime")),
        _key("min.cleanable.dirty.ratio", DOUBLE, "0.5",
             "This configuration controls how frequently the log compactor will attempt to "
             "clean the log.", between(0, 1)),
        _key("min.compaction.lag.ms", LONG, "0",
             "The minimum time a message will remain uncompacted in the log.", at_least(0)),
        _key("min.insync.replicas", INT, "1",
             'When a producer sets acks to "all", the minimum number of replicas that must '
             "acknowledge a write for the write to be considered successful.", at_least(1)),
        _key("preallocate", BOOL, "false",
             "True if we should preallocate the file on disk when creating a new log "
             "segment."),
        _key("retention.bytes", LONG, "-1",
             "The maximum size a partition can grow to before we will discard old log "
             "segments to free up space."),
        _key("retention.ms", LONG, _WEEK_MS,
             "The maximum time we will retain a log before we will discard old log segments "
             "to free up space. If set to -1, no time limit is applied.", at_least(-1)),
        _key("segment.bytes", INT, str(1024**3),
             "This configuration controls the segment file size for the log.", at_least(14)),
        _key("segment.index.bytes", INT, "10485760",
             "This configuration controls the size of the index that maps offsets to file "
             "positions.", at_least(0)),
        _key("segment.jitter.ms", LONG, "0",
             "The maximum random jitter subtracted from the scheduled segment roll time.",
             at_least(0)),
        _key("segment.ms", LONG, _WEEK_MS,
             "The period of time after which Kafka will force the log to roll even if the "
             "segment file isn't full.", at_least(1)),
        _key("unclean.leader.election.enable", BOOL, "false",
             "Indicates whether to enable replicas not in the ISR set to be elected as leader "
             "as a last resort, even though doing so may result in data loss."),
    )
}  # fmt: skip
"""Kafka 2.8's topic configs by name, with their types, defaults and checks."""

TOPIC_CONFIG_SYNONYMS: Mapping[str, str] = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "max.message.bytes": "message.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "cleanup.policy": "log.cleanup.policy",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "min.insync.replicas": "min.insync.replicas",
    "compression.type": "compression.type",
    "preallocate": "log.preallocate",
    "message.format.version": "log.message.format.version",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "message.downconversion.enable": "log.message.downconversion.enable",
}
"""Topic config -> the broker config that is its default (``LogConfig.TopicConfigSynonyms``;
the two replication throttles have none)."""

_EXTRA_SYNONYMS: Mapping[str, tuple[str, ...]] = {
    "log.roll.ms": ("log.roll.ms", "log.roll.hours"),
    "log.roll.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "log.flush.interval.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    "log.retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
}


def broker_config_synonyms(name: str) -> tuple[str, ...]:
    """``DynamicBrokerConfig.brokerConfigSynonyms``: the broker configs that set ``name``,
    highest precedence first (``log.retention.ms`` beats ``.minutes`` beats ``.hours``)."""
    for names in _EXTRA_SYNONYMS.values():
        if name in names:
            return names
    return (name,)


def _broker_key(topic_name: str, broker_name: str, default: str | None) -> ConfigKey:
    topic_key = TOPIC_CONFIGS[topic_name]
    return ConfigKey(
        broker_name,
        topic_key.type,
        default,
        f"The default of topic config {topic_name}: {topic_key.documentation}",
        topic_key.validator,
    )


BROKER_LOG_CONFIGS: Mapping[str, ConfigKey] = {
    **{b: _broker_key(t, b, TOPIC_CONFIGS[t].default) for t, b in TOPIC_CONFIG_SYNONYMS.items()},
    # Kafka's defaults where the broker name has none and a lower synonym holds it.
    "log.roll.ms": _broker_key("segment.ms", "log.roll.ms", None),
    "log.roll.hours": ConfigKey(
        "log.roll.hours", INT, "168", "The maximum time before a new log segment is rolled out "
        "(in hours), secondary to log.roll.ms", at_least(1)
    ),
    "log.roll.jitter.ms": _broker_key("segment.jitter.ms", "log.roll.jitter.ms", None),
    "log.roll.jitter.hours": ConfigKey(
        "log.roll.jitter.hours", INT, "0", "The maximum jitter to subtract from logRollTimeMillis "
        "(in hours), secondary to log.roll.jitter.ms", at_least(0)
    ),
    "log.flush.interval.ms": _broker_key("flush.ms", "log.flush.interval.ms", None),
    "log.flush.scheduler.interval.ms": ConfigKey(
        "log.flush.scheduler.interval.ms", LONG, LONG_MAX, "The frequency in ms that the log "
        "flusher checks whether any log needs to be flushed to disk"
    ),
    "log.retention.ms": _broker_key("retention.ms", "log.retention.ms", None),
    "log.retention.minutes": ConfigKey(
        "log.retention.minutes", INT, None, "The number of minutes to keep a log file before "
        "deleting it (in minutes), secondary to log.retention.ms property"
    ),
    "log.retention.hours": ConfigKey(
        "log.retention.hours", INT, "168", "The number of hours to keep a log file before "
        "deleting it (in hours), tertiary to log.retention.ms property"
    ),
}  # fmt: skip
"""The broker-level log configs, the defaults of the topic configs, with Kafka's defaults."""


def validate_topic_config(configs: Mapping[str, str]) -> dict[str, ConfigValue]:
    """``LogConfig.validate``: the parsed values of ``configs``, a topic's overrides.

    Raises InvalidConfigError (INVALID_CONFIG) for a name Kafka does not know, for
    ``min.compaction.lag.ms`` above ``max.compaction.lag.ms``, or for a value asking for
    behaviour this broker lacks (see the module docstring); ConfigValueError for a value
    that does not parse or is out of range.
    """
    for name in configs:
        if name not in TOPIC_CONFIGS:
            close = difflib.get_close_matches(name, TOPIC_CONFIGS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidConfigError(f"Unknown topic config name: {name}{hint}")
    parsed = {name: parse(TOPIC_CONFIGS[name], text) for name, text in configs.items()}
    # validateValues runs over the overrides and the defaults together.
    lags = {
        n: parsed.get(n, parse(TOPIC_CONFIGS[n], TOPIC_CONFIGS[n].default or ""))
        for n in ("min.compaction.lag.ms", "max.compaction.lag.ms")
    }
    if lags["min.compaction.lag.ms"] > lags["max.compaction.lag.ms"]:  # type: ignore[operator]
        raise InvalidConfigError(
            f"conflict topic config setting min.compaction.lag.ms "
            f"({lags['min.compaction.lag.ms']}) > max.compaction.lag.ms "
            f"({lags['max.compaction.lag.ms']})"
        )
    missing = unsupported_reason(parsed)
    if missing is not None:
        raise InvalidConfigError(missing)
    return parsed


def unsupported_reason(parsed: Mapping[str, ConfigValue]) -> str | None:
    """What behaviour the parsed ``parsed`` ask for that this broker lacks, or None."""
    if parsed.get("message.timestamp.type") == "LogAppendTime":
        return (
            "minibroker does not stamp LogAppendTime yet: message.timestamp.type must be CreateTime"
        )
    version = parsed.get("message.format.version")
    if isinstance(version, str) and _API_VERSIONS.index(
        next(v for v in _API_VERSIONS if v.startswith(_api_version(version) or ""))
    ) < _API_VERSIONS.index("0.11.0-IV0"):
        return (
            f"minibroker writes only record format v2: message.format.version={version} "
            "must be 0.11.0 or later"
        )
    return None


def check_topic_config(configs: Mapping[str, str], broker: BrokerConfig) -> dict[str, str]:
    """:func:`validate_topic_config`, then the bounds this broker's own log code has
    (``flush.messages`` at least 1, ...): the overrides to store, stripped as Kafka stores
    them. Raises InvalidConfigError or ConfigValueError."""
    validate_topic_config(configs)
    applied = {k: v for k, v in configs.items() if k in TOPIC_PROPERTIES}
    try:
        broker.topic_config(applied, strict=True)
    except ValueError as err:
        raise InvalidConfigError(str(err)) from None
    return {k.strip(): v.strip() for k, v in configs.items()}
