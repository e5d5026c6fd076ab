"""One entry of a leader epoch cache, in a leaf module: the cache and its checkpoint file
both use it, and neither has to import the other for it (Kafka, too, ended with
``EpochEntry`` in a class of its own)."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["EpochEntry"]


class EpochEntry(NamedTuple):
    """One leader epoch and the first offset written in it."""

    epoch: int
    """The leader epoch (>= 0), as stamped in the batches' ``partitionLeaderEpoch``."""
    start_offset: int
    """Offset of the first record of this epoch in the log (>= 0)."""
