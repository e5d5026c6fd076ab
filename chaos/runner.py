"""``minibroker chaos run``: break a real cluster on a schedule while a workload records what
it was told, heal, read everything once more, and let the audit judge.

One run, in order:

1. the run directory (:mod:`chaos.run_dir`) and the schedule (new from ``--seed``, or
   ``--replay``); every nemesis is checked against the backend first (exit 2, one line);
2. the cluster: its own (3 brokers, RF 3, ``min.insync.replicas`` 2, the chosen truncation
   mode, unclean election if asked, a busy log cleaner for a compacted workload), or the
   running one ``--data-dir``/``--project`` names, refused if it runs another truncation
   mode than asked (:func:`chaos.cluster_checks.given_cluster_truncation_mode`);
3. the workload's topics (their configs recorded in ``topics.json`` for the audit; with
   ``--compacted``, compacted topics written with keys and tombstones), producers and
   consumers (:mod:`chaos.workload`; with ``--client kafka|mixed``, Kafka's own clients
   through the brokers' Kafka listeners, :mod:`chaos.kafka_workload`);
4. the faults, one at a time: each strikes at its time in the schedule (or, if the one
   before it is not over yet, as soon as it is), is held ``hold_s`` from the moment the
   strike is complete, is healed, and the next one waits until every ISR is whole again
   (at most :data:`READY_TIMEOUT_S`, said if it runs out). Every strike, heal and skipped
   fault is a line of its own; a progress line, kept going by a thread of its own while a
   strike or a heal blocks, is rewritten every second on a terminal and printed every
   :data:`PROGRESS_EVERY_S` seconds without one;
5. the end: every fault healed, the ISRs whole again (or said which are not), the producers
   stopped once they know their outcomes (transactions: then ``transaction.timeout.ms``
   and the coordinators' abort check waited out, so that what a killed producer left open
   is aborted, and every partition's last stable offset checked against its high
   watermark), one final read of every partition, the consumers
   stopped; a cluster the run started is stopped cleanly, one it was given is left running
   (healed, as it was found) and its data dirs copied after the final read; logs copied
   into the run, the history merged and summed up (:mod:`chaos.run_stats`), and the audit
   run. The exit status is the audit's (0 clean, 1 violations, 2 could not run or be
   judged), but 3 when the audit is clean and no fault struck (nothing tested); the line
   before the last says what was and was not tested, the last names the report.

Ctrl-C or SIGTERM at any point heals what is broken (paused brokers continued, stopped ones
started, the network reconnected, ZooKeeper nodes started), stops the workload and a
cluster the run started, writes what it has, and says where. A run never leaves a broker
stopped, paused or partitioned behind it, and never stops a cluster it did not start.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient

from chaos.backend import BackendUnavailableError, ClusterBackend
from chaos.cluster_checks import (
    DEFAULT_TRUNCATION_MODE,
    create_topics,
    final_read,
    given_cluster_truncation_mode,
    under_replicated,
    unstable_partitions,
    wait_for_full_isr,
)
from chaos.history_recorder import HistoryRecorder, TimelineRecorder
from chaos.local_backend import LocalBackend
from chaos.nemesis import NEMESES, Fault, NemesisContext, nemesis_named
from chaos.run_dir import EXIT_CANNOT_RUN, EXIT_NOTHING_TESTED, RunDir
from chaos.run_stats import RunStats, run_stats
from chaos.schedule import Schedule, make_schedule
from chaos.workload import (
    CLIENTS,
    GRPC,
    PLAIN,
    TRANSACTIONS,
    WORKLOADS,
    Workload,
    WorkloadSpec,
)
from deploy.local_cluster import LocalCluster, partition_problem
from deploy.ports import free_port_block
from proto.config.broker_config import BrokerConfig
from proto.errors import MinibrokerError
from proto.topic_partition import TopicPartition
from proto.zk.sync_client import start_kazoo_client, stop_kazoo_client

if TYPE_CHECKING:
    from chaos.docker_backend import DockerBackend

__all__ = [
    "Interrupted",
    "RunSettings",
    "kafka_clients_problem",
    "no_fault_fits",
    "run_chaos",
    "run_verdict",
    "start_docker_cluster",
    "start_local_cluster",
    "transactions_settle_s",
]

BROKERS = 3
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
ISR_TIMEOUT_S = 120.0
FINAL_READ_TIMEOUT_S = 120.0
READY_TIMEOUT_S = 60.0
"""After a heal, how long the next fault waits at most for every ISR to be whole again."""
PROGRESS_EVERY_S = 10.0
"""Without a terminal, a progress line this often (on one, the line is rewritten every
second)."""
_STATUS_WIDTH = 110
EXIT_VIOLATIONS = 1


class Interrupted(MinibrokerError):
    """SIGINT or SIGTERM during a run."""


LOG_DIR_BYTES = 256 << 20
"""Each broker's tmpfs in a run with ``disk-full`` on a cluster it starts itself."""
COMPACTED_KEYS = 20
"""Keys the producers of a compacted workload draw from: few, so that most records are
superseded soon and every cleaning has work."""
TOMBSTONE_EVERY = 10
"""Every so many records of a compacted workload's producer is a tombstone."""
COMPACTED_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": str(16 << 10),
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "5000",
}
"""A compacted workload topic: segments that roll every few hundred records, cleaned as
soon as anything in them is dirty, tombstones that may go 5 s after they are clean (so a
run sees them go, and the audit judges that too)."""
CLEANER_BACKOFF_MS = 200
"""``log.cleaner.backoff.ms`` of a cluster the run starts for a compacted workload (15 s
by default): the cleaner looks for work five times a second."""
TRANSACTION_TIMEOUT_MS = 10_000
"""The transactional producers' ``transaction.timeout.ms``: short, so that a transaction a
killed producer left open is aborted by its coordinator within the run."""
ABORT_CHECK_MS = 1000
"""``transaction.abort.timed.out.transaction.cleanup.interval.ms`` of a cluster the run
starts for the transactions workload (10 s by default): timed-out transactions are looked
for every second, so the end of the run waits that much less for them."""
COPY_TOPIC_SUFFIX = "copies"
"""The copiers' topic: ``<prefix>-copies`` beside the producers' ``<prefix>-N``."""
SETTLE_MARGIN_S = 2.0
"""Beyond the timeout and the abort check: time for the aborts' markers."""
UNSTABLE_TIMEOUT_S = 30.0
"""After that wait, how long the run waits at most for every last stable offset to reach
its high watermark (said if one does not)."""


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
    compression_type: str = "none"
    """The workload producers' ``compression.type``."""
    compacted: bool = False
    """The workload's topics are compacted (``cleanup.policy=compact``, small segments, a
    low dirty ratio): the producers write keys from a small set, and tombstones."""
    keys: int = COMPACTED_KEYS
    """With ``compacted``: how many keys the producers draw from."""
    seed: int = 0
    truncation_mode: str | None = None
    """``replication.truncation.mode``: of a cluster the run starts (None: leader-epoch);
    a given cluster must run it (None: whichever it runs)."""
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
    workload: str = PLAIN
    """:data:`chaos.workload.PLAIN` or :data:`chaos.workload.TRANSACTIONS`."""
    transaction_records: int = 5
    """Records per transaction (transactions workload)."""
    abort_probability: float = 0.2
    """How often a transactional producer aborts on purpose."""
    transaction_timeout_ms: int = TRANSACTION_TIMEOUT_MS
    copiers: int = 1
    """Consume-transform-produce processes of the transactions workload (they copy the
    producers' topics to a topic of their own, :data:`COPY_TOPIC_SUFFIX`)."""
    client: str = GRPC
    """The workload's clients: :data:`chaos.workload.GRPC` (minibroker's own),
    :data:`~chaos.workload.KAFKA` (Kafka's own, through the brokers' Kafka listeners) or
    :data:`~chaos.workload.MIXED` (both)."""
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
        "replication.truncation.mode": settings.truncation_mode or DEFAULT_TRUNCATION_MODE,
        "unclean.leader.election.enable": str(settings.unclean).lower(),
        "min.insync.replicas": str(MIN_INSYNC_REPLICAS),
        "test.zookeeper.session.export.enable": "true",
        **({"log.cleaner.backoff.ms": str(CLEANER_BACKOFF_MS)} if settings.compacted else {}),
        **(
            {"transaction.abort.timed.out.transaction.cleanup.interval.ms": str(ABORT_CHECK_MS)}
            if settings.workload == TRANSACTIONS
            else {}
        ),
        **settings.extra_overrides,
    }


