"""The ``minibroker`` command line, following Kafka's tool conventions (docs/cli.md).

Each subcommand lives in its own module and registers itself through ``add_parser``; this
module only wires them together, importing a subcommand's module only when that subcommand
runs (:data:`COMMANDS`): ``minibroker --version`` or ``minibroker topics --help`` loads
neither the broker, the chaos tools, the audit (pyspark) nor deploy. It turns expected
failures into one line on stderr and a non-zero exit status, never a traceback. A mistake
in the command line, found by argparse or by the command after parsing
(:class:`proto.errors.UsageError`), is shown with the usage of the subcommand it concerns
and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

if TYPE_CHECKING:
    from proto.errors import MinibrokerError

DISTRIBUTION = "minibroker"


def version() -> str:
    """The installed distribution's version, else the one in the source tree's pyproject."""
    import tomllib
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
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


@dataclass(frozen=True)
class Command:
    """A subcommand: the module whose ``add_parser(commands)`` builds its parser (and sets
    ``run``), and the one-line help ``minibroker --help`` shows without importing it."""

    module: str
    help: str


COMMANDS: dict[str, Command] = {
    "broker": Command("broker.main", "run one broker in the foreground"),
    "cluster": Command(
        "client.cli.cluster", "run a local cluster: ZooKeeper and brokers as processes"
    ),
    "topics": Command("client.cli.topics", "create, list, describe, alter and delete topics"),
    "configs": Command(
        "client.cli.configs", "describe and change topic and broker configs without a restart"
    ),
    "acls": Command(
        "client.cli.acls", "add, remove and list ACLs (with authorizer.class.name on the brokers)"
    ),
    "produce": Command("client.cli.produce", "send stdin lines as records"),
    "consume": Command("client.cli.consume", "print records of a topic"),
    "consumer-groups": Command(
        "client.cli.consumer_groups", "list and describe consumer groups, reset their offsets"
    ),
    "perf": Command("client.cli.perf", "measure produce or consume throughput and latency"),
    "dump-log": Command(
        "client.cli.dump_log", "print the record batches of a segment file or partition directory"
    ),
    "audit": Command(
        "chaos.audit.cli", "Spark audit of replica logs and an acknowledgement history"
    ),
    "chaos": Command("chaos.cli", "break a real cluster on a schedule and audit its replica logs"),
}
"""Every subcommand, in the order ``--help`` lists them. The tools above the client library
(the broker process, chaos, the audit) are named here by module, not imported: the command
line is the top of the stack and loads only what the command it runs needs."""


def _chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand argv names: its first word that is not an option (the top-level
    parser has no option that takes a value)."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for argv: the full parser of the subcommand it names, a one-line stand-in
    for every other (enough for ``--help`` and for argparse's "invalid choice"). Without
    argv, every subcommand's full parser (for tests and docs)."""
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
    chosen = None if argv is None else _chosen_command(argv)
    for name, command in COMMANDS.items():
        if argv is None or name == chosen:
            importlib.import_module(command.module).add_parser(commands)
        else:
            commands.add_parser(name, help=command.help, add_help=False)
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
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    # Every process of the project starts here (brokers too), once it is known to run a
    # command (--version and --help have exited): large buffers reused, not page-faulted in
    # afresh for each request, and the cyclic collector run less often
    # (proto.process.tuning says what each measured).
    from proto.process.tuning import tune_process

    tune_process()
    command_parser = getattr(args, "command_parser", parser)
    if extra:
        # argparse leaves what a subcommand did not take to the top parser, whose usage
        # would not name the subcommand's options.
        command_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    # Imported once the command is known: --version and --help never need them.
    import logging

    from client.cli.common import finish_args
    from proto.errors import MinibrokerError, UsageError

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
