"""The audit as a Spark job: Spark distributes the reading and the per-partition work, each
task does its share with numpy over columns, and the driver sees summaries and findings.

One job, one shuffle (the task bodies: :mod:`chaos.audit.tasks`):

- the **map** stage reads the inputs: every segment file's batch headers and CRCs, and the
  history, cut into ranges of whole lines (the driver finds the cuts), parsed into columns.
  The units are packed into a few tasks per core by bytes, a history byte weighing more.
- the **reduce** stage has a few tasks per core, the partitions packed into them by bytes
  (a large one cut over tasks of its own): a partition's replicas' scans and its history
  lines are shuffled to its task, which judges the batches (gap, crc, epoch_cache,
  hw_above_leo), then reads, compares and decodes the replicas' records and judges them
  against the lines (lost_ack, divergence, duplicate, phantom, inconsistent_read,
  nonmonotonic_poll, poll_skip: :mod:`chaos.audit.chunk`).

A Python task costs Spark tens of milliseconds whatever it does, and rows handed to the
JVM one by one cost it more than the audit's own work (the design this replaced spent most
of its time there): so few tasks, and only blocks of columns cross the shuffle.

A second, small job runs only when findings need the history's text: the values of the
lines a finding shows, and for a committed record that no line of its partition wrote,
whether a line without a partition wrote it or one said its write failed
(:func:`_lookup`); and, for a partition cut over several tasks, two to settle what spans
its ranges (:meth:`_Audit._cut_partitions`). Runs of consecutive findings are merged in each
task and again here (:mod:`chaos.audit.runs`).
"""

from __future__ import annotations

import itertools
import math
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pyspark import RDD, StorageLevel
from pyspark.sql import SparkSession

from chaos.audit.chunk import (
    ChunkAnswers,
    ChunkQuestions,
    ChunkResult,
    PartitionFacts,
    Pending,
    Skip,
    phantom_item,
    shown,
    skip_item,
)
from chaos.audit.compaction import COMPACTION_KINDS
from chaos.audit.data_dirs import AuditInputError, BrokerDir, ReplicaFiles
from chaos.audit.duplicates import CopyRow, duplicate_items
from chaos.audit.groups import judge_groups, read_group_history
from chaos.audit.history import HistoryOp, HistoryRead, NemesisEvent, parse_history_line
from chaos.audit.history_columns import FAIL, INFO, OK, parse_range
from chaos.audit.latency import merged
from chaos.audit.model import AuditResult, PartitionSummary, ReplicaSummary
from chaos.audit.runs import Run, merge
from chaos.audit.segments import SegmentTask, pack
from chaos.audit.tasks import (
    LINE_BITS,
    HistoryRange,
    Plan,
    ReduceResult,
    lookup_partitions,
    map_units,
    read_bytes,
    reduce_partitions,
)
from chaos.audit.topic_configs import Compaction
from chaos.audit.transaction_log import TransactionSpans
from chaos.audit.transactions import judge_transactions, read_transaction_history
from chaos.audit.violations import describe
from proto.topic_partition import TopicPartition

__all__ = ["CHUNK_OFFSETS", "SPLIT_BYTES", "audit"]

SPLIT_BYTES = 128 << 20
"""A partition whose largest replica holds more segment bytes is cut over several tasks."""
CHUNK_OFFSETS = 1 << 20
"""Offsets of one range of a cut partition: the records and lines one task holds at a time
(a few hundred bytes each at the peak of decoding)."""
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
    *,
    compacted: Mapping[str, Compaction] | None = None,
    split_bytes: int = SPLIT_BYTES,
    chunk_offsets: int = CHUNK_OFFSETS,
) -> AuditResult:
    """Audit the replicas of ``dirs`` (and ``history``) on ``spark``; the topics of
    ``compacted`` by the compaction rules (:mod:`chaos.audit.compaction`).

    A partition whose largest replica has more than ``split_bytes`` of segments is cut into
    ranges of ``chunk_offsets`` offsets over several tasks (never a compacted one). Raises
    AuditInputError for a malformed history line (naming it).
    """
    started = time.monotonic()
    run = _Audit(
        spark, dirs, history, list(timeline), split_bytes, chunk_offsets, dict(compacted or {})
    )
    result = run.result()
    result.seconds = time.monotonic() - started
    return result


