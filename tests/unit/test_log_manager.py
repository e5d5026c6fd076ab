"""LogManager: the data dir's identity, lock, clean-shutdown marker, checkpoints, loading
(clean and after a crash), creation, deletion, retention below the HW, and a bad partition."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from broker.log.checkpoints import (
    BrokerMetadata,
    CheckpointError,
    read_broker_metadata,
    read_meta_properties,
)
from broker.log.log import Log, LogClosedError
from broker.log.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    IllegalPartitionPathError,
    InconsistentBrokerIdError,
    InconsistentClusterIdError,
    LogManager,
    LogOfflineError,
)
from broker.log.log_segment import LogSegment
from proto.config.log_config import LogConfig
from proto.records.record_batch import Record, encode_batch
from proto.topic_partition import TopicPartition

ORDERS_0 = TopicPartition("orders", 0)
ORDERS_1 = TopicPartition("orders", 1)
AUDIT_0 = TopicPartition("audit-log", 0)


def batch(n: int = 3, ts: int = 1000) -> bytes:
    return encode_batch([Record(b"k%d" % i, b"value-%d" % i, ts + i) for i in range(n)])


def manager(data_dir: Path, broker_id: int = 1, config: LogConfig | None = None) -> LogManager:
    return LogManager(data_dir, config or LogConfig(), broker_id)


def started(data_dir: Path, broker_id: int = 1, config: LogConfig | None = None) -> LogManager:
    m = manager(data_dir, broker_id, config)
    m.startup()
    return m


def crash(m: LogManager) -> None:
    """What a SIGKILL leaves: files closed by the OS, nothing flushed, no marker, no lock."""
    for log_ in m.all_logs().values():
        log_.close()
    m._release_dir_lock()


# -- startup ---------------------------------------------------------------------------------


def test_startup_on_an_empty_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "broker-1"
    m = started(data_dir)
    assert data_dir.is_dir()
    assert read_meta_properties(data_dir) == 1
    assert m.all_logs() == {}
    assert m.offline_logs == {}
    assert m.had_clean_shutdown is False
    m.shutdown()


def test_meta_properties_of_another_broker_is_refused(tmp_path: Path) -> None:
    started(tmp_path).shutdown()
    with pytest.raises(InconsistentBrokerIdError, match=r"configured broker.id 2 .* broker.id 1"):
        started(tmp_path, broker_id=2)
    started(tmp_path, broker_id=1).shutdown()  # the refusal left the dir usable


def test_the_cluster_id_is_written_once_and_another_cluster_is_refused(tmp_path: Path) -> None:
    started(tmp_path).shutdown()  # a dir first used without a cluster id (an older broker)
    assert read_broker_metadata(tmp_path) == BrokerMetadata(1, None)
    adopting = manager(tmp_path)
    adopting.startup(cluster_id="kN3pVvD8QpqFSYt1OXeVHQ")
    adopting.shutdown()
    assert read_broker_metadata(tmp_path) == BrokerMetadata(1, "kN3pVvD8QpqFSYt1OXeVHQ")
    foreign = manager(tmp_path)
    with pytest.raises(
        InconsistentClusterIdError,
        match=r"cluster ID other-cluster .* cluster.id kN3pVvD8QpqFSYt1OXeVHQ .* wrong cluster",
    ):
        foreign.startup(cluster_id="other-cluster")
    assert read_broker_metadata(tmp_path) == BrokerMetadata(1, "kN3pVvD8QpqFSYt1OXeVHQ")
    again = manager(tmp_path)
    again.startup(cluster_id="kN3pVvD8QpqFSYt1OXeVHQ")  # the refusal left the dir usable
    again.shutdown()


def test_corrupt_meta_properties_is_refused(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text("version=0\nbroker.id=x\n")
    with pytest.raises(CheckpointError, match=r"broker\.id"):
        started(tmp_path)


def test_a_second_process_cannot_take_the_data_dir(tmp_path: Path) -> None:
    m = started(tmp_path)
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from proto.config.log_config import LogConfig
        from broker.log.log_manager import DataDirLockedError, LogManager
        try:
            LogManager(Path({str(tmp_path)!r}), LogConfig(), 1).startup()
        except DataDirLockedError as e:
            print("locked:", e)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert "locked: failed to acquire the lock" in result.stdout
    m.shutdown()
    # Released at shutdown: the same check now passes.
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert "locked" not in result.stdout


def test_startup_skips_other_directories_and_finishes_deletions(tmp_path: Path) -> None:
    m = started(tmp_path)
    m.get_or_create_log(ORDERS_0).append_as_leader(batch(), 0)
    m.shutdown()
    (tmp_path / "not_a_partition").mkdir()
    (tmp_path / "orders-x").mkdir()
    (tmp_path / "orders-2-future").mkdir()
    (tmp_path / "stray-file-0").write_text("")
    leftover = tmp_path / f"orders-1.{'a' * 32}-delete"
    (leftover / "00000000000000000000.log").parent.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"x")
    m = started(tmp_path)
    assert set(m.all_logs()) == {ORDERS_0}
    assert not leftover.exists()
    assert (tmp_path / "not_a_partition").exists()
    m.shutdown()


# -- clean and unclean restarts --------------------------------------------------------------


def test_reload_after_clean_shutdown_consumes_the_marker_and_does_not_recover(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = started(tmp_path)
    log_ = m.get_or_create_log(ORDERS_0)
    for _ in range(3):
        log_.append_as_leader(batch(), 0)
    m.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()

    recovered: list[int] = []
    original = LogSegment.recover

    def spy(self: LogSegment, *args: object, **kwargs: object) -> object:
        recovered.append(self.base_offset)
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(LogSegment, "recover", spy)
    m = started(tmp_path)
    # KAFKA-10471: deleted as soon as read, so a crash from here on is an unclean one.
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert m.had_clean_shutdown is True
    reloaded = m.get_log(ORDERS_0)
    assert reloaded is not None
    assert reloaded.log_end_offset == 9
    assert reloaded.recovery_point == 9
    assert recovered == []
    m.shutdown()


def test_reload_after_a_crash_recovers_a_torn_tail(tmp_path: Path) -> None:
    m = started(tmp_path)
    log_ = m.get_or_create_log(ORDERS_0)
    for _ in range(3):
        log_.append_as_leader(batch(), 0)
    m.get_or_create_log(ORDERS_1).append_as_leader(batch(), 0)
    segment = log_.active_segment.log_path
    crash(m)
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    with open(segment, "r+b") as f:  # the last batch only half written
        f.truncate(segment.stat().st_size - 10)

    m = started(tmp_path)
    assert m.had_clean_shutdown is False
    recovered = m.get_log(ORDERS_0)
    assert recovered is not None
    assert recovered.log_end_offset == 6
    assert recovered.read(0, 1 << 20).next_offset == 6
    assert (m.get_log(ORDERS_1) or pytest.fail("orders-1 missing")).log_end_offset == 3
    m.shutdown()


def test_a_crash_while_loading_is_unclean_next_time(tmp_path: Path) -> None:
    started(tmp_path).shutdown()
    m = started(tmp_path)  # consumes the marker, then "crashes"
    crash(m)
    m = started(tmp_path)
    assert m.had_clean_shutdown is False
    m.shutdown()


def test_startup_uses_the_checkpointed_recovery_point_and_log_start_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = LogConfig(segment_bytes=2 * len(batch()) + 10)
    m = started(tmp_path, config=config)
    log_ = m.get_or_create_log(ORDERS_0)
    for _ in range(6):
        log_.append_as_leader(batch(), 0)
    assert len(log_.segments) == 3
    log_.flush(6)
    log_.maybe_increment_log_start_offset(2)
    m.checkpoint_recovery_points()
    m.checkpoint_log_start_offsets()
    crash(m)

    recovered: list[int] = []
    original = LogSegment.recover

    def spy(self: LogSegment, *args: object, **kwargs: object) -> object:
        recovered.append(self.base_offset)
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(LogSegment, "recover", spy)
    m = started(tmp_path, config=config)
    reloaded = m.get_log(ORDERS_0)
    assert reloaded is not None
    assert recovered == [6, 12]  # from the segment holding the recovery point on
    assert reloaded.log_start_offset == 2
    assert reloaded.log_end_offset == 18
    m.shutdown()


def test_unreadable_recovery_checkpoint_means_full_recovery(tmp_path: Path) -> None:
    m = started(tmp_path)
    m.get_or_create_log(ORDERS_0).append_as_leader(batch(), 0)
    m.shutdown()
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n5\ngarbage\n")
    m = started(tmp_path)
    assert m.had_clean_shutdown is True
    assert (m.get_log(ORDERS_0) or pytest.fail("missing")).log_end_offset == 3
    m.shutdown()


# -- checkpoints -----------------------------------------------------------------------------


def test_checkpoints_are_written_in_kafkas_format(tmp_path: Path) -> None:
    m = started(tmp_path)
    orders = m.get_or_create_log(ORDERS_0)
    orders.append_as_leader(batch(), 0)
    orders.append_as_leader(batch(), 0)
    audit = m.get_or_create_log(AUDIT_0)
    audit.append_as_leader(batch(), 0)
    orders.maybe_increment_log_start_offset(2)
    m.shutdown()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == (
        "0\n2\naudit-log 0 3\norders 0 6\n"
    )
    # Only logs whose start offset is above their first segment's base offset.
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == "0\n1\norders 0 2\n"
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_bytes() == b""
    assert not list(tmp_path.glob("*.tmp"))


def test_high_watermark_helpers(tmp_path: Path) -> None:
    m = started(tmp_path)
    assert m.read_high_watermarks() == {}
    m.write_high_watermarks({ORDERS_1: 7, ORDERS_0: 5})
    assert (tmp_path / "replication-offset-checkpoint").read_text() == (
        "0\n2\norders 0 5\norders 1 7\n"
    )
    assert m.read_high_watermarks() == {ORDERS_0: 5, ORDERS_1: 7}
    (tmp_path / "replication-offset-checkpoint").write_text("0\n3\norders 0 5\n")
    with pytest.raises(CheckpointError):
        m.read_high_watermarks()
    m.shutdown()


def test_a_failed_checkpoint_leaves_no_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = started(tmp_path)
    log_ = m.get_or_create_log(ORDERS_0)
    log_.append_as_leader(batch(), 0)

    def fail() -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(m, "checkpoint_log_start_offsets", fail)
    with pytest.raises(OSError, match="No space left"):
        m.shutdown()
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    with pytest.raises(LogClosedError):  # the logs were closed all the same
        log_.read(0, 100)
    m = started(tmp_path)  # and the dir unlocked
    assert m.had_clean_shutdown is False
    m.shutdown()


# -- creating and deleting -------------------------------------------------------------------


def test_get_or_create_log(tmp_path: Path) -> None:
    m = started(tmp_path)
    assert m.get_log(ORDERS_0) is None
    config = LogConfig(segment_bytes=4096)
    created = m.get_or_create_log(ORDERS_0, config)
    assert created.config == config
    assert (tmp_path / "orders-0").is_dir()
    assert m.get_or_create_log(ORDERS_0) is created
    assert m.get_or_create_log(ORDERS_0, LogConfig()).config == config  # an existing log keeps it
    assert m.get_or_create_log(ORDERS_1).config == LogConfig()
    m.shutdown()


def test_concurrent_get_or_create_opens_one_log(tmp_path: Path) -> None:
    m = started(tmp_path)
    results: list[Log] = []
    barrier = threading.Barrier(8)

    def create() -> None:
        barrier.wait()
        results.append(m.get_or_create_log(ORDERS_0))

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(results) == 8
    assert all(r is results[0] for r in results)
    m.shutdown()


def test_delete_log(tmp_path: Path) -> None:
    m = started(tmp_path)
    m.get_or_create_log(ORDERS_0).append_as_leader(batch(), 0)
    m.get_or_create_log(ORDERS_1)
    assert m.delete_log(ORDERS_0) is True
    assert m.get_log(ORDERS_0) is None
    assert not (tmp_path / "orders-0").exists()
    assert not list(tmp_path.glob("*-delete"))
    assert m.delete_log(ORDERS_0) is False
    m.shutdown()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n1\norders 1 0\n"
    m = started(tmp_path)
    assert set(m.all_logs()) == {ORDERS_1}
    assert m.get_or_create_log(ORDERS_0).log_end_offset == 0  # recreated empty
    m.shutdown()


# -- retention -------------------------------------------------------------------------------


def test_retention_only_below_the_high_watermark(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=len(batch()) + 10, retention_ms=1000)
    m = started(tmp_path, config=config)
    orders = m.get_or_create_log(ORDERS_0)
    other = m.get_or_create_log(ORDERS_1)
    for _ in range(5):  # one batch (3 records, old timestamps) per segment
        orders.append_as_leader(batch(ts=1000), 0)
        other.append_as_leader(batch(ts=1000), 0)
    assert [s.base_offset for s in orders.segments] == [0, 3, 6, 9, 12]
    now_ms = 10**12  # everything is far past retention.ms
    # HW 7: only the segments wholly below it ([0,3) and [3,6)) may go.
    assert m.cleanup_logs({ORDERS_0: 7}, now_ms) == 2
    assert orders.log_start_offset == 6
    assert [s.base_offset for s in orders.segments] == [6, 9, 12]
    # A partition without a known HW is left alone.
    assert len(other.segments) == 5
    assert m.cleanup_logs({ORDERS_0: 7}, now_ms) == 0
    assert m.cleanup_logs({ORDERS_0: 15, ORDERS_1: 0}, now_ms) == 3
    assert orders.log_start_offset == 15
    assert len(other.segments) == 5
    m.shutdown()


# -- a bad partition -------------------------------------------------------------------------


def test_a_partition_that_fails_to_open_does_not_stop_the_others(tmp_path: Path) -> None:
    m = started(tmp_path)
    for tp in (ORDERS_0, ORDERS_1, AUDIT_0):
        m.get_or_create_log(tp).append_as_leader(batch(), 0)
    m.shutdown()
    # An I/O error opening orders-1: its epoch checkpoint cannot be read (a directory).
    checkpoint = tmp_path / "orders-1" / "leader-epoch-checkpoint"
    checkpoint.unlink()
    checkpoint.mkdir()

    m = started(tmp_path)
    assert set(m.all_logs()) == {ORDERS_0, AUDIT_0}
    assert set(m.offline_logs) == {ORDERS_1}
    assert isinstance(m.offline_logs[ORDERS_1], OSError)
    with pytest.raises(LogOfflineError, match="orders-1 is offline"):
        m.get_or_create_log(ORDERS_1)
    m.shutdown()
    # The offline log keeps its checkpoint entry rather than losing it.
    assert "orders 1 3" in (tmp_path / "recovery-point-offset-checkpoint").read_text()


def test_recovery_threads_load_and_close_every_log_and_keep_a_bad_one_offline(
    tmp_path: Path,
) -> None:
    """num.recovery.threads.per.data.dir: logs loaded, flushed and closed on several
    threads are what one thread makes of them, a bad one included."""
    tps = [TopicPartition("wide", p) for p in range(120)]
    m = LogManager(tmp_path, LogConfig(), 1, recovery_threads=4)
    m.startup()
    created = m.get_or_create_logs(dict.fromkeys(tps))
    assert all(isinstance(log_, Log) for log_ in created.values())
    for p, tp in enumerate(tps):
        m.get_log(tp).append_as_leader(batch(1 + p % 3), 0)  # type: ignore[union-attr]
    m.shutdown()
    bad = tps[17]
    checkpoint = tmp_path / "wide-17" / "leader-epoch-checkpoint"
    checkpoint.unlink()
    checkpoint.mkdir()

    m = LogManager(tmp_path, LogConfig(), 1, recovery_threads=4)
    m.startup()
    assert m.had_clean_shutdown
    assert set(m.all_logs()) == set(tps) - {bad}
    assert set(m.offline_logs) == {bad}
    assert {tp: log_.log_end_offset for tp, log_ in m.all_logs().items()} == {
        tp: 1 + p % 3 for p, tp in enumerate(tps) if tp != bad
    }
    m.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()


def test_recovery_threads_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        LogManager(tmp_path, LogConfig(), 1, recovery_threads=0)


# -- hostile partition names (path traversal) ------------------------------------------------


@pytest.mark.parametrize(
    "topic",
    ["../victim", "../broker-2/orders", "..", ".", "a/b", "/abs/elsewhere", "", "x" * 250],
)
def test_path_traversal_partition_names_are_refused_before_touching_the_disk(
    tmp_path: Path, topic: str
) -> None:
    (tmp_path / "victim-0").mkdir()
    (tmp_path / "victim-0" / "keep").write_text("mine")
    m = started(tmp_path / "broker-1")
    tp = TopicPartition(topic, 0)
    with pytest.raises(IllegalPartitionPathError):
        m.get_or_create_log(tp)
    with pytest.raises(IllegalPartitionPathError):
        m.delete_log(tp)
    m.shutdown()
    assert (tmp_path / "victim-0" / "keep").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broker-1", "victim-0"]


def test_a_negative_partition_has_no_directory(tmp_path: Path) -> None:
    m = started(tmp_path / "broker-1")
    with pytest.raises(IllegalPartitionPathError, match="negative partition"):
        m.partition_dir(TopicPartition("orders", -1))
    m.shutdown()


def test_a_partition_directory_symlinked_out_of_the_data_dir_is_never_deleted(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("mine")
    data_dir = tmp_path / "broker-1"
    m = started(data_dir)
    m.shutdown()
    (data_dir / "orders-0").symlink_to(outside, target_is_directory=True)
    m = started(data_dir)
    assert ORDERS_0 not in m.all_logs()  # skipped at startup, not loaded through the link
    with pytest.raises(IllegalPartitionPathError, match="outside the data dir"):
        m.delete_log(ORDERS_0)
    with pytest.raises(IllegalPartitionPathError):
        m.get_or_create_log(ORDERS_0)
    m.shutdown()
    assert (outside / "keep").read_text() == "mine"


def test_every_log_draws_its_segment_files_from_the_managers_pool(tmp_path: Path) -> None:
    m = LogManager(tmp_path / "data", LogConfig(), 1, max_open_segment_files=3)
    m.startup()
    for p in range(6):
        m.get_or_create_log(TopicPartition("orders", p)).append_as_leader(batch(), leader_epoch=0)
    assert m.segment_files.max_open == 3
    assert m.segment_files.open_count == 3
    for p in range(6):  # each reopens its file, closing another's
        log_ = m.get_log(TopicPartition("orders", p))
        assert log_ is not None
        records = log_.read(0, 10_000).records
        assert len(records) == len(batch())
        assert records.endswith(b"value-2\x00")
        assert m.segment_files.open_count <= 3
    m.shutdown()
    assert m.segment_files.open_count == 0
