"""The bodies of the audit's Spark tasks: a map stage that reads the inputs and a reduce stage
that audits the partitions, a few per task (a large one over tasks of its own).

The job is one shuffle (:mod:`chaos.audit.job`). Each **map** task (:func:`map_units`)
takes a few units of work, packed by bytes:

- a segment file: its batch headers walked and CRCs checked
  (:func:`~chaos.audit.segments.scan_segment`), sent to its partition's reduce task;
- a range of whole history lines: parsed into columns
  (:func:`~chaos.audit.history_columns.parse_range`), its lines sent to their partition's
  reduce task (lines of a partition no data dir holds go to an extra one), the topics it
  writes to every reduce task, its counts to the first.

Each **reduce** task (:func:`reduce_partitions`) puts each of its partitions' replicas together
from their segments' scans (:mod:`chaos.audit.log_checks`: the batch-level findings, the
replicas' summaries, the committed range) and audits the records against the lines
(:mod:`chaos.audit.chunk`). Everything moves as a few column blocks per task, so the JVM
only carries bytes.

A partition too large for one task's memory is **cut** (:class:`Plan`): its offsets in
ranges of ``chunk_offsets``, its ranges spread over several reduce tasks, each holding one
range's records and lines at a time. Its first task also gets the whole scans (the batch
checks and summaries, a few dozen bytes a batch); every task gets each segment's end (the
committed range); a scan's batches go to the tasks of the ranges they hold; a consumer
session's reads go together to one task (its poll steps). What spans the ranges is the
driver's: :func:`lookup_partitions` answers its questions afterwards.

Line numbers in the tasks are ``range << LINE_BITS | line within the range``: ordered as
in the file; the driver turns them into the file's line numbers once it knows how many
lines each range has.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from chaos.audit.chunk import (
    ChunkAnswers,
    ChunkQuestions,
    ChunkResult,
    ChunkSpec,
    PartitionFacts,
    ReplicaChunk,
    Skip,
    audit_chunk,
    lookup_chunk,
    poll_items,
)
from chaos.audit.data_dirs import ReplicaFiles
from chaos.audit.history import NemesisEvent
from chaos.audit.history_columns import KINDS, OK, READ, Lines, parse_range
from chaos.audit.latency import LatencyCounts, latency_counts
from chaos.audit.log_checks import (
    BatchTable,
    ReplicaLog,
    batch_end,
    bounds,
    held_ranges,
    log_items,
    replica_logs,
    summarize,
)
from chaos.audit.model import ReplicaSummary
from chaos.audit.runs import Run
from chaos.audit.segments import SegmentScan, SegmentTask, map_file, scan_segment
from chaos.audit.topic_configs import Compaction
from chaos.audit.transaction_log import (
    TransactionSpans,
    any_transactional,
    outcomes,
    served,
)

__all__ = [
    "LINE_BITS",
    "HistoryRange",
    "HistoryStats",
    "Plan",
    "ReduceResult",
    "lookup_partitions",
    "map_units",
    "read_bytes",
    "reduce_partitions",
]

LINE_BITS = 40
"""Line numbers in the tasks: the range's index above these bits, the line within it below."""
_WRITES = ("ok", "fail", "info")
_ALL = -(2**63), 2**63 - 1
"""The offsets of a partition that is not cut."""


@dataclass(frozen=True, slots=True)
class HistoryRange:
    """Whole lines of the history file: bytes [start, end)."""

    index: int
    path: str
    start: int
    end: int


@dataclass(slots=True)
class HistoryStats:
    """What a history range tells the driver."""

    index: int
    count: int
    """Lines in the range."""
    error: tuple[int, str] | None
    """The first bad line (within the range) and why."""
    events: list[NemesisEvent]
    lines: dict[tuple[str, int, str], int]
    """(topic, partition (-1: none given), kind) -> lines."""
    seconds: dict[tuple[int, str], int]
    """(unix second, kind) -> lines."""
    latency: LatencyCounts = field(default_factory=LatencyCounts)
    """The ``ok`` writes' latencies, where their lines say when they were sent."""


