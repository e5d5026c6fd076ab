"""What a running cluster looks like from outside: ``minibroker cluster status``.

Three ways to find the cluster, one report (:class:`ClusterStatus`):

- a local cluster of ``cluster up`` (:meth:`deploy.local_cluster.LocalCluster.status`):
  ``cluster.json`` gives the pids and ports;
- a Docker cluster of ``make up`` (:func:`docker_status`): the compose project's containers
  (``<project>-zookeeper``, or ``<project>-zookeeper-N`` for the ensemble of ``make up-ha``,
  and ``<project>-broker-N``, as deploy/docker-compose.yml and docker-compose.ha.yml name
  them), read with the ``docker`` command, and ZooKeeper at its published ports;
- any cluster, given its ZooKeeper (:func:`zookeeper_status`).

Each ZooKeeper node's mode (leader, follower, standalone, or not serving: no quorum) is its
own answer to ``srvr``; ZooKeeper's view is read only while a majority of the nodes serves.
In each case the brokers' registrations (``/brokers/ids``), the controller (``/controller``,
``/controller_epoch``) and the partitions (``/brokers/topics/<t>`` and the state znodes)
come from ZooKeeper, the controller's own source. ZooKeeper is anyone's to write: a topic
znode with an illegal name, or a znode that is not valid JSON, is reported as one line in
:attr:`ClusterStatus.warnings` and skipped.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from deploy.zookeeper import is_serving_mode, quorum_size, server_mode
from proto.errors import MinibrokerError
from proto.topic_partition import TopicPartition, topic_name_problem
from proto.zk import znodes
from proto.zk.session import ZkConnectionError
from proto.zk.sync_client import (
    read_partition_state,
    read_registered_brokers,
    start_kazoo_client,
    stop_kazoo_client,
)

__all__ = [
    "BrokerStatus",
    "ClusterStatus",
    "ClusterStatusError",
    "ZooKeeperNodeStatus",
    "ZooKeeperView",
    "docker_status",
    "kazoo_session",
    "read_zookeeper",
    "zookeeper_status",
]

T = TypeVar("T")
_DOCKER_TIMEOUT_S = 120.0
DOCKER_PS_FORMAT = '{"Names":{{json .Names}},"State":{{json .State}},"Status":{{json .Status}}}'
"""``docker ps --format``: a JSON object of only the fields :func:`parse_docker_ps` reads.
Never ``{{json .}}``: a template that uses every field (``.Size`` among them) makes Docker
compute each container's disk usage, which takes many seconds on a busy machine."""


class ClusterStatusError(MinibrokerError):
    """The cluster cannot be inspected (ZooKeeper unreachable, no docker command, ...)."""


@dataclass(frozen=True)
class BrokerStatus:
    broker_id: int
    port: int | None
    """Its port (from cluster.json, else its registration); None if unknown."""
    pid: int | None
    """The running local process, or None."""
    registered: bool
    process: str | None = None
    """How it runs where there is no local pid: a container's state ("running (healthy)",
    "exited (137)"), or "-" when only its registration is known."""


@dataclass(frozen=True)
class ZooKeeperNodeStatus:
    node_id: int
    port: int | None
    """Its client port (a Docker node's published one); None if unknown."""
    pid: int | None
    """The running local process, or None."""
    mode: str | None
    """``leader``, ``follower``, ``standalone``, ``not serving`` (running without a quorum),
    or None when it does not run or does not answer."""
    process: str | None = None
    """How it runs where there is no local pid: a container's state."""


@dataclass(frozen=True)
class ClusterStatus:
    zookeeper: str
    zookeeper_running: bool
    """ZooKeeper served (a majority of its nodes did) and its view below was read."""
    brokers: list[BrokerStatus]
    controller: int | None
    controller_epoch: int | None
    topics: int
    partitions: int
    under_replicated: list[tuple[TopicPartition, tuple[int, ...], tuple[int, ...]]]
    """(partition, replicas, isr) where the ISR is smaller than the replica set."""
    offline: list[TopicPartition]
    """Partitions without a live leader."""
    warnings: list[str] = field(default_factory=list)
    """One line per znode skipped (an illegal topic name, malformed content)."""
    zookeeper_nodes: list[ZooKeeperNodeStatus] = field(default_factory=list)
    """Each ZooKeeper node, where they are known (not when only a connect string is)."""
    bootstrap_servers: str | None = None
    """The brokers' gRPC ``host:port,...`` where cluster.json gives them."""
    kafka_bootstrap_servers: str | None = None
    """Their Kafka protocol listeners' ``host:port,...``, where cluster.json gives them."""
    cluster_id: str | None = None
    """``/cluster/id`` (or the brokers' Metadata); None while unknown."""

    @classmethod
    def of(
        cls,
        connect: str,
        brokers: list[BrokerStatus],
        view: ZooKeeperView | None,
        zookeeper_nodes: list[ZooKeeperNodeStatus] | None = None,
        *,
        bootstrap_servers: str | None = None,
        kafka_bootstrap_servers: str | None = None,
    ) -> ClusterStatus:
        """The status of ``brokers`` with ZooKeeper's ``view`` (None: ZooKeeper is down or
        has no quorum)."""
        nodes = list(zookeeper_nodes or [])
        addresses = {
            "bootstrap_servers": bootstrap_servers,
            "kafka_bootstrap_servers": kafka_bootstrap_servers,
        }
        if view is None:
            return cls(connect, False, brokers, None, None, 0, 0, [], [], [], nodes, **addresses)
        return cls(
            connect,
            True,
            brokers,
            view.controller,
            view.controller_epoch,
            view.topics,
            view.partitions,
            view.under_replicated,
            view.offline,
            view.warnings,
            nodes,
            **addresses,
            cluster_id=view.cluster_id,
        )

    @property
    def zookeeper_serving(self) -> int:
        """How many of :attr:`zookeeper_nodes` serve."""
        return sum(is_serving_mode(node.mode) for node in self.zookeeper_nodes)


