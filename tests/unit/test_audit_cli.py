"""`minibroker audit` on bad input: exit status 2 and a message naming the problem, before
any Spark session starts; `minibroker --help` does not import Spark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from chaos.audit.testing import BrokerDataDir
from client.cli.main import main


def _audit(*args: str) -> list[str]:
    return ["audit", *args]


def test_the_cli_does_not_import_spark_until_the_audit_runs() -> None:
    code = (
        "import sys; from client.cli.main import build_parser; "
        "build_parser().format_help(); print('pyspark' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


def test_a_missing_data_dir_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope"
    assert main(_audit("--data", str(missing), "--report", str(tmp_path / "out"))) == 2
    assert capsys.readouterr().err == f"minibroker audit: data dir {missing} does not exist\n"


def test_a_missing_history_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    BrokerDataDir(tmp_path / "b1", 1).close()
    args = ["--data", str(tmp_path / "b1"), "--history", str(tmp_path / "h.jsonl")]
    assert main(_audit(*args, "--report", str(tmp_path / "out"))) == 2
    assert "is not a file" in capsys.readouterr().err


def test_a_malformed_timeline_line_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    BrokerDataDir(tmp_path / "b1", 1).close()
    timeline = tmp_path / "timeline.jsonl"
    timeline.write_text(
        '{"time": 1, "process": "nemesis", "f": "kill"}\n\n{"time": 2, "process": "nemesis"}\n'
    )
    args = ["--data", str(tmp_path / "b1"), "--timeline", str(timeline)]
    assert main(_audit(*args, "--report", str(tmp_path / "out"))) == 2
    assert f"timeline {timeline}, line 3: a nemesis line needs" in capsys.readouterr().err


def test_a_bad_conf_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    BrokerDataDir(tmp_path / "b1", 1).close()
    args = ["--data", str(tmp_path / "b1"), "--conf", "spark.driver.memory"]
    assert main(_audit(*args, "--report", str(tmp_path / "out"))) == 2
    assert "--conf takes KEY=VALUE" in capsys.readouterr().err


def test_data_and_report_are_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(_audit("--report", "out"))
    assert exited.value.code == 2
    assert "--data" in capsys.readouterr().err
