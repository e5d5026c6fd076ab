"""The command line without a cluster: defaults, usage errors, --help and --version.

A few checks run the real ``minibroker`` command as a subprocess; the many others call its
``main`` in this process (a subprocess costs a second or two on a loaded machine). Both
with ``$MINIBROKER_DATA_DIR`` on a fresh directory, so that no ``./minibroker-data`` of the
machine is read.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import pytest

from client.cli.common import finish_args
from client.cli.main import build_parser, main
from client.cli.produce import key_separator
from proto.errors import UsageError
from tests.helpers import minibroker

Run = Callable[..., subprocess.CompletedProcess[str]]


def _cluster_json(data_dir: Path, zookeeper: int, brokers: dict[int, int]) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    state = {
        "zookeeper": {"pid": 1, "port": zookeeper, "host": "127.0.0.1"},
        "brokers": {str(i): {"pid": 1, "port": p, "host": "127.0.0.1"} for i, p in brokers.items()},
    }
    (data_dir / "cluster.json").write_text(json.dumps(state))


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """No cluster anywhere: the variables empty (as unset) and an empty data dir, for the
    subprocesses (returned) and this process (set)."""
    variables = {
        "MINIBROKER_BOOTSTRAP": "",
        "MINIBROKER_ZOOKEEPER": "",
        "MINIBROKER_DATA_DIR": str(tmp_path / "no-cluster"),
    }
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    return variables


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    """``minibroker ARGV`` through ``main`` in this process, as a subprocess's result."""

    def run_main(*argv: str) -> subprocess.CompletedProcess[str]:
        try:
            status = main(list(argv))
        except SystemExit as e:
            status = int(e.code or 0)
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["minibroker", *argv], status, out, err)

    return run_main


