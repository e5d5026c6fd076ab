"""The (topic, partition) pair that names one replicated log everywhere in minibroker."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    """One partition of a topic; its directory is ``<data-dir>/<topic>-<partition>``."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def dir_name(self) -> str:
        """Kafka's partition directory name."""
        return f"{self.topic}-{self.partition}"

    @classmethod
    def from_dir_name(cls, name: str) -> TopicPartition:
        """Parse ``<topic>-<partition>``; the topic itself may contain dashes.

        Raises ValueError for a name that is not a partition directory.
        """
        topic, sep, partition = name.rpartition("-")
        if not sep or not topic or not partition.isdigit():
            raise ValueError(f"not a partition directory name: {name!r}")
        return cls(topic, int(partition))


OFFSETS_TOPIC = "__consumer_offsets"
"""Kafka's internal topic of consumer groups' offsets and metadata."""
TRANSACTION_STATE_TOPIC = "__transaction_state"
"""Kafka's internal topic of the transaction coordinators' state."""
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
"""Kafka's internal topics: made by their coordinators on first use with their own
settings, never auto-created, written only by the coordinators (docs/consumer-groups.md)."""

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def topic_name_problem(name: str, kind: str = "topic") -> str | None:
    """Why ``name`` is not a legal Kafka topic name, or None if it is.

    Kafka's rules: ASCII letters, digits, ``.``, ``_`` and ``-``; at most 249 characters
    (the partition directory name must fit a file name); not ``.`` or ``..``. Consumer
    group names become ZooKeeper path segments and follow the same rules (``kind``
    names the thing in the message).
    """
    if not name:
        return f"{kind} name is empty"
    if name in (".", ".."):
        return f"{kind} name cannot be {name!r}"
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"{kind} name is {len(name)} characters long, the limit is {MAX_TOPIC_NAME_LENGTH}"
    illegal = sorted(set(name) - _LEGAL_TOPIC_CHARS)
    if illegal:
        return (
            f"{kind} name {name!r} contains {''.join(illegal)!r}: "
            "only ASCII letters, digits, '.', '_' and '-' are allowed"
        )
    return None
