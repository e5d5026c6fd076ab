"""Checkpoint files in Kafka's text formats, always written atomically.

A broker's data dir holds, at its root::

    replication-offset-checkpoint       high watermark of every local log
    recovery-point-offset-checkpoint    first offset of each log not known to be fsynced
    log-start-offset-checkpoint         log start offset of each log
    meta.properties                     version=0, broker.id=N, cluster.id=I (Java properties)

and each partition directory holds a ``leader-epoch-checkpoint``. The offset checkpoints and
the epoch checkpoint share one text format (Kafka's ``CheckpointFile``)::

    0                   <- format version, always 0
    2                   <- number of entries
    orders 0 1234       <- one entry per line: "topic partition offset" ...
    orders 1 987        <- ... or, in leader-epoch-checkpoint, "epoch startOffset"

Lines end in ``\\n``; on read, entry fields may be separated by any whitespace and ``\\r\\n``
line ends are accepted (Java's ``readLine``). A missing or empty file reads as no entries.

Every write goes through :func:`atomic_write_text`: write ``<path>.tmp``, fsync it, rename it
over ``<path>``, fsync the directory. A crash at any point leaves the old or the new file,
never a mix. A stale ``<path>.tmp`` left by a crash is never read; the next write replaces it.

Malformed content raises :class:`CheckpointError`, a subclass of :class:`OSError`: Kafka reads a
corrupt checkpoint as an ``IOException`` and takes the whole log dir offline
(``KafkaStorageException``), so callers treat it like any other storage failure of that dir
(one ``except OSError`` covers a failing disk and a corrupt file alike). It is deliberately not
a ``ValueError``: a corrupt file is an environmental fault, not a programming error.

Each checkpoint object serialises its own writes; keep one object per file.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.log.epoch_entry import EpochEntry
from proto.errors import MinibrokerError
from proto.topic_partition import TopicPartition
from proto.zk.znodes import is_cluster_id

__all__ = [
    "LEADER_EPOCH_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "META_PROPERTIES",
    "RECOVERY_POINT_OFFSET_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
    "BrokerMetadata",
    "CheckpointError",
    "LeaderEpochCheckpointFile",
    "OffsetCheckpointFile",
    "atomic_write_text",
    "read_broker_metadata",
    "read_meta_properties",
    "write_meta_properties",
]

log = logging.getLogger(__name__)

REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
"""High watermarks of the logs in a data dir (``ReplicaManager.checkpointHighWatermarks``)."""
RECOVERY_POINT_OFFSET_CHECKPOINT = "recovery-point-offset-checkpoint"
"""Recovery points: where recovery after an unclean shutdown starts scanning."""
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
"""Log start offsets above the first segment's base offset (after retention)."""
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
"""The epoch cache of one partition; lives in the partition directory, not the data dir root."""
META_PROPERTIES = "meta.properties"
"""Identifies the broker that owns a data dir."""

CHECKPOINT_VERSION = 0
"""The only format version Kafka has ever written for these files."""
META_PROPERTIES_VERSION = 0
"""ZooKeeper-mode ``meta.properties`` (version 1 is KRaft's, with node.id and cluster.id)."""

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
# Strictly ASCII digits: Python's int() would also take "1_000", " 7" and non-ASCII digits,
# none of which Kafka's parser (Java's Integer.parseInt/Long.parseLong) accepts.
_INTEGER = re.compile(r"-?[0-9]+")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    """``meta.properties``: the broker that owns a data dir, and its cluster once known."""

    broker_id: int
    cluster_id: str | None
    """None in a dir written before the broker first reached ZooKeeper (or by an older
    minibroker); Kafka then adopts the cluster's id too."""


class CheckpointError(MinibrokerError, OSError):
    """A checkpoint file (or meta.properties) whose content cannot be parsed.

    The message names the file and, when one line is to blame, its 1-based line number.
    An :class:`OSError` because Kafka treats it as an I/O failure of the log dir (see the
    module docstring); the caller decides whether to take the dir offline.
    """

    def __init__(self, path: Path, reason: str, line_number: int | None = None) -> None:
        where = f"{path}" if line_number is None else f"{path}, line {line_number}"
        super().__init__(f"corrupt checkpoint file {where}: {reason}")
        self.path = path
        """The file that failed to parse."""
        self.reason = reason
        """What is wrong, without the location."""
        self.line_number = line_number
        """1-based line number of the offending line, or None for whole-file problems."""

    def __reduce__(self) -> tuple[Any, ...]:
        # OSError pickles its args (the formatted message), which this __init__ cannot take.
        return (type(self), (self.path, self.reason, self.line_number))


