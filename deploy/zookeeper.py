"""A real ZooKeeper, standalone or an ensemble, for tests, ``minibroker cluster up``, chaos
and benchmarks.

This is the project's one ZooKeeper harness (docs/design.md): it runs Debian's
``zookeeper`` package (ZooKeeper 3.8 on Java 17) as a child process, never an imitation,
so session expiry, ephemeral znodes and watches behave exactly as the brokers will see
them in production. Chaos needs that: pausing the server (SIGSTOP) past the session
timeout expires sessions for real, whereas ``kazoo.testing``'s ``expire_session()`` only
fakes the event on the client side and leaves the ephemerals on the server.

Example usage::

    with ZooKeeperServer(ZooKeeperConfig(tick_time_ms=200)) as zk:
        client = KazooClient(hosts=zk.connect_string, timeout=2.0)
        ...

    with ZooKeeperEnsemble(3) as ensemble:      # three QuorumPeerMain JVMs on 127.0.0.1
        client = KazooClient(hosts=ensemble.connect_string)   # "127.0.0.1:p1,...:p3"
        ensemble.kill(ensemble.leader())        # the other two elect a new leader
        ...

Errors::

    ZooKeeperError (RuntimeError)
     ├── ZooKeeperNotInstalledError   java or the ZooKeeper jars are missing: run `make setup`
     ├── ZooKeeperPortInUseError      a fixed port was requested and something listens on it
     └── ZooKeeperStartError          the server exited early or did not serve in time
                                      (the message carries the tail of its log)

Lifecycle: ``start()`` -> [``pause()``/``resume()``, ``kill()`` then ``start()`` again for
a crash-restart on the same port and data] -> ``stop()``. ``stop()`` is idempotent and
removes the data directory only when the harness created it (a temp dir) and
``keep_data`` is false. The harness is not thread-safe: drive one server from one thread.

An ensemble member is a :class:`ZooKeeperServer` whose config names its ``server_id`` and
every member (:class:`QuorumPeer`: client, quorum and election port); it serves only while
a majority of the members runs, so :class:`ZooKeeperEnsemble` spawns them all before it
waits for any.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import NoReturn, Self

from kazoo.client import KazooClient

from proto.errors import MinibrokerError

log = logging.getLogger(__name__)

DEBIAN_ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
"""Debian's server jar (libzookeeper-java). Its manifest Class-Path names the other jars it
needs (slf4j-api, netty, jetty, jackson, zookeeper-jute, ...) by absolute path, so it is
the only jar we must put on the classpath ourselves."""

SLF4J_BINDINGS = (Path("/usr/share/java/slf4j-simple.jar"), Path("/usr/share/java/slf4j-nop.jar"))
"""SLF4J bindings, in order of preference. The manifest names only slf4j-api; without a
binding ZooKeeper logs nothing at all, which makes a failed start impossible to diagnose.
slf4j-simple writes to stderr, which the harness sends to the log file."""

CLASSPATH_ENV = "MINIBROKER_ZOOKEEPER_CLASSPATH"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
QUORUM_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
SETUP_HINT = "run `make setup` (it installs Debian's zookeeper and openjdk-17-jre-headless)"

_LOG_TAIL_LINES = 40
_POLL_INTERVAL_S = 0.05


class ZooKeeperError(MinibrokerError, RuntimeError):
    """Root of the harness's errors."""


class ZooKeeperNotInstalledError(ZooKeeperError):
    """Java or the ZooKeeper jars cannot be found."""


class ZooKeeperPortInUseError(ZooKeeperError):
    """A fixed port (client, or an ensemble member's quorum or election port) was requested
    and another socket already holds it."""


class ZooKeeperStartError(ZooKeeperError):
    """The server exited during start-up or did not serve before the deadline."""


@dataclass(frozen=True)
class ZooKeeperInstallation:
    """Where Java and the ZooKeeper classes are."""

    java: Path
    classpath: tuple[str, ...]
    version: str | None
    """ZooKeeper's version from the server jar's Maven metadata, when present."""

    @property
    def classpath_arg(self) -> str:
        return os.pathsep.join(self.classpath)


def _find_java(env: Mapping[str, str]) -> Path:
    """``$JAVA``, else ``$JAVA_HOME/bin/java``, else ``java`` on ``PATH``."""
    candidates: list[tuple[str, Path]] = []
    if env.get("JAVA"):
        candidates.append(("$JAVA", Path(env["JAVA"])))
    elif env.get("JAVA_HOME"):
        candidates.append(("$JAVA_HOME", Path(env["JAVA_HOME"]) / "bin" / "java"))
    else:
        found = shutil.which("java", path=env.get("PATH", os.defpath))
        if found:
            candidates.append(("PATH", Path(found)))
    for source, path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise ZooKeeperNotInstalledError(
            f"java from {source} ({path}) is not an executable file; fix it or {SETUP_HINT}"
        )
    raise ZooKeeperNotInstalledError(f"no java found (set JAVA or JAVA_HOME, or {SETUP_HINT})")


def _version_from_jar(jar: Path) -> str | None:
    """The ``version=`` line of the jar's Maven pom.properties, if it has one.

    Debian ships zookeeper.jar as the real file and zookeeper-3.8.0.jar as the symlink,
    so the file name alone does not tell the version.
    """
    try:
        with zipfile.ZipFile(jar) as archive:
            for name in archive.namelist():
                if name.endswith("/zookeeper/pom.properties"):
                    text = archive.read(name).decode("utf-8", errors="replace")
                    match = re.search(r"^version=(\S+)$", text, re.MULTILINE)
                    return match.group(1) if match else None
    except (OSError, zipfile.BadZipFile):
        return None
    return None


