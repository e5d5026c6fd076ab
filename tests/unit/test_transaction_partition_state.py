"""The partition side of transactions: control records (proto/records/control_records.py),
the open transactions and LSO bound of ProducerStateManager, and the aborted-transaction
index (broker/log/transaction_index.py)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.log.offset_index import CorruptIndexError
from broker.log.producer_state import CompletedTxn, ProducerStateManager
from broker.log.transaction_index import ENTRY_SIZE, AbortedTxn, TransactionIndex
from proto import errors
from proto.records.control_records import (
    ControlRecordError,
    ControlType,
    EndTxnMarker,
    decode_control_type,
    decode_end_txn_marker,
    encode_marker_batch,
)
from proto.records.record_batch import (
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    Record,
    decode_batch,
    encode_batch,
    parse_header,
)
from proto.topic_partition import TopicPartition

TP = TopicPartition("t", 0)


# -- control records ----------------------------------------------------------------------


def test_a_marker_batch_is_control_and_transactional_with_one_marker_record() -> None:
    data = encode_marker_batch(
        EndTxnMarker(ControlType.COMMIT, 7), producer_id=42, producer_epoch=3, timestamp=99
    )
    header = parse_header(data)
    assert header.is_control
    assert header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, -1)
    batch = decode_batch(data)
    [record] = batch.records
    assert record.key == bytes.fromhex("00000001")  # version 0, COMMIT
    assert record.value == bytes.fromhex("000000000007")  # version 0, coordinator epoch 7
    assert decode_end_txn_marker(record) == EndTxnMarker(ControlType.COMMIT, 7)


def test_control_keys_of_unknown_types_are_skipped_and_short_ones_refused() -> None:
    assert decode_control_type(bytes.fromhex("00000000")) == ControlType.ABORT
    assert decode_control_type(bytes.fromhex("00000005")) is None
    with pytest.raises(ControlRecordError):
        decode_control_type(b"\x00")
    with pytest.raises(ControlRecordError, match="value needs"):
        decode_end_txn_marker(Record(bytes.fromhex("00000001"), b"\x00"))


@given(st.binary(max_size=12), st.binary(max_size=12) | st.none())
def test_garbage_control_records_give_a_control_record_error(
    key: bytes, value: bytes | None
) -> None:
    with contextlib.suppress(ControlRecordError):
        decode_end_txn_marker(Record(key, value))


# -- open transactions and markers --------------------------------------------------------


class Partition:
    """A ProducerStateManager fed as a leader's log feeds it: check, then record at the
    next offset, decoding markers."""

    def __init__(self) -> None:
        self.state = ProducerStateManager(TP)
        self.next_offset = 0
        self.markers: dict[int, EndTxnMarker] = {}
        self.batches: list[BatchHeader] = []

    def write(self, pid: int, epoch: int, seq: int, count: int = 1, *, txn: bool = True) -> int:
        data = encode_batch(
            [Record(None, b"v", 1) for _ in range(count)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            flags=TRANSACTIONAL_FLAG_MASK if txn else 0,
        )
        header = parse_header(data).stamped(self.next_offset, 0)
        assert self.state.check_leader_append([header]) is None
        return self._record(header)

    def end(
        self, pid: int, epoch: int, kind: ControlType, coordinator_epoch: int = 0
    ) -> CompletedTxn | None:
        marker = EndTxnMarker(kind, coordinator_epoch)
        data = encode_marker_batch(marker, producer_id=pid, producer_epoch=epoch, timestamp=1)
        header = parse_header(data).stamped(self.next_offset, 0)
        self.state.check_leader_marker(header, marker)
        self.markers[header.base_offset] = marker
        before = self.state.ongoing_transactions
        self._record(header)
        done = self._last
        assert len(before) - len(self.state.ongoing_transactions) == (done is not None)
        return done

    def _record(self, header: BatchHeader) -> int:
        completed = self.state.update([header], self.read_marker)
        self._last = completed[0] if completed else None
        self.batches.append(header)
        self.next_offset = header.next_offset
        return header.base_offset

    def read_marker(self, header: BatchHeader) -> EndTxnMarker | None:
        return self.markers.get(header.base_offset)


def test_a_transaction_opens_at_its_first_batch_and_a_commit_closes_it() -> None:
    p = Partition()
    assert not p.state.ongoing_transactions
    p.write(1, 0, 0, 3)  # offsets 0-2
    p.write(1, 0, 3, 2)  # 3-4: the same transaction
    assert p.state.first_unstable_offset == 0
    done = p.end(1, 0, ControlType.COMMIT)  # offset 5
    assert done == CompletedTxn(1, 0, 5, False, 6)
    assert not p.state.ongoing_transactions
    entry = p.state.entry(1)
    assert entry is not None
    assert entry.txn_first_offset == -1


def test_an_abort_between_others_has_the_lso_of_the_next_open_transaction() -> None:
    p = Partition()
    p.write(1, 0, 0)  # 0: producer 1 opens
    p.write(2, 0, 0)  # 1: producer 2 opens
    p.write(1, 0, 1)  # 2
    done = p.end(1, 0, ControlType.ABORT)  # 3
    assert done == CompletedTxn(1, 0, 3, True, 1)  # producer 2's transaction is still open
    assert p.state.first_unstable_offset == 1
    assert p.end(2, 0, ControlType.COMMIT) == CompletedTxn(2, 1, 4, False, 5)


def test_a_marker_without_a_transaction_closes_nothing() -> None:
    p = Partition()
    assert p.end(9, 0, ControlType.ABORT) is None
    entry = p.state.entry(9)
    assert entry is not None
    assert (entry.epoch, entry.batches) == (0, ())
    # The producer's first batch of that epoch starts at sequence 0.
    p.write(9, 0, 0)


def test_a_plain_batch_inside_an_open_transaction_is_refused() -> None:
    p = Partition()
    p.write(1, 0, 0)
    with pytest.raises(errors.InvalidTxnStateError, match="outside its transaction"):
        p.write(1, 0, 1, txn=False)
    p.end(1, 0, ControlType.COMMIT)
    p.write(1, 0, 1, txn=False)  # idempotent again once it is closed


def test_a_marker_of_an_older_producer_or_coordinator_epoch_is_refused() -> None:
    p = Partition()
    p.write(1, 2, 0)
    with pytest.raises(errors.InvalidProducerEpochError):
        p.end(1, 1, ControlType.ABORT)
    p.end(1, 2, ControlType.COMMIT, coordinator_epoch=5)
    p.write(1, 2, 1)
    with pytest.raises(errors.TransactionCoordinatorFencedError):
        p.end(1, 2, ControlType.COMMIT, coordinator_epoch=4)
    assert p.state.first_unstable_offset == 2  # still open: nothing was written


def test_a_fencing_marker_bumps_the_epoch_and_the_zombie_is_refused() -> None:
    p = Partition()
    p.write(1, 0, 0)
    p.end(1, 1, ControlType.ABORT)  # the coordinator aborts with the bumped epoch
    with pytest.raises(errors.InvalidProducerEpochError):
        p.write(1, 0, 1)  # the old instance
    p.write(1, 1, 0)


def test_truncating_a_marker_reopens_its_transaction_after_replay() -> None:
    p = Partition()
    p.write(1, 0, 0, 2)  # 0-1
    p.state.take_snapshot(2)
    p.end(1, 0, ControlType.COMMIT)  # 2
    p.write(2, 0, 0)  # 3
    replay_from = p.state.truncate_to(3)  # drop producer 2's batch: state reset
    assert replay_from == 2
    p.state.update([h for h in p.batches if replay_from <= h.base_offset < 3], p.read_marker)
    assert p.state.first_unstable_offset is None
    replay_from = p.state.truncate_to(2)  # now the marker goes too
    assert replay_from == 2
    assert p.state.ongoing_transactions == {0: 1}


def test_truncating_a_transactions_first_batch_forgets_it() -> None:
    p = Partition()
    p.write(1, 0, 0)  # 0
    p.write(2, 0, 0)  # 1
    assert p.state.truncate_to(1) == 0
    p.state.update(p.batches[:1], p.read_marker)
    assert p.state.ongoing_transactions == {0: 1}


# -- the transaction index ----------------------------------------------------------------


def test_the_index_file_is_made_by_the_first_abort_and_reloads(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.txnindex"
    index = TransactionIndex.load(path, 100)
    assert not path.exists()
    index.append(AbortedTxn(7, 100, 105, 106))
    index.append(AbortedTxn(8, 101, 110, 111))
    index.flush()
    assert path.stat().st_size == 2 * ENTRY_SIZE == 68
    assert path.read_bytes()[:2] == b"\x00\x00"
    again = TransactionIndex.load(path, 100)
    assert again.entries() == [AbortedTxn(7, 100, 105, 106), AbortedTxn(8, 101, 110, 111)]
    with pytest.raises(ValueError, match="does not follow"):
        again.append(AbortedTxn(9, 102, 110, 111))


def test_collect_finds_the_overlapping_aborts_and_knows_when_it_is_complete(
    tmp_path: Path,
) -> None:
    index = TransactionIndex.load(tmp_path / "0.txnindex", 0)
    index.append(AbortedTxn(1, 0, 10, 11))
    index.append(AbortedTxn(2, 5, 20, 21))
    index.append(AbortedTxn(3, 30, 40, 41))
    # Abort 3 closed at LSO 41: nothing in a later segment began before 25.
    assert index.collect(12, 25) == ([AbortedTxn(2, 5, 20, 21)], True)
    # Past every LSO here: a later segment may hold more.
    assert index.collect(12, 50) == ([AbortedTxn(2, 5, 20, 21), AbortedTxn(3, 30, 40, 41)], False)
    assert index.collect(0, 21) == ([AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 5, 20, 21)], True)
    assert index.collect(41, 50) == ([], False)


def test_truncation_drops_the_aborts_whose_marker_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "0.txnindex"
    index = TransactionIndex.load(path, 0)
    index.append(AbortedTxn(1, 0, 10, 11))
    index.append(AbortedTxn(2, 5, 20, 21))
    index.truncate_to(20)
    assert index.entries() == [AbortedTxn(1, 0, 10, 11)]
    assert path.stat().st_size == ENTRY_SIZE
    index.append(AbortedTxn(3, 12, 15, 16))
    assert TransactionIndex.load(path, 0).entries()[-1] == AbortedTxn(3, 12, 15, 16)
    index.reset()
    assert len(index) == 0
    assert path.stat().st_size == 0


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\x00" * 33, "not a multiple"),
        (b"\x00\x01" + b"\x00" * 32, "version 1"),
        # an abort ending before the segment's base offset (50)
        (b"\x00\x00" + (7).to_bytes(8, "big") + (0).to_bytes(8, "big") * 3, "does not follow"),
    ],
)
def test_a_corrupt_index_is_detected(tmp_path: Path, data: bytes, why: str) -> None:
    path = tmp_path / "50.txnindex"
    path.write_bytes(data)
    with pytest.raises(CorruptIndexError, match=why):
        TransactionIndex.load(path, 50)
