"""leader_election: Kafka's election algorithms and the controller's ISR writes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.leader_election import (
    INITIAL_LEADER_EPOCH,
    LeaderElectionResult,
    controlled_shutdown_leader_election,
    elected_state,
    initial_leader_and_isr,
    new_leader_and_isr,
    offline_partition_leader_election,
    preferred_replica_leader_election,
    reassign_partition_leader_election,
    remove_replica_from_isr,
)
from proto.errors import StaleControllerEpochError
from proto.zk.znodes import LEADER_NONE, PartitionStateData


def state(
    leader: int, isr: tuple[int, ...], leader_epoch: int = 5, controller_epoch: int = 2
) -> PartitionStateData:
    return PartitionStateData(leader, leader_epoch, isr, controller_epoch)


# -- offline partition election --------------------------------------------------------------


def test_offline_election_picks_first_live_isr_replica_in_assignment_order() -> None:
    # Assignment order, not ISR order, decides: 1 comes before 2 in [3, 1, 2].
    result = offline_partition_leader_election([3, 1, 2], [2, 1, 3], live_brokers={1, 2})
    assert result == LeaderElectionResult(1, (2, 1))
    assert result.elected
    assert not result.unclean


def test_offline_election_prefers_the_preferred_replica() -> None:
    result = offline_partition_leader_election([1, 2, 3], [2, 3, 1], live_brokers={1, 2, 3})
    assert result.leader == 1
    assert result.isr == (2, 3, 1)


def test_offline_election_skips_live_replicas_outside_the_isr() -> None:
    result = offline_partition_leader_election([1, 2, 3], [1, 3], live_brokers={2, 3})
    assert result == LeaderElectionResult(3, (3,))


def test_offline_election_without_live_isr_member_stays_offline() -> None:
    result = offline_partition_leader_election([1, 2, 3], [1], live_brokers={2, 3})
    assert result == LeaderElectionResult(None, (1,))
    assert not result.elected
    assert elected_state(state(1, (1,)), result, controller_epoch=2) is None


def test_unclean_election_picks_first_live_replica_with_isr_of_itself() -> None:
    result = offline_partition_leader_election(
        [1, 2, 3], [1], live_brokers={3, 2}, unclean_leader_election_enabled=True
    )
    assert result == LeaderElectionResult(2, (2,), unclean=True)


def test_unclean_election_is_not_used_when_a_clean_one_is_possible() -> None:
    result = offline_partition_leader_election(
        [1, 2, 3], [1, 3], live_brokers={2, 3}, unclean_leader_election_enabled=True
    )
    assert result == LeaderElectionResult(3, (3,), unclean=False)


def test_unclean_election_with_no_live_replica_elects_no_one() -> None:
    result = offline_partition_leader_election(
        [1, 2], [1], live_brokers={5}, unclean_leader_election_enabled=True
    )
    assert result.leader is None


def test_entire_isr_offline_keeps_the_last_member_with_no_leader() -> None:
    """ControllerIntegrationTest...EntireIsrOfflineAndUncleanLeaderElectionDisabled: after
    the whole ISR dies the state is leader -1, ISR = [last member], epoch bumped."""
    before = state(1, (1, 2, 3), leader_epoch=0, controller_epoch=1)
    election = offline_partition_leader_election([1, 2, 3], before.isr, live_brokers=set())
    assert elected_state(before, election, controller_epoch=1) is None
    current = before
    for dead in (1, 2, 3):  # OfflineReplica, one broker at a time
        after = remove_replica_from_isr(current, dead, controller_epoch=1)
        assert after is not None
        current = after
    assert current == PartitionStateData(LEADER_NONE, 3, (3,), 1)

    # Broker 1 returns: it is not the recorded ISR member, so a clean election waits ...
    assert offline_partition_leader_election([1, 2, 3], current.isr, {1}).leader is None
    # ... and broker 3's return brings the partition back cleanly.
    back = offline_partition_leader_election([1, 2, 3], current.isr, {1, 3})
    assert back == LeaderElectionResult(3, (3,))
    assert elected_state(current, back, controller_epoch=1) == PartitionStateData(3, 4, (3,), 1)


assignments_st = st.lists(
    st.integers(min_value=0, max_value=9), min_size=1, max_size=6, unique=True
)


@st.composite
def partitions(draw: st.DrawFn) -> tuple[list[int], list[int], set[int]]:
    """(assignment, ISR drawn from it in any order, live brokers from a wider range)."""
    assignment = draw(assignments_st)
    order = draw(st.permutations(assignment))
    isr = order[: draw(st.integers(min_value=0, max_value=len(order)))]
    live = draw(st.sets(st.integers(min_value=0, max_value=12)))
    return assignment, list(isr), live


@given(p=partitions(), unclean=st.booleans())
def test_offline_election_never_picks_a_dead_or_unclean_replica(
    p: tuple[list[int], list[int], set[int]], unclean: bool
) -> None:
    assignment, isr, live = p
    result = offline_partition_leader_election(assignment, isr, live, unclean)
    live_isr = [r for r in assignment if r in live and r in isr]
    if result.leader is None:
        assert not live_isr
        assert not unclean or not (set(assignment) & live)
        assert result.isr == tuple(isr)
        return
    assert result.leader in live
    assert result.leader in assignment
    assert result.leader in result.isr
    assert set(result.isr) <= live
    if live_isr:
        assert result.leader == live_isr[0]
        assert not result.unclean
        assert result.isr == tuple(r for r in isr if r in live)
    else:
        assert unclean
        assert result.unclean
        assert result.isr == (result.leader,)
        assert result.leader == next(r for r in assignment if r in live)
    if not unclean:
        assert result.leader in isr


# -- reassignment and preferred replica elections ---------------------------------------------


def test_reassign_election_picks_first_live_target_replica_in_isr() -> None:
    result = reassign_partition_leader_election([4, 2, 3], [1, 2, 3, 4], live_brokers={1, 2, 3})
    assert result == LeaderElectionResult(2, (1, 2, 3, 4))


def test_reassign_election_without_live_target_in_isr() -> None:
    result = reassign_partition_leader_election([4, 5], [1, 4], live_brokers={1, 5})
    assert result == LeaderElectionResult(None, (1, 4))


def test_preferred_election_elects_the_head_of_the_assignment() -> None:
    result = preferred_replica_leader_election([2, 1, 3], [1, 3, 2], live_brokers={1, 2, 3})
    assert result == LeaderElectionResult(2, (1, 3, 2))


@pytest.mark.parametrize(
    ("isr", "live"),
    [
        ([1, 3], {1, 2, 3}),  # preferred replica behind: not in the ISR
        ([1, 2, 3], {1, 3}),  # preferred replica down
    ],
)
def test_preferred_election_needs_the_preferred_replica_live_and_in_sync(
    isr: list[int], live: set[int]
) -> None:
    assert preferred_replica_leader_election([2, 1, 3], isr, live).leader is None


def test_preferred_election_never_falls_back_to_another_replica() -> None:
    assert preferred_replica_leader_election([], [1], {1}).leader is None


# -- controlled shutdown ---------------------------------------------------------------------


def test_controlled_shutdown_moves_leadership_and_drops_the_broker_from_isr() -> None:
    result = controlled_shutdown_leader_election(
        [1, 2, 3], [1, 2, 3], live_brokers={1, 2, 3}, shutting_down={1}
    )
    assert result == LeaderElectionResult(2, (2, 3))


def test_controlled_shutdown_of_several_brokers() -> None:
    result = controlled_shutdown_leader_election(
        [1, 2, 3], [3, 2, 1], live_brokers={1, 2, 3}, shutting_down={1, 2}
    )
    assert result == LeaderElectionResult(3, (3,))


def test_controlled_shutdown_without_other_isr_member_keeps_the_leader() -> None:
    result = controlled_shutdown_leader_election(
        [1, 2, 3], [1], live_brokers={1, 2, 3}, shutting_down={1}
    )
    assert result == LeaderElectionResult(None, (1,))


@given(p=partitions(), data=st.data())
def test_controlled_shutdown_never_elects_a_leaving_broker(
    p: tuple[list[int], list[int], set[int]], data: st.DataObject
) -> None:
    assignment, isr, live = p
    leaving = data.draw(st.sets(st.sampled_from(assignment)))
    result = controlled_shutdown_leader_election(assignment, isr, live, leaving)
    if result.leader is None:
        assert result.isr == tuple(isr)
        assert not [r for r in assignment if r in live and r in isr and r not in leaving]
    else:
        assert result.leader in live
        assert result.leader in isr
        assert result.leader not in leaving
        assert result.leader in result.isr
        assert not set(result.isr) & leaving


# -- new_leader_and_isr and the initial state ------------------------------------------------


def test_new_leader_and_isr_bumps_the_leader_epoch_by_one() -> None:
    current = state(1, (1, 2, 3), leader_epoch=7, controller_epoch=2)
    assert new_leader_and_isr(current, 2, [2, 3], controller_epoch=3) == PartitionStateData(
        2, 8, (2, 3), 3
    )


def test_new_leader_and_isr_accepts_no_leader() -> None:
    after = new_leader_and_isr(state(1, (1,)), LEADER_NONE, [1], controller_epoch=2)
    assert after.leader == LEADER_NONE


def test_state_written_by_a_newer_controller_is_not_overwritten() -> None:
    with pytest.raises(StaleControllerEpochError, match="controller epoch 4"):
        new_leader_and_isr(state(1, (1,), controller_epoch=4), 1, [1], controller_epoch=3)


def test_leader_outside_the_isr_is_a_bug() -> None:
    with pytest.raises(ValueError, match="leader 3 is not in the ISR"):
        new_leader_and_isr(state(1, (1, 2)), 3, [1, 2], controller_epoch=2)


def test_isr_with_duplicates_is_a_bug() -> None:
    with pytest.raises(ValueError, match="more than once"):
        new_leader_and_isr(state(1, (1, 2)), 1, [1, 1], controller_epoch=2)


def test_elected_state_writes_leader_isr_and_epochs() -> None:
    current = state(1, (1, 2, 3), leader_epoch=3, controller_epoch=1)
    result = offline_partition_leader_election([1, 2, 3], current.isr, {2, 3})
    assert elected_state(current, result, controller_epoch=2) == PartitionStateData(2, 4, (2, 3), 2)


def test_initial_state_leads_with_first_live_replica_and_all_live_in_isr() -> None:
    assert initial_leader_and_isr([3, 1, 2], {1, 2, 3}, controller_epoch=4) == (
        PartitionStateData(3, INITIAL_LEADER_EPOCH, (3, 1, 2), 4)
    )
    assert initial_leader_and_isr([3, 1, 2], {1, 2}, controller_epoch=4) == (
        PartitionStateData(1, 0, (1, 2), 4)
    )


def test_initial_state_needs_a_live_replica() -> None:
    assert initial_leader_and_isr([3, 1], {2}, controller_epoch=1) is None


# -- remove_replica_from_isr -----------------------------------------------------------------


def test_removing_a_follower_shrinks_the_isr_and_bumps_the_epoch() -> None:
    """Controller-initiated ISR changes bump the leader epoch (reference §5)."""
    after = remove_replica_from_isr(state(1, (1, 2, 3), leader_epoch=5), 2, controller_epoch=3)
    assert after == PartitionStateData(1, 6, (1, 3), 3)


def test_removing_a_replica_outside_the_isr_writes_nothing() -> None:
    assert remove_replica_from_isr(state(1, (1, 3)), 2, controller_epoch=2) is None


def test_removing_the_leader_leaves_the_partition_without_one() -> None:
    after = remove_replica_from_isr(state(1, (1, 2)), 1, controller_epoch=2)
    assert after == PartitionStateData(LEADER_NONE, 6, (2,), 2)


def test_the_last_isr_member_is_kept() -> None:
    after = remove_replica_from_isr(state(2, (2,)), 2, controller_epoch=2)
    assert after == PartitionStateData(LEADER_NONE, 6, (2,), 2)


def test_removal_respects_the_controller_epoch_fence() -> None:
    with pytest.raises(StaleControllerEpochError):
        remove_replica_from_isr(state(1, (1, 2), controller_epoch=9), 2, controller_epoch=8)


# -- leader epochs only go up ----------------------------------------------------------------

operations_st = st.lists(
    st.tuples(
        st.sampled_from(["offline", "unclean", "preferred", "shutdown", "remove"]),
        st.sets(st.integers(min_value=0, max_value=4)),
        st.integers(min_value=0, max_value=4),
    ),
    max_size=30,
)


@given(ops=operations_st)
def test_leader_epoch_strictly_increases_with_every_write(
    ops: list[tuple[str, set[int], int]],
) -> None:
    """Drive one partition through random elections and ISR removals: every write has a
    larger leader epoch, the leader is always in the ISR or -1, and the ISR never empties."""
    assignment = [0, 1, 2, 3, 4]
    current = initial_leader_and_isr(assignment, set(assignment), controller_epoch=1)
    assert current is not None
    for kind, live, broker in ops:
        after: PartitionStateData | None
        if kind == "remove":
            after = remove_replica_from_isr(current, broker, controller_epoch=1)
        else:
            if kind in ("offline", "unclean"):
                result = offline_partition_leader_election(
                    assignment, current.isr, live, unclean_leader_election_enabled=kind == "unclean"
                )
            elif kind == "preferred":
                result = preferred_replica_leader_election(assignment, current.isr, live)
            else:
                result = controlled_shutdown_leader_election(
                    assignment, current.isr, live | {broker}, {broker}
                )
            after = elected_state(current, result, controller_epoch=1)
        if after is None:
            continue
        assert after.leader_epoch == current.leader_epoch + 1
        assert after.isr
        assert after.leader == LEADER_NONE or after.leader in after.isr
        current = after
