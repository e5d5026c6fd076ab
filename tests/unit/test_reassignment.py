"""reassignment: Kafka's add / wait / move leader / remove steps, walked one at a time."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.leader_election import offline_partition_leader_election
from controller.reassignment import (
    ReassignmentAction,
    ReassignmentStep,
    next_reassignment_step,
    reassign_to,
    reassignment_replicas,
    validate_reassignment,
)
from proto.errors import StaleControllerEpochError
from proto.replica_assignment import InvalidReplicaAssignmentError
from proto.zk.znodes import LEADER_NONE, PartitionStateData, ReplicaAssignment

ADD = ReassignmentAction.ADD_REPLICAS
WAIT = ReassignmentAction.WAIT
MOVE = ReassignmentAction.MOVE_LEADER
REMOVE = ReassignmentAction.REMOVE_REPLICAS
DONE = ReassignmentAction.DONE

EPOCH = 3  # the controller's epoch


class Partition:
    """What ZooKeeper holds for one partition, changed only by applying steps (as the
    event loop will) and by the leader's own ISR expansion."""

    def __init__(self, replicas: list[int] | ReplicaAssignment, state: PartitionStateData) -> None:
        self.assignment = (
            replicas
            if isinstance(replicas, ReplicaAssignment)
            else ReplicaAssignment(tuple(replicas))
        )
        self.state = state

    @property
    def replicas(self) -> tuple[int, ...]:
        return self.assignment.replicas

    def step(self, target: list[int] | None, live: set[int]) -> ReassignmentStep:
        step = next_reassignment_step(self.assignment, target, self.state, live, EPOCH)
        if step.state is not None:
            assert step.state.leader_epoch == self.state.leader_epoch + 1
            self.state = step.state
        self.assignment = step.assignment
        return step

    def leader_expands_isr(self, *followers: int) -> None:
        """The leader's conditional ISR update: no epoch bump (only the controller bumps)."""
        isr = (*self.state.isr, *(f for f in followers if f not in self.state.isr))
        self.state = PartitionStateData(
            self.state.leader, self.state.leader_epoch, isr, self.state.controller_epoch
        )

    def summary(self) -> tuple[tuple[int, ...], int, tuple[int, ...], int]:
        return self.replicas, self.state.leader, self.state.isr, self.state.leader_epoch


def moving(replicas: list[int], adding: list[int], removing: list[int]) -> ReplicaAssignment:
    return ReplicaAssignment(tuple(replicas), tuple(adding), tuple(removing))


def fresh(replicas: list[int]) -> Partition:
    """A partition as created: the preferred replica leads, every replica in sync."""
    return Partition(replicas, PartitionStateData(replicas[0], 0, tuple(replicas), 1))


# -- the walk of the module docstring ----------------------------------------------------------


def test_reassign_1_2_3_to_2_3_4_step_by_step() -> None:
    live = {1, 2, 3, 4}
    target = [2, 3, 4]
    p = fresh([1, 2, 3])

    # U1 + A1 + A2: RS = TRS + ORS, epoch bump so every replica learns RS, 4 starts.
    step = p.step(target, live)
    assert step.action is ADD
    assert step.new_replicas == (4,)
    assert step.removed_replicas == ()
    assert p.summary() == ((2, 3, 4, 1), 1, (1, 2, 3), 1)
    assert p.assignment == moving([2, 3, 4, 1], [4], [1])  # AR and RR written with RS
    assert p.state.controller_epoch == EPOCH

    # Phase A: nothing to do until 4 is in the ISR; calling again writes nothing.
    for _ in range(2):
        step = p.step(target, live)
        assert step.action is WAIT
        assert step.state is None
        assert step.waiting_for == (4,)
        assert "waiting for [4]" in step.reason
        assert p.summary() == ((2, 3, 4, 1), 1, (1, 2, 3), 1)

    # Broker 4 catches up; the leader adds it, and the ISR change notification fires.
    p.leader_expands_isr(4)

    # B3: leader 1 is not a target replica; the first live target replica in the ISR leads.
    step = p.step(target, live)
    assert step.action is MOVE
    assert p.summary() == ((2, 3, 4, 1), 2, (1, 2, 3, 4), 2)

    # B4-B6: 1 leaves the ISR (epoch bump) and RS; it gets StopReplica(delete=True).
    step = p.step(target, live)
    assert step.action is REMOVE
    assert step.removed_replicas == (1,)
    assert p.summary() == ((2, 3, 4), 2, (2, 3, 4), 3)
    assert not p.assignment.is_being_reassigned  # AR and RR cleared with RS = TRS

    # B7: remove the partition from /admin/reassign_partitions.
    step = p.step(target, live)
    assert step.action is DONE
    assert step.state is None
    assert p.summary() == ((2, 3, 4), 2, (2, 3, 4), 3)


