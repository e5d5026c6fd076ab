"""Where a follower truncates its log before fetching: the pure decision, no I/O.

Two rules, chosen by ``replication.truncation.mode`` (docs/replication.md):

``high-watermark`` (Kafka < 0.11)
    Truncate to the own checkpointed high watermark, then fetch. Simple and wrong: the
    follower's HW lags the leader's by a fetch round trip, so records every replica holds
    and the leader acknowledged can be cut (then lost for good if the leader dies before
    the follower re-fetches them), and after an unclean election a replica can keep a tail
    the new leader never had (divergence). docs/replication.md reproduces both. Its cut
    can fall inside one of the new leader's batches; the follower then keeps its own
    records below and copies the rest of that batch, as a pre-0.11 follower copied
    messages from its fetch offset (``Partition.fit_follower_append``).

``leader-epoch`` (Kafka >= 2.0: KIP-101 + KIP-279)
    Ask the leader, with OffsetsForLeaderEpoch, where the follower's latest epoch ends in
    the leader's log, and keep exactly the prefix both logs share, epoch by epoch.
    :func:`offset_truncation_state` is that decision (Kafka's
    ``AbstractFetcherThread.getOffsetTruncationState``); the fetcher
    (:mod:`broker.replication.replica_fetcher`) does the request and the truncation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from broker.log.leader_epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from proto.config.broker_config import TruncationMode

__all__ = [
    "OffsetTruncationState",
    "TruncationMode",
    "high_watermark_truncation_state",
    "offset_truncation_state",
]


@dataclass(frozen=True)
class OffsetTruncationState:
    """Kafka's ``OffsetTruncationState``: truncate the log to ``offset``, then either fetch
    (``truncation_completed``) or ask the leader again about the now-latest local epoch."""

    offset: int
    """The offset to truncate to (a no-op when it is at or above the log end offset)."""
    truncation_completed: bool
    """False only for KIP-279's case 3b: the follower never saw the leader's epoch, so the
    answer bounds the divergence from above but does not locate it yet."""


def high_watermark_truncation_state(*, high_watermark: int) -> OffsetTruncationState:
    """The pre-0.11 rule: truncate to the own (checkpointed) high watermark; always done."""
    return OffsetTruncationState(high_watermark, truncation_completed=True)


def offset_truncation_state(
    *,
    leader_epoch: int,
    leader_end_offset: int,
    local_end_offset_for: Callable[[int], tuple[int, int]],
    log_end_offset: int,
    high_watermark: int,
) -> OffsetTruncationState:
    """Where to truncate, given the leader's OffsetsForLeaderEpoch answer (KIP-279).

    ``(leader_epoch, leader_end_offset)`` is the leader's answer for the follower's latest
    epoch E: the largest epoch <= E the leader knows and where it ends in the leader's log.
    ``local_end_offset_for(epoch)`` is the follower's own epoch cache lookup (the same
    ``end_offset_for`` rule, with the local LEO). ``high_watermark`` is the follower's HW
    when it became follower (Kafka's initial fetch offset).

    Why not just truncate to the HW (KIP-101's motivation)? The HW a follower knows lags
    the leader's by one fetch, so cutting there throws away acknowledged records it held;
    and after an unclean election the HW says nothing about which of the follower's
    records the new leader actually has. Epochs do: every batch carries the epoch of the
    leader that wrote it, and an offset range written in epoch e is identical on every
    replica that holds it (one leader per epoch). So the logs agree up to the point where
    the follower's epoch history leaves the leader's, and that is what is computed here:

    1. ``leader_end_offset == -1``: the leader cannot place the epoch (an empty cache, a
       requested epoch above all it knows). Fall back to the high watermark. Done.
    2. ``leader_epoch == -1`` but an end offset (an old, offset-only peer, KIP-101 v0):
       truncate to ``min(leader_end_offset, LEO)``. Done.
    3. Otherwise look the leader's epoch up locally: ``(f_epoch, f_end)``.

       a. ``f_epoch == leader_epoch``: both logs hold this epoch; it ends at the smaller of
          the two end offsets (and never above the LEO). Done.
       b. ``f_epoch != leader_epoch``: the follower never had the leader's epoch, so
          everything from ``f_end`` (where the follower's next, leader-unknown epoch
          starts) is suspect. Truncate to ``min(f_end, LEO)`` and ask again with the
          follower's new, smaller latest epoch. **Not done**: this is the KIP-279 loop.
       c. The local cache has no answer: truncate to ``min(leader_end_offset, LEO)``. Done.

    The divergence KIP-101 describes: A leads epoch 0 and writes m0, m1; B has only m0;
    both die, B comes back first and leads epoch 1, writing m2 at offset 1. A returns as
    follower with HW 2: the HW rule keeps its m1 at offset 1 while B holds m2 there, and
    the replicas disagree forever. With epochs A asks about epoch 0, B answers ``(0, 1)``
    (its epoch 1 starts at 1), A's own epoch 0 runs to 2, so A truncates to ``min(1, 2,
    2) = 1`` and copies m2: case 3a.

    KIP-279's loop, from the reference notes: leader cache ``0@0, 2@10, 4@15``, follower
    ``0@0, 1@8, 3@11`` with LEO 14. The follower asks about 3; the leader answers ``(2,
    15)``; the follower's lookup of 2 gives ``(1, 11)``, 1 != 2, so it cuts to 11 (case 3b:
    its epoch 3 is unknown to the leader). Then it asks about 1, the leader answers ``(0,
    10)``, its own epoch 0 ends at 8: ``min(10, 8, 11) = 8``, done. A single round (KIP-101
    in 0.11) would have cut to 11 and kept offsets 8-10 of epoch 1, which the leader
    replaced in epoch 2.
    """
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return OffsetTruncationState(high_watermark, truncation_completed=True)
    if leader_epoch == UNDEFINED_EPOCH:
        return OffsetTruncationState(
            min(leader_end_offset, log_end_offset), truncation_completed=True
        )
    local_epoch, local_end_offset = local_end_offset_for(leader_epoch)
    if local_end_offset == UNDEFINED_EPOCH_OFFSET:
        return OffsetTruncationState(
            min(leader_end_offset, log_end_offset), truncation_completed=True
        )
    if local_epoch == leader_epoch:
        return OffsetTruncationState(
            min(leader_end_offset, local_end_offset, log_end_offset), truncation_completed=True
        )
    return OffsetTruncationState(min(local_end_offset, log_end_offset), truncation_completed=False)
