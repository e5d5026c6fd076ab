"""ControllerContext: who counts as live for elections and LeaderAndIsr."""

from __future__ import annotations

from controller.controller_context import ControllerContext
from controller.request_batch import LiveBroker
from proto.topic_partition import TopicPartition
from proto.zk.znodes import PartitionState, PartitionStateData, ReplicaAssignment

TP = TopicPartition("t", 0)


def _context(leader: int) -> ControllerContext:
    ctx = ControllerContext()
    for b in (1, 2, 3):
        ctx.live_brokers[b] = LiveBroker(b, "127.0.0.1", 9090 + b, 100 + b)
    ctx.add_topic("t", {0: [3, 1, 2]})
    ctx.partition_states[TP] = PartitionState.from_data(
        PartitionStateData(leader=leader, leader_epoch=4, isr=(1, 2, 3), controller_epoch=1), 7
    )
    return ctx


def test_shutting_down_brokers_are_registered_but_not_eligible() -> None:
    ctx = _context(leader=1)
    ctx.shutting_down_brokers.add(1)
    assert set(ctx.live_brokers) == {1, 2, 3}  # still sent StopReplica and UpdateMetadata
    assert ctx.live_broker_ids() == {2, 3}
    assert ctx.live_replicas(TP) == [3, 2]  # assignment order, no LeaderAndIsr to 1
    assert not ctx.is_online(TP)  # its leader is leaving


def test_partition_is_online_only_with_a_live_leader() -> None:
    assert _context(leader=2).is_online(TP)
    assert not _context(leader=-1).is_online(TP)
    gone = _context(leader=2)
    del gone.live_brokers[2]
    assert not gone.is_online(TP)


def test_remove_topic_forgets_states_and_reassignments() -> None:
    ctx = _context(leader=1)
    ctx.reassignments[TP] = (1, 2)
    ctx.topics_being_deleted.add("t")
    ctx.remove_topic("t")
    assert not ctx.assignments
    assert not ctx.partition_states
    assert not ctx.reassignments
    assert "t" not in ctx.all_topics
    assert "t" not in ctx.topics_being_deleted


def test_reset_forgets_everything() -> None:
    ctx = _context(leader=1)
    ctx.epoch = 5
    ctx.shutting_down_brokers.add(2)
    ctx.reassignments[TP] = (1, 2)
    ctx.reset()
    assert (ctx.epoch, ctx.epoch_zk_version) == (0, -1)
    assert not ctx.live_brokers
    assert not ctx.assignments
    assert not ctx.shutting_down_brokers
    assert not ctx.reassignments


def test_a_broker_with_an_offline_log_dir_is_registered_but_its_replicas_are_offline() -> None:
    ctx = _context(leader=1)
    ctx.offline_log_dir_brokers.add(1)
    assert set(ctx.live_brokers) == {1, 2, 3}  # still sent UpdateMetadata
    assert ctx.live_broker_ids() == {2, 3}
    assert ctx.live_replicas(TP) == [3, 2]
    assert not ctx.is_online(TP)
    ctx.reset()
    assert ctx.offline_log_dir_brokers == set()


def test_full_assignment_keeps_adding_and_removing_replicas_of_a_moving_partition() -> None:
    ctx = ControllerContext()
    moving = ReplicaAssignment((2, 3, 1), adding_replicas=(3,), removing_replicas=(1,))
    ctx.add_topic("t", {0: moving, 1: ReplicaAssignment((1, 2))})
    assert ctx.assignments[TP] == [2, 3, 1]
    assert ctx.full_assignment(TP) == moving
    assert ctx.full_topic_assignment("t") == {0: moving, 1: ReplicaAssignment((1, 2))}
    assert set(ctx.reassigning) == {TP}
    # a replica list changed behind the recorded entry is not believed to be moving
    ctx.assignments[TP] = [2, 3]
    assert ctx.full_assignment(TP) == ReplicaAssignment((2, 3))
    ctx.set_full_assignment(TP, ReplicaAssignment((2, 3)))
    assert not ctx.reassigning
    ctx.set_full_assignment(TP, moving)
    ctx.remove_topic("t")
    assert not ctx.reassigning
