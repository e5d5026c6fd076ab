"""Partition reassignment (``/admin/reassign_partitions``) as a pure state machine.

Kafka moves a partition from its original replicas to the target ones without ever
having fewer in-sync copies than before: it first *adds* the target replicas, waits until
they are all in the ISR, moves leadership into them, and only then *removes* the old
ones. ``KafkaController.onPartitionReassignment`` (2.4+, KIP-455) names the sets:

- ORS: the original replica set; TRS: the target replica set;
- RS: the assigned replicas written to ``/brokers/topics/<t>``, ORS + TRS while the
  reassignment runs, with the target replicas first
  (``ReplicaAssignment.reassignTo``: ``(TRS ++ ORS).distinct``), so that an offline
  election during the move prefers a target replica;
- AR = TRS - ORS, the replicas being added; RR = ORS - TRS, the ones being removed.

and its phases, here one :class:`ReassignmentAction` per controller step:

=================  ==========================================================  ===========
action             Kafka's steps                                               writes
=================  ==========================================================  ===========
ADD_REPLICAS       U1 write RS = TRS + ORS with AR, RR; U3 replicas of a       state, RS
                   replaced or cancelled reassignment leave the ISR and stop;
                   A1 bump the leader epoch and send LeaderAndIsr to RS;
                   A2 start AR (NewReplica)
WAIT               phase A: TRS is not yet a subset of the ISR; the leader     nothing
                   adds caught-up followers and the ISR change notification
                   wakes the controller up again
MOVE_LEADER        B3 the leader is not in TRS (or is dead): elect the first   state
                   live target replica in the ISR (leader epoch + 1); also
                   before U3 when the leader is one of the replicas that go
REMOVE_REPLICAS    B3 epoch bump, B4 RR -> OfflineReplica (out of the ISR),    state, RS
                   B5 StopReplica(delete) to RR, B6 write RS = TRS, AR = RR =
                   [] (the topic znode's entry is no longer reassigning)
DONE               B7 remove the partition from /admin/reassign_partitions,    admin znode
                   B8 UpdateMetadata to every broker
=================  ==========================================================  ===========

Example, ORS = [1, 2, 3] and TRS = [2, 3, 4] (the test walks exactly this)::

    RS (AR / RR)              leader  ISR           epoch
    [1,2,3]                   1       [1,2,3]       0      initial
    [2,3,4,1] ([4] / [1])     1       [1,2,3]       1      ADD_REPLICAS (4 starts fetching)
    [2,3,4,1] ([4] / [1])     1       [1,2,3]       1      WAIT
    [2,3,4,1] ([4] / [1])     1       [1,2,3,4]     1      (the leader adds 4 to the ISR)
    [2,3,4,1] ([4] / [1])     2       [1,2,3,4]     2      MOVE_LEADER
    [2,3,4]                   2       [2,3,4]       3      REMOVE_REPLICAS (1 stops)
    [2,3,4]                   2       [2,3,4]       3      DONE

Every step is computed from what ZooKeeper holds (RS with AR and RR in the version-2
topic znode, the state znode, the target in the admin znode), so a new controller resumes
a half-done reassignment by calling :func:`next_reassignment_step` again.

**Replacing and cancelling** (``KafkaController.updateCurrentReassignment``): the new
full assignment is always computed from the *original* replicas ORS = RS - AR
(``ReplicaAssignment.reassignTo``). Replicas of RS that are no longer in it (the adding
replicas of a replaced or cancelled reassignment) leave the ISR and are stopped in the
same step that writes the new assignment. A cancellation (AlterPartitionReassignments with
null replicas) is a reassignment to ORS: AR and RR come out empty, the adding replicas go,
and nothing waits for the ISR, since ORS is what the partition had. ORS comes back in
RS's order (target first), not necessarily the original order, as in Kafka (its
``updateCurrentReassignment`` says so). Example, cancelling [1, 2, 3] -> [2, 3, 4] while
broker 4 leads::

    RS (AR / RR)              leader  ISR           epoch
    [2,3,4,1] ([4] / [1])     4       [1,2,3,4]     2      running, 4 leads
    [2,3,4,1] ([4] / [1])     2       [1,2,3,4]     3      MOVE_LEADER (first live ORS in ISR)
    [2,3,1]                   2       [1,2,3]       4      ADD_REPLICAS (4 stops)
    [2,3,1]                   2       [1,2,3]       4      DONE

Where this differs from Kafka 2.4+:

- Kafka writes RS first and then takes the unneeded replicas offline, leaving the
  partition without a leader until B3 when one of them led; here leadership first moves to
  a live in-sync replica of the new RS, and the step waits while there is none.
- B3 and B4 are one write (Kafka bumps the epoch in B3 and again for each replica it
  takes out of the ISR in B4).
- WAIT writes nothing. Kafka repeats A1 whenever it resumes a reassignment (controller
  failover, a broker of RS registering), but both events already send every online
  replica a LeaderAndIsr with the current state.
- If no live target replica can take over in B3, this waits; Kafka carries on and
  takes the old leader offline with RR, leaving the partition without a leader.
- Kafka keeps a reassignment that only reorders ORS (no AR, no RR) out of its
  in-progress list; so does this: it is written and done in one step.

(Kafka 2.0-2.3 called the sets OAR, RAR and AR and numbered the same steps 1-12.)
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from controller.leader_election import new_leader_and_isr, reassign_partition_leader_election
from proto.replica_assignment import InvalidReplicaAssignmentError, check_replica_list
from proto.zk.znodes import PartitionStateData, ReplicaAssignment

__all__ = [
    "ReassignmentAction",
    "ReassignmentStep",
    "next_reassignment_step",
    "reassign_to",
    "reassignment_replicas",
    "validate_reassignment",
]


class ReassignmentAction(enum.Enum):
    """What the controller does next for one reassigning partition."""

    ADD_REPLICAS = "add_replicas"
    WAIT = "wait"
    MOVE_LEADER = "move_leader"
    REMOVE_REPLICAS = "remove_replicas"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class ReassignmentStep:
    """One step of a reassignment: what to write, and to whom to talk.

    The event loop writes ``state`` (if any) to the state znode first, with a conditional
    update, then ``replicas`` to the topic znode if it changed, then sends LeaderAndIsr to
    ``replicas`` and StopReplica(delete=True) to ``removed_replicas``. State first matters
    in REMOVE_REPLICAS and when ADD_REPLICAS drops replicas: the topic znode is the last
    write (Kafka's B6), so a crash in between leaves the old RS, AR and RR (the original
    replicas still known) and the step is simply repeated.
    """

    action: ReassignmentAction
    assignment: ReplicaAssignment
    """RS, AR and RR after this step: the topic znode's entry and the LeaderAndIsr's."""
    state: PartitionStateData | None
    """The new state znode content (leader epoch + 1), or None: nothing to write."""
    new_replicas: tuple[int, ...] = ()
    """ADD_REPLICAS: replicas joining RS, to be started (they get LeaderAndIsr)."""
    removed_replicas: tuple[int, ...] = ()
    """REMOVE_REPLICAS: replicas leaving RS and the ISR, to be stopped and deleted."""
    waiting_for: tuple[int, ...] = ()
    """WAIT: target replicas not yet in the ISR (or with no live one able to lead)."""
    reason: str = ""
    """One line for the controller's log."""

    @property
    def replicas(self) -> tuple[int, ...]:
        """RS after this step."""
        return self.assignment.replicas


