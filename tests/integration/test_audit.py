"""The Spark audit (docs/audit.md) on replica data dirs written with the project's Log.

Every violation kind is planted alone in a partition of its own, next to a healthy one and
the end states of the two scenarios of docs/replication.md; one audit finds them all, and a clean
copy of the same data (each fault left out, the same history) is found clean. Consumers'
reads are planted the same way: a partition per fault of what a consumer saw, and two
partitions whose reads jump legitimately (a session bump, a gap of the log). One
SparkSession serves the module: it takes 8-21 s to start on two busy cores.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from broker.log.checkpoints import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile
from broker.log.epoch_entry import EpochEntry
from chaos.audit.cli import EXIT_BAD_INPUT, EXIT_CLEAN, EXIT_VIOLATIONS, audit_command
from chaos.audit.compaction import COMPACTION_KINDS
from chaos.audit.data_dirs import read_data_dirs
from chaos.audit.history import parse_timeline_line
from chaos.audit.job import audit
from chaos.audit.model import GROUP_KINDS, KINDS, READ_KINDS
from chaos.audit.session import start_session
from chaos.audit.testing import BrokerDataDir, history_line, read_line, write_lines
from chaos.audit.transactions import TRANSACTION_KINDS
from proto.config.log_config import LogConfig
from proto.records.record_batch import scan_batches
from proto.topic_partition import TopicPartition

pytestmark = pytest.mark.integration

PLANTED_KINDS = [
    k
    for k in KINDS
    if k not in COMPACTION_KINDS and k not in TRANSACTION_KINDS and k not in GROUP_KINDS
]
"""The kinds planted here: no topic here is compacted (tests/integration/test_audit_compaction.py
plants the compaction kinds) or transactional (tests/integration/test_audit_transactions.py),
and no consumer group reads (tests/integration/test_audit_groups.py)."""

A, B, C = 1, 2, 3
T0 = 1_700_000_000.0

CLEAN = TopicPartition("clean", 0)
LOST = TopicPartition("lost", 0)
DIVERGED = TopicPartition("diverged", 0)
DUPLICATED = TopicPartition("duplicated", 0)
REWRITTEN = TopicPartition("rewritten", 0)
RESENT = TopicPartition("resent", 0)
GAPPED = TopicPartition("gapped", 0)
CORRUPT = TopicPartition("corrupt", 0)
EPOCHS = TopicPartition("epochs", 0)
HW = TopicPartition("hw", 0)
PHANTOM = TopicPartition("phantom", 0)
# docs/replication.md, A (broker 1) and B (broker 2), in each truncation mode.
LOSS_HW = TopicPartition("loss-high-watermark", 0)
LOSS_LE = TopicPartition("loss-leader-epoch", 0)
DIVERGENCE_HW = TopicPartition("divergence-high-watermark", 0)
DIVERGENCE_LE = TopicPartition("divergence-leader-epoch", 0)
# What consumers read (history `read` lines).
READ_TRUNCATED = TopicPartition("read-truncated", 0)
READ_REPLACED = TopicPartition("read-replaced", 0)
READ_BACKWARDS = TopicPartition("read-backwards", 0)
READ_SESSIONS = TopicPartition("read-sessions", 0)
READ_SKIP = TopicPartition("read-skip", 0)
READ_HOLE = TopicPartition("read-hole", 0)
CONSUMER = 7
"""The process of the consumers' reads (producers are processes 0..2)."""


@dataclass
class Run:
    status: int
    report: dict[str, Any]
    stdout: str
    report_dir: Path
    data: list[Path]

    def findings(self, tp: TopicPartition) -> list[dict[str, Any]]:
        return [
            v
            for v in self.report["violations"]
            if (v["topic"], v["partition"]) == (tp.topic, tp.partition)
        ]


def _values(tp: TopicPartition, start: int, stop: int) -> list[str]:
    return [f"{tp.topic}-{i}" for i in range(start, stop)]


