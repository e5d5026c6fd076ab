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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from chaos.audit.log_checks import BatchTable
from chaos.audit.segments import Buffer, map_file
from proto.records.record_batch import HEADER_SIZE, BatchHeader, parse_header

__all__ = ["Copy", "read_copies"]


@dataclass(slots=True)
class Copy:
    """Batches of one mapped segment file that one set of replicas holds, identically."""

    data: Buffer
    batches: list[tuple[int, BatchHeader]]
    """(position in ``data``, header), in file order; uncompressed and valid."""
    holders: list[int]
    """Per batch: bit r set when replica r of the range holds it."""
    owned: list[bool]
    """Per batch: its base offset lies in the range, so its errors and records are counted
    here and not by the range before."""


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
    ``low``). Compressed batches are left out: the audit cannot decode them (the replicas'
    summaries count them)."""
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
    decodable = []
    for c in copies:
        keep = [i for i, (_, h) in enumerate(c.batches) if h.compression == 0]
        batches_kept = [c.batches[i] for i in keep]
        decodable.append(
            Copy(
                c.data,
                batches_kept,
                [c.holders[i] for i in keep],
                [h.base_offset >= low for _, h in batches_kept],
            )
        )
    return decodable