def test_kafka_example_ors_1_2_3_to_trs_4_5_6() -> None:
    """The transition table in KafkaController.onPartitionReassignment's comment."""
    live = {1, 2, 3, 4, 5, 6}
    target = [4, 5, 6]
    p = fresh([1, 2, 3])
    assert p.step(target, live).action is ADD
    assert list(p.replicas) == [4, 5, 6, 1, 2, 3]
    assert p.step(target, live).waiting_for == (4, 5, 6)
    p.leader_expands_isr(4, 5)
    assert p.step(target, live).waiting_for == (6,)
    p.leader_expands_isr(6)
    assert p.step(target, live).action is MOVE
    assert (p.state.leader, p.state.isr) == (4, (1, 2, 3, 4, 5, 6))
    step = p.step(target, live)
    assert step.action is REMOVE
    assert step.removed_replicas == (1, 2, 3)
    assert (p.replicas, p.state.leader, p.state.isr) == ((4, 5, 6), 4, (4, 5, 6))
    assert p.step(target, live).action is DONE


# -- other shapes ----------------------------------------------------------------------------


def test_increasing_the_replication_factor() -> None:
    p = fresh([1, 2])
    step = p.step([1, 2, 3], {1, 2, 3})
    assert (step.action, step.new_replicas, p.replicas) == (ADD, (3,), (1, 2, 3))
    # RS already equals the target, but 3 is not in sync yet: not done.
    assert p.step([1, 2, 3], {1, 2, 3}).action is WAIT
    p.leader_expands_isr(3)
    # B3-B6 with nothing to remove: the epoch bump of B3, and AR = [] written.
    step = p.step([1, 2, 3], {1, 2, 3})
    assert (step.action, step.removed_replicas) == (REMOVE, ())
    assert p.summary() == ((1, 2, 3), 1, (1, 2, 3), 2)
    assert not p.assignment.is_being_reassigned
    assert p.step([1, 2, 3], {1, 2, 3}).action is DONE


def test_decreasing_the_replication_factor() -> None:
    p = fresh([1, 2, 3])
    step = p.step([1, 2], {1, 2, 3})  # U1: RR = [3] recorded first
    assert (step.action, p.assignment) == (ADD, moving([1, 2, 3], [], [3]))
    step = p.step([1, 2], {1, 2, 3})
    assert (step.action, step.removed_replicas) == (REMOVE, (3,))
    assert p.summary() == ((1, 2), 1, (1, 2), 2)
    assert p.step([1, 2], {1, 2, 3}).action is DONE


def test_removing_the_leaders_replica_moves_leadership_first() -> None:
    p = fresh([1, 2, 3])
    # U1 still rewrites RS with the target first, though nothing is added.
    step = p.step([2, 3], {1, 2, 3})
    assert (step.action, step.new_replicas) == (ADD, ())
    assert list(p.replicas) == [2, 3, 1]
    assert p.step([2, 3], {1, 2, 3}).action is MOVE
    assert p.state.leader == 2
    step = p.step([2, 3], {1, 2, 3})
    assert (step.action, step.removed_replicas) == (REMOVE, (1,))
    assert p.summary() == ((2, 3), 2, (2, 3), 3)


def test_reordering_changes_only_the_replica_list() -> None:
    # A new preferred replica; moving leadership to it is a preferred election's job.
    p = fresh([1, 2, 3])
    step = p.step([3, 2, 1], {1, 2, 3})
    assert (step.action, step.new_replicas) == (ADD, ())
    assert p.summary() == ((3, 2, 1), 1, (1, 2, 3), 1)
    assert p.step([3, 2, 1], {1, 2, 3}).action is DONE