class _Builder:
    """Three brokers' data dirs and the history of what was acknowledged."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.history: list[dict[str, Any]] = []
        self.dirs = {
            broker: BrokerDataDir(root / f"broker-{broker}", broker) for broker in (A, B, C)
        }

    def ack(self, tp: TopicPartition, values: list[str], first: int) -> None:
        for i, value in enumerate(values):
            t = T0 + len(self.history) * 0.05
            self.history.append(history_line("ok", tp, value, first + i, time=t, process=i % 3))

    def read(
        self,
        tp: TopicPartition,
        offsets: range | list[int],
        *,
        process: int = CONSUMER,
        session: int = 0,
        values: dict[int, str] | None = None,
    ) -> None:
        """A consumer's reads of ``offsets``, in this order: the produced values unless
        ``values`` says otherwise."""
        for offset in offsets:
            value = (values or {}).get(offset, f"{tp.topic}-{offset}")
            t = T0 + len(self.history) * 0.05
            self.history.append(
                read_line(tp, offset, value, time=t, process=process, session=session)
            )

    def hw(self, tp: TopicPartition, hw: int, brokers: tuple[int, ...] = (A, B, C)) -> None:
        for broker in brokers:
            self.dirs[broker].high_watermarks[tp] = hw

    def replicate(self, tp: TopicPartition, leader: int, followers: tuple[int, ...]) -> None:
        for broker in followers:
            self.dirs[broker].replicate(tp, self.dirs[leader])


def _build(root: Path, *, faults: bool) -> tuple[list[Path], Path]:
    """The data dirs and history; ``faults`` plants one fault per partition and adds the
    §8 end states."""
    root.mkdir(parents=True)
    w = _Builder(root)
    a, b, c = w.dirs[A], w.dirs[B], w.dirs[C]

    values = _values(CLEAN, 0, 30)
    a.produce(CLEAN, values, epoch=0, per_batch=5)
    w.ack(CLEAN, values, 0)
    w.replicate(CLEAN, A, (B, C))
    w.hw(CLEAN, 30)

    # lost_ack: every replica lost the acknowledged tail 20..24 (truncated, HW lowered).
    values = _values(LOST, 0, 25)
    a.produce(LOST, values, epoch=0, per_batch=5)
    w.ack(LOST, values, 0)
    w.replicate(LOST, A, (B, C))
    w.hw(LOST, 25)
    if faults:
        for d in (a, b, c):
            d.truncate(LOST, 20)
        w.hw(LOST, 20)

    # divergence: A kept an unacknowledged epoch-0 tail where B (epoch 1) wrote 10..14.
    values = _values(DIVERGED, 0, 10)
    a.produce(DIVERGED, values, epoch=0, per_batch=5)
    w.ack(DIVERGED, values, 0)
    w.replicate(DIVERGED, A, (B, C))
    if faults:
        a.produce(DIVERGED, [f"stale-{i}" for i in range(10, 15)], epoch=0, per_batch=5)
    b.become_leader(DIVERGED, 1)
    values = _values(DIVERGED, 10, 15)
    b.produce(DIVERGED, values, epoch=1, per_batch=5)
    w.ack(DIVERGED, values, 10)
    w.replicate(DIVERGED, B, (C,) if faults else (A, C))
    w.hw(DIVERGED, 15)

    # duplicate: a retried produce of dup-7..9 appended again at 10..12.
    values = _values(DUPLICATED, 0, 10)
    a.produce(DUPLICATED, values, epoch=0, per_batch=5)
    w.ack(DUPLICATED, values, 0)
    if faults:
        a.produce(DUPLICATED, values[7:], epoch=0)
    w.replicate(DUPLICATED, A, (B, C))
    w.hw(DUPLICATED, a.log(DUPLICATED).log_end_offset)

    # duplicate by write: an idempotent producer's batch of 5..9 written again at 10..14
    # (its values too: reported once, as the write's duplicate).
    values = _values(REWRITTEN, 0, 10)
    a.produce(REWRITTEN, values, epoch=0, per_batch=5, producer_id=3)
    w.ack(REWRITTEN, values, 0)
    if faults:
        a.append_again(REWRITTEN, 5, epoch=0)
    w.replicate(REWRITTEN, A, (B, C))
    w.hw(REWRITTEN, a.log(REWRITTEN).log_end_offset)

    # resent: producer 4 wrote resent-9 at sequence 9 of epoch 0, then, after an epoch bump,
    # again at sequence 0 of epoch 1 (what librdkafka does with a message in doubt).
    values = _values(RESENT, 0, 10)
    a.produce(RESENT, values, epoch=0, per_batch=5, producer_id=4)
    w.ack(RESENT, values[:9], 0)
    if faults:
        a.produce(RESENT, values[9:], epoch=0, producer_id=4, producer_epoch=1)
        w.ack(RESENT, values[9:], 10)
    else:
        w.ack(RESENT, values[9:], 9)
    w.replicate(RESENT, A, (B, C))
    w.hw(RESENT, a.log(RESENT).log_end_offset)

    # gap: broker 2's second segment file is deleted (small segments: several per log).
    for d in (a, b, c):
        d.configs[GAPPED] = LogConfig(segment_bytes=512)
    values = _values(GAPPED, 0, 40)
    a.produce(GAPPED, values, epoch=0, per_batch=5)
    w.ack(GAPPED, values, 0)
    w.replicate(GAPPED, A, (B, C))
    w.hw(GAPPED, 40)

    # crc: a byte of broker 3's third batch flips after the write.
    values = _values(CORRUPT, 0, 20)
    a.produce(CORRUPT, values, epoch=0, per_batch=5)
    w.ack(CORRUPT, values, 0)
    w.replicate(CORRUPT, A, (B, C))
    w.hw(CORRUPT, 20)

    # epoch_cache: broker 1's leader-epoch-checkpoint is rewritten wrong afterwards.
    values = _values(EPOCHS, 0, 10)
    a.produce(EPOCHS, values, epoch=0, per_batch=5)
    w.ack(EPOCHS, values, 0)
    w.replicate(EPOCHS, A, (B, C))
    b.become_leader(EPOCHS, 1)
    values = _values(EPOCHS, 10, 20)
    b.produce(EPOCHS, values, epoch=1, per_batch=5)
    w.ack(EPOCHS, values, 10)
    w.replicate(EPOCHS, B, (A, C))
    w.hw(EPOCHS, 20)

    # hw_above_leo: broker 3 checkpoints HW 15 for a log ending at 10.
    values = _values(HW, 0, 10)
    a.produce(HW, values, epoch=0, per_batch=5)
    w.ack(HW, values, 0)
    w.replicate(HW, A, (B, C))
    w.hw(HW, 10)
    if faults:
        c.high_watermarks[HW] = 15

    # phantom: a committed record no operation wrote.
    values = _values(PHANTOM, 0, 10)
    a.produce(PHANTOM, values, epoch=0, per_batch=5)
    w.ack(PHANTOM, values, 0)
    if faults:
        a.produce(PHANTOM, ["ghost"], epoch=0)
    w.replicate(PHANTOM, A, (B, C))
    w.hw(PHANTOM, a.log(PHANTOM).log_end_offset)

    _reads(w, faults=faults)
    if faults:
        _design_scenarios(w)
    for d in w.dirs.values():
        d.close()

    if faults:
        gapped = sorted((root / "broker-2" / GAPPED.dir_name).glob("*.log"))
        assert len(gapped) >= 3, "the gap needs a middle segment"
        gapped[1].unlink()
        gapped[1].with_suffix(".index").unlink(missing_ok=True)

        segment = root / "broker-3" / CORRUPT.dir_name / f"{0:020d}.log"
        data = bytearray(segment.read_bytes())
        third = list(scan_batches(bytes(data)))[2]
        data[third.position + third.header.size - 3] ^= 0xFF  # inside the last record
        segment.write_bytes(bytes(data))

        LeaderEpochCheckpointFile(
            root / "broker-1" / EPOCHS.dir_name / LEADER_EPOCH_CHECKPOINT
        ).write([EpochEntry(0, 0), EpochEntry(1, 12)])

    # The hole of READ_HOLE: its second segment, gone from every replica, which the
    # consumer's reads jump over.
    first, after = _second_segment(root / "broker-1" / READ_HOLE.dir_name)
    if faults:
        for broker in (A, B, C):
            segment = root / f"broker-{broker}" / READ_HOLE.dir_name / f"{first:020d}.log"
            segment.unlink()
            segment.with_suffix(".index").unlink(missing_ok=True)
    w.read(READ_HOLE, [o for o in range(40) if not (faults and first <= o < after)])

    history = write_lines(root / "history.jsonl", w.history)
    return [w.dirs[broker].path for broker in (A, B, C)], history


def _reads(w: _Builder, *, faults: bool) -> None:
    """The partitions of what consumers read (READ_*); the reads of READ_HOLE come after
    its hole is made."""
    a, b, c = w.dirs[A], w.dirs[B], w.dirs[C]
    # inconsistent_read, truncated away: the consumer read offset 10 above the HW; then
    # every replica truncated to 10 (the producer never learnt whether 10 was written).
    values = _values(READ_TRUNCATED, 0, 11)
    a.produce(READ_TRUNCATED, values, epoch=0, per_batch=5)
    w.ack(READ_TRUNCATED, values[:10], 0)
    w.history.append(history_line("info", READ_TRUNCATED, values[10], time=T0))
    w.replicate(READ_TRUNCATED, A, (B, C))
    w.read(READ_TRUNCATED, range(11))
    w.hw(READ_TRUNCATED, 11)
    if faults:
        for d in (a, b, c):
            d.truncate(READ_TRUNCATED, 10)
        w.hw(READ_TRUNCATED, 10)

    # inconsistent_read, another value: the consumer read A's unreplicated stale-10 above
    # the HW; B led in epoch 1 and wrote offset 10 anew, which A copied after truncating.
    values = _values(READ_REPLACED, 0, 10)
    a.produce(READ_REPLACED, values, epoch=0, per_batch=5)
    w.ack(READ_REPLACED, values, 0)
    w.replicate(READ_REPLACED, A, (B, C))
    if faults:
        a.produce(READ_REPLACED, ["stale-10"], epoch=0)
    w.read(READ_REPLACED, range(11), values={10: "stale-10"} if faults else None)
    if faults:
        a.truncate(READ_REPLACED, 10)
    b.become_leader(READ_REPLACED, 1)
    b.produce(READ_REPLACED, [f"{READ_REPLACED.topic}-10"], epoch=1)
    w.ack(READ_REPLACED, [f"{READ_REPLACED.topic}-10"], 10)
    w.replicate(READ_REPLACED, B, (A, C))
    w.hw(READ_REPLACED, 11)

    # nonmonotonic_poll: within one session the consumer goes back from 14 to 10.
    # READ_SESSIONS: the same reads, the second run in a new session; another consumer
    # reads the same offsets meanwhile.
    for tp in (READ_BACKWARDS, READ_SESSIONS, READ_SKIP):
        values = _values(tp, 0, 20)
        a.produce(tp, values, epoch=0, per_batch=5)
        w.ack(tp, values, 0)
        w.replicate(tp, A, (B, C))
        w.hw(tp, 20)
    if faults:
        w.read(READ_BACKWARDS, [*range(15), *range(10, 20)])
    else:
        w.read(READ_BACKWARDS, range(20))
    w.read(READ_SESSIONS, range(15))
    w.read(READ_SESSIONS, range(20), process=CONSUMER + 1)
    w.read(READ_SESSIONS, range(10, 20), session=1)

    # poll_skip: the consumer jumps from 9 to 13 over committed records.
    w.read(READ_SKIP, [*range(10), *range(13, 20)] if faults else range(20))

    # READ_HOLE: small segments; the second one is deleted from every replica afterwards.
    for d in (a, b, c):
        d.configs[READ_HOLE] = LogConfig(segment_bytes=512)
    values = _values(READ_HOLE, 0, 40)
    a.produce(READ_HOLE, values, epoch=0, per_batch=5)
    w.replicate(READ_HOLE, A, (B, C))
    for value in values:  # unknown outcomes: the hole loses no acknowledged record
        w.history.append(history_line("info", READ_HOLE, value, time=T0))
    w.hw(READ_HOLE, 40)


def _second_segment(partition_dir: Path) -> tuple[int, int]:
    """The first offset of a partition's second segment and of its third."""
    bases = sorted(int(p.stem) for p in partition_dir.glob("*.log"))
    assert len(bases) >= 3, "the hole needs a middle segment"
    return bases[1], bases[2]


