"""The ``minibroker`` command line, following Kafka's tool conventions (docs/cli.md).

Each subcommand lives in its own module and registers itself through ``add_parser``; this
module only wires them together and turns expected failures into one line on stderr and a
non-zero exit status, never a traceback. A mistake in the command line, found by argparse
or by the command after parsing (:class:`client.cli_common.UsageError`), is shown with the
usage of the subcommand it concerns and exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tomllib
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn, cast

from broker import main as broker_main
from chaos import cli as chaos_cli
from chaos.audit import cli as audit_cli
from client import (
    cluster_cli,
    configs_cli,
    consume_cli,
    consumer_groups_cli,
    dump_log,
    perf_cli,
    produce_cli,
    topics_cli,
)
from client.cli_common import UsageError, finish_args
from proto.errors import MinibrokerError
from proto.process.tuning import tune_process

DISTRIBUTION = "minibroker"


def version() -> str:
    """The installed distribution's version, else the one in the source tree's pyproject."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        try:
            return str(tomllib.loads(pyproject.read_text())["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown"


class _VersionAction(argparse.Action):
    """``--version``, looked up only when asked for (argparse's own wants the text up front)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        print(f"minibroker {version()}")
        parser.exit()


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors also list the subcommands, if it has any, so that
    ``minibroker topics`` says which actions there are. The subparsers are of this class
    too (argparse makes them of their parent's)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        for action in self._actions:
            if (
                isinstance(action, argparse._SubParsersAction)
                and f"required: {action.metavar}" in message
            ):
                message += f" (one of: {', '.join(action.choices)})"
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="minibroker",
        description="A Kafka-style replicated log: brokers, controller, CLI and audit.",
    )
    parser.add_argument("--version", action=_VersionAction)
    # The subcommands' modules take plain ArgumentParsers: _Parser only changes error().
    commands = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(dest="command", metavar="COMMAND", required=True),
    )
    broker_main.add_parser(commands)
    cluster_cli.add_parser(commands)
    topics_cli.add_parser(commands)
    configs_cli.add_parser(commands)
    produce_cli.add_parser(commands)
    consume_cli.add_parser(commands)
    consumer_groups_cli.add_parser(commands)
    perf_cli.add_parser(commands)
    dump_log.add_parser(commands)
    audit_cli.add_parser(commands)
    chaos_cli.add_parser(commands)
    _remember_parsers(parser)
    return parser


def _remember_parsers(parser: argparse.ArgumentParser) -> None:
    """Give every subcommand's parser to its namespace (``command_parser``; the innermost
    one wins), for the usage of errors found after parsing."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub.set_defaults(command_parser=sub)
                _remember_parsers(sub)


def _unreachable_hint(err: MinibrokerError) -> str:
    """For "cannot reach any broker": whether the addresses tried are Kafka listeners (a
    common mistake: the Docker cluster publishes both kinds of port)."""
    import asyncio

    from client.metadata import BrokerUnreachableError
    from client.reachability import kafka_listener_hint

    if not isinstance(err, BrokerUnreachableError) or not err.unavailable:
        return ""
    return asyncio.run(kafka_listener_hint(err.unavailable))


def main(argv: Sequence[str] | None = None) -> int:
    # Every process of the project starts here (brokers too): large buffers reused, not
    # page-faulted in afresh for each request, and the cyclic collector run less often
    # (proto.process.tuning says what each measured).
    tune_process()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    command_parser = getattr(args, "command_parser", parser)
    if extra:
        # argparse leaves what a subcommand did not take to the top parser, whose usage
        # would not name the subcommand's options.
        command_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command != "broker":
        # A client command reports its own errors in one line; kazoo's reconnect warnings
        # ("Connection dropped: ...") would only bury that line. The broker logs them.
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    try:
        finish_args(args)
        status: int = args.run(args)
    except UsageError as err:
        command_parser.error(str(err))
    except MinibrokerError as err:
        print(f"minibroker {args.command}: {err}{_unreachable_hint(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `minibroker dump-log ... | head` closed our stdout: not an error for the user.
        sys.stderr.close()
        return 0
    return status


if __name__ == "__main__":
    sys.exit(main())
