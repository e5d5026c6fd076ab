"""Log: config, appends (leader and follower), rolling, reads, truncation, retention,
flushing, loading, thread safety, and Kafka byte compatibility of what it writes."""

from __future__ import annotations

import os
import shutil
import struct
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import crc32c
import pytest

from broker.log.epoch_entry import EpochEntry
from broker.log.log import (
    Log,
    UnexpectedAppendOffsetError,
)
from broker.log.log_segment import TimestampOffset
from broker.replication.replica_manager import _error_of
from proto import errors
from proto.config.log_config import LogConfig
from proto.errors import MessageTooLargeError, OffsetOutOfRangeError
from proto.records.compression import Codec
from proto.records.record_batch import (
    RECORDS_OFFSET,
    CorruptRecordError,
    Record,
    decode_batch,
    encode_batch,
    stamp_batch,
    validate_batches,
)
from tests.poison_batches import POISONS, Poison


def client_batch(n: int = 3, *, ts: int = 1000, size: int = 20) -> bytes:
    """A batch as a producer sends it: base offset 0, no partition leader epoch."""
    return encode_batch(
        [Record(b"key-%d" % i, b"value-%d" % i + b"x" * size, ts + i) for i in range(n)]
    )


BATCH_SIZE = len(client_batch())


def open_log(tmp_path: Path, **config: int | str | None) -> Log:
    return Log.open(tmp_path / "orders-0", LogConfig(**config))  # type: ignore[arg-type]


def decode_all(data: bytes) -> list[Record]:
    records = []
    position = 0
    while position < len(data):
        batch = decode_batch(data, position)
        records.extend(batch.records)
        position += batch.header.size
    return records


def offsets(data: bytes) -> list[int]:
    return [r.offset for r in decode_all(data)]


# -- config ----------------------------------------------------------------------------------


def test_config_defaults_are_kafkas() -> None:
    config = LogConfig()
    assert config.segment_bytes == 1073741824
    assert config.index_interval_bytes == 4096
    assert config.retention_ms == 604800000
    assert config.retention_bytes == -1
    assert config.flush_interval_messages is None
    assert config.max_message_bytes == 1048588


def test_config_from_properties() -> None:
    config = LogConfig.from_properties(
        {
            "segment.bytes": "1000",
            "index.interval.bytes": "10",
            "retention.ms": "-1",
            "retention.bytes": "5000",
            "log.flush.interval.messages": "1",
            "message.max.bytes": "2000",
            "min.insync.replicas": "2",  # not a log config: ignored
        }
    )
    assert config == LogConfig(1000, 10, -1, 5000, 1, 2000)


def test_config_topic_names_override_broker_names_and_defaults() -> None:
    broker = LogConfig.from_properties({"log.retention.hours": "1", "log.segment.bytes": "5000"})
    assert broker.retention_ms == 3600 * 1000
    topic = LogConfig.from_properties({"retention.ms": "10", "flush.messages": "3"}, broker)
    assert (topic.retention_ms, topic.segment_bytes, topic.flush_interval_messages) == (10, 5000, 3)
    never = LogConfig.from_properties({"log.flush.interval.messages": str(2**63 - 1)})
    assert never.flush_interval_messages is None


