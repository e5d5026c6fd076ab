"""consumer_groups: the describe rows (lag) and the reset plan (clamping as Kafka's
ConsumerGroupCommand), reading a group whose members leave while it is read, and the
command's parsing and table layout."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from client.admin import AdminClient
from client.consumer_groups import (
    ConsumerGroupService,
    PartitionRow,
    ResetSpec,
    describe_rows,
    plan_reset,
)
from client.consumer_groups_cli import format_plan, format_table, parse_topic_options
from client.metadata import ClientError
from proto.topic_partition import TopicPartition

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


def test_lag_is_log_end_minus_committed_and_unknown_where_either_is() -> None:
    rows = describe_rows(
        "g",
        [T2, T0, T1],
        committed={T0: 4, T1: 7},
        log_end={T0: 10, T2: 5},
        owners={T0: "g_host-1"},
    )
    assert rows == [
        PartitionRow("g", "t", 0, 4, 10, 6, "g_host-1"),
        PartitionRow("g", "t", 1, 7, None, None, None),
        PartitionRow("g", "t", 2, None, 5, None, None),
    ]


def test_a_commit_above_the_log_end_shows_a_negative_lag_as_kafka_does() -> None:
    [row] = describe_rows("g", [T0], {T0: 12}, {T0: 10}, {})
    assert row.lag == -2


EARLIEST = {T0: 5, T1: 0}
LATEST = {T0: 20, T1: 8}


def test_earliest_latest_and_current() -> None:
    parts = [T0, T1]
    assert plan_reset(parts, ResetSpec("earliest"), {}, EARLIEST, LATEST) == ({T0: 5, T1: 0}, [])
    assert plan_reset(parts, ResetSpec("latest"), {}, EARLIEST, LATEST) == ({T0: 20, T1: 8}, [])
    # --to-current: the committed offset, the log end where there is none.
    assert plan_reset(parts, ResetSpec("current"), {T0: 7}, EARLIEST, LATEST) == (
        {T0: 7, T1: 8},
        [],
    )


def test_to_offset_beyond_the_log_is_clamped_with_kafkas_warnings() -> None:
    plan, warnings = plan_reset([T0, T1], ResetSpec("offset", 10), {}, EARLIEST, LATEST)
    assert plan == {T0: 10, T1: 8}
    assert warnings == [
        "WARN: New offset (10) is higher than latest offset for topic partition t-1. "
        "Value will be set to 8"
    ]
    plan, warnings = plan_reset([T0], ResetSpec("offset", 2), {}, EARLIEST, LATEST)
    assert plan == {T0: 5}
    assert warnings == [
        "WARN: New offset (2) is lower than earliest offset for topic partition t-0. "
        "Value will be set to 5"
    ]


def test_shift_by_moves_the_committed_offset_and_is_clamped_too() -> None:
    plan, warnings = plan_reset([T0, T1], ResetSpec("shift", -3), {T0: 10, T1: 2}, EARLIEST, LATEST)
    assert plan == {T0: 7, T1: 0}
    assert len(warnings) == 1
    with pytest.raises(ClientError, match="no current committed offset"):
        plan_reset([T0], ResetSpec("shift", 1), {}, EARLIEST, LATEST)


def test_topic_options_name_topics_or_some_of_their_partitions() -> None:
    assert parse_topic_options(["a", "b:2,0", "b:1"]) == {"a": None, "b": [0, 1, 2]}
    assert parse_topic_options(["a:1", "a"]) == {"a": None}
    for bad in ("a:", "a:x", "a:1,-2"):
        with pytest.raises(ClientError, match="expected TOPIC"):
            parse_topic_options([bad])


def test_tables_have_kafkas_columns_as_wide_as_their_cells() -> None:
    rows = [PartitionRow("grp", "orders", 0, 4, 10, 6, None)]
    assert format_table(rows) == [
        "GROUP TOPIC  PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID",
        "grp   orders 0         4              10             6   -",
    ]
    assert format_plan("grp", {T1: 0}) == [
        "GROUP TOPIC PARTITION NEW-OFFSET",
        "grp   t     1         0",
    ]


class VanishingZooKeeper:
    """The ZooKeeper calls ConsumerGroupService makes, over a dict; listed children whose
    data is missing are znodes deleted between the listing and the read (a member leaving)."""

    def __init__(self, children: dict[str, list[str]], data: dict[str, bytes]) -> None:
        self.children = children
        self.data = data

    async def zk_children(self, path: str) -> list[str]:
        return self.children.get(path, [])

    async def zk_get(self, path: str) -> bytes | None:
        return self.data.get(path)

    async def zk_exists(self, path: str) -> bool:
        return path in self.children or path in self.data


def test_members_and_owners_that_leave_while_being_read_are_skipped() -> None:
    zk = VanishingZooKeeper(
        children={
            "/consumers/g": ["ids", "owners", "offsets"],
            "/consumers/g/ids": ["gone", "here"],
            "/consumers/g/owners": ["t", "bad name"],
            "/consumers/g/owners/t": ["0", "1"],
            "/consumers/g/offsets": ["t"],
            "/consumers/g/offsets/t": ["0", "1", "x"],
        },
        data={
            "/consumers/g/ids/here": b'{"version":1,"subscription":{"t":1},"pattern":"static"}',
            "/consumers/g/owners/t/1": b"here",
            "/consumers/g/offsets/t/0": b"5",
            "/consumers/g/offsets/t/1": b"not a number",
        },
    )
    warnings: list[str] = []
    service = ConsumerGroupService(cast(AdminClient, zk), warnings.append)
    description = asyncio.run(service.describe_group("g"))
    assert description.members == {"here": frozenset({"t"})}
    assert description.owners == {T1: "here"}
    assert description.offsets == {T0: 5}
    assert len(warnings) == 3  # the illegal topic, the non-partition child, the bad offset
    assert "'bad name'" in warnings[0]
