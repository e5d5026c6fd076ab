"""The local cluster launcher behind ``minibroker cluster up|down|status|kill|stop|start``.

One ZooKeeper (or an ensemble of 3, 5, ... with ``zookeeper_nodes``) and N brokers as
processes on this machine (docs/cli.md), built on the same harnesses the tests, chaos and
benchmarks use (deploy/zookeeper.py, deploy/broker_process.py). The processes outlive the
command that started them, so every later command finds them again through
``<data-dir>/cluster.json`` (pids, ports) and acts by pid. Layout::

    <data-dir>/cluster.json        pids and ports (gRPC and Kafka protocol)
    <data-dir>/zookeeper/          ZooKeeper's dataDir (one node)
    <data-dir>/zookeeper-<n>/      ZooKeeper node n's dataDir (an ensemble)
    <data-dir>/broker-<n>/         broker n's log dir
    <data-dir>/logs/               zookeeper.log (or zookeeper-<n>.log), broker-<n>.log

A pid is only signalled after checking that it is still the process we started (its
command line names our broker id or the ZooKeeper node's config), so a recycled pid is
never hit.

Run as root, each broker runs in a cgroup of its own (``minibroker-<key>/broker-<n>`` under
the cgroup v2 mount, :mod:`deploy.process_cgroups`), which is what :meth:`LocalCluster.isolate`
partitions the brokers by (:mod:`deploy.loopback_firewall`); ``down`` heals and removes both.

Example usage::

    cluster = LocalCluster(Path("minibroker-data"))
    cluster.up(brokers=3)                 # ZooKeeper on 2181, brokers on 9091-9093 (gRPC)
    print(cluster.kafka_bootstrap_servers)  # and 19091-19093 (Kafka's protocol)
    cluster.kill(2)                       # SIGKILL broker 2
    cluster.start(2)
    print(cluster.status().controller)
    cluster.down()

    cluster.up(zookeeper_nodes=3)         # an ensemble on 2181-2183
    cluster.kill_zookeeper(1)             # the other two go on serving
    cluster.start_zookeeper(1)
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from kazoo.client import KazooClient

from deploy import loopback_firewall, process_cgroups, small_log_dirs, tls_certs
from deploy.broker_process import BrokerProcess, BrokerProcessError, BrokerSpec
from deploy.cluster_status import (
    BrokerStatus,
    ClusterStatus,
    ClusterStatusError,
    ZooKeeperNodeStatus,
    kazoo_session,
    read_zookeeper,
)
from deploy.loopback_firewall import BrokerEndpoints, LoopbackFirewallError
from deploy.ports import base_port_or_free, port_is_free
from deploy.process_cgroups import ClusterCgroups
from deploy.small_log_dirs import SmallLogDirError
from deploy.zookeeper import (
    QuorumPeer,
    ZooKeeperConfig,
    ZooKeeperEnsemble,
    ZooKeeperError,
    ZooKeeperServer,
    is_serving_mode,
    member_config,
    quorum_size,
    server_mode,
)
from proto.errors import MinibrokerError
from proto.transport.scram import (
    DEFAULT_ITERATIONS,
    ScramCredential,
    ScramMechanism,
    format_credential,
)
from proto.zk import znodes
from proto.zk.credentials import SECURE_ACL, SENSITIVE_ACL, read_digest_file
from proto.zk.session import ZkConnectionError
from proto.zk.sync_client import kazoo_client, start_kazoo_client, stop_kazoo_client

__all__ = [
    "DATA_DIR_ENV",
    "DEFAULT_BASE_PORT",
    "DEFAULT_DATA_DIR",
    "DEFAULT_KAFKA_BASE_PORT",
    "DEFAULT_ZOOKEEPER_PORT",
    "ClusterStatus",
    "LocalCluster",
    "LocalClusterError",
    "default_data_dir",
    "partition_problem",
]

log = logging.getLogger(__name__)

DATA_DIR_ENV = "MINIBROKER_DATA_DIR"
DEFAULT_DATA_DIR = Path("minibroker-data")
DEFAULT_BASE_PORT = 9091
DEFAULT_KAFKA_BASE_PORT = 19091
"""Broker n's Kafka protocol listener (``kafka.port``) is on this + n - 1."""
DEFAULT_ZOOKEEPER_PORT = 2181
MAX_ZOOKEEPER_NODES = 7
"""More members cost JVMs and make every write wait for more acknowledgements; on one
machine they buy nothing more to test than 5 do."""
STATE_FILE = "cluster.json"
TLS_CHROOT = "/minibroker"
ADMIN_PROPERTIES = "admin.properties"
KAFKA_CLIENT_PROPERTIES = "kafka-client.properties"
"""A ``--tls`` cluster's Kafka client settings (librdkafka's names: ``kcat -F``)."""
KAFKA_ADMIN_USER = "admin"
ADMIN_CERTIFICATE = "admin"
"""The CLI's client certificate (``tls/admin.pem``, subject ``CN=admin``)."""
ADMIN_PRINCIPALS = (f"User:CN={ADMIN_CERTIFICATE}", f"User:{KAFKA_ADMIN_USER}")
"""A ``--tls`` cluster's administrators, super users beside the brokers: the CLI's
certificate on gRPC and the SCRAM user on the Kafka listeners."""
ACLS_ON = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "false",
}
"""A ``--tls`` cluster's ACLs (docs/security.md): anyone but a super user needs an ACL."""
KAFKA_LISTENER_SECURITY = {
    "listener.security.protocol.map": "GRPC:SSL,KAFKA:SASL_SSL",
    "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
}
"""A ``--tls`` cluster's Kafka listener: SASL_SSL with SCRAM (docs/security.md)."""
ZOOKEEPER_DIGEST_FILE = "zookeeper-digest"
_STOP_TIMEOUT_S = 60.0
_POLL_S = 0.05

