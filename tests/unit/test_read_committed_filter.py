"""AbortedTransactionFilter: a read_committed consumer drops an aborted transaction's
batches from its first offset to its abort marker, keeps everything else, and never
returns markers."""

from __future__ import annotations

from proto.records.control_records import ControlType, EndTxnMarker, encode_marker_batch
from proto.records.read_committed import AbortedTransactionFilter
from proto.records.record_batch import TRANSACTIONAL_FLAG_MASK, Record, encode_batch, scan_batches


def _txn(producer_id: int, offset: int, value: bytes) -> bytes:
    return encode_batch(
        [Record(None, value, 1000)],
        base_offset=offset,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=offset,
        flags=TRANSACTIONAL_FLAG_MASK,
    )


def _marker(producer_id: int, offset: int, kind: ControlType) -> bytes:
    batch = bytearray(
        encode_marker_batch(EndTxnMarker(kind, 0), producer_id=producer_id, producer_epoch=0,
                            timestamp=1000)
    )  # fmt: skip
    batch[0:8] = offset.to_bytes(8, "big")  # the base offset the log stamps
    return bytes(batch)


def _kept(data: bytes, aborted: list[tuple[int, int]]) -> list[int]:
    committed = AbortedTransactionFilter(aborted)
    return [
        s.header.base_offset
        for s in scan_batches(data)
        if not committed.drops(s.header, data, s.position)
    ]


def test_an_aborted_transaction_is_dropped_up_to_its_marker_and_no_further() -> None:
    log = b"".join(
        [
            _txn(5, 0, b"aborted-a"),
            _txn(6, 1, b"committed-b"),
            encode_batch([Record(None, b"plain", 1000)], base_offset=2),
            _txn(5, 3, b"aborted-c"),
            _marker(5, 4, ControlType.ABORT),
            _marker(6, 5, ControlType.COMMIT),
            _txn(5, 6, b"later-transaction"),
            _marker(5, 7, ControlType.COMMIT),
        ]
    )
    assert _kept(log, [(5, 0)]) == [1, 2, 6]
    # Nothing aborted: only the markers go.
    assert _kept(log, []) == [0, 1, 2, 3, 6]


def test_an_abort_listed_after_the_batches_read_so_far_waits_for_its_first_offset() -> None:
    log = b"".join(
        [
            _txn(5, 0, b"committed-first"),
            _marker(5, 1, ControlType.COMMIT),
            _txn(5, 2, b"aborted"),
            _marker(5, 3, ControlType.ABORT),
        ]
    )
    assert _kept(log, [(5, 2)]) == [0]
