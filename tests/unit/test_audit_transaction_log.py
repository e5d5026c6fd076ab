"""How the audit tells each transactional batch's outcome from a replica's batch headers
(chaos/audit/transaction_log.py), and the history's transaction lines it reads
(chaos/audit/history.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chaos.audit.history import HistoryError, HistoryOp, HistoryRead, TxnStep, parse_history_line
from chaos.audit.log_checks import BatchTable
from chaos.audit.segments import NOT_CONTROL, UNKNOWN_CONTROL
from chaos.audit.transaction_log import ABORTED, COMMITTED, OPEN, hidden_spans, outcomes, served
from proto.records.record_batch import CONTROL_FLAG_MASK, TRANSACTIONAL_FLAG_MASK

TXN = TRANSACTIONAL_FLAG_MASK
MARKER = TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK


def _table(
    rows: list[tuple[int, int, int, int, int]], valid: list[bool] | None = None
) -> BatchTable:
    """Batches from (base offset, last offset, flags, producer id, control type), with
    max timestamps 1000 + base offset."""
    a = np.array(rows, dtype=np.int64).reshape(-1, 5)
    n = len(a)
    z = np.zeros(n, dtype=np.int64)
    return BatchTable(
        z, z, z, a[:, 0], a[:, 1], z, a[:, 1] - a[:, 0] + 1, np.zeros(n, np.bool_),
        np.array(valid if valid is not None else [True] * n, dtype=np.bool_),
        a[:, 2], a[:, 3], z, 1000 + a[:, 0], a[:, 4],
    )  # fmt: skip


def test_each_batch_ends_at_the_next_marker_of_its_producer_id() -> None:
    table = _table(
        [
            (0, 1, TXN, 7, NOT_CONTROL),  # 7's first transaction
            (2, 2, TXN, 8, NOT_CONTROL),  # 8's, interleaved
            (3, 3, 0, -1, NOT_CONTROL),  # a plain batch
            (4, 5, TXN, 7, NOT_CONTROL),
            (6, 6, MARKER, 7, 1),  # 7 commits
            (7, 7, MARKER, 8, 0),  # 8 aborts
            (8, 8, TXN, 7, NOT_CONTROL),  # 7's second, never ended
        ]
    )
    spans = outcomes(table, broker=3)
    assert spans.broker == 3
    assert spans.base_offset.tolist() == [0, 2, 4, 8]
    assert spans.outcome.tolist() == [COMMITTED, ABORTED, COMMITTED, OPEN]
    assert spans.marker_offset.tolist() == [6, 7, 6, -1]
    assert spans.marker_timestamp.tolist() == [1006, 1007, 1006, -1]
    assert spans.control_offsets.tolist() == [6, 7]
    index, found = spans.find(np.array([1, 3, 5, 8, 9], dtype=np.int64))
    assert found.tolist() == [True, False, True, True, False]
    assert index[found].tolist() == [0, 2, 3]


def test_an_unknown_control_record_leaves_the_transaction_open_and_invalid_batches_count_not() -> (
    None
):
    table = _table(
        [(0, 0, TXN, 7, NOT_CONTROL), (1, 1, MARKER, 7, UNKNOWN_CONTROL), (2, 2, MARKER, 7, 0)],
        valid=[True, True, True],
    )
    assert outcomes(table, 1).outcome.tolist() == [ABORTED]
    broken = _table(
        [(0, 0, TXN, 7, NOT_CONTROL), (1, 1, MARKER, 7, 1)], valid=[True, False]
    )  # the marker fails its CRC: its record cannot be believed
    assert outcomes(broken, 1).outcome.tolist() == [OPEN]


def test_markers_and_aborted_batches_are_hidden_from_the_poll_checks() -> None:
    table = _table(
        [
            (0, 1, TXN, 7, NOT_CONTROL),
            (2, 3, TXN, 8, NOT_CONTROL),
            (4, 4, MARKER, 7, 1),
            (5, 5, MARKER, 8, 0),
            (6, 9, 0, -1, NOT_CONTROL),
        ]
    )
    assert hidden_spans(table).tolist() == [False, True, True, True, False]
    assert served(table).base_offset.tolist() == [0, 6]
    plain = _table([(0, 9, 0, -1, NOT_CONTROL)])
    assert served(plain) is plain


def _line(**fields: object) -> str:
    return json.dumps({"time": 1.5, "process": 3, **fields})


def test_transaction_lines_parse_to_writes_steps_and_reads() -> None:
    write = parse_history_line(
        1, _line(type="ok", topic="t", partition=0, value="v", offset=4, txn="p3-t1")
    )
    assert isinstance(write, HistoryOp)
    assert write.txn == "p3-t1"
    step = parse_history_line(2, _line(type="ok", f="begin", txn="p3-t1", timeout_ms=10_000))
    assert step == TxnStep(2, 1.5, 3, "ok", "begin", "p3-t1", 10_000)
    sent = parse_history_line(
        3,
        _line(type="info", f="send_offsets", txn="c5-t2", group="g", offsets=[["in", 1, 98]]),
    )
    assert isinstance(sent, TxnStep)
    assert sent.offsets == (("in", 1, 98),)
    assert sent.group == "g"
    read = parse_history_line(
        4,
        _line(type="read", topic="t", partition=0, offset=4, value="v", isolation="read_committed"),
    )
    assert isinstance(read, HistoryRead)
    assert read.isolation == "read_committed"
    plain = parse_history_line(5, _line(type="read", topic="t", partition=0, offset=4, value="v"))
    assert isinstance(plain, HistoryRead)
    assert plain.isolation == "read_uncommitted"


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"type": "ok", "f": "prepare", "txn": "x"}, '"f" must be one of begin, commit'),
        ({"type": "read", "f": "commit", "txn": "x"}, '"type" must be "ok", "fail" or "info"'),
        ({"type": "ok", "f": "commit"}, '"txn" must be a non-empty string'),
        ({"type": "ok", "f": "commit", "txn": ""}, '"txn" must be a non-empty string'),
        ({"type": "ok", "f": "send_offsets", "txn": "x", "offsets": [["t", -1, 0]]},
         '"offsets" entries must be [topic, partition, offset]'),
        ({"type": "ok", "f": "begin", "txn": "x", "timeout_ms": -5},
         '"timeout_ms" must be a non-negative integer'),
        ({"type": "ok", "topic": "t", "partition": 0, "value": "v", "offset": 1, "txn": 7},
         '"txn" must be a non-empty string'),
        ({"type": "read", "topic": "t", "partition": 0, "value": "v", "offset": 1,
          "isolation": "serializable"}, '"isolation" must be "read_uncommitted" or'),
    ],
)  # fmt: skip
def test_a_bad_transaction_line_is_bad_input_naming_why(
    fields: dict[str, object], reason: str
) -> None:
    with pytest.raises(HistoryError) as caught:
        parse_history_line(8, _line(**fields))
    assert caught.value.reason.startswith(reason)
