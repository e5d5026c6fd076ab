"""The audit as a Spark job: segments decoded in the executors, every check a DataFrame plan.

Inputs (see :mod:`chaos.audit.data_dirs`): the driver lists the data dirs and reads their
small files (checkpoints, meta.properties); Spark reads everything large. The segment
files are packed into a few tasks per core (:func:`chaos.audit.segments.pack`), each
reading its files itself, so no log passes through the driver:

- ``batches``: one row per batch (:func:`chaos.audit.segments.scan_segment`), cached.
- ``decoded``: one row per record (the executors decode batches with the broker's codec,
  :func:`~chaos.audit.segments.decode_segment`; Spark explodes each batch's arrays), plus
  one row per batch whose records could not be decoded, cached. ``records`` is its record
  rows. Each carries ``vh``, a 64-bit hash of the value, and ``wh``, one of its write
  (producer id, epoch, sequence; null without a producer id): the large joins and
  groupings move and compare 8 bytes instead of the value, and values are compared exactly
  wherever a finding shows them.
- ``offsets``: ``records`` grouped by (partition, offset) with hash aggregation only,
  cached. The version with the highest leader epoch is the partition's log there (``top``):
  the record a leader-epoch truncation would make every replica keep. The replicas agree
  when the min and max of a hash of (epoch, digest, value, write) agree; where they do not
  (``disputed``, rare) a small join finds the top version.
- ``history`` (when given): the history file read by Spark, parsed in the executors by
  :func:`chaos.audit.history.history_rows`, cached. Its ``read`` lines (consumers) feed
  only the read checks; a topic only read is not one the history covers.

The partition table (``parts``: committed end, log start, replicas) and the replica table
hold a row per partition or replica, built on the driver from the batch statistics and
broadcast into the joins.

Checks, each a DataFrame of violation items (kind, partition, brokers, offset range, a
grouping key and the facts for the sentence):

- lost_ack: ``ok`` operations left-joined to ``offsets`` on (partition, offset): lost when
  nothing is held there or the top version holds another value. For the lost ones (few),
  joins on (partition, value) and (partition, offset, value) say where the value is
  instead and which replicas still hold it under an older epoch. Operations below the log
  start offset (retention) are not checked. A record past the checkpointed HW but held by
  the replicas is not lost: the checkpoint lags the broker's HW by up to its interval.
- divergence: disputed ``offsets`` below the committed end, joined back to ``records`` for
  each replica's version.
- duplicate: ``offsets`` grouped by (partition, top write) with more than one offset, a
  write being a record's (producer id, producer epoch, sequence); with a history, also by
  (partition, top value) in the topics it covers. The candidates are joined back to
  ``records`` for the exact fields and the replicas holding them.
- gap: a window over each replica's batches in file order: a batch that does not start
  right after the previous one ends (or overlaps it).
- crc: batches failing their CRC or record count, unframeable data inside a segment that
  is not the last one, batches whose records do not parse.
- epoch_cache: the epoch changes of each replica's batches (a window with ``lag``)
  full-outer-joined on (partition, broker, start offset) with its leader-epoch-checkpoint.
- hw_above_leo: the replica table filtered on HW > LEO.
- phantom: committed ``offsets`` left-anti-joined with the ok/info operations on
  (partition, value), for the topics the history covers; a value the history says failed
  is named as such.
- inconsistent_read: the reads left-joined to ``offsets`` like the ``ok`` operations (a
  read whose value is not the top version at its offset), described by the same few joins
  as a lost acknowledgement.
- nonmonotonic_poll, poll_skip: the reads partitioned by poll stream (partition, process,
  session), sorted as written and walked in the executors (:mod:`chaos.audit.polls`); the
  few steps that are not one offset up are cached. A skip is judged against the ranges the
  replicas' valid batches hold (a window over the batches of the partitions with skips).

All items are unioned and runs grouped in one window (consecutive offsets with the same
kind, partition, brokers and key become one finding), then collected: the driver only ever
sees findings, per-replica statistics and per-second operation counts.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F

from chaos.audit.data_dirs import AuditInputError, BrokerDir, ReplicaFiles
from chaos.audit.history import HISTORY_SCHEMA, OP_TYPES, READ, NemesisEvent, history_rows
from chaos.audit.model import AuditResult, PartitionSummary, ReplicaSummary, TornTail
from chaos.audit.polls import ORDER, POLL_STEP_SCHEMA, STREAM, poll_steps
from chaos.audit.segments import (
    BATCH_SCHEMA,
    DECODED_SCHEMA,
    SegmentTask,
    decode_segments,
    pack,
    scan_segments,
)
from chaos.audit.violations import Finding, describe
from proto.topic_partition import TopicPartition

__all__ = ["audit"]

_TASKS_PER_CORE = 3
"""Segment-reading tasks per core: enough to balance uneven files, few enough that every
later stage over the cached DataFrames stays a handful of tasks."""
_SHOWN_BYTES = 48
_SEQUENCE_WRAP = 2**31
_SHOWN_OFFSETS = 10
"""Offsets a duplicate finding keeps (its count says how many there are)."""
_BROADCAST_ROWS = 100_000
"""Rows up to which a small intermediate result is broadcast into its joins."""


def _shown(column: Column) -> Column:
    """A value for a sentence: its first bytes (base64, decoded on the driver), its length."""
    return F.struct(
        F.base64(F.substring(column, 1, _SHOWN_BYTES)).alias("b64"),
        F.length(column).alias("len"),
    )


def _item(
    df: DataFrame,
    kind: str,
    brokers: Column,
    start: Column,
    end: Column,
    n: Column,
    key: Column,
    info: Column,
    t: Column | None = None,
) -> DataFrame:
    return df.select(
        F.lit(kind).alias("kind"),
        F.col("pid").cast("int").alias("pid"),
        brokers.cast("array<int>").alias("brokers"),
        start.cast("bigint").alias("start"),
        end.cast("bigint").alias("end"),
        n.cast("bigint").alias("n"),
        F.to_json(key).alias("key"),
        F.to_json(info).alias("info"),
        (F.lit(None) if t is None else t).cast("double").alias("t"),
    )


def _numbered_runs(df: DataFrame, keys: list[str], start: str, end: str) -> DataFrame:
    """``df`` with ``_run``, numbering per ``keys`` the runs of rows whose [start, end]
    offset ranges touch or overlap (gaps and islands: a running max of the previous ends)."""
    ordered = Window.partitionBy(*keys).orderBy(start, end)
    before = ordered.rowsBetween(Window.unboundedPreceding, -1)
    upto = ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    previous_end = F.max(end).over(before)
    flagged = df.withColumn(
        "_new", F.when(previous_end.isNull() | (F.col(start) > previous_end + 1), 1).otherwise(0)
    )
    return flagged.withColumn("_run", F.sum("_new").over(upto))


def _runs(items: DataFrame) -> DataFrame:
    """Merge items of one kind, partition, brokers and key whose offset ranges touch or
    overlap into one run."""
    keys = ["kind", "pid", "brokers", "key"]
    numbered = _numbered_runs(items, keys, "start", "end")
    return numbered.groupBy(*keys, "_run").agg(
        F.min("start").alias("start"),
        F.max("end").alias("end"),
        F.sum("n").alias("n"),
        F.min(F.struct("start", "end", "info")).getField("info").alias("first"),
        F.max(F.struct("start", "end", "info")).getField("info").alias("last"),
        F.min("t").alias("t_min"),
        F.max("t").alias("t_max"),
    )


class _Plan:
    """The DataFrames of one audit run; cached ones are released by :meth:`release`."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.cached: list[DataFrame] = []

    def cache(self, df: DataFrame) -> DataFrame:
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self.cached.append(df)
        return df

    def few(self, df: DataFrame) -> DataFrame | None:
        """Cache and count an intermediate result that is normally small (the disputed
        offsets, the lost acknowledgements, the phantoms): None when it is empty, so that
        the joins describing it are skipped; marked for broadcast into them when it has at
        most _BROADCAST_ROWS rows; left to shuffle joins otherwise (a badly broken log)."""
        cached = self.cache(df)
        count = cached.count()
        if count == 0:
            return None
        return F.broadcast(cached) if count <= _BROADCAST_ROWS else cached

    def release(self) -> None:
        for df in self.cached:
            df.unpersist()


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
    plan = _Plan(spark)
    try:
        result = _audit(plan, dirs, history, list(timeline))
    finally:
        plan.release()
    result.seconds = time.monotonic() - started
    return result


