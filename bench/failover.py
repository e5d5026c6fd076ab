"""Failover time: from ``kill -9`` of a partition's leader to the first acknowledged
acks=all produce on its new leader, over repeated kills, next to the ZooKeeper session
timeout; then the same for clean leader moves: SIGTERM of the leader, whose controlled
shutdown has the controller move its leaderships before it exits (the goal: 200 ms).

The cluster is real: a ZooKeeper (tickTime 200 ms) and three broker processes, each running
its controller candidate, with ``zookeeper.session.timeout.ms`` :data:`SESSION_TIMEOUT_MS`
and the fetch settings of the integration tests (:data:`BROKER_OVERRIDES`). One topic, one
partition, RF 3, ``min.insync.replicas`` 2, created as Kafka's admin client does
(:func:`deploy.cluster_probe.create_topic`); the controller elects its leaders.

Each round:

1. wait until the leader named by the state znode serves the partition at that epoch and
   the ISR holds all three replicas;
2. produce (acks=-1) to that leader until one produce is acknowledged;
3. ``t0``, then SIGKILL the leader (:meth:`BrokerProcess.kill`);
4. like a client that refreshes its metadata, read the state znode and send one produce to
   the leader it names, every :data:`RETRY_BACKOFF_S` until a produce is acknowledged by a
   broker other than the killed one: ``t1`` is that acknowledgement. A produce gives up
   after :data:`PRODUCE_TIMEOUT_MS` (the request's purgatory timeout; the RPC deadline is
   a little longer);
5. check that the new state's leader epoch is the old one + 1, that the killed leader's
   last acknowledged record is below the new leader's first acknowledged offset, and
   restart the killed broker; the round ends when the ISR has all three replicas again.

The figure is ``t1 - t0``. Two timestamps split it: when this process's ZooKeeper watch
on ``/brokers/ids`` fired (the killed broker's session expired and ZooKeeper deleted its
registration: the same event the controller acts on), and the new state znode's mtime
(the controller has elected the new leader; ZooKeeper's clock is this machine's). Whether
the killed broker was also the controller is recorded: then a new controller is elected
first, from the same expiry.

gRPC channels use Kafka's client reconnect backoff (50 ms, at most 1 s) instead of gRPC's
(1 s, growing to 120 s), so a channel to a broker that just died does not make calls fail
long after the broker is back; every round opens fresh channels to all running brokers and
waits until they connect, as a producer holding metadata for the cluster has them.
"""

from __future__ import annotations

import math
import shutil
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import grpc
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import WatchedEvent

from bench.replication import BenchmarkError, brokers, wait_for_leader
from deploy.broker_process import BrokerProcess, stop_brokers
from deploy.cluster_probe import create_topic
from deploy.zookeeper import ZooKeeperConfig, ZooKeeperServer
from proto.records.record_batch import Record, encode_batch
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.zk import znodes
from proto.zk.sync_client import kazoo_client, read_partition_state, read_znode
from proto.zk.znode_reads import ZnodeRead, partition_state_read

TOPIC = "failover"
TP = TopicPartition(TOPIC, 0)
BROKER_IDS = (1, 2, 3)
ASSIGNMENT = {0: [1, 2, 3]}
SESSION_TIMEOUT_MS = 2000
BROKER_OVERRIDES = {
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "100",
    # The controller's preferred-replica rebalance (every 300 s by default) would move the
    # leader back to broker 1 at an arbitrary moment of some round: off.
    "auto.leader.rebalance.enable": "false",
}
TOPIC_CONFIG = {"min.insync.replicas": "2"}
TICK_TIME_MS = ZooKeeperConfig().tick_time_ms
"""The harness's ZooKeeper tickTime: sessions expire between the timeout and one tick
after it."""
PRODUCE_TIMEOUT_MS = 1500
RPC_DEADLINE_S = PRODUCE_TIMEOUT_MS / 1000 + 0.5
RETRY_BACKOFF_S = 0.02
FAILOVER_LIMIT_S = 60.0
"""A round fails (BenchmarkError) if no new leader acknowledges within this."""
REJOIN_LIMIT_S = 60.0
"""How long the restarted broker may take to be back in the ISR."""
_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
_ERROR_MARKERS = (" ERROR ", " CRITICAL ", "Traceback")


class Summary(NamedTuple):
    """Nearest-rank statistics of a list of durations, in seconds."""

    median: float
    p90: float
    min: float
    max: float

    @classmethod
    def of(cls, values: list[float]) -> Summary:
        ordered = sorted(values)
        p90 = ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]
        return cls(statistics.median(ordered), p90, ordered[0], ordered[-1])


