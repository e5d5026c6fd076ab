"""Producer state snapshot files (broker/log/producer_snapshot.py, docs/storage.md): their
format, and a Log that writes them at rolls and a clean shutdown and opens from the latest
one it can believe, to the same state a replay of the whole log gives."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.log.log import Log
from broker.log.log_manager import LogManager
from broker.log.producer_snapshot import (
    ProducerState,
    list_snapshots,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)
from broker.log.producer_state import BATCHES_PER_PRODUCER, BatchMetadata, ProducerEntry
from proto.config.log_config import LogConfig
from proto.records.control_records import ControlType, EndTxnMarker, encode_marker_batch
from proto.records.producer_snapshot import (
    MAX_BATCHES,
    CorruptSnapshotError,
    ProducerSnapshot,
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
)
from proto.records.record_batch import TRANSACTIONAL_FLAG_MASK, Record, encode_batch
from proto.topic_partition import TopicPartition

SEGMENT_BYTES = 400
"""Small segments: a roll every few batches."""

batches = st.builds(
    BatchMetadata,
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**62),
    st.integers(0, 2**62),
)
entries = st.builds(
    ProducerEntry,
    st.integers(0, 2**15 - 1),
    st.lists(batches, max_size=5).map(tuple),
    st.integers(-1, 2**62),
    st.integers(-1, 2**31 - 1),
)


@given(st.dictionaries(st.integers(0, 2**62), entries, max_size=20), st.integers(-1, 2**62))
def test_a_snapshot_file_reads_back_what_was_written(
    producers: dict[int, ProducerEntry], last_marker: int
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        state = ProducerState(producers, last_marker)
        write_snapshot(Path(directory), 42, state, fsync=False)
        assert read_snapshot(Path(directory), 42) == state
        assert list_snapshots(Path(directory)) == [42]


def test_the_file_holds_every_batch_a_producer_caches() -> None:
    assert MAX_BATCHES == BATCHES_PER_PRODUCER


def test_a_damaged_snapshot_is_refused() -> None:
    entry = SnapshotEntry(7, 3, 2, 10, ((0, 4, 10, 14),))
    data = encode_snapshot(ProducerSnapshot([entry], 9))
    assert decode_snapshot(data) == ProducerSnapshot([entry], 9)
    flipped = bytearray(data)
    flipped[-3] ^= 0x40
    for bad, reason in [
        (bytes(flipped), "CRC does not match"),
        (data[:-4], "CRC does not match"),
        (b"\x00\x02" + data[2:], "version 2"),
        (data[:5], "too few"),
    ]:
        with pytest.raises(CorruptSnapshotError, match=reason):
            decode_snapshot(bad)


class Writer:
    """A partition's transactional and idempotent producers, as a follower receives their
    batches (stamped, appended with ``append_as_follower``)."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.sequences: dict[int, int] = {}

    def write(self, pid: int, count: int = 2, *, transactional: bool = True) -> int:
        seq = self.sequences.get(pid, 0)
        self.sequences[pid] = seq + count
        data = encode_batch(
            [Record(None, b"v" * 40, 1) for _ in range(count)],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=seq,
            flags=TRANSACTIONAL_FLAG_MASK if transactional else 0,
        )
        return self._append(data)

    def end(self, pid: int, kind: ControlType) -> int:
        marker = EndTxnMarker(kind, 0)
        return self._append(
            encode_marker_batch(marker, producer_id=pid, producer_epoch=0, timestamp=1)
        )

    def _append(self, data: bytes) -> int:
        offset = self.log.log_end_offset
        self.log.append_as_follower(offset.to_bytes(8, "big") + data[8:])
        return offset


def _config() -> LogConfig:
    return LogConfig(segment_bytes=SEGMENT_BYTES)


def _reopen(directory: Path) -> Log:
    """The log opened as after a clean shutdown (nothing to recover: every snapshot may
    be used)."""
    return Log.open(directory, _config(), clean_shutdown=True)


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    opened = Log.open(tmp_path / "t-0", _config())
    yield opened
    opened.close()


def _state(log: Log) -> tuple[dict[int, ProducerEntry], int | None, dict[int, int]]:
    state = log.producer_state
    return dict(state.producers), state.first_unstable_offset, dict(state.ongoing_transactions)


def _replayed(log: Log) -> tuple[dict[int, ProducerEntry], int | None, dict[int, int]]:
    """The state a replay of the whole log gives (its snapshot files moved away)."""
    moved = []
    for offset in list_snapshots(log.directory):
        path = snapshot_path(log.directory, offset)
        moved.append((path, path.read_bytes()))
        path.unlink()
    fresh = Log.open(log.directory, _config())
    try:
        return _state(fresh)
    finally:
        fresh.close()
        for path, data in moved:
            path.write_bytes(data)


def _busy(log: Log) -> Writer:
    """Three producers over several segments: one committed, one aborted then open again,
    one idempotent only."""
    w = Writer(log)
    for _ in range(3):
        w.write(1)
        w.write(2)
        w.write(3, transactional=False)
        w.end(1, ControlType.COMMIT)
    w.end(2, ControlType.ABORT)
    w.write(2)  # left open
    return w


