"""The audit's reports from a made-up result: report.json, the stdout table, report.html."""

from __future__ import annotations

import html
import io
import itertools
import json
import re
from pathlib import Path
from xml.etree import ElementTree

import pytest

from chaos.audit.history import NemesisEvent, parse_timeline_line
from chaos.audit.model import (
    KINDS,
    AuditResult,
    PartitionSummary,
    ReplicaSummary,
    TornTail,
    Violation,
)
from chaos.audit.report import print_summary, render_html, write_reports
from chaos.audit.timeline_svg import text_width

T0 = 1_700_000_000.0


def _replica(
    broker: int, leo: int, hw: int | None, epochs: list[tuple[int, int]]
) -> ReplicaSummary:
    return ReplicaSummary(
        broker=broker,
        log_start_offset=0,
        log_end_offset=leo,
        high_watermark=hw,
        batches=leo,
        records=leo,
        epoch_starts=epochs,
        checkpoint_epochs=epochs,
        first_batch_offset=0,
    )


def sample_result() -> AuditResult:
    """Two partitions of the docs/replication.md divergence, one of them with a nasty topic name."""
    diverged = PartitionSummary(
        "orders",
        0,
        [_replica(1, 2, 2, [(0, 0)]), _replica(2, 2, 2, [(0, 0), (1, 1)])],
        committed_end=2,
        log_start_offset=0,
        acked=3,
        acked_checked=3,
        violations=2,
    )
    diverged.replicas[0].torn_tail = TornTail(f"{0:020d}.log", 140, 30, "truncated header")
    nasty = PartitionSummary("<script>alert(1)</script>", 3, [_replica(1, 5, None, [(0, 0)])], 5, 0)
    violations = [
        Violation("divergence", "orders", 0, 1, 1, 1, (1, 2), "brokers 1 and 2 disagree."),
        Violation(
            "lost_ack",
            "orders",
            0,
            1,
            1,
            1,
            (1, 2),
            "'m1' <b>acknowledged</b> at offset 1 is not in the log.",
            time=T0 + 1.5,
        ),
    ]
    return AuditResult(
        violations=violations,
        partitions=[diverged, nasty],
        brokers={1: "/data/b1", 2: "/data/b2"},
        history="/data/history.jsonl",
        operations={"ok": 3, "info": 1},
        acks_per_second=[(int(T0), "ok", 2), (int(T0) + 2, "ok", 1), (int(T0) + 2, "info", 1)],
        timeline=[NemesisEvent(1, T0 + 1.0, "kill", "1"), NemesisEvent(2, T0 + 3.0, "start", "1")],
        records_decoded=9,
        seconds=1.25,
    )


def test_report_json_holds_the_violations_and_per_partition_summary(tmp_path: Path) -> None:
    json_path, html_path = write_reports(sample_result(), tmp_path / "out")
    report = json.loads(json_path.read_text())
    assert html_path.exists()
    assert report["violations"][0] == {
        "kind": "divergence",
        "topic": "orders",
        "partition": 0,
        "offset": 1,
        "last_offset": 1,
        "count": 1,
        "brokers": [1, 2],
        "detail": "brokers 1 and 2 disagree.",
        "time": None,
    }
    summary = report["summary"]
    assert summary["clean"] is False
    assert summary["violations_by_kind"] == {
        kind: int(kind in ("divergence", "lost_ack")) for kind in KINDS
    }
    assert summary["brokers"] == {"1": "/data/b1", "2": "/data/b2"}
    orders = summary["partitions"][0]
    assert orders["committed_end"] == 2
    assert orders["replicas"][1]["epochs"] == [[0, 0], [1, 1]]
    assert orders["replicas"][0]["torn_tail"]["remaining_bytes"] == 30


def test_html_is_self_contained_and_escapes_every_piece_of_data() -> None:
    page = render_html(sample_result())
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r'https?://|src=|href="(?!#)|url\(|@import|<script>', page)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;-3" in page
    assert "&lt;b&gt;acknowledged&lt;/b&gt;" in page
    assert page.count('aria-label="leader epoch over offset') == 2
    assert ">divergent</text>" in page
    assert "broker 1 down: kill at" in page  # the timeline's kill 1 ... start 1
    assert "lost acknowledgement" in page
    assert "torn tail in 00000000000000000000.log at 140" in page


