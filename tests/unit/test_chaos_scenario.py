"""``minibroker chaos scenario`` without servers: the verdict against the design notes'
predictions, and the command's refusals (a run directory in use, a backend it lacks), which
start no process. The scenarios themselves run in
tests/integration/test_high_watermark_failure_scenarios.py."""

from __future__ import annotations

import io
import json
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from broker.replication.truncation import TruncationMode
from chaos.audit.history import parse_timeline_line
from chaos.audit.timeline import Mark, read_timeline
from chaos.history_recorder import HistoryRecorder, TimelineRecorder
from chaos.scenario.cli import default_out
from chaos.scenario.cluster import A, B, ScenarioCluster
from chaos.scenario.play import Narrator, Play
from chaos.scenario.runner import SCENARIOS
from chaos.scenario.verdict import Found, Prediction, judge, read_findings
from client.cli.main import main

LOST_M1 = Prediction(frozenset({Found("lost_ack", 1)}), "the acknowledged m1 is lost")


def _minibroker(capsys: pytest.CaptureFixture[str], *argv: str) -> subprocess.CompletedProcess[str]:
    try:
        status = main(list(argv))
    except SystemExit as e:
        status = int(e.code or 0)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["minibroker", *argv], status, out, err)


def test_the_verdict_follows_the_prediction_when_the_audit_finds_exactly_it() -> None:
    verdict = judge(LOST_M1, "high-watermark", [Found("lost_ack", 1)])
    assert verdict.as_predicted
    assert verdict.line == (
        "as the design notes predict for high-watermark truncation: the acknowledged m1 is lost"
    )


@pytest.mark.parametrize(
    ("found", "says"),
    [
        ([], "the audit found no violation (missing lost_ack at offset 1)"),
        (
            [Found("lost_ack", 1), Found("divergence", 1)],
            "the audit found divergence at offset 1, lost_ack at offset 1 (also divergence at "
            "offset 1)",
        ),
        ([Found("lost_ack", 2)], "(missing lost_ack at offset 1; also lost_ack at offset 2)"),
    ],
)
def test_a_missing_or_extra_finding_is_unexpected(found: list[Found], says: str) -> None:
    verdict = judge(LOST_M1, "high-watermark", found)
    assert not verdict.as_predicted
    assert verdict.line.startswith(
        "UNEXPECTED: for high-watermark truncation the design notes predict lost_ack at "
        "offset 1 (the acknowledged m1 is lost); "
    )
    assert says in verdict.line


def test_a_clean_prediction_is_met_only_by_a_clean_audit() -> None:
    clean = SCENARIOS["hw-data-loss"].predictions[TruncationMode.LEADER_EPOCH]
    assert judge(clean, "leader-epoch", []).as_predicted
    assert not judge(clean, "leader-epoch", [Found("lost_ack", 1)]).as_predicted


def test_hw_divergence_expects_the_unclean_elections_lost_ack_in_both_modes() -> None:
    predictions = SCENARIOS["hw-divergence"].predictions
    assert predictions[TruncationMode.HIGH_WATERMARK].violations == {
        Found("divergence", 1),
        Found("lost_ack", 1),
    }
    assert predictions[TruncationMode.LEADER_EPOCH].violations == {Found("lost_ack", 1)}
    note = SCENARIOS["hw-divergence"].note or ""
    assert "price of the unclean election" in note
    assert "What leader epochs fix is the divergence" in note


def test_read_findings_spells_out_a_run_of_offsets(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    violations = [
        {"kind": "lost_ack", "offset": 3, "last_offset": 5},
        {"kind": "divergence", "offset": 1, "last_offset": 1},
    ]
    report.write_text(json.dumps({"violations": violations, "summary": {}}))
    assert read_findings(report) == [
        Found("lost_ack", 3),
        Found("lost_ack", 4),
        Found("lost_ack", 5),
        Found("divergence", 1),
    ]


def test_an_out_dir_holding_a_run_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    held = tmp_path / "run"
    held.mkdir()
    (held / "history.jsonl").write_text("")
    result = _minibroker(
        capsys, "chaos", "scenario", "hw-data-loss", "--truncation-mode", "leader-epoch",
        "--out", str(held),
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("minibroker chaos scenario: ")
    assert f"{held} already holds a run (history.jsonl)" in result.stderr
    assert sorted(p.name for p in held.iterdir()) == ["history.jsonl"]


def test_the_docker_backend_is_refused_with_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "run"
    result = _minibroker(
        capsys, "chaos", "scenario", "hw-divergence", "--truncation-mode", "high-watermark",
        "--backend", "docker", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 2
    assert "usage: minibroker chaos scenario" in result.stderr
    assert "error: --backend docker: scenarios run on the local backend only" in result.stderr, (
        result.stderr
    )
    assert not out.exists()


def test_the_help_names_both_scenarios_and_the_local_backend(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = _minibroker(capsys, "chaos", "scenario", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "{hw-data-loss,hw-divergence}" in text
    assert "--truncation-mode {leader-epoch,high-watermark}" in text
    assert "only local (ZooKeeper and two brokers as processes on this machine)" in text
    missing = _minibroker(capsys, "chaos")
    assert missing.returncode == 2
    assert re.search(r"\(one of: [^)]*\bscenario\b", missing.stderr), missing.stderr


def test_the_default_out_dir_is_new_under_chaos_runs(tmp_path: Path) -> None:
    first = default_out("hw-data-loss", TruncationMode.HIGH_WATERMARK, tmp_path)
    assert first.parent == tmp_path
    assert first.name.startswith("hw-data-loss-high-watermark-")
    first.mkdir()
    second = default_out("hw-data-loss", TruncationMode.HIGH_WATERMARK, tmp_path)
    if second.name.startswith(first.name):  # the same second: a suffix keeps them apart
        assert second.name == f"{first.name}-2"
    assert second != first


def test_each_scenario_names_its_brokers_for_the_report() -> None:
    """The narration's A and B, written as the timeline's roles line: the report titles the
    brokers' lanes with them."""
    for scenario in SCENARIOS.values():
        assert dict(scenario.roles) == {"A": A, "B": B}


def test_a_key_event_is_a_mark_line_of_the_timeline(tmp_path: Path) -> None:
    path = tmp_path / "timeline.jsonl"
    with TimelineRecorder(path) as timeline:
        cluster = cast(ScenarioCluster, SimpleNamespace(timeline=timeline))
        play = Play(
            cluster,
            TruncationMode.HIGH_WATERMARK,
            cast(HistoryRecorder, None),
            Narrator(io.StringIO()),
        )
        play.mark("B truncates m1")
    (line,) = [json.loads(text) for text in path.read_text().splitlines()]
    assert (line["process"], line["f"], line["label"]) == ("nemesis", "mark", "B truncates m1")
    event = parse_timeline_line(1, json.dumps(line))
    assert event is not None
    assert read_timeline([event]).marks == [Mark(line["time"], "B truncates m1")]
