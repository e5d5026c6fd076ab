"""Reading segment files in Spark's executors, with the broker's own codec.

The driver turns every ``.log`` file into a :class:`SegmentTask` and Spark runs one task
per segment file, so segments are read in parallel and no log passes through the driver.
Two functions, two passes over the files (the second reads them from the page cache):

- :func:`scan_segment` walks the batch headers (``scan_batches``: framing and CRC, records
  not decoded) and yields one row per batch (:data:`BATCH_SCHEMA`), plus one row for a
  torn or unframeable tail. The continuity, CRC, gap and epoch checks run on these rows.
- :func:`decode_segment` decodes every sound batch (``decode_rows``) and yields one row
  per batch with its records' offsets, values and digests as arrays
  (:data:`DECODED_SCHEMA`); Spark explodes them into one row per record. A batch rows
  fewer than records keeps the Python-to-JVM traffic down to a few objects per record.

Both depend only on :mod:`proto.record_batch` and the standard library, and never raise
on damaged data: damage is what they report.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from proto.record_batch import (
    CorruptRecordError,
    Record,
    compute_crc,
    decode_rows,
    scan_batches,
)

__all__ = [
    "BATCH_SCHEMA",
    "DECODED_SCHEMA",
    "SegmentTask",
    "decode_segment",
    "decode_segments",
    "pack",
    "record_digest",
    "scan_segment",
    "scan_segments",
]

BATCH_SCHEMA = (
    "kind string, pid int, broker int, segment bigint, position bigint, base_offset bigint, "
    "last_offset bigint, epoch int, record_count int, size bigint, problem string"
)
"""Rows of :func:`scan_segment`. ``kind`` is ``batch`` for a batch framed soundly (its
``problem`` says why it is invalid, None when valid), ``torn`` for an incomplete or
unframeable tail of a replica's last segment (what recovery truncates after a crash: not a
violation), ``unframed`` for the same inside an earlier segment (corruption). For those
two, ``base_offset`` is the offset the next batch should have had, ``position`` where the
walk stopped and ``size`` the bytes left unread."""

DECODED_SCHEMA = (
    "pid int, broker int, epoch int, base_offset bigint, last_offset bigint, error string, "
    "codec string, offsets array<bigint>, `values` array<binary>, digests array<bigint>, "
    "producer_id bigint, producer_epoch int, base_sequence int"
)
"""Rows of :func:`decode_segment`: one per batch that passes its CRC. ``error`` says why
its records do not parse; ``codec`` names the compression of a compressed batch, which the
project's codec does not decode (minibroker's clients never compress); the arrays are then
empty. The batch's producer id, epoch and base sequence (-1 without an idempotent
producer) identify its records' writes: record i has sequence base + i (mod 2^31)."""

_INT64 = struct.Struct(">q")


class SegmentTask(NamedTuple):
    """One segment file for an executor to read."""

    pid: int
    """The partition's index in the audit's partition table."""
    broker: int
    base_offset: int
    """From the file name."""
    path: str
    is_last: bool
    """True for the replica's active (last) segment, where a torn tail is expected."""
    size: int = 0
    """Bytes, to balance the Spark tasks (see :func:`pack`)."""


def pack(tasks: Sequence[SegmentTask], bins: int) -> list[list[SegmentTask]]:
    """Spread segment files over at most ``bins`` Spark tasks of similar byte counts.

    Greedy: the largest file first, each into the bin with the fewest bytes so far. Every
    cached DataFrame then has a few partitions per core, whatever the number of segment
    files (thousands of small ones would make every later stage thousands of tasks).
    """
    count = max(1, min(bins, len(tasks)))
    packed: list[list[SegmentTask]] = [[] for _ in range(count)]
    load = [0] * count
    for task in sorted(tasks, key=lambda t: t.size, reverse=True):
        i = load.index(min(load))
        packed[i].append(task)
        load[i] += task.size + 1
    return [b for b in packed if b]


