"""The bodies of the audit's Spark tasks: a map stage that reads the inputs and a reduce stage
with a task per partition.

The job is one shuffle (:mod:`chaos.audit.job`). Each **map** task (:func:`map_units`)
takes a few units of work, packed by bytes:

- a segment file: its batch headers walked and CRCs checked
  (:func:`~chaos.audit.segments.scan_segment`), sent to its partition's reduce task;
- a range of whole history lines: parsed into columns
  (:func:`~chaos.audit.history_columns.parse_range`), its lines sent to their partition's
  reduce task (lines of a partition no data dir holds go to an extra one), the topics it
  writes to every reduce task, its counts to the first.

Each **reduce** task (:func:`reduce_partitions`) puts its partition's replicas together
from their segments' scans (:mod:`chaos.audit.log_checks`: the batch-level findings, the
replicas' summaries, the committed range) and audits the records against the lines
(:mod:`chaos.audit.chunk`). Everything moves as a few column blocks per task, so the JVM
only carries bytes.

Line numbers in the tasks are ``range << LINE_BITS | line within the range``: ordered as
in the file; the driver turns them into the file's line numbers once it knows how many
lines each range has.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from chaos.audit.chunk import ChunkResult, ChunkSpec, PartitionFacts, ReplicaChunk, audit_chunk
from chaos.audit.data_dirs import ReplicaFiles
from chaos.audit.history import NemesisEvent
from chaos.audit.history_columns import KINDS, Lines, parse_range
from chaos.audit.log_checks import log_items, replica_logs, summarize
from chaos.audit.model import ReplicaSummary
from chaos.audit.runs import Run
from chaos.audit.segments import SegmentScan, SegmentTask, scan_segment

__all__ = [
    "LINE_BITS",
    "HistoryRange",
    "HistoryStats",
    "Plan",
    "ReduceResult",
    "map_units",
    "read_bytes",
    "reduce_partitions",
]

LINE_BITS = 40
"""Line numbers in the tasks: the range's index above these bits, the line within it below."""
_WRITES = ("ok", "fail", "info")


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


