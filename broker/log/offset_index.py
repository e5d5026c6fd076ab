"""A segment's sparse offset index, ``<20-digit base offset>.index``, in Kafka's format.

The file is a sequence of 8-byte big-endian entries ``(relative offset i32, position i32)``:
the offset relative to the segment's base offset, and the byte position in the ``.log`` file
of the batch that holds it. Offsets and positions both increase strictly.

Kafka memory-maps a preallocated file, so a new entry is a store to memory that reaches the
disk when the OS writes the page back or the segment is flushed. Here the entries live in
memory (two arrays, 16 bytes per entry, at most ``segment.bytes / index.interval.bytes`` of
them) and new ones are *pending* until :meth:`OffsetIndex.write` (called by ``flush``,
``close`` and when the segment rolls) appends them to the file with one ``pwrite``: an
append costs no system call, and the file holds only whole entries, with no trailing zeros
to trim on roll or close.

The index holds no descriptor between writes (Kafka's ``LazyIndex`` opens the file at its
first use; here the entries are in memory, so only writing needs the file): :meth:`write`,
:meth:`flush` and a truncation of written entries open it, do their system calls and close
it. A broker's open descriptors therefore do not grow with the indexes it hosts
(docs/storage.md#file-descriptors); a write costs an ``open`` and a ``close`` more, and
writes are rare (a roll, a flush, a close).

After a crash the file may therefore lack the latest entries. That index is still correct,
only sparser (a lookup scans forward from an earlier entry), and :meth:`OffsetIndex.load`
accepts it; and the entries are only missing from segments past the recovery point (a flush
writes them before the recovery point passes the segment), whose index recovery rebuilds
anyway.

Which entries exist is the segment's decision (``LogSegment``): one per batch that starts
more than ``index.interval.bytes`` after the previous entry.
"""

from __future__ import annotations

import bisect
import os
import struct
import threading
from array import array
from pathlib import Path
from typing import NamedTuple

from proto.errors import MinibrokerError

__all__ = ["ENTRY_SIZE", "CorruptIndexError", "IndexEntry", "OffsetIndex"]

ENTRY_SIZE = 8
"""Bytes per index entry."""

_ENTRY = struct.Struct(">ii")
_INT32_MAX = 2**31 - 1


class CorruptIndexError(MinibrokerError):
    """An index file that cannot be used as it is; the segment rebuilds it from its log."""


class IndexEntry(NamedTuple):
    """One index entry, with the offset made absolute."""

    offset: int
    """Absolute offset: the last offset of the batch at ``position``."""
    position: int
    """Byte position of that batch in the segment's ``.log`` file."""