@pytest.mark.parametrize(
    ("properties", "named"),
    [
        ({"segment.bytes": "big"}, "segment.bytes"),
        ({"segment.bytes": "10"}, "segment.bytes"),
        ({"log.segment.bytes": str(2**31)}, "segment.bytes"),
        ({"index.interval.bytes": "-1"}, "index.interval.bytes"),
        ({"retention.ms": "-2"}, "retention.ms"),
        ({"retention.bytes": "1.5"}, "retention.bytes"),
        ({"log.flush.interval.messages": "0"}, "log.flush.interval.messages"),
        ({"message.max.bytes": "-1"}, "message.max.bytes"),
        ({"log.retention.hours": "-2"}, "log.retention.hours"),
        ({"log.retention.minutes": str(2**62)}, "log.retention.minutes"),
    ],
)
def test_config_rejects_bad_values_naming_the_property(
    properties: dict[str, str], named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        LogConfig.from_properties(properties)


# -- opening ---------------------------------------------------------------------------------


def test_open_creates_empty_log(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "orders-3", LogConfig(), log_start_offset=42)
    assert log.topic_partition == ("orders", 3)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (42, 42, 42)
    assert [s.base_offset for s in log.segments] == [42]
    assert (tmp_path / "orders-3" / "00000000000000000042.log").exists()
    assert log.latest_epoch is None
    log.close()


def test_open_rejects_directory_not_named_after_a_partition(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a partition directory"):
        Log.open(tmp_path / "orders", LogConfig())


def test_open_removes_stray_files(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(client_batch(), 0)
    log.close()
    directory = tmp_path / "orders-0"
    strays = [
        "00000000000000000000.log.deleted",
        "00000000000000000007.log.swap",
        "leader-epoch-checkpoint.tmp",
        "00000000000000000009.index",  # orphan: no .log
        "x.cleaned",
    ]
    for name in strays:
        (directory / name).write_bytes(b"junk")
    log = open_log(tmp_path)
    assert sorted(p.name for p in directory.iterdir()) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "leader-epoch-checkpoint",
    ]
    assert log.log_end_offset == 3
    log.close()


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=10 * BATCH_SIZE, index_interval_bytes=100)
    for epoch in (0, 0, 3, 3, 3, 7):
        for _ in range(5):
            log.append_as_leader(client_batch(), epoch)
    data = log.read(0, 10**9).records
    entries = log.epoch_cache.entries()
    log.close()
    for recovery_point, clean_shutdown in ((0, False), (60, False), (90, True)):
        log = Log.open(
            tmp_path / "orders-0",
            LogConfig(segment_bytes=10 * BATCH_SIZE, index_interval_bytes=100),
            recovery_point=recovery_point,
            clean_shutdown=clean_shutdown,
        )
        assert log.log_end_offset == 90
        assert log.recovery_point == 90
        assert log.read(0, 10**9).records == data
        assert (
            log.epoch_cache.entries()
            == entries
            == [
                EpochEntry(0, 0),
                EpochEntry(3, 30),
                EpochEntry(7, 75),
            ]
        )
        log.close()


# -- leader appends --------------------------------------------------------------------------


def test_append_as_leader_stamps_offsets_and_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = log.append_as_leader(client_batch(3, ts=500), 4)
    assert (first.first_offset, first.last_offset, first.num_records, first.num_batches) == (
        0,
        2,
        3,
        1,
    )
    assert (first.max_timestamp, first.offset_of_max_timestamp) == (502, 2)
    assert not first.rolled
    info = log.append_as_leader(client_batch(2) + client_batch(4), 4)
    assert (info.first_offset, info.last_offset, info.num_records, info.num_batches) == (
        3,
        8,
        6,
        2,
    )
    assert info.valid_bytes == len(client_batch(2) + client_batch(4))
    assert [(h.base_offset, h.partition_leader_epoch) for h in info.batches] == [(3, 4), (5, 4)]
    assert log.log_end_offset == 9
    data = log.read(0, 10**6).records
    assert [(h.base_offset, h.partition_leader_epoch) for h in validate_batches(data)] == [
        (0, 4),
        (3, 4),
        (5, 4),
    ]
    assert offsets(data) == list(range(9))
    assert log.epoch_cache.entries() == [EpochEntry(4, 0)]
    log.close()


def copy_stamped(records: bytes, base_offset: int, epoch: int) -> bytes:
    """What the leader must write, made the obvious way: a copy stamped batch by batch."""
    data = bytearray(records)
    position = 0
    for header in validate_batches(records):
        stamp_batch(data, position, base_offset, epoch)
        base_offset += header.record_count
        position += header.size
    return bytes(data)


def many_batches(count: int) -> bytes:
    return b"".join(client_batch(1 + i % 3, ts=i, size=i % 50) for i in range(count))


@pytest.mark.parametrize("count", [1, 2, 700])  # 700 batches: 1400 buffers, past IOV_MAX
def test_append_as_leader_writes_what_stamping_a_copy_gives(tmp_path: Path, count: int) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(client_batch(2), 3)
    records = bytearray(many_batches(count))
    original = bytes(records)
    log.append_as_leader(records, 5)
    assert records == original  # the producer's buffer is not stamped
    log.close()
    expected = copy_stamped(client_batch(2), 0, 3) + copy_stamped(original, 2, 5)
    assert (tmp_path / "orders-0" / f"{0:020d}.log").read_bytes() == expected


def test_append_as_leader_survives_short_vectored_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_pwritev = os.pwritev
    calls = [0]

    def short_pwritev(fd: int, buffers: Sequence[bytes | memoryview], offset: int) -> int:
        # Write at most 1000 bytes a call, ending inside a buffer, as a signal could.
        calls[0] += 1
        budget, taken = 1000, []
        for buffer in buffers:
            view = memoryview(buffer)[:budget]
            taken.append(view)
            budget -= len(view)
            if not budget:
                break
        return real_pwritev(fd, taken, offset)

    monkeypatch.setattr(os, "pwritev", short_pwritev)
    records = many_batches(40)
    log = open_log(tmp_path)
    log.append_as_leader(records, 1)
    fetched = copy_stamped(client_batch(3), log.log_end_offset, 1)
    log.append_as_follower(fetched)
    log.close()
    assert calls[0] > len(records) // 1000
    expected = copy_stamped(records, 0, 1) + fetched
    assert (tmp_path / "orders-0" / f"{0:020d}.log").read_bytes() == expected


def test_epoch_cache_gets_one_entry_per_epoch_change(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for epoch in (0, 0, 1, 1, 1, 5):
        log.append_as_leader(client_batch(2), epoch)
    assert log.epoch_cache.entries() == [EpochEntry(0, 0), EpochEntry(1, 4), EpochEntry(5, 10)]
    assert log.latest_epoch == 5
    log.close()


def test_append_as_leader_rejects_invalid_input(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_message_bytes=200, segment_bytes=300)
    bad = bytearray(client_batch())
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        log.append_as_leader(bytes(bad), 0)
    with pytest.raises(CorruptRecordError, match="no record batches"):
        log.append_as_leader(b"", 0)
    with pytest.raises(CorruptRecordError, match="truncated header"):
        log.append_as_leader(client_batch(1) + b"\x00", 0)
    with pytest.raises(MessageTooLargeError, match=r"exceeds message\.max\.bytes 200"):
        log.append_as_leader(client_batch(1, size=300), 0)
    with pytest.raises(MessageTooLargeError, match=r"exceeds segment\.bytes 300"):
        log.append_as_leader(client_batch(2) * 3, 0)
    with pytest.raises(ValueError, match="leader epoch"):
        log.append_as_leader(client_batch(1), -1)
    assert log.log_end_offset == 0
    assert log.size_in_bytes == 0
    log.close()


@pytest.mark.parametrize("poison", POISONS, ids=[p.name for p in POISONS])
@pytest.mark.parametrize("with_good_batches", [False, True], ids=["alone", "after-good-ones"])
def test_append_as_leader_refuses_poison_batches_and_writes_nothing(
    tmp_path: Path, poison: Poison, with_good_batches: bool
) -> None:
    """the leader stores no batch a follower, consumer or the audit could not
    decode; the whole append is refused, even its good batches."""
    log = open_log(tmp_path)
    log.append_as_leader(client_batch(3), 3)
    segment = tmp_path / "orders-0" / f"{0:020d}.log"

    def state() -> tuple[object, ...]:
        return (
            log.log_end_offset,
            log.size_in_bytes,
            log.epoch_cache.entries(),
            segment.read_bytes(),
            log.producer_state.snapshot_offsets,
        )

    before = state()
    records = (client_batch(2) * 2 if with_good_batches else b"") + poison.batch
    with pytest.raises((CorruptRecordError, errors.BrokerResponseError)) as raised:
        log.append_as_leader(records, 5)  # a new epoch: a write would add a cache entry
    code, message = _error_of(raised.value)
    assert code == poison.code
    assert poison.fragment in message.lower()
    assert state() == before
    assert log.append_as_leader(client_batch(2), 5).first_offset == 3  # and it still appends
    log.close()


def test_segments_roll_at_segment_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=3 * BATCH_SIZE + 10)
    rolled = [log.append_as_leader(client_batch(), 0).rolled for _ in range(10)]
    assert rolled == [False, False, False, True, False, False, True, False, False, True]
    assert [s.base_offset for s in log.segments] == [0, 9, 18, 27]
    assert [s.size for s in log.segments] == [3 * BATCH_SIZE] * 3 + [BATCH_SIZE]
    assert all(s.size <= 3 * BATCH_SIZE + 10 for s in log.segments)
    names = sorted(p.name for p in log.directory.glob("*.log"))
    assert names == [f"{b:020d}.log" for b in (0, 9, 18, 27)]
    assert log.roll().base_offset == 30
    assert log.roll().base_offset == 30  # an empty active segment is not rolled again
    log.close()


def test_a_roll_flushes_the_older_segments_in_the_background_for_leader_and_follower(
    tmp_path: Path,
) -> None:
    """Kafka's roll schedules flushUptoOffsetExclusive(new base): the log, not its caller,
    raises the recovery point, whether a leader or a follower append rolled."""
    data = leader_bytes(tmp_path, [0] * 4)
    scheduled: list[Callable[[], None]] = []
    for name in ("as-leader", "as-follower"):
        log = Log.open(
            tmp_path / name / "orders-0",
            LogConfig(segment_bytes=3 * BATCH_SIZE + 10),
            background=scheduled.append,
        )
        if name == "as-leader":
            infos = [log.append_as_leader(client_batch(), 0) for _ in range(4)]
        else:
            infos = [
                log.append_as_follower(data[i * BATCH_SIZE : (i + 1) * BATCH_SIZE])
                for i in range(4)
            ]
        assert [info.rolled for info in infos] == [False, False, False, True], name
        assert len(scheduled) == 1, name
        assert log.recovery_point == 0, name  # scheduled, not run inline
        scheduled.pop()()
        assert log.recovery_point == 9, name  # the new segment's base offset
        log.close()


def test_without_a_background_runner_a_roll_flushes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=3 * BATCH_SIZE + 10)
    assert [log.append_as_leader(client_batch(), 0).rolled for _ in range(4)][-1]
    assert log.recovery_point == 0
    log.flush()
    assert log.recovery_point == 12
    log.close()


