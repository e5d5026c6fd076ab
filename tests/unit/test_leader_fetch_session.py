"""Incremental fetch sessions (KIP-227) on the leader: ReplicaManager.fetch_in_session over
real logs and partitions (no ZooKeeper, no gRPC; the wire side is in
tests/integration/test_incremental_fetch.py).

The session must read and answer only what changed, and still leave every follower exactly
as fresh as full fetches would: a follower that was idle for longer than
replica.lag.time.max.ms is caught up the moment a write arrives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from broker.log.log import Log
from broker.replication.fetch_session import FetchSessionState, FetchSpec
from broker.replication.partition import LeadershipState, Partition, PartitionConfig
from broker.replication.replica_manager import FetchPartitionResult, ReplicaManager
from proto.config.log_config import LogConfig
from proto.records.record_batch import Record, decode_batch, encode_batch
from proto.topic_partition import TopicPartition
from proto.wire.minibroker_pb2 import ErrorCode
from tests.unit.test_replica_manager import empty_replica_manager

TPS = [TopicPartition("session", i) for i in range(3)]
FOLLOWER = 2
LAG_MS = 10_000


class _Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


@contextmanager
def leader(tmp_path: Path, clock: _Clock) -> Iterator[ReplicaManager]:
    """Broker 1 leading TPS with broker 2 in every ISR."""
    with ThreadPoolExecutor(1) as executor:
        manager = empty_replica_manager(tmp_path, executor, clock)
        for tp in TPS:
            partition = Partition(
                tp,
                1,
                Log.open(tmp_path / tp.dir_name, LogConfig()),
                config=PartitionConfig(replica_lag_time_max_ms=LAG_MS),
                clock_ms=clock,
            )
            state = LeadershipState(1, 0, (1, FOLLOWER), (1, FOLLOWER), 0, controller_epoch=1)
            assert partition.make_leader(state)
            manager.partitions[tp] = partition
        try:
            yield manager
        finally:
            for partition in manager.partitions.values():
                partition.log.close()


def spec(offset: int) -> FetchSpec:
    return FetchSpec(fetch_offset=offset, max_bytes=1 << 20, current_leader_epoch=0)


async def fetch(
    manager: ReplicaManager,
    session: FetchSessionState,
    changed: dict[TopicPartition, FetchSpec] | None = None,
    forgotten: list[TopicPartition] | None = None,
    max_wait_ms: int = 0,
) -> dict[TopicPartition, FetchPartitionResult]:
    return await manager.fetch_in_session(
        session, max_wait_ms, 1, 10 << 20, changed or {}, forgotten or []
    )


async def append(manager: ReplicaManager, tp: TopicPartition, value: bytes) -> None:
    batch = encode_batch([Record(None, value, 1)])
    results = await manager.append_to_local_logs(1, {tp: batch})
    assert results.results[tp].error_code == ErrorCode.NONE


def values(result: FetchPartitionResult) -> list[bytes | None]:
    return [r.value for r in decode_batch(result.records).records] if result.records else []


def test_a_session_answers_everything_first_then_only_what_changed(tmp_path: Path) -> None:
    async def main() -> None:
        with leader(tmp_path, _Clock()) as manager:
            for tp in TPS:
                await append(manager, tp, b"first")
            session = manager.open_fetch_session(FOLLOWER)
            first = await fetch(manager, session, {tp: spec(0) for tp in TPS})
            assert set(first) == set(TPS)
            assert all(values(r) == [b"first"] for r in first.values())
            # Named at their new offsets: answered, with nothing new to read.
            named = await fetch(manager, session, {tp: spec(1) for tp in TPS})
            assert set(named) == set(TPS)
            assert all(not r.records for r in named.values())
            # The follower's fetch moved every HW: that is news, answered once.
            hws = await fetch(manager, session)
            assert {tp: r.high_watermark for tp, r in hws.items()} == {tp: 1 for tp in TPS}
            assert await fetch(manager, session) == {}
            await append(manager, TPS[1], b"second")
            changed = await fetch(manager, session)
            assert list(changed) == [TPS[1]]
            assert values(changed[TPS[1]]) == [b"second"]

    asyncio.run(main())


def test_a_write_ends_the_long_poll_of_a_session_that_names_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        with leader(tmp_path, _Clock()) as manager:
            session = manager.open_fetch_session(FOLLOWER)
            assert set(await fetch(manager, session, {tp: spec(0) for tp in TPS})) == set(TPS)
            loop = asyncio.get_running_loop()
            started = loop.time()
            polling = asyncio.create_task(fetch(manager, session, max_wait_ms=30_000))
            await asyncio.sleep(0)  # let it start waiting
            assert not polling.done()
            await append(manager, TPS[2], b"wakes it")
            answer = await asyncio.wait_for(polling, 10)
            assert loop.time() - started < 10
            assert list(answer) == [TPS[2]]
            assert values(answer[TPS[2]]) == [b"wakes it"]

    asyncio.run(main())


def test_forgotten_and_failed_partitions_leave_the_session(tmp_path: Path) -> None:
    async def main() -> None:
        with leader(tmp_path, _Clock()) as manager:
            unknown = TopicPartition("not-hosted", 0)
            session = manager.open_fetch_session(FOLLOWER)
            first = await fetch(manager, session, {**{tp: spec(0) for tp in TPS}, unknown: spec(0)})
            assert first[unknown].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert set(session.specs) == set(TPS)
            assert unknown not in manager._fetch_sessions
            await fetch(manager, session, forgotten=[TPS[0]])
            await append(manager, TPS[0], b"not for this session")
            assert await fetch(manager, session) == {}
            assert set(session.specs) == {TPS[1], TPS[2]}
            manager.close_fetch_session(session)
            assert manager._fetch_sessions == {}

    asyncio.run(main())


def test_an_idle_follower_stays_caught_up_without_being_read(tmp_path: Path) -> None:
    """Unread partitions of a session count as fetched: a follower idle for longer than the
    lag time is not out of sync the moment a write arrives (its caught-up time is that of its
    last fetch, not of the last fetch that read the partition)."""

    async def main() -> None:
        clock = _Clock()
        with leader(tmp_path, clock) as manager:
            session = manager.open_fetch_session(FOLLOWER)
            await fetch(manager, session, {tp: spec(0) for tp in TPS})
            for _ in range(5):  # idle fetches, 3 lag times apart in all
                clock.now_ms += LAG_MS * 3 // 5
                assert await fetch(manager, session) == {}
            partition = manager.partitions[TPS[0]]
            replica = partition.remote_replicas[FOLLOWER]
            assert replica.caught_up_time_ms() == clock.now_ms
            last_fetch = clock.now_ms
            clock.now_ms += 100
            await append(manager, TPS[0], b"after a long quiet")
            assert (replica.session_clock, replica.last_caught_up_time_ms) == (None, last_fetch)
            assert partition.isr_to_shrink() is None
            assert partition.high_watermark == 0
            answer = await fetch(manager, session)
            assert values(answer[TPS[0]]) == [b"after a long quiet"]
            await fetch(manager, session, {TPS[0]: spec(1)})
            assert partition.high_watermark == 1

    asyncio.run(main())


def test_a_follower_behind_is_not_caught_up_by_its_sessions_fetches(tmp_path: Path) -> None:
    """The fetches that do not read a partition count as fetches from the offset last named:
    a follower that named an offset below the leader's log end and then nothing new stays
    behind, and leaves the ISR after the lag time."""

    async def main() -> None:
        clock = _Clock()
        with leader(tmp_path, clock) as manager:
            await append(manager, TPS[0], b"never taken")
            session = manager.open_fetch_session(FOLLOWER)
            await fetch(manager, session, {tp: spec(0) for tp in TPS})
            partition = manager.partitions[TPS[0]]
            behind_since = partition.remote_replicas[FOLLOWER].caught_up_time_ms()
            for _ in range(3):
                clock.now_ms += LAG_MS // 2
                await fetch(manager, session)
            assert partition.remote_replicas[FOLLOWER].caught_up_time_ms() == behind_since
            assert partition.isr_to_shrink() == (1,)
            assert manager.partitions[TPS[1]].isr_to_shrink() is None  # caught up, at its end

    asyncio.run(main())
