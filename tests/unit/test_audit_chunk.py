"""A partition's records across replicas (chaos.audit.chunk), without Spark: identical batches
are one copy held by every replica, a batch that differs is decoded apart and judged."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chaos.audit.chunk import ChunkResult, ChunkSpec, PartitionFacts, ReplicaChunk, audit_chunk
from chaos.audit.data_dirs import read_data_dirs
from chaos.audit.hashing import hash_bytes
from chaos.audit.history_columns import OK, Lines
from chaos.audit.log_checks import replica_logs, summarize
from chaos.audit.segments import SegmentTask, scan_segment
from chaos.audit.testing import BrokerDataDir
from proto.config.log_config import LogConfig
from proto.records.record_batch import ATTRIBUTES_OFFSET, CRC_OFFSET, compute_crc, scan_batches
from proto.topic_partition import TopicPartition

TP = TopicPartition("t", 0)
RECORDS = 200


def _dirs(tmp_path: Path, segment_bytes: tuple[int, int, int] = (1 << 20,) * 3) -> list[Path]:
    """Brokers 1-3 with t-0: broker 1 led and wrote RECORDS records in batches of 10, the
    others copied them (each broker's segments of ``segment_bytes``)."""
    dirs = {
        b: BrokerDataDir(tmp_path / f"b{b}", b, LogConfig(segment_bytes=size))
        for b, size in zip((1, 2, 3), segment_bytes, strict=True)
    }
    dirs[1].produce(TP, [f"v{i}" for i in range(RECORDS)], epoch=0, per_batch=10)
    for b in (2, 3):
        dirs[b].replicate(TP, dirs[1])
    for d in dirs.values():
        d.high_watermarks[TP] = RECORDS
        d.close()
    return [dirs[b].path for b in (1, 2, 3)]


def _rewrite_value(segment: Path, batch: int, old: bytes, new: bytes) -> None:
    """Change one value in place (same length) and make the CRC hold again: a replica that
    holds another record under the same leader epoch."""
    data = bytearray(segment.read_bytes())
    found = list(scan_batches(bytes(data)))[batch]
    at = data.index(old, found.position)
    data[at : at + len(old)] = new
    end = found.position + found.header.size
    crc = compute_crc(data[found.position + ATTRIBUTES_OFFSET : end])
    data[found.position + CRC_OFFSET : found.position + CRC_OFFSET + 4] = crc.to_bytes(4, "big")
    segment.write_bytes(bytes(data))


def _audit(
    paths: list[Path], lines: Lines | None = None, *, log_start: int | None = None
) -> ChunkResult:
    """Audit the replicas; the partition's log start is the smallest of the replicas' (from
    their segments and ``log-start-offset-checkpoint``, as the audit job takes it) unless
    ``log_start`` says otherwise."""
    replicas = [r for d in read_data_dirs(paths) for r in d.replicas]
    scans = [
        scan_segment(SegmentTask(i, s.base_offset, str(s.path), k == len(r.segments) - 1, s.size))
        for i, r in enumerate(replicas)
        for k, s in enumerate(r.segments)
    ]
    logs = replica_logs(replicas, [0] * len(replicas), scans)
    summaries = [summarize(log) for log in logs]
    if log_start is None:
        log_start = min(s.log_start_offset for s in summaries)
    facts = PartitionFacts(
        0,
        TP.topic,
        TP.partition,
        RECORDS,
        log_start,
        RECORDS,
        tuple(s.broker for s in summaries),
        True,
    )
    low, high = -(2**63), 2**63 - 1
    spec = ChunkSpec(
        facts,
        low,
        high,
        True,
        [
            ReplicaChunk(
                log.broker, [str(s.path) for s in log.files.segments], log.chunk(low, high)
            )
            for log in logs
        ],
    )
    return audit_chunk(spec, lines if lines is not None else Lines.empty())


def _acks(offsets: list[int], values: list[str]) -> Lines:
    n = len(offsets)
    return Lines(
        np.full(n, OK, np.int8),
        np.array(offsets, np.int64),
        hash_bytes([v.encode() for v in values]),
        np.arange(1, n + 1, dtype=np.int64),
        np.zeros(n),
        np.zeros(n, np.int64),
        np.zeros(n, np.int64),
    )


def test_identical_replicas_are_clean_and_every_replica_counts_its_records(tmp_path: Path) -> None:
    result = _audit(_dirs(tmp_path), _acks(list(range(RECORDS)), [f"v{i}" for i in range(RECORDS)]))
    assert result.runs == []
    assert result.records == {1: RECORDS, 2: RECORDS, 3: RECORDS}
    assert result.acked_checked == RECORDS


def test_segments_cut_at_other_places_in_each_replica_compare_equal(tmp_path: Path) -> None:
    paths = _dirs(tmp_path, segment_bytes=(1 << 20, 700, 1500))
    counts = [len(list((p / TP.dir_name).glob("*.log"))) for p in paths]
    assert counts[0] == 1
    assert counts[1] > counts[2] > 1
    result = _audit(paths, _acks(list(range(RECORDS)), [f"v{i}" for i in range(RECORDS)]))
    assert result.runs == []
    assert result.records == {1: RECORDS, 2: RECORDS, 3: RECORDS}


def test_a_replica_holding_another_value_under_the_same_epoch_is_divergent(tmp_path: Path) -> None:
    paths = _dirs(tmp_path)
    _rewrite_value(next((paths[2] / TP.dir_name).glob("*.log")), 3, b"v35", b"X35")
    result = _audit(paths, _acks([35], ["v35"]))
    kinds = sorted((r.kind, r.start, r.end, r.brokers) for r in result.runs)
    # The top version is the greater value hash of the one epoch: one of the two values.
    assert kinds[0] == ("divergence", 35, 35, (1, 2, 3))
    versions = result.runs[[r.kind for r in result.runs].index("divergence")].first["versions"]
    assert [v["broker"] for v in versions] == [1, 2, 3]
    assert len({v["value"]["b64"] for v in versions}) == 2
    assert result.records == {1: RECORDS, 2: RECORDS, 3: RECORDS}


def test_a_duplicated_value_and_a_lost_ack_are_found_within_the_chunk(tmp_path: Path) -> None:
    paths = _dirs(tmp_path)
    for p in paths:  # every replica: offset 50 holds v49's bytes (the CRC made to hold)
        _rewrite_value(next((p / TP.dir_name).glob("*.log")), 5, b"v50", b"v49")
    acks = _acks(list(range(RECORDS)), [f"v{i}" for i in range(RECORDS)])
    result = _audit(paths, acks)
    found = {r.kind: r for r in result.runs}
    assert set(found) == {"duplicate", "lost_ack"}
    assert (found["duplicate"].start, found["duplicate"].first["offsets"]) == (49, [49, 50])
    lost = found["lost_ack"]
    assert (lost.start, lost.key["reason"]) == (50, "replaced")
    assert lost.first["line"] == 51  # the ack of offset 50 is line 51 of these lines


def test_a_value_written_again_by_a_new_producer_session_is_resent_not_duplicate(
    tmp_path: Path,
) -> None:
    """Producer 7 wrote v0..v99 in epoch 0, then, after an epoch bump, wrote v99 again at
    sequence 0 of epoch 1 (what librdkafka does with a message in doubt): the copies at 99
    and 100 are `resent`, with both sessions named. Written by one session, or without a
    producer id, the same copies would be a `duplicate`."""
    dirs = {b: BrokerDataDir(tmp_path / f"b{b}", b, LogConfig()) for b in (1, 2, 3)}
    dirs[1].produce(
        TP, [f"v{i}" for i in range(100)], epoch=0, per_batch=10, producer_id=7, producer_epoch=0
    )
    resent = ["v99", *(f"v{i}" for i in range(100, RECORDS - 1))]
    dirs[1].produce(TP, resent, epoch=0, per_batch=10, producer_id=7, producer_epoch=1)
    for b in (2, 3):
        dirs[b].replicate(TP, dirs[1])
    for d in dirs.values():
        d.high_watermarks[TP] = RECORDS
        d.close()
    offsets = [*range(99), *range(100, RECORDS)]
    values = [*(f"v{i}" for i in range(99)), *resent]
    result = _audit([dirs[b].path for b in (1, 2, 3)], _acks(offsets, values))
    assert [r.kind for r in result.runs] == ["resent"]
    run = result.runs[0]
    assert (run.start, run.first["offsets"]) == (99, [99, 100])
    assert run.first["writers"] == [[7, 0, 99], [7, 1, 0]]


def test_records_deleted_below_the_log_start_offset_are_not_lost(tmp_path: Path) -> None:
    """DeleteRecords moved every replica's log start offset to 45, inside a batch, and
    retention removed the segments wholly below it: the acks below 45 are deleted, not lost,
    as the replicas' ``log-start-offset-checkpoint`` says."""
    dirs = {
        b: BrokerDataDir(tmp_path / f"b{b}", b, LogConfig(segment_bytes=700)) for b in (1, 2, 3)
    }
    dirs[1].produce(TP, [f"v{i}" for i in range(RECORDS)], epoch=0, per_batch=10)
    for b in (2, 3):
        dirs[b].replicate(TP, dirs[1])
    for d in dirs.values():
        log = d.log(TP)
        assert log.maybe_increment_log_start_offset(45)
        assert log.delete_old_segments(RECORDS, now_ms=0) > 0
        assert log.segments[0].base_offset < 45
        d.high_watermarks[TP] = RECORDS
        d.close()
    paths = [dirs[b].path for b in (1, 2, 3)]
    assert "t 0 45" in (paths[0] / "log-start-offset-checkpoint").read_text().splitlines()
    acks = _acks(list(range(RECORDS)), [f"v{i}" for i in range(RECORDS)])
    result = _audit(paths, acks)
    assert result.runs == []
    assert result.acked_checked == RECORDS - 45
    # Without the checkpoint the acks of the deleted segments would count as lost.
    found = {r.kind for r in _audit(paths, acks, log_start=0).runs}
    assert "lost_ack" in found
