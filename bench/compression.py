"""Compressed produce, per codec, on one cluster in one run: throughput and bytes on disk.

A local ``cluster up`` (3 brokers, RF 3, ``min.insync.replicas`` 2) takes, for each codec
(none, gzip, snappy, lz4, zstd), a fresh 3-partition topic written by
``minibroker perf produce --compression-type C --payload json`` on its defaults (the
per-record ``send``) and with ``--bulk``, and another written through the Kafka listener by
confluent-kafka's Producer with ``compression.type`` C (librdkafka's defaults, acks=all).
Every run sends the same JSON-like event records of RECORD_BYTES (perf produce's ``json``
payload: fields that vary record to record, so the ratios are those of real events, not of
repeated bytes). Bytes on disk are one replica's segment files of the topic, after the
run; the ratio is against the uncompressed topic of the same writer.

Each confluent-kafka run is a subprocess of this Python (``python -m bench.compression
confluent BOOTSTRAP TOPIC COUNT CODEC``) printing its records/s as JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka

from bench.cli_runner import REPO
from bench.side_by_side import RECORD_BYTES, _cli, _perf, _settle_page_cache, start_perf_cluster
from client.cli.perf import perf_values

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PERF_RECORDS = 400_000
CONFLUENT_RECORDS = 400_000
CLIENT_TIMEOUT_S = 600


@dataclass
class CodecRow:
    """One writer with one codec."""

    writer: str
    codec: str
    records_per_s: float
    bytes_on_disk: int


def _topic_bytes(data_dir: Path, topic: str) -> int:
    """One replica's (broker 1's) segment files of the topic's partitions."""
    return sum(p.stat().st_size for p in (data_dir / "broker-1").glob(f"{topic}-*/*.log"))


def _create(data_dir: Path, topic: str) -> None:
    _cli(data_dir, "topics", "create", topic, "--partitions", "3", "--replication-factor", "3")


def measure(work_dir: Path) -> list[CodecRow]:
    cluster = start_perf_cluster(work_dir)
    data_dir = work_dir / "cluster"
    rows: list[CodecRow] = []
    try:
        bootstrap = cluster.kafka_bootstrap_servers
        assert bootstrap is not None
        for codec in CODECS:
            for writer, extra in (("perf produce", ()), ("perf produce --bulk", ("--bulk",))):
                topic = f"perf-{codec}{'-bulk' if extra else ''}"
                _create(data_dir, topic)
                rate = _perf(
                    data_dir, "produce", topic, "--num-records", str(PERF_RECORDS),
                    "--record-size", str(RECORD_BYTES), "--compression-type", codec,
                    "--payload", "json", *extra,
                )  # fmt: skip
                rows.append(CodecRow(writer, codec, rate.per_s, _topic_bytes(data_dir, topic)))
                print(f"compression: {rows[-1]}")
            topic = f"confluent-{codec}"
            _create(data_dir, topic)
            _settle_page_cache()
            done = subprocess.run(
                [sys.executable, "-m", "bench.compression", "confluent", bootstrap, topic,
                 str(CONFLUENT_RECORDS), codec],
                cwd=REPO, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S, check=True,
            )  # fmt: skip
            rate_s = json.loads(done.stdout.strip().splitlines()[-1])["records_per_s"]
            rows.append(CodecRow("confluent-kafka", codec, rate_s, _topic_bytes(data_dir, topic)))
            print(f"compression: {rows[-1]}")
    finally:
        cluster.down()
    return rows


def _confluent(bootstrap: str, topic: str, count: int, codec: str) -> float:
    """records/s of confluent-kafka producing ``count`` perf json values to ``topic``."""
    values = perf_values("json", RECORD_BYTES, 10_000)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "compression.type": codec}
    )
    failed: list[str] = []

    def delivered(err: confluent_kafka.KafkaError | None, _: confluent_kafka.Message) -> None:
        if err is not None:
            failed.append(str(err))

    producer.list_topics(topic, timeout=10)
    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, values[i % len(values)], on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(300) != 0 or failed:
        raise RuntimeError(f"confluent-kafka: {len(failed)} records failed: {failed[:3]}")
    return count / (time.perf_counter() - started)


def main(argv: list[str]) -> None:
    if argv[:1] == ["confluent"]:
        bootstrap, topic, count, codec = argv[1:5]
        print(json.dumps({"records_per_s": _confluent(bootstrap, topic, int(count), codec)}))
        return
    raise SystemExit("usage: python -m bench.compression confluent BOOTSTRAP TOPIC COUNT CODEC")


if __name__ == "__main__":
    main(sys.argv[1:])
