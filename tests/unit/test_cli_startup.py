"""The command line imports only what the command it runs needs (client.cli.main.COMMANDS):
``--version`` and a client command's ``--help`` load neither the broker, the controller,
the chaos tools, the audit (pyspark) nor deploy, which cost most of its start-up."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from client.cli.main import COMMANDS, build_parser
from deploy.local_cluster import DATA_DIR_ENV, DEFAULT_DATA_DIR

_HEAVY = ("broker", "controller", "chaos", "deploy", "pyspark", "bench")

_LOADED = """
import json, sys
from client.cli.main import main
try:
    main(json.loads(sys.argv[1]))
except SystemExit:
    pass
sys.stderr.write("\\nMODULES " + json.dumps(sorted(sys.modules)) + "\\n")
"""


def _modules_loaded_by(argv: list[str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _LOADED, json.dumps(argv)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    line = done.stderr.rsplit("\nMODULES ", 1)[1]
    return list(json.loads(line))


@pytest.mark.parametrize(
    "argv",
    [["--version"], ["--help"], ["topics", "--help"], ["consume", "--help"], ["nosuch"]],
)
def test_command_line_loads_only_what_the_command_needs(argv: list[str]) -> None:
    heavy = [m for m in _modules_loaded_by(argv) if m.split(".")[0] in _HEAVY]
    assert heavy == []


def test_the_chosen_command_is_the_only_one_imported() -> None:
    loaded = _modules_loaded_by(["chaos", "--help"])
    assert "chaos.cli" in loaded
    assert "chaos.audit.cli" not in loaded
    assert "broker.main" not in loaded
    assert not [m for m in loaded if m.split(".")[0] == "pyspark"]


def test_command_table_matches_each_commands_own_parser() -> None:
    """The one-line help --help shows without importing a command is the command's own."""
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(commands.choices) == list(COMMANDS)
    helps = {action.dest: action.help for action in commands._choices_actions}
    assert helps == {name: command.help for name, command in COMMANDS.items()}


def test_lazily_built_parser_lists_every_command() -> None:
    parser = build_parser(["topics", "list"])
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(commands.choices) == list(COMMANDS)


def test_data_dir_help_names_deploys_defaults() -> None:
    """client.cli.common writes deploy's defaults out so that --help does not import it."""
    parser = build_parser(["topics", "list"])
    text = parser.parse_args(["topics", "list"]).command_parser.format_help()
    assert f"${DATA_DIR_ENV}" in text
    assert f"./{DEFAULT_DATA_DIR}" in text
