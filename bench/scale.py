"""Scale: how the cluster's control paths grow with the partition count.

Three broker processes, each running its controller candidate, and ZooKeeper on this
machine; a fresh cluster for each size N of :data:`DEFAULT_SIZES`. One topic of N
partitions, RF 3 (every broker hosts N replicas and leads about N/3), created through the
Kafka listener as a user's admin client does (confluent-kafka's ``AdminClient``, a
CreateTopics). For each size, in order, each step under its own deadline (a step that does
not finish is reported as such and ends that size, rather than hanging the run):

1. ``create``: from the CreateTopics to every partition's state znode naming a live leader
   and a full ISR (all three replicas);
2. each broker's RSS, open files and threads (``/proc``), and the latency of a Metadata
   request for all topics (gRPC, every broker, median of :data:`METADATA_ROUNDS`);
3. ``perf produce`` (acks=all, its defaults) to the N-partition topic and to a
   3-partition topic beside it;
4. ``controlled shutdown``: SIGTERM to a broker that is not the controller; the times until
   no state znode names it leader and until its process exited;
5. ``rejoin``: that broker restarted; the time until every ISR is full again;
6. ``controller failover``: SIGKILL of the controller's broker; the time until every
   partition is led by a live broker, beside ``zookeeper.session.timeout.ms``; and the new
   controller's state load, from its own log: its ``event=elected`` line to its
   ``event=failover_done`` line (controller/kafka_controller.py, Kafka's
   ``onControllerFailover``: the cluster read from ZooKeeper, partitions brought online,
   every live broker told).

Every broker hosts N replicas, so its budget is 2 descriptors per partition
(broker/log/resource_limits.py); when that passes this process's hard ``RLIMIT_NOFILE`` the
size still runs, at the hard limit, and says so beside its measured open files.
``max.broker.partitions`` (default 1,000) is raised to N.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

import grpc
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from broker.log.resource_limits import default_max_open_segment_files, fds_needed
from deploy.broker_process import BrokerProcess, BrokerSpec, start_brokers, stop_brokers
from deploy.cluster_probe import partition_states, wait_until
from deploy.zookeeper import ZooKeeperConfig, ZooKeeperServer
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.zk import znodes
from proto.zk.sync_client import kazoo_client

DEFAULT_SIZES = (1_000, 10_000, 30_000)
TOPIC = "scale"
SMALL_TOPIC = "scale-3"
BROKER_IDS = (1, 2, 3)
RF = 3
SESSION_TIMEOUT_MS = 6000
BROKER_OVERRIDES = {
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    # A preferred-replica rebalance mid-step would move leaders the step is counting.
    "auto.leader.rebalance.enable": "false",
    # Kafka's default is 1 thread; a broker of thousands of partitions restarts on more
    # (docs/storage.md), as Kafka's operators set it.
    "num.recovery.threads.per.data.dir": "4",
}
METADATA_ROUNDS = 5
IDLE_SECONDS = 5.0
PRODUCE_RECORDS = 200_000
_POLL_S = 0.25
"""Between polls (each reads every state znode and asks every live broker)."""
_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def step_deadline_s(partitions: int) -> float:
    """How long one step of a size may take: generous, growing with the size."""
    return 120.0 + partitions * 0.06


@dataclass
class Resources:
    rss_mib: float
    open_files: int
    threads: int
    idle_cpu_pct: float | None = None
    """% of one core over :data:`IDLE_SECONDS` with nothing produced or changed: what
    keeping N partitions replicated costs by itself (the followers' fetches)."""


@dataclass
class SizeResult:
    partitions: int
    loadavg_start: float
    not_run: str | None = None
    """Why the size was not run at all."""
    fd_note: str | None = None
    """Set when the broker's descriptor budget passes the hard limit here."""
    steps: dict[str, float] = field(default_factory=dict)
    """Step name -> seconds, for the steps that finished."""
    did_not_finish: str | None = None
    """The step that did not finish within its deadline (and what it had reached)."""
    resources: dict[int, Resources] = field(default_factory=dict)
    metadata_ms: float | None = None
    produce: dict[int, float] = field(default_factory=dict)
    """Partitions of the topic produced to -> records/s (``perf produce``, acks=all)."""
    controller_load_s: float | None = None
    load_line: str = ""
    loadavg_end: float = 0.0
    wall_s: float = 0.0
    log_findings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ScaleResult:
    sizes: list[SizeResult]
    session_timeout_ms: int
    broker_overrides: dict[str, str]


class StepTimeout(Exception):
    pass


def _loadavg() -> float:
    return os.getloadavg()[0]


def _poll(
    what: str, check: Callable[[], tuple[bool, str]], timeout: float, started: float
) -> float:
    """Poll ``check`` (done, progress) until done; seconds since ``started``."""
    deadline = started + timeout
    progress = ""
    while True:
        done, progress = check()
        if done:
            return time.monotonic() - started
        if time.monotonic() >= deadline:
            raise StepTimeout(f"{what}: did not finish within {timeout:.0f} s ({progress})")
        time.sleep(_POLL_S)


def _serving(
    procs: Mapping[int, BrokerProcess], live: set[int], states: list[znodes.PartitionState | None]
) -> set[int]:
    """The partitions whose state znode names a live leader that serves them: one Metadata
    request (the topic only) to each live broker, whose answer shows itself leading at the
    state's epoch, hosting the replica (a broker answers a new partition's leader from the
    UpdateMetadata the controller sends after its LeaderAndIsr was answered)."""
    serving: set[int] = set()
    for broker_id in live:
        broker = procs[broker_id]
        try:
            with grpc.insecure_channel(broker.address) as channel:
                meta = pb_grpc.BrokerStub(channel).Metadata(
                    pb.MetadataRequest(topics=[TOPIC]), timeout=30
                )
        except grpc.RpcError:
            continue
        for topic in meta.topics:
            for part in topic.partitions:
                index = part.partition_index
                state = states[index] if 0 <= index < len(states) else None
                if (
                    state is not None
                    and state.leader == broker_id
                    and part.leader_id == broker_id
                    and part.leader_epoch == state.leader_epoch
                    and broker_id not in part.offline_replicas
                ):
                    serving.add(index)
    return serving


def _hosted(procs: Mapping[int, BrokerProcess], live: set[int]) -> dict[int, int]:
    """Partition directories of the topic in each live broker's data dir."""
    pattern = re.compile(rf"^{re.escape(TOPIC)}-\d+$")
    out = {}
    for broker_id in live:
        with os.scandir(procs[broker_id].spec.data_dir) as entries:
            out[broker_id] = sum(1 for e in entries if pattern.match(e.name))
    return out


def _all_led_full(
    zk: KazooClient, procs: Mapping[int, BrokerProcess], partitions: int, live: set[int]
) -> tuple[bool, str]:
    """Every partition served by its leader, its ISR all RF replicas in the state znode
    (which a controller writes at creation before any follower has its replica) and every
    replica's directory made on its broker."""
    states = partition_states(zk, TOPIC, partitions)
    full = sum(1 for s in states if s is not None and len(set(s.isr)) == RF)
    serving = len(_serving(procs, live, states))
    hosted = _hosted(procs, live)
    done = serving == partitions and full == partitions and min(hosted.values()) >= partitions
    return done, (
        f"{serving} of {partitions} served by their leader, {full} with full ISR, "
        f"replica directories per broker {hosted}"
    )


def _all_led(
    zk: KazooClient, procs: Mapping[int, BrokerProcess], partitions: int, live: set[int]
) -> tuple[bool, str]:
    states = partition_states(zk, TOPIC, partitions)
    serving = len(_serving(procs, live, states))
    return serving == partitions, f"{serving} of {partitions} served by a live leader"


def _leads_nothing(zk: KazooClient, partitions: int, victim: int) -> tuple[bool, str]:
    states = partition_states(zk, TOPIC, partitions)
    leading = sum(1 for s in states if s is not None and s.leader == victim)
    return leading == 0, f"broker {victim} still leads {leading} (state znodes)"


def _controller(zk: KazooClient) -> int | None:
    try:
        data, _ = zk.get(znodes.CONTROLLER_PATH)
    except NoNodeError:
        return None
    return znodes.decode_controller(data)


def _resources(pid: int) -> Resources:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return Resources(
        rss_mib=int(fields["VmRSS"].split()[0]) / 1024,
        open_files=len(os.listdir(f"/proc/{pid}/fd")),
        threads=int(fields["Threads"]),
    )


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from ``/proc/<pid>/stat`` (fields 14 and 15, after the
    parenthesised command name)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _idle_cpu_pct(pids: Mapping[int, int]) -> dict[int, float]:
    """Each broker's CPU over :data:`IDLE_SECONDS` of an idle cluster, % of one core."""
    before = {i: _cpu_seconds(pid) for i, pid in pids.items()}
    t0 = time.monotonic()
    time.sleep(IDLE_SECONDS)  # a measurement window, not a wait for a condition
    elapsed = time.monotonic() - t0
    return {i: (_cpu_seconds(pid) - before[i]) / elapsed * 100 for i, pid in pids.items()}


def _metadata_ms(procs: Mapping[int, BrokerProcess]) -> float:
    """Median latency of a Metadata request for all topics, over every broker."""
    timings = []
    for broker in procs.values():
        with grpc.insecure_channel(broker.address) as channel:
            stub = pb_grpc.BrokerStub(channel)
            stub.Metadata(pb.MetadataRequest(), timeout=60)  # connect and warm
            for _ in range(METADATA_ROUNDS):
                t0 = time.perf_counter()
                stub.Metadata(pb.MetadataRequest(), timeout=60)
                timings.append((time.perf_counter() - t0) * 1000)
    return statistics.median(timings)


def _create_topics(bootstrap: str, topics: Mapping[str, int], timeout: float) -> None:
    """CreateTopics through the Kafka listener, as a user's admin client sends it (in a
    subprocess: librdkafka may crash or hang); returns once the request is answered."""
    script = (
        "import json, sys\n"
        "from confluent_kafka.admin import AdminClient, NewTopic\n"
        "admin = AdminClient({'bootstrap.servers': sys.argv[1]})\n"
        "topics = json.loads(sys.argv[2])\n"
        "futures = admin.create_topics([NewTopic(t, num_partitions=n, replication_factor=3)"
        " for t, n in topics.items()], operation_timeout=0, request_timeout=float(sys.argv[3]))\n"
        "for f in futures.values(): f.result(timeout=float(sys.argv[3]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, bootstrap, json.dumps(dict(topics)), str(timeout)],
        capture_output=True,
        text=True,
        timeout=timeout + 10,
        check=False,
    )
    if done.returncode != 0:
        raise StepTimeout(f"CreateTopics failed: {done.stderr.strip()[-500:]}")


def _perf_produce(bootstrap: str, topic: str, timeout: float) -> float:
    """records/s of ``minibroker perf produce`` (acks=all, its defaults)."""
    done = subprocess.run(
        [sys.executable, "-m", "client.cli", "perf", "produce", topic, "--num-records",
         str(PRODUCE_RECORDS), "--json", "--bootstrap-server", bootstrap],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise StepTimeout(f"perf produce to {topic} failed: {done.stderr.strip()[-500:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["records_per_s"])


def _log_time(line: str) -> float | None:
    m = _LOG_TIME.match(line)
    if m is None:
        return None
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def controller_load_s(log_text: str) -> tuple[float, str] | None:
    """From the last ``controller event=elected`` line to the ``event=failover_done`` line
    after it: the new controller's state load (seconds, and the done line)."""
    elected: float | None = None
    found: tuple[float, str] | None = None
    for line in log_text.splitlines():
        if "controller event=elected " in line or line.endswith("controller event=elected"):
            elected = _log_time(line)
        elif "controller event=failover_done " in line and elected is not None:
            done = _log_time(line)
            if done is not None:
                found = (done - elected, line.split("event=", 1)[1])
    return found


def _log_findings(procs: Iterable[BrokerProcess]) -> list[str]:
    findings = []
    for broker in procs:
        try:
            text = broker.log_path.read_text(errors="replace")
        except OSError:
            continue
        findings += [
            f"broker {broker.broker_id}: {line}"
            for line in text.splitlines()
            if " ERROR " in line or " CRITICAL " in line or "Traceback" in line
        ]
    return findings


def _measure_size(work_dir: Path, partitions: int, keep: bool) -> SizeResult:
    result = SizeResult(partitions=partitions, loadavg_start=_loadavg())
    per_broker = partitions * RF // len(BROKER_IDS)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # At most one open segment file per replica, and never more than the pool's bound.
    needed = fds_needed(min(per_broker, default_max_open_segment_files(hard)))
    if 0 <= hard < needed:
        result.fd_note = (
            f"each broker's descriptor budget is {needed:,} (open segment files + "
            f"{fds_needed(0):,}), over the hard RLIMIT_NOFILE of {hard:,} here (it cannot "
            "be raised in this container): run at that limit, see the open files measured"
        )
    wall0 = time.monotonic()
    deadline = step_deadline_s(partitions)
    root = Path(tempfile.mkdtemp(prefix=f"scale-{partitions}-", dir=work_dir))
    overrides = {**BROKER_OVERRIDES, "max.broker.partitions": str(max(per_broker + 10, 1000))}
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    nofile = None if soft < 0 or soft >= needed + 512 else (needed + 4096 if hard < 0 else hard)
    procs: dict[int, BrokerProcess] = {}
    ok = False
    try:
        with ExitStack() as stack:
            server = stack.enter_context(
                ZooKeeperServer(ZooKeeperConfig(data_dir=root / "zookeeper"))
            )
            zk = stack.enter_context(kazoo_client(server.connect_string))
            procs = {
                i: BrokerProcess(
                    BrokerSpec(
                        i, root / f"broker-{i}", server.connect_string, kafka_port=0,
                        overrides=dict(overrides), nofile_limit=nofile,
                    )
                )
                for i in BROKER_IDS
            }  # fmt: skip
            start_brokers(procs.values(), zk)
            stack.callback(stop_brokers, procs.values())
            try:
                _steps(result, zk, procs, partitions, deadline)
            except StepTimeout as err:
                result.did_not_finish = str(err)
                print(f"scale {partitions}: {err}", flush=True)
            for i, broker in procs.items():
                if broker.pid is not None and i not in result.resources:
                    result.resources[i] = _resources(broker.pid)
        result.log_findings = _log_findings(procs.values())
        ok = True
    finally:
        result.loadavg_end = _loadavg()
        result.wall_s = time.monotonic() - wall0
        if ok and not keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"scale {partitions}: kept {root}", flush=True)
    return result


def _steps(
    result: SizeResult,
    zk: KazooClient,
    procs: dict[int, BrokerProcess],
    partitions: int,
    deadline: float,
) -> None:
    n = partitions
    every = set(procs)
    bootstrap = ",".join(b.kafka_address or "" for b in procs.values())
    grpc_bootstrap = ",".join(b.address for b in procs.values())

    def note(step: str, seconds: float) -> None:
        result.steps[step] = seconds
        print(f"scale {n}: {step} {seconds:.1f} s (load {_loadavg():.1f})", flush=True)

    t0 = time.monotonic()
    _create_topics(bootstrap, {TOPIC: n, SMALL_TOPIC: 3}, timeout=deadline)
    note("create_accepted", time.monotonic() - t0)
    note("create", _poll("create", lambda: _all_led_full(zk, procs, n, every), deadline, t0))

    pids = {i: b.pid for i, b in procs.items() if b.pid is not None}
    idle = _idle_cpu_pct(pids)
    result.resources = {
        i: replace(_resources(pid), idle_cpu_pct=idle[i]) for i, pid in pids.items()
    }
    result.metadata_ms = _metadata_ms(procs)
    print(f"scale {n}: metadata {result.metadata_ms:.1f} ms, {result.resources}", flush=True)
    result.produce[n] = _perf_produce(grpc_bootstrap, TOPIC, deadline)
    result.produce[3] = _perf_produce(grpc_bootstrap, SMALL_TOPIC, deadline)
    print(f"scale {n}: produce {result.produce}", flush=True)

    controller = _controller(zk)
    victim = next(i for i in sorted(procs) if i != controller)
    stopping = ThreadPoolExecutor(1)
    t0 = time.monotonic()
    exited = stopping.submit(lambda: (procs[victim].stop(timeout=deadline), time.monotonic())[1])
    note(
        "shutdown_leads_nothing",
        _poll("controlled shutdown", lambda: _leads_nothing(zk, n, victim), deadline, t0),
    )
    try:
        note("shutdown_exited", exited.result(timeout=deadline) - t0)
    except TimeoutError:
        raise StepTimeout(f"controlled shutdown: not exited within {deadline:.0f} s") from None
    stopping.shutdown()

    t0 = time.monotonic()
    procs[victim].start(zk, timeout=deadline)
    note("rejoin", _poll("rejoin", lambda: _all_led_full(zk, procs, n, every), deadline, t0))

    controller = _controller(zk)
    if controller is None:
        raise StepTimeout("no controller before the failover step")
    log_offset = {i: b.log_path.stat().st_size for i, b in procs.items()}
    t0 = time.monotonic()
    procs[controller].kill()
    live = every - {controller}
    note(
        "failover_all_led",
        _poll("controller failover", lambda: _all_led(zk, procs, n, live), deadline, t0),
    )
    new = _controller(zk)
    if new is not None and new in procs:
        log_path = procs[new].log_path

        def loaded() -> tuple[float, str] | None:
            with log_path.open("rb") as f:
                f.seek(log_offset[new])
                return controller_load_s(f.read().decode(errors="replace"))

        load = wait_until(loaded, 30.0)
        if load is not None:
            result.controller_load_s, result.load_line = load
            print(f"scale {n}: controller {new} state load {load[0]:.2f} s: {load[1]}")


def measure(
    work_dir: Path, sizes: Iterable[int] = DEFAULT_SIZES, keep: bool = False
) -> ScaleResult:
    """Each size on a fresh cluster, smallest first; a size's temporary directory is kept
    (and named) after a failure, or with ``keep``."""
    out = []
    for n in sizes:
        print(f"scale {n}: starting (load {_loadavg():.1f})", flush=True)
        out.append(_measure_size(work_dir, n, keep))
    return ScaleResult(out, SESSION_TIMEOUT_MS, dict(BROKER_OVERRIDES))