@dataclass(frozen=True)
class Kill:
    """One round: the leader killed and how the partition came back."""

    round: int
    victim: int
    """The killed leader."""
    victim_was_controller: bool
    controller_after: int | None
    new_leader: int
    old_epoch: int
    new_epoch: int
    """The leader epoch of the state the acknowledging leader was named in."""
    failover_s: float
    """From just before the SIGKILL to the first acks=all acknowledgement by a new leader."""
    expiry_s: float | None
    """From the SIGKILL to this process's watch on ``/brokers/ids`` firing (None: it did not
    fire before the acknowledgement)."""
    elected_s: float
    """From the SIGKILL to the new state znode's mtime (ms resolution)."""
    attempts: int
    """Produce requests sent after the kill, the acknowledged one included."""
    errors: dict[str, int]
    """Why the other attempts failed: gRPC status or Produce error code, with counts."""
    rejoin_s: float
    """From restarting the killed broker to the ISR having all three replicas again."""


@dataclass(frozen=True)
class FailoverResult:
    kills: list[Kill]
    session_timeout_ms: int
    tick_ms: int
    broker_overrides: dict[str, str]
    topic_config: dict[str, str]
    log_findings: list[str]
    """ERROR/CRITICAL/traceback lines of the broker logs, tagged ``(run)`` or ``(shutdown)``
    (WARNINGs are not collected: followers and the controller lose a broker every round)."""
    wall_s: float
    moves: list[Kill] = field(default_factory=list)
    """Clean leader moves: SIGTERM of the leader (controlled shutdown) instead of SIGKILL,
    measured the same way, after the kills."""

    @property
    def moved(self) -> Summary | None:
        """From the SIGTERM to the first acknowledgement by the new leader."""
        return Summary.of([m.failover_s for m in self.moves]) if self.moves else None

    @property
    def failover(self) -> Summary:
        return Summary.of([k.failover_s for k in self.kills])

    @property
    def expiry(self) -> Summary | None:
        seen = [k.expiry_s for k in self.kills if k.expiry_s is not None]
        return Summary.of(seen) if seen else None

    @property
    def elected(self) -> Summary:
        return Summary.of([k.elected_s for k in self.kills])

    @property
    def median_over_session_timeout(self) -> float:
        return self.failover.median / (self.session_timeout_ms / 1000)


class _Attempt(NamedTuple):
    base_offset: int | None
    """The acknowledged base offset; None if the produce failed."""
    error: str
    acked: float
    """time.monotonic() when the answer came."""


class _Producer:
    """Plain synchronous gRPC Produce, acks=-1, one record per request, to any broker."""

    def __init__(self, addresses: Mapping[int, str]) -> None:
        self._channels = {
            i: grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)
            for i, address in addresses.items()
        }
        self._sent = 0

    def connect(self, timeout: float = 10.0) -> None:
        for i, channel in self._channels.items():
            try:
                grpc.channel_ready_future(channel).result(timeout=timeout)
            except grpc.FutureTimeoutError:
                raise BenchmarkError(f"cannot connect to broker {i} within {timeout} s") from None

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()

    def send(self, broker_id: int) -> _Attempt:
        channel = self._channels.get(broker_id)
        if channel is None:
            return _Attempt(None, f"no channel to broker {broker_id}", time.monotonic())
        self._sent += 1
        batch = encode_batch(
            [Record(key=None, value=b"failover %d" % self._sent, timestamp=int(time.time() * 1000))]
        )
        request = pb.ProduceRequest(acks=-1, timeout_ms=PRODUCE_TIMEOUT_MS, client_id="failover")
        request.topics.add(name=TOPIC).partitions.add(index=TP.partition, records=batch)
        try:
            response = pb_grpc.BrokerStub(channel).Produce(request, timeout=RPC_DEADLINE_S)
        except grpc.RpcError as err:
            return _Attempt(None, f"grpc {err.code().name}", time.monotonic())
        acked = time.monotonic()
        answers = [p for t in response.responses for p in t.partitions]
        if len(answers) != 1:
            raise BenchmarkError(f"produce to broker {broker_id}: unexpected response {response}")
        if answers[0].error_code != pb.NONE:
            return _Attempt(None, pb.ErrorCode.Name(answers[0].error_code), acked)
        return _Attempt(answers[0].base_offset, "", acked)


@contextmanager
def _producer(procs: Mapping[int, BrokerProcess]) -> Iterator[_Producer]:
    producer = _Producer({i: b.address for i, b in procs.items() if b.is_running})
    try:
        producer.connect()
        yield producer
    finally:
        producer.close()


