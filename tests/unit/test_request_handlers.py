"""broker.request_handlers: the ListOffsets specs each version may ask for, refused as
Kafka refuses them before any log is read."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from broker.replication.replica_manager import ReplicaManager
from broker.request_handlers import UNSUPPORTED_VERSION, list_partition_offset
from proto.topic_partition import TopicPartition

TP = TopicPartition("t", 0)


class Answering:
    """Stands in for the ReplicaManager: answers every lookup and records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    async def list_offset(
        self, tp: TopicPartition, *args: Any, **kwargs: Any
    ) -> tuple[int, int, int, int]:
        self.asked.append(args[1])
        return 0, 7, 1234, 3


@pytest.mark.parametrize(
    ("timestamp", "version", "served"),
    [
        (-1, 1, True),
        (-2, 1, True),
        (0, 1, True),
        (3000000, 6, True),
        (-3, 6, False),  # KIP-734's max timestamp is v7's
        (-3, 7, True),
        (-4, 7, False),  # earliest-local (v8) and latest-tiered (v9) are not served
        (-5, 7, False),
        (-17, 7, False),
    ],
)
def test_negative_timestamps_are_served_from_the_version_that_has_them(
    timestamp: int, version: int, served: bool
) -> None:
    manager = Answering()
    answer = asyncio.run(
        list_partition_offset(
            cast(ReplicaManager, manager), TP, None, timestamp, -1, version=version
        )
    )
    if served:
        assert answer == (0, 7, 1234, 3)
        assert manager.asked == [timestamp]
    else:
        assert answer == (UNSUPPORTED_VERSION, -1, -1, -1)
        assert manager.asked == []


def test_the_grpc_front_door_speaks_the_latest_version() -> None:
    manager = Answering()
    asyncio.run(list_partition_offset(cast(ReplicaManager, manager), TP, None, -3, -1))
    assert manager.asked == [-3]
