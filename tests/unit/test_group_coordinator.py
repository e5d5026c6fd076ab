"""broker.coordinator.group_coordinator: Kafka's classic group protocol as a state machine, driven
directly (the Kafka clients drive it through real brokers in tests/integration)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Coroutine
from typing import Any, TypeVar

from broker.coordinator.group_coordinator import (
    GROUP_MAX_SIZE_REACHED,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_REQUEST,
    INVALID_SESSION_TIMEOUT,
    NOT_COORDINATOR,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    GroupCoordinator,
    GroupState,
    JoinResult,
    coordinator_for,
)
from proto.topic_partition import TopicPartition

T = TypeVar("T")
NONE = 0


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def coordinator(**kwargs: int) -> GroupCoordinator:
    settings = {"initial_rebalance_delay_ms": 0, "min_session_timeout_ms": 100, **kwargs}
    return GroupCoordinator(1, store=None, **settings)


async def join(
    c: GroupCoordinator,
    member_id: str = "",
    *,
    client: str = "c",
    host: str = "/127.0.0.1",
    protocols: list[tuple[str, bytes]] | None = None,
    session_ms: int = 10_000,
    rebalance_ms: int = 10_000,
) -> JoinResult:
    return await c.join_group(
        "g",
        member_id,
        group_instance_id=None,
        client_id=client,
        client_host=host,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        protocol_type="consumer",
        protocols=protocols or [("range", client.encode())],
    )


async def join_three(c: GroupCoordinator) -> list[JoinResult]:
    first = asyncio.create_task(join(c, client="a"))
    await asyncio.sleep(0)
    # The first join started a rebalance that completes only when... it is alone: with
    # no initial delay its generation begins at once, and the others join the next one.
    results = [await first]
    more = [asyncio.create_task(join(c, client=n)) for n in ("b", "c")]
    await asyncio.sleep(0.01)
    assert c.heartbeat("g", results[0].generation_id, results[0].member_id) == REBALANCE_IN_PROGRESS
    again = asyncio.create_task(join(c, results[0].member_id, client="a"))
    return [await again, *[await t for t in more]]


def test_three_members_get_one_generation_and_only_the_leader_sees_the_metadata() -> None:
    async def main() -> None:
        c = coordinator()
        results = await join_three(c)
        assert {r.error_code for r in results} == {NONE}
        assert len({r.generation_id for r in results}) == 1
        assert len({r.member_id for r in results}) == 3
        (leader,) = [r for r in results if r.members]
        assert {r.leader for r in results} == {leader.member_id}
        assert sorted(meta for _, _, meta in leader.members) == [b"a", b"b", b"c"]
        assert c.groups["g"].state is GroupState.COMPLETING_REBALANCE

    run(main())


def test_each_member_gets_its_own_assignment_whoever_syncs_first() -> None:
    async def main() -> None:
        c = coordinator()
        results = await join_three(c)
        (leader,) = [r for r in results if r.members]
        followers = [r for r in results if r is not leader]
        generation = leader.generation_id
        waiting = [
            asyncio.create_task(c.sync_group("g", generation, f.member_id, {})) for f in followers
        ]
        await asyncio.sleep(0)
        plan = {r.member_id: r.member_id.encode() for r in results}
        mine = await c.sync_group("g", generation, leader.member_id, plan)
        assert mine.assignment == leader.member_id.encode()
        for follower, task in zip(followers, waiting, strict=True):
            assert (await task).assignment == follower.member_id.encode()
        assert c.groups["g"].state is GroupState.STABLE
        late = await c.sync_group("g", generation, followers[0].member_id, {})
        assert late.assignment == followers[0].member_id.encode()
        assert c.heartbeat("g", generation, leader.member_id) == NONE

    run(main())


def test_wrong_generation_unknown_member_and_bad_sessions_are_refused() -> None:
    async def main() -> None:
        c = coordinator()
        assert (await join(c, session_ms=10)).error_code == INVALID_SESSION_TIMEOUT
        assert (await join(c, "nobody")).error_code == UNKNOWN_MEMBER_ID
        first = await join(c)
        assert c.heartbeat("g", first.generation_id + 1, first.member_id) == ILLEGAL_GENERATION
        assert c.heartbeat("g", first.generation_id, "nobody") == UNKNOWN_MEMBER_ID
        other = await join(c, client="x", protocols=[("sticky", b"")])
        assert other.error_code == INCONSISTENT_GROUP_PROTOCOL
        sync = await c.sync_group("g", first.generation_id + 5, first.member_id, {})
        assert sync.error_code == ILLEGAL_GENERATION

    run(main())


def test_a_silent_member_is_expired_and_the_rest_rebalance_without_it() -> None:
    async def main() -> None:
        c = coordinator()
        c.start()
        try:
            results = await join_three(c)
            (leader,) = [r for r in results if r.members]
            plan = {r.member_id: b"x" for r in results}
            syncs = [
                asyncio.create_task(c.sync_group("g", r.generation_id, r.member_id, plan))
                for r in results
                if r is not leader
            ]
            await c.sync_group("g", leader.generation_id, leader.member_id, plan)
            await asyncio.gather(*syncs)
            quiet, *alive = results
            # Two keep heartbeating with a short session; the third says nothing.
            for r in results:
                c.groups["g"].members[r.member_id].session_timeout_ms = 300
            async with asyncio.timeout(5):
                while quiet.member_id in c.groups["g"].members:
                    for r in alive:
                        c.heartbeat("g", r.generation_id, r.member_id)
                    await asyncio.sleep(0.05)
            assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
            rejoined = await asyncio.gather(*(join(c, r.member_id) for r in alive))
            assert {r.generation_id for r in rejoined} == {leader.generation_id + 1}
            assert set(c.groups["g"].members) == {r.member_id for r in alive}
        finally:
            await c.stop()

    run(main())


def test_leaving_starts_a_rebalance_and_the_last_one_out_empties_the_group() -> None:
    async def main() -> None:
        c = coordinator()
        first = await join(c)
        assert c.leave_group("g", [first.member_id, "nobody"]) == [NONE, UNKNOWN_MEMBER_ID]
        assert c.groups["g"].state is GroupState.EMPTY

    run(main())


def test_commits_from_outside_the_group_only_while_it_is_empty() -> None:
    async def main() -> None:
        c = coordinator()
        assert c.check_commit("g", -1, "") == NONE  # no group yet: an assign() consumer
        member = await join(c)
        assert c.check_commit("g", -1, "") == UNKNOWN_MEMBER_ID
        assert c.check_commit("g", member.generation_id, member.member_id) == REBALANCE_IN_PROGRESS
        await c.sync_group("g", member.generation_id, member.member_id, {})
        assert c.check_commit("g", member.generation_id, member.member_id) == NONE
        assert c.check_commit("g", member.generation_id - 1, member.member_id) == ILLEGAL_GENERATION

    run(main())


def test_a_group_that_moves_away_tells_its_waiting_members_not_coordinator() -> None:
    async def main() -> None:
        c = coordinator(initial_rebalance_delay_ms=10_000)
        waiting = asyncio.create_task(join(c))
        await asyncio.sleep(0.01)
        c.forget("g")
        assert (await waiting).error_code == NOT_COORDINATOR
        assert "g" not in c.groups

    run(main())


def test_the_coordinator_choice_is_stable_and_moves_only_the_groups_of_a_broker_that_left() -> None:
    groups = [f"group-{i}" for i in range(300)]
    before = {g: coordinator_for(g, [1, 2, 3]) for g in groups}
    assert before == {g: coordinator_for(g, [3, 2, 1]) for g in groups}
    assert set(before.values()) == {1, 2, 3}
    after = {g: coordinator_for(g, [1, 3]) for g in groups}
    assert all(after[g] == before[g] for g in groups if before[g] != 2)
    assert coordinator_for("g", []) is None


def consumer_assignment(topic: str, partitions: list[int]) -> bytes:
    """Kafka's consumer protocol assignment (version 0) of ``partitions`` of ``topic``."""
    name = topic.encode()
    return (
        struct.pack(">hih", 0, 1, len(name))
        + name
        + struct.pack(f">i{len(partitions)}ii", len(partitions), *partitions, -1)
    )


