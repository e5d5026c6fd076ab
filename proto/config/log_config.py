"""A log's settings under Kafka's property names (Kafka's ``LogConfig``).

Shared by the broker (its defaults and each topic's overrides), the admin client and the
tools that validate a topic config before writing it, so it sits with the contracts.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = ["LogConfig", "check_range"]

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1

_INTEGER = re.compile(r"-?[0-9]+")

COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
"""``compression.type``'s values: keep the producer's codec, or store every batch in one."""


def _one_of(*allowed: str) -> Callable[[str, str], str]:
    def parse(name: str, text: str) -> str:
        value = text.strip().lower()
        if value not in allowed:
            raise ValueError(
                f"invalid value for {name}: {text!r} (must be one of {', '.join(allowed)})"
            )
        return value

    return parse


CLEANUP_POLICIES = ("delete", "compact")


def _policies(name: str, text: str) -> tuple[str, ...]:
    """``cleanup.policy``: ``delete``, ``compact`` or both, comma-separated."""
    parts = tuple(dict.fromkeys(p.strip().lower() for p in text.split(",") if p.strip()))
    if not parts or any(p not in CLEANUP_POLICIES for p in parts):
        raise ValueError(
            f"invalid value for {name}: {text!r} (delete, compact, or both comma-separated)"
        )
    return parts


def _ratio(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"invalid value for {name}: {text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"invalid value for {name}: {value} (must be in [0, 1])")
    return value


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The per-log settings, under Kafka's names (topic-level name / broker-level name).

    Validation errors are ValueErrors that name the Kafka property.
    """

    segment_bytes: int = 1024**3
    """``segment.bytes`` / ``log.segment.bytes``: roll a new segment before this size."""
    index_interval_bytes: int = 4096
    """``index.interval.bytes`` / ``log.index.interval.bytes``: bytes between index entries."""
    retention_ms: int = 7 * 24 * 3600 * 1000
    """``retention.ms`` / ``log.retention.ms`` (also ``.minutes``, ``.hours``); -1: no limit."""
    retention_bytes: int = -1
    """``retention.bytes`` / ``log.retention.bytes``; -1: no limit."""
    flush_interval_messages: int | None = None
    """``flush.messages`` / ``log.flush.interval.messages``: fsync after this many appended
    records; None (Kafka's default, Long.MAX_VALUE) leaves flushing to the OS."""
    max_message_bytes: int = 1048588
    """``max.message.bytes`` / ``message.max.bytes``: largest batch accepted."""
    min_compaction_lag_ms: int = 0
    """``min.compaction.lag.ms`` / ``log.cleaner.min.compaction.lag.ms``: a record stays
    uncompacted at least this long."""
    delete_retention_ms: int = 24 * 3600 * 1000
    """``delete.retention.ms`` / ``log.cleaner.delete.retention.ms``: how long a tombstone
    outlives the cleaning that reached it."""
    max_compaction_lag_ms: int = _INT64_MAX
    """``max.compaction.lag.ms`` / ``log.cleaner.max.compaction.lag.ms``: a log whose
    oldest dirty record is older than this is cleaned whatever its dirty ratio."""
    cleanup_policy: tuple[str, ...] = ("delete",)
    """``cleanup.policy`` / ``log.cleanup.policy``: ``delete`` (retention deletes old
    segments), ``compact`` (the log cleaner keeps the latest record of each key), or both."""
    min_cleanable_dirty_ratio: float = 0.5
    """``min.cleanable.dirty.ratio`` / ``log.cleaner.min.cleanable.ratio``: the share of a
    log's cleanable bytes that must be dirty before the cleaner takes it."""
    compression_type: str = "producer"
    """``compression.type`` (the broker's default has the same name): ``producer`` stores each
    batch with the producer's codec, as sent; a codec name (or ``uncompressed``) makes the
    leader store every batch in that codec, recompressing the others (Kafka's
    ``LogValidator``; docs/storage.md, "Compressed records")."""

    # Kafka property -> (field, unit multiplier). Broker-level names come first so that a
    # topic-level name in the same mapping overrides them; ms beats minutes beats hours.
    PROPERTIES: ClassVar[dict[str, tuple[str, int]]] = {
        "log.segment.bytes": ("segment_bytes", 1),
        "log.index.interval.bytes": ("index_interval_bytes", 1),
        "log.retention.hours": ("retention_ms", 3600 * 1000),
        "log.retention.minutes": ("retention_ms", 60 * 1000),
        "log.retention.ms": ("retention_ms", 1),
        "log.retention.bytes": ("retention_bytes", 1),
        "log.flush.interval.messages": ("flush_interval_messages", 1),
        "message.max.bytes": ("max_message_bytes", 1),
        "log.cleaner.min.compaction.lag.ms": ("min_compaction_lag_ms", 1),
        "log.cleaner.delete.retention.ms": ("delete_retention_ms", 1),
        "log.cleaner.max.compaction.lag.ms": ("max_compaction_lag_ms", 1),
        "segment.bytes": ("segment_bytes", 1),
        "index.interval.bytes": ("index_interval_bytes", 1),
        "retention.ms": ("retention_ms", 1),
        "retention.bytes": ("retention_bytes", 1),
        "flush.messages": ("flush_interval_messages", 1),
        "max.message.bytes": ("max_message_bytes", 1),
        "min.compaction.lag.ms": ("min_compaction_lag_ms", 1),
        "delete.retention.ms": ("delete_retention_ms", 1),
        "max.compaction.lag.ms": ("max_compaction_lag_ms", 1),
    }

    # Kafka property -> (field, parser(name, text)) for the values that are not integers; the
    # broker-level names first, as above.
    TEXT_PROPERTIES: ClassVar[dict[str, tuple[str, Callable[[str, str], Any]]]] = {
        "log.cleanup.policy": ("cleanup_policy", _policies),
        "log.cleaner.min.cleanable.ratio": ("min_cleanable_dirty_ratio", _ratio),
        "compression.type": ("compression_type", _one_of(*COMPRESSION_TYPES)),
        "cleanup.policy": ("cleanup_policy", _policies),
        "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _ratio),
    }

    # Field -> (Kafka topic-level name, lowest, highest value).
    BOUNDS: ClassVar[dict[str, tuple[str, int, int]]] = {
        "segment_bytes": ("segment.bytes", 14, _INT32_MAX),
        "index_interval_bytes": ("index.interval.bytes", 0, _INT32_MAX),
        "retention_ms": ("retention.ms", -1, _INT64_MAX),
        "retention_bytes": ("retention.bytes", -1, _INT64_MAX),
        "flush_interval_messages": ("flush.messages", 1, _INT64_MAX),
        "max_message_bytes": ("max.message.bytes", 0, _INT32_MAX),
        "min_compaction_lag_ms": ("min.compaction.lag.ms", 0, _INT64_MAX),
        "delete_retention_ms": ("delete.retention.ms", 0, _INT64_MAX),
        "max_compaction_lag_ms": ("max.compaction.lag.ms", 1, _INT64_MAX),
    }

    @property
    def compact(self) -> bool:
        """Whether the log cleaner compacts this log."""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """Whether retention deletes this log's old segments."""
        return "delete" in self.cleanup_policy

    def __post_init__(self) -> None:
        for field, (name, low, high) in self.BOUNDS.items():
            value = getattr(self, field)
            if value is not None:
                check_range(name, value, low, high)

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, str], defaults: LogConfig | None = None
    ) -> LogConfig:
        """A config from Kafka properties over ``defaults`` (the built-in defaults if None).

        Properties this class does not know are ignored (a topic config also holds
        ``min.insync.replicas`` and the like). Raises ValueError naming the property for a
        value that is not an integer or out of range, or not one of a text property's
        values.
        """
        values: dict[str, Any] = {}
        for name, (field, unit) in cls.PROPERTIES.items():
            text = properties.get(name)
            if text is None:
                continue
            text = text.strip()
            if not _INTEGER.fullmatch(text):
                raise ValueError(f"invalid value for {name}: {text!r} is not an integer")
            value = int(text)
            if field == "flush_interval_messages" and value >= _INT64_MAX:
                values[field] = None  # Kafka's default Long.MAX_VALUE: never
                continue
            _, low, high = cls.BOUNDS[field]
            if unit != 1 and value < 0:
                check_range(name, value, low, high)  # -1 hours: no limit, like -1 ms
            else:
                check_range(name, value, -(-low // unit), high // unit)
                value *= unit
            values[field] = value
        for name, (field, parse) in cls.TEXT_PROPERTIES.items():
            text = properties.get(name)
            if text is not None:
                values[field] = parse(name, text)
        return dataclasses.replace(cls() if defaults is None else defaults, **values)


def check_range(name: str, value: int, low: int, high: int) -> None:
    """Raise ValueError naming Kafka property ``name`` unless low <= value <= high."""
    if not low <= value <= high:
        raise ValueError(f"invalid value for {name}: {value} (must be in [{low}, {high}])")
