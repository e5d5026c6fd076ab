"""One segment of a partition's log: ``<base>.log``, its sparse ``<base>.index`` and, once
a transaction is aborted in it, its ``<base>.txnindex`` (broker.log.transaction_index).

The ``.log`` file is the plain concatenation of v2 record batches, byte for byte what
producers sent with baseOffset and partitionLeaderEpoch stamped (Kafka's format exactly).
The first batch's base offset is the segment's base offset and offsets are contiguous.

No ``.timeindex`` is written (docs/storage.md: it is optional): a segment's largest timestamp,
used by time-based retention and ListOffsets by timestamp, is tracked while appending and
recovering, and otherwise found once by scanning the batch headers of the file.

Concurrency: the owning Log serialises appends, truncation, recovery, closing and deletion;
reads, timestamp lookups and flushes may run at the same time on other threads. Every file
access goes through ``os.pread``/``os.pwritev`` on a descriptor that is closed only when its
last user is done, so a read racing a deletion gets :class:`SegmentClosedError`, never
bytes of some other file that reused the descriptor number.

Descriptors: the ``.log`` file is opened on demand from the broker's pool of open segment
files, which closes idle ones to stay within its bound (broker.log.segment_files); the
``.index`` file is open only while entries are written (broker.log.offset_index). A segment
costs no descriptor while it is not used.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from broker.log.offset_index import CorruptIndexError, OffsetIndex
from broker.log.segment_files import SegmentClosedError, SegmentFile, SegmentFilePool, default_pool
from broker.log.transaction_index import TransactionIndex
from proto.records.record_batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    NO_TIMESTAMP,
    BatchHeader,
    CorruptRecordError,
    decode_batch,
    parse_header,
    scan_batches,
    stamped_buffers,
)

__all__ = [
    "LogSegment",
    "SegmentClosedError",
    "SegmentRead",
    "SegmentRecovery",
    "TimestampOffset",
    "index_file_name",
    "log_file_name",
    "txn_index_file_name",
]

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TXN_INDEX_SUFFIX = ".txnindex"

_INT32_MAX = 2**31 - 1
_HEADER_SCAN_CHUNK = 16 * 1024
_RECENT_BATCHES = 64
"""Batches appended last whose positions a segment remembers. Followers and consumers near
the end fetch from the LEO they reached, which is almost always the start of one of these:
their reads then skip the index lookup and the scan of headers on disk, which for small
batches reads and parses up to a few dozen headers per fetch (one index entry per 4 KiB)."""
"""Bytes read at a time when walking batch headers (index lookups, timestamps, producer
state), unless the batches are larger: then each read takes one header only."""
_RECOVERY_CHUNK = 4 * 1024 * 1024
"""Bytes read at a time when validating whole batches during recovery."""


def log_file_name(base_offset: int) -> str:
    """``00000000000000000042.log``: Kafka's 20-digit zero-padded segment name."""
    return f"{base_offset:020d}{LOG_SUFFIX}"


def index_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{INDEX_SUFFIX}"


def txn_index_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{TXN_INDEX_SUFFIX}"


class TimestampOffset(NamedTuple):
    """A record found by its timestamp (Kafka's ``TimestampAndOffset``)."""

    timestamp: int
    offset: int
    leader_epoch: int
    """The partition leader epoch of the record's batch (-1 if it carries none)."""


class SegmentRead(NamedTuple):
    """What :meth:`LogSegment.read` found."""

    records: bytes
    """Whole batches, possibly none."""
    next_offset: int | None
    """Offset after the last returned batch; None when no batch was returned."""
    end_of_segment: bool
    """True when the read reached ``max_position`` (the caller may go on to the next
    segment); False when it stopped at ``max_bytes`` or ``max_offset``."""