@dataclass(slots=True)
class Plan:
    """What every task knows: the replicas and which reduce tasks have which partition.

    A partition that is not cut shares its reduce task with others (the driver packs them
    by bytes, a few per core: a Python task costs Spark tens of milliseconds whatever it
    does, and a cluster may have hundreds of partitions); a cut one has tasks of its own.
    """

    replicas: list[ReplicaFiles]
    pids: list[int]
    """Per replica: its partition's index."""
    partitions: list[tuple[str, int]]
    """The partitions the data dirs hold, by index."""
    first: list[int]
    """Per partition: its (first) reduce task."""
    shares: list[int]
    """Per partition: its reduce tasks, ``first`` and the ones after it (1 unless cut)."""
    reducers: int
    chunk_offsets: int
    """The offsets of one range of a cut partition."""
    compacted: dict[str, Compaction] = field(default_factory=dict)
    """The compacted topics (their partitions are never cut)."""
    index: dict[tuple[str, int], int] = field(default_factory=dict)
    owners: dict[int, list[int]] = field(default_factory=dict)
    """Reduce task -> the partitions it serves."""

    def __post_init__(self) -> None:
        self.index = {tp: pid for pid, tp in enumerate(self.partitions)}
        self.owners = defaultdict(list)
        for pid, (first, shares) in enumerate(zip(self.first, self.shares, strict=True)):
            for reducer in range(first, first + shares):
                self.owners[reducer].append(pid)

    def cut(self, pid: int) -> bool:
        return self.shares[pid] > 1

    def chunk_task(self, pid: int, chunk: int) -> int:
        """The reduce task of a cut partition's range ``chunk``."""
        return self.first[pid] + chunk % self.shares[pid]

    def stream_task(self, pid: int, process: int, session: int) -> int:
        return self.first[pid] + zlib.crc32(f"{process}/{session}".encode()) % self.shares[pid]

    def reducer_of(self, topic: str, partition: int) -> int:
        """The (first) reduce task of a partition; one picked by hash for a partition only
        the history names."""
        pid = self.index.get((topic, partition))
        if pid is not None:
            return self.first[pid]
        return zlib.crc32(f"{topic}\x00{partition}".encode()) % self.reducers


ScanUnit = SegmentTask | HistoryRange


