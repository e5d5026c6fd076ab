"""A Log's transactions: the open transactions bounding the LSO and the aborted-transaction
index kept through appends, rolls, reopening, recovery, truncation and a lost index."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.log.log import Log
from broker.log.transaction_index import AbortedTxn
from broker.replication.partition import Partition
from proto.config.log_config import LogConfig
from proto.records.control_records import ControlType, EndTxnMarker, encode_marker_batch
from proto.records.record_batch import (
    TRANSACTIONAL_FLAG_MASK,
    Record,
    encode_batch,
    parse_header,
)
from proto.topic_partition import TopicPartition

SEGMENT_BYTES = 1 << 20
TP = TopicPartition("t", 0)


class Leader:
    """Writes what a partition leader writes for transactional producers, as a follower
    receives it: each batch stamped at the next offset and appended with
    ``append_as_follower`` (which takes control batches, as from a leader)."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.sequences: dict[int, int] = {}

    def write(self, pid: int, count: int = 1, *, epoch: int = 0) -> int:
        seq = self.sequences.get(pid, 0)
        self.sequences[pid] = seq + count
        data = encode_batch(
            [Record(None, b"v", 1) for _ in range(count)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            flags=TRANSACTIONAL_FLAG_MASK,
        )
        return self._append(data)

    def end(self, pid: int, kind: ControlType, *, epoch: int = 0) -> int:
        data = encode_marker_batch(
            EndTxnMarker(kind, 0), producer_id=pid, producer_epoch=epoch, timestamp=1
        )
        return self._append(data)

    def _append(self, data: bytes) -> int:
        offset = self.log.log_end_offset
        # The base offset is outside the CRC, as the leader's stamp is.
        self.log.append_as_follower(offset.to_bytes(8, "big") + data[8:])
        return offset


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    opened = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=SEGMENT_BYTES))
    yield opened
    opened.close()


def unstable(log: Log) -> int | None:
    """The log's first unstable offset (a call, which type checkers do not narrow)."""
    return log.first_unstable_offset


def reopen(log: Log) -> Log:
    directory, config = log.directory, log.config
    log.close()
    return Log.open(directory, config)


def test_an_abort_is_indexed_and_a_commit_is_not(log: Log) -> None:
    w = Leader(log)
    w.write(1, 3)  # 0-2
    w.write(2)  # 3
    assert unstable(log) == 0
    w.end(1, ControlType.ABORT)  # 4
    assert unstable(log) == 3
    w.end(2, ControlType.COMMIT)  # 5
    assert unstable(log) is None
    abort = AbortedTxn(1, 0, 4, 3)  # LSO 3: producer 2's transaction was still open
    assert log.active_segment.txn_index.entries() == [abort]
    assert log.collect_aborted_transactions(0, 6) == [abort]
    assert log.collect_aborted_transactions(5, 6) == []


def test_reopening_restores_open_transactions_and_the_index(log: Log) -> None:
    w = Leader(log)
    w.write(1)  # 0
    w.end(1, ControlType.ABORT)  # 1
    w.write(2, 2)  # 2-3, left open
    log = reopen(log)
    try:
        assert unstable(log) == 2
        assert log.collect_aborted_transactions(0, 4) == [AbortedTxn(1, 0, 1, 2)]
    finally:
        log.close()


def test_a_lost_or_corrupt_index_is_rebuilt_from_the_markers(log: Log) -> None:
    w = Leader(log)
    w.write(1)
    w.end(1, ControlType.ABORT)
    w.write(2)
    w.end(2, ControlType.ABORT)
    expected = log.active_segment.txn_index.entries()
    assert len(expected) == 2
    path = log.active_segment.txn_index.path
    for damage in (lambda: path.unlink(), lambda: path.write_bytes(b"\x00" * 7)):
        log.close()
        damage()
        log = Log.open(path.parent, LogConfig(segment_bytes=SEGMENT_BYTES))
        assert log.active_segment.txn_index.entries() == expected
        assert path.stat().st_size == 68
    log.close()


def test_truncating_the_marker_reopens_the_transaction_and_drops_its_entry(log: Log) -> None:
    w = Leader(log)
    w.write(1, 2)  # 0-1
    marker = w.end(1, ControlType.ABORT)  # 2
    w.write(3)  # 3
    assert unstable(log) == 3
    log.truncate_to(marker)
    assert log.active_segment.txn_index.entries() == []
    assert unstable(log) == 0
    # The leader's log, copied again, aborts it anew.
    w.end(1, ControlType.ABORT)
    assert log.collect_aborted_transactions(0, 3) == [AbortedTxn(1, 0, 2, 3)]