def test_a_background_flush_after_the_log_closed_is_harmless(tmp_path: Path) -> None:
    scheduled: list[Callable[[], None]] = []
    log = Log.open(
        tmp_path / "orders-0",
        LogConfig(segment_bytes=3 * BATCH_SIZE + 10),
        background=scheduled.append,
    )
    for _ in range(4):
        log.append_as_leader(client_batch(), 0)
    log.close()
    scheduled.pop()()  # LogClosedError is swallowed: closing flushed everything


# -- follower appends ------------------------------------------------------------------------


def leader_bytes(tmp_path: Path, epochs: list[int]) -> bytes:
    leader = Log.open(tmp_path / "leader" / "orders-0", LogConfig())
    for epoch in epochs:
        leader.append_as_leader(client_batch(), epoch)
    data = leader.read(0, 10**9).records
    leader.close()
    return data


def test_append_as_follower_keeps_offsets_and_epochs(tmp_path: Path) -> None:
    data = leader_bytes(tmp_path, [1, 1, 2, 4])
    follower = open_log(tmp_path)
    info = follower.append_as_follower(data[: 2 * BATCH_SIZE])
    assert (info.first_offset, info.last_offset) == (0, 5)
    follower.append_as_follower(data[2 * BATCH_SIZE :])
    assert follower.read(0, 10**9).records == data
    assert follower.epoch_cache.entries() == [EpochEntry(1, 0), EpochEntry(2, 6), EpochEntry(4, 9)]
    assert follower.append_as_follower(b"").num_batches == 0
    follower.close()


def test_append_as_follower_rejects_wrong_offsets(tmp_path: Path) -> None:
    data = leader_bytes(tmp_path, [0, 0, 0])
    follower = open_log(tmp_path)
    with pytest.raises(
        UnexpectedAppendOffsetError, match="start at offset 3 but the log end offset is 0"
    ):
        follower.append_as_follower(data[BATCH_SIZE:])
    with pytest.raises(UnexpectedAppendOffsetError, match="does not follow"):
        follower.append_as_follower(data[:BATCH_SIZE] + data[2 * BATCH_SIZE :])
    follower.append_as_follower(data[:BATCH_SIZE])
    with pytest.raises(UnexpectedAppendOffsetError, match="log end offset is 3"):
        follower.append_as_follower(data[:BATCH_SIZE])
    assert follower.log_end_offset == 3
    follower.close()


