"""The audit of replicas whose batches are stored compressed (chaos.audit.copies reads them
inflated), without Spark: every check finds in compressed batches what it finds in the same
records uncompressed, byte identity is still judged on the stored bytes, and a compressed
batch that does not inflate is a ``crc`` finding, not a crash."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from chaos.audit.chunk import ChunkResult, ChunkSpec, PartitionFacts, ReplicaChunk, audit_chunk
from chaos.audit.copies import read_copies
from chaos.audit.data_dirs import read_data_dirs
from chaos.audit.hashing import hash_bytes
from chaos.audit.history_columns import OK, READ, Lines
from chaos.audit.log_checks import ReplicaLog, log_items, replica_logs, summarize
from chaos.audit.model import ReplicaSummary
from chaos.audit.record_columns import decode_columns
from chaos.audit.runs import Run
from chaos.audit.segments import SegmentTask, scan_segment
from chaos.audit.testing import BrokerDataDir
from proto.config.log_config import LogConfig
from proto.records.compression import Codec, CompressedRecordsError
from proto.records.record_batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    CRC_OFFSET,
    RECORDS_OFFSET,
    CorruptRecordError,
    Record,
    check_batch,
    compute_crc,
    decode_batch,
    encode_batch,
    inflated,
    parse_header,
    scan_batches,
    stamp_batch,
)
from proto.topic_partition import TopicPartition
from tests.poison_batches import POISONS, Poison, raw_batch

TP = TopicPartition("t", 0)
RECORDS = 200
PER_BATCH = 10
WHOLE = (-(2**63), 2**63 - 1)
CODECS = [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
LAYOUTS: dict[str, list[int]] = {
    **{codec.name.lower(): [codec] for codec in CODECS},
    "mixed": [Codec.GZIP, Codec.NONE, Codec.SNAPPY, Codec.LZ4, Codec.NONE, Codec.ZSTD],
}
"""The codecs of a log's batches in turn; ``mixed``: compressed and uncompressed batches."""


@dataclass
class Audited:
    """What the audit makes of the replicas: the chunk's findings and counts, the findings of
    the batch headers, and the replicas' summaries."""

    result: ChunkResult
    log_runs: list[Run]
    summaries: list[ReplicaSummary]


def _logs(paths: Sequence[Path]) -> list[ReplicaLog]:
    replicas = [r for d in read_data_dirs(list(paths)) for r in d.replicas]
    scans = [
        scan_segment(SegmentTask(i, s.base_offset, str(s.path), k == len(r.segments) - 1, s.size))
        for i, r in enumerate(replicas)
        for k, s in enumerate(r.segments)
    ]
    return replica_logs(replicas, [0] * len(replicas), scans)


def _audit(
    paths: Sequence[Path], lines: Lines | None = None, ranges: Sequence[tuple[int, int]] = ()
) -> list[Audited]:
    """The audit of t-0 over the ``ranges`` of offsets (the whole partition by default), its
    facts derived from the replicas as the audit job derives them."""
    logs = _logs(paths)
    summaries = [summarize(log) for log in logs]
    log_runs = [run for log, s in zip(logs, summaries, strict=True) for run in log_items(log, s)]
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
    found = []
    for low, high in ranges or [WHOLE]:
        spec = ChunkSpec(
            facts,
            low,
            high,
            not ranges,
            [
                ReplicaChunk(
                    log.broker, [str(s.path) for s in log.files.segments], log.chunk(low, high)
                )
                for log in logs
            ],
        )
        result = audit_chunk(spec, lines if lines is not None else Lines.empty())
        found.append(Audited(result, log_runs, summaries))
    return found


def _whole(paths: Sequence[Path], lines: Lines | None = None) -> Audited:
    (audited,) = _audit(paths, lines)
    return audited


def _lines(acks: Sequence[tuple[int, str]], reads: Sequence[tuple[int, str]] = ()) -> Lines:
    """``ok`` lines, then one consumer's reads (one session), in that order."""
    n = len(acks) + len(reads)
    return Lines(
        np.array([OK] * len(acks) + [READ] * len(reads), np.int8),
        np.array([o for o, _ in [*acks, *reads]], np.int64),
        hash_bytes([v.encode() for _, v in [*acks, *reads]]),
        np.arange(1, n + 1, dtype=np.int64),
        np.arange(n, dtype=np.float64),
        np.array([0] * len(acks) + [7] * len(reads), np.int64),
        np.zeros(n, np.int64),
    )


