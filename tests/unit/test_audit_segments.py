"""What the audit's map tasks make of a segment file: its batches as columns, damage reported."""

from __future__ import annotations

from pathlib import Path

from chaos.audit.segments import SegmentTask, map_file, pack, scan_segment
from chaos.audit.testing import BrokerDataDir
from proto.config.log_config import LogConfig
from proto.records.record_batch import scan_batches
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
    return SegmentTask(3, int(path.stem), str(path), last, path.stat().st_size)


def test_a_scan_has_one_row_per_batch(tmp_path: Path) -> None:
    first, second = _segments(tmp_path)
    a, b = scan_segment(_task(first, last=False)), scan_segment(_task(second, last=True))
    assert a.base_offset.tolist() + b.base_offset.tolist() == [0, 2, 4]
    assert a.last_offset.tolist() + b.last_offset.tolist() == [1, 3, 5]
    assert a.epoch.tolist() + b.epoch.tolist() == [0, 0, 1]
    assert a.record_count.tolist() + b.record_count.tolist() == [2, 2, 2]
    assert a.position.tolist()[1] == a.size.tolist()[0]  # the second starts where the first ends
    assert not a.problems
    assert a.stop is None
    assert b.stop is None
    assert a.valid().all()


def test_a_flipped_byte_fails_the_crc_and_the_batch_is_not_valid(tmp_path: Path) -> None:
    first, _ = _segments(tmp_path)
    data = bytearray(first.read_bytes())
    batches = list(scan_batches(bytes(data)))
    data[batches[1].position + batches[1].header.size - 2] ^= 0x01
    first.write_bytes(bytes(data))
    scan = scan_segment(_task(first, last=False))
    assert list(scan.problems) == [1]
    assert scan.problems[1].startswith("CRC mismatch")
    assert scan.valid().tolist() == [True, False]


def test_a_cut_tail_is_torn_in_the_last_segment_and_unframed_before_it(tmp_path: Path) -> None:
    first, _ = _segments(tmp_path)
    data = first.read_bytes()
    first.write_bytes(data[:-10])
    size = len(data) - 10
    torn = scan_segment(_task(first, last=True)).stop
    position = next(iter(scan_batches(data))).header.size
    assert torn is not None
    assert torn.kind == "torn"
    assert (torn.position, torn.next_offset, torn.remaining) == (position, 2, size - position)
    assert "needs" in torn.problem  # the batch length asks for more bytes than remain
    unframed = scan_segment(_task(first, last=False)).stop
    assert unframed is not None
    assert unframed.kind == "unframed"


def test_an_empty_segment_has_no_batch(tmp_path: Path) -> None:
    empty = tmp_path / f"{7:020d}.log"
    empty.write_bytes(b"")
    scan = scan_segment(_task(empty, last=True))
    assert len(scan) == 0
    assert scan.stop is None


def test_pack_balances_sizes_over_at_most_the_bins_asked() -> None:
    tasks = [SegmentTask(0, i, f"s{i}", False, size) for i, size in enumerate([9, 1, 1, 5, 4])]
    bins = pack(tasks, 2, lambda t: t.size)
    assert sorted(sum(t.size for t in b) for b in bins) == [10, 10]
    assert sorted(t.base_offset for b in bins for t in b) == [0, 1, 2, 3, 4]
    assert len(pack(tasks, 10, lambda t: t.size)) == 5
    assert pack([], 3, lambda t: 0) == []


def test_map_file_maps_a_file_and_an_empty_one_is_no_bytes(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(bytes(range(100)))
    (tmp_path / "empty").write_bytes(b"")
    assert map_file(str(path))[10:20] == bytes(range(10, 20))
    assert map_file(str(tmp_path / "empty")) == b""