def test_a_replicas_compressed_batches_are_counted_in_the_reports_not_noted_as_unchecked(
    tmp_path: Path,
) -> None:
    """Their records are checked as any others': report.json counts them, the HTML notes
    them, and stdout (a summary of what was not checked) says nothing."""
    result = sample_result()
    result.partitions[0].replicas[1].compressed_batches = 1200
    json_path, _ = write_reports(result, tmp_path / "out")
    replicas = json.loads(json_path.read_text())["summary"]["partitions"][0]["replicas"]
    assert [r["compressed_batches"] for r in replicas] == [0, 1200]
    assert "1,200 compressed batches, read inflated" in render_html(result)
    out = io.StringIO()
    print_summary(result, out)
    assert "compressed" not in out.getvalue()


def test_html_without_a_timeline_draws_no_time_axis() -> None:
    result = sample_result()
    result.timeline = []
    assert "faults and acknowledgements over time" not in render_html(result)


def test_stdout_table_lists_each_partition_and_each_violation() -> None:
    out = io.StringIO()
    print_summary(sample_result(), out, report_dir=Path("/reports"))
    text = out.getvalue()
    assert "orders-0" in text
    assert "1:2 2:2" in text
    assert "1:0 2:0,1" in text  # epochs per replica
    assert "torn tail" in text
    assert "VIOLATIONS: lost_ack 1, divergence 1" in text
    assert "reports in /reports" in text


def test_stdout_of_a_clean_audit_says_so() -> None:
    result = sample_result()
    result.violations = []
    out = io.StringIO()
    print_summary(result, out)
    assert "clean: no violations" in out.getvalue()


def test_a_replica_line_is_broken_where_the_replica_has_a_gap() -> None:
    result = sample_result()
    part = result.partitions[1]
    result.violations = [
        Violation("gap", part.topic, part.partition, 2, 3, 2, (1,), "broker 1 misses 2..3.")
    ]
    page = render_html(result)
    plot = page[page.index(f"{html.escape(part.topic)}-3</h3>") :]
    assert plot.count("<polyline") == 2  # offsets 0..1 and 4, around the hole


def test_audit_stdout_stays_short_and_printable_with_thousands_of_violations() -> None:
    result = sample_result()
    result.violations = [
        Violation(
            "duplicate",
            f"perf{i % 50}",
            0,
            i,
            i,
            1,
            (1, 2, 3),
            "\x1b[2J\x00 raw " + "x" * 500 + ".",
        )
        for i in range(5000)
    ]
    out = io.StringIO()
    print_summary(result, out, report_dir=Path("/reports"))
    text = out.getvalue()
    assert len(text) < 12_000, len(text)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text)
    assert "5000 violations" in text
    assert "more rows" in text
    assert "VIOLATIONS: duplicate 5000" in text
    page = render_html(result)
    assert page.count('<tr><td class="kind">') < 5000  # the rest are in report.json
    assert "listed in report.json" in page


def test_reads_judged_wrong_are_marked_on_the_partition_plot_with_a_legend() -> None:
    result = sample_result()
    result.partitions[0].reads = 12
    result.violations += [
        Violation("inconsistent_read", "orders", 0, 1, 1, 1, (1, 2), "process 7 read 'x'."),
        Violation("poll_skip", "orders", 0, 0, 1, 2, (1, 2), "process 7 skipped 0..1."),
    ]
    page = render_html(result)
    plot = page[page.index("orders-0</h3>") : page.index("-3</h3>")]
    assert plot.count('class="read-marker"') == 2
    assert "inconsistent_read (a read)" in plot
    assert "poll_skip (a read)" in plot
    assert "nonmonotonic_poll" not in plot
    assert "consumers' reads 12" in page
    out = io.StringIO()
    print_summary(result, out)
    assert "reads" in out.getvalue()
    assert "inconsistent_read 1, poll_skip 1" in out.getvalue()


def test_a_report_without_reads_has_no_reads_column_or_marker() -> None:
    out = io.StringIO()
    print_summary(sample_result(), out)
    assert "reads" not in out.getvalue()
    assert 'class="read-marker"' not in render_html(sample_result())


# -- the time axis: lanes, fault intervals, skipped faults, the y axis ------------------------


def _events(*lines: dict[str, object]) -> list[NemesisEvent]:
    """Timeline lines (with ``dt`` seconds after T0 for their time), parsed as the audit
    parses them."""
    out = []
    for number, line in enumerate(lines, 1):
        obj = {"process": "nemesis", "type": "info", "target": None, **line}
        obj["time"] = T0 + float(obj.pop("dt"))  # type: ignore[arg-type]
        event = parse_timeline_line(number, json.dumps(obj))
        assert event is not None
        out.append(event)
    return out