def zookeeper_installation(env: Mapping[str, str] | None = None) -> ZooKeeperInstallation:
    """Find Java and the ZooKeeper classpath, or raise ZooKeeperNotInstalledError.

    The classpath is ``$MINIBROKER_ZOOKEEPER_CLASSPATH`` (``os.pathsep``-separated, every
    entry must exist) when set; else Debian's ``/usr/share/java/zookeeper.jar`` plus the
    first SLF4J binding present. We deliberately do not glob ``/usr/share/java``: it holds
    several SLF4J bindings and unrelated versions of half the Java ecosystem.
    """
    env = os.environ if env is None else env
    java = _find_java(env)
    override = env.get(CLASSPATH_ENV, "").strip()
    if override:
        entries = tuple(entry for entry in override.split(os.pathsep) if entry)
        missing = [entry for entry in entries if not Path(entry).exists()]
        if missing:
            raise ZooKeeperNotInstalledError(
                f"${CLASSPATH_ENV} names missing entries {missing}; fix it or {SETUP_HINT}"
            )
        jars = [Path(entry) for entry in entries if Path(entry).name.startswith("zookeeper")]
        version = _version_from_jar(jars[0]) if jars else None
        return ZooKeeperInstallation(java=java, classpath=entries, version=version)
    if not DEBIAN_ZOOKEEPER_JAR.is_file():
        raise ZooKeeperNotInstalledError(
            f"ZooKeeper is not installed ({DEBIAN_ZOOKEEPER_JAR} is missing): {SETUP_HINT}, "
            f"or point ${CLASSPATH_ENV} at a ZooKeeper classpath"
        )
    classpath = [str(DEBIAN_ZOOKEEPER_JAR)]
    binding = next((jar for jar in SLF4J_BINDINGS if jar.is_file()), None)
    if binding is not None:
        classpath.append(str(binding))
    else:
        log.warning("zookeeper no_slf4j_binding searched=%s", [str(j) for j in SLF4J_BINDINGS])
    return ZooKeeperInstallation(
        java=java, classpath=tuple(classpath), version=_version_from_jar(DEBIAN_ZOOKEEPER_JAR)
    )


@dataclass(frozen=True)
class QuorumPeer:
    """One member of an ensemble, as every member's zoo.cfg names it.

    The quorum port is where the leader listens for its followers (only the leader binds
    it), the election port where every member listens for leader election votes.
    """

    server_id: int
    """Its ``myid``, 1-255 (ZooKeeper allows more; nobody needs them here)."""
    client_port: int
    quorum_port: int
    election_port: int
    host: str = "127.0.0.1"

    @property
    def server_line(self) -> tuple[str, str]:
        """The ``server.<id>=host:quorum_port:election_port`` entry of zoo.cfg."""
        return f"server.{self.server_id}", f"{self.host}:{self.quorum_port}:{self.election_port}"

    @property
    def client_address(self) -> str:
        return f"{self.host}:{self.client_port}"

    @property
    def ports(self) -> dict[str, int]:
        return {
            "client": self.client_port,
            "quorum": self.quorum_port,
            "election": self.election_port,
        }


def ensemble_connect_string(peers: Iterable[QuorumPeer]) -> str:
    """``host:port,host:port,...`` of every member's client port, in server id order: what
    brokers and clients put in ``zookeeper.connect`` (kazoo picks a member at random and
    moves to another when it loses its connection)."""
    return ",".join(p.client_address for p in sorted(peers, key=lambda p: p.server_id))


def quorum_size(members: int) -> int:
    """How many members must run for an ensemble of ``members`` to serve: a majority."""
    return members // 2 + 1


def quorum_zoo_cfg(
    peers: Sequence[QuorumPeer], init_limit_ticks: int, sync_limit_ticks: int
) -> dict[str, str]:
    """The zoo.cfg lines every member of ``peers`` shares (each adds its own clientPort).

    No dynamic reconfiguration (``reconfigEnabled`` stays false, ZooKeeper's default), so
    the server lines stay in zoo.cfg, which the harness rewrites at every start.
    """
    ids = [p.server_id for p in peers]
    if len(set(ids)) != len(ids) or not all(1 <= i <= 255 for i in ids):
        raise ValueError(f"ensemble server ids must be distinct and in 1..255, got {ids}")
    cfg = {"initLimit": str(init_limit_ticks), "syncLimit": str(sync_limit_ticks)}
    cfg.update(p.server_line for p in sorted(peers, key=lambda p: p.server_id))
    return cfg


