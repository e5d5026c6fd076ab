"""What a nemesis can do to a cluster, whatever runs it: local processes or containers.

A :class:`ClusterBackend` names the brokers and ZooKeeper nodes, and has one method per
basic fault and its inverse. The nemeses (:mod:`chaos.nemesis`) compose these; the backends
(:mod:`chaos.local_backend`, :mod:`chaos.docker_backend`) carry them out. A backend that
cannot do something raises :class:`BackendUnavailableError`, which the runner reports as one
line before the run starts (exit 2), never half way through.
"""

from __future__ import annotations

import abc
import random
from collections.abc import Collection
from pathlib import Path

from proto.errors import MinibrokerError

__all__ = ["INTERNAL_TOPICS", "BackendUnavailableError", "ClusterBackend", "copied_partition"]


class BackendUnavailableError(MinibrokerError):
    """The backend cannot run here (no Docker engine) or cannot do this fault."""


INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")
"""Copied with any run's topics: the audit's group and transaction checks read them."""


def copied_partition(name: str, topics: Collection[str] | None) -> bool:
    """Whether a data dir's entry ``name`` (a partition dir, ``<topic>-<partition>``) is
    copied when only ``topics`` are wanted (None: all)."""
    if topics is None:
        return True
    topic = name.rsplit("-", 1)[0]
    return topic in topics or topic in INTERNAL_TOPICS


class ClusterBackend(abc.ABC):
    """A running cluster a chaos run may break and must heal."""

    name: str
    """``local`` or ``docker``."""

    @abc.abstractmethod
    def broker_ids(self) -> list[int]: ...

    @abc.abstractmethod
    def bootstrap_servers(self) -> str:
        """Every broker, ``host:port,...``, as clients on this machine reach them."""

    @abc.abstractmethod
    def zookeeper_connect(self) -> str:
        """The ZooKeeper connect string, as clients on this machine reach it."""

    def kafka_bootstrap_servers(self) -> str | None:
        """Every broker's Kafka protocol listener, ``host:port,...``, as Kafka's own clients
        on this machine reach them; None when the brokers run none."""
        return None

    # -- brokers ---------------------------------------------------------------------------

    @abc.abstractmethod
    def kill(self, broker_id: int) -> None:
        """SIGKILL: a crash. Returns once the process is gone."""

    @abc.abstractmethod
    def stop(self, broker_id: int) -> None:
        """SIGTERM: a controlled shutdown, then a clean stop. Returns once it is gone."""

    @abc.abstractmethod
    def start(self, broker_id: int) -> None:
        """Start a stopped broker again (same data) and wait until it is registered."""

    @abc.abstractmethod
    def pause(self, broker_id: int) -> None:
        """Freeze the broker (SIGSTOP): it answers nobody, ZooKeeper included."""

    @abc.abstractmethod
    def resume(self, broker_id: int) -> None: ...

    @abc.abstractmethod
    def is_running(self, broker_id: int) -> bool:
        """The broker's process exists (a paused one counts)."""

    @abc.abstractmethod
    def tear_segment(self, broker_id: int, rng: random.Random) -> str:
        """While the broker is down, cut one active segment mid-batch; says where."""

    @abc.abstractmethod
    def zookeeper_session(self, broker_id: int) -> tuple[int, bytes] | None:
        """The broker's registration session (id, password), if the broker exports it
        (``test.zookeeper.session.export.enable``); None if it does not (yet)."""

    def broker_data_dir(self, broker_id: int) -> Path:
        """The broker's data dir as this machine sees it while the broker runs (the
        ``cleaner-crash`` nemesis watches its partition directories). Raises
        BackendUnavailableError where the backend cannot show it."""
        raise BackendUnavailableError(
            f"the {self.name} backend cannot watch a broker's data dir while it runs: "
            "cleaner-crash runs on the local backend"
        )

    # -- network ---------------------------------------------------------------------------

    def isolate(self, groups: list[list[int]]) -> None:
        """Split the brokers into ``groups`` that reach only each other; ZooKeeper stays
        with the first group. Raises BackendUnavailableError where the backend cannot."""
        raise BackendUnavailableError(
            f"the {self.name} backend cannot partition the network: use --backend docker"
        )

    def heal_network(self) -> None:  # noqa: B027 - a no-op where nothing can be partitioned
        """Undo :meth:`isolate` (a no-op when nothing is partitioned)."""

    @property
    def can_partition(self) -> bool:
        return False

    # -- disks -----------------------------------------------------------------------------

    def fill_log_dir(self, broker_id: int) -> str:
        """Take every free byte of the broker's data dir's file system (its next write fails
        with ENOSPC); says how much. Raises BackendUnavailableError where the backend cannot
        fill one broker's disk alone."""
        raise BackendUnavailableError(
            f"the {self.name} backend cannot fill one broker's disk alone: disk-full runs on "
            "the local backend, whose brokers each get a tmpfs (`cluster up --log-dir-size`)"
        )

    def free_log_dir(self, broker_id: int) -> None:  # noqa: B027 - nothing filled elsewhere
        """Undo :meth:`fill_log_dir`."""

    @property
    def can_fill_log_dir(self) -> bool:
        return False

    # -- ZooKeeper -------------------------------------------------------------------------

    def zookeeper_nodes(self) -> list[int]:
        """The ZooKeeper ensemble's node ids (one node: ``[1]``)."""
        return [1]

    def kill_zookeeper(self, node: int) -> None:
        raise BackendUnavailableError(
            f"the {self.name} backend's cluster has no ZooKeeper ensemble to break: "
            "start one with 3 ZooKeeper nodes"
        )

    def start_zookeeper(self, node: int) -> None:
        raise BackendUnavailableError(f"the {self.name} backend cannot start ZooKeeper nodes")

    # -- the end of a run ------------------------------------------------------------------

    @abc.abstractmethod
    def stop_cluster(self) -> None:
        """Stop every broker cleanly, then ZooKeeper."""

    @abc.abstractmethod
    def copy_data_dirs(self, into: Path, topics: Collection[str] | None = None) -> dict[int, Path]:
        """Each broker's data dir copied under ``into``: after :meth:`stop_cluster` for a
        cluster the run started, while it runs for one the run was given (after the final
        read, when nothing of the run writes any more). ``topics``: only these topics'
        partition dirs and the internal topics' (:func:`copied_partition`), with the files
        at the top of the dir; None: everything."""

    @abc.abstractmethod
    def copy_logs(self, into: Path) -> None:
        """The brokers' (and ZooKeeper's) logs copied into ``into``."""

    def dispose(self) -> None:  # noqa: B027 - only a cluster a run started has anything to remove
        """After the copies: remove a cluster the run started itself (its containers and
        volumes); a no-op for a cluster the user gave."""