@dataclass(slots=True)
class _Wanted:
    """What the driver asks the history after the job."""

    lines: set[int] = field(default_factory=set)
    """Lines (as the tasks number them) whose value a finding shows."""
    placed: dict[tuple[str, int], set[int]] = field(default_factory=dict)
    """(topic, partition) -> value hashes: written by an ok or info line of that partition
    (asked for the cut partitions, whose lines no one task holds)?"""
    unplaced: dict[str, set[int]] = field(default_factory=dict)
    """topic -> value hashes: written by an ok or info line without a partition?"""
    failed: dict[str, set[int]] = field(default_factory=dict)
    """topic -> value hashes: the first fail line of the topic with that value."""

    def parse(self) -> bool:
        """Whether the ranges must be parsed (not only split into lines)."""
        return bool(self.placed or self.unplaced or self.failed)


@dataclass(slots=True)
class _Answers:
    values: dict[int, Any] = field(default_factory=dict)
    """Line -> its value, shown."""
    written: set[tuple[str, int, int]] = field(default_factory=set)
    """(topic, partition (-1: none given), value hash) written by an ok or info line."""
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
            if isinstance(parsed, HistoryOp | HistoryRead):
                value = parsed.value
                answers.values[base | line] = shown(None if value is None else value.encode())
    if not wanted.parse():
        return answers
    parsed_range = parse_range(data)
    lines = parsed_range.lines
    writes = (lines.kind == OK) | (lines.kind == INFO)
    for t, topic in enumerate(parsed_range.topics):
        in_topic = parsed_range.topic == t
        for partition in np.unique(parsed_range.partition[in_topic]).tolist():
            asked = wanted.placed.get((topic, partition), set())
            if partition < 0:
                asked = asked | wanted.unplaced.get(topic, set())
            if not asked:
                continue
            chosen = (
                in_topic
                & (parsed_range.partition == partition)
                & writes
                & np.isin(lines.value, np.array(sorted(asked), dtype=np.uint64))
            )
            answers.written |= {
                (topic, partition, v) for v in np.unique(lines.value[chosen]).tolist()
            }
        failed = wanted.failed.get(topic, set())
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


def _without_hashes(result: ReduceResult) -> ReduceResult:
    """A result as the driver collects it: the cut partitions' hashes stay in the executors
    (the duplicate job reads them there)."""
    for chunk in result.chunks:
        chunk.hashes = {}
    return result


def _hash_blocks(result: ReduceResult, buckets: int) -> Iterator[tuple[int, Any]]:
    """A cut partition's version hashes, by bucket (hash mod ``buckets``)."""
    for chunk in result.chunks:
        for kind, hashes in chunk.hashes.items():
            bucket = hashes % np.uint64(buckets)
            for b in np.unique(bucket).tolist():
                yield b, (chunk.pid, kind, hashes[bucket == b])


def _repeated_hashes(blocks: Iterable[tuple[int, Any]]) -> Iterator[tuple[int, str, Any]]:
    """(pid, kind, hashes) of a bucket's hashes held at more than one offset."""
    grouped: dict[tuple[int, str], list[Any]] = defaultdict(list)
    for _, (pid, kind, hashes) in blocks:
        grouped[(pid, kind)].append(hashes)
    for (pid, kind), parts in grouped.items():
        values, counts = np.unique(np.concatenate(parts), return_counts=True)
        repeated = values[counts > 1]
        if len(repeated):
            yield pid, kind, repeated


@dataclass(slots=True)
class _Partition:
    """What the reduce tasks said about one partition, put together."""

    facts: PartitionFacts | None = None
    replicas: list[ReplicaSummary] = field(default_factory=list)
    items: list[Run] = field(default_factory=list)
    chunks: list[ChunkResult] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)
    held: list[tuple[int, int]] = field(default_factory=list)
    transactions: list[TransactionSpans] = field(default_factory=list)

    def add(self, result: ReduceResult) -> None:
        self.facts = self.facts or result.facts
        self.transactions += result.transactions
        if result.replicas is not None:
            self.replicas = result.replicas
        if result.held is not None:
            self.held = result.held
        self.items += result.items
        self.chunks += result.chunks
        self.skips += result.skips


