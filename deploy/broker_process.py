"""A broker as a real child process, for tests, chaos, benchmarks and ``cluster up``.

The harness runs ``python -m client.cli broker ...`` exactly as a user would, logs to a
file, and offers the faults chaos needs: SIGTERM (clean shutdown), SIGKILL, SIGSTOP and
SIGCONT. Readiness is read from ZooKeeper, not from the broker's word: a broker is up when
``/brokers/ids/<id>`` exists with a creation zxid newer than before it started, since a
killed predecessor's ephemeral registration may linger until its session times out.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from deploy import process_cgroups
from deploy.ports import free_port_block
from proto.errors import MinibrokerError

log = logging.getLogger(__name__)

_POLL_S = 0.05


class BrokerProcessError(MinibrokerError, RuntimeError):
    """The broker process exited or did not come up in time (the message has its log tail)."""


@dataclass
class BrokerSpec:
    """How to run one broker."""

    broker_id: int
    data_dir: Path
    zookeeper_connect: str
    port: int = 0
    """0: let the broker pick a free port (learnt from its registration, then kept)."""
    host: str = "127.0.0.1"
    kafka_port: int | None = None
    """The port of its Kafka protocol listener (``kafka.port``): None runs none, 0 a free
    one chosen at the first start (then kept, as ``port``)."""
    overrides: dict[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    """Default: ``<data_dir>/../broker-<id>.log``."""
    loop: str = "uvloop"
    nofile_limit: int | None = None
    """A soft ``RLIMIT_NOFILE`` for the process (tests run out of descriptors in seconds
    with a low one); None keeps the harness's."""
    cgroup: Path | None = None
    """An existing cgroup v2 directory the process joins before Python starts (a local
    cluster's, by which its partitions tell the brokers' packets apart:
    :mod:`deploy.process_cgroups`); None: it stays in the harness's."""


