"""Reading segment files in Spark's executors: the batch headers of each file, and the bytes
of batches for the record-level comparison.

The driver turns every ``.log`` file into a :class:`SegmentTask`; the scan job packs them
into a few tasks per core (:func:`pack`) and :func:`scan_segment` walks each file's batch
headers with the broker's own ``scan_batches`` (framing and CRC; records not decoded),
returning one :class:`SegmentScan`: the batches as columns, the problems of the few that
fail their CRC or record count, and where and why the walk stopped early (a torn or
unframeable tail). The continuity, CRC, gap and epoch checks and the replicas' summaries
are computed from these on the driver (:mod:`chaos.audit.log_checks`); the records are
decoded later, by the partition's chunk task (:mod:`chaos.audit.chunk`), which reads the
batches the scans located in the mapped files (:func:`map_file`).

Nothing here raises on damaged data: damage is what the scans report.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

from proto.records.control_records import ControlRecordError, decode_control_type
from proto.records.record_batch import (
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    CorruptRecordError,
    decode_batch,
    scan_batches,
)

__all__ = [
    "NOT_CONTROL",
    "UNKNOWN_CONTROL",
    "Buffer",
    "SegmentScan",
    "SegmentTask",
    "Stop",
    "control_type_of",
    "map_file",
    "pack",
    "scan_segment",
]

T = TypeVar("T")
Buffer = bytes | bytearray | mmap.mmap
"""A file's bytes: mapped (:func:`map_file`), or read."""
NOT_CONTROL = -1
"""``control_type`` of a batch that is not a control batch."""
UNKNOWN_CONTROL = -2
"""``control_type`` of a control batch whose record is not a commit or abort marker."""


class SegmentTask(NamedTuple):
    """One segment file for an executor to scan."""

    replica: int
    """The replica's index in the audit's replica table."""
    base_offset: int
    """From the file name."""
    path: str
    is_last: bool
    """True for the replica's active (last) segment, where a torn tail is expected."""
    size: int = 0
    """Bytes, to balance the Spark tasks (see :func:`pack`)."""


def pack(tasks: Sequence[T], bins: int, size: Callable[[T], int]) -> list[list[T]]:
    """Spread work (segment files, history ranges) over at most ``bins`` Spark tasks of
    similar ``size``.

    Greedy: the largest first, each into the bin with the least so far. Every Python task
    costs tens of milliseconds of Spark's own work however small it is, so a few tasks per
    core, whatever the number of segment files.
    """
    count = max(1, min(bins, len(tasks)))
    packed: list[list[T]] = [[] for _ in range(count)]
    load = [0] * count
    for task in sorted(tasks, key=size, reverse=True):
        i = load.index(min(load))
        packed[i].append(task)
        load[i] += size(task) + 1
    return [b for b in packed if b]


class Stop(NamedTuple):
    """Where a segment's walk stopped before its end, and why."""

    kind: str
    """``torn`` in a replica's last segment (what recovery truncates after a crash: not a
    violation), ``unframed`` in an earlier one (corruption)."""
    position: int
    next_offset: int
    """The offset the next batch should have had."""
    remaining: int
    """Bytes left unread."""
    problem: str


@dataclass(slots=True)
class SegmentScan:
    """The batches of one segment file that are framed soundly (whole, sane length, magic
    2), in file order, as columns, whether or not their CRC holds."""

    task: SegmentTask
    position: npt.NDArray[np.int64]
    size: npt.NDArray[np.int64]
    base_offset: npt.NDArray[np.int64]
    last_offset: npt.NDArray[np.int64]
    epoch: npt.NDArray[np.int64]
    """partitionLeaderEpoch (-1 when never stamped)."""
    record_count: npt.NDArray[np.int64]
    compressed: npt.NDArray[np.bool_]
    flags: npt.NDArray[np.int64]
    """The attributes' transactional and control bits."""
    producer_id: npt.NDArray[np.int64]
    producer_epoch: npt.NDArray[np.int64]
    max_timestamp: npt.NDArray[np.int64]
    control_type: npt.NDArray[np.int64]
    """A control batch's marker (0 abort, 1 commit, :data:`UNKNOWN_CONTROL`);
    :data:`NOT_CONTROL` for the others."""
    problems: dict[int, str] = field(default_factory=dict)
    """Batch index -> why its CRC or record count check fails; the others are valid."""
    stop: Stop | None = None

    def __len__(self) -> int:
        return len(self.position)

    def valid(self) -> npt.NDArray[np.bool_]:
        """The batches that pass their checks (their records are compared)."""
        ok = np.ones(len(self), dtype=np.bool_)
        ok[list(self.problems)] = False
        return ok


def map_file(path: str) -> Buffer:
    """The file's bytes, mapped rather than read (the page cache's pages, no copy; a segment
    can be 1 GiB)."""
    with open(path, "rb") as f:
        if f.seek(0, 2) == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def control_type_of(data: memoryview, position: int, header: BatchHeader) -> int:
    """The marker a valid control batch holds: its first record's control type (0 abort,
    1 commit), :data:`UNKNOWN_CONTROL` when that is not a marker or does not parse (the
    broker writes one record per control batch, uncompressed)."""
    try:
        records = decode_batch(data, position).records
        kind = decode_control_type(records[0].key) if records else None
    except (CorruptRecordError, ControlRecordError, ValueError):
        return UNKNOWN_CONTROL
    return UNKNOWN_CONTROL if kind is None else int(kind)


_FLAGS = TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK
_COLUMNS = 12


def scan_segment(task: SegmentTask) -> SegmentScan:
    """The batches of one segment file (see :class:`SegmentScan`)."""
    data = map_file(task.path)
    view = memoryview(data)
    scan = scan_batches(view)
    rows: list[tuple[int, ...]] = []
    problems: dict[int, str] = {}
    expected = task.base_offset
    for found in scan:
        h = found.header
        if found.problem is not None:
            problems[len(rows)] = found.problem
        control = NOT_CONTROL
        if h.attributes & CONTROL_FLAG_MASK and found.problem is None:
            control = control_type_of(view, found.position, h)
        rows.append(
            (
                found.position,
                h.size,
                h.base_offset,
                h.last_offset,
                h.partition_leader_epoch,
                h.record_count,
                h.attributes & COMPRESSION_CODEC_MASK,
                h.attributes & _FLAGS,
                h.producer_id,
                h.producer_epoch,
                h.max_timestamp,
                control,
            )
        )
        expected = h.next_offset
    stop = None
    if scan.stop_problem is not None:
        stop = Stop(
            "torn" if task.is_last else "unframed",
            scan.end_position,
            expected,
            len(data) - scan.end_position,
            scan.stop_problem,
        )
    table = np.array(rows, dtype=np.int64).reshape(-1, _COLUMNS)
    return SegmentScan(
        task,
        position=table[:, 0].copy(),
        size=table[:, 1].copy(),
        base_offset=table[:, 2].copy(),
        last_offset=table[:, 3].copy(),
        epoch=table[:, 4].copy(),
        record_count=table[:, 5].copy(),
        compressed=table[:, 6] != 0,
        flags=table[:, 7].copy(),
        producer_id=table[:, 8].copy(),
        producer_epoch=table[:, 9].copy(),
        max_timestamp=table[:, 10].copy(),
        control_type=table[:, 11].copy(),
        problems=problems,
        stop=stop,
    )
