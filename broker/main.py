"""``minibroker broker``: run one broker in the foreground.

Logs go to stderr (or ``--log-file``), one line per event, each with the broker id, so a
chaos run can be read afterwards. SIGTERM or Ctrl-C shut the broker down cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from proto.config.broker_config import BrokerConfig, parse_overrides
from proto.errors import MinibrokerError

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class BrokerConfigError(MinibrokerError):
    """The broker's command line or properties are invalid."""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "broker",
        help="run one broker in the foreground",
        description="Run one minibroker broker until SIGTERM (clean shutdown) or SIGKILL.",
    )
    parser.add_argument("--id", type=int, required=True, help="broker.id")
    parser.add_argument("--port", type=int, required=True, help="gRPC port (0: any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind and advertise")
    parser.add_argument(
        "--zookeeper", required=True, metavar="HOST:PORT[/chroot]", help="zookeeper.connect"
    )
    parser.add_argument("--data-dir", type=Path, required=True, help="log.dirs (one directory)")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker property, Kafka's names (repeatable), e.g. min.insync.replicas=2",
    )
    parser.add_argument("--log-file", type=Path, help="write the broker's log here")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"])
    parser.add_argument(
        "--loop",
        default="uvloop",
        choices=["uvloop", "asyncio"],
        help="event loop implementation (asyncio as a fall-back)",
    )
    parser.set_defaults(run=run)


def config_from_args(args: argparse.Namespace) -> BrokerConfig:
    try:
        properties = parse_overrides(args.override)
        properties.update(
            {
                "broker.id": str(args.id),
                "port": str(args.port),
                "host": args.host,
                "zookeeper.connect": args.zookeeper,
                "log.dirs": str(args.data_dir),
            }
        )
        return BrokerConfig.from_properties(properties)
    except ValueError as err:
        raise BrokerConfigError(str(err)) from err


def _loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


def run(args: argparse.Namespace) -> int:
    # heavy (grpc): only when running one
    from broker.kafka_server import BrokerServer, BrokerStartupError

    config = config_from_args(args)
    handler: logging.Handler = (
        logging.FileHandler(args.log_file) if args.log_file else logging.StreamHandler(sys.stderr)
    )
    logging.basicConfig(level=args.log_level, format=LOG_FORMAT, handlers=[handler], force=True)
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    with asyncio.Runner(loop_factory=_loop_factory(args.loop)) as runner:
        try:
            runner.run(BrokerServer(config).run_until_signalled())
        except BrokerStartupError as err:
            # Something a person must fix: one line that says what, not a traceback.
            logging.getLogger("broker").error("broker failed to start event=start_failed %s", err)
            if args.log_file:
                print(f"minibroker broker: {err} (see {args.log_file})", file=sys.stderr)
            return 1
    return 0
