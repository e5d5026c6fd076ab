"""The duplicate rule of a partition's versions: one write (producer id, producer epoch,
sequence) stored at several offsets, and, in a topic the history writes (whose values are
unique), one value at several offsets (:mod:`chaos.audit.chunk` finds the candidates, the
hashes held at several offsets; a cut partition's are found across its ranges by
:mod:`chaos.audit.job`). Records of producers without a producer id are never judged by
their bytes: equal payloads are no fault.
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

CopyRow = tuple[Any, int, list[int], Any]
"""(the exact fields a copy shares, its offset, the brokers holding it, its value shown)."""


def repeated(hashes: U64) -> U64:
    """The non-null hashes that occur more than once."""
    present = hashes[hashes != NULL]
    if len(present) < 2:
        return np.zeros(0, dtype=np.uint64)
    values, counts = np.unique(present, return_counts=True)
    return values[counts > 1]


def _grouped(
    rows: Iterable[CopyRow], exclude: set[int]
) -> list[tuple[Any, list[int], list[int], Any]]:
    """Copy rows grouped by their exact fields: per group held at several offsets (those of
    ``exclude`` left out), its offsets in order, the brokers and the first copy's value."""
    groups: dict[Any, dict[int, tuple[list[int], Any]]] = {}
    for fields, offset, brokers, value in rows:
        if offset in exclude:
            continue
        per_offset = groups.setdefault(fields, {})
        held, _ = per_offset.setdefault(offset, ([], value))
        held += brokers
    found = []
    for fields, per_offset in groups.items():
        if len(per_offset) < 2:
            continue
        offsets = sorted(per_offset)
        brokers = sorted({b for held, _ in per_offset.values() for b in held})
        found.append((fields, offsets, brokers, per_offset[offsets[0]][1]))
    return found


def duplicate_items(
    pid: int, write_rows: Iterable[CopyRow], value_rows: Iterable[CopyRow], in_history: bool
) -> list[Run]:
    """One write (producer id, epoch, sequence) stored twice, and, in a topic the history
    writes (its values are unique), one value at several offsets, unless the write rule
    already reports that copy. Values alone prove nothing without a history: ``perf
    produce`` sends one value many times."""
    found: list[Run] = []
    later: set[int] = set()
    for (producer_id, producer_epoch, sequence), offsets, brokers, value in _grouped(
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
        for _, offsets, brokers, value in _grouped(value_rows, later):
            found.append(_duplicate_item(pid, offsets, brokers, value, {"rule": "value"}, {}))
    return found


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
        {
            k: v
            for k, v in {"value": value, "offsets": offsets[:_SHOWN_OFFSETS], **info}.items()
            if v is not None
        },
    )