@contextmanager
def _mapped(path: str) -> Iterator[bytes | memoryview]:
    """The file's bytes, mapped rather than read: a segment can be 1 GiB."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size == 0:
            yield b""
            return
        with (
            mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
            memoryview(mapped) as view,
        ):
            yield view


def scan_segments(tasks: Iterable[SegmentTask]) -> Iterator[tuple[Any, ...]]:
    """The batch rows of several segments, one after the other."""
    for task in tasks:
        yield from scan_segment(task)


def decode_segments(tasks: Iterable[SegmentTask]) -> Iterator[tuple[Any, ...]]:
    """The decoded rows of several segments, one after the other."""
    for task in tasks:
        yield from decode_segment(task)


def scan_segment(task: SegmentTask) -> Iterator[tuple[Any, ...]]:
    """The batch rows of one segment (:data:`BATCH_SCHEMA`)."""
    pid, broker, base, path, is_last, _ = task
    with _mapped(path) as buf:
        scan = scan_batches(buf)
        expected = base
        for found in scan:
            h = found.header
            yield (
                "batch",
                pid,
                broker,
                base,
                found.position,
                h.base_offset,
                h.last_offset,
                h.partition_leader_epoch,
                h.record_count,
                h.size,
                found.problem,
            )
            expected = h.next_offset
        if scan.stop_problem is not None:
            yield (
                "torn" if is_last else "unframed",
                pid,
                broker,
                base,
                scan.end_position,
                expected,
                expected - 1,
                None,
                0,
                len(buf) - scan.end_position,
                scan.stop_problem,
            )


def record_digest(record: Record) -> int:
    """CRC-32C of what identifies a record besides its value and offset: key, timestamp
    and headers. Two replicas hold the same record at an offset when value, batch epoch
    and this digest agree."""
    return _digest(record.timestamp, record.key, record.headers)


def _digest(timestamp: int, key: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> int:
    digest = compute_crc(_INT64.pack(timestamp))
    if key is not None:
        digest = compute_crc(b"k" + key) ^ (digest << 1)
    for header_key, value in headers:
        digest = compute_crc(b"h" + header_key.encode() + b"=" + (value or b"")) ^ (digest << 1)
    return digest & 0x7FFF_FFFF_FFFF_FFFF


def decode_segment(task: SegmentTask) -> Iterator[tuple[Any, ...]]:
    """The decoded rows of one segment (:data:`DECODED_SCHEMA`): the records of every
    batch that passes its CRC and record-count checks.

    Records are decoded by ``decode_rows`` (the consumer's bulk path) from a copy of each
    batch, and the digest of a keyless, header-less record, a function of its timestamp
    alone, is computed once per timestamp: a batch's records mostly share one.
    """
    pid, broker, _, path, _, _ = task
    by_timestamp: dict[int, int] = {}
    with _mapped(path) as buf:
        for found in scan_batches(buf):
            h = found.header
            if found.problem is not None:
                continue  # scan_segment reports it
            epoch, base, last = h.partition_leader_epoch, h.base_offset, h.last_offset
            producer = (h.producer_id, h.producer_epoch, h.base_sequence)
            if h.compression != 0:
                codec = h.compression_name
                yield (pid, broker, epoch, base, last, None, codec, [], [], [], *producer)
                continue
            data = bytes(buf[found.position : found.position + h.size])
            try:
                rows = decode_rows(data, 0, h, tuple, min_offset=-(2**63))
            except CorruptRecordError as e:
                error = f"its CRC holds but its records do not parse: {e.reason}"
                yield (pid, broker, epoch, base, last, error, None, [], [], [], *producer)
                continue
            digests = []
            for _, key, _, timestamp, headers in rows:
                if key is None and not headers:
                    digest = by_timestamp.get(timestamp)
                    if digest is None:
                        digest = by_timestamp[timestamp] = _digest(timestamp, None, ())
                    digests.append(digest)
                else:
                    digests.append(_digest(timestamp, key, headers))
            yield (
                pid,
                broker,
                epoch,
                base,
                last,
                None,
                None,
                [row[0] for row in rows],
                [row[2] for row in rows],
                digests,
                *producer,
            )
