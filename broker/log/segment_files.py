"""The descriptors of segments' ``.log`` files, drawn from one bounded pool per broker.

Kafka keeps every segment's ``.log`` file open while its log is open (``FileRecords``), and
opens indexes lazily (``LazyIndex``). A broker hosting 30,000 replicas would then need
30,000 descriptors for the active segments alone; here a :class:`SegmentFile` opens its file
when used, and a :class:`SegmentFilePool` (one per LogManager: minibroker's own, Kafka has
none) bounds how many stay open, closing an idle one when a new one would pass the bound
(docs/storage.md#file-descriptors).

Replacement is CLOCK (second chance), an approximation of LRU that costs a use one
attribute store rather than a lock: every use marks the file referenced; the pool passes
over files in the order they were opened, gives a referenced one another round (clearing
the mark) and closes the first that was not used since the last round. A partition that is
being written keeps its active segment open: it is used at every append.

Safety (what docs/storage.md promises about reads racing deletion): every access, the
owner's writes included, counts itself as a user of the descriptor for the duration of the
system call, and a descriptor is closed, by :meth:`SegmentFile.close` or by eviction, only
when it has no user. So a read racing a deletion or a close gets
:class:`SegmentClosedError`, never bytes of another file that reused the descriptor number;
and an eviction never pulls a descriptor from under a read or a write, it skips the file
(the pool may then hold more than its bound for as long as every candidate is in use).

Durability: eviction does not fsync. Dirty pages belong to the file, not to a descriptor,
so the next :meth:`SegmentFile.fsync` (Log.flush, on a reopened descriptor) writes back
and waits for everything written through any earlier one (POSIX fsync; Linux reports a
writeback error that nobody has seen to the next fsync of the file on any descriptor). A
segment's flush therefore means the same whether or not its descriptor was evicted
meanwhile; the cost of an eviction stays a ``close``, never a disk wait on whichever thread
happened to open a file.

Lock order: a file's lock, then the pool's; the pool never takes a file's lock while it
holds its own (the files it picks to close are closed after it lets go).
"""

from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

from broker.log.resource_limits import default_max_open_segment_files
from proto.errors import MinibrokerError

__all__ = ["SegmentClosedError", "SegmentFile", "SegmentFilePool", "default_pool"]

_IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 16
"""Most buffers one ``pwritev`` takes (1024 on Linux); 16 is POSIX's minimum."""


class SegmentClosedError(MinibrokerError):
    """The segment was closed (deleted by retention or truncation) while being used."""


class SegmentFilePool:
    """At most ``max_open`` open segment descriptors (soft: files in use are never closed).

    Thread-safe. ``max_open`` must be at least 1.
    """

    def __init__(self, max_open: int) -> None:
        if max_open < 1:
            raise ValueError(f"max_open must be at least 1, not {max_open}")
        self._max_open = max_open
        self._lock = threading.Lock()
        self._open: OrderedDict[SegmentFile, None] = OrderedDict()
        """The files holding a descriptor, oldest round first (OrderedDict: taking the
        oldest is O(1), where a dict's iteration would skip every slot deleted before)."""
        self._evictions = 0

    def __repr__(self) -> str:
        return f"SegmentFilePool(open={len(self._open)}, max_open={self._max_open})"

    @property
    def max_open(self) -> int:
        return self._max_open

    @property
    def open_count(self) -> int:
        """Files holding a descriptor now (those being closed by an eviction included)."""
        return len(self._open)

    @property
    def evictions(self) -> int:
        """Descriptors closed to make room since the pool was made."""
        return self._evictions

    def _register(self, file: SegmentFile) -> list[SegmentFile]:
        """Count ``file``'s new descriptor; the files to close to make room for it (taken out
        of the pool: the caller closes them with :meth:`SegmentFile._evict`)."""
        victims = []
        with self._lock:
            self._open[file] = None
            sweep = 2 * len(self._open)  # two rounds clear every mark: always enough
            while len(self._open) > self._max_open and sweep:
                sweep -= 1
                oldest, _ = self._open.popitem(last=False)
                if oldest._referenced:
                    oldest._referenced = False
                    self._open[oldest] = None
                else:
                    victims.append(oldest)
            self._evictions += len(victims)
        return victims

    def _shed_one(self) -> bool:
        """Close the oldest idle descriptor whatever the bound (the process ran out of
        them); False when there was none to close."""
        with self._lock:
            candidates = list(self._open)
        for file in candidates:
            if file._evict_idle():
                with self._lock:
                    self._evictions += 1
                return True
        return False

    def _readd(self, file: SegmentFile) -> None:
        """Put back a file picked for eviction that turned out to be in use."""
        with self._lock:
            self._open[file] = None
            self._evictions -= 1

    def _forget(self, file: SegmentFile) -> None:
        with self._lock:
            self._open.pop(file, None)

    @staticmethod
    def _evict(victims: Sequence[SegmentFile]) -> None:
        for victim in victims:
            victim._evict()


_default_pool: SegmentFilePool | None = None
_default_pool_lock = threading.Lock()


def default_pool() -> SegmentFilePool:
    """The process's pool for segments opened without one (tools, tests, benchmarks), sized
    from ``RLIMIT_NOFILE`` when first asked for."""
    global _default_pool
    with _default_pool_lock:
        if _default_pool is None:
            _default_pool = SegmentFilePool(default_max_open_segment_files())
        return _default_pool