def _values(count: int, prefix: str = "v", start: int = 0) -> list[str]:
    return [f"{prefix}{i}" for i in range(start, start + count)]


def _dirs(root: Path, segment_bytes: Sequence[int] = (1 << 20, 700, 1500)) -> list[BrokerDataDir]:
    return [
        BrokerDataDir(root / f"b{b}", b, LogConfig(segment_bytes=size))
        for b, size in zip((1, 2, 3), segment_bytes, strict=True)
    ]


def _close(dirs: Sequence[BrokerDataDir]) -> list[Path]:
    for d in dirs:
        d.close()
    return [d.path for d in dirs]


def _stored(d: BrokerDataDir, offset: int) -> bytes:
    """The batch holding ``offset`` as ``d`` stores it."""
    data = bytes(d.log(TP).read(offset, 1).records)
    return data[: parse_header(data).size]


def _garbled(batch: bytes) -> bytes:
    """``batch`` with its compressed records zeroed and its CRC made to hold again: what no
    codec inflates."""
    data = bytearray(batch)
    data[RECORDS_OFFSET:] = bytes(len(data) - RECORDS_OFFSET)
    data[CRC_OFFSET : CRC_OFFSET + 4] = compute_crc(data[ATTRIBUTES_OFFSET:]).to_bytes(4, "big")
    return bytes(data)


def _kinds(result: ChunkResult) -> set[str]:
    return {r.kind for r in result.runs}


def _crc_runs(audited: Audited) -> list[Run]:
    return [r for r in audited.result.runs if r.kind == "crc"]


def _same_audit(compressed: Audited, plain: Audited) -> None:
    """Both audits find the same, record for record; only the summaries' count of compressed
    batches tells them apart."""
    assert compressed.result == plain.result
    assert compressed.log_runs == plain.log_runs
    assert [dataclasses.replace(s, compressed_batches=0) for s in compressed.summaries] == [
        dataclasses.replace(s, compressed_batches=0) for s in plain.summaries
    ]


def _faults(root: Path, codecs: Sequence[int]) -> list[Path]:
    """A partition with most faults the chunk judges, its batches in ``codecs`` (in turn):
    broker 1 led epoch 0 (an idempotent producer's 200 records, batch 50-59 stored again at
    200-209); broker 2 copied all of it; broker 3 copied up to 120, then led epoch 1 and wrote
    30 records of its own (divergence, phantoms and lost acks at 120-149), and its
    checkpointed high watermark is past its log end."""
    b1, b2, b3 = dirs = _dirs(root)
    b1.produce(
        TP, _values(RECORDS), epoch=0, per_batch=PER_BATCH, producer_id=11, compression=codecs
    )
    assert b1.append_again(TP, 50, epoch=0) == RECORDS
    b2.replicate(TP, b1)
    b3.replicate(TP, b1, up_to=120)
    b3.become_leader(TP, 1)
    b3.produce(TP, _values(30, "w"), epoch=1, per_batch=PER_BATCH, compression=codecs[::-1])
    b1.high_watermarks[TP] = b2.high_watermarks[TP] = RECORDS + PER_BATCH
    b3.high_watermarks[TP] = 155
    return _close(dirs)