def _audit(
    plan: _Plan, dirs: list[BrokerDir], history: Path | None, timeline: list[NemesisEvent]
) -> AuditResult:
    spark = plan.spark
    sc = spark.sparkContext
    clock = _Clock()
    replicas = [r for d in dirs for r in d.replicas]
    partitions = sorted({r.topic_partition for r in replicas})

    hist: DataFrame | None = None
    per_partition: dict[tuple[str, int | None], dict[str, int]] = {}
    history_counts: dict[str, int] = {}
    if history is not None:
        hist = _read_history(plan, history)
        per_partition = _history_counts(hist)
        history_counts = _totals(per_partition)
        timeline = timeline + [
            NemesisEvent(row.line, row.time, row.f, row.target)
            for row in hist.filter(F.col("type") == "nemesis").collect()
        ]
        extra = {TopicPartition(t, p) for t, p in per_partition if p is not None}
        partitions += sorted(extra - set(partitions))
    clock.lap("history")
    pid_of = {tp: pid for pid, tp in enumerate(partitions)}
    # The topics the producers of the history wrote: a topic only read is not covered (its
    # values need not be the history's, so no phantom or value duplicate is judged there).
    history_topics = {
        topic for (topic, _), by_type in per_partition.items() if set(by_type) & set(OP_TYPES)
    }

    tasks = [
        SegmentTask(pid_of[r.topic_partition], r.broker, s.base_offset, str(s.path), last, s.size)
        for r in replicas
        for s, last in zip(r.segments, _last_flags(len(r.segments)), strict=True)
    ]
    bins = pack(tasks, _TASKS_PER_CORE * sc.defaultParallelism)
    task_rdd = sc.parallelize(bins, max(1, len(bins)))
    batches = plan.cache(
        spark.createDataFrame(task_rdd.flatMap(scan_segments), BATCH_SCHEMA, verifySchema=False)
    )
    # One cached row per record, plus one per batch whose records were not decoded (error
    # or codec set, record columns null); vh identifies a value in the joins and groupings.
    decoded = plan.cache(
        spark.createDataFrame(task_rdd.flatMap(decode_segments), DECODED_SCHEMA, verifySchema=False)
        .select(
            "pid",
            "broker",
            "epoch",
            "base_offset",
            "last_offset",
            "error",
            "codec",
            "producer_id",
            "producer_epoch",
            "base_sequence",
            F.explode_outer(F.arrays_zip("offsets", "values", "digests")).alias("r"),
        )
        .select(
            "pid",
            "broker",
            "epoch",
            "base_offset",
            "last_offset",
            "error",
            "codec",
            F.col("r.offsets").alias("offset"),
            F.col("r.values").alias("value"),
            F.col("r.digests").alias("digest"),
            _value_hash(F.col("r.values")).alias("vh"),
            "producer_id",
            "producer_epoch",
            _sequence(F.col("r.offsets")).alias("sequence"),
        )
        .withColumn("wh", _write_hash())
    )
    records = decoded.filter(F.col("offset").isNotNull()).drop(
        "base_offset", "last_offset", "error", "codec"
    )

    # -- per replica and per partition (small, on the driver) ------------------------------
    summaries = _replica_summaries(batches, decoded, replicas, pid_of)
    parts_rows = []
    by_pid: dict[int, list[ReplicaSummary]] = defaultdict(list)
    for (pid, _), summary in summaries.items():
        by_pid[pid].append(summary)
    part_summaries: list[PartitionSummary] = []
    for pid, tp in enumerate(partitions):
        held = sorted(by_pid.get(pid, []), key=lambda s: s.broker)
        max_leo = max((s.log_end_offset for s in held), default=0)
        max_hw = max((s.high_watermark or 0 for s in held), default=0)
        log_start = min((s.log_start_offset for s in held), default=0)
        committed_end = min(max_hw, max_leo)
        part_summaries.append(
            PartitionSummary(
                tp.topic,
                tp.partition,
                held,
                committed_end,
                log_start,
                reads=per_partition.get((tp.topic, tp.partition), {}).get(READ, 0),
            )
        )
        parts_rows.append(
            (
                pid,
                tp.topic,
                tp.partition,
                committed_end,
                log_start,
                max_leo,
                [s.broker for s in held],
                tp.topic in history_topics,
            )
        )
    parts = F.broadcast(
        spark.createDataFrame(
            parts_rows,
            "pid int, topic string, partition int, committed_end bigint, log_start bigint, "
            "max_leo bigint, replicas array<int>, in_history boolean",
        )
    )
    replica_table = spark.createDataFrame(
        [(pid, s.broker, s.high_watermark, s.log_end_offset) for (pid, _), s in summaries.items()],
        "pid int, broker int, hw bigint, leo bigint",
    )
    checkpoint_epochs = spark.createDataFrame(
        [
            (pid, broker, epoch, start)
            for (pid, broker), s in summaries.items()
            for epoch, start in _comparable_entries(s)
        ],
        "pid int, broker int, epoch int, start bigint",
    )

    # -- the epoch changes the batches carry (small: collected for the plot) ---------------
    in_file_order = Window.partitionBy("pid", "broker").orderBy("segment", "position")
    epoch_starts = plan.cache(
        batches.filter((F.col("kind") == "batch") & (F.col("epoch") >= 0))
        .withColumn("previous", F.lag("epoch").over(in_file_order))
        .filter(F.col("previous").isNull() | (F.col("previous") != F.col("epoch")))
        .select("pid", "broker", "epoch", F.col("base_offset").alias("start"))
    )
    for row in epoch_starts.orderBy("pid", "broker", "start").collect():
        summaries[(row.pid, row.broker)].epoch_starts.append((row.epoch, row.start))

    clock.lap("segments")
    offsets = _offsets(plan, records)

    # -- the checks -----------------------------------------------------------------------
    items = [
        _gaps(batches, in_file_order),
        _corruption(batches, decoded),
        _epoch_cache(epoch_starts, checkpoint_epochs),
        _hw_above_leo(replica_table),
        _divergence(plan, records, offsets, parts),
        *_duplicates(plan, records, offsets, parts, history is not None),
    ]
    ok_ops: DataFrame | None = None
    if hist is not None:
        ops = hist.filter(F.col("type").isin("ok", "fail", "info")).join(
            parts.select("topic", "partition", "pid"), ["topic", "partition"], "left"
        )
        ok_ops = plan.cache(
            ops.filter(F.col("type") == "ok").drop("pid").join(parts, ["topic", "partition"])
        )
        items += _acknowledgements(plan, ops, ok_ops, records, offsets, parts, history_counts)
    if hist is not None and history_counts.get(READ, 0):
        reads = hist.filter(F.col("type") == READ).join(parts, ["topic", "partition"])
        items += [
            _inconsistent_reads(plan, reads, records, offsets),
            *_polls(plan, reads, batches, parts),
        ]
    union: DataFrame | None = None
    for item in items:
        if item is not None:
            union = item if union is None else union.unionByName(item)
    found = [] if union is None else _runs(union).collect()
    clock.lap("checks")

    # -- history statistics ---------------------------------------------------------------
    operations: dict[str, int] = {}
    per_second: list[tuple[int, str, int]] = []
    if hist is not None and ok_ops is not None:
        for row in (
            ok_ops.groupBy("pid")
            .agg(
                F.count("*").alias("n"),
                F.count(F.when(F.col("offset") >= F.col("log_start"), 1)).alias("checked"),
            )
            .collect()
        ):
            part_summaries[row.pid].acked = row.n
            part_summaries[row.pid].acked_checked = row.checked
        for row in (
            hist.filter(F.col("type") != "nemesis")
            .groupBy(F.floor("time").alias("second"), "type")
            .count()
            .collect()
        ):
            per_second.append((int(row.second), row.type, int(row["count"])))
        per_second.sort()
        operations = {k: n for k, n in history_counts.items() if k in (*OP_TYPES, READ)}
    clock.lap("statistics")

    violations = [describe(_finding(row), part_summaries[row.pid]) for row in found]
    violations.sort(key=lambda v: (v.topic, v.partition, v.offset, v.kind, v.brokers))
    for v in violations:
        part_summaries[pid_of[TopicPartition(v.topic, v.partition)]].violations += 1
    return AuditResult(
        violations=violations,
        partitions=part_summaries,
        brokers={d.broker: str(d.path) for d in dirs},
        history=None if history is None else str(history),
        operations=operations,
        acks_per_second=per_second,
        timeline=sorted(timeline, key=lambda e: e.time),
        records_decoded=sum(s.records for s in summaries.values()),
        phases=clock.laps,
    )


