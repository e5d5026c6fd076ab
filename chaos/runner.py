"""``minibroker chaos run``: break a real cluster on a schedule while a workload records what
it was told, heal, read everything once more, and let the audit judge.

One run, in order:

1. the run directory (:mod:`chaos.run_dir`) and the schedule (new from ``--seed``, or
   ``--replay``); every nemesis is checked against the backend first (exit 2, one line);
2. the cluster: its own (3 brokers, RF 3, ``min.insync.replicas`` 2, the chosen truncation
   mode, unclean election if asked), or the running one ``--data-dir``/``--project`` names;
3. the workload's topics, producers and consumers (:mod:`chaos.workload`);
4. the faults, one at a time, each healed after its hold; a progress line every second;
5. the end: every fault healed, the ISRs whole again (or said which are not), the producers
   stopped once they know their outcomes, one final read of every partition, the consumers
   stopped, the cluster stopped cleanly, data dirs and logs copied into the run, the
   history merged and the audit run. The exit status is the audit's; the last line names
   the report.

Ctrl-C or SIGTERM at any point heals what is broken (paused brokers continued, stopped ones
started, the network reconnected, ZooKeeper nodes started), stops the workload and a
cluster the run started, writes what it has, and says where. A run never leaves a broker
stopped, paused or partitioned behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from kazoo.client import KazooClient

from chaos.backend import BackendUnavailableError, ClusterBackend
from chaos.cluster_checks import create_topics, final_read, under_replicated, wait_for_full_isr
from chaos.history_recorder import HistoryRecorder, TimelineRecorder
from chaos.local_backend import LocalBackend
from chaos.nemesis import NEMESES, Fault, NemesisContext, nemesis_named
from chaos.run_dir import EXIT_CANNOT_RUN, RunDir
from chaos.run_stats import run_stats
from chaos.schedule import Schedule, make_schedule
from chaos.workload import Workload, WorkloadSpec
from deploy.local_cluster import LocalCluster
from deploy.ports import free_port_block
from proto.errors import MinibrokerError
from proto.topic_partition import TopicPartition

__all__ = ["Interrupted", "RunSettings", "run_chaos"]

BROKERS = 3
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
ISR_TIMEOUT_S = 120.0
FINAL_READ_TIMEOUT_S = 120.0


class Interrupted(MinibrokerError):
    """SIGINT or SIGTERM during a run."""


LOG_DIR_BYTES = 256 << 20
"""Each broker's tmpfs in a run with ``disk-full`` on a cluster it starts itself."""


@dataclass
class RunSettings:
    """``chaos run``'s options."""

    out: Path
    backend: str = "local"
    nemeses: Sequence[str] = ("kill", "bounce", "pause", "leader", "controller")
    duration_s: float = 60.0
    interval_s: float = 10.0
    producers: int = 3
    rate: float = 100.0
    seed: int = 0
    truncation_mode: str = "leader-epoch"
    unclean: bool = False
    replay: Path | None = None
    data_dir: Path | None = None
    """A running local cluster to use instead of starting one."""
    project: str | None = None
    """A running Docker compose project to use instead of starting one."""
    topics: int = 2
    partitions: int = 3
    session_timeout_ms: int = 3000
    spark_master: str | None = None
    consumers: int = 2
    quiet: bool = False
    extra_overrides: dict[str, str] = field(default_factory=dict)
    spark: Any = None
    """A running SparkSession for the audit (tests share one); None: the audit starts one."""


def cluster_overrides(settings: RunSettings) -> dict[str, str]:
    """The broker properties of a cluster the run starts itself."""
    return {
        "zookeeper.session.timeout.ms": str(settings.session_timeout_ms),
        "replica.lag.time.max.ms": str(settings.session_timeout_ms),
        "replica.fetch.wait.max.ms": "200",
        "replication.truncation.mode": settings.truncation_mode,
        "unclean.leader.election.enable": str(settings.unclean).lower(),
        "min.insync.replicas": str(MIN_INSYNC_REPLICAS),
        "test.zookeeper.session.export.enable": "true",
        **settings.extra_overrides,
    }


