"""``minibroker cluster up|down|status|kill|stop|start``: a local cluster of processes.

Thin command-line layer over :class:`deploy.local_cluster.LocalCluster`; every command
takes ``--data-dir`` (default ``$MINIBROKER_DATA_DIR``, else ``./minibroker-data``), where
``cluster.json`` records what runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from broker.config import parse_overrides
from deploy.local_cluster import (
    DATA_DIR_ENV,
    DEFAULT_BASE_PORT,
    DEFAULT_DATA_DIR,
    DEFAULT_ZOOKEEPER_PORT,
    ClusterStatus,
    LocalCluster,
)


def default_data_dir() -> Path:
    return Path(os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "cluster",
        help="run a local cluster: ZooKeeper and brokers as processes",
        description="Start, inspect, crash and stop a local cluster (one ZooKeeper, N brokers).",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help_text, description=help_text)
        sub.add_argument(
            "--data-dir",
            type=Path,
            default=default_data_dir(),
            help=f"where the cluster lives (default: ${DATA_DIR_ENV} or ./{DEFAULT_DATA_DIR})",
        )
        return sub

    up = action("up", "start ZooKeeper and the brokers; wait until a controller is elected")
    up.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    up.add_argument(
        "--base-port",
        type=int,
        default=DEFAULT_BASE_PORT,
        help=f"broker n listens on base-port + n - 1 (default {DEFAULT_BASE_PORT})",
    )
    up.add_argument(
        "--zookeeper-port",
        type=int,
        default=DEFAULT_ZOOKEEPER_PORT,
        help=f"ZooKeeper's client port (default {DEFAULT_ZOOKEEPER_PORT})",
    )
    up.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker property for every broker, e.g. min.insync.replicas=2 (repeatable)",
    )
    up.set_defaults(run=_up)
    action("down", "stop every broker cleanly, then ZooKeeper").set_defaults(run=_down)
    action("status", "brokers, controller, under-replicated and offline partitions").set_defaults(
        run=_status
    )
    for name, help_text, run in (
        ("kill", "SIGKILL one broker (a crash)", _kill),
        ("stop", "stop one broker cleanly (controlled shutdown)", _stop),
        ("start", "start a stopped or killed broker again", _start),
    ):
        sub = action(name, help_text)
        sub.add_argument("broker_id", type=int, metavar="N", help="the broker id")
        sub.set_defaults(run=run)


def _up(args: argparse.Namespace) -> int:
    cluster = LocalCluster(args.data_dir)
    cluster.up(
        args.brokers,
        base_port=args.base_port,
        zookeeper_port=args.zookeeper_port,
        overrides=parse_overrides(args.override),
    )
    print(f"cluster up: {args.brokers} brokers, data in {cluster.data_dir}")
    print(f"  bootstrap servers: {cluster.bootstrap_servers}")
    print(f"  zookeeper:         {cluster.zookeeper_connect}")
    print(f"  logs:              {cluster.logs_dir}")
    return 0


def _down(args: argparse.Namespace) -> int:
    LocalCluster(args.data_dir).down()
    print("cluster down")
    return 0


def _kill(args: argparse.Namespace) -> int:
    LocalCluster(args.data_dir).kill(args.broker_id)
    print(f"broker {args.broker_id} killed (SIGKILL)")
    return 0


def _stop(args: argparse.Namespace) -> int:
    LocalCluster(args.data_dir).stop(args.broker_id)
    print(f"broker {args.broker_id} stopped")
    return 0


def _start(args: argparse.Namespace) -> int:
    LocalCluster(args.data_dir).start(args.broker_id)
    print(f"broker {args.broker_id} started")
    return 0


def _status(args: argparse.Namespace) -> int:
    status = LocalCluster(args.data_dir).status()
    print_status(status, Console(file=sys.stdout, highlight=False, soft_wrap=True))
    return 0


def print_status(status: ClusterStatus, console: Console) -> None:
    zk_state = "running" if status.zookeeper_running else "NOT RUNNING"
    console.print(f"ZooKeeper {status.zookeeper}: {zk_state}")
    console.print(
        f"Controller: {status.controller if status.controller is not None else 'none'}"
        f" (epoch {status.controller_epoch if status.controller_epoch is not None else '-'})"
    )
    brokers = Table("Broker", "Port", "Process", "Registered")
    for b in status.brokers:
        brokers.add_row(
            str(b.broker_id),
            str(b.port),
            f"pid {b.pid}" if b.pid is not None else "not running",
            "yes" if b.registered else "no",
        )
    console.print(brokers)
    console.print(f"Topics: {status.topics}, partitions: {status.partitions}")
    console.print(f"Under-replicated partitions: {len(status.under_replicated)}")
    for tp, replicas, isr in status.under_replicated:
        console.print(f"  {tp}  replicas {list(replicas)}  isr {list(isr)}")
    console.print(f"Offline partitions: {len(status.offline)}")
    for tp in status.offline:
        console.print(f"  {tp}")
