"""What Spark's executors make of a segment file: batch rows, decoded rows, damage reported."""

from __future__ import annotations

from pathlib import Path

from chaos.audit.segments import (
    SegmentTask,
    decode_segment,
    pack,
    record_digest,
    scan_segment,
)
from chaos.audit.testing import BrokerDataDir
from proto.log_config import LogConfig
from proto.record_batch import Record, scan_batches
from proto.topic_partition import TopicPartition

TP = TopicPartition("t", 0)


def _segments(tmp_path: Path) -> list[Path]:
    """Broker 5's log of t-0: 3 batches of 2 records, epochs 0, 0, 1; two segments."""
    d = BrokerDataDir(tmp_path / "b5", 5, LogConfig(segment_bytes=200))
    d.produce(TP, ["a", "b", "c", "d"], epoch=0, per_batch=2)
    d.produce(TP, ["e", None], epoch=1, per_batch=2)
    d.close()
    return sorted((tmp_path / "b5" / TP.dir_name).glob("*.log"))


def _task(path: Path, *, last: bool) -> SegmentTask:
    return SegmentTask(3, 5, int(path.stem), str(path), last, path.stat().st_size)


def test_scan_yields_one_row_per_batch(tmp_path: Path) -> None:
    first, second = _segments(tmp_path)
    rows = list(scan_segment(_task(first, last=False))) + list(
        scan_segment(_task(second, last=True))
    )
    # kind, pid, broker, segment, position, base, last, epoch, count, size, problem
    assert [(r[0], r[1], r[2], r[3], r[5], r[6], r[7], r[8], r[10]) for r in rows] == [
        ("batch", 3, 5, 0, 0, 1, 0, 2, None),
        ("batch", 3, 5, 0, 2, 3, 0, 2, None),
        ("batch", 3, 5, 4, 4, 5, 1, 2, None),
    ]
    assert rows[1][4] == rows[0][9]  # the second batch starts where the first ends


def test_decode_yields_records_of_sound_batches(tmp_path: Path) -> None:
    first, second = _segments(tmp_path)
    rows = list(decode_segment(_task(first, last=False))) + list(
        decode_segment(_task(second, last=True))
    )
    assert [(r[2], r[3], r[4], r[5], r[6], r[7], r[8]) for r in rows] == [
        (0, 0, 1, None, None, [0, 1], [b"a", b"b"]),
        (0, 2, 3, None, None, [2, 3], [b"c", b"d"]),
        (1, 4, 5, None, None, [4, 5], [b"e", None]),
    ]
    assert all(len(r[9]) == len(r[7]) for r in rows)


def test_a_flipped_byte_fails_the_crc_and_its_records_are_not_decoded(tmp_path: Path) -> None:
    first, _ = _segments(tmp_path)
    data = bytearray(first.read_bytes())
    batches = list(scan_batches(bytes(data)))
    data[batches[1].position + batches[1].header.size - 2] ^= 0x01
    first.write_bytes(bytes(data))
    rows = list(scan_segment(_task(first, last=False)))
    assert rows[0][10] is None
    assert rows[1][10] is not None
    assert rows[1][10].startswith("CRC mismatch")
    decoded = list(decode_segment(_task(first, last=False)))
    assert [r[3] for r in decoded] == [0]  # the damaged batch is left to the scan's report


def test_a_cut_tail_is_torn_in_the_last_segment_and_unframed_before_it(tmp_path: Path) -> None:
    first, _ = _segments(tmp_path)
    data = first.read_bytes()
    first.write_bytes(data[:-10])
    size = len(data) - 10
    *_, torn = scan_segment(_task(first, last=True))
    position = next(iter(scan_batches(data))).header.size
    assert torn[0] == "torn"
    assert (torn[4], torn[5], torn[9]) == (position, 2, size - position)
    assert "needs" in torn[10]  # the batch length asks for more bytes than remain
    *_, unframed = scan_segment(_task(first, last=False))
    assert unframed[0] == "unframed"


def test_pack_balances_bytes_over_at_most_the_bins_asked() -> None:
    tasks = [SegmentTask(0, 1, i, f"s{i}", False, size) for i, size in enumerate([9, 1, 1, 5, 4])]
    bins = pack(tasks, 2)
    assert sorted(sum(t.size for t in b) for b in bins) == [10, 10]
    assert sorted(t.base_offset for b in bins for t in b) == [0, 1, 2, 3, 4]
    assert len(pack(tasks, 10)) == 5
    assert pack([], 3) == []


def test_record_digest_tells_keys_timestamps_and_headers_apart() -> None:
    base = Record(key=None, value=b"v", timestamp=1)
    digests = {
        record_digest(r)
        for r in (
            base,
            base._replace(key=b"k"),
            base._replace(timestamp=2),
            base._replace(headers=(("h", b"1"),)),
        )
    }
    assert len(digests) == 4
    assert record_digest(base._replace(value=b"other")) == record_digest(base)  # value apart