def _timeline_svg(result: AuditResult) -> ElementTree.Element:
    page = render_html(result)
    start = page.index('<svg width="1000"')
    svg = page[start : page.index("</svg>", start) + len("</svg>")]
    return ElementTree.fromstring(svg)


def _lanes(svg: ElementTree.Element) -> dict[str, tuple[float, float]]:
    """Lane title -> (top, bottom) of its band."""
    bands = [r for r in svg.iter("rect") if r.get("class") == "lane"]
    titles = [t for t in svg.iter("text") if t.get("class") == "lane-title"]
    return {
        (t.text or ""): (float(b.get("y", 0)), float(b.get("y", 0)) + float(b.get("height", 0)))
        for b, t in zip(bands, titles, strict=True)
    }


def _in_lane(svg: ElementTree.Element, lane: str, tag: str, cls: str) -> list[ElementTree.Element]:
    top, bottom = _lanes(svg)[lane]
    return [
        el
        for el in svg.iter(tag)
        if el.get("class") == cls and top <= float(el.get("y", -1)) < bottom
    ]


def _result(events: list[NemesisEvent], seconds: int = 60) -> AuditResult:
    result = sample_result()
    result.brokers = {1: "/d/1", 2: "/d/2", 3: "/d/3"}
    result.timeline = events
    result.acks_per_second = [(int(T0) + s, "ok", 100 + 10 * (s % 7)) for s in range(seconds)]
    return result


NEW_STYLE = (
    {"dt": 0, "f": "run-start"},
    {"dt": 5, "f": "strike", "nemesis": "cascade", "hold_s": 3},
    {"dt": 5.5, "f": "kill", "target": 2, "nemesis": "cascade", "tp": "t-0"},
    {"dt": 5.6, "f": "kill", "target": 3, "nemesis": "cascade", "tp": "t-0"},
    {"dt": 7.0, "f": "cascade", "target": [2, 3, 1], "tp": "t-0"},
    {"dt": 7.1, "f": "fault", "target": [2, 3], "nemesis": "cascade", "hold_s": 3},
    {"dt": 10.0, "f": "start", "target": 2},
    {"dt": 12.0, "f": "start", "target": 3},
    {"dt": 12.1, "f": "healed", "target": [2, 3], "nemesis": "cascade"},
    {"dt": 15, "f": "strike", "nemesis": "cascade", "hold_s": 3},
    {"dt": 15.2, "f": "skipped", "nemesis": "cascade", "reason": "no partition whose ISR is whole"},
    {"dt": 20, "f": "strike", "nemesis": "pause", "hold_s": 9},
    {"dt": 20.1, "f": "pause", "target": 1, "nemesis": "pause"},
    {"dt": 20.1, "f": "fault", "target": 1, "nemesis": "pause", "hold_s": 9},
    {"dt": 29.0, "f": "resume", "target": 1},
    {"dt": 29.1, "f": "healed", "target": 1, "nemesis": "pause"},
    {"dt": 30.0, "f": "isr-whole", "after_heal_s": 0.9},
    {"dt": 40, "f": "run-end"},
)


def test_each_fault_is_an_interval_from_its_strike_to_its_heal_labelled_by_its_nemesis() -> None:
    svg = _timeline_svg(_result(_events(*NEW_STYLE)))
    assert list(_lanes(svg)) == ["faults", "skipped faults", "broker 1", "broker 2", "broker 3"]
    faults = _in_lane(svg, "faults", "rect", "span")
    labels = [t.text for t in _in_lane(svg, "faults", "text", "span-label")]
    assert labels == ["cascade 2,3", "pause 1"]
    # The cascade is drawn from its strike (5 s), not from its end; to its heal (12.1 s).
    cascade, pause = faults
    scale = (float(pause.get("x", 0)) - float(cascade.get("x", 0))) / 15
    assert float(cascade.get("width", 0)) == pytest.approx(7.1 * scale, abs=0.2)
    tip = cascade.findtext("title") or ""
    assert "cascade on 2,3" in tip
    assert "planned hold 3 s" in tip
    # Per broker: down from its kill to its start, paused from SIGSTOP to SIGCONT.
    b2 = _in_lane(svg, "broker 2", "rect", "span")
    assert len(b2) == 1
    assert float(b2[0].get("width", 0)) == pytest.approx(4.5 * scale, abs=0.2)
    assert "broker 2 down (cascade): kill at" in (b2[0].findtext("title") or "")
    assert [t.text for t in _in_lane(svg, "broker 1", "text", "span-label")] == ["pause"]
    assert [t.text for t in _in_lane(svg, "broker 3", "text", "span-label")] == ["cascade"]