@dataclass(frozen=True)
class ZooKeeperConfig:
    """How to run one ZooKeeper: standalone, or one member of an ensemble.

    ``tick_time_ms`` defaults to 200 ms (ZooKeeper's own default is 2000). Two reasons:
    sessions are clamped to [2, 20] x tickTime unless min/max are given, and the server
    checks session expiry once per tick, so a session expires between ``timeout`` and
    ``timeout + tickTime`` after the client goes quiet. With 200 ms, tests can ask for
    1 s sessions (the pause/expiry tests) and the broker's 2-6 s sessions expire within
    a tenth of their timeout, which keeps chaos timings tight. Standalone ZooKeeper uses
    the tick for nothing else that costs anything; an ensemble counts its initLimit and
    syncLimit in ticks (``init_limit_ticks``, ``sync_limit_ticks``, sized for 200 ms).
    """

    data_dir: Path | None = None
    """ZooKeeper's dataDir; also holds zoo.cfg and, by default, the log. None = a temp
    dir that the harness creates on start() and removes on stop()."""
    host: str = "127.0.0.1"
    port: int = 0
    """0 = pick a free port when starting (kept across kill()/start() restarts)."""
    tick_time_ms: int = 200
    min_session_timeout_ms: int | None = None
    """None = ZooKeeper's default, 2 x tickTime."""
    max_session_timeout_ms: int = 60_000
    """Far above the 20 x tickTime default (4 s at 200 ms), so a client asking for a
    Kafka-like 6-18 s session gets what it asked for instead of being silently clamped."""
    heap_mb: int = 256
    log_path: Path | None = None
    """Where the server's stdout/stderr go (appended). None = ``<data_dir>/zookeeper.log``.
    ``cluster up --data-dir D`` points this at ``D/logs/zookeeper.log``."""
    keep_data: bool = False
    """Keep a harness-created temp data dir on stop() (e.g. to inspect it after a failure)."""
    stop_at_exit: bool = True
    """Kill the server when this Python process exits, so a crashed test run leaves no
    orphan JVM. ``cluster up`` sets False: there the server must outlive the CLI."""
    port_attempts: int = 3
    """With port 0, how many free ports to try when another process wins the race between
    our probe and ZooKeeper's bind."""
    extra_config: Mapping[str, str] = field(default_factory=dict)
    """More zoo.cfg lines; they override the harness's own keys."""
    jvm_options: tuple[str, ...] = ()
    """Extra JVM flags, appended after the harness's."""
    server_id: int | None = None
    """This member's id in ``quorum_peers`` (written to ``<data_dir>/myid``); None with no
    peers: a standalone server."""
    quorum_peers: tuple[QuorumPeer, ...] = ()
    """Every member of the ensemble, this one included; empty for a standalone server. The
    client port is then this member's ``client_port`` (``port`` must be 0 or equal)."""
    init_limit_ticks: int = 50
    """Ensembles only: ticks a follower has to connect to and sync with a new leader. 10 s
    at 200 ms: Java 17 starting on a loaded 2-core machine is slow, the data is tiny."""
    sync_limit_ticks: int = 25
    """Ensembles only: ticks a follower may go unheard before the leader drops it (and a
    leader that hears from no quorum for that long steps down). 5 s at 200 ms: a killed
    member is noticed at once anyway (its sockets close); shorter would make a loaded
    machine's scheduling hiccups look like lost followers and cost the whole ensemble an
    election, during which no client is served."""

    def __post_init__(self) -> None:
        if not self.quorum_peers:
            if self.server_id is not None:
                raise ValueError("server_id without quorum_peers: a standalone server has no id")
            return
        me = [p for p in self.quorum_peers if p.server_id == self.server_id]
        if len(me) != 1:
            ids = sorted(p.server_id for p in self.quorum_peers)
            raise ValueError(f"server_id {self.server_id} is not one of the peers' ids {ids}")
        if self.port not in (0, me[0].client_port):
            raise ValueError(
                f"port {self.port} is not member {self.server_id}'s client port {me[0].client_port}"
            )

    @property
    def peer(self) -> QuorumPeer | None:
        """This member of the ensemble, or None for a standalone server."""
        return next((p for p in self.quorum_peers if p.server_id == self.server_id), None)


# Every started server (strong references: a harness dropped without stop() must still be
# found), so that an interpreter exit, e.g. a test run that crashed past its fixtures'
# teardown, does not leave JVMs behind holding ports and temp dirs.
_live_servers: set[ZooKeeperServer] = set()
_live_ensembles: set[ZooKeeperEnsemble] = set()


@atexit.register
def _kill_live_servers() -> None:
    for ensemble in list(_live_ensembles):
        if ensemble.config.stop_at_exit:
            ensemble.stop(timeout=2.0)
    for server in list(_live_servers):
        if server.config.stop_at_exit:
            server.stop(timeout=2.0)


def _read_tail(path: Path, start: int, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as f:
            f.seek(start)
            data = f.read()
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:]) or "<empty log>"


def _pick_free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_is_free(host: str, port: int) -> bool:
    # SO_REUSEADDR as ZooKeeper's NIO factory sets it: TIME_WAIT leftovers of a previous
    # run on this port do not count as taken, a listening socket does.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
        return True


def _taken_ports(host: str, ports: Mapping[str, int]) -> list[str]:
    return [f"{what} port {port}" for what, port in ports.items() if not _port_is_free(host, port)]