@dataclass(frozen=True)
class ZooKeeperView:
    """What ZooKeeper holds about the cluster."""

    registered: dict[int, tuple[str, int] | None]
    """Registered broker id -> (host, port); None if its registration is unreadable."""
    controller: int | None
    controller_epoch: int | None
    topics: int
    partitions: int
    under_replicated: list[tuple[TopicPartition, tuple[int, ...], tuple[int, ...]]]
    offline: list[TopicPartition]
    warnings: list[str]
    cluster_id: str | None = None
    """``/cluster/id``; None before any broker started (or if unreadable: a warning)."""


@contextlib.contextmanager
def kazoo_session(connect: str, timeout: float = 10.0) -> Iterator[KazooClient]:
    """A started kazoo client, closed at the end; ClusterStatusError if unreachable."""
    try:
        client = start_kazoo_client(connect, timeout_s=timeout)
    except ZkConnectionError as e:
        raise ClusterStatusError(str(e)) from None
    try:
        yield client
    finally:
        stop_kazoo_client(client)


def read_zookeeper(zk: KazooClient) -> ZooKeeperView:
    """Brokers, controller, topics and partition health from ZooKeeper. A partition is
    offline when its state names no registered leader, under-replicated when its ISR is
    smaller than its replica list. Znodes deleted while being read are skipped."""
    warnings: list[str] = []

    def read(path: str, decode: Callable[[bytes], T]) -> T | None:
        try:
            data, _ = zk.get(path)
        except NoNodeError:
            return None
        try:
            return decode(data)
        except znodes.ZkDataError as e:
            warnings.append(f"ignoring znode {path}: {e}")
            return None

    brokers = read_registered_brokers(zk)
    warnings += brokers.ignored
    warnings += [f"ignoring {error}" for error in brokers.malformed.values()]
    registered: dict[int, tuple[str, int] | None] = {
        **{broker_id: (b.host, b.port) for broker_id, b in brokers.found.items()},
        **dict.fromkeys(brokers.malformed),
    }
    registered = dict(sorted(registered.items()))
    controller = read(znodes.CONTROLLER_PATH, znodes.decode_controller)
    epoch = read(znodes.CONTROLLER_EPOCH_PATH, znodes.decode_controller_epoch)
    topics = partitions = 0
    under: list[tuple[TopicPartition, tuple[int, ...], tuple[int, ...]]] = []
    offline: list[TopicPartition] = []
    for topic in sorted(_children(zk, znodes.BROKER_TOPICS_PATH)):
        problem = topic_name_problem(topic)
        if problem is not None:
            warnings.append(
                f"ignoring topic znode {znodes.BROKER_TOPICS_PATH}/{topic!r}: illegal name "
                f"({problem})"
            )
            continue
        assignment = read(znodes.topic_path(topic), znodes.decode_topic_assignment)
        if assignment is None:
            continue
        topics += 1
        for partition, replicas in sorted(assignment.items()):
            partitions += 1
            tp = TopicPartition(topic, partition)
            try:
                state = read_partition_state(zk, tp)
            except znodes.ZkDataError as e:
                warnings.append(f"ignoring {e}")
                state = None
            if state is None or state.leader not in registered:
                offline.append(tp)
            if state is None or len(state.isr) < len(replicas):
                under.append((tp, tuple(replicas), () if state is None else tuple(state.isr)))
    cluster_id = read(znodes.CLUSTER_ID_PATH, znodes.decode_cluster_id)
    return ZooKeeperView(
        registered, controller, epoch, topics, partitions, under, offline, warnings, cluster_id
    )


def zookeeper_status(connect: str) -> ClusterStatus:
    """The status of whatever cluster uses the ZooKeeper at ``connect`` (no cluster.json):
    the registered brokers, with their registered ports."""
    with kazoo_session(connect) as zk:
        view = read_zookeeper(zk)
    brokers = [
        BrokerStatus(b, None if address is None else address[1], None, True, "-")
        for b, address in sorted(view.registered.items())
    ]
    return ClusterStatus.of(connect, brokers, view)


