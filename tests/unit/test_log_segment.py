"""LogSegment: appends and the index rule, reads, truncation, recovery, timestamps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import broker.log.log_segment as log_segment
from broker.log.log_segment import LogSegment, SegmentClosedError
from broker.log.offset_index import IndexEntry
from proto.records.record_batch import BatchHeader, Record, encode_batch, validate_batches

INTERVAL = 200


def batch(base: int, count: int, *, epoch: int = 0, ts: int = 1000, size: int = 20) -> bytes:
    return encode_batch(
        [Record(b"k%d" % i, b"v" * size, ts + i) for i in range(count)],
        base_offset=base,
        partition_leader_epoch=epoch,
    )


def append(segment: LogSegment, data: bytes) -> list[BatchHeader]:
    headers = validate_batches(data)
    segment.append(data, headers)
    return headers


def fill(
    segment: LogSegment, n: int, *, per_batch: int = 3, epochs: list[int] | None = None
) -> bytes:
    """Append n batches one by one; return all bytes written."""
    offset = segment.base_offset
    written = b""
    for i in range(n):
        data = batch(offset, per_batch, epoch=epochs[i] if epochs else 0, ts=1000 + offset)
        append(segment, data)
        written += data
        offset += per_batch
    return written


def expected_index(data: bytes, interval: int) -> list[IndexEntry]:
    """Kafka's rule, from the spec: a batch more than `interval` bytes after the last
    indexed position gets an entry (its last offset -> its position)."""
    entries = []
    last = 0
    position = 0
    for header in validate_batches(data):
        if position - last > interval:
            entries.append(IndexEntry(header.last_offset, position))
            last = position
        position += header.size
    return entries


@pytest.fixture
def segment(tmp_path: Path) -> LogSegment:
    return LogSegment.create(tmp_path, 100, index_interval_bytes=INTERVAL)


def test_create_names_files_kafka_style(tmp_path: Path, segment: LogSegment) -> None:
    assert segment.log_path == tmp_path / "00000000000000000100.log"
    assert segment.index_path == tmp_path / "00000000000000000100.index"
    assert segment.is_empty
    assert segment.next_offset == 100


def test_append_writes_bytes_and_index_entries(segment: LogSegment) -> None:
    written = fill(segment, 20)
    assert segment.log_path.read_bytes() == written
    assert segment.size == len(written)
    assert segment.next_offset == 160
    entries = segment.index.entries()
    assert entries == expected_index(written, INTERVAL)
    assert len(entries) >= 3


def test_multi_batch_append_indexes_per_batch(tmp_path: Path) -> None:
    segment = LogSegment.create(tmp_path, 0, index_interval_bytes=INTERVAL)
    data = b"".join(batch(i * 3, 3) for i in range(20))
    append(segment, data)
    assert segment.index.entries() == expected_index(data, INTERVAL)


def test_translate_offset(segment: LogSegment) -> None:
    fill(segment, 20)
    for offset in range(100, 160):
        found = segment.translate_offset(offset)
        assert found is not None
        position, header = found
        assert header.base_offset <= offset <= header.last_offset
        assert position == (offset - 100) // 3 * len(batch(0, 3))
    assert segment.translate_offset(160) is None
    assert segment.translate_offset(50) is not None  # below the base: the first batch


def test_batches_appended_last_translate_as_the_index_and_the_headers_on_disk_say(
    tmp_path: Path,
) -> None:
    """The recent-batch shortcut of translate_offset answers exactly as the slow path (a
    reopened segment has no recent batches), after appends of one and many batches, a
    truncation and more appends, for every offset, with and without a position bound."""
    live = LogSegment.create(tmp_path, 0, index_interval_bytes=INTERVAL)
    fill(live, 100, per_batch=2)  # more than the 64 remembered
    append(live, b"".join(batch(200 + 5 * i, 5) for i in range(10)))
    live.truncate_to(223)
    append(live, batch(live.next_offset, 4))
    fill_from = live.next_offset
    for i in range(3):
        append(live, batch(fill_from + 3 * i, 3))
    live.flush()
    reopened = LogSegment.open(tmp_path, 0, index_interval_bytes=INTERVAL)
    sizes = [h.size for h in validate_batches(live.log_path.read_bytes())]
    boundaries = [sum(sizes[:n]) for n in (len(sizes) - 1, len(sizes) - 30, len(sizes) // 2)]
    for offset in range(-1, live.next_offset + 2):
        for bound in (None, *boundaries):
            assert live.translate_offset(offset, bound) == reopened.translate_offset(
                offset, bound
            ), (offset, bound)
    reopened.close()


def test_read_whole_batches(segment: LogSegment) -> None:
    written = fill(segment, 10)
    size = len(batch(0, 3))
    found = segment.read(104, 10**6, max_position=segment.size)
    assert found.records == written[size:]  # from the batch holding 104
    assert found.next_offset == 130
    assert found.end_of_segment


def test_read_respects_max_bytes(segment: LogSegment) -> None:
    written = fill(segment, 10)
    size = len(batch(0, 3))
    found = segment.read(100, 2 * size + size // 2, max_position=segment.size)
    assert found.records == written[: 2 * size]
    assert found.next_offset == 106
    assert not found.end_of_segment


def test_read_returns_one_oversized_batch_only_with_min_one_batch(segment: LogSegment) -> None:
    written = fill(segment, 3)
    size = len(batch(0, 3))
    assert segment.read(100, 10, max_position=segment.size).records == written[:size]
    empty = segment.read(100, 10, max_position=segment.size, min_one_batch=False)
    assert empty.records == b""
    assert not empty.end_of_segment


def test_read_stops_before_max_offset(segment: LogSegment) -> None:
    written = fill(segment, 10)
    size = len(batch(0, 3))
    found = segment.read(100, 10**6, max_position=segment.size, max_offset=108)
    assert found.records == written[: 2 * size]  # batch 106..108 reaches max_offset
    assert not found.end_of_segment
    assert segment.read(106, 10**6, max_position=segment.size, max_offset=108).records == b""


def test_read_stops_at_max_position(segment: LogSegment) -> None:
    written = fill(segment, 10)
    size = len(batch(0, 3))
    found = segment.read(100, 10**6, max_position=4 * size)
    assert found.records == written[: 4 * size]
    assert found.end_of_segment
    assert segment.read(113, 10**6, max_position=4 * size) == (b"", None, True)


def test_truncate_to_batch_boundary(segment: LogSegment) -> None:
    written = fill(segment, 20)
    size = len(batch(0, 3))
    assert segment.truncate_to(130) == len(written) - 10 * size
    assert segment.size == 10 * size
    assert segment.next_offset == 130
    assert segment.log_path.read_bytes() == written[: 10 * size]
    assert segment.index.entries() == expected_index(written[: 10 * size], INTERVAL)
    fill_more = batch(130, 3)
    append(segment, fill_more)
    assert segment.next_offset == 133
    assert segment.truncate_to(500) == 0


def test_truncate_inside_batch_removes_whole_batch(segment: LogSegment) -> None:
    fill(segment, 5)
    segment.truncate_to(104)
    assert segment.next_offset == 103


def test_recover_valid_segment_rebuilds_identical_index(
    tmp_path: Path, segment: LogSegment
) -> None:
    written = fill(segment, 30, epochs=[0] * 10 + [2] * 10 + [5] * 10)
    live_index = segment.index.path.read_bytes()
    segment.close()
    os.remove(tmp_path / "00000000000000000100.index")
    reopened = LogSegment.open(tmp_path, 100, index_interval_bytes=INTERVAL)
    valid_at_open = reopened.index_valid
    assert not valid_at_open
    result = reopened.recover()
    assert result.truncated_bytes == 0
    assert result.valid_bytes == len(written)
    assert result.next_offset == 190
    assert result.batch_count == 30
    assert result.epoch_starts == [(0, 100), (2, 130), (5, 160)]
    assert result.last_epoch == 5
    assert result.stop_reason is None
    assert reopened.index_valid
    assert reopened.index.path.read_bytes() == live_index


def test_recover_truncates_torn_tail(tmp_path: Path, segment: LogSegment) -> None:
    written = fill(segment, 10)
    size = len(batch(0, 3))
    segment.close()
    path = tmp_path / "00000000000000000100.log"
    path.write_bytes(written[: 7 * size + 30])
    reopened = LogSegment.open(tmp_path, 100, index_interval_bytes=INTERVAL)
    result = reopened.recover()
    assert result.truncated_bytes == 30
    assert result.next_offset == 121
    assert result.stop_reason == f"batch at position {7 * size}: truncated header (30 of 61 bytes)"
    assert path.read_bytes() == written[: 7 * size]


@pytest.mark.parametrize("chunk", [10, 100, 4 * 1024 * 1024])
def test_recover_stops_at_corrupt_batch(
    tmp_path: Path, segment: LogSegment, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(log_segment, "_RECOVERY_CHUNK", chunk)
    written = bytearray(fill(segment, 10))
    size = len(batch(0, 3))
    written[4 * size + 70] ^= 0x40
    segment.close()
    (tmp_path / "00000000000000000100.log").write_bytes(written)
    reopened = LogSegment.open(tmp_path, 100, index_interval_bytes=INTERVAL)
    result = reopened.recover()
    assert result.valid_bytes == 4 * size
    assert result.next_offset == 112
    assert result.stop_reason is not None
    assert result.stop_reason.startswith(f"batch at position {4 * size}: CRC mismatch")


def test_recover_checks_offset_continuity_and_epochs(tmp_path: Path) -> None:
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=INTERVAL)
    data = batch(0, 3, epoch=2) + batch(3, 3, epoch=3) + batch(7, 3, epoch=3)
    seg.append(data, validate_batches(data))
    result = seg.recover()
    assert result.next_offset == 6
    assert result.stop_reason is not None
    assert "base offset 7, expected 6" in result.stop_reason

    seg.truncate_to(0)
    data = batch(0, 3, epoch=2) + batch(3, 3, epoch=1)
    seg.append(data, validate_batches(data))
    result = seg.recover()
    assert result.next_offset == 3
    assert "leader epoch 1 is below the previous batch's 2" in str(result.stop_reason)

    assert seg.recover(previous_epoch=3).next_offset == 0  # below the previous segment's epoch


def test_recover_reads_batches_larger_than_the_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_segment, "_RECOVERY_CHUNK", 64)
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=INTERVAL)
    data = batch(0, 2, size=500) + batch(2, 1) + batch(3, 4, size=1000)
    seg.append(data, validate_batches(data))
    result = seg.recover()
    assert (result.valid_bytes, result.next_offset, result.stop_reason) == (len(data), 7, None)
    assert seg.index.entries() == expected_index(data, INTERVAL)


def test_recover_stops_where_positions_outgrow_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=INTERVAL)
    data = batch(0, 3) + batch(3, 3) + batch(6, 3)
    seg.append(data, validate_batches(data))
    monkeypatch.setattr(log_segment, "_INT32_MAX", 2 * len(batch(0, 3)) + 5)  # "2 GiB"
    result = seg.recover()
    assert result.next_offset == 6
    assert "beyond what its index can address" in str(result.stop_reason)


def test_open_without_recovery_loads_next_offset(tmp_path: Path, segment: LogSegment) -> None:
    fill(segment, 25)
    segment.close()
    reopened = LogSegment.open(tmp_path, 100, index_interval_bytes=INTERVAL)
    assert reopened.index_valid
    assert reopened.load_next_offset() == 175
    last = reopened.last_batch()
    assert last is not None
    assert last[1].base_offset == 172


def test_corrupt_index_is_replaced(tmp_path: Path, segment: LogSegment) -> None:
    fill(segment, 25)
    segment.close()
    (tmp_path / "00000000000000000100.index").write_bytes(b"\x00\x00\x00\x05\x7f\x00\x00\x00")
    reopened = LogSegment.open(tmp_path, 100, index_interval_bytes=INTERVAL)
    assert not reopened.index_valid
    assert reopened.index.entries() == []


@pytest.mark.parametrize("chunk", [61, 70, 1000])
def test_header_scans_across_chunks(
    segment: LogSegment, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(log_segment, "_HEADER_SCAN_CHUNK", chunk)
    written = fill(segment, 12)
    assert [h.base_offset for _, h in segment.batch_headers()] == list(range(100, 136, 3))
    assert (
        segment.read(130, 10**6, max_position=segment.size).records
        == written[-2 * len(batch(0, 3)) :]
    )


def test_max_timestamp_and_lookup_by_timestamp(tmp_path: Path, segment: LogSegment) -> None:
    fill(segment, 10)  # record at offset o has timestamp 1000 + o
    assert segment.max_timestamp() == 1129
    segment.close()
    reopened = LogSegment.open(tmp_path, 100, index_interval_bytes=INTERVAL)
    assert reopened.max_timestamp() == 1129  # scanned lazily from the headers
    append(reopened, batch(130, 1, ts=5000))
    assert reopened.max_timestamp() == 5000
    size = reopened.size
    assert reopened.find_offset_by_timestamp(1105, 100, size) == (1105, 105, 0)
    assert reopened.find_offset_by_timestamp(1105, 107, size) == (1107, 107, 0)
    assert reopened.find_offset_by_timestamp(4000, 100, size) == (5000, 130, 0)
    assert reopened.find_offset_by_timestamp(6000, 100, size) is None
    assert reopened.find_max_timestamp(100, size) == (5000, 130, 0)
    assert reopened.find_max_timestamp(131, size) is None
    assert reopened.find_max_timestamp(100, 10 * len(batch(0, 3))) == (1129, 129, 0)
    reopened.truncate_to(120)  # removes the batch 118..120 and everything after
    assert reopened.max_timestamp() == 1117


def test_closed_segment_refuses_reads_and_appends(segment: LogSegment) -> None:
    fill(segment, 3)
    segment.close()
    with pytest.raises(SegmentClosedError):
        segment.read(100, 1000, max_position=100)
    data = batch(109, 1)
    with pytest.raises(SegmentClosedError):
        segment.append(data, validate_batches(data))


def test_stamping_append_writes_the_headers_fields(segment: LogSegment) -> None:
    client = batch(0, 2, epoch=-1) + batch(0, 3, epoch=-1)  # as a producer sends them
    first, second = validate_batches(client)
    headers = [first.stamped(100, 4), second.stamped(102, 4)]
    segment.append(client, headers, stamp=True)
    written = segment.log_path.read_bytes()
    assert validate_batches(written) == headers
    assert written == batch(100, 2, epoch=4) + batch(102, 3, epoch=4)
    assert segment.next_offset == 105
    with pytest.raises(ValueError, match="do not add up"):
        segment.append(client + b"\x00", headers, stamp=True)
    assert segment.size == len(written)


def test_close_waits_for_readers_of_the_descriptor(segment: LogSegment) -> None:
    fill(segment, 3)
    handle = segment._file
    fd = handle._acquire()  # a reader in the middle of a pread
    segment.delete()
    assert not segment.log_path.exists()
    assert os.pread(fd, 8, 0) == b"\x00" * 7 + b"\x64"  # still our file: base offset 100
    handle._release()
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(fd)
