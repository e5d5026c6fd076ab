"""The audit of compacted partitions (chaos.audit.compaction), without Spark: replica logs
written with the project's Log and cleaned by its own cleaner (broker.log.log_cleaner), then
damaged on purpose, as a cleaner with a bug would, each fault in a log of its own.

Replicas that a real cleaning left at different stages are clean; what a cleaning must not
do is found replica by replica: a key's latest record removed (compaction_lost_latest), a
record moved to another offset (compaction_moved), a tombstone dropped while the value it
deleted is still visible or before delete.retention.ms (tombstone_dropped_early)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from broker.log.log import Log
from broker.log.log_cleaner import clean_log
from chaos.audit.chunk import ChunkResult, ChunkSpec, PartitionFacts, ReplicaChunk, audit_chunk
from chaos.audit.data_dirs import AuditInputError, read_data_dirs
from chaos.audit.hashing import hash_bytes
from chaos.audit.history_columns import INFO, OK, READ, Lines, parse_range
from chaos.audit.log_checks import replica_logs, summarize
from chaos.audit.model import PartitionSummary
from chaos.audit.runs import Run
from chaos.audit.segments import SegmentTask, scan_segment
from chaos.audit.testing import BrokerDataDir
from chaos.audit.topic_configs import Compaction, read_topic_configs, topic_configs
from chaos.audit.violations import describe
from chaos.history_recorder import HistoryRecorder
from proto.config.log_config import LogConfig
from proto.records.compression import Codec
from proto.records.record_batch import (
    BatchHeader,
    Record,
    decode_batch,
    offsets_placeholder,
    retained_batch,
    scan_batches,
)
from proto.topic_partition import TopicPartition

TP = TopicPartition("table", 0)
WHOLE = (-(2**63), 2**63 - 1)
RECORDS = 120
KEYS = 7
DAY_MS = 86_400_000
COMPACT = LogConfig(segment_bytes=600, cleanup_policy=("compact",))
T0_MS = 1_700_000_000_000
"""The records' timestamps start here (chaos.audit.testing)."""

Row = tuple[int, str, str | None]
"""(offset, key, value) of a record written; a None value is a tombstone."""


def _rows(count: int = RECORDS, start: int = 0) -> list[Row]:
    """Keys k0..k6 written over and over; every 11th record a tombstone."""
    return [
        (i, f"k{i % KEYS}", None if i % 11 == 5 else f"v{i}") for i in range(start, start + count)
    ]


def _produce(d: BrokerDataDir, rows: Sequence[Row], epoch: int = 0) -> None:
    d.produce(
        TP,
        [v for _, _, v in rows],
        epoch=epoch,
        per_batch=3,
        keys=[k for _, k, _ in rows],
        producer_id=5,
        first_sequence=rows[0][0],
        compression=[Codec.NONE, Codec.LZ4, Codec.ZSTD],
    )


def _dirs(root: Path, config: LogConfig = COMPACT) -> list[BrokerDataDir]:
    return [BrokerDataDir(root / f"b{b}", b, config) for b in (1, 2, 3)]


def _clean(log: Log, limit: int | None = None, first_dirty: int = 0) -> None:
    """One real cleaning of ``log`` below ``limit`` (its log end by default)."""
    result = clean_log(
        log,
        first_dirty=first_dirty,
        limit_offset=log.log_end_offset if limit is None else limit,
        now_ms=0,
        capacity=10_000,
    )
    assert result is not None
    assert result.groups_swapped > 0


def _replicated(root: Path, rows: Sequence[Row] | None = None) -> list[BrokerDataDir]:
    """Broker 1 led the partition (``rows``), brokers 2 and 3 copied it; every high
    watermark at the log end."""
    rows = _rows() if rows is None else rows
    dirs = _dirs(root)
    b1, b2, b3 = dirs
    _produce(b1, rows)
    b2.replicate(TP, b1)
    b3.replicate(TP, b1)
    for d in dirs:
        d.high_watermarks[TP] = len(rows)
    return dirs