def resolve_nemeses(names: Sequence[str], backend: ClusterBackend) -> list[str]:
    """``all`` is every nemesis this backend and cluster can do; named ones must all be
    possible here (BackendUnavailableError otherwise)."""
    if list(names) == ["all"]:
        possible = []
        for name, nemesis in NEMESES.items():
            try:
                nemesis.check(backend)
            except BackendUnavailableError:
                continue
            possible.append(name)
        return possible
    for name in names:
        nemesis_named(name).check(backend)
    return list(names)


def run_chaos(settings: RunSettings) -> int:
    """Run, judge, return the exit status (see the module docstring)."""
    for name in settings.nemeses:
        if name != "all":
            nemesis_named(name)  # an unknown name is refused before anything starts
    if settings.backend == "local":
        needs_network = sorted({"partition", "split"} & set(settings.nemeses))
        if needs_network:
            raise BackendUnavailableError(
                f"{', '.join(needs_network)} needs the docker backend: the local backend's "
                "brokers share one network namespace (use --backend docker)"
            )
    replay = Schedule.read(settings.replay) if settings.replay is not None else None
    run = RunDir.create(settings.out)
    with _signals_interrupt():
        return _Run(settings, run, replay).execute()


class _Run:
    def __init__(self, settings: RunSettings, run: RunDir, replay: Schedule | None) -> None:
        self.settings = settings
        self.run = run
        self.replay = replay
        self.own_cluster = settings.data_dir is None and settings.project is None
        self.backend: ClusterBackend | None = None
        self.workload: Workload | None = None
        self.fault: Fault | None = None
        self.paused: set[int] = set()
        self.faults_done = 0
        self.zk: KazooClient | None = None
        self._ok_bytes: dict[Path, int] = {}
        self._acks = 0

    def say(self, line: str) -> None:
        if not self.settings.quiet:
            print(f"chaos: {line}", flush=True)

    # -- the run ---------------------------------------------------------------------------

    def execute(self) -> int:
        settings, run = self.settings, self.run
        timeline = TimelineRecorder(run.timeline)
        try:
            self.backend = self._backend()
            nemeses = resolve_nemeses(settings.nemeses, self.backend)
            schedule = self._schedule(nemeses)
            run.schedule.write_text(schedule.to_json())
            self.say(
                f"{len(schedule.faults)} faults over {schedule.duration_s:g} s "
                f"({', '.join(schedule.nemeses) or 'none'}), seed {schedule.seed}; "
                f"run directory {run.path}"
            )
            self.zk = KazooClient(hosts=self.backend.zookeeper_connect(), timeout=10)
            self.zk.start(timeout=20)
            tps = self._topics()
            self.workload = self._workload(tps)
            self.workload.start()
            self._wait_for_first_acks()
            self._run_schedule(schedule, timeline, tps)
            return self._finish(timeline, tps)
        except Interrupted:
            self.say("interrupted: healing every fault and stopping the workload")
            self._heal_everything(timeline)
            self._wind_down(stop_cluster=self.own_cluster)
            run.merge_history()
            self.say(f"interrupted; what the run wrote is in {run.path}")
            return EXIT_CANNOT_RUN
        except BaseException:
            self._heal_everything(timeline)
            self._wind_down(stop_cluster=self.own_cluster)
            raise
        finally:
            timeline.close()
            self._close_zookeeper()

    def _close_zookeeper(self) -> None:
        """Before the cluster stops: a client left open retries the stopped ZooKeeper,
        logging every refused connection, through the whole audit."""
        if self.zk is not None:
            with contextlib.suppress(Exception):
                self.zk.stop()
                self.zk.close()
            self.zk = None

    def _backend(self) -> ClusterBackend:
        settings = self.settings
        if settings.backend == "local":
            if settings.project is not None:
                raise BackendUnavailableError("--project names a Docker cluster: --backend docker")
            if settings.data_dir is not None:
                cluster = LocalCluster(settings.data_dir)
                if not all(cluster.is_running(b) for b in cluster.broker_ids()):
                    raise BackendUnavailableError(
                        f"the cluster in {settings.data_dir} is not fully running "
                        "(`minibroker cluster status`)"
                    )
                return LocalBackend(cluster)
            cluster = LocalCluster(self.run.data)
            zookeepers = 3 if self._wants_zookeeper_faults() else 1
            base = free_port_block(2 * BROKERS + zookeepers)
            self.say(
                f"starting a local cluster: {zookeepers} ZooKeeper node(s) and {BROKERS} "
                f"brokers from port {base}"
            )
            cluster.up(
                BROKERS,
                base_port=base,
                zookeeper_port=base + BROKERS,
                kafka_base_port=base + BROKERS + zookeepers,
                zookeeper_nodes=zookeepers,
                overrides=cluster_overrides(settings),
                log_dir_bytes=LOG_DIR_BYTES if self._wants("disk-full") else None,
            )
            return LocalBackend(cluster)
        if settings.backend == "docker":
            from chaos.docker_backend import DockerBackend

            if settings.data_dir is not None:
                raise BackendUnavailableError("--data-dir names a local cluster: --backend local")
            if settings.project is not None:
                return DockerBackend.attach(settings.project)
            self.say("starting a Docker cluster (make up, its own project and ports)")
            return DockerBackend.start_own(
                f"chaos-{int(time.time())}",
                cluster_overrides(settings),
                self.run.logs,
                zookeeper_nodes=3 if self._wants_zookeeper_faults() else 1,
            )
        raise BackendUnavailableError(
            f"unknown backend {settings.backend!r}: choose local or docker"
        )

    def _wants(self, nemesis: str) -> bool:
        names = self.replay.nemeses if self.replay is not None else list(self.settings.nemeses)
        return nemesis in names

    def _wants_zookeeper_faults(self) -> bool:
        """A cluster the run starts gets a 3-node ensemble when ZooKeeper faults may come."""
        names = self.replay.nemeses if self.replay is not None else list(self.settings.nemeses)
        return "all" in names or any(n.startswith("zk-") and n != "zk-expire" for n in names)

    def _schedule(self, nemeses: list[str]) -> Schedule:
        settings = self.settings
        if self.replay is not None:
            assert self.backend is not None
            resolve_nemeses(self.replay.nemeses, self.backend)
            return self.replay
        return make_schedule(
            nemeses,
            settings.duration_s,
            settings.interval_s,
            settings.seed,
            settings.session_timeout_ms / 1000,
        )

    def _topics(self) -> list[TopicPartition]:
        settings = self.settings
        assert self.backend is not None
        prefix = "chaos" if self.own_cluster else f"chaos-{time.strftime('%Y%m%d%H%M%S')}"
        topics = [f"{prefix}-{i}" for i in range(settings.topics)]
        config = {
            "min.insync.replicas": str(MIN_INSYNC_REPLICAS),
            "unclean.leader.election.enable": str(settings.unclean).lower(),
        }
        asyncio.run(
            create_topics(
                self.backend.bootstrap_servers(),
                self.backend.zookeeper_connect(),
                topics,
                settings.partitions,
                REPLICATION_FACTOR,
                config,
            )
        )
        return [TopicPartition(t, p) for t in topics for p in range(settings.partitions)]

    def _workload(self, tps: list[TopicPartition]) -> Workload:
        settings = self.settings
        assert self.backend is not None
        spec = WorkloadSpec(
            bootstrap=self.backend.bootstrap_servers(),
            zookeeper=self.backend.zookeeper_connect(),
            topics=sorted({tp.topic for tp in tps}),
            partitions=settings.partitions,
            producers=settings.producers,
            rate=settings.rate,
            group_consumers=settings.consumers,
            zookeeper_session_timeout_ms=max(settings.session_timeout_ms, 4000),
        )
        return Workload(spec, self.run.history_parts, self.run.path / "workload")

    def _wait_for_first_acks(self) -> None:
        deadline = time.monotonic() + 60
        while self._count_acks() == 0:
            if time.monotonic() > deadline:
                raise BackendUnavailableError(
                    "no write was acknowledged within 60 s of starting the workload: see "
                    f"{self.run.path / 'workload'}"
                )
            time.sleep(0.2)

    def _run_schedule(
        self, schedule: Schedule, timeline: TimelineRecorder, tps: list[TopicPartition]
    ) -> None:
        assert self.backend is not None
        assert self.zk is not None
        ctx = NemesisContext(
            self.backend,
            self.zk,
            tps,
            timeline,
            self.settings.session_timeout_ms / 1000,
            self.paused,
        )
        started = time.monotonic()
        timeline.event("run-start", None)
        isr_watch: _IsrWatch | None = None
        for planned in schedule.faults:
            self._progress_until(started + planned.at_s, started)
            if isr_watch is not None:
                isr_watch.stop()
            try:
                self.fault = nemesis_named(planned.nemesis).strike(ctx, planned.pick)
            except BackendUnavailableError:
                raise
            except Exception as e:  # a fault that could not be injected: on with the next
                timeline.event(planned.nemesis, None, kind="fail", error=str(e))
                self.say(f"{planned.nemesis} could not strike: {e}")
                continue
            self.faults_done += 1
            timeline.event(
                "fault", self.fault.target, nemesis=planned.nemesis, hold_s=planned.hold_s
            )
            self._progress_until(started + planned.at_s + planned.hold_s, started)
            self._heal_current()
            isr_watch = _IsrWatch(self.backend.zookeeper_connect(), tps, timeline)
        self._progress_until(started + schedule.duration_s, started)
        if isr_watch is not None:
            isr_watch.stop()
        timeline.event("run-end", None)

    def _heal_current(self) -> None:
        fault, self.fault = self.fault, None
        if fault is not None:
            fault.heal()

    def _finish(self, timeline: TimelineRecorder, tps: list[TopicPartition]) -> int:
        assert self.backend is not None
        assert self.zk is not None
        assert self.workload is not None
        run = self.run
        self._heal_everything(timeline)
        self.say("healed; waiting for every ISR to be whole")
        missing = wait_for_full_isr(self.zk, tps, ISR_TIMEOUT_S)
        if missing:
            self.say(
                "not every ISR became whole within "
                f"{ISR_TIMEOUT_S:g} s: " + ", ".join(f"{tp}: {why}" for tp, why in missing.items())
            )
        self.say("stopping the producers (they wait for their last outcomes)")
        self.workload.stop(consumers_too=False)
        final = HistoryRecorder(run.history_part("final-read"), 10_000)
        with final:
            read, unfinished = asyncio.run(
                final_read(
                    self.backend.bootstrap_servers(),
                    self.backend.zookeeper_connect(),
                    tps,
                    final,
                    FINAL_READ_TIMEOUT_S,
                )
            )
        self.say(f"final read: {read} records")
        for tp, why in unfinished.items():
            self.say(f"final read of {tp} incomplete: {why}")
        self._wind_down(stop_cluster=True)
        lines = run.merge_history()
        self.say(f"history: {lines} lines; {run_stats(run.path).summary()}; auditing")
        status = run.audit(master=self.settings.spark_master, spark=self.settings.spark)
        print(f"chaos run: report {run.report}", flush=True)
        return status

    # -- healing and stopping --------------------------------------------------------------

    def _heal_everything(self, timeline: TimelineRecorder) -> None:
        """Undo whatever may be broken, whatever went wrong before."""
        backend = self.backend
        if backend is None:
            return
        with contextlib.suppress(Exception):
            self._heal_current()
        with contextlib.suppress(Exception):
            backend.heal_network()
        for node in backend.zookeeper_nodes():
            with contextlib.suppress(Exception):
                backend.start_zookeeper(node)
        for broker in list(self.paused):
            with contextlib.suppress(Exception):
                backend.resume(broker)
                timeline.event("resume", broker)
            self.paused.discard(broker)
        for broker in backend.broker_ids():
            with contextlib.suppress(Exception):
                if not backend.is_running(broker):
                    backend.start(broker)
                    timeline.event("start", broker)

    def _wind_down(self, *, stop_cluster: bool) -> None:
        """Stop the workload, and the cluster (cleanly) if asked; copy what the audit and a
        reader need into the run directory."""
        if self.workload is not None:
            self.workload.stop()
        backend = self.backend
        if backend is None:
            return
        self._close_zookeeper()
        if stop_cluster:
            backend.stop_cluster()
        if not self.own_cluster or backend.name != "local":
            with contextlib.suppress(Exception):
                backend.copy_data_dirs(self.run.data)
        with contextlib.suppress(Exception):
            backend.copy_logs(self.run.logs)
        with contextlib.suppress(Exception):
            backend.dispose()

    # -- progress --------------------------------------------------------------------------

    def _progress_until(self, until: float, started: float) -> None:
        last_acks, last_t = self._acks, time.monotonic()
        while True:
            now = time.monotonic()
            if now >= until:
                return
            time.sleep(min(1.0, until - now))
            acks = self._count_acks()
            t = time.monotonic()
            rate = (acks - last_acks) / max(t - last_t, 1e-3)
            last_acks, last_t = acks, t
            current = str(self.fault) if self.fault is not None else "none"
            self._status(
                f"{t - started:6.1f} s  {rate:7.0f} acks/s  {acks} acked  "
                f"{self.faults_done} faults  now: {current}"
            )

    def _status(self, line: str) -> None:
        if self.settings.quiet:
            return
        if sys.stdout.isatty():
            print(f"\r{line:<100}", end="", flush=True)
        elif int(time.monotonic()) % 10 == 0:
            print(line, flush=True)

    def _count_acks(self) -> int:
        """``ok`` lines written so far, counted incrementally from the history parts."""
        for part in self.run.history_parts.glob("*.jsonl"):
            seen = self._ok_bytes.get(part, 0)
            with part.open("rb") as f:
                f.seek(seen)
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1
            self._acks += chunk[:end].count(b'"type":"ok"')
            self._ok_bytes[part] = seen + end
        return self._acks


