"""A chaos run's compacted workload, without a cluster: the cleaner-crash nemesis watching
stand-in data dirs (files made by a thread, as a broker's cleaner makes them), which
nemeses a run may use, the broker settings and topic configs it records for the audit, and
the producers' keys and tombstones."""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from chaos import nemesis as nemesis_module
from chaos.audit.topic_configs import Compaction, read_topic_configs
from chaos.backend import BackendUnavailableError, ClusterBackend
from chaos.history_recorder import TimelineRecorder
from chaos.nemesis import NEMESES, NemesisContext, NoTargetError, swap_file
from chaos.run_dir import RunDir
from chaos.runner import (
    COMPACTED_TOPIC_CONFIG,
    RunSettings,
    cluster_overrides,
    resolve_nemeses,
    run_chaos,
)
from chaos.workload_records import record_for
from proto.topic_partition import TopicPartition

TPS = [TopicPartition("chaos-0", p) for p in range(3)]


class _Backend(ClusterBackend):
    """Three running brokers whose data dirs are plain directories (none to watch, as on
    Docker, without ``data_dirs``); kills are recorded, nothing else is done."""

    def __init__(self, root: Path, data_dirs: bool = True) -> None:
        self.name = "local" if data_dirs else "docker"
        self.root = root
        self.data_dirs = data_dirs
        self.killed: list[tuple[int, float]] = []
        for b in self.broker_ids():
            for tp in TPS:
                (root / f"broker-{b}" / tp.dir_name).mkdir(parents=True)

    def broker_ids(self) -> list[int]:
        return [1, 2, 3]

    def is_running(self, broker_id: int) -> bool:
        return broker_id not in {b for b, _ in self.killed}

    def broker_data_dir(self, broker_id: int) -> Path:
        if not self.data_dirs:
            return super().broker_data_dir(broker_id)
        return self.root / f"broker-{broker_id}"

    def kill(self, broker_id: int) -> None:
        self.killed.append((broker_id, time.monotonic()))

    def start(self, broker_id: int) -> None:
        self.killed = [(b, t) for b, t in self.killed if b != broker_id]

    def bootstrap_servers(self) -> str:
        raise NotImplementedError

    def zookeeper_connect(self) -> str:
        raise NotImplementedError

    def stop(self, broker_id: int) -> None:
        raise NotImplementedError

    def pause(self, broker_id: int) -> None:
        raise NotImplementedError

    def resume(self, broker_id: int) -> None:
        raise NotImplementedError

    def tear_segment(self, broker_id: int, rng: random.Random) -> str:
        raise NotImplementedError

    def zookeeper_session(self, broker_id: int) -> tuple[int, bytes] | None:
        return None

    def stop_cluster(self) -> None:
        raise NotImplementedError

    def copy_data_dirs(self, into: Path, topics: Collection[str] | None = None) -> dict[int, Path]:
        raise NotImplementedError

    def copy_logs(self, into: Path) -> None:
        raise NotImplementedError


def _context(
    backend: _Backend, timeline: TimelineRecorder, compacted: bool = True
) -> NemesisContext:
    return NemesisContext(
        backend,
        cast(Any, None),
        TPS,
        timeline,
        1.0,
        set(),
        frozenset({"chaos-0"}) if compacted else frozenset(),
    )


@pytest.fixture
def timeline(tmp_path: Path) -> Iterator[TimelineRecorder]:
    recorder = TimelineRecorder(tmp_path / "timeline.jsonl")
    yield recorder
    recorder.close()


def _events(timeline: TimelineRecorder) -> list[dict[str, Any]]:
    return [json.loads(line) for line in timeline.path.read_text().splitlines()]


def _later(delay_s: float, action: Callable[[], object]) -> threading.Thread:
    def run() -> None:
        time.sleep(delay_s)
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_cleaner_crash_kills_the_broker_whose_cleaner_is_swapping(
    tmp_path: Path, timeline: TimelineRecorder
) -> None:
    backend = _Backend(tmp_path)
    directory = tmp_path / "broker-2" / TPS[1].dir_name
    cleaned = directory / "00000000000000000120.log.cleaned"
    made: list[float] = []

    def clean() -> None:
        cleaned.touch()
        made.append(time.monotonic())

    thread = _later(0.2, clean)
    fault = NEMESES["cleaner-crash"].strike(_context(backend, timeline), 0.0)
    thread.join()
    assert fault.target == 2
    assert [b for b, _ in backend.killed] == [2]
    assert backend.killed[0][1] - made[0] < 0.5  # polled, not waited out
    assert fault.detail == f"mid-swap: {directory.name}/{cleaned.name} seen"
    assert str(fault) == f"cleaner-crash 2 ({fault.detail})"
    (kill,) = _events(timeline)
    assert (kill["f"], kill["target"], kill["moment"]) == ("kill", 2, "mid-swap")
    fault.heal()
    assert backend.killed == []
    assert swap_file(directory) == cleaned.name
    assert swap_file(tmp_path / "nowhere") is None