class _Clock:
    """Wall time per phase of the job."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.laps[name] = now - self._last
        self._last = now


def _last_flags(count: int) -> list[bool]:
    return [i == count - 1 for i in range(count)]


def _finding(row: Row) -> Finding:
    return Finding(
        kind=row.kind,
        brokers=tuple(row.brokers or ()),
        start=row.start,
        end=row.end,
        count=row.n,
        key=json.loads(row.key or "{}"),
        first=json.loads(row.first or "{}"),
        last=json.loads(row.last or "{}"),
        t_min=row.t_min,
        t_max=row.t_max,
    )


# -- inputs --------------------------------------------------------------------------------


def _read_history(plan: _Plan, path: Path) -> DataFrame:
    """The history file as a cached DataFrame; AuditInputError for its first bad line."""
    sc = plan.spark.sparkContext
    lines = sc.textFile(str(path.resolve()), use_unicode=False).zipWithIndex()
    hist = plan.cache(
        plan.spark.createDataFrame(lines.flatMap(history_rows), HISTORY_SCHEMA, verifySchema=False)
    )
    bad = hist.filter(F.col("error").isNotNull()).orderBy("line").limit(1).collect()
    if bad:
        raise AuditInputError(f"history {path}, line {bad[0].line}: {bad[0].error}")
    return hist.filter(F.col("error").isNull()).withColumn("vh", _value_hash(F.col("value")))


def _history_counts(hist: DataFrame) -> dict[tuple[str, int | None], dict[str, int]]:
    """Operations and reads per (topic, partition) and type (one small job); the partition
    is None for operations whose producer never learnt it."""
    counts: dict[tuple[str, int | None], dict[str, int]] = defaultdict(dict)
    for row in (
        hist.filter(F.col("type") != "nemesis")
        .groupBy("topic", "partition", "type")
        .count()
        .collect()
    ):
        counts[(row.topic, row.partition)][row.type] = row["count"]
    return dict(counts)


def _totals(per_partition: dict[tuple[str, int | None], dict[str, int]]) -> dict[str, int]:
    """The history's lines by type, plus ``unplaced``: operations without a partition."""
    totals: dict[str, int] = defaultdict(int)
    for (_, partition), by_type in per_partition.items():
        for op_type, n in by_type.items():
            totals[op_type] += n
            if partition is None:
                totals["unplaced"] += n
    return dict(totals)