def test_a_skipped_fault_is_drawn_as_skipped_with_its_reason() -> None:
    old = _events({"dt": 3, "f": "leader", "type": "fail", "error": "no leader to kill"})
    for events, reason in (
        (_events(*NEW_STYLE), "no partition whose ISR is whole"),
        (old, "no leader to kill"),
    ):
        result = _result(events)
        svg = _timeline_svg(result)
        skipped = _in_lane(svg, "skipped faults", "rect", "skipped")
        assert len(skipped) == 1
        assert reason in (skipped[0].findtext("title") or "")
        assert _in_lane(svg, "skipped faults", "text", "span-label")[0].text in (
            "skipped: cascade",
            "skipped: leader",
        )
        assert _in_lane(svg, "skipped faults", "rect", "span") == []  # not drawn as done
        assert reason in render_html(result)  # and listed under the figure


def test_an_old_timeline_draws_a_multi_step_fault_from_its_first_step() -> None:
    """A timeline written before strike and healed: the cascade begins at its first kill,
    ends at its last restart; each broker has its own down interval."""
    events = _events(
        {"dt": 2.0, "f": "kill", "target": 2, "nemesis": "cascade"},
        {"dt": 2.1, "f": "kill", "target": 3, "nemesis": "cascade"},
        {"dt": 2.2, "f": "zk-session-closed", "target": 2, "session": "0x1"},
        {"dt": 4.0, "f": "cascade", "target": [2, 3, 1]},
        {"dt": 4.0, "f": "fault", "target": [2, 3], "nemesis": "cascade", "hold_s": 3},
        {"dt": 7.0, "f": "start", "target": 2},
        {"dt": 9.0, "f": "start", "target": 3},
        {"dt": 9.5, "f": "isr-whole", "after_heal_s": 0.5},
        {"dt": 12.0, "f": "stop", "target": 3, "nemesis": "bounce"},
        {"dt": 12.0, "f": "fault", "target": 3, "nemesis": "bounce", "hold_s": 3},
        {"dt": 15.0, "f": "start", "target": 3},
    )
    svg = _timeline_svg(_result(events, seconds=20))
    cascade, bounce = _in_lane(svg, "faults", "rect", "span")
    scale = (float(bounce.get("x", 0)) - float(cascade.get("x", 0))) / 10
    assert float(cascade.get("width", 0)) == pytest.approx(7 * scale, abs=0.2)
    assert float(bounce.get("width", 0)) == pytest.approx(3 * scale, abs=0.2)
    assert [t.text for t in _in_lane(svg, "broker 3", "text", "span-label")] == [
        "cascade",
        "bounce",
    ]
    steps = [p for p in svg.iter("path") if p.get("class") == "step"]
    assert any("ZooKeeper session closed" in (p.findtext("title") or "") for p in steps)


def _label_boxes(svg: ElementTree.Element) -> list[tuple[float, float, float]]:
    return [
        (
            float(t.get("y", 0)),
            float(t.get("x", 0)),
            float(t.get("x", 0)) + text_width(t.text or ""),
        )
        for t in svg.iter("text")
        if t.get("class") == "span-label"
    ]


def test_fault_labels_never_overlap_nor_run_past_the_plot() -> None:
    """Faults a fraction of a second apart and one at the very end: every label is cut to
    its room (with the whole text in the tooltip) or left out, none is drawn over another
    or past the plot's right edge."""
    lines: list[dict[str, object]] = []
    t = 0.0
    for i in range(30):
        broker = 1 + i % 3
        lines += [
            {"dt": t, "f": "kill", "target": broker, "nemesis": "hard-bounce-controller"},
            {"dt": t, "f": "fault", "target": [1, 2, 3], "nemesis": "hard-bounce-controller"},
            {"dt": t + 0.3, "f": "start", "target": broker},
        ]
        t += 0.4
    lines += [
        {"dt": 57, "f": "stop", "target": 2, "nemesis": "clean-shutdown-controller"},
        {"dt": 57, "f": "fault", "target": 2, "nemesis": "clean-shutdown-controller"},
        {"dt": 58, "f": "start", "target": 2},
    ]
    svg = _timeline_svg(_result(_events(*lines)))
    boxes = sorted(_label_boxes(svg))
    assert boxes
    for (y1, _, right), (y2, left, _) in itertools.pairwise(boxes):
        assert y1 != y2 or right <= left, "labels overlap"
    plot_right = max(
        float(r.get("x", 0)) + float(r.get("width", 0))
        for r in svg.iter("rect")
        if r.get("class") == "lane"
    )
    assert max(right for _, _, right in boxes) <= plot_right
    cut = [
        t for t in svg.iter("text") if t.get("class") == "span-label" and "\u2026" in (t.text or "")
    ]
    assert cut
    for label in cut:
        assert (label.text or "")[:-1] in (label.findtext("title") or "")


