"""Producer state snapshot files: ``<offset>.snapshot`` in a partition's directory, the
producer state of the log below that offset (docs/storage.md, "Producer state snapshots").

Kafka writes one at every segment roll and at a clean shutdown, so that opening a log
replays the batches after the latest snapshot rather than the whole log, and so that
producers whose batches retention deleted are still known (their next batch continues
their sequence instead of being refused as unknown). The same here. The layout follows
Kafka's ``ProducerStateManager`` snapshot (a version, a CRC-32C of what follows, then the
producers), extended to keep what this broker's state holds: every cached batch of a
producer (up to five, for duplicate detection), not only its last, and the offset of the
partition's last marker::

    version            int16   (1)
    crc                uint32  CRC-32C of everything after this field
    last_marker_offset int64
    producer_count     int32
    producer_count times:
        producer_id        int64
        epoch              int16
        coordinator_epoch  int32
        txn_first_offset   int64   (-1: no open transaction)
        batch_count        int8    (0..5)
        batch_count times: first_sequence int32, last_sequence int32,
                           base_offset int64, last_offset int64

Integers big-endian. A file is written whole under a temporary name and renamed; one that
does not decode (a torn write, a CRC that does not match, another version) is never
believed: the log falls back to an older snapshot or replays from its start.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import crc32c

from broker.log.producer_state import BATCHES_PER_PRODUCER, BatchMetadata, ProducerEntry
from proto.errors import MinibrokerError

__all__ = [
    "SNAPSHOT_SUFFIX",
    "CorruptSnapshotError",
    "ProducerSnapshot",
    "decode_snapshot",
    "delete_snapshots",
    "encode_snapshot",
    "list_snapshots",
    "read_snapshot",
    "snapshot_path",
    "write_snapshot",
]

SNAPSHOT_SUFFIX = ".snapshot"
VERSION = 1
_HEAD = struct.Struct(">hI")
_BODY_HEAD = struct.Struct(">qi")
_PRODUCER = struct.Struct(">qhiqb")
_BATCH = struct.Struct(">iiqq")


class CorruptSnapshotError(MinibrokerError, ValueError):
    """A snapshot file that does not decode: never believed."""


class ProducerSnapshot(NamedTuple):
    """The producer state of the log below some offset."""

    producers: Mapping[int, ProducerEntry]
    last_marker_offset: int


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def encode_snapshot(snapshot: ProducerSnapshot) -> bytes:
    body = bytearray(_BODY_HEAD.pack(snapshot.last_marker_offset, len(snapshot.producers)))
    for producer_id, entry in sorted(snapshot.producers.items()):
        body += _PRODUCER.pack(
            producer_id,
            entry.epoch,
            entry.coordinator_epoch,
            entry.txn_first_offset,
            len(entry.batches),
        )
        for batch in entry.batches:
            body += _BATCH.pack(*batch)
    return _HEAD.pack(VERSION, crc32c.crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes) -> ProducerSnapshot:
    """The snapshot ``data`` holds. CorruptSnapshotError for anything else."""
    if len(data) < _HEAD.size + _BODY_HEAD.size:
        raise CorruptSnapshotError(f"{len(data)} bytes are too few for a snapshot")
    version, crc = _HEAD.unpack_from(data)
    if version != VERSION:
        raise CorruptSnapshotError(f"snapshot version {version}, this broker reads {VERSION}")
    body = memoryview(data)[_HEAD.size :]
    if crc32c.crc32c(body) != crc:
        raise CorruptSnapshotError("the snapshot's CRC does not match its bytes")
    last_marker_offset, count = _BODY_HEAD.unpack_from(body)
    position = _BODY_HEAD.size
    producers: dict[int, ProducerEntry] = {}
    try:
        for _ in range(count):
            producer_id, epoch, coordinator_epoch, txn_first, batch_count = _PRODUCER.unpack_from(
                body, position
            )
            position += _PRODUCER.size
            if not 0 <= batch_count <= BATCHES_PER_PRODUCER or producer_id in producers:
                raise CorruptSnapshotError(f"producer {producer_id}: {batch_count} batches")
            batches = []
            for _ in range(batch_count):
                batches.append(BatchMetadata(*_BATCH.unpack_from(body, position)))
                position += _BATCH.size
            producers[producer_id] = ProducerEntry(
                epoch, tuple(batches), txn_first, coordinator_epoch
            )
    except struct.error:
        raise CorruptSnapshotError("the snapshot ends inside a producer") from None
    if position != len(body):
        raise CorruptSnapshotError(f"{len(body) - position} bytes after the last producer")
    return ProducerSnapshot(producers, last_marker_offset)


def write_snapshot(
    directory: Path, offset: int, snapshot: ProducerSnapshot, *, fsync: bool
) -> Path:
    """Write ``<offset>.snapshot`` whole (a temporary file renamed over it); ``fsync`` it
    too (a clean shutdown), or leave that to a later flush of the directory's segments
    (a roll, on the produce path: a torn snapshot is not believed anyway)."""
    path = snapshot_path(directory, offset)
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("wb") as f:
        f.write(encode_snapshot(snapshot))
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    temporary.replace(path)
    return path


def read_snapshot(directory: Path, offset: int) -> ProducerSnapshot:
    """The snapshot at ``offset``: OSError if it cannot be read, CorruptSnapshotError if
    it does not decode."""
    return decode_snapshot(snapshot_path(directory, offset).read_bytes())


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