def _usage_error(result: subprocess.CompletedProcess[str], usage: str, says: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert f"usage: minibroker {usage}" in result.stderr, result.stderr
    assert says in result.stderr, result.stderr


def _parse(*argv: str) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    finish_args(args)
    return args


def test_default_bootstrap_and_zookeeper_come_from_the_local_cluster_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("MINIBROKER_BOOTSTRAP", "MINIBROKER_ZOOKEEPER", "MINIBROKER_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # ./minibroker-data is the default data dir
    args = _parse("consume", "t")
    assert (args.bootstrap_server, args.zookeeper) == ("localhost:9091", "localhost:2181")

    _cluster_json(tmp_path / "minibroker-data", 5000, {1: 5001, 2: 5002, 3: 5003})
    args = _parse("consume", "t", "--group", "g")
    assert args.bootstrap_server == "127.0.0.1:5001,127.0.0.1:5002,127.0.0.1:5003"
    assert args.zookeeper == "127.0.0.1:5000"

    _cluster_json(tmp_path / "other", 6000, {1: 6001})
    monkeypatch.setenv("MINIBROKER_DATA_DIR", str(tmp_path / "other"))
    assert _parse("topics", "list").bootstrap_server == "127.0.0.1:6001"
    args = _parse("topics", "list", "--data-dir", str(tmp_path / "minibroker-data"))
    assert args.zookeeper == "127.0.0.1:5000"

    # The explicit option wins, then the environment, over cluster.json.
    monkeypatch.setenv("MINIBROKER_BOOTSTRAP", "h:1")
    monkeypatch.setenv("MINIBROKER_ZOOKEEPER", "z:2")
    assert _parse("produce", "t").bootstrap_server == "h:1"
    args = _parse("topics", "create", "t", "--bootstrap-server", "b:3")
    assert (args.bootstrap_server, args.zookeeper) == ("b:3", "z:2")


def test_cli_help_works_without_a_cluster_and_reads_no_cluster_json(
    env: dict[str, str], run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "cluster.json").write_text("{not json")
    env = {**env, "MINIBROKER_DATA_DIR": str(damaged)}
    monkeypatch.setenv("MINIBROKER_DATA_DIR", str(damaged))
    top = minibroker("--help", env=env)
    assert top.returncode == 0, top.stderr
    assert "--version" in top.stdout
    for command in (
        ["broker"],
        ["cluster", "up"],
        ["cluster", "status"],
        ["topics"],
        ["topics", "create"],
        ["topics", "describe"],
        ["produce"],
        ["consume"],
        ["perf"],
        ["perf", "produce"],
        ["perf", "consume"],
        ["dump-log"],
        ["audit"],
    ):
        result = run(*command, "--help")
        assert result.returncode == 0, (command, result.stderr)
        assert f"usage: minibroker {' '.join(command)}" in result.stdout
    produce_help = run("produce", "--help").stdout
    assert "every broker of the local cluster" in " ".join(produce_help.split())
    # The damaged file matters only to a command that needs the default addresses.
    damaged_run = run("topics", "list")
    assert damaged_run.returncode == 1
    assert "cluster.json is damaged" in damaged_run.stderr


def test_version_prints_the_installed_distribution_version(env: dict[str, str]) -> None:
    result = minibroker("--version", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"minibroker {metadata.version('minibroker')}\n"


def test_subcommand_errors_show_the_subcommand_usage(env: dict[str, str], run: Run) -> None:
    # Found after parsing, by the command (once as a user runs it).
    _usage_error(
        minibroker("consume", "t", "--offset", "3", env=env),
        "consume",
        "--offset needs --partition",
    )
    _usage_error(
        run("consume", "t", "--partition", "0", "--offset", "3", "--from-beginning"),
        "consume",
        "--from-beginning and --offset cannot be given together",
    )
    _usage_error(
        run("perf", "consume", "t", "--num-records", "0"),
        "perf consume",
        "--num-records must be >= 1",
    )
    # argparse left an unknown option to the top parser, whose usage hid the subcommand's.
    _usage_error(
        run("consume", "t", "--bogus"),
        "consume",
        "unrecognized arguments: --bogus",
    )
    # A missing nested subcommand names the ones there are.
    _usage_error(run("topics"), "topics", "(one of: create, list, describe, alter, delete")
    _usage_error(run("perf"), "perf", "(one of: produce, consume)")
    _usage_error(run("cluster"), "cluster", "(one of: up, down, status")


def test_topic_option_is_accepted_wherever_a_topic_is_positional(
    env: dict[str, str], run: Run
) -> None:
    for command in (["produce"], ["consume"], ["perf", "produce"], ["perf", "consume"]):
        _usage_error(
            run(*command, "a", "--topic", "b"),
            " ".join(command),
            "two topics given: 'a' and --topic 'b'",
        )
        _usage_error(
            run(*command),
            " ".join(command),
            "required: TOPIC (or --topic TOPIC)",
        )
        assert _parse(*command, "--topic", "t").topic == "t"
        assert _parse(*command, "t", "--topic", "t").topic == "t"
        assert _parse(*command, "t").topic == "t"


def test_kafka_console_properties_are_aliases_and_unknown_ones_are_usage_errors(
    env: dict[str, str], run: Run
) -> None:
    _usage_error(
        run("consume", "t", "--property", "print.timestamp=true"),
        "consume",
        "unknown property 'print.timestamp' (known: key.separator, print.key, print.offset)",
    )
    _usage_error(
        run("produce", "t", "--property", "print.key=true"),
        "produce",
        "unknown property 'print.key' (known: key.separator, parse.key)",
    )
    _usage_error(
        run("produce", "t", "--property", "parse.key=yes"),
        "produce",
        "property parse.key must be true or false",
    )
    assert key_separator(_parse("produce", "t", "--property", "parse.key=true")) == "\t"
    assert (
        key_separator(
            _parse("produce", "t", "--property", "parse.key=true", "--property", "key.separator=:")
        )
        == ":"
    )
    assert key_separator(_parse("produce", "t", "--property", "key.separator=:")) is None
    with pytest.raises(UsageError, match="disagree"):
        key_separator(
            _parse("produce", "t", "--key-separator", ",", "--property", "parse.key=true")
        )


def test_perf_produce_and_consume_take_the_count_by_either_name(
    env: dict[str, str], run: Run
) -> None:
    for kind in ("produce", "consume"):
        assert _parse("perf", kind, "t", "--num-records", "5").num_records == 5
        assert _parse("perf", kind, "t", "--messages", "6").num_records == 6
        shown = " ".join(run("perf", kind, "--help").stdout.split())
        assert "--num-records N, --messages N" in shown
