"""Replacing segments with their cleaned copy, crash-safely (Kafka's ``Log.replaceSegments``
and the swap recovery of ``LogLoader``).

The cleaner writes a group of segments, cleaned, into one new segment named after the
group's first base offset, in three steps whose every intermediate state a restart
recovers (:func:`recover_swaps`, run by :func:`broker.log.log_loader.load_log` before
anything else):

1. ``<base>.log.cleaned`` and ``<base>.index.cleaned`` are written and fsynced, and
   ``<base>.txnindex.cleaned`` when the old segments' transaction indexes hold aborts (the
   cleaned segment holds their markers: a transaction index lost here would show aborted
   records to read_committed consumers). A crash leaves the old segments whole: the
   ``.cleaned`` files are deleted.
2. They are renamed to ``.swap``, the indexes first, and the directory fsynced: the rename
   of the ``.log`` file is the commit point. From there a restart finishes the swap: every
   old ``.log``/``.index``/``.txnindex`` whose base offset lies in the swap segment's
   range goes, then the ``.swap`` files take their final names. An index's ``.swap``
   without its ``.log.swap`` was not committed and is deleted.
3. The old segments' files are deleted, then the ``.swap`` files renamed to
   ``<base>.log``, ``<base>.index`` and ``<base>.txnindex`` (the first old segment's
   names) and the directory fsynced.

The old files are deleted before the new ones take a final name, so that no state has two
``.log`` files holding the same offsets.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from broker.log.checkpoints import fsync_directory
from broker.log.log_segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TXN_INDEX_SUFFIX,
    index_file_name,
    log_file_name,
    txn_index_file_name,
)
from broker.log.offset_index import OffsetIndex
from proto.records.aborted_txn import AbortedTxn, encode_entry
from proto.records.record_batch import CorruptRecordError, parse_header, scan_batches

__all__ = [
    "CLEANED_SUFFIX",
    "SWAP_SUFFIX",
    "CleanedSegment",
    "commit_swap",
    "discard_cleaned",
    "finish_swap",
    "recover_swaps",
    "write_cleaned_segment",
    "write_cleaned_txn_index",
]

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


class CleanedSegment(NamedTuple):
    """A cleaned segment written as ``.cleaned`` files."""

    base_offset: int
    size: int
    next_offset: int
    """The offset after its last batch: the old group's end."""


def _paths(directory: Path, base_offset: int, suffix: str) -> tuple[Path, Path]:
    return (
        directory / (log_file_name(base_offset) + suffix),
        directory / (index_file_name(base_offset) + suffix),
    )


def _txn_path(directory: Path, base_offset: int, suffix: str) -> Path:
    return directory / (txn_index_file_name(base_offset) + suffix)


def write_cleaned_segment(
    directory: Path,
    base_offset: int,
    batches: Iterable[bytes],
    *,
    index_interval_bytes: int,
    modified_ms: int,
) -> CleanedSegment:
    """Write ``batches`` (whole, in offset order) as ``<base>.log.cleaned`` with its index
    ``<base>.index.cleaned`` (entries by LogSegment's rule), fsync both, and give the log
    file ``modified_ms`` as its modification time (Kafka keeps the group's newest, which
    the tombstone horizon and time retention read)."""
    log_path, index_path = _paths(directory, base_offset, CLEANED_SUFFIX)
    index = OffsetIndex.create(index_path, base_offset)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    position = 0
    last_indexed = 0
    next_offset = base_offset
    try:
        for data in batches:
            header = parse_header(data)
            if position - last_indexed > index_interval_bytes:
                index.append(header.last_offset, position)
                last_indexed = position
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            position += len(data)
            next_offset = header.next_offset
        os.fsync(fd)
    finally:
        os.close(fd)
    index.flush()
    index.close()
    seconds = modified_ms / 1000
    os.utime(log_path, (seconds, seconds))
    return CleanedSegment(base_offset, position, next_offset)


def write_cleaned_txn_index(
    directory: Path, base_offset: int, aborts: Sequence[AbortedTxn]
) -> None:
    """Write the cleaned segment's aborted transactions (those whose markers it keeps, in
    order) as ``<base>.txnindex.cleaned``, fsynced; nothing when there are none."""
    if aborts:
        _write_synced(
            _txn_path(directory, base_offset, CLEANED_SUFFIX),
            b"".join(encode_entry(txn) for txn in aborts),
        )