# -- reads -----------------------------------------------------------------------------------


def test_read_across_segment_boundaries(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=2 * BATCH_SIZE)
    for _ in range(10):
        log.append_as_leader(client_batch(), 0)
    assert len(log.segments) == 5
    for start in range(30):
        found = log.read(start, 10**6)
        assert found.first_offset == start - start % 3
        assert offsets(found.records) == list(range(start - start % 3, 30))
        assert found.next_offset == 30
        assert (found.log_start_offset, found.log_end_offset) == (0, 30)


def test_read_respects_max_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=2 * BATCH_SIZE)
    for _ in range(10):
        log.append_as_leader(client_batch(), 0)
    found = log.read(4, 3 * BATCH_SIZE + 5)
    assert offsets(found.records) == list(range(3, 12))
    assert found.next_offset == 12
    one = log.read(4, 1)  # smaller than a batch: the first batch anyway (KIP-74)
    assert offsets(one.records) == [3, 4, 5]
    none = log.read(4, 1, min_one_batch=False)
    assert (none.records, none.first_offset, none.next_offset) == (b"", None, 4)


def test_read_respects_max_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=2 * BATCH_SIZE)
    for _ in range(10):
        log.append_as_leader(client_batch(), 0)
    assert offsets(log.read(0, 10**6, max_offset=12).records) == list(range(12))
    assert offsets(log.read(0, 10**6, max_offset=13).records) == list(range(12))
    assert log.read(12, 10**6, max_offset=12).records == b""
    assert log.read(12, 10**6, max_offset=14).records == b""  # batch 12..14 not below 14
    assert offsets(log.read(7, 10**6, max_offset=15).records) == list(range(6, 15))


def test_read_out_of_range(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(client_batch(), 0)
    assert log.read(3, 1000).records == b""
    with pytest.raises(
        OffsetOutOfRangeError,
        match="offset 4 is out of range: log start offset 0, log end offset 3",
    ):
        log.read(4, 1000)
    log.maybe_increment_log_start_offset(2)
    with pytest.raises(OffsetOutOfRangeError, match="log start offset 2, log end offset 3"):
        log.read(1, 1000)
    assert offsets(log.read(2, 1000).records) == [0, 1, 2]  # the batch holding 2
    log.close()


def test_offset_for_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=2 * BATCH_SIZE)
    for i in range(6):
        log.append_as_leader(client_batch(ts=1000 + 10 * i), i)  # timestamps 1000+10i+j
    assert log.offset_for_timestamp(0) == TimestampOffset(1000, 0, 0)
    # The found record's own timestamp, not the one asked for, and its batch's epoch.
    assert log.offset_for_timestamp(1021) == TimestampOffset(1021, 7, 2)
    assert log.offset_for_timestamp(1025) == TimestampOffset(1030, 9, 3)
    assert log.offset_for_timestamp(1052) == TimestampOffset(1052, 17, 5)
    assert log.offset_for_timestamp(1053) is None
    log.close()


def test_max_timestamp_offset_is_the_first_record_with_the_largest_timestamp(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path, segment_bytes=2 * BATCH_SIZE)
    assert log.max_timestamp_offset() is None
    for ts, epoch in ((1000, 0), (5000, 1), (3000, 2), (4000, 3), (5002, 4), (2000, 5)):
        # timestamps ts, ts+1, ts+2 at offsets 3*epoch..3*epoch+2
        log.append_as_leader(client_batch(ts=ts), epoch)
    # Offsets 14 (5004) is the largest, in the third segment, not the last one.
    assert log.max_timestamp_offset() == TimestampOffset(5004, 14, 4)
    log.append_as_leader(
        encode_batch([Record(b"k", b"v", 9000), Record(b"k", b"v", 9000), Record(b"k", b"v", 1)]),
        6,
    )
    assert log.max_timestamp_offset() == TimestampOffset(9000, 18, 6)  # the first of a tie
    log.close()


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_compressed_batches_are_stored_as_sent_and_searched_record_by_record(
    tmp_path: Path, codec: Codec
) -> None:
    """The leader keeps the producer's codec and bytes (only baseOffset and the epoch are
    stamped), readers inflate them, and a timestamp finds the exact record inside one."""
    log = open_log(tmp_path)
    records = [Record(b"k%d" % i, b"v" * (i % 13), 100 + i * (-1) ** i) for i in range(50)]
    batch = encode_batch(records, compression=codec)
    log.append_as_leader(client_batch(2, ts=0), 0)
    info = log.append_as_leader(batch, 3)
    assert (info.first_offset, info.last_offset) == (2, 51)
    stored = log.read(2, 10**6).records
    assert stored[RECORDS_OFFSET:] == batch[RECORDS_OFFSET:]
    decoded = decode_batch(stored)
    assert decoded.header.compression == codec
    assert [(r.offset, r.key, r.value) for r in decoded.records] == [
        (2 + i, r.key, r.value) for i, r in enumerate(records)
    ]
    assert log.offset_for_timestamp(140) == TimestampOffset(140, 42, 3)  # 100 + 40
    assert log.offset_for_timestamp(141) == TimestampOffset(142, 44, 3)  # odd ones go back
    assert log.max_timestamp_offset() == TimestampOffset(148, 50, 3)
    log.close()