def transactions_settle_s(settings: RunSettings, own_cluster: bool) -> float:
    """How long the end of a transactions run waits, once the producers stopped, before its
    final read: ``transaction.timeout.ms`` plus the coordinators' abort check (the interval
    a cluster the run starts is given; Kafka's default for one it was given, whose setting
    it does not know) plus :data:`SETTLE_MARGIN_S`. A transaction begun before the producers
    stopped is then past its timeout and has been found by an abort check."""
    key = "transaction.abort.timed.out.transaction.cleanup.interval.ms"
    interval_ms = (
        int(cluster_overrides(settings).get(key, ABORT_CHECK_MS))
        if own_cluster
        else BrokerConfig.transaction_abort_timed_out_transaction_cleanup_interval_ms
    )
    return (settings.transaction_timeout_ms + interval_ms) / 1000 + SETTLE_MARGIN_S


def _unfit(name: str, *, compacted: bool, transactions: bool) -> str | None:
    """Why the workload gives nemesis ``name`` nothing to break (None: it does)."""
    nemesis = nemesis_named(name)
    if nemesis.needs_compacted and not compacted:
        return f"{name} breaks what only compacted topics have: run with --compacted"
    if nemesis.needs_transactions and not transactions:
        return f"{name} strikes the transaction path: run with --workload transactions"
    return None