def _close(dirs: Sequence[BrokerDataDir]) -> list[Path]:
    for d in dirs:
        d.close()
    return [d.path for d in dirs]


def _stored(d: BrokerDataDir) -> list[tuple[BatchHeader, list[Record], bytes]]:
    """The replica's batches, decoded and as stored, in offset order."""
    found = []
    for segment in d.log(TP).segments:
        data = segment.read_all()
        for scanned in scan_batches(data):
            decoded = decode_batch(data, scanned.position)
            raw = data[scanned.position : scanned.position + decoded.header.size]
            found.append((decoded.header, list(decoded.records), bytes(raw)))
    return found


def _batches(d: BrokerDataDir) -> list[tuple[BatchHeader, list[Record]]]:
    return [(h, records) for h, records, _ in _stored(d)]


def _held(d: BrokerDataDir) -> list[Row]:
    """(offset, key, value) of every record the replica holds."""
    return [
        (r.offset, (r.key or b"").decode(), None if r.value is None else r.value.decode())
        for _, records in _batches(d)
        for r in records
    ]


def _refollow(
    d: BrokerDataDir,
    change: Callable[[BatchHeader, list[Record]], list[Record] | None],
) -> None:
    """Rewrite the replica's log as a cleaner with a bug would: each batch's records are
    ``change``'s (None: the batch as it is; none left: a placeholder), offsets and batch
    spans kept, appended again as a follower appends."""
    out = []
    for header, records, raw in _stored(d):
        kept = change(header, records)
        if kept is None:
            out.append(raw)
        elif kept:
            out.append(retained_batch(header, kept))
        else:
            out.append(
                offsets_placeholder(
                    header.base_offset,
                    header.last_offset,
                    header.partition_leader_epoch,
                    header.max_timestamp,
                )
            )
    log = d.log(TP)
    log.truncate_to(0)
    for batch in out:
        log.append_as_follower(batch)


def _without(*offsets: int) -> Callable[[BatchHeader, list[Record]], list[Record] | None]:
    def change(header: BatchHeader, records: list[Record]) -> list[Record] | None:
        if not any(r.offset in offsets for r in records):
            return None
        return [r for r in records if r.offset not in offsets]

    return change


def _lines(rows: Sequence[Row], reads: Sequence[tuple[int, str | None, int]] = ()) -> Lines:
    """``ok`` lines of ``rows`` (naming their keys), then reads (offset, value, session) of
    one consumer."""
    n = len(rows) + len(reads)
    return Lines(
        np.array([OK] * len(rows) + [READ] * len(reads), np.int8),
        np.array([o for o, _, _ in rows] + [o for o, _, _ in reads], np.int64),
        hash_bytes(
            [None if v is None else v.encode() for _, _, v in rows]
            + [None if v is None else v.encode() for _, v, _ in reads]
        ),
        np.arange(1, n + 1, dtype=np.int64),
        np.arange(n, dtype=np.float64) + 1_700_000_000,
        np.array([0] * len(rows) + [7] * len(reads), np.int64),
        np.array([0] * len(rows) + [s for _, _, s in reads], np.int64),
        hash_bytes([k.encode() for _, k, _ in rows] + [None] * len(reads)),
    )


DAY = Compaction(DAY_MS)
"""The topic's setting the audit is told: tombstones stay a day."""


def _audit(paths: Sequence[Path], lines: Lines, compaction: Compaction | None = DAY) -> ChunkResult:
    """The chunk audit of the whole partition, its facts as the audit job derives them."""
    replicas = [r for d in read_data_dirs(list(paths)) for r in d.replicas]
    scans = [
        scan_segment(SegmentTask(i, s.base_offset, str(s.path), k == len(r.segments) - 1, s.size))
        for i, r in enumerate(replicas)
        for k, s in enumerate(r.segments)
    ]
    logs = replica_logs(replicas, [0] * len(replicas), scans)
    summaries = [summarize(log) for log in logs]
    max_leo = max(s.log_end_offset for s in summaries)
    facts = PartitionFacts(
        0,
        TP.topic,
        TP.partition,
        min(max(s.high_watermark or 0 for s in summaries), max_leo),
        min(s.log_start_offset for s in summaries),
        max_leo,
        tuple(s.broker for s in summaries),
        True,
    )
    spec = ChunkSpec(
        facts,
        *WHOLE,
        True,
        [
            ReplicaChunk(
                log.broker,
                [str(s.path) for s in log.files.segments],
                log.chunk(*WHOLE),
                max(s.modified_ms for s in log.files.segments),
            )
            for log in logs
        ],
        compaction=compaction,
    )
    return audit_chunk(spec, lines)


