"""``chaos run`` on a cluster it is given (``--data-dir``, a real ``minibroker cluster up``):
what the run cannot change there is checked before anything starts, and refused in one line
with exit status 2.

The cluster here runs ``replication.truncation.mode=high-watermark`` and does not export its
brokers' ZooKeeper sessions. A run asking for another mode is refused, naming the mode the
cluster runs and how to get one in the other (the run used to go on in the cluster's mode,
``--truncation-mode`` silently not applied); ``zk-expire`` and ``cascade``, which end
brokers' sessions, are refused before the run, not at their first strike. The checks read
what the brokers themselves answer: DescribeConfigs on their Kafka listeners, the exported
session against the one holding each registration in ZooKeeper.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.kafka_server import ZOOKEEPER_SESSION_FILE
from chaos.backend import BackendUnavailableError
from chaos.cluster_checks import (
    SESSION_EXPORT,
    TRUNCATION_MODE,
    broker_configs,
    given_cluster_truncation_mode,
    unexported_sessions,
)
from chaos.local_backend import LocalBackend
from chaos.run_dir import RunDir
from chaos.runner import RunSettings, _Run
from deploy.local_cluster import LocalCluster
from proto.zk import znodes
from proto.zk.sync_client import kazoo_client
from tests.helpers import cluster_up_on_free_ports, minibroker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HW = "high-watermark"


@pytest.fixture(scope="module")
def hw_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A running 3-broker cluster in high-watermark mode, without session export."""
    data_dir = tmp_path_factory.mktemp("hw-cluster")
    cluster_up_on_free_ports(data_dir, "--override", f"{TRUNCATION_MODE}={HW}")
    try:
        yield data_dir
    finally:
        minibroker("cluster", "down", "--data-dir", str(data_dir))


def _chaos_run(data_dir: Path, out: Path, *args: str) -> tuple[int, str]:
    done = minibroker(
        "chaos", "run", "--data-dir", str(data_dir), "--out", str(out), *args, timeout=120
    )
    return done.returncode, done.stderr


def test_a_run_asking_another_truncation_mode_is_refused_naming_the_clusters(
    hw_cluster: Path, tmp_path: Path
) -> None:
    status, stderr = _chaos_run(hw_cluster, tmp_path / "run", "--truncation-mode", "leader-epoch")
    assert status == 2, stderr
    assert "Traceback" not in stderr
    line = stderr.strip().splitlines()[-1]
    assert f"runs {TRUNCATION_MODE} {HW} on brokers 1, 2, 3" in line
    assert "asks for leader-epoch (the default)" in line
    assert f"Run with --truncation-mode {HW}" in line
    assert f"--override {TRUNCATION_MODE}=leader-epoch" in line
    assert not (tmp_path / "run" / "data").exists()  # nothing was started
    assert not (tmp_path / "run" / "workload").exists()
    assert (tmp_path / "run" / "timeline.jsonl").read_text() == ""  # no fault struck

    backend = LocalBackend(LocalCluster(hw_cluster))
    mode, said = given_cluster_truncation_mode(backend, HW, data_dir=hw_cluster)
    assert mode == HW
    assert (
        said == f"the cluster --data-dir {hw_cluster} runs {TRUNCATION_MODE} {HW} on every broker"
    )
    # no --truncation-mode: whichever mode the cluster runs, said so and judged by it
    assert given_cluster_truncation_mode(backend, None, data_dir=hw_cluster) == (HW, said)


def test_the_brokers_own_answers_are_what_is_checked(hw_cluster: Path) -> None:
    backend = LocalBackend(LocalCluster(hw_cluster))
    configs = broker_configs(
        backend.kafka_bootstrap_servers(), [1, 2, 3], [TRUNCATION_MODE, SESSION_EXPORT]
    )
    assert configs == {b: {TRUNCATION_MODE: HW, SESSION_EXPORT: "false"} for b in (1, 2, 3)}


@pytest.mark.parametrize("nemesis", ["zk-expire", "cascade"])
def test_nemeses_that_end_sessions_are_refused_where_the_brokers_export_none(
    hw_cluster: Path, tmp_path: Path, nemesis: str
) -> None:
    status, stderr = _chaos_run(
        hw_cluster, tmp_path / "run", "--truncation-mode", HW, "--nemesis", "kill", "--nemesis",
        nemesis,
    )  # fmt: skip
    assert status == 2, stderr
    line = stderr.strip().splitlines()[-1]
    assert f"{nemesis} ends brokers' ZooKeeper sessions" in line
    assert "broker 1 exports no session; broker 2 exports no session" in line
    assert f"--override {SESSION_EXPORT}=true" in line
    assert not (tmp_path / "run" / "data").exists()


def test_a_session_exported_by_an_earlier_start_is_not_taken_for_the_current_one(
    hw_cluster: Path,
) -> None:
    """A broker once started with the export and now without it leaves its file behind:
    that session is closed, and ending it would strike nothing."""
    backend = LocalBackend(LocalCluster(hw_cluster))
    left = backend.broker_data_dir(2) / ZOOKEEPER_SESSION_FILE
    left.write_text(f"{0x1234:x} {'00' * 16}\n")
    try:
        missing = unexported_sessions(backend, wait_s=0.5)
    finally:
        os.unlink(left)
    assert sorted(missing) == [1, 2, 3]
    assert missing[2].startswith("exports session 0x1234, not 0x")
    assert missing[2].endswith("that holds its registration")
    with pytest.raises(BackendUnavailableError, match="asks for leader-epoch"):
        given_cluster_truncation_mode(backend, "leader-epoch", data_dir=hw_cluster)


def test_unclean_election_is_the_workload_topics_own_setting_on_a_given_cluster(
    hw_cluster: Path, tmp_path: Path
) -> None:
    """``--unclean`` needs no refusal: the run writes ``unclean.leader.election.enable``
    into each topic's own config (``/config/topics/<t>``; false without ``--unclean``),
    which the controller reads at every election over the brokers' default (false here)."""
    settings = RunSettings(
        out=tmp_path / "run", data_dir=hw_cluster, truncation_mode=HW, unclean=True, topics=1
    )
    run = _Run(settings, RunDir.create(settings.out), None)
    run.backend = LocalBackend(LocalCluster(hw_cluster))
    tps = run._topics()
    assert {tp.partition for tp in tps} == {0, 1, 2}
    with kazoo_client(run.backend.zookeeper_connect()) as zk:
        data, _ = zk.get(znodes.topic_config_path(tps[0].topic))
    assert znodes.decode_topic_config(data)["unclean.leader.election.enable"] == "true"