def _replica_summaries(
    batches: DataFrame,
    decoded: DataFrame,
    replicas: list[ReplicaFiles],
    pid_of: dict[TopicPartition, int],
) -> dict[tuple[int, int], ReplicaSummary]:
    """One summary per replica from the batch and record statistics (two small jobs)."""
    is_batch = F.col("kind") == "batch"
    stats = {
        (row.pid, row.broker): row
        for row in batches.groupBy("pid", "broker")
        .agg(
            F.min(F.when(is_batch, F.col("base_offset"))).alias("first_offset"),
            F.max(F.when(is_batch, F.col("last_offset") + 1)).alias("end_offset"),
            F.count(F.when(is_batch, 1)).alias("batches"),
            F.max(
                F.when(F.col("kind") == "torn", F.struct("segment", "position", "size", "problem"))
            ).alias("torn"),
        )
        .collect()
    }
    counts = {
        (row.pid, row.broker): row
        for row in decoded.groupBy("pid", "broker")
        .agg(
            F.count("offset").alias("records"),
            F.count("codec").alias("undecoded"),
        )
        .collect()
    }
    summaries: dict[tuple[int, int], ReplicaSummary] = {}
    for r in replicas:
        key = (pid_of[r.topic_partition], r.broker)
        stat = stats.get(key)
        first_base = r.segments[0].base_offset if r.segments else r.log_start_checkpoint or 0
        last_base = r.segments[-1].base_offset if r.segments else first_base
        end = stat.end_offset if stat is not None and stat.end_offset is not None else None
        leo = max(end, last_base) if end is not None else last_base
        log_start = max(r.log_start_checkpoint or 0, first_base)
        torn = None
        if stat is not None and stat.torn is not None:
            segment = next(s for s in r.segments if s.base_offset == stat.torn.segment)
            torn = TornTail(
                segment.path.name, stat.torn.position, stat.torn.size, stat.torn.problem
            )
        count = counts.get(key)
        summaries[key] = ReplicaSummary(
            broker=r.broker,
            log_start_offset=min(log_start, leo),
            log_end_offset=leo,
            high_watermark=r.high_watermark,
            batches=0 if stat is None else stat.batches,
            records=0 if count is None or count.records is None else int(count.records),
            undecoded_batches=0 if count is None else count.undecoded,
            epoch_starts=[],
            checkpoint_epochs=[(e.epoch, e.start_offset) for e in r.epoch_entries],
            first_batch_offset=None if stat is None else stat.first_offset,
            torn_tail=torn,
        )
    return summaries


def _comparable_entries(summary: ReplicaSummary) -> list[tuple[int, int]]:
    """The checkpoint entries that say something about the batches the replica holds.

    Entries at or past the LEO describe no batch (a new leader records its epoch at its LEO
    before writing, KAFKA-7415) and are left out. The entry in force at the first batch is
    compared as starting there, since retention moves the first entry up to the log start
    (``truncate_from_start``).
    """
    first = summary.first_batch_offset
    leo = summary.log_end_offset
    entries = [(e, s) for e, s in summary.checkpoint_epochs if s < leo]
    if first is None:
        return entries
    before = [entry for entry in entries if entry[1] <= first]
    after = [entry for entry in entries if entry[1] > first]
    return ([(before[-1][0], first)] if before else []) + after


# -- the checks ----------------------------------------------------------------------------


def _sequence(offset: Column) -> Column:
    """A record's sequence number: its batch's base sequence plus its offset delta, wrapping
    past INT32_MAX to 0 as Kafka's producer does; null without an idempotent producer."""
    return F.when(
        (F.col("producer_id") >= 0) & (F.col("base_sequence") >= 0),
        F.pmod(F.col("base_sequence") + (offset - F.col("base_offset")), F.lit(_SEQUENCE_WRAP)),
    )


def _write_hash() -> Column:
    """64-bit hash of a record's write, (producer id, producer epoch, sequence); null for a
    record without one. One write at two offsets is a duplicate."""
    return F.when(
        F.col("sequence").isNotNull(),
        F.xxhash64("producer_id", "producer_epoch", "sequence"),
    )


def _value_hash(value: Column) -> Column:
    """64-bit hash of a value (null for a null value): what the joins and groupings on
    values use, so that shuffles move 8 bytes instead of the value. Values are compared
    exactly wherever a finding shows them."""
    return F.when(value.isNotNull(), F.xxhash64(value))


