"""DelayedProduce and DelayedFetch against real partitions and logs (no servers needed)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.log.log import Log
from broker.replication.delayed_fetch import DelayedFetch, FetchPartitionStatus
from broker.replication.delayed_produce import DelayedProduce, ProducePartitionStatus
from broker.replication.partition import ACKS_ALL, LeadershipState, Partition, PartitionConfig
from broker.replication.purgatory import DelayedOperationPurgatory
from proto.config.log_config import LogConfig
from proto.records.record_batch import Record, encode_batch
from proto.topic_partition import TopicPartition
from proto.wire.minibroker_pb2 import ErrorCode

TP = TopicPartition("t", 0)


def batch() -> bytes:
    return encode_batch([Record(key=None, value=b"x" * 50, timestamp=0)])


def make_leader(tmp_path: Path, isr: tuple[int, ...] = (1, 2)) -> Partition:
    log = Log.open(tmp_path / "t-0", LogConfig())
    p = Partition(
        TP, 1, log, config=PartitionConfig(min_insync_replicas=2), clock_ms=lambda: 1_000_000
    )
    p.make_leader(LeadershipState(1, 0, isr, (1, 2), 0, 1))
    return p


def test_produce_completes_when_the_follower_catches_up(tmp_path: Path) -> None:
    async def scenario() -> None:
        p = make_leader(tmp_path)
        info = p.append_records_to_leader(batch(), ACKS_ALL)
        statuses = {TP: ProducePartitionStatus(info.last_offset + 1, info.first_offset)}
        purgatory: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory("p")
        op = DelayedProduce(10_000, statuses, {TP: p}.get)
        assert not purgatory.try_complete_else_watch(op, [TP])
        p.update_follower_fetch_state(2, 1, 0)
        purgatory.check_and_complete(TP)
        await asyncio.wait_for(op.wait(), 1)
        assert statuses[TP].error_code == ErrorCode.NONE

    asyncio.run(scenario())


def test_produce_times_out_as_request_timed_out(tmp_path: Path) -> None:
    async def scenario() -> None:
        p = make_leader(tmp_path)
        info = p.append_records_to_leader(batch(), ACKS_ALL)
        statuses = {TP: ProducePartitionStatus(info.last_offset + 1, info.first_offset)}
        purgatory: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory("p")
        op = DelayedProduce(20, statuses, {TP: p}.get)
        purgatory.try_complete_else_watch(op, [TP])
        await asyncio.wait_for(op.wait(), 2)
        assert statuses[TP].error_code == ErrorCode.REQUEST_TIMED_OUT

    asyncio.run(scenario())


def test_produce_fails_when_leadership_moves_away(tmp_path: Path) -> None:
    async def scenario() -> None:
        p = make_leader(tmp_path)
        info = p.append_records_to_leader(batch(), ACKS_ALL)
        statuses = {TP: ProducePartitionStatus(info.last_offset + 1, info.first_offset)}
        op = DelayedProduce(10_000, statuses, {TP: p}.get)
        purgatory: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory("p")
        purgatory.try_complete_else_watch(op, [TP])
        p.make_follower(LeadershipState(2, 1, (2,), (1, 2), 1, 1))
        purgatory.check_and_complete(TP)
        await asyncio.wait_for(op.wait(), 1)
        assert statuses[TP].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER

    asyncio.run(scenario())


def test_follower_fetch_wakes_on_append_consumer_fetch_on_hw(tmp_path: Path) -> None:
    async def scenario() -> None:
        p = make_leader(tmp_path)
        status = {TP: FetchPartitionStatus(0, p.leader_epoch, True)}
        purgatory: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory("f")
        follower = DelayedFetch(10_000, 1, True, status, {TP: p}.get)
        consumer = DelayedFetch(10_000, 1, False, dict(status), {TP: p}.get)
        assert not purgatory.try_complete_else_watch(follower, [TP])
        assert not purgatory.try_complete_else_watch(consumer, [TP])
        p.append_records_to_leader(batch(), ACKS_ALL)
        assert purgatory.check_and_complete(TP) == 1  # the follower's: LEO moved
        assert follower.is_completed
        assert not consumer.is_completed  # HW has not moved yet
        p.update_follower_fetch_state(2, 1, 0)
        assert purgatory.check_and_complete(TP) == 1
        assert consumer.is_completed

    asyncio.run(scenario())


def test_fetch_min_bytes_waits_for_enough_data(tmp_path: Path) -> None:
    async def scenario() -> None:
        p = make_leader(tmp_path, isr=(1,))
        status = {TP: FetchPartitionStatus(0, p.leader_epoch, True)}
        size = len(batch())
        op = DelayedFetch(10_000, 2 * size, False, status, {TP: p}.get)
        purgatory: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory("f")
        purgatory.try_complete_else_watch(op, [TP])
        p.append_records_to_leader(batch(), 1)
        assert purgatory.check_and_complete(TP) == 0
        p.append_records_to_leader(batch(), 1)
        assert purgatory.check_and_complete(TP) == 1

    asyncio.run(scenario())