@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
def test_a_topic_compression_type_stores_every_batch_in_its_codec(
    tmp_path: Path, target: str
) -> None:
    """Batches in another codec are recompressed (producer fields, timestamps and records
    kept; the new CRC valid), those already in it stored as sent."""
    codec = Codec.NONE if target == "uncompressed" else Codec[target.upper()]
    log = open_log(tmp_path, compression_type=target)
    sent = [
        encode_batch(
            [Record(b"k%d" % i, b"value %d" % i * 5, 10 + i) for i in range(20)],
            producer_id=3,
            producer_epoch=0,
            base_sequence=20 * n,
            compression=n,
        )
        for n in Codec
    ]
    for batch in sent:
        log.append_as_leader(batch, 1)
    stored = log.read(0, 10**7).records
    headers = validate_batches(stored)  # the CRCs are right
    assert [h.compression for h in headers] == [codec] * len(sent)
    assert [(h.base_sequence, h.producer_id, h.max_timestamp) for h in headers] == [
        (20 * n, 3, 29) for n in range(len(sent))
    ]
    assert [(r.offset, r.key, r.value, r.timestamp) for r in decode_all(stored)] == [
        (20 * n + i, b"k%d" % i, b"value %d" % i * 5, 10 + i)
        for n in range(len(sent))
        for i in range(20)
    ]
    position = 0
    for header, batch in zip(headers, sent, strict=True):
        if header.compression == validate_batches(batch)[0].compression:
            assert (
                stored[position + RECORDS_OFFSET : position + header.size]
                == (batch[RECORDS_OFFSET:])
            )
        position += header.size
    log.close()


# -- truncation ------------------------------------------------------------------------------


def test_truncate_to_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=2 * BATCH_SIZE)
    for epoch in (0, 0, 1, 1, 2, 2, 3, 3):
        log.append_as_leader(client_batch(), epoch)
    log.flush()
    assert log.recovery_point == 24
    assert log.truncate_to(9)
    assert log.log_end_offset == 9
    assert log.recovery_point == 9
    assert [s.base_offset for s in log.segments] == [0, 6]
    assert not (log.directory / f"{12:020d}.log").exists()
    assert offsets(log.read(0, 10**6).records) == list(range(9))
    assert log.epoch_cache.entries() == [EpochEntry(0, 0), EpochEntry(1, 6)]
    assert not log.truncate_to(9)
    assert not log.truncate_to(100)
    log.append_as_leader(client_batch(), 5)
    assert log.epoch_cache.entries() == [EpochEntry(0, 0), EpochEntry(1, 6), EpochEntry(5, 9)]
    assert offsets(log.read(0, 10**6).records) == list(range(12))
    log.close()


def test_truncate_at_or_past_the_end_trims_an_epoch_that_starts_at_the_end(
    tmp_path: Path,
) -> None:
    """KAFKA-7415: a broker that became leader (epoch 4 recorded at its LEO) and wrote
    nothing, then follows again; truncating at or past its LEO removes no record but must
    drop that epoch, as Kafka's UnifiedLog.truncateTo does, or the follower keeps asking
    the leader about an epoch it never wrote."""
    log = open_log(tmp_path)
    for epoch in (0, 1):
        log.append_as_leader(client_batch(), epoch)
    log.epoch_cache.assign(4, log.log_end_offset)
    assert log.epoch_cache.latest_epoch() == 4
    assert not log.truncate_to(log.log_end_offset + 5)
    assert log.log_end_offset == 6
    assert log.epoch_cache.entries() == [EpochEntry(0, 0), EpochEntry(1, 3)]
    log.close()


def test_truncate_to_inside_a_batch_drops_the_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for _ in range(3):
        log.append_as_leader(client_batch(), 0)
    log.truncate_to(7)
    assert log.log_end_offset == 6
    log.close()


def test_truncate_to_segment_base_keeps_empty_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=2 * BATCH_SIZE)
    for _ in range(4):
        log.append_as_leader(client_batch(), 0)
    log.truncate_to(6)
    assert [(s.base_offset, s.size) for s in log.segments] == [(0, 2 * BATCH_SIZE), (6, 0)]
    assert log.log_end_offset == 6
    log.close()


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=2 * BATCH_SIZE)
    for epoch in range(5):
        log.append_as_leader(client_batch(), epoch)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert [s.base_offset for s in log.segments] == [100]
    assert sorted(p.name for p in log.directory.glob("*.log")) == [f"{100:020d}.log"]
    assert log.epoch_cache.entries() == []
    log.append_as_leader(client_batch(), 9)
    assert log.epoch_cache.entries() == [EpochEntry(9, 100)]
    log.close()
    reopened = open_log(tmp_path, segment_bytes=2 * BATCH_SIZE)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (100, 103)
    reopened.close()


# -- retention -------------------------------------------------------------------------------


def test_retention_by_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=2 * BATCH_SIZE, retention_bytes=5 * BATCH_SIZE)
    for epoch in (0, 0, 1, 1, 2, 2, 3, 3, 4):
        log.append_as_leader(client_batch(), epoch)
    assert [s.base_offset for s in log.segments] == [0, 6, 12, 18, 24]
    # Only segments wholly below the high watermark may go.
    assert log.delete_old_segments(high_watermark=6, now_ms=0) == 1
    assert [s.base_offset for s in log.segments] == [6, 12, 18, 24]
    assert log.log_start_offset == 6
    assert log.epoch_cache.entries()[0] == EpochEntry(1, 6)
    # 7 batches, at most 5 kept: whole segments go while the rest still exceeds the limit.
    assert log.delete_old_segments(high_watermark=27, now_ms=0) == 1
    assert [s.base_offset for s in log.segments] == [12, 18, 24]
    assert log.log_start_offset == 12
    assert log.epoch_cache.entries() == [EpochEntry(2, 12), EpochEntry(3, 18), EpochEntry(4, 24)]
    assert not (log.directory / f"{6:020d}.log").exists()
    assert not (log.directory / f"{6:020d}.index").exists()
    with pytest.raises(OffsetOutOfRangeError):
        log.read(11, 1000)
    log.close()


