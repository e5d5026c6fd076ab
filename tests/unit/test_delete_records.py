"""DeleteRecords (KIP-107) below the front doors: the leader's log start offset, the low
watermark over the replicas, and the purgatory's wait for it (no servers needed)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.log.log import Log
from broker.replication.delayed_delete_records import (
    DelayedDeleteRecords,
    DeleteRecordsPartitionStatus,
)
from broker.replication.partition import ACKS_ALL, LeadershipState, Partition
from broker.replication.purgatory import DelayedOperationPurgatory
from proto import errors
from proto.config.log_config import LogConfig
from proto.records.record_batch import Record, encode_batch
from proto.topic_partition import TopicPartition
from proto.wire.minibroker_pb2 import ErrorCode

TP = TopicPartition("t", 0)


def batch(n: int) -> bytes:
    return encode_batch([Record(key=None, value=b"v%d" % i, timestamp=0) for i in range(n)])


def state(leader: int = 1, epoch: int = 0) -> LeadershipState:
    return LeadershipState(leader, epoch, (1, 2, 3), (1, 2, 3), 0, controller_epoch=1)


@pytest.fixture
def leader(tmp_path: Path) -> Partition:
    """Leader of 10 records, committed up to 8: follower 2 fetched at 10, follower 3 at 8."""
    p = Partition(TP, 1, Log.open(tmp_path / "t-0", LogConfig()), clock_ms=lambda: 0)
    assert p.make_leader(state())
    p.append_records_to_leader(batch(10), ACKS_ALL)
    p.update_follower_fetch_state(2, 10, 0)
    p.update_follower_fetch_state(3, 8, 0)
    assert p.high_watermark == 8
    return p


def everyone(_: int) -> bool:
    return True


def test_the_leader_moves_its_log_start_offset_up_to_the_high_watermark(
    leader: Partition,
) -> None:
    assert leader.delete_records_on_leader(4) == 4
    assert leader.log.log_start_offset == 4
    with pytest.raises(errors.OffsetOutOfRangeError):
        leader.log.read(3, 1000)
    assert leader.delete_records_on_leader(2) == 2  # asked for; nothing moves back
    assert leader.log.log_start_offset == 4
    with pytest.raises(errors.OffsetOutOfRangeError, match="above the high watermark 8"):
        leader.delete_records_on_leader(9)  # above the HW, though below the LEO
    with pytest.raises(errors.OffsetOutOfRangeError, match="not valid"):
        leader.delete_records_on_leader(-2)
    assert leader.delete_records_on_leader(-1) == 8  # -1: the high watermark
    assert leader.log.log_start_offset == 8


def test_only_the_leader_deletes(leader: Partition) -> None:
    leader.make_follower(state(leader=2, epoch=1))
    with pytest.raises(errors.NotLeaderOrFollowerError):
        leader.delete_records_on_leader(1)
    with pytest.raises(errors.NotLeaderOrFollowerError):
        leader.low_watermark_if_leader(everyone)


def test_the_low_watermark_is_the_smallest_log_start_offset_of_the_live_replicas(
    leader: Partition,
) -> None:
    leader.delete_records_on_leader(5)
    assert leader.low_watermark_if_leader(everyone) == 0  # the followers' fetches said 0
    leader.update_follower_fetch_state(2, 10, 5)
    assert leader.low_watermark_if_leader(everyone) == 0
    assert leader.low_watermark_if_leader(lambda broker: broker != 3) == 5  # 3 is down
    leader.update_follower_fetch_state(3, 9, 6)
    assert leader.low_watermark_if_leader(everyone) == 5  # the leader's own


def test_a_follower_follows_the_leader_up_to_its_own_log_end(tmp_path: Path) -> None:
    p = Partition(TP, 2, Log.open(tmp_path / "t-0", LogConfig()), clock_ms=lambda: 0)
    p.make_follower(state())
    p.append_as_follower(batch(6))
    assert p.follow_leader_log_start_offset(4)
    assert p.log.log_start_offset == 4
    assert not p.follow_leader_log_start_offset(3)
    assert p.follow_leader_log_start_offset(50)  # beyond what it holds: its LEO
    assert p.log.log_start_offset == 6


def test_delayed_delete_records_waits_for_the_low_watermark(leader: Partition) -> None:
    async def scenario() -> None:
        purgatory: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory("d")
        leader.delete_records_on_leader(5)
        statuses = {TP: DeleteRecordsPartitionStatus(5, 0)}
        operation = DelayedDeleteRecords(10_000, statuses, {TP: leader}.get, everyone)
        assert not purgatory.try_complete_else_watch(operation, [TP])
        leader.update_follower_fetch_state(2, 10, 5)
        assert purgatory.check_and_complete(TP) == 0
        leader.update_follower_fetch_state(3, 9, 5)
        assert purgatory.check_and_complete(TP) == 1
        await asyncio.wait_for(operation.wait(), 1)
        assert (statuses[TP].error_code, statuses[TP].low_watermark) == (ErrorCode.NONE, 5)

    asyncio.run(scenario())


def test_delayed_delete_records_times_out_or_fails_with_the_leadership(
    leader: Partition,
) -> None:
    other = TopicPartition("t", 1)

    async def scenario() -> None:
        leader.delete_records_on_leader(5)
        statuses = {
            TP: DeleteRecordsPartitionStatus(5, 0),
            other: DeleteRecordsPartitionStatus(1, 0),
        }
        operation = DelayedDeleteRecords(50, statuses, {TP: leader}.get, everyone)
        purgatory: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory("d")
        assert not purgatory.try_complete_else_watch(operation, [TP, other])
        assert statuses[other].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        await asyncio.wait_for(operation.wait(), 2)
        assert statuses[TP].error_code == ErrorCode.REQUEST_TIMED_OUT
        assert statuses[TP].low_watermark == 0

        statuses = {TP: DeleteRecordsPartitionStatus(5, 0)}
        operation = DelayedDeleteRecords(10_000, statuses, {TP: leader}.get, everyone)
        assert not purgatory.try_complete_else_watch(operation, [TP])
        leader.make_follower(state(leader=2, epoch=1))
        assert purgatory.check_and_complete(TP) == 1
        assert statuses[TP].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert statuses[TP].low_watermark == -1

    asyncio.run(scenario())
