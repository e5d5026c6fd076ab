"""``minibroker cluster up|down|status|kill|stop|start|kill-zookeeper|start-zookeeper``: a
local cluster of processes.

Thin command-line layer over :class:`deploy.local_cluster.LocalCluster`; every command
takes ``--data-dir`` (default ``$MINIBROKER_DATA_DIR``, else ``./minibroker-data``), where
``cluster.json`` records what runs.

``status`` also inspects clusters it did not start (:mod:`deploy.cluster_status`): the
Docker cluster of ``make up`` with ``--project P``, and, where the data dir holds no
``cluster.json``, whatever cluster ``--zookeeper`` (or ``$MINIBROKER_ZOOKEEPER``) names, or
failing that, the brokers' Metadata through ``--bootstrap-server`` (or
``$MINIBROKER_BOOTSTRAP``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from client.cli.common import ZOOKEEPER_ENV
from client.metadata import BOOTSTRAP_ENV, BrokerConnections, ClientError, MetadataClient
from deploy.cluster_status import (
    BrokerStatus,
    ClusterStatus,
    ClusterStatusError,
    docker_status,
    zookeeper_status,
)
from deploy.local_cluster import (
    DATA_DIR_ENV,
    DEFAULT_BASE_PORT,
    DEFAULT_DATA_DIR,
    DEFAULT_KAFKA_BASE_PORT,
    DEFAULT_ZOOKEEPER_PORT,
    STATE_FILE,
    ClusterAlreadyRunningError,
    LocalCluster,
)
from deploy.zookeeper import quorum_size
from proto.config.broker_config import parse_overrides


def default_data_dir() -> Path:
    return Path(os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "cluster",
        help="run a local cluster: ZooKeeper and brokers as processes",
        description="Start, inspect, crash and stop a local cluster (ZooKeeper, N brokers).",
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
        help=f"broker n listens on base-port + n - 1 (default {DEFAULT_BASE_PORT}; 0: free "
        "ports picked at start-up, as for the other two bases)",
    )
    up.add_argument(
        "--kafka-base-port",
        type=int,
        default=DEFAULT_KAFKA_BASE_PORT,
        help="broker n's Kafka protocol listener, for Kafka's own clients (kcat, aiokafka, "
        f"...), is on kafka-base-port + n - 1 (default {DEFAULT_KAFKA_BASE_PORT}; SASL_SSL "
        "with --tls, its settings in DATA_DIR/tls/kafka-client.properties)",
    )
    up.add_argument(
        "--zookeeper-port",
        type=int,
        default=DEFAULT_ZOOKEEPER_PORT,
        help=f"ZooKeeper's client port; node n of an ensemble uses zookeeper-port + n - 1 "
        f"(default {DEFAULT_ZOOKEEPER_PORT})",
    )
    up.add_argument(
        "--zookeeper-nodes",
        type=int,
        default=1,
        metavar="N",
        help="ZooKeeper nodes: 1 (default), or an ensemble of 3 (survives the loss of one "
        "node) or 5; the brokers and the CLI get every node's address",
    )
    up.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker property for every broker, e.g. min.insync.replicas=2 (repeatable)",
    )
    up.add_argument(
        "--tls",
        action="store_true",
        help="the authenticated mode: a throw-away CA and certificates in DATA_DIR/tls, "
        "mutual TLS everywhere, broker-only control requests, ZooKeeper ACLs; the CLI then "
        "uses DATA_DIR/tls/admin.properties",
    )
    up.add_argument(
        "--log-dir-size",
        type=_byte_size,
        default=None,
        metavar="SIZE",
        help="put each broker's data dir on a tmpfs of SIZE (e.g. 256M; root only), so one "
        "broker's disk can fill up alone (chaos's disk-full); `cluster down` copies the data "
        "back to the disk",
    )
    up.set_defaults(run=_up)
    action("down", "stop every broker cleanly, then ZooKeeper").set_defaults(run=_down)
    status = action("status", "brokers, controller, under-replicated and offline partitions")
    status.add_argument(
        "--project",
        metavar="P",
        help="a Docker cluster (`make up`): its compose project (e.g. minibroker)",
    )
    status.add_argument(
        "--zookeeper",
        metavar="HOST:PORT",
        help=f"without cluster.json: the cluster's ZooKeeper (default: ${ZOOKEEPER_ENV})",
    )
    status.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        help=f"without cluster.json and ZooKeeper: ask the brokers (default: ${BOOTSTRAP_ENV})",
    )
    status.set_defaults(run=_status)
    for name, help_text, run in (
        ("kill", "SIGKILL one broker (a crash), or `zookeeper [N]`", _kill),
        ("stop", "stop one broker cleanly (controlled shutdown)", _stop),
        (
            "start",
            "start a stopped or killed broker again; `start zookeeper [N]`: ZooKeeper",
            _start,
        ),
    ):
        sub = action(name, help_text)
        sub.add_argument(
            "broker_id",
            type=_broker_or_zookeeper if name != "stop" else int,
            metavar="N" if name == "stop" else "N|zookeeper",
            help="the broker id" if name == "stop" else "the broker id, or zookeeper",
        )
        if name != "stop":
            sub.add_argument(
                "node",
                type=int,
                nargs="?",
                default=None,
                metavar="NODE",
                help="with zookeeper: the node id (default: every node not running, or 1)",
            )
        sub.set_defaults(run=run)
    for name, help_text, run in (
        ("kill-zookeeper", "SIGKILL one ZooKeeper node (a crash)", _kill_zookeeper),
        ("start-zookeeper", "start a killed ZooKeeper node again", _start_zookeeper),
    ):
        sub = action(name, help_text)
        sub.add_argument("node", type=int, metavar="N", help="the ZooKeeper node id (1, 2, ...)")
        sub.set_defaults(run=run)


def _byte_size(text: str) -> int:
    """``256M``, ``1G``, ``65536``: bytes (K, M, G are powers of 1024)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B")
    factor = units.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in units else text
    if not number.isdigit() or int(number) * factor < 1 << 20:
        raise argparse.ArgumentTypeError(f"expected a size of at least 1M, e.g. 256M, got {text!r}")
    return int(number) * factor


