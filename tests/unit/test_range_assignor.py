"""Kafka's RangeAssignor: contiguous ranges per topic, the first P % C members one extra."""

from __future__ import annotations

import pytest

from client.range_assignor import range_assign
from proto.topic_partition import TopicPartition


def tps(topic: str, *partitions: int) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in partitions]


def test_kafka_example_two_members_two_topics_of_three_partitions() -> None:
    result = range_assign({"C0": {"t0", "t1"}, "C1": {"t0", "t1"}}, {"t0": 3, "t1": 3})
    assert result == {
        "C0": tps("t0", 0, 1) + tps("t1", 0, 1),
        "C1": tps("t0", 2) + tps("t1", 2),
    }


def test_members_are_sorted_by_id_not_by_insertion_order() -> None:
    result = range_assign({"b": {"t"}, "a": {"t"}}, {"t": 3})
    assert result == {"a": tps("t", 0, 1), "b": tps("t", 2)}


@pytest.mark.parametrize(
    ("partitions", "members", "expected_sizes"),
    [
        (6, 3, [2, 2, 2]),
        (6, 2, [3, 3]),
        (7, 3, [3, 2, 2]),
        (8, 3, [3, 3, 2]),
        (2, 3, [1, 1, 0]),
        (1, 1, [1]),
        (10, 4, [3, 3, 2, 2]),
    ],
)
def test_uneven_splits_give_the_first_members_one_more(
    partitions: int, members: int, expected_sizes: list[int]
) -> None:
    ids = [f"c{i}" for i in range(members)]
    result = range_assign({m: {"t"} for m in ids}, {"t": partitions})
    assert [len(result[m]) for m in ids] == expected_sizes
    flattened = [tp for m in ids for tp in result[m]]
    # Contiguous ranges in member order cover every partition exactly once.
    assert flattened == tps("t", *range(partitions))


def test_each_topic_is_split_among_its_own_subscribers() -> None:
    result = range_assign(
        {"c0": {"a"}, "c1": {"a", "b"}, "c2": {"b"}},
        {"a": 4, "b": 3},
    )
    assert result == {
        "c0": tps("a", 0, 1),
        "c1": tps("a", 2, 3) + tps("b", 0, 1),
        "c2": tps("b", 2),
    }


def test_a_missing_topic_or_one_without_partitions_assigns_nothing() -> None:
    result = range_assign({"c0": {"a", "ghost"}, "c1": {"a"}}, {"a": 2, "empty": 0})
    assert result == {"c0": tps("a", 0), "c1": tps("a", 1)}


def test_no_members_and_unsubscribed_topics() -> None:
    assert range_assign({}, {"t": 3}) == {}
    assert range_assign({"c0": {"x"}}, {"t": 3}) == {"c0": []}


def test_every_member_computes_the_same_assignment() -> None:
    """The group agrees without talking: the result depends only on the inputs' content."""
    subscriptions = {f"g_host-{i}": {"t0", "t1"} for i in range(5)}
    counts = {"t0": 12, "t1": 7}
    reordered = dict(reversed(list(subscriptions.items())))
    assert range_assign(subscriptions, counts) == range_assign(reordered, counts)