def _offsets(plan: _Plan, records: DataFrame) -> DataFrame:
    """One row per (partition, offset) held by any replica (cached): ``top_epoch``,
    ``top_vh`` and ``top_wh`` (value and write hashes), the version a leader-epoch
    truncation would make every replica keep (the highest leader epoch), and ``disputed``
    when the replicas holding it disagree.

    Hash aggregation only (no value in an aggregation buffer, which would force a sort):
    the versions agree when the min and max of a hash of (epoch, digest, value, write)
    agree; the top version of a disputed offset is found by a second, small join.
    """
    version = F.xxhash64(
        "epoch",
        "digest",
        F.coalesce("vh", F.lit(0)),
        F.col("vh").isNull(),
        F.coalesce("wh", F.lit(0)),
    )
    per_offset = plan.cache(
        records.groupBy("pid", "offset").agg(
            F.max("epoch").alias("top_epoch"),
            F.min(version).alias("low"),
            F.max(version).alias("high"),
            F.max("vh").alias("any_vh"),
            F.max("wh").alias("any_wh"),
            F.count("*").alias("holders"),
        )
    )
    disputed = plan.few(
        per_offset.filter(F.col("low") != F.col("high")).select("pid", "offset", "top_epoch")
    )
    if disputed is None:
        return per_offset.select(
            "pid",
            "offset",
            "top_epoch",
            F.col("any_vh").alias("top_vh"),
            F.col("any_wh").alias("top_wh"),
            F.lit(False).alias("disputed"),
            "holders",
        )
    top = plan.cache(
        records.join(disputed, ["pid", "offset"])
        .filter(F.col("epoch") == F.col("top_epoch"))
        .groupBy("pid", "offset")
        .agg(F.max("vh").alias("disputed_vh"), F.max("wh").alias("disputed_wh"))
    )
    is_disputed = F.col("low") != F.col("high")
    return per_offset.join(top, ["pid", "offset"], "left").select(
        "pid",
        "offset",
        "top_epoch",
        F.when(is_disputed, F.col("disputed_vh")).otherwise(F.col("any_vh")).alias("top_vh"),
        F.when(is_disputed, F.col("disputed_wh")).otherwise(F.col("any_wh")).alias("top_wh"),
        is_disputed.alias("disputed"),
        "holders",
    )


def _top_values(records: DataFrame, wanted: DataFrame) -> DataFrame:
    """The top version's value at the (pid, offset) rows of ``wanted`` (a few), for the
    sentences: ``held`` (shown), ``held_epoch``."""
    return (
        records.join(wanted.select("pid", "offset", "top_epoch").distinct(), ["pid", "offset"])
        .filter(F.col("epoch") == F.col("top_epoch"))
        .groupBy("pid", "offset")
        .agg(
            F.first(_shown(F.col("value"))).alias("held"),
            F.first("epoch").alias("held_epoch"),
        )
    )


def _divergence(
    plan: _Plan, records: DataFrame, offsets: DataFrame, parts: DataFrame
) -> DataFrame | None:
    disputed = plan.few(
        offsets.filter(F.col("disputed"))
        .join(parts, "pid")
        .filter(
            (F.col("offset") < F.col("committed_end")) & (F.col("offset") >= F.col("log_start"))
        )
        .select("pid", "offset", "committed_end")
    )
    if disputed is None:
        return None
    versions = (
        records.join(disputed, ["pid", "offset"])
        .groupBy("pid", "offset", "committed_end")
        .agg(
            F.array_sort(F.collect_list(F.struct("broker", "epoch"))).alias("sig"),
            F.array_sort(
                F.collect_list(
                    F.struct("broker", "epoch", "digest", _shown(F.col("value")).alias("value"))
                )
            ).alias("versions"),
        )
    )
    return _item(
        versions,
        "divergence",
        brokers=F.transform("sig", lambda s: s.getField("broker")),
        start=F.col("offset"),
        end=F.col("offset"),
        n=F.lit(1),
        key=F.struct(F.col("sig")),
        info=F.struct("versions", "committed_end"),
    )


def _duplicates(
    plan: _Plan, records: DataFrame, offsets: DataFrame, parts: DataFrame, with_history: bool
) -> list[DataFrame | None]:
    """One write stored twice (DESIGN.md §9), judged on a partition's log (its top
    versions): the same (producer id, producer epoch, sequence) at two offsets; with a
    history, whose values are unique, also one value at two offsets of a topic the history
    covers, unless the first rule already reports that copy.

    Values alone prove nothing without a history: ``perf produce`` sends one value a
    hundred thousand times, and a producer without idempotence (producer id -1) may send
    any value again. Its records are never duplicates by the first rule.
    """
    tops = offsets.select("pid", "offset", "top_epoch")
    writes, later = _write_duplicates(plan, records, offsets, tops)
    if not with_history:
        return [writes]
    return [writes, _value_duplicates(plan, records, offsets, tops, parts, later)]


def _duplicated(
    plan: _Plan,
    records: DataFrame,
    candidates: DataFrame,
    hash_column: str,
    tops: DataFrame,
    fields: list[str],
    exclude: DataFrame | None = None,
) -> DataFrame | None:
    """The candidates (partition and hash of a value or write found at several offsets)
    joined back to the top versions in ``records``, leaving out the (pid, offset) rows of
    ``exclude``: per distinct ``fields`` (compared exactly) held at more than one offset,
    the offsets in order, the brokers holding them and the first copy's value
    (``first_value``). Cached; None when there is none (the hashes only collided)."""
    copies = (
        records.join(candidates, ["pid", hash_column])
        .join(tops, ["pid", "offset"])
        .filter(F.col("epoch") == F.col("top_epoch"))
    )
    if exclude is not None:
        copies = copies.join(F.broadcast(exclude), ["pid", "offset"], "left_anti")
    per_offset = copies.groupBy("pid", *fields, "offset").agg(
        F.array_sort(F.collect_set("broker")).alias("brokers"),
        F.first("value").alias("copy_value"),
    )
    return plan.few(
        per_offset.groupBy("pid", *fields)
        .agg(
            F.array_sort(F.collect_list("offset")).alias("offsets"),
            F.array_sort(F.array_distinct(F.flatten(F.collect_list("brokers")))).alias("brokers"),
            F.min(F.struct("offset", "copy_value")).getField("copy_value").alias("first_value"),
        )
        .filter(F.size("offsets") > 1)
    )


def _repeated(df: DataFrame, column: str, hash_column: str) -> DataFrame:
    """(pid, ``hash_column``) of the ``column`` hashes that several offsets hold."""
    return (
        df.filter(F.col(column).isNotNull())
        .groupBy("pid", F.col(column).alias(hash_column))
        .count()
        .filter(F.col("count") > 1)
        .drop("count")
    )


def _duplicate_item(across: DataFrame, key: list[Column], info: list[Column]) -> DataFrame:
    first = F.col("offsets").getItem(0)
    return _item(
        across,
        "duplicate",
        brokers=F.col("brokers"),
        start=first,
        end=first,
        n=F.lit(1),
        key=F.struct(
            *key,
            F.size("offsets").alias("copies"),
            (F.col("offsets").getItem(1) - first).alias("delta"),
        ),
        info=F.struct(
            _shown(F.col("first_value")).alias("value"),
            F.slice("offsets", 1, _SHOWN_OFFSETS).alias("offsets"),
            *info,
        ),
    )