def _up(args: argparse.Namespace) -> int:
    cluster = LocalCluster(args.data_dir)
    try:
        cluster.up(
            args.brokers,
            base_port=args.base_port,
            kafka_base_port=args.kafka_base_port,
            zookeeper_port=args.zookeeper_port,
            zookeeper_nodes=args.zookeeper_nodes,
            overrides=parse_overrides(args.override),
            tls=args.tls,
            log_dir_bytes=args.log_dir_size,
        )
    except ClusterAlreadyRunningError as running:
        if not running.complete:
            raise
        # `make run` starts the cluster; the README's `cluster up` afterwards is a no-op,
        # as a second `docker compose up` is.
        print(f"cluster up: already running, data in {cluster.data_dir}; nothing to do")
    else:
        ensemble = (
            f", a ZooKeeper ensemble of {args.zookeeper_nodes}" if args.zookeeper_nodes > 1 else ""
        )
        print(f"cluster up: {args.brokers} brokers{ensemble}, data in {cluster.data_dir}")
    print(f"  bootstrap servers: {cluster.bootstrap_servers}")
    kafka = cluster.kafka_bootstrap_servers
    if kafka is not None:
        print(f"  kafka bootstrap:   {kafka} (Kafka's protocol: kcat, aiokafka, ...)")
    found = cluster.addresses()
    print(f"  zookeeper:         {found[1] if found else cluster.zookeeper_connect}")
    config = cluster.command_config()
    if config is not None:
        print(f"  security:          TLS + ZooKeeper ACLs; client properties {config}")
        kafka_config = config.with_name("kafka-client.properties")
        print(f"  kafka security:    SASL_SSL, SCRAM user admin; kcat -F {kafka_config}")
    print(f"  logs:              {cluster.logs_dir}")
    return 0


