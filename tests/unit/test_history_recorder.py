"""History parts merge in time order; a line torn by a killed process is left out."""

from __future__ import annotations

import json
from pathlib import Path

from chaos.history_recorder import HistoryRecorder, TimelineRecorder, merge_histories


def test_parts_merge_in_time_order_and_a_torn_last_line_is_dropped(tmp_path: Path) -> None:
    with (
        HistoryRecorder(tmp_path / "0.jsonl", 0) as a,
        HistoryRecorder(tmp_path / "1.jsonl", 1) as b,
    ):
        a.ok("t", 0, "p0-0", 0)
        b.info("t", None, "p1-0")
        a.fail("t", 1, "p0-1")
        b.read("t", 0, 0, "p0-0", session=4)
    with (tmp_path / "1.jsonl").open("a") as f:
        f.write('{"time": 1e12, "process": 1, "type": "ok"')  # killed mid-line
    out = tmp_path / "history.jsonl"
    assert merge_histories(sorted(tmp_path.glob("?.jsonl")), out) == 4
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["type"] for line in lines] == ["ok", "info", "fail", "read"]
    assert [line["time"] for line in lines] == sorted(line["time"] for line in lines)
    assert lines[0] == {**lines[0], "process": 0, "partition": 0, "offset": 0, "value": "p0-0"}
    assert (lines[1]["partition"], lines[1]["offset"]) == (None, None)
    assert lines[3]["session"] == 4


def test_timeline_lines_are_the_nemesis_s(tmp_path: Path) -> None:
    with TimelineRecorder(tmp_path / "timeline.jsonl") as timeline:
        timeline.event("kill", 2, nemesis="leader")
    [line] = [json.loads(x) for x in (tmp_path / "timeline.jsonl").read_text().splitlines()]
    assert {k: line[k] for k in ("process", "type", "f", "target", "nemesis")} == {
        "process": "nemesis",
        "type": "info",
        "f": "kill",
        "target": 2,
        "nemesis": "leader",
    }


def test_a_write_may_say_when_it_was_sent(tmp_path: Path) -> None:
    """``sent`` (for the report's latency plot) is written when given, and left out else."""
    from chaos.audit.history import HistoryOp, parse_history_line

    path = tmp_path / "h.jsonl"
    with HistoryRecorder(path, 4) as history:
        history.ok("t", 0, "v0", 7, sent=1_700_000_000.25)
        history.info("t", 0, "v1", sent=1_700_000_000.5)
        history.ok("t", 0, "v2", 8)
    lines = path.read_text().splitlines()
    parsed = [parse_history_line(n, line) for n, line in enumerate(lines, 1)]
    assert [p.sent for p in parsed if isinstance(p, HistoryOp)] == [
        1_700_000_000.25,
        1_700_000_000.5,
        None,
    ]
    assert '"sent"' not in lines[2]
