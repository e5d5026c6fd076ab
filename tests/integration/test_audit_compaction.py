"""The Spark audit of compacted topics end to end: ``minibroker audit --topic-config`` on data
dirs whose compacted partitions a real cleaning (broker.log.log_cleaner) left at different
stages on each replica, one of them damaged per fault, next to a topic that is not compacted
and was cleaned all the same (what a broker cleaning the wrong topic would do)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from broker.log.log_cleaner import clean_log
from chaos.audit.cli import EXIT_VIOLATIONS, audit_command
from chaos.audit.data_dirs import read_data_dirs
from chaos.audit.job import audit
from chaos.audit.session import start_session
from chaos.audit.testing import BrokerDataDir, history_line, write_lines
from chaos.audit.topic_configs import read_topic_configs
from proto.config.log_config import LogConfig
from proto.records.record_batch import (
    Record,
    decode_batch,
    offsets_placeholder,
    retained_batch,
    scan_batches,
)
from proto.topic_partition import TopicPartition

pytestmark = pytest.mark.integration

CLEAN = TopicPartition("table", 0)
LOST = TopicPartition("table", 1)
MOVED = TopicPartition("table", 2)
STALE = TopicPartition("table", 3)
PLAIN = TopicPartition("plain", 0)
PARTITIONS = (CLEAN, LOST, MOVED, STALE, PLAIN)
RECORDS = 120
PER_BATCH = 3
COMPACT = LogConfig(segment_bytes=600, cleanup_policy=("compact",))
T0 = 1_700_000_000.0
Row = tuple[int, str, str | None]
Change = Callable[[list[Record]], list[Record] | None]


def _rows(tp: TopicPartition) -> list[Row]:
    """Keys k0..k6 over and over, every 11th record a tombstone, values unique; in STALE,
    k5's only records are a value at 4 and its tombstone at 5."""
    if tp == STALE:
        rows: list[Row] = [(i, f"k{i % 4}", f"{tp}-{i}") for i in range(4)]
        rows += [(4, "k5", f"{tp}-4"), (5, "k5", None)]
        return rows + [(i, f"k{i % 4}", f"{tp}-{i}") for i in range(6, RECORDS)]
    return [(i, f"k{i % 7}", None if i % 11 == 5 else f"{tp}-{i}") for i in range(RECORDS)]


def _clean(d: BrokerDataDir, tp: TopicPartition, limit: int = RECORDS) -> None:
    result = clean_log(d.log(tp), first_dirty=0, limit_offset=limit, now_ms=0, capacity=10_000)
    assert result is not None


def _rewrite(d: BrokerDataDir, tp: TopicPartition, change: Change) -> None:
    """The replica's log as a cleaner with a bug leaves it: each batch's records are
    ``change``'s (None: the batch as stored; none: a placeholder), offsets and spans kept."""
    out = []
    for segment in d.log(tp).segments:
        data = segment.read_all()
        for scanned in scan_batches(data):
            decoded = decode_batch(data, scanned.position)
            h = decoded.header
            kept = change(list(decoded.records))
            if kept is None:
                out.append(bytes(data[scanned.position : scanned.position + h.size]))
            elif kept:
                out.append(retained_batch(h, kept))
            else:
                out.append(
                    offsets_placeholder(
                        h.base_offset, h.last_offset, h.partition_leader_epoch, h.max_timestamp
                    )
                )
    log = d.log(tp)
    log.truncate_to(0)
    for batch in out:
        log.append_as_follower(batch)


def _without(offset: int) -> Change:
    def change(records: list[Record]) -> list[Record] | None:
        if all(r.offset != offset for r in records):
            return None
        return [r for r in records if r.offset != offset]

    return change


def _renumbered(records: list[Record]) -> list[Record] | None:
    """A cleaned batch holding one record after its first offset, the record moved to it."""
    if len(records) != 1 or records[0].offset % PER_BATCH == 0:
        return None
    return [records[0]._replace(offset=records[0].offset - records[0].offset % PER_BATCH)]


def _latest(tp: TopicPartition, key: str) -> int:
    return max(o for o, k, v in _rows(tp) if k == key)