def resolve_nemeses(
    names: Sequence[str],
    backend: ClusterBackend,
    *,
    compacted: bool = False,
    transactions: bool = False,
) -> list[str]:
    """``all`` is every nemesis this backend, cluster and workload can do (those of
    compacted topics only with a ``compacted`` workload, those of the transaction path
    only with ``transactions``); named ones must all be possible here
    (BackendUnavailableError otherwise)."""
    if list(names) == ["all"]:
        possible = []
        for name, nemesis in NEMESES.items():
            if _unfit(name, compacted=compacted, transactions=transactions) is not None:
                continue
            try:
                nemesis.check(backend)
            except BackendUnavailableError:
                continue
            possible.append(name)
        return possible
    for name in names:
        why = _unfit(name, compacted=compacted, transactions=transactions)
        if why is not None:
            raise BackendUnavailableError(why)
        nemesis_named(name).check(backend)
    return list(names)


def run_chaos(settings: RunSettings) -> int:
    """Run, judge, return the exit status (see the module docstring)."""
    if settings.workload not in WORKLOADS:
        raise BackendUnavailableError(
            f"unknown workload {settings.workload!r}: choose {' or '.join(WORKLOADS)}"
        )
    problem = kafka_clients_problem(settings.client, settings.workload)
    if problem is not None:
        raise BackendUnavailableError(problem)
    replay = Schedule.read(settings.replay) if settings.replay is not None else None
    # An unknown name, or one the workload gives nothing to break, is refused before
    # anything starts.
    for name in [*settings.nemeses, *(replay.nemeses if replay is not None else [])]:
        if name == "all":
            continue
        why = _unfit(
            name,
            compacted=settings.compacted,
            transactions=settings.workload == TRANSACTIONS,
        )
        if why is not None:
            raise BackendUnavailableError(why)
    if settings.backend == "local":
        needs_network = sorted({"partition", "split"} & set(settings.nemeses))
        problem = partition_problem() if needs_network else None
        if problem is not None:
            raise BackendUnavailableError(
                f"{', '.join(needs_network)} cannot run on the local backend here: {problem}; "
                "or use --backend docker"
            )
    run = RunDir.create(settings.out)
    with _signals_interrupt():
        return _Run(settings, run, replay).execute()


def kafka_clients_problem(client: str, workload: str) -> str | None:
    """Why a run cannot have this ``client`` (None: it can): an unknown one, Kafka's clients
    with the transactions workload (its transactional producers and copiers are gRPC
    ones only, for now), or Kafka's clients not installed."""
    if client not in CLIENTS:
        return f"unknown client {client!r}: choose {', '.join(CLIENTS)}"
    if client == GRPC:
        return None
    if workload == TRANSACTIONS:
        return (
            f"--workload transactions runs through the gRPC client only: --client {client} "
            "has no transactional producers or copiers yet"
        )
    missing = [m for m in ("confluent_kafka", "aiokafka") if importlib.util.find_spec(m) is None]
    if missing:
        return (
            f"--client {client} needs Kafka's own clients, and {' and '.join(missing)} "
            "cannot be imported: pip install confluent-kafka aiokafka (or minibroker[dev])"
        )
    return None


def start_local_cluster(
    settings: RunSettings,
    path: Path,
    *,
    zookeepers: int,
    small_log_dirs: bool,
    say: Callable[[str], None],
) -> LocalBackend:
    """A local cluster of the run's own in ``path``, on free ports, with the run's broker
    properties (:func:`cluster_overrides`); ``small_log_dirs`` for ``disk-full``."""
    cluster = LocalCluster(path)
    base = free_port_block(2 * BROKERS + zookeepers)
    say(
        f"starting a local cluster: {zookeepers} ZooKeeper node(s) and {BROKERS} brokers "
        f"from port {base}"
    )
    cluster.up(
        BROKERS,
        base_port=base,
        zookeeper_port=base + BROKERS,
        kafka_base_port=base + BROKERS + zookeepers,
        zookeeper_nodes=zookeepers,
        overrides=cluster_overrides(settings),
        log_dir_bytes=LOG_DIR_BYTES if small_log_dirs else None,
    )
    return LocalBackend(cluster)


