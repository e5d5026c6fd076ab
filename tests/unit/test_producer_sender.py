"""Producer and Sender against stand-in brokers: real gRPC servers in this process that keep
an in-memory log per partition, answer Metadata from one shared view of leadership, check
idempotent sequences as the broker contract says (a duplicate of the last batch gets
NONE with its original offset, a gap OUT_OF_ORDER_SEQUENCE), and fail as each test
scripts it. Batching, grouping per leader, retries, metadata refresh, timeouts, sequences.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
import pytest

from client.metadata import BrokerConnections, BrokerUnreachableError, ClientError
from client.partitioner import Partitioner, partition_for_key
from client.producer import (
    DeliveryTimeoutError,
    InDoubtBatchError,
    Producer,
    ProducerClosedError,
    ProducerConfig,
    RecordMetadata,
    RecordTooLargeError,
)
from proto import errors
from proto.records.builder import batch_of_one_size, encode_record_tail
from proto.records.record_batch import decode_batch, parse_header
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.wire.minibroker_pb2 import ErrorCode
from tests.unimplemented_rpcs import NoTransactionRpcs

pytestmark = pytest.mark.timeout(60)

APPEND_THEN = "append-then"
"""Script marker: append the batch, then answer with the scripted error (the ack is lost)."""


@dataclass
class ProducerState:
    next_sequence: int
    recent: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=5))
    """(base sequence, base offset) of the producer's last 5 batches, as a broker keeps
    them to answer a retry with its original offset."""


@dataclass
class FakeCluster:
    """What every stand-in broker agrees on: topics, leaders, logs, producer ids."""

    topics: dict[str, int] = field(default_factory=dict)
    leaders: dict[TopicPartition, int] = field(default_factory=dict)
    brokers: dict[int, FakeBroker] = field(default_factory=dict)
    logs: dict[TopicPartition, list[bytes]] = field(default_factory=lambda: defaultdict(list))
    """Appended batches per partition, as sent (the log's offsets: see ``offsets``)."""
    next_offset: dict[TopicPartition, int] = field(default_factory=lambda: defaultdict(int))
    producers: dict[tuple[int, TopicPartition], ProducerState] = field(default_factory=dict)
    next_producer_id: int = 1000
    init_producer_id_script: deque[grpc.StatusCode | int] = field(default_factory=deque)
    init_producer_id_calls: int = 0

    def create(self, topic: str, partitions: int, leaders: list[int] | None = None) -> None:
        self.topics[topic] = partitions
        ids = sorted(self.brokers)
        for p in range(partitions):
            self.leaders[TopicPartition(topic, p)] = (
                leaders[p] if leaders is not None else ids[p % len(ids)]
            )

    def records(self, tp: TopicPartition) -> list[bytes | None]:
        return [r.value for batch in self.logs[tp] for r in decode_batch(batch).records]

    def append(self, tp: TopicPartition, batch: bytes) -> tuple[int, int]:
        header = parse_header(batch)
        if header.producer_id >= 0:
            state = self.producers.get((header.producer_id, tp))
            for sequence, offset in state.recent if state is not None else ():
                if header.base_sequence == sequence:
                    return ErrorCode.NONE, offset  # a duplicate of a recent batch
            expected = 0 if state is None else state.next_sequence
            if header.base_sequence != expected:
                return ErrorCode.OUT_OF_ORDER_SEQUENCE, -1
        base = self.next_offset[tp]
        self.next_offset[tp] += header.record_count
        self.logs[tp].append(batch)
        if header.producer_id >= 0:
            state = self.producers.setdefault((header.producer_id, tp), ProducerState(0))
            state.next_sequence = header.base_sequence + header.record_count
            state.recent.append((header.base_sequence, base))
        return ErrorCode.NONE, base


class FakeBroker(NoTransactionRpcs, pb_grpc.BrokerServicer):
    def __init__(self, cluster: FakeCluster, node_id: int) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.port = 0
        self.produce_requests: list[pb.ProduceRequest] = []
        self.metadata_requests = 0
        self.script: dict[TopicPartition, deque[int | tuple[str, int]]] = defaultdict(deque)
        """Per partition: error codes to answer before behaving normally."""
        self.abort_next: deque[grpc.StatusCode] = deque()
        """gRPC statuses to fail the next Produce requests with."""
        self.hold: asyncio.Event | None = None
        """While set to an unset event, Produce requests wait for it."""
        self.in_flight: dict[TopicPartition, int] = defaultdict(int)
        self.max_in_flight: dict[TopicPartition, int] = defaultdict(int)
        self.sessions_supported = True
        """False: ProduceSession is UNIMPLEMENTED, as on a broker that predates it."""
        self.sessions = 0
        """ProduceSession calls opened."""
        self.metadata_hold: asyncio.Event | None = None
        """While set to an unset event, Metadata requests wait for it."""

    async def Metadata(
        self, request: pb.MetadataRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.MetadataResponse:
        self.metadata_requests += 1
        if self.metadata_hold is not None:
            await self.metadata_hold.wait()
        cluster = self.cluster
        response = pb.MetadataResponse(controller_id=min(cluster.brokers))
        for b in cluster.brokers.values():
            response.brokers.add(node_id=b.node_id, host="127.0.0.1", port=b.port)
        for name in request.topics or sorted(cluster.topics):
            if name not in cluster.topics:
                response.topics.add(name=name, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            topic = response.topics.add(name=name, error_code=ErrorCode.NONE)
            for p in range(cluster.topics[name]):
                leader = cluster.leaders.get(TopicPartition(name, p), -1)
                topic.partitions.add(
                    partition_index=p,
                    leader_id=leader,
                    error_code=ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
                    replica_nodes=sorted(cluster.brokers),
                    isr_nodes=sorted(cluster.brokers),
                )
        return response

    async def ProduceSession(  # type: ignore[override]  # grpc.aio's context.write style
        self,
        request_iterator: AsyncIterator[pb.ProduceRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> None:
        """Each request answered by a task of its own, as the broker does; a scripted abort
        ends the whole stream, as a broker's failure would."""
        if not self.sessions_supported:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        self.sessions += 1
        answers: set[asyncio.Task[None]] = set()
        writing = asyncio.Lock()

        async def answer(request: pb.ProduceRequest) -> None:
            with contextlib.suppress(grpc.aio.AbortError):
                response = await self.Produce(request, context)
                response.correlation_id = request.correlation_id
                async with writing:
                    await context.write(response)

        try:
            async for request in request_iterator:
                task = asyncio.create_task(answer(request))
                answers.add(task)
                task.add_done_callback(answers.discard)
            while answers:
                await asyncio.wait(set(answers))
        finally:
            for task in answers:
                task.cancel()

    async def Produce(
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ProduceResponse:
        self.produce_requests.append(request)
        tps = [TopicPartition(t.name, p.index) for t in request.topics for p in t.partitions]
        for tp in tps:
            self.in_flight[tp] += 1
            self.max_in_flight[tp] = max(self.max_in_flight[tp], self.in_flight[tp])
        try:
            if self.hold is not None:
                await self.hold.wait()
            if self.abort_next:
                await context.abort(self.abort_next.popleft(), "scripted")
            response = pb.ProduceResponse()
            for t in request.topics:
                topic = response.responses.add(name=t.name)
                for p in t.partitions:
                    code, base = self._produce(TopicPartition(t.name, p.index), p.records)
                    topic.partitions.add(index=p.index, error_code=code, base_offset=base)
            return response
        finally:
            for tp in tps:
                self.in_flight[tp] -= 1

    def _produce(self, tp: TopicPartition, records: bytes) -> tuple[int, int]:
        script = self.script[tp]
        if script:
            step = script.popleft()
            if isinstance(step, tuple):
                self.cluster.append(tp, records)
                return step[1], -1
            return step, -1
        if self.cluster.leaders.get(tp) != self.node_id:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, -1
        return self.cluster.append(tp, records)

    async def Fetch(
        self, request: pb.FetchRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.FetchResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not a producer's call")
        raise AssertionError("unreachable")

    async def FetchSession(  # type: ignore[override]
        self,
        request_iterator: AsyncIterator[pb.FetchRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> None:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not a producer's call")

    async def ListOffsets(
        self, request: pb.ListOffsetsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListOffsetsResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not a producer's call")
        raise AssertionError("unreachable")

    async def OffsetsForLeaderEpoch(
        self,
        request: pb.OffsetsForLeaderEpochRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> pb.OffsetsForLeaderEpochResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not a producer's call")
        raise AssertionError("unreachable")

    async def InitProducerId(
        self, request: pb.InitProducerIdRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.InitProducerIdResponse:
        cluster = self.cluster
        cluster.init_producer_id_calls += 1
        if cluster.init_producer_id_script:
            step = cluster.init_producer_id_script.popleft()
            if isinstance(step, grpc.StatusCode):
                await context.abort(step, "scripted")
            return pb.InitProducerIdResponse(error_code=step)  # type: ignore[arg-type]
        cluster.next_producer_id += 1
        return pb.InitProducerIdResponse(producer_id=cluster.next_producer_id, producer_epoch=0)

    async def ListGroups(
        self, request: pb.ListGroupsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListGroupsResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not a producer's call")

    async def DescribeGroups(
        self, request: pb.DescribeGroupsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DescribeGroupsResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not a producer's call")

    async def DeleteRecords(
        self, request: pb.DeleteRecordsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteRecordsResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not a producer's call")

    async def DeleteGroups(
        self, request: pb.DeleteGroupsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteGroupsResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not a producer's call")

    async def DeleteGroupOffsets(
        self, request: pb.DeleteGroupOffsetsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteGroupOffsetsResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not a producer's call")

    async def FetchGroupOffsets(
        self, request: pb.FetchGroupOffsetsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.FetchGroupOffsetsResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not a producer's call")

    async def CommitGroupOffsets(
        self, request: pb.CommitGroupOffsetsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CommitGroupOffsetsResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not a producer's call")

    def batches(self) -> list[tuple[TopicPartition, bytes]]:
        """Every batch received, in arrival order."""
        return [
            (TopicPartition(t.name, p.index), p.records)
            for r in self.produce_requests
            for t in r.topics
            for p in t.partitions
        ]


@contextlib.asynccontextmanager
async def fake_cluster(brokers: int = 1) -> AsyncIterator[FakeCluster]:
    cluster = FakeCluster()
    servers = []
    try:
        for node_id in range(1, brokers + 1):
            broker = FakeBroker(cluster, node_id)
            server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
            pb_grpc.add_BrokerServicer_to_server(broker, server)
            broker.port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            servers.append(server)
            cluster.brokers[node_id] = broker
        yield cluster
    finally:
        await asyncio.gather(*(s.stop(None) for s in servers))


@contextlib.asynccontextmanager
async def connected(cluster: FakeCluster) -> AsyncIterator[BrokerConnections]:
    first = cluster.brokers[min(cluster.brokers)]
    async with BrokerConnections([("127.0.0.1", first.port)], request_timeout_s=5) as c:
        yield c


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


async def eventually(predicate: Callable[[], object], within: float = 5.0, what: str = "") -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {within}s: {what}")
        await asyncio.sleep(0.01)


def fast(**settings: Any) -> ProducerConfig:
    """A config with short backoffs, overridden by ``settings``. The request timeout is
    not short: on a loaded machine a first request (a new connection) can take seconds,
    and a timeout would add a retry that tests counting requests do not expect."""
    defaults: dict[str, Any] = {
        "linger_ms": 5,  # Kafka's lingering, which most of these tests gather records with
        "retry_backoff_ms": 10,
        "request_timeout_ms": 10_000,
        "delivery_timeout_ms": 20_000,
    }
    return ProducerConfig(**{**defaults, **settings})


# -- placement and batching ----------------------------------------------------------------------


def test_keyed_records_land_on_kafkas_partition_in_send_order() -> None:
    async def scenario() -> None:
        async with fake_cluster(2) as cluster, connected(cluster) as connections:
            cluster.create("orders", 5)
            async with Producer(connections, fast()) as producer:
                futures = []
                for i in range(300):
                    key = f"customer-{i % 13}".encode()
                    futures.append(await producer.send("orders", f"{i}".encode(), key=key))
                results = await asyncio.gather(*futures)
            for i, meta in enumerate(results):
                assert meta.partition == partition_for_key(f"customer-{i % 13}".encode(), 5)
            for p in range(5):
                tp = TopicPartition("orders", p)
                values = [int(v or b"") for v in cluster.records(tp)]
                assert values == sorted(values)  # per-partition (hence per-key) order
                offsets = [m.offset for m in results if m.partition == p]
                assert offsets == list(range(len(values)))

    run(scenario)


def test_linger_gathers_records_into_one_batch_and_one_request() -> None:
    """Records wait while their batch lingers and leave together. (A linger short enough
    to end the test on its own would count on the ten sends taking less than it: on a
    loaded machine they did not, and the records left in two batches.)"""

    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            broker = cluster.brokers[1]
            async with Producer(connections, fast(linger_ms=5_000)) as producer:
                futures = [await producer.send("t", b"v%d" % i) for i in range(10)]
                await asyncio.sleep(0.05)  # give the batch the chance to (wrongly) go early
                assert broker.produce_requests == []
                await producer.flush()
                await asyncio.gather(*futures)
            assert len(broker.produce_requests) == 1
            (batch,) = cluster.logs[TopicPartition("t", 0)]
            assert parse_header(batch).record_count == 10

    run(scenario)


def test_a_batch_leaves_once_linger_ms_has_passed() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            async with Producer(connections, fast(linger_ms=100)) as producer:
                future = await producer.send("t", b"v")
                assert (await asyncio.wait_for(future, 10)).offset == 0  # no flush

    run(scenario)


def test_with_linger_0_records_wait_while_their_partition_has_a_batch_in_flight() -> None:
    """Nagle's rule for linger_ms 0: a record for an idle partition leaves at once; those
    that come while its batch is in flight gather into the next request, sent when the
    answer comes."""

    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            tp = TopicPartition("t", 0)
            broker = cluster.brokers[1]
            async with Producer(connections, fast(linger_ms=0)) as producer:
                broker.hold = asyncio.Event()
                first = await producer.send("t", b"first")
                await eventually(lambda: broker.in_flight[tp] == 1, what="sent at once")
                rest = [await producer.send("t", b"v%d" % i) for i in range(9)]
                await asyncio.sleep(0.05)  # give them the chance to (wrongly) go alone
                assert len(broker.produce_requests) == 1
                broker.hold.set()
                await asyncio.gather(first, *rest)
            assert [parse_header(b).record_count for b in cluster.logs[tp]] == [1, 9]

    run(scenario)


def test_batch_size_bounds_every_batch() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            config = fast(batch_size=1000, linger_ms=50)
            async with Producer(connections, config) as producer:
                futures = [await producer.send("t", bytes(90), partition=0) for _ in range(100)]
                await asyncio.gather(*futures)
            batches = cluster.logs[TopicPartition("t", 0)]
            assert sum(parse_header(b).record_count for b in batches) == 100
            assert len(batches) >= 10
            assert all(len(b) <= 1000 for b in batches)

    run(scenario)


def test_keyless_records_stick_to_a_partition_until_its_batch_is_full() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 4)
            config = fast(batch_size=1000, linger_ms=5_000)
            async with Producer(connections, config) as producer:
                futures = [await producer.send("t", bytes(90)) for _ in range(40)]
                await producer.flush()
            partitions = [(await f).partition for f in futures]
            runs = [partitions[0]]
            for p in partitions[1:]:
                if p != runs[-1]:
                    runs.append(p)
            # Whole batches on one partition each, then a different partition.
            assert 3 <= len(runs) <= 6
            for tp, batches in cluster.logs.items():
                for b in batches:
                    assert parse_header(b).record_count >= 8 or tp.partition == partitions[-1]

    run(scenario)


def test_ready_batches_for_one_leader_travel_in_one_request() -> None:
    async def scenario() -> None:
        async with fake_cluster(2) as cluster, connected(cluster) as connections:
            cluster.create("t", 4, leaders=[1, 2, 1, 2])
            config = fast(linger_ms=5_000)
            async with Producer(connections, config) as producer:
                futures = [await producer.send("t", b"v", partition=p) for p in range(4)]
                await producer.flush()
                await asyncio.gather(*futures)
            for broker_id, partitions in ((1, {0, 2}), (2, {1, 3})):
                requests = cluster.brokers[broker_id].produce_requests
                assert len(requests) == 1
                assert {p.index for t in requests[0].topics for p in t.partitions} == partitions

    run(scenario)


def test_flush_does_not_wait_for_linger() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            async with Producer(connections, fast(linger_ms=5_000)) as producer:
                future = await producer.send("t", b"v")
                await asyncio.wait_for(producer.flush(), 5)
                assert future.done()
                assert (await future).offset == 0

    run(scenario)


def test_without_idempotence_one_batch_per_partition_is_in_flight() -> None:
    """Without idempotence a retry could reorder records behind it (Kafka allows that), so a
    partition has one batch in flight at a time; the first batch of each partition leaves
    as soon as it exists, every later one waits for its answer."""

    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 2)
            broker = cluster.brokers[1]
            broker.hold = asyncio.Event()
            config = fast(batch_size=0, linger_ms=0, acks=1)
            async with Producer(connections, config) as producer:
                futures = [await producer.send("t", b"%d" % i, partition=i % 2) for i in range(20)]
                tps = [TopicPartition("t", p) for p in range(2)]
                await eventually(
                    lambda: all(broker.in_flight[tp] == 1 for tp in tps), what="first batches"
                )
                await asyncio.sleep(0.05)  # give a second request the chance to (wrongly) go
                assert [broker.in_flight[tp] for tp in tps] == [1, 1]
                assert len(broker.produce_requests) <= 2
                broker.hold.set()
                results = await asyncio.gather(*futures)
            assert max(broker.max_in_flight.values()) == 1
            for p in range(2):
                assert [m.offset for m in results if m.partition == p] == list(range(10))
                assert cluster.records(TopicPartition("t", p)) == [
                    b"%d" % i for i in range(p, 20, 2)
                ]

    run(scenario)


def test_with_idempotence_batches_of_a_partition_are_pipelined_in_order() -> None:
    """Up to max_in_flight_requests_per_connection batches of a partition are in flight at
    once; they arrive, are appended and are acknowledged in the order they were sent."""

    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 2)
            broker = cluster.brokers[1]
            broker.hold = asyncio.Event()
            config = fast(batch_size=0, linger_ms=0, max_in_flight_requests_per_connection=3)
            async with Producer(connections, config) as producer:
                futures = [await producer.send("t", b"%d" % i, partition=i % 2) for i in range(20)]
                tps = [TopicPartition("t", p) for p in range(2)]
                await eventually(
                    lambda: all(broker.in_flight[tp] == 3 for tp in tps), what="three in flight"
                )
                await asyncio.sleep(0.05)  # give a fourth request the chance to (wrongly) go
                assert [broker.in_flight[tp] for tp in tps] == [3, 3]
                broker.hold.set()
                results = await asyncio.gather(*futures)
            assert max(broker.max_in_flight.values()) == 3
            for p in range(2):
                assert [m.offset for m in results if m.partition == p] == list(range(10))
                assert cluster.records(TopicPartition("t", p)) == [
                    b"%d" % i for i in range(p, 20, 2)
                ]

    run(scenario)


@pytest.mark.parametrize(
    "first_answer",
    [ErrorCode.NOT_ENOUGH_REPLICAS, (APPEND_THEN, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)],
    ids=["refused", "appended-unacknowledged"],
)
def test_a_failed_batch_among_several_in_flight_goes_again_before_those_sent_after_it(
    first_answer: int | tuple[str, int],
) -> None:
    """Five batches in flight; the first is refused (nothing written) or written without an
    acknowledgement. The broker's sequence checks refuse those behind a missing one
    (OUT_OF_ORDER_SEQUENCE), and the producer sends them all again in their first order:
    every record is written once, in order, acknowledged at its offset."""

    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            tp = TopicPartition("t", 0)
            broker = cluster.brokers[1]
            async with Producer(connections, fast(batch_size=0, linger_ms=0)) as producer:
                await (await producer.send("t", b"warm-up"))
                broker.hold = asyncio.Event()
                broker.script[tp].append(first_answer)
                futures = [await producer.send("t", b"%d" % i) for i in range(12)]
                await eventually(lambda: broker.in_flight[tp] == 5, what="five in flight")
                broker.hold.set()
                results = await asyncio.gather(*futures)
            assert [m.offset for m in results] == list(range(1, 13))
            assert cluster.records(tp) == [b"warm-up"] + [b"%d" % i for i in range(12)]
            assert max(broker.max_in_flight.values()) == 5

    run(scenario)


def test_batches_in_flight_behind_one_that_fails_for_good_go_again_under_a_new_id() -> None:
    """The first of five batches in flight is refused for good: its record fails; the four
    behind it, refused for the gap it left, are sent again under a new producer id, in
    order, instead of failing with it."""

    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            tp = TopicPartition("t", 0)
            broker = cluster.brokers[1]
            async with Producer(connections, fast(batch_size=0, linger_ms=0)) as producer:
                await (await producer.send("t", b"warm-up"))
                broker.hold = asyncio.Event()
                broker.script[tp].append(ErrorCode.CORRUPT_MESSAGE)
                futures = [await producer.send("t", b"%d" % i) for i in range(5)]
                await eventually(lambda: broker.in_flight[tp] == 5, what="five in flight")
                broker.hold.set()
                outcomes = await asyncio.gather(*futures, return_exceptions=True)
            assert isinstance(outcomes[0], errors.CorruptMessageError)
            assert [m.offset for m in outcomes[1:]] == [1, 2, 3, 4]  # type: ignore[union-attr]
            assert cluster.records(tp) == [b"warm-up", b"1", b"2", b"3", b"4"]
            assert cluster.init_producer_id_calls == 2

    run(scenario)


def test_requests_to_a_leader_share_one_session_across_a_broken_stream() -> None:
    """Every request to a broker travels on one ProduceSession stream; a stream the broker
    ends (here a scripted UNAVAILABLE) fails the request on it, which is retried on a new
    stream, and the records keep their order."""

    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            broker = cluster.brokers[1]
            async with Producer(connections, fast(linger_ms=0)) as producer:
                for i in range(10):
                    await (await producer.send("t", b"%d" % i))
                assert broker.sessions == 1
                broker.abort_next.append(grpc.StatusCode.UNAVAILABLE)
                await (await producer.send("t", b"10"))
                for i in range(11, 20):
                    await (await producer.send("t", b"%d" % i))
            assert broker.sessions == 2
            assert len(broker.produce_requests) == 21  # 20 requests, one of them twice
            assert cluster.records(TopicPartition("t", 0)) == [b"%d" % i for i in range(20)]

    run(scenario)


@pytest.mark.parametrize("status", [grpc.StatusCode.INTERNAL, grpc.StatusCode.UNAVAILABLE])
def test_a_stream_that_breaks_with_internal_is_retried_not_failed(
    status: grpc.StatusCode,
) -> None:
    """A broker killed mid-stream often ends it with "INTERNAL: Internal error from Core":
    as UNAVAILABLE, a transport failure, retried, and no producer id reset (which would
    write the batches in doubt a second time)."""

    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            broker = cluster.brokers[1]
            async with Producer(connections, fast(linger_ms=0)) as producer:
                await (await producer.send("t", b"0"))
                broker.abort_next.append(status)
                assert (await (await producer.send("t", b"1"))).offset == 1
            assert cluster.records(TopicPartition("t", 0)) == [b"0", b"1"]
            assert cluster.init_producer_id_calls == 1

    run(scenario)


def test_a_broker_without_produce_sessions_gets_unary_produce_calls() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            broker = cluster.brokers[1]
            broker.sessions_supported = False
            async with Producer(connections, fast(linger_ms=0)) as producer:
                results = [await (await producer.send("t", b"%d" % i)) for i in range(5)]
            assert [m.offset for m in results] == list(range(5))
            assert broker.sessions == 0
            assert len(broker.produce_requests) == 5

    run(scenario)


# -- retries and failures ------------------------------------------------------------------------


def test_not_leader_refreshes_metadata_and_retries_on_the_new_leader() -> None:
    async def scenario() -> None:
        async with fake_cluster(2) as cluster, connected(cluster) as connections:
            cluster.create("t", 1, leaders=[1])
            tp = TopicPartition("t", 0)
            async with Producer(connections, fast()) as producer:
                assert (await (await producer.send("t", b"before"))).offset == 0
                cluster.leaders[tp] = 2  # an election the producer has not heard of
                meta = await (await producer.send("t", b"after"))
            assert meta.offset == 1
            assert len(cluster.brokers[1].produce_requests) == 2  # the second got NOT_LEADER
            assert len(cluster.brokers[2].produce_requests) == 1
            assert cluster.records(tp) == [b"before", b"after"]

    run(scenario)


def test_a_batch_refused_not_leader_waits_for_newer_metadata_before_its_retry() -> None:
    """The retry of a batch that a broker refused as not its leader goes where metadata
    newer than the refusal says, however long that metadata takes (here: until released),
    never again to the broker that refused it on the metadata the producer still has: that
    round trip would be refused again."""

    async def scenario() -> None:
        async with fake_cluster(2) as cluster, connected(cluster) as connections:
            cluster.create("t", 1, leaders=[1])
            tp = TopicPartition("t", 0)
            old, new = cluster.brokers[1], cluster.brokers[2]
            async with Producer(connections, fast()) as producer:
                assert (await (await producer.send("t", b"before"))).offset == 0
                cluster.leaders[tp] = 2
                held = asyncio.Event()
                old.metadata_hold = new.metadata_hold = held
                asked = old.metadata_requests + new.metadata_requests
                future = await producer.send("t", b"after")
                await eventually(lambda: len(old.produce_requests) == 2, what="NOT_LEADER")
                await eventually(
                    lambda: old.metadata_requests + new.metadata_requests > asked,
                    what="the refresh it asked for",
                )
                await asyncio.sleep(0.2)  # twenty retry backoffs for a wasted retry to go
                assert (len(old.produce_requests), len(new.produce_requests)) == (2, 0)
                held.set()
                assert (await future).offset == 1
            assert (len(old.produce_requests), len(new.produce_requests)) == (2, 1)
            assert cluster.records(tp) == [b"before", b"after"]

    run(scenario)


def test_an_unreachable_leader_is_retried_after_a_metadata_refresh() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            broker = cluster.brokers[1]
            broker.abort_next.extend([grpc.StatusCode.UNAVAILABLE] * 2)
            async with Producer(connections, fast()) as producer:
                await producer.start()
                metadata_before = broker.metadata_requests
                meta = await (await producer.send("t", b"v"))
            assert meta.offset == 0
            assert len(broker.produce_requests) == 3
            assert broker.metadata_requests > metadata_before + 1

    run(scenario)


def test_retriable_errors_are_retried_until_delivery_timeout_then_fail_with_the_error() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            tp = TopicPartition("t", 0)
            cluster.brokers[1].script[tp].extend([ErrorCode.NOT_ENOUGH_REPLICAS] * 10_000)
            config = ProducerConfig(
                linger_ms=0, retry_backoff_ms=20, request_timeout_ms=200, delivery_timeout_ms=400
            )
            async with Producer(connections, config) as producer:
                future = await producer.send("t", b"v")
                with pytest.raises(errors.NotEnoughReplicasError) as caught:
                    await future
            message = str(caught.value)
            assert message.startswith("NOT_ENOUGH_REPLICAS: t-0: ")
            assert "delivery_timeout_ms=400 expired" in message
            assert "\n" not in message
            assert 3 <= len(cluster.brokers[1].produce_requests) <= 25

    run(scenario)


def test_retries_bound_the_attempts() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            cluster.brokers[1].script[TopicPartition("t", 0)].extend(
                [ErrorCode.REQUEST_TIMED_OUT] * 10
            )
            config = fast(retries=2, enable_idempotence=False)
            async with Producer(connections, config) as producer:
                with pytest.raises(errors.RequestTimedOutError, match="after 3 attempts"):
                    await (await producer.send("t", b"v"))
            assert len(cluster.brokers[1].produce_requests) == 3

    run(scenario)


def test_a_non_retriable_error_fails_the_records_at_once() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            cluster.brokers[1].script[TopicPartition("t", 0)].append(ErrorCode.MESSAGE_TOO_LARGE)
            # One batch of three whatever the machine's load: it lingers until the flush.
            async with Producer(connections, fast(linger_ms=5_000)) as producer:
                futures = [await producer.send("t", b"v") for _ in range(3)]
                await producer.flush()
                outcomes = await asyncio.gather(*futures, return_exceptions=True)
                assert all(isinstance(o, errors.MessageTooLargeError) for o in outcomes)
                assert str(outcomes[0]).startswith("MESSAGE_TOO_LARGE: t-0: ")
                # The producer goes on: a later record is delivered.
                later = await producer.send("t", b"w")
                await producer.flush()
                assert (await later).offset == 0
            assert len(cluster.brokers[1].produce_requests) == 2

    run(scenario)


def test_records_without_a_leader_expire_with_the_reason() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1, leaders=[-1])
            config = ProducerConfig(
                linger_ms=0, retry_backoff_ms=20, request_timeout_ms=200, delivery_timeout_ms=300
            )
            async with Producer(connections, config) as producer:
                with pytest.raises(errors.LeaderNotAvailableError, match="no leader for t-0"):
                    await (await producer.send("t", b"v"))
            assert cluster.brokers[1].produce_requests == []

    run(scenario)


def test_a_refused_request_fails_with_the_brokers_explanation() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            cluster.brokers[1].abort_next.append(grpc.StatusCode.INVALID_ARGUMENT)
            async with Producer(connections, fast()) as producer:
                with pytest.raises(ClientError, match="refused the produce request: INVALID_ARG"):
                    await (await producer.send("t", b"v"))

    run(scenario)


# -- send() errors -------------------------------------------------------------------------------


def test_unknown_topic_is_a_client_error_after_a_few_refreshes() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            config = fast(max_block_ms=1000)  # the wait is min(3 s, this)
            async with Producer(connections, config) as producer:
                before = cluster.brokers[1].metadata_requests
                with pytest.raises(ClientError, match=r"^unknown topic 'nope'$"):
                    await producer.send("nope", b"v")
                assert cluster.brokers[1].metadata_requests - before >= 3

    run(scenario)


def test_a_topic_that_appears_while_send_waits_is_used() -> None:
    async def scenario() -> None:
        async with (
            fake_cluster() as cluster,
            connected(cluster) as connections,
            Producer(connections, fast()) as producer,
        ):
            loop = asyncio.get_running_loop()
            loop.call_later(0.3, cluster.create, "late", 1)
            assert (await (await producer.send("late", b"v"))).offset == 0

    run(scenario)


def test_invalid_topic_name_is_refused_without_asking() -> None:
    async def scenario() -> None:
        async with (
            fake_cluster() as cluster,
            connected(cluster) as connections,
            Producer(connections, fast()) as producer,
        ):
            with pytest.raises(ClientError, match=r"^topic name 'a b' contains ' ': only ASCII"):
                await producer.send("a b", b"v")

    run(scenario)


def test_partition_out_of_range_is_a_client_error() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 3)
            async with Producer(connections, fast()) as producer:
                with pytest.raises(
                    ClientError,
                    match=r"partition 3 out of range: topic 't' has 3 partition\(s\), 0 to 2",
                ):
                    await producer.send("t", b"v", partition=3)
                with pytest.raises(ClientError, match="partition -1 out of range"):
                    await producer.send("t", b"v", partition=-1)

    run(scenario)


def test_a_record_larger_than_max_request_size_is_refused() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            config = fast(max_request_size=1000)
            async with Producer(connections, config) as producer:
                with pytest.raises(RecordTooLargeError, match="larger than max_request_size"):
                    await producer.send("t", bytes(1000))

    run(scenario)


def test_values_must_be_bytes() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            async with Producer(connections, fast()) as producer:
                with pytest.raises(TypeError, match="value must be bytes or None, got str"):
                    await producer.send("t", "text")  # type: ignore[arg-type]

    run(scenario)


def test_no_broker_reachable_names_the_addresses() -> None:
    async def scenario() -> None:
        async with BrokerConnections([("127.0.0.1", 1)], request_timeout_s=1) as connections:
            config = fast(enable_idempotence=False, max_block_ms=300)
            async with Producer(connections, config) as producer:
                with pytest.raises(BrokerUnreachableError, match=r"127\.0\.0\.1:1"):
                    await producer.send("t", b"v")

    run(scenario)


# -- acks ----------------------------------------------------------------------------------------


def test_acks_0_completes_with_offset_minus_one() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            async with Producer(connections, fast(acks=0)) as producer:
                meta = await (await producer.send("t", b"v", timestamp_ms=1234))
            assert meta == RecordMetadata("t", 0, -1, 1234)
            assert cluster.brokers[1].produce_requests[0].acks == 0
            assert parse_header(cluster.logs[TopicPartition("t", 0)][0]).producer_id == -1

    run(scenario)


@pytest.mark.parametrize("acks", [1, -1])
def test_acks_travel_in_the_request(acks: int) -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            config = fast(acks=acks)
            async with Producer(connections, config) as producer:
                await (await producer.send("t", b"v"))
            request = cluster.brokers[1].produce_requests[0]
            assert (request.acks, request.timeout_ms) == (acks, config.request_timeout_ms)

    run(scenario)


# -- idempotence ---------------------------------------------------------------------------------


def test_sequences_count_records_per_partition_from_zero() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 2)
            # Batches of exactly 3, 1 and 4 whatever the load: each lingers until its flush.
            async with Producer(connections, fast(linger_ms=5_000)) as producer:
                for count in (3, 1, 4):
                    for p in range(2):
                        for _ in range(count):
                            await producer.send("t", b"v", partition=p)
                    await producer.flush()
                pid = producer.producer_id
            assert pid == 1001
            for p in range(2):
                headers = [
                    parse_header(b)
                    for tp, b in cluster.brokers[1].batches()
                    if tp == TopicPartition("t", p)
                ]
                assert [(h.producer_id, h.base_sequence, h.record_count) for h in headers] == [
                    (1001, 0, 3),
                    (1001, 3, 1),
                    (1001, 4, 4),
                ]

    run(scenario)


def test_a_retry_resends_the_same_bytes_and_the_broker_drops_the_duplicate() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            tp = TopicPartition("t", 0)
            async with Producer(connections, fast()) as producer:
                assert (await (await producer.send("t", b"first"))).offset == 0
                # Written, but the acknowledgement is lost: the producer must retry, and
                # the broker recognises the retry by its sequence.
                cluster.brokers[1].script[tp].append((APPEND_THEN, ErrorCode.REQUEST_TIMED_OUT))
                meta = await (await producer.send("t", b"second"))
            assert meta.offset == 1  # the original offset, not 2
            assert cluster.records(tp) == [b"first", b"second"]
            sent = [b for _, b in cluster.brokers[1].batches()]
            assert len(sent) == 3
            assert sent[1] == sent[2]  # byte for byte

    run(scenario)


def test_without_idempotence_a_lost_acknowledgement_duplicates_the_record() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            tp = TopicPartition("t", 0)
            cluster.brokers[1].script[tp].append((APPEND_THEN, ErrorCode.REQUEST_TIMED_OUT))
            config = fast(enable_idempotence=False)
            async with Producer(connections, config) as producer:
                assert (await (await producer.send("t", b"once"))).offset == 1
            assert cluster.records(tp) == [b"once", b"once"]

    run(scenario)


def test_a_failed_sequenced_batch_gets_the_producer_a_new_id() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            tp = TopicPartition("t", 0)
            async with Producer(connections, fast()) as producer:
                assert (await (await producer.send("t", b"a"))).offset == 0
                cluster.brokers[1].script[tp].append(ErrorCode.OUT_OF_ORDER_SEQUENCE)
                with pytest.raises(errors.OutOfOrderSequenceError, match="t-0"):
                    await (await producer.send("t", b"b"))
                assert (await (await producer.send("t", b"c"))).offset == 1
                assert producer.producer_id == 1002
            headers = [parse_header(b) for _, b in cluster.brokers[1].batches()]
            assert [(h.producer_id, h.base_sequence) for h in headers] == [
                (1001, 0),
                (1001, 1),
                (1002, 0),
            ]
            assert cluster.records(tp) == [b"a", b"c"]

    run(scenario)


def test_a_batch_in_doubt_is_failed_not_resent_under_a_new_producer_id() -> None:
    """Both partitions' first attempts are written but answered NOT_LEADER_OR_FOLLOWER (as
    a leader that cannot confirm its ZooKeeper session answers). Partition 0's retry is
    refused for good, so the producer id is reset; partition 1's batch, refused once more
    without being written, is still in doubt: under the new id the broker could not tell
    it from a new record, so it fails instead of being stored twice."""

    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 2)
            p0, p1 = TopicPartition("t", 0), TopicPartition("t", 1)
            broker = cluster.brokers[1]
            written_unacknowledged = (APPEND_THEN, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            broker.script[p0].extend([written_unacknowledged, ErrorCode.CORRUPT_MESSAGE])
            broker.script[p1].extend([written_unacknowledged, ErrorCode.NOT_LEADER_OR_FOLLOWER])
            async with Producer(connections, fast()) as producer:
                a = await producer.send("t", b"a", partition=0)
                b = await producer.send("t", b"b", partition=1)
                outcomes = await asyncio.gather(a, b, return_exceptions=True)
                assert isinstance(outcomes[0], errors.CorruptMessageError)
                assert isinstance(outcomes[1], InDoubtBatchError)
                assert "in doubt" in str(outcomes[1])
                assert (await (await producer.send("t", b"c", partition=1))).offset == 1
            assert cluster.records(p0) == [b"a"]
            assert cluster.records(p1) == [b"b", b"c"]
            assert cluster.init_producer_id_calls == 2

    run(scenario)


def test_init_producer_id_is_retried_while_no_broker_can_answer() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            cluster.init_producer_id_script.extend(
                [grpc.StatusCode.UNAVAILABLE, ErrorCode.NOT_CONTROLLER]
            )
            async with Producer(connections, fast()) as producer:
                assert producer.producer_id == 1001
                assert (await (await producer.send("t", b"v"))).offset == 0
            assert cluster.init_producer_id_calls == 3

    run(scenario)


def test_a_broker_without_init_producer_id_is_a_clear_error() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.init_producer_id_script.append(grpc.StatusCode.UNIMPLEMENTED)
            producer = Producer(connections, fast())
            with pytest.raises(ClientError, match="set enable_idempotence=False"):
                await producer.start()
            await producer.close()

    run(scenario)


def test_init_producer_id_gives_up_after_max_block_ms() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.init_producer_id_script.extend([ErrorCode.NOT_CONTROLLER] * 1000)
            producer = Producer(connections, fast(max_block_ms=200))
            with pytest.raises(ClientError, match=r"could not get a producer id within 200 ms"):
                await producer.start()
            await producer.close()

    run(scenario)


# -- close ---------------------------------------------------------------------------------------


def test_close_delivers_what_was_sent() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            producer = Producer(connections, fast(linger_ms=5_000))
            futures = [await producer.send("t", b"%d" % i) for i in range(5)]
            await asyncio.wait_for(producer.close(), 5)
            assert [(await f).offset for f in futures] == list(range(5))
            with pytest.raises(ProducerClosedError):
                await producer.send("t", b"late")

    run(scenario)


def test_close_with_a_timeout_fails_what_could_not_be_delivered() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1, leaders=[-1])
            producer = Producer(connections, fast())
            future = await producer.send("t", b"v")
            await producer.close(timeout_s=0.1)
            with pytest.raises(ProducerClosedError, match="closed before delivery"):
                await future

    run(scenario)


def test_buffer_memory_blocks_send_until_records_are_acknowledged() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            broker = cluster.brokers[1]
            broker.hold = asyncio.Event()
            config = fast(buffer_memory=300, max_block_ms=100, linger_ms=0)
            async with Producer(connections, config) as producer:
                first = await producer.send("t", bytes(150))
                with pytest.raises(ClientError, match="producer buffer full"):
                    await producer.send("t", bytes(150))
                broker.hold.set()
                await first
                second = await producer.send("t", bytes(150))
                assert (await second).offset == 1

    run(scenario)


def test_handles_never_awaited_get_their_records_offsets_across_batches_and_partitions() -> None:
    """Handles kept without awaiting any (as a caller that fires and checks later): after
    flush every one is done, and its offset is where its record is in its partition's
    log, over several batches (a 2,000-byte batch_size) and several requests."""

    async def scenario() -> None:
        async with fake_cluster(2) as cluster, connected(cluster) as connections:
            cluster.create("t", 3)
            async with Producer(connections, fast(batch_size=2_000, linger_ms=0)) as producer:
                handles = [
                    await producer.send("t", b"%d" % i, key=b"k%d" % (i % 7), headers=[("h", b"x")])
                    for i in range(300)
                ]
                await producer.flush()
                assert all(h.done() for h in handles)
            for p in range(3):
                tp = TopicPartition("t", p)
                assert len(cluster.logs[tp]) > 1, "the test needs several batches"
                by_offset = {
                    h.result().offset: i for i, h in enumerate(handles) if h.result().partition == p
                }
                assert [b"%d" % by_offset[o] for o in sorted(by_offset)] == cluster.records(tp)

    run(scenario)


def test_close_waits_for_every_outstanding_handle() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 2)
            broker = cluster.brokers[1]
            broker.hold = asyncio.Event()
            producer = Producer(connections, fast(batch_size=500, linger_ms=0))
            handles = [await producer.send("t", bytes(50), partition=i % 2) for i in range(40)]
            closing = asyncio.create_task(producer.close())
            await asyncio.sleep(0.05)
            assert not closing.done()
            assert not any(h.done() for h in handles)
            broker.hold.set()
            async with asyncio.timeout(10):
                await closing
            assert all(h.done() and h.exception() is None for h in handles)

    run(scenario)


def test_a_send_past_buffer_memory_waits_for_acknowledgements_of_unawaited_handles() -> None:
    """Back-pressure with handles nobody awaits: the records they stand for hold
    buffer_memory until their batches are acknowledged, and the send that does not fit
    waits for that (not for its own handle), then every handle has its offset."""

    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            broker = cluster.brokers[1]
            broker.hold = asyncio.Event()
            config = fast(buffer_memory=2_000, max_block_ms=10_000, linger_ms=0)
            async with Producer(connections, config) as producer:
                handles = [await producer.send("t", bytes(100)) for _ in range(10)]
                blocked = asyncio.create_task(producer.send("t", bytes(900)))
                await asyncio.sleep(0.05)
                assert not blocked.done(), "the buffer is full: send must wait"
                broker.hold.set()
                async with asyncio.timeout(10):
                    last = await blocked
                    assert (await last).offset == 10
                assert [h.result().offset for h in handles] == list(range(10))

    run(scenario)


def test_send_reserves_exactly_a_batch_of_one_of_each_record_in_buffer_memory() -> None:
    """The size ``send`` reserves is :func:`batch_of_one_size` of the record, whose varint
    it computes inline: checked at each width of the record's length (1, 2, 3 bytes)."""

    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            cluster.brokers[1].hold = asyncio.Event()
            config = fast(max_request_size=100_000)
            async with Producer(connections, config) as producer:
                expected = 0
                for n in [0, *range(40, 70), *range(8_150, 8_200), 20_000]:
                    await producer.send("t", bytes(n), key=b"k", headers=[("h", b"v")])
                    tail = encode_record_tail(b"k", bytes(n), [("h", b"v")])
                    expected += batch_of_one_size(tail)
                    assert producer._buffer.used == expected, n
                cluster.brokers[1].hold.set()

    run(scenario)


def test_deliberate_partitioner_can_be_given() -> None:
    class Always2(Partitioner):
        def partition(
            self,
            topic: str,
            key: bytes | None,
            num_partitions: int,
            available: Any,
            partition: int | None = None,
        ) -> int:
            return 2

    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 3)
            async with Producer(connections, fast(), partitioner=Always2()) as p:
                assert (await (await p.send("t", b"v", key=b"k"))).partition == 2

    run(scenario)


# -- send_many: the bulk path ------------------------------------------------------------------


def test_send_many_keeps_order_tiles_offsets_and_fills_sticky_batches() -> None:
    async def scenario() -> None:
        async with fake_cluster(2) as cluster, connected(cluster) as connections:
            cluster.create("t", 3)
            # Only full batches leave before the flush, whatever the machine's load.
            config = fast(batch_size=2000, linger_ms=5_000)
            async with Producer(connections, config) as producer:
                values = [b"%05d" % i + bytes(80) for i in range(500)]
                futures = []
                for start in range(0, 500, 70):  # calls that do not line up with batches
                    futures += await producer.send_many("t", values[start : start + 70])
                await producer.flush()
                ranges = await asyncio.gather(*futures)
                assert producer._buffer.used == 0
            assert sum(r.count for r in ranges) == 500
            given = 0
            for r in ranges:  # each run: the next values in the order given
                tp = TopicPartition("t", r.partition)
                log = cluster.records(tp)
                assert log[r.offset : r.offset + r.count] == values[given : given + r.count]
                given += r.count
            for tp, batches in cluster.logs.items():
                assert all(len(b) <= 2000 for b in batches)
                # sticky: every batch but a partition's last is nearly full
                assert all(parse_header(b).record_count >= 18 for b in batches[:-1]), tp
            assert len({r.partition for r in ranges}) > 1

    run(scenario)


def test_send_many_to_one_partition_and_a_retry_resends_the_same_bytes() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 2)
            tp = TopicPartition("t", 1)
            cluster.brokers[1].script[tp].append((APPEND_THEN, ErrorCode.REQUEST_TIMED_OUT))
            async with Producer(connections, fast()) as producer:
                (first,) = await producer.send_many("t", [b"a", None, b"c"], partition=1)
                written = await first
                assert (written.partition, written.offset, written.count) == (1, 0, 3)
            assert cluster.records(tp) == [b"a", None, b"c"]
            sent = [b for _, b in cluster.brokers[1].batches()]
            assert len(sent) == 2
            assert sent[0] == sent[1]

    run(scenario)


def test_send_many_checks_its_input_before_queueing_anything() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            config = fast(max_request_size=1000)
            async with Producer(connections, config) as producer:
                assert await producer.send_many("t", []) == []
                with pytest.raises(TypeError, match="value must be bytes"):
                    await producer.send_many("t", [b"ok", "text"])  # type: ignore[list-item]
                with pytest.raises(RecordTooLargeError, match="max_request_size"):
                    await producer.send_many("t", [b"ok", bytes(2000)])
                with pytest.raises(ClientError, match="out of range"):
                    await producer.send_many("t", [b"ok"], partition=3)
                await producer.flush()
                assert producer._buffer.used == 0
            assert cluster.records(TopicPartition("t", 0)) == []

    run(scenario)


def test_send_many_waits_for_buffer_memory_and_fails_after_max_block_ms() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            broker = cluster.brokers[1]
            broker.hold = asyncio.Event()
            config = fast(buffer_memory=1000, max_block_ms=100, linger_ms=0)
            async with Producer(connections, config) as producer:
                first = await producer.send_many("t", [bytes(100)] * 5)
                with pytest.raises(ClientError, match="producer buffer full"):
                    await producer.send_many("t", [bytes(100)] * 5)
                broker.hold.set()
                await asyncio.gather(*first)
                (second,) = await producer.send_many("t", [bytes(100)] * 5)
                assert (await second).offset == 5
            assert len(cluster.records(TopicPartition("t", 0))) == 10

    run(scenario)


def test_a_silent_leader_fails_the_request_at_its_deadline_and_expires_what_waits() -> None:
    async def scenario() -> None:
        async with fake_cluster() as cluster, connected(cluster) as connections:
            cluster.create("t", 1)
            config = ProducerConfig(
                linger_ms=0,
                retry_backoff_ms=20,
                request_timeout_ms=100,
                delivery_timeout_ms=150,
                max_in_flight_requests_per_connection=1,
            )
            async with Producer(connections, config) as producer:
                await producer.send("t", b"warm-up")
                await producer.flush()
                broker = cluster.brokers[1]
                broker.hold = asyncio.Event()  # the next request hangs past its deadline
                future = await producer.send("t", b"v")
                await eventually(lambda: len(broker.produce_requests) == 2, what="the request")
                queued = await producer.send("t", b"w")
                # Queued behind the hanging request, the second record is never sent.
                with pytest.raises(
                    DeliveryTimeoutError,
                    match=r"^t-0: 1 record\(s\) expired: 150 ms \(delivery_timeout_ms\) passed",
                ):
                    await queued
                with pytest.raises(BrokerUnreachableError, match="did not answer: deadline"):
                    await future
                broker.hold.set()

    run(scenario)
