"""The local backend: the processes of ``minibroker cluster up`` (:mod:`deploy.local_cluster`).

Every signal goes through :class:`~deploy.local_cluster.LocalCluster`, which finds the
processes through ``cluster.json`` and checks that a pid is still our broker before
signalling it. The brokers share 127.0.0.1 in one network namespace, so a partition cannot
take them off a network as Docker's does: each broker runs in a cgroup of its own, and an
iptables chain of the cluster's drops the loopback packets between the groups by the
cgroup that sent them (:mod:`deploy.loopback_firewall`). That needs root, cgroup v2 and
iptables' ``cgroup`` match; without them ``partition`` and ``split`` are refused before a
run starts, saying what is missing.
"""

from __future__ import annotations

import contextlib
import random
import shutil
from collections.abc import Collection, Sequence
from pathlib import Path

from broker.kafka_server import ZOOKEEPER_SESSION_FILE
from chaos.backend import BackendUnavailableError, ClusterBackend, copied_partition
from chaos.torn_write import tear_active_segment
from deploy import small_log_dirs
from deploy.local_cluster import LocalCluster, LocalClusterError

__all__ = ["LocalBackend"]


class LocalBackend(ClusterBackend):
    """A local cluster, found through its data dir's ``cluster.json``."""

    name = "local"

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        # A run starts whole: a partition left by one that died (SIGKILL) before healing
        # it goes, with any other whose maker is gone. Best effort: an iptables that cannot
        # run here has made no partition either.
        with contextlib.suppress(LocalClusterError):
            cluster.heal_network()

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

    @property
    def can_partition(self) -> bool:
        return self.cluster.partition_problem() is None

    def isolate(self, groups: Sequence[Sequence[int]]) -> None:
        problem = self.cluster.partition_problem()
        if problem is not None:
            raise BackendUnavailableError(f"the local backend cannot partition here: {problem}")
        self.cluster.isolate(groups)

    def heal_network(self) -> None:
        self.cluster.heal_network()

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

    def copy_data_dirs(self, into: Path, topics: Collection[str] | None = None) -> dict[int, Path]:
        """Each broker's data dir (``topics``: only theirs and the internal topics'), of a
        stopped cluster or of a running one (a file the broker removes while it is copied,
        a checkpoint replaced by its successor or a segment deleted, is left out)."""
        copies = {}
        for broker_id in self.broker_ids():
            source = self.cluster.broker_dir(broker_id)
            target = into / f"broker-{broker_id}"
            if target.exists():
                shutil.rmtree(target)

            def ignored(folder: str, names: list[str], top: Path = source) -> set[str]:
                left = {n for n in names if n in (".lock", ZOOKEEPER_SESSION_FILE)}
                if Path(folder) == top:
                    left |= {
                        n for n in names if (top / n).is_dir() and not copied_partition(n, topics)
                    }
                return left

            shutil.copytree(source, target, ignore=ignored, copy_function=_copy_if_there)
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
