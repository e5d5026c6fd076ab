"""A partition's log: its segments, offsets, recovery, retention and leader epoch cache.

Kafka's ``Log`` (2.x), in directory ``<data-dir>/<topic>-<partition>/``::

    00000000000000000000.log     record batches, Kafka v2 format (see proto.records.record_batch)
    00000000000000000000.index   sparse offset index (see broker.log.offset_index)
    00000000000000004096.log     the next segment, named after its first offset
    00000000000000004096.index
    00000000000000004096.txnindex  its aborted transactions, once it has one
                                 (broker.log.transaction_index)
    00000000000000004096.snapshot  the producer state below offset 4096
                                 (broker.log.producer_snapshot)
    leader-epoch-checkpoint      the epoch cache (broker.log.leader_epoch_cache)

Each log also holds the state of its idempotent and transactional producers
(broker.log.producer_state): updated by every append, checked by every leader append,
written to a snapshot file at each roll and at a clean shutdown (the latest two kept), and
rebuilt from the latest snapshot and the batch headers after it (and the markers of control
batches) when the log is opened or truncated. A marker that aborts a transaction adds it to its
segment's transaction index; a replay adds any the index lacks (after a crash, a
recovery or a cleaning), so the index always holds every abort whose marker is in the log.

No ``.timeindex`` is written (Kafka's is optional too); see broker.log.log_segment.

Offsets are contiguous: each segment starts where the previous one ends and the batches of
a segment follow each other without gaps, which recovery checks.

Threading: every method is synchronous. The broker appends from its event loop thread and
runs reads, flushes, retention and recovery in executor threads. One re-entrant lock guards
the structure (segment list, offsets); reads take it only to snapshot which segments and
byte ranges to read, then read without it. A read racing a truncation or a segment deletion
notices (a truncation counter, SegmentClosedError) and starts over, so it returns what the
log held at one instant or raises OffsetOutOfRangeError if its offset is gone.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import shutil
import struct
import threading
from bisect import bisect_right
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from broker.log.checkpoints import fsync_directory
from broker.log.leader_epoch_cache import LeaderEpochFileCache
from broker.log.log_loader import create_segment, load_log
from broker.log.log_segment import (
    LogSegment,
    SegmentClosedError,
    SegmentRead,
    TimestampOffset,
)
from broker.log.log_validator import recompressed_batches, validate_client_batches
from broker.log.marker_reader import append_markers, replay_headers
from broker.log.producer_snapshot import (
    CorruptSnapshotError,
    ProducerState,
    delete_snapshots,
    list_snapshots,
    read_snapshot,
    write_snapshot,
)
from broker.log.producer_state import (
    SNAPSHOTS_RETAINED,
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    ProducerStateManager,
)
from broker.log.segment_files import SegmentFilePool
from broker.log.segment_swap import CleanedSegment, commit_swap, discard_cleaned, finish_swap
from broker.log.transaction_index import AbortedTxn
from proto import errors
from proto.config.log_config import LogConfig
from proto.errors import MessageTooLargeError, MinibrokerError, OffsetOutOfRangeError
from proto.records.control_records import EndTxnMarker, encode_marker_batch
from proto.records.record_batch import (
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    BatchHeader,
    CorruptRecordError,
    decode_batch,
    offsets_placeholder,
    parse_header,
    validate_batches,
    with_offsets,
)
from proto.topic_partition import TopicPartition

__all__ = [
    "BackgroundRunner",
    "FetchData",
    "Log",
    "LogAppendInfo",
    "LogClosedError",
    "LogError",
    "UnexpectedAppendOffsetError",
]

log = logging.getLogger(__name__)

BackgroundRunner = Callable[[Callable[[], None]], object]
"""Runs a function later on another thread, e.g. ``ThreadPoolExecutor.submit``."""

"""Leftovers of interrupted writes and deletions; removed when a log is opened."""

_BASE_OFFSET = struct.Struct(">q")
_READ_ATTEMPTS = 5


# -- errors ----------------------------------------------------------------------------------


class LogError(MinibrokerError):
    """Base of the errors the Log raises about its own state.

    What a client asked wrongly raises the error it is answered with, from
    :mod:`proto.errors`: an offset outside ``[log start offset, log end offset]``
    :class:`~proto.errors.OffsetOutOfRangeError`, a batch above ``message.max.bytes`` or an
    append above ``segment.bytes`` :class:`~proto.errors.MessageTooLargeError` (Kafka's
    ``RecordTooLargeException``). Invalid batches raise
    :class:`proto.records.record_batch.CorruptRecordError`, or for a leader append also
    :class:`proto.errors.InvalidRecordError` and
    :class:`proto.errors.UnsupportedCompressionTypeError` (see broker.log.log_validator),
    and disk failures OSError, as they come.
    """


class UnexpectedAppendOffsetError(LogError):
    """A follower append whose offsets do not continue the log end offset."""


class LogClosedError(LogError):
    """The log was closed or deleted."""


# -- results ---------------------------------------------------------------------------------


class LogAppendInfo(NamedTuple):
    """What an append wrote (Kafka's ``LogAppendInfo``).

    A NamedTuple, not a frozen dataclass: one is built per append, and a frozen dataclass
    of this size takes a microsecond to construct.
    """

    first_offset: int
    last_offset: int
    num_records: int
    num_batches: int
    valid_bytes: int
    max_timestamp: int
    offset_of_max_timestamp: int
    """Last offset of the first batch holding ``max_timestamp`` (Kafka's shallow offset)."""
    batches: tuple[BatchHeader, ...]
    """The batches' headers as written: base offsets and epochs stamped. The producer state
    (idempotence) needs their producer ids, sequences and offsets."""
    rolled: bool
    """True when the append started a new segment; the log has then scheduled the flush of
    the older segments on its background runner, as Kafka's roll does."""
    duplicate: bool = False
    """True when nothing was appended because the batches repeat ones an idempotent
    producer wrote before: ``first_offset`` and ``last_offset`` are where they were written
    then (Kafka answers a retried batch with its original offsets)."""


class FetchData(NamedTuple):
    """What :meth:`Log.read` returns."""

    records: bytes
    """Whole v2 batches, possibly none."""
    first_offset: int | None
    """Base offset of the first returned batch (may be below the requested offset)."""
    next_offset: int
    """Offset after the last returned batch; the requested offset when nothing returned."""
    log_start_offset: int
    log_end_offset: int


def _empty_append(offset: int) -> LogAppendInfo:
    return LogAppendInfo(offset, offset - 1, 0, 0, 0, NO_TIMESTAMP, -1, (), False)


def _duplicate_append(original: BatchMetadata) -> LogAppendInfo:
    return LogAppendInfo(
        original.base_offset,
        original.last_offset,
        0,
        0,
        0,
        NO_TIMESTAMP,
        -1,
        (),
        False,
        duplicate=True,
    )


# -- the log ---------------------------------------------------------------------------------


class Log:
    """A partition's append-only log on disk. Create with :meth:`open`."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        topic_partition: TopicPartition,
        segments: list[LogSegment],
        epoch_cache: LeaderEpochFileCache,
        *,
        log_start_offset: int,
        background: BackgroundRunner | None = None,
        files: SegmentFilePool | None = None,
    ) -> None:
        """Use :meth:`open`, which loads and recovers the segments."""
        self._background = background
        self._files = files
        self._directory = directory
        self._config = config
        self._topic_partition = topic_partition
        self._segments = segments
        self._bases = [segment.base_offset for segment in segments]
        self._epoch_cache = epoch_cache
        self._producer_state = ProducerStateManager(topic_partition)
        self._snapshot_files: list[int] = []
        """Offsets of the producer snapshot files in the directory, ascending."""
        self._log_start_offset = log_start_offset
        self._log_end_offset = segments[-1].next_offset
        self._recovery_point = self._log_end_offset
        self._lock = threading.RLock()
        self._truncations = 0
        """Bumped by every truncation, so a read racing one can tell and start over."""
        self._dir_dirty = False
        """True when a segment file was created or deleted since the directory was fsynced."""
        self._closed = False

    def __repr__(self) -> str:
        return (
            f"Log({self._topic_partition}, start={self._log_start_offset}, "
            f"end={self._log_end_offset}, segments={len(self._segments)})"
        )

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        background: BackgroundRunner | None = None,
        files: SegmentFilePool | None = None,
    ) -> Log:
        """Load the log in ``directory`` (created if missing), recovering it if needed.

        Kafka's ``Log.loadSegments``/``recoverLog``: remove stray ``.tmp``/``.deleted``/
        ``.cleaned``/``.swap`` files and orphan indexes; open every segment; recover (see
        :meth:`LogSegment.recover`) every segment from the one holding ``recovery_point``
        onward, plus any whose index is missing or corrupt (and those after it); at the
        first torn or invalid batch truncate there and delete all later segments. With
        ``clean_shutdown`` (Kafka's ``.kafka_cleanshutdown`` marker) nothing is recovered
        unless an index is bad. An empty log gets a segment at ``log_start_offset``.
        Afterwards the recovery point is the log end offset; recovered segments are fsynced
        first so that it holds.

        The epoch cache is reconciled with the recovered batches: entries in the recovered
        range are replaced by the epoch changes the batches actually carry, then
        ``truncate_from_end(LEO)`` and ``truncate_from_start(log start)`` as Kafka does.
        (Kafka only assigns recovered epochs above the latest cached one; rebuilding the
        range also repairs a checkpoint that disagrees with the log, e.g. after damage to
        the uncovered partitionLeaderEpoch field.) An unreadable checkpoint is discarded
        and the cache rebuilt by recovering the whole log.

        The producer state is rebuilt from the batch headers of every segment (headers
        only; records are not decoded).

        ``background(fn)`` runs ``fn()`` later on another thread (an executor's ``submit``):
        every roll schedules there the fsync of the segments it closed, as Kafka's
        ``UnifiedLog.roll`` schedules ``flushUptoOffsetExclusive``, so the recovery point
        follows the log for leaders and followers alike. Without one, nothing is flushed
        until :meth:`flush` is called (tests, tools).

        ``files`` is the broker's pool of open segment files (broker.log.segment_files);
        without one, the process's default pool.

        Never raises on corrupt data, only on I/O errors (OSError), and ValueError when the
        directory name is not ``<topic>-<partition>``.
        """
        loaded_dir = load_log(
            directory,
            config,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            clean_shutdown=clean_shutdown,
            files=files,
        )
        loaded = cls(
            directory,
            config,
            loaded_dir.topic_partition,
            loaded_dir.segments,
            loaded_dir.epoch_cache,
            log_start_offset=loaded_dir.log_start_offset,
            background=background,
            files=files,
        )
        loaded._dir_dirty = not loaded_dir.directory_synced
        try:
            loaded._load_producer_state(loaded_dir.recovered_from)
        except BaseException:
            loaded.close()
            raise
        # A new empty log is announced by its creator (one line per batch of new logs).
        log.log(logging.INFO if loaded_dir.directory_synced else logging.DEBUG, "loaded %r", loaded)
        return loaded

    # -- properties ------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def topic_partition(self) -> TopicPartition:
        return self._topic_partition

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        """Apply a changed topic config (index.interval.bytes applies to new segments)."""
        with self._lock:
            self._config = config

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets (LEO)."""
        return self._log_end_offset

    @property
    def log_start_offset(self) -> int:
        """The first offset that may be read; raised by retention."""
        return self._log_start_offset

    @property
    def recovery_point(self) -> int:
        """First offset not known to be fsynced: recovery after a crash starts here."""
        return self._recovery_point

    @property
    def epoch_cache(self) -> LeaderEpochFileCache:
        return self._epoch_cache

    @property
    def latest_epoch(self) -> int | None:
        return self._epoch_cache.latest_epoch()

    @property
    def producer_state(self) -> ProducerStateManager:
        """The idempotent producers' state (guarded by the log's lock: read it only while
        nothing appends or truncates, e.g. in tests)."""
        return self._producer_state

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction (None: none is open)."""
        with self._lock:
            return self._producer_state.first_unstable_offset

    def first_unstable_offset_at(self, high_watermark: int) -> int | None:
        """What bounds the partition's LSO below ``high_watermark``: the first offset of the
        earliest transaction that is open, or closed by a marker not yet below the high
        watermark (Kafka's ``firstUnstableOffset``; None: none)."""
        with self._lock:
            return self._producer_state.first_unstable_offset_at(high_watermark)

    def forget_replicated_markers(self, high_watermark: int) -> None:
        """The high watermark moved: forget the markers now below it (nothing to do, and no
        lock taken, on the produce path of a log without transactions)."""
        if self._producer_state.has_unreplicated:
            with self._lock:
                self._producer_state.forget_replicated(high_watermark)

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of ``[fetch_offset,
        upper_bound)`` must drop (Kafka's ``collectAbortedTransactions``): the segments'
        indexes from the one holding ``fetch_offset`` on, until one says no later segment
        can hold more."""
        with self._lock:
            segments = self._segments[self._floor_index(fetch_offset) :]
        found: list[AbortedTxn] = []
        for segment in segments:
            aborted, complete = segment.txn_index.collect(fetch_offset, upper_bound)
            found.extend(aborted)
            if complete:
                break
        return found

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        """The segments in offset order (a snapshot); the last is the active one."""
        with self._lock:
            return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    def cleaning_view(self) -> tuple[tuple[LogSegment, ...], int, int]:
        """For the log cleaner: the segments, the log start offset and the generation the
        log is at (bumped by every truncation and swap), which
        :meth:`replace_segments` compares, all taken at once."""
        with self._lock:
            self._check_open()
            return tuple(self._segments), self._log_start_offset, self._truncations

    def producer_last_offsets(self) -> frozenset[tuple[int, int]]:
        """(producer id, last offset) of the last batch of every producer the log tracks:
        the batches the cleaner keeps, emptied if need be (docs/storage.md, "Compacted
        logs")."""
        with self._lock:
            return frozenset(
                (producer_id, entry.last_offset)
                for producer_id, entry in self._producer_state.producers.items()
            )

    def replace_segments(
        self, old: Sequence[LogSegment], cleaned: CleanedSegment, generation: int
    ) -> bool:
        """Swap ``old`` (consecutive segments, not the active one) for their cleaned copy,
        written as ``.cleaned`` files (:mod:`broker.log.segment_swap`, whose steps make it
        crash-safe). False, and the copy discarded, when the log moved on since
        ``generation`` (:meth:`cleaning_view`): a truncation or another swap."""
        directory = self._directory
        with self._lock:
            self._check_open()
            at = next((i for i, s in enumerate(self._segments) if s is old[0]), None)
            current = None if at is None else self._segments[at : at + len(old)]
            if (
                generation != self._truncations
                or current is None
                or len(current) != len(old)
                or any(a is not b for a, b in zip(current, old, strict=True))
                or old[-1] is self._segments[-1]
                or cleaned.base_offset != old[0].base_offset
                or cleaned.next_offset != old[-1].next_offset
            ):
                discard_cleaned(directory, cleaned.base_offset)
                return False
            assert at is not None
            commit_swap(directory, cleaned.base_offset)
            for segment in old:
                segment.delete()
            finish_swap(directory, cleaned.base_offset)
            replacement = LogSegment.open(
                directory,
                cleaned.base_offset,
                index_interval_bytes=self._config.index_interval_bytes,
                files=self._files,
            )
            # Its transaction index is the cleaner's: the aborts whose markers it kept
            # (written with it, segment_swap's steps); an old segment's index gains no entry
            # meanwhile (markers go to the active segment, a replay comes with a truncation).
            replacement.load_next_offset()
            self._segments[at : at + len(old)] = [replacement]
            self._bases[at : at + len(old)] = [cleaned.base_offset]
            self._truncations += 1
        return True

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(segment.size for segment in self._segments)

    # -- appending -------------------------------------------------------------------------

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        leader_epoch: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Validate produced batches, stamp offsets from the LEO and ``leader_epoch``, append.

        The batches are checked as Kafka's leader checks them, and refused whole (nothing
        written) at the first problem: each must pass :func:`check_batch`
        (CorruptRecordError, as for empty input) and fit ``message.max.bytes``, and all of
        them ``segment.bytes`` (MessageTooLargeError); then
        :func:`broker.log.log_validator.validate_client_batches` checks their attributes and
        every record, compressed ones inflated (CorruptRecordError,
        :class:`proto.errors.InvalidRecordError`), so that no follower,
        consumer or audit ever meets a batch here that it cannot decode. A batch is stored
        as sent (its codec kept) unless the log's ``compression.type`` names another codec,
        which recompresses it (:func:`broker.log.log_validator.recompressed_batches`).
        Nothing else is re-encoded or copied: the segment writes each batch's stamped first
        16 bytes and the rest of ``records`` with one vectored write, leaving ``records`` unchanged
        (which must not change during the call).

        Batches of idempotent producers must continue their producers' sequences
        (:meth:`ProducerStateManager.check_leader_append` says what it raises, all
        :class:`proto.errors.BrokerResponseError`); when they all repeat batches written
        before, nothing is appended and the result (``duplicate=True``) says where they were
        written. A coordinator's batches (``origin``) have their producer epoch checked,
        not their sequences.
        """
        if leader_epoch < 0:
            raise ValueError(f"leader epoch must be >= 0, got {leader_epoch}")
        # Kafka's analyzeAndValidateRecords, then its LogValidator: pure over the bytes, so
        # done before taking the lock, which readers and the fetcher need too.
        headers = validate_batches(records)
        if not headers:
            raise CorruptRecordError("no record batches to append")
        self._check_sizes(headers, len(records))
        validate_client_batches(records, headers)
        if self._config.compact:
            _require_keys(records, headers, self._topic_partition)
        stored = recompressed_batches(records, headers, self._config.compression_type)
        if stored is not None:  # Kafka re-checks the sizes of batches it recompressed
            records = stored
            headers = validate_batches(records)
            self._check_sizes(headers, len(records))
        with self._lock:
            self._check_open()
            headers = with_offsets(headers, self._log_end_offset, leader_epoch)
            original = self._producer_state.check_leader_append(headers, origin)
            if original is not None:
                return _duplicate_append(original)
            info = self._append_locked(records, headers, stamp=True)
            flush = self._flush_due()
        if flush:
            self.flush()
        return info

    def append_marker_as_leader(
        self,
        marker: EndTxnMarker,
        producer_id: int,
        producer_epoch: int,
        leader_epoch: int,
        timestamp: int,
    ) -> LogAppendInfo:
        """Write a transaction's commit or abort marker (WriteTxnMarkers, from its
        coordinator; docs/transactions.md). The producer state checks it first: a marker of
        an older producer epoch raises InvalidProducerEpochError, one of an older
        coordinator epoch than the producer's last TransactionCoordinatorFencedError, and
        nothing is written."""
        if leader_epoch < 0:
            raise ValueError(f"leader epoch must be >= 0, got {leader_epoch}")
        records = encode_marker_batch(
            marker, producer_id=producer_id, producer_epoch=producer_epoch, timestamp=timestamp
        )
        headers = validate_batches(records)
        with self._lock:
            self._check_open()
            headers = with_offsets(headers, self._log_end_offset, leader_epoch)
            self._producer_state.check_leader_marker(headers[0], marker)
            info = self._append_locked(records, headers, stamp=True)
            flush = self._flush_due()
        if flush:
            self.flush()
        return info

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches fetched from the leader, keeping their offsets and epochs.

        The batches must be valid (CorruptRecordError), within ``message.max.bytes``
        (MessageTooLargeError) and continue the log exactly: the first base offset equals
        the LEO and each batch starts where the previous one ends
        (UnexpectedAppendOffsetError). Empty input appends nothing. The epoch cache is fed
        each batch's partition leader epoch, so it mirrors the leader's epochs.
        """
        headers = validate_batches(records)
        if not headers:
            return _empty_append(self._log_end_offset)
        self._check_sizes(headers, len(records))
        for previous, header in itertools.pairwise(headers):
            if header.base_offset != previous.next_offset:
                raise UnexpectedAppendOffsetError(
                    f"{self._topic_partition}: fetched batch at offset {header.base_offset} "
                    f"does not follow the previous one ending at {previous.next_offset - 1}"
                )
        with self._lock:
            self._check_open()
            if headers[0].base_offset != self._log_end_offset:
                raise UnexpectedAppendOffsetError(
                    f"{self._topic_partition}: fetched batches start at offset "
                    f"{headers[0].base_offset} but the log end offset is {self._log_end_offset}"
                )
            info = self._append_locked(records, headers, stamp=False)
            flush = self._flush_due()
        if flush:
            self.flush()
        return info

    def _check_sizes(self, headers: Sequence[BatchHeader], total: int) -> None:
        limit = self._config.max_message_bytes
        for header in headers:
            if header.size > limit:
                raise MessageTooLargeError(
                    f"{self._topic_partition}: batch of {header.size} bytes exceeds "
                    f"message.max.bytes {limit}"
                )
        if total > self._config.segment_bytes:
            raise MessageTooLargeError(
                f"{self._topic_partition}: append of {total} bytes exceeds "
                f"segment.bytes {self._config.segment_bytes}"
            )

    def _append_locked(
        self,
        records: bytes | bytearray | memoryview,
        headers: Sequence[BatchHeader],
        *,
        stamp: bool,
    ) -> LogAppendInfo:
        """Append ``records`` whose batches have the final ``headers`` (see LogSegment.append
        for ``stamp``); feed the epoch cache; say what was appended."""
        segment = self._segments[-1]
        rolled = False
        # Kafka's LogSegment.shouldRoll: the append would overflow segment.bytes, or its last
        # offset could not be stored relative to the segment's base offset.
        size = len(records)
        last = headers[-1]
        if not segment.is_empty and (
            segment.size > self._config.segment_bytes - size
            or not segment.fits_offset(last.last_offset)
        ):
            segment = self._roll_locked(headers[0].base_offset)
            rolled = True
        segment.append(records, headers, stamp=stamp)
        self._log_end_offset = last.next_offset
        markers = append_markers(records, headers, self._topic_partition)
        completed = self._producer_state.update(headers, markers)
        if completed:
            self._index_aborts(completed)
        latest = self._epoch_cache.latest_epoch()
        max_timestamp, offset_of_max = NO_TIMESTAMP, -1
        num_records = 0
        for header in headers:
            epoch = header.partition_leader_epoch
            if epoch >= 0 and epoch != latest:
                self._epoch_cache.assign(epoch, header.base_offset)
                latest = epoch
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
            num_records += header.record_count
        return LogAppendInfo(
            headers[0].base_offset,  # first_offset
            self._log_end_offset - 1,  # last_offset
            num_records,
            len(headers),  # num_batches
            size,  # valid_bytes
            max_timestamp,
            offset_of_max,  # offset_of_max_timestamp
            tuple(headers),  # batches
            rolled,
        )

    def _flush_due(self) -> bool:
        interval = self._config.flush_interval_messages
        return interval is not None and self._log_end_offset - self._recovery_point >= interval

    def roll(self) -> LogSegment:
        """Start a new active segment at the LEO (nothing happens if the active one is empty)."""
        with self._lock:
            self._check_open()
            return self._roll_locked(self._log_end_offset)

    def _roll_locked(self, base_offset: int) -> LogSegment:
        active = self._segments[-1]
        if active.is_empty:
            return active
        segment = create_segment(self._directory, self._config, base_offset, self._files)
        try:
            # Kafka snapshots the producer state at every roll: a truncation then replays
            # the batches of one segment only, and opening the log those after the roll.
            self._producer_state.take_snapshot(base_offset)
            self._write_producer_snapshot(base_offset, fsync=False)
            active.on_become_inactive()
        except BaseException:
            # Out of descriptors (EMFILE), say: the roll did not happen and is retried by
            # the next append; the new segment's files must not stay open meanwhile.
            segment.delete()
            raise
        self._segments.append(segment)
        self._bases.append(base_offset)
        self._dir_dirty = True
        log.info("%s: rolled segment %d", self._topic_partition, base_offset)
        if self._background is not None:
            try:
                self._background(functools.partial(self._flush_rolled, base_offset))
            except RuntimeError:  # the runner is shut down: the broker is stopping
                log.info("%s: no background flush after the roll (stopping)", self._topic_partition)
        return segment

    def _flush_rolled(self, up_to_offset: int) -> None:
        """The background flush a roll scheduled (on the runner's thread)."""
        try:
            self.flush(up_to_offset)
        except LogClosedError:
            pass  # closed or deleted meanwhile: closing flushed it, deleting made it moot
        except OSError as e:
            log.error("%s: flush after a roll failed: %s", self._topic_partition, e)

    # -- flushing --------------------------------------------------------------------------

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync the segments holding offsets below ``up_to_offset`` (default: the LEO) and
        raise the recovery point to it.

        As in Kafka, the fsyncs run outside the lock; a truncation meanwhile leaves the
        recovery point alone.
        """
        with self._lock:
            self._check_open()
            target = self._log_end_offset if up_to_offset is None else up_to_offset
            target = min(target, self._log_end_offset)
            if target <= self._recovery_point and not self._dir_dirty:
                return
            first = self._floor_index(self._recovery_point)
            last = self._floor_index(max(target - 1, 0))
            segments = self._segments[first : last + 1]
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            generation = self._truncations
        for segment in segments:
            with contextlib.suppress(SegmentClosedError):  # deleted meanwhile: nothing to sync
                segment.flush()
        if dir_dirty:
            fsync_directory(self._directory)
        with self._lock:
            if generation == self._truncations and target > self._recovery_point:
                self._recovery_point = target

    # -- reading ---------------------------------------------------------------------------

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> FetchData:
        """Whole batches from the one holding ``start_offset``, across segments.

        At most ``max_bytes`` bytes, but with ``min_one_batch`` at least the first batch
        even when it is larger (KIP-74), so a consumer can always make progress. Only
        batches whose last offset is below ``max_offset`` (exclusive; the high watermark
        for consumers) are returned. ``start_offset`` outside ``[log start offset, LEO]``
        raises OffsetOutOfRangeError; at the LEO (or ``max_offset``) the result is empty.
        """
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        for _ in range(_READ_ATTEMPTS):
            with self._lock:
                self._check_open()
                start, end = self._log_start_offset, self._log_end_offset
                if not start <= start_offset <= end:
                    raise OffsetOutOfRangeError(
                        f"{self._topic_partition}: offset {start_offset} is out of range: "
                        f"log start offset {start}, log end offset {end}"
                    )
                if start_offset == end or (max_offset is not None and start_offset >= max_offset):
                    return FetchData(b"", None, start_offset, start, end)
                generation = self._truncations
                plan = [
                    (segment, segment.size)
                    for segment in self._segments[self._floor_index(start_offset) :]
                ]
            try:
                found = _read_segments(plan, start_offset, max_bytes, max_offset, min_one_batch)
            except SegmentClosedError:
                continue
            if generation != self._truncations:
                continue
            records, first_offset, next_offset = found
            if first_offset is not None and first_offset < start_offset:
                records, first_offset = _trimmed_placeholder(records, start_offset, first_offset)
            return FetchData(records, first_offset, next_offset, start, end)
        raise LogError(
            f"{self._topic_partition}: read at offset {start_offset} raced truncation or "
            f"retention {_READ_ATTEMPTS} times"
        )

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """ListOffsets by timestamp: the first record whose timestamp is >= it, with that
        record's timestamp and batch leader epoch; None when no record qualifies. Kafka's
        special values (-2 earliest, -1 latest) are the caller's to answer."""

        def search(plan: list[tuple[LogSegment, int]], start: int) -> TimestampOffset | None:
            for segment, size in plan:
                if segment.max_timestamp() >= timestamp:
                    found = segment.find_offset_by_timestamp(timestamp, start, size)
                    if found is not None:
                        return found
            return None

        return self._search_segments("timestamp lookup", search)

    def max_timestamp_offset(self) -> TimestampOffset | None:
        """ListOffsets' max timestamp (KIP-734, -3): the record with the largest timestamp,
        the first one on a tie; None for a log without records."""

        def search(plan: list[tuple[LogSegment, int]], start: int) -> TimestampOffset | None:
            newest: tuple[LogSegment, int] | None = None
            for segment, size in plan:
                if newest is None or segment.max_timestamp() > newest[0].max_timestamp():
                    newest = (segment, size)
            return None if newest is None else newest[0].find_max_timestamp(start, newest[1])

        return self._search_segments("max timestamp lookup", search)

    def _search_segments(
        self,
        what: str,
        search: Callable[[list[tuple[LogSegment, int]], int], TimestampOffset | None],
    ) -> TimestampOffset | None:
        """``search(segments with their sizes, log start offset)`` over a snapshot of the
        segments, outside the lock; again if a truncation or a deletion raced it."""
        for _ in range(_READ_ATTEMPTS):
            with self._lock:
                self._check_open()
                start = self._log_start_offset
                generation = self._truncations
                plan = [
                    (segment, segment.size)
                    for segment in self._segments[self._floor_index(start) :]
                ]
            try:
                found = search(plan, start)
            except SegmentClosedError:
                continue
            if generation == self._truncations:
                return found
        raise LogError(f"{self._topic_partition}: {what} raced truncation or retention")

    # -- truncation ------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove everything from ``offset`` on (a follower cutting a divergent tail).

        Nothing is removed if ``offset`` >= LEO (returns False), but the epoch cache is
        still trimmed at the LEO, as Kafka's ``UnifiedLog.truncateTo`` does: an epoch that
        starts at the LEO (recorded when this broker last became leader, KAFKA-7415, with no
        data written) conflicts with the leader's log this follower is about to copy.
        Otherwise later segments are deleted and
        the active one cut; the LEO becomes ``offset``, or the start of the batch holding
        it if ``offset`` falls inside a batch (batches are never split). The recovery point
        and log start offset are lowered to the new LEO if above it, and the epoch cache is
        truncated from the end there. Below the first segment: truncate_fully_and_start_at.
        The producer state forgets the removed batches (replaying headers from the last
        snapshot if any producer had batches there).
        """
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        with self._lock:
            self._check_open()
            if offset >= self._log_end_offset:
                self._epoch_cache.truncate_from_end(self._log_end_offset)
                return False
            if offset < self._segments[0].base_offset:
                self.truncate_fully_and_start_at(offset)
                return True
            while self._segments[-1].base_offset > offset:
                self._bases.pop()
                self._segments.pop().delete()
                self._dir_dirty = True
            active = self._segments[-1]
            active.truncate_to(offset)
            end = active.next_offset
            if end != offset:
                log.warning(
                    "%s: truncation to %d fell inside a batch; truncated to %d",
                    self._topic_partition,
                    offset,
                    end,
                )
            self._truncations += 1
            self._log_end_offset = end
            self._recovery_point = min(self._recovery_point, end)
            self._log_start_offset = min(self._log_start_offset, end)
            self._epoch_cache.truncate_from_end(end)
            self._delete_producer_snapshots(lambda offset: offset > end)
            replay_from = self._producer_state.truncate_to(end)
            if replay_from is not None:
                self._replay_producer_state(replay_from)
            log.info("%s: truncated to %d", self._topic_partition, end)
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart empty at ``offset``; clear the epoch cache.

        For a follower whose log lies entirely outside the leader's (Kafka's
        ``truncateFullyAndStartAt``).
        """
        if offset < 0:
            raise ValueError(f"cannot start a log at negative offset {offset}")
        with self._lock:
            self._check_open()
            for segment in self._segments:
                segment.delete()
            self._truncations += 1
            self._segments = [create_segment(self._directory, self._config, offset, self._files)]
            self._bases = [offset]
            self._dir_dirty = True
            self._log_end_offset = offset
            self._log_start_offset = offset
            self._recovery_point = min(self._recovery_point, offset)
            self._epoch_cache.clear_and_flush()
            self._delete_producer_snapshots(lambda _: True)
            self._producer_state.clear()
            self._producer_state.take_snapshot(offset)
            log.info("%s: truncated fully, starting at %d", self._topic_partition, offset)

    # -- retention -------------------------------------------------------------------------

    def delete_old_segments(self, high_watermark: int, now_ms: int) -> int:
        """Apply retention; return the number of segments deleted.

        Kafka's ``deleteOldSegments``: unless ``cleanup.policy`` lacks ``delete``, a prefix of
        segments goes when they are older than
        ``retention.ms`` (by their largest record timestamp, or file mtime if they carry
        none), when the log exceeds ``retention.bytes`` (oldest first, while the rest still
        exceeds it), or when they lie wholly below the log start offset. Only segments
        wholly below ``high_watermark`` are eligible; if every segment goes, a new empty one
        is rolled first. The log start offset rises to the first remaining segment and the
        epoch cache is truncated from the start there.
        """
        for segment in self.segments:
            with contextlib.suppress(SegmentClosedError):
                segment.max_timestamp()  # scan timestamps now rather than under the lock
        with self._lock:
            self._check_open()
            deleted = 0
            retention_ms = self._config.retention_ms
            retention_bytes = self._config.retention_bytes
            if not self._config.delete:  # cleanup.policy=compact: the cleaner's, not retention's
                retention_ms = retention_bytes = -1
            if retention_ms >= 0:
                deleted += self._delete_prefix(
                    high_watermark,
                    lambda segment, _: now_ms - _largest_timestamp(segment) > retention_ms,
                    "retention.ms",
                )
            excess = self.size_in_bytes - retention_bytes
            if retention_bytes >= 0 and excess > 0:

                def over_size(segment: LogSegment, _: LogSegment | None) -> bool:
                    nonlocal excess
                    if excess - segment.size < 0:
                        return False
                    excess -= segment.size
                    return True

                deleted += self._delete_prefix(high_watermark, over_size, "retention.bytes")
            deleted += self._delete_prefix(
                high_watermark,
                lambda _, following: (
                    following is not None and following.base_offset <= self._log_start_offset
                ),
                "log start offset",
            )
            return deleted

    def _delete_prefix(
        self,
        high_watermark: int,
        predicate: Callable[[LogSegment, LogSegment | None], bool],
        reason: str,
    ) -> int:
        doomed = 0
        for i, segment in enumerate(self._segments):
            following = self._segments[i + 1] if i + 1 < len(self._segments) else None
            upper = self._log_end_offset if following is None else following.base_offset
            if following is None and segment.is_empty:
                break
            if high_watermark < upper or not predicate(segment, following):
                break
            doomed += 1
        if not doomed:
            return 0
        if doomed == len(self._segments):
            self._roll_locked(self._log_end_offset)
        for segment in self._segments[:doomed]:
            log.info(
                "%s: deleting segment %d (%s)", self._topic_partition, segment.base_offset, reason
            )
            segment.delete()
        del self._segments[:doomed]
        del self._bases[:doomed]
        self._dir_dirty = True
        self._raise_log_start_offset(self._segments[0].base_offset)
        return doomed

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Raise the log start offset (DeleteRecords, or following the leader's).

        Returns False if it is already at or above ``offset``. The epoch cache forgets what
        lies below. Raises OffsetOutOfRangeError above the LEO.
        """
        with self._lock:
            self._check_open()
            if offset > self._log_end_offset:
                raise OffsetOutOfRangeError(
                    f"{self._topic_partition}: cannot raise the log start offset to {offset}, "
                    f"above the log end offset {self._log_end_offset}"
                )
            return self._raise_log_start_offset(offset)

    def _raise_log_start_offset(self, offset: int) -> bool:
        if offset <= self._log_start_offset:
            return False
        self._log_start_offset = offset
        self._epoch_cache.truncate_from_start(offset)
        return True

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close the files (without flushing: call :meth:`flush` first for a clean shutdown).

        Reads in progress finish; later calls raise LogClosedError. Idempotent.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            failure: OSError | None = None
            for segment in self._segments:
                try:
                    segment.close()
                except OSError as e:  # writing an index (EMFILE opening it): close the rest
                    failure = failure or e
            if failure is not None:
                raise failure

    def delete(self) -> None:
        """Close the log and remove its directory (topic deletion, replica removal)."""
        with self._lock:
            self.close()
            shutil.rmtree(self._directory, ignore_errors=True)

    # -- internals -------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"{self._topic_partition}: log is closed")

    def snapshot_producer_state(self) -> None:
        """Write the producer state at the log end offset to a snapshot file, fsynced
        (a clean shutdown: the next open replays nothing)."""
        with self._lock:
            self._check_open()
            end = self._log_end_offset
            if end in self._snapshot_files:
                return
            self._producer_state.take_snapshot(end)
            self._write_producer_snapshot(end, fsync=True)

    def _write_producer_snapshot(self, offset: int, *, fsync: bool) -> None:
        """``<offset>.snapshot`` of the current state, and only the latest
        SNAPSHOTS_RETAINED files kept. A file that cannot be written is logged and
        skipped: the next open replays further back, as it would without one."""
        producers, last_marker = self._producer_state.state()
        try:
            write_snapshot(
                self._directory, offset, ProducerState(producers, last_marker), fsync=fsync
            )
        except OSError as e:
            log.warning(
                "%s: producer snapshot at %d not written: %s", self._topic_partition, offset, e
            )
            return
        self._dir_dirty = True
        self._snapshot_files = sorted({*self._snapshot_files, offset})
        older = self._snapshot_files[:-SNAPSHOTS_RETAINED]
        if older:
            self._delete_producer_snapshots(lambda o: o in older)

    def _delete_producer_snapshots(self, doomed: Callable[[int], bool]) -> None:
        chosen = [o for o in self._snapshot_files if doomed(o)]
        if chosen:
            delete_snapshots(self._directory, chosen)
            self._snapshot_files = [o for o in self._snapshot_files if o not in chosen]
            self._dir_dirty = True

    def _load_producer_state(self, recovered_from: int | None) -> None:
        """The producer state at opening: from the latest snapshot file at or below the LEO
        that decodes (those above it, left by a log that recovery cut shorter, are
        deleted) and lies at or below every segment whose transaction index was lost and
        where recovery began (``recovered_from``: the replay writes back the aborts an
        unclean shutdown's lost page cache took from the indexes, as Kafka's recovery
        rebuilds them), then the batches after it; from the log's start when there is
        none."""
        self._snapshot_files = list_snapshots(self._directory)
        self._delete_producer_snapshots(lambda offset: offset > self._log_end_offset)
        # A transaction index lost at open is written back by the replay: from before it.
        lost = [s.base_offset for s in self._segments if s.txn_index_lost]
        if recovered_from is not None:
            lost.append(recovered_from)
        usable = [o for o in self._snapshot_files if not lost or o <= min(lost)]
        for offset in reversed(usable):
            try:
                snapshot = read_snapshot(self._directory, offset)
            except (OSError, CorruptSnapshotError) as e:
                log.warning(
                    "%s: ignoring producer snapshot %d: %s", self._topic_partition, offset, e
                )
                self._delete_producer_snapshots(offset.__eq__)
                continue
            self._producer_state.restore(snapshot.producers, snapshot.last_marker_offset, offset)
            self._replay_producer_state(offset)
            return
        self._replay_producer_state(0)

    def _replay_producer_state(self, from_offset: int) -> None:
        """Feed the producer state the batches from ``from_offset`` to the LEO, reading
        only their headers, and snapshot it at each segment boundary on the way.

        Runs when the log is opened (from 0) and after a truncation removed some producer's
        batches (from the last snapshot: normally the active segment's base). A segment whose
        bytes do not frame batches (damage below the recovery point, which recovery trusts)
        ends the replay with a warning: the state then lacks what follows.
        """
        state = self._producer_state
        for segment in self._segments[self._floor_index(from_offset) :]:
            if segment.base_offset >= from_offset:
                state.take_snapshot(segment.base_offset)
            try:
                headers, markers = replay_headers(segment, from_offset, self._topic_partition)
                completed = state.update(headers, markers)
                if completed:
                    self._index_aborts(completed)
            except CorruptRecordError as e:
                log.warning(
                    "%s: producer state not rebuilt past a damaged segment: %s",
                    self._topic_partition,
                    e,
                )
                return

    def _index_aborts(self, completed: Sequence[CompletedTxn]) -> None:
        """Add the aborted ones to the index of the segment holding their marker, unless
        it has them (a replay meets the markers of aborts already indexed)."""
        for txn in completed:
            if txn.is_aborted:
                segment = self._segments[self._floor_index(txn.last_offset)]
                segment.txn_index.append_if_missing(
                    AbortedTxn(
                        txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset
                    )
                )

    def _floor_index(self, offset: int) -> int:
        """Index of the segment holding ``offset`` (the first one for offsets below it)."""
        return max(bisect_right(self._bases, offset) - 1, 0)


def _trimmed_placeholder(records: bytes, start_offset: int, first_offset: int) -> tuple[bytes, int]:
    """A read that starts inside a cleaner's placeholder (an empty batch standing for
    batches removed whole, which a replica that fetched before the cleaning holds as those
    batches) gets the placeholder's part from ``start_offset`` on, so that a follower's log
    continues at its end exactly (docs/storage.md, "Compacted logs"). Other batches keep
    the boundaries they were produced with, on every replica."""
    header = parse_header(records)
    if header.record_count or header.producer_id != NO_PRODUCER_ID:
        return records, first_offset
    trimmed = offsets_placeholder(
        start_offset, header.last_offset, header.partition_leader_epoch, header.max_timestamp
    )
    return trimmed + records[header.size :], start_offset


def _require_keys(
    records: bytes | bytearray | memoryview, headers: Sequence[BatchHeader], tp: TopicPartition
) -> None:
    """Kafka's LogValidator on a compacted topic: every record needs a key."""
    position = 0
    for header in headers:
        if any(r.key is None for r in decode_batch(records, position).records):
            raise errors.InvalidRecordError(
                f"Compacted topic cannot accept message without key in topic partition {tp}."
            )
        position += header.size


def _read_segments(
    plan: Sequence[tuple[LogSegment, int]],
    start_offset: int,
    max_bytes: int,
    max_offset: int | None,
    min_one_batch: bool,
) -> tuple[bytes, int | None, int]:
    """Read across the planned (segment, size) pairs: (records, first offset, next offset)."""
    chunks: list[bytes] = []
    total = 0
    offset = start_offset
    first_offset: int | None = None
    for segment, size in plan:
        found: SegmentRead = segment.read(
            offset,
            max_bytes - total,
            max_position=size,
            max_offset=max_offset,
            min_one_batch=min_one_batch and not chunks,
        )
        if found.records:
            if first_offset is None:
                (first_offset,) = _BASE_OFFSET.unpack_from(found.records)
            chunks.append(found.records)
            total += len(found.records)
        if found.next_offset is not None:
            offset = found.next_offset
        if not found.end_of_segment or total >= max_bytes:
            break
    records = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    return records, first_offset, offset


def _largest_timestamp(segment: LogSegment) -> int:
    """Kafka's ``LogSegment.largestTimestamp``: the max record timestamp, else the mtime."""
    largest = segment.max_timestamp()
    return largest if largest >= 0 else segment.last_modified_ms
