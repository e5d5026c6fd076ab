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

The file-descriptor budget (:func:`fds_needed`, docs/storage.md#file-descriptors): a fixed
pool, not a count per replica. A segment's ``.log`` file holds a descriptor only while it is
in the broker's pool of open segment files (broker.log.segment_files), at most
``log.segment.open.files.max`` of them (by default :func:`default_max_open_segment_files`,
half the soft ``RLIMIT_NOFILE``); its
``.index`` file holds one only while pending entries are written or fsynced (no
``.timeindex`` is written). Writes open a few more for a moment (an index write, a
checkpoint's ``.tmp`` and its directory for the fsync, a producer snapshot, a leader-epoch
checkpoint). Sockets (clients, replica fetchers, ZooKeeper, gRPC) and the interpreter's own
files come on top: :data:`BASE_FDS`. :func:`nofile_warning` compares that budget with the
soft ``RLIMIT_NOFILE`` at start-up (:func:`check_nofile_limit`); :func:`check_partition_cap_fds`
says when ``max.broker.partitions`` active segments would not all fit the pool (appends to
partitions beyond it then reopen their file: slower, not out of descriptors;
docs/zookeeper.md#partition-limits).
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
    "MIN_OPEN_SEGMENT_FILES",
    "NEAR_LIMIT_FRACTION",
    "RESOURCE_ERRNOS",
    "ResourceErrorReporter",
    "check_nofile_limit",
    "check_partition_cap_fds",
    "default_max_open_segment_files",
    "fds_needed",
    "is_resource_exhaustion",
    "nofile_warning",
]

RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})
"""Errnos that mean the process or the system ran out of something, not that the disk failed."""

SEGMENT_FILES_SHARE = 2
"""The pool of open segment files takes 1/this of the soft ``RLIMIT_NOFILE`` by default; the
rest is left to sockets and transient files."""

MIN_OPEN_SEGMENT_FILES = 16
"""The smallest default pool, however low the limit (each log needs one open at a time)."""

UNLIMITED_NOFILE = 1 << 20
"""What an ``RLIMIT_NOFILE`` of RLIM_INFINITY is taken as: Linux's default ``nr_open``, the
most any process can open whatever its limit says."""

BASE_FDS = 1024
"""Descriptors kept apart from the logs: client and replication connections, ZooKeeper, the
gRPC server, the transient files of checkpoint writes, the interpreter's own."""

NEAR_LIMIT_FRACTION = 0.8
"""Warn when the budget passes this fraction of the limit."""


def is_resource_exhaustion(err: BaseException) -> bool:
    """EMFILE, ENFILE or ENOMEM: transient, retried, never a reason to take a dir offline."""
    return isinstance(err, OSError) and err.errno in RESOURCE_ERRNOS


def default_max_open_segment_files(soft_limit: int | None = None) -> int:
    """The default bound of the pool of open segment files: half of ``soft_limit`` (the
    process's soft ``RLIMIT_NOFILE`` if None; RLIM_INFINITY counts as
    :data:`UNLIMITED_NOFILE`), at least :data:`MIN_OPEN_SEGMENT_FILES`. At 20,000 that is
    10,000: every active segment of 10,000 partitions stays open, and 30,000 replicas fit
    with their older segments reopened on demand."""
    if soft_limit is None:
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft_limit < 0:
        soft_limit = UNLIMITED_NOFILE
    return max(MIN_OPEN_SEGMENT_FILES, soft_limit // SEGMENT_FILES_SHARE)


def fds_needed(open_segment_files: int) -> int:
    """The descriptors a broker needs with ``open_segment_files`` segment files open at once
    (at most the pool's bound, however many replicas it hosts)."""
    return BASE_FDS + open_segment_files


def nofile_warning(open_segment_files: int, soft_limit: int) -> str | None:
    """Why ``soft_limit`` (``RLIMIT_NOFILE``; ``resource.RLIM_INFINITY`` is -1) is too low
    for ``open_segment_files`` open segment files, or None when it leaves room."""
    if soft_limit < 0:
        return None
    needed = fds_needed(open_segment_files)
    if needed > soft_limit:
        return f"below the {needed} file descriptors the open segment files and sockets need"
    if needed > soft_limit * NEAR_LIMIT_FRACTION:
        return f"near the {needed} file descriptors the open segment files and sockets need"
    return None


def check_nofile_limit(
    segments: int,
    logger: logging.Logger,
    component: str,
    *,
    max_open_segment_files: int | None = None,
) -> str | None:
    """At start-up: one line with the soft ``RLIMIT_NOFILE`` and the budget of the hosted
    ``segments``, of which at most ``max_open_segment_files`` (default:
    :func:`default_max_open_segment_files`) are open at once; a warning when the limit is
    near or below it. Returns the warning (None when the limit leaves room)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    pool = (
        default_max_open_segment_files(soft)
        if max_open_segment_files is None
        else max_open_segment_files
    )
    open_files = min(segments, pool)
    warning = nofile_warning(open_files, soft)
    log_event(
        logger,
        logging.INFO if warning is None else logging.WARNING,
        component,
        "nofile_limit" if warning is None else "nofile_limit_low",
        limit=soft,
        hard_limit=hard,
        needed=fds_needed(open_files),
        segments=segments,
        max_open_segment_files=pool,
        reason=warning or "ok",
    )
    return warning


def check_partition_cap_fds(
    max_broker_partitions: int,
    logger: logging.Logger,
    component: str,
    *,
    max_open_segment_files: int | None = None,
) -> str | None:
    """At start-up: warn when the pool of open segment files (``max_open_segment_files``,
    default :func:`default_max_open_segment_files`) cannot hold the active segment of each
    of ``max.broker.partitions`` partitions. Nothing fails then (a partition whose file was
    closed reopens it at its next append), but a broker writing to more partitions than the
    pool holds opens and closes a file per append. Returns the warning, None when the pool
    leaves room."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    pool = (
        default_max_open_segment_files(soft)
        if max_open_segment_files is None
        else max_open_segment_files
    )
    if max_broker_partitions <= pool:
        return None
    warning = (
        f"the pool of {pool} open segment files (half of RLIMIT_NOFILE {soft} by default) "
        f"holds fewer than the {max_broker_partitions} active segments of "
        f"max.broker.partitions; appends beyond it reopen their segment file"
    )
    log_event(
        logger,
        logging.WARNING,
        component,
        "nofile_limit_below_partition_cap",
        limit=soft,
        hard_limit=hard,
        max_open_segment_files=pool,
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
