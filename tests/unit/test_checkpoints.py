"""Checkpoint files: Kafka's exact text formats, strict parsing, crash-safe atomic writes."""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log import checkpoints
from broker.log.checkpoints import (
    BrokerMetadata,
    CheckpointError,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    atomic_write_text,
    read_broker_metadata,
    read_meta_properties,
    write_meta_properties,
)
from broker.log.epoch_entry import EpochEntry
from proto.topic_partition import TopicPartition

REPO_ROOT = Path(__file__).resolve().parents[2]

# -- file names ---------------------------------------------------------------------------


def test_file_names_are_kafkas() -> None:
    assert checkpoints.REPLICATION_OFFSET_CHECKPOINT == "replication-offset-checkpoint"
    assert checkpoints.RECOVERY_POINT_OFFSET_CHECKPOINT == "recovery-point-offset-checkpoint"
    assert checkpoints.LOG_START_OFFSET_CHECKPOINT == "log-start-offset-checkpoint"
    assert checkpoints.LEADER_EPOCH_CHECKPOINT == "leader-epoch-checkpoint"
    assert checkpoints.META_PROPERTIES == "meta.properties"


# -- exact formats ------------------------------------------------------------------------


def test_offset_checkpoint_bytes_are_sorted_by_topic_then_numeric_partition(
    tmp_path: Path,
) -> None:
    path = tmp_path / checkpoints.REPLICATION_OFFSET_CHECKPOINT
    OffsetCheckpointFile(path).write(
        {
            TopicPartition("orders", 10): 7,
            TopicPartition("orders", 2): 987,
            TopicPartition("audit-log", 0): 0,
            TopicPartition("orders", 0): 1234,
        }
    )
    assert path.read_bytes() == b"0\n4\naudit-log 0 0\norders 0 1234\norders 2 987\norders 10 7\n"


