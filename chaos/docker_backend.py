"""The docker backend: the containers of a compose project (``make up``), through the docker
SDK.

Containers are named ``<project>-broker-N`` and ``<project>-zookeeper`` (or
``<project>-zookeeper-N`` for an ensemble) on the network ``<project>_minibroker``; the
brokers reach each other and ZooKeeper by container name (deploy/docker-compose.yml), and
the host reaches them through ports published on 127.0.0.1.

Faults use the real thing: ``docker kill`` (SIGKILL), ``docker stop`` (SIGTERM, a controlled
shutdown), the cgroup freezer (``docker pause``: every process of the container stops, as
SIGSTOP would; where the engine cannot freeze, SIGSTOP to every process of the container
instead), and the network: a broker is isolated by disconnecting it from the project
network; a minority is split off by moving it to a network of its own, where its members
still reach each other by name but no longer the majority or ZooKeeper. A torn write is cut
in the stopped broker's volume by a throwaway container of the same image.
"""

from __future__ import annotations

import io
import os
import random
import re
import subprocess
import sys
import tarfile
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from broker.kafka_server import ZOOKEEPER_SESSION_FILE
from chaos.backend import BackendUnavailableError, ClusterBackend, copied_partition
from deploy.ports import free_port_block
from proto.zk import znodes
from proto.zk.sync_client import kazoo_client

__all__ = ["DockerBackend"]

_REPO = Path(__file__).resolve().parent.parent
_COMPOSE_SH = _REPO / "deploy" / "docker" / "compose.sh"
_START_TIMEOUT_S = 120.0
_UP_TIMEOUT_S = 1500.0
"""`make up` may build the image first (a cold build takes minutes)."""
_SPLIT_NETWORK = "chaos-split"
_IMAGE_PYTHON = "/opt/minibroker/bin/python3"


def _wanted(member: tarfile.TarInfo, topics: Collection[str] | None) -> bool:
    """Whether a member of the archive of ``/data/.`` is copied: every file at its top,
    and the partition dirs of ``topics`` (:func:`copied_partition`) with what they hold."""
    parts = [p for p in member.name.split("/") if p not in ("", ".")]
    if not parts or (len(parts) == 1 and not member.isdir()):
        return True
    return copied_partition(parts[0], topics)


def _client() -> Any:
    try:
        import docker
    except ImportError as e:  # pragma: no cover - a dependency
        raise BackendUnavailableError(f"the docker SDK is missing: {e}") from None
    try:
        client = docker.from_env()
        client.ping()
    except Exception as e:
        raise BackendUnavailableError(
            f"no Docker engine answers ({e}): the docker backend needs one"
        ) from None
    return client


