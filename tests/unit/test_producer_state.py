"""ProducerStateManager: the idempotent producer's checks (duplicates of each of the last five
batches, gaps, sequence wrap at INT32_MAX, epoch bumps and fencing), and the state a Log
rebuilds from its batch headers on open, after follower appends and after truncation."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from broker.log.log import Log
from broker.log.producer_state import (
    BATCHES_PER_PRODUCER,
    AppendOrigin,
    BatchMetadata,
    ProducerEntry,
    ProducerStateManager,
    in_sequence,
)
from proto import errors
from proto.config.log_config import LogConfig
from proto.records.record_batch import BatchHeader, Record, encode_batch, parse_header
from proto.topic_partition import TopicPartition

INT32_MAX = 2**31 - 1
TP = TopicPartition("orders", 0)


def idempotent(pid: int, epoch: int, seq: int, count: int = 1, *, tag: str = "") -> bytes:
    """A batch as an idempotent producer sends it."""
    records = [
        Record(None, f"{pid}-{epoch}-{seq + i}{tag}".encode(), 1000 + i) for i in range(count)
    ]
    return encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def plain(count: int = 1) -> bytes:
    return encode_batch([Record(None, b"plain", 1000 + i) for i in range(count)])


def header(pid: int, epoch: int, seq: int, count: int = 1, offset: int = 0) -> BatchHeader:
    """The header of an idempotent batch as written at ``offset``."""
    return parse_header(idempotent(pid, epoch, seq, count)).stamped(offset, 0)


class Writer:
    """A ProducerStateManager fed like a leader's log: check, then record at the next offset."""

    def __init__(self) -> None:
        self.state = ProducerStateManager(TP)
        self.leo = 0

    def send(self, pid: int, epoch: int, seq: int, count: int = 1) -> BatchMetadata | None:
        return self.send_all([(pid, epoch, seq, count)])

    def send_all(self, batches: list[tuple[int, int, int, int]]) -> BatchMetadata | None:
        headers = []
        offset = self.leo
        for pid, epoch, seq, count in batches:
            headers.append(header(pid, epoch, seq, count, offset))
            offset += count
        duplicate = self.state.check_leader_append(headers)
        if duplicate is None:
            self.state.update(headers)
            self.leo = offset
        return duplicate


# -- sequences -------------------------------------------------------------------------------


def test_in_sequence_wraps_at_int32_max() -> None:
    assert in_sequence(4, 5)
    assert in_sequence(INT32_MAX, 0)
    assert not in_sequence(4, 6)
    assert not in_sequence(4, 4)
    assert not in_sequence(INT32_MAX - 1, 0)


def test_a_new_producer_starts_at_zero_then_continues_without_gaps() -> None:
    w = Writer()
    with pytest.raises(errors.OutOfOrderSequenceError, match="unknown producer must be 0"):
        w.send(7, 0, 3)
    assert w.send(7, 0, 0, count=3) is None
    assert w.send(7, 0, 3, count=2) is None
    entry = w.state.entry(7)
    assert entry == ProducerEntry(0, (BatchMetadata(0, 2, 0, 2), BatchMetadata(3, 4, 3, 4)))
    assert entry.last_sequence == 4


@pytest.mark.parametrize("seq", [6, 100, 4, 1])  # gaps, and a repeat that matches no batch
def test_a_gap_or_a_misaligned_repeat_is_out_of_order(seq: int) -> None:
    w = Writer()
    w.send(7, 0, 0, count=3)
    w.send(7, 0, 3, count=2)
    with pytest.raises(errors.OutOfOrderSequenceError, match="expected 5"):
        w.send(7, 0, seq)
    assert w.leo == 5


def test_each_of_the_last_five_batches_is_a_duplicate_answered_with_its_offsets() -> None:
    w = Writer()
    w.send(9, 0, 0, count=2)  # the sixth-newest batch at the end: no longer cached
    w.send(8, 0, 0)  # another producer in between shifts the offsets
    for i in range(BATCHES_PER_PRODUCER):
        w.send(9, 0, 2 + 2 * i, count=2)
    leo = w.leo
    for i in range(BATCHES_PER_PRODUCER):
        base = 3 + 2 * i
        assert w.send(9, 0, 2 + 2 * i, count=2) == BatchMetadata(
            2 + 2 * i, 3 + 2 * i, base, base + 1
        )
    assert w.leo == leo  # nothing appended
    with pytest.raises(errors.OutOfOrderSequenceError):
        w.send(9, 0, 0, count=2)  # older than the cached five
    # A batch with the right first sequence but another length is not the same batch.
    with pytest.raises(errors.OutOfOrderSequenceError):
        w.send(9, 0, 10, count=1)