def _history() -> Lines:
    acks = [(i, f"v{i}") for i in range(RECORDS)]
    acks += [(5, "v-lost"), (300, "v-beyond")]
    reads = [(10, "v10"), (11, "v11"), (130, "v130"), (131, "v131"), (129, "w9")]
    return _lines(acks, reads)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_check_finds_in_compressed_batches_what_it_finds_uncompressed(
    tmp_path: Path, layout: str
) -> None:
    plain = _whole(_faults(tmp_path / "plain", [Codec.NONE]), _history())
    assert _kinds(plain.result) == {
        "lost_ack",
        "divergence",
        "duplicate",
        "phantom",
        "inconsistent_read",
        "nonmonotonic_poll",
        "poll_skip",
    }
    assert plain.result.records == {1: 210, 2: 210, 3: 150}
    assert [r.kind for r in plain.log_runs] == ["hw_above_leo"]
    compressed = _whole(_faults(tmp_path / "compressed", LAYOUTS[layout]), _history())
    _same_audit(compressed, plain)
    batches = [s.batches for s in compressed.summaries]
    stored = [s.compressed_batches for s in compressed.summaries]
    if layout == "mixed":
        assert all(0 < n < total for n, total in zip(stored, batches, strict=True))
    else:
        assert stored == batches


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_healthy_compressed_partition_is_one_copy_inflated_once(
    tmp_path: Path, layout: str
) -> None:
    """Every replica holds the leader's bytes (segments cut at other places in each): one copy,
    held by all three, whose records are those decode_batch finds in the stored batches."""
    b1, b2, b3 = dirs = _dirs(tmp_path)
    records = [
        Record(None if i % 3 else b"k%d" % i, None if i % 7 == 0 else b"value %d" % i, 1000 + i)
        for i in range(RECORDS)
    ]
    codecs = LAYOUTS[layout]
    for n, at in enumerate(range(0, RECORDS, PER_BATCH)):
        batch = encode_batch(records[at : at + PER_BATCH], compression=codecs[n % len(codecs)])
        b1.log(TP).append_as_leader(batch, 0)
    for d in (b2, b3):
        d.replicate(TP, b1)
        d.high_watermarks[TP] = RECORDS
    b1.high_watermarks[TP] = RECORDS
    stored = [decode_batch(_stored(b1, at)) for at in range(0, RECORDS, PER_BATCH)]
    paths = _close(dirs)
    logs = _logs(paths)
    assert [len(log.files.segments) > 1 for log in logs] == [False, True, True]
    copies = read_copies(
        [[str(s.path) for s in log.files.segments] for log in logs],
        [log.chunk(*WHOLE) for log in logs],
        WHOLE[0],
    )
    (copy,) = copies
    assert copy.holders == [0b111] * len(stored)
    assert [h.compression for _, h in copy.batches] == [0] * len(stored)
    assert copy.codecs == [d.header.compression for d in stored]
    cols = decode_columns(copy.data, copy.batches)
    assert not cols.errors
    data = bytes(copy.data)

    def span(start: int, length: int) -> bytes | None:
        return None if start < 0 else data[start : start + length]

    assert [
        (
            int(cols.offset[i]),
            span(int(cols.key_start[i]), int(cols.key_length[i])),
            span(int(cols.value_start[i]), int(cols.value_length[i])),
            int(cols.timestamp[i]),
        )
        for i in range(len(cols))
    ] == [(r.offset, r.key, r.value, r.timestamp) for d in stored for r in d.records]
    audited = _whole(paths, _lines([(i, f"value {i}") for i in range(RECORDS) if i % 7]))
    # The null values no line wrote are the only findings.
    found = [(r.kind, r.start, r.end) for r in audited.result.runs]
    assert found == [("phantom", i, i) for i in range(0, RECORDS, 7)]
    assert audited.result.records == {1: RECORDS, 2: RECORDS, 3: RECORDS}


