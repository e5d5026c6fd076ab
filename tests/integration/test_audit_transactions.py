"""The audit's transaction checks (docs/audit.md, "Transactions") on data dirs written with
the project's Log: transactional batches and the markers WriteTxnMarkers writes.

Each fault is planted alone in partitions of its own, beside healthy transactions (one
committed over two partitions, one aborted, read by read_committed and read_uncommitted
consumers that skip what they must; a consume-transform-produce transaction whose offsets
in __consumer_offsets commit with its writes); one audit finds each where it was planted,
and nothing in the healthy partitions: no poll_skip over markers or aborted records, no
phantom of a marker's record.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from broker.log.log_cleaner import clean_log
from chaos.audit.cli import EXIT_VIOLATIONS, audit_command
from chaos.audit.session import start_session
from chaos.audit.testing import BrokerDataDir, history_line, read_line, txn_step, write_lines
from chaos.audit.transactions import TRANSACTION_KINDS
from proto.config.log_config import LogConfig
from proto.topic_partition import TopicPartition

pytestmark = pytest.mark.integration

A, B = 1, 2
T0 = 1_700_000_000.0
END = T0 + 600
"""The run's end: the timeline's last event."""
TIMEOUT_MS = 10_000
RC = "read_committed"

HEALTHY_A = TopicPartition("healthy", 0)
HEALTHY_B = TopicPartition("healthy", 1)
LOST = TopicPartition("lost-committed", 0)
COMMITTED_ABORT = TopicPartition("committed-abort", 0)
ABORTED_READ = TopicPartition("aborted-read", 0)
TOLD_ABORTED = TopicPartition("told-aborted", 0)
DIRTY_OPEN = TopicPartition("dirty-open", 0)
DIRTY_EARLY = TopicPartition("dirty-early", 0)
PARTIAL_A = TopicPartition("partial", 0)
PARTIAL_B = TopicPartition("partial", 1)
HANGING = TopicPartition("hanging", 0)
# consume-transform-produce: the offsets a transaction sends end as its writes do
OUT = TopicPartition("out", 0)
OFFSETS_0 = TopicPartition("__consumer_offsets", 0)
OUT_UNCOMMITTED = TopicPartition("out-aborted", 0)
OUT_LOST = TopicPartition("out-lost-offsets", 0)
OFFSETS_1 = TopicPartition("__consumer_offsets", 1)
# a compacted topic one replica cleaned: its aborted records gone there, as Kafka's cleaner
# removes them; no replica owes them
COMPACTED = TopicPartition("compacted-txn", 0)

EXPECTED = {
    LOST: ["lost_committed"],
    COMMITTED_ABORT: ["committed_abort"],
    ABORTED_READ: ["aborted_read"],
    TOLD_ABORTED: ["aborted_read", "committed_abort"],  # the write, and the read of it
    DIRTY_OPEN: ["dirty_read"],
    DIRTY_EARLY: ["dirty_read"],
    PARTIAL_B: ["partial_txn"],
    HANGING: ["hanging_txn"],
    OUT_UNCOMMITTED: ["partial_txn"],  # offsets applied without the writes
    OFFSETS_1: ["lost_committed", "partial_txn"],  # writes applied without the offsets
}


class _Cluster:
    """Two brokers: A leads every partition, B copies it; the history of what the
    producers and consumers were told."""

    def __init__(self, root: Path) -> None:
        self.dirs = {b: BrokerDataDir(root / f"broker-{b}", b) for b in (A, B)}
        self.history: list[dict[str, Any]] = []
        self.pids = iter(range(100, 1000))
        self.clock = T0

    def tick(self) -> float:
        self.clock += 0.01
        return self.clock

    def txn(
        self,
        name: str,
        writes: dict[TopicPartition, list[str]],
        *,
        timestamp_ms: int | None = None,
        offsets_to: TopicPartition | None = None,
    ) -> tuple[int, dict[TopicPartition, int]]:
        """A transaction's writes (acknowledged), its begin line, and with ``offsets_to``
        the offsets it sends (the group coordinator's transactional batch in that
        __consumer_offsets partition); returns its producer id and the first offset of its
        writes in each partition."""
        pid = next(self.pids)
        self.history.append(txn_step("ok", "begin", name, time=self.tick(), timeout_ms=TIMEOUT_MS))
        first = {}
        for tp, values in writes.items():
            leader = self.dirs[A]
            at = leader.produce(
                tp, values, epoch=0, producer_id=pid, transactional=True, timestamp=timestamp_ms
            )
            first[tp] = at
            for i, value in enumerate(values):
                self.history.append(
                    history_line("ok", tp, value, at + i, time=self.tick(), txn=name)
                )
        if offsets_to is not None:
            self.history.append(
                txn_step(
                    "ok", "send_offsets", name, time=self.tick(), group="copiers",
                    offsets=[["in", 0, 10]],
                )
            )  # fmt: skip
            self.dirs[A].produce(
                offsets_to, [b"commit"], epoch=0, producer_id=pid, transactional=True,
                timestamp=round(self.clock * 1000),
            )  # fmt: skip
        return pid, first

    def end(
        self,
        name: str,
        pid: int,
        tps: list[TopicPartition],
        *,
        commit: bool,
        told: str | None = "ok",
        marker_ms: int | None = None,
        commits: dict[TopicPartition, bool] | None = None,
    ) -> None:
        """The markers in ``tps`` (``commits`` overriding per partition) and the step line
        the producer was told (``told``: its type; None: no line)."""
        written_at = round(self.tick() * 1000) if marker_ms is None else marker_ms
        for tp in tps:
            self.dirs[A].end_txn(
                tp, pid, commit=(commits or {}).get(tp, commit), epoch=0, timestamp=written_at
            )
        if told is not None:
            f = "commit" if commit else "abort"
            self.history.append(txn_step(told, f, name, time=self.tick()))

    def read(
        self,
        tp: TopicPartition,
        offset: int,
        value: str,
        *,
        isolation: str | None = RC,
        at: float | None = None,
        process: int = 9,
    ) -> None:
        self.history.append(
            read_line(
                tp, offset, value, time=at if at is not None else self.tick(), process=process,
                isolation=isolation,
            )
        )  # fmt: skip

    def close(self) -> list[Path]:
        for tp in {tp for d in self.dirs.values() for tp in d._logs}:
            self.dirs[B].replicate(tp, self.dirs[A])
            end = self.dirs[A].log(tp).log_end_offset
            for d in self.dirs.values():
                d.high_watermarks[tp] = end
        for d in self.dirs.values():
            d.close()
        return [d.path for d in self.dirs.values()]


def _cleaned_compacted(c: _Cluster) -> None:
    """Keyed writes to COMPACTED (an aborted transaction among them) over several segments,
    replicated to B, then cleaned on A only."""
    config = LogConfig(segment_bytes=300, cleanup_policy=("compact",))
    for d in c.dirs.values():
        d.configs[COMPACTED] = config
    leader = c.dirs[A]
    pid = next(c.pids)
    c.history.append(txn_step("ok", "begin", "cx", time=c.tick(), timeout_ms=TIMEOUT_MS))
    at = leader.produce(
        COMPACTED, ["cx0", "cx1"], epoch=0, producer_id=pid, transactional=True,
        keys=["ka", "kb"],
    )  # fmt: skip
    for i, (key, value) in enumerate([("ka", "cx0"), ("kb", "cx1")]):
        c.history.append(
            history_line("ok", COMPACTED, value, at + i, time=c.tick(), key=key, txn="cx")
        )
    leader.end_txn(COMPACTED, pid, commit=False, epoch=0)
    c.history.append(txn_step("ok", "abort", "cx", time=c.tick()))
    for n in range(12):  # plain keyed writes: rolls, and something to clean
        value = f"cv{n}"
        first = leader.produce(COMPACTED, [value], epoch=0, keys=[f"k{n % 3}"])
        c.history.append(
            history_line("ok", COMPACTED, value, first, time=c.tick(), key=f"k{n % 3}")
        )
    c.dirs[B].replicate(COMPACTED, leader)
    log = leader.log(COMPACTED)
    assert len(log.segments) > 3
    result = clean_log(log, first_dirty=0, limit_offset=log.log_end_offset, now_ms=0, capacity=1000)
    assert result is not None
    assert result.stats.aborted_removed == 2


def _build(root: Path) -> tuple[list[Path], Path, Path]:
    c = _Cluster(root)
    # healthy: a committed transaction over two partitions, an aborted one between its
    # writes, then plain writes; read by read_committed and read_uncommitted consumers
    pid, at = c.txn("ok-1", {HEALTHY_A: ["h-a0", "h-a1"], HEALTHY_B: ["h-b0"]})
    aborted, aborted_at = c.txn("ab-1", {HEALTHY_A: ["h-x0", "h-x1"], HEALTHY_B: ["h-x2"]})
    c.end("ok-1", pid, [HEALTHY_A, HEALTHY_B], commit=True)
    c.end("ab-1", aborted, [HEALTHY_A, HEALTHY_B], commit=False)
    pid2, at2 = c.txn("ok-2", {HEALTHY_A: ["h-a2"]})
    c.end("ok-2", pid2, [HEALTHY_A], commit=True)
    c.read(HEALTHY_A, at[HEALTHY_A], "h-a0")
    c.read(HEALTHY_A, at[HEALTHY_A] + 1, "h-a1")
    c.read(HEALTHY_A, at2[HEALTHY_A], "h-a2")  # over the aborted records and two markers
    c.read(HEALTHY_B, at[HEALTHY_B], "h-b0")
    c.read(HEALTHY_A, aborted_at[HEALTHY_A], "h-x0", isolation=None, process=8)  # it may
    # lost_committed: told committed, the log aborts it
    pid, at = c.txn("lost", {LOST: ["l0", "l1"]})
    c.end("lost", pid, [LOST], commit=True, commits={LOST: False})
    # committed_abort: told aborted, the log commits it
    pid, at = c.txn("ca", {COMMITTED_ABORT: ["ca0"]})
    c.end("ca", pid, [COMMITTED_ABORT], commit=False, commits={COMMITTED_ABORT: True})
    # aborted_read: aborted in the log (outcome unknown to the producer), read committed
    pid, at = c.txn("ar", {ABORTED_READ: ["ar0"]})
    c.end("ar", pid, [ABORTED_READ], commit=False, told="info")
    c.read(ABORTED_READ, at[ABORTED_READ], "ar0")
    # aborted_read by the history: told aborted; the log, wrongly, commits it (and says so)
    pid, at = c.txn("ta", {TOLD_ABORTED: ["ta0"]})
    c.end("ta", pid, [TOLD_ABORTED], commit=False, commits={TOLD_ABORTED: True})
    c.read(TOLD_ABORTED, at[TOLD_ABORTED], "ta0")
    # dirty_read: a transaction the log never ends (recent: not hanging), read committed
    recent = int((END - 5) * 1000)
    pid, at = c.txn("do", {DIRTY_OPEN: ["do0"]}, timestamp_ms=recent)
    c.read(DIRTY_OPEN, at[DIRTY_OPEN], "do0", at=END - 4)
    # dirty_read: read 5 s before its commit marker was written
    pid, at = c.txn("de", {DIRTY_EARLY: ["de0"]})
    read_at = c.tick()
    c.end("de", pid, [DIRTY_EARLY], commit=True, marker_ms=round((read_at + 5) * 1000))
    c.read(DIRTY_EARLY, at[DIRTY_EARLY], "de0", at=read_at)
    # partial_txn: committed in one partition, aborted in the other; outcome unknown
    pid, at = c.txn("pt", {PARTIAL_A: ["pa0"], PARTIAL_B: ["pb0"]})
    c.end("pt", pid, [PARTIAL_A, PARTIAL_B], commit=True, told="info", commits={PARTIAL_B: False})
    # hanging_txn: open since ten minutes before the end, its timeout 10 s
    pid, at = c.txn("hg", {HANGING: ["hg0"]}, timestamp_ms=int(T0 * 1000))
    # offsets sent with writes, all committed
    pid, at = c.txn("cp-1", {OUT: ["o0"]}, offsets_to=OFFSETS_0)
    c.end("cp-1", pid, [OUT, OFFSETS_0], commit=True)
    # the offsets committed, the writes aborted; outcome unknown to the copier
    pid, at = c.txn("cp-2", {OUT_UNCOMMITTED: ["o1"]}, offsets_to=OFFSETS_0)
    c.end(
        "cp-2", pid, [OUT_UNCOMMITTED, OFFSETS_0], commit=True, told="info",
        commits={OUT_UNCOMMITTED: False},
    )  # fmt: skip
    # told committed: the writes committed, the offsets aborted
    pid, at = c.txn("cp-3", {OUT_LOST: ["o2"]}, offsets_to=OFFSETS_1)
    c.end("cp-3", pid, [OUT_LOST, OFFSETS_1], commit=True, commits={OFFSETS_1: False})
    _cleaned_compacted(c)
    history = write_lines(root / "history.jsonl", c.history)
    timeline = write_lines(
        root / "timeline.jsonl",
        [{"time": END, "process": "nemesis", "type": "info", "f": "settled", "target": None}],
    )
    topics = root / "topics.json"
    topics.write_text(
        json.dumps({"version": 1, "topics": {COMPACTED.topic: {"cleanup.policy": "compact"}}})
    )
    return c.close(), history, timeline


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], str]:
    root = tmp_path_factory.mktemp("txn-audit")
    data, history, timeline = _build(root)
    spark: SparkSession = start_session("local[2]")
    try:
        out = io.StringIO()
        status = audit_command(
            data=data,
            history=history,
            timeline=timeline,
            topic_config=root / "topics.json",
            report=root / "report",
            spark=spark,
            out=out,
        )
    finally:
        spark.stop()
    return status, json.loads((root / "report" / "report.json").read_text()), out.getvalue()


def _found(report: dict[str, Any]) -> dict[TopicPartition, list[dict[str, Any]]]:
    found: dict[TopicPartition, list[dict[str, Any]]] = {}
    for v in report["violations"]:
        found.setdefault(TopicPartition(v["topic"], v["partition"]), []).append(v)
    return found


def test_each_planted_fault_is_found_where_it_was_planted_and_nothing_else(
    run: tuple[int, dict[str, Any], str],
) -> None:
    status, report, _ = run
    assert status == EXIT_VIOLATIONS
    found = _found(report)
    kinds = {tp: sorted(v["kind"] for v in vs) for tp, vs in found.items()}
    assert kinds == EXPECTED, json.dumps(report["violations"], indent=1)
    by_kind = report["summary"]["violations_by_kind"]
    assert {k for k in TRANSACTION_KINDS if by_kind[k]} == set(TRANSACTION_KINDS)


def test_each_finding_names_the_transaction_offset_and_why(
    run: tuple[int, dict[str, Any], str],
) -> None:
    found = _found(run[1])
    lost = found[LOST][0]
    assert (lost["offset"], lost["last_offset"], lost["count"]) == (0, 1, 2)
    assert "'lost'" in lost["detail"]
    assert "aborted by the marker at offset 2" in lost["detail"]
    assert "marker at offset 1" in found[ABORTED_READ][0]["detail"]
    told = {v["kind"]: v["detail"] for v in found[TOLD_ABORTED]}
    assert "written by transaction 'ta'" in told["aborted_read"]
    assert "is committed by the marker at offset 1" in told["committed_abort"]
    assert "never ends" in found[DIRTY_OPEN][0]["detail"]
    assert "5.000 s before the leader wrote" in found[DIRTY_EARLY][0]["detail"]
    partial = found[PARTIAL_B][0]["detail"]
    assert "'pt'" in partial
    assert "aborted here" in partial
    assert "committed in partial-0" in partial
    hanging = found[HANGING][0]
    assert hanging["offset"] == 0
    assert "600.0 s after its first record" in hanging["detail"]
    assert all(v["brokers"] == [A] for vs in found.values() for v in vs)
    applied = found[OUT_UNCOMMITTED][0]["detail"]
    assert "'cp-2'" in applied
    assert "committed in __consumer_offsets-0 at offset 2 (offsets for group 'copiers'" in applied
    lost_offsets = {v["kind"]: v["detail"] for v in found[OFFSETS_1]}
    assert "sent for group 'copiers'" in lost_offsets["lost_committed"]
    assert "are aborted in broker 1's log at offset 0" in lost_offsets["lost_committed"]
    assert "committed in out-lost-offsets-0 at offset 0 ('o2'" in lost_offsets["partial_txn"]


def test_the_counts_say_what_was_checked(run: tuple[int, dict[str, Any], str]) -> None:
    _, report, stdout = run
    counts = report["summary"]["transactions"]
    # committed: ok-1, ok-2, lost, de, cp-1, cp-3; aborted: ab-1, ca, ta, cx;
    # unknown: ar, do, pt, hg, cp-2
    assert counts["committed"] == 6
    assert counts["aborted"] == 4
    assert counts["unknown"] == 5
    assert counts["reads_checked"] == 8
    assert counts["open_in_log"] == 2  # dirty-open and hanging
    assert "transactions: 6 committed, 4 aborted, 5 of unknown outcome" in stdout
