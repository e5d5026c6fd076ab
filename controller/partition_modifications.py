"""What the controller does when a topic's replica assignment changes (Kafka's
``PartitionModificationsHandler`` and ``processPartitionModifications``).

``minibroker topics alter T --partitions N`` (Kafka 2.x's ``AdminZkClient.addPartitions``)
writes the topic's extended assignment to ``/brokers/topics/<t>``; the controller, which
watches every topic's znode, compares it with the partitions it knows:

- new partitions are initialised as at topic creation (NewPartition -> OnlinePartition:
  leader epoch 0, leader the first live assigned replica, ISR the live assigned replicas),
  their state znodes written, and LeaderAndIsr and UpdateMetadata sent;
- changed replica lists of known partitions are ignored (reassignment goes through
  ``/admin/reassign_partitions``, which writes this znode itself when done);
- while the topic is being deleted nothing may be added: the assignment is restored to the
  known partitions (Kafka's ``restorePartitionReplicaAssignment``), so the deletion
  removes every replica it started with.

Pure decision; the effects are :class:`controller.kafka_controller.KafkaController`'s.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple

__all__ = ["PartitionModification", "partition_modification"]


class PartitionModification(NamedTuple):
    """The controller's answer to a changed topic assignment."""

    added: dict[int, list[int]]
    """New partitions to initialise, with their replicas (assignment order)."""
    restore: dict[int, list[int]] | None
    """The assignment to write back (the topic is being deleted), else None."""


def partition_modification(
    known: Collection[int], current: Mapping[int, Sequence[int]], being_deleted: bool
) -> PartitionModification:
    """Compare ``current`` (``/brokers/topics/<t>`` as read now) with the partitions of the
    topic the controller knows (``known``)."""
    added = {p: list(current[p]) for p in sorted(current) if p not in known}
    if being_deleted:
        if not added:
            return PartitionModification({}, None)
        return PartitionModification(
            {}, {p: list(current[p]) for p in sorted(current) if p in known}
        )
    return PartitionModification(added, None)
