"""The follower truncation decision (KIP-101/KIP-279), case by case and on real epoch caches."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from broker.log.leader_epoch_cache import LeaderEpochFileCache
from broker.replication.truncation import (
    OffsetTruncationState,
    TruncationMode,
    high_watermark_truncation_state,
    offset_truncation_state,
)


def cache(path: Path, *entries: tuple[int, int]) -> LeaderEpochFileCache:
    result = LeaderEpochFileCache(path)
    for epoch, start in entries:
        result.assign(epoch, start)
    return result


def lookup(cache: LeaderEpochFileCache, log_end_offset: int, epoch: int) -> tuple[int, int]:
    return cache.end_offset_for(epoch, log_end_offset)


def no_local_lookup(epoch: int) -> tuple[int, int]:
    raise AssertionError(f"the local cache must not be consulted (asked for epoch {epoch})")


def decide(
    leader_epoch: int,
    leader_end: int,
    local: dict[int, tuple[int, int]] | None = None,
    *,
    leo: int = 20,
    hw: int = 5,
) -> OffsetTruncationState:
    lookup = no_local_lookup if local is None else local.__getitem__
    return offset_truncation_state(
        leader_epoch=leader_epoch,
        leader_end_offset=leader_end,
        local_end_offset_for=lookup,
        log_end_offset=leo,
        high_watermark=hw,
    )


def test_modes_are_the_config_values() -> None:
    assert TruncationMode("leader-epoch") is TruncationMode.LEADER_EPOCH
    assert TruncationMode("high-watermark") is TruncationMode.HIGH_WATERMARK


def test_high_watermark_mode_truncates_to_the_hw() -> None:
    assert high_watermark_truncation_state(high_watermark=7) == OffsetTruncationState(7, True)


def test_case_1_undefined_end_offset_falls_back_to_the_hw() -> None:
    assert decide(-1, -1, hw=5) == OffsetTruncationState(5, True)
    # Even with an epoch echoed: an undefined offset means the leader could not place it.
    assert decide(3, -1, hw=5) == OffsetTruncationState(5, True)


def test_case_2_offset_only_answer_truncates_to_it_capped_by_the_leo() -> None:
    assert decide(-1, 12, leo=20) == OffsetTruncationState(12, True)
    assert decide(-1, 30, leo=20) == OffsetTruncationState(20, True)


@pytest.mark.parametrize(
    ("leader_end", "local_end", "leo", "expected"),
    [
        (10, 15, 20, 10),  # the leader's epoch ended earlier
        (15, 10, 20, 10),  # ours ended earlier (a later local epoch started at 10)
        (15, 18, 12, 12),  # never above the LEO
    ],
)
def test_case_3a_same_epoch_takes_the_smallest_end(
    leader_end: int, local_end: int, leo: int, expected: int
) -> None:
    assert decide(2, leader_end, {2: (2, local_end)}, leo=leo) == OffsetTruncationState(
        expected, True
    )


def test_case_3b_unknown_leader_epoch_truncates_and_asks_again() -> None:
    # The leader answers epoch 2, which we never had: our floor is epoch 1, ending at 11.
    assert decide(2, 15, {2: (1, 11)}, leo=14) == OffsetTruncationState(11, False)
    assert decide(2, 15, {2: (1, 11)}, leo=9) == OffsetTruncationState(9, False)


def test_case_3c_no_local_answer_truncates_to_the_leader_end() -> None:
    assert decide(4, 12, {4: (-1, -1)}, leo=20) == OffsetTruncationState(12, True)
    assert decide(4, 30, {4: (-1, -1)}, leo=20) == OffsetTruncationState(20, True)


def test_worked_example_loops_twice_on_real_caches(tmp_path: Path) -> None:
    """KIP-279's loop, worked: leader 0@0, 2@10, 4@15; follower 0@0, 1@8, 3@11, LEO 14."""
    leader = cache(tmp_path / "leader", (0, 0), (2, 10), (4, 15))
    leader_leo = 20
    follower = cache(tmp_path / "follower", (0, 0), (1, 8), (3, 11))
    leo = 14
    rounds = []
    while True:
        asked = follower.latest_epoch()
        assert asked is not None
        leader_epoch, leader_end = leader.end_offset_for(asked, leader_leo)
        state = offset_truncation_state(
            leader_epoch=leader_epoch,
            leader_end_offset=leader_end,
            local_end_offset_for=functools.partial(lookup, follower, leo),
            log_end_offset=leo,
            high_watermark=0,
        )
        rounds.append((asked, (leader_epoch, leader_end), state))
        leo = min(leo, state.offset)  # what Log.truncate_to does, cache included
        follower.truncate_from_end(leo)
        if state.truncation_completed:
            break
    assert rounds == [
        (3, (2, 15), OffsetTruncationState(11, False)),
        (1, (0, 10), OffsetTruncationState(8, True)),
    ]
    assert follower.entries() == [(0, 0)]
    assert leo == 8


# docs/replication.md, RF=2, A (leader) and B, one record per offset, all in epoch 0 unless said.


def test_data_loss_scenario_only_the_hw_rule_cuts_an_acknowledged_record(tmp_path: Path) -> None:
    """A and B hold m0, m1; A's HW is 2 (m1 acknowledged), B's is 1. B restarts and truncates
    as A's follower; then A dies and B leads. Whatever B cut is gone for good."""
    a = cache(tmp_path / "a", (0, 0))
    b = cache(tmp_path / "b", (0, 0))
    a_leo, b_leo, b_hw = 2, 2, 1

    hw_rule = high_watermark_truncation_state(high_watermark=b_hw)
    assert hw_rule.offset == 1  # m1 cut: lost once A dies before B re-fetches it

    leader_epoch, leader_end = a.end_offset_for(0, a_leo)
    assert (leader_epoch, leader_end) == (0, 2)
    epoch_rule = offset_truncation_state(
        leader_epoch=leader_epoch,
        leader_end_offset=leader_end,
        local_end_offset_for=lambda epoch: b.end_offset_for(epoch, b_leo),
        log_end_offset=b_leo,
        high_watermark=b_hw,
    )
    assert epoch_rule == OffsetTruncationState(2, True)  # B keeps m1


def test_divergence_scenario_only_the_epoch_rule_removes_the_stale_tail(tmp_path: Path) -> None:
    """A holds m0, m1 (HW 2), B holds m0 (HW 1). Both die; B returns and leads epoch 1 by
    unclean election, writing m2 at offset 1; A returns as B's follower."""
    a = cache(tmp_path / "a", (0, 0))
    a_leo, a_hw = 2, 2
    b = cache(tmp_path / "b", (0, 0))
    b.assign(1, 1)  # B becomes leader at its LEO 1 (KAFKA-7415), then m2 at offset 1
    b_leo = 2

    hw_rule = high_watermark_truncation_state(high_watermark=a_hw)
    assert hw_rule.offset == a_leo  # nothing cut: A's m1 and B's m2 both sit at offset 1

    asked = a.latest_epoch()
    assert asked == 0
    leader_epoch, leader_end = b.end_offset_for(asked, b_leo)
    assert (leader_epoch, leader_end) == (0, 1)  # B's epoch 0 ended where epoch 1 began
    epoch_rule = offset_truncation_state(
        leader_epoch=leader_epoch,
        leader_end_offset=leader_end,
        local_end_offset_for=lambda epoch: a.end_offset_for(epoch, a_leo),
        log_end_offset=a_leo,
        high_watermark=a_hw,
    )
    assert epoch_rule == OffsetTruncationState(1, True)  # offset 1 goes; A then copies m2