def test_empty_offset_checkpoint_has_version_and_zero_count(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    OffsetCheckpointFile(path).write({})
    assert path.read_bytes() == b"0\n0\n"
    assert OffsetCheckpointFile(path).read() == {}


def test_leader_epoch_checkpoint_bytes_match_the_reference_example(tmp_path: Path) -> None:
    path = tmp_path / checkpoints.LEADER_EPOCH_CHECKPOINT
    LeaderEpochCheckpointFile(path).write([EpochEntry(0, 0), EpochEntry(1, 57)])
    assert path.read_bytes() == b"0\n2\n0 0\n1 57\n"
    assert LeaderEpochCheckpointFile(path).read() == [EpochEntry(0, 0), EpochEntry(1, 57)]


def test_empty_leader_epoch_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "lec"
    LeaderEpochCheckpointFile(path).write([])
    assert path.read_bytes() == b"0\n0\n"
    assert LeaderEpochCheckpointFile(path).read() == []


# -- reading ------------------------------------------------------------------------------


def test_missing_and_empty_files_read_as_no_entries(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    assert OffsetCheckpointFile(missing).read() == {}
    assert LeaderEpochCheckpointFile(missing).read() == []
    assert not missing.exists()  # reading creates nothing
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert OffsetCheckpointFile(empty).read() == {}
    assert LeaderEpochCheckpointFile(empty).read() == []


def test_reader_accepts_what_javas_reader_accepts(tmp_path: Path) -> None:
    # CRLF line ends, runs of whitespace between fields, no newline after the last line.
    path = tmp_path / "cp"
    path.write_bytes(b"0\r\n2\r\nt  0\t5 \r\nu 1 6")
    assert OffsetCheckpointFile(path).read() == {
        TopicPartition("t", 0): 5,
        TopicPartition("u", 1): 6,
    }
    path.write_bytes(b"0\n1\n3\t\t99\n")
    assert LeaderEpochCheckpointFile(path).read() == [EpochEntry(3, 99)]


def test_epoch_file_keeps_file_order(tmp_path: Path) -> None:
    # Ordering is the cache's business (it re-assigns on load, as Kafka does).
    path = tmp_path / "lec"
    path.write_bytes(b"0\n2\n5 10\n3 20\n")
    assert LeaderEpochCheckpointFile(path).read() == [EpochEntry(5, 10), EpochEntry(3, 20)]


_MALFORMED_OFFSETS: list[tuple[bytes, int | None, str]] = [
    (b"1\n0\n", 1, "unknown version 1"),
    (b"zero\n0\n", 1, "malformed version line"),
    (b" 0\n0\n", 1, "malformed version line"),
    (b"0\n", 2, "missing the entry count line"),
    (b"0\ntwo\n", 2, "entry count is not an integer"),
    (b"0\n-1\n", 2, "negative entry count"),
    (b"0\n2\nt 0 1\n", 4, "count line says 2 entries but found 1"),
    (b"0\n1\nt 0 1\nt 1 2\n", 4, "count line says 1 entries but found 2"),
    (b"0\n0\n\n", 3, "count line says 0 entries but found 1"),
    (b"0\n1\nt 0\n", 3, "expected 'topic partition offset'"),
    (b"0\n1\nt 0 1 2\n", 3, "expected 'topic partition offset'"),
    (b"0\n1\n\n", 3, "expected 'topic partition offset'"),
    (b"0\n2\nt 0 1\nt x 2\n", 4, "partition is not an integer"),
    (b"0\n1\nt 0 1.5\n", 3, "offset is not an integer"),
    (b"0\n1\nt 0 1_000\n", 3, "offset is not an integer"),
    (b"0\n1\nt 0 +1\n", 3, "offset is not an integer"),
    (b"0\n1\nt 0 -1\n", 3, "negative offset"),
    (b"0\n1\nt -1 0\n", 3, "negative partition"),
    (b"0\n1\nt 2147483648 0\n", 3, "partition out of range"),
    (b"0\n1\nt 0 9223372036854775808\n", 3, "offset out of range"),
    (b"0\n2\nt 0 1\nt 0 2\n", 4, "t-0 listed twice"),
    (b"0\n1\nt\xff 0 1\n", 3, "not valid UTF-8"),
]


@pytest.mark.parametrize(("content", "line", "reason"), _MALFORMED_OFFSETS)
def test_malformed_offset_checkpoint_names_file_and_line(
    tmp_path: Path, content: bytes, line: int | None, reason: str
) -> None:
    path = tmp_path / checkpoints.RECOVERY_POINT_OFFSET_CHECKPOINT
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        OffsetCheckpointFile(path).read()
    error = info.value
    assert reason in str(error)
    assert str(path) in str(error)
    assert error.path == path
    assert error.line_number == line
    assert f"line {line}" in str(error)


_MALFORMED_EPOCHS: list[tuple[bytes, int, str]] = [
    (b"7\n0\n", 1, "unknown version 7"),
    (b"0\n1\n1\n", 3, "expected 'epoch startOffset'"),
    (b"0\n1\n1 2 3\n", 3, "expected 'epoch startOffset'"),
    (b"0\n2\n0 0\n1 x\n", 4, "start offset is not an integer"),
    (b"0\n1\n-1 5\n", 3, "negative epoch"),
    (b"0\n1\n2147483648 0\n", 3, "epoch out of range"),
    (b"0\n3\n0 0\n1 5\n", 5, "count line says 3 entries but found 2"),
]


@pytest.mark.parametrize(("content", "line", "reason"), _MALFORMED_EPOCHS)
def test_malformed_leader_epoch_checkpoint_names_file_and_line(
    tmp_path: Path, content: bytes, line: int, reason: str
) -> None:
    path = tmp_path / checkpoints.LEADER_EPOCH_CHECKPOINT
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=f"line {line}: .*{reason}") as info:
        LeaderEpochCheckpointFile(path).read()
    assert info.value.line_number == line


def test_checkpoint_error_is_an_os_error_and_pickles(tmp_path: Path) -> None:
    error = CheckpointError(tmp_path / "cp", "bad", 3)
    assert isinstance(error, OSError)
    assert str(error) == f"corrupt checkpoint file {tmp_path / 'cp'}, line 3: bad"
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.path, copy.reason, copy.line_number, str(copy)) == (
        error.path,
        "bad",
        3,
        str(error),
    )


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=60) | st.text(alphabet="0123 \n\r\t-x", max_size=30).map(str.encode))
def test_any_content_reads_or_raises_checkpoint_error(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cp"
        path.write_bytes(content)
        for reader in (OffsetCheckpointFile(path), LeaderEpochCheckpointFile(path)):
            with contextlib.suppress(CheckpointError):
                reader.read()


# -- round trips --------------------------------------------------------------------------

_topics = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
    min_size=1,
    max_size=12,
)
_partitions = st.builds(TopicPartition, _topics, st.integers(0, 2**31 - 1))


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(_partitions, st.integers(0, 2**63 - 1), max_size=20))
def test_offset_checkpoint_round_trip(offsets: dict[TopicPartition, int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = OffsetCheckpointFile(Path(tmp) / "cp")
        checkpoint.write(offsets)
        assert checkpoint.read() == offsets


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.builds(EpochEntry, st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1)), max_size=20
    )
)
def test_leader_epoch_checkpoint_round_trip(entries: list[EpochEntry]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = LeaderEpochCheckpointFile(Path(tmp) / "lec")
        checkpoint.write(entries)
        assert checkpoint.read() == entries


def test_rewrite_replaces_all_previous_entries(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / "cp")
    checkpoint.write({TopicPartition("a", 0): 1, TopicPartition("b", 0): 2})
    checkpoint.write({TopicPartition("c", 3): 4})
    assert checkpoint.read() == {TopicPartition("c", 3): 4}


@pytest.mark.parametrize(
    "offsets",
    [
        {TopicPartition("has space", 0): 1},
        {TopicPartition("tab\t", 0): 1},
        {TopicPartition("", 0): 1},
        {TopicPartition("t", -1): 1},
        {TopicPartition("t", 0): -1},
    ],
)
def test_unwritable_offsets_raise_value_error_and_leave_the_file(
    tmp_path: Path, offsets: dict[TopicPartition, int]
) -> None:
    path = tmp_path / "cp"
    OffsetCheckpointFile(path).write({TopicPartition("t", 0): 5})
    with pytest.raises(ValueError, match="checkpoint"):
        OffsetCheckpointFile(path).write(offsets)
    assert path.read_bytes() == b"0\n1\nt 0 5\n"


@pytest.mark.parametrize("entry", [EpochEntry(-1, 0), EpochEntry(0, -1), EpochEntry(2**31, 0)])
def test_unwritable_epoch_entries_raise_value_error(tmp_path: Path, entry: EpochEntry) -> None:
    path = tmp_path / "lec"
    with pytest.raises(ValueError, match="invalid leader epoch entry"):
        LeaderEpochCheckpointFile(path).write([EpochEntry(0, 0), entry])
    assert not path.exists()


# -- atomic write and crashes -------------------------------------------------------------


def test_atomic_write_creates_and_replaces(tmp_path: Path) -> None:
    path = tmp_path / "f"
    atomic_write_text(path, "first\n")
    atomic_write_text(path, "zweite Zeile ü\n")
    assert path.read_bytes() == "zweite Zeile ü\n".encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]  # no .tmp left behind


