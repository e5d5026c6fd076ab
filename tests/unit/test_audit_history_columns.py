"""History ranges as columns (chaos.audit.history_columns): whichever path parses a line, its
columns are what parse_history_line makes of it, and the first bad line is found with its
reason."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

from chaos.audit.hashing import hash_bytes
from chaos.audit.history import (
    GroupStep,
    HistoryError,
    HistoryRead,
    NemesisEvent,
    TxnStep,
    parse_history_line,
)
from chaos.audit.history_columns import KINDS, READ, parse_range
from chaos.audit.history_templates import learn
from chaos.history_recorder import HistoryRecorder

T0 = 1_732_252_800.0


def _expected(data: bytes) -> tuple[list[tuple[Any, ...]], list[NemesisEvent], Any]:
    """parse_history_line over every line, up to the first bad one."""
    rows: list[tuple[Any, ...]] = []
    events: list[NemesisEvent] = []
    count = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    for number, text in enumerate(data.split(b"\n")[:count], start=1):
        try:
            parsed = parse_history_line(number, text)
        except HistoryError as e:
            return rows, events, (number, e.reason)
        if parsed is None:
            continue
        if isinstance(parsed, NemesisEvent):
            events.append(parsed)
            continue
        if isinstance(parsed, TxnStep | GroupStep):
            continue  # the transaction and group checks' (chaos/audit/groups.py)
        kind = READ if isinstance(parsed, HistoryRead) else KINDS.index(parsed.type)
        session = parsed.session if isinstance(parsed, HistoryRead) else 0
        key = None if isinstance(parsed, HistoryRead) else parsed.key
        rows.append(
            (
                number,
                kind,
                parsed.topic,
                -1 if parsed.partition is None else parsed.partition,
                -1 if parsed.offset is None else parsed.offset,
                int(hash_bytes([None if parsed.value is None else parsed.value.encode()])[0]),
                parsed.time,
                parsed.process,
                session,
                int(hash_bytes([None if key is None else key.encode()])[0]),
                None if isinstance(parsed, HistoryRead) or parsed.sent is None else parsed.sent,
            )
        )
    return rows, events, None


def _got(data: bytes) -> tuple[list[tuple[Any, ...]], list[NemesisEvent], Any]:
    parsed = parse_range(data)
    lines = parsed.lines
    keys = lines.keys()
    sent = parsed.sent if parsed.sent is not None else np.full(len(lines), np.nan)
    rows = [
        (
            int(lines.line[i]),
            int(lines.kind[i]),
            parsed.topics[parsed.topic[i]],
            int(parsed.partition[i]),
            int(lines.offset[i]),
            int(lines.value[i]),
            float(lines.time[i]),
            int(lines.process[i]),
            int(lines.session[i]),
            int(keys[i]),
            None if np.isnan(sent[i]) else float(sent[i]),
        )
        for i in range(len(lines))
    ]
    assert parsed.count == data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    return rows, parsed.events, parsed.error


numbers = st.one_of(
    st.integers(0, 40),
    st.integers(0, 2**63 + 5),
    st.integers(-3, -1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.booleans(),
    st.text(max_size=3),
)
values = st.one_of(
    st.text(alphabet="abcxyz-0123456789", max_size=20),
    st.text(max_size=8),
    st.sampled_from(['q"uote', "back\\slash", "caf\u00e9", "\ud800", "tab\there"]),
)
times = st.one_of(
    st.floats(0, 2e9, allow_nan=False),
    st.integers(0, 2_000_000_000),
    st.sampled_from([T0 + 0.1, 1795705090.4374814, 0.0, 1e300, 5]),
)


@st.composite
def history_lines(draw: st.DrawFn) -> bytes:
    """A history written the ways writers write it: a few line shapes, mostly valid, some
    lines of any kind the audit must refuse."""
    compact = draw(st.booleans())
    separators = (",", ":") if compact else (", ", ": ")
    ascii_only = draw(st.booleans())
    lines = []
    for _ in range(draw(st.integers(0, 40))):
        shape = draw(st.integers(0, 22))
        op: dict[str, Any] = {
            "time": draw(times),
            "process": draw(st.integers(0, 9)),
            "type": draw(st.sampled_from(["ok", "ok", "ok", "fail", "info", "read"])),
            "topic": draw(st.sampled_from(["t", "audit", "other"])),
            "partition": draw(st.integers(0, 3)),
            "value": draw(values),
            "offset": draw(st.integers(0, 10**9)),
        }
        if op["type"] == "read":
            op["session"] = draw(st.integers(0, 3))
        if op["type"] in ("fail", "info") and draw(st.booleans()):
            op["offset"] = None
            if draw(st.booleans()):
                op["partition"] = None
        if shape == 0:  # a field of any kind
            op[draw(st.sampled_from(sorted(op)))] = draw(numbers)
        elif shape == 1:
            del op[draw(st.sampled_from(sorted(op)))]
        elif shape == 2:
            op["extra"] = draw(st.one_of(st.text(max_size=4), st.integers(), st.none()))
        elif shape == 3:
            lines.append(draw(st.sampled_from(["", "   ", "{", "[1]", "{}", "nul", "\r"])))
            continue
        elif shape == 4:
            lines.append(
                json.dumps({"time": T0, "process": "nemesis", "f": "kill", "target": [1, 2]})
            )
            continue
        elif shape == 5:
            op = dict(reversed(list(op.items())))
        elif shape == 6:
            op["session"] = draw(numbers)
        elif shape == 11:  # a transactional write, or a read of a consumer's isolation level
            op["txn"] = draw(st.one_of(values, st.just(""), numbers))
        elif shape == 12:
            op["isolation"] = draw(
                st.one_of(st.sampled_from(["read_committed", "read_uncommitted", "x"]), numbers)
            )
        elif shape == 13:  # a transaction step: no topic
            step = {
                "time": op["time"],
                "process": op["process"],
                "type": op["type"],
                "f": draw(st.sampled_from(["begin", "commit", "abort", "send_offsets", "x"])),
                "txn": draw(st.one_of(values, numbers)),
            }
            if draw(st.booleans()):
                step["offsets"] = draw(
                    st.one_of(st.just([["t", 0, 5]]), st.just([["t", -1, 5]]), numbers)
                )
            lines.append(json.dumps(step, separators=separators, ensure_ascii=ascii_only))
            continue
        elif shape == 16:  # when the write was sent: a number, or anything the audit refuses
            op["sent"] = draw(st.one_of(times, numbers))
        elif shape == 14:  # a consumer group member's read: all three fields, or not
            for name, strategy in (
                ("group", st.one_of(values, st.just(""), numbers)),
                ("member", st.one_of(values, numbers)),
                ("generation", st.one_of(st.integers(0, 9), numbers)),
            ):
                if draw(st.integers(0, 5)):
                    op[name] = draw(strategy)
        elif shape == 15:  # a consumer group step: no topic
            step = {
                "time": op["time"],
                "process": op["process"],
                "type": op["type"],
                "f": draw(st.sampled_from(["assigned", "revoked", "lost", "commit_offsets"])),
                "group": draw(st.one_of(values, numbers)),
                "member": "m",
                "generation": draw(st.one_of(st.integers(0, 9), numbers)),
                "partitions": [["t", 0]],
                "offsets": draw(st.one_of(st.just([["t", 0, 5]]), numbers)),
            }
            lines.append(json.dumps(step, separators=separators, ensure_ascii=ascii_only))
            continue
        elif shape == 10:  # a compacted topic's write: its key, or a tombstone
            op["key"] = draw(st.one_of(values, st.none(), numbers))
            if draw(st.booleans()):
                op["value"] = None
        text = json.dumps(op, separators=separators, ensure_ascii=ascii_only)
        if shape == 7:
            text = text.replace(":", " : ", 1)
        elif shape == 8:
            text += "\r"
        elif shape == 9:
            text = text.replace('"offset"', '"offset"', 1) + " "
        lines.append(text)
    end = draw(st.sampled_from(["\n", ""]))
    return ("\n".join(lines) + (end if lines else "")).encode("utf-8", "surrogatepass")


@settings(max_examples=400, deadline=None)
@given(history_lines())
def test_every_line_is_what_parse_history_line_makes_of_it(data: bytes) -> None:
    expected_rows, expected_events, expected_error = _expected(data)
    rows, events, error = _got(data)
    event("bad line" if expected_error else "all lines good")
    templated = parse_range(data).templated
    event("some lines templated" if templated else "no line templated")
    assert error == expected_error
    assert events == expected_events
    assert len(rows) == len(expected_rows)
    for got, want in zip(rows, expected_rows, strict=True):
        assert got[:6] == want[:6]
        assert got[6] == want[6] or (math.isnan(got[6]) and math.isnan(want[6]))
        assert got[7:] == want[7:]


def test_a_uniform_history_is_parsed_by_one_template() -> None:
    ops = [
        json.dumps(
            {
                "time": T0 + i / 7,
                "process": i % 3,
                "type": "ok",
                "topic": "t",
                "partition": i % 2,
                "value": f"p{i % 3}-{i}",
                "offset": i,
            }
        )
        for i in range(1000)
    ]
    data = ("\n".join(ops) + "\n").encode()
    template = learn(ops[0].encode())
    assert template is not None
    assert template.fields == ("time", "process", "type", "topic", "partition", "value", "offset")
    rows, _, error = _got(data)
    assert error is None
    assert rows == _expected(data)[0]
    assert parse_range(data).templated == 1000


def test_the_recorders_lines_take_the_template_path(tmp_path: Any) -> None:
    with HistoryRecorder(tmp_path / "p7.jsonl", 7) as recorder:
        for i in range(50):
            recorder.read("t", 2, i, f"v{i}", session=i // 20)
    data = (tmp_path / "p7.jsonl").read_bytes()
    assert learn(data.split(b"\n")[0]) is not None
    rows, _, error = _got(data)
    assert error is None
    assert rows == _expected(data)[0]
    assert [r[8] for r in rows] == [i // 20 for i in range(50)]
    assert parse_range(data).templated == 50


def test_lines_the_template_path_cannot_be_sure_of_are_left_to_the_slow_path() -> None:
    assert learn(b'{"time": 1, "process": "nemesis", "type": "info", "f": "kill"}') is None
    assert learn(b'{"time": 1, "process": 1, "type": "ok", "type": "ok"}') is None
    assert learn(b'{"time": 1, "process": 1, "type": "ok", "topic": "t", "value": "a\\"b"}') is None
    assert (
        learn(b'{"time": 1, "process": 1, "type": "ok", "topic": "t", "value": "v", "x": [1]}')
        is None
    )
    assert learn(b'{"time": 1, "process": 1, "type": "ok", "topic": "t", "value": "v"}') is not None


def test_the_first_bad_line_stops_the_range_with_its_reason() -> None:
    good = json.dumps(
        {"time": T0, "process": 1, "type": "ok", "topic": "t", "partition": 0, "value": "v",
         "offset": 0}
    )  # fmt: skip
    bad = good.replace('"offset": 0', '"offset": -1')
    data = "\n".join([good, good, bad, good, "{"]).encode()
    rows, _, error = _got(data)
    assert error == (3, '"offset" must be a non-negative integer, got -1')
    assert [r[0] for r in rows] == [1, 2]
    assert np.all(parse_range(data).lines.line < 3)
