"""broker.coordinator.group_admin: ListGroups, DescribeGroups, DeleteGroups and OffsetDelete
over a real GroupCoordinator and a ZooKeeper of fixed ``/consumers`` contents (Kafka's
clients drive them through real brokers in tests/integration/test_group_admin.py)."""

from __future__ import annotations

import asyncio
import io
import struct
from collections.abc import Callable, Coroutine, Iterable
from types import SimpleNamespace
from typing import Any, TypeVar, cast

import pytest
from kio.index import load_response_schema
from kio.serial import entity_writer

from broker.coordinator.group_admin import (
    GROUP_ID_NOT_FOUND,
    GROUP_SUBSCRIBED_TO_TOPIC,
    INVALID_GROUP_ID,
    NON_EMPTY_GROUP,
    GroupAdmin,
)
from broker.coordinator.group_coordinator import (
    NOT_COORDINATOR,
    GroupCoordinator,
    GroupState,
    coordinator_for,
)
from broker.grpc_listener.group_rpcs import GroupRpcs
from broker.kafka_listener.group_apis import GROUP_VERSIONS, GroupApis
from broker.kafka_listener.messages import build
from broker.kafka_listener.wire_request import KafkaRequest
from broker.metadata_cache import MetadataCache, PartitionInfo
from broker.zk_client import BrokerZkClient
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.zk.kafka_zk_client import KafkaZkClient
from proto.zk.znodes import BrokerInfo, encode_consumer_subscription
from tests.unit.test_group_coordinator import consumer_assignment

T = TypeVar("T")
NONE = 0