class SegmentFile:
    """A segment's ``.log`` file, opened on demand from a :class:`SegmentFilePool`.

    ``close`` marks the file closed at once (new users get SegmentClosedError) but releases
    the descriptor only when the last user is done with it. A closed file is never reopened.
    """

    def __init__(self, path: Path, pool: SegmentFilePool, fd: int = -1) -> None:
        """Use :meth:`create` or :meth:`open`."""
        self.path = path
        self._pool = pool
        self._fd = fd
        self._users = 0
        self._closed = False
        self._referenced = True
        """Used since the pool's last pass (set without the lock: it is only a hint)."""
        self._lock = threading.Lock()
        if fd >= 0:
            with self._lock:
                victims = pool._register(self)
            pool._evict(victims)

    def __repr__(self) -> str:
        return f"SegmentFile({str(self.path)!r}, fd={self._fd}, users={self._users})"

    @classmethod
    def create(cls, path: Path, pool: SegmentFilePool) -> SegmentFile:
        """A new empty file at ``path`` (an existing one is emptied), left open: a new
        segment is about to be written."""
        return cls(path, pool, os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644))

    @classmethod
    def open(cls, path: Path, pool: SegmentFilePool) -> SegmentFile:
        """An existing file, opened at its first use."""
        return cls(path, pool)

    @property
    def is_open(self) -> bool:
        """Whether the file holds a descriptor now (for tests and metrics)."""
        return self._fd >= 0

    def _acquire(self) -> int:
        try:
            return self._try_acquire()
        except OSError as e:
            # Out of descriptors (a connection flood, say): give one of the pool's idle ones
            # up for this file and try once more; EMFILE again goes to the caller, which
            # retries (docs/storage.md#file-descriptors).
            if e.errno != errno.EMFILE or not self._pool._shed_one():
                raise
        return self._try_acquire()

    def _try_acquire(self) -> int:
        victims: list[SegmentFile] | None = None
        with self._lock:
            if self._closed:
                raise SegmentClosedError(f"{self.path} is closed")
            fd = self._fd
            if fd < 0:
                # No O_CREAT: a file removed behind the log's back is an error, not a new
                # empty segment.
                fd = self._fd = os.open(self.path, os.O_RDWR)
                self._referenced = True  # before the pool's pass: never its own victim
                victims = self._pool._register(self)
            self._users += 1
        self._referenced = True
        if victims:
            self._pool._evict(victims)
        return fd

    def _release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._closed and self._users == 0:
                self._close_fd()

    def _close_fd(self) -> None:
        """Under the lock, with no user."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            self._pool._forget(self)
            os.close(fd)

    def _evict(self) -> None:
        """Close the descriptor to make room, unless it is in use (then it stays in the
        pool) or already gone."""
        with self._lock:
            if self._fd < 0 or self._closed:
                return  # closed: the last user's release closes it
            if self._users:
                self._pool._readd(self)
                return
            fd, self._fd = self._fd, -1
            os.close(fd)

    def _evict_idle(self) -> bool:
        """Close the descriptor if it is open and has no user; whether it did."""
        with self._lock:
            if self._fd < 0 or self._closed or self._users:
                return False
            fd, self._fd = self._fd, -1
            self._pool._forget(self)
            os.close(fd)
            return True

    def pread(self, size: int, position: int) -> bytes:
        fd = self._acquire()
        try:
            return os.pread(fd, size, position)
        finally:
            self._release()

    def write_at(
        self, buffers: Sequence[bytes | bytearray | memoryview], position: int, size: int
    ) -> None:
        """Write ``buffers`` (``size`` bytes in all) one after the other from ``position``.

        The owner's append path: :meth:`_acquire` and :meth:`_release` inlined for an open
        file, two lock round trips and no method call (0.6 µs of CPU per append here).
        Holding the lock for the system call instead would save one round trip but make
        readers, and any thread evicting this file, wait behind a write that the kernel may
        throttle for a long time (dirty-page writeback)."""
        lock = self._lock
        with lock:
            fd = self._fd if not self._closed else -1
            if fd >= 0:
                self._users += 1
        if fd < 0:
            fd = self._acquire()  # reopens it, or raises SegmentClosedError
        self._referenced = True
        try:
            written = os.pwritev(fd, buffers, position) if len(buffers) <= _IOV_MAX else 0
            if written != size:  # rare: pwritev wrote less than asked, or too many buffers
                _pwritev_rest(fd, buffers, position, written)
        finally:
            with lock:
                self._users -= 1
                if self._closed and self._users == 0:
                    self._close_fd()

    def truncate(self, size: int) -> None:
        fd = self._acquire()
        try:
            os.ftruncate(fd, size)
        finally:
            self._release()

    def fsync(self) -> None:
        """fsync the file: everything written through any of its descriptors, evicted ones
        included (see the module docstring)."""
        fd = self._acquire()
        try:
            os.fsync(fd)
        finally:
            self._release()

    def size(self) -> int:
        fd = self._acquire()
        try:
            return os.fstat(fd).st_size
        finally:
            self._release()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._users == 0:
                self._close_fd()


def _pwritev_rest(
    fd: int, buffers: Sequence[bytes | bytearray | memoryview], position: int, written: int
) -> None:
    """Write what is left of ``buffers`` after ``written`` bytes of them went to ``position``.

    pwritev may write less than asked (interrupted by a signal, or a disk that fills up
    without failing the call) and takes at most IOV_MAX buffers at a time.
    """
    views = [memoryview(buffer) for buffer in buffers]
    first = 0  # views[first] is the first buffer not wholly written
    while True:
        position += written
        while first < len(views) and written >= len(views[first]):
            written -= len(views[first])
            first += 1
        if first == len(views):
            return
        views[first] = views[first][written:]
        written = os.pwritev(fd, views[first : first + _IOV_MAX], position)
        if written <= 0:
            raise OSError(errno.EIO, f"pwritev wrote nothing at position {position}")
