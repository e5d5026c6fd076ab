"""A segment's aborted-transaction index, ``<20-digit base offset>.txnindex``, in Kafka's
format (Kafka's ``TransactionIndex``): docs/transactions.md.

One 34-byte big-endian entry per transaction aborted by a marker in the segment::

    version int16 (0) | producer id int64 | first offset int64 | last offset int64
    | last stable offset int64

``first offset`` is the transaction's first batch, ``last offset`` its abort marker, and
``last stable offset`` the partition's LSO once the abort was written. A read_committed
fetch asks every segment from its fetch offset on for the aborted transactions that
overlap what it returns, and stops at the first entry whose last stable offset passes the
fetch's upper bound (:meth:`TransactionIndex.collect`): the consumer then drops those
transactions' records.

Aborts are rare, so an entry is written to the file when it is appended (no pending
entries, unlike the offset index), and the file is only created by the first one (a
segment without aborts has none). The entries are also kept in memory, for fetches.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from broker.log.offset_index import CorruptIndexError
from proto.records.aborted_txn import (
    ENTRY_SIZE,
    AbortedTxn,
    AbortedTxnFormatError,
    decode_entries,
    encode_entry,
)

__all__ = ["ENTRY_SIZE", "AbortedTxn", "TransactionIndex"]


class TransactionIndex:
    """The aborted transactions of one segment, in the order of their markers.

    Thread-safe: the loop thread appends and truncates while executor threads collect
    entries for fetches and flush.
    """

    def __init__(self, path: Path, base_offset: int) -> None:
        """Use :meth:`load` (a missing file is an empty index)."""
        self._path = path
        self._base_offset = base_offset
        self._entries: list[AbortedTxn] = []
        self._dirty = False
        self._closed = False
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"TransactionIndex({str(self._path)!r}, entries={len(self._entries)})"

    @classmethod
    def load(cls, path: Path, base_offset: int) -> TransactionIndex:
        """The index in ``path``, empty if there is no file. CorruptIndexError for a file
        that is not whole entries of version 0 with last offsets increasing from the base
        offset (Kafka's ``sanityCheck``); recovery then rebuilds it from the log."""
        index = cls(path, base_offset)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return index
        try:
            entries = decode_entries(data)
        except AbortedTxnFormatError as e:
            raise CorruptIndexError(f"{path}: {e}") from None
        last = base_offset - 1
        for slot, txn in enumerate(entries):
            if txn.last_offset <= last or txn.first_offset > txn.last_offset:
                raise CorruptIndexError(
                    f"{path}: entry {slot} ({txn.first_offset}..{txn.last_offset}) does not "
                    f"follow offset {last} in a segment at {base_offset}"
                )
            last = txn.last_offset
        index._entries = entries
        return index

    @property
    def path(self) -> Path:
        return self._path

    @property
    def base_offset(self) -> int:
        return self._base_offset

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[AbortedTxn]:
        with self._lock:
            return list(self._entries)

    def append(self, txn: AbortedTxn) -> None:
        """Record an abort whose marker the segment now holds, writing it to the file.
        ValueError if its marker is not after the last one's (a programming error)."""
        with self._lock:
            if self._closed:
                raise ValueError(f"{self._path} is closed")
            if self._entries and txn.last_offset <= self._entries[-1].last_offset:
                raise ValueError(
                    f"{self._path}: an abort ending at {txn.last_offset} does not follow "
                    f"one ending at {self._entries[-1].last_offset}"
                )
            position = len(self._entries) * ENTRY_SIZE
            data = encode_entry(txn)
            fd = os.open(self._path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                done = 0
                while done < len(data):
                    done += os.pwrite(fd, data[done:], position + done)
            finally:
                os.close(fd)
            self._entries.append(txn)
            self._dirty = True

    def append_if_missing(self, txn: AbortedTxn) -> bool:
        """Append ``txn`` unless its marker is not after the last indexed one (it is there
        already: a replay of markers the index holds). Whether it was appended."""
        with self._lock:
            if self._entries and txn.last_offset <= self._entries[-1].last_offset:
                return False
        self.append(txn)
        return True

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """The aborts overlapping ``[fetch_offset, upper_bound)``, and whether the search
        is complete: an entry's last stable offset reached ``upper_bound``, so no later
        segment can hold an abort that began before it (Kafka's ``collectAbortedTxns``)."""
        found: list[AbortedTxn] = []
        with self._lock:
            for txn in self._entries:
                if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                    found.append(txn)
                if txn.last_stable_offset >= upper_bound:
                    return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the aborts whose marker is at or after ``offset`` (the log is cut there)."""
        with self._lock:
            keep = len(self._entries)
            while keep and self._entries[keep - 1].last_offset >= offset:
                keep -= 1
            self._cut(keep)

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        with self._lock:
            self._cut(0)

    def _cut(self, keep: int) -> None:
        if keep == len(self._entries):
            return
        del self._entries[keep:]
        if not self._closed and self._path.exists():
            os.truncate(self._path, keep * ENTRY_SIZE)
            self._dirty = True

    def flush(self) -> None:
        """fsync the file if it changed since the last flush."""
        with self._lock:
            if self._closed or not self._dirty or not self._path.exists():
                return
            self._dirty = False
            fd = os.open(self._path, os.O_RDONLY)
        try:
            os.fsync(fd)
        except BaseException:
            with self._lock:
                self._dirty = True
            raise
        finally:
            os.close(fd)

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def delete(self) -> None:
        """Close and remove the file."""
        self.close()
        self._path.unlink(missing_ok=True)