def _build(root: Path) -> tuple[list[Path], Path, Path]:
    """The data dirs, the history (every write acknowledged, naming its key) and the run's
    topics.json."""
    dirs = [BrokerDataDir(root / f"broker-{b}", b, COMPACT) for b in (1, 2, 3)]
    b1, b2, b3 = dirs
    lines = []
    for tp in PARTITIONS:
        rows = _rows(tp)
        b1.produce(
            tp, [v for _, _, v in rows], epoch=0, per_batch=PER_BATCH, keys=[k for _, k, _ in rows]
        )
        for d in (b2, b3):
            d.replicate(tp, b1)
        for d in dirs:
            d.high_watermarks[tp] = RECORDS
        lines += [history_line("ok", tp, v, o, time=T0 + o / 100, key=k) for o, k, v in rows]
    _clean(b2, CLEAN)
    _clean(b3, CLEAN, limit=RECORDS // 2)
    for d in dirs:
        _clean(d, LOST)
        _clean(d, PLAIN)
    _rewrite(b2, LOST, _without(_latest(LOST, "k6")))
    _clean(b2, MOVED)
    _rewrite(b2, MOVED, _renumbered)
    _rewrite(b2, STALE, _without(5))
    for d in dirs:
        d.close()
    history = write_lines(root / "history.jsonl", sorted(lines, key=lambda line: line["time"]))
    topics = root / "topics.json"
    topics.write_text(
        json.dumps(
            {
                "version": 1,
                "topics": {
                    "table": {"cleanup.policy": "compact", "delete.retention.ms": "86400000"},
                    "plain": {"cleanup.policy": "delete"},
                },
            }
        )
    )
    return [d.path for d in dirs], history, topics


@dataclass
class Audited:
    status: int
    report: dict[str, Any]

    def found(self, tp: TopicPartition) -> list[dict[str, Any]]:
        return [
            v
            for v in self.report["violations"]
            if (v["topic"], v["partition"]) == (tp.topic, tp.partition)
        ]

    def kinds(self, tp: TopicPartition) -> set[str]:
        return {v["kind"] for v in self.found(tp)}


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = start_session("local[2]")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], Path, Path]:
    return _build(tmp_path_factory.mktemp("compacted"))


@pytest.fixture(scope="module")
def audited(
    spark: SparkSession,
    built: tuple[list[Path], Path, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Audited:
    data, history, topics = built
    report_dir = tmp_path_factory.mktemp("report")
    status = audit_command(
        data=data,
        history=history,
        topic_config=topics,
        report=report_dir,
        spark=spark,
        out=io.StringIO(),
    )
    return Audited(status, json.loads((report_dir / "report.json").read_text()))


def test_replicas_cleaned_to_different_stages_are_clean(audited: Audited) -> None:
    assert audited.status == EXIT_VIOLATIONS  # the planted faults, elsewhere
    assert audited.found(CLEAN) == []
    summary = {(p["topic"], p["partition"]): p for p in audited.report["summary"]["partitions"]}
    clean = summary[(CLEAN.topic, CLEAN.partition)]
    assert clean["compacted"] is True
    assert summary[(PLAIN.topic, PLAIN.partition)]["compacted"] is False
    records = {r["broker"]: r["records"] for r in clean["replicas"]}
    assert records[2] < records[3] < records[1] == RECORDS  # cleaned, half cleaned, not yet
    assert clean["acked_checked"] == RECORDS


def test_each_fault_a_cleaning_can_make_is_found_where_it_was_planted(audited: Audited) -> None:
    (lost,) = audited.found(LOST)
    assert lost["kind"] == "compaction_lost_latest"
    assert (lost["offset"], lost["brokers"]) == (_latest(LOST, "k6"), [2])
    assert f"'{LOST}-{lost['offset']}'" in lost["detail"]  # the value, from the history
    assert "history line" in lost["detail"]
    moved = [v for v in audited.found(MOVED) if v["kind"] == "compaction_moved"]
    assert moved
    assert {tuple(v["brokers"]) for v in moved} == {(2,)}
    (stale,) = audited.found(STALE)
    assert (stale["kind"], stale["offset"], stale["brokers"]) == ("tombstone_dropped_early", 5, [2])


def test_a_cleaned_topic_that_is_not_compacted_lost_its_acknowledged_records(
    audited: Audited,
) -> None:
    assert audited.kinds(PLAIN) == {"lost_ack"}


def test_a_compacted_partition_is_never_cut_and_the_findings_do_not_depend_on_it(
    spark: SparkSession, built: tuple[list[Path], Path, Path], audited: Audited
) -> None:
    data, history, topics = built
    dirs = read_data_dirs(data)
    sizes = {r.topic_partition: sum(s.size for s in r.segments) for d in dirs for r in d.replicas}
    assert min(sizes.values()) > 2 * 500  # every partition would be cut, were it not compacted
    result = audit(
        spark,
        dirs,
        history,
        compacted=read_topic_configs(topics),
        split_bytes=500,  # the plain partition over a few tasks, 40 offsets a range
        chunk_offsets=40,
    )
    assert not any(p.compacted for p in result.partitions if p.topic == PLAIN.topic)
    cut = {(v.topic, v.partition, v.kind, v.offset, v.last_offset) for v in result.violations}
    whole = {
        (v["topic"], v["partition"], v["kind"], v["offset"], v["last_offset"])
        for v in audited.report["violations"]
    }
    assert cut == whole
