"""The Kafka listener against the gRPC door, on one cluster, in one run.

A local ``cluster up`` (3 brokers, RF 3, ``min.insync.replicas`` 2, 3 partitions) serves
both: ``minibroker perf produce`` (acks=all, its defaults: one ``send`` per record, and
``--bulk``) over gRPC, and confluent-kafka's Producer (librdkafka's defaults, acks=all)
through the Kafka listener, alternating, best of ``ROUNDS`` each; then ``perf consume``
and confluent-kafka's Consumer (its defaults, the partitions assigned from the beginning),
alternating the same way. The records and their size are side_by_side's.

Beside each throughput, the CPU seconds its run took: the client's (the subprocess's
rusage) and the three brokers' (``/proc/PID/stat``). On this 2-core machine the clients
and the brokers share the cores, so a door's speed is as much the client's CPU per
record as the brokers'. Two figures say what the clients allow on their own, without the
brokers: confluent-kafka's ``produce()`` + ``poll(0)`` loop against no broker (records
only queued), and confluent-kafka's Consumer with ``fetch.queue.backoff.ms`` 10 (its
default, 1000, idles a second each time its prefetch passes ``queued.min.messages``).

The listener's own cost, apart (:func:`door`): a KafkaListener in a subprocess whose
Produce handler answers at once, fed pre-built Produce v9 requests of one 256 KiB batch
by a raw client keeping 5 in flight; the server's CPU per request is what the door
itself (framing, kio's decoding, the answer's encoding, the socket) costs. And the time
to encode one Produce answer.

Each confluent-kafka run is a subprocess of this Python (``python -m bench.kafka_listener
produce|consume|loop BOOTSTRAP COUNT [name=value ...]``) printing its figure as JSON.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import resource
import struct
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import uvloop

from bench.cli_runner import REPO
from bench.side_by_side import (
    PERF_RECORDS,
    RECORD_BYTES,
    TOPIC,
    Rate,
    _settle_page_cache,
    confluent_produce_seconds,
    start_perf_cluster,
)
from proto.records.builder import RecordsBuilder

ROUNDS = 2
CLIENT_TIMEOUT_S = 300
LOOP_RECORDS = 90_000
"""Records of the client-only produce loop: under librdkafka's queue.buffering.max.messages
(100,000), so that none waits for a broker."""
TUNED_CONSUMER = {"fetch.queue.backoff.ms": "10"}


@dataclass
class Run:
    """One run of a client: its throughput and the CPU seconds it and the brokers took."""

    rate: Rate
    wall_s: float
    client_cpu_s: float
    broker_cpu_s: float


@dataclass
class DoorCost:
    """What the Kafka listener itself spends on a Produce request."""

    server_cpu_us_per_request: float
    requests_per_s: float
    encode_answer_us: float
    request_bytes: int


@dataclass
class KafkaListenerBench:
    """Best of the rounds of each way in, and every round, for results.json."""

    best: dict[str, Run]
    rounds: dict[str, list[Run]]
    client_loop: Rate
    door: DoorCost
    commands: list[str]

    def figures(self) -> dict[str, Any]:
        return {
            "best": {k: asdict(v) for k, v in self.best.items()},
            "rounds": {k: [asdict(r) for r in v] for k, v in self.rounds.items()},
            "confluent_produce_loop_without_broker": asdict(self.client_loop),
            "door": asdict(self.door),
            "ratios": self.ratios(),
        }

    def ratios(self) -> dict[str, float]:
        b = {k: v.rate for k, v in self.best.items()}
        return {
            "confluent_produce_over_perf_produce": round(
                b["confluent-kafka producer"].per_s / b["perf produce"].per_s, 3
            ),
            "confluent_produce_over_perf_produce_bulk": round(
                b["confluent-kafka producer"].per_s / b["perf produce --bulk"].per_s, 3
            ),
            "confluent_consume_over_perf_consume": round(
                b["confluent-kafka consumer"].per_s / b["perf consume"].per_s, 3
            ),
        }


def _process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process (``/proc/PID/stat``)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _client(
    args: list[str], broker_pids: list[int], timeout_s: float = CLIENT_TIMEOUT_S
) -> tuple[dict[str, Any], Run]:
    """Run a client (``python ARGS``) to its end; its last stdout line as JSON, and the CPU
    seconds it and the brokers took meanwhile. A client still running after ``timeout_s``
    is killed (subprocess.TimeoutExpired)."""
    _settle_page_cache()
    brokers = sum(_process_cpu_s(p) for p in broker_pids)
    client = _children_cpu_s()
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        cwd=REPO,
    )
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:3])} failed: {out.stderr[-2000:]}")
    found = json.loads(out.stdout.strip().splitlines()[-1])
    run = Run(
        Rate(0.0, 0.0),
        round(wall, 2),
        round(_children_cpu_s() - client, 2),
        round(sum(_process_cpu_s(p) for p in broker_pids) - brokers, 2),
    )
    return found, run


def confluent(
    kind: str, bootstrap: str, broker_pids: list[int], config: dict[str, str] | None = None
) -> Run:
    """One confluent-kafka run in its own process (see the module's docstring)."""
    extra = [f"{k}={v}" for k, v in (config or {}).items()]
    args = ["-m", "bench.kafka_listener", kind, bootstrap, str(PERF_RECORDS), *extra]
    found, run = _client(args, broker_pids)
    run.rate = Rate(found["per_s"], found["mb_per_s"])
    return run


def perf(data_dir: Path, broker_pids: list[int], *args: str) -> Run:
    """``minibroker perf ARGS`` over gRPC, as side_by_side runs it."""
    cli = ["-m", "client.cli", "perf", *args, "--json", "--data-dir", str(data_dir)]
    found, run = _client(cli, broker_pids)
    run.rate = Rate(found["records_per_s"], found["mb_per_s"], found.get("latency_ms", {}))
    return run


def client_loop() -> Rate:
    """confluent-kafka's produce() + poll(0) loop with no broker to send to: the most this
    client's Python API gives on this machine, whatever the broker."""
    found, _ = _client(["-m", "bench.kafka_listener", "loop", "127.0.0.1:1", str(LOOP_RECORDS)], [])
    return Rate(found["per_s"], found["mb_per_s"])


def measure(work_dir: Path, rounds: int = ROUNDS) -> KafkaListenerBench:
    work_dir.mkdir(parents=True, exist_ok=True)
    cluster = start_perf_cluster(work_dir)
    data_dir = work_dir / "cluster"
    n, size = str(PERF_RECORDS), str(RECORD_BYTES)
    produce = ["produce", TOPIC, "--num-records", n, "--record-size", size, "--acks", "all"]
    tuned = "confluent-kafka consumer, fetch.queue.backoff.ms=10"
    runs: dict[str, list[Run]] = {
        k: []
        for k in (
            "perf produce",
            "perf produce --bulk",
            "confluent-kafka producer",
            "perf consume",
            "confluent-kafka consumer",
            tuned,
        )
    }
    try:
        bootstrap = cluster.kafka_bootstrap_servers
        assert bootstrap is not None, "cluster up gives every broker a Kafka listener"
        pids = [b.pid for b in cluster.status().brokers if b.pid is not None]
        for _ in range(rounds):
            runs["confluent-kafka producer"].append(confluent("produce", bootstrap, pids))
            runs["perf produce"].append(perf(data_dir, pids, *produce))
            runs["perf produce --bulk"].append(perf(data_dir, pids, *produce, "--bulk"))
        for _ in range(rounds):
            runs["confluent-kafka consumer"].append(confluent("consume", bootstrap, pids))
            runs["perf consume"].append(perf(data_dir, pids, "consume", TOPIC, "--num-records", n))
            runs[tuned].append(confluent("consume", bootstrap, pids, TUNED_CONSUMER))
    finally:
        cluster.down()
    loop = client_loop()
    cost = door()
    commands = [
        f"minibroker cluster up --override min.insync.replicas=2; minibroker topics create "
        f"{TOPIC} --partitions 3 --replication-factor 3",
        f"minibroker perf produce {TOPIC} --num-records {n} --record-size {size} --acks all "
        "(its default, one send() per record; and with --bulk)",
        f"confluent-kafka Producer({{'bootstrap.servers': ..., 'acks': 'all'}}): {n} records "
        f"of {size} bytes, produce() + poll(0) each, flush() (bench/kafka_listener.py)",
        f"minibroker perf consume {TOPIC} --num-records {n}",
        "confluent-kafka Consumer on its defaults, the 3 partitions assigned from the "
        f"beginning, consume(num_messages=10000) until {n} records",
        "the same Consumer with fetch.queue.backoff.ms=10 (tuned, beside the default)",
        f"confluent-kafka produce() + poll(0) of {LOOP_RECORDS} records with no broker "
        "reachable (the client's own ceiling)",
        f"alternating, {rounds} rounds, best of each",
    ]
    best = {k: max(v, key=lambda r: r.rate.per_s) for k, v in runs.items()}
    return KafkaListenerBench(best, runs, loop, cost, commands)


DOOR_REQUESTS = 3000
DOOR_IN_FLIGHT = 5
DOOR_BATCH_BYTES = 256 * 1024


def _produce_frame(version: int = 9) -> bytes:
    """A Produce request of one 256 KiB batch of 100-byte records, size first."""
    from kio.serial import entity_writer

    from broker.kafka_listener.messages import build
    from broker.kafka_listener.request_codec import request_schema

    builder = RecordsBuilder()
    value = os.urandom(RECORD_BYTES)
    limit = DOOR_BATCH_BYTES
    builder.append_values([value] * (limit // RECORD_BYTES), 0, int(time.time() * 1000), limit)
    schema = request_schema(0, version)
    assert schema is not None
    header = schema.__header_schema__
    out = io.BytesIO()
    fields = {"request_api_key": 0, "request_api_version": version, "correlation_id": 0}
    entity_writer(header)(out, build(header, {**fields, "client_id": "bench"}))
    partition = {"index": 0, "records": builder.build(-1, -1, -1)}
    body = {
        "acks": -1,
        "timeout": 30_000,
        "topic_data": [{"name": TOPIC, "partition_data": [partition]}],
    }
    entity_writer(schema)(out, build(schema, body))
    return struct.pack(">i", out.tell()) + out.getvalue()


_ANSWER = {
    "index": 0,
    "error_code": 0,
    "base_offset": 1_000_000,
    "log_append_time": None,
    "log_start_offset": 0,
    "error_message": None,
}


async def _door_serve() -> None:
    """A real KafkaListener whose Produce stage answers at once (after taking the records'
    bytes, as the real one does); its port on stdout, until stdin closes. The process is
    tuned as a broker's is (malloc's thresholds, the collector)."""
    from proto.process.tuning import tune_process

    tune_process()
    from broker.kafka_listener.server import KafkaListener
    from broker.kafka_listener.wire_request import Answer, KafkaRequest, done

    async def produce(request: KafkaRequest) -> Answer:
        answers = []
        for topic in request.body.topic_data:
            for part in topic.partition_data:
                bytes(part.records)
                answers.append({**_ANSWER, "index": part.index})
        return done({"responses": [{"name": TOPIC, "partition_responses": answers}]})

    listener = KafkaListener(1, {0: produce}, max_request_bytes=100 << 20)
    print(await listener.start("127.0.0.1", 0), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await listener.stop()


async def _door_client(port: int, count: int, frame: bytes) -> float:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    window = asyncio.Semaphore(DOOR_IN_FLIGHT)

    async def answers() -> None:
        for _ in range(count):
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            await reader.readexactly(size)
            window.release()

    reading = asyncio.create_task(answers())
    started = time.perf_counter()
    for correlation_id in range(count):
        await window.acquire()
        writer.write(frame[:8] + struct.pack(">i", correlation_id) + frame[12:])
    await reading
    elapsed = time.perf_counter() - started
    writer.close()
    return elapsed


def _encode_answer_us(rounds: int = 5000) -> float:
    from broker.kafka_listener.request_codec import encode_response, response_schema

    schema = response_schema(0, 9)
    assert schema is not None
    tree = {"responses": [{"name": TOPIC, "partition_responses": [_ANSWER]}]}
    started = time.process_time()  # CPU time: the machine's other load does not count
    for _ in range(rounds):
        encode_response(schema, 1, tree)
    return (time.process_time() - started) / rounds * 1e6


def door(count: int = DOOR_REQUESTS) -> DoorCost:
    """The Kafka listener's own cost per Produce request (see the module's docstring)."""
    frame = _produce_frame()
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.kafka_listener", "door-serve", "-", "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert server.stdout is not None
        assert server.stdin is not None
        port = int(server.stdout.readline())
        uvloop.run(_door_client(port, count // 10, frame))  # warm-up
        cpu = _process_cpu_s(server.pid)
        elapsed = uvloop.run(_door_client(port, count, frame))
        cpu = _process_cpu_s(server.pid) - cpu
        server.stdin.close()
        server.wait(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return DoorCost(
        round(cpu / count * 1e6, 1),
        round(count / elapsed),
        round(_encode_answer_us(), 2),
        len(frame),
    )


def _loop(bootstrap: str, count: int, config: dict[str, str]) -> float:
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, **config})
    value = b"x" * RECORD_BYTES
    started = time.perf_counter()
    for _ in range(count):
        producer.produce(TOPIC, value, on_delivery=lambda err, msg: None)
        producer.poll(0)
    elapsed = time.perf_counter() - started
    producer.purge()
    return elapsed


def _produce(bootstrap: str, count: int, config: dict[str, str]) -> float:
    return confluent_produce_seconds(bootstrap, count, config)


def _consume(bootstrap: str, count: int, config: dict[str, str]) -> float:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-kafka-listener", **config}
    )
    try:
        partitions = consumer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
        consumer.assign(
            [
                confluent_kafka.TopicPartition(TOPIC, p, confluent_kafka.OFFSET_BEGINNING)
                for p in partitions
            ]
        )
        got = 0
        started = time.perf_counter()
        deadline = started + CLIENT_TIMEOUT_S / 2
        while got < count:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"confluent-kafka consumed only {got} of {count}")
            for message in consumer.consume(num_messages=10_000, timeout=1):
                if message.error() is not None:
                    raise RuntimeError(f"confluent-kafka consume: {message.error()}")
                got += 1
        return time.perf_counter() - started
    finally:
        consumer.close()


def main(argv: list[str]) -> None:
    if argv[0] == "door-serve":
        uvloop.run(_door_serve())
        return
    if argv[0] == "door":
        print(json.dumps(asdict(door())))
        return
    kind, bootstrap, count = argv[0], argv[1], int(argv[2])
    config = dict(a.split("=", 1) for a in argv[3:])
    elapsed = {"produce": _produce, "consume": _consume, "loop": _loop}[kind](
        bootstrap, count, config
    )
    print(json.dumps({"per_s": count / elapsed, "mb_per_s": count * RECORD_BYTES / elapsed / 1e6}))


if __name__ == "__main__":
    main(sys.argv[1:])
