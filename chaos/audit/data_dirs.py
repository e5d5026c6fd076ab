"""What the audit reads on the driver: the broker data dirs' layout and checkpoints.

Only small files are read here: ``meta.properties``, the three offset checkpoints of each
data dir and the ``leader-epoch-checkpoint`` of each partition, plus directory listings
(segment names and sizes). Segment contents are read by Spark's executors
(:mod:`chaos.audit.segments`).

Everything that makes the input unusable raises :class:`AuditInputError` (exit status 2):
a missing or unreadable dir, a dir without ``meta.properties``, two dirs of one broker, a
checkpoint that does not parse (the message names the file and line).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from broker.log.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CheckpointError,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    read_meta_properties,
)
from broker.log.epoch_entry import EpochEntry
from proto.errors import MinibrokerError
from proto.topic_partition import TopicPartition

__all__ = [
    "AuditInputError",
    "BrokerDir",
    "ReplicaFiles",
    "Segment",
    "read_data_dirs",
]

_SEGMENT_NAME = re.compile(r"(\d{20})\.log")


class AuditInputError(MinibrokerError):
    """Input the audit cannot work with; the command exits with status 2."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One ``<base offset>.log`` file."""

    base_offset: int
    path: Path
    size: int
    modified_ms: int = 0
    """The file's modification time: a compacted log's cleaner judges a tombstone's age by
    its segments' (:mod:`chaos.audit.compaction`)."""


@dataclass(frozen=True, slots=True)
class ReplicaFiles:
    """One broker's replica of one partition, as found on disk."""

    broker: int
    topic_partition: TopicPartition
    directory: Path
    segments: tuple[Segment, ...]
    """In offset order."""
    high_watermark: int | None
    """From ``replication-offset-checkpoint``; None when the file has no entry."""
    recovery_point: int | None
    log_start_checkpoint: int | None
    """From ``log-start-offset-checkpoint``; None when the file has no entry."""
    epoch_entries: tuple[EpochEntry, ...]
    """The ``leader-epoch-checkpoint`` entries in file order."""


@dataclass(frozen=True, slots=True)
class BrokerDir:
    """One broker's data dir."""

    broker: int
    path: Path
    replicas: tuple[ReplicaFiles, ...]


def _checkpoint(data_dir: Path, name: str) -> dict[TopicPartition, int]:
    try:
        return OffsetCheckpointFile(data_dir / name).read()
    except CheckpointError as e:
        raise AuditInputError(str(e)) from None
    except OSError as e:
        raise AuditInputError(f"cannot read {data_dir / name}: {e.strerror}") from None


def _segments(directory: Path) -> tuple[Segment, ...]:
    segments = []
    for entry in os.scandir(directory):
        match = _SEGMENT_NAME.fullmatch(entry.name)
        if match is None or not entry.is_file():
            continue
        path = Path(entry.path)
        if not os.access(path, os.R_OK):
            raise AuditInputError(f"cannot read segment file {path}: permission denied")
        stat = entry.stat()
        segments.append(
            Segment(int(match.group(1)), path, stat.st_size, stat.st_mtime_ns // 1_000_000)
        )
    return tuple(sorted(segments, key=lambda s: s.base_offset))


def _read_broker_dir(path: Path) -> BrokerDir:
    if not path.exists():
        raise AuditInputError(f"data dir {path} does not exist")
    if not path.is_dir():
        raise AuditInputError(f"data dir {path} is not a directory")
    if not os.access(path, os.R_OK | os.X_OK):
        raise AuditInputError(f"cannot read data dir {path}: permission denied")
    try:
        broker = read_meta_properties(path)
    except OSError as e:  # CheckpointError included: it names the file and line
        raise AuditInputError(str(e)) from None
    if broker is None:
        raise AuditInputError(
            f"{path} is not a broker data dir: it has no meta.properties (broker.id)"
        )
    hws = _checkpoint(path, REPLICATION_OFFSET_CHECKPOINT)
    recovery_points = _checkpoint(path, RECOVERY_POINT_OFFSET_CHECKPOINT)
    log_starts = _checkpoint(path, LOG_START_OFFSET_CHECKPOINT)
    replicas = []
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
        for entry in entries:
            if not entry.is_dir():
                continue
            try:
                tp = TopicPartition.from_dir_name(entry.name)
            except ValueError:
                continue  # not a partition directory (lost+found, a -delete dir, ...)
            directory = Path(entry.path)
            try:
                epochs = LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT).read()
            except CheckpointError as e:
                raise AuditInputError(str(e)) from None
            replicas.append(
                ReplicaFiles(
                    broker,
                    tp,
                    directory,
                    _segments(directory),
                    hws.get(tp),
                    recovery_points.get(tp),
                    log_starts.get(tp),
                    tuple(epochs),
                )
            )
    except OSError as e:
        raise AuditInputError(f"cannot read data dir {path}: {e}") from None
    return BrokerDir(broker, path, tuple(replicas))


def read_data_dirs(paths: list[Path]) -> list[BrokerDir]:
    """Every broker dir's replicas and checkpoints, in the order given.

    Raises AuditInputError for a dir that is missing, unreadable or not a broker data dir,
    a checkpoint that does not parse, or two dirs with the same broker.id.
    """
    if not paths:
        raise AuditInputError("no data dirs given")
    dirs: list[BrokerDir] = []
    seen: dict[int, Path] = {}
    for path in paths:
        broker_dir = _read_broker_dir(path)
        if broker_dir.broker in seen:
            raise AuditInputError(
                f"{path} and {seen[broker_dir.broker]} both belong to broker "
                f"{broker_dir.broker} (meta.properties): give each broker's data dir once"
            )
        seen[broker_dir.broker] = path
        dirs.append(broker_dir)
    return dirs
