"""Replicated produce throughput and latency: 3 brokers, RF 3, acks=all, one producer.

The cluster is real: a ZooKeeper and three broker processes, with their default (Kafka-like)
settings: followers long-poll the leader (``replica.fetch.wait.max.ms`` 500,
``replica.fetch.min.bytes`` 1) and nothing is fsynced (``log.flush.interval.messages`` unset).
Each broker runs its controller candidate; the topic is created as Kafka's admin client does
(:func:`create_topic` writes ``/brokers/topics/<t>``), and the elected controller makes the
first replica of each partition its leader: partitions 0, 1, 2 led by brokers 1, 2, 3, every
replica in the ISR. The producer starts once each leader serves its partition at the epoch
of its state znode (:func:`wait_for_leader`).

This process is the producer: one grpc.aio channel per partition leader on a uvloop loop, batches of
100-byte records pre-encoded to just under 16 KiB (Kafka's default ``batch.size``), one batch
per Produce request, acks=-1. ``in_flight`` requests per partition are kept outstanding
(Kafka's ``max.in.flight.requests.per.connection``: each leader leads one partition, so a
connection carries one partition's requests). Requests sent during the warm-up are checked
like all others but left out of the figures. A request's latency is from the call to the
acknowledged response.

The run fails loudly (:class:`BenchmarkError`) on any error code, offsets that do not tile
each partition from 0 without gap or overlap, an ISR that shrank during the run, replicas
that disagree on their record count once the brokers have stopped, or a broker that did not
exit cleanly. Broker logs are scanned for WARNING, ERROR and tracebacks, which are reported.

The cluster helpers (:func:`zookeeper`, :func:`brokers`, :func:`wait_for_leader`, and
deploy.cluster_probe's :func:`create_topic`) are shared with :mod:`bench.failover`; both
reach ZooKeeper through :mod:`proto.zk.sync_client`.
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import NamedTuple

import grpc
import uvloop
from kazoo.client import KazooClient

from bench.log_append import BATCH_BYTES, RECORD_VALUE_BYTES
from deploy.broker_process import BrokerProcess, BrokerSpec, start_brokers, stop_brokers
from deploy.cluster_probe import create_topic, leader_serving
from deploy.zookeeper import ZooKeeperConfig, ZooKeeperServer
from proto.config.broker_config import BrokerConfig
from proto.records.record_batch import Record, encode_batch, scan_batches
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.zk import znodes
from proto.zk.sync_client import kazoo_client, read_partition_state

TOPIC = "bench"
ASSIGNMENT = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
"""Partition -> replicas, the first one the leader: each broker leads one partition."""
BROKER_IDS = (1, 2, 3)
ACKS = -1
PRODUCE_TIMEOUT_MS = 30_000
"""Kafka's producer ``request.timeout.ms``; also the broker's produce purgatory timeout."""
BATCH_POOL = 16
"""Distinct pre-encoded batches, sent in turn (the payload is random bytes, so no two
batches of the pool are alike)."""
_LOG_MARKERS = (" WARNING ", " ERROR ", " CRITICAL ", "Traceback")


class BenchmarkError(RuntimeError):
    """The run produced no trustworthy figure: an error, a lost record, a replica behind."""


class Latency(NamedTuple):
    """Produce request latencies in milliseconds (nearest-rank percentiles)."""

    p50: float
    p95: float
    p99: float
    max: float

    @classmethod
    def of(cls, seconds: list[float]) -> Latency:
        ordered = sorted(seconds)

        def rank(q: float) -> float:
            return ordered[max(0, math.ceil(q * len(ordered)) - 1)] * 1000

        return cls(rank(0.50), rank(0.95), rank(0.99), ordered[-1] * 1000)


@dataclass(frozen=True)
class ReplicationResult:
    """What one run measured, and how."""

    records: int
    """Records acknowledged from requests sent after the warm-up."""
    requests: int
    """Produce requests (one batch each) sent after the warm-up."""
    warmup_s: float
    window_s: float
    """From the end of the warm-up to the last acknowledgement."""
    records_per_batch: int
    batch_bytes: int
    in_flight: int
    """Produce requests outstanding at once, over all partitions."""
    latency: Latency
    per_second: tuple[int, int, int]
    """Slowest, median and fastest whole second of the window, in records/s."""
    records_on_disk: int
    """Records in the partitions' files after the run, warm-up included: every replica of a
    partition holds exactly its acknowledged records, so this is one replica set's total."""
    cpu_percent: dict[str, float]
    """CPU time over the measured window, % of one core, by process."""
    log_findings: list[str]
    """WARNING/ERROR/traceback lines of the broker logs, each tagged ``broker N (run):`` or
    ``broker N (shutdown):`` by when it was written."""
    wall_s: float
    """The whole run: start-up, warm-up, measurement, checks and shutdown."""
    broker_settings: dict[str, str] = field(default_factory=dict)

    @property
    def records_per_s(self) -> float:
        return self.records / self.window_s

    @property
    def value_mb_s(self) -> float:
        """Record values only (100 bytes each), as Kafka's published benchmarks count."""
        return self.records * RECORD_VALUE_BYTES / 1e6 / self.window_s

    @property
    def batch_mb_s(self) -> float:
        """Whole v2 batches, headers and record framing included: the bytes each log writes."""
        return self.requests * self.batch_bytes / 1e6 / self.window_s


