"""The record-level checks of one offset range of a partition: its replicas' records against
each other and against the history's lines for the range.

A reduce task hands :func:`audit_chunk` a :class:`ChunkSpec` (the partition's facts, the
range, each replica's valid batches in it) and the range's lines (columns,
:class:`~chaos.audit.history_columns.Lines`). The replicas are reduced to their distinct
batch copies (:mod:`chaos.audit.copies`), each decoded once, and the log's version at each
offset found (:mod:`chaos.audit.versions`); then, with numpy:

- lost_ack: ``ok`` lines at or past the log start whose value is not the version at their
  offset, with where the value went (the replicas that still hold it there, the first
  offset that holds it instead);
- phantom: committed versions (in a topic the history writes) that no ``ok`` line put at
  their offset and whose value no ``ok`` or ``info`` line of the partition wrote;
- divergence: offsets below the committed end where the replicas' versions differ;
- duplicate: one write (producer id, epoch, sequence) or, in a topic the history writes,
  one value at several offsets of the partition's versions;
- inconsistent_read: reads whose value is not the version at their offset;
- nonmonotonic_poll, poll_skip: a consumer session's reads that go back, repeat or jump
  over committed records (:func:`poll_items`);
- crc: batches whose records do not parse (or, compressed, do not inflate).

A compacted partition (``ChunkSpec.compaction``) is judged by :mod:`chaos.audit.compaction`'s
rules besides, which also say how lost_ack, the reads and poll skips treat cleaned offsets.

A range is usually the whole partition (``whole``): then everything is settled here but
what needs the rest of the history (:class:`Pending` phantoms when lines without a
partition or fail lines exist, and the text of the values findings show). A partition too
large for one task is cut into ranges (:mod:`chaos.audit.job`); a range then leaves to the
driver what spans the partition: its top hashes for the duplicate check, its lost and
misread lines (where else their value is held), its pending phantoms; :func:`lookup_chunk`
answers the driver's questions about a range afterwards.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from chaos.audit.compaction import (
    COMPACTION_KINDS,
    acked_otherwise,
    compaction_items,
    held_everywhere,
    replica_span,
)
from chaos.audit.copies import Copy, read_copies
from chaos.audit.duplicates import CopyRow, duplicate_items, repeated
from chaos.audit.hashing import NULL, U64
from chaos.audit.history_columns import INFO, OK, READ, Lines
from chaos.audit.log_checks import BatchTable, held_ranges
from chaos.audit.polls import SKIP, WHAT, steps
from chaos.audit.runs import Run, item, merge
from chaos.audit.topic_configs import Compaction
from chaos.audit.transaction_log import COORDINATOR_TOPICS, aborted_ranges, served
from chaos.audit.versions import Offsets, Records, bits, decode_copies, top_versions
from proto.records.compression import CODEC_NAMES

__all__ = [
    "SHOWN_BYTES",
    "ChunkAnswers",
    "ChunkQuestions",
    "ChunkResult",
    "ChunkSpec",
    "PartitionFacts",
    "Pending",
    "ReplicaChunk",
    "Skip",
    "audit_chunk",
    "lookup_chunk",
    "phantom_item",
    "poll_items",
    "shown",
    "skip_item",
]

I64 = npt.NDArray[np.int64]
SHOWN_BYTES = 48
"""Bytes of a value a finding keeps (base64) besides its length."""


def shown(value: bytes | bytearray | memoryview | None) -> Any:
    """A value for a sentence: its first bytes (base64) and its length; None when null."""
    if value is None:
        return None
    return {"b64": base64.b64encode(bytes(value[:SHOWN_BYTES])).decode(), "len": len(value)}


def _clean(fields: dict[str, Any]) -> dict[str, Any]:
    """Fields without the null ones (a finding leaves them out)."""
    return {k: v for k, v in fields.items() if v is not None}


@dataclass(frozen=True, slots=True)
class PartitionFacts:
    """What every task of a partition knows of it (from its replicas' batch headers)."""

    pid: int
    topic: str
    partition: int
    committed_end: int
    """The largest checkpointed HW among the replicas, bounded by their largest LEO."""
    log_start: int
    max_leo: int
    replicas: tuple[int, ...]
    """The brokers holding the partition, in order."""
    in_history: bool
    """The history's producers wrote to the topic (phantoms and value duplicates are
    judged only then)."""


@dataclass(slots=True)
class ReplicaChunk:
    """One replica's batches holding offsets of the range."""

    broker: int
    paths: list[str]
    """The replica's segment files, indexed by ``batches.segment``."""
    batches: BatchTable
    modified_ms: int | None = None
    """Its newest segment's modification time (a tombstone's age is judged by it)."""


@dataclass(slots=True)
class ChunkSpec:
    """One range of a partition's offsets, [low, high), across its replicas."""

    part: PartitionFacts
    low: int
    high: int
    whole: bool
    """The range is the whole partition: questions about the partition (where else a value
    is held, which values repeat) are answered here."""
    replicas: list[ReplicaChunk]
    topic_settled: bool = True
    """No line of the topic lacks a partition and none failed: a phantom the range finds
    is final (else the driver asks the whole history)."""
    compaction: Compaction | None = None
    """Compacted: judged by :mod:`chaos.audit.compaction` too (a whole partition only)."""


@dataclass(slots=True)
class Pending:
    """A committed version no line of the range wrote: a phantom unless a line elsewhere in
    the history wrote its value; the driver asks, and names a line that says it failed."""

    offset: int
    value: int
    """The value's hash."""
    epoch: int
    shown: Any


@dataclass(slots=True)
class Skip:
    """A poll stream's step over offsets, judged once the partition's held ranges are
    known."""

    process: int
    session: int
    previous: int
    offset: int
    previous_line: int
    line: int
    time: float


@dataclass(slots=True)
class ChunkResult:
    """What a range's task returns to the driver."""

    pid: int
    runs: list[Run] = field(default_factory=list)
    records: dict[int, int] = field(default_factory=dict)
    """Broker -> records of its replica decoded in the range."""
    acked_checked: int = 0
    """``ok`` lines at or past the log start offset (checked against the log)."""
    pending: list[Pending] = field(default_factory=list)
    value_lines: list[int] = field(default_factory=list)
    """History lines whose value a run shows (the driver reads their text)."""
    unresolved: list[tuple[Run, int]] = field(default_factory=list)
    """A cut partition's lost_ack and inconsistent_read items, each with its value's hash:
    where else the partition holds the value is the driver's question."""
    hashes: dict[str, U64] = field(default_factory=dict)
    """A cut partition's version hashes (``write``; ``value`` in a topic the history
    writes): the driver finds those held at several offsets."""


@dataclass(slots=True)
class ChunkQuestions:
    """What the driver asks a cut partition's ranges after the job."""

    moved: set[int] = field(default_factory=set)
    """Value hashes: the first offset of the range whose version holds each."""
    writes: set[int] = field(default_factory=set)
    """Write hashes held at several offsets: their copies (:data:`CopyRow`)."""
    values: set[int] = field(default_factory=set)


@dataclass(slots=True)
class ChunkAnswers:
    moved: dict[int, int] = field(default_factory=dict)
    writes: list[CopyRow] = field(default_factory=list)
    values: list[CopyRow] = field(default_factory=list)


class _Chunk:
    """The range's records once read and decoded, and the checks over them."""

    def __init__(self, spec: ChunkSpec, lines: Lines) -> None:
        self.spec = spec
        self.part = spec.part
        self.brokers = [r.broker for r in spec.replicas]
        self.lines = lines
        self.copies: list[Copy] = read_copies(
            [r.paths for r in spec.replicas], [r.batches for r in spec.replicas], spec.low
        )
        self.compacted = spec.compaction is not None and spec.whole
        decoded = decode_copies(
            self.copies, len(self.brokers), spec.low, spec.high, keys=self.compacted
        )
        self.counts = dict(zip(self.brokers, decoded.counts, strict=True))
        self.errors = decoded.errors
        self.records: Records
        self.offsets: Offsets
        self.records, self.offsets = top_versions(decoded.records)

    def value_bytes(self, record: int) -> bytes | None:
        start = int(self.records.value_start[record])
        if start < 0:
            return None
        data = self.copies[int(self.records.copy[record])].data
        return bytes(data[start : start + int(self.records.value_length[record])])

    def shown_record(self, record: int) -> Any:
        return shown(self.value_bytes(record))

    def shown_key(self, record: int) -> Any:
        """The record's key, shown (a compacted partition's records only have theirs)."""
        r = self.records
        if r.key_start is None or r.key_length is None or r.key_start[record] < 0:
            return None
        start, data = int(r.key_start[record]), self.copies[int(r.copy[record])].data
        return shown(data[start : start + int(r.key_length[record])])

    def holders_of(self, mask: int) -> list[int]:
        return sorted(self.brokers[r] for r in bits(mask))

    def locate(self, offsets: I64) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
        """Index into ``self.offsets`` of each offset, and whether the range holds it."""
        held = self.offsets.offset
        index = np.searchsorted(held, offsets)
        inside = index < len(held)
        found = np.zeros(len(offsets), dtype=np.bool_)
        found[inside] = held[index[inside]] == offsets[inside]
        return np.where(found, index, 0), found

    def agree(
        self, chosen: npt.NDArray[np.intp]
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
        """For the lines ``chosen``: the index of their offset's version and whether it
        holds the line's value."""
        index, found = self.locate(self.lines.offset[chosen])
        if not found.any():
            return index, found
        agree = found & (self.offsets.top_value[index] == self.lines.value[chosen])
        keys, named = self.records.key, self.lines.key
        if self.compacted and keys is not None and named is not None:
            held = keys[self.offsets.top_record[index]]
            agree &= (named[chosen] == NULL) | (held == named[chosen])
        return index, agree

    def run(self) -> ChunkResult:
        part, lines, whole = self.part, self.lines, self.spec.whole
        result = ChunkResult(part.pid, records=self.counts)
        items: list[Run] = [*self._crc(), *self._divergence()]
        ok = np.flatnonzero((lines.kind == OK) & (lines.offset >= part.log_start))
        result.acked_checked = len(ok)
        index, agree = self.agree(ok)
        lost = ok[~agree]
        if self.compacted:  # what no replica holds any more is the compaction checks'
            lost = lost[~self._cleaned_away(lost)]
        not_held = self._not_held(lost, "lost_ack")
        confirmed = np.zeros(len(self.offsets.offset), dtype=np.bool_)
        confirmed[index[agree]] = True
        items += self._phantoms(confirmed, result)
        reads = np.flatnonzero((lines.kind == READ) & (lines.offset >= part.log_start))
        _, agree = self.agree(reads)
        misread = reads[~agree]
        if self.compacted:
            misread = misread[~self._cleaned_away(misread) | acked_otherwise(lines, misread)]
        not_held += self._not_held(misread, "inconsistent_read")
        if whole:
            items += [run for run, _ in not_held]
            items += self._duplicates()
            found_polls, skips = poll_items(part, lines)
            items += found_polls
            if self.compacted:
                items += self._compaction(skips)
            elif skips:
                tables = [served(r.batches) for r in self.spec.replicas]
                held = held_ranges(tables, part.log_start, part.committed_end)
                items += [s for s in (skip_item(part, skip, held) for skip in skips) if s]
        else:
            result.unresolved = not_held
            written = (self.offsets.top_write != NULL) & (part.topic not in COORDINATOR_TOPICS)
            result.hashes = {"write": self.offsets.top_write[written]}
            if part.in_history:
                result.hashes["value"] = self.offsets.top_value[self.offsets.top_value != NULL]
        result.runs = merge(items)
        result.value_lines = [
            info["line"]
            for run in [*result.runs, *(r for r, _ in result.unresolved)]
            if run.kind in _VALUE_LINE_KINDS
            for info in (run.first, run.last)
            if "line" in info
        ]
        return result

    def _cleaned_away(self, chosen: npt.NDArray[np.intp]) -> npt.NDArray[np.bool_]:
        """Of the lines ``chosen``: those whose offset no replica holds, below the log end
        (on a compacted partition, a cleaning may have removed it everywhere)."""
        offsets = self.lines.offset[chosen]
        return ~self.locate(offsets)[1] & (offsets < self.part.max_leo)

    def _compaction(self, skips: Sequence[Skip]) -> list[Run]:
        """The compaction rules' items, and the skips over records every replica holds."""
        part, policy = self.part, self.spec.compaction
        assert policy is not None
        spans = [replica_span(r.broker, r.batches, r.modified_ms) for r in self.spec.replicas]
        found = compaction_items(
            part, policy, spans, self.records, self.offsets, self.lines,
            self.shown_record, self.shown_key,
            aborted_ranges([r.batches for r in self.spec.replicas]),
        )  # fmt: skip
        held = held_everywhere(
            self.records, self.offsets, spans, part.log_start, part.committed_end
        )
        for skip in skips:
            lo, hi = np.searchsorted(held, [skip.previous + 1, skip.offset]).tolist()
            if hi > lo:
                found.append(skip_run(part, skip, int(held[lo]), int(held[hi - 1]), hi - lo))
        return found

    def _crc(self) -> list[Run]:
        found = []
        for c, b, reason in self.errors:
            copy = self.copies[c]
            h = copy.batches[b][1]
            if b in copy.errors:
                problem = f"its CRC holds but its records do not inflate: {reason}"
            elif copy.codecs and copy.codecs[b]:
                codec = CODEC_NAMES[copy.codecs[b]]
                problem = f"its CRC holds but its records, inflated ({codec}), do not parse: "
                problem += reason
            else:
                problem = f"its CRC holds but its records do not parse: {reason}"
            for r in bits(copy.holders[b]):
                found.append(
                    item(
                        "crc",
                        self.part.pid,
                        (self.brokers[r],),
                        {"what": "records"},
                        h.base_offset,
                        h.last_offset,
                        h.last_offset - h.base_offset + 1,
                        {"problem": problem},
                    )
                )
        return found

    def _divergence(self) -> list[Run]:
        o, r, part = self.offsets, self.records, self.part
        chosen = np.flatnonzero(
            o.disputed & (o.offset >= part.log_start) & (o.offset < part.committed_end)
        )
        found = []
        for i in chosen.tolist():
            rows = []
            for k in o.records(i):
                value = self.shown_record(k)
                for broker in self.holders_of(int(r.holders[k])):
                    rows.append((broker, int(r.epoch[k]), int(r.digest[k]), value))
            rows.sort(key=lambda v: (v[0], v[1], v[2], _shown_order(v[3])))
            offset = int(o.offset[i])
            found.append(
                item(
                    "divergence",
                    part.pid,
                    [b for b, *_ in rows],
                    {"sig": [{"broker": b, "epoch": e} for b, e, _, _ in rows]},
                    offset,
                    offset,
                    1,
                    {
                        "versions": [
                            _clean({"broker": b, "epoch": e, "digest": d, "value": v})
                            for b, e, d, v in rows
                        ],
                        "committed_end": part.committed_end,
                    },
                )
            )
        return found

    def first_offsets(self, values: Iterable[int]) -> dict[int, int]:
        """The first offset of the range whose version holds each value (hash)."""
        o = self.offsets
        wanted = np.fromiter(values, dtype=np.uint64)
        first: dict[int, int] = {}
        for at in np.flatnonzero(np.isin(o.top_value, wanted)).tolist():
            first.setdefault(int(o.top_value[at]), int(o.offset[at]))
        return first

    def _not_held(self, chosen: npt.NDArray[np.intp], kind: str) -> list[tuple[Run, int]]:
        """Items (with their value's hash) for history lines whose value the log does not
        hold at their offset (an acknowledged write or a read), with where the value is
        instead when the range is the whole partition."""
        if not len(chosen):
            return []
        part, o, r, lines = self.part, self.offsets, self.records, self.lines
        index, found = self.locate(lines.offset[chosen])
        wanted = lines.value[chosen]
        moved = self.first_offsets(wanted.tolist()) if self.spec.whole else {}
        found_items = []
        for n, line in enumerate(chosen.tolist()):
            offset = int(lines.offset[line])
            value = int(wanted[n])
            held_epoch = held = None
            still: list[int] = []
            if found[n]:
                i = int(index[n])
                held_epoch = int(o.top_epoch[i])
                held = self.shown_record(int(o.top_record[i]))
                mask = 0
                for k in o.records(i):
                    if int(r.value[k]) == value:
                        mask |= int(r.holders[k])
                still = self.holders_of(mask)
            reason = (
                "replaced"
                if found[n]
                else "beyond_leo"
                if offset >= part.max_leo
                else "cleaned"
                if self.compacted
                else "missing"
            )
            found_items.append(
                (
                    not_held_item(
                        kind,
                        part,
                        lines,
                        line,
                        reason,
                        still,
                        held,
                        held_epoch,
                        moved.get(value),
                    ),
                    value,
                )
            )
        return found_items

    def _phantoms(self, confirmed: npt.NDArray[np.bool_], result: ChunkResult) -> list[Run]:
        """Committed versions that no ``ok`` line put at their offset and whose value no
        ``ok`` or ``info`` line of the range wrote (the rest of the history is the driver's
        to ask unless the range is the whole partition and the topic is settled)."""
        part, o = self.part, self.offsets
        if not part.in_history:
            return []
        candidates = np.flatnonzero(
            ~confirmed & (o.offset >= part.log_start) & (o.offset < part.committed_end)
        )
        if not len(candidates):
            return []
        lines = self.lines
        writes = lines.value[(lines.kind == OK) | (lines.kind == INFO)]
        candidates = candidates[~np.isin(o.top_value[candidates], writes)]
        final = self.spec.whole and self.spec.topic_settled
        found = []
        for i in candidates.tolist():
            pending = Pending(
                int(o.offset[i]),
                int(o.top_value[i]),
                int(o.top_epoch[i]),
                self.shown_record(int(o.top_record[i])),
            )
            if final:
                found.append(phantom_item(part, pending, None))
            else:
                result.pending.append(pending)
        return found

    def copies_of(
        self, hashes: U64, wanted: Iterable[int], exact: Callable[[int], Any]
    ) -> list[CopyRow]:
        """The versions whose hash is one of ``wanted`` (records whose epoch is their
        offset's top epoch), one row per exact fields and offset."""
        o, r, shown = self.offsets, self.records, self.shown_record
        top_epoch = np.repeat(o.top_epoch, o.count)
        picked = np.fromiter(wanted, dtype=np.uint64)
        chosen = np.flatnonzero(np.isin(hashes, picked) & (r.epoch == top_epoch))
        rows: dict[tuple[Any, int], tuple[list[int], int]] = {}
        for k in chosen.tolist():
            key = (exact(k), int(r.offset[k]))
            brokers, _ = rows.setdefault(key, ([], k))
            brokers += self.holders_of(int(r.holders[k]))
        return [
            (fields, offset, sorted(set(brokers)), shown(first), tuple(r.producer[first].tolist()))
            for (fields, offset), (brokers, first) in rows.items()
        ]

    def write_copies(self, wanted: Iterable[int]) -> list[CopyRow]:
        r = self.records
        return self.copies_of(r.write, wanted, lambda k: tuple(r.producer[k].tolist()))

    def value_copies(self, wanted: Iterable[int]) -> list[CopyRow]:
        return self.copies_of(self.records.value, wanted, self.value_bytes)

    def _duplicates(self) -> list[Run]:
        """The writes and (in a topic the history writes) values the partition's versions
        hold at several offsets."""
        o = self.offsets
        writes = repeated(o.top_write[:0] if self.part.topic in COORDINATOR_TOPICS else o.top_write)
        values = repeated(o.top_value) if self.part.in_history else np.zeros(0, np.uint64)
        return duplicate_items(
            self.part.pid,
            self.write_copies(writes.tolist()) if len(writes) else [],
            self.value_copies(values.tolist()) if len(values) else [],
            self.part.in_history,
        )


def _shown_order(value: Any) -> tuple[int, str, int]:
    if value is None:
        return (0, "", 0)
    return (1, value["b64"], value["len"])


def not_held_item(
    kind: str,
    part: PartitionFacts,
    lines: Lines,
    line: int,
    reason: str,
    still: list[int],
    held: Any,
    held_epoch: int | None,
    moved_to: int | None,
) -> Run:
    """The lost_ack or inconsistent_read item of one history line (``line``: its index in
    ``lines``)."""
    key: dict[str, Any] = {"reason": reason}
    if kind == "inconsistent_read":
        key["process"] = int(lines.process[line])
    key.update(_clean({"still_held": still or None}))
    key["moved"] = moved_to is not None
    key.update(_clean({"held_epoch": held_epoch}))
    info = _clean({"held": held, "moved_to": moved_to, "line": int(lines.line[line])})
    if kind == "inconsistent_read":
        info["session"] = int(lines.session[line])
        info["max_leo"] = part.max_leo
        info["committed_end"] = part.committed_end
    else:
        info["max_leo"] = part.max_leo
    offset = int(lines.offset[line])
    return item(
        kind, part.pid, part.replicas, key, offset, offset, 1, info, float(lines.time[line])
    )


def phantom_item(part: PartitionFacts, pending: Pending, failed_line: int | None) -> Run:
    """The phantom finding of a committed version no line wrote (``failed_line``: a line
    that says its write failed)."""
    return item(
        "phantom",
        part.pid,
        part.replicas,
        {"reason": "failed" if failed_line is not None else "unwritten"},
        pending.offset,
        pending.offset,
        1,
        _clean({"value": pending.shown, "failed_line": failed_line, "epoch": pending.epoch}),
    )


def poll_items(part: PartitionFacts, lines: Lines) -> tuple[list[Run], list[Skip]]:
    """nonmonotonic_poll items from the steps of each poll stream (a partition's reads by one
    process in one session, :mod:`chaos.audit.polls`) that are not one offset up, and the
    skips, judged against the held ranges (:func:`skip_item`)."""
    reads = np.flatnonzero(lines.kind == READ)
    if len(reads) < 2:
        return [], []
    before, after, kind = steps(
        lines.process[reads],
        lines.session[reads],
        lines.time[reads],
        lines.line[reads],
        lines.offset[reads],
    )
    found: list[Run] = []
    skips: list[Skip] = []
    for b, a, k in zip(reads[before].tolist(), reads[after].tolist(), kind.tolist(), strict=True):
        previous, offset = int(lines.offset[b]), int(lines.offset[a])
        process, session = int(lines.process[a]), int(lines.session[a])
        previous_line, line = int(lines.line[b]), int(lines.line[a])
        t = float(lines.time[a])
        if k == SKIP:
            skips.append(Skip(process, session, previous, offset, previous_line, line, t))
            continue
        found.append(
            item(
                "nonmonotonic_poll",
                part.pid,
                part.replicas,
                {"what": WHAT[k], "process": process, "session": session},
                offset,
                previous,
                1,
                {
                    "previous": previous,
                    "offset": offset,
                    "previous_line": previous_line,
                    "line": line,
                },
                t,
            )
        )
    return found, skips


def skip_item(part: PartitionFacts, skip: Skip, held: Sequence[tuple[int, int]]) -> Run | None:
    """The poll_skip item of a step over committed offsets the log holds (``held``: the
    partition's held ranges); None for a skip over offsets no replica holds (a gap) or past
    the committed end."""
    cut = [
        (max(first, skip.previous + 1), min(last, skip.offset - 1))
        for first, last in held
        if first < skip.offset and last > skip.previous
    ]
    if not cut:
        return None
    return skip_run(
        part,
        skip,
        min(c[0] for c in cut),
        max(c[1] for c in cut),
        sum(c[1] - c[0] + 1 for c in cut),
    )


def skip_run(part: PartitionFacts, skip: Skip, first: int, last: int, count: int) -> Run:
    """The poll_skip item of a step over ``count`` committed records from ``first`` to
    ``last``."""
    return item(
        "poll_skip",
        part.pid,
        part.replicas,
        {"process": skip.process, "session": skip.session},
        first,
        last,
        count,
        {
            "previous": skip.previous,
            "offset": skip.offset,
            "previous_line": skip.previous_line,
            "line": skip.line,
            "committed_end": part.committed_end,
        },
        skip.time,
    )


_VALUE_LINE_KINDS = frozenset({"lost_ack", "inconsistent_read", *COMPACTION_KINDS})
"""The kinds whose items show the value of the history line they name."""


def audit_chunk(spec: ChunkSpec, lines: Lines) -> ChunkResult:
    """Audit one range: the replicas' records against each other and against its lines."""
    return _Chunk(spec, lines).run()


def lookup_chunk(spec: ChunkSpec, questions: ChunkQuestions) -> ChunkAnswers:
    """A cut partition's range asked again after the job: the first offset holding each
    moved value, the copies of writes and values held at several offsets."""
    chunk = _Chunk(spec, Lines.empty())
    return ChunkAnswers(
        chunk.first_offsets(questions.moved) if questions.moved else {},
        chunk.write_copies(questions.writes) if questions.writes else [],
        chunk.value_copies(questions.values) if questions.values else [],
    )