def start_docker_cluster(
    settings: RunSettings, logs: Path, *, zookeepers: int, say: Callable[[str], None]
) -> DockerBackend:
    """A Docker cluster of the run's own (``make up`` under a project of its own, on free
    ports), with the run's broker properties; removed by its ``dispose``."""
    from chaos.docker_backend import DockerBackend

    say("starting a Docker cluster (make up, its own project and ports)")
    return DockerBackend.start_own(
        f"chaos-{int(time.time())}", cluster_overrides(settings), logs, zookeeper_nodes=zookeepers
    )


def no_fault_fits(
    nemeses: Sequence[str], duration_s: float, interval_s: float, session_timeout_s: float
) -> str:
    """Why a schedule made from these settings holds no fault (see
    :func:`chaos.schedule.make_schedule`): the first fault strikes half to all of
    ``interval_s`` into the run and must be healed before ``duration_s``."""
    holds = [nemesis_named(n).hold_s(interval_s, session_timeout_s) for n in nemeses]
    shortest = min(holds, default=interval_s / 2)
    enough = interval_s + max(holds, default=interval_s / 2)
    return (
        f"no fault fits in --duration {duration_s:g} s: the first strikes "
        f"{interval_s / 2:g} to {interval_s:g} s in (--interval {interval_s:g} s) and is held "
        f"{shortest:g} s or more; give --duration {enough:g} or more, or a shorter --interval"
    )


def run_verdict(
    audit_status: int, stats: RunStats, *, truncation_mode: str | None, unclean: bool
) -> tuple[int, str]:
    """The run's exit status and the line that says what was and was not tested.

    ``truncation_mode``: the cluster's mode (None for one it was given whose mode could
    not be read)."""
    tested = stats.faults_line()
    if audit_status == EXIT_VIOLATIONS:
        return audit_status, f"VIOLATIONS found ({tested}): see the report"
    if audit_status != 0:
        return audit_status, f"not judged: the audit could not run ({tested})"
    if stats.faults_done == 0:
        why = tested if stats.skipped else "the schedule held no fault"
        return EXIT_NOTHING_TESTED, (
            f"nothing tested: no fault struck ({why}); the audit found no violations, but "
            "only under the workload alone"
        )
    verdict = f"clean: {tested}, and the audit found no violations"
    unsafe, when = [], []
    if truncation_mode == "high-watermark":
        unsafe.append("high-watermark truncation")
        when.append(
            "it loses acknowledged writes when a leader and its successor fail in turn before "
            "a follower has caught up (`chaos scenario hw-data-loss` makes that order)"
        )
    if unclean:
        unsafe.append("unclean leader election")
        when.append(
            "it loses them when every in-sync replica is down and an out-of-sync one is elected"
        )
    if unsafe:
        verdict += (
            f"; that does not make {' or '.join(unsafe)} safe: {'; '.join(when)}; none of "
            "this run's faults produced those conditions"
        )
    return 0, verdict


