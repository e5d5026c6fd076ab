"""The producer state snapshot file (``<offset>.snapshot``), shared by the broker's log
(broker/log/producer_snapshot.py) and ``minibroker dump-log``: docs/storage.md, "Producer
state snapshots".

Kafka's ``ProducerStateManager`` snapshot layout (a version, a CRC-32C of what follows, then
the producers), extended to keep what this broker's state holds: every cached batch of a
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

Integers big-endian. Bytes that do not decode whole (a torn write, a CRC that does not
match, another version) are refused: a snapshot is never believed in part.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

import crc32c

from proto.errors import MinibrokerError

__all__ = [
    "MAX_BATCHES",
    "CorruptSnapshotError",
    "ProducerSnapshot",
    "SnapshotEntry",
    "decode_snapshot",
    "encode_snapshot",
]

VERSION = 1
MAX_BATCHES = 5
"""The most batches a producer's entry caches (the most an idempotent producer may have in
flight to one partition)."""
_HEAD = struct.Struct(">hI")
_BODY_HEAD = struct.Struct(">qi")
_PRODUCER = struct.Struct(">qhiqb")
_BATCH = struct.Struct(">iiqq")


class CorruptSnapshotError(MinibrokerError, ValueError):
    """Bytes that are not a whole snapshot of a known version: never believed."""


class SnapshotEntry(NamedTuple):
    """One producer id's state."""

    producer_id: int
    epoch: int
    coordinator_epoch: int
    txn_first_offset: int
    """The first offset of its open transaction, -1 when none is open."""
    batches: tuple[tuple[int, int, int, int], ...]
    """Its cached batches, oldest first: (first sequence, last sequence, base offset, last
    offset)."""


class ProducerSnapshot(NamedTuple):
    """The producer state of a log below some offset."""

    entries: Sequence[SnapshotEntry]
    """By producer id."""
    last_marker_offset: int


def encode_snapshot(snapshot: ProducerSnapshot) -> bytes:
    body = bytearray(_BODY_HEAD.pack(snapshot.last_marker_offset, len(snapshot.entries)))
    for entry in snapshot.entries:
        body += _PRODUCER.pack(
            entry.producer_id,
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
    entries: list[SnapshotEntry] = []
    seen: set[int] = set()
    try:
        for _ in range(count):
            producer_id, epoch, coordinator_epoch, txn_first, batch_count = _PRODUCER.unpack_from(
                body, position
            )
            position += _PRODUCER.size
            if not 0 <= batch_count <= MAX_BATCHES or producer_id in seen:
                raise CorruptSnapshotError(f"producer {producer_id}: {batch_count} batches")
            seen.add(producer_id)
            batches = []
            for _ in range(batch_count):
                batches.append(_BATCH.unpack_from(body, position))
                position += _BATCH.size
            entries.append(
                SnapshotEntry(producer_id, epoch, coordinator_epoch, txn_first, tuple(batches))
            )
    except struct.error:
        raise CorruptSnapshotError("the snapshot ends inside a producer") from None
    if position != len(body):
        raise CorruptSnapshotError(f"{len(body) - position} bytes after the last producer")
    return ProducerSnapshot(entries, last_marker_offset)