def _design_scenarios(w: _Builder) -> None:
    """The end states of docs/replication.md's tests (tests/integration/
    test_high_watermark_failure_scenarios.py), A leading B, RF 2."""
    a, b = w.dirs[A], w.dirs[B]
    # Data loss: both held m0, m1 (A's HW 2, B's 1); B restarts, A dies, B leads.
    for tp in (LOSS_HW, LOSS_LE):
        a.produce(tp, ["m0"], epoch=0)
        b.replicate(tp, a)
        a.produce(tp, ["m1"], epoch=0)
        b.replicate(tp, a)
        w.ack(tp, ["m0", "m1"], 0)
    b.truncate(LOSS_HW, 1)  # high-watermark mode: B truncates to its HW on restart
    for tp in (LOSS_HW, LOSS_LE):
        b.become_leader(tp, 1)
    a.truncate(LOSS_HW, 1)  # A follows B, whose log ends at 1
    w.hw(LOSS_HW, 1, (A, B))
    w.hw(LOSS_LE, 2, (A, B))
    # Divergence: A alone holds m1 (HW 2), B holds m0; both die, B leads (unclean) and
    # writes m2 at offset 1; A returns.
    for tp in (DIVERGENCE_HW, DIVERGENCE_LE):
        a.produce(tp, ["m0"], epoch=0)
        b.replicate(tp, a)
        a.produce(tp, ["m1"], epoch=0)
        w.ack(tp, ["m0", "m1"], 0)
        b.become_leader(tp, 1)
        b.produce(tp, ["m2"], epoch=1)
        w.ack(tp, ["m2"], 1)
        w.hw(tp, 2, (A, B))
    a.truncate(DIVERGENCE_LE, 1)  # leader-epoch mode: the end of epoch 0 on B is 1
    a.replicate(DIVERGENCE_LE, b)


