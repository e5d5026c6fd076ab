"""SegmentFile and SegmentFilePool: segments whose ``.log`` descriptor was closed by the pool
(evicted) read, append, truncate, flush and delete as before; a closed segment refuses use;
readers on threads racing evictions and closes never see another file's bytes; the index
holds no descriptor unless it is writing; and 1,000+ logs live within an RLIMIT_NOFILE of
256 (a child process whose limit is really lowered)."""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from broker.log.log_segment import LogSegment, SegmentClosedError
from broker.log.offset_index import OffsetIndex
from broker.log.segment_files import SegmentFile, SegmentFilePool
from proto.records.record_batch import Record, encode_batch, validate_batches
from tests.unit.test_resource_exhaustion import run_emfile_child

REPO = Path(__file__).resolve().parents[2]
INTERVAL = 200


def batch(base: int, count: int = 3) -> bytes:
    return encode_batch(
        [Record(b"k%d" % i, b"v" * 20, 1000 + base + i) for i in range(count)], base_offset=base
    )


def append(segment: LogSegment, data: bytes) -> None:
    segment.append(data, validate_batches(data))


def open_fds() -> set[str]:
    """The files this process holds open (``/proc/self/fd`` targets that are paths).
    Sockets, pipes and anonymous inodes are left out: threads an earlier test left
    behind in the process (a gRPC channel, a ZooKeeper client) open and close those at
    any moment, and a segment's files are never one of them (a CI run failed on a
    ``socket:[...]`` that appeared mid-test)."""
    targets = set()
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the descriptor listdir itself used
            target = os.readlink(f"/proc/self/fd/{name}")
            if target.startswith("/"):
                targets.add(target)
    return targets


def holds_fd(segment: LogSegment) -> bool:
    """Whether the segment's ``.log`` file has a descriptor now."""
    return segment._file.is_open


def segments_with_pool(
    tmp_path: Path, n: int, max_open: int
) -> tuple[SegmentFilePool, list[LogSegment]]:
    pool = SegmentFilePool(max_open)
    segments: list[LogSegment] = []
    for i in range(n):
        directory = tmp_path / f"t-{i}"
        directory.mkdir()
        segments.append(LogSegment.create(directory, 0, index_interval_bytes=INTERVAL, files=pool))
    return pool, segments


def test_the_pool_closes_idle_descriptors_beyond_its_bound(tmp_path: Path) -> None:
    pool, segments = segments_with_pool(tmp_path, 5, max_open=2)
    for segment in segments:
        append(segment, batch(0))
    assert pool.open_count == 2
    assert pool.evictions >= 3
    open_paths = [s.log_path for s in segments if s.log_path.as_posix() in open_fds()]
    assert len(open_paths) == 2
    assert segments[-1].log_path in open_paths  # the one used last
    # Every segment still reads what it was given, reopening its file as needed.
    for segment in segments:
        assert segment.read(0, 10_000, max_position=segment.size).records == batch(0)
        assert pool.open_count <= 2


def test_an_evicted_segment_appends_truncates_flushes_and_reopens(tmp_path: Path) -> None:
    pool, (first, second) = segments_with_pool(tmp_path, 2, max_open=1)
    append(first, batch(0))
    append(second, batch(0))  # evicts first's descriptor
    assert not holds_fd(first)
    append(first, batch(3))  # the append reopens it at the right position
    assert first.log_path.read_bytes() == batch(0) + batch(3)
    assert not holds_fd(second)
    second.flush()  # an fsync after eviction reopens the file and syncs it
    assert holds_fd(second)
    assert not holds_fd(first)
    assert first.truncate_to(3) == len(batch(3))  # truncation through a reopened descriptor
    assert first.log_path.read_bytes() == batch(0)
    first.close()
    second.close()
    assert pool.open_count == 0
    reopened = LogSegment.open(first.log_path.parent, 0, index_interval_bytes=INTERVAL, files=pool)
    assert not holds_fd(reopened)  # opening a segment costs no descriptor
    assert reopened.recover().next_offset == 3
    assert reopened.read(0, 10_000, max_position=reopened.size).records == batch(0)
    reopened.close()


def test_deleting_an_evicted_segment_removes_its_files(tmp_path: Path) -> None:
    pool, (first, second) = segments_with_pool(tmp_path, 2, max_open=1)
    append(first, batch(0))
    append(second, batch(0))
    assert not holds_fd(first)
    first.delete()
    assert not first.log_path.exists()
    assert not first.index_path.exists()
    with pytest.raises(SegmentClosedError):
        first.read(0, 1000, max_position=100)
    assert pool.open_count == 1  # second's