def _tmp_path(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


def fsync_directory(directory: Path) -> None:
    """Make a directory's entries (a created, renamed or deleted file) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) so that a crash leaves the old or the new file.

    Writes ``<path>.tmp``, flushes and fsyncs it, closes it, renames it over ``path`` with
    ``os.replace`` (atomic on POSIX) and fsyncs the parent directory so the rename itself
    survives a power loss (KAFKA-3968). The file fsync is what KAFKA-15046 dropped and
    KAFKA-16541 restored: without it an OS crash can leave a renamed but empty or torn file.

    If any step before the rename fails, the temporary file is removed (best effort) and
    the error propagates; ``path`` is untouched. A failure of the final directory fsync
    propagates too, although the new content is already in place.
    """
    tmp = _tmp_path(path)
    data = text.encode("utf-8")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            log.warning("could not remove %s after a failed checkpoint write", tmp)
        raise
    fsync_directory(path.parent)


def _read_text(path: Path) -> str | None:
    """The decoded file content, or None if the file does not exist."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line_number = data.count(b"\n", 0, e.start) + 1
        raise CheckpointError(path, "not valid UTF-8", line_number) from None


def _parse_int(
    path: Path, line_number: int, field: str, text: str, *, maximum: int, what: str
) -> int:
    """A non-negative decimal integer no larger than ``maximum``, or CheckpointError."""
    if not _INTEGER.fullmatch(field):
        raise CheckpointError(path, f"{what} is not an integer: {text!r}", line_number)
    value = int(field)
    if value < 0:
        raise CheckpointError(path, f"negative {what}: {text!r}", line_number)
    if value > maximum:
        raise CheckpointError(path, f"{what} out of range: {text!r}", line_number)
    return value


def _read_entry_lines(path: Path) -> list[tuple[int, str]] | None:
    """Check the version and count lines; return the entry lines with their line numbers.

    None when the file is missing or empty (no entries). Unlike Kafka, which returns no
    entries for a file holding only the version line, that is reported as corrupt here: the
    atomic write never produces it, so such a file was damaged by something else.
    """
    text = _read_text(path)
    if text is None or text == "":
        return None
    lines = _LINE_BREAK.split(text)
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line does not start another one
    version_line = lines[0]
    if not _INTEGER.fullmatch(version_line):
        raise CheckpointError(path, f"malformed version line: {version_line!r}", 1)
    if int(version_line) != CHECKPOINT_VERSION:
        raise CheckpointError(path, f"unknown version {version_line}", 1)
    if len(lines) < 2:
        raise CheckpointError(path, "missing the entry count line", 2)
    expected = _parse_int(path, 2, lines[1], lines[1], maximum=_INT32_MAX, what="entry count")
    entry_lines = list(enumerate(lines[2:], start=3))
    if len(entry_lines) != expected:
        # Point at the first surplus line, or at the line where the next entry was due.
        blame = 3 + expected if len(entry_lines) > expected else len(lines) + 1
        raise CheckpointError(
            path, f"count line says {expected} entries but found {len(entry_lines)}", blame
        )
    return entry_lines


def _format(lines: Iterable[str]) -> str:
    body = list(lines)
    return "".join(f"{line}\n" for line in [str(CHECKPOINT_VERSION), str(len(body)), *body])


class OffsetCheckpointFile:
    """One of the data dir's per-partition offset checkpoints (``topic partition offset`` lines).

    Used for ``replication-offset-checkpoint``, ``recovery-point-offset-checkpoint`` and
    ``log-start-offset-checkpoint``. Nothing is created until the first :meth:`write` (Kafka
    creates an empty file up front; reading a missing file gives the same empty answer).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        """The checkpoint file."""
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OffsetCheckpointFile({str(self.path)!r})"

    def read(self) -> dict[TopicPartition, int]:
        """The offsets in the file; ``{}`` if it is missing or empty.

        Raises CheckpointError for an unknown version, a count that does not match the
        entries, a line without exactly three fields, a partition or offset that is not a
        non-negative integer, or a partition listed twice.
        """
        entry_lines = _read_entry_lines(self.path)
        if entry_lines is None:
            return {}
        offsets: dict[TopicPartition, int] = {}
        for line_number, line in entry_lines:
            fields = line.split()
            if len(fields) != 3:
                raise CheckpointError(
                    self.path, f"expected 'topic partition offset', got {line!r}", line_number
                )
            topic, partition_field, offset_field = fields
            partition = _parse_int(
                self.path, line_number, partition_field, line, maximum=_INT32_MAX, what="partition"
            )
            offset = _parse_int(
                self.path, line_number, offset_field, line, maximum=_INT64_MAX, what="offset"
            )
            tp = TopicPartition(topic, partition)
            if tp in offsets:
                raise CheckpointError(self.path, f"{tp} listed twice", line_number)
            offsets[tp] = offset
        return offsets

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Atomically replace the file with ``offsets``, sorted by (topic, partition).

        Raises ValueError (before touching the disk) for a topic name that is empty or holds
        whitespace, or a negative partition or offset, none of which the format can carry.
        """
        lines = []
        for tp in sorted(offsets):
            offset = offsets[tp]
            if not tp.topic or any(c.isspace() for c in tp.topic):
                raise ValueError(f"topic name cannot be written to a checkpoint: {tp.topic!r}")
            if not 0 <= tp.partition <= _INT32_MAX or not 0 <= offset <= _INT64_MAX:
                raise ValueError(f"invalid checkpoint entry {tp}: {offset}")
            lines.append(f"{tp.topic} {tp.partition} {offset}")
        with self._lock:
            atomic_write_text(self.path, _format(lines))


class LeaderEpochCheckpointFile:
    """A partition's ``leader-epoch-checkpoint``: ``epoch startOffset`` lines.

    The file layer only parses and formats; ordering rules belong to
    :class:`broker.log.leader_epoch_cache.LeaderEpochFileCache`, which (like Kafka) re-applies
    them when it loads the entries.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        """The checkpoint file, ``<partition dir>/leader-epoch-checkpoint``."""
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LeaderEpochCheckpointFile({str(self.path)!r})"

    def read(self) -> list[EpochEntry]:
        """The entries in file order; ``[]`` if the file is missing or empty.

        Raises CheckpointError for an unknown version, a count that does not match the
        entries, a line without exactly two fields, or a negative or non-integer epoch or
        start offset (an epoch must fit in 32 bits, an offset in 64).
        """
        entry_lines = _read_entry_lines(self.path)
        if entry_lines is None:
            return []
        entries = []
        for line_number, line in entry_lines:
            fields = line.split()
            if len(fields) != 2:
                raise CheckpointError(
                    self.path, f"expected 'epoch startOffset', got {line!r}", line_number
                )
            epoch = _parse_int(
                self.path, line_number, fields[0], line, maximum=_INT32_MAX, what="epoch"
            )
            start_offset = _parse_int(
                self.path, line_number, fields[1], line, maximum=_INT64_MAX, what="start offset"
            )
            entries.append(EpochEntry(epoch, start_offset))
        return entries

    def write(self, entries: Iterable[EpochEntry]) -> None:
        """Atomically replace the file with ``entries``, in the order given.

        Raises ValueError (before touching the disk) for a negative or oversized epoch or
        start offset.
        """
        lines = []
        for entry in entries:
            if not 0 <= entry.epoch <= _INT32_MAX or not 0 <= entry.start_offset <= _INT64_MAX:
                raise ValueError(f"invalid leader epoch entry {entry}")
            lines.append(f"{entry.epoch} {entry.start_offset}")
        with self._lock:
            atomic_write_text(self.path, _format(lines))


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _java_date(t: time.struct_time) -> str:
    """Java's ``Date.toString()`` in UTC; English names whatever the locale (unlike %a/%b)."""
    return (
        f"{_DAYS[t.tm_wday]} {_MONTHS[t.tm_mon - 1]} {t.tm_mday:02d} "
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} UTC {t.tm_year}"
    )


