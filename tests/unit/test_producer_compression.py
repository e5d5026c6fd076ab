"""The producer's ``compression.type``: batches compressed once when sealed, byte for byte
what ``encode_batch(..., compression=)`` writes, decoding to the records appended; the
producer id, epoch and sequence kept through a rebuild; ``batch.size`` counting the records
uncompressed; the config refusing what Kafka refuses; the CLI and the chaos workload
passing the codec on. The producer end to end against the stand-in brokers of
test_producer_sender (in-process gRPC servers)."""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client.cli.common import finish_args
from client.cli.main import build_parser
from client.cli.perf import payload_of, perf_values
from client.metadata import BrokerConnections, ClientError
from client.producer import Producer, ProducerConfig, RecordAccumulator
from client.producer_config import COMPRESSION_TYPES
from proto import errors
from proto.records import builder as builder_module
from proto.records.builder import RecordsBuilder
from proto.records.compression import Codec, compress
from proto.records.record_batch import (
    HEADER_SIZE,
    Record,
    decode_batch,
    encode_batch,
    parse_header,
    validate_batches,
)
from proto.topic_partition import TopicPartition
from proto.wire.minibroker_pb2 import ErrorCode
from tests.unit.test_producer_sender import (
    APPEND_THEN,
    connected,
    eventually,
    fake_cluster,
    fast,
    run,
)
from tests.unit.test_records_builder import BASE, ManyValues, OneRecord, steps_strategy