class OffsetIndex:
    """The entries of one ``.index`` file, in memory; the file holds a prefix of them.

    Thread-safe: the broker's loop thread appends and truncates while executor threads look
    up positions for reads and flush; a small lock keeps the two arrays consistent with each
    other and with the number of entries in the file.
    """

    def __init__(self, path: Path, base_offset: int) -> None:
        """Use :meth:`create` or :meth:`load`."""
        self._path = path
        self._base_offset = base_offset
        self._closed = False
        self._offsets = array("q")
        self._positions = array("q")
        self._written = 0
        """How many of the entries are in the file; the rest are pending."""
        self._changes = 1
        """Counts changes to the file (the first being whatever state it was opened in)."""
        self._synced = 0
        """``_changes`` as of the last completed fsync: equal means the file is durable."""
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OffsetIndex({str(self._path)!r}, entries={len(self)})"

    @classmethod
    def create(cls, path: Path, base_offset: int) -> OffsetIndex:
        """A new empty index at ``path``, replacing any file there. The file is created
        now (a missing index makes the next start rebuild it) and not kept open."""
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        return cls(path, base_offset)

    @classmethod
    def load(cls, path: Path, base_offset: int, log_size: int) -> OffsetIndex:
        """Read an existing index, checking it against its log file's size.

        Raises CorruptIndexError when the file is missing, its size is not a multiple of 8,
        or its entries do not increase strictly from the base offset with positions inside
        the log; the caller then rebuilds it. Kafka's sanity check looks only at the size
        and the last entry; checking every entry is cheap with the entries in memory.
        """
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise CorruptIndexError(f"{path}: missing") from None
        index = cls(path, base_offset)
        try:
            index._read_entries(fd, log_size)
        finally:
            os.close(fd)
        return index

    def _read_entries(self, fd: int, log_size: int) -> None:
        size = os.fstat(fd).st_size
        if size % ENTRY_SIZE:
            raise CorruptIndexError(f"{self._path}: size {size} is not a multiple of {ENTRY_SIZE}")
        data = os.pread(fd, size, 0)
        if len(data) != size:
            raise CorruptIndexError(f"{self._path}: short read ({len(data)} of {size} bytes)")
        last_offset, last_position = self._base_offset - 1, -1
        for slot, (relative, position) in enumerate(_ENTRY.iter_unpack(data)):
            offset = self._base_offset + relative
            if relative < 0 or offset <= last_offset or position <= last_position:
                raise CorruptIndexError(
                    f"{self._path}: entry {slot} ({relative}, {position}) does not increase "
                    f"from ({last_offset - self._base_offset}, {last_position})"
                )
            if position >= log_size:
                raise CorruptIndexError(
                    f"{self._path}: entry {slot} points at position {position}, "
                    f"past the end of the log ({log_size} bytes)"
                )
            self._offsets.append(offset)
            self._positions.append(position)
            last_offset, last_position = offset, position
        self._written = len(self._offsets)

    # -- properties ------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def base_offset(self) -> int:
        return self._base_offset

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def size_in_bytes(self) -> int:
        """Bytes of all entries, pending ones included: the file's size once written."""
        return len(self._offsets) * ENTRY_SIZE

    @property
    def pending(self) -> int:
        """Entries not yet in the file."""
        return len(self._offsets) - self._written

    def entries(self) -> list[IndexEntry]:
        """A copy of all entries, in order."""
        with self._lock:
            return [IndexEntry(o, p) for o, p in zip(self._offsets, self._positions, strict=True)]

    def last_entry(self) -> IndexEntry | None:
        with self._lock:
            if not self._offsets:
                return None
            return IndexEntry(self._offsets[-1], self._positions[-1])

    # -- lookup ----------------------------------------------------------------------------

    def lookup(self, target_offset: int) -> IndexEntry:
        """The entry with the largest offset <= ``target_offset``.

        ``(base_offset, 0)`` when there is none: the scan for the target then starts at the
        beginning of the segment.
        """
        with self._lock:
            slot = bisect.bisect_right(self._offsets, target_offset) - 1
            if slot < 0:
                return IndexEntry(self._base_offset, 0)
            return IndexEntry(self._offsets[slot], self._positions[slot])

    # -- changes ---------------------------------------------------------------------------

    def append(self, offset: int, position: int) -> None:
        """Add an entry after the last one, pending until :meth:`write`.

        Raises ValueError if the entry does not increase strictly or does not fit in the
        format (a relative offset or position beyond 32 bits): a programming error, the
        segment rolls before either can happen.
        """
        if not 0 <= offset - self._base_offset <= _INT32_MAX or not 0 <= position <= _INT32_MAX:
            raise ValueError(
                f"index entry ({offset}, {position}) does not fit a segment at {self._base_offset}"
            )
        offsets = self._offsets
        with self._lock:
            if offsets and (offset <= offsets[-1] or position <= self._positions[-1]):
                raise ValueError(
                    f"index entry ({offset}, {position}) does not follow "
                    f"({offsets[-1]}, {self._positions[-1]})"
                )
            offsets.append(offset)
            self._positions.append(position)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries with an offset >= ``offset``."""
        with self._lock:
            self._truncate_slots(bisect.bisect_left(self._offsets, offset))

    def truncate_to_position(self, position: int) -> None:
        """Drop the entries pointing at or after byte ``position`` of the log."""
        with self._lock:
            self._truncate_slots(bisect.bisect_left(self._positions, position))

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        with self._lock:
            self._truncate_slots(0)

    def _truncate_slots(self, keep: int) -> None:
        if keep >= len(self._offsets):
            return
        if keep < self._written:
            if not self._closed:
                os.truncate(self._path, keep * ENTRY_SIZE)
            self._written = keep
            self._changes += 1
        del self._offsets[keep:]
        del self._positions[keep:]

    # -- file ------------------------------------------------------------------------------

    def write(self) -> None:
        """Append the pending entries to the file (no fsync). Nothing to do once closed."""
        with self._lock:
            if self._closed or self._written == len(self._offsets):
                return
            fd = os.open(self._path, os.O_WRONLY)
            try:
                self._write_pending(fd)
            finally:
                os.close(fd)

    def _write_pending(self, fd: int) -> None:
        start, end = self._written, len(self._offsets)
        if start == end:
            return
        base = self._base_offset
        data = b"".join(
            _ENTRY.pack(offset - base, position)
            for offset, position in zip(
                self._offsets[start:end], self._positions[start:end], strict=True
            )
        )
        with memoryview(data) as view:
            done = 0
            while done < len(view):
                done += os.pwrite(fd, view[done:], start * ENTRY_SIZE + done)
        self._written = end
        self._changes += 1

    def flush(self) -> None:
        """Write the pending entries and fsync the file, unless it has not changed since the
        last fsync (a flush after appends of less than ``index.interval.bytes`` costs one
        fsync, not two). Nothing to do once closed.

        The fsync runs outside the lock, so that lookups and appends need not wait for the
        disk, on a descriptor of its own, which a concurrent close cannot pull away.
        """
        with self._lock:
            if self._closed or (
                self._synced == self._changes and self._written == len(self._offsets)
            ):
                return
            fd = os.open(self._path, os.O_WRONLY)
            try:
                self._write_pending(fd)
            except BaseException:
                os.close(fd)
                raise
            changes = self._changes
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        with self._lock:
            self._synced = max(self._synced, changes)

    def close(self) -> None:
        """Write the pending entries (no fsync); the object must not be used afterwards.
        Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._written == len(self._offsets):
                return
            fd = os.open(self._path, os.O_WRONLY)
            try:
                self._write_pending(fd)
            finally:
                os.close(fd)

    def delete(self) -> None:
        """Close and remove the file (pending entries are dropped, not written)."""
        with self._lock:
            self._closed = True
        self._path.unlink(missing_ok=True)
