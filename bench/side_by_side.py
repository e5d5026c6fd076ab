"""Side by side: what a user gets from ``minibroker perf``, next to the ceilings
of this machine and to NATS JetStream, all measured in one run.

- **ceilings**: unbuffered appends of pre-built 256 KiB v2 batches to a plain file (the
  disk's side); grpc.aio echo of 16 KiB and 1 MiB messages, unary and on one bidirectional
  stream, against :mod:`bench.echo_server` in its own process (the price of a gRPC message);
  and pre-built 256 KiB batches sent straight as Produce requests to the cluster, acks=all,
  on produce sessions with 5 requests in flight per partition as the producer keeps them
  (the brokers' side: the most any client could get from them this way);
- **minibroker**: the CLI as a user runs it on a local ``cluster up`` (3 brokers, RF 3,
  ``min.insync.replicas`` 2, 3 partitions): ``perf produce`` with acks=all on its defaults
  (one ``send`` per record) and with ``--bulk`` (``send_many``), alternating, best of two
  each; ``--bulk`` with acks=1, ``perf consume``, then ``perf produce --bulk --throughput``
  at half the bulk acks=all figure and at 1,000 records/s for the latency;
- **NATS JetStream**: a 3-node cluster of Debian's ``nats-server`` on this machine, a
  stream with 3 replicas on file storage, 100-byte messages published by nats-py's
  ``publish_async`` with a bounded window of pending acknowledgements. Skipped, and said
  so, where ``nats-server`` or nats-py is missing (``make bench`` installs both).

Every figure goes to ``bench/results.json`` too (:func:`SideBySide.figures`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
import grpc
import uvloop

from bench.cli_runner import REPO, run_minibroker
from bench.echo_server import CHANNEL_OPTIONS, SERVICE
from client.metadata import BrokerConnections, MetadataClient
from client.produce_session import ProduceSession
from deploy.local_cluster import LocalCluster
from deploy.ports import free_port_block
from proto.records.builder import RecordsBuilder
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc

RECORD_BYTES = 100
PERF_RECORDS = 2_000_000
"""Records per ``perf produce``/``perf consume`` run: about 7 s at 300k records/s, far
more than ``buffer.memory`` holds (32 MiB, about 290,000 of these records), so the figure
is the steady state, not the speed of filling the buffer."""
LATENCY_SECONDS = 10
"""How long each ``perf produce --throughput`` run lasts."""
RAW_BATCH_BYTES = 256 * 1024
RAW_IN_FLIGHT = 5
"""Raw batches in flight per partition: the producer's max.in.flight.requests.per.connection."""
CEILING_SECONDS = 3.0
NATS_MESSAGES = 200_000
NATS_WINDOW = 4000
"""Acknowledgements nats-py may have pending (``publish_async``'s stall threshold)."""
TOPIC = "perf"


@dataclass
class Rate:
    """A throughput: records (or messages) per second and MB/s of payload."""

    per_s: float
    mb_per_s: float
    latency_ms: dict[str, float] = field(default_factory=dict)
    note: str = ""


@dataclass
class SideBySide:
    ceilings: dict[str, Rate]
    minibroker: dict[str, Rate]
    nats: Rate | None
    nats_problem: str
    perf_commands: list[str]

    def figures(self) -> dict[str, Any]:
        """Everything, for results.json."""
        return {
            "ceilings": {k: asdict(v) for k, v in self.ceilings.items()},
            "minibroker": {k: asdict(v) for k, v in self.minibroker.items()},
            "nats_jetstream_r3": asdict(self.nats) if self.nats is not None else None,
            "nats_problem": self.nats_problem or None,
            "ratios": self.ratios(),
            "record_bytes": RECORD_BYTES,
        }

    def ratios(self) -> dict[str, float]:
        produce = self.minibroker["perf produce --bulk acks=all"].per_s
        found = {
            "perf_produce_over_raw_batches": produce / self.ceilings["raw batches"].per_s,
            "per_record_over_bulk": self.minibroker["perf produce acks=all"].per_s / produce,
        }
        if self.nats is not None and self.nats.per_s:
            found["perf_produce_over_nats"] = produce / self.nats.per_s
        return {k: round(v, 3) for k, v in found.items()}


# -- ceilings ---------------------------------------------------------------------------------


