"""Build broker data dirs and histories for the audit's tests and benchmark.

A :class:`BrokerDataDir` writes what a broker leaves on disk, with the project's own
storage code: ``meta.properties``, partition logs written by :class:`broker.log.log.Log` (as a
leader, or as a follower copying another broker's batches), and the three offset
checkpoints when it is closed. Faults are planted by the caller, through the log (truncate
it, append a different record) or by editing bytes afterwards::

    with BrokerDataDir(tmp / "b1", 1) as a, BrokerDataDir(tmp / "b2", 2) as b:
        a.produce(tp, ["m0", "m1"], epoch=0)
        b.replicate(tp, a)
        a.high_watermarks[tp] = b.high_watermarks[tp] = 2

It lives here rather than with the tests' shared fixtures (``tests/``) because the audit
benchmark (``bench/audit.py``) writes its million-record data dirs with it, and nothing
outside ``tests/`` imports the tests.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from broker.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
    write_meta_properties,
)
from broker.log.log import Log
from proto.config.log_config import LogConfig
from proto.records.control_records import ControlType, EndTxnMarker
from proto.records.record_batch import (
    NO_PRODUCER_ID,
    TRANSACTIONAL_FLAG_MASK,
    Record,
    encode_batch,
    parse_header,
    stamp_batch,
)
from proto.topic_partition import TopicPartition

__all__ = ["BrokerDataDir", "group_step", "history_line", "read_line", "txn_step", "write_lines"]

_TIMESTAMP = 1_700_000_000_000


class BrokerDataDir:
    """One broker's data dir, written through :class:`Log`. Close it (or use ``with``) to
    write the checkpoints and close the logs."""

    def __init__(self, path: Path, broker_id: int, config: LogConfig | None = None) -> None:
        self.path = path
        self.broker_id = broker_id
        self.config = config or LogConfig()
        self.configs: dict[TopicPartition, LogConfig] = {}
        """Per-partition configs overriding ``config`` (set before the first write)."""
        self.high_watermarks: dict[TopicPartition, int] = {}
        """Written to replication-offset-checkpoint on close; a partition left out has no
        entry."""
        self._logs: dict[TopicPartition, Log] = {}
        path.mkdir(parents=True, exist_ok=True)
        write_meta_properties(path, broker_id)

    def __enter__(self) -> BrokerDataDir:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def log(self, tp: TopicPartition) -> Log:
        """The partition's log, created on first use."""
        if tp not in self._logs:
            config = self.configs.get(tp, self.config)
            self._logs[tp] = Log.open(self.path / tp.dir_name, config)
        return self._logs[tp]

    def partition_dir(self, tp: TopicPartition) -> Path:
        return self.path / tp.dir_name

    def produce(
        self,
        tp: TopicPartition,
        values: Sequence[str | bytes | None],
        *,
        epoch: int,
        per_batch: int = 100,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = 0,
        first_sequence: int = 0,
        compression: int | Sequence[int] = 0,
        keys: Sequence[str | bytes | None] | None = None,
        transactional: bool = False,
        timestamp: int | None = None,
    ) -> int:
        """Append ``values`` as the leader in ``epoch``, ``per_batch`` records per batch;
        return the offset of the first one. With a ``producer_id`` the batches are an
        idempotent producer's, sequences from ``first_sequence`` (the leader checks them).
        ``compression`` is the codec of every batch (as the producer sends it, and the log
        stores it), or one per batch in turn (the first batch the first codec, ...).
        ``keys``: each record's key (a compacted topic's records need one; none by
        default); a None value is a tombstone. ``transactional``: the batches are a
        transactional producer's (a ``producer_id`` needed), ended by :meth:`end_txn`.
        ``timestamp``: the first record's CreateTime in ms (the others a ms apart)."""
        log = self.log(tp)
        first = log.log_end_offset
        codecs = [compression] if isinstance(compression, int) else list(compression)
        for n, i in enumerate(range(0, len(values), per_batch)):
            chunk = values[i : i + per_batch]
            records = [
                Record(
                    key=None if keys is None else _encoded(keys[i + j]),
                    value=_encoded(v),
                    timestamp=(_TIMESTAMP + first if timestamp is None else timestamp) + i + j,
                )
                for j, v in enumerate(chunk)
            ]
            producer = {}
            if producer_id != NO_PRODUCER_ID:
                producer = {
                    "producer_id": producer_id,
                    "producer_epoch": producer_epoch,
                    "base_sequence": (first_sequence + i) % 2**31,
                }
            codec = codecs[n % len(codecs)]
            flags = TRANSACTIONAL_FLAG_MASK if transactional else 0
            batch = encode_batch(records, **producer, compression=codec, flags=flags)
            log.append_as_leader(batch, epoch)
        return first

    def end_txn(
        self,
        tp: TopicPartition,
        producer_id: int,
        *,
        commit: bool,
        epoch: int,
        producer_epoch: int = 0,
        timestamp: int | None = None,
        coordinator_epoch: int = 0,
    ) -> int:
        """Write the commit (or abort) marker of ``producer_id``'s open transaction as the
        leader in ``epoch``, as WriteTxnMarkers does; ``timestamp`` (ms) when the leader
        wrote it. Returns the marker's offset."""
        log = self.log(tp)
        marker = EndTxnMarker(
            ControlType.COMMIT if commit else ControlType.ABORT, coordinator_epoch
        )
        at = log.log_end_offset
        log.append_marker_as_leader(
            marker,
            producer_id,
            producer_epoch,
            epoch,
            _TIMESTAMP + at if timestamp is None else timestamp,
        )
        return at

    def append_again(self, tp: TopicPartition, offset: int, *, epoch: int) -> int:
        """Append the batch holding ``offset`` once more at the log end, its producer id and
        sequence unchanged: what a leader does that misses a retried batch's duplicate
        check. Returns where the copy starts."""
        log = self.log(tp)
        data = bytes(log.read(offset, 1, max_offset=None).records)
        batch = bytearray(data[: parse_header(data).size])
        copy_at = log.log_end_offset
        stamp_batch(batch, 0, copy_at, epoch)
        log.append_as_follower(batch)
        return copy_at

    def become_leader(self, tp: TopicPartition, epoch: int) -> None:
        """What a new leader does before it writes: record its epoch at its log end offset
        (KAFKA-7415)."""
        log = self.log(tp)
        log.epoch_cache.assign(epoch, log.log_end_offset)

    def replicate(
        self, tp: TopicPartition, leader: BrokerDataDir, up_to: int | None = None
    ) -> None:
        """Copy the leader's batches from this log's end, as a follower's fetches do, up to
        offset ``up_to`` (exclusive; the leader's LEO by default)."""
        log, source = self.log(tp), leader.log(tp)
        end = source.log_end_offset if up_to is None else up_to
        while log.log_end_offset < end:
            # At most a segment per append, as a follower sized by replica.fetch.max.bytes.
            limit = min(1 << 20, log.config.segment_bytes)
            data = source.read(log.log_end_offset, limit, max_offset=end)
            if not data.records:
                raise ValueError(
                    f"{tp}: cannot replicate up to {end}: the leader's batch holding offset "
                    f"{log.log_end_offset} ends past it (batches are copied whole)"
                )
            log.append_as_follower(data.records)

    def truncate(self, tp: TopicPartition, offset: int) -> None:
        self.log(tp).truncate_to(offset)

    def close(self) -> None:
        """Flush and close the logs, then write the three offset checkpoints."""
        recovery_points, log_starts = {}, {}
        for tp, log in self._logs.items():
            log.flush()
            recovery_points[tp] = log.recovery_point
            if log.log_start_offset > 0:
                log_starts[tp] = log.log_start_offset
            log.close()
        self._logs.clear()
        OffsetCheckpointFile(self.path / REPLICATION_OFFSET_CHECKPOINT).write(self.high_watermarks)
        OffsetCheckpointFile(self.path / RECOVERY_POINT_OFFSET_CHECKPOINT).write(recovery_points)
        OffsetCheckpointFile(self.path / LOG_START_OFFSET_CHECKPOINT).write(log_starts)