def _found(result: ChunkResult) -> list[tuple[str, tuple[int, ...], int, int]]:
    return sorted((r.kind, r.brokers, r.start, r.end) for r in result.runs)


def _only(result: ChunkResult, kind: str) -> Run:
    runs = [r for r in result.runs if r.kind == kind]
    assert len(runs) == 1, [(r.kind, r.start, r.first) for r in result.runs]
    return runs[0]


def _latest(rows: Sequence[Row], key: str) -> Row:
    return [r for r in rows if r[1] == key][-1]


def _sentence(run: Run) -> str:
    return describe(run.finding(), PartitionSummary(TP.topic, 0, [], 0, 0)).detail


# -- replicas a real cleaning left at different stages --------------------------------------


def test_replicas_cleaned_on_their_own_schedules_are_clean(tmp_path: Path) -> None:
    """Broker 2 cleaned everything below its log end, broker 3 only the first half, broker
    1 nothing: they hold different records at the same offsets, and none is at fault."""
    rows = _rows()
    _, b2, b3 = dirs = _replicated(tmp_path)
    _clean(b2.log(TP))
    _clean(b3.log(TP), limit=RECORDS // 2)
    kept = {(h.base_offset, h.record_count, h.last_offset_delta) for h, _ in _batches(b2)}
    assert any(count == 0 for _, count, _ in kept)  # placeholders and emptied batches
    assert any(0 < count < delta + 1 for _, count, delta in kept)  # batches cleaned in part
    paths = _close(dirs)
    result = _audit(paths, _lines(rows))
    assert result.runs == []
    assert result.records[2] < result.records[3] < result.records[1] == RECORDS


def test_every_replica_cleaned_is_clean_only_as_a_compacted_topic(tmp_path: Path) -> None:
    """Records no replica holds any more were superseded: on a compacted topic no fault,
    while a topic the audit takes for a plain one has lost them."""
    rows = _rows()
    dirs = _replicated(tmp_path)
    for d in dirs:
        _clean(d.log(TP))
    paths = _close(dirs)
    assert _audit(paths, _lines(rows)).runs == []
    plain = _audit(paths, _lines(rows), compaction=None)
    assert {r.kind for r in plain.runs} == {"lost_ack"}
    assert all(r.key["reason"] == "missing" for r in plain.runs)


def test_reads_of_records_cleaned_since_and_polls_over_cleaned_offsets_are_consistent(
    tmp_path: Path,
) -> None:
    """A consumer read every record before the cleanings (session 0), and again what
    brokers 2 and 3 kept after theirs (session 1): neither read is wrong, and the second
    skipped only records a replica lacks (it may have read from that replica). A skip over
    a record every replica holds is still a poll_skip."""
    rows = _rows()
    _, b2, b3 = dirs = _replicated(tmp_path)
    for d in (b2, b3):
        _clean(d.log(TP))
    kept = sorted(o for o, _, _ in _held(b2))
    assert len(kept) < RECORDS // 4
    value = {o: v for o, _, v in rows}
    before = [(o, value[o], 0) for o, _, _ in rows]
    after = [(o, value[o], 1) for o in kept]
    paths = _close(dirs)
    assert _audit(paths, _lines(rows, [*before, *after])).runs == []
    skipping = [(o, value[o], 2) for o in kept if o != kept[-2]]
    run = _only(_audit(paths, _lines(rows, skipping)), "poll_skip")
    assert (run.start, run.end, run.n) == (kept[-2], kept[-2], 1)


def test_a_read_of_a_cleaned_offset_acknowledged_with_another_value_is_inconsistent(
    tmp_path: Path,
) -> None:
    rows = _rows()
    dirs = _replicated(tmp_path)
    for d in dirs:
        _clean(d.log(TP))
    paths = _close(dirs)
    gone = rows[0]  # superseded and cleaned away on every replica
    run = _only(_audit(paths, _lines(rows, [(gone[0], "not-written", 0)])), "inconsistent_read")
    assert run.key["reason"] == "cleaned"
    assert "cleaned away" in _sentence(run)


SHORT = LogConfig(segment_bytes=600, cleanup_policy=("compact",), delete_retention_ms=1000)
"""A topic whose tombstones may go one second after their segment was last written."""
FIRST = _rows(66)
"""k4's latest record is the tombstone at offset 60; every other tombstone is superseded."""
LATER = [(o, "k9", f"w{o}") for o in range(66, 96)]
MORE = [(o, "k8", f"x{o}") for o in range(96, 126)]


def _expire_tombstones(root: Path, cleaned: Sequence[int]) -> list[BrokerDataDir]:
    """FIRST, LATER and MORE written by broker 1 and copied by 2 and 3; the brokers of
    ``cleaned`` clean twice with delete.retention.ms 1 s, as a broker's cleaner would over
    time: the first cleaning (of FIRST and LATER) keeps every tombstone, the second (of MORE)
    finds the segments of the tombstones left (k4's) older than the newest clean one by more
    than a second, and drops them."""
    dirs = [BrokerDataDir(root / f"b{b}", b, SHORT if b in cleaned else COMPACT) for b in (1, 2, 3)]
    b1 = dirs[0]
    _produce(b1, [*FIRST, *LATER])
    for d in dirs[1:]:
        d.replicate(TP, b1)
    ends = {}
    for d in dirs:
        d.high_watermarks[TP] = MORE[-1][0] + 1
        if d.broker_id not in cleaned:
            continue
        log = d.log(TP)
        _clean(log)
        ends[d.broker_id] = end = log.segments[-1].base_offset
        for segment in log.segments[:-1]:
            tombstones = any(
                r[2] is None for r in _rows(66) if segment.base_offset <= r[0] < segment.next_offset
            )
            stamp = 100 if tombstones else 200
            os.utime(segment.log_path, (stamp, stamp))
        assert end > FIRST[-1][0]
    _produce(b1, MORE)
    for d in dirs[1:]:
        d.replicate(TP, b1)
    for d in dirs:
        if d.broker_id in cleaned:
            _clean(d.log(TP), first_dirty=ends[d.broker_id])
            assert not any(v is None for _, _, v in _held(d))
            assert not any(k == "k4" for _, k, _ in _held(d))
    return dirs


def test_tombstones_that_expired_everywhere_took_their_keys_older_records_with_them(
    tmp_path: Path,
) -> None:
    """With the history of every write, a key whose tombstone expired on every replica, and
    took the key's older records with it, is no fault."""
    paths = _close(_expire_tombstones(tmp_path, cleaned=(1, 2, 3)))
    assert _audit(paths, _lines([*FIRST, *LATER, *MORE]), Compaction(1000)).runs == []


def test_an_unacknowledged_tombstone_may_have_expired_with_its_keys_records(
    tmp_path: Path,
) -> None:
    """k4's last write, a tombstone, timed out (an info line): it was written, then expired
    on every replica with k4's older records. The audit cannot know its offset, so k4's
    acknowledged records gone are given the benefit of the doubt; without the info line,
    the latest of them is lost on every replica."""
    paths = _close(_expire_tombstones(tmp_path, cleaned=(1, 2, 3)))
    tombstone = _latest(FIRST, "k4")
    assert tombstone[2] is None
    acked = [r for r in [*FIRST, *LATER, *MORE] if r != tombstone]
    lines = _lines(acked)
    lost = [r for r in _audit(paths, lines, Compaction(1000)).runs]
    older = _latest([r for r in FIRST if r != tombstone], "k4")
    assert {(r.kind, r.brokers, r.start) for r in lost} == {
        ("compaction_lost_latest", (b,), older[0]) for b in (1, 2, 3)
    }
    info = Lines(
        np.array([INFO], np.int8),
        np.array([-1], np.int64),
        hash_bytes([None]),
        np.array([len(acked) + 1], np.int64),
        np.array([1_700_000_100.0]),
        np.zeros(1, np.int64),
        np.zeros(1, np.int64),
        hash_bytes([b"k4"]),
    )
    assert _audit(paths, Lines.concat([lines, info]), Compaction(1000)).runs == []


# -- faults planted in one replica ----------------------------------------------------------


def test_a_cleaning_that_removed_a_keys_latest_record_lost_it(tmp_path: Path) -> None:
    rows = _rows()
    dirs = _replicated(tmp_path)
    for d in dirs:
        _clean(d.log(TP))
    latest = _latest(rows, "k6")
    assert latest[2] is not None
    b2 = dirs[1]
    _refollow(b2, _without(latest[0]))
    older = max(o for o, k, _ in _held(b2) if k == "k6")  # in the segment no cleaning reads
    paths = _close(dirs)
    result = _audit(paths, _lines(rows))
    run = _only(result, "compaction_lost_latest")
    assert (run.brokers, run.start, run.end) == ((2,), latest[0], latest[0])
    assert run.first["acked"] is True
    assert run.first["held"] == older
    assert {r.kind for r in result.runs} == {"compaction_lost_latest"}
    sentence = _sentence(run)
    assert f"lacks the record at offset {latest[0]}, key 'k6' = '{latest[2]}'" in sentence
    assert f"Its latest record there is the older one at offset {older}" in sentence


def test_a_key_whose_records_are_all_gone_names_the_latest_and_counts_the_older(
    tmp_path: Path,
) -> None:
    """Broker 3 was never cleaned and lost every record of k4 all the same: one finding, at
    k4's latest record, counting the older ones since k4's tombstone (those before it may
    have gone with the tombstone, had it expired; it could not have, but the audit cannot
    tell with tombstones written long before the replica's newest segment)."""
    rows = _rows()
    b3 = (dirs := _replicated(tmp_path))[2]
    k4 = [o for o, k, _ in rows if k == "k4"]
    tombstone = max(o for o, k, v in rows if k == "k4" and v is None)
    _refollow(b3, _without(*k4))
    paths = _close(dirs)
    run = _only(_audit(paths, _lines(rows)), "compaction_lost_latest")
    since = [o for o in k4 if o > tombstone]
    assert (run.brokers, run.start, run.first["older"]) == ((3,), k4[-1], len(since) - 1)
    assert "older records of the key gone too" in _sentence(run)


def test_without_a_history_a_record_other_replicas_keep_as_its_keys_latest_is_lost(
    tmp_path: Path,
) -> None:
    rows = _rows()
    b2 = (dirs := _replicated(tmp_path))[1]
    _clean(b2.log(TP))
    latest = _latest(rows, "k6")
    _refollow(b2, _without(latest[0]))
    paths = _close(dirs)
    run = _only(_audit(paths, Lines.empty()), "compaction_lost_latest")
    assert (run.brokers, run.start) == ((2,), latest[0])
    assert run.first["acked"] is False
    assert "held there by another replica" in _sentence(run)


def test_a_record_at_another_offset_than_acknowledged_was_moved(tmp_path: Path) -> None:
    """A cleaned batch written with its records renumbered 0, 1, 2, ...: what it kept is
    held at the wrong offsets."""
    rows = _rows()
    b2 = (dirs := _replicated(tmp_path))[1]
    _clean(b2.log(TP))
    # A batch broker 2's cleaning left with one record, not at its first offset.
    header, records = next(
        (h, rs) for h, rs in _batches(b2) if len(rs) == 1 and rs[0].offset > h.base_offset
    )
    victim = records[0]

    def renumbered(h: BatchHeader, rs: list[Record]) -> list[Record] | None:
        if h.base_offset != header.base_offset:
            return None
        return [victim._replace(offset=h.base_offset)]

    _refollow(b2, renumbered)
    paths = _close(dirs)
    result = _audit(paths, _lines(rows))
    run = _only(result, "compaction_moved")
    assert (run.brokers, run.start) == ((2,), victim.offset)
    assert run.first["moved_to"] == header.base_offset
    assert "is at offset" in _sentence(run)
    # What now sits at the batch's first offset on broker 2 is another record than the one
    # acknowledged there (superseded and cleaned away on broker 2, still on brokers 1 and 3).
    divergence = _only(result, "divergence")
    assert divergence.start == header.base_offset
    # and the value is at two offsets of the log's versions (the top one at the first
    # offset may be broker 2's): lost_ack and duplicate, the way any topic's audit sees it.
    assert {r.kind for r in result.runs} <= {
        "compaction_moved",
        "divergence",
        "lost_ack",
        "duplicate",
    }


def test_a_tombstone_dropped_while_the_value_it_deleted_is_visible(tmp_path: Path) -> None:
    """k5's value at 4, then its tombstone at 5, nothing of k5 after: broker 2 dropped the
    tombstone and kept the value."""
    rows: list[Row] = [(i, f"k{i % 4}", f"v{i}") for i in range(4)]
    rows += [(4, "k5", "v4"), (5, "k5", None)]
    rows += [(i, f"k{i % 4}", f"v{i}") for i in range(6, 36)]
    b2 = (dirs := _replicated(tmp_path, rows))[1]
    _refollow(b2, _without(5))
    paths = _close(dirs)
    run = _only(_audit(paths, _lines(rows)), "tombstone_dropped_early")
    assert (run.brokers, run.start, run.key) == ((2,), 5, {"reason": "stale"})
    assert run.first["visible"] == 4
    assert "the deleted value is visible again" in _sentence(run)


def test_a_tombstone_dropped_before_delete_retention_ms_passed(tmp_path: Path) -> None:
    """Broker 2's cleaner ran with delete.retention.ms 1 s on a topic whose setting (what
    the run recorded) is a day: it dropped k4's tombstone, which brokers 1 and 3 still hold,
    although its replica's newest segment was written 10 s after the tombstone."""
    paths = _close(_expire_tombstones(tmp_path, cleaned=(2,)))
    ten_s_later = (T0_MS + 10_000) / 1000
    for segment in (paths[1] / TP.dir_name).glob("*.log"):
        os.utime(segment, (ten_s_later, ten_s_later))
    history = _lines([*FIRST, *LATER, *MORE])
    run = _only(_audit(paths, history), "tombstone_dropped_early")
    tombstone = _latest(FIRST, "k4")
    assert (run.brokers, run.start, run.key) == ((2,), tombstone[0], {"reason": "retention"})
    assert run.first["timestamp"] == T0_MS + tombstone[0]
    assert {r.kind for r in _audit(paths, history).runs} == {"tombstone_dropped_early"}
    assert "before delete.retention.ms (86400000 ms) could have passed" in _sentence(run)
    assert _audit(paths, history, Compaction(1000)).runs == []  # the topic's own setting
    assert _audit(paths, history, Compaction(None)).runs == []  # its age not known


def test_another_record_at_an_acknowledged_offset_is_lost_ack_and_divergence(
    tmp_path: Path,
) -> None:
    """Compaction changes which records a replica holds, never what a record holds: a value
    or a key that is not the acknowledged one is found as on any topic."""
    rows = _rows()
    b2 = (dirs := _replicated(tmp_path))[1]
    latest = _latest(rows, "k2")
    rekeyed = _latest(rows, "k1")

    def changed(h: BatchHeader, rs: list[Record]) -> list[Record] | None:
        if not any(r.offset in (latest[0], rekeyed[0]) for r in rs):
            return None
        return [
            r._replace(value=b"forged")
            if r.offset == latest[0]
            else r._replace(key=b"k0")
            if r.offset == rekeyed[0]
            else r
            for r in rs
        ]

    _refollow(b2, changed)
    paths = _close(dirs)
    result = _audit(paths, _lines(rows))
    divergent = {
        o for r in result.runs if r.kind == "divergence" for o in range(r.start, r.end + 1)
    }
    assert divergent == {latest[0], rekeyed[0]}
    # One version at each offset is taken for the log's (the same way on every run): a
    # lost_ack where that is broker 2's; nothing else.
    assert all(r.kind == "divergence" or r.key.get("reason") == "replaced" for r in result.runs)
    assert {o for r in result.runs for o in range(r.start, r.end + 1)} == divergent


def test_a_record_whose_key_is_not_the_acknowledged_one_is_lost_ack(tmp_path: Path) -> None:
    rows = _rows()
    dirs = _replicated(tmp_path)
    paths = _close(dirs)
    latest = _latest(rows, "k1")
    misnamed = [(o, "k0" if o == latest[0] else k, v) for o, k, v in rows]
    run = _only(_audit(paths, _lines(misnamed)), "lost_ack")
    assert (run.start, run.key["reason"]) == (latest[0], "replaced")


# -- the inputs: topic configs and keyed histories -----------------------------------------


def test_topic_configs_say_which_topics_are_compacted(tmp_path: Path) -> None:
    data = {
        "version": 1,
        "topics": {
            "a": {"cleanup.policy": "compact", "delete.retention.ms": "5000"},
            "b": {"cleanup.policy": "compact,delete"},
            "c": {"cleanup.policy": "delete"},
            "d": {},
        },
    }
    assert topic_configs(data) == {"a": Compaction(5000), "b": Compaction(None)}
    path = tmp_path / "topics.json"
    path.write_text(json.dumps(data))
    assert read_topic_configs(path) == {"a": Compaction(5000), "b": Compaction(None)}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{", "are not JSON"),
        ('{"topics": {}}', '"version": 1'),
        ('{"version": 1, "topics": []}', '"topics" must be an object'),
        ('{"version": 1, "topics": {"a": {"cleanup.policy": "squash"}}}', "topic 'a'"),
        (
            '{"version": 1, "topics": {"a": {"cleanup.policy": "compact", '
            '"delete.retention.ms": "soon"}}}',
            "delete.retention.ms must be a number",
        ),
    ],
)
def test_topic_configs_that_are_not_are_bad_input(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "topics.json"
    path.write_text(text)
    with pytest.raises(AuditInputError, match=reason):
        read_topic_configs(path)
    with pytest.raises(AuditInputError, match="cannot read"):
        read_topic_configs(tmp_path / "missing.json")


def test_keyed_writes_take_the_template_path_and_tombstones_the_slow_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "3.jsonl"
    with HistoryRecorder(path, 3) as recorder:
        for i in range(40):
            value = None if i % 10 == 9 else f"p3-{i}"
            recorder.ok("t", 0, value, i, key=f"k{i % 4}")
        recorder.info("t", 0, None, key="k1")
        recorder.read("t", 0, 9, None)
    parsed = parse_range(path.read_bytes())
    assert parsed.error is None
    assert parsed.templated == 36  # the 36 writes of a value; tombstones and the read: slow
    lines = parsed.lines
    keys = [f"k{i % 4}".encode() for i in range(40)] + [b"k1", None]
    assert lines.key is not None
    assert lines.key.tolist() == hash_bytes(keys).tolist()
    values = [None if i % 10 == 9 else f"p3-{i}".encode() for i in range(40)] + [None, None]
    assert lines.value.tolist() == hash_bytes(values).tolist()
    plain = tmp_path / "4.jsonl"
    with HistoryRecorder(plain, 4) as recorder:
        recorder.ok("t", 0, "v", 0)
    assert parse_range(plain.read_bytes()).lines.key is None  # no column where none is named
