"""What each replica's batch headers say, judged on the driver: gaps, CRC failures, the epoch
cache, the high watermark, and the replica's summary.

The scan job returns every segment's batches as columns (:class:`~chaos.audit.segments.
SegmentScan`: a few dozen bytes per batch of, typically, hundreds of records), so the
driver holds each replica's batch table in file order (:class:`ReplicaLog`) and walks it
with numpy. These checks need the batches only, never the records:

- gap: a batch that does not start right after the previous one (in file order) ends, or
  that overlaps it;
- crc: batches failing their CRC or record count, and unframeable data inside a segment
  that is not the replica's last (a torn tail of the last one is what a crash leaves);
- epoch_cache: the epoch changes of the batches against the leader-epoch-checkpoint;
- hw_above_leo: a checkpointed high watermark past the log end.

The chunk tasks (:mod:`chaos.audit.chunk`) get from here the batches of each replica that
overlap their offset range (:meth:`ReplicaLog.chunk`), and poll skips are judged against
the partition's held ranges (:func:`held_ranges`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

import numpy as np
import numpy.typing as npt

from chaos.audit.data_dirs import ReplicaFiles
from chaos.audit.model import ReplicaSummary, TornTail
from chaos.audit.runs import Run, item
from chaos.audit.segments import SegmentScan, Stop

__all__ = [
    "BatchTable",
    "ReplicaLog",
    "batch_end",
    "bounds",
    "comparable_entries",
    "held_ranges",
    "log_items",
    "replica_logs",
    "summarize",
]

I64 = npt.NDArray[np.int64]


@dataclass(slots=True)
class BatchTable:
    """Batches as columns (a replica's, or the part of it a chunk reads)."""

    segment: I64
    """Index of the batch's segment file in the replica's ``segments``."""
    position: I64
    size: I64
    base_offset: I64
    last_offset: I64
    epoch: I64
    record_count: I64
    compressed: npt.NDArray[np.bool_]
    valid: npt.NDArray[np.bool_]
    """Passes its CRC and record count checks."""
    flags: I64
    """The transactional and control attribute bits."""
    producer_id: I64
    producer_epoch: I64
    max_timestamp: I64
    control_type: I64
    """A control batch's marker (0 abort, 1 commit; :data:`~chaos.audit.segments.NOT_CONTROL`
    for a data batch)."""

    def __len__(self) -> int:
        return len(self.position)

    def take(self, chosen: npt.NDArray[np.intp]) -> BatchTable:
        return BatchTable(*(getattr(self, f.name)[chosen] for f in fields(BatchTable)))

    @staticmethod
    def empty() -> BatchTable:
        z = np.zeros(0, dtype=np.int64)
        no = np.zeros(0, np.bool_)
        return BatchTable(z, z, z, z, z, z, z, no, no, z, z, z, z, z)

    @staticmethod
    def concat(tables: Sequence[BatchTable]) -> BatchTable:
        if not tables:
            return BatchTable.empty()
        return BatchTable(
            *(np.concatenate([getattr(t, f.name) for t in tables]) for f in fields(BatchTable))
        )


@dataclass(slots=True)
class ReplicaLog:
    """One broker's replica of one partition: its files and its batches in file order."""

    index: int
    """In the audit's replica table."""
    pid: int
    files: ReplicaFiles
    batches: BatchTable
    problems: dict[int, str] = field(default_factory=dict)
    """Batch index -> why it fails its CRC or record count check."""
    stops: list[tuple[int, Stop]] = field(default_factory=list)
    """(segment index, where and why its walk stopped early)."""

    @property
    def broker(self) -> int:
        return self.files.broker

    def chunk(self, low: int, high: int) -> BatchTable:
        """The valid batches holding offsets in [low, high)."""
        b = self.batches
        return b.take(np.flatnonzero(b.valid & (b.last_offset >= low) & (b.base_offset < high)))


_TRANSACTION_COLUMNS = ("flags", "producer_id", "producer_epoch", "max_timestamp", "control_type")
"""The columns a scan and a table share for the transaction checks."""


def replica_logs(
    replicas: Sequence[ReplicaFiles], pids: Sequence[int], scans: Sequence[SegmentScan]
) -> list[ReplicaLog]:
    """Each replica's scans put together in file order (segments by base offset)."""
    by_replica: dict[int, list[SegmentScan]] = defaultdict(list)
    for scan in scans:
        by_replica[scan.task.replica].append(scan)
    logs = []
    for index, (files, pid) in enumerate(zip(replicas, pids, strict=True)):
        segment_of = {s.base_offset: i for i, s in enumerate(files.segments)}
        parts = sorted(by_replica.get(index, []), key=lambda s: s.task.base_offset)
        problems: dict[int, str] = {}
        stops = []
        at = 0
        for scan in parts:
            for i, problem in scan.problems.items():
                problems[at + i] = problem
            if scan.stop is not None:
                stops.append((segment_of[scan.task.base_offset], scan.stop))
            at += len(scan)

        def joined(name: str, parts: list[SegmentScan] = parts) -> I64:
            return np.concatenate([getattr(s, name) for s in parts] or [np.zeros(0, np.int64)])

        count = at
        valid = np.ones(count, dtype=np.bool_)
        valid[list(problems)] = False
        segment = np.concatenate(
            [np.full(len(s), segment_of[s.task.base_offset], np.int64) for s in parts]
            or [np.zeros(0, np.int64)]
        )
        compressed = np.concatenate(
            [s.compressed for s in parts] or [np.zeros(0, np.bool_)]
        ).astype(np.bool_)
        table = BatchTable(
            segment,
            joined("position"),
            joined("size"),
            joined("base_offset"),
            joined("last_offset"),
            joined("epoch"),
            joined("record_count"),
            compressed,
            valid,
            *(joined(name) for name in _TRANSACTION_COLUMNS),
        )
        logs.append(ReplicaLog(index, pid, files, table, problems, stops))
    return logs


def bounds(files: ReplicaFiles, end: int | None) -> tuple[int, int]:
    """A replica's (log start offset, log end offset): ``end`` is one past the last offset
    of its batches (None when it has none); the LEO is at least its last segment's base, the
    log start the checkpoint's or its first segment's base, at most the LEO."""
    first_base = (
        files.segments[0].base_offset if files.segments else files.log_start_checkpoint or 0
    )
    last_base = files.segments[-1].base_offset if files.segments else first_base
    leo = max(end, last_base) if end is not None else last_base
    log_start = max(files.log_start_checkpoint or 0, first_base)
    return min(log_start, leo), leo


def batch_end(table: BatchTable) -> int | None:
    """One past the last offset of the batches (None for none)."""
    return int(table.last_offset.max()) + 1 if len(table) else None


def summarize(log: ReplicaLog) -> ReplicaSummary:
    """The replica's summary; ``records`` is filled in once the chunks have decoded them."""
    r = log.files
    b = log.batches
    log_start, leo = bounds(r, batch_end(b))
    torn = None
    torn_stops = [(i, s) for i, s in log.stops if s.kind == "torn"]
    if torn_stops:
        i, stop = max(torn_stops, key=lambda t: (r.segments[t[0]].base_offset, t[1]))
        torn = TornTail(r.segments[i].path.name, stop.position, stop.remaining, stop.problem)
    return ReplicaSummary(
        broker=r.broker,
        log_start_offset=log_start,
        log_end_offset=leo,
        high_watermark=r.high_watermark,
        batches=len(b),
        records=0,
        compressed_batches=int((b.compressed & b.valid).sum()),
        epoch_starts=_epoch_starts(b),
        checkpoint_epochs=[(e.epoch, e.start_offset) for e in r.epoch_entries],
        first_batch_offset=int(b.base_offset.min()) if len(b) else None,
        torn_tail=torn,
    )


def _epoch_starts(b: BatchTable) -> list[tuple[int, int]]:
    """(epoch, first offset) of each run of batches of one leader epoch (epochs >= 0 only),
    in file order, sorted by offset."""
    stamped = np.flatnonzero(b.epoch >= 0)
    epochs = b.epoch[stamped]
    change = np.ones(len(stamped), dtype=np.bool_)
    change[1:] = epochs[1:] != epochs[:-1]
    starts = sorted(
        zip(b.base_offset[stamped][change].tolist(), epochs[change].tolist(), strict=True)
    )
    return [(epoch, start) for start, epoch in starts]


def comparable_entries(summary: ReplicaSummary) -> list[tuple[int, int]]:
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


def log_items(log: ReplicaLog, summary: ReplicaSummary) -> list[Run]:
    """The gap, crc, epoch_cache and hw_above_leo items of one replica."""
    return [
        *_gaps(log),
        *_corruption(log),
        *_epoch_cache(log, summary),
        *_hw_above_leo(log, summary),
    ]


def _segment_base(log: ReplicaLog, i: int) -> int:
    return log.files.segments[i].base_offset


def _gaps(log: ReplicaLog) -> list[Run]:
    b = log.batches
    if len(b) < 2:
        return []
    previous_end = b.last_offset[:-1]
    base = b.base_offset[1:]
    found = []
    for i in np.flatnonzero(base != previous_end + 1):
        j = int(i) + 1
        prev, first, last = int(previous_end[i]), int(base[i]), int(b.last_offset[j])
        gap = first > prev + 1
        end = first - 1 if gap else min(prev, last)
        start = prev + 1 if gap else first
        found.append(
            item(
                "gap",
                log.pid,
                (log.broker,),
                {"what": "gap" if gap else "overlap"},
                start,
                end,
                end - start + 1,
                {
                    "segment": _segment_base(log, int(b.segment[j])),
                    "position": int(b.position[j]),
                    "previous_end": prev,
                    "base_offset": first,
                    "last_offset": last,
                },
            )
        )
    return found


def _corruption(log: ReplicaLog) -> list[Run]:
    b = log.batches
    found = []
    for i, problem in log.problems.items():
        found.append(
            item(
                "crc",
                log.pid,
                (log.broker,),
                {"what": "crc" if problem.startswith("CRC") else "count"},
                int(b.base_offset[i]),
                int(b.last_offset[i]),
                int(b.record_count[i]),
                {
                    "segment": _segment_base(log, int(b.segment[i])),
                    "position": int(b.position[i]),
                    "size": int(b.size[i]),
                    "problem": problem,
                },
            )
        )
    for segment, stop in log.stops:
        if stop.kind != "unframed":
            continue
        found.append(
            item(
                "crc",
                log.pid,
                (log.broker,),
                {"what": "unframed"},
                stop.next_offset,
                stop.next_offset,
                0,
                {
                    "segment": _segment_base(log, segment),
                    "position": stop.position,
                    "size": stop.remaining,
                    "problem": stop.problem,
                },
            )
        )
    return found


def _epoch_cache(log: ReplicaLog, summary: ReplicaSummary) -> list[Run]:
    """The epoch starts of the batches full-outer-joined with the checkpoint's comparable
    entries on the start offset: a row of either side without its match, or with another
    epoch, is a mismatch; one item per replica (first mismatched start, mismatches)."""
    derived: dict[int, list[int]] = defaultdict(list)
    for epoch, start in summary.epoch_starts:
        derived[start].append(epoch)
    cached: dict[int, list[int]] = defaultdict(list)
    for epoch, start in comparable_entries(summary):
        cached[start].append(epoch)
    mismatches = 0
    first: int | None = None
    for start in derived.keys() | cached.keys():
        ours, theirs = derived.get(start, []), cached.get(start, [])
        bad = sum(a != c for a in ours for c in theirs) if ours and theirs else len(ours or theirs)
        if bad:
            mismatches += bad
            first = start if first is None else min(first, start)
    if first is None:
        return []
    return [
        item(
            "epoch_cache",
            log.pid,
            (log.broker,),
            {"what": "epochs"},
            first,
            first,
            mismatches,
            {"first": first},
        )
    ]


def _hw_above_leo(log: ReplicaLog, summary: ReplicaSummary) -> list[Run]:
    hw, leo = summary.high_watermark, summary.log_end_offset
    if hw is None or hw <= leo:
        return []
    return [
        item(
            "hw_above_leo",
            log.pid,
            (log.broker,),
            {"what": "hw"},
            leo,
            hw - 1,
            hw - leo,
            {"hw": hw, "leo": leo},
        )
    ]


def held_ranges(
    tables: Sequence[BatchTable], log_start: int, committed_end: int
) -> list[tuple[int, int]]:
    """The committed offsets a partition's log holds, as [first, last] ranges: the valid
    batches of every replica merged where they touch or overlap, cut to [log start,
    committed end)."""
    spans = sorted(
        (int(f), int(t))
        for b in tables
        for f, t in zip(b.base_offset[b.valid], b.last_offset[b.valid], strict=True)
    )
    merged: list[list[int]] = []
    for first, last in spans:
        if merged and first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    cut = []
    for first, last in merged:
        first, last = max(first, log_start), min(last, committed_end - 1)
        if first <= last:
            cut.append((first, last))
    return cut
