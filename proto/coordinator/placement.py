"""Where a coordinator key lives: Kafka places a group id on a partition of
``__consumer_offsets`` (and a transactional id on one of ``__transaction_state``) as
``Utils.abs(key.hashCode()) % partitions``, Java's ``String.hashCode`` over the key's UTF-16
code units with 32-bit wrap-around, and ``Utils.abs`` mapping ``Integer.MIN_VALUE`` to 0.
Every broker and client computing it alike is what lets a client's FindCoordinator answer
and a broker's loaded partitions agree."""

from __future__ import annotations

__all__ = ["java_string_hash", "partition_for"]


def java_string_hash(key: str) -> int:
    """Java's ``String.hashCode`` of ``key``, as a signed 32-bit int."""
    h = 0
    units = key.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partitions: int) -> int:
    """The partition of ``key`` among ``partitions`` (Kafka's ``partitionFor``)."""
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
