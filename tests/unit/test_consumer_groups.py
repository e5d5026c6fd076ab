"""consumer_groups: the describe rows (lag) and the reset plan (clamping as Kafka's
ConsumerGroupCommand), reading a group whose members leave while it is read, the Kafka
client groups the brokers hold beside the ZooKeeper groups (listed, described, and
refusing a reset while they have members), and the command's parsing and table layout."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace
from typing import cast

import pytest
from kazoo.exceptions import NoNodeError

from client.admin import (
    AdminClient,
    BrokerGroups,
    ConsumerGroupDescription,
    GroupMember,
    ListOffsetsResult,
)
from client.cli.consumer_groups import (
    describe_status,
    format_commits,
    format_listing,
    format_members,
    format_offset_deletion,
    format_plan,
    format_state,
    format_table,
    parse_topic_options,
)
from client.consumer_groups import (
    ConsumerGroupService,
    GroupListing,
    Owner,
    PartitionRow,
    ResetSpec,
    describe_rows,
    plan_reset,
)
from client.metadata import ClientError
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.zk.znode_reads import (
    GetAnswer,
    ReadBatch,
    committed_offset_read,
    consumer_offset_partitions,
    consumer_offset_topics,
    read_batch,
)
from proto.zk.znodes import (
    CommittedOffset,
    consumer_offset_path,
    consumer_offsets_path,
    encode_consumer_offset,
)

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


def test_lag_is_log_end_minus_committed_and_unknown_where_either_is() -> None:
    rows = describe_rows(
        "g",
        [T2, T0, T1],
        committed={T0: 4, T1: 7},
        log_end={T0: 10, T2: 5},
        owners={T0: Owner("g_host-1")},
    )
    assert rows == [
        PartitionRow("g", "t", 0, 4, 10, 6, Owner("g_host-1")),
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
    rows = [
        PartitionRow("grp", "orders", 0, 4, 10, 6, None),
        PartitionRow("grp", "orders", 1, 4, 10, 6, Owner("rdkafka-1", "/10.0.0.7", "rdkafka")),
        PartitionRow("grp", None, None, None, None, None, Owner("idle-2", "/10.0.0.8", "py")),
    ]
    assert format_table(rows) == [
        "GROUP TOPIC  PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST      CLIENT-ID",
        "grp   orders 0         4              10             6   -           -         -",
        "grp   orders 1         4              10             6   rdkafka-1   /10.0.0.7 rdkafka",
        "grp   -      -         -              -              -   idle-2      /10.0.0.8 py",
    ]
    assert format_listing([GroupListing("billing", "kafka", "Stable")]) == [
        "GROUP   TYPE  STATE",
        "billing kafka Stable",
    ]
    assert format_plan("grp", {T1: 0}) == [
        "GROUP TOPIC PARTITION NEW-OFFSET",
        "grp   t     1         0",
    ]


class VanishingZooKeeper:
    """The ZooKeeper calls ConsumerGroupService makes, over a dict; listed children whose
    data is missing are znodes deleted between the listing and the read (a member leaving).
    ``kafka``: the Kafka client groups the brokers answer with."""

    def __init__(
        self,
        children: dict[str, list[str]],
        data: dict[str, bytes],
        kafka: BrokerGroups | None = None,
    ) -> None:
        self.children = children
        self.data = data
        self.kafka = kafka or BrokerGroups({}, {})
        self.written: dict[str, bytes] = {}
        self.committed_at_coordinator: dict[tuple[str, TopicPartition], int] = {}

    async def list_consumer_groups(self) -> BrokerGroups:
        return self.kafka

    async def describe_consumer_groups(self, group_ids: list[str]) -> BrokerGroups:
        wanted = {g: held for g, held in self.kafka.groups.items() if g in group_ids}
        return BrokerGroups(wanted, self.kafka.errors)

    async def commit_consumer_offsets(self, group: str, offsets: dict[TopicPartition, int]) -> None:
        for tp, offset in offsets.items():
            self.written[consumer_offset_path(group, tp)] = encode_consumer_offset(offset)

    async def read_committed_offsets(
        self, group: str
    ) -> ReadBatch[TopicPartition, CommittedOffset]:
        """The shared reading rules (proto.zk.znode_reads) over the dicts."""
        root = consumer_offsets_path(group)
        topics, ignored = consumer_offset_topics(group, self.children.get(root, []))
        tps: list[TopicPartition] = []
        for topic in topics:
            listed = self.children.get(f"{root}/{topic}", [])
            partitions, skipped = consumer_offset_partitions(group, topic, listed)
            tps += partitions
            ignored += skipped
        reads = {tp: committed_offset_read(group, tp) for tp in tps}
        answers: list[GetAnswer] = [
            (self.data[r.path], SimpleNamespace(mtime=1_764_309_481_007))
            if r.path in self.data
            else NoNodeError()
            for r in reads.values()
        ]
        return read_batch(reads, answers, ignored)

    async def fetch_group_offsets(self, group: str) -> pb.FetchGroupOffsetsResponse:
        """What the coordinator answers for a group whose offsets are all in ZooKeeper
        (offsets committed before __consumer_offsets held them): the same reading rules."""
        batch = await self.read_committed_offsets(group)
        response = pb.FetchGroupOffsetsResponse(error_code=pb.NONE)
        for tp, c in sorted(batch.found.items()):
            response.offsets.add(
                topic=tp.topic,
                partition=tp.partition,
                offset=c.offset,
                metadata=c.metadata,
                leader_epoch=-1,
                commit_timestamp_ms=c.commit_timestamp_ms,
            )
        for tp in sorted(batch.malformed):
            response.offsets.add(
                topic=tp.topic,
                partition=tp.partition,
                offset=-1,
                error_code=pb.UNKNOWN_SERVER_ERROR,
            )
        return response

    async def commit_group_offsets(
        self, group: str, offsets: dict[TopicPartition, int]
    ) -> pb.CommitGroupOffsetsResponse:
        self.committed_at_coordinator.update({(group, tp): o for tp, o in offsets.items()})
        response = pb.CommitGroupOffsetsResponse()
        for tp, offset in offsets.items():
            response.offsets.add(topic=tp.topic, partition=tp.partition, offset=offset)
        return response

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
    # The illegal topic, and the bad offset as the coordinator answers it (the broker logs
    # why, and the child that is no partition, which it skips).
    assert len(warnings) == 2
    assert "'bad name'" in warnings[0]
    assert warnings[-1] == "ignoring the committed offset of t-1 in group 'g': UNKNOWN_SERVER_ERROR"


def kafka_group(
    state: str, *members: GroupMember, broker: int = 1, coordinator: int = 1
) -> ConsumerGroupDescription:
    return ConsumerGroupDescription(
        "billing-ck", state, "consumer", "range", members, broker, coordinator
    )


RDKAFKA = GroupMember("rdkafka-a1", "rdkafka", "/127.0.0.1", (T0, T1, T2))


class Offsets:
    """list_offsets of a log of 10 records per partition."""

    async def list_offsets(self, tps: list[TopicPartition], timestamp: int) -> ListOffsetsResult:
        return ListOffsetsResult(dict.fromkeys(tps, 0 if timestamp == -2 else 10), {})

    async def describe_topics(self, names: list[str] | None = None) -> list[object]:
        return []


class GroupsBoth(VanishingZooKeeper, Offsets):
    pass


def committed_by_kafka_clients(kafka: BrokerGroups) -> GroupsBoth:
    """A Kafka client group that committed 4 on partition 0: offsets znodes, no ids."""
    return GroupsBoth(
        children={
            "/consumers": ["billing-ck", "zk-readers"],
            "/consumers/billing-ck": ["offsets"],
            "/consumers/billing-ck/offsets": ["t"],
            "/consumers/billing-ck/offsets/t": ["0"],
            "/consumers/zk-readers": ["ids"],
            "/consumers/zk-readers/ids": [],
        },
        data={"/consumers/billing-ck/offsets/t/0": b"4"},
        kafka=kafka,
    )


def test_a_live_kafka_group_is_listed_described_with_its_member_and_not_reset() -> None:
    zk = committed_by_kafka_clients(
        BrokerGroups({"billing-ck": [kafka_group("Stable", RDKAFKA)]}, {})
    )
    service = ConsumerGroupService(cast(AdminClient, zk), print)
    assert asyncio.run(service.list_groups()) == [
        GroupListing("billing-ck", "kafka", "Stable"),
        GroupListing("zk-readers", "zookeeper", "Empty"),
    ]
    description = asyncio.run(service.describe_group("billing-ck"))
    assert description.active
    assert describe_status(description) is None
    rows = asyncio.run(service.describe_rows(description))
    owner = Owner("rdkafka-a1", "/127.0.0.1", "rdkafka")
    assert rows == [
        PartitionRow("billing-ck", "t", 0, 4, 10, 6, owner),
        PartitionRow("billing-ck", "t", 1, None, 10, None, owner),
        PartitionRow("billing-ck", "t", 2, None, 10, None, owner),
    ]
    with pytest.raises(
        ClientError,
        match=r"^Assignments can only be reset if the group 'billing-ck' is inactive, "
        r"but the current state is Stable\.$",
    ):
        asyncio.run(service.plan_reset("billing-ck", {"t": [0]}, False, ResetSpec("earliest")))
    with pytest.raises(ClientError, match="current state is Stable"):
        asyncio.run(service.execute_reset("billing-ck", {T0: 0}))
    assert zk.written == {}


def test_a_kafka_group_with_members_at_its_old_coordinator_only_is_still_live() -> None:
    # Mid-move: the new coordinator holds it Empty, the old one still has the member.
    moving = [
        kafka_group("Empty", broker=2, coordinator=2),
        kafka_group("Stable", RDKAFKA, broker=1, coordinator=2),
    ]
    zk = committed_by_kafka_clients(BrokerGroups({"billing-ck": moving}, {}))
    service = ConsumerGroupService(cast(AdminClient, zk), print)
    description = asyncio.run(service.describe_group("billing-ck"))
    assert description.kafka_group is not None
    assert description.kafka_group.broker_id == 1  # the holding with members is shown
    with pytest.raises(ClientError, match="current state is Stable"):
        asyncio.run(service.execute_reset("billing-ck", {T0: 0}))


def test_a_reset_is_refused_when_a_broker_cannot_be_asked_and_goes_through_when_all_are_empty() -> (
    None
):
    silent = BrokerGroups({}, {3: "broker 3 at 127.0.0.1:9093: unavailable"})
    zk = committed_by_kafka_clients(silent)
    warnings: list[str] = []
    service = ConsumerGroupService(cast(AdminClient, zk), warnings.append)
    with pytest.raises(
        ClientError, match="cannot tell whether group 'billing-ck' has live members: broker 3"
    ):
        asyncio.run(service.execute_reset("billing-ck", {T0: 0}))
    assert zk.written == {}
    assert warnings == [
        "cannot ask broker 3 at 127.0.0.1:9093: unavailable about group 'billing-ck'"
    ]

    zk.kafka = BrokerGroups({"billing-ck": [kafka_group("Empty")]}, {})
    asyncio.run(service.execute_reset("billing-ck", {T0: 0}))
    # A Kafka client group's offsets are committed at its coordinator, not in ZooKeeper.
    assert zk.written == {}
    assert zk.committed_at_coordinator == {("billing-ck", T0): 0}


def test_a_kafka_group_the_coordinator_forgot_is_listed_empty_and_described_without_members() -> (
    None
):
    zk = committed_by_kafka_clients(BrokerGroups({}, {}))
    service = ConsumerGroupService(cast(AdminClient, zk), print)
    assert asyncio.run(service.list_groups())[0] == GroupListing("billing-ck", "kafka", "Empty")
    description = asyncio.run(service.describe_group("billing-ck"))
    assert describe_status(description) == "Consumer group 'billing-ck' has no active members."
    with pytest.raises(ClientError, match="'nosuch' does not exist"):
        asyncio.run(service.describe_group("nosuch"))


def test_a_kafka_member_without_partitions_gets_a_row_of_its_own() -> None:
    waiting = GroupMember("rdkafka-b2", "rdkafka", "/127.0.0.2", ())
    zk = committed_by_kafka_clients(
        BrokerGroups({"billing-ck": [kafka_group("CompletingRebalance", waiting)]}, {})
    )
    service = ConsumerGroupService(cast(AdminClient, zk), print)
    description = asyncio.run(service.describe_group("billing-ck"))
    assert describe_status(description) == "Warning: Consumer group 'billing-ck' is rebalancing."
    rows = asyncio.run(service.describe_rows(description))
    assert rows[-1] == PartitionRow(
        "billing-ck", None, None, None, None, None, Owner("rdkafka-b2", "/127.0.0.2", "rdkafka")
    )


def test_state_and_members_views_as_kafkas_describe_prints_them() -> None:
    held = dataclasses.replace(kafka_group("Stable", RDKAFKA), coordinator_address="h:9091")
    zk = committed_by_kafka_clients(BrokerGroups({"billing-ck": [held]}, {}))
    description = asyncio.run(
        ConsumerGroupService(cast(AdminClient, zk), print).describe_group("billing-ck")
    )
    assert format_state(description) == [
        "GROUP      COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE  #MEMBERS",
        "billing-ck h:9091 (1)       range               Stable 1",
    ]
    assert format_members(description) == [
        "GROUP      CONSUMER-ID HOST       CLIENT-ID #PARTITIONS",
        "billing-ck rdkafka-a1  /127.0.0.1 rdkafka   3",
    ]


def test_the_commits_view_shows_each_offsets_commit_time_and_metadata() -> None:
    zk = VanishingZooKeeper(
        children={
            "/consumers/g": ["offsets"],
            "/consumers/g/offsets": ["t"],
            "/consumers/g/offsets/t": ["0", "1"],
        },
        data={
            "/consumers/g/offsets/t/0": b"4",
            "/consumers/g/offsets/t/1": encode_consumer_offset(9, "store at 9"),
        },
    )
    description = asyncio.run(
        ConsumerGroupService(cast(AdminClient, zk), print).describe_group("g")
    )
    assert description.offsets == {TopicPartition("t", 0): 4, TopicPartition("t", 1): 9}
    assert format_commits(description) == [
        "GROUP TOPIC PARTITION CURRENT-OFFSET COMMITTED-AT             METADATA",
        "g     t     0         4              2025-11-28T05:58:01.007Z -",
        "g     t     1         9              2025-11-28T05:58:01.007Z store at 9",
    ]


def test_the_delete_offsets_table_is_kafkas_with_its_messages() -> None:
    lines = format_offset_deletion(
        {
            TopicPartition("orders", 1): 0,
            TopicPartition("orders", 0): 86,
            TopicPartition("ghost", -1): 3,
        }
    )
    assert [line.split(maxsplit=2) for line in lines] == [
        ["TOPIC", "PARTITION", "STATUS"],
        ["ghost", "Not", "Provided Error: This server does not host this topic-partition."],
        [
            "orders",
            "0",
            "Error: Deleting offsets of a topic is forbidden while the consumer group is "
            "actively subscribed to it.",
        ],
        ["orders", "1", "Successful"],
    ]