class _Ack(NamedTuple):
    partition: int
    base_offset: int
    records: int
    sent: float
    acked: float


@dataclass
class _ProduceRun:
    acks: list[_Ack]
    measure_start: float
    cpu_start: dict[str, float]
    cpu_end: dict[str, float]
    end: float


def make_batches(count: int = BATCH_POOL) -> tuple[list[bytes], int]:
    """``count`` v2 batches of 100-byte random records, as many as fit in 16 KiB each, with
    the current time as CreateTime; and the records per batch."""
    now_ms = int(time.time() * 1000)
    per_batch = 1
    while (
        len(encode_batch([Record(None, bytes(RECORD_VALUE_BYTES), now_ms)] * (per_batch + 1)))
        <= BATCH_BYTES
    ):
        per_batch += 1
    batches = [
        encode_batch(
            [Record(None, os.urandom(RECORD_VALUE_BYTES), now_ms) for _ in range(per_batch)]
        )
        for _ in range(count)
    ]
    return batches, per_batch


# -- the cluster -----------------------------------------------------------------------------


LEADER_TIMEOUT_S = 30.0
"""How long a new topic's partitions may take to get a serving leader: the controller is
elected once the brokers have registered, then it writes the state znodes and sends
LeaderAndIsr."""
_POLL_S = 0.02


@contextmanager
def brokers(
    root: Path,
    zk: KazooClient,
    connect: str,
    broker_ids: Iterable[int] = BROKER_IDS,
    overrides: Mapping[str, str] | None = None,
) -> Iterator[dict[int, BrokerProcess]]:
    """Broker processes under ``root`` (the harness's :func:`start_brokers`), all
    registered; every one still running is stopped at once on exit (:func:`stop_brokers`)."""
    procs = {
        i: BrokerProcess(
            BrokerSpec(i, root / f"broker-{i}", connect, overrides=dict(overrides or {}))
        )
        for i in broker_ids
    }
    start_brokers(procs.values(), zk)
    try:
        yield procs
    finally:
        stop_brokers(procs.values())


# -- topics and leaders, as the controller makes them ----------------------------------------


