"""The broker's view of the cluster, fed by UpdateMetadata (Kafka's ``MetadataCache``).

Answers ``Metadata`` requests without touching ZooKeeper: live brokers, the controller, and
each partition's leader, epoch, replicas and ISR as the controller last pushed them. Between
controller updates it may be stale; clients cope through NOT_LEADER_OR_FOLLOWER and retry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from proto.topic_partition import TopicPartition
from proto.zk.znodes import LEADER_DURING_DELETE, BrokerInfo


@dataclass(frozen=True)
class PartitionInfo:
    """What clients need to know about a partition."""

    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


class MetadataCache:
    """Live brokers and partition states as of the latest UpdateMetadata."""

    def __init__(self) -> None:
        self._brokers: dict[int, BrokerInfo] = {}
        self._partitions: dict[TopicPartition, PartitionInfo] = {}
        self._topic_sizes: dict[str, int] = {}
        """Topic -> how many of its partitions the cache holds (for :meth:`partition_count`,
        asked on every group request: a scan of 100,000 partitions each time would not do)."""
        self.controller_id = -1
        self.controller_epoch = -1
        self.local_broker_id = -1
        self.hosts: Callable[[TopicPartition], bool] | None = None
        """Whether this broker hosts a replica of a partition (the replica manager's map,
        set by it). A replica the controller assigns here that this broker does not host
        (a LeaderAndIsr that failed for it, a stopped replica) serves nothing: it is
        reported offline (:meth:`partitions_of`, :meth:`unhosted`), as Kafka reports a
        replica on an offline log dir, not left looking online."""

    def update(
        self,
        *,
        controller_id: int,
        controller_epoch: int,
        brokers: list[BrokerInfo],
        partitions: dict[TopicPartition, PartitionInfo],
    ) -> list[TopicPartition]:
        """Apply an UpdateMetadata; returns the partitions whose topic is being deleted.

        Partition states are merged (an UpdateMetadata may name only the partitions that
        changed); the broker list is replaced, as in Kafka.
        """
        self.controller_id = controller_id
        self.controller_epoch = controller_epoch
        self._brokers = {b.broker_id: b for b in brokers}
        deleted = []
        for tp, info in partitions.items():
            if info.leader == LEADER_DURING_DELETE:
                if self._partitions.pop(tp, None) is not None:
                    self._counted(tp.topic, -1)
                deleted.append(tp)
            else:
                self.add_partition(tp, info)
        return deleted

    def add_partition(self, tp: TopicPartition, info: PartitionInfo) -> None:
        """Record a partition's state outright, as an UpdateMetadata naming it does."""
        if tp not in self._partitions:
            self._counted(tp.topic, 1)
        self._partitions[tp] = info

    def _counted(self, topic: str, change: int) -> None:
        size = self._topic_sizes.get(topic, 0) + change
        if size > 0:
            self._topic_sizes[topic] = size
        else:
            self._topic_sizes.pop(topic, None)

    def partition_count(self, topic: str) -> int:
        """How many partitions of ``topic`` the cache holds (0: an unknown topic)."""
        return self._topic_sizes.get(topic, 0)

    def refresh_partition(self, tp: TopicPartition, info: PartitionInfo) -> bool:
        """Update a partition this cache already holds with what this broker learnt before
        the controller's next UpdateMetadata (a LeaderAndIsr, its own ISR change), so that
        Metadata shows a new leader as soon as it leads; False, and nothing recorded, for a
        partition the cache does not hold.

        A new partition waits for the UpdateMetadata: it names every partition of a new
        topic (or every partition CreatePartitions added) at once, a LeaderAndIsr only the
        ones this broker replicates. Recorded from a LeaderAndIsr, partition 1 of a new
        two-partition topic led here would be answered alone, and a client counts a
        topic's partitions from the answer: librdkafka took the topic for one partition and
        failed a record for partition 1 with _UNKNOWN_PARTITION. Kafka's MetadataCache
        takes nothing but UpdateMetadata; the topic stays unknown here (Metadata answers
        LEADER_NOT_AVAILABLE through auto creation, UNKNOWN_TOPIC_OR_PARTITION without)
        until all its partitions are known."""
        if tp not in self._partitions:
            return False
        self._partitions[tp] = info
        return True

    def brokers(self) -> list[BrokerInfo]:
        return sorted(self._brokers.values(), key=lambda b: b.broker_id)

    def broker(self, broker_id: int) -> BrokerInfo | None:
        return self._brokers.get(broker_id)

    def topics(self) -> set[str]:
        return {tp.topic for tp in self._partitions}

    def partitions_of(self, topic: str) -> dict[int, PartitionInfo]:
        """The topic's partitions as clients see them: this broker among the offline
        replicas of each it is assigned but does not host."""
        return {
            tp.partition: self._as_hosted(tp, info)
            for tp, info in self._partitions.items()
            if tp.topic == topic
        }

    def unhosted(self) -> list[TopicPartition]:
        """The partitions assigned to this broker that it hosts no replica of."""
        return sorted(tp for tp, info in self._partitions.items() if self._is_unhosted(tp, info))

    def _is_unhosted(self, tp: TopicPartition, info: PartitionInfo) -> bool:
        return (
            self.hosts is not None
            and self.local_broker_id in info.replicas
            and info.leader != LEADER_DURING_DELETE
            and not self.hosts(tp)
        )

    def _as_hosted(self, tp: TopicPartition, info: PartitionInfo) -> PartitionInfo:
        if self.local_broker_id in info.offline_replicas or not self._is_unhosted(tp, info):
            return info
        offline = (*info.offline_replicas, self.local_broker_id)
        return replace(info, offline_replicas=offline)

    def partition(self, tp: TopicPartition) -> PartitionInfo | None:
        return self._partitions.get(tp)

    def all_replicas(self) -> list[tuple[int, ...]]:
        """Every known partition's replicas (what the partition limits count)."""
        return [info.replicas for info in self._partitions.values()]