def test_sequences_wrap_past_int32_max() -> None:
    w = Writer()
    # A producer about to wrap, as replaying a long log would find it.
    w.state.update([header(7, 0, INT32_MAX - 1)])
    w.leo = 1
    assert w.send(7, 0, INT32_MAX, count=3) is None  # INT32_MAX, 0, 1
    assert w.state.producers[7].last_sequence == 1
    assert w.send(7, 0, 2) is None
    assert w.send(7, 0, INT32_MAX, count=3) == BatchMetadata(INT32_MAX, 1, 1, 3)
    with pytest.raises(errors.OutOfOrderSequenceError, match="expected 3"):
        w.send(7, 0, 0)


def test_a_batch_ending_at_int32_max_is_followed_by_zero() -> None:
    w = Writer()
    w.state.update([header(7, 0, INT32_MAX - 1, 2)])
    w.leo = 2
    with pytest.raises(errors.OutOfOrderSequenceError, match="expected 0"):
        w.send(7, 0, 1)  # skips 0
    assert w.send(7, 0, 0) is None


def test_an_epoch_bump_restarts_at_zero_and_fences_the_old_epoch() -> None:
    w = Writer()
    w.send(7, 0, 0, count=2)
    w.send(7, 0, 2)
    with pytest.raises(errors.OutOfOrderSequenceError, match="new epoch"):
        w.send(7, 1, 3)
    assert w.send(7, 1, 0) is None
    assert w.state.entry(7) == ProducerEntry(1, (BatchMetadata(0, 0, 3, 3),))
    # The old epoch is fenced, even for what would have been a duplicate or the next batch.
    for seq in (0, 2, 3):
        with pytest.raises(errors.InvalidProducerEpochError, match="fenced"):
            w.send(7, 0, seq)
    assert w.send(7, 1, 0) == BatchMetadata(0, 0, 3, 3)


def test_a_coordinators_batches_are_checked_for_their_epoch_not_their_sequence() -> None:
    """The group coordinator writes a transaction's offsets with sequence 0 every time
    (Kafka's ``AppendOrigin.Coordinator``): no sequence check, no duplicate detection, but
    a fenced epoch is still refused."""
    w = Writer()
    w.send(7, 2, 0)
    coordinator = AppendOrigin.COORDINATOR
    for offset in (1, 2):  # a repeat of sequence 0 is neither out of order nor a duplicate
        headers = [header(7, 2, 0, offset=offset)]
        assert w.state.check_leader_append(headers, coordinator) is None
        w.state.update(headers)
    with pytest.raises(errors.OutOfOrderSequenceError):
        w.state.check_leader_append([header(7, 2, 5, offset=3)])
    with pytest.raises(errors.InvalidProducerEpochError, match="fenced"):
        w.state.check_leader_append([header(7, 1, 0, offset=3)], coordinator)


def test_batches_without_a_producer_id_are_never_checked() -> None:
    state = ProducerStateManager(TP)
    headers = [parse_header(plain(2)), parse_header(plain(1)).stamped(2, 0)]
    assert state.check_leader_append(headers) is None
    state.update(headers)
    assert state.producers == {}


def test_several_batches_of_one_entry_are_checked_in_order() -> None:
    w = Writer()
    assert w.send_all([(7, 0, 0, 2), (7, 0, 2, 3), (8, 0, 0, 1)]) is None
    assert w.leo == 6
    # A gap in the second batch refuses the whole entry: the first is not written either.
    with pytest.raises(errors.OutOfOrderSequenceError):
        w.send_all([(7, 0, 5, 1), (7, 0, 7, 1)])
    assert w.leo == 6
    assert w.state.producers[7].last_sequence == 4
    # Within an entry a repeat of its own earlier batch is out of order, not a duplicate.
    with pytest.raises(errors.OutOfOrderSequenceError):
        w.send_all([(7, 0, 5, 1), (7, 0, 5, 1)])
    # A retried entry: all duplicates, answered as one range.
    assert w.send_all([(7, 0, 0, 2), (7, 0, 2, 3)]) == BatchMetadata(0, 4, 0, 4)
    # Duplicates mixed with new batches cannot be answered with one base offset.
    with pytest.raises(errors.InvalidRequestError, match="written before"):
        w.send_all([(7, 0, 2, 3), (7, 0, 5, 1)])
    assert w.leo == 6


# -- the state in a Log ----------------------------------------------------------------------


def open_log(path: Path, **config: int) -> Log:
    return Log.open(path / "orders-0", LogConfig(**config))  # type: ignore[arg-type]


def replayed(log: Log) -> dict[int, ProducerEntry]:
    """The state a fresh replay of the log's files gives (a copy of the directory, opened)."""
    copy = log.directory.parent / "copy" / log.directory.name
    shutil.rmtree(copy.parent, ignore_errors=True)
    shutil.copytree(log.directory, copy)
    reopened = Log.open(copy, log.config)
    try:
        return dict(reopened.producer_state.producers)
    finally:
        reopened.close()


