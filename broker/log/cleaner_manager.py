"""Which compacted log to clean next, and how far each is clean (Kafka's
``LogCleanerManager`` and its ``cleaner-offset-checkpoint``).

The broker calls :meth:`LogCleanerManager.clean_dirtiest` every ``log.cleaner.backoff.ms``
on the cleaner's own thread (one, as Kafka's default ``log.cleaner.threads``). Among the
logs whose ``cleanup.policy`` includes ``compact`` it takes the dirtiest, as Kafka does:
the one with the highest dirty ratio at or above ``min.cleanable.dirty.ratio``, or any
whose oldest dirty segment is older than ``max.compaction.lag.ms``; cleans it
(:func:`broker.log.log_cleaner.clean_log`); and writes where the cleaning ended to
``cleaner-offset-checkpoint`` in the data dir, where the next cleaning of that log
starts. Each replica cleans its own log, on its own schedule.

The cleaner's reads and writes together are held to ``log.cleaner.io.max.bytes.per.second``
(Kafka's ``Throttler``): after each chunk it sleeps as long as the bytes so far ask.
:meth:`stop` makes a cleaning in progress give up at its next chunk.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from broker.log.checkpoints import OffsetCheckpointFile
from broker.log.compaction import ENTRY_BYTES
from broker.log.log import Log, LogClosedError
from broker.log.log_cleaner import CleanResult, clean_log, cleanable_range, dirty_ratio
from proto.errors import MinibrokerError
from proto.topic_partition import TopicPartition

__all__ = ["CLEANER_OFFSET_CHECKPOINT", "CleanerStopped", "LogCleanerManager"]

log = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"


class CleanerStopped(MinibrokerError):
    """The broker is stopping: the cleaning in progress gives up (its copy is discarded)."""


class LogCleanerManager:
    """The broker's log cleaner (see the module docstring)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        dedupe_buffer_size: int,
        io_max_bytes_per_second: float,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._checkpoint = OffsetCheckpointFile(data_dir / CLEANER_OFFSET_CHECKPOINT)
        self._capacity = max(1, dedupe_buffer_size // ENTRY_BYTES)
        self._rate = io_max_bytes_per_second
        self._clock_ms = clock_ms
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        try:
            self._cleaned: dict[TopicPartition, int] = self._checkpoint.read()
        except OSError as err:
            log.warning("cleaner offsets unreadable, every log starts dirty: %s", err)
            self._cleaned = {}

    def first_dirty_offset(self, tp: TopicPartition) -> int:
        with self._lock:
            return self._cleaned.get(tp, 0)

    def stop(self) -> None:
        self._stopping.set()

    def forget(self, tp: TopicPartition) -> None:
        """The log is gone (deleted or moved away): its checkpoint entry goes with it."""
        with self._lock:
            if self._cleaned.pop(tp, None) is None:
                return
            cleaned = dict(self._cleaned)
        self._checkpoint.write(cleaned)

    def clean_dirtiest(
        self, logs: Mapping[TopicPartition, Log], high_watermarks: Mapping[TopicPartition, int]
    ) -> CleanResult | None:
        """Clean the dirtiest compacted log once; None when none needs it. Logs missing from
        ``high_watermarks`` (not served here yet) are left alone."""
        now = self._clock_ms()
        chosen = self._dirtiest(logs, high_watermarks, now)
        if chosen is None:
            return None
        tp, target = chosen
        started = time.monotonic()
        moved = 0

        def throttle(n: int) -> None:
            nonlocal moved
            if self._stopping.is_set():
                raise CleanerStopped
            moved += n
            ahead = moved / self._rate - (time.monotonic() - started)
            if ahead > 0:
                self._stopping.wait(ahead)

        try:
            first_dirty = self.first_dirty_offset(tp)
            result = clean_log(
                target,
                first_dirty=0 if first_dirty > target.log_end_offset else first_dirty,
                limit_offset=high_watermarks[tp],
                now_ms=now,
                capacity=self._capacity,
                throttle=throttle,
            )
        except (CleanerStopped, LogClosedError):
            return None
        if result is not None:
            with self._lock:
                self._cleaned[tp] = result.end_offset
                cleaned = dict(self._cleaned)
            self._checkpoint.write(cleaned)
        return result

    def _dirtiest(
        self,
        logs: Mapping[TopicPartition, Log],
        high_watermarks: Mapping[TopicPartition, int],
        now: int,
    ) -> tuple[TopicPartition, Log] | None:
        best: tuple[float, TopicPartition, Log] | None = None
        for tp, target in logs.items():
            config = target.config
            hw = high_watermarks.get(tp)
            if not config.compact or hw is None:
                continue
            try:
                segments, log_start, _ = target.cleaning_view()
            except LogClosedError:
                continue
            first_dirty = self.first_dirty_offset(tp)
            if first_dirty > target.log_end_offset:  # a log made anew since: dirty from start
                first_dirty = 0
            first_dirty = max(first_dirty, log_start)
            uncleanable = cleanable_range(segments, hw, now, config.min_compaction_lag_ms)
            if first_dirty >= uncleanable:
                continue
            ratio = dirty_ratio(segments, first_dirty, uncleanable)
            overdue = any(
                now - s.max_timestamp() > config.max_compaction_lag_ms
                for i, s in enumerate(segments[:-1])
                if s.base_offset < uncleanable and segments[i + 1].base_offset > first_dirty
            )
            if ratio < config.min_cleanable_dirty_ratio and not overdue:
                continue
            score = 2.0 if overdue else ratio
            if best is None or score > best[0]:
                best = (score, tp, target)
        return None if best is None else (best[1], best[2])
