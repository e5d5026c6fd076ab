"""The controller's leader elections and controller-made ISR changes, as pure functions.

Kafka splits this in two (``kafka.controller.PartitionLeaderElectionAlgorithms`` picks a
leader; ``kafka.controller.Election`` turns the pick into a new ``LeaderAndIsr``); here
each ``*_leader_election`` function returns a :class:`LeaderElectionResult` (leader, ISR
to write, whether unclean) and :func:`elected_state` / :func:`new_leader_and_isr` turn it
into the state znode content. Nothing here reads ZooKeeper or talks to brokers, so the
event loop only fetches the current state, calls these, and writes the answer with a
conditional update on the znode's zkVersion.

Which election runs when (Kafka's ``PartitionStateMachine`` and ``KafkaController``):

==============================  =======================================  ====================
trigger                         leader                                   new ISR
==============================  =======================================  ====================
broker failure (Offline)        first live replica, in assignment        old ISR ∩ live
                                order, that is in the ISR                (``[leader]`` if
                                (unclean: first live replica)            unclean)
reassignment, leader not in     first live target replica in the ISR     unchanged
the target replicas
preferred replica election      the first assigned replica, if live      unchanged
                                and in the ISR
controlled shutdown             first assigned replica live, in the ISR  ISR minus the
                                and not shutting down                    shutting-down ones
==============================  =======================================  ====================

A new partition is not elected but initialised (:func:`initial_leader_and_isr`, Kafka's
``PartitionStateMachine.initializeLeaderAndIsrForPartitions``): leader epoch 0, ISR = all
live assigned replicas.

Every write bumps the leader epoch by one (:func:`new_leader_and_isr`, Kafka's
``LeaderAndIsr.newLeaderAndIsr``); the controller is the only writer of leader and
leader_epoch (docs/zookeeper.md), and brokers accept a LeaderAndIsr only with a larger epoch.
That includes the controller's ISR shrinks (:func:`remove_replica_from_isr`): a dead or
shutting-down follower leaves the ISR with a new epoch, so a leader that missed the
LeaderAndIsr is fenced rather than acting on the old ISR.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from proto.errors import StaleControllerEpochError
from proto.zk.znodes import LEADER_NONE, PartitionStateData

__all__ = [
    "INITIAL_LEADER_EPOCH",
    "LeaderElectionResult",
    "controlled_shutdown_leader_election",
    "elected_state",
    "initial_leader_and_isr",
    "new_leader_and_isr",
    "offline_partition_leader_election",
    "preferred_replica_leader_election",
    "reassign_partition_leader_election",
    "remove_replica_from_isr",
]

INITIAL_LEADER_EPOCH = 0
"""Leader epoch of a newly created partition (Kafka's ``LeaderAndIsr.initialLeaderEpoch``)."""


@dataclass(frozen=True, slots=True)
class LeaderElectionResult:
    """The outcome of one election (Kafka's ``ElectionResult`` without the partition)."""

    leader: int | None
    """The elected broker, or None when no replica is eligible: the election then writes
    nothing and the partition stays (or goes) offline."""
    isr: tuple[int, ...]
    """The ISR to write with ``leader``; when ``leader`` is None, the ISR as it was."""
    unclean: bool = False
    """The leader was not in the ISR (``unclean.leader.election.enable``): acknowledged
    records may be lost. Kafka counts these in ``UncleanLeaderElectionsPerSec``."""

    @property
    def elected(self) -> bool:
        return self.leader is not None


def _no_leader(isr: Iterable[int]) -> LeaderElectionResult:
    return LeaderElectionResult(None, tuple(isr))


def offline_partition_leader_election(
    assignment: Sequence[int],
    isr: Sequence[int],
    live_brokers: Collection[int],
    unclean_leader_election_enabled: bool = False,
) -> LeaderElectionResult:
    """Elect a leader for a partition whose leader died (``OfflinePartitionLeaderElection``).

    Clean: the first replica in *assignment* order (so the preferred replica wins when it
    can) that is live and in the ISR; the new ISR is the old one without the dead members.
    Only ISR members are known to hold every acknowledged record, which is why no one
    else is eligible.

    If no ISR member is live and unclean election is enabled, the first live replica
    leads with ISR ``[leader]``: the partition is available again at the price of the
    records only the dead ISR had (the design notes' availability-vs-consistency choice).
    Otherwise no leader: the election writes nothing. The leader becomes -1 when the
    dead leader's replica is then taken offline (:func:`remove_replica_from_isr`), which
    keeps the last ISR member in the ISR, so that broker's return brings the partition
    back cleanly. Kafka's ``ControllerIntegrationTest`` checks exactly this end state
    (``testLeaderAndIsrWhenEntireIsrOfflineAndUncleanLeaderElectionDisabled``: leader
    -1, epoch + 1, ISR = [the last member]).
    """
    live = set(live_brokers)
    in_isr = set(isr)
    for replica in assignment:
        if replica in live and replica in in_isr:
            return LeaderElectionResult(replica, tuple(r for r in isr if r in live))
    if unclean_leader_election_enabled:
        for replica in assignment:
            if replica in live:
                return LeaderElectionResult(replica, (replica,), unclean=True)
    return _no_leader(isr)


def reassign_partition_leader_election(
    target_replicas: Sequence[int], isr: Sequence[int], live_brokers: Collection[int]
) -> LeaderElectionResult:
    """Move leadership into a reassignment's target replicas
    (``ReassignPartitionLeaderElection``).

    Runs once all target replicas are in the ISR and the current leader is not one of
    them (or is dead): the first target replica, in target order, that is live and in the
    ISR. The ISR is unchanged; the replicas being removed leave it in the next step.
    """
    live = set(live_brokers)
    in_isr = set(isr)
    for replica in target_replicas:
        if replica in live and replica in in_isr:
            return LeaderElectionResult(replica, tuple(isr))
    return _no_leader(isr)


def preferred_replica_leader_election(
    assignment: Sequence[int], isr: Sequence[int], live_brokers: Collection[int]
) -> LeaderElectionResult:
    """Give leadership back to the preferred replica
    (``PreferredReplicaPartitionLeaderElection``).

    Only the head of the assignment is eligible, and only when live and in the ISR:
    moving leadership to a replica that is behind would truncate acknowledged records.
    The ISR is unchanged. If the preferred replica already leads, the caller skips the
    partition (Kafka answers ``ELECTION_NOT_NEEDED``).
    """
    if assignment and assignment[0] in set(live_brokers) and assignment[0] in set(isr):
        return LeaderElectionResult(assignment[0], tuple(isr))
    return _no_leader(isr)


def controlled_shutdown_leader_election(
    assignment: Sequence[int],
    isr: Sequence[int],
    live_brokers: Collection[int],
    shutting_down: Collection[int],
) -> LeaderElectionResult:
    """Move leadership off brokers that are shutting down
    (``ControlledShutdownPartitionLeaderElection``).

    The first assigned replica that is live, in the ISR and not shutting down leads; the
    new ISR drops every shutting-down broker, so the old leader cannot rejoin it on the
    way out and no acks=all write waits for a broker that is leaving. ``live_brokers``
    may include the shutting-down brokers (they are still registered). No candidate
    means no change: the broker keeps leading and retries its ControlledShutdown.
    """
    live = set(live_brokers)
    leaving = set(shutting_down)
    in_isr = set(isr)
    for replica in assignment:
        if replica in live and replica in in_isr and replica not in leaving:
            return LeaderElectionResult(replica, tuple(r for r in isr if r not in leaving))
    return _no_leader(isr)


def new_leader_and_isr(
    current: PartitionStateData, leader: int, isr: Sequence[int], controller_epoch: int
) -> PartitionStateData:
    """The state znode content after a controller decision: ``leader_epoch + 1``.

    Kafka's ``LeaderAndIsr.newLeaderAndIsr``. The epoch goes up even when only the ISR
    changes, because brokers ignore a LeaderAndIsr whose epoch is not larger than theirs.

    Raises StaleControllerEpochError if the znode was written by a newer controller:
    this controller has been replaced and must not overwrite its successor's decision
    (Kafka aborts the state change: "Leader and isr path written by another controller").
    Raises ValueError for a leader outside the ISR or an ISR naming a broker twice,
    states the algorithms above never produce.
    """
    if current.controller_epoch > controller_epoch:
        raise StaleControllerEpochError(
            f"the partition state was written by controller epoch {current.controller_epoch}, "
            f"newer than this controller's {controller_epoch}"
        )
    new_isr = tuple(isr)
    if len(set(new_isr)) != len(new_isr):
        raise ValueError(f"ISR {list(new_isr)} names a broker more than once")
    if leader != LEADER_NONE and leader not in new_isr:
        raise ValueError(f"leader {leader} is not in the ISR {list(new_isr)}")
    return PartitionStateData(
        leader=leader,
        leader_epoch=current.leader_epoch + 1,
        isr=new_isr,
        controller_epoch=controller_epoch,
    )


def elected_state(
    current: PartitionStateData, result: LeaderElectionResult, controller_epoch: int
) -> PartitionStateData | None:
    """The state to write for an election result, or None when nothing was elected."""
    if result.leader is None:
        return None
    return new_leader_and_isr(current, result.leader, result.isr, controller_epoch)


def initial_leader_and_isr(
    assignment: Sequence[int], live_brokers: Collection[int], controller_epoch: int
) -> PartitionStateData | None:
    """The first state of a new partition, or None if none of its replicas is live.

    Kafka's ``initializeLeaderAndIsrForPartitions``: the first live replica in
    assignment order leads, every live replica is in the ISR (an empty log is trivially
    in sync), and the leader epoch starts at 0. With no live replica the partition stays
    New and is initialised when one of its brokers registers.
    """
    live = set(live_brokers)
    isr = tuple(r for r in assignment if r in live)
    if not isr:
        return None
    return PartitionStateData(
        leader=isr[0], leader_epoch=INITIAL_LEADER_EPOCH, isr=isr, controller_epoch=controller_epoch
    )


def remove_replica_from_isr(
    current: PartitionStateData, replica: int, controller_epoch: int
) -> PartitionStateData | None:
    """Take a dead or shutting-down replica out of the ISR (the ``OfflineReplica``
    transition, Kafka's ``ReplicaStateMachine.doRemoveReplicasFromIsr``); None when it is
    not in the ISR (nothing to write).

    - The leader epoch is bumped (in Kafka, controller-initiated
      ISR changes do bump it), so the leader learns the smaller ISR from a LeaderAndIsr
      it cannot mistake for an old one.
    - If the replica led the partition (its offline election found no one), the leader
      becomes -1.
    - A one-member ISR is kept as is: the last in-sync replica stays recorded, so when it
      comes back the offline election can pick it cleanly instead of waiting forever or
      needing an unclean election.

    Kafka handles one replica id at a time (``handleStateChanges`` groups by replica), one
    write each; for several dead brokers call this once per broker, in a fixed order.
    """
    if replica not in current.isr:
        return None
    leader = LEADER_NONE if current.leader == replica else current.leader
    isr = current.isr if len(current.isr) == 1 else tuple(r for r in current.isr if r != replica)
    return new_leader_and_isr(current, leader, isr, controller_epoch)