_STATE = partition_state_read(TP)
_STATE_WITH_MTIME = ZnodeRead(_STATE.path, lambda data, stat: (_STATE.decode(data, stat), stat))


def _read_state(zk: KazooClient) -> tuple[znodes.PartitionState | None, int]:
    """The state znode and its mtime (ms since the epoch), or (None, 0)."""
    found = read_znode(zk, _STATE_WITH_MTIME)
    return (None, 0) if found is None else (found[0], int(found[1].mtime))


def _controller(zk: KazooClient) -> int | None:
    try:
        data, _ = zk.get(znodes.CONTROLLER_PATH)
    except NoNodeError:
        return None
    return znodes.decode_controller(data)


def _running(procs: Mapping[int, BrokerProcess]) -> dict[int, str]:
    return {i: b.address for i, b in procs.items() if b.is_running}


def _wait_for_full_isr(zk: KazooClient, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        state = read_partition_state(zk, TP)
        if state is not None and sorted(state.isr) == sorted(BROKER_IDS):
            return
        if time.monotonic() >= deadline:
            raise BenchmarkError(f"{TP}: ISR not back to {list(BROKER_IDS)} within {timeout} s")
        time.sleep(0.05)


def _acknowledged_before_kill(producer: _Producer, leader: int) -> int:
    """Produce to ``leader`` until it acknowledges; the acknowledged offset."""
    deadline = time.monotonic() + 10
    while True:
        attempt = producer.send(leader)
        if attempt.base_offset is not None:
            return attempt.base_offset
        if time.monotonic() >= deadline:
            raise BenchmarkError(f"leader {leader} acknowledges nothing: {attempt.error}")
        time.sleep(RETRY_BACKOFF_S)


def _kill_round(
    number: int, zk: KazooClient, procs: Mapping[int, BrokerProcess], *, clean: bool = False
) -> Kill:
    """One round; with ``clean``, SIGTERM instead of SIGKILL: the broker's controlled
    shutdown asks the controller to move its leaderships before it exits (sent from a
    thread, since stopping waits for the exit)."""
    before = wait_for_leader(zk, TP, _running(procs))
    if sorted(before.isr) != sorted(BROKER_IDS):
        raise BenchmarkError(f"round {number}: ISR {list(before.isr)} before the kill")
    victim = before.leader
    controller = _controller(zk)
    errors: Counter[str] = Counter()
    with _producer(procs) as producer:
        last_offset = _acknowledged_before_kill(producer, victim)
        expired: list[float] = []

        def on_brokers_changed(_: WatchedEvent) -> None:
            expired.append(time.monotonic())  # kazoo's thread; one-shot watch: once

        zk.get_children(znodes.BROKER_IDS_PATH, watch=on_brokers_changed)
        stopping = ThreadPoolExecutor(1)
        wall0 = time.time()
        t0 = time.monotonic()
        stopped = stopping.submit(procs[victim].stop if clean else procs[victim].kill)
        attempts = 0
        while True:
            if time.monotonic() - t0 > FAILOVER_LIMIT_S:
                raise BenchmarkError(
                    f"round {number}: no new leader acknowledged within {FAILOVER_LIMIT_S} s "
                    f"after killing broker {victim} (state {read_partition_state(zk, TP)}, "
                    f"failures {dict(errors)})"
                )
            state, mtime_ms = _read_state(zk)
            if state is None or state.leader == znodes.LEADER_NONE:
                errors["no leader in the state znode"] += 1
                time.sleep(RETRY_BACKOFF_S)
                continue
            attempts += 1
            attempt = producer.send(state.leader)
            if attempt.base_offset is not None:
                if state.leader != victim:
                    t1 = attempt.acked
                    break
                if not clean:
                    raise BenchmarkError(f"round {number}: killed broker {victim} acknowledged")
                # A leader shutting down cleanly serves until the controller moves it.
                last_offset = attempt.base_offset
                errors["acknowledged by the stopping leader"] += 1
                time.sleep(RETRY_BACKOFF_S)
                continue
            errors[attempt.error] += 1
            time.sleep(RETRY_BACKOFF_S)
        stopped.result()
        stopping.shutdown()
    new_epoch = state.leader_epoch
    if new_epoch != before.leader_epoch + 1:
        raise BenchmarkError(
            f"round {number}: leader epoch went from {before.leader_epoch} to {new_epoch} "
            f"(expected +1) when broker {victim} was killed; state {state}"
        )
    if attempt.base_offset <= last_offset:
        raise BenchmarkError(
            f"round {number}: new leader {state.leader} acknowledged at offset "
            f"{attempt.base_offset}, but the old leader had acknowledged offset {last_offset}"
        )
    restart = time.monotonic()
    procs[victim].start(zk)
    _wait_for_full_isr(zk, REJOIN_LIMIT_S)
    return Kill(
        round=number,
        victim=victim,
        victim_was_controller=controller == victim,
        controller_after=_controller(zk),
        new_leader=state.leader,
        old_epoch=before.leader_epoch,
        new_epoch=new_epoch,
        failover_s=t1 - t0,
        expiry_s=expired[0] - t0 if expired and expired[0] <= t1 else None,
        elected_s=mtime_ms / 1000 - wall0,
        attempts=attempts,
        errors=dict(errors),
        rejoin_s=time.monotonic() - restart,
    )


def _log_findings(procs: Mapping[int, BrokerProcess], run_sizes: Mapping[int, int]) -> list[str]:
    """ERROR/CRITICAL/traceback lines of the broker logs, each tagged ``broker N (run):`` or
    ``broker N (shutdown):``: ``run_sizes`` are the logs' sizes just before the final stop."""
    findings = []
    for i, broker in procs.items():
        try:
            data = broker.log_path.read_bytes()
        except OSError as err:
            findings.append(f"broker {i}: cannot read its log: {err}")
            continue
        for phase, part in (("run", data[: run_sizes[i]]), ("shutdown", data[run_sizes[i] :])):
            findings += [
                f"broker {i} ({phase}): {line}"
                for line in part.decode(errors="replace").splitlines()
                if any(marker in line for marker in _ERROR_MARKERS)
            ]
    return findings


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def measure(
    work_dir: Path, *, kills: int = 15, moves: int = 15, keep: bool = False
) -> FailoverResult:
    """Start the cluster, kill the partition's leader ``kills`` times, then stop it cleanly
    (SIGTERM) ``moves`` times, stop, clean up.

    The temporary directory (ZooKeeper, broker data and logs) is removed after a successful
    run unless ``keep``, and kept, with its path in the error, after a failed one.
    """
    wall_start = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="failover-", dir=work_dir))
    results: list[Kill] = []
    moved: list[Kill] = []
    try:
        with ExitStack() as stack:
            server = stack.enter_context(
                ZooKeeperServer(ZooKeeperConfig(data_dir=root / "zookeeper"))
            )
            zk = stack.enter_context(kazoo_client(server.connect_string))
            procs = stack.enter_context(
                brokers(root, zk, server.connect_string, BROKER_IDS, BROKER_OVERRIDES)
            )
            create_topic(zk, TOPIC, ASSIGNMENT, TOPIC_CONFIG)
            wait_for_leader(zk, TP, _running(procs))
            _wait_for_full_isr(zk, REJOIN_LIMIT_S)
            for number in range(1, kills + 1):
                results.append(_kill_round(number, zk, procs))
                k = results[-1]
                print(
                    f"failover: round {number}: killed {k.victim}"
                    f"{' (controller)' if k.victim_was_controller else ''}, new leader "
                    f"{k.new_leader} epoch {k.old_epoch}->{k.new_epoch}, expiry "
                    f"{_ms(k.expiry_s)}, elected {_ms(k.elected_s)}, first ack "
                    f"{_ms(k.failover_s)}, {k.attempts} attempts {k.errors}, rejoin "
                    f"{_ms(k.rejoin_s)}",
                    flush=True,
                )
            for number in range(1, moves + 1):
                moved.append(_kill_round(number, zk, procs, clean=True))
                m = moved[-1]
                print(
                    f"failover: clean move {number}: SIGTERM to {m.victim}"
                    f"{' (controller)' if m.victim_was_controller else ''}, new leader "
                    f"{m.new_leader} epoch {m.old_epoch}->{m.new_epoch}, first ack "
                    f"{_ms(m.failover_s)}, {m.attempts} attempts {m.errors}",
                    flush=True,
                )
            run_sizes = {i: _size(b.log_path) for i, b in procs.items()}
            stop_brokers(procs.values())
        findings = _log_findings(procs, run_sizes)
    except BaseException as err:
        err.add_note(f"bench/failover: kept {root} (ZooKeeper, broker data and logs)")
        raise
    if keep:
        print(f"failover: kept {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return FailoverResult(
        kills=results,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        tick_ms=TICK_TIME_MS,
        broker_overrides=dict(BROKER_OVERRIDES),
        topic_config=dict(TOPIC_CONFIG),
        log_findings=findings,
        wall_s=time.perf_counter() - wall_start,
        moves=moved,
    )


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"