def test_retention_by_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=2 * BATCH_SIZE, retention_ms=1000)
    for i in range(6):
        log.append_as_leader(client_batch(ts=10_000 * (i + 1)), i)  # batch i: ts ~10000(i+1)
    # Segment k holds batches 2k, 2k+1: largest timestamp 10000 * (2k + 2) + 2.
    assert log.delete_old_segments(high_watermark=18, now_ms=41_003) == 2
    assert log.log_start_offset == 12
    assert log.epoch_cache.entries() == [EpochEntry(4, 12), EpochEntry(5, 15)]
    # Everything expired: the active segment goes too, after rolling a new empty one.
    assert log.delete_old_segments(high_watermark=18, now_ms=10**9) == 1
    assert [(s.base_offset, s.size) for s in log.segments] == [(18, 0)]
    assert (log.log_start_offset, log.log_end_offset) == (18, 18)
    assert log.epoch_cache.entries() == [EpochEntry(5, 18)]
    assert log.delete_old_segments(high_watermark=18, now_ms=10**10) == 0
    log.close()
    reopened = open_log(tmp_path, segment_bytes=2 * BATCH_SIZE)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (18, 18)
    reopened.close()


def test_retention_by_log_start_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=2 * BATCH_SIZE, retention_ms=-1)
    for _ in range(6):
        log.append_as_leader(client_batch(), 0)
    assert log.maybe_increment_log_start_offset(13)
    assert not log.maybe_increment_log_start_offset(5)
    with pytest.raises(OffsetOutOfRangeError, match="above the log end offset 18"):
        log.maybe_increment_log_start_offset(19)
    assert log.delete_old_segments(high_watermark=18, now_ms=0) == 2
    assert [s.base_offset for s in log.segments] == [12]
    assert log.log_start_offset == 13
    assert log.epoch_cache.entries() == [EpochEntry(0, 13)]
    log.close()


# -- flushing --------------------------------------------------------------------------------


def test_flush_interval_one_fsyncs_every_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    log = open_log(tmp_path, flush_interval_messages=1)
    monkeypatch.setattr(os, "fsync", counting_fsync)
    for i in range(3):
        log.append_as_leader(client_batch(), 0)
        assert log.recovery_point == 3 * (i + 1)
    assert synced
    log.close()


def test_no_flush_by_default(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for _ in range(3):
        log.append_as_leader(client_batch(), 0)
    assert log.recovery_point == 0
    log.flush(up_to_offset=4)
    assert log.recovery_point == 4
    log.flush()
    assert log.recovery_point == 9
    log.close()


def test_flush_interval_counts_records(tmp_path: Path) -> None:
    log = open_log(tmp_path, flush_interval_messages=5)
    log.append_as_leader(client_batch(3), 0)
    assert log.recovery_point == 0
    log.append_as_leader(client_batch(3), 0)
    assert log.recovery_point == 6
    log.close()


def index_file(log: Log, base_offset: int = 0) -> Path:
    return log.directory / f"{base_offset:020d}.index"


def test_index_entries_reach_the_file_on_flush_roll_and_close(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=0, segment_bytes=5 * BATCH_SIZE)
    for _ in range(3):
        log.append_as_leader(client_batch(), 0)
    assert index_file(log).read_bytes() == b""  # pending: appends make no index syscall
    log.flush()
    assert index_file(log).read_bytes() == struct.pack(">iiii", 5, BATCH_SIZE, 8, 2 * BATCH_SIZE)
    for _ in range(3):
        log.append_as_leader(client_batch(), 0)  # the last one rolls a new segment
    assert [s.base_offset for s in log.segments] == [0, 15]
    assert len(index_file(log).read_bytes()) == 4 * 8  # written when the segment rolled
    log.append_as_leader(client_batch(), 0)
    assert index_file(log, 15).read_bytes() == b""
    log.close()
    assert index_file(log, 15).read_bytes() == struct.pack(">ii", 5, BATCH_SIZE)


def test_flush_fsyncs_the_index_only_when_it_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path, index_interval_bytes=2 * BATCH_SIZE)
    synced: list[int] = []
    real_fsync = os.fsync

    log_inode = (log.directory / f"{0:020d}.log").stat().st_ino
    index_inode = index_file(log).stat().st_ino
    dir_inode = log.directory.stat().st_ino
    counted = {log_inode, index_inode, dir_inode}

    def counting_fsync(fd: int) -> None:
        if os.fstat(fd).st_ino in counted:  # not the epoch checkpoint
            synced.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    log.flush()  # a new log's files and directory are made durable by its first flush
    assert synced == [log_inode, index_inode, dir_inode]
    synced.clear()
    counted.remove(dir_inode)  # the epoch checkpoint's writes fsync the directory too
    log.append_as_leader(client_batch(), 0)
    log.flush()  # no index entry yet: the index has not changed since
    assert synced == [log_inode]
    # An entry for a batch more than 2 batches after position 0: the fourth.
    for expected in ([log_inode], [log_inode], [log_inode, index_inode]):
        synced.clear()
        log.append_as_leader(client_batch(), 0)
        log.flush()
        assert synced == expected
    log.close()


def crash_copy(log: Log, destination: Path) -> Path:
    """The files as a crash of the process would leave them now: what was written to the
    OS, without what the Log holds in memory (pending index entries)."""
    copy = destination / log.directory.name
    shutil.copytree(log.directory, copy)
    return copy