def test_leader_append_of_a_retry_writes_nothing_and_answers_the_original_offsets(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(plain(2), 0)
    first = log.append_as_leader(idempotent(7, 0, 0, 3), 0)
    assert (first.first_offset, first.last_offset, first.duplicate) == (2, 4, False)
    log.append_as_leader(plain(1), 0)
    again = log.append_as_leader(idempotent(7, 0, 0, 3), 0)
    assert (again.first_offset, again.last_offset, again.duplicate) == (2, 4, True)
    assert again.num_batches == 0
    assert log.log_end_offset == 6
    with pytest.raises(errors.OutOfOrderSequenceError):
        log.append_as_leader(idempotent(7, 0, 4), 0)
    assert log.log_end_offset == 6


def test_a_follower_learns_the_producers_from_what_it_appends(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    leader.append_as_leader(idempotent(7, 0, 0, 2), 0)
    leader.append_as_leader(plain(), 0)
    leader.append_as_leader(idempotent(7, 0, 2), 1)
    follower = open_log(tmp_path / "follower")
    follower.append_as_follower(leader.read(0, 1 << 20).records)
    assert follower.producer_state.producers == leader.producer_state.producers
    # Once it leads, a retry of the last acknowledged batch is a duplicate there too.
    retry = follower.append_as_leader(idempotent(7, 0, 2), 2)
    assert (retry.duplicate, retry.first_offset) == (True, 3)


def write_history(log: Log) -> None:
    """Three producers over several segments, with an epoch bump and plain batches."""
    seqs = {1: 0, 2: 0, 3: 0}
    for round_ in range(8):
        for pid in (1, 2):
            log.append_as_leader(idempotent(pid, 0, seqs[pid], 2), round_ // 3)
            seqs[pid] += 2
        log.append_as_leader(plain(), round_ // 3)
        if round_ >= 5:
            epoch = 1 if round_ >= 6 else 0
            if round_ == 6:
                seqs[3] = 0
            log.append_as_leader(idempotent(3, epoch, seqs[3]), round_ // 3)
            seqs[3] += 1


def test_reopening_rebuilds_the_same_state_from_the_headers(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=500)
    write_history(log)
    assert len(log.segments) > 3
    state = dict(log.producer_state.producers)
    assert set(state) == {1, 2, 3}
    assert state[1].last_sequence == 15
    assert len(state[1].batches) == BATCHES_PER_PRODUCER
    assert state[3].epoch == 1
    assert [b.first_sequence for b in state[3].batches] == [0, 1]
    log.close()
    reopened = open_log(tmp_path, segment_bytes=500)
    assert reopened.producer_state.producers == state
    # The rebuilt state is used: a retry is a duplicate, a gap is refused.
    assert reopened.append_as_leader(idempotent(1, 0, 14, 2), 3).duplicate
    with pytest.raises(errors.OutOfOrderSequenceError):
        reopened.append_as_leader(idempotent(2, 0, 17), 3)


def entry_of(log: Log, pid: int) -> ProducerEntry | None:
    return log.producer_state.entry(pid)


@pytest.mark.parametrize("cut", ["active segment", "segments back", "every idempotent batch"])
def test_truncation_rebuilds_the_state_of_the_remaining_log(tmp_path: Path, cut: str) -> None:
    log = open_log(tmp_path, segment_bytes=500)
    write_history(log)
    end = log.log_end_offset
    target = {
        "active segment": end - 2,
        "segments back": log.segments[-3].base_offset + 1,
        "every idempotent batch": 0,
    }[cut]
    log.truncate_to(target)
    assert log.log_end_offset <= target
    assert log.producer_state.producers == replayed(log)
    # Truncated batches are no longer duplicates: their sequences may be written again.
    for pid in (1, 2):
        entry = entry_of(log, pid)
        next_seq = 0 if entry is None else entry.last_sequence + 1
        assert not log.append_as_leader(idempotent(pid, 0, next_seq, tag="again"), 5).duplicate
    assert log.producer_state.producers == replayed(log)


def test_truncating_the_new_epoch_away_restores_the_old_one(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(idempotent(3, 0, 0, 2), 0)
    log.append_as_leader(idempotent(3, 0, 2), 0)
    bump = log.append_as_leader(idempotent(3, 1, 0), 1)
    log.truncate_to(bump.first_offset)
    assert entry_of(log, 3) == ProducerEntry(
        0, (BatchMetadata(0, 1, 0, 1), BatchMetadata(2, 2, 2, 2))
    )
    assert log.append_as_leader(idempotent(3, 0, 2), 1).duplicate


def test_truncation_of_plain_batches_keeps_the_state_without_a_replay() -> None:
    state = ProducerStateManager(TP)
    state.take_snapshot(0)
    state.update([header(1, 0, 0, 2, offset=0)])
    state.take_snapshot(5)
    assert state.truncate_to(2) is None  # the producer's batch ends at 1: untouched
    assert state.snapshot_offsets == [0]  # the snapshot past the new end is gone
    assert state.truncate_to(1) == 0  # the batch at 0..1 is cut: replay from the snapshot
    assert state.producers == {}


def test_truncate_fully_forgets_every_producer(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(idempotent(1, 0, 0), 0)
    log.truncate_fully_and_start_at(10)
    assert log.producer_state.producers == {}
    assert not log.append_as_leader(idempotent(1, 0, 0), 0).duplicate