def _write_duplicates(
    plan: _Plan, records: DataFrame, offsets: DataFrame, tops: DataFrame
) -> tuple[DataFrame | None, DataFrame | None]:
    """Items for the writes (producer id, epoch, sequence) held at several offsets, and the
    (pid, offset) of every copy after the first."""
    candidates = plan.few(_repeated(offsets, "top_wh", "wh"))
    if candidates is None:
        return None, None
    fields = ["producer_id", "producer_epoch", "sequence"]
    across = _duplicated(plan, records, candidates, "wh", tops, fields)
    if across is None:
        return None, None
    later = across.select("pid", F.explode(F.slice("offsets", 2, 1 << 30)).alias("offset"))
    item = _duplicate_item(
        across,
        key=[F.lit("write").alias("rule"), F.col("producer_id"), F.col("producer_epoch")],
        info=[F.col("sequence")],
    )
    return item, later


def _value_duplicates(
    plan: _Plan,
    records: DataFrame,
    offsets: DataFrame,
    tops: DataFrame,
    parts: DataFrame,
    later: DataFrame | None,
) -> DataFrame | None:
    """Items for the values held at several offsets of a partition of a topic the history
    covers, leaving out the copies ``later`` (the write rule's) already reports."""
    candidates = plan.few(
        _repeated(offsets, "top_vh", "vh").join(
            parts.filter(F.col("in_history")).select("pid"), "pid"
        )
    )
    if candidates is None:
        return None
    across = _duplicated(plan, records, candidates, "vh", tops, ["value"], exclude=later)
    if across is None:
        return None
    return _duplicate_item(across, key=[F.lit("value").alias("rule")], info=[])


def _gaps(batches: DataFrame, in_file_order: Any) -> DataFrame:
    previous_end = F.lag("last_offset").over(in_file_order)
    steps = (
        batches.filter(F.col("kind") == "batch")
        .withColumn("previous_end", previous_end)
        .filter(
            F.col("previous_end").isNotNull() & (F.col("base_offset") != F.col("previous_end") + 1)
        )
    )
    gap = F.col("base_offset") > F.col("previous_end") + 1
    return _item(
        steps,
        "gap",
        brokers=F.array("broker"),
        start=F.when(gap, F.col("previous_end") + 1).otherwise(F.col("base_offset")),
        end=F.when(gap, F.col("base_offset") - 1).otherwise(F.least("previous_end", "last_offset")),
        n=F.when(gap, F.col("base_offset") - F.col("previous_end") - 1).otherwise(
            F.least("previous_end", "last_offset") - F.col("base_offset") + 1
        ),
        key=F.struct(F.when(gap, "gap").otherwise("overlap").alias("what")),
        info=F.struct("segment", "position", "previous_end", "base_offset", "last_offset"),
    )


def _corruption(batches: DataFrame, decoded: DataFrame) -> DataFrame:
    bad = batches.filter(
        ((F.col("kind") == "batch") & F.col("problem").isNotNull()) | (F.col("kind") == "unframed")
    )
    unframed = F.col("kind") == "unframed"
    from_batches = _item(
        bad,
        "crc",
        brokers=F.array("broker"),
        start=F.col("base_offset"),
        end=F.when(unframed, F.col("base_offset")).otherwise(F.col("last_offset")),
        n=F.when(unframed, 0).otherwise(F.col("record_count")),
        key=F.struct(
            F.when(unframed, "unframed")
            .when(F.col("problem").startswith("CRC"), "crc")
            .otherwise("count")
            .alias("what")
        ),
        info=F.struct("segment", "position", "size", "problem"),
    )
    unparsed = _item(
        decoded.filter(F.col("error").isNotNull()),
        "crc",
        brokers=F.array("broker"),
        start=F.col("base_offset"),
        end=F.col("last_offset"),
        n=F.col("last_offset") - F.col("base_offset") + 1,
        key=F.struct(F.lit("records").alias("what")),
        info=F.struct(F.col("error").alias("problem")),
    )
    return from_batches.unionByName(unparsed)


def _epoch_cache(epoch_starts: DataFrame, checkpoint_epochs: DataFrame) -> DataFrame:
    derived = epoch_starts.withColumnRenamed("epoch", "batch_epoch")
    cached = checkpoint_epochs.withColumnRenamed("epoch", "file_epoch")
    mismatched = derived.join(cached, ["pid", "broker", "start"], "full_outer").filter(
        F.col("batch_epoch").isNull()
        | F.col("file_epoch").isNull()
        | (F.col("batch_epoch") != F.col("file_epoch"))
    )
    per_replica = mismatched.groupBy("pid", "broker").agg(
        F.min("start").alias("first"), F.count("*").alias("entries")
    )
    return _item(
        per_replica,
        "epoch_cache",
        brokers=F.array("broker"),
        start=F.col("first"),
        end=F.col("first"),
        n=F.col("entries"),
        key=F.struct(F.lit("epochs").alias("what")),
        info=F.struct("first"),
    )


def _hw_above_leo(replica_table: DataFrame) -> DataFrame:
    return _item(
        replica_table.filter(F.col("hw") > F.col("leo")),
        "hw_above_leo",
        brokers=F.array("broker"),
        start=F.col("leo"),
        end=F.col("hw") - 1,
        n=F.col("hw") - F.col("leo"),
        key=F.struct(F.lit("hw").alias("what")),
        info=F.struct("hw", "leo"),
    )