def wait_for_leader(
    zk: KazooClient,
    tp: TopicPartition,
    addresses: Mapping[int, str],
    timeout: float = LEADER_TIMEOUT_S,
) -> znodes.PartitionState:
    """Wait until :func:`leader_serving` finds a serving leader of ``tp``; its state."""
    deadline = time.monotonic() + timeout
    while (state := leader_serving(zk, tp, addresses)) is None:
        if time.monotonic() >= deadline:
            raise BenchmarkError(
                f"{tp}: no leader serving it within {timeout:.0f} s (state znode: "
                f"{read_partition_state(zk, tp)}); see the broker logs"
            )
        time.sleep(_POLL_S)
    return state


def _cpu_seconds(pids: Mapping[str, int | None]) -> dict[str, float]:
    """utime + stime of each process from /proc, and this process's own CPU time."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {"producer (this process)": time.process_time()}
    for name, pid in pids.items():
        try:
            # The command name (field 2) may contain spaces; the fields after it do not.
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        out[name] = (int(stat[11]) + int(stat[12])) / ticks
    return out


# -- the producer ----------------------------------------------------------------------------


async def _produce(
    leaders: Mapping[int, str],
    batches: list[bytes],
    records_per_batch: int,
    *,
    duration_s: float,
    in_flight: int,
    warmup_s: float,
    pids: Mapping[str, int | None],
) -> _ProduceRun:
    requests = {
        p: [_request(p, batch) for batch in batches] for p in sorted(leaders)
    }  # built once: the producer shares two cores with three brokers
    acks: list[_Ack] = []
    start = time.perf_counter()
    measure_start = start + warmup_s
    measure_end = measure_start + duration_s
    cpu: dict[str, dict[str, float]] = {}

    async def sample_cpu_after_warmup() -> None:
        await asyncio.sleep(warmup_s)
        cpu["start"] = _cpu_seconds(pids)

    async def send_loop(partition: int, stub: pb_grpc.BrokerAsyncStub, slot: int) -> None:
        pool = requests[partition]
        i = slot
        while (sent := time.perf_counter()) < measure_end:
            response = await stub.Produce(pool[i % len(pool)], timeout=PRODUCE_TIMEOUT_MS / 1000)
            acked = time.perf_counter()
            acks.append(
                _Ack(partition, _base_offset(partition, response), records_per_batch, sent, acked)
            )
            i += in_flight

    channels = {p: grpc.aio.insecure_channel(address) for p, address in leaders.items()}
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(sample_cpu_after_warmup())
            for partition, channel in channels.items():
                stub = pb_grpc.BrokerStub(channel)
                for slot in range(in_flight):
                    group.create_task(send_loop(partition, stub, slot))
        cpu_end = _cpu_seconds(pids)
    except ExceptionGroup as failed:
        # The requests in flight tend to fail alike: the first failure says it all.
        first = failed.exceptions[0]
        if isinstance(first, grpc.aio.AioRpcError):
            raise BenchmarkError(f"Produce failed: {first.code().name} {first.details()}") from None
        raise first from None
    finally:
        for channel in channels.values():
            await channel.close(None)
    end = max(a.acked for a in acks if a.sent >= measure_start)
    return _ProduceRun(acks, measure_start, cpu["start"], cpu_end, end)


def _request(partition: int, batch: bytes) -> pb.ProduceRequest:
    request = pb.ProduceRequest(acks=ACKS, timeout_ms=PRODUCE_TIMEOUT_MS, client_id="bench")
    request.topics.add(name=TOPIC).partitions.add(index=partition, records=batch)
    return request


def _base_offset(partition: int, response: pb.ProduceResponse) -> int:
    """The acknowledged base offset; BenchmarkError for anything but one NONE answer."""
    answers = [(t.name, p) for t in response.responses for p in t.partitions]
    if len(answers) != 1 or answers[0][0] != TOPIC or answers[0][1].index != partition:
        raise BenchmarkError(f"produce to partition {partition}: unexpected response {response}")
    answer = answers[0][1]
    if answer.error_code != pb.NONE:
        raise BenchmarkError(
            f"produce to {TOPIC}-{partition} failed: {pb.ErrorCode.Name(answer.error_code)} "
            f"{answer.error_message}"
        )
    return answer.base_offset


# -- checks ----------------------------------------------------------------------------------


def _per_second(acks: list[_Ack], start: float, window: float) -> tuple[int, int, int]:
    seconds = [0] * max(1, int(window))  # whole seconds only: the last one is partial
    for ack in acks:
        second = int(ack.acked - start)
        if second < len(seconds):
            seconds[second] += ack.records
    seconds.sort()
    return seconds[0], seconds[len(seconds) // 2], seconds[-1]


def _check_offsets(acks: list[_Ack]) -> dict[int, int]:
    """Each partition's acknowledged batches tile [0, end) exactly; returns the ends."""
    ends: dict[int, int] = {}
    for partition in ASSIGNMENT:
        expected = 0
        for ack in sorted(
            (a for a in acks if a.partition == partition), key=lambda a: a.base_offset
        ):
            if ack.base_offset != expected:
                raise BenchmarkError(
                    f"{TOPIC}-{partition}: a batch was acknowledged at offset {ack.base_offset}, "
                    f"expected {expected} (gap or overlap in the acknowledged offsets)"
                )
            expected += ack.records
        ends[partition] = expected
    return ends