def _prebuilt_batch(limit: int) -> tuple[bytes, int]:
    builder = RecordsBuilder()
    value = os.urandom(RECORD_BYTES)
    builder.append_values([value] * (limit // RECORD_BYTES), 0, int(time.time() * 1000), limit)
    return builder.build(-1, -1, -1), builder.count


def plain_append(work_dir: Path) -> Rate:
    """Unbuffered writes of one pre-built 256 KiB batch to a plain file, no fsync."""
    batch, count = _prebuilt_batch(RAW_BATCH_BYTES)
    _settle_page_cache()
    path = work_dir / "plain-append.bin"
    writes = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
    try:
        started = time.perf_counter()
        while (elapsed := time.perf_counter() - started) < CEILING_SECONDS:
            for _ in range(64):
                os.write(fd, batch)
            writes += 64
            if writes * len(batch) > 4 << 30:
                break
    finally:
        os.close(fd)
        path.unlink()
    return Rate(writes * count / elapsed, writes * count * RECORD_BYTES / elapsed / 1e6)


async def _echo(port: int, size: int, streaming: bool, in_flight: int = 4) -> Rate:
    payload = os.urandom(size)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS) as ch:
        await ch.channel_ready()
        deadline = time.perf_counter() + CEILING_SECONDS
        done = 0
        started = time.perf_counter()
        if streaming:
            call = ch.stream_stream(f"/{SERVICE}/Stream", None, None)(request_iterator=None)
            window = asyncio.Semaphore(in_flight)

            async def reader() -> None:
                nonlocal done
                async for _ in call:
                    done += 1
                    window.release()

            reading = asyncio.create_task(reader())
            while time.perf_counter() < deadline:
                await window.acquire()
                await call.write(payload)
            await call.done_writing()
            await reading
        else:
            unary = ch.unary_unary(f"/{SERVICE}/Unary", None, None)

            async def worker() -> None:
                nonlocal done
                while time.perf_counter() < deadline:
                    await unary(payload)
                    done += 1

            await asyncio.gather(*(worker() for _ in range(in_flight)))
        elapsed = time.perf_counter() - started
    return Rate(done / elapsed, done * size / elapsed / 1e6, note="messages/s")


@contextlib.contextmanager
def echo_server() -> Iterator[int]:
    """bench/echo_server.py in its own process, ready; yields its port."""
    port = free_port_block(1)
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.echo_server", str(port)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError("the echo server did not start")
        yield port
    finally:
        server.terminate()
        server.wait(timeout=10)


def grpc_echo() -> dict[str, Rate]:
    with echo_server() as port:
        results = {}
        for size, label in ((16 * 1024, "16 KiB"), (1024 * 1024, "1 MiB")):
            for streaming in (False, True):
                kind = "stream" if streaming else "unary"
                results[f"grpc echo {kind} {label}"] = uvloop.run(_echo(port, size, streaming))
        return results


async def _raw_batches(bootstrap: str, partitions: int) -> Rate:
    """Pre-built batches as Produce requests, acks=all, on one produce session per leader,
    ``RAW_IN_FLIGHT`` requests in flight per partition (as the idempotent producer keeps
    them, without its sequence numbers)."""
    batch, count = _prebuilt_batch(RAW_BATCH_BYTES)
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    async with BrokerConnections([(host, int(port))]) as connections:
        cluster = await MetadataClient(connections).refresh([TOPIC])
        sessions: dict[str, ProduceSession] = {}
        acked = 0

        async def one_request(partition: int, deadline: float) -> None:
            nonlocal acked
            tp = TopicPartition(TOPIC, partition)
            leader = cluster.leader_of(tp)
            assert leader is not None, f"no leader for {tp}"
            session = sessions.get(leader.address)
            if session is None:
                stub = pb_grpc.BrokerStub(connections.channel(leader.address))
                session = sessions[leader.address] = ProduceSession(stub)
            while time.perf_counter() < deadline:
                request = pb.ProduceRequest(acks=-1, timeout_ms=30_000)
                request.topics.add(name=TOPIC).partitions.add(index=partition, records=batch)
                response = await session.produce(request, 60)
                code = response.responses[0].partitions[0].error_code
                if code != pb.ErrorCode.NONE:
                    raise RuntimeError(f"raw batch to {tp} refused: {pb.ErrorCode.Name(code)}")
                acked += count

        def all_partitions(deadline: float) -> list[Coroutine[Any, Any, None]]:
            return [
                one_request(p, deadline) for p in range(partitions) for _ in range(RAW_IN_FLIGHT)
            ]

        try:
            await asyncio.gather(*all_partitions(time.perf_counter() + 1.0))  # warm-up
            acked = 0
            started = time.perf_counter()
            await asyncio.gather(*all_partitions(started + CEILING_SECONDS * 2))
            elapsed = time.perf_counter() - started
        finally:
            for session in sessions.values():
                session.close()
    return Rate(acked / elapsed, acked * RECORD_BYTES / elapsed / 1e6, note="acks=all")


# -- minibroker through the CLI -------------------------------------------------------------------


def _settle_page_cache() -> None:
    """Write back every dirty page before a measurement: the kernel's writeback of the
    gigabytes an earlier run wrote otherwise slows whichever run comes next (a ceiling
    measured after ten million records came out at 0.6 of itself), so the order of the
    runs, not the code, decided their ratio."""
    os.sync()


def _cli(data_dir: Path, *args: str) -> str:
    return run_minibroker(*args, data_dir=data_dir)[0]


def _perf(data_dir: Path, *args: str) -> Rate:
    _settle_page_cache()
    out = json.loads(_cli(data_dir, "perf", *args, "--json").strip().splitlines()[-1])
    return Rate(out["records_per_s"], out["mb_per_s"], out.get("latency_ms", {}))


def start_perf_cluster(work_dir: Path) -> LocalCluster:
    """A fresh 3-broker cluster (``min.insync.replicas`` 2, the Kafka listener on) in
    ``work_dir/cluster`` with the 3-partition RF 3 ``perf`` topic; brought down again if
    the topic cannot be made."""
    data_dir = work_dir / "cluster"
    shutil.rmtree(data_dir, ignore_errors=True)
    base = free_port_block(7)
    cluster = LocalCluster(data_dir)
    cluster.up(
        3,
        base_port=base,
        zookeeper_port=base + 3,
        kafka_base_port=base + 4,
        overrides={"min.insync.replicas": "2"},
    )
    try:
        _cli(data_dir, "topics", "create", TOPIC, "--partitions", "3", "--replication-factor", "3")
    except BaseException:
        cluster.down()
        raise
    return cluster


def minibroker_perf(work_dir: Path) -> tuple[dict[str, Rate], Rate, list[str]]:
    data_dir = work_dir / "cluster"
    cluster = start_perf_cluster(work_dir)
    n = str(PERF_RECORDS)
    size = str(RECORD_BYTES)
    produce = ["produce", TOPIC, "--num-records", n, "--record-size", size]
    try:
        # The ceiling first, on logs as empty as perf produce's first run finds them, and
        # every run after the page cache settled (_settle_page_cache).
        _settle_page_cache()
        raw = uvloop.run(_raw_batches(cluster.bootstrap_servers, 3))
        results: dict[str, Rate] = {}
        # The per-record default and the bulk path alternate, best of two each.
        runs = [
            _perf(data_dir, *produce, "--acks", "all", *bulk)
            for _ in range(2)
            for bulk in ([], ["--bulk"])
        ]
        results["perf produce acks=all"] = max(runs[0::2], key=lambda r: r.per_s)
        best = max(runs[1::2], key=lambda r: r.per_s)
        results["perf produce --bulk acks=all"] = best
        results["perf produce --bulk acks=1"] = _perf(data_dir, *produce, "--acks", "1", "--bulk")
        results["perf consume"] = _perf(data_dir, "consume", TOPIC, "--num-records", n)
        half = int(best.per_s / 2)
        results[f"perf produce --bulk --throughput {half:,} (half)"] = _perf(
            data_dir, "produce", TOPIC, "--num-records", str(half * LATENCY_SECONDS),
            "--record-size", size, "--throughput", str(half), "--bulk",
        )  # fmt: skip
        results["perf produce --bulk --throughput 1,000"] = _perf(
            data_dir, "produce", TOPIC, "--num-records", str(1000 * LATENCY_SECONDS),
            "--record-size", size, "--throughput", "1000", "--bulk",
        )  # fmt: skip
        kafka_bootstrap = cluster.kafka_bootstrap_servers
        assert kafka_bootstrap is not None, "cluster up gives every broker a Kafka listener"
        _settle_page_cache()
        results["confluent-kafka producer acks=all, Kafka listener"] = confluent_produce(
            kafka_bootstrap
        )
    finally:
        cluster.down()
    commands = [
        f"minibroker cluster up --override min.insync.replicas=2; minibroker topics create "
        f"{TOPIC} --partitions 3 --replication-factor 3",
        f"minibroker perf produce {TOPIC} --num-records {n} --record-size {size} --acks all "
        "(one send() per record, the default) and the same with --bulk (send_many), alternating",
        f"minibroker perf produce {TOPIC} --num-records {n} --record-size {size} --acks 1 --bulk",
        f"minibroker perf consume {TOPIC} --num-records {n}",
        f"minibroker perf produce {TOPIC} --record-size {size} --bulk --throughput {half}|1000 "
        f"(for {LATENCY_SECONDS} s each)",
        f"confluent-kafka (librdkafka {confluent_kafka.libversion()[0]}) Producer on its "
        f"defaults with acks=all against the same cluster's Kafka listener, {n} records of "
        f"{size} bytes from one Python loop (bench/side_by_side.py, confluent_produce)",
    ]
    return results, raw, commands


def confluent_produce(bootstrap: str, count: int = PERF_RECORDS) -> Rate:
    """confluent-kafka's producer, batching as librdkafka does on its defaults, through the
    Kafka listener: what a Kafka user's own client gets from the same cluster. Measured from
    the first ``produce`` to the last delivery report."""
    elapsed = confluent_produce_seconds(bootstrap, count)
    return Rate(count / elapsed, count * RECORD_BYTES / elapsed / 1e6)


def confluent_produce_seconds(
    bootstrap: str, count: int, config: dict[str, str] | None = None
) -> float:
    """Seconds for confluent-kafka's ``Producer`` (acks=all, ``config`` over its defaults) to
    produce ``count`` records of RECORD_BYTES to TOPIC, ``produce()`` + ``poll(0)`` each,
    until ``flush()`` has every delivery report; raises if any record failed."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", **(config or {})}
    )
    failed: list[str] = []

    def delivered(err: confluent_kafka.KafkaError | None, _: confluent_kafka.Message) -> None:
        if err is not None:
            failed.append(str(err))

    value = b"x" * RECORD_BYTES
    producer.list_topics(TOPIC, timeout=10)  # metadata first, as perf produce has it
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(TOPIC, value, on_delivery=delivered)
                break
            except BufferError:  # queue.buffering.max.messages: let deliveries drain
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(120) != 0 or failed:
        raise RuntimeError(f"confluent-kafka: {len(failed)} records failed: {failed[:3]}")
    return time.perf_counter() - started


# -- NATS JetStream ------------------------------------------------------------------------------


def _nats_config(node: int, ports: list[int], routes: list[int], store: Path) -> str:
    peers = ", ".join(f"nats-route://127.0.0.1:{p}" for p in routes)
    return (
        f"server_name: n{node}\nlisten: 127.0.0.1:{ports[node]}\n"
        f'jetstream {{ store_dir: "{store}" }}\n'
        f"cluster {{ name: bench, listen: 127.0.0.1:{routes[node]}, routes: [{peers}] }}\n"
    )


async def _nats_publish(ports: list[int]) -> Rate:
    import nats  # the bench extra: make bench installs it

    client = await nats.connect([f"nats://127.0.0.1:{p}" for p in ports])
    try:
        js = client.jetstream()
        for _ in range(100):  # the cluster elects its meta leader after start-up
            try:
                await js.add_stream(name="bench", subjects=["bench"], num_replicas=3)
                break
            except Exception:  # not ready yet: JetStream answers with errors
                await asyncio.sleep(0.2)
        else:
            raise RuntimeError("NATS JetStream did not accept a 3-replica stream")
        payload = os.urandom(RECORD_BYTES)
        for _ in range(1000):  # warm-up
            await js.publish("bench", payload)
        started = time.perf_counter()
        for _ in range(NATS_MESSAGES):
            await js.publish_async("bench", payload, wait_stall=60)
        await js.publish_async_completed()
        elapsed = time.perf_counter() - started
    finally:
        await client.close()
    return Rate(NATS_MESSAGES / elapsed, NATS_MESSAGES * RECORD_BYTES / elapsed / 1e6)


def _wait_listening(ports: list[int], timeout_s: float = 30.0) -> None:
    """Until every port accepts a connection (nats-py logs a traceback per refused try)."""
    deadline = time.monotonic() + timeout_s
    for port in ports:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"nats-server did not listen on {port}") from None
                time.sleep(0.05)


def nats_jetstream() -> tuple[Rate | None, str]:
    server = shutil.which("nats-server") or shutil.which("nats-server", path="/usr/sbin")
    if server is None:
        return None, "nats-server not installed (make bench installs Debian's package)"
    try:
        import nats  # noqa: F401
    except ImportError:
        return None, "nats-py not installed (make bench installs the bench extra)"
    base = free_port_block(6)
    ports, routes = [base, base + 1, base + 2], [base + 3, base + 4, base + 5]
    processes = []
    with tempfile.TemporaryDirectory(prefix="bench-nats-") as tmp:
        try:
            for node in range(3):
                config = Path(tmp) / f"n{node}.conf"
                config.write_text(_nats_config(node, ports, routes, Path(tmp) / f"n{node}"))
                processes.append(
                    subprocess.Popen(
                        [server, "-c", str(config)],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
            _wait_listening(ports)
            return uvloop.run(_nats_publish(ports)), ""
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=10)


def measure(work_dir: Path) -> SideBySide:
    work_dir.mkdir(parents=True, exist_ok=True)
    ceilings = {"plain append 256 KiB": plain_append(work_dir), **grpc_echo()}
    minibroker, raw, commands = minibroker_perf(work_dir)
    ceilings["raw batches"] = raw
    nats, problem = nats_jetstream()
    return SideBySide(ceilings, minibroker, nats, problem, commands)