class BrokerProcess:
    """One broker child process. Not thread-safe."""

    def __init__(self, spec: BrokerSpec) -> None:
        self.spec = spec
        self.log_path = spec.log_path or spec.data_dir.parent / f"broker-{spec.broker_id}.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self.port = spec.port
        self.kafka_port = spec.kafka_port
        self.paused = False
        """SIGSTOPped by :meth:`pause` and not resumed since."""

    def __repr__(self) -> str:
        return f"BrokerProcess(id={self.spec.broker_id}, port={self.port}, pid={self.pid})"

    @property
    def broker_id(self) -> int:
        return self.spec.broker_id

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def is_running(self) -> bool:
        return self.pid is not None

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    @property
    def address(self) -> str:
        return f"{self.spec.host}:{self.port}"

    @property
    def kafka_address(self) -> str | None:
        """``host:port`` of its Kafka protocol listener, None if it runs none."""
        return None if self.kafka_port is None else f"{self.spec.host}:{self.kafka_port}"

    def command(self) -> list[str]:
        spec = self.spec
        cmd = [
            sys.executable, "-m", "client.cli", "broker",
            "--id", str(spec.broker_id),
            "--port", str(self.port),
            "--host", spec.host,
            "--zookeeper", spec.zookeeper_connect,
            "--data-dir", str(spec.data_dir),
            "--log-file", str(self.log_path),
            "--loop", spec.loop,
        ]  # fmt: skip
        for key, value in sorted(spec.overrides.items()):
            cmd += ["--override", f"{key}={value}"]
        if self.kafka_port is not None:
            # Last, so it wins (as --port does): the harness owns the ports it chose.
            cmd += ["--override", f"kafka.port={self.kafka_port}"]
        return cmd

    def start(self, zk: KazooClient | None = None, timeout: float = 30.0) -> None:
        """Start the process; with ``zk``, wait until it has registered."""
        if self.is_running:
            raise BrokerProcessError(f"broker {self.broker_id} is already running")
        self.spec.data_dir.parent.mkdir(parents=True, exist_ok=True)
        if self.port == 0 or self.kafka_port == 0:
            self._choose_free_ports()
        before = _registration_czxid(zk, self.broker_id) if zk is not None else None
        command = self.command()
        if self.spec.cgroup is not None:
            command = process_cgroups.command_in(self.spec.cgroup, command)
        with open(os.devnull, "rb") as stdin, self.log_path.open("ab") as out:
            self._proc = subprocess.Popen(
                command,
                stdin=stdin,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a terminal's Ctrl-C is for the harness, not brokers
                cwd=Path(__file__).resolve().parent.parent,
                preexec_fn=_nofile_limiter(self.spec.nofile_limit),
            )
        log.info("started broker %d pid=%d", self.broker_id, self._proc.pid)
        if zk is not None:
            self.wait_until_registered(zk, before, timeout)

    def _choose_free_ports(self) -> None:
        """The ports left 0, chosen here rather than by the broker binding port 0: a port
        from the ephemeral range may be some connection's local port when the broker
        restarts on it. Two from one free block, so that they differ from each other and
        from a port given."""
        block = free_port_block(2, self.spec.host)
        spare = iter(p for p in (block, block + 1) if p not in (self.port, self.kafka_port))
        if self.port == 0:
            self.port = next(spare)
        if self.kafka_port == 0:
            self.kafka_port = next(spare)

    def wait_until_registered(
        self, zk: KazooClient, previous_czxid: int | None, timeout: float = 30.0
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                self._fail(f"exited with status {self._proc.returncode} while starting")
            try:
                data, stat = zk.get(f"/brokers/ids/{self.broker_id}")
            except NoNodeError:
                pass
            else:
                if previous_czxid is None or stat.czxid != previous_czxid:
                    self.port = int(json.loads(data)["port"])
                    return
            time.sleep(_POLL_S)
        self._fail(f"did not register in ZooKeeper within {timeout:.0f}s")

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM: a clean shutdown (checkpoints, deregistration). SIGKILL after timeout."""
        return self._terminate(signal.SIGTERM, timeout)

    def kill(self) -> int | None:
        """SIGKILL: a crash. Nothing but fsynced or replicated data survives."""
        return self._terminate(signal.SIGKILL, 10.0)

    def pause(self) -> None:
        """SIGSTOP: the process freezes; its ZooKeeper session expires after the timeout."""
        self._signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self._signal(signal.SIGCONT)
        self.paused = False

    def _signal(self, signum: signal.Signals) -> None:
        if self._proc is None or self._proc.poll() is not None:
            raise BrokerProcessError(f"broker {self.broker_id} is not running")
        os.kill(self._proc.pid, signum)

    def _terminate(self, signum: signal.Signals, timeout: float) -> int | None:
        proc = self._proc
        self.paused = False
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signum)
            os.kill(proc.pid, signal.SIGCONT)  # a paused broker must be able to exit
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("broker %d ignored %s; killing it", self.broker_id, signum.name)
            proc.kill()
            return proc.wait(10)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _fail(self, reason: str) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self.kill()
        raise BrokerProcessError(
            f"broker {self.broker_id} {reason}; last lines of {self.log_path}:\n{self.log_tail()}"
        )


def _nofile_limiter(limit: int | None) -> Callable[[], None] | None:
    """What the child runs before exec to lower its soft ``RLIMIT_NOFILE`` to ``limit``."""
    if limit is None:
        return None

    def lower() -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))

    return lower


def start_brokers(brokers: Iterable[BrokerProcess], zk: KazooClient, timeout: float = 30.0) -> None:
    """Start every broker at once (each takes a second or two to import), then wait until
    each one has registered; on failure the ones started are killed and the error raised."""
    brokers = list(brokers)
    try:
        for broker in brokers:
            broker.start()
        for broker in brokers:
            broker.wait_until_registered(zk, None, timeout)
    except BaseException:
        for broker in brokers:
            broker.kill()
        raise


def stop_brokers(brokers: Iterable[BrokerProcess]) -> dict[int, int | None]:
    """SIGTERM every broker at once and wait for each: their controlled shutdowns overlap
    rather than queue one behind the other. Returns each broker's exit status."""
    brokers = list(brokers)
    if not brokers:
        return {}
    with ThreadPoolExecutor(max_workers=len(brokers)) as pool:
        statuses = list(pool.map(lambda broker: broker.stop(), brokers))
    return {broker.broker_id: status for broker, status in zip(brokers, statuses, strict=True)}


def _registration_czxid(zk: KazooClient, broker_id: int) -> int | None:
    stat = zk.exists(f"/brokers/ids/{broker_id}")
    return None if stat is None else int(stat.czxid)