def test_describe_shows_each_members_client_host_and_decoded_partitions_once_stable() -> None:
    async def main() -> None:
        c = coordinator()
        results = await join_three(c)
        (leader,) = [r for r in results if r.members]
        # While the leader has not sent the assignment, the members have none (as Kafka's
        # summaryNoMetadata), but they are members.
        [during] = c.describe_groups(["g"])
        assert during.state is GroupState.COMPLETING_REBALANCE
        assert {m.client_id for m in during.members} == {"a", "b", "c"}
        assert {m.assignment for m in during.members} == {b""}
        assert {m.partitions for m in during.members} == {()}
        plan = {r.member_id: consumer_assignment("t", [i, i + 3]) for i, r in enumerate(results)}
        plan[results[2].member_id] = b"garbage"
        syncs = [
            asyncio.create_task(c.sync_group("g", r.generation_id, r.member_id, plan))
            for r in results
            if r is not leader
        ]
        await c.sync_group("g", leader.generation_id, leader.member_id, plan)
        await asyncio.gather(*syncs)

        [described, dead] = c.describe_groups(["g", "nosuch"])
        assert (described.state, described.protocol_type, described.protocol_name) == (
            GroupState.STABLE,
            "consumer",
            "range",
        )
        by_id = {m.member_id: m for m in described.members}
        assert set(by_id) == {r.member_id for r in results}
        first, second, third = (by_id[r.member_id] for r in results)
        assert first.client_host == "/127.0.0.1"
        assert first.partitions == (TopicPartition("t", 0), TopicPartition("t", 3))
        assert second.partitions == (TopicPartition("t", 1), TopicPartition("t", 4))
        assert third.partitions is None  # does not decode: shown as unknown, not as nothing
        assert third.assignment == b"garbage"
        assert first.metadata == first.client_id.encode()  # its metadata of "range"
        assert (dead.group_id, dead.state, dead.members) == ("nosuch", GroupState.DEAD, ())

        [listed] = c.list_groups()
        assert (listed.group_id, listed.protocol_type, listed.state) == (
            "g",
            "consumer",
            GroupState.STABLE,
        )
        assert c.list_groups([GroupState.EMPTY]) == []

    run(main())


