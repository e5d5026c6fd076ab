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