def reassignment_replicas(current: Sequence[int], target: Sequence[int]) -> tuple[int, ...]:
    """RS while reassigning: the target replicas in target order, then the current ones
    not in the target (Kafka's ``ReplicaAssignment.reassignTo``). Applied to an RS that
    already contains the target it changes nothing, so resuming is idempotent."""
    in_target = set(target)
    return (*target, *(r for r in current if r not in in_target))


def reassign_to(current: ReplicaAssignment, target: Sequence[int]) -> ReplicaAssignment:
    """The full assignment of reassigning ``current`` to ``target`` (Kafka's
    ``ReplicaAssignment.reassignTo``): RS = TRS + ORS, AR = RS - ORS, RR = RS - TRS, with
    ORS the *original* replicas of ``current`` (a running reassignment is replaced, not
    stacked). ``reassign_to(current, current.origin_replicas)`` is the cancellation."""
    origin = current.origin_replicas
    full = reassignment_replicas(origin, target)
    return ReplicaAssignment(
        full,
        tuple(r for r in full if r not in origin),
        tuple(r for r in full if r not in set(target)),
    )


def validate_reassignment(
    current: Sequence[int], target: Sequence[int], live_brokers: Collection[int]
) -> None:
    """Refuse a target before the reassignment starts (``KafkaController.validateReplicas``).

    The target must be a non-empty list of distinct broker ids, and the replicas it adds
    must be live: a replica that never starts can never join the ISR, and the
    reassignment would wait forever. Replicas already assigned may be down; the
    reassignment waits for them as any ISR would.
    """
    check_replica_list(target, "reassignment target")
    live = set(live_brokers)
    assigned = set(current)
    dead = [r for r in target if r not in assigned and r not in live]
    if dead:
        raise InvalidReplicaAssignmentError(
            f"reassignment target {list(target)} adds broker(s) "
            f"{', '.join(map(str, dead))} that are not live"
        )