class _Progress:
    """The run's console. Lines said (every strike, heal and skip has one of its own), and
    the progress line: rewritten in place every second on a terminal, printed every
    ``every_s`` seconds without one (a pipe, a file). A thread of its own keeps it going
    while the run waits on a strike, a heal or the final read."""

    def __init__(
        self,
        quiet: bool,
        acks: Callable[[], int],
        *,
        tty: bool | None = None,
        every_s: float = PROGRESS_EVERY_S,
    ) -> None:
        self._quiet = quiet
        self._acks = acks
        self._tty = sys.stdout.isatty() if tty is None else tty
        self._every_s = every_s
        self._lock = threading.Lock()
        self._shown = False
        """A progress line is on the terminal's last line, to be cleared before a say."""
        self._started: float | None = None
        self._last_shown: float | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.now = "starting"
        """What the run is doing, as the progress line shows it."""
        self.done = 0
        self.skipped = 0
        self.printed = 0
        """Progress lines shown so far."""

    def elapsed(self) -> float:
        return 0.0 if self._started is None else time.monotonic() - self._started

    def say(self, line: str) -> None:
        if self._quiet:
            return
        with self._lock:
            if self._shown:
                print("\r" + " " * _STATUS_WIDTH + "\r", end="")
                self._shown = False
            print(f"chaos: {line}", flush=True)

    def start(self, started: float) -> None:
        self._started = started
        if self._quiet:
            return
        self._thread = threading.Thread(target=self._tick, name="chaos-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        with self._lock:
            if self._shown:
                print(flush=True)  # end the line rewritten in place
                self._shown = False

    def line(self, rate: float, acks: int) -> str:
        return (
            f"{self.elapsed():6.1f} s  {rate:7.0f} acks/s  {acks:,} acked so far  "
            f"faults: {self.done} done, {self.skipped} skipped  now: {self.now}"
        )

    def _tick(self) -> None:
        last_acks, last_t = self._safe_acks(0), time.monotonic()
        while not self._stopping.wait(1.0):
            acks, t = self._safe_acks(last_acks), time.monotonic()
            rate = (acks - last_acks) / max(t - last_t, 1e-3)
            last_acks, last_t = acks, t
            self.show(self.line(rate, acks), t)

    def show(self, line: str, now: float) -> None:
        """The progress line at monotonic time ``now``: in place on a terminal; without
        one, a line of its own if ``every_s`` passed since the last one."""
        with self._lock:
            if self._tty:
                print(f"\r{line:<{_STATUS_WIDTH}}", end="", flush=True)
                self._shown = True
            elif self._last_shown is None or now - self._last_shown >= self._every_s:
                print(line, flush=True)
            else:
                return
            self._last_shown = now
            self.printed += 1

    def _safe_acks(self, otherwise: int) -> int:
        try:
            return self._acks()
        except OSError:  # a history file being created or rotated: count again next time
            return otherwise


class _Run:
    def __init__(self, settings: RunSettings, run: RunDir, replay: Schedule | None) -> None:
        self.settings = settings
        self.run = run
        self.replay = replay
        self.own_cluster = settings.data_dir is None and settings.project is None
        self.truncation_mode = (
            settings.truncation_mode or DEFAULT_TRUNCATION_MODE if self.own_cluster else None
        )
        """The cluster's ``replication.truncation.mode`` (None: a given one's, unread)."""
        self.backend: ClusterBackend | None = None
        self.workload: Workload | None = None
        self.copy_topic: str | None = None
        """The copiers' topic (transactions with copiers)."""
        self.topics: set[str] | None = None
        """The run's topics, once created: of a cluster it was given, only theirs (and the
        internal topics) are copied for the audit."""
        self.kafka_bootstrap: str | None = None
        """The brokers' Kafka listeners, for a workload of Kafka's clients."""
        self.fault: Fault | None = None
        self.paused: set[int] = set()
        self.zk: KazooClient | None = None
        self._ok_bytes: dict[Path, int] = {}
        self._acks = 0
        self._acks_lock = threading.Lock()
        self.progress = _Progress(settings.quiet, self._count_acks)
        self.planned_s = settings.duration_s
        """The schedule's fault window (``--duration``, or the replayed schedule's)."""
        self.times: dict[str, float] = {"begin": time.monotonic()}
        """Monotonic times the run's phases began (for the closing line on times)."""

    @property
    def transactions(self) -> bool:
        return self.settings.workload == TRANSACTIONS

    def say(self, line: str) -> None:
        self.progress.say(line)

    def say_at(self, line: str) -> None:
        """A line of the schedule, with the time into it."""
        self.progress.say(f"{self.progress.elapsed():6.1f} s  {line}")

    # -- the run ---------------------------------------------------------------------------

    def execute(self) -> int:
        settings, run = self.settings, self.run
        timeline = TimelineRecorder(run.timeline)
        try:
            self.backend = self._backend()
            self.kafka_bootstrap = self._kafka_bootstrap()
            if not self.own_cluster:  # its own settings: refused if not the mode asked for
                self.truncation_mode, line = given_cluster_truncation_mode(
                    self.backend,
                    settings.truncation_mode,
                    data_dir=settings.data_dir,
                    project=settings.project,
                )
                self.say(line)
            nemeses = resolve_nemeses(
                settings.nemeses,
                self.backend,
                compacted=settings.compacted,
                transactions=self.transactions,
            )
            schedule = self._schedule(nemeses)
            run.schedule.write_text(schedule.to_json())
            self.planned_s = schedule.duration_s
            self.say(
                f"{len(schedule.faults)} faults planned over {schedule.duration_s:g} s "
                f"({', '.join(schedule.nemeses) or 'none'}), seed {schedule.seed}; "
                f"run directory {run.path}"
            )
            if not schedule.faults:
                why = (
                    f"the replayed schedule {settings.replay} holds no fault"
                    if self.replay is not None
                    else no_fault_fits(
                        nemeses,
                        settings.duration_s,
                        settings.interval_s,
                        settings.session_timeout_ms / 1000,
                    )
                )
                self.say(
                    f"{why}. This run will test nothing (exit status {EXIT_NOTHING_TESTED} "
                    "if the audit finds nothing)"
                )
            self.zk = start_kazoo_client(self.backend.zookeeper_connect(), connect_timeout_s=20)
            tps = self._topics()
            self.topics = {tp.topic for tp in tps}
            self.workload = self._workload(tps)
            self.workload.start()
            self._wait_for_first_acks()
            self._run_schedule(schedule, timeline, tps)
            return self._finish(timeline, tps)
        except Interrupted:
            self.say("interrupted: healing every fault and stopping the workload")
            self._heal_everything(timeline)
            self._wind_down(final=False)
            self.progress.stop()
            run.merge_history()
            self.say(f"interrupted; what the run wrote is in {run.path}")
            return EXIT_CANNOT_RUN
        except BaseException:
            self._heal_everything(timeline)
            self._wind_down(final=False)
            raise
        finally:
            self.progress.stop()
            timeline.close()
            self._close_zookeeper()

    def _close_zookeeper(self) -> None:
        """Before the cluster stops: a client left open retries the stopped ZooKeeper,
        logging every refused connection, through the whole audit."""
        if self.zk is not None:
            with contextlib.suppress(Exception):
                stop_kazoo_client(self.zk)
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
            return start_local_cluster(
                settings,
                self.run.data,
                zookeepers=3 if self._wants_zookeeper_faults() else 1,
                small_log_dirs=self._wants("disk-full"),
                say=self.say,
            )
        if settings.backend == "docker":
            from chaos.docker_backend import DockerBackend

            if settings.data_dir is not None:
                raise BackendUnavailableError("--data-dir names a local cluster: --backend local")
            if settings.project is not None:
                return DockerBackend.attach(settings.project)
            return start_docker_cluster(
                settings,
                self.run.logs,
                zookeepers=3 if self._wants_zookeeper_faults() else 1,
                say=self.say,
            )
        raise BackendUnavailableError(
            f"unknown backend {settings.backend!r}: choose local or docker"
        )

    def _kafka_bootstrap(self) -> str | None:
        """The Kafka listeners a workload of Kafka's clients goes through (None for the
        gRPC one); a cluster without them is refused before anything else starts."""
        assert self.backend is not None
        if self.settings.client == GRPC:
            return None
        listeners = self.backend.kafka_bootstrap_servers()
        if listeners is None:
            raise BackendUnavailableError(
                f"--client {self.settings.client} goes through the brokers' Kafka protocol "
                f"listeners, and this {self.backend.name} cluster runs none (kafka.port): "
                "give one that does, or let chaos run start its own"
            )
        return listeners

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
            resolve_nemeses(
                self.replay.nemeses,
                self.backend,
                compacted=settings.compacted,
                transactions=self.transactions,
            )
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
        if self.transactions and settings.copiers > 0:
            self.copy_topic = f"{prefix}-{COPY_TOPIC_SUFFIX}"
            topics.append(self.copy_topic)
        config = {
            "min.insync.replicas": str(MIN_INSYNC_REPLICAS),
            "unclean.leader.election.enable": str(settings.unclean).lower(),
            **(COMPACTED_TOPIC_CONFIG if settings.compacted else {}),
        }
        # Written first: the audit must know which topics are compacted even if the run
        # stops right after creating them.
        self.run.record_topics(dict.fromkeys(topics, config))
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
            topics=sorted({tp.topic for tp in tps} - {self.copy_topic}),
            partitions=settings.partitions,
            producers=settings.producers,
            rate=settings.rate,
            compression_type=settings.compression_type,
            keys=settings.keys if settings.compacted else 0,
            tombstone_every=TOMBSTONE_EVERY if settings.compacted else 0,
            group_consumers=settings.consumers,
            zookeeper_session_timeout_ms=max(settings.session_timeout_ms, 4000),
            workload=settings.workload,
            transaction_records=settings.transaction_records,
            abort_probability=settings.abort_probability,
            transaction_timeout_ms=settings.transaction_timeout_ms,
            copiers=settings.copiers,
            copy_topic=self.copy_topic,
            client=settings.client,
            kafka_bootstrap=self.kafka_bootstrap,
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
            frozenset(tp.topic for tp in tps) if self.settings.compacted else frozenset(),
            {} if self.workload is None else self.workload.spec.transactional_ids(),
            self.run.history_parts,
        )
        started = time.monotonic()
        self.times["schedule"] = started
        self.progress.start(started)
        timeline.event("run-start", None)
        total = len(schedule.faults)
        for number, planned in enumerate(schedule.faults, start=1):
            self._wait_until(started + planned.at_s, "pause between faults")
            name = planned.nemesis
            late = time.monotonic() - started - planned.at_s
            due = (
                f" (due at {planned.at_s:.1f} s: the fault before took longer)" if late > 1 else ""
            )
            self.progress.now = f"striking {name}"
            timeline.event("strike", None, nemesis=name, hold_s=planned.hold_s)
            striking = time.monotonic()
            try:
                self.fault = nemesis_named(name).strike(ctx, planned.pick)
            except BackendUnavailableError:
                raise
            except Exception as e:  # a fault that could not be injected: on with the next
                reason = str(e) or type(e).__name__
                timeline.event("skipped", None, kind="info", nemesis=name, reason=reason)
                self.progress.skipped += 1
                self.say_at(f"fault {number}/{total}, {name}, skipped: {reason}{due}")
                continue
            fault = self.fault
            self.progress.done += 1
            detail = {"detail": fault.detail} if fault.detail else {}
            timeline.event("fault", fault.target, nemesis=name, hold_s=planned.hold_s, **detail)
            self.say_at(
                f"fault {number}/{total}: {fault} struck (the strike took "
                f"{time.monotonic() - striking:.1f} s){due}; held {planned.hold_s:g} s"
            )
            self._wait_until(time.monotonic() + planned.hold_s, f"{fault} held")
            self.progress.now = f"healing {fault}"
            healing = time.monotonic()
            self._heal_current(timeline)
            self.say_at(f"{fault} healed (in {time.monotonic() - healing:.1f} s)")
            self._wait_for_whole_isrs(tps, timeline)
        self._wait_until(started + schedule.duration_s, "pause after the last fault")
        timeline.event("run-end", None)
        self.times["schedule-end"] = time.monotonic()

    def _wait_until(self, until: float, doing: str) -> None:
        self.progress.now = doing
        while (left := until - time.monotonic()) > 0:
            time.sleep(min(left, 1.0))

    def _wait_for_whole_isrs(
        self, tps: Sequence[TopicPartition], timeline: TimelineRecorder
    ) -> None:
        """After a heal: until every ISR is whole again (``isr-whole`` in the timeline, with
        ``after_heal_s``), at most READY_TIMEOUT_S (then ``isr-not-whole``, and said)."""
        assert self.zk is not None
        healed = time.monotonic()
        self.progress.now = "waiting for every ISR to be whole"
        while True:
            try:
                missing = {str(tp): why for tp, why in under_replicated(self.zk, tps).items()}
            except Exception as e:  # ZooKeeper itself may be what was broken: look again
                missing = {"ZooKeeper": str(e) or type(e).__name__}
            waited = round(time.monotonic() - healed, 3)
            if not missing:
                timeline.event("isr-whole", None, after_heal_s=waited)
                self.say_at(f"every ISR whole {waited:.1f} s after the heal")
                return
            if waited >= READY_TIMEOUT_S:
                timeline.event("isr-not-whole", None, after_heal_s=waited, missing=missing)
                self.say_at(
                    f"not every ISR whole {READY_TIMEOUT_S:g} s after the heal ("
                    + ", ".join(f"{tp}: {why}" for tp, why in sorted(missing.items()))
                    + "); the next fault strikes anyway"
                )
                return
            time.sleep(0.25)

    def _heal_current(self, timeline: TimelineRecorder) -> None:
        fault, self.fault = self.fault, None
        if fault is not None:
            fault.heal()
            timeline.event("healed", fault.target, nemesis=fault.nemesis)

    def _finish(self, timeline: TimelineRecorder, tps: list[TopicPartition]) -> int:
        assert self.backend is not None
        assert self.zk is not None
        assert self.workload is not None
        run, settings = self.run, self.settings
        self._heal_everything(timeline)
        self.progress.now = "waiting for every ISR to be whole"
        self.say("healed; waiting for every ISR to be whole")
        missing = wait_for_full_isr(self.zk, tps, ISR_TIMEOUT_S)
        if missing:
            self.say(
                "not every ISR became whole within "
                f"{ISR_TIMEOUT_S:g} s: " + ", ".join(f"{tp}: {why}" for tp, why in missing.items())
            )
        self.progress.now = "stopping the producers"
        self.say("stopping the producers (they wait for their last outcomes)")
        self.workload.stop(consumers_too=False)
        if self.transactions:
            self._wait_for_transactions_to_end(timeline, tps)
        self.progress.now = "final read"
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
        self.say(f"final read: {read:,} records")
        for tp, why in unfinished.items():
            self.say(f"final read of {tp} incomplete: {why}")
        self.progress.now = "stopping the consumers" + (
            " and the cluster" if self.own_cluster else ""
        )
        problem = self._wind_down(final=True)
        self.progress.stop()
        lines = run.merge_history()
        stats = run_stats(run.path)
        self.say(f"history: {lines:,} lines")
        for line in stats.summary().splitlines():
            self.say(line)
        if problem is None and not run.broker_data_dirs():
            problem = f"no broker data dir in {run.data}"
        if problem is not None:
            print(
                f"chaos run: cannot audit: {problem}; the run's files are in {run.path}",
                flush=True,
            )
            return EXIT_CANNOT_RUN
        self.say("auditing")
        self.times["audit"] = time.monotonic()
        status = run.audit(master=settings.spark_master, spark=settings.spark)
        self.say(self._times_line())
        if not run.report.exists():
            print(
                f"chaos run: no report: the audit could not run (above); the run's files are "
                f"in {run.path}",
                flush=True,
            )
            return status if status != 0 else EXIT_CANNOT_RUN
        status, verdict = run_verdict(
            status,
            stats,
            truncation_mode=self.truncation_mode,
            unclean=settings.unclean,
        )
        print(f"chaos run: {verdict}", flush=True)
        print(f"chaos run: report {run.report}", flush=True)
        return status

    def _wait_for_transactions_to_end(
        self, timeline: TimelineRecorder, tps: list[TopicPartition]
    ) -> None:
        """Once the producers stopped: wait until any transaction they left open is past
        its timeout and an abort check has found it (:func:`transactions_settle_s`), then
        until every partition's last stable offset is its high watermark (every
        transaction on it ended, its markers written), at most UNSTABLE_TIMEOUT_S (said
        if not: a transaction left hanging)."""
        assert self.backend is not None
        settle_s = transactions_settle_s(self.settings, self.own_cluster)
        self.say(
            f"waiting {settle_s:g} s for the coordinators to abort what the producers left "
            f"open (transaction.timeout.ms {self.settings.transaction_timeout_ms} plus the "
            "abort check)"
        )
        self._wait_until(time.monotonic() + settle_s, "waiting for open transactions to end")
        waited = time.monotonic()
        deadline = waited + UNSTABLE_TIMEOUT_S
        while True:
            try:
                unstable = asyncio.run(
                    unstable_partitions(
                        self.backend.bootstrap_servers(), self.backend.zookeeper_connect(), tps
                    )
                )
            except Exception as e:  # a lookup that failed: look again until the deadline
                unstable = {tp: f"not looked up: {e}" for tp in tps}
            if not unstable or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        # The audit's hanging_txn takes the timeline's last event as the moment the logs
        # were last seen: this one, once the coordinators had their time.
        timeline.event(
            "transactions-settled",
            None,
            waited_s=round(settle_s + time.monotonic() - waited, 3),
            unstable={str(tp): why for tp, why in sorted(unstable.items())},
        )
        if not unstable:
            self.say("every partition's last stable offset is its high watermark")
            return
        self.say(
            f"transactions still open {settle_s + UNSTABLE_TIMEOUT_S:g} s after the producers "
            "stopped: " + ", ".join(f"{tp}: {why}" for tp, why in sorted(unstable.items()))
        )

    def _times_line(self) -> str:
        t = self.times
        now = time.monotonic()
        setup = t.get("schedule", now) - t["begin"]
        window = t.get("schedule-end", now) - t.get("schedule", now)
        wind_down = t.get("audit", now) - t.get("schedule-end", now)
        return (
            f"times: set-up {setup:.0f} s, fault window {window:.0f} s (planned "
            f"{self.planned_s:g} s), heal, final read and copies {wind_down:.0f} s, audit "
            f"{now - t.get('audit', now):.0f} s; {now - t['begin']:.0f} s in all"
        )

    # -- healing and stopping --------------------------------------------------------------

    def _heal_everything(self, timeline: TimelineRecorder) -> None:
        """Undo whatever may be broken, whatever went wrong before."""
        backend = self.backend
        if backend is None:
            return
        with contextlib.suppress(Exception):
            self._heal_current(timeline)
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

    def _wind_down(self, *, final: bool) -> str | None:
        """Stop the workload; stop a cluster the run started (cleanly), never one it was
        given; at the ``final`` end of a run, copy the data dirs the audit needs into the
        run (those of a cluster the run was given while it runs on: after the final read
        nothing of the run writes to them). Copies the logs. Returns why the data dirs
        could not be copied (the audit is then impossible), None if they were."""
        if self.workload is not None:
            self.workload.stop()
        backend = self.backend
        if backend is None:
            return None
        self._close_zookeeper()
        problem = None
        try:
            if self.own_cluster:
                backend.stop_cluster()
            if final and (not self.own_cluster or backend.name != "local"):
                backend.copy_data_dirs(
                    self.run.data, topics=None if self.own_cluster else self.topics
                )
        except Exception as e:
            problem = f"cannot copy the brokers' data dirs into {self.run.data}: {e}"
        try:
            backend.copy_logs(self.run.logs)
        except Exception as e:
            self.say(f"cannot copy the brokers' logs into {self.run.logs}: {e}")
        with contextlib.suppress(Exception):
            backend.dispose()
        return problem

    # -- acknowledgements ------------------------------------------------------------------

    def _count_acks(self) -> int:
        """``ok`` lines written so far, counted incrementally from the history parts (the
        live figure; the summary's comes from the merged history)."""
        with self._acks_lock:
            for part in self.run.history_parts.glob("*.jsonl"):
                seen = self._ok_bytes.get(part, 0)
                with part.open("rb") as f:
                    f.seek(seen)
                    chunk = f.read()
                end = chunk.rfind(b"\n") + 1
                # A write's line (its topic comes next), not a transaction's step.
                self._acks += chunk[:end].count(b'"type":"ok","topic"')
                self._ok_bytes[part] = seen + end
            return self._acks


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