class DockerBackend(ClusterBackend):
    """A compose project's containers."""

    name = "docker"

    def __init__(self, project: str, *, owned: bool = False) -> None:
        self.project = project
        self.owned = owned
        """Started by this run: stopped and removed (with its volumes) when it ends."""
        self._docker = _client()
        self._network_name = f"{project}_minibroker"
        brokers = {}
        zookeepers = {}
        names = re.compile(rf"{re.escape(project)}-(broker|zookeeper)(?:-(\d+))?")
        for container in self._docker.containers.list(all=True):
            match = names.fullmatch(container.name)
            if match is None:
                continue
            if match.group(1) == "broker" and match.group(2):
                brokers[int(match.group(2))] = container
            elif match.group(1) == "zookeeper":
                zookeepers[int(match.group(2) or 1)] = container
        if not brokers or not zookeepers:
            raise BackendUnavailableError(
                f"no Docker cluster of project {project!r} (no {project}-broker-N and "
                f"{project}-zookeeper containers): start one with `make up`"
            )
        self._brokers = brokers
        self._zookeepers = zookeepers
        self._isolated: list[int] = []
        self.use_freezer = True
        """Pause with the cgroup freezer; False once the engine has shown it cannot freeze
        (then SIGSTOP to every process of the container does the pausing)."""
        self._stopped_by_signal: set[int] = set()
        """Brokers paused with SIGSTOP because the engine could not freeze them."""

    @classmethod
    def attach(cls, project: str) -> DockerBackend:
        backend = cls(project)
        stopped = [b for b in backend.broker_ids() if not backend.is_running(b)]
        if stopped:
            raise BackendUnavailableError(
                f"brokers {stopped} of project {project!r} are not running: `make up` first"
            )
        return backend

    @classmethod
    def start_own(
        cls, project: str, overrides: dict[str, str], logs: Path, zookeeper_nodes: int = 1
    ) -> DockerBackend:
        """`make up` (with 3 ZooKeeper nodes, the `up-ha` variant) under a project of the
        run's own, on free ports; removed at the end."""
        _client()
        # gRPC, ZooKeeper, then the Kafka listeners': the compose file's defaults for the
        # last (19091-19093) would collide with `make up` or `cluster up` on this machine.
        base = free_port_block(3 + zookeeper_nodes + 3)
        kafka_base = base + 3 + zookeeper_nodes
        env = {
            **os.environ,
            "MINIBROKER_PROJECT": project,
            "MINIBROKER_PORT_1": str(base),
            "MINIBROKER_PORT_2": str(base + 1),
            "MINIBROKER_PORT_3": str(base + 2),
            "MINIBROKER_ZOOKEEPER_PORT": str(base + 3),
            "MINIBROKER_KAFKA_PORT_1": str(kafka_base),
            "MINIBROKER_KAFKA_PORT_2": str(kafka_base + 1),
            "MINIBROKER_KAFKA_PORT_3": str(kafka_base + 2),
            "MINIBROKER_ZOOKEEPER_NODES": str(zookeeper_nodes),
            "MINIBROKER_OVERRIDES": " ".join(f"{k}={v}" for k, v in sorted(overrides.items())),
        }
        if zookeeper_nodes == 3:
            env["MINIBROKER_ZOOKEEPER_PORT_2"] = str(base + 4)
            env["MINIBROKER_ZOOKEEPER_PORT_3"] = str(base + 5)
        logs.mkdir(parents=True, exist_ok=True)
        with (logs / "make-up.log").open("w") as log:
            done = subprocess.run(
                ["make", "--no-print-directory", "up"],
                cwd=_REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=_UP_TIMEOUT_S,
                check=False,
            )
        if done.returncode != 0:
            subprocess.run([str(_COMPOSE_SH), "down-volumes"], cwd=_REPO, env=env, check=False)
            raise BackendUnavailableError(
                f"`make up` of project {project} failed: see {logs / 'make-up.log'}"
            )
        return cls(project, owned=True)

    # -- addresses -------------------------------------------------------------------------

    def _published(self, container: Any, port: int) -> str:
        container.reload()
        bindings = container.attrs["HostConfig"]["PortBindings"] or {}
        binding = (bindings.get(f"{port}/tcp") or [{}])[0]
        return f"{binding.get('HostIp') or '127.0.0.1'}:{binding.get('HostPort') or port}"

    @staticmethod
    def _environment(container: Any) -> dict[str, str]:
        return dict(item.split("=", 1) for item in container.attrs["Config"]["Env"])

    def _broker_port(self, broker_id: int) -> int:
        return int(self._environment(self._brokers[broker_id])["MINIBROKER_PORT"])

    def broker_ids(self) -> list[int]:
        return sorted(self._brokers)

    def bootstrap_servers(self) -> str:
        return ",".join(
            self._published(self._brokers[b], self._broker_port(b)) for b in self.broker_ids()
        )

    def zookeeper_connect(self) -> str:
        return ",".join(self._published(z, 2181) for _, z in sorted(self._zookeepers.items()))

    def kafka_bootstrap_servers(self) -> str | None:
        """The published ``MINIBROKER_KAFKA_PORT`` of every broker that has one (-1 or none
        in its environment: it runs no Kafka listener, as in docker-compose.tls.yml)."""
        listeners = []
        for broker_id in self.broker_ids():
            container = self._brokers[broker_id]
            port = self._environment(container).get("MINIBROKER_KAFKA_PORT", "-1")
            if port.isdigit() and int(port) > 0:
                listeners.append(self._published(container, int(port)))
        return ",".join(listeners) or None

    # -- brokers ---------------------------------------------------------------------------

    def _status(self, container: Any) -> str:
        container.reload()
        return str(container.status)

    def kill(self, broker_id: int) -> None:
        container = self._brokers[broker_id]
        if self._status(container) == "paused":
            container.unpause()
        container.kill()
        self._stopped_by_signal.discard(broker_id)
        self._wait_status(container, {"exited"})

    def stop(self, broker_id: int) -> None:
        self.resume(broker_id)  # a stopped process would hold SIGTERM until continued
        self._brokers[broker_id].stop(timeout=60)
        self._wait_status(self._brokers[broker_id], {"exited"})

    def start(self, broker_id: int) -> None:
        container = self._brokers[broker_id]
        container.start()
        self._wait_registered(broker_id)

    def pause(self, broker_id: int) -> None:
        from docker.errors import APIError

        container = self._brokers[broker_id]
        if self.use_freezer:
            try:
                container.pause()
                return
            except APIError as exc:
                if "freeze" not in str(exc):
                    raise
                # "OCI runtime pause failed: unable to freeze": a cgroup hierarchy without
                # the freezer delegated to the engine. SIGSTOP does what the freezer does
                # here: the broker, its forwarders and its ZooKeeper heartbeats all stop.
                self.use_freezer = False
                reason = str(exc).splitlines()[0][-160:]
                print(f"chaos: docker pause unavailable ({reason}); pausing with SIGSTOP",
                      file=sys.stderr, flush=True)  # fmt: skip
        self._signal_all(container, "STOP")
        self._stopped_by_signal.add(broker_id)

    def resume(self, broker_id: int) -> None:
        container = self._brokers[broker_id]
        if self._status(container) == "paused":
            container.unpause()
        if broker_id in self._stopped_by_signal:
            self._signal_all(container, "CONT")
            self._stopped_by_signal.discard(broker_id)

    @staticmethod
    def _signal_all(container: Any, signal: str) -> None:
        """Every process of the container but its init (tini, which only reaps).

        ``kill(-1, sig)`` from a process exec'd into the container reaches every process of
        its PID namespace except init and the caller (the image's shell has no ``kill -1``).
        """
        code = f"import os, signal; os.kill(-1, signal.SIG{signal})"
        result = container.exec_run([_IMAGE_PYTHON, "-c", code])
        if result.exit_code != 0:
            output = bytes(result.output).decode("utf-8", "replace").strip()
            raise BackendUnavailableError(f"{container.name}: SIG{signal} to all: {output}")

    def is_running(self, broker_id: int) -> bool:
        return self._status(self._brokers[broker_id]) in ("running", "paused")

    def tear_segment(self, broker_id: int, rng: random.Random) -> str:
        container = self._brokers[broker_id]
        if self.is_running(broker_id):
            raise BackendUnavailableError(f"broker {broker_id} is running: tear only a stopped one")
        output = self._docker.containers.run(
            container.image.id,
            ["-m", "chaos.torn_write", "/data", "--seed", str(rng.randrange(2**31))],
            entrypoint=_IMAGE_PYTHON,
            volumes_from=[container.id],
            remove=True,
            network_mode="none",
        )
        return bytes(output).decode("utf-8", "replace").strip()

    def zookeeper_session(self, broker_id: int) -> tuple[int, bytes] | None:
        result = self._brokers[broker_id].exec_run(["cat", f"/data/{ZOOKEEPER_SESSION_FILE}"])
        if result.exit_code != 0:
            return None
        try:
            session_hex, password_hex = bytes(result.output).decode().split()
            return int(session_hex, 16), bytes.fromhex(password_hex)
        except ValueError:
            return None

    def _wait_status(self, container: Any, wanted: set[str]) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while self._status(container) not in wanted:
            if time.monotonic() > deadline:
                raise BackendUnavailableError(f"{container.name} did not become {wanted}")
            time.sleep(0.2)

    def _wait_registered(self, broker_id: int) -> None:
        """Until the broker's registration znode exists (it serves and is a member)."""
        deadline = time.monotonic() + _START_TIMEOUT_S
        with kazoo_client(self.zookeeper_connect(), connect_timeout_s=30) as zk:
            while zk.exists(znodes.broker_path(broker_id)) is None:
                if time.monotonic() > deadline:
                    raise BackendUnavailableError(f"broker {broker_id} did not register")
                if self._status(self._brokers[broker_id]) == "exited":
                    raise BackendUnavailableError(
                        f"broker {broker_id}'s container exited while starting"
                    )
                time.sleep(0.2)

    # -- network ---------------------------------------------------------------------------

    @property
    def can_partition(self) -> bool:
        return True

    def isolate(self, groups: list[list[int]]) -> None:
        """Groups after the first leave the project network: a group of one is cut off
        from everything; a larger one moves to a network of its own and keeps its links."""
        main = self._docker.networks.get(self._network_name)
        for group in groups[1:]:
            split = None
            if len(group) > 1:
                split = self._docker.networks.create(
                    f"{self.project}_{_SPLIT_NETWORK}-{min(group)}", driver="bridge"
                )
            for broker_id in group:
                container = self._brokers[broker_id]
                main.disconnect(container)
                self._isolated.append(broker_id)
                if split is not None:
                    split.connect(container)

    def heal_network(self) -> None:
        main = self._docker.networks.get(self._network_name)
        for broker_id in self._isolated:
            container = self._brokers[broker_id]
            container.reload()
            attached = container.attrs["NetworkSettings"]["Networks"] or {}
            for name in list(attached):
                if name != self._network_name:
                    self._docker.networks.get(name).disconnect(container)
            if self._network_name not in attached:
                main.connect(container, aliases=[f"broker-{broker_id}"])
        self._isolated = []
        for network in self._docker.networks.list(names=[f"{self.project}_{_SPLIT_NETWORK}"]):
            if network.name.startswith(f"{self.project}_{_SPLIT_NETWORK}"):
                network.remove()

    # -- ZooKeeper -------------------------------------------------------------------------

    def zookeeper_nodes(self) -> list[int]:
        return sorted(self._zookeepers)

    def kill_zookeeper(self, node: int) -> None:
        if len(self._zookeepers) < 3:
            super().kill_zookeeper(node)
            return
        self._zookeepers[node].kill()

    def start_zookeeper(self, node: int) -> None:
        container = self._zookeepers[node]
        if self._status(container) != "running":
            container.start()

    # -- the end of a run ------------------------------------------------------------------

    def stop_cluster(self) -> None:
        for broker_id in self.broker_ids():
            if self.is_running(broker_id):
                self.stop(broker_id)
        for container in self._zookeepers.values():
            if self._status(container) == "running":
                container.stop(timeout=30)

    def copy_data_dirs(self, into: Path, topics: Collection[str] | None = None) -> dict[int, Path]:
        copies = {}
        for broker_id, container in sorted(self._brokers.items()):
            target = into / f"broker-{broker_id}"
            target.mkdir(parents=True, exist_ok=True)
            stream, _ = container.get_archive("/data/.")
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                members = [
                    m
                    for m in tar.getmembers()
                    if ".lock" not in m.name
                    and ZOOKEEPER_SESSION_FILE not in m.name
                    and _wanted(m, topics)
                ]
                tar.extractall(target, members=members, filter="data")
            copies[broker_id] = target
        return copies

    def copy_logs(self, into: Path) -> None:
        into.mkdir(parents=True, exist_ok=True)
        for container in [*self._brokers.values(), *self._zookeepers.values()]:
            (into / f"{container.name}.log").write_bytes(bytes(container.logs()))

    def dispose(self) -> None:
        """Remove a cluster this run started (containers, network, volumes)."""
        if self.owned:
            env = {
                **os.environ,
                "MINIBROKER_PROJECT": self.project,
                "MINIBROKER_ZOOKEEPER_NODES": str(len(self._zookeepers)),
            }
            subprocess.run(
                [str(_COMPOSE_SH), "down-volumes"],
                cwd=_REPO,
                env=env,
                check=False,
                capture_output=True,
            )