def _check_isr(zk: KazooClient) -> None:
    for partition, replicas in ASSIGNMENT.items():
        state = read_partition_state(zk, TopicPartition(TOPIC, partition))
        if state is None or sorted(state.isr) != sorted(replicas) or state.leader != replicas[0]:
            # acks=all waits only for the ISR: with a replica out, the figures flatter us.
            raise BenchmarkError(
                f"{TOPIC}-{partition}: state {state} after the run (expected leader "
                f"{replicas[0]}, ISR {replicas}); see the broker logs"
            )


def _replica_records(data_dir: Path, tp: TopicPartition) -> int:
    """Records in a replica's segment files, every batch checked (CRC, framing, offsets)."""
    count = 0
    for segment in sorted((data_dir / tp.dir_name).glob("*.log")):
        data = segment.read_bytes()
        scan = scan_batches(data)
        for batch in scan:
            if not batch.crc_ok or batch.problem is not None:
                raise BenchmarkError(f"{segment} at {batch.position}: {batch.problem}")
            if batch.header.base_offset != count:
                raise BenchmarkError(
                    f"{segment}: batch at offset {batch.header.base_offset}, expected {count}"
                )
            count += batch.header.record_count
        if scan.stop_problem is not None:
            raise BenchmarkError(f"{segment}: {scan.stop_reason}")
    return count


def _check_replicas(brokers: Mapping[int, BrokerProcess], ends: Mapping[int, int]) -> int:
    for partition, end in ends.items():
        tp = TopicPartition(TOPIC, partition)
        counts = {i: _replica_records(brokers[i].spec.data_dir, tp) for i in ASSIGNMENT[partition]}
        if any(count != end for count in counts.values()):
            raise BenchmarkError(
                f"{tp}: {end} records acknowledged, replicas hold {counts} (broker: records)"
            )
    return sum(ends.values())


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _log_findings(brokers: Mapping[int, BrokerProcess], run_sizes: Mapping[int, int]) -> list[str]:
    """WARNING/ERROR/traceback lines of the broker logs, each tagged with the broker and
    with whether it was written before the brokers were told to stop or while stopping
    (``run_sizes``: each log's size just before the first SIGTERM)."""
    findings = []
    for i, broker in brokers.items():
        try:
            data = broker.log_path.read_bytes()
        except OSError as err:
            findings.append(f"broker {i}: cannot read its log: {err}")
            continue
        for phase, part in (("run", data[: run_sizes[i]]), ("shutdown", data[run_sizes[i] :])):
            findings += [
                f"broker {i} ({phase}): {line}"
                for line in part.decode(errors="replace").splitlines()
                if any(marker in line for marker in _LOG_MARKERS)
            ]
    return findings


