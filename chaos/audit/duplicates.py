"""The duplicate rule of a partition's versions: one write (producer id, producer epoch,
sequence) stored at several offsets, and, in a topic the history writes (whose values are
unique), one value at several offsets (:mod:`chaos.audit.chunk` finds the candidates, the
hashes held at several offsets; a cut partition's are found across its ranges by
:mod:`chaos.audit.job`). Records of producers without a producer id are never judged by
their bytes: equal payloads are no fault.

A value whose copies were written by two producer sessions (idempotent copies with
different producer ids or epochs) is ``resent``, not ``duplicate``: the producer sent the
record again after its session changed, where no broker can recognise it as a retry
(idempotence holds within one producer id and epoch). librdkafka does this after an epoch
bump; minibroker's producer never does (docs/chaos.md, "Idempotent producers and
duplicates"). A consumer still reads the record twice, so it is reported as a violation.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from chaos.audit.hashing import NULL, U64
from chaos.audit.runs import Run, item

__all__ = ["CopyRow", "duplicate_items", "repeated"]

_SHOWN_OFFSETS = 10
"""Offsets a duplicate finding keeps (its count says how many there are)."""

CopyRow = tuple[Any, int, list[int], Any, tuple[int, ...]]
"""(the exact fields a copy shares, its offset, the brokers holding it, its value shown,
the record's (producer id, producer epoch, sequence))."""


def repeated(hashes: U64) -> U64:
    """The non-null hashes that occur more than once."""
    present = hashes[hashes != NULL]
    if len(present) < 2:
        return np.zeros(0, dtype=np.uint64)
    values, counts = np.unique(present, return_counts=True)
    return values[counts > 1]


_Group = tuple[Any, list[int], list[int], Any, list[tuple[int, ...]]]


def _grouped(rows: Iterable[CopyRow], exclude: set[int]) -> list[_Group]:
    """Copy rows grouped by their exact fields: per group held at several offsets (those of
    ``exclude`` left out), its offsets in order, the brokers, the first copy's value and
    each offset's writer."""
    groups: dict[Any, dict[int, tuple[list[int], Any, tuple[int, ...]]]] = {}
    for fields, offset, brokers, value, writer in rows:
        if offset in exclude:
            continue
        per_offset = groups.setdefault(fields, {})
        held, _, _ = per_offset.setdefault(offset, ([], value, writer))
        held += brokers
    found = []
    for fields, per_offset in groups.items():
        if len(per_offset) < 2:
            continue
        offsets = sorted(per_offset)
        brokers = sorted({b for held, _, _ in per_offset.values() for b in held})
        writers = [per_offset[o][2] for o in offsets]
        found.append((fields, offsets, brokers, per_offset[offsets[0]][1], writers))
    return found


def _sessions(writers: list[tuple[int, ...]]) -> set[tuple[int, int]] | None:
    """The (producer id, epoch) sessions of idempotent writers, None if any copy has no
    producer id."""
    if any(len(w) < 2 or w[0] < 0 for w in writers):
        return None
    return {(w[0], w[1]) for w in writers}


def duplicate_items(
    pid: int, write_rows: Iterable[CopyRow], value_rows: Iterable[CopyRow], in_history: bool
) -> list[Run]:
    """One write (producer id, epoch, sequence) stored twice, and, in a topic the history
    writes (its values are unique), one value at several offsets, unless the write rule
    already reports that copy. Values alone prove nothing without a history: ``perf
    produce`` sends one value many times."""
    found: list[Run] = []
    later: set[int] = set()
    for (producer_id, producer_epoch, sequence), offsets, brokers, value, _ in _grouped(
        write_rows, set()
    ):
        later.update(offsets[1:])
        found.append(
            _duplicate_item(
                pid,
                offsets,
                brokers,
                value,
                {"rule": "write", "producer_id": producer_id, "producer_epoch": producer_epoch},
                {"sequence": sequence},
            )
        )
    if in_history:
        for _, offsets, brokers, value, writers in _grouped(value_rows, later):
            sessions = _sessions(writers)
            resent = sessions is not None and len(sessions) > 1
            info = {"writers": [list(w) for w in writers[:_SHOWN_OFFSETS]]} if resent else {}
            kind = "resent" if resent else "duplicate"
            found.append(
                _duplicate_item(pid, offsets, brokers, value, {"rule": "value"}, info, kind)
            )
    return found


def _duplicate_item(
    pid: int,
    offsets: list[int],
    brokers: list[int],
    value: Any,
    key: dict[str, Any],
    info: dict[str, Any],
    kind: str = "duplicate",
) -> Run:
    first = offsets[0]
    return item(
        kind,
        pid,
        brokers,
        {**key, "copies": len(offsets), "delta": offsets[1] - first},
        first,
        first,
        1,
        {
            k: v
            for k, v in {"value": value, "offsets": offsets[:_SHOWN_OFFSETS], **info}.items()
            if v is not None
        },
    )