def test_an_unhealed_fault_runs_to_the_end_of_the_timeline_drawn_open() -> None:
    events = _events(
        {"dt": 1, "f": "strike", "nemesis": "kill"},
        {"dt": 1.1, "f": "kill", "target": 2, "nemesis": "kill"},
        {"dt": 1.2, "f": "fault", "target": 2, "nemesis": "kill"},
        {"dt": 30, "f": "run-end"},
    )
    svg = _timeline_svg(_result(events))
    for lane in ("faults", "broker 2"):
        (bar,) = _in_lane(svg, lane, "rect", "span")
        assert bar.get("stroke-dasharray")
        assert "not healed" in (bar.findtext("title") or "")


def test_the_operations_chart_has_a_y_axis_with_a_scale() -> None:
    svg = _timeline_svg(_result(_events(*NEW_STYLE)))
    labels = [t.text for t in svg.iter("text") if t.get("class") == "y-label"]
    assert labels[0] == "0"
    assert len(labels) >= 3
    assert [int((s or "0").replace(",", "")) for s in labels] == sorted(
        int((s or "0").replace(",", "")) for s in labels
    )
    assert int((labels[-1] or "0").replace(",", "")) >= 160  # the peak bucket holds 160


def test_a_scenario_names_its_brokers_and_its_key_events() -> None:
    events = _events(
        {"dt": 0, "f": "roles", "names": {"A": 1, "B": 2}},
        {"dt": 1, "f": "kill", "target": 2},
        {"dt": 3, "f": "start", "target": 2},
        {"dt": 3.5, "f": "mark", "target": 2, "label": "B truncates m1"},
    )
    result = _result(events, seconds=6)
    result.brokers = {1: "/d/1", 2: "/d/2"}
    page = render_html(result)
    assert "Who is who: <b>A</b> = broker 1, <b>B</b> = broker 2" in page
    svg = _timeline_svg(result)
    assert list(_lanes(svg)) == ["A: broker 1", "B: broker 2"]
    marks = [t.text for t in svg.iter("text") if t.get("class") == "mark"]
    assert marks == ["B truncates m1"]
    assert [t.text for t in _in_lane(svg, "B: broker 2", "text", "span-label")] == ["kill"]


def test_a_paused_broker_killed_is_down_not_paused_any_more() -> None:
    events = _events(
        {"dt": 1, "f": "pause", "target": 1},
        {"dt": 4, "f": "kill", "target": 1},
        {"dt": 6, "f": "start", "target": 1},
    )
    svg = _timeline_svg(_result(events, seconds=10))
    tips = [r.findtext("title") or "" for r in _in_lane(svg, "broker 1", "rect", "span")]
    assert len(tips) == 2
    assert tips[0].startswith("broker 1 paused: pause at")
    assert "kill at" in tips[0]
    assert tips[1].startswith("broker 1 down: kill at")


def test_key_events_close_together_are_named_in_full_one_under_the_other() -> None:
    labels = ["m1 acknowledged by A alone", "B elected uncleanly", "m2 at offset 1 on B"]
    labels.append("A truncates m1, copies m2")
    events = _events(
        *({"dt": 3 + i * 0.5, "f": "mark", "label": label} for i, label in enumerate(labels))
    )
    svg = _timeline_svg(_result(events, seconds=5))
    marks = [t for t in svg.iter("text") if t.get("class") == "mark"]
    assert sorted(t.text or "" for t in marks) == sorted(labels)
    boxes = sorted(
        (
            float(t.get("y", 0)),
            float(t.get("x", 0)),
            float(t.get("x", 0)) + text_width(t.text or ""),
        )
        for t in marks
    )
    for (y1, _, right), (y2, left, _) in itertools.pairwise(boxes):
        assert y1 != y2 or right <= left, "key events overlap"