_outliving: list[BrokerProcess | ZooKeeperServer] = []
"""The harnesses of the processes this interpreter started for a cluster (they outlive the
command: later ones act by pid). Kept so that their Popen objects are never collected while
the process runs, which Python reports as a ResourceWarning (an error under pytest)."""


def default_data_dir() -> Path:
    """``$MINIBROKER_DATA_DIR``, else ``./minibroker-data``."""
    return Path(os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR)


class LocalClusterError(MinibrokerError):
    """A cluster command cannot do what was asked; the message says why and what to do."""


class ClusterAlreadyRunningError(LocalClusterError):
    """``up`` on a data dir whose cluster runs, wholly or in part."""

    def __init__(
        self,
        data_dir: Path,
        stopped_brokers: list[int],
        stopped_zookeeper_nodes: list[int],
        zookeeper_nodes: int = 1,
    ):
        self.stopped_brokers = stopped_brokers
        """The cluster's brokers that are not running."""
        self.stopped_zookeeper_nodes = stopped_zookeeper_nodes
        """The cluster's ZooKeeper nodes that are not running."""
        self.zookeeper_stopped = bool(stopped_zookeeper_nodes)
        if stopped_zookeeper_nodes and zookeeper_nodes == 1:
            advice = "ZooKeeper is not running: `minibroker cluster down`, then `cluster up`"
        elif stopped_zookeeper_nodes or stopped_brokers:
            advice = "start the rest with " + ", ".join(
                [f"`minibroker cluster start-zookeeper {n}`" for n in stopped_zookeeper_nodes]
                + [f"`minibroker cluster start {b}`" for b in stopped_brokers]
            )
        else:
            advice = "`minibroker cluster status` shows it, `minibroker cluster down` stops it"
        super().__init__(f"a cluster is already running from {data_dir} ({advice})")

    @property
    def complete(self) -> bool:
        """ZooKeeper and every broker run: there is nothing for ``up`` to do."""
        return not self.stopped_brokers and not self.zookeeper_stopped


@dataclass
class _Process:
    pid: int
    port: int
    host: str = "127.0.0.1"
    kafka_port: int | None = None
    """Its Kafka protocol listener's port (SASL_SSL in a ``--tls`` cluster); None: it runs
    none (a cluster.json written before Kafka listeners, or by a ``--tls`` cluster before
    they were authenticated)."""


@dataclass
class _ZooKeeperNode:
    """One ZooKeeper node as cluster.json records it."""

    pid: int
    port: int
    """Its client port."""
    host: str = "127.0.0.1"
    quorum_port: int | None = None
    """With election_port: its ports in an ensemble; None for a single standalone node."""
    election_port: int | None = None


@dataclass
class _State:
    zookeeper: dict[int, _ZooKeeperNode]
    """Node id -> node: ``{1: standalone}``, or the members of an ensemble."""
    brokers: dict[int, _Process]
    overrides: dict[str, str] = field(default_factory=dict)
    tls: bool = False
    """``cluster up --tls``: certificates, ACLs and the chroot in ``<data-dir>/tls/``."""
    log_dir_bytes: int | None = None
    """``cluster up --log-dir-size``: each broker's data dir is a tmpfs of this size."""

    def to_json(self) -> str:
        data = {
            "zookeeper_nodes": {str(n): asdict(z) for n, z in sorted(self.zookeeper.items())},
            "brokers": {str(i): asdict(b) for i, b in sorted(self.brokers.items())},
            "overrides": self.overrides,
            "tls": self.tls,
            "log_dir_bytes": self.log_dir_bytes,
        }
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> _State:
        """Reads both layouts: ``zookeeper_nodes`` (node id -> node), and the single
        ``zookeeper`` entry of the files written before ensembles existed."""
        data = json.loads(text)
        if "zookeeper_nodes" in data:
            nodes = {int(n): _ZooKeeperNode(**z) for n, z in data["zookeeper_nodes"].items()}
        else:
            nodes = {1: _ZooKeeperNode(**data["zookeeper"])}
        if not nodes:
            raise ValueError("no ZooKeeper node recorded")
        return cls(
            nodes,
            {int(i): _Process(**b) for i, b in data["brokers"].items()},
            dict(data.get("overrides", {})),
            bool(data.get("tls", False)),
            data.get("log_dir_bytes"),
        )

    @property
    def is_ensemble(self) -> bool:
        return any(z.quorum_port is not None for z in self.zookeeper.values())

    def quorum_peers(self) -> tuple[QuorumPeer, ...]:
        """The ensemble's members as every member's zoo.cfg names them (empty: standalone)."""
        return tuple(
            QuorumPeer(n, z.port, z.quorum_port, z.election_port, z.host)
            for n, z in sorted(self.zookeeper.items())
            if z.quorum_port is not None and z.election_port is not None
        )

    @property
    def zookeeper_connect(self) -> str:
        """Every node's ``host:port``, in node order: the brokers' ``zookeeper.connect``."""
        return ",".join(f"{z.host}:{z.port}" for _, z in sorted(self.zookeeper.items()))

    @property
    def cluster_zookeeper_connect(self) -> str:
        """The brokers' and clients' ``zookeeper.connect``: every node, and with TLS the
        cluster's own chroot (whose secure ACL keeps outsiders from creating anything)."""
        return self.zookeeper_connect + (TLS_CHROOT if self.tls else "")

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{b.host}:{b.port}" for _, b in sorted(self.brokers.items()))

    @property
    def kafka_bootstrap_servers(self) -> str | None:
        """The brokers' Kafka protocol listeners, for Kafka's own clients (kcat,
        aiokafka, ...); None when no broker has one."""
        listeners = [
            f"{b.host}:{b.kafka_port}"
            for _, b in sorted(self.brokers.items())
            if b.kafka_port is not None
        ]
        return ",".join(listeners) or None