class _IsrWatch:
    """After a heal: how long until every ISR is whole again (``isr-whole`` in the timeline,
    with ``after_heal_s``), watched from a thread of its own until the next fault; if that
    comes first, ``isr-not-whole``. Its own ZooKeeper session: it must not slow the run's."""

    def __init__(
        self, zookeeper: str, tps: Sequence[TopicPartition], timeline: TimelineRecorder
    ) -> None:
        self._healed = time.monotonic()
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, args=(zookeeper, list(tps), timeline), daemon=True
        )
        self._thread.start()

    def _watch(self, zookeeper: str, tps: list[TopicPartition], timeline: TimelineRecorder) -> None:
        zk = KazooClient(hosts=zookeeper, timeout=10)
        try:
            zk.start(timeout=20)
            while not self._stopping.is_set():
                try:
                    missing = under_replicated(zk, tps)
                except Exception:  # ZooKeeper itself may be what is broken: look again
                    missing = {TopicPartition("?", 0): "unknown"}
                if not missing:
                    timeline.event(
                        "isr-whole", None, after_heal_s=round(time.monotonic() - self._healed, 3)
                    )
                    return
                self._stopping.wait(0.25)
            timeline.event(
                "isr-not-whole", None, after_heal_s=round(time.monotonic() - self._healed, 3)
            )
        except Exception:
            return
        finally:
            with contextlib.suppress(Exception):
                zk.stop()
                zk.close()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=30)


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM raise Interrupted in the main thread (once; the run then heals)."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Interrupted(signal.Signals(signum).name)

    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, interrupt)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