class SegmentRecovery(NamedTuple):
    """The result of :meth:`LogSegment.recover`."""

    valid_bytes: int
    truncated_bytes: int
    """Bytes cut off the end of the file (a torn or corrupt tail), 0 if it was all valid."""
    next_offset: int
    """Offset after the last valid batch (the segment's base offset if none)."""
    batch_count: int
    epoch_starts: list[tuple[int, int]]
    """``(partition leader epoch, base offset)`` of each valid batch whose epoch differs from
    the previous batch's (the first batch counts when ``previous_epoch`` is None). Only the
    epoch changes, not every header, so a segment of millions of small batches costs little
    memory; they are what the Log feeds to its epoch cache."""
    last_epoch: int | None
    """Partition leader epoch of the last valid batch (``previous_epoch`` if none)."""
    stop_reason: str | None
    """Why recovery stopped before the end of the file; None when everything was valid."""


class LogSegment:
    """A ``.log`` file of record batches and its offset index.

    Index entries follow Kafka's rule (``LogSegment.append``/``recover``): a batch that starts
    more than ``index_interval_bytes`` after the last indexed batch (or the segment start)
    gets an entry mapping its *last* offset to its start position. Kafka applies the rule
    once per append call, using the append's last offset and start position; applying it per
    batch is the same for single-batch appends, denser for multi-batch ones, and makes the
    index rebuilt by recovery identical to the one written while appending.
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        log_file: SegmentFile,
        index: OffsetIndex,
        *,
        index_interval_bytes: int,
        size: int,
        index_valid: bool,
        txn_index: TransactionIndex | None = None,
    ) -> None:
        """Use :meth:`create` or :meth:`open`."""
        self._directory = directory
        self._base_offset = base_offset
        self._file = log_file
        self._index = index
        self._txn_index = (
            TransactionIndex(directory / txn_index_file_name(base_offset), base_offset)
            if txn_index is None
            else txn_index
        )
        self._index_interval_bytes = index_interval_bytes
        self._size = size
        self._index_valid = index_valid
        self._next_offset: int | None = base_offset if size == 0 else None
        last = index.last_entry()
        self._last_indexed_position = 0 if last is None else last.position
        # Largest timestamp = max(of the bytes present when the segment was opened (scanned
        # lazily, None until then), of everything appended since).
        self._loaded_max_timestamp: int | None = NO_TIMESTAMP if size == 0 else None
        self._loaded_size = size
        self._appended_max_timestamp = NO_TIMESTAMP
        self._timestamp_generation = 0
        self._timestamp_lock = threading.Lock()
        self._recent: deque[tuple[int, int, BatchHeader]] = deque(maxlen=_RECENT_BATCHES)
        """(last offset, position, header) of the batches appended last, oldest first."""

    def __repr__(self) -> str:
        return f"LogSegment({str(self.log_path)!r}, size={self._size})"

    # -- creation --------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        files: SegmentFilePool | None = None,
    ) -> LogSegment:
        """A new empty segment; existing files of that name are replaced. Its ``.log`` file
        is left open in ``files`` (default: the process's pool), as it is about to be
        written; its index is not."""
        pool = default_pool() if files is None else files
        log_file = SegmentFile.create(directory / log_file_name(base_offset), pool)
        try:
            index = OffsetIndex.create(directory / index_file_name(base_offset), base_offset)
            (directory / txn_index_file_name(base_offset)).unlink(missing_ok=True)
        except BaseException:
            log_file.close()
            raise
        return cls(
            directory,
            base_offset,
            log_file,
            index,
            index_interval_bytes=index_interval_bytes,
            size=0,
            index_valid=True,
        )

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        files: SegmentFilePool | None = None,
    ) -> LogSegment:
        """Open an existing segment. A missing or corrupt index is replaced by an empty one
        and :attr:`index_valid` is False: the caller must :meth:`recover` the segment, which
        rebuilds it (Kafka does the same in ``loadSegmentFiles``). No descriptor is left
        open: the ``.log`` file is opened from ``files`` (default: the process's pool) when
        first read."""
        log_path = directory / log_file_name(base_offset)
        index_path = directory / index_file_name(base_offset)
        size = os.stat(log_path).st_size
        index_valid = True
        try:
            index = OffsetIndex.load(index_path, base_offset, size)
        except CorruptIndexError as e:
            log.warning("rebuilding index of %s: %s", log_path, e)
            index = OffsetIndex.create(index_path, base_offset)
            index_valid = False
        txn_path = directory / txn_index_file_name(base_offset)
        try:
            txn_index = TransactionIndex.load(txn_path, base_offset)
        except CorruptIndexError as e:
            # The Log's replay of the producer state writes the aborts back (Kafka rebuilds
            # the file in recovery).
            log.warning("rebuilding transaction index of %s: %s", log_path, e)
            txn_path.unlink()
            txn_index = TransactionIndex(txn_path, base_offset)
            txn_index_lost = True
        else:
            txn_index_lost = False
        segment = cls(
            directory,
            base_offset,
            SegmentFile.open(log_path, default_pool() if files is None else files),
            index,
            index_interval_bytes=index_interval_bytes,
            size=size,
            index_valid=index_valid,
            txn_index=txn_index,
        )
        segment.txn_index_lost = txn_index_lost
        return segment

    # -- properties ------------------------------------------------------------------------

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def log_path(self) -> Path:
        return self._file.path

    @property
    def index_path(self) -> Path:
        return self._index.path

    @property
    def index(self) -> OffsetIndex:
        return self._index

    @property
    def txn_index(self) -> TransactionIndex:
        """The aborted transactions whose markers are in this segment."""
        return self._txn_index

    @property
    def size(self) -> int:
        """Bytes of whole batches in the ``.log`` file."""
        return self._size

    @property
    def is_empty(self) -> bool:
        return self._size == 0

    txn_index_lost = False
    """True when the transaction index was corrupt at open and replaced by an empty one:
    the Log's producer state replay must reach this segment to write its aborts back."""

    @property
    def index_valid(self) -> bool:
        """False when the index was missing or corrupt at open and awaits :meth:`recover`."""
        return self._index_valid

    @property
    def next_offset(self) -> int:
        """Offset after the segment's last batch.

        Known after creation, recovery, :meth:`load_next_offset` or any append; asking
        earlier is a programming error (RuntimeError).
        """
        if self._next_offset is None:
            raise RuntimeError(f"{self.log_path}: next offset not loaded")
        return self._next_offset

    @property
    def last_modified_ms(self) -> int:
        return int(os.stat(self.log_path).st_mtime * 1000)

    # -- writing ---------------------------------------------------------------------------

    def append(
        self,
        records: bytes | bytearray | memoryview,
        batches: Sequence[BatchHeader],
        *,
        stamp: bool = False,
    ) -> None:
        """Write whole, validated batches at the end of the segment.

        ``batches`` are the headers of the batches in ``records``, in order, with their final
        base offsets; they drive the index and the largest timestamp. With ``stamp``, their
        baseOffset and partitionLeaderEpoch are written in place of those in ``records``
        (which is not changed): the leader's offset assignment, done on the way to disk
        by one vectored write rather than on a copy of the batches.
        """
        start = position = self._size
        interval = self._index_interval_bytes
        last_indexed = self._last_indexed_position
        new_entries = []
        max_timestamp = self._appended_max_timestamp
        appended = []
        for header in batches:
            if position - last_indexed > interval:
                new_entries.append((header.last_offset, position))
                last_indexed = position
            if header.max_timestamp > max_timestamp:
                max_timestamp = header.max_timestamp
            appended.append((header.last_offset, position, header))
            position += header.batch_length + LOG_OVERHEAD
        if position - start != len(records):
            raise ValueError(f"{self.log_path}: batch headers do not add up to the appended bytes")
        buffers = stamped_buffers(records, batches) if stamp else [records]
        self._file.write_at(buffers, start, position - start)
        # Indexed only once written: a reader may look an entry up as soon as it exists.
        for offset, at in new_entries:
            self._index.append(offset, at)
        self._last_indexed_position = last_indexed
        self._appended_max_timestamp = max_timestamp
        self._next_offset = batches[-1].next_offset
        self._recent.extend(appended)
        self._size = position

    def _maybe_index(self, header: BatchHeader, position: int) -> None:
        if position - self._last_indexed_position > self._index_interval_bytes:
            self._index.append(header.last_offset, position)
            self._last_indexed_position = position

    def fits_offset(self, offset: int) -> bool:
        """Whether ``offset`` can be stored relative to the base offset (Kafka's
        ``canConvertToRelativeOffset``): the segment must roll before it is exceeded."""
        return 0 <= offset - self._base_offset <= _INT32_MAX

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding offsets >= ``offset``; return the bytes removed.

        A batch that straddles ``offset`` goes as a whole, as in Kafka (batches are never
        split), so :attr:`next_offset` may end up below ``offset``.
        """
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, header = found
        removed = self._size - position
        self._recent.clear()
        self._txn_index.truncate_to(header.base_offset)
        self._index.truncate_to_position(position)
        last = self._index.last_entry()
        self._last_indexed_position = 0 if last is None else last.position
        self._file.truncate(position)
        self._size = position
        self._next_offset = header.base_offset
        with self._timestamp_lock:
            self._timestamp_generation += 1
            self._loaded_size = position
            self._loaded_max_timestamp = NO_TIMESTAMP if position == 0 else None
            self._appended_max_timestamp = NO_TIMESTAMP
        return removed

    def flush(self) -> None:
        """fsync the log file, then write the pending index entries and fsync the index.

        In that order so that entries that reach the disk point at batches already there.
        """
        self._file.fsync()
        self._index.flush()
        self._txn_index.flush()

    def on_become_inactive(self) -> None:
        """Called when a newer segment becomes the active one: write the pending index
        entries (Kafka's ``onBecomeInactiveSegment`` trims its preallocated index here)."""
        self._index.write()

    def close(self) -> None:
        """Close both files, writing the pending index entries without fsync (a concurrent
        reader finishes first). Idempotent. The ``.log`` file is closed even if writing the
        index fails (EMFILE opening it, say: the index file then lacks those entries, which
        makes it sparser, never wrong)."""
        self._file.close()
        self._index.close()
        self._txn_index.close()

    def delete(self) -> None:
        """Close and remove its files. Readers already inside a read still finish it."""
        self._file.close()
        self._index.delete()
        self._txn_index.delete()
        self.log_path.unlink(missing_ok=True)

    # -- recovery --------------------------------------------------------------------------

    def recover(self, *, previous_epoch: int | None = None) -> SegmentRecovery:
        """Validate every batch from the start, truncate at the first bad one, rebuild the index.

        A batch is valid when it is whole, framed soundly (length, magic 2), passes
        :func:`check_batch`'s CRC and record-count checks, its base offset continues the
        previous batch's (the first one starts at the segment's base offset), its last
        offset fits as a relative offset, its end lies within 2 GiB (index positions are
        32-bit), and its partition leader epoch is not below the previous batch's
        (``previous_epoch`` for the first). Kafka's ``LogSegment.recover``
        checks only size, CRC and offset range; the continuity checks catch damage to the
        two header fields the CRC does not cover.

        Reads the file in large chunks; never raises on bad data, only on I/O errors.
        """
        self._index.reset()
        self._last_indexed_position = 0
        file_size = self._file.size()
        position = 0
        expected = self._base_offset
        epoch = previous_epoch
        epoch_starts: list[tuple[int, int]] = []
        batch_count = 0
        max_timestamp = NO_TIMESTAMP
        stop: str | None = None
        needed = 0
        while position < file_size and stop is None:
            chunk = self._file.pread(
                min(max(_RECOVERY_CHUNK, needed), file_size - position), position
            )
            scan = scan_batches(chunk)
            for found in scan:
                header = found.header
                problem = found.problem or self._continuity_problem(header, expected, epoch)
                if problem is None and position + found.position + header.size > _INT32_MAX:
                    problem = "segment grows past 2 GiB, beyond what its index can address"
                if problem is not None:
                    stop = f"batch at position {position + found.position}: {problem}"
                    position += found.position
                    break
                self._maybe_index(header, position + found.position)
                if epoch is None or header.partition_leader_epoch != epoch:
                    epoch_starts.append((header.partition_leader_epoch, header.base_offset))
                epoch = header.partition_leader_epoch
                expected = header.next_offset
                batch_count += 1
                if header.max_timestamp > max_timestamp:
                    max_timestamp = header.max_timestamp
            else:
                position += scan.end_position
                if scan.stop_problem is None:
                    needed = 0
                elif scan.incomplete and position + scan.needed <= file_size:
                    needed = scan.needed  # a batch larger than the chunk: read it whole
                else:
                    stop = f"batch at position {position}: {scan.stop_problem}"
        truncated = file_size - position
        if truncated:
            log.warning(
                "%s: truncating %d bytes at position %d: %s",
                self.log_path,
                truncated,
                position,
                stop,
            )
            self._file.truncate(position)
        # Aborts whose markers were cut go; the Log's replay writes back any missing.
        self._txn_index.truncate_to(expected)
        self._size = position
        self._next_offset = expected
        self._index_valid = True
        with self._timestamp_lock:
            self._timestamp_generation += 1
            self._loaded_size = position
            self._loaded_max_timestamp = max_timestamp
            self._appended_max_timestamp = NO_TIMESTAMP
        return SegmentRecovery(
            valid_bytes=position,
            truncated_bytes=truncated,
            next_offset=expected,
            batch_count=batch_count,
            epoch_starts=epoch_starts,
            last_epoch=epoch,
            stop_reason=stop,
        )

    def _continuity_problem(
        self, header: BatchHeader, expected_offset: int, previous_epoch: int | None
    ) -> str | None:
        if header.base_offset != expected_offset:
            return f"base offset {header.base_offset}, expected {expected_offset}"
        if not self.fits_offset(header.last_offset):
            return (
                f"last offset {header.last_offset} does not fit as a relative offset "
                f"of segment {self._base_offset}"
            )
        if previous_epoch is not None and header.partition_leader_epoch < previous_epoch:
            return (
                f"leader epoch {header.partition_leader_epoch} is below the previous "
                f"batch's {previous_epoch}"
            )
        return None

    def load_next_offset(self) -> int:
        """Find the next offset of a segment that is not recovered (below the recovery point,
        or after a clean shutdown), from its last index entry and a short header scan.

        Raises CorruptRecordError when the headers after that entry do not frame whole
        batches; the caller then recovers the segment instead.
        """
        last = self.last_batch()
        self._next_offset = self._base_offset if last is None else last[1].next_offset
        return self._next_offset

    def last_batch(self) -> tuple[int, BatchHeader] | None:
        """(position, header) of the last batch, found from the last index entry; None if
        the segment is empty. Raises CorruptRecordError on headers that do not frame."""
        start = self._index.last_entry()
        headers = self._iter_headers(0 if start is None else start.position, self._size)
        last = deque(headers, maxlen=1)
        return last[0] if last else None

    # -- reading ---------------------------------------------------------------------------

    def _iter_headers(self, start: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch in ``[start, end)``, reading headers only.

        Raises CorruptRecordError if the bytes there do not frame whole batches: data changed
        on disk after recovery, or a position that is not a batch boundary.
        """
        position = start
        read_size = _HEADER_SCAN_CHUNK
        while position < end:
            chunk = self._file.pread(min(read_size, end - position), position)
            offset = 0
            while offset < len(chunk) and position + offset < end:
                if len(chunk) - offset < HEADER_SIZE:
                    break  # read the header again from the next chunk
                header = parse_header(chunk, offset)
                here = position + offset
                if header.batch_length < MIN_BATCH_LENGTH or here + header.size > end:
                    raise CorruptRecordError(
                        f"{self.log_path}: batch at position {here} with length "
                        f"{header.batch_length} does not fit in [{start}, {end})"
                    )
                yield here, header
                offset += header.size
                # Batches larger than a chunk: a chunk would hold one header and thousands
                # of record bytes nobody looks at, so read just the next header.
                read_size = HEADER_SIZE if header.size >= _HEADER_SCAN_CHUNK else _HEADER_SCAN_CHUNK
            if offset == 0:
                raise CorruptRecordError(
                    f"{self.log_path}: truncated batch header at position {position}"
                )
            position += offset

    def read_all(self) -> bytes:
        """The whole ``.log`` file as it is now (tools and tests)."""
        return self._file.pread(self._size, 0)

    def read_at(self, position: int, size: int) -> bytes:
        """``size`` bytes of the ``.log`` file from ``position`` (the log cleaner's reads of
        an inactive segment, which nothing appends to)."""
        return self._file.pread(size, position)

    def batch_headers(
        self, start_position: int = 0, end_position: int | None = None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of every batch, reading headers only (no CRC check): for the
        producer state's replay, tools and tests."""
        return self._iter_headers(
            start_position, self._size if end_position is None else end_position
        )

    def translate_offset(
        self, offset: int, max_position: int | None = None
    ) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose last offset is >= ``offset``.

        Index lookup, then a forward scan of headers below ``max_position`` (default: the
        current size); None if no such batch.
        """
        end = self._size if max_position is None else max_position
        recent = self._recent_batch(offset, end)
        if recent is not None:
            return recent
        entry = self._index.lookup(offset)
        start = entry.position
        if start and not self._entry_matches(start, entry.offset, end):
            # Segments below the recovery point are trusted without a full check, so a
            # damaged but plausible index can survive loading; scan from the start instead.
            # Slow but correct; recovery (e.g. with the index file removed) rebuilds it.
            log.warning("%s: index entry %s is wrong; scanning the segment", self.log_path, entry)
            start = 0
        for position, header in self._iter_headers(start, end):
            if header.last_offset >= offset:
                return position, header
        return None

    def _recent_batch(self, offset: int, end: int) -> tuple[int, BatchHeader] | None:
        """translate_offset's answer from the batches appended last, when they hold it: the
        first one whose last offset is >= ``offset``, provided ``offset`` is not below the
        oldest of them (then no earlier batch can qualify) and it ends below ``end``.
        Works from a snapshot, as reads may run in the executor while the loop appends."""
        recent = tuple(self._recent)
        if not recent or offset < recent[0][2].base_offset:
            return None
        i = bisect.bisect_left(recent, offset, key=lambda entry: entry[0])
        if i == len(recent):
            return None
        _, position, header = recent[i]
        if position + header.size > end:
            return None  # beyond what the caller may read: the slow path decides
        return position, header

    def _entry_matches(self, position: int, offset: int, end: int) -> bool:
        """Whether a batch ending exactly at ``offset`` starts at ``position``."""
        if position + HEADER_SIZE > end:
            return False
        header = parse_header(self._file.pread(HEADER_SIZE, position))
        return (
            header.magic == MAGIC
            and header.batch_length >= MIN_BATCH_LENGTH
            and header.last_offset == offset
            and position + header.size <= end
        )

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_position: int,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> SegmentRead:
        """Whole batches from the one holding ``start_offset``, below byte ``max_position``.

        At most ``max_bytes`` bytes, except that with ``min_one_batch`` the first batch is
        returned whole even if it is larger (KIP-74). A batch whose last offset is >=
        ``max_offset`` ends the read and is not included.
        """
        found = self.translate_offset(start_offset, max_position)
        if found is None:
            return SegmentRead(b"", None, True)
        position, first = found
        if max_offset is not None and first.last_offset >= max_offset:
            return SegmentRead(b"", None, False)
        length = min(max_bytes, max_position - position)
        if first.size > length:
            if not min_one_batch:
                return SegmentRead(b"", None, False)
            length = first.size
        data = self._file.pread(length, position)
        if len(data) != length:
            raise SegmentClosedError(f"{self.log_path} shrank during a read")
        cut = 0
        next_offset = None
        stopped = False
        while cut + HEADER_SIZE <= length:
            header = parse_header(data, cut)
            if header.batch_length < MIN_BATCH_LENGTH:
                raise CorruptRecordError(
                    f"{self.log_path}: batch at position {position + cut} has length "
                    f"{header.batch_length}"
                )
            if cut + header.size > length:
                break
            if max_offset is not None and header.last_offset >= max_offset:
                stopped = True
                break
            cut += header.size
            next_offset = header.next_offset
        records = data if cut == length else data[:cut]
        return SegmentRead(records, next_offset, not stopped and position + cut == max_position)

    # -- timestamps ------------------------------------------------------------------------

    def max_timestamp(self) -> int:
        """Largest batch maxTimestamp in the segment (NO_TIMESTAMP if none).

        Scans the headers present at open the first time it is needed (no time index).
        """
        with self._timestamp_lock:
            loaded = self._loaded_max_timestamp
            generation = self._timestamp_generation
            loaded_size = self._loaded_size
        if loaded is None:
            loaded = NO_TIMESTAMP
            for _, header in self._iter_headers(0, loaded_size):
                loaded = max(loaded, header.max_timestamp)
            with self._timestamp_lock:
                if generation == self._timestamp_generation:
                    self._loaded_max_timestamp = loaded
        return max(loaded, self._appended_max_timestamp)

    def find_offset_by_timestamp(
        self, timestamp: int, start_offset: int, max_position: int
    ) -> TimestampOffset | None:
        """The first record at or after ``start_offset`` whose timestamp is >= ``timestamp``,
        with that record's own timestamp (Kafka's ``LogSegment.findOffsetByTimestamp``).

        Batch headers find the first batch with maxTimestamp >= ``timestamp``; that batch is
        decoded (inflated, when compressed) for the exact record. None when no record below
        ``max_position`` qualifies.
        """
        start = self._index.lookup(start_offset).position
        for position, header in self._iter_headers(start, max_position):
            if header.last_offset < start_offset or header.max_timestamp < timestamp:
                continue
            epoch = header.partition_leader_epoch
            batch = decode_batch(self._file.pread(header.size, position))
            for record in batch.records:
                if record.offset >= start_offset and record.timestamp >= timestamp:
                    return TimestampOffset(record.timestamp, record.offset, epoch)
        return None

    def find_max_timestamp(self, start_offset: int, max_position: int) -> TimestampOffset | None:
        """The record with the largest timestamp at or after ``start_offset``, the first
        such record on a tie (KIP-734's max-timestamp spec, with the exact offset Kafka
        answers since KAFKA-16310 rather than its batch's last offset). None when the
        segment holds no record there."""
        start = self._index.lookup(start_offset).position
        best: tuple[int, BatchHeader] | None = None
        for position, header in self._iter_headers(start, max_position):
            if header.last_offset < start_offset:
                continue
            if best is None or header.max_timestamp > best[1].max_timestamp:
                best = (position, header)
        if best is None:
            return None
        position, header = best
        epoch = header.partition_leader_epoch
        found: TimestampOffset | None = None
        for record in decode_batch(self._file.pread(header.size, position)).records:
            if record.offset >= start_offset and (found is None or record.timestamp > found[0]):
                found = TimestampOffset(record.timestamp, record.offset, epoch)
        return found