def test_rolls_keep_the_latest_two_snapshots_and_reopening_gives_the_replayed_state(
    log: Log,
) -> None:
    _busy(log)
    assert len(log.segments) > 3
    offsets = list_snapshots(log.directory)
    assert offsets == [s.base_offset for s in log.segments[-2:]]
    expected = _state(log)
    assert expected[1] is not None  # producer 2's transaction is open
    directory = log.directory
    log.close()
    reopened = _reopen(directory)
    try:
        assert _state(reopened) == expected
        assert _replayed(reopened) == expected
    finally:
        reopened.close()


def test_producers_whose_batches_retention_deleted_are_known_after_a_restart(log: Log) -> None:
    w = Writer(log)
    w.write(9, transactional=False)  # the producer's only batches, in the first segment
    for _ in range(6):
        w.write(1, transactional=False)
    assert log.maybe_increment_log_start_offset(log.segments[-1].base_offset)
    log.delete_old_segments(log.log_end_offset, now_ms=0)
    assert log.segments[0].base_offset > 0
    directory = log.directory
    log.close()
    reopened = _reopen(directory)
    try:
        entry = reopened.producer_state.entry(9)
        assert entry is not None
        assert entry.last_sequence == 1  # its next batch continues at 2, not refused
    finally:
        reopened.close()


def test_truncation_deletes_the_snapshots_above_it(log: Log) -> None:
    _busy(log)
    cut = log.segments[-2].base_offset - 1
    log.truncate_to(cut)
    assert all(o <= cut for o in list_snapshots(log.directory))
    expected = _state(log)
    directory = log.directory
    log.close()
    reopened = _reopen(directory)
    try:
        assert _state(reopened) == expected == _replayed(reopened)
    finally:
        reopened.close()


def test_a_corrupt_latest_snapshot_falls_back_to_an_older_one(log: Log) -> None:
    _busy(log)
    expected = _state(log)
    latest = list_snapshots(log.directory)[-1]
    directory = log.directory
    log.close()
    snapshot_path(directory, latest).write_bytes(b"\x00\x01torn")
    reopened = _reopen(directory)
    try:
        assert _state(reopened) == expected
        assert latest not in list_snapshots(directory)
    finally:
        reopened.close()


def test_a_snapshot_above_the_recovered_log_end_is_deleted(log: Log) -> None:
    w = _busy(log)
    directory = log.directory
    end = log.log_end_offset
    log.close()
    # a snapshot from a longer log than recovery left (a crash cut the tail)
    write_snapshot(
        directory, end + 50, ProducerState({5: ProducerEntry(0, (), -1, -1)}, -1), fsync=False
    )
    reopened = _reopen(directory)
    try:
        assert end + 50 not in list_snapshots(directory)
        assert reopened.producer_state.entry(5) is None
        assert reopened.producer_state.entry(1) is not None
        del w
    finally:
        reopened.close()


def test_a_clean_shutdown_snapshots_every_log_at_its_end(tmp_path: Path) -> None:
    manager = LogManager(tmp_path / "data", _config(), 1)
    manager.startup()
    log = manager.get_or_create_log(TopicPartition("t", 0))
    _busy(log)
    end = log.log_end_offset
    expected = _state(log)
    manager.shutdown()
    assert end in list_snapshots(tmp_path / "data" / "t-0")
    reopened = _reopen(tmp_path / "data" / "t-0")
    try:
        assert _state(reopened) == expected
    finally:
        reopened.close()


def test_after_an_unclean_shutdown_the_replay_starts_where_recovery_did(log: Log) -> None:
    """The aborts of the recovered segments may have been lost with the page cache (their
    index entries are written without an fsync): the replay from below the recovery
    writes them back, whatever later snapshot exists."""
    w = Writer(log)
    w.write(4)
    w.end(4, ControlType.ABORT)
    for _ in range(6):
        w.write(1, transactional=False)
    first = log.segments[0]
    expected = first.txn_index.entries()
    assert min(list_snapshots(log.directory)) > first.base_offset
    path, directory = first.txn_index.path, log.directory
    log.close()
    path.unlink()  # the entry never reached the disk
    reopened = Log.open(directory, _config(), recovery_point=0, clean_shutdown=False)
    try:
        assert reopened.segments[0].txn_index.entries() == expected
    finally:
        reopened.close()
    clean = _reopen(directory)  # and a clean start, from the latest snapshot, keeps them
    try:
        assert clean.segments[0].txn_index.entries() == expected
    finally:
        clean.close()


def test_a_lost_transaction_index_below_the_snapshots_is_still_written_back(log: Log) -> None:
    w = Writer(log)
    w.write(4)
    w.end(4, ControlType.ABORT)  # indexed in the first segment
    for _ in range(6):
        w.write(1, transactional=False)
    first = log.segments[0]
    expected = first.txn_index.entries()
    assert expected
    assert min(list_snapshots(log.directory)) > first.base_offset
    path = first.txn_index.path
    directory = log.directory
    log.close()
    path.write_bytes(b"\x00" * 7)  # corrupt: replaced by an empty index at open
    reopened = _reopen(directory)
    try:
        assert reopened.segments[0].txn_index.entries() == expected
    finally:
        reopened.close()