def read_bytes(path: str, start: int, end: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def _mapped_range(unit: HistoryRange) -> memoryview:
    """The range's bytes in the mapped file (no copy)."""
    return memoryview(map_file(unit.path))[unit.start : unit.end]


# -- the map stage -----------------------------------------------------------------------------


def map_units(units: Sequence[ScanUnit], plan: Plan) -> Iterator[tuple[int, Any]]:
    """A map task: (reduce task, payload) for each of its units' outputs."""
    for unit in units:
        if isinstance(unit, SegmentTask):
            yield from _segment(scan_segment(unit), plan)
        else:
            yield from _history(unit, plan)


def _segment(scan: SegmentScan, plan: Plan) -> Iterator[tuple[int, Any]]:
    pid = plan.pids[scan.task.replica]
    yield plan.first[pid], ("scan", scan)
    if not plan.cut(pid):
        return
    end = batch_end(_table(scan))
    for reducer in range(plan.first[pid], plan.first[pid] + plan.shares[pid]):
        yield reducer, ("end", scan.task.replica, end)
    valid = np.flatnonzero(scan.valid())
    size = plan.chunk_offsets
    first = scan.base_offset[valid] // size
    last = scan.last_offset[valid] // size
    for chunk in np.unique(np.concatenate([first, last])).tolist():
        chosen = valid[(first <= chunk) & (last >= chunk)]
        yield plan.chunk_task(pid, chunk), ("slice", chunk, scan.task, _table(scan, chosen))


def _table(scan: SegmentScan, chosen: npt.NDArray[np.intp] | None = None) -> BatchTable:
    """The scan's batches (``chosen``: those only) as a table of its one segment file."""
    pick: Any = slice(None) if chosen is None else chosen
    valid = scan.valid()[pick]
    return BatchTable(
        np.zeros(len(valid), dtype=np.int64),
        scan.position[pick],
        scan.size[pick],
        scan.base_offset[pick],
        scan.last_offset[pick],
        scan.epoch[pick],
        scan.record_count[pick],
        scan.compressed[pick],
        valid,
        scan.flags[pick],
        scan.producer_id[pick],
        scan.producer_epoch[pick],
        scan.max_timestamp[pick],
        scan.control_type[pick],
    )


def _history(unit: HistoryRange, plan: Plan) -> Iterator[tuple[int, Any]]:
    parsed = parse_range(_mapped_range(unit))
    lines = parsed.lines
    lines.line += unit.index << LINE_BITS
    # One int64 key per group (topic, partition + 1, kind or second): 1-D uniques.
    place = parsed.topic.astype(np.int64) << 40 | (parsed.partition + 1) << 3
    counts: dict[tuple[str, int, str], int] = {}
    for key, n in zip(*_unique_counts(place | lines.kind), strict=True):
        counts[(parsed.topics[key >> 40], (key >> 3 & (1 << 37) - 1) - 1, KINDS[key & 7])] = n
    seconds: dict[tuple[int, str], int] = defaultdict(int)
    second = np.floor(lines.time).astype(np.int64)
    for key, n in zip(*_run_counts(second << 3 | lines.kind), strict=True):
        seconds[(key >> 3, KINDS[key & 7])] += n
    events = [e._replace(line=unit.index << LINE_BITS | e.line) for e in parsed.events]
    yield (
        0,
        (
            "stats",
            HistoryStats(
                unit.index,
                parsed.count,
                parsed.error,
                events,
                counts,
                seconds,
                LatencyCounts()
                if parsed.sent is None
                else latency_counts(lines.time, parsed.sent, lines.kind == OK),
            ),
        ),
    )
    written = {t for (t, _, kind) in counts if kind in _WRITES}
    unsettled = {
        t for (t, p, kind) in counts if kind == "fail" or (p < 0 and kind in ("ok", "info"))
    }
    for reducer in range(plan.reducers):
        yield reducer, ("topics", written, unsettled)
    if parsed.error is not None or not len(lines):
        return
    for chosen in _groups(place):
        first = int(chosen[0])
        partition = int(parsed.partition[first])
        if partition < 0:
            continue  # no partition: only the driver's lookups read these
        topic = parsed.topics[parsed.topic[first]]
        pid = plan.index.get((topic, partition))
        group = lines.take(chosen)
        if pid is None or not plan.cut(pid):
            yield plan.reducer_of(topic, partition), ("lines", topic, partition, 0, group)
            continue
        chunks = np.maximum(group.offset, 0) // plan.chunk_offsets
        for chunk in np.unique(chunks).tolist():
            part = group.take(chunks == chunk)
            yield plan.chunk_task(pid, chunk), ("lines", topic, partition, chunk, part)
        reads = group.take(group.kind == READ)
        streams: dict[int, list[int]] = defaultdict(list)
        for k, (process, session) in enumerate(
            zip(reads.process.tolist(), reads.session.tolist(), strict=True)
        ):
            streams[plan.stream_task(pid, process, session)].append(k)
        for reducer, picked in streams.items():
            yield reducer, ("reads", topic, partition, reads.take(np.array(picked)))


def _unique_counts(keys: npt.NDArray[np.int64]) -> tuple[list[int], list[int]]:
    if not len(keys):
        return [], []
    if bool(np.all(keys == keys[0])):
        return [int(keys[0])], [len(keys)]
    values, n = np.unique(keys, return_counts=True)
    return values.tolist(), n.tolist()


def _run_counts(keys: npt.NDArray[np.int64]) -> tuple[list[int], list[int]]:
    """(key, length) of each run of equal keys: a history's lines come in time order, so its
    (second, kind) keys come in a few runs per second, counted without sorting."""
    if not len(keys):
        return [], []
    starts = np.flatnonzero(np.diff(keys)) + 1
    bounds = np.concatenate([[0], starts, [len(keys)]])
    return keys[bounds[:-1]].tolist(), np.diff(bounds).tolist()


def _groups(keys: npt.NDArray[np.int64]) -> list[npt.NDArray[np.intp]]:
    """Indices per distinct key, in order (one group, unsorted, when every key is the same,
    as in a range of a one-partition history)."""
    if not len(keys):
        return []
    if bool(np.all(keys == keys[0])):
        return [np.arange(len(keys))]
    order = np.argsort(keys, kind="stable")
    bounds = np.flatnonzero(np.diff(keys[order])) + 1
    return list(np.split(order, bounds))


# -- the reduce stage --------------------------------------------------------------------------


@dataclass(slots=True)
class ReduceResult:
    """One reduce task's answer about one partition (or the history's counts)."""

    partition: tuple[str, int] | None
    """None for the result that only passes the history's counts on."""
    replicas: list[ReplicaSummary] | None = None
    """The replicas' summaries, in broker order (from the partition's first task); their
    ``records`` are the chunks'."""
    facts: PartitionFacts | None = None
    items: list[Run] = field(default_factory=list)
    """The batch-level items and, of a cut partition, the poll items."""
    chunks: list[ChunkResult] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)
    """A cut partition's poll skips, judged against ``held`` by the driver."""
    held: list[tuple[int, int]] | None = None
    """The committed offsets the partition's log serves consumers, as [first, last] ranges
    (of a cut partition, from its first task): the poll skips and the consumer group
    checks are judged against them."""
    stats: list[HistoryStats] = field(default_factory=list)
    """Passed on by reduce task 0."""
    transactions: list[TransactionSpans] = field(default_factory=list)
    """Of a partition holding transactional batches (from its first task): each replica's
    transactions and how they ended, for the driver's transaction checks."""


