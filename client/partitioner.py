"""Which partition a record goes to (Kafka's ``DefaultPartitioner``, docs/client.md).

Three rules, in order:

1. an explicit partition wins;
2. a keyed record goes to ``toPositive(murmur2(key)) % partitions``, exactly as Kafka's
   Java producer computes it, so a key lands on the same partition whichever client wrote
   it (and keeps its order there);
3. a record without a key goes to the topic's *sticky* partition (KIP-480, with KIP-794's
   rule for when to move on): all keyless records of a topic go to one partition until
   ``batch.size`` bytes of them were closed into batches there (a full batch, or several
   the sender took before they filled), then to a random partition with a leader other
   than the previous one when there is a choice. Batches fill up instead of one-record
   batches spread over every partition, which is what made KIP-480 halve latency at low
   throughput; counting bytes rather than batches (KIP-794) keeps that true when the
   sender takes batches before they fill (``linger_ms`` 0): moving on at every batch sent
   had spread a slow producer's records one per request over every partition.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence

from proto.topic_partition import TopicPartition

__all__ = ["KEY_HASH_CACHE_SIZE", "Partitioner", "murmur2", "partition_for_key", "to_positive"]

KEY_HASH_CACHE_SIZE = 65_536
"""Keys whose murmur2 a :class:`Partitioner` remembers (then it forgets them all and starts
again): murmur2 in Python costs more than the rest of a keyed ``send``, and an application's
keys (customers, devices, orders in flight) mostly repeat within that many."""

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK = 0xFFFFFFFF


_WORDS: dict[int, struct.Struct] = {}
"""Word count -> the struct that unpacks that many little-endian 32-bit words."""


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: 32-bit MurmurHash2 with seed 0x9747b28c, returned as the
    signed int Java sees (e.g. ``murmur2(b"21") == -973932308``)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    words = length >> 2
    unpack = _WORDS.get(words)
    if unpack is None:
        unpack = _WORDS[words] = struct.Struct(f"<{words}I")
    for k in unpack.unpack_from(data):
        k = (k * _M) & _MASK
        k ^= k >> _R
        h = ((h * _M) & _MASK) ^ ((k * _M) & _MASK)
    tail = length & ~3
    rest = length & 3
    # Java's switch falls through: 3 -> 2 -> 1, and only then multiplies.
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``: abs(MIN_VALUE) < 0)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's producer picks for ``key`` among ``num_partitions``."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


class Partitioner:
    """Explicit partition, else murmur2 of the key, else the topic's sticky partition.

    The producer's accumulator calls :meth:`on_batch_closed` whenever a batch stops
    accepting records (it is full, or the sender drained it); once the batches closed on the
    topic's sticky partition add up to ``batch.size`` bytes, the next keyless record picks a
    new one.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}
        """topic -> the partition keyless records go to now."""
        self._previous: dict[str, int] = {}
        """topic -> the sticky partition before the current (or pending) choice."""
        self._filled: dict[str, int] = {}
        """topic -> bytes of the batches closed on its sticky partition so far."""
        self._key_hashes: dict[bytes, int] = {}
        """key -> toPositive(murmur2(key)), for at most KEY_HASH_CACHE_SIZE keys."""

    def partition(
        self,
        topic: str,
        key: bytes | None,
        num_partitions: int,
        available: Sequence[int],
        partition: int | None = None,
    ) -> int:
        """The partition for one record. ``available`` lists the partitions that have a
        leader now (used for keyless records only; when it is empty, any partition)."""
        if partition is not None:
            return partition
        if key is not None:
            return self.partition_for_key(key, num_partitions)
        return self.sticky_partition(topic, num_partitions, available)

    def partition_for_key(self, key: bytes, num_partitions: int) -> int:
        """:func:`partition_for_key`, with the hashes of recent keys remembered."""
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
        hashed = self._key_hashes.get(key)
        if hashed is None:
            if len(self._key_hashes) >= KEY_HASH_CACHE_SIZE:
                self._key_hashes.clear()
            hashed = self._key_hashes[key] = murmur2(key) & 0x7FFFFFFF  # toPositive
        return hashed % num_partitions

    def sticky_partition(self, topic: str, num_partitions: int, available: Sequence[int]) -> int:
        """The topic's sticky partition, chosen now if it has none (or it lost its leader
        while others have one)."""
        current = self._sticky.get(topic)
        if current is None or current >= num_partitions or (available and current not in available):
            current = self._choose(topic, num_partitions, available)
            self._sticky[topic] = current
            self._filled.pop(topic, None)
        return current

    def on_batch_closed(self, tp: TopicPartition, size: int, batch_size: int) -> None:
        """A batch of ``tp`` of ``size`` bytes is full or was sent: if ``tp`` is sticky and
        its closed batches reach ``batch_size`` bytes, move on next time (KIP-794)."""
        if self._sticky.get(tp.topic) != tp.partition:
            return
        filled = self._filled.get(tp.topic, 0) + size
        if filled < batch_size:
            self._filled[tp.topic] = filled
            return
        del self._sticky[tp.topic]
        self._filled.pop(tp.topic, None)
        self._previous[tp.topic] = tp.partition

    def _choose(self, topic: str, num_partitions: int, available: Sequence[int]) -> int:
        candidates: Sequence[int] = [p for p in available if p < num_partitions]
        if not candidates:
            candidates = range(num_partitions)
        previous = self._previous.get(topic, self._sticky.get(topic))
        if len(candidates) > 1 and previous is not None:
            candidates = [p for p in candidates if p != previous]
        return self._rng.choice(candidates)
