"""A partition's replicas over an offset range, reduced to the distinct copies of their batches.

Followers copy the leader's batches byte for byte, offset and leader epoch included, so in a
healthy log every batch exists once, held by every replica. :func:`read_copies` maps each
replica's segment files and compares the batches that share a base offset and a size with
the reference replica's (the one with the most batches): runs of such batches that lie end
to end in both files are compared with one ``memcmp``, and a run that differs batch by
batch. A batch identical to the reference's adds a holder to that copy; any other batch is
a copy of its own. Only distinct copies are decoded (:mod:`chaos.audit.versions`), so
replicas in agreement cost one decode, not one per replica; where they differ, every
version is decoded and compared record by record.

Byte identity is judged on the batches as stored, compressed ones included (a follower
copies the leader's compressed bytes as they are). Only then is a copy holding compressed
batches read into a buffer of its own, its batches in file order, each as an uncompressed
batch: the compressed ones inflated once (:func:`~proto.records.record_batch.inflated`),
the others copied. Decoding then reads every copy the same way, by positions in its buffer.
A compressed batch that does not inflate keeps its stored bytes there and is named in the
copy's ``errors``: it has no records, and the chunk reports it as a batch whose records do
not parse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from chaos.audit.log_checks import BatchTable
from chaos.audit.segments import Buffer, map_file
from proto.records.record_batch import (
    HEADER_SIZE,
    BatchHeader,
    CorruptRecordError,
    inflated,
    parse_header,
)

__all__ = ["Copy", "read_copies"]


@dataclass(slots=True)
class Copy:
    """Batches of one segment file, each held byte for byte by the replicas of its
    ``holders``."""

    data: Buffer
    """The mapped segment file; for a copy holding compressed batches, the buffer they were
    read into (see the module's docstring)."""
    batches: list[tuple[int, BatchHeader]]
    """(position in ``data``, header), in file order; valid, and uncompressed in ``data``
    (an inflated batch's header says no codec) but those of ``errors``."""
    holders: list[int]
    """Per batch: bit r set when replica r of the range holds it."""
    owned: list[bool]
    """Per batch: its base offset lies in the range, so its errors and records are counted
    here and not by the range before."""
    codecs: list[int] = field(default_factory=list)
    """Per batch of a copy read into its own buffer: the codec the replicas store it with
    (0: none), so that its errors can name it; empty for a mapped segment file."""
    errors: dict[int, str] = field(default_factory=dict)
    """Batch index -> why its records cannot be read: a compressed batch that does not
    inflate (kept as stored). Decoding skips these batches."""


@dataclass(slots=True)
class _Source:
    """One segment file of one replica, and its batches in the range."""

    data: Buffer
    batches: list[tuple[int, BatchHeader]]

    def end(self, i: int) -> int:
        at, h = self.batches[i]
        return at + h.size


def _sources(paths: Sequence[str], batches: BatchTable) -> list[_Source]:
    """The replica's segment files that hold batches of the range, mapped."""
    sources = []
    for segment in np.unique(batches.segment).tolist():
        chosen = np.flatnonzero(batches.segment == segment)
        data = map_file(paths[segment])
        view = memoryview(data)
        found = []
        for i in chosen.tolist():
            at = int(batches.position[i])
            header = parse_header(view, at) if at + HEADER_SIZE <= len(data) else None
            if header is None or (header.base_offset, header.size) != (
                int(batches.base_offset[i]),
                int(batches.size[i]),
            ):
                raise OSError(f"{paths[segment]} changed while the audit read it (position {at})")
            found.append((at, header))
        sources.append(_Source(data, found))
    return sources


def _equal(a: _Source, a0: int, a1: int, b: _Source, b0: int, b1: int) -> bool:
    if a1 - a0 != b1 - b0:
        return False
    return bool(
        np.array_equal(
            np.frombuffer(a.data, dtype=np.uint8)[a0:a1],
            np.frombuffer(b.data, dtype=np.uint8)[b0:b1],
        )
    )


def _identical(
    ref: Sequence[_Source], other: Sequence[_Source]
) -> dict[tuple[int, int], tuple[int, int]]:
    """The batches of ``other`` byte-identical to one of ``ref``: (source, batch) of other
    -> (source, batch) of ref."""
    where: dict[tuple[int, int], tuple[int, int]] = {}
    for s, source in enumerate(ref):
        for i, (_, h) in enumerate(source.batches):
            where.setdefault((h.base_offset, h.size), (s, i))
    same: dict[tuple[int, int], tuple[int, int]] = {}
    for s, mine in enumerate(other):
        targets = [where.get((h.base_offset, h.size)) for _, h in mine.batches]
        i = 0
        while i < len(targets):
            target = targets[i]
            if target is None:
                i += 1
                continue
            ts, ti = target
            theirs = ref[ts]
            j = i + 1  # the run: the next batches follow these in both files
            while (
                j < len(targets)
                and targets[j] == (ts, ti + j - i)
                and mine.end(j - 1) == mine.batches[j][0]
                and theirs.end(ti + j - i - 1) == theirs.batches[ti + j - i][0]
            ):
                j += 1
            whole = _equal(
                mine, mine.batches[i][0], mine.end(j - 1),
                theirs, theirs.batches[ti][0], theirs.end(ti + j - i - 1),
            )  # fmt: skip
            for k in range(i, j):
                tk = ti + k - i
                if whole or _equal(
                    mine, mine.batches[k][0], mine.end(k), theirs, theirs.batches[tk][0],
                    theirs.end(tk),
                ):  # fmt: skip
                    same[(s, k)] = (ts, tk)
            i = j
    return same


def read_copies(
    paths: Sequence[Sequence[str]], batches: Sequence[BatchTable], low: int
) -> list[Copy]:
    """The distinct copies of the batches of the replicas (``paths[r]``: replica r's segment
    files, ``batches[r]``: its valid batches holding offsets of the range, which starts at
    ``low``), compressed batches read inflated (see the module's docstring)."""
    sources = [_sources(p, b) for p, b in zip(paths, batches, strict=True)]
    if not sources:
        return []
    counts = [sum(len(s.batches) for s in per) for per in sources]
    ref = max(range(len(sources)), key=lambda r: (counts[r], -r))
    copies = [Copy(s.data, list(s.batches), [1 << ref] * len(s.batches), []) for s in sources[ref]]
    for r, per in enumerate(sources):
        if r == ref:
            continue
        same = _identical(sources[ref], per)
        for s, source in enumerate(per):
            rest = []
            for i, batch in enumerate(source.batches):
                target = same.get((s, i))
                if target is None:
                    rest.append(batch)
                else:
                    copies[target[0]].holders[target[1]] |= 1 << r
            if rest:
                copies.append(Copy(source.data, rest, [1 << r] * len(rest), []))
    for c in copies:
        c.owned = [h.base_offset >= low for _, h in c.batches]
    return [_inflated(c) for c in copies]


def _inflated(copy: Copy) -> Copy:
    """The copy as decoding reads it: itself when none of its batches is compressed, else
    its batches read into a buffer of their own, in order (one buffer, so that its records
    stay in offset order and are decoded in one pass), each inflated once or copied."""
    if not any(h.compression for _, h in copy.batches):
        return copy
    data = bytearray()
    batches: list[tuple[int, BatchHeader]] = []
    codecs: list[int] = []
    errors: dict[int, str] = {}
    view = memoryview(copy.data)
    for i, (at, header) in enumerate(copy.batches):
        codecs.append(header.compression)
        position = len(data)
        piece: bytes | memoryview = view[at : at + header.size]
        if header.compression:
            try:
                piece, header = inflated(view, at, header)
            except CorruptRecordError as e:
                errors[i] = e.reason
        data += piece
        batches.append((position, header))
    return Copy(data, batches, copy.holders, copy.owned, codecs, errors)