def test_reassigning_to_the_current_replicas_is_done_at_once() -> None:
    p = fresh([1, 2, 3])
    step = p.step([1, 2, 3], {1, 2, 3})
    assert step == ReassignmentStep(
        DONE, ReplicaAssignment((1, 2, 3)), None, reason="reassigned to [1, 2, 3]"
    )


def test_reassignment_replicas_put_the_target_first() -> None:
    assert reassignment_replicas([1, 2, 3], [3, 4, 2]) == (3, 4, 2, 1)
    assert reassignment_replicas([3, 4, 2, 1], [3, 4, 2]) == (3, 4, 2, 1)


def test_offline_election_during_a_reassignment_prefers_the_target() -> None:
    """Why RS lists TRS first: if the old leader dies mid-reassignment, the offline
    election (assignment order) picks a target replica, sparing a second move."""
    p = fresh([1, 2, 3])
    p.step([4, 3], {1, 2, 3, 4})
    p.leader_expands_isr(4)
    result = offline_partition_leader_election(p.replicas, p.state.isr, {2, 3, 4})
    assert result.leader == 4


# -- failures and resumption -----------------------------------------------------------------


def test_a_new_controller_resumes_where_the_old_one_stopped() -> None:
    """Every step is recomputed from ZooKeeper: re-running a step's inputs after it was
    applied gives the next step, never a repeat of the write."""
    p = fresh([1, 2, 3])
    p.step([2, 3, 4], {1, 2, 3, 4})
    again = next_reassignment_step(p.assignment, [2, 3, 4], p.state, {1, 2, 3, 4}, EPOCH + 1)
    assert again.action is WAIT


def test_crash_between_the_isr_write_and_the_replica_write_repeats_removal() -> None:
    p = fresh([1, 2, 3])
    p.step([2, 3, 4], {1, 2, 3, 4})
    p.leader_expands_isr(4)
    p.step([2, 3, 4], {1, 2, 3, 4})  # MOVE_LEADER
    step = next_reassignment_step(p.assignment, [2, 3, 4], p.state, {1, 2, 3, 4}, EPOCH)
    assert step.action is REMOVE
    # Only the state znode was written before the crash: RS is still [2, 3, 4, 1].
    assert step.state is not None
    p.state = step.state
    again = p.step([2, 3, 4], {1, 2, 3, 4})
    assert (again.action, again.removed_replicas) == (REMOVE, (1,))
    assert p.summary() == ((2, 3, 4), 2, (2, 3, 4), 4)
    assert p.step([2, 3, 4], {1, 2, 3, 4}).action is DONE


def test_replica_list_written_before_the_isr_still_removes_the_old_replica() -> None:
    p = Partition([2, 3, 4], PartitionStateData(2, 7, (1, 2, 3, 4), 1))
    step = p.step([2, 3, 4], {1, 2, 3, 4})
    assert (step.action, step.removed_replicas) == (REMOVE, (1,))
    assert p.state.isr == (2, 3, 4)
    assert p.step([2, 3, 4], {1, 2, 3, 4}).action is DONE


def test_target_replica_dying_during_the_wait_keeps_waiting() -> None:
    p = fresh([1, 2, 3])
    p.step([2, 3, 4], {1, 2, 3, 4})
    # Broker 3 died; broker-failure handling took it out of the ISR.
    p.state = PartitionStateData(1, 2, (1, 2), EPOCH)
    assert p.step([2, 3, 4], {1, 2, 4}).waiting_for == (3, 4)
    p.leader_expands_isr(4)
    assert p.step([2, 3, 4], {1, 2, 4}).waiting_for == (3,)


def test_dead_leader_inside_the_target_is_replaced() -> None:
    # Leader 2 is a target replica but its broker is gone and the ISR still lists it.
    p = Partition(moving([2, 3, 4, 1], [4], [1]), PartitionStateData(2, 4, (1, 2, 3, 4), 1))
    step = p.step([2, 3, 4], {1, 3, 4})
    assert step.action is MOVE
    assert p.state.leader == 3