CODECS = [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
CODEC_IDS = [c.name.lower() for c in CODECS]
TP = TopicPartition("t", 0)


def _producer(connections: BrokerConnections, **settings: Any) -> Producer:
    """A Producer on test_producer_sender's ``fast`` settings with ``settings`` on top."""
    return Producer(connections, fast(**settings))


def _build(codec: int, steps: list[OneRecord | ManyValues]) -> tuple[RecordsBuilder, list[Record]]:
    builder = RecordsBuilder(codec)
    expected: list[Record] = []
    for step in steps:
        if len(step) == 4:
            key, value, dt, headers = step
            builder.append(BASE + dt, key, value, tuple(headers))
            expected.append(Record(key, value, BASE + dt, tuple(headers)))
        else:
            values, dt = step
            assert builder.append_values(values, 0, BASE + dt, 1 << 30) == len(values)
            expected += [Record(None, v, BASE + dt) for v in values]
    return builder, expected


# -- the builder -----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
@settings(max_examples=40, deadline=None)
@given(steps_strategy, st.integers(0, 2**40), st.integers(0, 2**15 - 1), st.integers(0, 2**31 - 1))
def test_a_compressed_batch_is_what_encode_batch_writes_and_decodes_to_its_records(
    codec: Codec,
    steps: list[OneRecord | ManyValues],
    producer_id: int,
    epoch: int,
    sequence: int,
) -> None:
    builder, expected = _build(codec, steps)
    plain, _ = _build(0, steps)
    uncompressed_size = builder.size
    built = builder.build(producer_id, epoch, sequence)
    assert built == encode_batch(
        expected,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        compression=codec,
    )
    assert builder.size == uncompressed_size == plain.size  # what batch.size bounds
    assert builder.seal() == len(built)
    (header,) = validate_batches(built)  # the CRC, over what is stored
    assert header.compression == codec
    assert header.batch_length + 12 == len(built)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        producer_id,
        epoch,
        sequence,
    )
    decoded = decode_batch(built)
    assert [(r.key, r.value, r.timestamp, r.headers) for r in decoded.records] == [
        (r.key, r.value, r.timestamp, tuple(r.headers)) for r in expected
    ]
    assert [r.offset for r in decoded.records] == list(range(len(expected)))
    assert decoded.header.record_count == len(expected)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_a_rebuild_under_a_new_producer_id_keeps_the_compressed_records_compressed_once(
    codec: Codec, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = compress

    def counting(c: int, data: bytes | bytearray | memoryview) -> bytes:
        calls.append(len(data))
        return real(c, data)

    monkeypatch.setattr(builder_module, "compress", counting)
    builder = RecordsBuilder(codec)
    values = [b'{"n":%d,"user":"user-%d"}' % (i, i % 17) for i in range(500)]
    builder.append_values(values, 0, BASE, 1 << 20)
    sealed = builder.seal()
    assert builder.sealed
    first = builder.build(1001, 0, 0)
    second = builder.build(1002, 3, 4242)
    assert calls == [builder.size - HEADER_SIZE]  # the records, uncompressed, once
    assert len(first) == len(second) == sealed < builder.size
    assert first[HEADER_SIZE:] == second[HEADER_SIZE:]
    for batch, fields in ((first, (1001, 0, 0)), (second, (1002, 3, 4242))):
        (header,) = validate_batches(batch)
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == fields
        assert header.compression == codec
        assert [r.value for r in decode_batch(batch).records] == values


def test_a_record_appended_after_the_seal_is_refused_not_lost() -> None:
    builder = RecordsBuilder(Codec.LZ4)
    builder.append(BASE, None, b"a")
    builder.seal()
    builder.append(BASE, None, b"b")
    with pytest.raises(ValueError, match="after it was sealed"):
        builder.build(-1, -1, -1)


@pytest.mark.parametrize("codec", [0, *CODECS])
def test_an_empty_batch_cannot_be_sealed(codec: int) -> None:
    with pytest.raises(ValueError, match="at least one record"):
        RecordsBuilder(codec).seal()
    with pytest.raises(ValueError, match="at least one record"):
        RecordsBuilder(codec).build(-1, -1, -1)


def test_without_a_codec_seal_changes_nothing() -> None:
    builder = RecordsBuilder()
    builder.append_values([b"x" * 10] * 5, 0, BASE, 1 << 20)
    assert builder.seal() == builder.size
    assert not builder.sealed
    builder.append(BASE, None, b"more")  # still open: an uncompressed batch has no seal
    built = builder.build(-1, -1, -1)
    assert len(built) == builder.size
    assert parse_header(built).compression == 0


# -- the config ------------------------------------------------------------------------------


def test_compression_type_defaults_to_none() -> None:
    config = ProducerConfig()
    assert config.compression_type == "none"
    assert config.compression_codec == Codec.NONE
    assert COMPRESSION_TYPES == ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.mark.parametrize(
    ("given", "name", "codec"),
    [
        ("none", "none", Codec.NONE),
        ("gzip", "gzip", Codec.GZIP),
        ("snappy", "snappy", Codec.SNAPPY),
        ("LZ4", "lz4", Codec.LZ4),
        (" zstd ", "zstd", Codec.ZSTD),
    ],
)
def test_compression_type_takes_kafkas_names(given: str, name: str, codec: Codec) -> None:
    config = ProducerConfig(compression_type=given)
    assert (config.compression_type, config.compression_codec) == (name, codec)


@pytest.mark.parametrize("value", ["brotli", "", "uncompressed", "producer", 1, None])
def test_compression_type_refuses_anything_else_naming_the_property(value: Any) -> None:
    with pytest.raises(ClientError) as refused:
        ProducerConfig(compression_type=value)
    message = str(refused.value)
    assert "compression.type" in message
    assert "none, gzip, snappy, lz4, zstd" in message
    assert repr(value) in message


# -- the accumulator -------------------------------------------------------------------------


def test_batch_size_bounds_the_uncompressed_records_and_the_seal_compresses() -> None:
    async def scenario() -> None:
        accumulator = RecordAccumulator(4096, 0, 120_000, compression=Codec.ZSTD)
        values = [b"event %05d of a compressible stream of text" % i for i in range(400)]
        start, batches = 0, []
        while start < len(values):
            start, _, _ = accumulator.append_values(TP, values, start, BASE, 0.0)
        batches = accumulator.queued(TP)
        assert len(batches) > 3
        for batch in batches[:-1]:
            assert batch.closed
            assert 4096 - 60 < batch.size <= 4096  # full, by the uncompressed records
            sealed = accumulator.seal(batch)
            assert sealed < batch.size / 2  # text compresses
            payload = batch.encode(1, 0, 0)
            assert len(payload) == sealed
            assert parse_header(payload).compression == Codec.ZSTD
        decoded = [
            r.value for b in batches for r in decode_batch(b.payload or b.encode(1, 0, 0)).records
        ]
        assert decoded == values

    run(scenario)


def test_sealing_the_open_batch_closes_it_so_new_records_open_another() -> None:
    async def scenario() -> None:
        accumulator = RecordAccumulator(1 << 20, 0, 120_000, compression=Codec.LZ4)
        accumulator.append(TP, Record(None, b"a", BASE), 0.0)
        (batch,) = accumulator.queued(TP)
        accumulator.seal(batch)
        assert batch.closed
        accumulator.append(TP, Record(None, b"b", BASE), 0.0)
        first, second = accumulator.queued(TP)
        assert first is batch
        assert [r.value for r in decode_batch(first.encode(-1, -1, -1)).records] == [b"a"]
        assert [r.value for r in decode_batch(second.encode(-1, -1, -1)).records] == [b"b"]

    run(scenario)


# -- the producer, against stand-in brokers ------------------------------------------------


@pytest.mark.parametrize("codec", CODEC_IDS)
def test_send_and_send_many_deliver_compressed_batches(codec: str) -> None:
    async def scenario() -> None:
        async with fake_cluster(2) as cluster, connected(cluster) as connections:
            cluster.create("t", 2)
            values = [b'{"order":%d,"state":"confirmed"}' % i for i in range(300)]
            async with _producer(connections, compression_type=codec) as producer:
                handles = [await producer.send("t", v, partition=0) for v in values]
                ranges = await producer.send_many("t", values, partition=1)
                offsets = [m.offset for m in await asyncio.gather(*handles)]
                counts = [r.count for r in await asyncio.gather(*ranges)]
            assert offsets == list(range(300))
            assert sum(counts) == 300
            for p in (0, 1):
                tp = TopicPartition("t", p)
                assert cluster.records(tp) == values
                headers = [parse_header(b) for b in cluster.logs[tp]]
                assert {h.compression for h in headers} == {Codec[codec.upper()]}
                assert all(h.producer_id >= 0 for h in headers)  # idempotent by default
                sequences = [h.base_sequence for h in headers]
                counts_per_batch = [h.record_count for h in headers]
                assert sequences == [sum(counts_per_batch[:i]) for i in range(len(headers))]

    run(scenario)


def test_a_compressed_retry_resends_the_same_bytes_and_the_broker_drops_the_duplicate() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            async with _producer(connections, compression_type="gzip") as producer:
                assert (await (await producer.send("t", b"first" * 20))).offset == 0
                cluster.brokers[1].script[TP].append((APPEND_THEN, ErrorCode.REQUEST_TIMED_OUT))
                meta = await (await producer.send("t", b"second" * 20))
            assert meta.offset == 1
            assert cluster.records(TP) == [b"first" * 20, b"second" * 20]
            sent = [b for _, b in cluster.brokers[1].batches()]
            assert len(sent) == 3
            assert sent[1] == sent[2]
            assert parse_header(sent[1]).compression == Codec.GZIP

    run(scenario)


def test_compressed_batches_behind_a_failed_one_go_again_under_a_new_producer_id() -> None:
    """A compressed batch re-encoded under a new producer id: a new header and CRC over the
    same compressed records, which the broker's sequence checks and decoder accept."""

    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            broker = cluster.brokers[1]
            config = {"batch_size": 0, "linger_ms": 0, "compression_type": "snappy"}
            async with _producer(connections, **config) as producer:
                await (await producer.send("t", b"warm-up"))
                broker.hold = asyncio.Event()
                broker.script[TP].append(ErrorCode.CORRUPT_MESSAGE)
                futures = [await producer.send("t", b"%d" % i) for i in range(5)]
                await eventually(lambda: broker.in_flight[TP] == 5, what="five in flight")
                broker.hold.set()
                outcomes = await asyncio.gather(*futures, return_exceptions=True)
            assert isinstance(outcomes[0], errors.CorruptMessageError)
            assert cluster.records(TP) == [b"warm-up", b"1", b"2", b"3", b"4"]
            headers = [parse_header(b) for b in cluster.logs[TP]]
            assert [(h.producer_id, h.base_sequence) for h in headers] == [
                (1001, 0),
                (1002, 0),
                (1002, 1),
                (1002, 2),
                (1002, 3),
            ]
            assert {h.compression for h in headers} == {Codec.SNAPPY}
            validate_batches(b"".join(cluster.logs[TP]))

    run(scenario)


def test_max_request_size_counts_compressed_batches_as_sent() -> None:
    """Four partitions' batches of 100 KiB of text each compress to a few KiB: one request
    to their leader carries them all, where uncompressed they need one request each."""

    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 4)
            value = b"a line of very repetitive log text " * 3
            settings = {"linger_ms": 5_000, "max_request_size": 150_000}
            for codec, most in (("lz4", 1), ("none", 4)):
                before = len(cluster.brokers[1].produce_requests)
                async with _producer(connections, compression_type=codec, **settings) as producer:
                    for p in range(4):
                        await producer.send_many("t", [value] * 900, partition=p)
                    await producer.flush()
                requests = len(cluster.brokers[1].produce_requests) - before
                assert requests == most, codec

    run(scenario)