def next_reassignment_step(
    current: ReplicaAssignment,
    target_replicas: Sequence[int] | None,
    state: PartitionStateData,
    live_brokers: Collection[int],
    controller_epoch: int,
) -> ReassignmentStep:
    """The next step of reassigning a partition from ``current`` (its entry of the topic
    znode as now in ZooKeeper) to ``target_replicas`` (TRS; None cancels the running
    reassignment: TRS = ORS), given its state znode and the live brokers.

    Call it when the reassignment starts, on every ISR change notification for the
    partition, when a broker of RS registers, and on controller failover; apply the step;
    call again until DONE. Raises InvalidReplicaAssignmentError for a malformed target
    and StaleControllerEpochError if a newer controller wrote the state.
    """
    if not current.replicas:
        raise ValueError("the partition has no replicas: it does not exist")
    target = current.origin_replicas if target_replicas is None else tuple(target_replicas)
    check_replica_list(target, "reassignment target")
    wanted = reassign_to(current, target)
    in_target = set(target)
    isr = state.isr
    live = set(live_brokers)

    # Phase U: write RS, AR, RR. Replicas of RS not in the new RS (a replaced or
    # cancelled reassignment's adding replicas) leave the ISR and stop in the same step,
    # but never while they lead: leadership moves first, to a live in-sync replica of
    # the new RS (target first, so a cancellation prefers the original order).
    if current != wanted:
        unneeded = tuple(r for r in current.replicas if r not in set(wanted.replicas))
        if state.leader in unneeded:
            heir = reassign_partition_leader_election(wanted.replicas, isr, live)
            if heir.leader is None:
                return ReassignmentStep(
                    ReassignmentAction.WAIT,
                    current,
                    None,
                    waiting_for=wanted.replicas,
                    reason=f"leader {state.leader} leaves RS, and no live replica of "
                    f"{list(wanted.replicas)} in the ISR {list(isr)} can take over",
                )
            return ReassignmentStep(
                ReassignmentAction.MOVE_LEADER,
                current,
                new_leader_and_isr(state, heir.leader, heir.isr, controller_epoch),
                reason=f"leader {state.leader} -> {heir.leader} (it leaves RS)",
            )
        new_isr = tuple(r for r in isr if r not in unneeded)
        if not new_isr:
            return ReassignmentStep(
                ReassignmentAction.WAIT,
                current,
                None,
                waiting_for=wanted.replicas,
                reason=f"no replica of {list(wanted.replicas)} is in the ISR {list(isr)}",
            )
        new = tuple(r for r in wanted.adding_replicas if r not in set(current.replicas))
        return ReassignmentStep(
            ReassignmentAction.ADD_REPLICAS,
            wanted,
            new_leader_and_isr(state, state.leader, new_isr, controller_epoch),
            new_replicas=new,
            removed_replicas=unneeded,
            reason=f"RS = {list(wanted.replicas)} (adding {list(wanted.adding_replicas)}, "
            f"removing {list(wanted.removing_replicas)}); starting {list(new) or 'none'}"
            + (f", stopping {list(unneeded)}" if unneeded else ""),
        )

    if not current.is_being_reassigned:
        stray = tuple(r for r in isr if r not in in_target)
        if stray and state.leader not in stray:  # hand-edited znodes only
            return ReassignmentStep(
                ReassignmentAction.REMOVE_REPLICAS,
                current,
                new_leader_and_isr(
                    state, state.leader, tuple(r for r in isr if r in in_target), controller_epoch
                ),
                removed_replicas=stray,
                reason=f"ISR members {list(stray)} are not assigned",
            )
        return ReassignmentStep(
            ReassignmentAction.DONE, current, None, reason=f"reassigned to {list(target)}"
        )

    # Phase A: the old replicas must stay until every target replica holds every
    # acknowledged record, i.e. is in the ISR.
    missing = tuple(r for r in target if r not in isr)
    if missing:
        return ReassignmentStep(
            ReassignmentAction.WAIT,
            current,
            None,
            waiting_for=missing,
            reason=f"waiting for {list(missing)} to join the ISR {list(isr)}",
        )

    # B3: the leader must be a live target replica before the old replicas go.
    if state.leader not in in_target or state.leader not in live:
        election = reassign_partition_leader_election(target, isr, live)
        if election.leader is None:
            # Kafka would carry on and take the old leader offline; waiting for a target
            # replica to come back keeps the partition available meanwhile.
            return ReassignmentStep(
                ReassignmentAction.WAIT,
                current,
                None,
                waiting_for=target,
                reason=f"no live target replica of {list(target)} can take over leadership",
            )
        return ReassignmentStep(
            ReassignmentAction.MOVE_LEADER,
            current,
            new_leader_and_isr(state, election.leader, election.isr, controller_epoch),
            reason=f"leader {state.leader} -> {election.leader}",
        )

    # B4-B6: drop RR from the ISR, then write RS = TRS with AR = RR = [] (the last write:
    # until it lands, the znode still names the original replicas).
    removed = tuple(dict.fromkeys(r for r in (*current.replicas, *isr) if r not in in_target))
    new_isr = tuple(r for r in isr if r in in_target)
    return ReassignmentStep(
        ReassignmentAction.REMOVE_REPLICAS,
        ReplicaAssignment(target),
        new_leader_and_isr(state, state.leader, new_isr, controller_epoch),
        removed_replicas=removed,
        reason=f"RS = {list(target)}; stopping {list(removed) or 'no replicas'}",
    )
