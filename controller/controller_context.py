"""The active controller's cache of the cluster (Kafka's ``ControllerContext``).

Filled from ZooKeeper when a broker becomes controller and kept up to date by the event
loop (:mod:`controller.kafka_controller`), which is its only user: one event at a time, so
no locking. ZooKeeper stays the source of truth; the cache is what the controller decides
from between reads, and it is dropped when the controller resigns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from controller.request_batch import LiveBroker
from proto.topic_partition import TopicPartition
from proto.zk.znodes import LEADER_NONE, PartitionState, ReplicaAssignment

__all__ = ["ControllerContext"]


@dataclass(slots=True)
class ControllerContext:
    """What the controller knows of the cluster while it is active."""

    epoch: int = 0
    """This controller's epoch (0 before the first election)."""
    epoch_zk_version: int = -1
    """``/controller_epoch``'s zkVersion after our election (the fencing token)."""
    live_brokers: dict[int, LiveBroker] = field(default_factory=dict)
    """Registered brokers by id, each with its broker epoch (registration czxid)."""
    all_topics: set[str] = field(default_factory=set)
    assignments: dict[TopicPartition, list[int]] = field(default_factory=dict)
    """Each partition's replicas in assignment order (first = preferred)."""
    partition_states: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    """The state znodes as last read or written, with their zkVersions."""
    topics_being_deleted: set[str] = field(default_factory=set)
    shutting_down_brokers: set[int] = field(default_factory=set)
    """Brokers in a controlled shutdown: still registered, but no longer elected, and not
    sent LeaderAndIsr (Kafka's ``shuttingDownBrokerIds``)."""
    offline_log_dir_brokers: set[int] = field(default_factory=set)
    """Brokers whose log dir went offline (a ``/log_dir_event_notification``): still
    registered, but their replicas are offline (Kafka's OfflineReplica) until they register
    anew, so they are neither elected nor sent LeaderAndIsr."""
    reassignments: dict[TopicPartition, tuple[int, ...]] = field(default_factory=dict)
    """Partitions being reassigned, with their target replicas."""
    reassigning: dict[TopicPartition, ReplicaAssignment] = field(default_factory=dict)
    """The topic znode's entry of each partition with adding or removing replicas (the
    only place the original replicas are kept); the others are just ``assignments``."""

    def reset(self) -> None:
        """Forget everything (on resignation)."""
        self.epoch, self.epoch_zk_version = 0, -1
        self.live_brokers.clear()
        self.all_topics.clear()
        self.assignments.clear()
        self.partition_states.clear()
        self.topics_being_deleted.clear()
        self.shutting_down_brokers.clear()
        self.offline_log_dir_brokers.clear()
        self.reassignments.clear()
        self.reassigning.clear()

    def live_broker_ids(self) -> set[int]:
        """Brokers that can be elected or join an ISR: registered, not shutting down, and
        with their log dir online."""
        return set(self.live_brokers) - self.shutting_down_brokers - self.offline_log_dir_brokers

    def add_topic(
        self, topic: str, assignment: Mapping[int, Iterable[int] | ReplicaAssignment]
    ) -> None:
        self.all_topics.add(topic)
        for partition, replicas in assignment.items():
            tp = TopicPartition(topic, partition)
            if isinstance(replicas, ReplicaAssignment):
                self.set_full_assignment(tp, replicas)
            else:
                self.assignments[tp] = list(replicas)

    def full_assignment(self, tp: TopicPartition) -> ReplicaAssignment:
        """``tp``'s replicas with its adding and removing replicas (Kafka's
        ``partitionFullReplicaAssignment``)."""
        replicas = tuple(self.assignments.get(tp, ()))
        known = self.reassigning.get(tp)
        if known is not None and known.replicas == replicas:
            return known
        return ReplicaAssignment(replicas)

    def set_full_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        self.assignments[tp] = list(assignment.replicas)
        if assignment.is_being_reassigned:
            self.reassigning[tp] = assignment
        else:
            self.reassigning.pop(tp, None)

    def full_topic_assignment(self, topic: str) -> dict[int, ReplicaAssignment]:
        """Every partition of ``topic`` as its znode is to be written."""
        return {tp.partition: self.full_assignment(tp) for tp in self.partitions_of_topic(topic)}

    def remove_topic(self, topic: str) -> None:
        self.all_topics.discard(topic)
        self.topics_being_deleted.discard(topic)
        for tp in self.partitions_of_topic(topic):
            self.assignments.pop(tp, None)
            self.partition_states.pop(tp, None)
            self.reassignments.pop(tp, None)
            self.reassigning.pop(tp, None)

    def partitions_of_topic(self, topic: str) -> list[TopicPartition]:
        return sorted(tp for tp in self.assignments if tp.topic == topic)

    def partitions_on_broker(self, broker_id: int) -> list[TopicPartition]:
        """Partitions with a replica assigned to ``broker_id``."""
        return sorted(tp for tp, replicas in self.assignments.items() if broker_id in replicas)

    def live_replicas(self, tp: TopicPartition) -> list[int]:
        """The live replicas of ``tp`` not shutting down, in assignment order: the
        recipients of its LeaderAndIsr."""
        live = self.live_broker_ids()
        return [r for r in self.assignments.get(tp, ()) if r in live]

    def is_online(self, tp: TopicPartition) -> bool:
        """``tp`` has a state whose leader is a live broker."""
        state = self.partition_states.get(tp)
        return (
            state is not None
            and state.leader != LEADER_NONE
            and state.leader in self.live_brokers
            and state.leader not in self.shutting_down_brokers
            and state.leader not in self.offline_log_dir_brokers
        )