# -- the command line and the chaos workload -------------------------------------------------


def _parse(*argv: str) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    finish_args(args)
    return args


def test_perf_produce_takes_a_compression_type_and_defaults_to_json_values_with_one() -> None:
    plain = _parse("perf", "produce", "t")
    assert (plain.compression_type, payload_of(plain)) == ("none", "random")
    gzip = _parse("perf", "produce", "t", "--compression-type", "GZIP")
    assert (gzip.compression_type, payload_of(gzip)) == ("gzip", "json")
    chosen = _parse("perf", "produce", "t", "--compression-type", "lz4", "--payload", "random")
    assert payload_of(chosen) == "random"
    assert payload_of(_parse("perf", "produce", "t", "--payload", "json")) == "json"


def test_produce_takes_a_compression_type() -> None:
    assert _parse("produce", "t").compression_type == "none"
    assert _parse("produce", "t", "--compression-type", "zstd").compression_type == "zstd"


@pytest.mark.parametrize("command", [["perf", "produce", "t"], ["produce", "t"]])
def test_an_unknown_compression_type_is_a_usage_error_naming_the_valid_ones(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*command, "--compression-type", "brotli"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "compression.type" in err
    assert "none, gzip, snappy, lz4, zstd" in err


@pytest.mark.parametrize("size", [0, 10, 100, 190, 400, 1000])
def test_json_values_are_the_record_size_all_different_and_compressible(size: int) -> None:
    values = perf_values("json", size, 2000)
    assert len(values) == 2000
    assert {len(v) for v in values} == {size}
    if size >= 100:
        assert len(set(values)) == len(values)
        joined = b"".join(values)
        ratio = len(joined) / len(zlib.compress(joined, 6))
        assert 2 < ratio < 20  # text, not one repeated value (~100x) nor noise (~1x)
    assert perf_values("json", size, 50) == values[:50]  # one seed: runs compare


def test_random_values_are_one_value_repeated() -> None:
    values = perf_values("random", 100, 10)
    assert {len(v) for v in values} == {100}
    assert len(set(values)) == 1
    with pytest.raises(ValueError, match="unknown payload"):
        perf_values("zeros", 100, 10)


def test_chaos_run_passes_the_compression_type_to_the_workload_producers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from chaos.runner import RunSettings
    from chaos.workload import Workload, WorkloadSpec

    seen: list[RunSettings] = []

    def fake_run_chaos(settings: RunSettings) -> int:
        seen.append(settings)
        return 0

    monkeypatch.setattr("chaos.runner.run_chaos", fake_run_chaos)
    args = _parse("chaos", "run", "--compression-type", "zstd", "--out", str(tmp_path / "r"))
    assert args.run(args) == 0
    assert seen[0].compression_type == "zstd"
    assert RunSettings(out=tmp_path).compression_type == "none"
    with pytest.raises(SystemExit):
        _parse("chaos", "run", "--compression-type", "brotli")

    spawned: list[list[str]] = []

    class _Popen:
        def __init__(self, argv: list[str], **kwargs: object) -> None:
            spawned.append(argv)

    monkeypatch.setattr(subprocess, "Popen", _Popen)
    spec = WorkloadSpec("b:1", "z:2", ["t"], 1, producers=2, group_consumers=1,
                        compression_type="zstd")  # fmt: skip
    Workload(spec, tmp_path / "h", tmp_path / "l").start()
    producers = [a for a in spawned if "producer" in a]
    consumers = [a for a in spawned if "consumer" in a]
    assert len(producers) == 2
    for argv in producers:
        assert argv[argv.index("--compression-type") + 1] == "zstd"
    assert all("--compression-type" not in a for a in consumers)


def test_the_workload_producer_parses_its_compression_type(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chaos import workload

    parsed: list[argparse.Namespace] = []

    async def fake_produce(args: argparse.Namespace) -> None:
        parsed.append(args)

    monkeypatch.setattr(workload, "_produce", fake_produce)
    base = ["producer", "--bootstrap", "b:1", "--zookeeper", "z:2", "--topics", "t",
            "--partitions", "1", "--process", "0", "--history", "h.jsonl"]  # fmt: skip
    assert workload.main([*base, "--compression-type", "LZ4"]) == 0
    assert workload.main(base) == 0
    assert [a.compression_type for a in parsed] == ["lz4", "none"]