def write_meta_properties(data_dir: Path, broker_id: int, cluster_id: str | None = None) -> None:
    """Atomically write ``<data_dir>/meta.properties`` as Kafka does in ZooKeeper mode.

    Java's ``Properties.store(out, "")`` writes an empty comment line and a date comment
    line before the properties; the layout is kept so Kafka tooling reads it unchanged::

        #
        #Thu Oct 24 12:00:00 UTC 2024
        version=0
        broker.id=1
        cluster.id=kN3pVvD8QpqFSYt1OXeVHQ

    ``cluster.id`` is left out when None (a dir not yet started against a cluster).
    """
    if broker_id < 0:
        raise ValueError(f"broker id must be >= 0, got {broker_id}")
    if cluster_id is not None and not is_cluster_id(cluster_id):
        raise ValueError(f"illegal cluster id {cluster_id!r}")
    stamp = _java_date(time.gmtime())
    text = f"#\n#{stamp}\nversion={META_PROPERTIES_VERSION}\nbroker.id={broker_id}\n"
    if cluster_id is not None:
        text += f"cluster.id={cluster_id}\n"
    atomic_write_text(data_dir / META_PROPERTIES, text)


def _parse_properties(path: Path, text: str) -> dict[str, tuple[str, int]]:
    """Key -> (value, line number) for the simple properties files Kafka writes.

    Follows Java's ``Properties.load`` where it matters here: ``#`` and ``!`` comments, blank
    lines, leading whitespace, and ``=``, ``:`` or whitespace as the separator. Backslash
    escapes and continuation lines are not interpreted; meta.properties never needs them.
    """
    properties: dict[str, tuple[str, int]] = {}
    for line_number, raw in enumerate(_LINE_BREAK.split(text), start=1):
        line = raw.lstrip(" \t\f")
        if not line or line[0] in "#!":
            continue
        match = re.fullmatch(r"([^=:\s]+)\s*[=:\s]\s*(.*)|([^=:\s]+)", line)
        if match is None:
            raise CheckpointError(path, f"malformed property line: {raw!r}", line_number)
        key = match.group(1) or match.group(3)
        value = match.group(2) or ""
        properties[key] = (value.rstrip(" \t\f"), line_number)
    return properties