def _acknowledgements(
    plan: _Plan,
    ops: DataFrame,
    ok_ops: DataFrame,
    records: DataFrame,
    offsets: DataFrame,
    parts: DataFrame,
    counts: dict[str, int],
) -> list[DataFrame | None]:
    """lost_ack and phantom items from one full outer join of the ``ok`` operations with
    the top versions on (partition, offset), the audit's largest join.

    Where an operation and the top version agree (nearly every row) there is nothing to
    say. The rest are the suspects, normally few, cached: an operation whose offset holds
    another value or nothing is lost; a committed top version that no operation put at
    its offset is a phantom unless some ok or info operation wrote its value elsewhere
    (or at an unknown partition), which joins the operations against the few suspects.
    """
    acked = ok_ops.filter(F.col("offset") >= F.col("log_start")).select(
        "pid", "offset", "vh", "value", "line", "time"
    )
    tops = offsets.select("pid", "offset", "top_epoch", "top_vh")
    agree = F.col("top_vh").eqNullSafe(F.col("vh"))
    acked_here = F.col("line").isNotNull()
    held_here = F.col("top_epoch").isNotNull()
    committed = (
        F.col("in_history")
        & (F.col("offset") >= F.col("log_start"))
        & (F.col("offset") < F.col("committed_end"))
    )
    is_lost = acked_here & (~held_here | ~agree)
    is_candidate = held_here & committed & (~acked_here | ~agree)
    suspects = plan.few(
        acked.join(tops, ["pid", "offset"], "full_outer")
        .join(parts, "pid")
        .filter(is_lost | is_candidate)
        .withColumn("lost", is_lost)
        .withColumn("candidate", is_candidate)
    )
    if suspects is None:
        return [None, None]
    return [
        _lost_acks(plan, suspects.filter(F.col("lost")), records, offsets),
        _phantoms(plan, ops, suspects.filter(F.col("candidate")), records, counts),
    ]


def _lost_acks(
    plan: _Plan, suspects: DataFrame, records: DataFrame, offsets: DataFrame
) -> DataFrame | None:
    """``ok`` operations whose value is not the top version at their offset."""
    lost = plan.few(suspects)
    if lost is None:
        return None
    return _value_not_held_item(lost, records, offsets, "lost_ack", [], ["max_leo"])


def _value_not_held_item(
    suspects: DataFrame,
    records: DataFrame,
    offsets: DataFrame,
    kind: str,
    key_columns: list[str],
    info_columns: list[str],
) -> DataFrame:
    """One finding per history line whose value the committed log does not hold at its
    offset (an acknowledged write or a read), with where the value went instead."""
    return _item(
        _whereabouts(suspects, records, offsets),
        kind,
        brokers=F.col("replicas"),
        start=F.col("offset"),
        end=F.col("offset"),
        n=F.lit(1),
        key=F.struct(
            F.col("reason"),
            *(F.col(c) for c in key_columns),
            F.col("still_held"),
            F.col("moved_to").isNotNull().alias("moved"),
            F.col("held_epoch"),
        ),
        info=F.struct(
            _shown(F.col("value")).alias("value"),
            F.col("held"),
            F.col("moved_to"),
            F.col("line"),
            *(F.col(c) for c in info_columns),
        ),
        t=F.col("time"),
    )


def _whereabouts(lost: DataFrame, records: DataFrame, offsets: DataFrame) -> DataFrame:
    """``lost``, a few values the log does not hold at their offset (rows with ``pid``,
    ``offset``, ``vh``, ``top_epoch`` and ``max_leo``), with what to say about each:
    ``reason`` (``replaced``: the log holds another record there; ``beyond_leo``: every
    replica ends before it; ``missing``: no replica holds the offset, although the log goes
    on past it), ``held`` and ``held_epoch`` (the log's record there), ``still_held`` (the
    replicas that still hold the value there, under an older leader epoch) and
    ``moved_to`` (the first offset where the log holds the value instead)."""
    moved = (
        lost.select("pid", "vh")
        .distinct()
        .join(
            offsets.select("pid", F.col("top_vh").alias("vh"), F.col("offset").alias("moved_to")),
            ["pid", "vh"],
        )
        .groupBy("pid", "vh")
        .agg(F.min("moved_to").alias("moved_to"))
    )
    holders = (
        records.join(lost.select("pid", "offset", "vh").distinct(), ["pid", "offset", "vh"])
        .groupBy("pid", "offset", "vh")
        .agg(F.array_sort(F.collect_list("broker")).alias("still_held"))
    )
    held = _top_values(records, lost.filter(F.col("top_epoch").isNotNull()))
    reason = (
        F.when(F.col("top_epoch").isNotNull(), "replaced")
        .when(F.col("offset") >= F.col("max_leo"), "beyond_leo")
        .otherwise("missing")
    )
    return (
        lost.join(moved, ["pid", "vh"], "left")
        .join(holders, ["pid", "offset", "vh"], "left")
        .join(held, ["pid", "offset"], "left")
        .withColumn("reason", reason)
    )


def _phantoms(
    plan: _Plan,
    ops: DataFrame,
    suspects: DataFrame,
    records: DataFrame,
    counts: dict[str, int],
) -> DataFrame | None:
    """Committed top versions whose value no ok or info operation wrote (in the topics the
    history covers); a value only ``fail`` operations wrote is named as such. ``counts``
    (operations by type, ``unplaced``: without a partition) lets joins with nothing on one
    side be skipped."""
    candidates = plan.few(
        suspects.select(
            "pid", "topic", "offset", "replicas", "top_epoch", F.col("top_vh").alias("vh")
        ).distinct()
    )
    if candidates is None:
        return None
    wanted = F.broadcast(candidates.select("pid", "topic", "vh").distinct())
    written = ops.filter(F.col("type").isin("ok", "info"))
    # The operations are streamed against the few candidates, never shuffled.
    placed = (
        written.filter(F.col("pid").isNotNull()).select("pid", "vh").join(wanted, ["pid", "vh"])
    )
    phantoms = candidates.join(placed.select("pid", "vh").distinct(), ["pid", "vh"], "left_anti")
    if counts.get("unplaced", 0):
        unplaced = (
            written.filter(F.col("partition").isNull())
            .select("topic", "vh")
            .join(wanted.select("topic", "vh"), ["topic", "vh"])
        )
        phantoms = phantoms.join(unplaced.distinct(), ["topic", "vh"], "left_anti")
    found = plan.few(phantoms)
    if found is None:
        return None
    if counts.get("fail", 0):
        failed = (
            ops.filter(F.col("type") == "fail")
            .select("topic", "vh", "line")
            .join(wanted.select("topic", "vh").distinct(), ["topic", "vh"])
            .groupBy("topic", "vh")
            .agg(F.min("line").alias("failed_line"))
        )
        found = found.join(failed, ["topic", "vh"], "left")
    else:
        found = found.withColumn("failed_line", F.lit(None).cast("bigint"))
    shown = _top_values(records, found)
    return _item(
        found.join(shown, ["pid", "offset"], "left"),
        "phantom",
        brokers=F.col("replicas"),
        start=F.col("offset"),
        end=F.col("offset"),
        n=F.lit(1),
        key=F.struct(
            F.when(F.col("failed_line").isNotNull(), "failed")
            .otherwise("unwritten")
            .alias("reason")
        ),
        info=F.struct(
            F.col("held").alias("value"),
            F.col("failed_line"),
            F.col("top_epoch").alias("epoch"),
        ),
    )