def test_atomic_write_fsyncs_file_before_rename_and_directory_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / checkpoints.REPLICATION_OFFSET_CHECKPOINT
    events: list[tuple[str, ...]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def recording_fsync(fd: int) -> None:
        st_ = os.fstat(fd)
        kind = "dir" if stat.S_ISDIR(st_.st_mode) else "file"
        events.append(("fsync", kind, str(st_.st_ino)))
        real_fsync(fd)

    def recording_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        events.append(("replace", Path(src).name, Path(dst).name, str(os.stat(src).st_ino)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "replace", recording_replace)
    OffsetCheckpointFile(path).write({TopicPartition("t", 0): 1})

    tmp_inode = events[1][3]
    assert events == [
        ("fsync", "file", tmp_inode),
        ("replace", f"{path.name}.tmp", path.name, tmp_inode),
        ("fsync", "dir", str(tmp_path.stat().st_ino)),
    ]


def test_failed_rename_keeps_old_content_and_removes_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / checkpoints.REPLICATION_OFFSET_CHECKPOINT
    checkpoint = OffsetCheckpointFile(path)
    checkpoint.write({TopicPartition("t", 0): 1})
    tmp_seen: list[bytes] = []

    def failing_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        tmp_seen.append(Path(src).read_bytes())  # the new content was fully written ...
        raise OSError(5, "simulated I/O error")  # ... but the rename never happened

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="simulated"):
        checkpoint.write({TopicPartition("t", 0): 2})
    monkeypatch.undo()

    assert tmp_seen == [b"0\n1\nt 0 2\n"]
    assert path.read_bytes() == b"0\n1\nt 0 1\n"
    assert checkpoint.read() == {TopicPartition("t", 0): 1}
    assert not (tmp_path / f"{path.name}.tmp").exists()


def test_failed_fsync_keeps_old_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "lec"
    LeaderEpochCheckpointFile(path).write([EpochEntry(0, 0)])

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "simulated fsync failure")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="simulated fsync failure"):
        LeaderEpochCheckpointFile(path).write([EpochEntry(0, 0), EpochEntry(1, 9)])
    monkeypatch.undo()
    assert path.read_bytes() == b"0\n1\n0 0\n"