@dataclass(slots=True)
class Plan:
    """What every task knows: the replicas and which reduce task has which partition."""

    replicas: list[ReplicaFiles]
    pids: list[int]
    """Per replica: its partition's index (and reduce task)."""
    partitions: list[tuple[str, int]]
    """The partitions the data dirs hold, by index."""
    extra: int = 1
    """Reduce tasks after those, for the partitions only the history names."""
    index: dict[tuple[str, int], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.index = {tp: pid for pid, tp in enumerate(self.partitions)}

    @property
    def reducers(self) -> int:
        return len(self.partitions) + self.extra

    def reducer_of(self, topic: str, partition: int) -> int:
        pid = self.index.get((topic, partition))
        if pid is not None:
            return pid
        spread = zlib.crc32(f"{topic}\x00{partition}".encode()) % self.extra
        return len(self.partitions) + spread


ScanUnit = SegmentTask | HistoryRange


def read_bytes(path: str, start: int, end: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)


# -- the map stage -----------------------------------------------------------------------------


def map_units(units: Sequence[ScanUnit], plan: Plan) -> Iterator[tuple[int, Any]]:
    """A map task: (reduce task, payload) for each of its units' outputs."""
    for unit in units:
        if isinstance(unit, SegmentTask):
            yield plan.pids[unit.replica], ("scan", scan_segment(unit))
        else:
            yield from _history(unit, plan)


def _history(unit: HistoryRange, plan: Plan) -> Iterator[tuple[int, Any]]:
    parsed = parse_range(read_bytes(unit.path, unit.start, unit.end))
    lines = parsed.lines
    lines.line += unit.index << LINE_BITS
    # One int64 key per group (topic, partition + 1, kind or offset bucket): 1-D uniques.
    place = parsed.topic.astype(np.int64) << 40 | (parsed.partition + 1) << 3
    counts: dict[tuple[str, int, str], int] = {}
    for key, n in zip(*_unique_counts(place | lines.kind), strict=True):
        counts[(parsed.topics[key >> 40], (key >> 3 & (1 << 37) - 1) - 1, KINDS[key & 7])] = n
    seconds: dict[tuple[int, str], int] = {}
    second = np.floor(lines.time).astype(np.int64)
    for key, n in zip(*_unique_counts(second << 3 | lines.kind), strict=True):
        seconds[(key >> 3, KINDS[key & 7])] = n
    events = [e._replace(line=unit.index << LINE_BITS | e.line) for e in parsed.events]
    stats = HistoryStats(unit.index, parsed.count, parsed.error, events, counts, seconds)
    yield 0, ("stats", stats)
    written = {t for (t, _, kind) in counts if kind in _WRITES}
    unsettled = {
        t for (t, p, kind) in counts if kind == "fail" or (p < 0 and kind in ("ok", "info"))
    }
    for reducer in range(plan.reducers):
        yield reducer, ("topics", written, unsettled)
    if parsed.error is not None or not len(lines):
        return
    known = parsed.partition >= 0
    for chosen in _groups(place):
        first = int(chosen[0])
        if not known[first]:
            continue  # no partition: only the driver's lookups read these
        topic, partition = parsed.topics[parsed.topic[first]], int(parsed.partition[first])
        yield (
            plan.reducer_of(topic, partition),
            ("lines", topic, partition, lines.take(chosen)),
        )


def _unique_counts(keys: npt.NDArray[np.int64]) -> tuple[list[int], list[int]]:
    if not len(keys):
        return [], []
    if bool(np.all(keys == keys[0])):
        return [int(keys[0])], [len(keys)]
    values, n = np.unique(keys, return_counts=True)
    return values.tolist(), n.tolist()


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
    """What a reduce task returns: per partition it had, its findings and summaries."""

    partition: tuple[str, int] | None
    """None for the result that only passes the history's counts on."""
    replicas: list[ReplicaSummary] = field(default_factory=list)
    """In broker order; ``records`` filled in."""
    facts: PartitionFacts | None = None
    items: list[Run] = field(default_factory=list)
    """The batch-level items (their pid: the partition's index in the plan, or -1)."""
    chunk: ChunkResult | None = None
    stats: list[HistoryStats] = field(default_factory=list)
    """Passed through by reduce task 0."""


def reduce_partitions(
    index: int, payloads: Iterable[tuple[int, Any]], plan: Plan
) -> Iterator[ReduceResult]:
    """A reduce task: the partition ``index`` of the plan (or, for an extra task, the
    partitions only the history names) audited from its scans and lines."""
    scans: list[SegmentScan] = []
    lines: dict[tuple[str, int], list[Lines]] = defaultdict(list)
    written: set[str] = set()
    unsettled: set[str] = set()
    stats: list[HistoryStats] = []
    for _, payload in payloads:
        kind = payload[0]
        if kind == "scan":
            scans.append(payload[1])
        elif kind == "lines":
            lines[(payload[1], payload[2])].append(payload[3])
        elif kind == "topics":
            written |= payload[1]
            unsettled |= payload[2]
        else:
            stats.append(payload[1])
    if stats:
        yield ReduceResult(None, stats=stats)
    if index < len(plan.partitions):
        targets = [plan.partitions[index]]
    else:
        targets = sorted(tp for tp in lines if tp not in set(plan.partitions))
    for tp in targets:
        pid = index if index < len(plan.partitions) else -1
        yield _partition(tp, pid, plan, scans, Lines.concat(lines.get(tp, [])), written, unsettled)


def _partition(
    tp: tuple[str, int],
    pid: int,
    plan: Plan,
    scans: list[SegmentScan],
    lines: Lines,
    written: set[str],
    unsettled: set[str],
) -> ReduceResult:
    chosen = [r for r, p in enumerate(plan.pids) if p == pid] if pid >= 0 else []
    files = [plan.replicas[r] for r in chosen]
    renumber = {r: k for k, r in enumerate(chosen)}
    mine = [s for s in scans if s.task.replica in renumber]
    for s in mine:
        s.task = s.task._replace(replica=renumber[s.task.replica])
    logs = replica_logs(files, [pid] * len(files), mine)
    logs.sort(key=lambda log: log.broker)
    summaries = [summarize(log) for log in logs]
    items: list[Run] = []
    for log, summary in zip(logs, summaries, strict=True):
        items += log_items(log, summary)
    max_leo = max((s.log_end_offset for s in summaries), default=0)
    max_hw = max((s.high_watermark or 0 for s in summaries), default=0)
    facts = PartitionFacts(
        pid,
        tp[0],
        tp[1],
        min(max_hw, max_leo),
        min((s.log_start_offset for s in summaries), default=0),
        max_leo,
        tuple(s.broker for s in summaries),
        tp[0] in written,
    )
    low, high = -(2**63), 2**63 - 1
    spec = ChunkSpec(
        0,
        facts,
        low,
        high,
        True,
        [
            ReplicaChunk(
                log.broker, [str(s.path) for s in log.files.segments], log.chunk(low, high)
            )
            for log in logs
        ],
        topic_settled=tp[0] not in unsettled,
    )
    chunk = audit_chunk(spec, lines)
    for summary in summaries:
        summary.records = chunk.records.get(summary.broker, 0)
    return ReduceResult(tp, summaries, facts, items, chunk)
