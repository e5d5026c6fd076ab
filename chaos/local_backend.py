"""The local backend: the processes of ``minibroker cluster up`` (:mod:`deploy.local_cluster`).

Every signal goes through :class:`~deploy.local_cluster.LocalCluster`, which finds the
processes through ``cluster.json`` and checks that a pid is still our broker before
signalling it. The network cannot be partitioned here: the brokers share 127.0.0.1 in one
network namespace, so ``partition`` needs the docker backend (the runner says so before a
run starts).
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from broker.kafka_server import ZOOKEEPER_SESSION_FILE
from chaos.backend import BackendUnavailableError, ClusterBackend
from chaos.torn_write import tear_active_segment
from deploy import small_log_dirs
from deploy.local_cluster import LocalCluster, LocalClusterError

__all__ = ["LocalBackend"]


class LocalBackend(ClusterBackend):
    """A local cluster, found through its data dir's ``cluster.json``."""

    name = "local"

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster

    def broker_ids(self) -> list[int]:
        return self.cluster.broker_ids()

    def bootstrap_servers(self) -> str:
        return self.cluster.bootstrap_servers

    def zookeeper_connect(self) -> str:
        return self.cluster.zookeeper_connect

    def kafka_bootstrap_servers(self) -> str | None:
        return self.cluster.kafka_bootstrap_servers

    def kill(self, broker_id: int) -> None:
        self.cluster.kill(broker_id)

    def stop(self, broker_id: int) -> None:
        self.cluster.stop(broker_id)

    def start(self, broker_id: int) -> None:
        self.cluster.start(broker_id)

    def pause(self, broker_id: int) -> None:
        self.cluster.pause(broker_id)

    def resume(self, broker_id: int) -> None:
        self.cluster.resume(broker_id)

    def is_running(self, broker_id: int) -> bool:
        return self.cluster.is_running(broker_id)

    def tear_segment(self, broker_id: int, rng: random.Random) -> str:
        if self.is_running(broker_id):
            raise LocalClusterError(f"broker {broker_id} is running: tear only a stopped one")
        torn = tear_active_segment(self.cluster.broker_dir(broker_id), rng)
        return "nothing to tear" if torn is None else str(torn)

    def zookeeper_session(self, broker_id: int) -> tuple[int, bytes] | None:
        path = self.cluster.broker_dir(broker_id) / ZOOKEEPER_SESSION_FILE
        try:
            session_hex, password_hex = path.read_text().split()
        except (OSError, ValueError):
            return None
        return int(session_hex, 16), bytes.fromhex(password_hex)

    def broker_data_dir(self, broker_id: int) -> Path:
        return self.cluster.broker_dir(broker_id)

    @property
    def can_fill_log_dir(self) -> bool:
        return self.cluster.log_dir_size() is not None

    def fill_log_dir(self, broker_id: int) -> str:
        if not self.can_fill_log_dir:
            raise BackendUnavailableError(
                "disk-full needs each broker's data dir on a file system of its own: start "
                "the cluster with `cluster up --log-dir-size 256M` (root), or let chaos run "
                "start its own"
            )
        filled = small_log_dirs.fill(self.cluster.broker_dir(broker_id))
        return f"filled {filled:,} bytes of broker {broker_id}'s data dir"

    def free_log_dir(self, broker_id: int) -> None:
        small_log_dirs.free(self.cluster.broker_dir(broker_id))

    def zookeeper_nodes(self) -> list[int]:
        return self.cluster.zookeeper_nodes()

    def kill_zookeeper(self, node: int) -> None:
        if len(self.zookeeper_nodes()) < 3:
            super().kill_zookeeper(node)  # raises: a lone node is not a fault to heal from
            return
        self.cluster.kill_zookeeper(node)

    def start_zookeeper(self, node: int) -> None:
        if not self.cluster.zookeeper_node_running(node):
            self.cluster.start_zookeeper(node)

    def stop_cluster(self) -> None:
        self.cluster.down()

    def copy_data_dirs(self, into: Path) -> dict[int, Path]:
        """Each broker's data dir, of a stopped cluster or of a running one (a file the
        broker removes while it is copied, a checkpoint replaced by its successor or a
        segment deleted, is left out)."""
        copies = {}
        for broker_id in self.broker_ids():
            target = into / f"broker-{broker_id}"
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(
                self.cluster.broker_dir(broker_id),
                target,
                ignore=shutil.ignore_patterns(".lock", ZOOKEEPER_SESSION_FILE),
                copy_function=_copy_if_there,
            )
            copies[broker_id] = target
        return copies

    def copy_logs(self, into: Path) -> None:
        into.mkdir(parents=True, exist_ok=True)
        for log in sorted(self.cluster.logs_dir.glob("*.log")):
            shutil.copy2(log, into / log.name)


def _copy_if_there(source: str, target: str) -> str:
    try:
        return str(shutil.copy2(source, target))
    except FileNotFoundError:
        if Path(source).exists():
            raise  # the target's side
        return target