def _pick_free_ports(host: str, count: int) -> list[int]:
    """``count`` distinct ports free on ``host`` now (all held open while choosing)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def four_letter_word(host: str, port: int, command: str, timeout: float = 2.0) -> str:
    """Send a 4lw command (``ruok``, ``srvr``, ``mntr``, ``stat``) and return the reply.

    Only the commands in zoo.cfg's ``4lw.commands.whitelist`` are answered; ZooKeeper
    3.5+ refuses the rest. (kazoo's server_version() asks ``envi``, which is not
    whitelisted; nothing in kazoo itself calls it.)
    """
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(command.encode("ascii"))
        chunks: list[bytes] = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


NOT_SERVING = "not serving"


def parse_mode(srvr: str) -> str:
    """The ``Mode:`` of a ``srvr`` answer (``leader``, ``follower``, ``standalone``), or
    :data:`NOT_SERVING`: an ensemble member without a quorum (or any server still starting)
    answers "This ZooKeeper instance is not currently serving requests"."""
    for line in srvr.splitlines():
        if line.startswith("Mode:"):
            return line.removeprefix("Mode:").strip() or NOT_SERVING
    return NOT_SERVING


def server_mode(host: str, port: int, timeout: float = 1.0) -> str | None:
    """What the server at ``host:port`` says it is (see :func:`parse_mode`); None if it does
    not answer at all (down, paused, or not ours to ask)."""
    try:
        return parse_mode(four_letter_word(host, port, "srvr", timeout=timeout))
    except (OSError, UnicodeError):
        return None


def is_serving_mode(mode: str | None) -> bool:
    return mode in ("leader", "follower", "standalone")


class ZooKeeperServer:
    """One ZooKeeper process and its files: standalone (``ZooKeeperServerMain``), or a member
    of an ensemble (``QuorumPeerMain``) when its config names its ``quorum_peers``.

    Example usage::

        server = ZooKeeperServer()
        server.start()            # returns once ruok/srvr answer and kazoo connects
        ...                       # server.connect_string == "127.0.0.1:<port>"
        server.pause()            # SIGSTOP: clients' sessions expire past their timeout
        server.resume()
        server.kill()             # SIGKILL, data kept
        server.start()            # same port, same data: a crash-restart
        server.stop()             # SIGTERM; removes the temp data dir
    """

    def __init__(
        self,
        config: ZooKeeperConfig | None = None,
        installation: ZooKeeperInstallation | None = None,
    ) -> None:
        self.config = config or ZooKeeperConfig()
        self._installation = installation
        self._data_dir: Path | None = self.config.data_dir
        self._owns_data_dir = False
        peer = self.config.peer
        self._port: int | None = peer.client_port if peer else (self.config.port or None)
        self._process: subprocess.Popen[bytes] | None = None
        self._paused = False
        self._log_offset = 0
        self.startup_seconds: float | None = None
        """Wall time of the last successful start(): spawn until wait_until_serving()."""

    # --- properties -----------------------------------------------------------------

    @property
    def installation(self) -> ZooKeeperInstallation:
        if self._installation is None:
            self._installation = zookeeper_installation()
        return self._installation

    @property
    def port(self) -> int:
        """The client port. Raises ZooKeeperError before a port-0 server first started."""
        if self._port is None:
            raise ZooKeeperError("the ZooKeeper port is not chosen until start()")
        return self._port

    @property
    def connect_string(self) -> str:
        """``host:port`` for KazooClient(hosts=...); append ``/chroot`` as needed."""
        return f"{self.config.host}:{self.port}"

    @property
    def data_dir(self) -> Path:
        if self._data_dir is None:
            raise ZooKeeperError("the temporary ZooKeeper data dir is not created until start()")
        return self._data_dir

    @property
    def config_path(self) -> Path:
        return self.data_dir / "zoo.cfg"

    @property
    def log_path(self) -> Path:
        return self.config.log_path or self.data_dir / "zookeeper.log"

    @property
    def pid(self) -> int | None:
        """The JVM's pid while the process runs (paused counts as running), else None."""
        if self._process is None or self._process.poll() is not None:
            return None
        return self._process.pid

    @property
    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # --- lifecycle ------------------------------------------------------------------

    def start(self, timeout: float = 30.0, *, wait: bool = True) -> None:
        """Start the server and return once it serves; raise ZooKeeperError otherwise.

        Fails at once (ZooKeeperPortInUseError) when a fixed port is already taken, rather
        than waiting for the JVM to find out. With port 0, a free port is picked and, if
        another process grabs it before ZooKeeper binds, another is tried.

        An ensemble member serves only once a majority of the ensemble runs: ``wait=False``
        returns as soon as the JVM is spawned (then :meth:`wait_until_serving`), which is
        how :class:`ZooKeeperEnsemble` starts its members together.
        """
        if self.is_running:
            raise ZooKeeperError(f"ZooKeeper is already running (pid {self.pid})")
        installation = self.installation
        deadline = time.monotonic() + timeout
        self._prepare_data_dir()
        _live_servers.add(self)  # from here on there is a temp dir (and soon a JVM) to clean
        # A port chosen by an earlier start() is reused so connect strings stay valid
        # across a kill()/start() restart; only a port we picked ourselves may be re-picked.
        fixed = self._port is not None
        if fixed:
            self._check_ports_free()
        if not wait:
            if not fixed:
                self._port = _pick_free_port(self.config.host)
            self._spawn(installation)
            return
        attempts = 1 if fixed else max(1, self.config.port_attempts)
        for attempt in range(1, attempts + 1):
            if not fixed:
                self._port = _pick_free_port(self.config.host)
            started = time.monotonic()
            self._spawn(installation)
            try:
                self.wait_until_serving(timeout=max(0.0, deadline - time.monotonic()))
            except ZooKeeperStartError:
                exited = not self.is_running
                self._terminate(signal.SIGKILL, timeout=5.0)
                tail = _read_tail(self.log_path, self._log_offset)
                if exited and "Address already in use" in tail and attempt < attempts:
                    log.warning("zookeeper port_race port=%d attempt=%d", self.port, attempt)
                    continue
                if not fixed:
                    self._port = None  # a later start() may pick again
                raise
            self.startup_seconds = time.monotonic() - started
            log.info(
                "zookeeper started pid=%s port=%d startup_s=%.3f data_dir=%s log=%s",
                self.pid,
                self.port,
                self.startup_seconds,
                self.data_dir,
                self.log_path,
            )
            return

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; remove an owned temp data dir. Idempotent."""
        if self.is_running:
            self._terminate(signal.SIGTERM, timeout=timeout)
        _live_servers.discard(self)
        if self._owns_data_dir and self._data_dir is not None and not self.config.keep_data:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            log.info("zookeeper removed_data_dir path=%s", self._data_dir)
            self._data_dir = None
            self._owns_data_dir = False

    def kill(self) -> None:
        """SIGKILL, as a crash: data and port are kept, so start() restarts the same server."""
        if self.is_running:
            self._terminate(signal.SIGKILL, timeout=10.0)

    def pause(self) -> None:
        """SIGSTOP the server: it stops answering and clients go SUSPENDED.

        Once resumed, its session tracker expires every session whose timeout passed
        meanwhile: a real expiry, ephemerals deleted. Caveat: a client that kept trying to
        reconnect during the pause has a connect request queued in the kernel, and if the
        server reads it before its expiry sweep runs, the session is revived
        (reopenSession -> touchSession). To expire one client's session for certain, pause
        the client process instead (the zombie-leader nemesis does), or stop the client.
        """
        self._signal(signal.SIGSTOP)
        self._paused = True
        log.info("zookeeper paused pid=%s", self.pid)

    def resume(self) -> None:
        """SIGCONT a paused server."""
        self._signal(signal.SIGCONT)
        self._paused = False
        log.info("zookeeper resumed pid=%s", self.pid)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- health ---------------------------------------------------------------------

    def four_letter_word(self, command: str, timeout: float = 2.0) -> str:
        """Send a 4lw command to this server (see :func:`four_letter_word`)."""
        return four_letter_word(self.config.host, self.port, command, timeout)

    def mode(self, timeout: float = 1.0) -> str | None:
        """``leader``, ``follower``, ``standalone``, :data:`NOT_SERVING` (running, but not in
        a quorum or not started yet), or None when it does not run or does not answer."""
        answer = self._ask("srvr", timeout)
        return None if answer is None else parse_mode(answer)

    def is_ok(self, timeout: float = 1.0) -> bool:
        """True if the server answers ``ruok`` with ``imok``.

        ``imok`` means the process is up and its client port open, not that it serves:
        ZooKeeper answers ``ruok`` before its request pipeline runs, and drops sessions
        opened in that window (see is_serving()).
        """
        return self._ask("ruok", timeout) == "imok"

    def is_serving(self, timeout: float = 1.0) -> bool:
        """True if ``srvr`` reports the server's state (``Mode: standalone``, or ``leader`` /
        ``follower`` for an ensemble member in a quorum).

        Until the request pipeline runs, ZooKeeper 3.5+ answers every 4lw command but
        ``ruok`` with "This ZooKeeper instance is not currently serving requests"; so does
        an ensemble member while it has no quorum.
        """
        return "Mode: " in (self._ask("srvr", timeout) or "")

    def wait_until_serving(self, timeout: float = 30.0) -> None:
        """Poll until ``ruok`` says ``imok``, ``srvr`` says it serves, and kazoo connects.

        The kazoo session proves the client port works end to end, as brokers will use it
        (session creation is a logged, fsynced transaction). Raises ZooKeeperStartError
        with the log's tail if the process exits or time runs out.
        """
        deadline = time.monotonic() + timeout

        def probe_timeout() -> float:
            return min(1.0, max(0.05, deadline - time.monotonic()))

        while not (self.is_ok(probe_timeout()) and self.is_serving(probe_timeout())):
            if not self.is_running:
                self._fail("exited during start-up")
            if time.monotonic() >= deadline:
                self._fail(f"did not serve (ruok/srvr) within {timeout:.1f}s")
            time.sleep(_POLL_INTERVAL_S)
        remaining = max(0.5, deadline - time.monotonic())
        client = KazooClient(hosts=self.connect_string, timeout=remaining)
        try:
            client.start(timeout=remaining)
        except Exception as exc:  # kazoo raises its handler's timeout type, not a stdlib one
            self._fail(f"answered srvr but no kazoo session within {timeout:.1f}s ({exc!r})")
        finally:
            client.stop()
            client.close()

    def _ask(self, command: str, timeout: float) -> str | None:
        if self._port is None or not self.is_running or self._paused:
            return None
        try:
            return self.four_letter_word(command, timeout=timeout)
        except OSError:
            return None

    # --- internals ------------------------------------------------------------------

    def _check_ports_free(self) -> None:
        peer = self.config.peer
        if peer is None:
            if not _port_is_free(self.config.host, self.port):
                raise ZooKeeperPortInUseError(
                    f"cannot start ZooKeeper: {self.config.host}:{self.port} is already in use "
                    "(another ZooKeeper or test may hold it; use port 0 to pick a free one)"
                )
            return
        taken = _taken_ports(self.config.host, peer.ports)
        if taken:
            raise ZooKeeperPortInUseError(
                f"cannot start {self._name}: {', '.join(taken)} on {self.config.host} "
                "already in use (another ZooKeeper or test may hold it)"
            )

    def log_since_start(self) -> str:
        """Everything the server logged since its last spawn ("" before the first)."""
        if self._process is None:
            return ""
        return _read_tail(self.log_path, self._log_offset, lines=100_000)

    @property
    def _name(self) -> str:
        server_id = self.config.server_id
        return "ZooKeeper" if server_id is None else f"ZooKeeper server {server_id}"

    def _prepare_data_dir(self) -> None:
        if self._data_dir is None:
            self._data_dir = Path(tempfile.mkdtemp(prefix="minibroker-zk-"))
            self._owns_data_dir = True
        self._data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)

    def _zoo_cfg(self) -> dict[str, str]:
        cfg = {
            "tickTime": str(self.config.tick_time_ms),
            "dataDir": str(self.data_dir.resolve()),
            "clientPort": str(self.port),
            # Loopback only: a test cluster must not be reachable from the network.
            "clientPortAddress": self.config.host,
            "maxSessionTimeout": str(self.config.max_session_timeout_ms),
            # The admin server (Jetty) would take port 8080, which other ZooKeepers or
            # services on the machine may hold; we never use it.
            "admin.enableServer": "false",
            # 3.5+ refuses all 4lw commands unless whitelisted. ruok and srvr are our health
            # checks; mntr/stat serve `cluster status` and benchmarks. Read-only ones only.
            "4lw.commands.whitelist": "ruok,srvr,mntr,stat",
            # The default 60 connections per client IP is too few when every broker, test
            # client and chaos worker of a local cluster comes from 127.0.0.1.
            "maxClientCnxns": "0",
        }
        if self.config.min_session_timeout_ms is not None:
            cfg["minSessionTimeout"] = str(self.config.min_session_timeout_ms)
        if self.config.quorum_peers:
            cfg.update(
                quorum_zoo_cfg(
                    self.config.quorum_peers,
                    self.config.init_limit_ticks,
                    self.config.sync_limit_ticks,
                )
            )
        cfg.update(self.config.extra_config)
        return cfg

    def _command(self, installation: ZooKeeperInstallation) -> list[str]:
        return [
            str(installation.java),
            f"-Xmx{self.config.heap_mb}m",
            # One small heap on a 2-core machine: the serial collector avoids parallel GC
            # threads competing with brokers for the cores.
            "-XX:+UseSerialGC",
            "-Djava.awt.headless=true",
            # No com.sun.management.jmxremote flags: unlike zkServer.sh we open no JMX port.
            "-Dzookeeper.jmx.log4j.disable=true",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSZ",
            *self._quorum_jvm_options(),
            *self.config.jvm_options,
            "-cp",
            installation.classpath_arg,
            QUORUM_MAIN_CLASS if self.config.quorum_peers else MAIN_CLASS,
            str(self.config_path.resolve()),
        ]

    def _quorum_jvm_options(self) -> list[str]:
        if not self.config.quorum_peers:
            return []
        # Leader election backs off between rounds of votes, doubling from 200 ms up to a
        # minute, while a peer it waits for does not answer. A member restarted after a
        # quorum loss would then wait up to a minute for the others to notice it; capped
        # at a second, the ensemble serves again within about a second of a majority.
        return ["-Dzookeeper.fastleader.maxNotificationInterval=1000"]

    def _spawn(self, installation: ZooKeeperInstallation) -> None:
        cfg = self._zoo_cfg()
        self.config_path.write_text("".join(f"{key}={value}\n" for key, value in cfg.items()))
        if self.config.server_id is not None:
            (self.data_dir / "myid").write_text(f"{self.config.server_id}\n")
        command = self._command(installation)
        with self.log_path.open("ab") as log_file:
            self._log_offset = log_file.tell()
            log_file.write(f"# minibroker: {' '.join(command)}\n".encode())
            log_file.flush()
            # start_new_session: the JVM gets its own process group, so a Ctrl-C in the
            # terminal (SIGINT to the foreground group) does not kill ZooKeeper behind the
            # harness's back (brokers must shut down first), and signals we send go to
            # the whole group. cwd=data_dir keeps any hs_err_pid*.log crash file there.
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,
            )
        self._paused = False
        log.info(
            "zookeeper spawned pid=%d server_id=%s port=%d tick_ms=%d config=%s",
            self._process.pid,
            self.config.server_id,
            self.port,
            self.config.tick_time_ms,
            self.config_path,
        )

    def _signal(self, signum: signal.Signals) -> None:
        if self._process is None or not self.is_running:
            raise ZooKeeperError(f"cannot send {signum.name}: ZooKeeper is not running")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signum)

    def _terminate(self, signum: signal.Signals, timeout: float) -> None:
        process = self._process
        if process is None:
            return
        sent = "none (already exited)"
        if process.poll() is None:
            sent = signum.name
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signum)
                # A stopped process would hold a SIGTERM pending forever.
                os.killpg(process.pid, signal.SIGCONT)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log.warning(
                    "zookeeper kill_after_timeout pid=%d timeout_s=%.1f", process.pid, timeout
                )
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._paused = False
        log.info(
            "zookeeper stopped pid=%d signal=%s returncode=%s",
            process.pid,
            sent,
            process.returncode,
        )

    def _fail(self, reason: str) -> NoReturn:
        tail = _read_tail(self.log_path, self._log_offset) if self._data_dir else ""
        code = self._process.poll() if self._process else None
        raise ZooKeeperStartError(
            f"{self._name} on {self.config.host}:{self._port} {reason}"
            + (f" (exit status {code})" if code is not None else "")
            + f"; last lines of {self.log_path}:\n{tail}"
        )


def member_config(
    template: ZooKeeperConfig,
    peers: Iterable[QuorumPeer],
    server_id: int,
    data_dir: Path,
    log_path: Path | None = None,
) -> ZooKeeperConfig:
    """The config of ensemble member ``server_id``: ``template``'s settings (tick, heap,
    limits, ...) with this member's id, peers, data dir and log. The one place that says how
    a member is configured, for the first start and for every restart."""
    return replace(
        template,
        data_dir=data_dir,
        log_path=log_path,
        port=0,
        server_id=server_id,
        quorum_peers=tuple(sorted(peers, key=lambda p: p.server_id)),
    )


_BIND_FAILURES = ("Address already in use", "BindException")


class ZooKeeperEnsemble:
    """``size`` ZooKeeper servers on this machine forming one ensemble (``QuorumPeerMain``).

    Member ``n`` has server id ``n``, its own data dir ``<data_dir>/zookeeper-<n>`` (with its
    ``myid``) and log (``<log_dir>/zookeeper-<n>.log``, else in its data dir), and three
    ports: client (``client_ports[n-1]``, else free), quorum and election (free ones, chosen
    at the first start and kept across restarts, as every member's zoo.cfg names them).

    The ensemble serves while a majority of its members runs (:func:`quorum_size`): one
    member of three may die, two may not. Kill, stop, pause and restart single members to
    inject ZooKeeper faults; a restarted member rejoins with its data.

    Example usage::

        ensemble = ZooKeeperEnsemble(3, ZooKeeperConfig(tick_time_ms=200))
        ensemble.start()                 # all spawned at once; returns once all serve
        ensemble.connect_string          # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
        ensemble.kill(ensemble.leader())  # SIGKILL the leader: the others elect a new one
        ensemble.start_node(2)           # back with its data; it follows the new leader
        ensemble.stop()                  # every member; removes a temp data dir

    Not thread-safe, like :class:`ZooKeeperServer`.
    """

    def __init__(
        self,
        size: int = 3,
        config: ZooKeeperConfig | None = None,
        *,
        data_dir: Path | None = None,
        log_dir: Path | None = None,
        client_ports: Sequence[int] | None = None,
        installation: ZooKeeperInstallation | None = None,
    ) -> None:
        template = config or ZooKeeperConfig()
        if size < 1:
            raise ValueError(f"an ensemble needs at least one member, not {size}")
        if client_ports is not None and len(client_ports) != size:
            raise ValueError(f"{len(client_ports)} client ports for {size} members")
        if template.quorum_peers or template.data_dir or template.log_path or template.port:
            raise ValueError(
                "the ensemble chooses each member's id, peers, port, data dir and log: "
                "give them as its arguments, not in the template config"
            )
        self.size = size
        self.config = template
        """The settings every member shares."""
        self._client_ports = tuple(client_ports) if client_ports is not None else None
        self._data_dir = data_dir
        self._owns_data_dir = False
        self._log_dir = log_dir
        self._installation = installation
        self.servers: dict[int, ZooKeeperServer] = {}
        """Member id -> its server, once start() chose the ports."""
        self.startup_seconds: float | None = None
        """Wall time of the last successful start(): first spawn until every member served."""

    # --- properties -----------------------------------------------------------------

    @property
    def node_ids(self) -> list[int]:
        return list(range(1, self.size + 1))

    @property
    def peers(self) -> tuple[QuorumPeer, ...]:
        """Every member's id and ports. Raises ZooKeeperError before the first start()."""
        return self._any_server().config.quorum_peers

    @property
    def connect_string(self) -> str:
        """Every member's ``host:port``, for brokers and clients (see
        :func:`ensemble_connect_string`)."""
        return ensemble_connect_string(self.peers)

    @property
    def data_dir(self) -> Path:
        if self._data_dir is None:
            raise ZooKeeperError("the temporary ensemble data dir is not created until start()")
        return self._data_dir

    def server(self, node: int) -> ZooKeeperServer:
        """Member ``node``'s server; ZooKeeperError for an unknown member or before start()."""
        if node not in self.node_ids:
            raise ZooKeeperError(f"no ZooKeeper member {node} (members: {self.node_ids})")
        self._any_server()
        return self.servers[node]

    # --- lifecycle ------------------------------------------------------------------

    def start(self, timeout: float = 90.0) -> None:
        """Start every member and return once each one serves (a quorum formed and every
        member joined it); raise ZooKeeperError otherwise, with every member stopped again.

        Fixed client ports that are taken fail at once (ZooKeeperPortInUseError). Ports the
        harness picked that another process took before ZooKeeper bound them are picked
        again, up to ``config.port_attempts`` times.
        """
        if any(server.is_running for server in self.servers.values()):
            raise ZooKeeperError("the ensemble is already running; stop() it first")
        deadline = time.monotonic() + timeout
        host = self.config.host
        if self._client_ports is not None:
            taken = _taken_ports(
                host,
                {
                    f"member {n}'s client": p
                    for n, p in zip(self.node_ids, self._client_ports, strict=True)
                },
            )
            if taken:
                raise ZooKeeperPortInUseError(
                    f"cannot start the ZooKeeper ensemble: {', '.join(taken)} on {host} "
                    "already in use"
                )
        self._prepare_data_dir()
        if self._installation is None:
            self._installation = zookeeper_installation()  # once for every member
        _live_ensembles.add(self)
        attempts = max(1, self.config.port_attempts)
        for attempt in range(1, attempts + 1):
            if attempt > 1 or not self.servers:
                self._make_servers()
            started = time.monotonic()
            try:
                for server in self.servers.values():
                    server.start(wait=False)
                for server in self.servers.values():
                    server.wait_until_serving(timeout=max(0.0, deadline - time.monotonic()))
            except ZooKeeperError as error:
                self._kill_all()
                raced = self._bind_race(error)
                if raced and attempt < attempts:
                    log.warning("zookeeper ensemble port_race attempt=%d: %s", attempt, error)
                    continue
                raise
            self.startup_seconds = time.monotonic() - started
            log.info(
                "zookeeper ensemble started members=%d connect=%s startup_s=%.3f leader=%s",
                self.size,
                self.connect_string,
                self.startup_seconds,
                self.leader(),
            )
            return

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every member (SIGTERM, then SIGKILL after ``timeout``); remove an owned temp
        data dir unless ``keep_data``. Idempotent."""
        for server in self.servers.values():
            server.stop(timeout=timeout)
        _live_ensembles.discard(self)
        if self._owns_data_dir and self._data_dir is not None and not self.config.keep_data:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            log.info("zookeeper removed_data_dir path=%s", self._data_dir)
            self._data_dir = None
            self._owns_data_dir = False
            self.servers.clear()

    def kill(self, node: int) -> None:
        """SIGKILL member ``node`` (a crash); its data and ports are kept for start_node()."""
        self.server(node).kill()

    def start_node(self, node: int, timeout: float = 60.0, *, wait: bool = True) -> None:
        """Start a killed or stopped member again, same ports and data.

        With ``wait``, return once it serves, which needs a quorum: with fewer than a
        majority of the members running, even counting this one, pass ``wait=False`` and
        then :meth:`wait_for_quorum`.
        """
        self.server(node).start(timeout=timeout, wait=wait)

    def pause(self, node: int) -> None:
        """SIGSTOP member ``node`` (see :meth:`ZooKeeperServer.pause`)."""
        self.server(node).pause()

    def resume(self, node: int) -> None:
        self.server(node).resume()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- health ---------------------------------------------------------------------

    def modes(self, timeout: float = 1.0) -> dict[int, str | None]:
        """Member id -> its ``srvr`` mode (see :meth:`ZooKeeperServer.mode`)."""
        return {node: server.mode(timeout) for node, server in self.servers.items()}

    def leader(self) -> int | None:
        """The member that says it leads, or None (no quorum, or an election under way)."""
        return next((n for n, mode in self.modes().items() if mode == "leader"), None)

    def has_quorum(self) -> bool:
        """A leader and enough followers to make a majority say they serve."""
        modes = list(self.modes().values())
        return "leader" in modes and sum(map(is_serving_mode, modes)) >= quorum_size(self.size)

    def wait_for_quorum(self, timeout: float = 60.0) -> None:
        """Poll until :meth:`has_quorum` and a kazoo session through the full connect string
        opens; ZooKeeperStartError with every member's mode otherwise."""
        deadline = time.monotonic() + timeout
        while not self.has_quorum():
            if time.monotonic() >= deadline:
                raise ZooKeeperStartError(
                    f"the ZooKeeper ensemble formed no quorum within {timeout:.1f}s "
                    f"(modes: {self.modes()})"
                )
            time.sleep(_POLL_INTERVAL_S)
        remaining = max(1.0, deadline - time.monotonic())
        client = KazooClient(hosts=self.connect_string, timeout=remaining)
        try:
            client.start(timeout=remaining)
        except Exception as exc:  # kazoo raises its handler's timeout type
            raise ZooKeeperStartError(
                f"the ZooKeeper ensemble has a quorum but no session opened ({exc!r})"
            ) from None
        finally:
            client.stop()
            client.close()

    # --- internals ------------------------------------------------------------------

    def _any_server(self) -> ZooKeeperServer:
        if not self.servers:
            raise ZooKeeperError("the ensemble's ports are not chosen until start()")
        return next(iter(self.servers.values()))

    def _prepare_data_dir(self) -> None:
        if self._data_dir is None:
            self._data_dir = Path(tempfile.mkdtemp(prefix="minibroker-zk-ensemble-"))
            self._owns_data_dir = True
        self._data_dir.mkdir(parents=True, exist_ok=True)

    def _make_servers(self) -> None:
        host = self.config.host
        picked = _pick_free_ports(host, self.size * (2 if self._client_ports else 3))
        clients = list(self._client_ports or picked[2 * self.size :])
        peers = [
            QuorumPeer(n, clients[i], picked[2 * i], picked[2 * i + 1], host)
            for i, n in enumerate(self.node_ids)
        ]
        self.servers = {
            n: ZooKeeperServer(
                member_config(
                    self.config,
                    peers,
                    n,
                    self.data_dir / f"zookeeper-{n}",
                    None if self._log_dir is None else self._log_dir / f"zookeeper-{n}.log",
                ),
                self._installation,
            )
            for n in self.node_ids
        }

    def _bind_race(self, error: ZooKeeperError) -> bool:
        """Whether a start failed because a port the harness picked was taken meanwhile
        (a member's own port check failed, or its JVM could not bind). A fixed client port
        taken meanwhile is no race: picking again would not help. Call after _kill_all(),
        so that our own members hold no port."""
        host = self.config.host
        if self._client_ports and any(not _port_is_free(host, p) for p in self._client_ports):
            return False
        if isinstance(error, ZooKeeperPortInUseError):
            return True
        return any(
            marker in server.log_since_start()
            for server in self.servers.values()
            for marker in _BIND_FAILURES
        )

    def _kill_all(self) -> None:
        for server in self.servers.values():
            server.kill()
            server.stop()  # not running: only forgets it for the exit handler