def test_no_live_target_replica_to_lead_waits() -> None:
    p = Partition(moving([2, 1], [2], [1]), PartitionStateData(1, 4, (1, 2), 1))
    step = p.step([2], {1})
    assert step.action is WAIT
    assert step.state is None
    assert step.waiting_for == (2,)
    assert "can take over leadership" in step.reason


def test_offline_partition_is_given_a_target_leader() -> None:
    p = Partition(moving([2, 1], [2], [1]), PartitionStateData(LEADER_NONE, 4, (2,), 1))
    assert p.step([2], {2}).action is MOVE
    assert p.state.leader == 2
    assert p.step([2], {2}).action is REMOVE
    assert p.summary() == ((2,), 2, (2,), 6)


def test_state_from_a_newer_controller_aborts() -> None:
    state = PartitionStateData(1, 0, (1, 2, 3), EPOCH + 1)
    with pytest.raises(StaleControllerEpochError):
        next_reassignment_step(ReplicaAssignment((1, 2, 3)), [2, 3, 4], state, {1, 2, 3, 4}, EPOCH)


@pytest.mark.parametrize(
    ("target", "message"), [([], "is empty"), ([2, 2], "more than once"), ([-1], "invalid")]
)
def test_malformed_targets_are_refused(target: list[int], message: str) -> None:
    state = PartitionStateData(1, 0, (1,), 1)
    with pytest.raises(InvalidReplicaAssignmentError, match=message):
        next_reassignment_step(ReplicaAssignment((1,)), target, state, {1, 2}, EPOCH)
    with pytest.raises(InvalidReplicaAssignmentError, match=message):
        validate_reassignment([1], target, {1, 2})


def test_partition_without_replicas_is_refused() -> None:
    with pytest.raises(ValueError, match="does not exist"):
        next_reassignment_step(
            ReplicaAssignment(()), [1], PartitionStateData(1, 0, (1,), 1), {1}, EPOCH
        )


def test_validate_reassignment_requires_added_replicas_to_be_live() -> None:
    with pytest.raises(InvalidReplicaAssignmentError, match=r"adds broker\(s\) 4 that are not"):
        validate_reassignment([1, 2, 3], [2, 3, 4], {1, 2, 3})
    # An already-assigned replica may be down: the reassignment waits for it.
    validate_reassignment([1, 2, 3], [2, 3], {1, 2})


# -- cancelling and replacing (KIP-455) ------------------------------------------------------


def test_cancelling_before_the_new_replica_caught_up_stops_it() -> None:
    p = fresh([1, 2, 3])
    p.step([2, 3, 4], {1, 2, 3, 4})
    assert reassign_to(p.assignment, p.assignment.origin_replicas) == ReplicaAssignment((2, 3, 1))
    step = p.step(None, {1, 2, 3, 4})
    assert (step.action, step.new_replicas, step.removed_replicas) == (ADD, (), (4,))
    # The original replicas, in RS's order (Kafka cannot restore the original order).
    assert p.summary() == ((2, 3, 1), 1, (1, 2, 3), 2)
    assert not p.assignment.is_being_reassigned
    assert p.step(None, {1, 2, 3, 4}).action is DONE
    # The cancellation as the admin znode carries it: the original replicas as target.
    assert p.step([2, 3, 1], {1, 2, 3, 4}).action is DONE


def test_cancelling_while_an_adding_replica_leads_moves_leadership_back_first() -> None:
    """The module docstring's example."""
    p = Partition(moving([2, 3, 4, 1], [4], [1]), PartitionStateData(4, 2, (1, 2, 3, 4), 1))
    step = p.step(None, {1, 2, 3, 4})
    assert step.action is MOVE
    assert p.summary() == ((2, 3, 4, 1), 2, (1, 2, 3, 4), 3)
    step = p.step(None, {1, 2, 3, 4})
    assert (step.action, step.removed_replicas) == (ADD, (4,))
    assert p.summary() == ((2, 3, 1), 2, (1, 2, 3), 4)
    assert p.step(None, {1, 2, 3, 4}).action is DONE


