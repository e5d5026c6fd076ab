"""Kafka's range assignment of a consumer group's partitions (``RangeAssignor``).

Per topic, independently: the topic's partitions in index order, the members subscribed to
it sorted by id, and each member a contiguous range. With P partitions and C members, each
gets ``P // C`` partitions and the first ``P % C`` members one more. Kafka's example, two
members and two topics of three partitions each::

    C0: [t0p0, t0p1, t1p0, t1p1]
    C1: [t0p2, t1p2]

The function is pure, and every member computes it on the same view of the group (the
``/consumers/<g>/ids`` children and the topics' partition counts in ZooKeeper), so the
members agree on who owns what without talking to each other.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from proto.topic_partition import TopicPartition

__all__ = ["range_assign"]


def range_assign(
    subscriptions: Mapping[str, Collection[str]], partitions_per_topic: Mapping[str, int]
) -> dict[str, list[TopicPartition]]:
    """Member id -> its partitions, topic by topic in name order, partitions ascending.

    ``subscriptions`` maps each member to the topics it subscribes to;
    ``partitions_per_topic`` gives each topic's partition count (a topic missing from it,
    e.g. one not created yet, is assigned to nobody). Every member appears in the result,
    with an empty list when it gets nothing (more members than partitions).
    """
    assignment: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
    for topic in sorted(partitions_per_topic):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        count = partitions_per_topic[topic]
        if not members or count <= 0:
            continue
        per_member, extra = divmod(count, len(members))
        for i, member in enumerate(members):
            start = per_member * i + min(i, extra)
            length = per_member + (1 if i < extra else 0)
            assignment[member] += [TopicPartition(topic, p) for p in range(start, start + length)]
    return assignment