def _write_synced(path: Path, data: bytes) -> None:
    with path.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def discard_cleaned(directory: Path, base_offset: int) -> None:
    """Remove a cleaning's ``.cleaned`` files (the log changed under it, or it failed)."""
    for path in (
        *_paths(directory, base_offset, CLEANED_SUFFIX),
        _txn_path(directory, base_offset, CLEANED_SUFFIX),
    ):
        path.unlink(missing_ok=True)


def commit_swap(directory: Path, base_offset: int) -> None:
    """Step 2: the ``.cleaned`` files become ``.swap`` files (the index first), durably."""
    cleaned_log, cleaned_index = _paths(directory, base_offset, CLEANED_SUFFIX)
    swap_log, swap_index = _paths(directory, base_offset, SWAP_SUFFIX)
    os.replace(cleaned_index, swap_index)
    cleaned_txn = _txn_path(directory, base_offset, CLEANED_SUFFIX)
    if cleaned_txn.exists():
        os.replace(cleaned_txn, _txn_path(directory, base_offset, SWAP_SUFFIX))
    os.replace(cleaned_log, swap_log)
    fsync_directory(directory)


def finish_swap(directory: Path, base_offset: int) -> None:
    """The end of step 3, once the old segments' files are gone: the ``.swap`` files take
    their final names (the index first), durably. A missing ``.index.swap`` was renamed
    already, or lost: then an empty index stands in, which the loader rebuilds."""
    swap_log, swap_index = _paths(directory, base_offset, SWAP_SUFFIX)
    index = directory / index_file_name(base_offset)
    if swap_index.exists():
        os.replace(swap_index, index)
    elif not index.exists():
        index.touch()
    swap_txn = _txn_path(directory, base_offset, SWAP_SUFFIX)
    if swap_txn.exists():
        os.replace(swap_txn, directory / txn_index_file_name(base_offset))
    os.replace(swap_log, directory / log_file_name(base_offset))
    fsync_directory(directory)


def recover_swaps(directory: Path) -> None:
    """Finish every committed swap in ``directory`` (step 2 reached) and drop every
    uncommitted one (``.cleaned`` files), so the loader finds plain segments only."""
    names = sorted(entry.name for entry in directory.iterdir() if entry.is_file())
    for name in names:
        uncommitted = any(
            name.endswith(suffix + SWAP_SUFFIX)
            and name[: -len(suffix + SWAP_SUFFIX)] + LOG_SUFFIX + SWAP_SUFFIX not in names
            for suffix in (INDEX_SUFFIX, TXN_INDEX_SUFFIX)
        )
        if name.endswith(CLEANED_SUFFIX) or uncommitted:
            log.warning("%s: removing unfinished cleaning %s", directory, name)
            (directory / name).unlink(missing_ok=True)
    for name in names:
        if not name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            continue
        base_offset = int(name[: -len(LOG_SUFFIX + SWAP_SUFFIX)])
        swap_log, swap_index = _paths(directory, base_offset, SWAP_SUFFIX)
        swap_txn = _txn_path(directory, base_offset, SWAP_SUFFIX)
        end = _end_offset(swap_log, base_offset)
        for old in _segments_in(directory, base_offset, end):
            log.warning(
                "%s: finishing a swap: removing segment %d, replaced by the cleaned %d",
                directory,
                old,
                base_offset,
            )
            (directory / log_file_name(old)).unlink(missing_ok=True)
            if old != base_offset or swap_index.exists():
                (directory / index_file_name(old)).unlink(missing_ok=True)
            if old != base_offset or swap_txn.exists():
                (directory / txn_index_file_name(old)).unlink(missing_ok=True)
        finish_swap(directory, base_offset)


def _end_offset(path: Path, base_offset: int) -> int:
    """The offset after the last whole batch of the file (a swap file was fsynced before
    it was committed, so all of it is whole)."""
    data = path.read_bytes()
    end = base_offset
    try:
        for found in scan_batches(data):
            end = found.header.next_offset
    except CorruptRecordError:
        pass
    return end


def _segments_in(directory: Path, low: int, high: int) -> list[int]:
    """Base offsets of the ``.log`` segments in [low, high)."""
    bases = []
    for entry in directory.iterdir():
        name = entry.name
        if name.endswith(LOG_SUFFIX) and name[: -len(LOG_SUFFIX)].isdigit():
            base = int(name[: -len(LOG_SUFFIX)])
            if low <= base < high:
                bases.append(base)
    return sorted(bases)
