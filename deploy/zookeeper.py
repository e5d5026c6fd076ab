"""A real standalone ZooKeeper for tests, ``minibroker cluster up``, chaos and benchmarks.

This is the project's one ZooKeeper harness (DESIGN.md §1, §10): it runs Debian's
``zookeeper`` package (ZooKeeper 3.8 on Java 17) as a child process, never an imitation,
so session expiry, ephemeral znodes and watches behave exactly as the brokers will see
them in production. Chaos needs that: pausing the server (SIGSTOP) past the session
timeout expires sessions for real, whereas ``kazoo.testing``'s ``expire_session()`` only
fakes the event on the client side and leaves the ephemerals on the server.

Example usage::

    with ZooKeeperServer(ZooKeeperConfig(tick_time_ms=200)) as zk:
        client = KazooClient(hosts=zk.connect_string, timeout=2.0)
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import NoReturn, Self

from kazoo.client import KazooClient

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
SETUP_HINT = "run `make setup` (it installs Debian's zookeeper and openjdk-17-jre-headless)"

_LOG_TAIL_LINES = 40
_POLL_INTERVAL_S = 0.05


class ZooKeeperError(RuntimeError):
    """Root of the harness's errors."""


class ZooKeeperNotInstalledError(ZooKeeperError):
    """Java or the ZooKeeper jars cannot be found."""


class ZooKeeperPortInUseError(ZooKeeperError):
    """A fixed client port was requested and another socket already holds it."""


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
class ZooKeeperConfig:
    """How to run one standalone ZooKeeper.

    ``tick_time_ms`` defaults to 200 ms (ZooKeeper's own default is 2000). Two reasons:
    sessions are clamped to [2, 20] x tickTime unless min/max are given, and the server
    checks session expiry once per tick, so a session expires between ``timeout`` and
    ``timeout + tickTime`` after the client goes quiet. With 200 ms, tests can ask for
    1 s sessions (the pause/expiry tests) and the broker's 2-6 s sessions expire within
    a tenth of their timeout, which keeps chaos timings tight. Standalone ZooKeeper uses
    the tick for nothing else that costs anything (initLimit/syncLimit are quorum-only).
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


# Every started server (strong references: a harness dropped without stop() must still be
# found), so that an interpreter exit, e.g. a test run that crashed past its fixtures'
# teardown, does not leave JVMs behind holding ports and temp dirs.
_live_servers: set[ZooKeeperServer] = set()


@atexit.register
def _kill_live_servers() -> None:
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


class ZooKeeperServer:
    """One standalone ZooKeeper process (``ZooKeeperServerMain``) and its files.

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
        self._port: int | None = self.config.port or None
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

    @property
    def is_paused(self) -> bool:
        return self._paused and self.is_running

    # --- lifecycle ------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Start the server and return once it serves; raise ZooKeeperError otherwise.

        Fails at once (ZooKeeperPortInUseError) when a fixed port is already taken, rather
        than waiting for the JVM to find out. With port 0, a free port is picked and, if
        another process grabs it before ZooKeeper binds, another is tried.
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
        if fixed and not _port_is_free(self.config.host, self.port):
            raise ZooKeeperPortInUseError(
                f"cannot start ZooKeeper: {self.config.host}:{self.port} is already in use "
                "(another ZooKeeper or test may hold it; use port 0 to pick a free one)"
            )
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
        """Send a 4lw command (``ruok``, ``srvr``, ``mntr``, ``stat``) and return the reply.

        Only the commands in zoo.cfg's ``4lw.commands.whitelist`` are answered; ZooKeeper
        3.5+ refuses the rest. (kazoo's server_version() asks ``envi``, which is not
        whitelisted; nothing in kazoo itself calls it.)
        """
        with socket.create_connection((self.config.host, self.port), timeout=timeout) as sock:
            sock.sendall(command.encode("ascii"))
            chunks: list[bytes] = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", errors="replace")

    def is_ok(self, timeout: float = 1.0) -> bool:
        """True if the server answers ``ruok`` with ``imok``.

        ``imok`` means the process is up and its client port open, not that it serves:
        ZooKeeper answers ``ruok`` before its request pipeline runs, and drops sessions
        opened in that window (see is_serving()).
        """
        return self._ask("ruok", timeout) == "imok"

    def is_serving(self, timeout: float = 1.0) -> bool:
        """True if ``srvr`` reports the server's state (``Mode: standalone``).

        Until the request pipeline runs, ZooKeeper 3.5+ answers every 4lw command but
        ``ruok`` with "This ZooKeeper instance is not currently serving requests".
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
            *self.config.jvm_options,
            "-cp",
            installation.classpath_arg,
            MAIN_CLASS,
            str(self.config_path.resolve()),
        ]

    def _spawn(self, installation: ZooKeeperInstallation) -> None:
        cfg = self._zoo_cfg()
        self.config_path.write_text("".join(f"{key}={value}\n" for key, value in cfg.items()))
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
            "zookeeper spawned pid=%d port=%d tick_ms=%d config=%s",
            self._process.pid,
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
            f"ZooKeeper on {self.config.host}:{self._port} {reason}"
            + (f" (exit status {code})" if code is not None else "")
            + f"; last lines of {self.log_path}:\n{tail}"
        )
