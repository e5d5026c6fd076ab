"""Partition directory names and Kafka's topic name rules."""

from __future__ import annotations

import pytest

from proto.topic_partition import MAX_TOPIC_NAME_LENGTH, TopicPartition, topic_name_problem


def test_directory_name_round_trips_with_dashes_in_the_topic() -> None:
    tp = TopicPartition("orders-eu-1", 12)
    assert tp.dir_name == "orders-eu-1-12"
    assert TopicPartition.from_dir_name(tp.dir_name) == tp


@pytest.mark.parametrize("name", ["orders", "a.b_c-D9", "x" * MAX_TOPIC_NAME_LENGTH])
def test_legal_topic_names(name: str) -> None:
    assert topic_name_problem(name) is None


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "empty"),
        (".", "cannot be"),
        ("..", "cannot be"),
        ("x" * (MAX_TOPIC_NAME_LENGTH + 1), "limit is 249"),
        ("a/b", "'/'"),
        ("tópico", "'ó'"),
        ("with space", "' '"),
    ],
)
def test_illegal_topic_names_say_why(name: str, fragment: str) -> None:
    problem = topic_name_problem(name)
    assert problem is not None
    assert fragment in problem


@pytest.mark.parametrize("name", ["", "orders", "orders-x", "-1"])
def test_non_partition_directories_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="not a partition directory"):
        TopicPartition.from_dir_name(name)
