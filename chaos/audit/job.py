"""The audit as a Spark job: Spark distributes the reading and the per-partition work, each
task does its share with numpy over columns, and the driver sees summaries and findings.

One job, one shuffle (the task bodies: :mod:`chaos.audit.tasks`):

- the **map** stage reads the inputs: every segment file's batch headers and CRCs, and the
  history, cut into ranges of whole lines (the driver finds the cuts), parsed into columns.
  The units are packed into a few tasks per core by bytes, a history byte weighing more.
- the **reduce** stage has a task per partition: its replicas' scans and its history lines
  are shuffled to it, and it judges the batches (gap, crc, epoch_cache, hw_above_leo), then
  reads, compares and decodes the replicas' records and judges them against the lines
  (lost_ack, divergence, duplicate, phantom, inconsistent_read, nonmonotonic_poll,
  poll_skip: :mod:`chaos.audit.chunk`).

A Python task costs Spark tens of milliseconds whatever it does, and rows handed to the
JVM one by one cost it more than the audit's own work (the design this replaced spent most
of its time there): so few tasks, and only blocks of columns cross the shuffle.

A second, small job runs only when findings need the history's text: the values of the
lines a finding shows, and for a committed record that no line of its partition wrote,
whether a line without a partition wrote it or one said its write failed
(:func:`_lookup`). Runs of consecutive findings are merged in each task and again here
(:mod:`chaos.audit.runs`).
"""

from __future__ import annotations

import itertools
import math
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql import SparkSession

from chaos.audit.chunk import Pending, phantom_item, shown
from chaos.audit.data_dirs import AuditInputError, BrokerDir
from chaos.audit.history import NemesisEvent, parse_history_line
from chaos.audit.history_columns import FAIL, INFO, OK, parse_range
from chaos.audit.model import AuditResult, PartitionSummary
from chaos.audit.runs import Run, merge
from chaos.audit.segments import SegmentTask, pack
from chaos.audit.tasks import (
    LINE_BITS,
    HistoryRange,
    Plan,
    ReduceResult,
    map_units,
    read_bytes,
    reduce_partitions,
)
from chaos.audit.violations import describe
from proto.topic_partition import TopicPartition

__all__ = ["audit"]

HISTORY_RANGE_BYTES = 64 << 20
"""A history range parsed by one unit at most."""
_UNITS_PER_CORE = 2
"""Map tasks per core."""
_HISTORY_COST = 3
"""How much longer a history byte takes than a segment byte (the packing's weight)."""
_LINE_MASK = (1 << LINE_BITS) - 1


def _cost(unit: SegmentTask | HistoryRange) -> int:
    if isinstance(unit, SegmentTask):
        return unit.size
    return _HISTORY_COST * (unit.end - unit.start)


