"""The record checks of a compacted partition (``cleanup.policy`` with ``compact``,
:mod:`chaos.audit.topic_configs`), as columns (numpy).

Each replica cleans its log on its own schedule (docs/storage.md, "Compacted logs"): a
record goes once its key has a later record in the log, a tombstone (a null value) goes
once it has been clean for ``delete.retention.ms``, and what stays keeps its offset. So a
record missing from one replica is no fault in itself, and two replicas may hold different
records at the same offsets (one cleaned further) without diverging. What must hold, per
replica, over the committed offsets its batches span:

- **compaction_lost_latest**: a record known at an offset (held there by another replica,
  or acknowledged there by an ``ok`` line of the history naming its key) that the replica
  lacks, although the replica holds no later record of its key and no tombstone of the key
  at or after it explains the loss (a known tombstone at a higher offset that the replica
  lacks too: one that expired, and took the older values with it; or an ``info`` tombstone
  write of the key, whose offset nobody knows). Per replica and key only the latest such
  record is reported, with how many older ones are gone too;
- **compaction_moved**: an acknowledged value (or, in a topic the history writes, whose
  values are unique, a value another replica holds) that the replica holds at another
  offset than the one it was acknowledged (or held) at: cleaning never moves a record;
- **tombstone_dropped_early**: a known tombstone the replica lacks, with no later record
  of its key there, while the replica still holds an older record of the key (``stale``:
  the value the tombstone deleted is visible again); or, where the tombstone's timestamp is
  known (another replica holds it) and the topic's ``delete.retention.ms`` too, before it
  could have expired (``retention``): the cleaner drops a tombstone only once its segment
  was last written ``delete.retention.ms`` before the newest clean segment, so never while
  its timestamp (at most its segment's last write) plus ``delete.retention.ms`` is past the
  newest segment modification time of the replica (plus :data:`SLACK_MS`).

What a present record holds is judged as on any partition: lost_ack (an acknowledged offset
holding another record), divergence (replicas holding different records at one offset).
The checks run over the whole partition at once: a compacted partition is never cut into
ranges (:mod:`chaos.audit.job`), since a key's records may lie anywhere in it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from chaos.audit.hashing import NULL, U64, combine
from chaos.audit.history_columns import INFO, OK, Lines
from chaos.audit.log_checks import BatchTable
from chaos.audit.runs import Run, item
from chaos.audit.topic_configs import Compaction
from chaos.audit.transaction_log import in_ranges
from chaos.audit.versions import Offsets, Records

__all__ = [
    "COMPACTION_KINDS",
    "SLACK_MS",
    "Partition",
    "ReplicaSpan",
    "acked_otherwise",
    "compaction_items",
    "held_everywhere",
    "replica_span",
]

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
COMPACTION_KINDS = ("compaction_lost_latest", "compaction_moved", "tombstone_dropped_early")
SLACK_MS = 2000
"""Allowed between a record's timestamp (the producer's clock) and a segment's
modification time (the broker's file system) before a tombstone's age is doubted."""
_NONE = -1


class Partition(Protocol):
    """What the rules need of the partition (:class:`chaos.audit.chunk.PartitionFacts`)."""

    @property
    def pid(self) -> int: ...
    @property
    def log_start(self) -> int: ...
    @property
    def committed_end(self) -> int: ...
    @property
    def in_history(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class ReplicaSpan:
    """The offsets one replica's batches span, and when it last wrote a segment."""

    broker: int
    low: int
    """The first offset of its first batch."""
    high: int
    """One past the last offset of its last batch (``low`` when it holds none)."""
    modified_ms: int | None
    """Its newest segment file's modification time, None when unknown."""


@dataclass(slots=True)
class _Known:
    """Records known to have been written, as columns: the partition's version at each
    offset its replicas hold, and acknowledged records at offsets none holds."""

    offset: I64
    key: U64
    value: U64
    timestamp: I64
    """-1 when no replica holds the record (an acknowledged one)."""
    record: I64
    """A record holding it (-1: none, known from its ``ok`` line only)."""
    line: I64
    """Index in the lines of an ``ok`` line acknowledging it there (-1: none)."""
    disputed: Mask
    """The replicas hold different records at the offset (divergence): which one is the
    record is not known, so none is looked for elsewhere."""

    def take(self, chosen: Mask | npt.NDArray[np.intp]) -> _Known:
        return _Known(
            self.offset[chosen],
            self.key[chosen],
            self.value[chosen],
            self.timestamp[chosen],
            self.record[chosen],
            self.line[chosen],
            self.disputed[chosen],
        )

    def __len__(self) -> int:
        return len(self.offset)


def _column(values: npt.NDArray[Any] | None, n: int, dtype: type, fill: int) -> Any:
    return np.full(n, fill, dtype=dtype) if values is None else values


def _found(haystack: npt.NDArray[Any], needles: npt.NDArray[Any]) -> tuple[Any, Mask]:
    """Index of each needle in the sorted ``haystack`` (its first occurrence), and whether
    it is there."""
    at = np.searchsorted(haystack, needles)
    inside = at < len(haystack)
    found = np.zeros(len(needles), dtype=np.bool_)
    found[inside] = haystack[at[inside]] == needles[inside]
    return np.where(found, at, 0), found


def _per_key_last(keys: U64, offsets: I64) -> tuple[U64, I64]:
    """The distinct keys (sorted) and the highest offset of each."""
    if not len(keys):
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    order = np.lexsort((offsets, keys))
    keys, offsets = keys[order], offsets[order]
    last = np.flatnonzero(np.append(keys[1:] != keys[:-1], True))
    return keys[last], offsets[last]


def _lookup(keys: U64, values: I64, wanted: U64, missing: int) -> I64:
    at, found = _found(keys, wanted)
    return np.where(found, values[at] if len(values) else missing, missing)


def _known(records: Records, offsets: Offsets, lines: Lines, log_start: int) -> _Known:
    """The known records at or past the log start, by offset (keyed ones only: a record
    without a key goes at any cleaning). At an offset the replicas hold, the record is
    what its ``ok`` line acknowledged (its key, if the line names one, else the log's),
    else the log's version."""
    n = len(records)
    key = _column(records.key, n, np.uint64, NULL)
    timestamp = _column(records.timestamp, n, np.int64, _NONE)
    top = offsets.top_record
    ok = np.flatnonzero((lines.kind == OK) & (lines.offset >= log_start))
    ok = ok[np.argsort(lines.offset[ok], kind="stable")]
    ok_offset = lines.offset[ok]
    line_keys = lines.keys()
    at, acked = _found(ok_offset, offsets.offset)
    line = np.where(acked, ok[at] if len(ok) else 0, _NONE).astype(np.int64)
    if len(ok):
        named = np.where(acked, line_keys[np.maximum(line, 0)], NULL)
        value = np.where(acked, lines.value[np.maximum(line, 0)], offsets.top_value)
    else:
        named, value = np.full(len(line), NULL, np.uint64), offsets.top_value
    held = _Known(
        offsets.offset,
        np.where(named != NULL, named, key[top]),
        value,
        timestamp[top],
        top.astype(np.int64),
        line,
        offsets.disputed,
    )
    _, elsewhere = _found(offsets.offset, ok_offset)
    unheld = ok[~elsewhere]
    unheld = unheld[line_keys[unheld] != NULL]
    only_acked = _Known(
        lines.offset[unheld],
        line_keys[unheld],
        lines.value[unheld],
        np.full(len(unheld), _NONE, np.int64),
        np.full(len(unheld), _NONE, np.int64),
        unheld.astype(np.int64),
        np.zeros(len(unheld), np.bool_),
    )
    known = _Known(
        *(
            np.concatenate([getattr(held, name), getattr(only_acked, name)])
            for name in ("offset", "key", "value", "timestamp", "record", "line", "disputed")
        )
    )
    known = known.take(np.flatnonzero((known.key != NULL) & (known.offset >= log_start)))
    return known.take(np.argsort(known.offset, kind="stable"))


@dataclass(slots=True)
class _Shown:
    """How findings show keys and values."""

    record_value: Callable[[int], Any]
    record_key: Callable[[int], Any]
    key_record: dict[int, int]
    """Key hash -> a record with that key (to show a key no held record at the offset
    has)."""

    def key(self, key_hash: int, record: int) -> Any:
        if record >= 0:
            return self.record_key(record)
        other = self.key_record.get(key_hash)
        return None if other is None else self.record_key(other)


def compaction_items(
    part: Partition,
    policy: Compaction,
    spans: Sequence[ReplicaSpan],
    records: Records,
    offsets: Offsets,
    lines: Lines,
    record_value: Callable[[int], Any],
    record_key: Callable[[int], Any],
    aborted: Sequence[tuple[int, int]] = (),
) -> list[Run]:
    """The compacted partition's items (see the module docstring): ``records`` sorted by
    offset with their keys (:func:`~chaos.audit.versions.decode_copies`' ``keys``),
    ``offsets`` their versions, replica r of ``spans`` bit r of the records' holders;
    ``record_value`` and ``record_key`` show a record's value and key. ``aborted``: the
    offset ranges of aborted transactions' batches, which a cleaning removes (no replica
    owes their records)."""
    pid, committed_end, in_history = part.pid, part.committed_end, part.in_history
    known = _known(records, offsets, lines, part.log_start)
    if aborted:
        known = known.take(np.flatnonzero(~in_ranges(known.offset, aborted)))
    if not len(known):
        return []
    key = _column(records.key, len(records), np.uint64, NULL)
    unique_keys, first_record = np.unique(key, return_index=True)
    shown = _Shown(
        record_value,
        record_key,
        dict(zip(unique_keys.tolist(), first_record.tolist(), strict=True)),
    )
    # Keys with a tombstone write of unknown outcome: it may have been written, expired and
    # taken the key's older records with it, at an offset nobody knows.
    line_keys = lines.keys()
    unsure = np.unique(
        line_keys[(lines.kind == INFO) & (lines.value == NULL) & (line_keys != NULL)]
    )
    tombstone = known.value == NULL
    found: list[Run] = []
    for r, span in enumerate(spans):
        on = (records.holders >> np.uint64(r)) & np.uint64(1) == 1
        found += _replica_items(
            pid, committed_end, in_history, policy, span, known, tombstone, unsure,
            records.offset[on], key[on], records.value[on], lines, shown,
        )  # fmt: skip
    return found


def _replica_items(
    pid: int,
    committed_end: int,
    in_history: bool,
    policy: Compaction,
    span: ReplicaSpan,
    known: _Known,
    tombstone: Mask,
    unsure: U64,
    held_offset: I64,
    held_key: U64,
    held_value: U64,
    lines: Lines,
    shown: _Shown,
) -> list[Run]:
    """One replica's items, from the records it holds (by offset)."""
    at, present = _found(held_offset, known.offset)
    here = present & (held_value[at] == known.value) if len(held_offset) else present
    keyed = held_key != NULL
    keys, last = _per_key_last(held_key[keyed], held_offset[keyed])
    # The replica's latest offset of each known record's key (-1: it holds none).
    latest = _lookup(keys, last, known.key, _NONE)
    superseded = latest > known.offset

    covered = (known.offset >= span.low) & (known.offset < span.high)
    tombstones = tombstone & covered
    t_keys, t_last = _per_key_last(known.key[tombstones], known.offset[tombstones])
    expired_after = _lookup(t_keys, t_last, known.key, _NONE) > known.offset

    by_value = np.argsort(held_value, kind="stable")
    value_at, value_held = _found(held_value[by_value], known.value)
    moved_to = np.where(value_held, held_offset[by_value][value_at] if len(by_value) else 0, -1)
    unique_values = (known.line >= 0) | (in_history & ~known.disputed)
    moved = unique_values & ~tombstone & ~here & value_held & (moved_to != known.offset)

    judged = covered & (known.offset < committed_end) & ~present
    explained = superseded | moved | (~tombstone & (expired_after | np.isin(known.key, unsure)))
    lost = np.flatnonzero(judged & ~tombstone & ~explained)
    dropped = judged & tombstone & ~superseded
    stale = np.flatnonzero(dropped & (latest >= 0))
    aged = np.zeros(0, dtype=np.intp)
    if policy.delete_retention_ms is not None and span.modified_ms is not None:
        limit = span.modified_ms + SLACK_MS - policy.delete_retention_ms
        aged = np.flatnonzero(dropped & (latest < 0) & (known.timestamp >= 0))
        aged = aged[known.timestamp[aged] > limit]

    found = [
        _moved_item(pid, span, known, k, int(moved_to[k]), lines, shown)
        for k in np.flatnonzero(moved).tolist()
    ]
    found += _lost_items(pid, span, known, lost, latest, lines, shown)
    for reason, chosen in (("stale", stale), ("retention", aged)):
        for k in chosen.tolist():
            found.append(
                _dropped_item(pid, span, known, k, reason, int(latest[k]), policy, lines, shown)
            )
    return found


def _facts(known: _Known, k: int, lines: Lines, shown: _Shown) -> tuple[dict[str, Any], Any]:
    """The facts every item shows of known record ``k``, and its acknowledgement's time."""
    record = int(known.record[k])
    line = int(known.line[k])
    info: dict[str, Any] = {"key": shown.key(int(known.key[k]), record)}
    if record >= 0 and int(known.value[k]) != NULL:
        info["value"] = shown.record_value(record)
    t = None
    if line >= 0:
        info["line"] = int(lines.line[line])
        t = float(lines.time[line])
    return {name: v for name, v in info.items() if v is not None}, t


def _lost_items(
    pid: int,
    span: ReplicaSpan,
    known: _Known,
    lost: npt.NDArray[np.intp],
    latest: I64,
    lines: Lines,
    shown: _Shown,
) -> list[Run]:
    """One item per key: its latest lost record, with how many older ones went too."""
    if not len(lost):
        return []
    order = np.lexsort((known.offset[lost], known.key[lost]))
    lost = lost[order]
    keys = known.key[lost]
    last = np.flatnonzero(np.append(keys[1:] != keys[:-1], True))
    older = np.diff(np.concatenate([[-1], last])) - 1
    found = []
    for k, n in zip(lost[last].tolist(), older.tolist(), strict=True):
        info, t = _facts(known, k, lines, shown)
        info["older"] = n
        if latest[k] >= 0:
            info["held"] = int(latest[k])
        info["acked"] = bool(known.line[k] >= 0)
        offset = int(known.offset[k])
        found.append(
            item("compaction_lost_latest", pid, (span.broker,), {}, offset, offset, 1, info, t)
        )
    return found


def _moved_item(
    pid: int, span: ReplicaSpan, known: _Known, k: int, moved_to: int, lines: Lines, shown: _Shown
) -> Run:
    info, t = _facts(known, k, lines, shown)
    info["moved_to"] = moved_to
    offset = int(known.offset[k])
    return item("compaction_moved", pid, (span.broker,), {}, offset, offset, 1, info, t)


def _dropped_item(
    pid: int,
    span: ReplicaSpan,
    known: _Known,
    k: int,
    reason: str,
    visible: int,
    policy: Compaction,
    lines: Lines,
    shown: _Shown,
) -> Run:
    info, t = _facts(known, k, lines, shown)
    if reason == "stale":
        info["visible"] = visible
    else:
        info["timestamp"] = int(known.timestamp[k])
        info["retention_ms"] = policy.delete_retention_ms
        info["newest_segment_ms"] = span.modified_ms
    offset = int(known.offset[k])
    return item(
        "tombstone_dropped_early",
        pid,
        (span.broker,),
        {"reason": reason},
        offset,
        offset,
        1,
        info,
        t,
    )


def replica_span(broker: int, batches: BatchTable, modified_ms: int | None) -> ReplicaSpan:
    """What a replica's batches (those the chunk reads, the whole partition's) span."""
    low = int(batches.base_offset.min()) if len(batches) else 0
    high = int(batches.last_offset.max()) + 1 if len(batches) else low
    return ReplicaSpan(broker, low, high, modified_ms)


def acked_otherwise(lines: Lines, reads: npt.NDArray[np.intp]) -> Mask:
    """Of the reads ``reads``: those at an offset an ``ok`` line acknowledged another value
    at (a read of an offset every replica has cleaned since is judged by that only)."""
    ok = np.flatnonzero(lines.kind == OK)
    if not len(ok) or not len(reads):
        return np.zeros(len(reads), dtype=np.bool_)
    at_offset = np.isin(lines.offset[reads], lines.offset[ok])
    acked = combine(lines.offset[ok], lines.value[ok])
    return at_offset & ~np.isin(combine(lines.offset[reads], lines.value[reads]), acked)


def held_everywhere(
    records: Records, offsets: Offsets, spans: Sequence[ReplicaSpan], low: int, high: int
) -> I64:
    """The offsets in [low, high) at which every replica whose batches span them holds a
    record: what a consumer, whichever replica served it, cannot have skipped (an offset
    some replica lacks may have been cleaned there before the read)."""
    chosen = np.flatnonzero((offsets.offset >= low) & (offsets.offset < high))
    if not len(chosen):
        return np.zeros(0, np.int64)
    at = offsets.offset[chosen]
    holders = np.bitwise_or.reduceat(records.holders, offsets.first)[chosen]
    spanning = np.zeros(len(at), dtype=np.uint64)
    for r, span in enumerate(spans):
        inside = (at >= span.low) & (at < span.high)
        spanning[inside] |= np.uint64(1 << r)
    held: I64 = at[(holders & spanning) == spanning]
    return held