class _Consumers:
    """``/consumers`` as GroupAdmin reads and deletes it: group -> live ZooKeeper member ids
    with their subscriptions (None: no ``ids`` znode) and committed offsets."""

    def __init__(self) -> None:
        self.ids: dict[str, dict[str, bytes] | None] = {}
        self.offsets: dict[str, dict[TopicPartition, int]] = {}

    def add(self, group: str, offsets: Iterable[TopicPartition] = ()) -> None:
        self.ids.setdefault(group, None)
        self.offsets.setdefault(group, {}).update(dict.fromkeys(offsets, 5))

    async def consumer_groups(self) -> list[str]:
        return sorted(self.ids)

    async def consumer_group_members(self, group: str) -> list[str] | None:
        ids = self.ids.get(group)
        return None if ids is None else sorted(ids)

    async def get_data_or_none(self, path: str) -> bytes | None:
        _, _, group, _, member = path.split("/")
        return (self.ids.get(group) or {}).get(member)

    async def delete_consumer_group(self, group: str) -> bool:
        self.offsets.pop(group, None)
        return self.ids.pop(group, "absent") != "absent"

    async def commit_consumer_offsets(
        self,
        group: str,
        offsets: dict[TopicPartition, int],
        metadata: dict[TopicPartition, str] | None = None,
    ) -> None:
        self.committed = {tp: (o, (metadata or {}).get(tp, "")) for tp, o in offsets.items()}

    async def delete_consumer_offsets(self, group: str, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.offsets.get(group, {}).pop(tp, None)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def admin(broker_id: int = 1) -> tuple[GroupAdmin, _Consumers]:
    cache = MetadataCache()
    cache.update(
        controller_id=1,
        controller_epoch=1,
        brokers=[BrokerInfo(broker_id, "h", 9090, kafka_endpoint=("h", 19090))],
        partitions={},
    )
    zk = _Consumers()
    coordinator = GroupCoordinator(broker_id, initial_rebalance_delay_ms=0)
    return GroupAdmin(coordinator, cache, cast(KafkaZkClient, zk)), zk


def subscription(*topics: str) -> bytes:
    """Kafka's consumer protocol subscription (version 0)."""
    body = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    return body + struct.pack(">i", -1)


async def stable_kafka_group(a: GroupAdmin, group: str, topic: str) -> None:
    joined = await a.coordinator.join_group(
        group,
        "",
        group_instance_id=None,
        client_id="rdkafka",
        client_host="/127.0.0.1",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        protocol_type="consumer",
        protocols=[("range", subscription(topic))],
    )
    plan = {joined.member_id: consumer_assignment(topic, [0])}
    await a.coordinator.sync_group(group, joined.generation_id, joined.member_id, plan)


TP = TopicPartition("orders", 0)
OTHER = TopicPartition("audit", 0)


def test_list_shows_held_groups_stored_groups_and_zookeeper_groups_with_their_states() -> None:
    async def main() -> None:
        a, zk = admin()
        await stable_kafka_group(a, "live", "orders")
        zk.add("live", [TP])
        zk.add("left", [TP])  # only offsets: Empty
        zk.add("zk-group", [TP])
        zk.ids["zk-group"] = {"c1": encode_consumer_subscription({"orders": 1}, 1)}
        zk.add("zk-idle")
        zk.ids["zk-idle"] = {}
        zk.ids["bad/name"] = None
        code, groups = await a.list_groups()
        assert code == NONE
        assert [(g.group_id, g.protocol_type, g.state) for g in groups] == [
            ("left", "", GroupState.EMPTY),
            ("live", "consumer", GroupState.STABLE),
            ("zk-group", "", GroupState.STABLE),
            ("zk-idle", "", GroupState.EMPTY),
        ]
        _, empty = await a.list_groups(["Empty"])
        assert [g.group_id for g in empty] == ["left", "zk-idle"]
        _, none = await a.list_groups(["stable"])  # Kafka matches the names exactly
        assert none == []

    run(main())


def test_list_leaves_out_the_groups_another_broker_coordinates() -> None:
    mine = next(g for g in (f"g{i}" for i in range(100)) if coordinator_for(g, [1, 2]) == 1)
    theirs = next(g for g in (f"g{i}" for i in range(100)) if coordinator_for(g, [1, 2]) == 2)
    a, zk = admin()
    a.metadata_cache.update(
        controller_id=1,
        controller_epoch=1,
        brokers=[BrokerInfo(b, "h", 9090, kafka_endpoint=("h", 19090 + b)) for b in (1, 2)],
        partitions={},
    )
    zk.add(mine, [TP])
    zk.add(theirs, [TP])
    _, groups = run(a.list_groups())
    assert [g.group_id for g in groups] == [mine]
    code, _ = run(a.describe_group(theirs))
    assert code == NOT_COORDINATOR


def test_describe_a_kafka_group_a_zookeeper_group_an_empty_one_and_an_unknown_one() -> None:
    async def main() -> None:
        a, zk = admin()
        await stable_kafka_group(a, "live", "orders")
        zk.add("zk-group")
        zk.ids["zk-group"] = {"c1": b"{}", "c2": b"{}"}
        zk.add("left", [TP])
        code, live = await a.describe_group("live")
        assert (code, live.state, live.protocol_type, live.protocol_name) == (
            NONE,
            GroupState.STABLE,
            "consumer",
            "range",
        )
        [member] = live.members
        assert (member.client_id, member.partitions) == ("rdkafka", (TP,))
        assert member.metadata == subscription("orders")
        _, zk_group = await a.describe_group("zk-group")
        assert (zk_group.state, zk_group.protocol_type) == (GroupState.STABLE, "")
        assert [m.member_id for m in zk_group.members] == ["c1", "c2"]
        _, left = await a.describe_group("left")
        assert (left.state, left.members) == (GroupState.EMPTY, ())
        _, unknown = await a.describe_group("nobody")
        assert unknown.state is GroupState.DEAD
        code, _ = await a.describe_group("bad/name")
        assert code == INVALID_GROUP_ID

    run(main())


def test_delete_refuses_groups_with_members_of_either_kind_and_unknown_groups() -> None:
    async def main() -> None:
        a, zk = admin()
        await stable_kafka_group(a, "live", "orders")
        zk.add("live", [TP])
        zk.add("zk-group", [TP])
        zk.ids["zk-group"] = {"c1": b"{}"}
        zk.add("left", [TP])
        assert await a.delete_group("live") == NON_EMPTY_GROUP
        assert await a.delete_group("zk-group") == NON_EMPTY_GROUP
        assert await a.delete_group("nobody") == GROUP_ID_NOT_FOUND
        assert await a.delete_group("left") == NONE
        assert "left" not in zk.ids
        assert "left" not in zk.offsets
        assert await a.delete_group("left") == GROUP_ID_NOT_FOUND
        assert set(zk.offsets) == {"live", "zk-group"}

    run(main())


class _GatedConsumers(_Consumers):
    """A ``/consumers`` whose group deletion waits at a gate, as a ZooKeeper round trip
    would: what arrives meanwhile is what a real deletion races with."""

    def __init__(self) -> None:
        super().__init__()
        self.deleting = asyncio.Event()
        self.gate = asyncio.Event()

    async def delete_consumer_group(self, group: str) -> bool:
        self.deleting.set()
        await self.gate.wait()
        return await super().delete_consumer_group(group)


def gated_admin() -> tuple[GroupAdmin, _GatedConsumers]:
    a, _ = admin()
    zk = _GatedConsumers()
    a.zk = cast(KafkaZkClient, zk)
    return a, zk


async def join(a: GroupAdmin, group: str) -> int:
    joined = await a.coordinator.join_group(
        group,
        "",
        group_instance_id=None,
        client_id="rdkafka",
        client_host="/127.0.0.1",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        protocol_type="consumer",
        protocols=[("range", subscription("orders"))],
    )
    return joined.error_code


COORDINATOR_NOT_AVAILABLE = 15


def test_a_group_being_deleted_is_dead_joins_and_commits_are_refused_until_it_is_gone() -> None:
    """Kafka's handleDeleteGroups marks the group Dead before removing its offsets: a
    JoinGroup, a commit, an OffsetDelete or a second DeleteGroups arriving meanwhile cannot
    land in the half-deleted group."""

    async def main() -> None:
        a, zk = gated_admin()
        zk.add("left", [TP, OTHER])
        deletion = asyncio.create_task(a.delete_group("left"))
        await zk.deleting.wait()
        assert await join(a, "left") == COORDINATOR_NOT_AVAILABLE
        assert a.coordinator.check_commit("left", -1, "") == COORDINATOR_NOT_AVAILABLE
        assert a.coordinator.heartbeat("left", 1, "m") == COORDINATOR_NOT_AVAILABLE
        assert a.coordinator.leave_group("left", ["m"]) == [COORDINATOR_NOT_AVAILABLE]
        assert (await a.delete_offsets("left", [TP])).error_code == GROUP_ID_NOT_FOUND
        assert await a.delete_group("left") == GROUP_ID_NOT_FOUND
        _, listed = await a.list_groups()
        assert [(g.group_id, g.state) for g in listed] == [("left", GroupState.EMPTY)]
        assert zk.offsets["left"] == {TP: 5, OTHER: 5}  # nothing deleted yet
        zk.gate.set()
        assert await deletion == NONE
        assert "left" not in zk.offsets
        assert not a.coordinator.deleting("left")
        # Gone: the group id is free again, as in Kafka.
        assert a.coordinator.check_commit("left", -1, "") == NONE
        assert await join(a, "left") == NONE

    run(main())


def test_a_deletion_waits_for_the_commits_checked_before_it_then_deletes_them_too() -> None:
    async def main() -> None:
        a, zk = gated_admin()
        zk.gate.set()
        zk.add("left", [TP])
        assert a.coordinator.check_commit("left", -1, "") == NONE
        with a.coordinator.committing("left"):
            deletion = asyncio.create_task(a.delete_group("left"))
            for _ in range(5):  # let the deletion run as far as it can
                await asyncio.sleep(0)
            assert not deletion.done()
            assert not zk.deleting.is_set()
            zk.add("left", [OTHER])  # the commit's write lands
        assert await deletion == NONE
        assert "left" not in zk.offsets

    run(main())


def test_a_failed_deletion_leaves_the_group_usable() -> None:
    async def main() -> None:
        a, zk = gated_admin()
        zk.add("left", [TP])

        async def refused(group: str) -> bool:
            from kazoo.exceptions import NotEmptyError

            raise NotEmptyError()

        zk.delete_consumer_group = refused  # type: ignore[method-assign]
        assert await a.delete_group("left") == NON_EMPTY_GROUP
        assert not a.coordinator.deleting("left")
        assert await join(a, "left") == NONE

    run(main())


def test_the_grpc_door_deletes_at_the_coordinator_only_with_the_kafka_listeners_checks() -> None:
    """DeleteGroups and DeleteGroupOffsets of the gRPC Broker service: GroupAdmin's answers,
    NOT_COORDINATOR for a group another broker coordinates, UNKNOWN_TOPIC_OR_PARTITION for a
    partition the metadata does not know (as the Kafka listener's OffsetDelete)."""
    mine = next(g for g in (f"g{i}" for i in range(100)) if coordinator_for(g, [1, 2]) == 1)
    theirs = next(g for g in (f"g{i}" for i in range(100)) if coordinator_for(g, [1, 2]) == 2)
    nobody = next(g for g in (f"n{i}" for i in range(100)) if coordinator_for(g, [1, 2]) == 1)

    async def main() -> None:
        a, zk = admin()
        a.metadata_cache.update(
            controller_id=1,
            controller_epoch=1,
            brokers=[BrokerInfo(b, "h", 9090, kafka_endpoint=("h", 19090 + b)) for b in (1, 2)],
            partitions={TP: PartitionInfo(1, 0, (1,), (1,))},
        )
        rpcs = GroupRpcs(1, a.metadata_cache, a.coordinator, a)
        zk.add(mine, [TP])
        zk.add(theirs, [TP])
        request = pb.DeleteGroupOffsetsRequest(group_id=mine)
        request.topics.add(name="orders", partitions=[0, 7])
        answer = await rpcs.delete_group_offsets(request)
        assert answer.error_code == pb.NONE
        assert [
            (t.name, p.partition_index, p.error_code) for t in answer.topics for p in t.partitions
        ] == [
            ("orders", 7, pb.UNKNOWN_TOPIC_OR_PARTITION),
            ("orders", 0, pb.NONE),
        ]
        assert zk.offsets[mine] == {}
        request.group_id = nobody
        missing = await rpcs.delete_group_offsets(request)
        assert (missing.error_code, list(missing.topics)) == (pb.GROUP_ID_NOT_FOUND, [])
        deleted = await rpcs.delete_groups(pb.DeleteGroupsRequest(groups=[mine, theirs, mine]))
        assert [(r.group_id, r.error_code) for r in deleted.results] == [
            (mine, pb.NONE),
            (theirs, pb.NOT_COORDINATOR),
        ]
        assert set(zk.offsets) == {theirs}
        without = GroupRpcs(1, a.metadata_cache, a.coordinator, None)
        unavailable = await without.delete_groups(pb.DeleteGroupsRequest(groups=[mine]))
        assert unavailable.results[0].error_code == pb.COORDINATOR_NOT_AVAILABLE

    run(main())


def test_without_kafka_listeners_every_broker_may_coordinate_the_zookeeper_groups() -> None:
    a, zk = admin()
    a.metadata_cache.update(
        controller_id=1,
        controller_epoch=1,
        brokers=[BrokerInfo(b, "h", 9090 + b) for b in (1, 2)],
        partitions={},
    )
    mine = next(g for g in (f"g{i}" for i in range(100)) if coordinator_for(g, [1, 2]) == 1)
    zk.add(mine, [TP])
    assert run(a.delete_group(mine)) == NONE


def test_offset_delete_spares_the_topics_the_members_subscribe_to() -> None:
    async def main() -> None:
        a, zk = admin()
        await stable_kafka_group(a, "live", "orders")
        zk.add("live", [TP, OTHER])
        result = await a.delete_offsets("live", [TP, OTHER])
        assert (result.error_code, result.partitions) == (
            NONE,
            {TP: GROUP_SUBSCRIBED_TO_TOPIC, OTHER: NONE},
        )
        assert zk.offsets["live"] == {TP: 5}

        zk.add("zk-group", [TP, OTHER])
        zk.ids["zk-group"] = {"c1": encode_consumer_subscription({"audit": 1}, 1)}
        result = await a.delete_offsets("zk-group", [TP, OTHER])
        assert result.partitions == {TP: NONE, OTHER: GROUP_SUBSCRIBED_TO_TOPIC}

        zk.add("left", [TP, OTHER])
        result = await a.delete_offsets("left", [TP, OTHER])
        assert result.partitions == {TP: NONE, OTHER: NONE}
        assert zk.offsets["left"] == {}
        assert (await a.delete_offsets("nobody", [TP])).error_code == GROUP_ID_NOT_FOUND

    run(main())


def test_offset_delete_of_an_active_group_of_another_protocol_is_non_empty() -> None:
    async def main() -> None:
        a, zk = admin()
        joined = asyncio.create_task(
            a.coordinator.join_group(
                "workers",
                "",
                group_instance_id=None,
                client_id="connect",
                client_host="/127.0.0.1",
                session_timeout_ms=10_000,
                rebalance_timeout_ms=10_000,
                protocol_type="connect",
                protocols=[("default", b"\x00")],
            )
        )
        await joined
        zk.add("workers", [TP])
        assert (await a.delete_offsets("workers", [TP])).error_code == NON_EMPTY_GROUP

    run(main())


@pytest.mark.parametrize(
    ("api_key", "body"),
    [
        (16, SimpleNamespace(states_filter=("Stable", "Empty"))),
        (15, SimpleNamespace(groups=("live", "left", "nobody", "bad/name"))),
        (42, SimpleNamespace(groups_names=("live", "left", "nobody"))),
        (
            47,
            SimpleNamespace(
                group_id="live",
                topics=(
                    SimpleNamespace(
                        name="orders", partitions=(SimpleNamespace(partition_index=0),)
                    ),
                ),
            ),
        ),
    ],
)
def test_every_served_version_of_the_group_admin_apis_encodes_its_answer(
    api_key: int, body: SimpleNamespace
) -> None:
    """The handlers' answers as each version of Kafka's schema writes them (fields a
    version lacks are left out; none is missing)."""

    async def main() -> list[Any]:
        low, high = GROUP_VERSIONS[api_key]
        trees = []
        for version in range(low, high + 1):  # each on groups of its own (DeleteGroups)
            a, zk = admin()
            await stable_kafka_group(a, "live", "orders")
            zk.add("live", [TP])
            zk.add("left", [TP])
            a.metadata_cache.add_partition(TP, PartitionInfo(1, 0, (1,), (1,)))
            apis = GroupApis(a.coordinator, a.metadata_cache, cast(BrokerZkClient, zk), a)
            request = KafkaRequest(api_key, version, 1, "c", body)
            answer = await apis.handlers[api_key](request)  # the stage, then its answer
            trees.append((version, await answer))
        return trees

    expected: dict[int, Callable[[Any], bool]] = {
        16: lambda t: (
            [(g["group_id"], g["group_state"]) for g in t["groups"]]
            == [("left", "Empty"), ("live", "Stable")]
        ),
        15: lambda t: (
            [(g["group_state"], g["error_code"]) for g in t["groups"]]
            == [("Stable", NONE), ("Empty", NONE), ("Dead", NONE), ("", INVALID_GROUP_ID)]
        ),
        42: lambda t: (
            [r["error_code"] for r in t["results"]] == [NON_EMPTY_GROUP, NONE, GROUP_ID_NOT_FOUND]
        ),
        47: lambda t: t["topics"][0]["partitions"][0]["error_code"] == GROUP_SUBSCRIBED_TO_TOPIC,
    }
    for version, tree in run(main()):
        assert tree is not None
        assert expected[api_key](tree), tree
        response = build(load_response_schema(api_key, version), tree)
        entity_writer(type(response))(io.BytesIO(), response)


def test_offset_commit_keeps_the_metadata_string_and_refuses_one_over_the_kafka_limit() -> None:
    async def main() -> tuple[Any, dict[TopicPartition, tuple[int, str]]]:
        a, zk = admin()
        for partition in range(3):
            a.metadata_cache.add_partition(
                TopicPartition("orders", partition), PartitionInfo(1, 0, (1,), (1,))
            )
        apis = GroupApis(a.coordinator, a.metadata_cache, cast(BrokerZkClient, zk), a)
        parts = [
            SimpleNamespace(partition_index=0, committed_offset=5, committed_metadata="ckpt"),
            SimpleNamespace(partition_index=1, committed_offset=6, committed_metadata=None),
            SimpleNamespace(partition_index=2, committed_offset=7, committed_metadata="é" * 2049),
            SimpleNamespace(partition_index=3, committed_offset=8, committed_metadata=None),
        ]
        body = SimpleNamespace(
            group_id="assigner",
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[SimpleNamespace(name="orders", partitions=parts)],
        )
        answer = await apis.handlers[8](KafkaRequest(8, 8, 1, "c", body))
        return await answer, zk.committed

    tree, committed = run(main())
    codes = [p["error_code"] for p in tree["topics"][0]["partitions"]]
    # OFFSET_METADATA_TOO_LARGE: 4098 bytes > 4096; UNKNOWN_TOPIC_OR_PARTITION: no orders-3
    assert codes == [NONE, NONE, 12, pb.UNKNOWN_TOPIC_OR_PARTITION]
    assert committed == {
        TopicPartition("orders", 0): (5, "ckpt"),
        TopicPartition("orders", 1): (6, ""),
    }
