"""High watermark, ISR and leader-epoch rules of a partition replica (no servers needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.log import Log
from broker.replication.partition import ACKS_ALL, LeadershipState, Partition, PartitionConfig
from proto import errors
from proto.config.log_config import LogConfig
from proto.records.record_batch import Record, encode_batch
from proto.topic_partition import TopicPartition
from proto.wire.minibroker_pb2 import ErrorCode

TP = TopicPartition("t", 0)
LAG_MS = 10_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def batch(n: int = 1) -> bytes:
    return encode_batch([Record(key=None, value=b"v%d" % i, timestamp=0) for i in range(n)])


def state(
    leader: int = 1, epoch: int = 0, isr: tuple[int, ...] = (1, 2, 3), version: int = 0
) -> LeadershipState:
    return LeadershipState(leader, epoch, isr, (1, 2, 3), version, controller_epoch=1)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def leader(tmp_path: Path, clock: Clock) -> Partition:
    log = Log.open(tmp_path / "t-0", LogConfig())
    p = Partition(
        TP,
        1,
        log,
        config=PartitionConfig(min_insync_replicas=2, replica_lag_time_max_ms=LAG_MS),
        clock_ms=clock,
    )
    assert p.make_leader(state())
    return p


def test_becoming_leader_records_the_epoch_at_the_leo(leader: Partition) -> None:
    leader.append_records_to_leader(batch(3), ACKS_ALL)
    assert leader.make_leader(state(epoch=4))
    assert leader.log.epoch_cache.latest_entry() == (4, 3)
    assert leader.leader_epoch_start_offset == 3


def test_a_failed_epoch_checkpoint_leaves_the_partition_in_its_old_role(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of descriptors, the epoch checkpoint cannot be written: the partition must not
    lead without its epoch recorded (it stays a follower at its old epoch)."""
    log = Log.open(tmp_path / "t-0", LogConfig())
    p = Partition(TP, 2, log, config=PartitionConfig(min_insync_replicas=1), clock_ms=clock)
    assert p.make_follower(state(leader=1, epoch=3))

    def no_descriptors(epoch: int, start_offset: int) -> None:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(log.epoch_cache, "assign", no_descriptors)
    with pytest.raises(OSError, match="Too many open files"):
        p.make_leader(state(leader=2, epoch=4))
    assert not p.is_leader
    assert (p.leader_id, p.leader_epoch) == (1, 3)


def test_hw_is_the_minimum_leo_of_the_isr(leader: Partition) -> None:
    leader.append_records_to_leader(batch(5), ACKS_ALL)
    assert leader.high_watermark == 0  # followers' LEOs unknown after becoming leader
    assert not leader.update_follower_fetch_state(2, 5, 0)
    assert leader.update_follower_fetch_state(3, 3, 0)
    assert leader.high_watermark == 3
    assert leader.update_follower_fetch_state(3, 5, 0)
    assert leader.high_watermark == 5


def test_hw_never_moves_backwards(leader: Partition) -> None:
    leader.append_records_to_leader(batch(5), ACKS_ALL)
    leader.update_follower_fetch_state(2, 5, 0)
    leader.update_follower_fetch_state(3, 5, 0)
    assert leader.high_watermark == 5
    assert not leader.update_follower_fetch_state(3, 2, 0)
    assert leader.high_watermark == 5


def test_acks_all_refused_below_min_isr_without_touching_the_log(leader: Partition) -> None:
    leader.apply_isr((1,), zk_version=1)
    with pytest.raises(errors.NotEnoughReplicasError):
        leader.append_records_to_leader(batch(), ACKS_ALL)
    assert leader.log_end_offset == 0
    leader.append_records_to_leader(batch(), required_acks=1)  # acks=1 still works
    assert leader.log_end_offset == 1


def test_produce_status_waits_for_hw_then_checks_min_isr(leader: Partition) -> None:
    info = leader.append_records_to_leader(batch(2), ACKS_ALL)
    required = info.last_offset + 1
    assert leader.produce_status(required) is None
    leader.update_follower_fetch_state(2, 2, 0)
    leader.update_follower_fetch_state(3, 2, 0)
    assert leader.produce_status(required) == ErrorCode.NONE
    leader.apply_isr((1,), zk_version=1)
    assert leader.produce_status(required) == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_lagging_follower_leaves_the_isr_after_the_lag_time(
    leader: Partition, clock: Clock
) -> None:
    leader.append_records_to_leader(batch(), ACKS_ALL)
    leader.update_follower_fetch_state(2, 1, 0)  # caught up
    leader.update_follower_fetch_state(3, 0, 0)  # behind
    clock.now += LAG_MS
    assert leader.isr_to_shrink() is None  # not yet past the lag time
    clock.now += 1
    assert leader.isr_to_shrink() == (1, 2)


def test_a_fenced_leader_shrinks_no_isr(leader: Partition, clock: Clock) -> None:
    leader.append_records_to_leader(batch(1), ACKS_ALL)
    clock.now += LAG_MS + 1
    leader.fence("this broker is shutting down")
    assert leader.isr_to_shrink() is None  # it may have been replaced already
    leader.make_leader(state(epoch=1))
    assert leader.isr_to_shrink() is None  # a new term: the lag counts from now
    clock.now += LAG_MS + 1
    assert leader.isr_to_shrink() == (1,)


