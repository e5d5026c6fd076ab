"""partition_modifications: the controller's answer to a changed topic assignment."""

from __future__ import annotations

from controller.partition_modifications import PartitionModification, partition_modification


def test_new_partitions_are_added_with_their_replicas() -> None:
    current = {0: [1, 2], 1: [2, 3], 2: [3, 1], 3: [1, 2]}
    assert partition_modification({0, 1, 2}, current, False) == PartitionModification(
        {3: [1, 2]}, None
    )


def test_changed_replicas_of_known_partitions_are_not_an_addition() -> None:
    # A completed reassignment rewrites the znode: nothing to do here.
    assert partition_modification({0, 1}, {0: [3, 1], 1: [2, 3]}, False) == (
        PartitionModification({}, None)
    )


def test_partitions_added_to_a_topic_being_deleted_are_taken_back() -> None:
    current = {0: [1], 1: [2], 2: [3]}
    assert partition_modification({0, 1}, current, True) == PartitionModification(
        {}, {0: [1], 1: [2]}
    )
    # Nothing added (e.g. our own restore firing the watch again): nothing to do.
    assert partition_modification({0, 1}, {0: [1], 1: [2]}, True) == (
        PartitionModification({}, None)
    )