def test_crash_between_write_and_rename_leaves_old_file_and_stale_tmp_is_ignored(
    tmp_path: Path,
) -> None:
    # A real crash: the writing process dies (os._exit, no cleanup, no finally) right before
    # the rename, after the new content is fully in <path>.tmp.
    path = tmp_path / checkpoints.REPLICATION_OFFSET_CHECKPOINT
    OffsetCheckpointFile(path).write({TopicPartition("t", 0): 1})
    script = textwrap.dedent(
        f"""
        import os
        from pathlib import Path
        from broker.log.checkpoints import OffsetCheckpointFile
        from proto.topic_partition import TopicPartition

        os.replace = lambda src, dst: os._exit(17)
        OffsetCheckpointFile(Path({str(path)!r})).write({{TopicPartition("t", 0): 2}})
        """
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, check=False)
    assert result.returncode == 17

    tmp = tmp_path / f"{path.name}.tmp"
    assert tmp.read_bytes() == b"0\n1\nt 0 2\n"  # the crash left the new content here ...
    assert path.read_bytes() == b"0\n1\nt 0 1\n"  # ... and the old file whole
    assert OffsetCheckpointFile(path).read() == {TopicPartition("t", 0): 1}

    # A torn leftover from an even earlier crash is just as invisible, and the next write
    # replaces it.
    tmp.write_bytes(b"0\n3\nt 0")
    assert OffsetCheckpointFile(path).read() == {TopicPartition("t", 0): 1}
    OffsetCheckpointFile(path).write({TopicPartition("t", 0): 3})
    assert path.read_bytes() == b"0\n1\nt 0 3\n"
    assert not tmp.exists()


# -- meta.properties ----------------------------------------------------------------------


def test_meta_properties_round_trip_in_kafkas_layout(tmp_path: Path) -> None:
    write_meta_properties(tmp_path, 3)
    lines = (tmp_path / "meta.properties").read_text().split("\n")
    assert lines[0] == "#"
    assert re.fullmatch(r"#\w{3} \w{3} \d\d \d\d:\d\d:\d\d UTC \d{4}", lines[1])  # Java's Date
    assert lines[2:] == ["version=0", "broker.id=3", ""]
    assert read_meta_properties(tmp_path) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.properties"]


def test_meta_properties_with_the_cluster_id(tmp_path: Path) -> None:
    write_meta_properties(tmp_path, 3, "kN3pVvD8QpqFSYt1OXeVHQ")
    lines = (tmp_path / "meta.properties").read_text().split("\n")
    assert lines[2:] == ["version=0", "broker.id=3", "cluster.id=kN3pVvD8QpqFSYt1OXeVHQ", ""]
    assert read_broker_metadata(tmp_path) == BrokerMetadata(3, "kN3pVvD8QpqFSYt1OXeVHQ")
    with pytest.raises(ValueError, match="cluster id"):
        write_meta_properties(tmp_path, 3, "a\nbroker.id=4")
    assert read_broker_metadata(tmp_path) == BrokerMetadata(3, "kN3pVvD8QpqFSYt1OXeVHQ")
    (tmp_path / "meta.properties").write_text("version=0\nbroker.id=3\ncluster.id=a b\n")
    with pytest.raises(CheckpointError, match=r"line 3: illegal cluster\.id 'a b'"):
        read_broker_metadata(tmp_path)


def test_meta_properties_missing_reads_as_none(tmp_path: Path) -> None:
    assert read_meta_properties(tmp_path) is None


@pytest.mark.parametrize(
    ("text", "broker_id"),
    [
        ("#\n#Thu Oct 24 12:00:00 UTC 2024\nbroker.id=7\nversion=0\n", 7),
        ("! bang comment\n\n  version = 0\nbroker.id : 1001\n", 1001),
        ("version 0\r\nbroker.id\t12\r\n", 12),
        ("version=0\ncluster.id=abc\nbroker.id=0", 0),
    ],
)
def test_meta_properties_reads_java_properties_syntax(
    tmp_path: Path, text: str, broker_id: int
) -> None:
    (tmp_path / "meta.properties").write_text(text)
    assert read_meta_properties(tmp_path) == broker_id


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("broker.id=1\n", "no version property"),
        ("version=1\nnode.id=1\n", "line 1: unsupported version '1'"),
        ("version=0\n", "no broker.id property"),
        ("version=0\nbroker.id=one\n", "line 2: broker.id is not an integer"),
        ("version=0\nbroker.id=-1\n", "line 2: negative broker.id"),
        ("version=0\n=1\n", "line 2: malformed property line"),
    ],
)
def test_bad_meta_properties_raise_checkpoint_error(tmp_path: Path, text: str, reason: str) -> None:
    (tmp_path / "meta.properties").write_text(text)
    with pytest.raises(CheckpointError, match=reason):
        read_meta_properties(tmp_path)


def test_negative_broker_id_is_not_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="broker id"):
        write_meta_properties(tmp_path, -1)
    assert not (tmp_path / "meta.properties").exists()
