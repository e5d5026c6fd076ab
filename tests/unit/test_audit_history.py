"""History and nemesis timeline lines (docs/audit.md): what is accepted, what is bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.audit.history import (
    HistoryError,
    HistoryOp,
    HistoryRead,
    NemesisEvent,
    parse_history_line,
    parse_timeline_line,
)
from chaos.history_recorder import HistoryRecorder

OK = {
    "time": 1.5,
    "process": 3,
    "type": "ok",
    "topic": "t",
    "partition": 2,
    "value": "v",
    "offset": 9,
}


READ = {
    "time": 2.5,
    "process": 7,
    "type": "read",
    "topic": "t",
    "partition": 2,
    "offset": 9,
    "value": "v",
    "session": 3,
}


def _line(base: dict[str, object] = OK, **changes: object) -> str:
    obj = {**base, **changes}
    return json.dumps({k: v for k, v in obj.items() if v is not ...})


def _read(**changes: object) -> str:
    return _line(READ, **changes)


def test_an_ok_line_is_an_operation() -> None:
    assert parse_history_line(4, _line()) == HistoryOp(4, 1.5, 3, "ok", "t", 2, "v", 9)


def test_fail_and_info_may_leave_out_partition_and_offset() -> None:
    op = parse_history_line(1, _line(type="info", partition=..., offset=None))
    assert isinstance(op, HistoryOp)
    assert (op.type, op.partition, op.offset) == ("info", None, None)


def test_blank_lines_are_skipped_and_bytes_are_decoded() -> None:
    assert parse_history_line(1, "   ") is None
    assert parse_history_line(1, _line().encode()) == parse_history_line(1, _line())


def test_a_nemesis_line_in_a_history_is_an_event() -> None:
    line = json.dumps(
        {"time": 2, "process": "nemesis", "type": "info", "f": "kill", "target": [1, 3]}
    )
    assert parse_history_line(7, line) == NemesisEvent(7, 2.0, "kill", "[1, 3]")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        (_line(type="maybe"), '"type" must be "ok", "fail", "info" or "read"'),
        (_line(offset=...), '"offset" is missing (an acknowledged write must say where'),
        (_line(partition=-1), '"partition" must be a non-negative integer'),
        (_line(offset=True), '"offset" must be a non-negative integer'),
        (_line(process="p1"), '"process" must be an integer (or "nemesis")'),
        (_line(time="noon"), '"time" must be a number of unix seconds'),
        (_line(value=5), '"value" must be a string'),
        (_line(topic=""), '"topic" must be a non-empty string'),
        (_line(partition=2**31), '"partition" must be at most 2147483647'),
        (_line(offset=2**63), '"offset" must be at most 9223372036854775807'),
        (_line(process=2**63), '"process" must be an integer (or "nemesis")'),
        ('{"time": 1, "process": 1, "type": "ok", "topic": "t", "partition": 0, '
         '"value": "\\ud800", "offset": 0}', '"value" is not valid Unicode'),
    ],
)  # fmt: skip
def test_a_bad_line_is_reported_with_its_number_and_reason(text: str, reason: str) -> None:
    with pytest.raises(HistoryError) as caught:
        parse_history_line(12, text)
    assert caught.value.line_number == 12
    assert str(caught.value).startswith(f"line 12: {reason}")


def test_invalid_utf8_is_bad_input() -> None:
    with pytest.raises(HistoryError, match="line 3: not UTF-8"):
        parse_history_line(3, b"\xff\xfe")


def test_a_timeline_keeps_only_nemesis_lines() -> None:
    kill = json.dumps({"time": 5, "process": "nemesis", "f": "pause", "target": 2})
    assert parse_timeline_line(1, kill) == NemesisEvent(1, 5.0, "pause", "2")
    assert parse_timeline_line(2, _line()) is None
    with pytest.raises(HistoryError, match='line 3: a nemesis line needs "f"'):
        parse_timeline_line(3, json.dumps({"time": 5, "process": "nemesis"}))


def test_a_read_line_is_a_consumers_read_with_its_session() -> None:
    assert parse_history_line(5, _read()) == HistoryRead(5, 2.5, 7, "t", 2, 9, "v", 3)


def test_a_null_value_is_a_tombstone_and_a_write_may_name_its_key() -> None:
    """A compacted topic's writes name their keys; a null value is a tombstone, written or
    read (a value left out is still bad input)."""
    op = parse_history_line(4, _line(key="k1", value=None))
    assert op == HistoryOp(4, 1.5, 3, "ok", "t", 2, None, 9, "k1")
    assert parse_history_line(4, _line(key=None)) == HistoryOp(4, 1.5, 3, "ok", "t", 2, "v", 9)
    read = parse_history_line(5, _read(value=None, key="k1"))
    assert isinstance(read, HistoryRead)
    assert read.value is None
    with pytest.raises(HistoryError, match='"value" is missing'):
        parse_history_line(6, _line(value=...))


def test_a_read_without_a_session_is_in_session_0() -> None:
    read = parse_history_line(5, _read(session=...))
    assert isinstance(read, HistoryRead)
    assert read.session == 0
    assert parse_history_line(5, _read(session=None)) == read


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (_read(offset=...), '"offset" is missing (a read must say where it read)'),
        (_read(offset=None), '"offset" is missing (a read must say where it read)'),
        (_read(partition=...), '"partition" is missing (a read must say where it read)'),
        (_read(value=...), '"value" is missing (a read must say what it saw)'),
        (_read(value=4), '"value" must be a string or null, got 4'),
        (_read(key=4), '"key" must be a string or null, got 4'),
        (_read(session=-1), '"session" must be a non-negative integer, got -1'),
        (_read(session="a"), '"session" must be a non-negative integer'),
        (_read(offset=1.5), '"offset" must be a non-negative integer'),
    ],
)
def test_a_read_missing_its_offset_or_value_is_bad_input_naming_the_line(
    text: str, reason: str
) -> None:
    with pytest.raises(HistoryError) as caught:
        parse_history_line(31, text)
    assert caught.value.line_number == 31
    assert str(caught.value).startswith(f"line 31: {reason}")


def test_a_read_the_history_recorder_writes_parses_with_its_session(tmp_path: Path) -> None:
    with HistoryRecorder(tmp_path / "p7.jsonl", 7) as recorder:
        recorder.read("t", 2, 9, "v", session=3)
        recorder.read("t", 2, 10, "w")
    first, second = (tmp_path / "p7.jsonl").read_text().splitlines()
    read = parse_history_line(1, first)
    assert isinstance(read, HistoryRead)
    assert (read.process, read.topic, read.partition, read.offset, read.value) == (
        7,
        "t",
        2,
        9,
        "v",
    )
    assert read.session == 3
    assert parse_history_line(2, second) == HistoryRead(
        2, json.loads(second)["time"], 7, "t", 2, 10, "w", 0
    )


def test_a_nemesis_line_keeps_its_type_nemesis_and_other_fields() -> None:
    """The report draws a fault from its strike to its heal, names it by its nemesis and
    says why a skipped one was skipped: the line's fields beyond f and target are kept."""
    skipped = json.dumps(
        {"time": 5, "process": "nemesis", "type": "info", "f": "skipped", "target": None,
         "nemesis": "cascade", "reason": "no partition"}
    )  # fmt: skip
    event = parse_timeline_line(1, skipped)
    assert event is not None
    assert (event.f, event.type, event.nemesis) == ("skipped", "info", "cascade")
    assert event.extra() == {"reason": "no partition"}
    old = json.dumps({"time": 5, "process": "nemesis", "type": "fail", "f": "leader",
                      "target": None, "error": "no leader"})  # fmt: skip
    event = parse_timeline_line(2, old)
    assert event is not None
    assert event.type == "fail"
    assert event.extra() == {"error": "no leader"}
