"""The broker's data dir and every partition log in it (Kafka's ``LogManager``).

Layout of the data dir (``log.dirs``, one directory)::

    meta.properties                     broker.id and cluster.id owning the dir (others refused)
    .lock                               held while a broker process uses the dir
    .kafka_cleanshutdown                present only between a clean shutdown and the next start
    recovery-point-offset-checkpoint    where recovery starts per log (written here)
    log-start-offset-checkpoint         log start offsets raised past the first segment (here)
    replication-offset-checkpoint       high watermarks (owned by the replica manager; read
                                        and written through this class's helpers)
    <topic>-<partition>/                one Log each (broker.log.log)
    <topic>-<partition>.<uuid>-delete/  a log being deleted; removed at the next start

Startup (:meth:`LogManager.startup`) reads and *deletes* the clean-shutdown marker before
loading anything (KAFKA-10471), so a crash while loading counts as unclean next time; logs
are then opened with recovery from their checkpointed recovery point unless the marker was
there. A log that fails to open with an OSError is reported in :attr:`offline_logs` and does
not stop the others; if it failed with EMFILE, ENFILE or ENOMEM it is opened again when next
asked for. Shutdown flushes, checkpoints and closes every log, and only then
writes the marker.

Every method is synchronous: the broker calls the slow ones (startup, flushes,
checkpoints, retention, shutdown) from an executor. One lock guards the set of logs, so
lookups from the event loop thread and work in executor threads can interleave.
"""

from __future__ import annotations

import fcntl
import logging
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, TypeVar

from broker.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CheckpointError,
    OffsetCheckpointFile,
    atomic_write_text,
    fsync_directory,
    read_broker_metadata,
    write_meta_properties,
)
from broker.log.log import BackgroundRunner, Log, LogClosedError
from broker.log.resource_limits import default_max_open_segment_files, is_resource_exhaustion
from broker.log.segment_files import SegmentFilePool
from proto.config.log_config import LogConfig
from proto.errors import MinibrokerError
from proto.topic_partition import TopicPartition, topic_name_problem

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "LOCK_FILE",
    "DataDirLockedError",
    "IllegalPartitionPathError",
    "InconsistentBrokerIdError",
    "InconsistentClusterIdError",
    "LogManager",
    "LogManagerError",
    "LogOfflineError",
]

log = logging.getLogger(__name__)

_Item = TypeVar("_Item")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
"""Written last at a clean shutdown; its presence at startup means no recovery is needed."""
LOCK_FILE = ".lock"
"""Locked (fcntl) by the process using the data dir, as Kafka's FileLock."""
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
_DELETE_DIR = re.compile(r"(.+)-([0-9]+)\.([0-9a-f]{32})-delete")


class LogManagerError(MinibrokerError):
    """Root of the errors that stop the data dir from being used at all."""


class InconsistentBrokerIdError(LogManagerError):
    """``meta.properties`` names another broker.id (Kafka's InconsistentBrokerIdException)."""


class InconsistentClusterIdError(LogManagerError):
    """``meta.properties`` names another cluster.id than ZooKeeper's ``/cluster/id`` (Kafka's
    InconsistentClusterIdException): the broker is pointed at the wrong cluster."""


class DataDirLockedError(LogManagerError):
    """Another process holds the data dir's ``.lock``."""


class LogOfflineError(MinibrokerError, OSError):
    """The partition's log failed to open at startup (KAFKA_STORAGE_ERROR)."""


class IllegalPartitionPathError(MinibrokerError, ValueError):
    """A partition whose directory would not be a direct child of the data dir: an illegal
    topic name (``../x``, ``/abs``), a negative partition, or a symlink leading out."""


