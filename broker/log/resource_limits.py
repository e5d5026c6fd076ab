"""A process resource running out is not a failed disk.

Kafka 2.8 takes a log dir offline on any ``IOException`` of a checkpoint or segment
operation. Here only the errors that say the disk is bad (EIO, EROFS, ENOSPC, a corrupt
checkpoint, ...) do: EMFILE (this process's ``RLIMIT_NOFILE``), ENFILE (the system's file
table) and ENOMEM say that the process ran out of something that comes back on its own (a
connection flood ends, a spike of memory is given back). Taking the dir offline for them would
leave the broker out of every ISR until a restart. :func:`is_resource_exhaustion` tells them
apart; :class:`ResourceErrorReporter` counts them and logs them at a bounded rate; the caller
retries (a checkpoint on its next period, a produce with a retriable KAFKA_STORAGE_ERROR, a
follower's append after its fetch back-off).

The file-descriptor budget (:func:`fds_needed`): every segment of every hosted log keeps two
descriptors open for as long as the log is open, its ``.log`` file and its ``.index`` file (no
``.timeindex`` is written). Writes open a few more for a moment (a checkpoint's ``.tmp`` and
its directory for the fsync, a producer snapshot, a leader-epoch checkpoint, a ``dup`` for an
fsync). Sockets (clients, replica fetchers, ZooKeeper, gRPC) and the interpreter's own files
come on top: :data:`BASE_FDS`. :func:`nofile_warning` compares that budget with the soft
``RLIMIT_NOFILE`` at start-up, for the segments the broker hosts and, since every hosted
partition has at least one segment, for the ``max.broker.partitions`` it may be given
(:func:`check_partition_cap_fds`; docs/zookeeper.md#partition-limits).
"""

from __future__ import annotations

import errno
import logging
import resource
import threading
import time
from collections.abc import Callable

from proto.process.event_log import log_event

__all__ = [
    "BASE_FDS",
    "FDS_PER_SEGMENT",
    "NEAR_LIMIT_FRACTION",
    "RESOURCE_ERRNOS",
    "ResourceErrorReporter",
    "check_nofile_limit",
    "check_partition_cap_fds",
    "fds_needed",
    "is_resource_exhaustion",
    "nofile_warning",
]

RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})
"""Errnos that mean the process or the system ran out of something, not that the disk failed."""

FDS_PER_SEGMENT = 2
"""A segment's ``.log`` and ``.index`` files, open while its log is open."""

BASE_FDS = 1024
"""Descriptors kept apart from the logs: client and replication connections, ZooKeeper, the
gRPC server, the transient files of checkpoint writes, the interpreter's own."""

NEAR_LIMIT_FRACTION = 0.8
"""Warn when the budget passes this fraction of the limit."""


def is_resource_exhaustion(err: BaseException) -> bool:
    """EMFILE, ENFILE or ENOMEM: transient, retried, never a reason to take a dir offline."""
    return isinstance(err, OSError) and err.errno in RESOURCE_ERRNOS


def fds_needed(segments: int) -> int:
    """The descriptors a broker hosting ``segments`` segments (over all its logs) needs."""
    return BASE_FDS + FDS_PER_SEGMENT * segments


def nofile_warning(segments: int, soft_limit: int) -> str | None:
    """Why ``soft_limit`` (``RLIMIT_NOFILE``; ``resource.RLIM_INFINITY`` is -1) is too low
    for ``segments`` open segments, or None when it leaves room."""
    if soft_limit < 0:
        return None
    needed = fds_needed(segments)
    if needed > soft_limit:
        return f"below the {needed} file descriptors the hosted logs need"
    if needed > soft_limit * NEAR_LIMIT_FRACTION:
        return f"near the {needed} file descriptors the hosted logs need"
    return None


def check_nofile_limit(segments: int, logger: logging.Logger, component: str) -> str | None:
    """At start-up: one line with the soft ``RLIMIT_NOFILE`` and the budget of the
    ``segments`` open segments, a warning when the limit is near or below it. Returns the
    warning (None when the limit leaves room)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    warning = nofile_warning(segments, soft)
    log_event(
        logger,
        logging.INFO if warning is None else logging.WARNING,
        component,
        "nofile_limit" if warning is None else "nofile_limit_low",
        limit=soft,
        hard_limit=hard,
        needed=fds_needed(segments),
        segments=segments,
        fds_per_segment=FDS_PER_SEGMENT,
        reason=warning or "ok",
    )
    return warning


def check_partition_cap_fds(
    max_broker_partitions: int, logger: logging.Logger, component: str
) -> str | None:
    """At start-up: warn when the soft ``RLIMIT_NOFILE`` cannot hold ``max.broker.partitions``
    partitions of one segment each (the cap would let the broker run out of descriptors
    before it is reached). Returns the warning, None when the limit leaves room."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    warning = nofile_warning(max_broker_partitions, soft)
    if warning is not None:
        log_event(
            logger,
            logging.WARNING,
            component,
            "nofile_limit_below_partition_cap",
            limit=soft,
            hard_limit=hard,
            needed=fds_needed(max_broker_partitions),
            max_broker_partitions=max_broker_partitions,
            reason=warning,
        )
    return warning


class ResourceErrorReporter:
    """Counts every resource-exhaustion error and logs one line per occurrence, at most one
    per ``interval_s`` for each place it hit (a flood meets EMFILE thousands of times a
    second); the next line says how many were left out. Thread-safe: segment writes fail on
    executor threads."""

    def __init__(
        self,
        logger: logging.Logger,
        component: str,
        count: Callable[[str], None],
        *,
        interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._component = component
        self._count = count
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last_logged: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def report(self, where: str, err: OSError, **fields: object) -> bool:
        """Count ``err``; True if a line was logged for it."""
        name = errno.errorcode.get(err.errno or 0, str(err.errno))
        self._count(name)
        now = self._clock()
        with self._lock:
            last = self._last_logged.get(where)
            if last is not None and now - last < self._interval_s:
                self._suppressed[where] = self._suppressed.get(where, 0) + 1
                return False
            self._last_logged[where] = now
            suppressed = self._suppressed.pop(where, 0)
        log_event(
            self._logger,
            logging.WARNING,
            self._component,
            "resource_exhausted",
            where=where,
            errno=name,
            error=err,
            suppressed=suppressed,
            log_dir="online",
            **fields,
        )
        return True