TIMELINE = [
    {"time": T0 + 1.0, "process": "nemesis", "type": "info", "f": "kill", "target": 2},
    {"time": T0 + 2.5, "process": "nemesis", "type": "info", "f": "start", "target": 2},
]


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = start_session("local[2]")
    try:
        yield session
    finally:
        session.stop()


def _run(spark: SparkSession, root: Path, *, faults: bool, timeline: Path | None = None) -> Run:
    data, history = _build(root / "data", faults=faults)
    out = io.StringIO()
    report_dir = root / "report"
    status = audit_command(
        data=data, history=history, report=report_dir, timeline=timeline, spark=spark, out=out
    )
    report = json.loads((report_dir / "report.json").read_text())
    return Run(status, report, out.getvalue(), report_dir, data)


@pytest.fixture(scope="module")
def faulty(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Run:
    root = tmp_path_factory.mktemp("faulty")
    return _run(spark, root, faults=True, timeline=write_lines(root / "timeline.jsonl", TIMELINE))


@pytest.fixture(scope="module")
def clean(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run(spark, tmp_path_factory.mktemp("clean"), faults=False)


def _one(run: Run, tp: TopicPartition) -> dict[str, Any]:
    found = run.findings(tp)
    assert len(found) == 1, json.dumps(found, indent=1)
    return found[0]


def _gap_range(run: Run) -> tuple[int, int]:
    """Offsets of broker 2's deleted segment: from its base to the next segment's base."""
    bases = sorted(
        int(p.stem) for p in (run.data[0] / GAPPED.dir_name).glob("*.log")
    )  # broker 1 still has every segment
    return bases[1], bases[2] - 1


@pytest.mark.parametrize(
    ("kind", "tp", "first", "last", "count", "brokers", "says"),
    [
        ("lost_ack", LOST, 20, 24, 5, [A, B, C], "in no replica's log"),
        ("divergence", DIVERGED, 10, 14, 5, [A, B, C], "broker 1 'stale-10' (epoch 0)"),
        ("duplicate", DUPLICATED, 7, 9, 3, [A, B, C], "appear 2 times"),
        ("duplicate", REWRITTEN, 5, 9, 5, [A, B, C], "5 writes of producer 3 (epoch 0)"),
        ("resent", RESENT, 9, 9, 1, [A, B, C], "producer 4 epoch 0 sequence 9, producer 4 epoch 1"),
        ("gap", GAPPED, None, None, None, [B], "has no batch for offsets"),
        ("crc", CORRUPT, 10, 14, 5, [C], "CRC mismatch"),
        ("epoch_cache", EPOCHS, 10, 10, 2, [A], "the file says [0@0, 1@12]"),
        ("hw_above_leo", HW, 10, 14, 5, [C], "high watermark is 15 but its log ends at 10"),
        ("phantom", PHANTOM, 10, 10, 1, [A, B, C], "'ghost' at offset 10 is committed"),
        (
            "inconsistent_read",
            READ_TRUNCATED,
            10,
            10,
            1,
            [A, B, C],
            "process 7 read 'read-truncated-10' at offset 10 (history line",
        ),
        (
            "inconsistent_read",
            READ_REPLACED,
            10,
            10,
            1,
            [A, B, C],
            "read 'stale-10' at offset 10 (history line ",
        ),
        (
            "nonmonotonic_poll",
            READ_BACKWARDS,
            10,
            14,
            1,
            [A, B, C],
            "process 7 (consumer session 0) read offset 10 right after offset 14",
        ),
        (
            "poll_skip",
            READ_SKIP,
            10,
            12,
            3,
            [A, B, C],
            "read offset 13 right after offset 9 (history lines",
        ),
    ],
)
def test_a_planted_fault_is_reported_alone_with_its_partition_offsets_and_brokers(
    faulty: Run,
    kind: str,
    tp: TopicPartition,
    first: int | None,
    last: int | None,
    count: int | None,
    brokers: list[int],
    says: str,
) -> None:
    if kind == "gap":
        first, last = _gap_range(faulty)
        count = last - first + 1
    finding = _one(faulty, tp)
    assert finding["kind"] == kind
    assert (finding["offset"], finding["last_offset"], finding["count"]) == (first, last, count)
    assert finding["brokers"] == brokers
    assert says in finding["detail"]


def test_a_read_of_a_record_truncated_away_is_an_inconsistent_read_past_the_log_end(
    faulty: Run,
) -> None:
    detail = _one(faulty, READ_TRUNCATED)["detail"]
    assert "the log does not reach that offset: every replica ends before it (broker 1 at 10" in (
        detail
    )
    assert "consumer session 0" in detail


def test_a_read_of_another_value_than_the_log_holds_is_an_inconsistent_read(
    faulty: Run,
) -> None:
    detail = _one(faulty, READ_REPLACED)["detail"]
    assert "process 7 read 'stale-10' at offset 10" in detail
    assert "but the log holds 'read-replaced-10' there (leader epoch 1)" in detail


def test_reads_that_jump_at_a_session_bump_or_over_a_hole_of_the_log_are_no_violation(
    faulty: Run,
) -> None:
    assert faulty.findings(READ_SESSIONS) == []
    # The log's own hole is reported as a gap of each replica, never as a skip of the reader.
    assert {v["kind"] for v in faulty.findings(READ_HOLE)} == {"gap"}
    assert len(faulty.findings(READ_HOLE)) == 3


def test_the_faulty_run_exits_1_and_counts_every_kind(faulty: Run) -> None:
    assert faulty.status == EXIT_VIOLATIONS
    assert faulty.findings(CLEAN) == []
    by_kind = faulty.report["summary"]["violations_by_kind"]
    assert all(by_kind[kind] >= 1 for kind in PLANTED_KINDS), by_kind
    assert all(by_kind[kind] == 0 for kind in COMPACTION_KINDS), by_kind


def test_a_clean_copy_of_the_same_data_has_no_violation_and_exits_0(clean: Run) -> None:
    assert clean.report["violations"] == []
    assert clean.status == EXIT_CLEAN
    assert clean.report["summary"]["clean"] is True
    parts = {(p["topic"], p["partition"]): p for p in clean.report["summary"]["partitions"]}
    assert parts[("clean", 0)]["acked_checked"] == 30
    assert parts[("read-sessions", 0)]["reads"] == 45
    assert clean.report["summary"]["operations"]["read"] == sum(p["reads"] for p in parts.values())
    assert "clean: no violations" in clean.stdout


def test_high_watermark_mode_outcomes_are_a_lost_ack_and_a_divergence(faulty: Run) -> None:
    loss = _one(faulty, LOSS_HW)
    assert (loss["kind"], loss["offset"], loss["brokers"]) == ("lost_ack", 1, [A, B])
    assert "'m1'" in loss["detail"]
    found = sorted(faulty.findings(DIVERGENCE_HW), key=lambda v: v["kind"])
    assert [(v["kind"], v["offset"], v["brokers"]) for v in found] == [
        ("divergence", 1, [A, B]),
        ("lost_ack", 1, [A, B]),
    ]
    assert "broker 1 'm1' (epoch 0), broker 2 'm2' (epoch 1)" in found[0]["detail"]
    assert "broker 1 still holds the acknowledged record" in found[1]["detail"]


def test_leader_epoch_mode_loses_only_what_the_unclean_election_gave_up(faulty: Run) -> None:
    assert faulty.findings(LOSS_LE) == []
    (lost,) = faulty.findings(DIVERGENCE_LE)
    assert (lost["kind"], lost["offset"]) == ("lost_ack", 1)
    assert "'m1'" in lost["detail"]
    assert "holds 'm2'" in lost["detail"]


def test_report_json_follows_the_design_schema(faulty: Run) -> None:
    report = faulty.report
    assert set(report) == {"violations", "summary"}
    for v in report["violations"]:
        assert {"kind", "topic", "partition", "offset", "brokers", "detail"} <= set(v)
        assert v["kind"] in KINDS
        assert isinstance(v["offset"], int)
        assert isinstance(v["last_offset"], int)
        assert all(isinstance(b, int) for b in v["brokers"])
        assert v["detail"].endswith(".")
    summary = report["summary"]
    assert summary["brokers"] == {
        str(b): str(p) for b, p in zip((A, B, C), faulty.data, strict=True)
    }
    assert summary["operations"]["ok"] > 0
    part = next(p for p in summary["partitions"] if p["topic"] == "epochs")
    assert [r["broker"] for r in part["replicas"]] == [A, B, C]
    replica = part["replicas"][0]
    assert replica["log_end_offset"] == 20
    assert replica["high_watermark"] == 20
    assert replica["epochs"] == [[0, 0], [1, 10]]
    assert replica["leader_epoch_checkpoint"] == [[0, 0], [1, 12]]


def test_html_report_is_one_offline_page_with_a_plot_per_partition(faulty: Run) -> None:
    page = (faulty.report_dir / "report.html").read_text()
    assert not re.search(r"https?://|src=|href=(?!\"#)|url\(|@import", page)
    partitions = len(faulty.report["summary"]["partitions"])
    assert page.count('aria-label="leader epoch over offset') == partitions
    assert "divergent" in page
    read_findings = [v for v in faulty.report["violations"] if v["kind"] in READ_KINDS]
    assert len(read_findings) == 4
    assert page.count('class="read-marker"') == len(read_findings)
    for kind in READ_KINDS:
        assert f"{kind} (a read)" in page
    assert 'aria-label="faults and acknowledgements over time"' in page
    assert ">broker 2</text>" in page  # its lane
    assert "broker 2 down: kill at" in page  # the timeline's kill 2 ... start 2


def test_stdout_has_the_per_partition_table_and_the_violations(faulty: Run) -> None:
    out = faulty.stdout
    assert "LEO (broker:offset)" in out
    assert "epochs-0" in out
    assert "1:0,1 2:0,1 3:0,1" in out
    assert "VIOLATIONS:" in out


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("{not json", "not valid JSON"),
        (
            json.dumps({k: v for k, v in read_line(CLEAN, 0, "clean-0").items() if k != "offset"}),
            '"offset" is missing (a read must say where it read)',
        ),
    ],
)
def test_a_malformed_history_line_exits_2_and_names_the_line(
    spark: SparkSession, faulty: Run, tmp_path: Path, bad: str, says: str
) -> None:
    history = tmp_path / "history.jsonl"
    good = json.dumps(history_line("ok", CLEAN, "clean-0", 0))
    history.write_text(f"{good}\n{good}\n{bad}\n{good}\n")
    err = io.StringIO()
    status = audit_command(
        data=faulty.data, history=history, report=tmp_path / "out", spark=spark, err=err
    )
    assert status == EXIT_BAD_INPUT
    assert f"history {history}, line 3: {says}" in err.getvalue()