class _Audit:
    """One audit run: the job and what the driver makes of its answers."""

    def __init__(
        self,
        spark: SparkSession,
        dirs: list[BrokerDir],
        history: Path | None,
        timeline: list[NemesisEvent],
        split_bytes: int,
        chunk_offsets: int,
        compacted: dict[str, Compaction],
    ) -> None:
        self.spark = spark
        self.compacted = compacted
        self.sc = spark.sparkContext
        self.dirs = dirs
        self.history = history
        self.timeline = timeline
        self.split_bytes = split_bytes
        self.chunk_offsets = chunk_offsets
        self.clock = _Clock()

    def _ranges(self) -> list[HistoryRange]:
        if self.history is None:
            return []
        cores = max(1, self.sc.defaultParallelism)
        size = self.history.stat().st_size
        parts = max(_UNITS_PER_CORE * cores, math.ceil(size / HISTORY_RANGE_BYTES))
        return _history_ranges(self.history, parts)

    def _plan(self, replicas: list[ReplicaFiles], known: list[TopicPartition]) -> Plan:
        """Which reduce tasks have which partitions: a cut partition (its largest replica
        over ``split_bytes``, not compacted: a key's records may lie anywhere in its log)
        tasks of its own, the others packed a few per core by bytes."""
        pid_of = {tp: pid for pid, tp in enumerate(known)}
        largest = [0] * len(known)
        for r in replicas:
            pid = pid_of[r.topic_partition]
            largest[pid] = max(largest[pid], sum(s.size for s in r.segments))
        shares = [
            1 if tp.topic in self.compacted else max(1, math.ceil(size / self.split_bytes))
            for tp, size in zip(known, largest, strict=True)
        ]
        whole = [pid for pid in range(len(known)) if shares[pid] == 1]
        cores = max(1, self.sc.defaultParallelism)
        bins = pack(whole, _UNITS_PER_CORE * cores, lambda pid: largest[pid])
        first = [0] * len(known)
        for reducer, chosen in enumerate(bins):
            for pid in chosen:
                first[pid] = reducer
        reducers = len(bins)
        for pid in range(len(known)):
            if shares[pid] > 1:
                first[pid] = reducers
                reducers += shares[pid]
        return Plan(
            replicas,
            [pid_of[r.topic_partition] for r in replicas],
            [(tp.topic, tp.partition) for tp in known],
            first,
            shares,
            max(1, reducers),
            self.chunk_offsets,
            self.compacted,
        )

    def result(self) -> AuditResult:
        replicas = [r for d in self.dirs for r in d.replicas]
        known = sorted({r.topic_partition for r in replicas})
        plan = self._plan(replicas, known)
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
        shuffled = (
            self.sc.parallelize(units, max(1, len(units)))
            .flatMap(lambda chosen: map_units(chosen, plan))
            .partitionBy(plan.reducers, lambda reducer: reducer)
        )
        reduced = shuffled.mapPartitionsWithIndex(
            lambda i, payloads: reduce_partitions(i, payloads, plan)
        )
        cut = any(plan.cut(pid) for pid in range(len(known)))
        if cut:
            reduced = reduced.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            results: list[ReduceResult] = (
                reduced.map(_without_hashes) if cut else reduced
            ).collect()
            self.clock.lap("job")
            return self._assemble(results, ranges, known, plan, shuffled, reduced)
        finally:
            if cut:
                reduced.unpersist()

    def _assemble(
        self,
        results: list[ReduceResult],
        ranges: list[HistoryRange],
        known: list[TopicPartition],
        plan: Plan,
        shuffled: RDD[Any],
        reduced: RDD[Any],
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
        latency = merged(s.latency for s in stats)
        for s in stats:
            for (topic, partition, kind), n in s.lines.items():
                per_partition[(topic, partition)][kind] += n
            for key, n in s.seconds.items():
                per_second[key] += n
        gathered: dict[tuple[str, int], _Partition] = defaultdict(_Partition)
        for result in results:
            if result.partition is not None:
                gathered[result.partition].add(result)
        extra = sorted({TopicPartition(*tp) for tp in gathered} - set(known))
        partitions = [*known, *extra]

        items: list[Run] = []
        summaries: list[PartitionSummary] = []
        pending: list[tuple[int, Pending]] = []
        unresolved: dict[int, list[tuple[Run, int]]] = defaultdict(list)
        wanted = _Wanted()
        for pid, tp in enumerate(partitions):
            got = gathered[(tp.topic, tp.partition)]
            kinds = per_partition.get((tp.topic, tp.partition), {})
            facts = got.facts
            summary = PartitionSummary(
                tp.topic,
                tp.partition,
                got.replicas,
                facts.committed_end if facts else 0,
                facts.log_start if facts else 0,
                acked=kinds.get("ok", 0),
                reads=kinds.get("read", 0),
                compacted=tp.topic in self.compacted,
            )
            summaries.append(summary)
            cut = pid < len(known) and plan.cut(pid)
            records: dict[int, int] = defaultdict(int)
            mine = [*got.items]
            for chunk in got.chunks:
                summary.acked_checked += chunk.acked_checked
                for broker, n in chunk.records.items():
                    records[broker] += n
                mine += chunk.runs
                unresolved[pid] += chunk.unresolved
                for p in chunk.pending:
                    pending.append((pid, p))
                    wanted.unplaced.setdefault(tp.topic, set()).add(p.value)
                    wanted.failed.setdefault(tp.topic, set()).add(p.value)
                    if cut:
                        wanted.placed.setdefault((tp.topic, tp.partition), set()).add(p.value)
                wanted.lines.update(chunk.value_lines)
            if cut:
                for replica in summary.replicas:
                    replica.records = records.get(replica.broker, 0)
            if facts is not None:
                mine += [s for s in (skip_item(facts, k, got.held) for k in got.skips) if s]
            for run in mine:
                run.pid = pid  # a partition only the history names was -1 in its task
            items += mine
        if any(plan.cut(pid) for pid in range(len(known))):
            items += self._cut_partitions(plan, gathered, partitions, unresolved, shuffled, reduced)
        answers = self._lookups(ranges, wanted) if pending or wanted.lines else _Answers()
        for pid, p in pending:
            tp = partitions[pid]
            if {(tp.topic, tp.partition, p.value), (tp.topic, -1, p.value)} & answers.written:
                continue
            failed = answers.failed.get((tp.topic, p.value))
            facts = gathered[(tp.topic, tp.partition)].facts
            assert facts is not None
            found = phantom_item(facts, p, None if failed is None else line_of(failed))
            found.pid = pid
            items.append(found)
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
        for run in runs:
            summaries[run.pid].violations += 1
        transactions = None
        spans = {tp: got.transactions for tp, got in gathered.items() if got.transactions}
        if spans:
            by_tp = {(s.topic, s.partition): s for s in summaries}
            txn_violations, counted = judge_transactions(
                None if self.history is None else read_transaction_history(self.history),
                spans,
                by_tp,
                observed_until_ms=self._observed_until_ms(),
            )
            for v in txn_violations:
                by_tp[(v.topic, v.partition)].violations += 1
            violations += txn_violations
            transactions = counted.to_json()
            self.clock.lap("transactions")
        groups = None
        group_history = None if self.history is None else read_group_history(self.history)
        if group_history:
            by_tp = {(s.topic, s.partition): s for s in summaries}
            group_violations, group_stats = judge_groups(
                group_history,
                {tp: got.held for tp, got in gathered.items() if got.facts is not None},
                by_tp,
                compacted=self.compacted,
                timeline=timeline,
            )
            for v in group_violations:
                by_tp[(v.topic, v.partition)].violations += 1
            violations += group_violations
            groups = group_stats.to_json()
            self.clock.lap("groups")
        violations.sort(key=lambda v: (v.topic, v.partition, v.offset, v.kind, v.brokers))
        return AuditResult(
            violations=violations,
            partitions=summaries,
            brokers={d.broker: str(d.path) for d in self.dirs},
            history=None if self.history is None else str(self.history),
            operations=operations,
            acks_per_second=acks_per_second,
            latency=latency.per_second(),
            timeline=sorted(timeline, key=lambda e: e.time),
            records_decoded=sum(rep.records for s in summaries for rep in s.replicas),
            phases=self.clock.laps,
            transactions=transactions,
            groups=groups,
        )

    def _observed_until_ms(self) -> int | None:
        """The latest moment the logs were seen running, for hanging transactions: the last
        nemesis event (a chaos run's timeline ends after the cluster settled), else None
        (the transaction checks take the history's and the logs' latest times)."""
        if not self.timeline:
            return None
        return int(max(e.time for e in self.timeline) * 1000)

    def _cut_partitions(
        self,
        plan: Plan,
        gathered: dict[tuple[str, int], _Partition],
        partitions: list[TopicPartition],
        unresolved: dict[int, list[tuple[Run, int]]],
        shuffled: RDD[Any],
        reduced: RDD[Any],
    ) -> list[Run]:
        """What spans a cut partition's ranges: the writes and values its versions hold at
        several offsets (a job over the hashes the ranges kept, then the ranges asked for
        their copies), and where each lost or misread value is held instead."""
        buckets = plan.reducers
        repeated = (
            reduced.flatMap(lambda result: _hash_blocks(result, buckets))
            .partitionBy(buckets, lambda bucket: bucket)
            .mapPartitions(_repeated_hashes)
            .collect()
        )
        questions: dict[int, ChunkQuestions] = defaultdict(ChunkQuestions)
        for pid, kind, hashes in repeated:
            target = questions[pid].writes if kind == "write" else questions[pid].values
            target.update(hashes.tolist())
        for pid, found in unresolved.items():
            if plan.cut(pid) and found:
                questions[pid].moved.update(value for _, value in found)
        answers: list[tuple[int, ChunkAnswers]] = []
        if questions:
            asked = dict(questions)
            answers = shuffled.mapPartitionsWithIndex(
                lambda i, payloads: lookup_partitions(i, payloads, plan, asked)
            ).collect()
        moved: dict[int, dict[int, int]] = defaultdict(dict)
        writes: dict[int, list[CopyRow]] = defaultdict(list)
        values: dict[int, list[CopyRow]] = defaultdict(list)
        for pid, answer in answers:
            for value, offset in answer.moved.items():
                moved[pid][value] = min(moved[pid].get(value, offset), offset)
            writes[pid] += answer.writes
            values[pid] += answer.values
        items: list[Run] = []
        for pid, found in unresolved.items():
            for run, value in found:
                moved_to = moved[pid].get(value)
                if moved_to is not None:
                    run.key["moved"] = True
                    run.first["moved_to"] = moved_to
                items.append(run)
        for pid in set(writes) | set(values):
            facts = gathered[(partitions[pid].topic, partitions[pid].partition)].facts
            in_history = facts.in_history if facts else False
            items += duplicate_items(pid, writes[pid], values[pid], in_history)
        return items

    def _lookups(self, ranges: Sequence[HistoryRange], wanted: _Wanted) -> _Answers:
        merged = _Answers()
        chosen = [
            r
            for r in ranges
            if wanted.parse() or any(line >> LINE_BITS == r.index for line in wanted.lines)
        ]
        if not chosen:
            return merged
        for a in (
            self.sc.parallelize(chosen, len(chosen)).map(lambda r: _lookup(r, wanted)).collect()
        ):
            merged.values.update(a.values)
            merged.written |= a.written
            for key, line in a.failed.items():
                merged.failed[key] = min(merged.failed.get(key, line), line)
        return merged


_HISTORY_LINE_KINDS = frozenset(
    {"lost_ack", "inconsistent_read", "nonmonotonic_poll", "poll_skip", *COMPACTION_KINDS}
)
"""The kinds whose items name history lines (``line``, ``previous_line``)."""