def test_a_group_of_another_protocol_type_has_no_decoded_partitions() -> None:
    async def main() -> None:
        c = coordinator()
        member = await c.join_group(
            "connect-cluster",
            "",
            group_instance_id=None,
            client_id="worker",
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            protocol_type="connect",
            protocols=[("sessioned", b"")],
        )
        await c.sync_group(
            "connect-cluster", member.generation_id, member.member_id, {member.member_id: b"x"}
        )
        [described] = c.describe_groups(["connect-cluster"])
        assert [(m.assignment, m.partitions) for m in described.members] == [(b"x", None)]

    run(main())


def test_a_new_member_past_group_max_size_is_refused_and_the_members_carry_on() -> None:
    async def main() -> None:
        c = coordinator(max_size=3)
        members = await join_three(c)
        assert all(r.error_code == NONE for r in members)
        extra = await join(c, client="d")
        assert extra.error_code == GROUP_MAX_SIZE_REACHED
        assert len(c.groups["g"].members) == 3
        assert c.groups["g"].state is GroupState.COMPLETING_REBALANCE  # no rebalance for it
        leader = next(r for r in members if r.member_id == r.leader)
        again = await join(c, leader.member_id, client="a")  # a member may rejoin
        assert again.error_code == NONE

    run(main())


def test_protocol_metadata_over_the_limit_is_refused_and_not_kept() -> None:
    async def main() -> None:
        c = coordinator(max_protocol_metadata_bytes=1000)
        big = [("range", b"x" * 600), ("roundrobin", b"y" * 600)]
        refused = await join(c, protocols=big)
        assert refused.error_code == INVALID_REQUEST
        assert "g" not in c.groups
        fits = await join(c, protocols=[("range", b"x" * 1000)])
        assert fits.error_code == NONE

    run(main())