def read_meta_properties(data_dir: Path) -> int | None:
    """The broker id in ``<data_dir>/meta.properties``, or None if the file does not exist
    (see :func:`read_broker_metadata`)."""
    metadata = read_broker_metadata(data_dir)
    return None if metadata is None else metadata.broker_id


def read_broker_metadata(data_dir: Path) -> BrokerMetadata | None:
    """What ``<data_dir>/meta.properties`` says, or None if the file does not exist.

    Raises CheckpointError when the file is unreadable as properties, its ``version`` is not
    0, ``broker.id`` is missing or not a non-negative integer, or ``cluster.id`` is empty or
    holds characters no cluster id has.
    """
    path = data_dir / META_PROPERTIES
    text = _read_text(path)
    if text is None:
        return None
    properties = _parse_properties(path, text)
    if "version" not in properties:
        raise CheckpointError(path, "no version property")
    version, line_number = properties["version"]
    if not _INTEGER.fullmatch(version) or int(version) != META_PROPERTIES_VERSION:
        raise CheckpointError(path, f"unsupported version {version!r}", line_number)
    if "broker.id" not in properties:
        raise CheckpointError(path, "no broker.id property")
    broker_id, line_number = properties["broker.id"]
    parsed = _parse_int(
        path, line_number, broker_id, broker_id, maximum=_INT32_MAX, what="broker.id"
    )
    cluster_id: str | None = None
    if "cluster.id" in properties:
        cluster_id, line_number = properties["cluster.id"]
        if not is_cluster_id(cluster_id):
            raise CheckpointError(path, f"illegal cluster.id {cluster_id!r}", line_number)
    return BrokerMetadata(parsed, cluster_id)