def test_an_unreadable_data_dir_exits_2(spark: SparkSession, faulty: Run, tmp_path: Path) -> None:
    missing = tmp_path / "broker-9"
    err = io.StringIO()
    status = audit_command(
        data=[*faulty.data, missing], report=tmp_path / "out", spark=spark, err=err
    )
    assert status == EXIT_BAD_INPUT
    assert f"data dir {missing} does not exist" in err.getvalue()


# -- duplicates without a history: judged by producer id and sequence --------------

PERF = TopicPartition("perf", 0)
IDEMPOTENT = TopicPartition("idempotent", 0)
RETRIED = TopicPartition("retried", 0)
MANY = TopicPartition("many", 0)
MANY_RETRIES = 2000
PAYLOAD = bytes(range(256))[::-1][:100]  # binary, as `perf produce` sends, and not UTF-8


@pytest.fixture(scope="module")
def unhistoried(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """No history: `perf produce`'s identical values without a producer id, and from one
    idempotent producer; a retried batch written twice; and MANY_RETRIES single-record
    batches each written twice, with binary values (that many findings)."""
    root = tmp_path_factory.mktemp("unhistoried")
    dirs = {broker: BrokerDataDir(root / f"broker-{broker}", broker) for broker in (A, B, C)}
    a = dirs[A]
    a.produce(PERF, [PAYLOAD] * 3000, epoch=0, per_batch=200)
    a.produce(IDEMPOTENT, [PAYLOAD] * 1000, epoch=0, per_batch=100, producer_id=7)
    a.produce(RETRIED, _values(RETRIED, 0, 10), epoch=0, per_batch=5, producer_id=8)
    a.append_again(RETRIED, 5, epoch=0)  # offsets 5..9 (sequences 5..9) again at 10..14
    for i in range(MANY_RETRIES):
        a.produce(MANY, [PAYLOAD + bytes([i % 256])], epoch=0, producer_id=9, first_sequence=i)
        a.append_again(MANY, 2 * i, epoch=0)
    for tp in (PERF, IDEMPOTENT, RETRIED, MANY):
        for broker in (B, C):
            dirs[broker].replicate(tp, a)
        for d in dirs.values():
            d.high_watermarks[tp] = a.log(tp).log_end_offset
    for d in dirs.values():
        d.close()
    out = io.StringIO()
    report_dir = root / "report"
    data = [dirs[broker].path for broker in (A, B, C)]
    status = audit_command(data=data, report=report_dir, spark=spark, out=out)
    report = json.loads((report_dir / "report.json").read_text())
    return Run(status, report, out.getvalue(), report_dir, data)


def test_identical_values_without_a_producer_id_or_with_distinct_sequences_are_no_duplicate(
    unhistoried: Run,
) -> None:
    assert unhistoried.findings(PERF) == []
    assert unhistoried.findings(IDEMPOTENT) == []


def test_a_retried_batch_stored_twice_is_a_duplicate_by_producer_id_and_sequence(
    unhistoried: Run,
) -> None:
    finding = _one(unhistoried, RETRIED)
    assert finding["kind"] == "duplicate"
    assert (finding["offset"], finding["last_offset"], finding["count"]) == (5, 9, 5)
    assert finding["brokers"] == [A, B, C]
    assert "5 writes of producer 8 (epoch 0), sequences 5..9" in finding["detail"]
    assert "again 5 offsets later" in finding["detail"]


def test_audit_stdout_stays_short_and_printable_with_thousands_of_violations(
    unhistoried: Run,
) -> None:
    many = unhistoried.findings(MANY)
    assert len(many) == MANY_RETRIES
    assert unhistoried.status == EXIT_VIOLATIONS
    detail = many[0]["detail"]
    assert "is stored 2 times, at offsets 0 and 1" in detail
    assert "0x" in detail  # the binary value in hex
    assert len(detail) < 600
    out = unhistoried.stdout
    assert len(out) < 10_000, len(out)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\ufffd]", out)
    assert f"{MANY_RETRIES + 1} violations" in out
    assert "many-0" in out