def test_follower_at_the_leo_never_leaves_the_isr(leader: Partition, clock: Clock) -> None:
    leader.update_follower_fetch_state(2, 0, 0)
    leader.update_follower_fetch_state(3, 0, 0)
    clock.now += 10 * LAG_MS
    assert leader.isr_to_shrink() is None  # idle partition: nobody is behind


def test_shrinking_the_isr_lets_the_hw_advance(leader: Partition, clock: Clock) -> None:
    leader.append_records_to_leader(batch(4), ACKS_ALL)
    leader.update_follower_fetch_state(2, 4, 0)
    assert leader.high_watermark == 0  # follower 3 never fetched
    clock.now += LAG_MS + 1
    new_isr = leader.isr_to_shrink()
    assert new_isr == (1, 2)
    assert leader.apply_isr(new_isr, zk_version=1)
    assert leader.high_watermark == 4


def test_follower_rejoins_only_past_hw_and_epoch_start(tmp_path: Path, clock: Clock) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    p = Partition(
        TP, 1, log, config=PartitionConfig(replica_lag_time_max_ms=LAG_MS), clock_ms=clock
    )
    p.make_leader(state(isr=(1, 2)))
    p.append_records_to_leader(batch(3), 1)
    p.update_follower_fetch_state(2, 3, 0)
    p.make_leader(state(epoch=1, isr=(1, 2)))  # epoch 1 starts at offset 3
    p.append_records_to_leader(batch(2), 1)
    p.update_follower_fetch_state(2, 5, 0)
    assert p.high_watermark == 5
    clock.now += LAG_MS + 1
    p.update_follower_fetch_state(3, 2, 0)
    assert p.isr_to_expand(3) is None  # below the HW
    p.update_follower_fetch_state(3, 5, 0)
    assert p.isr_to_expand(3) == (1, 2, 3)


def test_rejoin_needs_the_epoch_start_even_above_the_hw(tmp_path: Path, clock: Clock) -> None:
    # KAFKA-7128: a new leader's HW may lag behind the LEO at which its epoch starts; a
    # follower between the two would rejoin with a log the new leader may still truncate.
    log = Log.open(tmp_path / "t-0", LogConfig())
    for _ in range(5):
        log.append_as_leader(batch(), 0)  # written while a follower, say
    p = Partition(TP, 1, log, high_watermark=3, clock_ms=clock)
    p.make_leader(state(epoch=1, isr=(1, 2)))
    assert (p.high_watermark, p.leader_epoch_start_offset) == (3, 5)
    p.update_follower_fetch_state(3, 4, 0)
    assert p.isr_to_expand(3) is None  # at/above the HW, below the epoch start
    p.update_follower_fetch_state(3, 5, 0)
    assert p.isr_to_expand(3) == (1, 2, 3)


def test_stale_leader_epoch_is_ignored(leader: Partition) -> None:
    assert leader.make_leader(state(epoch=3))
    assert not leader.make_leader(state(epoch=2))
    assert not leader.make_follower(state(leader=2, epoch=2))
    assert leader.is_leader
    assert leader.leader_epoch == 3


def test_request_epochs_are_fenced(leader: Partition) -> None:
    leader.make_leader(state(epoch=3))
    leader.check_leader_epoch(None)
    leader.check_leader_epoch(3)
    with pytest.raises(errors.FencedLeaderEpochError):
        leader.check_leader_epoch(2)
    with pytest.raises(errors.UnknownLeaderEpochError):
        leader.check_leader_epoch(4)


def test_follower_hw_is_min_of_leader_hw_and_own_leo(tmp_path: Path, clock: Clock) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    p = Partition(TP, 2, log, clock_ms=clock)
    assert p.make_follower(state(leader=1))
    leader_log = Log.open(tmp_path / "leader" / "t-0", LogConfig())
    for _ in range(3):
        leader_log.append_as_leader(batch(), 0)
    p.append_as_follower(leader_log.read(0, 1 << 20).records)
    assert p.update_follower_high_watermark(10)
    assert p.high_watermark == 3
    assert p.update_follower_high_watermark(2)
    assert p.high_watermark == 2
    p.truncate_to(1)
    assert p.high_watermark == 1


def test_fenced_leader_refuses_writes(leader: Partition) -> None:
    leader.fence("ZooKeeper session lost")
    with pytest.raises(errors.NotLeaderOrFollowerError, match="fenced: ZooKeeper session lost"):
        leader.append_records_to_leader(batch(), 1)
    assert leader.produce_status(0) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    leader.make_leader(state(epoch=1))
    assert not leader.fenced


def test_consumer_reads_stop_at_the_hw(leader: Partition) -> None:
    leader.append_records_to_leader(batch(2), 1)
    leader.append_records_to_leader(batch(2), 1)
    leader.update_follower_fetch_state(2, 2, 0)
    leader.update_follower_fetch_state(3, 2, 0)
    consumer = leader.read(0, 1 << 20, is_follower_fetch=False, min_one_batch=True)
    follower = leader.read(0, 1 << 20, is_follower_fetch=True, min_one_batch=True)
    assert consumer.high_watermark == 2
    assert consumer.data.next_offset == 2
    assert follower.data.next_offset == 4
    assert leader.bytes_available(0, is_follower_fetch=False) > 0
    assert leader.bytes_available(2, is_follower_fetch=False) == 0
    assert leader.bytes_available(2, is_follower_fetch=True) > 0
