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
ADD_REPLICAS       U1 write RS = TRS + ORS; A1 bump the leader epoch and send  RS, state
                   LeaderAndIsr to RS; A2 start AR (NewReplica)
WAIT               phase A: TRS is not yet a subset of the ISR; the leader     nothing
                   adds caught-up followers and the ISR change notification
                   wakes the controller up again
MOVE_LEADER        B3 the leader is not in TRS (or is dead): elect the first   state
                   live target replica in the ISR (leader epoch + 1)
REMOVE_REPLICAS    B3 epoch bump, B4 RR -> OfflineReplica (out of the ISR),    state, RS
                   B5 StopReplica(delete) to RR, B6 write RS = TRS
DONE               B7 remove the partition from /admin/reassign_partitions,    admin znode
                   B8 UpdateMetadata to every broker
=================  ==========================================================  ===========

Example, ORS = [1, 2, 3] and TRS = [2, 3, 4] (the test walks exactly this)::

    RS            leader  ISR           epoch
    [1,2,3]       1       [1,2,3]       0      initial
    [2,3,4,1]     1       [1,2,3]       1      ADD_REPLICAS (4 starts fetching)
    [2,3,4,1]     1       [1,2,3]       1      WAIT
    [2,3,4,1]     1       [1,2,3,4]     1      (the leader adds 4 to the ISR)
    [2,3,4,1]     2       [1,2,3,4]     2      MOVE_LEADER
    [2,3,4]       2       [2,3,4]       3      REMOVE_REPLICAS (1 stops, deletes its log)
    [2,3,4]       2       [2,3,4]       3      DONE

Every step is computed from what ZooKeeper holds (RS, the state znode, the target in the
admin znode), so a new controller resumes a half-done reassignment by calling
:func:`next_reassignment_step` again. Where this differs from Kafka 2.4+:

- docs/zookeeper.md keeps the version-1 topic znode (no ``adding_replicas`` /
  ``removing_replicas``), so ORS is not stored: RR is computed as RS - TRS (the same
  set), and a reassignment that replaces a running one stops the first one's extra
  replicas at the end rather than at once.
- B3 and B4 are one write (Kafka bumps the epoch in B3 and again for each replica it
  takes out of the ISR in B4); with nothing to remove there is no B3 bump at all.
- WAIT writes nothing. Kafka repeats A1 whenever it resumes a reassignment (controller
  failover, a broker of RS registering), but both events already send every online
  replica a LeaderAndIsr with the current state.
- If no live target replica can take over in B3, this waits; Kafka carries on and
  takes the old leader offline with RR, leaving the partition without a leader.

(Kafka 2.0-2.3 called the sets OAR, RAR and AR and numbered the same steps 1-12.)
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from controller.leader_election import new_leader_and_isr, reassign_partition_leader_election
from proto.replica_assignment import InvalidReplicaAssignmentError, check_replica_list
from proto.zk.znodes import PartitionStateData

__all__ = [
    "ReassignmentAction",
    "ReassignmentStep",
    "next_reassignment_step",
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
    in REMOVE_REPLICAS: RS = TRS is the last write (Kafka's B6), so a crash in between
    leaves RS = ORS + TRS and the step is simply repeated.
    """

    action: ReassignmentAction
    replicas: tuple[int, ...]
    """RS after this step: the replica list for the topic znode and the LeaderAndIsr."""
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


def reassignment_replicas(current: Sequence[int], target: Sequence[int]) -> tuple[int, ...]:
    """RS while reassigning: the target replicas in target order, then the current ones
    not in the target (Kafka's ``ReplicaAssignment.reassignTo``). Applied to an RS that
    already contains the target it changes nothing, so resuming is idempotent."""
    in_target = set(target)
    return (*target, *(r for r in current if r not in in_target))


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
    current_replicas: Sequence[int],
    target_replicas: Sequence[int],
    state: PartitionStateData,
    live_brokers: Collection[int],
    controller_epoch: int,
) -> ReassignmentStep:
    """The next step of reassigning a partition from ``current_replicas`` (RS as now in
    ZooKeeper) to ``target_replicas`` (TRS), given its state znode and the live brokers.

    Call it when the reassignment starts, on every ISR change notification for the
    partition, when a broker of RS registers, and on controller failover; apply the step;
    call again until DONE. Raises InvalidReplicaAssignmentError for a malformed target
    and StaleControllerEpochError if a newer controller wrote the state.
    """
    check_replica_list(target_replicas, "reassignment target")
    if not current_replicas:
        raise ValueError("the partition has no replicas: it does not exist")
    current = tuple(current_replicas)
    target = tuple(target_replicas)
    in_target = set(target)
    isr = state.isr

    # Phase U + A: put TRS into RS and tell every replica (the epoch bump makes the
    # brokers accept a LeaderAndIsr whose only news is the replica list).
    full = reassignment_replicas(current, target)
    if current not in (full, target):
        new = tuple(r for r in target if r not in set(current))
        return ReassignmentStep(
            ReassignmentAction.ADD_REPLICAS,
            full,
            new_leader_and_isr(state, state.leader, isr, controller_epoch),
            new_replicas=new,
            reason=f"RS = {list(full)}; starting {list(new) or 'no new replicas'}",
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
    live = set(live_brokers)
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

    # B4-B6: drop RR from the ISR and from RS. An ISR member outside TRS when RS is
    # already TRS (the two writes of the last step applied in the wrong order) goes too.
    removed = tuple(dict.fromkeys(r for r in (*current, *isr) if r not in in_target))
    if removed:
        new_isr = tuple(r for r in isr if r in in_target)
        return ReassignmentStep(
            ReassignmentAction.REMOVE_REPLICAS,
            target,
            new_leader_and_isr(state, state.leader, new_isr, controller_epoch),
            removed_replicas=removed,
            reason=f"RS = {list(target)}; stopping {list(removed) or 'no replicas'}",
        )

    return ReassignmentStep(
        ReassignmentAction.DONE, target, None, reason=f"reassigned to {list(target)}"
    )