# -- a history cut into ranges: line numbers count from the start of the file ----------------

FILLER = 30_000
"""Lines before the ones that matter: the history is parsed in several ranges (a few MB)."""


def _filler() -> list[dict[str, Any]]:
    tp = TopicPartition("filler", 0)
    return [history_line("fail", tp, f"f{i}", None, time=T0) for i in range(FILLER)]


def test_a_bad_line_far_into_a_long_history_is_named_by_its_line_in_the_file(
    spark: SparkSession, faulty: Run, tmp_path: Path
) -> None:
    lines = [json.dumps(x) for x in _filler()] + ["{oops"]
    history = tmp_path / "history.jsonl"
    history.write_text("\n".join(lines) + "\n")
    assert history.stat().st_size > 2 << 20
    err = io.StringIO()
    status = audit_command(
        data=faulty.data, history=history, report=tmp_path / "out", spark=spark, err=err
    )
    assert status == EXIT_BAD_INPUT
    assert f"history {history}, line {FILLER + 1}: not valid JSON" in err.getvalue()


def test_findings_name_history_lines_of_the_file_in_a_long_history(
    spark: SparkSession, faulty: Run, tmp_path: Path
) -> None:
    # The acknowledgement of LOST's offset 22 (truncated away) after the filler lines.
    lost = history_line("ok", LOST, f"{LOST.topic}-22", 22, time=T0 + 5)
    history = write_lines(tmp_path / "history.jsonl", [*_filler(), lost])
    out = io.StringIO()
    status = audit_command(
        data=faulty.data, history=history, report=tmp_path / "out", spark=spark, out=out
    )
    assert status == EXIT_VIOLATIONS
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    (finding,) = [v for v in report["violations"] if v["kind"] == "lost_ack"]
    assert finding["topic"] == LOST.topic
    assert f"history line {FILLER + 1}," in finding["detail"]
    assert "'lost-22'" in finding["detail"]