def _down(args: argparse.Namespace) -> int:
    LocalCluster(args.data_dir).down()
    print("cluster down")
    return 0


def _kill(args: argparse.Namespace) -> int:
    if args.broker_id == "zookeeper":
        cluster = LocalCluster(args.data_dir)
        node = _zookeeper_targets(args, cluster, running=True)[0]
        cluster.kill_zookeeper(node)
        print(f"ZooKeeper node {node} killed (SIGKILL)")
        return 0
    LocalCluster(args.data_dir).kill(args.broker_id)
    print(f"broker {args.broker_id} killed (SIGKILL)")
    return 0


def _stop(args: argparse.Namespace) -> int:
    LocalCluster(args.data_dir).stop(args.broker_id)
    print(f"broker {args.broker_id} stopped")
    return 0


def _broker_or_zookeeper(text: str) -> int | str:
    if text == "zookeeper":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a broker id or zookeeper, got {text!r}"
        ) from None


def _zookeeper_targets(args: argparse.Namespace, cluster: LocalCluster, running: bool) -> list[int]:
    """``zookeeper [N]``: node N, else every node that runs (kill) or does not (start)."""
    if args.node is not None:
        return [args.node]
    found = [n for n in cluster.zookeeper_nodes() if cluster.zookeeper_node_running(n) == running]
    return found or [1]


def _start(args: argparse.Namespace) -> int:
    if args.broker_id == "zookeeper":
        cluster = LocalCluster(args.data_dir)
        for node in _zookeeper_targets(args, cluster, running=False):
            args.node = node
            _start_zookeeper(args)
        return 0
    LocalCluster(args.data_dir).start(args.broker_id)
    print(f"broker {args.broker_id} started")
    return 0


def _kill_zookeeper(args: argparse.Namespace) -> int:
    LocalCluster(args.data_dir).kill_zookeeper(args.node)
    print(f"ZooKeeper node {args.node} killed (SIGKILL)")
    return 0


def _start_zookeeper(args: argparse.Namespace) -> int:
    cluster = LocalCluster(args.data_dir)
    nodes = cluster.zookeeper_nodes()
    others = sum(cluster.zookeeper_node_running(n) for n in nodes if n != args.node)
    # A member that cannot make a majority with the others running would wait in vain.
    wait = others + 1 >= quorum_size(len(nodes))
    cluster.start_zookeeper(args.node, wait=wait)
    if wait:
        print(f"ZooKeeper node {args.node} started ({cluster.zookeeper_mode(args.node)})")
    else:
        print(
            f"ZooKeeper node {args.node} started; it serves once {quorum_size(len(nodes))} "
            f"of the {len(nodes)} nodes run"
        )
    return 0


def _status(args: argparse.Namespace) -> int:
    try:
        if args.project:
            status = docker_status(args.project)
        elif (args.data_dir / STATE_FILE).exists():
            status = LocalCluster(args.data_dir).status()
        else:
            status = _status_elsewhere(args)
    except ClusterStatusError as e:
        raise ClientError(str(e)) from None
    for warning in status.warnings:
        print(f"minibroker cluster status: {warning}", file=sys.stderr)
    print_status(status, Console(file=sys.stdout, highlight=False, soft_wrap=True))
    return 0


def _status_elsewhere(args: argparse.Namespace) -> ClusterStatus:
    """No cluster.json: ask ZooKeeper if one is named, else (or if it does not answer) the
    brokers' Metadata if a bootstrap server is named; with neither, the error a missing
    cluster always was."""
    zookeeper = args.zookeeper or os.environ.get(ZOOKEEPER_ENV)
    bootstrap = args.bootstrap_server or os.environ.get(BOOTSTRAP_ENV)
    if not zookeeper and not bootstrap:
        raise ClientError(
            f"no cluster in {args.data_dir.resolve()} (start one with `minibroker cluster up`; "
            "for another cluster give --zookeeper or --bootstrap-server, for Docker --project)"
        )
    if zookeeper:
        try:
            return zookeeper_status(zookeeper)
        except ClusterStatusError as e:
            if not bootstrap:
                raise
            print(f"minibroker cluster status: {e}; asking the brokers", file=sys.stderr)
    assert bootstrap
    return asyncio.run(_metadata_status(bootstrap))