def _encoded(text: str | bytes | None) -> bytes | None:
    return text.encode() if isinstance(text, str) else text


def history_line(
    op_type: str,
    tp: TopicPartition,
    value: str | None,
    offset: int | None = None,
    *,
    time: float = 1_700_000_000.0,
    process: int = 0,
    key: str | None = None,
    txn: str | None = None,
) -> dict[str, Any]:
    """One history operation (docs/audit.md); a write naming its ``key`` (a compacted
    topic's), a None ``value`` a tombstone; a transactional producer's naming its ``txn``."""
    line: dict[str, Any] = {
        "time": time,
        "process": process,
        "type": op_type,
        "topic": tp.topic,
        "partition": tp.partition,
        "value": value,
        "offset": offset,
    }
    if key is not None:
        line["key"] = key
    if txn is not None:
        line["txn"] = txn
    return line


def txn_step(
    op_type: str,
    f: str,
    txn: str,
    *,
    time: float = 1_700_000_000.0,
    process: int = 0,
    **fields: Any,
) -> dict[str, Any]:
    """One step of a transactional producer (``begin``, ``commit``, ``abort``,
    ``send_offsets``: docs/audit.md, "Transactions")."""
    return {"time": time, "process": process, "type": op_type, "f": f, "txn": txn, **fields}


def group_step(
    op_type: str,
    f: str,
    group: tuple[str, str, int],
    *,
    time: float = 1_700_000_000.0,
    process: int = 0,
    partitions: Iterable[TopicPartition] = (),
    offsets: Iterable[tuple[TopicPartition, int]] = (),
) -> dict[str, Any]:
    """One step of a consumer group member, (group, member, generation): ``assigned``,
    ``revoked`` or ``lost`` its ``partitions``, or ``commit_offsets`` (docs/audit.md,
    "Consumer groups")."""
    line: dict[str, Any] = {"time": time, "process": process, "type": op_type, "f": f}
    line.update(zip(("group", "member", "generation"), group, strict=True))
    if f == "commit_offsets":
        line["offsets"] = [[tp.topic, tp.partition, o] for tp, o in offsets]
    else:
        line["partitions"] = [[tp.topic, tp.partition] for tp in partitions]
    return line


def read_line(
    tp: TopicPartition,
    offset: int,
    value: str,
    *,
    time: float = 1_700_000_000.0,
    process: int = 0,
    session: int = 0,
    isolation: str | None = None,
    group: tuple[str, str, int] | None = None,
) -> dict[str, Any]:
    """One consumer's read of the record at ``offset`` (docs/audit.md); ``isolation``
    ``read_committed`` for a consumer reading only committed transactions; ``group`` the
    (group, member, generation) of a consumer group member's."""
    extra: dict[str, Any] = {} if isolation is None else {"isolation": isolation}
    if group is not None:
        extra.update(zip(("group", "member", "generation"), group, strict=True))
    return {
        "time": time,
        "process": process,
        "type": "read",
        "topic": tp.topic,
        "partition": tp.partition,
        "offset": offset,
        "value": value,
        "session": session,
        **extra,
    }


def write_lines(path: Path, lines: Iterable[dict[str, Any]]) -> Path:
    """Write JSON lines (a history or a timeline); return ``path``."""
    with path.open("w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    return path
