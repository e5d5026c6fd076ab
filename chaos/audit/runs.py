"""Violation items and their runs: consecutive offsets with the same fault become one finding.

Every check yields items (:func:`item`): one offset (or a range of them) with one fault, the
partition, the brokers concerned, a grouping ``key`` (what the items of one finding share)
and ``info`` (the facts of this item, for the sentence). Items of one kind, partition,
brokers and key whose offset ranges touch or overlap are merged into a :class:`Run`: its
offset range, the sum of its counts, the facts of its first and last items (by start, end,
then info) and the range of its history times. Merging is associative, so each chunk task
merges its own items and the driver merges the chunks' runs (:func:`merge`); the result is
the same as merging all items at once.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from chaos.audit.violations import Finding

__all__ = ["Run", "item", "merge"]


def _text(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"))


@dataclass(slots=True)
class Run:
    """Items of one kind, partition, brokers and key over touching offset ranges."""

    kind: str
    pid: int
    brokers: tuple[int, ...]
    key: dict[str, Any]
    start: int
    end: int
    n: int
    first: dict[str, Any]
    """The facts of the run's first item (by start, end, then info)."""
    last: dict[str, Any]
    t_min: float | None = None
    t_max: float | None = None
    first_at: tuple[int, int, str] = (0, 0, "")
    """The first item's place in that order (start, end, info as JSON)."""
    last_at: tuple[int, int, str] = (0, 0, "")

    def group(self) -> tuple[str, int, tuple[int, ...], str]:
        return self.kind, self.pid, self.brokers, _text(self.key)

    def finding(self) -> Finding:
        return Finding(
            kind=self.kind,
            brokers=self.brokers,
            start=self.start,
            end=self.end,
            count=self.n,
            key=self.key,
            first=self.first,
            last=self.last,
            t_min=self.t_min,
            t_max=self.t_max,
        )


def item(
    kind: str,
    pid: int,
    brokers: Iterable[int],
    key: dict[str, Any],
    start: int,
    end: int,
    n: int,
    info: dict[str, Any],
    t: float | None = None,
) -> Run:
    """One violation item: a run of one."""
    at = (start, end, _text(info))
    return Run(kind, pid, tuple(brokers), key, start, end, n, info, info, t, t, at, at)


def _min(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def merge(runs: Iterable[Run]) -> list[Run]:
    """Runs (or items) merged where they share kind, partition, brokers and key and their
    offset ranges touch or overlap: sorted by (start, end), a run ends where the next
    starts more than one offset past every end so far."""
    groups: dict[tuple[str, int, tuple[int, ...], str], list[Run]] = defaultdict(list)
    for run in runs:
        groups[run.group()].append(run)
    merged: list[Run] = []
    for members in groups.values():
        members.sort(key=lambda r: (r.start, r.end))
        current: Run | None = None
        for run in members:
            if current is None or run.start > current.end + 1:
                if current is not None:
                    merged.append(current)
                current = replace(run)
                continue
            current.end = max(current.end, run.end)
            current.n += run.n
            current.t_min = _min(current.t_min, run.t_min)
            current.t_max = _max(current.t_max, run.t_max)
            if run.first_at < current.first_at:
                current.first, current.first_at = run.first, run.first_at
            if run.last_at > current.last_at:
                current.last, current.last_at = run.last, run.last_at
        if current is not None:
            merged.append(current)
    return merged