def test_a_closed_segment_is_never_reopened(tmp_path: Path) -> None:
    _pool, (first, second) = segments_with_pool(tmp_path, 2, max_open=1)
    append(first, batch(0))
    append(second, batch(0))
    first.close()
    for use in (
        lambda: first.read(0, 1000, max_position=first.size),
        lambda: append(first, batch(3)),
        lambda: first.truncate_to(0),
        first.flush,
    ):
        with pytest.raises(SegmentClosedError):
            use()
    assert not holds_fd(first)
    assert first.log_path.as_posix() not in open_fds()


def test_a_file_in_use_is_not_evicted_and_the_pool_shrinks_back(tmp_path: Path) -> None:
    pool = SegmentFilePool(1)
    paths = [tmp_path / f"{i}.log" for i in range(3)]
    files = [SegmentFile.create(path, pool) for path in paths[:1]]
    files[0]._acquire()  # a reader inside a pread
    files.append(SegmentFile.create(paths[1], pool))
    assert files[0].is_open  # not pulled from under the reader
    files[0]._release()
    files.append(SegmentFile.create(paths[2], pool))
    assert pool.open_count == 1
    assert [f.is_open for f in files] == [False, False, True]


def test_readers_racing_evictions_and_closes_never_read_another_files_bytes(
    tmp_path: Path,
) -> None:
    """Each file holds one byte value only; readers on threads check every byte they get,
    while the pool (bound 2) evicts on almost every read and a closer thread closes files
    and creates new ones, whose descriptors reuse the numbers of closed ones."""
    pool = SegmentFilePool(2)
    size = 64 * 1024
    lock = threading.Lock()
    files: dict[int, SegmentFile] = {}
    next_value = [0]

    def new_file() -> None:
        with lock:
            value = next_value[0] % 256
            next_value[0] += 1
        path = tmp_path / f"{next_value[0]}.log"
        file = SegmentFile.create(path, pool)
        file.write_at([bytes([value]) * size], 0, size)
        with lock:
            files[value] = file

    for _ in range(6):
        new_file()
    stop = threading.Event()
    failures: list[str] = []
    reads = [0]

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            with lock:
                value, file = rng.choice(list(files.items()))
            try:
                data = file.pread(rng.randrange(1, 4096), rng.randrange(0, size - 4096))
            except SegmentClosedError:
                continue  # closed meanwhile: the promised outcome
            except OSError as e:  # EBADF: a descriptor closed under the read
                failures.append(f"file of {value}: {e}")
                continue
            if data.strip(bytes([value])):
                failures.append(f"file of {value} returned other bytes")
            with lock:
                reads[0] += 1

    def closer() -> None:
        rng = random.Random(0)
        for _ in range(300):
            with lock:
                value = rng.choice(list(files))
                file = files.pop(value)
            file.close()
            new_file()
        stop.set()

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(4)]
    threads.append(threading.Thread(target=closer))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    stop.set()
    assert not failures, failures[:5]
    assert reads[0] > 300
    assert pool.evictions > 100
    for file in files.values():
        file.close()
    assert pool.open_count == 0