def _broker_settings() -> dict[str, str]:
    """The defaults the brokers run with that bear on replicated produce."""
    defaults = {f.name: f.default for f in fields(BrokerConfig)}
    return {
        "replica.fetch.wait.max.ms": str(defaults["replica_fetch_wait_max_ms"]),
        "replica.fetch.min.bytes": str(defaults["replica_fetch_min_bytes"]),
        "min.insync.replicas": str(defaults["min_insync_replicas"]),
        "log.flush.interval.messages": "unset (no fsync)",
    }


# -- the run ---------------------------------------------------------------------------------


def measure(
    work_dir: Path,
    *,
    duration_s: float = 30.0,
    in_flight: int = 2,
    warmup_s: float = 2.0,
) -> ReplicationResult:
    """Start the cluster, produce for ``warmup_s`` then ``duration_s``, check, stop, clean up.

    ``in_flight`` is per partition. The temporary directory (ZooKeeper, broker data and
    logs) is removed after a successful run and kept, with its path in the error, after a
    failed one.
    """
    wall_start = time.perf_counter()
    batches, per_batch = make_batches()
    root = Path(tempfile.mkdtemp(prefix="replication-", dir=work_dir))
    try:
        with ExitStack() as stack:
            server = stack.enter_context(
                ZooKeeperServer(ZooKeeperConfig(data_dir=root / "zookeeper"))
            )
            zk = stack.enter_context(kazoo_client(server.connect_string))
            procs = stack.enter_context(brokers(root, zk, server.connect_string))
            addresses = {i: b.address for i, b in procs.items()}
            create_topic(zk, TOPIC, ASSIGNMENT)
            leaders: dict[int, str] = {}
            for partition, replicas in ASSIGNMENT.items():
                state = wait_for_leader(zk, TopicPartition(TOPIC, partition), addresses)
                if state.leader != replicas[0] or sorted(state.isr) != sorted(replicas):
                    raise BenchmarkError(
                        f"{TOPIC}-{partition}: the controller made {state} (expected leader "
                        f"{replicas[0]}, ISR {replicas})"
                    )
                leaders[partition] = addresses[state.leader]
            pids = {f"broker {i}": b.pid for i, b in procs.items()}
            pids["zookeeper"] = server.pid
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                run = runner.run(
                    _produce(
                        leaders,
                        batches,
                        per_batch,
                        duration_s=duration_s,
                        in_flight=in_flight,
                        warmup_s=warmup_s,
                        pids=pids,
                    )
                )
            ends = _check_offsets(run.acks)
            _check_isr(zk)
            run_log_sizes = {i: _size(b.log_path) for i, b in procs.items()}
            for broker_id, status in stop_brokers(procs.values()).items():
                if status != 0:
                    raise BenchmarkError(f"broker {broker_id} exited with status {status}")
            on_disk = _check_replicas(procs, ends)
            findings = _log_findings(procs, run_log_sizes)
    except BaseException as err:
        err.add_note(f"bench/replication: kept {root} (ZooKeeper, broker data and logs)")
        raise
    shutil.rmtree(root, ignore_errors=True)
    measured = [a for a in run.acks if a.sent >= run.measure_start]
    window = run.end - run.measure_start
    return ReplicationResult(
        records=sum(a.records for a in measured),
        requests=len(measured),
        warmup_s=warmup_s,
        window_s=window,
        records_per_batch=per_batch,
        batch_bytes=len(batches[0]),
        in_flight=in_flight * len(ASSIGNMENT),
        latency=Latency.of([a.acked - a.sent for a in measured]),
        per_second=_per_second(measured, run.measure_start, window),
        records_on_disk=on_disk,
        cpu_percent={
            name: 100 * (run.cpu_end[name] - run.cpu_start[name]) / window
            for name in run.cpu_start
            if name in run.cpu_end
        },
        log_findings=findings,
        wall_s=time.perf_counter() - wall_start,
        broker_settings=_broker_settings(),
    )
