"""broker.coordinator.consumer_protocol: the partitions of a consumer protocol assignment,
as Kafka's clients encode it (every version alike, trailing fields of newer versions ignored)."""

from __future__ import annotations

import struct

import pytest

from broker.coordinator.consumer_protocol import ConsumerProtocolError, decode_assignment
from proto.topic_partition import TopicPartition


def assignment(version: int, topics: list[tuple[str, list[int]]], tail: bytes = b"") -> bytes:
    """Kafka's layout: version, [topic, [partition]], user_data (null), then ``tail``."""
    out = struct.pack(">hi", version, len(topics))
    for topic, partitions in topics:
        name = topic.encode()
        out += struct.pack(">h", len(name)) + name
        out += struct.pack(f">i{len(partitions)}i", len(partitions), *partitions)
    return out + struct.pack(">i", -1) + tail


def test_the_partitions_of_each_topic_in_the_order_listed() -> None:
    data = assignment(0, [("orders", [2, 0]), ("audit", [1])])
    assert decode_assignment(data) == [
        TopicPartition("orders", 2),
        TopicPartition("orders", 0),
        TopicPartition("audit", 1),
    ]


def test_a_newer_version_with_more_after_the_user_data_decodes_the_same() -> None:
    data = assignment(3, [("t", [0])], tail=b"\x00\x01later fields")
    assert decode_assignment(data) == [TopicPartition("t", 0)]


def test_no_bytes_and_no_topics_are_no_partitions() -> None:
    assert decode_assignment(b"") == []
    assert decode_assignment(assignment(1, [])) == []


@pytest.mark.parametrize(
    "data",
    [
        b"\x00",  # shorter than the version
        assignment(0, [("t", [0, 1])])[:-7],  # ends inside a partition
        struct.pack(">hi", 0, 1_000_000),  # more topics than bytes
        struct.pack(">hih", 0, 1, 2) + b"\xff\xfe" + struct.pack(">i", 0),  # not UTF-8
        struct.pack(">hi", -1, 0),  # a negative version
    ],
    ids=["short", "truncated", "huge-count", "not-utf8", "negative-version"],
)
def test_bytes_that_are_not_an_assignment_are_an_error(data: bytes) -> None:
    with pytest.raises(ConsumerProtocolError):
        decode_assignment(data)