@pytest.mark.parametrize("flushed", [True, False])
def test_crash_with_pending_index_entries_recovers(tmp_path: Path, flushed: bool) -> None:
    # Segments of 10 batches (30 offsets); one entry per batch but the first.
    config = LogConfig(index_interval_bytes=0, segment_bytes=10 * BATCH_SIZE)
    log = Log.open(tmp_path / "live" / "orders-0", config)
    for i in range(14):
        log.append_as_leader(client_batch(), i // 4)
    if flushed:
        log.flush()  # recovery point 42, in the second segment, with 3 entries written
    for i in range(14, 18):
        log.append_as_leader(client_batch(), i // 4)
    expected = log.read(0, 10**9).records
    directory = crash_copy(log, tmp_path / "crashed")
    log.close()
    # The rolled segment holds all its entries; the active one lacks the pending ones.
    files = {p.name: p.stat().st_size for p in directory.glob("*.index")}
    assert files == {f"{0:020d}.index": 9 * 8, f"{30:020d}.index": (3 if flushed else 0) * 8}
    recovered = Log.open(directory, config, recovery_point=log.recovery_point)
    assert recovered.log_end_offset == 54
    assert recovered.read(0, 10**9).records == expected
    assert [recovered.read(o, 1).first_offset for o in range(54)] == [o - o % 3 for o in range(54)]
    assert [len(segment.index) for segment in recovered.segments] == [9, 7]  # rebuilt
    assert (directory / f"{30:020d}.index").stat().st_size == 7 * 8
    assert recovered.epoch_cache.entries() == [EpochEntry(e, 12 * e) for e in range(5)]
    recovered.close()


def test_short_index_below_the_recovery_point_is_trusted(tmp_path: Path) -> None:
    # An index missing its latest entries (a crash after the recovery point moved past the
    # segment cannot leave one, but an older broker could) is sparse, not wrong: it is
    # loaded as it is, and reads scan forward from its last entry.
    config = LogConfig(index_interval_bytes=0)
    log = Log.open(tmp_path / "orders-0", config)
    for _ in range(10):
        log.append_as_leader(client_batch(), 0)
    expected = log.read(0, 10**9).records
    log.flush()
    log.close()
    index = index_file(log)
    index.write_bytes(index.read_bytes()[:16])
    log = Log.open(tmp_path / "orders-0", config, recovery_point=30, clean_shutdown=True)
    assert log.active_segment.index.entries() == [(5, BATCH_SIZE), (8, 2 * BATCH_SIZE)]
    assert log.read(0, 10**9).records == expected
    assert [log.read(o, 1).first_offset for o in range(30)] == [o - o % 3 for o in range(30)]
    log.append_as_leader(client_batch(), 0)
    assert log.log_end_offset == 33
    log.close()


# -- loading edge cases ----------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["delete", "garbage"])
def test_bad_index_below_the_recovery_point_is_rebuilt(tmp_path: Path, damage: str) -> None:
    config = LogConfig(segment_bytes=3 * BATCH_SIZE, index_interval_bytes=0)
    log = Log.open(tmp_path / "orders-0", config)
    for epoch in range(9):
        log.append_as_leader(client_batch(), epoch)
    data = log.read(0, 10**9).records
    index = log.directory / f"{9:020d}.index"
    expected_index = index.read_bytes()
    log.close()
    if damage == "delete":
        index.unlink()
    else:
        index.write_bytes(b"\x01" * 12)
    log = Log.open(tmp_path / "orders-0", config, recovery_point=27, clean_shutdown=True)
    assert index.read_bytes() == expected_index
    assert log.read(0, 10**9).records == data
    assert [log.read(o, 1).first_offset for o in range(27)] == [o - o % 3 for o in range(27)]
    assert log.epoch_cache.entries() == [EpochEntry(e, 3 * e) for e in range(9)]
    log.close()


def test_corrupt_epoch_checkpoint_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for epoch in (1, 1, 2):
        log.append_as_leader(client_batch(), epoch)
    log.close()
    (tmp_path / "orders-0" / "leader-epoch-checkpoint").write_text("0\n5\ngarbage\n")
    log = Log.open(tmp_path / "orders-0", LogConfig(), recovery_point=9, clean_shutdown=True)
    assert log.epoch_cache.entries() == [EpochEntry(1, 0), EpochEntry(2, 6)]
    log.close()


def test_checkpoint_disagreeing_with_the_log_is_repaired(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for epoch in (1, 1, 2):
        log.append_as_leader(client_batch(), epoch)
    log.epoch_cache.assign(3, 7)  # an entry no batch supports
    log.close()
    log = open_log(tmp_path)
    assert log.epoch_cache.entries() == [EpochEntry(1, 0), EpochEntry(2, 6)]
    log.close()


def test_epoch_entry_at_log_end_is_dropped_on_load(tmp_path: Path) -> None:
    # KAFKA-7415's becoming-leader entry (epoch, LEO) with no data yet: Kafka's load
    # truncates the cache from the end at the LEO, removing it.
    log = open_log(tmp_path)
    log.append_as_leader(client_batch(), 1)
    log.epoch_cache.assign(2, 3)
    log.close()
    log = open_log(tmp_path)
    assert log.epoch_cache.entries() == [EpochEntry(1, 0)]
    log.close()


def test_log_start_offset_above_log_end_restarts_log(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(client_batch(), 1)
    log.close()
    log = Log.open(tmp_path / "orders-0", LogConfig(), log_start_offset=50)
    assert (log.log_start_offset, log.log_end_offset) == (50, 50)
    assert [s.base_offset for s in log.segments] == [50]
    assert log.epoch_cache.entries() == []
    log.close()


def test_log_start_offset_from_checkpoint_is_kept(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(client_batch(), 1)
    log.close()
    log = Log.open(tmp_path / "orders-0", LogConfig(), log_start_offset=2)
    assert (log.log_start_offset, log.log_end_offset) == (2, 3)
    assert log.epoch_cache.entries() == [EpochEntry(1, 2)]
    log.close()


def test_closed_log_refuses_operations(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.close()
    with pytest.raises(Exception, match="closed"):
        log.append_as_leader(client_batch(), 0)
    with pytest.raises(Exception, match="closed"):
        log.read(0, 100)


def test_delete_removes_directory(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(client_batch(), 0)
    log.delete()
    assert not (tmp_path / "orders-0").exists()


# -- Kafka byte compatibility ----------------------------------------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """Independent zig-zag varint decoder (Kafka ByteUtils.readVarlong)."""
    raw, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos


def _kafka_decode_segment(path: Path) -> list[dict[str, object]]:
    """Read a segment file field by field from the v2 spec, independently of broker code."""
    data = path.read_bytes()
    batches = []
    pos = 0
    while pos < len(data):
        (base_offset, length, epoch, magic, crc, attributes, last_delta, base_ts, max_ts, pid,
         pepoch, base_seq, count) = struct.unpack_from(">qiibIhiqqqhii", data, pos)  # fmt: skip
        end = pos + 12 + length
        assert magic == 2
        assert crc == crc32c.crc32c(data[pos + 21 : end])
        records = []
        p = pos + 61
        for _ in range(count):
            size, p = _varint(data, p)
            record_end = p + size
            assert data[p] == 0  # record attributes
            ts_delta, p = _varint(data, p + 1)
            offset_delta, p = _varint(data, p)
            key_len, p = _varint(data, p)
            key = None if key_len < 0 else data[p : p + key_len]
            p += max(key_len, 0)
            value_len, p = _varint(data, p)
            value = None if value_len < 0 else data[p : p + value_len]
            p += max(value_len, 0)
            header_count, p = _varint(data, p)
            assert header_count == 0
            assert p == record_end
            records.append((base_offset + offset_delta, base_ts + ts_delta, key, value))
        assert p == end
        batches.append(
            {
                "base_offset": base_offset,
                "last_offset": base_offset + last_delta,
                "epoch": epoch,
                "attributes": attributes,
                "max_ts": max_ts,
                "producer": (pid, pepoch, base_seq),
                "records": records,
            }
        )
        pos = end
    return batches


def test_segment_files_are_kafka_v2_byte_compatible(tmp_path: Path) -> None:
    idempotent = encode_batch(
        [Record(b"a", b"1", 77), Record(None, b"2", 79)],
        producer_id=12345,
        producer_epoch=3,
        base_sequence=0,  # a new producer's first batch: the leader refuses anything else
    )
    log = open_log(tmp_path, segment_bytes=BATCH_SIZE + len(idempotent) + 1)
    log.append_as_leader(client_batch(3, ts=500), 0)
    log.append_as_leader(idempotent, 2)
    log.append_as_leader(client_batch(1, ts=900), 2)
    log.close()
    segments = sorted((tmp_path / "orders-0").glob("*.log"))
    assert [p.name for p in segments] == [f"{0:020d}.log", f"{5:020d}.log"]
    decoded = [b for p in segments for b in _kafka_decode_segment(p)]
    assert decoded == [
        {
            "base_offset": 0,
            "last_offset": 2,
            "epoch": 0,
            "attributes": 0,
            "max_ts": 502,
            "producer": (-1, -1, -1),
            "records": [
                (i, 500 + i, b"key-%d" % i, f"value-{i}".encode() + b"x" * 20) for i in range(3)
            ],
        },
        {
            "base_offset": 3,
            "last_offset": 4,
            "epoch": 2,
            "attributes": 0,
            "max_ts": 79,
            "producer": (12345, 3, 0),
            "records": [(3, 77, b"a", b"1"), (4, 79, None, b"2")],
        },
        {
            "base_offset": 5,
            "last_offset": 5,
            "epoch": 2,
            "attributes": 0,
            "max_ts": 900,
            "producer": (-1, -1, -1),
            "records": [(5, 900, b"key-0", b"value-0" + b"x" * 20)],
        },
    ]
    index = (tmp_path / "orders-0" / f"{0:020d}.index").read_bytes()
    assert len(index) % 8 == 0


# -- thread safety ---------------------------------------------------------------------------


def test_concurrent_reads_see_whole_contiguous_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=4 * BATCH_SIZE, retention_bytes=12 * BATCH_SIZE)
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def reader() -> None:
        try:
            while not stop.is_set():
                start = log.log_start_offset
                try:
                    found = log.read(start, 6 * BATCH_SIZE)
                except OffsetOutOfRangeError:
                    continue
                if found.records:
                    got = offsets(found.records)
                    assert got == list(range(got[0], got[0] + len(got)))
                    assert got[0] <= start <= got[-1]
                    reads[0] += 1
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        for i in range(300):
            log.append_as_leader(client_batch(), i // 50)
            if i % 7 == 0:
                log.delete_old_segments(high_watermark=log.log_end_offset, now_ms=0)
            if i % 40 == 39:
                log.truncate_to(log.log_end_offset - 4)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not errors, errors
    assert reads[0] > 0
    log.close()


def test_a_new_log_defers_its_directory_fsync_to_its_first_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creating thousands of partitions at once paid one directory fsync each: a directory
    made by the open holds nothing to lose, so only a reopened one is synced at open."""
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    log = open_log(tmp_path)
    directory = str(log.directory)
    assert directory not in synced
    log.flush()
    assert synced.count(directory) == 1
    log.close()
    synced.clear()
    open_log(tmp_path).close()
    assert directory in synced  # an existing log's recovery syncs its directory at open
