"""Options and helpers shared by the client commands (``topics``, ``produce``, ``consume``,
``perf``): where the cluster is, and running a coroutine as a command."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Coroutine
from typing import Any

from client.metadata import BOOTSTRAP_ENV, BrokerConnections, ClientError, default_bootstrap
from client.producer import parse_acks

ZOOKEEPER_ENV = "MINIBROKER_ZOOKEEPER"
DEFAULT_ZOOKEEPER = "localhost:2181"


def default_zookeeper() -> str:
    """``$MINIBROKER_ZOOKEEPER``, else ``localhost:2181``."""
    return os.environ.get(ZOOKEEPER_ENV) or DEFAULT_ZOOKEEPER


def add_bootstrap_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        default=default_bootstrap(),
        metavar="HOST:PORT",
        help=f"broker(s) to start from (default: ${BOOTSTRAP_ENV} or localhost:9091)",
    )


def add_zookeeper_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--zookeeper",
        default=default_zookeeper(),
        metavar="HOST:PORT",
        help=f"ZooKeeper, for {what} (default: ${ZOOKEEPER_ENV} or {DEFAULT_ZOOKEEPER})",
    )


def acks_argument(text: str) -> int:
    """``--acks``: ``all`` or ``-1``, ``0``, ``1`` (argparse reports a bad value)."""
    try:
        return parse_acks(text)
    except ClientError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def connections(args: argparse.Namespace) -> BrokerConnections:
    """The broker connections for ``--bootstrap-server`` (ClientError if malformed)."""
    return BrokerConnections.from_bootstrap(args.bootstrap_server)


def run_async(coroutine: Coroutine[Any, Any, int]) -> int:
    """Run a command's coroutine on uvloop; a ClientError propagates to the CLI's one-line
    error handler."""
    try:
        import uvloop

        return uvloop.run(coroutine)
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.run(coroutine)


__all__ = [
    "ClientError",
    "acks_argument",
    "add_bootstrap_option",
    "add_zookeeper_option",
    "connections",
    "default_zookeeper",
    "run_async",
]
