"""EMFILE, ENFILE and ENOMEM are not a failed disk: the log dir stays online, the operation
is retried, the error is counted and logged at a bounded rate. The EMFILE cases run in a
child process whose descriptors are really used up (a lowered RLIMIT_NOFILE filled with
open files), so nothing of the file system is faked."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from broker.log.resource_limits import (
    BASE_FDS,
    MIN_OPEN_SEGMENT_FILES,
    UNLIMITED_NOFILE,
    ResourceErrorReporter,
    default_max_open_segment_files,
    fds_needed,
    is_resource_exhaustion,
    nofile_warning,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE, errno.ENOMEM])
def test_running_out_of_a_process_resource_is_transient(code: int) -> None:
    assert is_resource_exhaustion(OSError(code, os.strerror(code)))


@pytest.mark.parametrize("code", [errno.EIO, errno.EROFS, errno.ENOSPC, None])
def test_a_bad_disk_is_not_transient(code: int | None) -> None:
    err = OSError(code, "x") if code is not None else OSError("corrupt checkpoint")
    assert not is_resource_exhaustion(err)
    assert not is_resource_exhaustion(MemoryError())


def test_the_fd_budget_is_a_fixed_pool_of_segment_files_plus_sockets() -> None:
    assert fds_needed(0) == BASE_FDS
    assert fds_needed(1000) == BASE_FDS + 1000  # one per open .log file, no .index
    assert nofile_warning(1000, 1_000_000) is None
    assert nofile_warning(1000, -1) is None  # RLIM_INFINITY
    below = nofile_warning(1000, 2000)
    assert below is not None
    assert below.startswith("below")
    near = nofile_warning(1000, fds_needed(1000) + 10)
    assert near is not None
    assert near.startswith("near")


def test_the_pool_takes_half_the_limit_whatever_the_replicas() -> None:
    assert default_max_open_segment_files(20_000) == 10_000
    assert default_max_open_segment_files(1024) == 512
    assert default_max_open_segment_files(10) == MIN_OPEN_SEGMENT_FILES
    assert default_max_open_segment_files(-1) == UNLIMITED_NOFILE // 2
    # The hard limit of this project's container: the default pool and the sockets fit it
    # with room to spare, however many replicas are hosted.
    assert nofile_warning(default_max_open_segment_files(20_000), 20_000) is None


def test_the_reporter_counts_every_error_and_logs_at_a_bounded_rate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    counted: list[str] = []
    now = [0.0]
    reporter = ResourceErrorReporter(
        logging.getLogger("test.resource"),
        "test",
        counted.append,
        interval_s=10,
        clock=lambda: now[0],
    )
    emfile = OSError(errno.EMFILE, "Too many open files")
    with caplog.at_level(logging.WARNING, "test.resource"):
        assert reporter.report("checkpoint", emfile)
        assert not reporter.report("checkpoint", emfile)
        assert not reporter.report("checkpoint", emfile)
        assert reporter.report("append", emfile)  # another place has its own budget
        now[0] = 10.0
        assert reporter.report("checkpoint", emfile)
    assert counted == ["EMFILE"] * 5
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert "event=resource_exhausted" in lines[0]
    assert "errno=EMFILE" in lines[0]
    assert "suppressed=2" in lines[2]


_PRELUDE = textwrap.dedent(
    """
    import errno, os, resource

    def use_up_descriptors():
        \"\"\"Lower RLIMIT_NOFILE to 256 and open files until EMFILE; the files opened.\"\"\"
        soft_hard = (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        resource.setrlimit(resource.RLIMIT_NOFILE, soft_hard)
        hogs = []
        try:
            while True:
                hogs.append(os.open(os.devnull, os.O_RDONLY))
        except OSError as err:
            assert err.errno == errno.EMFILE, err
        return hogs
    """
)


def run_emfile_child(body: str, data: Path) -> None:
    """Run ``body`` (which calls ``use_up_descriptors()`` where the descriptors are to run
    out, and prints "ok" at its end) in a child process, with ``data`` as its argv[1]."""
    done = subprocess.run(
        [sys.executable, "-c", _PRELUDE + body, str(data)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip() == "ok"


_CHILD = textwrap.dedent(
    """
    import asyncio, errno, os, sys
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path
    from typing import cast

    from broker.log.log import Log
    from broker.log.log_manager import LogManager
    from broker.metadata_cache import MetadataCache
    from broker.replication.partition import LeadershipState, Partition
    from broker.replication.replica_manager import ReplicaManager
    from broker.zk_client import BrokerZkClient
    from proto.config.broker_config import BrokerConfig
    from proto.config.log_config import LogConfig
    from proto.records.record_batch import Record, encode_batch
    from proto.topic_partition import TopicPartition
    from proto.wire.minibroker_pb2 import ErrorCode

    class LeasedZk:
        async def ensure_session_lease(self) -> bool:
            return True

    data = Path(sys.argv[1])
    tp = TopicPartition("t", 0)
    config = BrokerConfig(broker_id=1, zookeeper_connect="unused:2181", log_dir=data)
    log_config = LogConfig(segment_bytes=300)
    log_manager = LogManager(data, log_config, 1)
    log_manager.startup()
    executor = ThreadPoolExecutor(1)
    executor.submit(int).result()  # the worker thread exists before the descriptors run out
    manager = ReplicaManager(
        config, log_manager, cast(BrokerZkClient, LeasedZk()), MetadataCache(), executor
    )
    partition = Partition(tp, 1, log_manager.get_or_create_log(tp, log_config), clock_ms=int)
    assert partition.make_leader(LeadershipState(1, 0, (1,), (1,), 0, controller_epoch=1))
    manager.partitions[tp] = partition
    loop = asyncio.new_event_loop()  # its self-pipe is open before the descriptors run out
    batch = encode_batch([Record(None, b"x" * 150, 1)])
    first = loop.run_until_complete(manager.append_records(1, 1000, {tp: batch}))
    assert first[tp].error_code == ErrorCode.NONE, first

    hogs = use_up_descriptors()

    # The checkpoint write meets EMFILE: reported, not raised, the dir stays online.
    loop.run_until_complete(manager.checkpoint_high_watermarks())
    assert manager.log_dir_failure is None, manager.log_dir_failure
    # A produce that must roll a segment meets EMFILE: a retriable error, dir online.
    second = loop.run_until_complete(manager.append_records(1, 1000, {tp: batch}))
    assert second[tp].error_code == ErrorCode.KAFKA_STORAGE_ERROR, second
    assert "retry" in second[tp].error_message, second
    assert manager.log_dir_failure is None, manager.log_dir_failure
    assert len(partition.log.segments) == 1, partition.log.segments
    counted = manager.metrics.resource_errors.labels("EMFILE")._value.get()
    assert counted >= 2, counted

    for fd in hogs:
        os.close(fd)
    # The next period writes the checkpoint; the client's retry appends.
    loop.run_until_complete(manager.checkpoint_high_watermarks())
    assert log_manager.read_high_watermarks() == {tp: partition.high_watermark}
    third = loop.run_until_complete(manager.append_records(1, 1000, {tp: batch}))
    assert third[tp].error_code == ErrorCode.NONE, third
    assert len(partition.log.segments) == 2, partition.log.segments
    assert manager.log_dir_failure is None
    print("ok")
    """
)


@pytest.mark.timeout(60)
def test_a_checkpoint_and_a_roll_meeting_emfile_keep_the_log_dir_online(tmp_path: Path) -> None:
    run_emfile_child(_CHILD, tmp_path / "data")


_STARTUP_CHILD = textwrap.dedent(
    """
    import errno, os, sys
    from pathlib import Path

    from broker.log.log_manager import LogManager
    from proto.config.log_config import LogConfig
    from proto.records.record_batch import Record, decode_batch, encode_batch
    from proto.topic_partition import TopicPartition

    data = Path(sys.argv[1])
    tps = [TopicPartition("t", i) for i in range(6)]
    manager = LogManager(data, LogConfig(), 1)
    manager.startup()
    for tp in tps:
        manager.get_or_create_log(tp).append_as_leader(
            encode_batch([Record(None, str(tp).encode(), 1)]), leader_epoch=0
        )
    manager.shutdown()

    hogs = use_up_descriptors()
    for _ in range(3):  # enough for the dir lock and the checkpoints, not for every log
        os.close(hogs.pop())
    manager = LogManager(data, LogConfig(), 1)
    manager.startup()
    offline = manager.offline_logs
    assert offline, "every log opened: the limit was not reached"
    assert all(e.errno == errno.EMFILE for e in offline.values()), offline
    for fd in hogs:
        os.close(fd)
    for tp in tps:  # asked for again (the next LeaderAndIsr): opened, records intact
        log_ = manager.get_or_create_log(tp)
        records = decode_batch(log_.read(0, 1 << 20).records).records
        assert [r.value for r in records] == [str(tp).encode()], (tp, records)
    assert manager.offline_logs == {}
    manager.shutdown()
    print("ok")
    """
)


@pytest.mark.timeout(60)
def test_a_log_that_met_emfile_at_startup_opens_when_next_asked_for(tmp_path: Path) -> None:
    run_emfile_child(_STARTUP_CHILD, tmp_path / "data")


_FOLLOWER_CHILD = textwrap.dedent(
    """
    import asyncio, errno, os, sys
    from pathlib import Path

    from broker.log.log import Log
    from broker.replication.partition import LeadershipState, Partition
    from broker.replication.replica_fetcher import (
        FetchPhase, FetcherConfig, ReplicaFetcher, SourceBroker,
    )
    from broker.replication.truncation import TruncationMode
    from proto.config.log_config import LogConfig
    from proto.records.record_batch import Record, encode_batch
    from proto.topic_partition import TopicPartition

    tp = TopicPartition("t", 0)
    log_ = Log.open(Path(sys.argv[1]) / tp.dir_name, LogConfig(segment_bytes=300))
    partition = Partition(tp, 1, log_, clock_ms=int)
    partition.make_follower(LeadershipState(2, 0, (1, 2), (1, 2), 0, controller_epoch=1))

    def batch(offset):
        return encode_batch(
            [Record(None, b"x" * 150, 1)], base_offset=offset, partition_leader_epoch=0
        )

    errors = []
    config = FetcherConfig(local_broker_id=1, truncation_mode=TruncationMode.LEADER_EPOCH)
    fetcher = ReplicaFetcher(
        SourceBroker(2, "127.0.0.1", 1), config, executor=None,
        on_partition_error=lambda tp, err: errors.append(err),
    )
    loop = asyncio.new_event_loop()
    fetcher.add_partitions({tp: partition})
    state = fetcher._states[tp]
    state.phase = FetchPhase.FETCHING
    assert loop.run_until_complete(fetcher._append(tp, state, 0, batch(0)))

    hogs = use_up_descriptors()
    # The append must roll a segment: EMFILE. Reported, and retried, not a failed partition.
    assert not loop.run_until_complete(fetcher._append(tp, state, 1, batch(1)))
    assert [e.errno for e in errors] == [errno.EMFILE], errors
    assert state.phase is FetchPhase.TRUNCATING, state.phase
    assert state.delay_until > 0
    for fd in hogs:
        os.close(fd)
    state.phase = FetchPhase.FETCHING
    assert loop.run_until_complete(fetcher._append(tp, state, 1, batch(1)))
    assert log_.log_end_offset == 2, log_.log_end_offset
    log_.close()
    print("ok")
    """
)


@pytest.mark.timeout(60)
def test_a_follower_append_meeting_emfile_is_retried_not_failed(tmp_path: Path) -> None:
    run_emfile_child(_FOLLOWER_CHILD, tmp_path / "data")


def test_the_partition_cap_is_checked_against_the_pool_of_open_segment_files(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import resource

    from broker.log.resource_limits import check_partition_cap_fds

    logger = logging.getLogger("test.cap")
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, 4096))
    with caplog.at_level(logging.WARNING, "test.cap"):
        warning = check_partition_cap_fds(1000, logger, "broker")
    assert warning is not None
    assert warning.startswith("the pool of 512 open segment files")
    (line,) = [r.getMessage() for r in caplog.records]
    assert "event=nofile_limit_below_partition_cap" in line
    assert "max_broker_partitions=1000" in line
    assert "max_open_segment_files=512" in line
    monkeypatch.setattr(resource, "getrlimit", lambda _: (2048, 4096))
    assert check_partition_cap_fds(1000, logger, "broker") is None
    assert check_partition_cap_fds(1000, logger, "broker", max_open_segment_files=999) is not None


def test_the_start_up_budget_counts_open_segment_files_not_replicas(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import resource

    from broker.log.resource_limits import check_nofile_limit

    logger = logging.getLogger("test.nofile")
    monkeypatch.setattr(resource, "getrlimit", lambda _: (20_000, 20_000))
    with caplog.at_level(logging.INFO, "test.nofile"):
        assert check_nofile_limit(30_000, logger, "broker") is None  # 30,000 segments fit
    (line,) = [r.getMessage() for r in caplog.records]
    assert "event=nofile_limit " in line + " "
    assert f"needed={BASE_FDS + 10_000}" in line
    assert "max_open_segment_files=10000" in line
    monkeypatch.setattr(resource, "getrlimit", lambda _: (400, 20_000))
    assert check_nofile_limit(5, logger, "broker") is not None  # the sockets' share alone
