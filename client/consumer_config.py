"""The consumer's settings (:class:`ConsumerConfig`, named as Kafka's consumer configs) and
what a poll returns (:class:`ConsumerRecord`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from client.group import group_name_problem
from client.metadata import ClientError
from client.subscription_state import AUTO_OFFSET_RESET_POLICIES, LATEST
from proto.topic_partition import TopicPartition

__all__ = ["ISOLATION_LEVELS", "ConsumerConfig", "ConsumerRecord"]

ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """The consumer's settings, named as Kafka's consumer configs (dots become underscores).

    Raises ClientError for a value Kafka would refuse.
    """

    group_id: str | None = None
    """The group whose offsets are committed and whose members share the partitions;
    None: no group (assign and seek only, nothing committed)."""
    client_id: str = "minibroker-consumer"
    auto_offset_reset: str = LATEST
    """Where to start without a committed offset or seek, and after OFFSET_OUT_OF_RANGE:
    ``earliest``, ``latest`` (the high watermark) or ``none`` (raise)."""
    fetch_max_wait_ms: int = 500
    """How long a leader may hold a fetch waiting for ``fetch_min_bytes``."""
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 50 * 1024 * 1024
    """Cap on one fetch response (the first batch is returned even when larger)."""
    max_partition_fetch_bytes: int = 1024 * 1024
    max_poll_records: int = 500
    """Most records one poll returns (the rest stay buffered for the next poll)."""
    enable_auto_commit: bool = True
    """Commit the positions every ``auto_commit_interval_ms`` (checked in poll), before each
    rebalance and on close. Without it only :meth:`client.consumer.Consumer.commit` commits."""
    auto_commit_interval_ms: int = 1000
    request_timeout_ms: int = 30_000
    """Deadline of one request to a broker, on top of a fetch's ``fetch_max_wait_ms``."""
    retry_backoff_ms: int = 100
    """Pause before retrying a failed request or refreshing the metadata again."""
    default_api_timeout_ms: int = 10_000
    """How long :meth:`client.consumer.Consumer.position` and friends may wait for the
    cluster, and how long a topic may stay unknown before poll gives up on it (Kafka's
    default is 60000)."""
    zookeeper_session_timeout_ms: int = 6000
    """The group member's ZooKeeper session: a consumer that dies is replaced this long after."""
    rebalance_max_retries: int = 4
    """Kafka's old-consumer setting: attempts after the first before a rebalance fails."""
    rebalance_backoff_ms: int = 2000
    """Kafka's old-consumer setting: how long one attempt waits for the partitions other
    members have not released yet, and the pause between attempts."""
    allow_auto_create_topics: bool = True
    """``allow.auto.create.topics``: a subscribed topic (or one :meth:`partitions_for`
    asks for) that does not exist is created by the brokers when their
    ``auto.create.topics.enable`` is on (Kafka's consumer default; librdkafka's is false)."""

    isolation_level: str = "read_uncommitted"
    """``isolation.level``: ``read_uncommitted`` (Kafka's default: every record below the
    high watermark) or ``read_committed`` (only committed transactions' records, up to
    the last stable offset; docs/transactions.md)."""

    def __post_init__(self) -> None:
        if self.isolation_level not in ISOLATION_LEVELS:
            raise ClientError(
                f"isolation_level must be one of {', '.join(ISOLATION_LEVELS)}, "
                f"got {self.isolation_level!r}"
            )
        if self.group_id is not None:
            problem = group_name_problem(self.group_id)
            if problem is not None:
                raise ClientError(f"illegal group name: {problem}")
        if self.auto_offset_reset not in AUTO_OFFSET_RESET_POLICIES:
            raise ClientError(
                f"auto_offset_reset must be one of {', '.join(AUTO_OFFSET_RESET_POLICIES)}, "
                f"got {self.auto_offset_reset!r}"
            )
        for name in (
            "fetch_min_bytes",
            "fetch_max_bytes",
            "max_partition_fetch_bytes",
            "max_poll_records",
            "auto_commit_interval_ms",
            "request_timeout_ms",
            "default_api_timeout_ms",
            "zookeeper_session_timeout_ms",
        ):
            if getattr(self, name) <= 0:
                raise ClientError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("fetch_max_wait_ms", "retry_backoff_ms", "rebalance_max_retries"):
            if getattr(self, name) < 0:
                raise ClientError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.rebalance_backoff_ms <= 0:
            raise ClientError(
                f"rebalance_backoff_ms must be positive, got {self.rebalance_backoff_ms}"
            )


class ConsumerRecord(NamedTuple):
    """One record as poll returns it. Immutable, as Kafka's; a NamedTuple rather than a
    frozen dataclass because a consumer builds one per record, and a frozen dataclass
    costs six times as much to build (a third of ``perf consume``'s time, `bench/RESULTS.md`)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    """CreateTime in ms (LogAppendTime for topics that use it); -1 when unset."""
    headers: tuple[tuple[str, bytes | None], ...] = ()

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)
