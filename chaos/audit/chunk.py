"""One Spark task's share of the record-level audit: a partition's replicas over an offset
range, held against the history's lines for that range.

The job routes to each chunk task (:class:`ChunkSpec`) the history lines of its partition
and offset range (:class:`~chaos.audit.history_columns.Lines`, columns), and names the
valid batches of every replica that hold offsets in the range (from the scan job). The
task then:

1. reads those byte ranges of the segment files and compares the replicas batch by batch:
   a batch that is byte-identical in several replicas (followers copy the leader's
   batches whole, offset and epoch included) is one *copy* held by all of them. Runs of
   batches that lie end to end in both files are compared in one ``memcmp``;
2. decodes each copy once (:func:`~chaos.audit.record_columns.decode_columns`) and hashes
   its records' values, writes and versions (:mod:`chaos.audit.hashing`);
3. works out, per offset, the version the log holds: the one with the highest leader
   epoch (the record a leader-epoch truncation makes every replica keep), and whether the
   replicas holding the offset disagree (``disputed``). With one copy of everything, the
   common case, each record is its offset's version and nothing is sorted;
4. judges with numpy: the ``ok`` lines against the versions (lost_ack), the committed
   versions against the lines (phantom), the disputed offsets below the committed end
   (divergence), the values and writes held at several offsets (duplicate), the reads
   (inconsistent_read); records that do not parse are crc findings.

Items are merged into runs here (:mod:`chaos.audit.runs`); what needs the rest of the
history (a phantom's value written by a line without a partition, the line that says it
failed, the text of a line's value) is left to the driver as :class:`Pending` items or
line numbers. A task holds its range's records and lines as columns, tens of bytes each:
the job sizes ranges to bound that (:data:`~chaos.audit.job.CHUNK_OFFSETS`).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from chaos.audit.hashing import NULL, combine, hash_bytes, hash_spans
from chaos.audit.history_columns import INFO, OK, READ, Lines
from chaos.audit.log_checks import BatchTable, held_ranges
from chaos.audit.polls import SKIP, WHAT, steps
from chaos.audit.record_columns import decode_columns
from chaos.audit.runs import Run, item, merge
from chaos.audit.segments import read_range
from proto.record_batch import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader, parse_header

__all__ = [
    "SHOWN_BYTES",
    "ChunkResult",
    "ChunkSpec",
    "PartitionFacts",
    "Pending",
    "ReplicaChunk",
    "audit_chunk",
    "phantom_item",
    "shown",
]

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
SHOWN_BYTES = 48
"""Bytes of a value a finding keeps (base64) besides its length."""
_SHOWN_OFFSETS = 10
"""Offsets a duplicate finding keeps (its count says how many there are)."""
_SEQUENCE_WRAP = 2**31


def shown(value: bytes | bytearray | memoryview | None, length: int | None = None) -> Any:
    """A value for a sentence: its first bytes (base64) and its length; None when null."""
    if value is None:
        return None
    return {
        "b64": base64.b64encode(bytes(value[:SHOWN_BYTES])).decode(),
        "len": len(value) if length is None else length,
    }


def _clean(fields: dict[str, Any]) -> dict[str, Any]:
    """Fields without the null ones (what a finding leaves out, as Spark's to_json did)."""
    return {k: v for k, v in fields.items() if v is not None}


@dataclass(frozen=True, slots=True)
class PartitionFacts:
    """What every task of a partition needs to know of it (from the scan job)."""

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
    """One replica's batches holding offsets of the chunk's range."""

    broker: int
    paths: list[str]
    """The replica's segment files, indexed by ``batches.segment``."""
    batches: BatchTable


@dataclass(slots=True)
class ChunkSpec:
    """One chunk task: a partition's offsets in [low, high) across its replicas."""

    index: int
    part: PartitionFacts
    low: int
    high: int
    whole: bool
    """The range covers the whole partition, so questions about the partition (where
    else a value is held, whether a line wrote it) are answered here."""
    replicas: list[ReplicaChunk]
    topic_settled: bool = True
    """No line of the topic lacks a partition and none failed: a phantom found here is
    final (else the driver asks the whole history, :class:`Pending`)."""


@dataclass(slots=True)
class Pending:
    """A committed version no line of the chunk wrote: a phantom unless a line elsewhere
    in the history (another chunk's, or one without a partition) wrote its value; the
    driver asks, and names the line that says it failed."""

    pid: int
    offset: int
    value: int
    """The value's hash."""
    epoch: int
    shown: Any


@dataclass(slots=True)
class ChunkResult:
    """What a chunk task returns to the driver."""

    index: int
    pid: int
    runs: list[Run] = field(default_factory=list)
    records: dict[int, int] = field(default_factory=dict)
    """Broker -> records of its replica decoded in the range."""
    acked_checked: int = 0
    """``ok`` lines at or above the log start offset (checked against the log)."""
    pending: list[Pending] = field(default_factory=list)
    value_lines: list[int] = field(default_factory=list)
    """History lines whose value a run shows (the driver reads their text)."""


# -- reading and comparing the replicas ------------------------------------------------------


@dataclass(slots=True)
class _Source:
    """Bytes of one segment file of one replica, and its batches in them."""

    replica: int
    """Index in the chunk's replica list."""
    data: bytearray
    batches: list[tuple[int, BatchHeader]]
    """(position in ``data``, header) of each valid batch, in file order."""
    segment: list[int]
    epochs: list[int]


def _sources(spec: ChunkSpec) -> list[list[_Source]]:
    """Per replica, per segment file it reads: the bytes of its batches in the range."""
    per_replica = []
    for r, replica in enumerate(spec.replicas):
        b = replica.batches
        sources = []
        for segment in np.unique(b.segment):
            chosen = np.flatnonzero(b.segment == segment)
            begin = int(b.position[chosen].min())
            end = int((b.position[chosen] + b.size[chosen]).max())
            data = read_range(replica.paths[int(segment)], begin, end)
            batches = []
            for i in chosen:
                at = int(b.position[i]) - begin
                header = parse_header(data, at) if at + 61 <= len(data) else None
                if (
                    header is None
                    or header.base_offset != b.base_offset[i]
                    or header.size != b.size[i]
                ):
                    raise OSError(
                        f"{replica.paths[int(segment)]} changed while the audit read it "
                        f"(position {int(b.position[i])})"
                    )
                batches.append((at, header))
            sources.append(
                _Source(r, data, batches, [int(segment)] * len(batches), b.epoch[chosen].tolist())
            )
        per_replica.append(sources)
    return per_replica


def _identical(
    ref: Sequence[_Source], other: Sequence[_Source]
) -> dict[tuple[int, int], tuple[int, int]]:
    """The batches of ``other`` byte-identical to one of ``ref``: (source, batch) of other
    -> (source, batch) of ref. Candidates share base offset and size; runs of candidates
    lying end to end in both files are compared at once, a run that differs batch by
    batch."""
    where: dict[tuple[int, int], tuple[int, int]] = {}
    for s, source in enumerate(ref):
        for i, (_, h) in enumerate(source.batches):
            where.setdefault((h.base_offset, h.size), (s, i))
    same: dict[tuple[int, int], tuple[int, int]] = {}
    for s, source in enumerate(other):
        targets = [where.get((h.base_offset, h.size)) for _, h in source.batches]
        i = 0
        while i < len(targets):
            target = targets[i]
            if target is None:
                i += 1
                continue
            # The run: the next batches follow this one in both files.
            ts, ti = target
            j = i + 1
            while (
                j < len(targets)
                and targets[j] == (ts, ti + (j - i))
                and _end(source, j - 1) == source.batches[j][0]
                and _end(ref[ts], ti + (j - i) - 1) == ref[ts].batches[ti + (j - i)][0]
            ):
                j += 1
            mine, theirs = source, ref[ts]
            if _equal(
                mine.data, mine.batches[i][0], _end(mine, j - 1),
                theirs.data, theirs.batches[ti][0], _end(theirs, ti + (j - i) - 1),
            ):  # fmt: skip
                for k in range(i, j):
                    same[(s, k)] = (ts, ti + (k - i))
            else:
                for k in range(i, j):
                    tk = ti + (k - i)
                    if _equal(
                        mine.data, mine.batches[k][0], _end(mine, k),
                        theirs.data, theirs.batches[tk][0], _end(theirs, tk),
                    ):  # fmt: skip
                        same[(s, k)] = (ts, tk)
            i = j
    return same


def _end(source: _Source, i: int) -> int:
    at, h = source.batches[i]
    return at + h.size


def _equal(a: bytearray, a0: int, a1: int, b: bytearray, b0: int, b1: int) -> bool:
    if a1 - a0 != b1 - b0:
        return False
    return bool(
        np.array_equal(
            np.frombuffer(a, dtype=np.uint8)[a0:a1], np.frombuffer(b, dtype=np.uint8)[b0:b1]
        )
    )


# -- the records -----------------------------------------------------------------------------


@dataclass(slots=True)
class _Records:
    """Every decoded record of the chunk's range (each copy once), as columns."""

    offset: I64
    epoch: I64
    value: U64
    """Value hash (NULL: null value)."""
    write: U64
    """Hash of (producer id, producer epoch, sequence); NULL without a producer id."""
    version: U64
    digest: U64
    holders: U64
    """Bit r: replica r of the chunk holds this record."""
    producer: I64
    """Columns: producer id, producer epoch, sequence (-1 for none)."""
    source: I64
    """(copy index) to find the value's bytes: see ``_Chunk.value_bytes``."""
    value_start: I64
    value_length: I64

    @staticmethod
    def empty() -> _Records:
        z = np.zeros(0, dtype=np.int64)
        u = np.zeros(0, dtype=np.uint64)
        return _Records(z, z, u, u, u, u, u, np.zeros((0, 3), np.int64), z, z, z)

    def take(self, chosen: npt.NDArray[np.intp]) -> _Records:
        return _Records(
            self.offset[chosen],
            self.epoch[chosen],
            self.value[chosen],
            self.write[chosen],
            self.version[chosen],
            self.digest[chosen],
            self.holders[chosen],
            self.producer[chosen],
            self.source[chosen],
            self.value_start[chosen],
            self.value_length[chosen],
        )


def _headers_hash(headers: tuple[tuple[str, bytes | None], ...]) -> int:
    parts = [
        h.encode("utf-8") + b"\x00" + (b"\x01" + v if v is not None else b"") for h, v in headers
    ]
    return int(hash_bytes([b"\x02".join(parts)])[0])


@dataclass(slots=True)
class _Copy:
    """A decoded batch source: the bytes and which batches of it each holder set has."""

    data: bytearray
    batches: list[tuple[int, BatchHeader]]
    holders: list[int]
    """Per batch: the bit mask of the replicas holding it."""
    count_records: list[bool]
    """Per batch: its base offset lies in the range (its records and errors are counted
    by this chunk, not by the one before)."""


def _decode(
    copies: list[_Copy], low: int, high: int, brokers: Sequence[int], pid: int
) -> tuple[_Records, dict[int, int], list[Run]]:
    """The records of every copy in [low, high); records per broker; crc items for batches
    whose records do not parse (counted by the chunk holding their base offset)."""
    parts = []
    counts = [0] * len(brokers)
    errors = []
    for c, copy in enumerate(copies):
        if not copy.batches:
            continue
        cols = decode_columns(copy.data, copy.batches)
        for b, reason in cols.errors.items():
            if not copy.count_records[b]:
                continue
            h = copy.batches[b][1]
            for r in _bits(copy.holders[b]):
                errors.append(
                    item(
                        "crc",
                        pid,
                        (brokers[r],),
                        {"what": "records"},
                        h.base_offset,
                        h.last_offset,
                        h.last_offset - h.base_offset + 1,
                        {"problem": f"its CRC holds but its records do not parse: {reason}"},
                    )
                )
        keep = np.flatnonzero((cols.offset >= low) & (cols.offset < high))
        if len(keep) == 0:
            continue
        array = np.frombuffer(copy.data, dtype=np.uint8)
        batch = cols.batch[keep]
        headers = [h for _, h in copy.batches]
        epoch = np.array([h.partition_leader_epoch for h in headers], dtype=np.int64)[batch]
        holders = np.array(copy.holders, dtype=np.uint64)[batch]
        per_batch = np.bincount(batch, minlength=len(headers))
        for b in np.flatnonzero(per_batch).tolist():
            for r in _bits(copy.holders[b]):
                counts[r] += int(per_batch[b])
        offset = cols.offset[keep]
        value = hash_spans(array, cols.value_start[keep], cols.value_length[keep])
        key = hash_spans(array, cols.key_start[keep], cols.key_length[keep])
        header_hash = np.zeros(len(keep), dtype=np.uint64)
        if cols.headers:
            position = {int(k): i for i, k in enumerate(keep)}
            for record, record_headers in cols.headers.items():
                if record in position:
                    header_hash[position[record]] = _headers_hash(record_headers)
        digest = combine(cols.timestamp[keep], key, header_hash)
        pids = np.array([h.producer_id for h in headers], dtype=np.int64)[batch]
        pepochs = np.array([h.producer_epoch for h in headers], dtype=np.int64)[batch]
        bases = np.array([h.base_sequence for h in headers], dtype=np.int64)[batch]
        base_offsets = np.array([h.base_offset for h in headers], dtype=np.int64)[batch]
        has_write = (pids != NO_PRODUCER_ID) & (bases != NO_SEQUENCE) & (pids >= 0) & (bases >= 0)
        sequence = np.where(has_write, (bases + (offset - base_offsets)) % _SEQUENCE_WRAP, -1)
        write = np.where(has_write, combine(pids, pepochs, sequence), np.uint64(NULL))
        write[has_write & (write == NULL)] = 1
        version = combine(epoch, digest, value, write)
        parts.append(
            _Records(
                offset,
                epoch,
                value,
                write,
                version,
                digest,
                holders,
                np.stack([pids, pepochs, sequence], axis=1),
                np.full(len(keep), c, dtype=np.int64),
                cols.value_start[keep],
                cols.value_length[keep],
            )
        )
    if not parts:
        return _Records.empty(), dict(zip(brokers, counts, strict=True)), errors
    records = _Records(
        *(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(_Records))
    )
    return records, dict(zip(brokers, counts, strict=True)), errors


def _bits(mask: int) -> list[int]:
    return [r for r in range(64) if mask >> r & 1]


@dataclass(slots=True)
class _Offsets:
    """Per offset held in the range (sorted): the version the log holds there."""

    offset: I64
    top_epoch: I64
    top_value: U64
    top_write: U64
    disputed: npt.NDArray[np.bool_]
    first: npt.NDArray[np.intp]
    """Index of the offset's first record in the (offset-sorted) records."""
    count: npt.NDArray[np.intp]
    top_record: npt.NDArray[np.intp]
    """A record holding the top version (its value shows what the log holds)."""


def _offsets(records: _Records) -> tuple[_Records, _Offsets]:
    """The records sorted by offset, and the top version of each offset."""
    n = len(records.offset)
    if n == 0 or bool(np.all(records.offset[1:] > records.offset[:-1])):
        # One record per offset, in order: each is its offset's version (the common case:
        # every replica holds the same copy of every batch).
        index = np.arange(n)
        return records, _Offsets(
            records.offset,
            records.epoch,
            records.value,
            records.write,
            np.zeros(n, dtype=np.bool_),
            index,
            np.ones(n, dtype=np.intp),
            index,
        )
    order = np.argsort(records.offset, kind="stable")
    records = records.take(order)
    offset, first, count = np.unique(records.offset, return_index=True, return_counts=True)
    top_epoch = np.maximum.reduceat(records.epoch, first)
    disputed = np.minimum.reduceat(records.version, first) != np.maximum.reduceat(
        records.version, first
    )
    at_top = records.epoch == np.repeat(top_epoch, count)
    top_value = np.maximum.reduceat(np.where(at_top, records.value, np.uint64(NULL)), first)
    top_write = np.maximum.reduceat(np.where(at_top, records.write, np.uint64(NULL)), first)
    # The record shown as the log's: a top-epoch record with the top value.
    showing = at_top & (records.value == np.repeat(top_value, count))
    positions = np.arange(len(records.offset))
    top_record = np.minimum.reduceat(np.where(showing, positions, len(positions)), first)
    return records, _Offsets(
        offset, top_epoch, top_value, top_write, disputed, first, count, top_record
    )


# -- the checks --------------------------------------------------------------------------------


class _Chunk:
    """The chunk's data once read and decoded, and the checks over it."""

    def __init__(self, spec: ChunkSpec, lines: Lines) -> None:
        self.spec = spec
        self.part = spec.part
        self.brokers = [r.broker for r in spec.replicas]
        self.lines = lines
        sources = _sources(spec)
        self.copies = _copies(sources, spec.low)
        records, self.records_per_broker, self.crc_items = _decode(
            self.copies, spec.low, spec.high, self.brokers, self.part.pid
        )
        self.records, self.offsets = _offsets(records)

    def value_bytes(self, record: int) -> bytes | None:
        r = self.records
        start = int(r.value_start[record])
        if start < 0:
            return None
        data = self.copies[int(r.source[record])].data
        return bytes(data[start : start + int(r.value_length[record])])

    def shown_record(self, record: int) -> Any:
        value = self.value_bytes(record)
        return shown(value)

    def holders_of(self, mask: int) -> list[int]:
        return sorted(self.brokers[r] for r in _bits(mask))

    def locate(self, offsets: I64) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
        """Index into ``self.offsets`` of each offset, and whether it is held."""
        held = self.offsets.offset
        index = np.searchsorted(held, offsets)
        inside = index < len(held)
        found = np.zeros(len(offsets), dtype=np.bool_)
        found[inside] = held[index[inside]] == offsets[inside]
        return np.where(found, index, 0), found

    def run(self) -> ChunkResult:
        part = self.part
        result = ChunkResult(self.spec.index, part.pid)
        result.records = self.records_per_broker
        items: list[Run] = [*self.crc_items, *self._divergence()]
        lines = self.lines
        ok = np.flatnonzero((lines.kind == OK) & (lines.offset >= part.log_start))
        result.acked_checked = len(ok)
        index, found = self.locate(lines.offset[ok])
        agree = found & (self.offsets.top_value[index] == lines.value[ok])
        lost = ok[~agree]
        items += self._not_held(lost, "lost_ack")
        confirmed = np.zeros(len(self.offsets.offset), dtype=np.bool_)
        confirmed[index[agree]] = True
        items += self._phantoms(confirmed, result)
        items += self._duplicates()
        reads = np.flatnonzero((lines.kind == READ) & (lines.offset >= part.log_start))
        index, found = self.locate(lines.offset[reads])
        agree = found & (self.offsets.top_value[index] == lines.value[reads])
        items += self._not_held(reads[~agree], "inconsistent_read")
        items += self._polls()
        result.runs = merge(items)
        for run in result.runs:
            if run.kind in ("lost_ack", "inconsistent_read"):
                result.value_lines += [run.first["line"], run.last["line"]]
        return result

    def _divergence(self) -> list[Run]:
        o, part = self.offsets, self.part
        chosen = np.flatnonzero(
            o.disputed & (o.offset >= part.log_start) & (o.offset < part.committed_end)
        )
        found = []
        r = self.records
        for i in chosen:
            rows = []
            for k in range(int(o.first[i]), int(o.first[i] + o.count[i])):
                value = self.shown_record(k)
                for broker in self.holders_of(int(r.holders[k])):
                    rows.append((broker, int(r.epoch[k]), int(r.digest[k]), value))
            rows.sort(key=lambda v: (v[0], v[1], v[2], _shown_order(v[3])))
            found.append(
                item(
                    "divergence",
                    part.pid,
                    [b for b, *_ in rows],
                    {"sig": [{"broker": b, "epoch": e} for b, e, _, _ in rows]},
                    int(o.offset[i]),
                    int(o.offset[i]),
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

    def _not_held(self, chosen: npt.NDArray[np.intp], kind: str) -> list[Run]:
        """Items for history lines whose value the log does not hold at their offset (an
        acknowledged write or a read), with where the value is instead."""
        if len(chosen) == 0:
            return []
        part, o, r, lines = self.part, self.offsets, self.records, self.lines
        index, found = self.locate(lines.offset[chosen])
        wanted = lines.value[chosen]
        # Where the log holds each value instead: its first offset (only when the chunk
        # has the whole partition; else the value may be held in another chunk).
        elsewhere = np.flatnonzero(np.isin(o.top_value, wanted))
        moved: dict[int, int] = {}
        if self.spec.whole:
            for at in elsewhere.tolist():
                moved.setdefault(int(o.top_value[at]), int(o.offset[at]))
        found_items = []
        for n, line in enumerate(chosen):
            offset = int(lines.offset[line])
            value = int(wanted[n])
            held_epoch = None
            held = None
            still: list[int] = []
            if found[n]:
                i = int(index[n])
                held_epoch = int(o.top_epoch[i])
                held = self.shown_record(int(o.top_record[i]))
                mask = 0
                for k in range(int(o.first[i]), int(o.first[i] + o.count[i])):
                    if int(r.value[k]) == value:
                        mask |= int(r.holders[k])
                still = self.holders_of(mask)
            reason = (
                "replaced" if found[n] else "beyond_leo" if offset >= part.max_leo else "missing"
            )
            moved_to = moved.get(value)
            key: dict[str, Any] = {"reason": reason}
            if kind == "inconsistent_read":
                key["process"] = int(lines.process[line])
            key.update(
                _clean({"still_held": still or None, "moved": moved_to is not None})
                | _clean({"held_epoch": held_epoch})
            )
            info = _clean(
                {
                    "value": None,
                    "held": held,
                    "moved_to": moved_to,
                    "line": int(lines.line[line]),
                }
            )
            if kind == "inconsistent_read":
                info["session"] = int(lines.session[line])
                info["max_leo"] = part.max_leo
                info["committed_end"] = part.committed_end
            else:
                info["max_leo"] = part.max_leo
            found_items.append(
                item(
                    kind,
                    part.pid,
                    part.replicas,
                    key,
                    offset,
                    offset,
                    1,
                    info,
                    float(lines.time[line]),
                )
            )
        return found_items

    def _polls(self) -> list[Run]:
        """nonmonotonic_poll and poll_skip items from the steps of each poll stream (the
        partition's reads by one process in one session, :mod:`chaos.audit.polls`) that are
        not one offset up. A skip counts the committed offsets the log holds between the two
        reads: a skip over offsets no replica holds (a gap) or past the committed end is
        none."""
        lines, part = self.lines, self.part
        reads = np.flatnonzero(lines.kind == READ)
        if len(reads) < 2:
            return []
        before, after, kind = steps(
            lines.process[reads],
            lines.session[reads],
            lines.time[reads],
            lines.line[reads],
            lines.offset[reads],
        )
        if len(kind) == 0:
            return []
        held: list[tuple[int, int]] | None = None
        found = []
        for b, a, k in zip(
            reads[before].tolist(), reads[after].tolist(), kind.tolist(), strict=True
        ):
            previous, offset = int(lines.offset[b]), int(lines.offset[a])
            process, session = int(lines.process[a]), int(lines.session[a])
            previous_line, line = int(lines.line[b]), int(lines.line[a])
            t = float(lines.time[a])
            if k != SKIP:
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
                continue
            if held is None:
                held = held_ranges(
                    [r.batches for r in self.spec.replicas], part.log_start, part.committed_end
                )
            cut = [
                (max(first, previous + 1), min(last, offset - 1))
                for first, last in held
                if first < offset and last > previous
            ]
            if not cut:
                continue
            first = min(c[0] for c in cut)
            last = max(c[1] for c in cut)
            found.append(
                item(
                    "poll_skip",
                    part.pid,
                    part.replicas,
                    {"process": process, "session": session},
                    first,
                    last,
                    sum(c[1] - c[0] + 1 for c in cut),
                    {
                        "previous": previous,
                        "offset": offset,
                        "previous_line": previous_line,
                        "line": line,
                        "committed_end": part.committed_end,
                    },
                    t,
                )
            )
        return found

    def _phantoms(self, confirmed: npt.NDArray[np.bool_], result: ChunkResult) -> list[Run]:
        """Committed versions that no ``ok`` line put at their offset and whose value no
        ``ok`` or ``info`` line of the partition wrote; the rest of the history is asked by
        the driver unless this chunk has the whole partition and the topic is settled."""
        part, o = self.part, self.offsets
        if not part.in_history:
            return []
        candidates = np.flatnonzero(
            ~confirmed & (o.offset >= part.log_start) & (o.offset < part.committed_end)
        )
        if len(candidates) == 0:
            return []
        lines = self.lines
        writes = lines.value[(lines.kind == OK) | (lines.kind == INFO)]
        candidates = candidates[~np.isin(o.top_value[candidates], writes)]
        final = self.spec.whole and self.spec.topic_settled
        found = []
        for i in candidates:
            pending = Pending(
                part.pid,
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

    def _duplicates(self) -> list[Run]:
        """One write (producer id, epoch, sequence) or, in a topic the history covers, one
        value held at several offsets of the partition's log (its top versions). Only for a
        chunk holding the whole partition (the job merges split partitions' hashes)."""
        if not self.spec.whole:
            return []
        o, r = self.offsets, self.records
        found: list[Run] = []
        later: set[int] = set()
        writes = _repeated(o.top_write)
        if len(writes):
            groups = self._copies_of(r.write, writes, lambda k: tuple(r.producer[k].tolist()))
            for (producer_id, producer_epoch, sequence), (offsets, brokers, value) in groups:
                later.update(offsets[1:])
                found.append(
                    _duplicate_item(
                        self.part.pid,
                        offsets,
                        brokers,
                        value,
                        {
                            "rule": "write",
                            "producer_id": producer_id,
                            "producer_epoch": producer_epoch,
                        },
                        {"sequence": sequence},
                    )
                )
        if self.part.in_history:
            values = _repeated(o.top_value)
            if len(values):
                groups = self._copies_of(
                    r.value, values, lambda k: self.value_bytes(k), exclude=later
                )
                for _, (offsets, brokers, value) in groups:
                    found.append(
                        _duplicate_item(
                            self.part.pid, offsets, brokers, value, {"rule": "value"}, {}
                        )
                    )
        return found

    def _copies_of(
        self,
        hashes: U64,
        repeated: U64,
        exact: Any,
        exclude: set[int] | None = None,
    ) -> list[tuple[Any, tuple[list[int], list[int], Any]]]:
        """Records whose hash is one of ``repeated`` and whose epoch is their offset's top
        epoch, grouped by their exact fields (``exact(record)``): per group held at several
        offsets, its offsets in order, the brokers holding them and the first copy's value
        (shown)."""
        o, r = self.offsets, self.records
        top_epoch = np.repeat(o.top_epoch, o.count)
        chosen = np.flatnonzero(np.isin(hashes, repeated) & (r.epoch == top_epoch))
        groups: dict[Any, dict[int, list[int]]] = {}
        first_record: dict[tuple[Any, int], int] = {}
        for k in chosen:
            offset = int(r.offset[k])
            if exclude and offset in exclude:
                continue
            fields = exact(int(k))
            holders = groups.setdefault(fields, {}).setdefault(offset, [])
            holders += self.holders_of(int(r.holders[k]))
            first_record.setdefault((fields, offset), int(k))
        out = []
        for fields, per_offset in groups.items():
            if len(per_offset) < 2:
                continue
            offsets = sorted(per_offset)
            brokers = sorted({b for bs in per_offset.values() for b in bs})
            value = self.shown_record(first_record[(fields, offsets[0])])
            out.append((fields, (offsets, brokers, value)))
        return out


def _shown_order(value: Any) -> tuple[int, str, int]:
    if value is None:
        return (0, "", 0)
    return (1, value["b64"], value["len"])


def _repeated(hashes: U64) -> U64:
    """The non-null hashes that occur more than once."""
    present = hashes[hashes != NULL]
    if len(present) < 2:
        return np.zeros(0, dtype=np.uint64)
    values, counts = np.unique(present, return_counts=True)
    return values[counts > 1]


def _duplicate_item(
    pid: int,
    offsets: list[int],
    brokers: list[int],
    value: Any,
    key: dict[str, Any],
    info: dict[str, Any],
) -> Run:
    first = offsets[0]
    return item(
        "duplicate",
        pid,
        brokers,
        {**key, "copies": len(offsets), "delta": offsets[1] - first},
        first,
        first,
        1,
        _clean({"value": value, "offsets": offsets[:_SHOWN_OFFSETS], **info}),
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


def _copies(sources: list[list[_Source]], low: int) -> list[_Copy]:
    """The distinct batch copies: the first replica with the most batches is the reference;
    another replica's batch identical to one of its batches adds a holder to it, any other
    is a copy of its own."""
    if not sources:
        return []
    counts = [sum(len(s.batches) for s in per) for per in sources]
    ref = max(range(len(sources)), key=lambda r: (counts[r], -r))
    copies = [
        _Copy(
            s.data,
            list(s.batches),
            [1 << ref] * len(s.batches),
            [h.base_offset >= low for _, h in s.batches],
        )
        for s in sources[ref]
    ]
    for r, per in enumerate(sources):
        if r == ref:
            continue
        same = _identical(sources[ref], per)
        for s, source in enumerate(per):
            rest = []
            for i, batch in enumerate(source.batches):
                target = same.get((s, i))
                if target is not None:
                    copies[target[0]].holders[target[1]] |= 1 << r
                else:
                    rest.append(batch)
            if rest:
                copies.append(
                    _Copy(
                        source.data,
                        rest,
                        [1 << r] * len(rest),
                        [h.base_offset >= low for _, h in rest],
                    )
                )
    # Compressed batches hold no records the audit can decode (the summary counts them).
    decodable = []
    for c in copies:
        keep = [i for i, (_, h) in enumerate(c.batches) if h.compression == 0]
        decodable.append(
            _Copy(
                c.data,
                [c.batches[i] for i in keep],
                [c.holders[i] for i in keep],
                [c.count_records[i] for i in keep],
            )
        )
    return decodable


def audit_chunk(spec: ChunkSpec, lines: Lines) -> ChunkResult:
    """Audit one chunk: the replicas' records in the range against each other and against
    the history's lines routed to it."""
    return _Chunk(spec, lines).run()
