"""The audit's reports from a made-up result: report.json, the stdout table, report.html."""

from __future__ import annotations

import html
import io
import json
import re
from pathlib import Path

from chaos.audit.history import NemesisEvent
from chaos.audit.model import (
    KINDS,
    AuditResult,
    PartitionSummary,
    ReplicaSummary,
    TornTail,
    Violation,
)
from chaos.audit.report import print_summary, render_html, write_reports

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
    assert not re.search(r"https?://|src=|href=|url\(|@import|<script>", page)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;-3" in page
    assert "&lt;b&gt;acknowledged&lt;/b&gt;" in page
    assert page.count('aria-label="leader epoch over offset') == 2
    assert ">divergent</text>" in page
    assert "kill 1" in page
    assert "start 1" in page
    assert "lost acknowledgement" in page
    assert "torn tail in 00000000000000000000.log at 140" in page


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