async def _metadata_status(bootstrap: str) -> ClusterStatus:
    """The status as the brokers' Metadata shows it: live brokers, the controller, and the
    partitions' leaders and ISRs (no ZooKeeper view: its line says so)."""
    async with BrokerConnections.from_bootstrap(bootstrap) as conns:
        cluster = await MetadataClient(conns).refresh(None)
    partitions = [
        p
        for name in sorted(cluster.topics)
        if cluster.topics[name].error_code == 0
        for p in cluster.partitions_of(name)
    ]
    return ClusterStatus(
        "unknown (asked the brokers)",
        False,
        [
            BrokerStatus(b.node_id, b.port, None, True, "-")
            for _, b in sorted(cluster.brokers.items())
        ],
        cluster.controller_id if cluster.controller_id >= 0 else None,
        None,
        sum(1 for t in cluster.topics.values() if t.error_code == 0),
        len(partitions),
        [(p.tp, p.replicas, p.isr) for p in partitions if len(p.isr) < len(p.replicas)],
        [p.tp for p in partitions if p.leader < 0 or p.leader not in cluster.brokers],
        cluster_id=cluster.cluster_id or None,
    )


def print_status(status: ClusterStatus, console: Console) -> None:
    if status.zookeeper.startswith("unknown"):
        console.print(f"ZooKeeper: {status.zookeeper}")
    else:
        console.print(f"ZooKeeper {status.zookeeper}: {_zookeeper_state(status)}")
    if len(status.zookeeper_nodes) > 1:
        nodes = Table("ZooKeeper node", "Port", "Process", "Mode")
        for node in status.zookeeper_nodes:
            if node.process is not None:
                process = node.process
            else:
                process = f"pid {node.pid}" if node.pid is not None else "not running"
            nodes.add_row(
                str(node.node_id),
                "-" if node.port is None else str(node.port),
                process,
                node.mode or "-",
            )
        console.print(nodes)
    if status.zookeeper_running or status.cluster_id is not None:
        console.print(f"Cluster id: {status.cluster_id or 'none yet (no broker has started)'}")
    if status.bootstrap_servers is not None:
        console.print(f"Bootstrap servers: {status.bootstrap_servers}")
    if status.kafka_bootstrap_servers is not None:
        console.print(f"Kafka bootstrap servers: {status.kafka_bootstrap_servers}")
    console.print(
        f"Controller: {status.controller if status.controller is not None else 'none'}"
        f" (epoch {status.controller_epoch if status.controller_epoch is not None else '-'})"
    )
    brokers = Table("Broker", "Port", "Process", "Registered")
    for b in status.brokers:
        if b.process is not None:
            process = b.process
        else:
            process = f"pid {b.pid}" if b.pid is not None else "not running"
        brokers.add_row(
            str(b.broker_id),
            "-" if b.port is None else str(b.port),
            process,
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


def _zookeeper_state(status: ClusterStatus) -> str:
    """``running``, or why not: a single node down or not serving, an ensemble without a
    quorum (how many of its nodes serve, and how many it needs)."""
    nodes = status.zookeeper_nodes
    if len(nodes) > 1:
        serving, needed = status.zookeeper_serving, quorum_size(len(nodes))
        if status.zookeeper_running:
            return f"running ({serving} of {len(nodes)} nodes serve, {needed} needed)"
        return f"NO QUORUM ({serving} of {len(nodes)} nodes serve, {needed} needed)"
    if status.zookeeper_running:
        return "running"
    if nodes and (nodes[0].pid is not None or "running" in (nodes[0].process or "")):
        return "NOT SERVING"  # e.g. paused
    return "NOT RUNNING"