# -- partitions cut into offset ranges over several tasks: the same report -------------------


def _report(result: Any) -> dict[str, Any]:
    summary = result.to_json()["summary"]
    for key in ("seconds", "phases"):
        summary.pop(key)
    return {"violations": [v.to_json() for v in result.violations], "summary": summary}


def test_partitions_cut_into_ranges_over_several_tasks_give_the_same_report(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Ranges of 4 offsets (batches of 5 records straddle them), each partition over up to
    # a dozen tasks: every check that spans a partition crosses ranges and tasks.
    data, history = _build(tmp_path / "data", faults=True)
    timeline = write_lines(tmp_path / "timeline.jsonl", TIMELINE)
    events = [e for e in (parse_timeline_line(i, x) for i, x in enumerate(
        timeline.read_bytes().split(b"\n"), start=1)) if e]  # fmt: skip
    whole = audit(spark, read_data_dirs(data), history, events)
    cut = audit(spark, read_data_dirs(data), history, events, split_bytes=400, chunk_offsets=4)
    assert _report(cut) == _report(whole)
    assert {v.kind for v in whole.violations} == set(PLANTED_KINDS)


def test_duplicates_without_a_history_are_found_across_ranges(
    spark: SparkSession, unhistoried: Run
) -> None:
    whole = audit(spark, read_data_dirs(unhistoried.data))
    cut = audit(spark, read_data_dirs(unhistoried.data), split_bytes=64 << 10, chunk_offsets=256)
    assert _report(cut) == _report(whole)
    assert sum(v.kind == "duplicate" for v in cut.violations) == MANY_RETRIES + 1


def test_acks_and_reads_of_a_partition_no_data_dir_holds_are_lost_and_inconsistent(
    spark: SparkSession, faulty: Run, tmp_path: Path
) -> None:
    nowhere = TopicPartition("nowhere", 2)
    history = write_lines(
        tmp_path / "history.jsonl",
        [
            history_line("ok", nowhere, "n0", 0, time=T0),
            history_line("ok", nowhere, "n1", 1, time=T0 + 1),
            read_line(nowhere, 0, "n0", time=T0 + 2),
        ],
    )
    out = io.StringIO()
    status = audit_command(
        data=faulty.data, history=history, report=tmp_path / "out", spark=spark, out=out
    )
    assert status == EXIT_VIOLATIONS
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    found = [v for v in report["violations"] if v["topic"] == "nowhere"]
    assert [(v["kind"], v["offset"], v["last_offset"]) for v in found] == [
        ("inconsistent_read", 0, 0),
        ("lost_ack", 0, 1),
    ]
    assert "a partition that no data dir given holds" in found[0]["detail"]
    assert "no data dir given holds nowhere-2" in found[1]["detail"]