def _diverged(root: Path, codecs: Sequence[int]) -> list[Path]:
    """Broker 2 copied the leader's batches but 30-39, which it wrote itself under the same
    epoch, with X35 where the leader has v35; broker 3 copied everything."""
    b1, b2, b3 = dirs = _dirs(root)
    b1.produce(TP, _values(RECORDS), epoch=0, per_batch=PER_BATCH, compression=codecs)
    b2.replicate(TP, b1, up_to=30)
    own = _values(10, start=30)
    own[5] = "X35"
    b2.produce(TP, own, epoch=0, per_batch=PER_BATCH, compression=codecs[3 % len(codecs)])
    b2.replicate(TP, b1)
    b3.replicate(TP, b1)
    for d in dirs:
        d.high_watermarks[TP] = RECORDS
    return _close(dirs)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_replicas_holding_other_compressed_bytes_at_the_same_offsets_diverge(
    tmp_path: Path, layout: str
) -> None:
    history = _lines([(i, f"v{i}") for i in range(RECORDS)])
    plain = _whole(_diverged(tmp_path / "plain", [Codec.NONE]), history)
    paths = _diverged(tmp_path / "compressed", LAYOUTS[layout])
    compressed = _whole(paths, history)
    _same_audit(compressed, plain)
    divergence = [r for r in compressed.result.runs if r.kind == "divergence"]
    assert [(r.start, r.end, r.brokers) for r in divergence] == [(35, 35, (1, 2, 3))]
    values = {v["broker"]: v["value"]["b64"] for v in divergence[0].first["versions"]}
    assert values[1] == values[3] != values[2]
    # Broker 2's batch 30-39 differs in its stored bytes: a copy of its own, decoded apart.
    logs = _logs(paths)
    copies = read_copies(
        [[str(s.path) for s in log.files.segments] for log in logs],
        [log.chunk(*WHOLE) for log in logs],
        WHOLE[0],
    )
    assert sorted(len(c.batches) for c in copies) == [1, RECORDS // PER_BATCH]
    (own,) = (c for c in copies if len(c.batches) == 1)
    assert own.holders == [0b010]


@pytest.mark.parametrize("codec", CODECS)
def test_the_same_records_stored_in_other_codecs_by_two_replicas_agree(
    tmp_path: Path, codec: Codec
) -> None:
    """Other stored bytes, the same records: two copies decoded, no divergence (the audit
    compares records; a copy's bytes only spare it decoding them twice)."""
    b1, b2 = dirs = _dirs(tmp_path)[:2]
    values = _values(RECORDS)
    b1.produce(TP, values, epoch=0, per_batch=PER_BATCH, compression=Codec.NONE)
    b2.produce(TP, values, epoch=0, per_batch=PER_BATCH, compression=codec)
    for d in dirs:
        d.high_watermarks[TP] = RECORDS
    audited = _whole(_close(dirs), _lines(list(enumerate(values))))
    assert audited.result.runs == []
    assert audited.result.records == {1: RECORDS, 2: RECORDS}
    assert [s.compressed_batches for s in audited.summaries] == [0, RECORDS // PER_BATCH]


def _lost(root: Path, codecs: Sequence[int]) -> list[Path]:
    """Broker 1 led epoch 0 and wrote 200 records; brokers 2 and 3 had copied 150 when broker
    2 was elected (epoch 1) and wrote 10 of its own; broker 1 truncated to 150 and copied
    them: the acks of 150-199 are lost."""
    b1, b2, b3 = dirs = _dirs(root)
    b1.produce(TP, _values(RECORDS), epoch=0, per_batch=PER_BATCH, compression=codecs)
    for d in (b2, b3):
        d.replicate(TP, b1, up_to=150)
    b2.become_leader(TP, 1)
    b2.produce(TP, _values(10, "w"), epoch=1, per_batch=PER_BATCH, compression=codecs[-1])
    b1.truncate(TP, 150)
    for d in (b1, b3):
        d.replicate(TP, b2)
    for d in dirs:
        d.high_watermarks[TP] = 160
    return _close(dirs)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_acknowledged_records_missing_from_compressed_batches_are_lost(
    tmp_path: Path, layout: str
) -> None:
    acks = [(i, f"v{i}") for i in range(RECORDS)]
    acks += [(42, "v-missing"), (61, "v60")]  # at 42 the log holds v42; v60 is held at 60
    plain = _whole(_lost(tmp_path / "plain", [Codec.NONE]), _lines(acks))
    compressed = _whole(_lost(tmp_path / "compressed", LAYOUTS[layout]), _lines(acks))
    _same_audit(compressed, plain)
    lost = sorted(
        (r.start, r.end, r.key["reason"], r.first.get("moved_to"))
        for r in compressed.result.runs
        if r.kind == "lost_ack"
    )
    assert lost == [
        (42, 42, "replaced", None),
        (61, 61, "replaced", 60),
        (150, 159, "replaced", None),
        (160, 199, "beyond_leo", None),
    ]
    assert compressed.result.records == {1: 160, 2: 160, 3: 160}


def _stamped(batch: bytes, offset: int, epoch: int) -> bytes:
    data = bytearray(batch)
    stamp_batch(data, 0, offset, epoch)
    return bytes(data)


def _with_batch(root: Path, batch: bytes) -> tuple[list[Path], int]:
    """Brokers 1 and 2 copies of 30 gzip records; broker 2 then holds ``batch`` (as a
    follower copies a leader's, whatever its records) at 30. Returns the paths and the
    batch's position in its segment file."""
    b1, b2 = dirs = _dirs(root, (1 << 20,) * 3)[:2]
    b1.produce(TP, _values(30), epoch=0, per_batch=PER_BATCH, compression=Codec.GZIP)
    b2.replicate(TP, b1)
    b2.log(TP).append_as_follower(_stamped(batch, 30, 0))
    for d in dirs:
        d.high_watermarks[TP] = 30
    paths = _close(dirs)
    (position,) = (
        found.position
        for segment in (paths[1] / TP.dir_name).glob("*.log")
        for found in scan_batches(segment.read_bytes())
        if found.header.base_offset == 30
    )
    return paths, position


COMPRESSED_POISONS = [p for p in POISONS if parse_header(p.batch).compression]


def _refused(batch: bytes) -> CorruptRecordError | None:
    """Why decode_batch refuses ``batch``: CompressedRecordsError when it does not inflate."""
    try:
        decode_batch(batch)
    except CorruptRecordError as e:
        return e
    return None


def _without_position(reason: str) -> str:
    """A reason without its leading ``batch at position N``."""
    assert reason.startswith("batch at position ")
    return reason.split(": ", 1)[1]


@pytest.mark.parametrize("poison", COMPRESSED_POISONS, ids=[p.name for p in COMPRESSED_POISONS])
def test_a_compressed_batch_that_does_not_decode_is_reported_as_the_codec_judges_it(
    tmp_path: Path, poison: Poison
) -> None:
    """A batch that does not inflate is a crc finding saying why; one that inflates is judged
    as the same records uncompressed are."""
    check_batch(poison.batch)
    paths, position = _with_batch(tmp_path / "compressed", poison.batch)
    acks = _lines([(i, f"v{i}") for i in range(30)])
    audited = _whole(paths, acks)
    header = parse_header(poison.batch)
    refused = _refused(poison.batch)
    if isinstance(refused, CompressedRecordsError):
        (crc,) = _crc_runs(audited)
        assert (crc.start, crc.end, crc.brokers) == (30, 30 + header.last_offset_delta, (2,))
        assert crc.key == {"what": "records"}
        assert crc.first["problem"] == (
            f"its CRC holds but its records do not inflate: batch at position {position}: "
            + _without_position(refused.reason)
        )
        assert audited.result.records == {1: 30, 2: 30}
        assert [s.compressed_batches for s in audited.summaries] == [3, 4]
        return
    # It inflates: judged as the same records uncompressed (whether they parse or not).
    records = inflated(poison.batch, 0, header)[0][RECORDS_OFFSET:]
    twin = raw_batch(
        records,
        header.record_count,
        attributes=header.attributes & ~COMPRESSION_CODEC_MASK,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
    )
    plain = _whole(_with_batch(tmp_path / "plain", twin)[0], acks)
    assert audited.result.records == plain.result.records
    named = f"its records, inflated ({header.compression_name}), do not parse"
    assert audited.result.runs == [
        _renamed(r, "its records do not parse", named) if r.kind == "crc" else r
        for r in plain.result.runs
    ]


def _renamed(run: Run, old: str, new: str) -> Run:
    """``run`` with ``old`` replaced by ``new`` in the problem its items name."""
    return dataclasses.replace(
        run,
        first={**run.first, "problem": run.first["problem"].replace(old, new)},
        last={**run.last, "problem": run.last["problem"].replace(old, new)},
        first_at=(*run.first_at[:2], run.first_at[2].replace(old, new)),
        last_at=(*run.last_at[:2], run.last_at[2].replace(old, new)),
    )


def test_a_batch_that_does_not_inflate_is_reported_once_by_the_range_that_owns_it(
    tmp_path: Path,
) -> None:
    """A partition cut into ranges at 105, inside the zstd batch 100-109 that broker 2 holds
    garbled: the first range reports it, the second does not; every record is counted once."""
    b1, b2 = dirs = _dirs(tmp_path)[:2]
    b1.produce(TP, _values(RECORDS), epoch=0, per_batch=PER_BATCH, compression=Codec.ZSTD)
    b2.replicate(TP, b1, up_to=100)
    b2.log(TP).append_as_follower(_garbled(_stored(b1, 100)))
    b2.replicate(TP, b1)
    for d in dirs:
        d.high_watermarks[TP] = RECORDS
    paths = _close(dirs)
    acks = _lines([(i, f"v{i}") for i in range(RECORDS)])
    first, second = _audit(paths, acks, ranges=[(WHOLE[0], 105), (105, WHOLE[1])])
    (crc,) = _crc_runs(first)
    assert (crc.start, crc.end, crc.brokers) == (100, 109, (2,))
    assert "do not inflate" in crc.first["problem"]
    assert "zstd payload of" in crc.first["problem"]
    assert _crc_runs(second) == []
    counts = {b: first.result.records[b] + second.result.records[b] for b in (1, 2)}
    assert counts == {1: RECORDS, 2: RECORDS - PER_BATCH}
    whole = _whole(paths, acks)
    assert [(r.kind, r.start, r.end, r.brokers) for r in whole.result.runs] == [
        ("crc", 100, 109, (2,))
    ]
