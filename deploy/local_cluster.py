"""The local cluster launcher behind ``minibroker cluster up|down|status|kill|stop|start``.

One ZooKeeper and N brokers as processes on this machine (DESIGN.md §7), built on the same
harnesses the tests, chaos and benchmarks use (deploy/zookeeper.py, deploy/broker_process.py).
The processes outlive the command that started them, so every later command finds them
again through ``<data-dir>/cluster.json`` (pids, ports) and acts by pid. Layout::

    <data-dir>/cluster.json        pids and ports
    <data-dir>/zookeeper/          ZooKeeper's dataDir
    <data-dir>/broker-<n>/         broker n's log dir
    <data-dir>/logs/               zookeeper.log, broker-<n>.log

A pid is only signalled after checking that it is still the process we started (its
command line names our broker id or the ZooKeeper config), so a recycled pid is never hit.

Example usage::

    cluster = LocalCluster(Path("minibroker-data"))
    cluster.up(brokers=3)                 # ZooKeeper on 2181, brokers on 9091-9093
    cluster.kill(2)                       # SIGKILL broker 2
    cluster.start(2)
    print(cluster.status().controller)
    cluster.down()
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from broker import zk_data
from broker.topic_partition import TopicPartition
from deploy.broker_process import BrokerProcess, BrokerProcessError, BrokerSpec
from deploy.zookeeper import ZooKeeperConfig, ZooKeeperError, ZooKeeperServer
from proto.errors import MinibrokerError

__all__ = [
    "DATA_DIR_ENV",
    "DEFAULT_BASE_PORT",
    "DEFAULT_DATA_DIR",
    "DEFAULT_ZOOKEEPER_PORT",
    "ClusterStatus",
    "LocalCluster",
    "LocalClusterError",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

DATA_DIR_ENV = "MINIBROKER_DATA_DIR"
DEFAULT_DATA_DIR = Path("minibroker-data")
DEFAULT_BASE_PORT = 9091
DEFAULT_ZOOKEEPER_PORT = 2181
STATE_FILE = "cluster.json"
_STOP_TIMEOUT_S = 60.0
_POLL_S = 0.05


class LocalClusterError(MinibrokerError):
    """A cluster command cannot do what was asked; the message says why and what to do."""


@dataclass
class _Process:
    pid: int
    port: int
    host: str = "127.0.0.1"


@dataclass
class _State:
    zookeeper: _Process
    brokers: dict[int, _Process]
    overrides: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        data = {
            "zookeeper": asdict(self.zookeeper),
            "brokers": {str(i): asdict(b) for i, b in sorted(self.brokers.items())},
            "overrides": self.overrides,
        }
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> _State:
        data = json.loads(text)
        return cls(
            _Process(**data["zookeeper"]),
            {int(i): _Process(**b) for i, b in data["brokers"].items()},
            dict(data.get("overrides", {})),
        )


@dataclass(frozen=True)
class BrokerStatus:
    broker_id: int
    port: int
    pid: int | None
    """The running process, or None."""
    registered: bool


@dataclass(frozen=True)
class ClusterStatus:
    zookeeper: str
    zookeeper_running: bool
    brokers: list[BrokerStatus]
    controller: int | None
    controller_epoch: int | None
    topics: int
    partitions: int
    under_replicated: list[tuple[TopicPartition, tuple[int, ...], tuple[int, ...]]]
    """(partition, replicas, isr) where the ISR is smaller than the replica set."""
    offline: list[TopicPartition]
    """Partitions without a live leader."""


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
        zk = self._read_state().zookeeper
        return f"{zk.host}:{zk.port}"

    @property
    def bootstrap_servers(self) -> str:
        state = self._read_state()
        return ",".join(f"{b.host}:{b.port}" for _, b in sorted(state.brokers.items()))

    # -- commands ----------------------------------------------------------------------------

    def up(
        self,
        brokers: int = 3,
        *,
        base_port: int = DEFAULT_BASE_PORT,
        zookeeper_port: int = DEFAULT_ZOOKEEPER_PORT,
        overrides: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> None:
        """Start ZooKeeper and ``brokers`` brokers on ``base_port``, ``base_port + 1``, ...;
        return once every broker is registered and a controller is elected. Ports are
        checked first: a taken one is an error naming it, before anything starts. What was
        started is stopped again if a later step fails."""
        if brokers < 1:
            raise LocalClusterError("a cluster needs at least one broker")
        if self.state_path.exists() and self._any_running(self._read_state()):
            raise LocalClusterError(
                f"a cluster is already running from {self.data_dir} "
                "(`minibroker cluster status` shows it, `minibroker cluster down` stops it)"
            )
        ports = {f"broker {i}": base_port + i - 1 for i in range(1, brokers + 1)}
        ports["ZooKeeper"] = zookeeper_port
        taken = [f"{what} port {port}" for what, port in ports.items() if not _port_free(port)]
        if taken:
            raise LocalClusterError(
                f"cannot start the cluster: {', '.join(taken)} already in use "
                "(pick others with --base-port / --zookeeper-port)"
            )
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        zookeeper = ZooKeeperServer(
            ZooKeeperConfig(
                data_dir=self.data_dir / "zookeeper",
                port=zookeeper_port,
                log_path=self.logs_dir / "zookeeper.log",
                stop_at_exit=False,
                keep_data=True,
            )
        )
        (self.data_dir / "zookeeper").mkdir(parents=True, exist_ok=True)
        started: list[BrokerProcess] = []
        try:
            zookeeper.start(timeout=timeout)
            assert zookeeper.pid is not None
            state = _State(_Process(zookeeper.pid, zookeeper.port), {}, dict(overrides or {}))
            self._write_state(state)
            with _kazoo(zookeeper.connect_string) as zk:
                for broker_id in range(1, brokers + 1):
                    process = self._broker_process(broker_id, state, base_port + broker_id - 1)
                    process.start(zk, timeout=timeout)
                    started.append(process)
                    assert process.pid is not None
                    state.brokers[broker_id] = _Process(process.pid, process.port)
                    self._write_state(state)
                _wait_for_controller(zk, timeout)
        except (ZooKeeperError, BrokerProcessError) as e:
            for process in started:
                process.kill()
            zookeeper.stop()
            self.state_path.unlink(missing_ok=True)
            raise LocalClusterError(str(e)) from None

    def down(self) -> None:
        """Stop every broker cleanly (SIGTERM, all at once), then ZooKeeper."""
        state = self._read_state()
        for broker_id, process in state.brokers.items():
            if self._is_ours(process.pid, broker_id):
                _signal(process.pid, signal.SIGTERM)
        for broker_id, process in state.brokers.items():
            self._wait_gone(process.pid, broker_id)
        if self._is_ours(state.zookeeper.pid, None):
            _signal(state.zookeeper.pid, signal.SIGTERM, group=True)
            self._wait_gone(state.zookeeper.pid, None)
        self.state_path.unlink(missing_ok=True)

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

    def start(self, broker_id: int, timeout: float = 60.0) -> None:
        """Start a stopped or killed broker again, same port and data."""
        state = self._read_state()
        known = state.brokers.get(broker_id)
        if known is None:
            raise LocalClusterError(
                f"broker {broker_id} is not part of this cluster "
                f"(brokers: {', '.join(map(str, sorted(state.brokers)))})"
            )
        if self._is_ours(known.pid, broker_id):
            raise LocalClusterError(f"broker {broker_id} is already running (pid {known.pid})")
        if not self._is_ours(state.zookeeper.pid, None):
            raise LocalClusterError("ZooKeeper is not running: `cluster down`, then `cluster up`")
        if not _port_free(known.port):
            raise LocalClusterError(f"cannot start broker {broker_id}: port {known.port} in use")
        process = self._broker_process(broker_id, state, known.port)
        with _kazoo(f"{state.zookeeper.host}:{state.zookeeper.port}") as zk:
            try:
                process.start(zk, timeout=timeout)
            except BrokerProcessError as e:
                raise LocalClusterError(str(e)) from None
        assert process.pid is not None
        state.brokers[broker_id] = _Process(process.pid, process.port)
        self._write_state(state)

    def status(self) -> ClusterStatus:
        """What runs, who is registered and controller, and which partitions are
        under-replicated or offline (read from ZooKeeper, the controller's own source)."""
        state = self._read_state()
        connect = f"{state.zookeeper.host}:{state.zookeeper.port}"
        zk_running = self._is_ours(state.zookeeper.pid, None)
        registered: set[int] = set()
        controller = epoch = None
        topics = partitions = 0
        under: list[tuple[TopicPartition, tuple[int, ...], tuple[int, ...]]] = []
        offline: list[TopicPartition] = []
        if zk_running:
            with _kazoo(connect) as zk:
                registered = {int(c) for c in _children(zk, zk_data.BROKER_IDS_PATH) if c.isdigit()}
                controller = _read(zk, zk_data.CONTROLLER_PATH, zk_data.decode_controller)
                epoch = _read(zk, zk_data.CONTROLLER_EPOCH_PATH, zk_data.decode_controller_epoch)
                for topic in sorted(_children(zk, zk_data.BROKER_TOPICS_PATH)):
                    assignment = _read(
                        zk, zk_data.topic_path(topic), zk_data.decode_topic_assignment
                    )
                    if assignment is None:
                        continue
                    topics += 1
                    for partition, replicas in sorted(assignment.items()):
                        partitions += 1
                        tp = TopicPartition(topic, partition)
                        st = _read(
                            zk, zk_data.partition_state_path(tp), zk_data.decode_partition_state
                        )
                        if st is None or st.leader not in registered:
                            offline.append(tp)
                        if st is None or len(st.isr) < len(replicas):
                            isr = () if st is None else tuple(st.isr)
                            under.append((tp, tuple(replicas), isr))
        brokers = [
            BrokerStatus(
                i,
                p.port,
                p.pid if self._is_ours(p.pid, i) else None,
                i in registered,
            )
            for i, p in sorted(state.brokers.items())
        ]
        return ClusterStatus(
            connect, zk_running, brokers, controller, epoch, topics, partitions, under, offline
        )

    # -- internals ---------------------------------------------------------------------------

    def _broker_process(self, broker_id: int, state: _State, port: int) -> BrokerProcess:
        zk = state.zookeeper
        return BrokerProcess(
            BrokerSpec(
                broker_id,
                self.broker_dir(broker_id),
                f"{zk.host}:{zk.port}",
                port=port,
                overrides=dict(state.overrides),
                log_path=self.broker_log(broker_id),
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
        return self._is_ours(state.zookeeper.pid, None) or any(
            self._is_ours(p.pid, i) for i, p in state.brokers.items()
        )

    def _is_ours(self, pid: int, broker_id: int | None) -> bool:
        """``pid`` runs and is our broker ``broker_id`` (None: our ZooKeeper)."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            status = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        if status.rsplit(")", 1)[-1].split()[0] == "Z":  # a zombie has exited
            return False
        args = [a.decode(errors="replace") for a in cmdline]
        if broker_id is None:
            return str(self.data_dir / "zookeeper") in " ".join(args)
        return (
            "broker" in args
            and _arg(args, "--id") == str(broker_id)
            and (_arg(args, "--data-dir") == str(self.broker_dir(broker_id)))
        )

    def _wait_gone(self, pid: int, broker_id: int | None) -> None:
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        while self._is_ours(pid, broker_id):
            if time.monotonic() > deadline:
                log.warning("process %d did not stop; killing it", pid)
                _signal(pid, signal.SIGKILL, group=broker_id is None)
                deadline = time.monotonic() + 10
            time.sleep(_POLL_S)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)  # reap it if it was our own child


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


def _port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


@contextlib.contextmanager
def _kazoo(connect: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=connect, timeout=10.0)
    try:
        client.start(timeout=10)
    except Exception as e:
        raise LocalClusterError(f"cannot reach ZooKeeper at {connect}: {e}") from None
    try:
        yield client
    finally:
        client.stop()
        client.close()


def _children(zk: KazooClient, path: str) -> list[str]:
    try:
        return list(zk.get_children(path))
    except NoNodeError:
        return []


def _read(zk: KazooClient, path: str, decode: Callable[[bytes], T]) -> T | None:
    try:
        data, _ = zk.get(path)
    except NoNodeError:
        return None
    try:
        return decode(data)
    except zk_data.ZkDataError:
        return None


def _wait_for_controller(zk: KazooClient, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while zk.exists(zk_data.CONTROLLER_PATH) is None:
        if time.monotonic() > deadline:
            raise LocalClusterError(f"no controller was elected within {timeout:.0f}s")
        time.sleep(_POLL_S)