def test_cleaner_crash_falls_back_to_a_broker_that_cleaned_then_to_the_pick(
    tmp_path: Path, timeline: TimelineRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nemesis_module._CleanerCrash, "WAIT_S", 0.5)
    backend = _Backend(tmp_path)
    checkpoint = tmp_path / "broker-3" / nemesis_module.CLEANER_CHECKPOINT
    thread = _later(0.1, lambda: checkpoint.write_text("0\n1\nchaos-0 1 240\n"))
    fault = NEMESES["cleaner-crash"].strike(_context(backend, timeline), 0.0)
    thread.join()
    assert (fault.target, fault.detail) == (3, "after a cleaning: no swap seen in 0.5 s")
    fault.heal()
    fault = NEMESES["cleaner-crash"].strike(_context(backend, timeline), 0.99)
    assert (fault.target, fault.detail) == (3, "no cleaning seen in 0.5 s")
    kills = [e["moment"] for e in _events(timeline) if e["f"] == "kill"]
    assert kills == ["after-cleaning", "no-cleaning-seen"]


def test_cleaner_crash_needs_compacted_topics_and_data_dirs_it_can_watch(
    tmp_path: Path, timeline: TimelineRecorder
) -> None:
    backend = _Backend(tmp_path)
    with pytest.raises(NoTargetError, match="no compacted topic"):
        NEMESES["cleaner-crash"].strike(_context(backend, timeline, compacted=False), 0.0)
    assert backend.killed == []
    assert "cleaner-crash" not in resolve_nemeses(["all"], backend)
    assert "cleaner-crash" in resolve_nemeses(["all"], backend, compacted=True)
    with pytest.raises(BackendUnavailableError, match="run with --compacted"):
        resolve_nemeses(["kill", "cleaner-crash"], backend)
    blind = _Backend(tmp_path / "docker", data_dirs=False)
    assert "cleaner-crash" not in resolve_nemeses(["all"], blind, compacted=True)
    with pytest.raises(BackendUnavailableError, match="cleaner-crash runs on the local backend"):
        resolve_nemeses(["cleaner-crash"], blind, compacted=True)


def test_a_run_with_cleaner_crash_but_no_compacted_topic_is_refused_before_it_starts(
    tmp_path: Path,
) -> None:
    settings = RunSettings(out=tmp_path / "run", nemeses=["cleaner-crash"])
    with pytest.raises(BackendUnavailableError, match="run with --compacted"):
        run_chaos(settings)
    assert not (tmp_path / "run").exists()


def test_a_compacted_runs_own_cluster_cleans_often_and_its_topics_are_recorded(
    tmp_path: Path,
) -> None:
    assert "log.cleaner.backoff.ms" not in cluster_overrides(RunSettings(out=tmp_path))
    compacted = cluster_overrides(RunSettings(out=tmp_path, compacted=True))
    assert int(compacted["log.cleaner.backoff.ms"]) <= 1000
    assert COMPACTED_TOPIC_CONFIG["cleanup.policy"] == "compact"
    assert float(COMPACTED_TOPIC_CONFIG["min.cleanable.dirty.ratio"]) < 0.1
    run = RunDir.create(tmp_path / "run")
    run.record_topics(
        {
            "chaos-0": {"min.insync.replicas": "2", **COMPACTED_TOPIC_CONFIG},
            "chaos-1": {"min.insync.replicas": "2"},
        }
    )
    retention = int(COMPACTED_TOPIC_CONFIG["delete.retention.ms"])
    assert read_topic_configs(run.topics) == {"chaos-0": Compaction(retention)}


def test_producers_of_a_compacted_workload_write_keys_from_a_small_set_and_tombstones() -> None:
    args = argparse.Namespace(process=3, keys=5, tombstone_every=4)
    keys = random.Random(3)
    written = [record_for(args, keys, n) for n in range(400)]
    assert {k for k, _ in written} == {f"k{i}" for i in range(5)}
    assert [n for n, (_, v) in enumerate(written) if v is None] == list(range(3, 400, 4))
    assert [v for _, v in written[:3]] == ["p3-0", "p3-1", "p3-2"]
    plain = argparse.Namespace(process=3, keys=0, tombstone_every=0)
    assert record_for(plain, keys, 7) == (None, "p3-7")