def test_cancelling_without_an_original_replica_in_sync_waits() -> None:
    """Kafka would take the leader offline; stopping the only in-sync replicas would
    lose acknowledged records, so the cancellation waits."""
    p = Partition(moving([4, 1], [4], [1]), PartitionStateData(4, 5, (4,), 1))
    step = p.step(None, {1, 4})
    assert (step.action, step.state) == (WAIT, None)
    assert p.summary() == ((4, 1), 4, (4,), 5)
    p.state = PartitionStateData(LEADER_NONE, 6, (4,), 1)  # 4 died, still the last ISR
    assert p.step(None, {1}).action is WAIT


def test_cancelling_a_shrink_restores_the_removed_replica() -> None:
    p = fresh([1, 2, 3])
    p.step([1, 2], {1, 2, 3})
    assert p.assignment == moving([1, 2, 3], [], [3])
    step = p.step(None, {1, 2, 3})
    assert (step.action, step.removed_replicas) == (ADD, ())
    assert p.assignment == ReplicaAssignment((1, 2, 3))
    assert p.step(None, {1, 2, 3}).action is DONE


def test_a_new_target_replaces_the_running_one_from_the_original_replicas() -> None:
    p = fresh([1, 2, 3])
    p.step([2, 3, 4], {1, 2, 3, 4, 5})
    step = p.step([2, 3, 5], {1, 2, 3, 4, 5})
    assert (step.action, step.new_replicas, step.removed_replicas) == (ADD, (5,), (4,))
    assert p.assignment == moving([2, 3, 5, 1], [5], [1])


def test_cancelling_nothing_running_is_done_at_once() -> None:
    p = fresh([1, 2, 3])
    assert p.step(None, {1, 2, 3}).action is DONE


# -- property: any reassignment with live brokers completes safely ---------------------------

brokers_st = st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=5, unique=True)


@given(original=brokers_st, target=brokers_st)
def test_every_reassignment_completes_without_losing_in_sync_replicas(
    original: list[int], target: list[int]
) -> None:
    live = set(range(7))
    p = fresh(original)
    epochs = [p.state.leader_epoch]
    actions = []
    for _ in range(8):
        before = p.state
        step = p.step(target, live)
        actions.append(step.action)
        if step.state is not None:
            epochs.append(step.state.leader_epoch)
        # Safety after every step: leader in the ISR, the ISR inside RS, and removals
        # only once every target replica is in sync and leads.
        assert p.state.leader in p.state.isr
        assert set(p.state.isr) <= set(p.replicas)
        if step.action is REMOVE:
            assert set(target) <= set(before.isr)
            assert p.state.leader in target
            assert p.state.leader not in step.removed_replicas
            assert set(step.removed_replicas) == set(original) - set(target)
        if step.action is WAIT:
            p.leader_expands_isr(*p.replicas)
        if step.action is DONE:
            break
    assert actions[-1] is DONE
    assert len(actions) <= 5
    assert p.replicas == tuple(target)
    assert set(p.state.isr) == set(target)
    assert epochs == sorted(set(epochs))  # strictly increasing


@given(original=brokers_st, target=brokers_st, cancel_after=st.integers(min_value=0, max_value=4))
def test_every_cancellation_returns_to_the_original_replicas_safely(
    original: list[int], target: list[int], cancel_after: int
) -> None:
    """Cancel after any number of steps: the partition ends on the original replicas (or
    the reassignment had already finished), never with a leader outside the ISR or an ISR
    member stopped while it is the only copy."""
    live = set(range(7))
    p = fresh(original)
    for _ in range(cancel_after):
        if p.step(target, live).action is WAIT:
            p.leader_expands_isr(*p.replicas)
    finished = not p.assignment.is_being_reassigned and set(p.replicas) == set(target)
    expected = set(p.replicas) if finished else set(original)
    for _ in range(5):
        before = p.state
        step = p.step(None, live)
        assert p.state.leader in p.state.isr
        assert set(p.state.isr) <= set(p.replicas)
        assert before.leader not in step.removed_replicas or step.action is MOVE
        assert set(before.isr) - set(step.removed_replicas)
        if step.action is DONE:
            break
    assert step.action is DONE
    assert set(p.replicas) == expected
    assert not p.assignment.is_being_reassigned
