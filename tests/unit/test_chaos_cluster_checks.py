"""What ``chaos run`` checks of a cluster it is given before it starts, without a cluster:
the answers it gets are stood in for (tests/integration/test_chaos_given_cluster.py asks real
brokers)."""

from __future__ import annotations

import random
from collections.abc import Collection
from pathlib import Path

import pytest

from chaos import cluster_checks
from chaos.backend import BackendUnavailableError, ClusterBackend
from chaos.cluster_checks import (
    TRUNCATION_MODE,
    BrokerConfigsUnknownError,
    given_cluster_truncation_mode,
    unexported_sessions,
)
from chaos.runner import resolve_nemeses

HW, LE = "high-watermark", "leader-epoch"


class _Backend(ClusterBackend):
    """Three brokers, no Kafka listener unless given one, no exported session."""

    def __init__(self, name: str = "local", kafka: str | None = None) -> None:
        self.name = name
        self._kafka = kafka

    def broker_ids(self) -> list[int]:
        return [1, 2, 3]

    def bootstrap_servers(self) -> str:
        return "127.0.0.1:1"

    def zookeeper_connect(self) -> str:
        raise AssertionError("ZooKeeper is not asked when no broker exports a session")

    def kafka_bootstrap_servers(self) -> str | None:
        return self._kafka

    def kill(self, broker_id: int) -> None: ...
    def stop(self, broker_id: int) -> None: ...
    def start(self, broker_id: int) -> None: ...
    def pause(self, broker_id: int) -> None: ...
    def resume(self, broker_id: int) -> None: ...

    def is_running(self, broker_id: int) -> bool:
        return True

    def tear_segment(self, broker_id: int, rng: random.Random) -> str:
        raise NotImplementedError

    def zookeeper_session(self, broker_id: int) -> tuple[int, bytes] | None:
        return None

    def stop_cluster(self) -> None: ...

    def copy_data_dirs(self, into: Path, topics: Collection[str] | None = None) -> dict[int, Path]:
        return {}

    def copy_logs(self, into: Path) -> None: ...


def test_brokers_in_several_modes_are_named_mode_by_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {1: {TRUNCATION_MODE: HW}, 2: {TRUNCATION_MODE: LE}, 3: {TRUNCATION_MODE: HW}}
    monkeypatch.setattr(cluster_checks, "broker_configs", lambda *_a, **_k: answers)
    with pytest.raises(BackendUnavailableError) as refused:
        given_cluster_truncation_mode(_Backend("docker", "k:1"), HW, project="p")
    said = str(refused.value)
    assert f"the cluster --project p runs {TRUNCATION_MODE} {HW} on brokers 1, 3, " in said
    assert f"{LE} on broker 2, and the run asks for {HW}: " in said
    assert "Run with" not in said  # no one mode to name
    assert f'MINIBROKER_OVERRIDES="{TRUNCATION_MODE}={HW}" make up' in said


def test_a_broker_that_names_no_mode_runs_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    answers: dict[int, dict[str, str | None]] = {b: {TRUNCATION_MODE: None} for b in (1, 2, 3)}
    monkeypatch.setattr(cluster_checks, "broker_configs", lambda *_a, **_k: answers)
    mode, _ = given_cluster_truncation_mode(_Backend(kafka="k:1"), LE, data_dir="/d")
    assert mode == LE


def test_a_mode_that_cannot_be_read_refuses_only_a_mode_other_than_the_default() -> None:
    backend = _Backend()  # no Kafka listener to ask
    with pytest.raises(BackendUnavailableError, match="cannot read the replication"):
        given_cluster_truncation_mode(backend, HW, data_dir="/d")
    mode, said = given_cluster_truncation_mode(backend, LE, data_dir="/d")
    assert mode is None
    assert said.startswith(f"the {TRUNCATION_MODE} of the cluster --data-dir /d is unknown")
    assert "run no Kafka listener" in said


def test_a_listener_that_does_not_answer_is_said(tmp_path: Path) -> None:
    import socket

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(BrokerConfigsUnknownError, match=rf"brokers \[1, 2, 3\] \(127.0.0.1:{port}"):
        cluster_checks.broker_configs(f"127.0.0.1:{port}", [1, 2, 3], [TRUNCATION_MODE])


def test_nemeses_that_end_sessions_need_every_broker_to_export_its_own() -> None:
    backend = _Backend()
    assert unexported_sessions(backend) == dict.fromkeys([1, 2, 3], "exports no session")
    for nemesis in ("zk-expire", "cascade"):
        with pytest.raises(BackendUnavailableError, match=f"^{nemesis} ends brokers' ZooKeeper"):
            resolve_nemeses(["kill", nemesis], backend)
    chosen = resolve_nemeses(["all"], backend)
    assert "kill" in chosen
    assert not {"zk-expire", "cascade"} & set(chosen)