class LogManager:
    """Opens, creates, checkpoints, cleans and deletes the logs of one data dir."""

    def __init__(
        self,
        data_dir: Path,
        default_log_config: LogConfig,
        broker_id: int,
        *,
        background: BackgroundRunner | None = None,
        recovery_threads: int = 1,
        max_open_segment_files: int | None = None,
    ) -> None:
        """Nothing touches the disk before :meth:`startup`. ``background`` is given to every
        log for the flushes its rolls schedule (see :meth:`Log.open`). Every log draws its
        segment files from one pool of at most ``max_open_segment_files`` open descriptors
        (default: half the soft ``RLIMIT_NOFILE``; docs/storage.md#file-descriptors).
        ``recovery_threads`` (``num.recovery.threads.per.data.dir``) load the logs at startup
        and flush and close them at shutdown: each log's own steps are mostly fsyncs (a
        leader's empty epoch entry dropped at load is a checkpoint rewrite), which overlap
        on several threads."""
        if recovery_threads < 1:
            raise ValueError(f"recovery_threads must be at least 1, not {recovery_threads}")
        self._data_dir = data_dir
        self._files = SegmentFilePool(
            default_max_open_segment_files()
            if max_open_segment_files is None
            else max_open_segment_files
        )
        self._background = background
        self._recovery_threads = recovery_threads
        self._default_log_config = default_log_config
        self._broker_id = broker_id
        self._lock = threading.Lock()
        """Guards _logs and _offline; held while a log is created or deleted."""
        self._logs: dict[TopicPartition, Log] = {}
        self._offline: dict[TopicPartition, OSError] = {}
        self._offline_recovery_points: dict[TopicPartition, int] = {}
        self._offline_start_offsets: dict[TopicPartition, int] = {}
        self._recovery_points = OffsetCheckpointFile(data_dir / RECOVERY_POINT_OFFSET_CHECKPOINT)
        self._log_start_offsets = OffsetCheckpointFile(data_dir / LOG_START_OFFSET_CHECKPOINT)
        self._high_watermarks = OffsetCheckpointFile(data_dir / REPLICATION_OFFSET_CHECKPOINT)
        self._lock_file: IO[bytes] | None = None
        self._had_clean_shutdown = False
        self._started = False
        self._dir_failure: OSError | None = None

    def __repr__(self) -> str:
        return (
            f"LogManager({str(self._data_dir)!r}, broker={self._broker_id}, logs={len(self._logs)})"
        )

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    @property
    def had_clean_shutdown(self) -> bool:
        """Whether the last run ended with a clean shutdown (known after :meth:`startup`)."""
        return self._had_clean_shutdown

    @property
    def offline_logs(self) -> dict[TopicPartition, OSError]:
        """Logs that failed to open at startup, with the error (a snapshot)."""
        with self._lock:
            return dict(self._offline)

    # -- startup ---------------------------------------------------------------------------

    def startup(
        self, topic_configs: Mapping[str, LogConfig] | None = None, cluster_id: str | None = None
    ) -> None:
        """Take the data dir and load every partition log in it.

        Creates the dir, locks it (DataDirLockedError if another process holds it), writes
        or checks ``meta.properties`` (InconsistentBrokerIdError for another broker.id,
        InconsistentClusterIdError for another cluster.id than ``cluster_id``, which is
        written there if the file has none yet),
        reads and deletes the clean-shutdown marker, reads the recovery-point and
        log-start-offset checkpoints (an unreadable one is logged and ignored: every log is
        then recovered from its start, which is slower but safe) and opens each
        ``<topic>-<partition>`` directory with the config in ``topic_configs`` for its
        topic, else the default. Other directories are logged and skipped; leftovers of an
        interrupted :meth:`delete_log` are removed.
        """
        if self._started:
            raise RuntimeError("LogManager.startup() called twice")
        self._data_dir.mkdir(parents=True, exist_ok=True)
        self._acquire_dir_lock()
        try:
            self._check_meta_properties(cluster_id)
            self._had_clean_shutdown = self._consume_clean_shutdown_marker()
            recovery_points, clean = self._read_checkpoint(self._recovery_points)
            start_offsets, _ = self._read_checkpoint(self._log_start_offsets)
            clean_shutdown = self._had_clean_shutdown and clean
            configs = topic_configs or {}
            found = [
                (tp, directory)
                for directory in sorted(self._data_dir.iterdir())
                if (tp := self._partition_of(directory)) is not None
            ]

            def load(item: tuple[TopicPartition, Path]) -> None:
                tp, directory = item
                self._load_log(
                    tp,
                    directory,
                    configs.get(tp.topic, self._default_log_config),
                    recovery_point=recovery_points.get(tp, 0),
                    log_start_offset=start_offsets.get(tp, 0),
                    clean_shutdown=clean_shutdown,
                )

            self._on_recovery_threads(load, found)
        except BaseException:
            for loaded in self._logs.values():
                loaded.close()
            self._logs.clear()
            self._release_dir_lock()
            raise
        self._started = True
        log.info(
            "loaded %d logs from %s (clean shutdown: %s, offline: %d)",
            len(self._logs),
            self._data_dir,
            self._had_clean_shutdown,
            len(self._offline),
        )

    def _acquire_dir_lock(self) -> None:
        path = self._data_dir / LOCK_FILE
        lock_file = open(path, "ab")  # noqa: SIM115 - held open until shutdown
        try:
            # fcntl record locks are per process, as Java's FileChannel.tryLock on Linux: a
            # second broker process on this dir is refused.
            fcntl.lockf(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            lock_file.close()
            raise DataDirLockedError(
                f"failed to acquire the lock on {path}: another broker process is using the "
                f"data dir {self._data_dir}"
            ) from e
        self._lock_file = lock_file

    def _release_dir_lock(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()  # closing the file releases the lock
            self._lock_file = None

    def _check_meta_properties(self, cluster_id: str | None) -> None:
        path = self._data_dir / META_PROPERTIES
        stored = read_broker_metadata(self._data_dir)
        if stored is None:
            write_meta_properties(self._data_dir, self._broker_id, cluster_id)
            return
        if stored.broker_id != self._broker_id:
            raise InconsistentBrokerIdError(
                f"configured broker.id {self._broker_id} does not match broker.id "
                f"{stored.broker_id} in {path}: this data dir belongs to broker "
                f"{stored.broker_id}; use that id or another log.dirs"
            )
        if cluster_id is None or stored.cluster_id == cluster_id:
            return
        if stored.cluster_id is not None:
            raise InconsistentClusterIdError(
                f"the cluster ID {cluster_id} (/cluster/id in ZooKeeper) does not match "
                f"cluster.id {stored.cluster_id} in {path}: the broker is trying to join the "
                "wrong cluster; zookeeper.connect may name another cluster's ZooKeeper (or "
                "chroot), or log.dirs another cluster's data dir"
            )
        write_meta_properties(self._data_dir, self._broker_id, cluster_id)

    def _consume_clean_shutdown_marker(self) -> bool:
        """KAFKA-10471: delete the marker as soon as it is read, and make the deletion
        durable, so that a crash while loading is seen as unclean at the next start."""
        marker = self._data_dir / CLEAN_SHUTDOWN_FILE
        if not marker.exists():
            return False
        marker.unlink()
        fsync_directory(self._data_dir)
        return True

    def _read_checkpoint(
        self, checkpoint: OffsetCheckpointFile
    ) -> tuple[dict[TopicPartition, int], bool]:
        """The checkpoint's entries and whether it was readable."""
        try:
            return checkpoint.read(), True
        except CheckpointError as e:
            log.warning("ignoring unreadable checkpoint (logs will be fully recovered): %s", e)
            return {}, False

    def _partition_of(self, directory: Path) -> TopicPartition | None:
        """The partition a data dir entry holds, or None for anything else (logged)."""
        name = directory.name
        if not directory.is_dir() or name.startswith("."):
            return None
        if name.endswith(DELETE_DIR_SUFFIX):
            if _DELETE_DIR.fullmatch(name):
                log.info("removing %s, a log whose deletion was interrupted", directory)
                shutil.rmtree(directory, ignore_errors=True)
            else:
                log.warning("skipping %s: not a partition directory", directory)
            return None
        if name.endswith(FUTURE_DIR_SUFFIX):
            log.warning("skipping %s: future logs (replica moves) are not supported", directory)
            return None
        try:
            tp = TopicPartition.from_dir_name(name)
            self.partition_dir(tp)
        except ValueError:  # IllegalPartitionPathError too (e.g. a symlink leading out)
            log.warning("skipping %s: not a partition directory", directory)
            return None
        return tp

    def _load_log(
        self,
        tp: TopicPartition,
        directory: Path,
        config: LogConfig,
        *,
        recovery_point: int,
        log_start_offset: int,
        clean_shutdown: bool,
    ) -> None:
        try:
            opened = Log.open(
                directory,
                config,
                recovery_point=recovery_point,
                log_start_offset=log_start_offset,
                clean_shutdown=clean_shutdown,
                background=self._background,
                files=self._files,
            )
        except OSError as e:
            # Kafka takes the whole log dir offline; with one dir per broker that would stop
            # every partition for one bad one, so only this partition goes offline.
            log.error("log %s is offline: it failed to open: %s", tp, e)
            with self._lock:
                self._offline[tp] = e
                self._offline_recovery_points[tp] = recovery_point
                self._offline_start_offsets[tp] = log_start_offset
            return
        with self._lock:
            self._logs[tp] = opened

    def _on_recovery_threads(self, action: Callable[[_Item], None], items: Sequence[_Item]) -> None:
        """``action(item)`` for every item, on ``recovery_threads`` threads (here if one);
        the first exception propagates once every item had its turn."""
        if self._recovery_threads == 1 or len(items) < 2:
            for item in items:
                action(item)
            return
        with ThreadPoolExecutor(
            self._recovery_threads, thread_name_prefix=f"broker-{self._broker_id}-recovery"
        ) as pool:
            futures = [pool.submit(action, item) for item in items]
        errors = [e for f in futures if (e := f.exception()) is not None]
        if errors:
            raise errors[0]

    # -- the logs --------------------------------------------------------------------------

    def get_log(self, tp: TopicPartition) -> Log | None:
        with self._lock:
            return self._logs.get(tp)

    def get_or_create_log(self, tp: TopicPartition, log_config: LogConfig | None = None) -> Log:
        """The partition's log, created empty (with ``log_config``, else the default) if
        there is none. An existing log keeps its config (see :meth:`Log.update_config`).

        Raises LogOfflineError for a log that failed to open at startup (unless it failed
        for want of descriptors or memory: it is then opened again), and OSError if the
        new log cannot be created.
        """
        with self._lock:
            self._check_started()
            existing = self._logs.get(tp)
            if existing is not None:
                return existing
            if tp in self._offline:
                return self._reopen_offline_log(tp, log_config)
            created = Log.open(
                self.partition_dir(tp),
                log_config or self._default_log_config,
                background=self._background,
                files=self._files,
            )
            self._logs[tp] = created
        log.debug("created log %s in %s", tp, self._data_dir)
        return created

    def get_or_create_logs(
        self, wanted: Mapping[TopicPartition, LogConfig | None]
    ) -> dict[TopicPartition, Log | Exception]:
        """:meth:`get_or_create_log` for many partitions in one call (a LeaderAndIsr for a
        new topic names thousands): each partition's log, or the exception its creation
        raised, so that one bad partition does not fail the others. One log line for the
        logs created, not one per partition."""
        out: dict[TopicPartition, Log | Exception] = {}
        created = 0
        for tp, log_config in wanted.items():
            existed = tp in self._logs
            try:
                out[tp] = self.get_or_create_log(tp, log_config)
            except Exception as err:  # reported per partition to the caller
                out[tp] = err
                continue
            created += not existed
        if created:
            log.info("created %d logs in %s", created, self._data_dir)
        return out

    def _reopen_offline_log(self, tp: TopicPartition, log_config: LogConfig | None) -> Log:
        """A log that failed to open at startup for want of descriptors or memory (EMFILE,
        ENFILE, ENOMEM) is opened again when it is next asked for, with a full recovery
        from its checkpointed recovery point; any other failure keeps it offline until a
        restart. Under the lock."""
        error = self._offline[tp]
        if not is_resource_exhaustion(error):
            raise LogOfflineError(f"log {tp} is offline: {error}")
        try:
            reopened = Log.open(
                self.partition_dir(tp),
                log_config or self._default_log_config,
                recovery_point=self._offline_recovery_points[tp],
                log_start_offset=self._offline_start_offsets[tp],
                clean_shutdown=False,
                background=self._background,
                files=self._files,
            )
        except OSError as e:
            self._offline[tp] = e
            raise
        self._logs[tp] = reopened
        del self._offline[tp], self._offline_recovery_points[tp], self._offline_start_offsets[tp]
        log.warning("log %s reopened: at startup it failed to open with %s", tp, error)
        return reopened

    def partition_dir(self, tp: TopicPartition) -> Path:
        """``<data-dir>/<topic>-<partition>``, checked to be a direct child of the data dir
        once resolved, before anything creates, renames or deletes it.

        Topic names reach here from requests and znodes, so they are hostile until checked:
        the topic-name rule keeps out ``..``, ``/`` and absolute names, and resolving the path
        keeps out a partition directory that is a symlink to somewhere else. Raises
        IllegalPartitionPathError.
        """
        problem = topic_name_problem(tp.topic)
        if problem is not None or tp.partition < 0:
            raise IllegalPartitionPathError(
                f"no partition directory for {tp.topic!r} partition {tp.partition}: "
                f"{problem or 'negative partition'}"
            )
        directory = self._data_dir / tp.dir_name
        root = self._data_dir.resolve()
        if directory.resolve().parent != root:
            raise IllegalPartitionPathError(
                f"partition directory {directory} resolves to {directory.resolve()}, "
                f"outside the data dir {root}"
            )
        return directory

    @property
    def segment_files(self) -> SegmentFilePool:
        """The pool every log's segment files are opened from."""
        return self._files

    def all_logs(self) -> dict[TopicPartition, Log]:
        """Every online log (a snapshot)."""
        with self._lock:
            return dict(self._logs)

    def delete_log(self, tp: TopicPartition) -> bool:
        """Close the log and remove its directory; False if there was no such log.

        The directory is first renamed to ``<topic>-<partition>.<uuid>-delete`` (Kafka's
        name), so a crash half way through the removal never leaves a damaged log that the
        next start would load; startup removes such leftovers.
        """
        directory = self.partition_dir(tp)
        with self._lock:
            doomed = self._logs.pop(tp, None)
            self._offline.pop(tp, None)
            self._offline_recovery_points.pop(tp, None)
            self._offline_start_offsets.pop(tp, None)
            if doomed is not None:
                doomed.close()
            if not directory.exists():
                return doomed is not None
            renamed = self._data_dir / f"{tp.dir_name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
            directory.rename(renamed)
            fsync_directory(self._data_dir)
        shutil.rmtree(renamed, ignore_errors=True)
        log.info("deleted log %s", tp)
        return True

    # -- checkpoints and flushing ----------------------------------------------------------

    def checkpoint_recovery_points(self) -> None:
        """Write every log's recovery point to ``recovery-point-offset-checkpoint``.

        Offline logs keep the value they had at startup.
        """
        with self._lock:
            points = dict(self._offline_recovery_points)
            points.update({tp: log_.recovery_point for tp, log_ in self._logs.items()})
        self._recovery_points.write(points)

    def checkpoint_log_start_offsets(self) -> None:
        """Write ``log-start-offset-checkpoint``: as Kafka, only the logs whose start offset
        is above their first segment's base offset (raised by DeleteRecords or by following
        a leader's); the others start at their first segment anyway."""
        with self._lock:
            offsets = dict(self._offline_start_offsets)
            for tp, log_ in self._logs.items():
                segments = log_.segments
                if segments and log_.log_start_offset > segments[0].base_offset:
                    offsets[tp] = log_.log_start_offset
        self._log_start_offsets.write(offsets)

    def flush_all(self) -> None:
        """fsync every log up to its end (raising the recovery points). OSError propagates
        after the other logs were flushed."""
        self._for_each(self.all_logs(), "flush", lambda log_: log_.flush())

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        """The high watermarks in ``replication-offset-checkpoint`` (``{}`` if none yet).

        Raises CheckpointError (an OSError) for a corrupt file: the caller must not guess,
        since a high watermark of 0 makes a high-watermark-mode follower truncate its log.
        """
        return self._high_watermarks.read()

    def write_high_watermarks(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        """Atomically replace ``replication-offset-checkpoint`` with ``high_watermarks``."""
        self._high_watermarks.write(high_watermarks)

    # -- retention -------------------------------------------------------------------------

    def cleanup_logs(self, high_watermarks: Mapping[TopicPartition, int], now_ms: int) -> int:
        """Apply retention to every log, only below its partition's high watermark; return
        the number of segments deleted. A log missing from ``high_watermarks`` is left
        alone (its committed range is not known). OSError propagates after the other logs
        were cleaned."""
        deleted = 0

        def clean(log_: Log) -> None:
            nonlocal deleted
            high_watermark = high_watermarks.get(log_.topic_partition)
            if high_watermark is not None:
                deleted += log_.delete_old_segments(high_watermark, now_ms)

        self._for_each(self.all_logs(), "clean up", clean, parallel=False)
        if deleted:
            log.info("retention deleted %d segments", deleted)
        return deleted

    # -- shutdown --------------------------------------------------------------------------

    def mark_dir_offline(self, error: OSError) -> None:
        """An I/O error hit the data dir (Kafka's ``LogDirFailureChannel``): nothing more is
        written to it by this process, not even at shutdown, so the next start finds no
        clean-shutdown marker and recovers every log from its recovery point."""
        if self._dir_failure is None:
            self._dir_failure = error
            log.error("log dir %s is offline: %s", self._data_dir, error)

    def shutdown(self) -> None:
        """Snapshot every log's producer state at its end, flush every log, write the
        checkpoints, close every log, then write the clean-shutdown marker and release the
        data dir.

        If flushing or checkpointing fails, the logs are still closed but no marker is
        written (the next start recovers) and the first error propagates. After
        :meth:`mark_dir_offline` the logs are only closed. Idempotent.
        """
        if not self._started:
            return
        error: BaseException | None = self._dir_failure
        if error is None:
            try:
                self._for_each(
                    self.all_logs(), "snapshot the producer state of", Log.snapshot_producer_state
                )
                self.flush_all()
                self.checkpoint_recovery_points()
                self.checkpoint_log_start_offsets()
            except BaseException as e:
                error = e
        with self._lock:
            logs, self._logs = self._logs, {}
        try:
            self._for_each(logs, "close", Log.close)
        except OSError as e:
            error = error or e
        if error is None:
            atomic_write_text(self._data_dir / CLEAN_SHUTDOWN_FILE, "")
        self._release_dir_lock()
        self._started = False
        if error is not None:
            log.error("unclean shutdown of %s: %s", self._data_dir, error)
            raise error
        log.info("shut down cleanly: %d logs in %s", len(logs), self._data_dir)

    def _check_started(self) -> None:
        if not self._started:
            raise RuntimeError("LogManager is not started")

    def _for_each(
        self,
        logs: Mapping[TopicPartition, Log],
        what: str,
        action: Callable[[Log], None],
        *,
        parallel: bool = True,
    ) -> None:
        """Run ``action(log)`` on every log (on the recovery threads if ``parallel``); a log
        closed meanwhile (deleted) is skipped, an OSError is logged and the first one
        re-raised once every log had its turn."""
        errors: list[OSError] = []

        def run(item: tuple[TopicPartition, Log]) -> None:
            tp, log_ = item
            try:
                action(log_)
            except LogClosedError:
                return
            except OSError as e:
                log.error("failed to %s log %s: %s", what, tp, e)
                errors.append(e)

        if parallel:
            self._on_recovery_threads(run, list(logs.items()))
        else:
            for item in logs.items():
                run(item)
        if errors:
            raise errors[0]