class LocalCluster:
    """The cluster in one data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.resolve()

    # -- paths and state ---------------------------------------------------------------------

    @property
    def state_path(self) -> Path:
        return self.data_dir / STATE_FILE

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    def broker_dir(self, broker_id: int) -> Path:
        return self.data_dir / f"broker-{broker_id}"

    def broker_log(self, broker_id: int) -> Path:
        return self.logs_dir / f"broker-{broker_id}.log"

    def zookeeper_dir(self, node: int, ensemble: bool) -> Path:
        """ZooKeeper node ``node``'s dataDir: ``zookeeper/`` alone, ``zookeeper-<n>/`` in an
        ensemble (the names :class:`~deploy.zookeeper.ZooKeeperEnsemble` gives them)."""
        return self.data_dir / (f"zookeeper-{node}" if ensemble else "zookeeper")

    def zookeeper_log(self, node: int, ensemble: bool) -> Path:
        return self.logs_dir / (f"zookeeper-{node}.log" if ensemble else "zookeeper.log")

    def _read_state(self) -> _State:
        try:
            return _State.from_json(self.state_path.read_text())
        except FileNotFoundError:
            raise LocalClusterError(
                f"no cluster in {self.data_dir} (start one with `minibroker cluster up`)"
            ) from None
        except (ValueError, KeyError, TypeError) as e:
            raise LocalClusterError(f"{self.state_path} is damaged: {e}") from None

    def _write_state(self, state: _State) -> None:
        tmp = self.state_path.with_suffix(".json.tmp")
        tmp.write_text(state.to_json())
        tmp.replace(self.state_path)

    @property
    def zookeeper_connect(self) -> str:
        return self._read_state().zookeeper_connect

    @property
    def bootstrap_servers(self) -> str:
        return self._read_state().bootstrap_servers

    @property
    def kafka_bootstrap_servers(self) -> str | None:
        """``host:port,...`` of the brokers' Kafka protocol listeners (for kcat, aiokafka,
        confluent-kafka; SASL_SSL in a ``--tls`` cluster); None when they run none (a
        cluster started before Kafka listeners existed)."""
        return self._read_state().kafka_bootstrap_servers

    def addresses(self) -> tuple[str, str] | None:
        """(bootstrap servers, ZooKeeper connect string) of the cluster started here, from
        one read of cluster.json; None when there is none (the client commands' defaults).
        The connect string names every ZooKeeper node. Raises LocalClusterError when the
        file is damaged."""
        if not self.state_path.is_file():
            return None
        state = self._read_state()
        return state.bootstrap_servers, state.cluster_zookeeper_connect

    @property
    def tls_dir(self) -> Path:
        return self.data_dir / "tls"

    def command_config(self) -> Path | None:
        """The admin client properties of a ``cluster up --tls`` cluster (its TLS client
        certificate and the ZooKeeper digest), the CLI's default ``--command-config``; None
        for a PLAINTEXT cluster or none at all."""
        if not self.state_path.is_file() or not self._read_state().tls:
            return None
        return self.tls_dir / ADMIN_PROPERTIES

    # -- commands ----------------------------------------------------------------------------

    def up(
        self,
        brokers: int = 3,
        *,
        base_port: int = DEFAULT_BASE_PORT,
        kafka_base_port: int = DEFAULT_KAFKA_BASE_PORT,
        zookeeper_port: int = DEFAULT_ZOOKEEPER_PORT,
        zookeeper_nodes: int = 1,
        overrides: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        tls: bool = False,
        log_dir_bytes: int | None = None,
    ) -> None:
        """With ``tls``, the authenticated mode (README, "Security"): a throw-away CA and
        certificates in ``<data-dir>/tls/``, mutual TLS between everyone, ZooKeeper ACLs
        under the chroot ``/minibroker``, and ``tls/admin.properties`` for the CLI.

        With ``log_dir_bytes``, each broker's data dir is a tmpfs of that size (root only;
        :mod:`deploy.small_log_dirs`), so that one broker's disk can fill up alone (chaos's
        ``disk-full``); :meth:`down` copies the data back to the disk and unmounts.

        Start ZooKeeper and ``brokers`` brokers on ``base_port``, ``base_port + 1``, ...
        (0: a free run of ports picked now, as for the other two bases),
        each with a Kafka protocol listener (``kafka.port``) on ``kafka_base_port``,
        ``kafka_base_port + 1``, ...; return once every broker is registered and a
        controller is elected. Ports are checked first: a taken one is an error naming it,
        before anything starts. What was started is stopped again if a later step fails.
        A ``tls`` cluster's Kafka listeners are SASL_SSL with SCRAM-SHA-256 and -512
        (docs/security.md): the user ``admin``'s credentials are written to ZooKeeper
        before any broker starts, its password to ``tls/kafka-client.properties``. A
        ``tls`` cluster runs Kafka's ACL authorizer with ``allow.everyone.if.no.acl.found``
        false: the brokers and :data:`ADMIN_PRINCIPALS` are ``super.users``, anyone else
        needs ACLs (``minibroker acls``).

        ``zookeeper_nodes`` > 1 runs an ensemble (an odd number: 3 tolerates the loss of
        one node, 5 of two) with client ports ``zookeeper_port``, ``zookeeper_port + 1``,
        ...; its quorum and election ports are picked free and kept in cluster.json.
        """
        if brokers < 1:
            raise LocalClusterError("a cluster needs at least one broker")
        check_zookeeper_nodes(zookeeper_nodes)
        try:
            base_port = base_port_or_free(base_port, brokers, "--base-port")
            kafka_base_port = base_port_or_free(kafka_base_port, brokers, "--kafka-base-port")
            zookeeper_port = base_port_or_free(zookeeper_port, zookeeper_nodes, "--zookeeper-port")
        except ValueError as err:
            raise LocalClusterError(f"cannot start the cluster: {err}") from None
        if self.state_path.exists():
            state = self._read_state()
            if self._any_running(state):
                raise ClusterAlreadyRunningError(
                    self.data_dir,
                    sorted(i for i, p in state.brokers.items() if not self._is_ours(p.pid, i)),
                    [n for n in sorted(state.zookeeper) if not self._zookeeper_ours(state, n)],
                    len(state.zookeeper),
                )
        ports = {f"broker {i}": base_port + i - 1 for i in range(1, brokers + 1)}
        kafka_ports = {i: kafka_base_port + i - 1 for i in range(1, brokers + 1)}
        ports.update({f"broker {i} Kafka": port for i, port in kafka_ports.items()})
        if zookeeper_nodes == 1:
            ports["ZooKeeper"] = zookeeper_port
        else:
            ports.update(
                {
                    f"ZooKeeper node {n}": zookeeper_port + n - 1
                    for n in range(1, zookeeper_nodes + 1)
                }
            )
        clashes = sorted(
            what for what, port in ports.items() if list(ports.values()).count(port) > 1
        )
        if clashes:
            raise LocalClusterError(
                f"cannot start the cluster: {', '.join(clashes)} would share a port "
                "(pick others with --base-port / --kafka-base-port / --zookeeper-port)"
            )
        taken = [f"{what} port {port}" for what, port in ports.items() if not port_is_free(port)]
        if taken:
            raise LocalClusterError(
                f"cannot start the cluster: {', '.join(taken)} already in use "
                "(pick others with --base-port / --kafka-base-port / --zookeeper-port)"
            )
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        # A partition of an earlier incarnation whose maker died (a chaos run killed) must
        # not greet this one; best effort, as the cgroups are.
        with contextlib.suppress(LocalClusterError):
            self.heal_network()
        zookeeper = self._new_zookeeper(zookeeper_nodes, zookeeper_port)
        started: list[BrokerProcess] = []
        try:
            nodes = zookeeper.start(timeout=timeout)
            # Kafka's default of 3 replicas for __consumer_offsets would leave a smaller
            # cluster's consumer groups without a coordinator: as many as there are brokers.
            defaults = {"offsets.topic.replication.factor": str(min(3, brokers))}
            state = _State(nodes, {}, {**defaults, **(overrides or {})}, tls, log_dir_bytes)
            if tls:
                self._make_tls(brokers, state)
            if log_dir_bytes is not None:
                for broker_id in range(1, brokers + 1):
                    small_log_dirs.mount(self.broker_dir(broker_id), log_dir_bytes)
            self._write_state(state)
            with _kazoo(state.cluster_zookeeper_connect) as zk:
                for broker_id in range(1, brokers + 1):
                    process = self._broker_process(
                        broker_id, state, base_port + broker_id - 1, kafka_ports.get(broker_id)
                    )
                    process.start(zk, timeout=timeout)
                    started.append(process)
                    _outliving.append(process)
                    assert process.pid is not None
                    state.brokers[broker_id] = _Process(
                        process.pid, process.port, kafka_port=process.kafka_port
                    )
                    self._write_state(state)
                _wait_for_controller(zk, timeout)
        except (ZooKeeperError, BrokerProcessError, LocalClusterError, SmallLogDirError) as e:
            for process in started:
                process.kill()
            zookeeper.stop()
            self._unmount_log_dirs(brokers)
            self._remove_cgroups()
            self.state_path.unlink(missing_ok=True)
            raise LocalClusterError(str(e)) from None

    def down(self) -> None:
        """Heal a network partition first (a cut-off broker's controlled shutdown would
        wait for a controller it cannot reach), stop every broker cleanly (SIGTERM, all at
        once), then every ZooKeeper node, and remove the brokers' cgroups."""
        state = self._read_state()
        try:
            self.heal_network()
        except LocalClusterError as e:
            log.warning("%s", e)  # the stop goes on regardless
        for broker_id, process in state.brokers.items():
            if self._is_ours(process.pid, broker_id):
                _signal(process.pid, signal.SIGTERM)
        for broker_id, process in state.brokers.items():
            self._wait_gone(process.pid, broker_id)
        running = [n for n in sorted(state.zookeeper) if self._zookeeper_ours(state, n)]
        for node in running:
            _signal(state.zookeeper[node].pid, signal.SIGTERM, group=True)
        for node in running:
            self._wait_zookeeper_gone(state, node)
        if state.log_dir_bytes is not None:
            self._unmount_log_dirs(max(state.brokers, default=0))
        self._remove_cgroups()
        self.state_path.unlink(missing_ok=True)

    def _remove_cgroups(self) -> None:
        cgroups = ClusterCgroups.of(self.data_dir)
        if cgroups is None:
            return
        busy = cgroups.remove()
        if busy:
            log.warning("cgroups still hold processes, left in place: %s", ", ".join(busy))

    def _unmount_log_dirs(self, brokers: int) -> None:
        for broker_id in range(1, brokers + 1):
            try:
                small_log_dirs.unmount_keeping(self.broker_dir(broker_id))
            except SmallLogDirError as e:
                log.warning("%s", e)

    def log_dir_size(self) -> int | None:
        """The size of each broker's own tmpfs (``--log-dir-size``), or None."""
        return self._read_state().log_dir_bytes

    def kill(self, broker_id: int) -> None:
        """SIGKILL broker ``broker_id`` (a crash)."""
        process = self._running_broker(broker_id)
        _signal(process.pid, signal.SIGKILL)
        self._wait_gone(process.pid, broker_id)

    def stop(self, broker_id: int) -> None:
        """Stop broker ``broker_id`` cleanly (SIGTERM: controlled shutdown first)."""
        process = self._running_broker(broker_id)
        _signal(process.pid, signal.SIGTERM)
        self._wait_gone(process.pid, broker_id)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP broker ``broker_id``: it stops answering anyone, its ZooKeeper session
        included (past ``zookeeper.session.timeout.ms`` it expires: a zombie leader)."""
        _signal(self._running_broker(broker_id).pid, signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        """SIGCONT a paused broker."""
        _signal(self._running_broker(broker_id).pid, signal.SIGCONT)

    def broker_ids(self) -> list[int]:
        """The cluster's brokers, running or not."""
        return sorted(self._read_state().brokers)

    def is_running(self, broker_id: int) -> bool:
        """Whether broker ``broker_id``'s recorded process runs (paused counts as running)."""
        known = self._read_state().brokers.get(broker_id)
        return known is not None and self._is_ours(known.pid, broker_id)

    def start(self, broker_id: int, timeout: float = 60.0) -> None:
        """Start a stopped or killed broker again, same ports and data."""
        state = self._read_state()
        known = state.brokers.get(broker_id)
        if known is None:
            raise LocalClusterError(
                f"broker {broker_id} is not part of this cluster "
                f"(brokers: {', '.join(map(str, sorted(state.brokers)))})"
            )
        if self._is_ours(known.pid, broker_id):
            raise LocalClusterError(f"broker {broker_id} is already running (pid {known.pid})")
        if not any(self._zookeeper_ours(state, n) for n in state.zookeeper):
            raise LocalClusterError("ZooKeeper is not running: `cluster down`, then `cluster up`")
        for port in (known.port, known.kafka_port):
            if port is not None and not _wait_until_free(port, timeout=10.0):
                raise LocalClusterError(f"cannot start broker {broker_id}: port {port} in use")
        process = self._broker_process(broker_id, state, known.port, known.kafka_port)
        with _kazoo(state.cluster_zookeeper_connect) as zk:
            try:
                process.start(zk, timeout=timeout)
            except BrokerProcessError as e:
                raise LocalClusterError(str(e)) from None
        assert process.pid is not None
        _outliving.append(process)
        state.brokers[broker_id] = _Process(
            process.pid, process.port, kafka_port=process.kafka_port
        )
        self._write_state(state)

    # -- ZooKeeper nodes (the chaos tool's zk-kill and zk-quorum-loss act on these) ----------

    def zookeeper_nodes(self) -> list[int]:
        """The cluster's ZooKeeper node ids, running or not: ``[1]`` for a single node,
        ``[1, 2, 3]`` for an ensemble of three."""
        return sorted(self._read_state().zookeeper)

    def zookeeper_node_running(self, node: int) -> bool:
        """Whether node ``node``'s recorded JVM runs (paused counts as running). Running is
        not serving: an ensemble member without a quorum runs and serves nobody (see
        :meth:`zookeeper_mode`)."""
        state = self._read_state()
        return node in state.zookeeper and self._zookeeper_ours(state, node)

    def zookeeper_mode(self, node: int) -> str | None:
        """What node ``node`` says it is: ``leader``, ``follower``, ``standalone``,
        ``not serving`` (no quorum), or None when it does not run or answer."""
        state = self._read_state()
        known = self._zookeeper_node(state, node)
        if not self._zookeeper_ours(state, node):
            return None
        return server_mode(known.host, known.port)

    def kill_zookeeper(self, node: int) -> None:
        """SIGKILL ZooKeeper node ``node`` (its JVM's whole process group, as the harness
        signals it): a crash; its data stays for :meth:`start_zookeeper`. Returns once the
        process is gone. The other members of an ensemble elect a new leader if it led;
        with fewer than a majority left, ZooKeeper serves nobody until one comes back."""
        state = self._read_state()
        known = self._zookeeper_node(state, node)
        if not self._zookeeper_ours(state, node):
            raise LocalClusterError(f"ZooKeeper node {node} is not running")
        _signal(known.pid, signal.SIGKILL, group=True)
        self._wait_zookeeper_gone(state, node)

    def start_zookeeper(self, node: int, timeout: float = 90.0, *, wait: bool = True) -> None:
        """Start a killed or stopped ZooKeeper node again, same ports and data.

        With ``wait``, return once it serves. An ensemble member serves only with a
        majority of the members running, itself included: after a quorum loss, the node
        that restores the majority returns once the quorum formed, but one started while
        too few others run would wait in vain, so pass ``wait=False`` for it (then
        :meth:`wait_for_zookeeper`). Raises LocalClusterError if it runs already, its
        ports are taken, or it does not serve within ``timeout``.
        """
        state = self._read_state()
        known = self._zookeeper_node(state, node)
        if self._zookeeper_ours(state, node):
            raise LocalClusterError(f"ZooKeeper node {node} is already running (pid {known.pid})")
        server = self._zookeeper_server(state, node)
        try:
            server.start(timeout=timeout, wait=wait)
        except ZooKeeperError as e:
            raise LocalClusterError(str(e)) from None
        assert server.pid is not None
        _outliving.append(server)
        state = self._read_state()  # brokers may have been restarted meanwhile
        state.zookeeper[node].pid = server.pid
        self._write_state(state)

    def wait_for_zookeeper(self, timeout: float = 90.0) -> None:
        """Return once a majority of the ZooKeeper nodes serves (one leader among them);
        LocalClusterError with each node's mode after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            modes = {n: self.zookeeper_mode(n) for n in self.zookeeper_nodes()}
            serving = [m for m in modes.values() if is_serving_mode(m)]
            if len(serving) >= quorum_size(len(modes)) and (
                "leader" in serving or "standalone" in serving
            ):
                return
            if time.monotonic() > deadline:
                raise LocalClusterError(
                    f"ZooKeeper did not serve within {timeout:.0f}s (nodes: "
                    + ", ".join(f"{n} {m or 'down'}" for n, m in sorted(modes.items()))
                    + ")"
                )
            time.sleep(_POLL_S)

    # -- network partitions (the chaos tool's partition and split) ----------------------------

    @property
    def network_key(self) -> str:
        """Names the cluster's cgroups (``minibroker-<key>``) and firewall chain (``MB-<key>``)."""
        return process_cgroups.cluster_key(self.data_dir)

    def partition_problem(self) -> str | None:
        """Why this cluster's brokers cannot be partitioned from here (None: they can):
        what the machine lacks (:func:`partition_problem`), or a running broker outside its
        cgroup (started before brokers had cgroups, or by a user who could not make them)."""
        problem = partition_problem()
        cgroups = ClusterCgroups.of(self.data_dir)
        if problem is not None or cgroups is None:
            return problem or process_cgroups.problem()
        state = self._read_state()
        outside = [
            b
            for b, p in sorted(state.brokers.items())
            if self._is_ours(p.pid, b) and not cgroups.holds(p.pid, cgroups.broker_member(b))
        ]
        if outside:
            return (
                f"broker(s) {', '.join(map(str, outside))} run outside their cgroups "
                f"({cgroups.parent}/broker-N), started without them: restart them as root "
                "(`minibroker cluster stop N`, `cluster start N`)"
            )
        return None

    def isolate(self, groups: Sequence[Sequence[int]]) -> None:
        """Cut every group of brokers after the first off from everything outside it (the
        other brokers, ZooKeeper, every client); the first stays with ZooKeeper and the
        clients, brokers in no group with it (:mod:`deploy.loopback_firewall`). Holds until
        :meth:`heal_network`, kills and restarts of the brokers included. LocalClusterError
        saying why where it cannot (:meth:`partition_problem`)."""
        problem = self.partition_problem()
        cgroups = ClusterCgroups.of(self.data_dir)
        if problem is not None or cgroups is None:
            raise LocalClusterError(f"cannot partition the cluster in {self.data_dir}: {problem}")
        state = self._read_state()
        brokers = {}
        for broker_id, process in sorted(state.brokers.items()):
            member = cgroups.broker_member(broker_id)
            if cgroups.create(member) is None:  # a stopped broker's, removed by hand
                raise LocalClusterError(f"cannot create the cgroup {cgroups.directory(member)}")
            ports = tuple(p for p in (process.port, process.kafka_port) if p is not None)
            brokers[broker_id] = BrokerEndpoints(cgroups.path(member), ports)
        zookeeper_ports = [z.port for _, z in sorted(state.zookeeper.items())]
        try:
            loopback_firewall.isolate(self.network_key, groups, brokers, zookeeper_ports)
        except (LoopbackFirewallError, ValueError) as e:
            raise LocalClusterError(str(e)) from None

    def heal_network(self) -> None:
        """Undo :meth:`isolate` (nothing when the cluster is whole), and remove the
        partitions of any cluster whose maker exited without healing them."""
        try:
            loopback_firewall.heal(self.network_key)
            loopback_firewall.remove_orphans()
        except LoopbackFirewallError as e:
            raise LocalClusterError(str(e)) from None

    # -- status --------------------------------------------------------------------------------

    def status(self) -> ClusterStatus:
        """What runs, who is registered and controller, and which partitions are
        under-replicated or offline (read from ZooKeeper, the controller's own source; see
        :mod:`deploy.cluster_status`). Each ZooKeeper node's mode comes from its ``srvr``
        answer; without a serving majority, ZooKeeper's view is left out."""
        state = self._read_state()
        connect = state.cluster_zookeeper_connect
        nodes = []
        for n, z in sorted(state.zookeeper.items()):
            running = self._zookeeper_ours(state, n)
            nodes.append(
                ZooKeeperNodeStatus(
                    n,
                    z.port,
                    z.pid if running else None,
                    server_mode(z.host, z.port) if running else None,
                )
            )
        serving = sum(is_serving_mode(node.mode) for node in nodes)
        view = None
        if serving >= quorum_size(len(nodes)):
            try:
                with kazoo_session(connect) as zk:
                    view = read_zookeeper(zk)
            except ClusterStatusError as e:
                raise LocalClusterError(str(e)) from None
        registered = set() if view is None else set(view.registered)
        brokers = [
            BrokerStatus(
                i,
                p.port,
                p.pid if self._is_ours(p.pid, i) else None,
                i in registered,
            )
            for i, p in sorted(state.brokers.items())
        ]
        return ClusterStatus.of(
            connect,
            brokers,
            view,
            nodes,
            bootstrap_servers=state.bootstrap_servers,
            kafka_bootstrap_servers=state.kafka_bootstrap_servers,
        )

    # -- internals ---------------------------------------------------------------------------

    def _new_zookeeper(self, nodes: int, port: int) -> _NewZooKeeper:
        return _NewZooKeeper(self, nodes, port)

    def _zookeeper_node(self, state: _State, node: int) -> _ZooKeeperNode:
        known = state.zookeeper.get(node)
        if known is None:
            raise LocalClusterError(
                f"ZooKeeper node {node} is not part of this cluster "
                f"(nodes: {', '.join(map(str, sorted(state.zookeeper)))})"
            )
        return known

    def _zookeeper_server(self, state: _State, node: int) -> ZooKeeperServer:
        """The harness for node ``node`` as ``up`` configured it (restarts use the same)."""
        known = self._zookeeper_node(state, node)
        ensemble = state.is_ensemble
        template = _zookeeper_template()
        data_dir = self.zookeeper_dir(node, ensemble)
        log_path = self.zookeeper_log(node, ensemble)
        if ensemble:
            config = member_config(template, state.quorum_peers(), node, data_dir, log_path)
        else:
            config = replace(template, data_dir=data_dir, port=known.port, log_path=log_path)
        return ZooKeeperServer(config)

    def _make_tls(self, brokers: int, state: _State) -> None:
        """The TLS mode's files (see :meth:`up`) and its chroot, created with the secure ACL
        before any broker starts."""
        certs = tls_certs.generate(
            self.tls_dir, range(1, brokers + 1), clients=(ADMIN_CERTIFICATE,)
        )
        digest = self.tls_dir / ZOOKEEPER_DIGEST_FILE
        tls_certs.write_file(digest, f"minibroker:{secrets.token_urlsafe(24)}\n")
        admin = {
            **certs.client_properties(ADMIN_CERTIFICATE),
            "zookeeper.set.acl": "true",
            "zookeeper.auth.digest.file": str(digest),
        }
        tls_certs.write_file(
            self.tls_dir / ADMIN_PROPERTIES, "".join(f"{k}={v}\n" for k, v in admin.items())
        )
        password = secrets.token_urlsafe(18)
        kafka_client = {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-256",
            "sasl.username": KAFKA_ADMIN_USER,
            "sasl.password": password,
            "ssl.ca.location": str(certs.ca),
        }
        tls_certs.write_file(
            self.tls_dir / KAFKA_CLIENT_PROPERTIES,
            "".join(f"{k}={v}\n" for k, v in kafka_client.items()),
        )
        scram = {
            m.mechanism_name: format_credential(
                ScramCredential.from_password(m, password, DEFAULT_ITERATIONS)
            )
            for m in ScramMechanism
        }
        credentials = read_digest_file(digest, set_acl=True)
        with kazoo_client(state.zookeeper_connect, credentials=credentials) as client:
            client.ensure_path(TLS_CHROOT, acl=SECURE_ACL)
            # The SCRAM keys are the brokers' alone to read, as the brokers create them
            # (proto.zk.znodes.SENSITIVE_ROOT_PATHS); set again over an earlier cluster's.
            users = f"{TLS_CHROOT}{znodes.CONFIG_USERS_PATH}"
            client.ensure_path(users, acl=SENSITIVE_ACL)
            client.set_acls(users, SENSITIVE_ACL)
            path, data = f"{users}/{KAFKA_ADMIN_USER}", znodes.encode_topic_config(scram)
            if client.exists(path) is None:
                client.create(path, data, acl=SENSITIVE_ACL)
            else:
                client.set(path, data)
                client.set_acls(path, SENSITIVE_ACL)

    def _broker_process(
        self, broker_id: int, state: _State, port: int, kafka_port: int | None
    ) -> BrokerProcess:
        overrides = dict(state.overrides)
        if state.tls:
            certs = tls_certs.ClusterCertificates(self.tls_dir)
            overrides.update(certs.broker_properties(broker_id, certs.broker_ids()))
            overrides["super.users"] = ";".join([overrides["super.users"], *ADMIN_PRINCIPALS])
            overrides.update(ACLS_ON)
            overrides["zookeeper.set.acl"] = "true"
            overrides["zookeeper.auth.digest.file"] = str(self.tls_dir / ZOOKEEPER_DIGEST_FILE)
            if kafka_port is not None:
                overrides.update(KAFKA_LISTENER_SECURITY)
        cgroups = ClusterCgroups.of(self.data_dir)
        cgroup = None if cgroups is None else cgroups.create(cgroups.broker_member(broker_id))
        return BrokerProcess(
            BrokerSpec(
                broker_id,
                self.broker_dir(broker_id),
                state.cluster_zookeeper_connect,
                port=port,
                kafka_port=kafka_port,
                overrides=overrides,
                log_path=self.broker_log(broker_id),
                cgroup=cgroup,
            )
        )

    def _running_broker(self, broker_id: int) -> _Process:
        state = self._read_state()
        process = state.brokers.get(broker_id)
        if process is None:
            raise LocalClusterError(
                f"broker {broker_id} is not part of this cluster "
                f"(brokers: {', '.join(map(str, sorted(state.brokers)))})"
            )
        if not self._is_ours(process.pid, broker_id):
            raise LocalClusterError(f"broker {broker_id} is not running")
        return process

    def _any_running(self, state: _State) -> bool:
        return any(self._zookeeper_ours(state, n) for n in state.zookeeper) or any(
            self._is_ours(p.pid, i) for i, p in state.brokers.items()
        )

    def _zookeeper_ours(self, state: _State, node: int) -> bool:
        """Node ``node``'s recorded pid runs our ZooKeeper with that node's config."""
        known = state.zookeeper.get(node)
        if known is None:
            return False
        config = self.zookeeper_dir(node, state.is_ensemble) / "zoo.cfg"
        return self._is_ours(known.pid, None, zookeeper_config=config)

    def _is_ours(
        self, pid: int, broker_id: int | None, *, zookeeper_config: Path | None = None
    ) -> bool:
        """``pid`` runs and is our broker ``broker_id``, or (None) our ZooKeeper: the one
        whose command line names ``zookeeper_config`` (default: a single node's)."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            status = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        if status.rsplit(")", 1)[-1].split()[0] == "Z" and _threads(pid) <= 1:
            # A zombie has exited. A zombie main thread with other threads still exiting has
            # not: its sockets (the broker's port) close with the last thread.
            return False
        args = [a.decode(errors="replace") for a in cmdline]
        if broker_id is None:
            # The exact path: zookeeper/zoo.cfg must not match zookeeper-1/zoo.cfg.
            config = zookeeper_config or self.zookeeper_dir(1, ensemble=False) / "zoo.cfg"
            return str(config) in args
        return (
            "broker" in args
            and _arg(args, "--id") == str(broker_id)
            and (_arg(args, "--data-dir") == str(self.broker_dir(broker_id)))
        )

    def _wait_gone(self, pid: int, broker_id: int | None) -> None:
        self._wait_until_gone(pid, lambda: self._is_ours(pid, broker_id), broker_id is None)

    def _wait_zookeeper_gone(self, state: _State, node: int) -> None:
        pid = state.zookeeper[node].pid
        self._wait_until_gone(pid, lambda: self._zookeeper_ours(state, node), True)

    @staticmethod
    def _wait_until_gone(pid: int, alive: Callable[[], bool], group: bool) -> None:
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        while alive():
            if time.monotonic() > deadline:
                log.warning("process %d did not stop; killing it", pid)
                _signal(pid, signal.SIGKILL, group=group)
                deadline = time.monotonic() + 10
            time.sleep(_POLL_S)
        _reap(pid)


_REAP_WAIT_S = 10.0
"""How long a process that looks gone may take to finish exiting."""


def _reap(pid: int) -> None:
    """Reap ``pid``, gone now, if this interpreter started it: through its harness when
    there is one (``pid`` polls the Popen, which so learns how it ended; a Popen that never
    does warns at exit, "ResourceWarning: subprocess N is still running"), else directly.
    Harnesses of processes that have ended are dropped from ``_outliving``.

    "Gone" may mean exiting: a process's ``/proc/<pid>/cmdline`` reads empty from early in
    its exit, before it is a zombie its parent can reap. Its harness is given a moment to
    see it end, or under load its Popen is left unreaped and warns at exit."""
    deadline = time.monotonic() + _REAP_WAIT_S
    while any(h.pid == pid for h in _outliving) and time.monotonic() < deadline:
        time.sleep(_POLL_S / 5)
    for harness in [h for h in _outliving if h.pid is None]:
        _outliving.remove(harness)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _wait_until_free(port: int, timeout: float) -> bool:
    """The port of a broker that was just stopped may close a moment after its process is
    gone (the kernel tears the last threads down): wait a little for it."""
    deadline = time.monotonic() + timeout
    while not port_is_free(port):
        if time.monotonic() > deadline:
            return False
        time.sleep(_POLL_S)
    return True


def _threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def partition_problem() -> str | None:
    """Why local clusters cannot be partitioned from this process (None: they can): each
    broker needs a cgroup (root, a writable cgroup v2 mount) and iptables must match
    packets by cgroup."""
    problem = process_cgroups.problem() or loopback_firewall.problem()
    return None if problem is None else f'{problem} (see docs/chaos.md, "The nemeses")'


def check_zookeeper_nodes(nodes: int) -> None:
    """LocalClusterError unless ``nodes`` is a sensible ZooKeeper size: 1, 3, 5 or 7.

    An even ensemble tolerates no more failures than the odd one below it (4 nodes need 3
    for a majority, as 3 need 2... and 2 need both), so ZooKeeper's advice is an odd size.
    """
    if nodes < 1:
        raise LocalClusterError(f"--zookeeper-nodes must be at least 1, not {nodes}")
    if nodes % 2 == 0:
        raise LocalClusterError(
            f"--zookeeper-nodes must be odd, not {nodes}: an ensemble of {nodes} needs "
            f"{quorum_size(nodes)} nodes up, so it survives no more failures than one of "
            f"{nodes - 1} (use {nodes - 1} or {nodes + 1})"
        )
    if nodes > MAX_ZOOKEEPER_NODES:
        raise LocalClusterError(
            f"--zookeeper-nodes {nodes} is more than this launcher runs "
            f"(at most {MAX_ZOOKEEPER_NODES})"
        )


def _zookeeper_template() -> ZooKeeperConfig:
    """The settings of every ZooKeeper node of a local cluster: it must outlive the command
    that started it, and its data must outlive a crash."""
    return ZooKeeperConfig(stop_at_exit=False, keep_data=True)


class _NewZooKeeper:
    """The ZooKeeper of a cluster being brought up: one standalone server on ``port``, or
    an ensemble on ``port``, ``port + 1``, ..."""

    def __init__(self, cluster: LocalCluster, nodes: int, port: int) -> None:
        self._server: ZooKeeperServer | None = None
        self._ensemble: ZooKeeperEnsemble | None = None
        if nodes == 1:
            data_dir = cluster.zookeeper_dir(1, ensemble=False)
            self._server = ZooKeeperServer(
                replace(
                    _zookeeper_template(),
                    data_dir=data_dir,
                    port=port,
                    log_path=cluster.zookeeper_log(1, ensemble=False),
                )
            )
        else:
            self._ensemble = ZooKeeperEnsemble(
                nodes,
                _zookeeper_template(),
                data_dir=cluster.data_dir,
                log_dir=cluster.logs_dir,
                client_ports=[port + i for i in range(nodes)],
            )

    def start(self, timeout: float) -> dict[int, _ZooKeeperNode]:
        """Start it; the nodes to record in cluster.json."""
        if self._server is not None:
            self._server.start(timeout=timeout)
            assert self._server.pid is not None
            _outliving.append(self._server)
            return {1: _ZooKeeperNode(self._server.pid, self._server.port)}
        assert self._ensemble is not None
        self._ensemble.start(timeout=timeout)
        nodes = {}
        for peer in self._ensemble.peers:
            server = self._ensemble.server(peer.server_id)
            _outliving.append(server)
            pid = server.pid
            assert pid is not None
            nodes[peer.server_id] = _ZooKeeperNode(
                pid, peer.client_port, peer.host, peer.quorum_port, peer.election_port
            )
        return nodes

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
        if self._ensemble is not None:
            self._ensemble.stop()


def _arg(args: list[str], name: str) -> str | None:
    for i, a in enumerate(args[:-1]):
        if a == name:
            return args[i + 1]
    return None


def _signal(pid: int, signum: signal.Signals, *, group: bool = False) -> None:
    with contextlib.suppress(ProcessLookupError):
        if group:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
        if signum == signal.SIGTERM:
            os.kill(pid, signal.SIGCONT)  # a paused process must be able to exit


@contextlib.contextmanager
def _kazoo(connect: str) -> Iterator[KazooClient]:
    try:
        client = start_kazoo_client(connect)
    except ZkConnectionError as e:
        raise LocalClusterError(str(e)) from None
    try:
        yield client
    finally:
        stop_kazoo_client(client)


def _wait_for_controller(zk: KazooClient, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while zk.exists(znodes.CONTROLLER_PATH) is None:
        if time.monotonic() > deadline:
            raise LocalClusterError(f"no controller was elected within {timeout:.0f}s")
        time.sleep(_POLL_S)
