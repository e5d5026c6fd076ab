"""Which partitions the consumer reads and from where (Kafka's ``SubscriptionState``), and
the ``auto_offset_reset`` policies that give a partition without a position its first one.
Pure bookkeeping: the offsets a reset needs are looked up by :mod:`client.fetcher`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from client.metadata import ClientError
from proto.topic_partition import TopicPartition

__all__ = [
    "AUTO_OFFSET_RESET_POLICIES",
    "EARLIEST",
    "LATEST",
    "NoOffsetForPartitionError",
    "SubscriptionState",
]

AUTO_OFFSET_RESET_POLICIES = ("earliest", "latest", "none")
EARLIEST = "earliest"
LATEST = "latest"


class NoOffsetForPartitionError(ClientError):
    """A partition has no position and ``auto_offset_reset`` is ``none`` (Kafka's
    ``NoOffsetForPartitionException``), or its position fell out of range under ``none``."""


class SubscriptionState:
    """Which partitions the consumer reads and from where (Kafka's ``SubscriptionState``).

    Each assigned partition has a position (the next offset to return) or none yet, in
    which case it waits for a reset: the strategy asked by seek_to_beginning/end, else the
    default policy. Pure bookkeeping, no I/O.
    """

    def __init__(self, default_reset: str = LATEST) -> None:
        if default_reset not in AUTO_OFFSET_RESET_POLICIES:
            raise ValueError(f"unknown offset reset policy {default_reset!r}")
        self.default_reset = default_reset
        self._positions: dict[TopicPartition, int | None] = {}
        self._resets: dict[TopicPartition, str] = {}
        """Strategies asked for explicitly (seek_to_beginning/end, out of range)."""
        self.position_epoch = 0
        """Bumped whenever a position may jump or go back: an assignment, a seek, a reset.
        Between two bumps, the offsets a partition returns only grow."""

    def assigned(self) -> list[TopicPartition]:
        """The assigned partitions, sorted."""
        return sorted(self._positions)

    def is_assigned(self, tp: TopicPartition) -> bool:
        return tp in self._positions

    def assign(
        self, tps: Iterable[TopicPartition], positions: Mapping[TopicPartition, int | None] = {}
    ) -> None:
        """Replace the assignment. A partition given a position in ``positions`` starts
        there; one that stays assigned keeps its position; any other waits for a reset."""
        self.position_epoch += 1
        wanted = set(tps)
        previous = self._positions
        self._positions = {}
        for tp in sorted(wanted):
            given = positions.get(tp)
            self._positions[tp] = given if given is not None else previous.get(tp)
        self._resets = {tp: s for tp, s in self._resets.items() if tp in wanted}
        for tp, position in self._positions.items():
            if position is not None:
                self._resets.pop(tp, None)

    def position(self, tp: TopicPartition) -> int | None:
        """The next offset to return, None while a reset is pending. Raises KeyError for
        a partition that is not assigned."""
        return self._positions[tp]

    def positions(self) -> dict[TopicPartition, int]:
        """The known positions of the assigned partitions."""
        return {tp: p for tp, p in self._positions.items() if p is not None}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Set the position (KeyError if not assigned, ValueError if negative)."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        if tp not in self._positions:
            raise KeyError(tp)
        self.position_epoch += 1
        self._positions[tp] = offset
        self._resets.pop(tp, None)

    def request_reset(self, tp: TopicPartition, strategy: str | None = None) -> None:
        """Forget the position; the next reset uses ``strategy`` (default: the policy)."""
        if tp not in self._positions:
            raise KeyError(tp)
        self.position_epoch += 1
        self._positions[tp] = None
        self._resets[tp] = strategy or self.default_reset

    def awaiting_committed(self) -> list[TopicPartition]:
        """Partitions without a position and without an explicit reset: a consumer with a
        group starts them at the committed offset, if there is one."""
        return [tp for tp, p in self._positions.items() if p is None and tp not in self._resets]

    def pending_resets(self) -> dict[TopicPartition, str]:
        """Partitions without a position -> the strategy that will give them one."""
        return {
            tp: self._resets.get(tp, self.default_reset)
            for tp, p in self._positions.items()
            if p is None
        }

    def complete_reset(self, tp: TopicPartition, strategy: str, offset: int) -> bool:
        """Apply a reset's answer if the partition still waits for that strategy (a seek
        or reassignment meanwhile wins); returns whether it was applied."""
        if self._positions.get(tp, 0) is not None:
            return False
        if self._resets.get(tp, self.default_reset) != strategy:
            return False
        self.seek(tp, offset)
        return True