def _history_ranges(path: Path, parts: int) -> list[HistoryRange]:
    """The history file cut into about ``parts`` ranges of whole lines (the driver reads a
    few bytes after each cut to find the next line's start)."""
    size = path.stat().st_size
    parts = max(1, min(parts, math.ceil(size / (1 << 20))))
    cuts = [0]
    with path.open("rb") as f:
        for k in range(1, parts):
            at = max(cuts[-1], size * k // parts)
            f.seek(at)
            while True:
                block = f.read(1 << 16)
                if not block:
                    at = size
                    break
                newline = block.find(b"\n")
                if newline >= 0:
                    at += newline + 1
                    break
                at += len(block)
            if cuts[-1] < at < size:
                cuts.append(at)
    cuts.append(size)
    name = str(path.resolve())
    return [HistoryRange(i, name, a, b) for i, (a, b) in enumerate(itertools.pairwise(cuts))]


class _Clock:
    """Wall time per phase of the job."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.laps[name] = now - self._last
        self._last = now


def audit(
    spark: SparkSession,
    dirs: list[BrokerDir],
    history: Path | None = None,
    timeline: Iterable[NemesisEvent] = (),
) -> AuditResult:
    """Audit the replicas of ``dirs`` (and ``history``) on ``spark``.

    Raises AuditInputError for a malformed history line (naming it).
    """
    started = time.monotonic()
    result = _Audit(spark, dirs, history, list(timeline)).result()
    result.seconds = time.monotonic() - started
    return result


@dataclass(slots=True)
class _Wanted:
    """What the driver asks the history after the job."""

    lines: set[int] = field(default_factory=set)
    """Lines (as the tasks number them) whose value a finding shows."""
    unplaced: dict[str, set[int]] = field(default_factory=dict)
    """topic -> value hashes: written by an ok or info line without a partition?"""
    failed: dict[str, set[int]] = field(default_factory=dict)
    """topic -> value hashes: the first fail line of the topic with that value."""

    def parse(self) -> bool:
        """Whether the ranges must be parsed (not only split into lines)."""
        return bool(self.unplaced or self.failed)


@dataclass(slots=True)
class _Answers:
    values: dict[int, Any] = field(default_factory=dict)
    """Line -> its value, shown."""
    unplaced: set[tuple[str, int]] = field(default_factory=set)
    """(topic, value hash) written by an ok or info line without a partition."""
    failed: dict[tuple[str, int], int] = field(default_factory=dict)
    """(topic, value hash) -> first fail line (as the tasks number them)."""


def _lookup(unit: HistoryRange, wanted: _Wanted) -> _Answers:
    """One history range's answers to the driver's questions."""
    answers = _Answers()
    data = read_bytes(unit.path, unit.start, unit.end)
    base = unit.index << LINE_BITS
    mine = sorted(line & _LINE_MASK for line in wanted.lines if line >> LINE_BITS == unit.index)
    if mine:
        texts = data.split(b"\n")
        for line in mine:
            parsed = parse_history_line(line, texts[line - 1])
            if parsed is not None and not isinstance(parsed, NemesisEvent):
                answers.values[base | line] = shown(parsed.value.encode("utf-8"))
    if not wanted.parse():
        return answers
    parsed_range = parse_range(data)
    lines = parsed_range.lines
    for t, topic in enumerate(parsed_range.topics):
        unplaced = wanted.unplaced.get(topic, set())
        failed = wanted.failed.get(topic, set())
        in_topic = parsed_range.topic == t
        if unplaced:
            chosen = (
                in_topic
                & (parsed_range.partition < 0)
                & ((lines.kind == OK) | (lines.kind == INFO))
                & np.isin(lines.value, np.array(sorted(unplaced), dtype=np.uint64))
            )
            answers.unplaced |= {(topic, v) for v in np.unique(lines.value[chosen]).tolist()}
        if failed:
            chosen = np.flatnonzero(
                in_topic
                & (lines.kind == FAIL)
                & np.isin(lines.value, np.array(sorted(failed), dtype=np.uint64))
            )
            for k in chosen.tolist():
                key = (topic, int(lines.value[k]))
                line = base | int(lines.line[k])
                answers.failed[key] = min(answers.failed.get(key, line), line)
    return answers


class _Audit:
    """One audit run: the job and what the driver makes of its answers."""

    def __init__(
        self,
        spark: SparkSession,
        dirs: list[BrokerDir],
        history: Path | None,
        timeline: list[NemesisEvent],
    ) -> None:
        self.spark = spark
        self.sc = spark.sparkContext
        self.dirs = dirs
        self.history = history
        self.timeline = timeline
        self.clock = _Clock()

    def _ranges(self) -> list[HistoryRange]:
        if self.history is None:
            return []
        cores = max(1, self.sc.defaultParallelism)
        size = self.history.stat().st_size
        parts = max(_UNITS_PER_CORE * cores, math.ceil(size / HISTORY_RANGE_BYTES))
        return _history_ranges(self.history, parts)

    def result(self) -> AuditResult:
        replicas = [r for d in self.dirs for r in d.replicas]
        known = sorted({r.topic_partition for r in replicas})
        pid_of = {tp: pid for pid, tp in enumerate(known)}
        plan = Plan(
            replicas,
            [pid_of[r.topic_partition] for r in replicas],
            [(tp.topic, tp.partition) for tp in known],
        )
        ranges = self._ranges()
        segments = [
            SegmentTask(i, s.base_offset, str(s.path), k == len(r.segments) - 1, s.size)
            for i, r in enumerate(replicas)
            for k, s in enumerate(r.segments)
        ]
        cores = max(1, self.sc.defaultParallelism)
        work: list[SegmentTask | HistoryRange] = [*segments, *ranges]
        units = pack(work, _UNITS_PER_CORE * cores, _cost)
        self.clock.lap("plan")
        results: list[ReduceResult] = (
            self.sc.parallelize(units, max(1, len(units)))
            .flatMap(lambda chosen: map_units(chosen, plan))
            .partitionBy(plan.reducers, lambda reducer: reducer)
            .mapPartitionsWithIndex(lambda i, payloads: reduce_partitions(i, payloads, plan))
            .collect()
        )
        self.clock.lap("job")
        return self._assemble(results, ranges, known)

    def _assemble(
        self, results: list[ReduceResult], ranges: list[HistoryRange], known: list[TopicPartition]
    ) -> AuditResult:
        stats = sorted((s for r in results for s in r.stats), key=lambda s: s.index)
        lines_before = [0]
        for s in stats:
            lines_before.append(lines_before[-1] + s.count)

        def line_of(encoded: int) -> int:
            return lines_before[encoded >> LINE_BITS] + (encoded & _LINE_MASK)

        errors = [(lines_before[s.index] + s.error[0], s.error[1]) for s in stats if s.error]
        if errors:
            line, reason = min(errors)
            raise AuditInputError(f"history {self.history}, line {line}: {reason}")
        per_partition: dict[tuple[str, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        per_second: dict[tuple[int, str], int] = defaultdict(int)
        for s in stats:
            for (topic, partition, kind), n in s.lines.items():
                per_partition[(topic, partition)][kind] += n
            for key, n in s.seconds.items():
                per_second[key] += n
        partitions = [*known]
        by_partition = {r.partition: r for r in results if r.partition is not None}
        extra = sorted(
            TopicPartition(*tp) for tp in by_partition if TopicPartition(*tp) not in set(known)
        )
        partitions += extra
        {tp: pid for pid, tp in enumerate(partitions)}

        items: list[Run] = []
        summaries: list[PartitionSummary] = []
        pending: list[tuple[int, Pending]] = []
        wanted = _Wanted()
        for pid, tp in enumerate(partitions):
            r = by_partition.get((tp.topic, tp.partition))
            kinds = per_partition.get((tp.topic, tp.partition), {})
            summary = PartitionSummary(
                tp.topic,
                tp.partition,
                r.replicas if r else [],
                r.facts.committed_end if r and r.facts else 0,
                r.facts.log_start if r and r.facts else 0,
                acked=kinds.get("ok", 0),
                reads=kinds.get("read", 0),
            )
            summaries.append(summary)
            if r is None or r.chunk is None:
                continue
            summary.acked_checked = r.chunk.acked_checked
            for run in (*r.items, *r.chunk.runs):
                run.pid = pid
                items.append(run)
            for p in r.chunk.pending:
                pending.append((pid, p))
                wanted.unplaced.setdefault(tp.topic, set()).add(p.value)
                wanted.failed.setdefault(tp.topic, set()).add(p.value)
            wanted.lines.update(r.chunk.value_lines)
        if pending or wanted.lines:
            answers = self._lookups(ranges, wanted)
        else:
            answers = _Answers()
        for pid, p in pending:
            tp = partitions[pid]
            if (tp.topic, p.value) in answers.unplaced:
                continue
            failed = answers.failed.get((tp.topic, p.value))
            facts = by_partition[(tp.topic, tp.partition)].facts
            assert facts is not None
            items.append(
                phantom_item(
                    facts,
                    Pending(pid, p.offset, p.value, p.epoch, p.shown),
                    None if failed is None else line_of(failed),
                )
            )
            items[-1].pid = pid
        runs = merge(items)
        for run in runs:
            if run.kind not in _HISTORY_LINE_KINDS:
                continue
            for info in {id(i): i for i in (run.first, run.last)}.values():
                if "line" in info:
                    value = answers.values.get(info["line"])
                    if value is not None:
                        info["value"] = value
                for name in ("line", "previous_line"):
                    if name in info:
                        info[name] = line_of(info[name])
        self.clock.lap("checks")

        operations: dict[str, int] = {}
        acks_per_second: list[tuple[int, str, int]] = []
        if self.history is not None:
            totals: dict[str, int] = defaultdict(int)
            for kinds in per_partition.values():
                for kind, n in kinds.items():
                    totals[kind] += n
            operations = dict(totals)
            acks_per_second = sorted((s, k, n) for (s, k), n in per_second.items())
        timeline = self.timeline + [
            e._replace(line=line_of(e.line)) for s in stats for e in s.events
        ]
        self.clock.lap("statistics")

        violations = [describe(run.finding(), summaries[run.pid]) for run in runs]
        violations.sort(key=lambda v: (v.topic, v.partition, v.offset, v.kind, v.brokers))
        for run in runs:
            summaries[run.pid].violations += 1
        return AuditResult(
            violations=violations,
            partitions=summaries,
            brokers={d.broker: str(d.path) for d in self.dirs},
            history=None if self.history is None else str(self.history),
            operations=operations,
            acks_per_second=acks_per_second,
            timeline=sorted(timeline, key=lambda e: e.time),
            records_decoded=sum(rep.records for s in summaries for rep in s.replicas),
            phases=self.clock.laps,
        )

    def _lookups(self, ranges: Sequence[HistoryRange], wanted: _Wanted) -> _Answers:
        merged = _Answers()
        chosen = [
            r
            for r in ranges
            if wanted.parse() or any(line >> LINE_BITS == r.index for line in wanted.lines)
        ]
        if not chosen:
            return merged
        found: Iterator[_Answers] = iter(
            self.sc.parallelize(chosen, len(chosen)).map(lambda r: _lookup(r, wanted)).collect()
        )
        for a in found:
            merged.values.update(a.values)
            merged.unplaced |= a.unplaced
            for key, line in a.failed.items():
                merged.failed[key] = min(merged.failed.get(key, line), line)
        return merged


_HISTORY_LINE_KINDS = frozenset({"lost_ack", "inconsistent_read", "nonmonotonic_poll", "poll_skip"})
"""The kinds whose items name history lines (``line``, ``previous_line``)."""
