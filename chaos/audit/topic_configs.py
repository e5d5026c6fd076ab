"""Which topics are compacted, as a chaos run records it: the audit judges a compacted
partition by the rules of :mod:`chaos.audit.compaction` instead of asking every
acknowledged record to stay.

A broker's data dir does not say how its topics are configured (ZooKeeper does), so the
run that created them writes their configs to ``topics.json`` in the run directory
(:meth:`chaos.run_dir.RunDir.record_topics`), and ``minibroker audit --topic-config FILE``
reads it::

    {"version": 1, "topics": {"chaos-0": {"cleanup.policy": "compact",
                                          "delete.retention.ms": "10000"}}}

Values are Kafka's config strings (numbers are taken too). A topic whose ``cleanup.policy``
names ``compact`` (``compact`` or ``compact,delete``) is compacted; ``delete.retention.ms``
is how long its tombstones must stay clean before the cleaner may drop them, unknown (the
age check left out) when the file does not say. A topic the file leaves out is not
compacted. A file that is not this is bad input (exit status 2), named.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.audit.data_dirs import AuditInputError

__all__ = ["FORMAT_VERSION", "Compaction", "read_topic_configs", "topic_configs"]

FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class Compaction:
    """What the audit knows of a compacted topic's cleaning."""

    delete_retention_ms: int | None
    """``delete.retention.ms``: a tombstone stays at least this long after its segment was
    last written; None when the run did not record it (its age is then not judged)."""


def _policies(text: Any) -> tuple[str, ...]:
    if not isinstance(text, str):
        raise ValueError(f"cleanup.policy must be a string, got {text!r}")
    parts = tuple(p.strip().lower() for p in text.split(",") if p.strip())
    if not parts or any(p not in ("compact", "delete") for p in parts):
        raise ValueError(f"cleanup.policy is delete, compact or both, got {text!r}")
    return parts


def _milliseconds(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"delete.retention.ms must be a number of milliseconds, got {value!r}")
    try:
        ms = int(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"delete.retention.ms must be a number of milliseconds, got {value!r}"
        ) from None
    if ms < 0:
        raise ValueError(f"delete.retention.ms must not be negative, got {ms}")
    return ms


def topic_configs(data: Any) -> dict[str, Compaction]:
    """The compacted topics of a parsed ``topics.json``; ValueError saying what is wrong."""
    if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
        raise ValueError(f'expected an object with "version": {FORMAT_VERSION}')
    topics = data.get("topics")
    if not isinstance(topics, dict):
        raise ValueError('"topics" must be an object of topic name -> its configs')
    compacted: dict[str, Compaction] = {}
    for topic, config in topics.items():
        if not isinstance(config, dict):
            raise ValueError(f"topic {topic!r}: its configs must be an object")
        try:
            policies = _policies(config.get("cleanup.policy", "delete"))
            retention = config.get("delete.retention.ms")
            if "compact" in policies:
                compacted[topic] = Compaction(
                    None if retention is None else _milliseconds(retention)
                )
        except ValueError as e:
            raise ValueError(f"topic {topic!r}: {e}") from None
    return compacted


def read_topic_configs(path: Path) -> dict[str, Compaction]:
    """The compacted topics ``path`` names; AuditInputError naming the file otherwise."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise AuditInputError(f"cannot read topic configs {path}: {e.strerror}") from None
    except ValueError as e:
        raise AuditInputError(f"topic configs {path} are not JSON: {e}") from None
    try:
        return topic_configs(data)
    except ValueError as e:
        raise AuditInputError(f"topic configs {path}: {e}") from None
