"""The sparse offset index: Kafka's 8-byte entry format, lookups, truncation, loading, and
entries that reach the file only when written (flush, close, roll)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from broker.log.offset_index import CorruptIndexError, IndexEntry, OffsetIndex

BASE = 1000


def make_index(tmp_path: Path, entries: list[tuple[int, int]]) -> OffsetIndex:
    index = OffsetIndex.create(tmp_path / "00000000000000001000.index", BASE)
    for offset, position in entries:
        index.append(offset, position)
    return index


def test_file_holds_big_endian_relative_entries(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1010, 4100), (1025, 8300)])
    index.write()
    assert index.path.read_bytes() == struct.pack(">iiii", 10, 4100, 25, 8300)
    assert index.size_in_bytes == 16
    assert len(index) == 2
    index.close()


def test_entries_are_pending_until_written(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1010, 4100), (1025, 8300)])
    assert index.path.read_bytes() == b""  # appending makes no system call
    assert index.pending == 2
    assert index.lookup(1030) == IndexEntry(1025, 8300)  # pending entries serve lookups
    index.flush()
    assert index.pending == 0
    assert index.path.read_bytes() == struct.pack(">iiii", 10, 4100, 25, 8300)
    index.append(1040, 12500)
    index.write()  # only the new entry is appended
    assert index.path.read_bytes() == struct.pack(">iiiiii", 10, 4100, 25, 8300, 40, 12500)
    index.write()  # nothing pending: nothing changes
    assert index.path.stat().st_size == 24
    index.close()


def test_close_writes_pending_entries_and_delete_drops_them(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1010, 4100)])
    index.close()
    assert index.path.read_bytes() == struct.pack(">ii", 10, 4100)
    index.flush()  # closed: nothing to do
    index.write()
    doomed = make_index(tmp_path, [(1010, 4100)])
    doomed.delete()
    assert not doomed.path.exists()


def test_lookup_finds_largest_entry_at_or_below(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1010, 4100), (1025, 8300), (1040, 12500)])
    assert index.lookup(999) == IndexEntry(BASE, 0)
    assert index.lookup(1009) == IndexEntry(BASE, 0)
    assert index.lookup(1010) == IndexEntry(1010, 4100)
    assert index.lookup(1024) == IndexEntry(1010, 4100)
    assert index.lookup(1025) == IndexEntry(1025, 8300)
    assert index.lookup(10**12) == IndexEntry(1040, 12500)
    assert index.last_entry() == IndexEntry(1040, 12500)
    index.close()


def test_empty_index_lookup(tmp_path: Path) -> None:
    index = make_index(tmp_path, [])
    assert index.lookup(5000) == IndexEntry(BASE, 0)
    assert index.last_entry() is None
    index.close()


def test_append_requires_strictly_increasing_entries(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1010, 4100)])
    with pytest.raises(ValueError, match="does not follow"):
        index.append(1010, 5000)
    with pytest.raises(ValueError, match="does not follow"):
        index.append(1011, 4100)
    with pytest.raises(ValueError, match="does not fit"):
        index.append(BASE + 2**31, 9000)
    with pytest.raises(ValueError, match="does not fit"):
        index.append(BASE - 1, 9000)
    assert index.entries() == [IndexEntry(1010, 4100)]
    index.close()


def test_truncate(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1010, 4100), (1025, 8300), (1040, 12500)])
    index.write()
    index.truncate_to(1026)
    assert index.entries() == [IndexEntry(1010, 4100), IndexEntry(1025, 8300)]
    index.truncate_to_position(8300)
    assert index.entries() == [IndexEntry(1010, 4100)]
    assert index.path.stat().st_size == 8
    index.append(1020, 6000)
    index.write()
    assert index.path.read_bytes() == struct.pack(">iiii", 10, 4100, 20, 6000)
    index.reset()
    assert index.entries() == []
    assert index.path.stat().st_size == 0
    index.close()


def test_truncate_of_pending_entries(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1010, 4100), (1025, 8300)])
    index.write()
    index.append(1040, 12500)
    index.append(1050, 16000)
    index.truncate_to(1045)  # drops a pending entry: the file is untouched
    assert index.path.stat().st_size == 16
    assert index.pending == 1
    index.truncate_to_position(8300)  # below the written ones: the file is cut
    assert index.path.read_bytes() == struct.pack(">ii", 10, 4100)
    assert index.pending == 0
    index.append(1030, 9000)
    index.close()
    assert index.path.read_bytes() == struct.pack(">iiii", 10, 4100, 30, 9000)


def test_load_round_trip(tmp_path: Path) -> None:
    make_index(tmp_path, [(1010, 4100), (1025, 8300)]).close()
    loaded = OffsetIndex.load(tmp_path / "00000000000000001000.index", BASE, log_size=9000)
    assert loaded.entries() == [IndexEntry(1010, 4100), IndexEntry(1025, 8300)]
    assert loaded.pending == 0
    loaded.append(1030, 8800)
    loaded.close()
    assert (tmp_path / "00000000000000001000.index").stat().st_size == 24


def test_load_accepts_an_index_missing_its_latest_entries(tmp_path: Path) -> None:
    # What a crash leaves when entries were still pending: a prefix of the entries, which
    # is a sparser but correct index.
    index = make_index(tmp_path, [(1010, 4100)])
    index.write()
    index.append(1025, 8300)  # pending when the "crash" comes
    copy = tmp_path / "copy" / index.path.name
    copy.parent.mkdir()
    copy.write_bytes(index.path.read_bytes())
    index.close()
    loaded = OffsetIndex.load(copy, BASE, log_size=9000)
    assert loaded.entries() == [IndexEntry(1010, 4100)]
    assert loaded.lookup(1030) == IndexEntry(1010, 4100)
    loaded.close()


@pytest.mark.parametrize(
    ("content", "log_size", "problem"),
    [
        (struct.pack(">ii", 10, 4100) + b"\x00\x01", 9000, "not a multiple of 8"),
        (struct.pack(">iiii", 10, 4100, 10, 5000), 9000, "does not increase"),
        (struct.pack(">iiii", 10, 4100, 20, 4000), 9000, "does not increase"),
        (struct.pack(">ii", -1, 4100), 9000, "does not increase"),
        (struct.pack(">ii", 10, 9000), 9000, "past the end of the log"),
    ],
)
def test_load_rejects_corrupt_files(
    tmp_path: Path, content: bytes, log_size: int, problem: str
) -> None:
    path = tmp_path / "00000000000000001000.index"
    path.write_bytes(content)
    with pytest.raises(CorruptIndexError, match=problem):
        OffsetIndex.load(path, BASE, log_size)


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CorruptIndexError, match="missing"):
        OffsetIndex.load(tmp_path / "nope.index", BASE, 100)


def test_delete_removes_file(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1010, 4100)])
    index.delete()
    assert not index.path.exists()
    index.close()  # idempotent
