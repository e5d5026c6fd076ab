"""Consumer groups through ZooKeeper against real brokers: the range split among members, the
rebalance when a member leaves, every record read exactly once, committed offsets that
outlive a consumer, and a topic created after the group subscribed to it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from client.consumer import Consumer, ConsumerConfig, ConsumerRecord
from client.group import GroupMember, RebalanceFailedError
from proto.topic_partition import TopicPartition
from proto.zk import znodes
from proto.zk.sync_client import read_consumer_offset, read_consumer_offsets
from tests.cluster import Cluster, running_cluster
from tests.helpers import close_session_from_another_client
from tests.integration.test_client_consumer import (
    connections_to,
    poll_until,
    produce_until_acked,
    run,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TOPIC = "events"
TPS = [TopicPartition(TOPIC, p) for p in range(6)]


class Reader:
    """Polls one consumer in the background, keeping every record it returns."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.records: list[ConsumerRecord] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            self.records += await self.consumer.poll(timeout_ms=200)

    async def stop(self) -> None:
        """Stop polling; a poll that failed re-raises here."""
        assert self._task is not None
        if self._task.done():
            self._task.result()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def eventually(
    predicate: Callable[[], bool],
    timeout_s: float,
    message: str,
    *,
    raise_on_timeout: bool = True,
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() >= deadline:
            if not raise_on_timeout:
                return
            raise AssertionError(f"{message} (after {timeout_s}s)")
        await asyncio.sleep(0.05)


def produce_round(cluster: Cluster, tag: str, per_partition: int) -> set[bytes]:
    written = set()
    for tp in TPS:
        values = [f"{tag}-{tp.partition}-{i}".encode() for i in range(per_partition)]
        produce_until_acked(cluster, tp, values)
        written.update(values)
    return written


def group_config(group: str, **overrides: object) -> ConsumerConfig:
    settings: dict[str, object] = {
        "group_id": group,
        "auto_offset_reset": "earliest",
        "fetch_max_wait_ms": 100,
        "zookeeper_session_timeout_ms": 4000,
        **overrides,
    }
    return ConsumerConfig(**settings)  # type: ignore[arg-type]


def test_three_members_split_six_partitions_rebalance_when_one_leaves_and_read_each_record_once(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        cluster.create_topic(TOPIC, {p: [p % 3 + 1, (p + 1) % 3 + 1] for p in range(6)})
        written = produce_round(cluster, "first", 10)

        async def main() -> None:
            async with connections_to(cluster) as connections:
                consumers = [
                    Consumer(connections, group_config("g1"), zookeeper_connect=zk_connect)
                    for _ in range(3)
                ]
                readers = [Reader(c) for c in consumers]

                def split(members: list[Consumer], sizes: list[int]) -> bool:
                    assignments = [m.assignment() for m in members]
                    union = set().union(*assignments)
                    return sorted(len(a) for a in assignments) == sizes and union == set(TPS)

                # Members join one by one while the others read: each join makes the
                # owners release partitions the newcomer is waiting to claim.
                for joined, sizes in enumerate(([6], [3, 3], [2, 2, 2]), start=1):
                    consumers[joined - 1].subscribe([TOPIC])
                    readers[joined - 1].start()
                    await eventually(
                        lambda j=joined, s=sizes: split(consumers[:j], s),  # type: ignore[misc]
                        30,
                        f"a {'/'.join(map(str, sizes))} split",
                    )
                # Range assignment: contiguous ranges in consumer-id order.
                ordered = sorted(consumers, key=lambda c: owner_id(zk_client, c))
                assert [sorted(c.assignment()) for c in ordered] == [TPS[0:2], TPS[2:4], TPS[4:6]]
                for consumer in consumers:
                    for tp in consumer.assignment():
                        assert owner_of(zk_client, "g1", tp) == owner_id(zk_client, consumer)

                def total() -> int:
                    return sum(len(r.records) for r in readers)

                await eventually(lambda: total() >= 60, 30, "the first 60 records")

                # The youngest member leaves: it commits what it read and releases.
                leaving = ordered[2]
                await readers[consumers.index(leaving)].stop()
                await leaving.close()
                staying = [c for c in consumers if c is not leaving]
                await eventually(lambda: split(staying, [3, 3]), 30, "a 3/3 split")
                assert [sorted(c.assignment()) for c in ordered[:2]] == [TPS[0:3], TPS[3:6]]

                more = await asyncio.to_thread(produce_round, cluster, "second", 10)
                await eventually(lambda: total() >= 120, 30, "all 120 records")
                await asyncio.sleep(0.3)  # a duplicate would arrive within a few polls
                for consumer, reader in zip(consumers, readers, strict=True):
                    if consumer is not leaving:
                        await reader.stop()
                        await consumer.close()

                read = [r.value for reader in readers for r in reader.records]
                duplicates = [v for v, n in Counter(read).items() if n > 1]
                assert not duplicates, f"read twice: {duplicates[:10]}"
                assert set(read) == written | more
                offsets = Counter((r.partition, r.offset) for rd in readers for r in rd.records)
                assert set(offsets) == {(p, o) for p in range(6) for o in range(20)}
                # Every member committed on leaving: the group is at the end of each partition.
                assert read_consumer_offsets(zk_client, "g1", TPS).require() == dict.fromkeys(
                    TPS, 20
                )
                assert zk_client.get_children(znodes.consumer_ids_path("g1")) == []

        run(main())


def owner_id(zk_client: KazooClient, consumer: Consumer) -> str:
    """The consumer id the member registered (its only ids znode not owned by others)."""
    owners = {owner_of(zk_client, "g1", tp) for tp in consumer.assignment()}
    assert len(owners) == 1, owners
    return owners.pop()


def owner_of(zk_client: KazooClient, group: str, tp: TopicPartition) -> str:
    data, _ = zk_client.get(znodes.consumer_owner_path(group, tp))
    return bytes(data).decode()


def test_committed_offsets_survive_a_consumer_restart(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    tp = TopicPartition("ledger", 0)
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        cluster.create_topic(tp.topic, {0: [1, 2, 3]})
        produce_until_acked(cluster, tp, [f"v{i}".encode() for i in range(15)])

        async def main() -> None:
            async with connections_to(cluster) as connections:
                # Auto commit: closing commits what poll returned, not what was fetched.
                first = Consumer(connections, group_config("g2"), zookeeper_connect=zk_connect)
                async with first:
                    first.subscribe([tp.topic])
                    got = await poll_until(first, 6)
                    assert [r.offset for r in got] == list(range(6))
                assert committed(zk_client, "g2", tp) == 6

                # A new member starts at the committed offset, not at auto_offset_reset.
                config = group_config("g2", auto_offset_reset="latest", enable_auto_commit=False)
                second = Consumer(connections, config, zookeeper_connect=zk_connect)
                async with second:
                    second.subscribe([tp.topic])
                    got = await poll_until(second, 4)
                    assert [r.value for r in got[:4]] == [b"v6", b"v7", b"v8", b"v9"]
                    second.seek(tp, 10)
                    await second.commit()
                    assert await second.committed(tp) == 10
                    second.seek(tp, 12)  # not committed: auto commit is off
                assert committed(zk_client, "g2", tp) == 10

                # Assigning the partition itself, a consumer still uses the group's offsets.
                standalone = Consumer(
                    connections,
                    group_config("g2", enable_auto_commit=False),
                    zookeeper_connect=zk_connect,
                )
                async with standalone:
                    standalone.assign([tp])
                    assert await standalone.position(tp) == 10
                    got = await poll_until(standalone, 5)
                    assert [r.offset for r in got] == list(range(10, 15))
                    await standalone.commit()
                assert committed(zk_client, "g2", tp) == 15
                assert not zk_client.exists(znodes.consumer_owner_path("g2", tp))

        run(main())


def committed(zk_client: KazooClient, group: str, tp: TopicPartition) -> int | None:
    return read_consumer_offset(zk_client, group, tp)


def test_a_member_picks_up_a_topic_created_after_it_subscribed(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    tp = TopicPartition("late", 0)
    with running_cluster(zk_client, zk_connect, tmp_path, broker_ids=(1,)) as cluster:

        async def main() -> None:
            connections = connections_to(cluster)
            # Created by the test, not by the member's metadata requests.
            config = group_config(
                "g3", default_api_timeout_ms=30_000, allow_auto_create_topics=False
            )
            async with connections, Consumer(connections, config, zk_connect) as consumer:
                consumer.subscribe([tp.topic])
                assert await consumer.poll(timeout_ms=300) == []
                assert consumer.assignment() == frozenset()
                await asyncio.to_thread(cluster.create_topic, tp.topic, {0: [1]})
                await asyncio.to_thread(produce_until_acked, cluster, tp, [b"hello"])
                got = await poll_until(consumer, 1)
                assert [r.value for r in got] == [b"hello"]
                assert consumer.assignment() == {tp}

        run(main())


def test_a_member_whose_zookeeper_session_expires_registers_again_and_reclaims_its_partition(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    tp = TopicPartition("sessions", 0)
    ids_path = znodes.consumer_ids_path("g4")
    with running_cluster(zk_client, zk_connect, tmp_path, broker_ids=(1,)) as cluster:
        cluster.create_topic(tp.topic, {0: [1]})
        produce_until_acked(cluster, tp, [b"a"])

        def registered_session() -> int | None:
            children = zk_client.get_children(ids_path)
            if len(children) != 1:
                return None
            stat = zk_client.exists(f"{ids_path}/{children[0]}")
            return None if stat is None else int(stat.ephemeralOwner)

        async def main() -> None:
            connections = connections_to(cluster)
            async with connections, Consumer(connections, group_config("g4"), zk_connect) as c:
                c.subscribe([tp.topic])
                assert [r.value for r in await poll_until(c, 1)] == [b"a"]
                old_session = registered_session()
                assert old_session is not None
                # A real expiry: the server closes the member's session (test-only access
                # to its kazoo client for the session id and password).
                assert c._group is not None
                kazoo_client = c._group._client

                # The member may win its session back before the close lands (kazoo
                # reconnects by itself): close it again until it is really gone.
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 30
                while registered_session() == old_session:
                    assert loop.time() < deadline, "the member's session never expired"
                    client_id = kazoo_client.client_id
                    if client_id is not None and client_id[0] == old_session:
                        await asyncio.to_thread(
                            close_session_from_another_client, zk_connect, client_id
                        )
                    await eventually(
                        lambda: registered_session() != old_session,
                        3,
                        "the old registration to go",
                        raise_on_timeout=False,
                    )

                def re_registered() -> bool:
                    session = registered_session()
                    owner = zk_client.exists(znodes.consumer_owner_path("g4", tp))
                    return (
                        session not in (None, old_session)
                        and owner is not None
                        and int(owner.ephemeralOwner) == session
                    )

                await eventually(re_registered, 30, "a new registration and owner znode")
                await asyncio.to_thread(produce_until_acked, cluster, tp, [b"b"])
                got = await poll_until(c, 1)
                assert [r.value for r in got] == [b"b"]  # from the committed offset on
                assert await c.poll(timeout_ms=300) == []

        run(main())


def test_claims_wait_for_the_previous_owner_and_give_up_after_bounded_attempts(
    zk_client: KazooClient, zk_connect: str, caplog: pytest.LogCaptureFixture
) -> None:
    """ZooKeeper only: another member's owner znode blocks a claim until it is released;
    one that is never released fails the rebalance after rebalance.max.retries."""
    caplog.set_level(logging.INFO, logger="client.group")

    def failed_attempts() -> int:
        return sum("rebalance_attempt_failed" in r.getMessage() for r in caplog.records)

    zk_client.create(
        znodes.topic_path("t"), znodes.encode_topic_assignment({0: [1], 1: [1]}), makepath=True
    )
    held = znodes.consumer_owner_path("g5", TopicPartition("t", 0))
    zk_client.create(held, b"g5_other-member", makepath=True)

    async def main() -> None:
        member = GroupMember(
            zk_connect, "g5", ["t"], rebalance_max_retries=1, rebalance_backoff_ms=200
        )
        await member.start()
        try:
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(RebalanceFailedError, match="t-0 by g5_other-member"):
                await member.rebalance()
            assert loop.time() - started >= 0.4  # two attempts of 200 ms, a pause between
            # A failed attempt releases what it did claim, so nobody waits on this member.
            assert member.owned == frozenset()
            assert not zk_client.exists(znodes.consumer_owner_path("g5", TopicPartition("t", 1)))

            # The other member lets go while this one waits: the claim goes through. The
            # release is timed by the member's first refused claim, not by a sleep, so a
            # loaded machine cannot make it land after the member gave up.
            failed_before = failed_attempts()

            async def release_after_a_refused_claim() -> None:
                await eventually(
                    lambda: failed_attempts() > failed_before, 10, "a refused first attempt"
                )
                await asyncio.to_thread(zk_client.delete, held)

            releasing = asyncio.create_task(release_after_a_refused_claim())
            await member.commit({TopicPartition("t", 1): 7})
            assignment = await member.rebalance()
            await releasing
            assert assignment.partitions == {
                TopicPartition("t", 0): None,
                TopicPartition("t", 1): 7,
            }
            assert assignment.missing_topics == frozenset()
            data, _ = zk_client.get(held)
            assert bytes(data).decode() == member.consumer_id
        finally:
            await member.close()
        assert not zk_client.exists(held)  # the session's end released it

    run(main())
