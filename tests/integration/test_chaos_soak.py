"""``minibroker chaos soak`` on the local backend: one cluster of real processes, broken
window after window, each window audited on its own from copies of its own topics.

Two short windows (a kill and a leader's kill each, on the run's schedule) against the
cluster the soak starts: both clean, the figures summed in soak.json, the clean windows'
copied data deleted, each window's audit judging its own topics (and the internal ones)
only, and the cluster gone at the end.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.runner import RunSettings
from chaos.soak import SOAK_FILE, SoakSettings, run_soak
from deploy.local_cluster import LocalCluster, LocalClusterError

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from chaos.audit.session import start_session

    session = start_session("local[2]", {})
    yield session
    session.stop()


@pytest.fixture(scope="module")
def soak(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("soak")
    settings = SoakSettings(
        RunSettings(
            out=root,
            nemeses=("kill", "leader"),
            duration_s=14.0,
            interval_s=5.0,
            producers=2,
            rate=50.0,
            topics=1,
            partitions=2,
            session_timeout_ms=2000,
            seed=11,
            quiet=True,
            spark=spark,
        ),
        faults=1000,
        max_windows=2,
    )
    said: list[str] = []
    run_soak(settings, say=said.append)
    assert said[-1].startswith("soak: --max-windows 2 done"), said
    return root, json.loads((root / SOAK_FILE).read_text())


def test_each_window_is_a_clean_run_of_its_own(soak: tuple[Path, dict[str, Any]]) -> None:
    _, summary = soak
    assert summary["status"] == 0
    assert [w["status"] for w in summary["windows"]] == [0, 0]
    topics = []
    for w in summary["windows"]:
        window = Path(w["run_dir"])
        assert sum(w["faults"].values()) >= 1
        assert w["acked"] > 0
        assert w["violations"] == {}
        assert not (window / "data").exists()  # a clean window's copies are deleted
        report = json.loads((window / "audit" / "report.json").read_text())
        judged = {p["topic"] for p in report["summary"]["partitions"]}
        own = set(json.loads((window / "topics.json").read_text())["topics"])
        assert judged - own <= {"__consumer_offsets", "__transaction_state"}, judged
        topics.append(own)
    assert not topics[0] & topics[1]  # topics of its own per window


def test_the_totals_add_the_windows_up(soak: tuple[Path, dict[str, Any]]) -> None:
    _, summary = soak
    totals, windows = summary["totals"], summary["windows"]
    assert totals["windows"] == 2
    assert totals["faults"] == sum(sum(w["faults"].values()) for w in windows) >= 2
    assert set(totals["faults_by_nemesis"]) <= {"kill", "leader"}
    assert totals["acked"] == sum(w["acked"] for w in windows)
    assert totals["reads_checked"] == sum(w["reads"] for w in windows) > 0
    assert totals["violations"] == 0
    assert totals["heal_to_isr_s"]["count"] >= 1


def test_the_soaks_cluster_is_gone(soak: tuple[Path, dict[str, Any]]) -> None:
    """Stopped (``cluster down`` forgets it), and no process of it left."""
    root, _ = soak
    with pytest.raises(LocalClusterError, match="no cluster"):
        LocalCluster(root / "cluster").broker_ids()
    left = subprocess.run(
        ["pgrep", "-f", str(root / "cluster")], capture_output=True, text=True, check=False
    )
    assert left.stdout == ""