def docker_status(project: str) -> ClusterStatus:
    """The status of the compose project ``project`` (``make up`` or ``make up-ha``): its
    containers' states from ``docker ps``, each ZooKeeper node's mode through its published
    port, the rest from ZooKeeper. ClusterStatusError if there is no docker command or no
    such project."""
    containers = _docker_containers(project)
    zookeepers = docker_zookeeper_containers(project, containers)
    if not zookeepers:
        raise ClusterStatusError(
            f"no container {project}-zookeeper (or {project}-zookeeper-1): is the Docker "
            f"cluster of project {project!r} up? (`make up`; MINIBROKER_PROJECT names the project)"
        )
    broker_ids = sorted(
        int(suffix)
        for name in containers
        if (suffix := name.removeprefix(f"{project}-broker-")) != name
        and suffix.isascii()
        and suffix.isdigit()
    )
    nodes = []
    addresses = []
    for node, name in sorted(zookeepers.items()):
        state = containers[name]
        mode = port = None
        if state.startswith("running"):
            published_at = _published_address(name, 2181)
            addresses.append(published_at)
            host, _, published = published_at.rpartition(":")
            port = int(published)
            mode = server_mode(host, port)
        nodes.append(ZooKeeperNodeStatus(node, port, None, mode, f"container {state}"))
    view: ZooKeeperView | None = None
    connect = ",".join(addresses) or "-"
    if sum(is_serving_mode(n.mode) for n in nodes) >= quorum_size(len(nodes)):
        with kazoo_session(connect) as zk:
            view = read_zookeeper(zk)
    registered = view.registered if view is not None else {}
    brokers = []
    for broker_id in sorted({*broker_ids, *registered}):
        address = registered.get(broker_id)
        state = containers.get(f"{project}-broker-{broker_id}", "no container")
        brokers.append(
            BrokerStatus(
                broker_id,
                None if address is None else address[1],
                None,
                broker_id in registered,
                f"container {state}",
            )
        )
    return ClusterStatus.of(connect, brokers, view, nodes)


def docker_zookeeper_containers(project: str, containers: Iterable[str]) -> dict[int, str]:
    """Node id -> container name of the project's ZooKeeper: ``{1: "<project>-zookeeper"}``
    for ``make up``, ``{1: "<project>-zookeeper-1", 2: ..., 3: ...}`` for ``make up-ha``."""
    names = set(containers)
    if f"{project}-zookeeper" in names:
        return {1: f"{project}-zookeeper"}
    found = {}
    for name in names:
        suffix = name.removeprefix(f"{project}-zookeeper-")
        if suffix != name and suffix.isascii() and suffix.isdigit():
            found[int(suffix)] = name
    return found


def _children(zk: KazooClient, path: str) -> list[str]:
    try:
        return list(zk.get_children(path))
    except NoNodeError:
        return []


def _docker(*args: str) -> str:
    if shutil.which("docker") is None:
        raise ClusterStatusError(
            "the docker command is not installed (--project inspects a Docker cluster with it)"
        )
    try:
        result = subprocess.run(
            ["docker", *args],
            capture_output=True,
            text=True,
            timeout=_DOCKER_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ClusterStatusError(
            f"`docker {' '.join(args)}` did not answer within {_DOCKER_TIMEOUT_S:g} s"
        ) from None
    if result.returncode != 0:
        problem = (result.stderr.strip().splitlines() or ["failed"])[-1]
        raise ClusterStatusError(f"`docker {' '.join(args)}`: {problem}")
    return result.stdout


def _docker_containers(project: str) -> dict[str, str]:
    """Container name -> state ("running (healthy)", "exited (137)") of the project's
    containers, by compose's project label."""
    out = _docker(
        "ps",
        "--all",
        "--filter",
        f"label=com.docker.compose.project={project}",
        "--format",
        DOCKER_PS_FORMAT,
    )
    return parse_docker_ps(out)


def parse_docker_ps(output: str) -> dict[str, str]:
    """``docker ps --format DOCKER_PS_FORMAT`` lines (objects with ``Names``, ``State``,
    ``Status``) -> container name -> a short state:
    ``running``, ``running (healthy)``, ``exited (137)``."""
    containers: dict[str, str] = {}
    for line in output.splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        state = str(entry.get("State", "")).lower() or "unknown"
        status = str(entry.get("Status", ""))
        if state == "running" and "(" in status:
            state += " (" + status.rsplit("(", 1)[1].rstrip(")") + ")"
        elif state == "exited" and "(" in status:
            state += " (" + status.split("(", 1)[1].split(")", 1)[0] + ")"
        for name in str(entry.get("Names", "")).split(","):
            if name:
                containers[name.strip().lstrip("/")] = state
    return containers


def _published_address(container: str, port: int) -> str:
    """Where ``container``'s ``port`` is published on this host (``docker port``)."""
    for line in _docker("port", container, f"{port}/tcp").splitlines():
        host, _, published = line.strip().rpartition(":")
        if published.isdigit():
            if host in ("0.0.0.0", "", "[::]", "::"):
                host = "127.0.0.1"
            return f"{host}:{published}"
    raise ClusterStatusError(f"container {container} does not publish port {port}")
