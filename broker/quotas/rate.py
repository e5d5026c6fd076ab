"""The rate a quota is measured by, and the throttle time of a client over it: Kafka's
``SampledStat``/``WindowedSum``/``Rate`` and ``QuotaUtils.throttleTime``, step for step,
so a client is throttled here exactly when and as long as Kafka 2.8 would throttle it.

A rate keeps ``samples`` windows (``quota.window.num``, 11) of ``window_ms``
(``quota.window.size.seconds``, 1 s) each; a value is added to the current window, a new
window starts when the current one is ``window_ms`` old, and a window older than all of
them together is reset. The rate is the sum of the windows over the time they span, which
is counted as at least ``samples - 1`` whole windows: a client that just started is not
measured over a few milliseconds (Kafka's ``Rate.windowSize``).

If O is the observed rate and T the quota over a window W, a delay X such that
O * W / (W + X) = T brings the rate back to the quota: X = (O - T) / T * W.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["QuotaViolation", "Rate", "throttle_time_ms"]


@dataclass(slots=True)
class _Sample:
    value: float
    last_window_ms: int
    event_count: int = 0

    def reset(self, now_ms: int) -> None:
        self.value = 0.0
        self.last_window_ms = now_ms
        self.event_count = 0


class Rate:
    """A per-second rate over sampled windows (Kafka's ``Rate`` over a ``WindowedSum``)."""

    def __init__(self, samples: int = 11, window_ms: int = 1000) -> None:
        if samples < 1 or window_ms < 1:
            raise ValueError(
                f"a rate needs samples >= 1 and window_ms >= 1: {samples}, {window_ms}"
            )
        self.samples = samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        """Add ``value`` at ``now_ms`` (Kafka's ``SampledStat.record``)."""
        sample = self._current_sample(now_ms)
        if now_ms - sample.last_window_ms >= self.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.event_count += 1

    def measure(self, now_ms: int) -> float:
        """The rate per second at ``now_ms``."""
        return self.total(now_ms) / (self.window_size_ms(now_ms) / 1000.0)

    def total(self, now_ms: int) -> float:
        """The sum of the values the windows hold."""
        self._purge(now_ms)
        return sum(s.value for s in self._samples)

    def event_count(self, now_ms: int) -> int:
        """How many values the windows hold (the count of Kafka's ``Avg``)."""
        self._purge(now_ms)
        return sum(s.event_count for s in self._samples)

    def window_size_ms(self, now_ms: int) -> int:
        """The time the rate is measured over (Kafka's ``Rate.windowSize``): from the
        oldest window's start, but at least ``samples - 1`` whole windows."""
        self._purge(now_ms)
        elapsed = now_ms - self._oldest(now_ms).last_window_ms
        full_windows = elapsed // self.window_ms
        min_full_windows = self.samples - 1
        if full_windows < min_full_windows:
            elapsed += (min_full_windows - full_windows) * self.window_ms
        return elapsed

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(0.0, now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        self._current = (self._current + 1) % self.samples
        if self._current >= len(self._samples):
            sample = _Sample(0.0, now_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(now_ms)
        return sample

    def _oldest(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(0.0, now_ms))
        return min(self._samples, key=lambda s: s.last_window_ms)

    def _purge(self, now_ms: int) -> None:
        """Reset the windows that ended in the absence of any event."""
        expire_age = self.samples * self.window_ms
        for sample in self._samples:
            if now_ms - sample.last_window_ms >= expire_age:
                sample.reset(now_ms)


@dataclass(frozen=True, slots=True)
class QuotaViolation:
    """A rate over its bound (Kafka's ``QuotaViolationException``)."""

    value: float
    """The rate measured after the record that broke the quota."""
    bound: float


def throttle_time_ms(violation: QuotaViolation, rate: Rate, now_ms: int) -> int:
    """How long the client must wait for its rate to come back to the bound if it records
    nothing more (Kafka's ``QuotaUtils.throttleTime``; rounded half up as Java's
    ``Math.round``)."""
    difference = violation.value - violation.bound
    delay = difference / violation.bound * rate.window_size_ms(now_ms)
    return math.floor(delay + 0.5)