@dataclass(slots=True)
class _Inputs:
    """What a reduce task received, by partition."""

    scans: list[SegmentScan] = field(default_factory=list)
    ends: dict[int, list[int | None]] = field(default_factory=lambda: defaultdict(list))
    """Replica -> its segments' batch ends (a cut partition's)."""
    slices: dict[int, list[tuple[SegmentTask, BatchTable]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    """Range -> the batches of each segment holding its offsets."""
    lines: dict[tuple[str, int, int], list[Lines]] = field(
        default_factory=lambda: defaultdict(list)
    )
    reads: dict[tuple[str, int], list[Lines]] = field(default_factory=lambda: defaultdict(list))
    written: set[str] = field(default_factory=set)
    unsettled: set[str] = field(default_factory=set)
    stats: list[HistoryStats] = field(default_factory=list)


def _inputs(payloads: Iterable[tuple[int, Any]]) -> _Inputs:
    got = _Inputs()
    for _, payload in payloads:
        kind = payload[0]
        if kind == "scan":
            got.scans.append(payload[1])
        elif kind == "end":
            got.ends[payload[1]].append(payload[2])
        elif kind == "slice":
            got.slices[payload[1]].append((payload[2], payload[3]))
        elif kind == "lines":
            got.lines[(payload[1], payload[2], payload[3])].append(payload[4])
        elif kind == "reads":
            got.reads[(payload[1], payload[2])].append(payload[3])
        elif kind == "topics":
            got.written |= payload[1]
            got.unsettled |= payload[2]
        else:
            got.stats.append(payload[1])
    return got


def reduce_partitions(
    index: int, payloads: Iterable[tuple[int, Any]], plan: Plan
) -> Iterator[ReduceResult]:
    """A reduce task: the partitions of the plan it serves (of a cut one, its share), and
    those only the history names whose lines it got, audited from scans and lines."""
    got = _inputs(payloads)
    if got.stats:
        yield ReduceResult(None, stats=got.stats)
    for pid in plan.owners.get(index, []):
        if plan.cut(pid):
            yield _share(index, pid, plan, got)
        else:
            yield _whole(plan.partitions[pid], pid, plan, got)
    for topic, partition in sorted({(t, p) for t, p, _ in got.lines} - set(plan.index)):
        yield _whole((topic, partition), -1, plan, got)


def _replica_indices(plan: Plan, pid: int) -> list[int]:
    """The plan's replicas of a partition, by broker."""
    if pid < 0:
        return []
    chosen = [r for r, p in enumerate(plan.pids) if p == pid]
    return sorted(chosen, key=lambda r: plan.replicas[r].broker)


def _facts(
    tp: tuple[str, int], pid: int, plan: Plan, ends: dict[int, int | None], written: set[str]
) -> PartitionFacts:
    """The partition's facts from each replica's batch end (one past its last offset)."""
    chosen = _replica_indices(plan, pid)
    pairs = [bounds(plan.replicas[r], ends.get(r)) for r in chosen]
    max_leo = max((leo for _, leo in pairs), default=0)
    max_hw = max((plan.replicas[r].high_watermark or 0 for r in chosen), default=0)
    return PartitionFacts(
        pid,
        tp[0],
        tp[1],
        min(max_hw, max_leo),
        min((start for start, _ in pairs), default=0),
        max_leo,
        tuple(plan.replicas[r].broker for r in chosen),
        tp[0] in written,
    )


def _logs(plan: Plan, pid: int, scans: list[SegmentScan]) -> list[ReplicaLog]:
    """The partition's replicas put together from its segments' scans, by broker (the
    scans of the task's other partitions left alone)."""
    chosen = _replica_indices(plan, pid)
    renumber = {r: k for k, r in enumerate(chosen)}
    mine = [
        replace(s, task=s.task._replace(replica=renumber[s.task.replica]))
        for s in scans
        if s.task.replica in renumber
    ]
    return replica_logs([plan.replicas[r] for r in chosen], [pid] * len(chosen), mine)


def _whole(tp: tuple[str, int], pid: int, plan: Plan, got: _Inputs) -> ReduceResult:
    logs = _logs(plan, pid, got.scans)
    summaries = [summarize(log) for log in logs]
    items: list[Run] = []
    for log, summary in zip(logs, summaries, strict=True):
        items += log_items(log, summary)
    facts = _facts(
        tp,
        pid,
        plan,
        dict(
            zip(_replica_indices(plan, pid), (batch_end(log.batches) for log in logs), strict=True)
        ),
        got.written,
    )
    spec = ChunkSpec(
        facts,
        *_ALL,
        True,
        [
            ReplicaChunk(
                log.broker,
                [str(s.path) for s in log.files.segments],
                log.chunk(*_ALL),
                max((s.modified_ms for s in log.files.segments), default=None),
            )
            for log in logs
        ],
        topic_settled=tp[0] not in got.unsettled,
        compaction=plan.compacted.get(tp[0]),
    )
    chunk = audit_chunk(spec, Lines.concat(got.lines.get((*tp, 0), [])))
    for summary in summaries:
        summary.records = chunk.records.get(summary.broker, 0)
    held = held_ranges([served(log.batches) for log in logs], facts.log_start, facts.committed_end)
    return ReduceResult(
        tp, summaries, facts, items, [chunk], held=held, transactions=_transactions(logs)
    )


def _transactions(logs: Sequence[ReplicaLog]) -> list[TransactionSpans]:
    """Each replica's transaction spans, when the partition holds transactional batches."""
    if not any_transactional([log.batches for log in logs]):
        return []
    return [outcomes(log.batches, log.broker) for log in logs]


def _cut_facts(plan: Plan, pid: int, got: _Inputs) -> PartitionFacts:
    """A cut partition's facts, from the batch ends every segment sends each of its tasks."""
    ends: dict[int, int | None] = {}
    for replica, segment_ends in got.ends.items():
        present = [e for e in segment_ends if e is not None]
        ends[replica] = max(present) if present else None
    return _facts(plan.partitions[pid], pid, plan, ends, got.written)


def _ranges(plan: Plan, pid: int, got: _Inputs) -> Iterator[tuple[ChunkSpec, Lines]]:
    """The ranges of a cut partition this task holds: their specs and lines."""
    tp = plan.partitions[pid]
    facts = _cut_facts(plan, pid, got)
    chosen = _replica_indices(plan, pid)
    size = plan.chunk_offsets
    for chunk in sorted(set(got.slices) | {k for (t, p, k) in got.lines if (t, p) == tp}):
        replicas = []
        for r in chosen:
            files = plan.replicas[r]
            parts = []
            for task, table in got.slices.get(chunk, []):
                if task.replica != r:
                    continue
                k = next(
                    i for i, s in enumerate(files.segments) if s.base_offset == task.base_offset
                )
                table.segment[:] = k
                parts.append(table)
            replicas.append(
                ReplicaChunk(
                    files.broker, [str(s.path) for s in files.segments], BatchTable.concat(parts)
                )
            )
        spec = ChunkSpec(
            facts,
            chunk * size,
            (chunk + 1) * size,
            False,
            replicas,
            topic_settled=tp[0] not in got.unsettled,
        )
        yield spec, Lines.concat(got.lines.get((*tp, chunk), []))


def _share(index: int, pid: int, plan: Plan, got: _Inputs) -> ReduceResult:
    """A reduce task's share of a cut partition: its ranges, the poll streams it holds, and,
    for the partition's first task, the batch checks and the summaries."""
    tp = plan.partitions[pid]
    facts = _cut_facts(plan, pid, got)
    result = ReduceResult(tp, facts=facts)
    for spec, lines in _ranges(plan, pid, got):
        result.chunks.append(audit_chunk(spec, lines))
    if index == plan.first[pid]:
        logs = _logs(plan, pid, got.scans)
        result.replicas = [summarize(log) for log in logs]
        for log, summary in zip(logs, result.replicas, strict=True):
            result.items += log_items(log, summary)
        tables = [served(log.batches) for log in logs]
        result.transactions = _transactions(logs)
        result.held = held_ranges(tables, facts.log_start, facts.committed_end)
    reads = got.reads.get(tp, [])
    if reads:
        polls, skips = poll_items(facts, Lines.concat(reads))
        result.items += polls
        result.skips = skips
    return result


def lookup_partitions(
    index: int,
    payloads: Iterable[tuple[int, Any]],
    plan: Plan,
    questions: dict[int, ChunkQuestions],
) -> Iterator[tuple[int, ChunkAnswers]]:
    """A reduce task asked again (over the job's shuffled inputs): for a cut partition the
    driver has questions about, each of its ranges' answers."""
    asked = [pid for pid in plan.owners.get(index, []) if pid in questions and plan.cut(pid)]
    if not asked:
        return
    got = _inputs(payloads)
    for pid in asked:
        for spec, _ in _ranges(plan, pid, got):
            yield pid, lookup_chunk(spec, questions[pid])
