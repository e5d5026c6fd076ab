"""Write latencies per second of a run, as mergeable histograms: what the report's latency
plot is drawn from.

A history's ``ok`` line that says when its write was ``sent`` has a latency, ``time -
sent``. The history's ranges are parsed by many tasks, so each counts its latencies per
(second of ``time``, bucket) and notes each second's largest; the driver adds the counts up
and reads each second's median and 99th percentile off the buckets. The buckets grow by
:data:`RATIO` from :data:`FIRST_MS`, so a percentile is known to within 20 % of itself,
from a fraction of a millisecond to hours, in a hundred buckets.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["LatencyCounts", "SecondLatency", "as_rows", "latency_counts", "merged"]

FIRST_MS = 0.5
"""The first bucket's upper bound."""
RATIO = 1.2
BUCKETS = 100
_LOG_RATIO = math.log(RATIO)


def _upper_ms(bucket: int) -> float:
    return FIRST_MS * RATIO**bucket


@dataclass(frozen=True, slots=True)
class SecondLatency:
    """One second's acknowledged writes that say when they were sent."""

    second: int
    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float


@dataclass(slots=True)
class LatencyCounts:
    """(second, bucket) -> writes, and each second's largest latency."""

    counts: dict[tuple[int, int], int] = field(default_factory=lambda: defaultdict(int))
    largest: dict[int, float] = field(default_factory=dict)

    def add(self, other: LatencyCounts) -> None:
        for key, n in other.counts.items():
            self.counts[key] += n
        for second, ms in other.largest.items():
            self.largest[second] = max(ms, self.largest.get(second, 0.0))

    def per_second(self) -> list[SecondLatency]:
        buckets: dict[int, dict[int, int]] = defaultdict(dict)
        for (second, bucket), n in self.counts.items():
            buckets[second][bucket] = n
        found = []
        for second in sorted(buckets):
            counts = sorted(buckets[second].items())
            total = sum(n for _, n in counts)
            largest = self.largest.get(second, 0.0)
            found.append(
                SecondLatency(
                    second,
                    total,
                    min(_quantile(counts, total, 0.5), largest),
                    min(_quantile(counts, total, 0.99), largest),
                    largest,
                )
            )
        return found


def _quantile(counts: Iterable[tuple[int, int]], total: int, q: float) -> float:
    """The upper bound of the bucket holding the ``q``-th of ``total`` writes."""
    wanted = max(1, math.ceil(q * total))
    seen = 0
    last = 0
    for bucket, n in counts:
        seen, last = seen + n, bucket
        if seen >= wanted:
            break
    return _upper_ms(last)


def latency_counts(
    time: npt.NDArray[np.float64], sent: npt.NDArray[np.float64], ok: npt.NDArray[np.bool_]
) -> LatencyCounts:
    """The latencies of the ``ok`` lines that say when they were sent (a ``sent`` after
    ``time``, a clock step, counts as 0)."""
    chosen = ok & ~np.isnan(sent)
    found = LatencyCounts()
    if not chosen.any():
        return found
    ms = np.maximum((time[chosen] - sent[chosen]) * 1000.0, 0.0)
    seconds = np.floor(time[chosen]).astype(np.int64)
    with np.errstate(divide="ignore"):
        buckets = np.ceil(np.log(np.maximum(ms, 1e-9) / FIRST_MS) / _LOG_RATIO)
    buckets = np.clip(buckets, 0, BUCKETS - 1).astype(np.int64)
    keys, counts = np.unique(seconds * BUCKETS + buckets, return_counts=True)
    for key, n in zip(keys.tolist(), counts.tolist(), strict=True):
        found.counts[(key // BUCKETS, key % BUCKETS)] += n
    order = np.lexsort((ms, seconds))
    last = np.r_[seconds[order][1:] != seconds[order][:-1], True]
    for second, largest in zip(
        seconds[order][last].tolist(), ms[order][last].tolist(), strict=True
    ):
        found.largest[second] = largest
    return found


def merged(parts: Iterable[LatencyCounts]) -> LatencyCounts:
    total = LatencyCounts()
    for part in parts:
        total.add(part)
    return total


def as_rows(seconds: Iterable[SecondLatency]) -> list[list[float]]:
    """[second, count, p50 ms, p99 ms, max ms] rows (report.json's form)."""
    return [
        [s.second, s.count, round(s.p50_ms, 3), round(s.p99_ms, 3), round(s.max_ms, 3)]
        for s in seconds
    ]


def from_rows(rows: Iterable[Iterable[float]]) -> list[SecondLatency]:
    return [
        SecondLatency(int(r[0]), int(r[1]), float(r[2]), float(r[3]), float(r[4]))
        for r in (list(row) for row in rows)
    ]