# -- what consumers read --------------------------------------------------------------------


def _inconsistent_reads(
    plan: _Plan, reads: DataFrame, records: DataFrame, offsets: DataFrame
) -> DataFrame | None:
    """Reads whose value the partition's log does not hold at their offset: the reads
    left-joined to ``offsets`` on (partition, offset), the second largest join after the
    acknowledgements'. The log's record at an offset is its top version, as for lost_ack
    (where replicas disagree below the HW, divergence says so apart; ``still_held`` names
    the replicas that hold the read value there all the same). Reads below the log start
    offset are not judged (retention). A read past the checkpointed HW whose record the log
    holds is consistent: the checkpoint lags the HW consumers were served up to."""
    tops = offsets.select("pid", "offset", "top_epoch", "top_vh")
    suspects = plan.few(
        reads.filter(F.col("offset") >= F.col("log_start"))
        .select(
            "pid",
            "offset",
            "vh",
            "value",
            "line",
            "time",
            "process",
            "session",
            "replicas",
            "max_leo",
            "committed_end",
        )
        .join(tops, ["pid", "offset"], "left")
        .filter(F.col("top_epoch").isNull() | ~F.col("top_vh").eqNullSafe(F.col("vh")))
    )
    if suspects is None:
        return None
    return _value_not_held_item(
        suspects,
        records,
        offsets,
        "inconsistent_read",
        ["process"],
        ["session", "max_leo", "committed_end"],
    )


def _polls(
    plan: _Plan, reads: DataFrame, batches: DataFrame, parts: DataFrame
) -> list[DataFrame | None]:
    """nonmonotonic_poll and poll_skip items from the steps of each poll stream (a
    partition's reads by one process in one session, :mod:`chaos.audit.polls`) that are
    not one offset up. Spark partitions the reads by stream and sorts them in the order
    they were written; :func:`~chaos.audit.polls.poll_steps` walks each partition in the
    executors. The steps are few (a healthy consumer takes none), cached."""
    streams = reads.select(*ORDER, "offset").repartition(*STREAM).sortWithinPartitions(*ORDER).rdd
    steps = plan.few(
        plan.spark.createDataFrame(
            streams.mapPartitions(poll_steps), POLL_STEP_SCHEMA, verifySchema=False
        )
    )
    if steps is None:
        return [None, None]
    back = steps.filter(F.col("what") != "skip").join(parts, "pid")
    nonmonotonic = _item(
        back,
        "nonmonotonic_poll",
        brokers=F.col("replicas"),
        start=F.col("offset"),
        end=F.col("previous"),
        n=F.lit(1),
        key=F.struct("what", "process", "session"),
        info=F.struct("previous", "offset", "previous_line", "line"),
        t=F.col("time"),
    )
    return [nonmonotonic, _poll_skips(plan, steps.filter(F.col("what") == "skip"), batches, parts)]


def _poll_skips(
    plan: _Plan, skips: DataFrame, batches: DataFrame, parts: DataFrame
) -> DataFrame | None:
    """The skips (a read more than one offset above the previous one in its stream) over
    committed offsets the log holds: each skip's open range (previous, offset) cut by the
    held ranges of its partition (:func:`_held_ranges`). A skip over offsets no replica
    holds (a gap) or past the committed end is no violation."""
    pids = plan.few(skips.select("pid").distinct())
    if pids is None:
        return None
    held = _held_ranges(batches, pids, parts)
    step = ["pid", "process", "session", "previous", "offset", "previous_line", "line", "time"]
    skipped = (
        held.join(skips, "pid")
        .filter((F.col("first") < F.col("offset")) & (F.col("last") > F.col("previous")))
        .select(
            *step,
            F.greatest("first", F.col("previous") + 1).alias("skipped_first"),
            F.least("last", F.col("offset") - 1).alias("skipped_last"),
        )
        .groupBy(*step)
        .agg(
            F.min("skipped_first").alias("skipped_first"),
            F.max("skipped_last").alias("skipped_last"),
            F.sum(F.col("skipped_last") - F.col("skipped_first") + 1).alias("skipped"),
        )
        .join(parts, "pid")
    )
    return _item(
        skipped,
        "poll_skip",
        brokers=F.col("replicas"),
        start=F.col("skipped_first"),
        end=F.col("skipped_last"),
        n=F.col("skipped"),
        key=F.struct("process", "session"),
        info=F.struct("previous", "offset", "previous_line", "line", "committed_end"),
        t=F.col("time"),
    )


def _held_ranges(batches: DataFrame, pids: DataFrame, parts: DataFrame) -> DataFrame:
    """The committed offsets the log holds in the partitions of ``pids`` (a few), as
    [first, last] ranges: the valid batches of every replica merged where they touch or
    overlap, cut to [log start, committed end). One row per batch, so a few per 100
    records: small next to the records."""
    valid = (
        batches.filter((F.col("kind") == "batch") & F.col("problem").isNull())
        .join(pids, "pid")
        .select("pid", "base_offset", "last_offset")
    )
    return (
        _numbered_runs(valid, ["pid"], "base_offset", "last_offset")
        .groupBy("pid", "_run")
        .agg(F.min("base_offset").alias("first"), F.max("last_offset").alias("last"))
        .join(parts, "pid")
        .select(
            "pid",
            F.greatest("first", "log_start").alias("first"),
            F.least("last", F.col("committed_end") - 1).alias("last"),
        )
        .filter(F.col("first") <= F.col("last"))
    )
