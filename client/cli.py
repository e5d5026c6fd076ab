"""The ``minibroker`` command line, following Kafka's tool conventions (DESIGN.md §7).

Each subcommand lives in its own module and registers itself through ``add_parser``; this
module only wires them together and turns expected failures into one line on stderr and a
non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from broker import main as broker_main
from chaos.audit import cli as audit_cli
from client import cluster_cli, consume_cli, dump_log, perf_cli, produce_cli, topics_cli
from proto.errors import MinibrokerError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minibroker",
        description="A Kafka-style replicated log: brokers, controller, CLI and audit.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    broker_main.add_parser(commands)
    cluster_cli.add_parser(commands)
    topics_cli.add_parser(commands)
    produce_cli.add_parser(commands)
    consume_cli.add_parser(commands)
    perf_cli.add_parser(commands)
    dump_log.add_parser(commands)
    audit_cli.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status: int = args.run(args)
    except MinibrokerError as err:
        print(f"minibroker {args.command}: {err}", file=sys.stderr)
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