def test_an_index_opens_nothing_until_it_writes(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    before = open_fds()
    index = OffsetIndex.create(path, 0)
    assert path.exists()  # created empty, so that the next start need not rebuild it
    index.append(5, 300)
    index.append(9, 700)
    assert open_fds() == before  # entries pending in memory, no descriptor
    index.write()
    assert open_fds() == before
    assert path.stat().st_size == 16
    index.append(12, 900)
    index.flush()
    index.truncate_to(9)  # cuts written entries from the file, by path
    assert path.stat().st_size == 8
    index.close()
    assert open_fds() == before
    loaded = OffsetIndex.load(path, 0, 1000)
    assert [tuple(e) for e in loaded.entries()] == [(5, 300)]
    assert open_fds() == before


def test_a_new_segment_keeps_only_its_log_file_open(tmp_path: Path) -> None:
    pool = SegmentFilePool(10)
    segment = LogSegment.create(tmp_path, 0, index_interval_bytes=INTERVAL, files=pool)
    fds = open_fds()
    assert segment.log_path.as_posix() in fds
    assert segment.index_path.as_posix() not in fds
    for i in range(20):
        append(segment, batch(3 * i))
    assert len(segment.index) > 0
    assert segment.index_path.as_posix() not in open_fds()
    segment.close()


_BUDGET_CHILD = textwrap.dedent(
    """
    import errno, os, resource, sys
    from pathlib import Path

    from broker.log.log_manager import LogManager
    from proto.config.log_config import LogConfig
    from proto.records.record_batch import Record, encode_batch
    from proto.topic_partition import TopicPartition

    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    data = Path(sys.argv[1])
    partitions = [TopicPartition("many", p) for p in range(1200)]
    # Small segments so that most logs roll and hold several segments each.
    config = LogConfig(segment_bytes=4096)

    def payload(tp, i):
        value = b"%s-%d-%d" % (tp.topic.encode(), tp.partition, i) + b"." * 1000
        return encode_batch([Record(None, value, 0)])

    def most_fds():
        return len(os.listdir("/proc/self/fd"))

    peak = 0
    manager = LogManager(data, config, broker_id=1)
    manager.startup()
    for round_ in range(2):
        for tp in partitions:
            log_ = manager.get_or_create_log(tp)
            for i in range(3):
                log_.append_as_leader(payload(tp, 3 * round_ + i), leader_epoch=0)
        peak = max(peak, most_fds())
    for tp in partitions:
        records = manager.get_log(tp).read(0, 1 << 20).records
        assert records.count(b"many-%d-" % tp.partition) == 6, (tp, len(records))
    assert sum(len(l.segments) for l in manager.all_logs().values()) > len(partitions)
    manager.shutdown()

    manager = LogManager(data, config, broker_id=1)
    manager.startup()  # loads every log again
    assert len(manager.all_logs()) == len(partitions)
    for tp in partitions:
        log_ = manager.get_log(tp)
        log_.append_as_leader(payload(tp, 6), leader_epoch=0)
        assert log_.read(0, 1 << 20).records.count(b"many-%d-" % tp.partition) == 7
    peak = max(peak, most_fds())
    assert manager.segment_files.max_open == 128
    assert manager.segment_files.open_count <= 128
    manager.shutdown()
    assert peak < 256, peak
    print("ok")
    """
)


@pytest.mark.timeout(120)
def test_a_thousand_logs_live_within_an_fd_limit_of_256(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _BUDGET_CHILD, str(tmp_path / "data")],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip() == "ok"


_SHED_CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    from broker.log.log_segment import LogSegment
    from broker.log.segment_files import SegmentFilePool
    from proto.records.record_batch import Record, encode_batch, validate_batches

    data = Path(sys.argv[1])
    pool = SegmentFilePool(1)
    segments = []
    for name in ("a", "b"):
        (data / name).mkdir(parents=True)
        segment = LogSegment.create(data / name, 0, index_interval_bytes=200, files=pool)
        batch = encode_batch([Record(None, name.encode() * 100, 0)])
        segment.append(batch, validate_batches(batch))
        segments.append((segment, batch))
    (a, a_batch), (b, b_batch) = segments
    assert not a._file.is_open and b._file.is_open
    hogs = use_up_descriptors()
    # a's reopen meets EMFILE and takes b's idle descriptor instead; then the other way.
    assert a.read(0, 10_000, max_position=a.size).records == a_batch
    assert a._file.is_open and not b._file.is_open
    assert b.read(0, 10_000, max_position=b.size).records == b_batch
    assert b._file.is_open and not a._file.is_open
    # With b in use, nothing can be given up: EMFILE reaches the caller, retried later.
    b._file._acquire()
    try:
        a.read(0, 10_000, max_position=a.size)
    except OSError as err:
        assert err.errno == errno.EMFILE, err
    else:
        raise AssertionError("read without a descriptor")
    b._file._release()
    assert a.read(0, 10_000, max_position=a.size).records == a_batch
    print("ok")
    """
)


@pytest.mark.timeout(60)
def test_out_of_descriptors_a_reopen_takes_an_idle_one_of_the_pool(tmp_path: Path) -> None:
    run_emfile_child(_SHED_CHILD, tmp_path / "data")


def test_the_pool_bound_is_a_broker_property() -> None:
    from proto.config.broker_config import BrokerConfig

    base = {"broker.id": "1", "zookeeper.connect": "localhost:2181", "log.dirs": "/tmp/x"}
    assert BrokerConfig.from_properties(base).log_segment_open_files_max == -1
    config = BrokerConfig.from_properties({**base, "log.segment.open.files.max": "64"})
    assert config.log_segment_open_files_max == 64
    with pytest.raises(ValueError, match=r"log\.segment\.open\.files\.max"):
        BrokerConfig.from_properties({**base, "log.segment.open.files.max": "-2"})
