"""Producer state snapshot files: ``<offset>.snapshot`` in a partition's directory, the
producer state of the log below that offset (docs/storage.md, "Producer state snapshots";
the layout: :mod:`proto.records.producer_snapshot`).

Kafka writes one at every segment roll and at a clean shutdown, so that opening a log
replays the batches after the latest snapshot rather than the whole log, and so that
producers whose batches retention deleted are still known (their next batch continues
their sequence instead of being refused as unknown). The same here. A file is written whole
under a temporary name and renamed; one that does not decode is never believed: the log
falls back to an older snapshot or replays from its start.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from broker.log.producer_state import BatchMetadata, ProducerEntry
from proto.records.producer_snapshot import (
    CorruptSnapshotError,
    ProducerSnapshot,
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
)

__all__ = [
    "SNAPSHOT_SUFFIX",
    "CorruptSnapshotError",
    "ProducerState",
    "delete_snapshots",
    "list_snapshots",
    "read_snapshot",
    "snapshot_path",
    "write_snapshot",
]

SNAPSHOT_SUFFIX = ".snapshot"


class ProducerState(NamedTuple):
    """The producer state of the log below some offset, as the Log keeps it."""

    producers: Mapping[int, ProducerEntry]
    last_marker_offset: int


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def _encoded(state: ProducerState) -> bytes:
    entries = [
        SnapshotEntry(
            producer_id, e.epoch, e.coordinator_epoch, e.txn_first_offset, tuple(e.batches)
        )
        for producer_id, e in sorted(state.producers.items())
    ]
    return encode_snapshot(ProducerSnapshot(entries, state.last_marker_offset))


def _decoded(data: bytes) -> ProducerState:
    snapshot = decode_snapshot(data)
    producers = {
        e.producer_id: ProducerEntry(
            e.epoch,
            tuple(BatchMetadata(*b) for b in e.batches),
            e.txn_first_offset,
            e.coordinator_epoch,
        )
        for e in snapshot.entries
    }
    return ProducerState(producers, snapshot.last_marker_offset)


def write_snapshot(directory: Path, offset: int, state: ProducerState, *, fsync: bool) -> Path:
    """Write ``<offset>.snapshot`` whole (a temporary file renamed over it); ``fsync`` it
    too (a clean shutdown), or leave that to a later flush of the directory's segments
    (a roll, on the produce path: a torn snapshot is not believed anyway)."""
    path = snapshot_path(directory, offset)
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("wb") as f:
        f.write(_encoded(state))
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    temporary.replace(path)
    return path


def read_snapshot(directory: Path, offset: int) -> ProducerState:
    """The state in the snapshot at ``offset``: OSError if it cannot be read,
    CorruptSnapshotError if it does not decode."""
    return _decoded(snapshot_path(directory, offset).read_bytes())


def list_snapshots(directory: Path) -> list[int]:
    """The offsets of the directory's snapshot files, ascending (leftover temporary files
    of an interrupted write are removed)."""
    offsets = []
    for path in directory.iterdir():
        name = path.name
        if name.endswith(SNAPSHOT_SUFFIX + ".tmp"):
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        if not name.endswith(SNAPSHOT_SUFFIX):
            continue
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if stem.isdigit() and len(stem) == 20:
            offsets.append(int(stem))
    return sorted(offsets)


def delete_snapshots(directory: Path, offsets: list[int]) -> None:
    for offset in offsets:
        with contextlib.suppress(FileNotFoundError):
            snapshot_path(directory, offset).unlink()