def test_aborts_in_older_segments_are_found_until_the_search_is_complete(log: Log) -> None:
    w = Leader(log)
    w.write(1)  # 0
    w.end(1, ControlType.ABORT)  # 1: LSO 2
    log.roll()
    w.write(2)  # 2
    w.end(2, ControlType.ABORT)  # 3: LSO 4
    log.roll()
    w.write(3)  # 4
    assert [s.base_offset for s in log.segments] == [0, 2, 4]
    assert log.collect_aborted_transactions(0, 2) == [AbortedTxn(1, 0, 1, 2)]
    assert log.collect_aborted_transactions(1, 5) == [
        AbortedTxn(1, 0, 1, 2),
        AbortedTxn(2, 2, 3, 4),
    ]
    assert log.collect_aborted_transactions(2, 5) == [AbortedTxn(2, 2, 3, 4)]
    # Truncation deletes later segments' indexes and cuts the entries of the markers cut.
    log.truncate_to(1)
    assert not (log.directory / "00000000000000000002.txnindex").exists()
    assert log.active_segment.txn_index.entries() == []
    assert unstable(log) == 0


def test_a_crash_that_cut_the_marker_leaves_no_entry(log: Log) -> None:
    w = Leader(log)
    w.write(1)  # 0
    w.end(1, ControlType.ABORT)  # 1
    segment_path = log.active_segment.log_path
    marker_size = len(encode_marker_batch(EndTxnMarker(ControlType.ABORT, 0), producer_id=1,
                                          producer_epoch=0, timestamp=1))  # fmt: skip
    log.close()
    with segment_path.open("r+b") as f:  # the marker torn in half
        f.truncate(segment_path.stat().st_size - marker_size // 2)
    log = Log.open(segment_path.parent, LogConfig(segment_bytes=SEGMENT_BYTES))
    try:
        assert log.log_end_offset == 1
        assert log.active_segment.txn_index.entries() == []
        assert unstable(log) == 0
    finally:
        log.close()


def test_read_committed_reads_to_the_lso_with_the_aborts_to_drop(log: Log) -> None:
    w = Leader(log)
    w.write(1, 2)  # 0-1: producer 1, aborted below
    w.write(2)  # 2: producer 2, left open
    w.end(1, ControlType.ABORT)  # 3
    w.write(3)  # 4: producer 3, committed below
    w.end(3, ControlType.COMMIT)  # 5
    partition = Partition(TP, 1, log, high_watermark=6, clock_ms=lambda: 0)
    assert partition.last_stable_offset == 2  # producer 2's transaction holds it
    committed = partition.read(0, 1 << 20, False, True, read_committed=True)
    assert committed.last_stable_offset == 2
    assert committed.aborted == (AbortedTxn(1, 0, 3, 2),)
    assert offsets_of(committed.data.records) == [0, 1]  # nothing at or past the LSO
    uncommitted = partition.read(0, 1 << 20, False, True)
    assert uncommitted.aborted is None
    assert offsets_of(uncommitted.data.records) == [0, 1, 2, 3, 4, 5]
    # Once producer 2 commits, the LSO is the high watermark again.
    w.end(2, ControlType.COMMIT)  # 6
    assert Partition(TP, 1, log, high_watermark=7, clock_ms=lambda: 0).last_stable_offset == 7


def offsets_of(records: bytes) -> list[int]:
    found: list[int] = []
    position = 0
    while position < len(records):
        header = parse_header(records, position)
        found.extend(range(header.base_offset, header.next_offset))
        position += header.size
    return found


def test_a_closed_transaction_bounds_the_lso_until_its_marker_is_replicated(log: Log) -> None:
    """Kafka's unreplicated transactions: a leader that dies before its followers have the
    marker leaves a successor without it, so read_committed consumers must not read the
    transaction before the marker is below the high watermark."""
    w = Leader(log)
    w.write(1, 2)  # 0-1
    w.write(2)  # 2, still open
    w.end(1, ControlType.COMMIT)  # 3
    assert unstable(log) == 2  # open ones only
    assert log.first_unstable_offset_at(3) == 0  # the marker at 3 is not below the HW
    assert log.first_unstable_offset_at(4) == 2  # replicated: producer 2's open one is next
    assert log.first_unstable_offset_at(3) == 2  # forgotten once replicated: no going back
    w.end(2, ControlType.ABORT)  # 4
    assert log.first_unstable_offset_at(4) == 2
    assert log.first_unstable_offset_at(5) is None
    w.write(3)  # 5
    w.end(3, ControlType.COMMIT)  # 6
    log.truncate_to(6)  # the marker goes: the transaction is open again
    assert log.first_unstable_offset_at(6) == 5
