"""The replica fetcher against a real gRPC leader serving real partitions and logs.

The leader here is a small Broker servicer standing in for the broker server: it answers
Fetch (as unary calls and over FetchSession streams, as the broker does) and
OffsetsForLeaderEpoch from a leader-side ``Partition`` and its ``Log`` in a temporary
directory (reads, fencing, epoch lookups, the follower's fetch state), so every answer the
fetcher gets is computed, not canned. Broker 1 leads, broker 2 follows.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
import grpc.aio
import pytest

from broker.log.leader_epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from broker.log.log import Log
from broker.replication import replica_fetcher
from broker.replication.partition import LeadershipState, Partition
from broker.replication.replica_fetcher import (
    FetcherConfig,
    FetchPhase,
    ReplicaFetcher,
    SourceBroker,
)
from broker.replication.truncation import TruncationMode
from proto import errors
from proto.config.log_config import LogConfig
from proto.records.record_batch import Record, decode_batch, encode_batch
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.wire.minibroker_pb2 import ErrorCode
from tests.unimplemented_rpcs import NoTransactionRpcs

T = TypeVar("T")

LEADER, FOLLOWER = 1, 2
TP = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
LE = TruncationMode.LEADER_EPOCH
HW = TruncationMode.HIGH_WATERMARK
FETCHER_LOGGER = "broker.replication.replica_fetcher"


# -- the stand-in leader ---------------------------------------------------------------------


def _session_request(
    request: pb.FetchRequest, session: dict[TopicPartition, pb.FetchPartition]
) -> pb.FetchRequest:
    """An incremental request applied to ``session`` (the partitions the stream's session
    holds), as the full request of every partition in it. Answering all of them, not only
    what changed, is more than an incremental answer must hold, never less."""
    for forgotten in request.forgotten_topics:
        for index in forgotten.partitions:
            session.pop(TopicPartition(forgotten.topic, index), None)
    for topic in request.topics:
        for named in topic.partitions:
            session[TopicPartition(topic.topic, named.partition)] = named
    full = pb.FetchRequest()
    full.CopyFrom(request)
    full.ClearField("topics")
    full.ClearField("forgotten_topics")
    full.incremental = False
    topics: dict[str, pb.FetchTopic] = {}
    for tp, part in session.items():
        if tp.topic not in topics:
            topics[tp.topic] = full.topics.add(topic=tp.topic)
        topics[tp.topic].partitions.append(part)
    return full


class LeaderServicer(NoTransactionRpcs, pb_grpc.BrokerServicer):
    """Fetch and OffsetsForLeaderEpoch, answered from real leader-side partitions."""

    def __init__(self, partitions: dict[TopicPartition, Partition]) -> None:
        self.partitions = partitions
        self.appended = asyncio.Event()
        self.fetch_requests: list[dict[TopicPartition, int]] = []
        """The fetch offset per partition of every fetch, in order."""
        self.sent_high_watermarks: list[int] = []
        self.asked_epochs: list[tuple[TopicPartition, int]] = []
        """(partition, leader_epoch) of every OffsetsForLeaderEpoch entry, in order."""
        self.sessions = 0
        """FetchSession calls opened."""
        self.unary_fetches = 0

    @property
    def fetch_offsets(self) -> list[tuple[TopicPartition, int]]:
        """(partition, fetch offset) of every fetched partition, in request order."""
        return [entry for request in self.fetch_requests for entry in request.items()]

    def notify(self) -> None:
        """Wake long-polling fetches: the leader appended."""
        self.appended.set()

    async def FetchSession(  # type: ignore[override]  # grpc.aio's context.write style
        self,
        request_iterator: AsyncIterator[pb.FetchRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> None:
        self.sessions += 1
        session: dict[TopicPartition, pb.FetchPartition] = {}
        async for request in request_iterator:
            if request.incremental:  # KIP-227: fetch the whole session, answer all of it
                request = _session_request(request, session)
            response = await self._fetch(request)
            for topic_response in response.responses:
                for data in topic_response.partitions:
                    if data.error_code != ErrorCode.NONE:
                        session.pop(
                            TopicPartition(topic_response.topic, data.partition_index), None
                        )
            await context.write(response)

    async def Fetch(
        self, request: pb.FetchRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.FetchResponse:
        self.unary_fetches += 1
        return await self._fetch(request)

    async def _fetch(self, request: pb.FetchRequest) -> pb.FetchResponse:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + request.max_wait_ms / 1000
        self.fetch_requests.append(
            {
                TopicPartition(topic.topic, p.partition): p.fetch_offset
                for topic in request.topics
                for p in topic.partitions
            }
        )
        while True:
            self.appended.clear()
            response, size, readable = self._read(request)
            remaining = deadline - loop.time()
            if size >= request.min_bytes or len(readable) < _count(request) or remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self.appended.wait()
        # As Kafka: the response carries the HW from before the read; the follower's new
        # position is recorded after it, so the follower learns the new HW next time.
        for tp, (fetch_offset, log_start) in readable.items():
            self.partitions[tp].update_follower_fetch_state(
                request.replica_id, fetch_offset, log_start
            )
        for topic_response in response.responses:
            for data in topic_response.partitions:
                if data.error_code == ErrorCode.NONE:
                    self.sent_high_watermarks.append(data.high_watermark)
        return response

    def _read(
        self, request: pb.FetchRequest
    ) -> tuple[pb.FetchResponse, int, dict[TopicPartition, tuple[int, int]]]:
        response = pb.FetchResponse()
        size = 0
        readable: dict[TopicPartition, tuple[int, int]] = {}
        for topic in request.topics:
            out_topic = response.responses.add(topic=topic.topic)
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, p.partition)
                out = out_topic.partitions.add(partition_index=p.partition)
                partition = self.partitions.get(tp)
                if partition is None:
                    out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                try:
                    _check_leader(
                        partition, p.current_leader_epoch, p.HasField("current_leader_epoch")
                    )
                    result = partition.read(
                        p.fetch_offset,
                        p.partition_max_bytes,
                        is_follower_fetch=request.replica_id >= 0,
                        min_one_batch=True,
                    )
                except errors.OffsetOutOfRangeError as err:
                    out.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                    out.error_message = str(err)
                    out.log_start_offset = partition.log.log_start_offset
                    out.log_end_offset = partition.log_end_offset
                    out.high_watermark = partition.high_watermark
                    continue
                except errors.BrokerResponseError as err:
                    out.error_code = ErrorCode.ValueType(err.code)
                    out.error_message = str(err)
                    continue
                out.high_watermark = result.high_watermark
                out.log_start_offset = result.log_start_offset
                out.log_end_offset = result.log_end_offset
                out.current_leader_epoch = result.leader_epoch
                out.records = result.data.records
                size += len(result.data.records)
                readable[tp] = (p.fetch_offset, p.log_start_offset)
        return response, size, readable

    async def OffsetsForLeaderEpoch(
        self,
        request: pb.OffsetsForLeaderEpochRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> pb.OffsetsForLeaderEpochResponse:
        response = pb.OffsetsForLeaderEpochResponse()
        for topic in request.topics:
            out_topic = response.topics.add(topic=topic.topic)
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, p.partition)
                self.asked_epochs.append((tp, p.leader_epoch))
                partition = self.partitions.get(tp)
                try:
                    if partition is None:
                        raise errors.UnknownTopicOrPartitionError()
                    _check_leader(
                        partition, p.current_leader_epoch, p.HasField("current_leader_epoch")
                    )
                except errors.BrokerResponseError as err:
                    out_topic.partitions.add(
                        error_code=err.code,
                        partition=p.partition,
                        leader_epoch=UNDEFINED_EPOCH,
                        end_offset=UNDEFINED_EPOCH_OFFSET,
                    )
                    continue
                epoch, end = partition.last_offset_for_leader_epoch(p.leader_epoch)
                out_topic.partitions.add(
                    error_code=ErrorCode.NONE,
                    partition=p.partition,
                    leader_epoch=epoch,
                    end_offset=end,
                )
        return response

    async def Produce(
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ProduceResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not part of this test leader")

    async def ProduceSession(  # type: ignore[override]
        self,
        request_iterator: AsyncIterator[pb.ProduceRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> None:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not part of this test leader")

    async def ListOffsets(
        self, request: pb.ListOffsetsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListOffsetsResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not part of this test leader")

    async def Metadata(
        self, request: pb.MetadataRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.MetadataResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not part of this test leader")

    async def InitProducerId(
        self, request: pb.InitProducerIdRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.InitProducerIdResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not part of this test leader")

    async def ListGroups(
        self, request: pb.ListGroupsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListGroupsResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not part of this test leader")

    async def DescribeGroups(
        self, request: pb.DescribeGroupsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DescribeGroupsResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not part of this test leader")

    async def DeleteRecords(
        self, request: pb.DeleteRecordsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteRecordsResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not part of this test leader")

    async def DeleteGroups(
        self, request: pb.DeleteGroupsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteGroupsResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not part of this test leader")

    async def DeleteGroupOffsets(
        self, request: pb.DeleteGroupOffsetsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteGroupOffsetsResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not part of this test leader")

    async def FetchGroupOffsets(
        self, request: pb.FetchGroupOffsetsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.FetchGroupOffsetsResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not part of this test leader")

    async def CommitGroupOffsets(
        self, request: pb.CommitGroupOffsetsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CommitGroupOffsetsResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not part of this test leader")


def _count(request: pb.FetchRequest) -> int:
    return sum(len(topic.partitions) for topic in request.topics)


def _check_leader(partition: Partition, epoch: int, has_epoch: bool) -> None:
    partition.check_leader_epoch(epoch if has_epoch else None)
    if not partition.is_leader:
        raise errors.NotLeaderOrFollowerError()


async def serve(servicer: LeaderServicer, port: int = 0) -> tuple[grpc.aio.Server, int]:
    # No SO_REUSEPORT: a restarted leader must own its port alone.
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    pb_grpc.add_BrokerServicer_to_server(servicer, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    assert bound != 0, f"could not bind 127.0.0.1:{port}"
    await server.start()
    return server, bound


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# -- partitions and records ------------------------------------------------------------------


def now_ms() -> int:
    return int(time.monotonic() * 1000)


def leadership(epoch: int, leader: int = LEADER) -> LeadershipState:
    return LeadershipState(leader, epoch, (LEADER, FOLLOWER), (LEADER, FOLLOWER), 0, 1)


def open_partition(
    root: Path, broker_id: int, tp: TopicPartition = TP, *, config: LogConfig | None = None
) -> Partition:
    log = Log.open(root / f"broker-{broker_id}" / tp.dir_name, config or LogConfig())
    return Partition(tp, broker_id, log, clock_ms=now_ms)


def leader_partition(
    root: Path, tp: TopicPartition = TP, *, epoch: int = 0, **kw: Any
) -> Partition:
    partition = open_partition(root, LEADER, tp, **kw)
    assert partition.make_leader(leadership(epoch))
    return partition


def follower_partition(
    root: Path, tp: TopicPartition = TP, *, epoch: int = 0, **kw: Any
) -> Partition:
    partition = open_partition(root, FOLLOWER, tp, **kw)
    partition.make_follower(leadership(epoch))
    return partition


def restart(partition: Partition, *, hw: int, epoch: int = 0) -> Partition:
    """The replica after a restart: the same log, the HW from its checkpoint (a Partition
    clamps its HW to the log, so it must be created after the log holds the records)."""
    restarted = Partition(
        partition.topic_partition,
        partition.local_broker_id,
        partition.log,
        high_watermark=hw,
        clock_ms=now_ms,
    )
    restarted.make_follower(leadership(epoch))
    assert restarted.high_watermark == hw
    return restarted


def batch(value: bytes, *, base_offset: int = 0, epoch: int = -1) -> bytes:
    return encode_batch(
        [Record(key=None, value=value, timestamp=1_700_000_000_000)],
        base_offset=base_offset,
        partition_leader_epoch=epoch,
    )


def produce(leader: Partition, *values: bytes, servicer: LeaderServicer | None = None) -> None:
    for value in values:
        leader.append_records_to_leader(batch(value), 1)
    if servicer is not None:
        servicer.notify()


def copy_prefix(leader: Partition, follower: Partition, end_offset: int) -> None:
    """Give the follower the leader's batches below ``end_offset``, byte for byte."""
    data = leader.log.read(0, 1 << 30, max_offset=end_offset).records
    follower.append_as_follower(data)
    assert follower.log_end_offset == end_offset


def log_bytes(partition: Partition) -> bytes:
    """The partition's segments, concatenated (the files themselves, not a read)."""
    return b"".join(path.read_bytes() for path in sorted(partition.log.directory.glob("*.log")))


def values(partition: Partition) -> list[bytes | None]:
    data = partition.log.read(partition.log.log_start_offset, 1 << 30).records
    out: list[bytes | None] = []
    pos = 0
    while pos < len(data):
        decoded = decode_batch(data, pos)
        out.extend(record.value for record in decoded.records)
        pos += decoded.header.size
    return out


def config(mode: TruncationMode, **overrides: Any) -> FetcherConfig:
    settings: dict[str, Any] = {
        "fetch_wait_max_ms": 100,
        "fetch_backoff_ms": 50,
        "request_timeout_ms": 5_000,
        "reconnect_backoff_max_ms": 200,
        **overrides,
    }
    return FetcherConfig(local_broker_id=FOLLOWER, truncation_mode=mode, **settings)


async def eventually(
    predicate: Callable[[], T], within: float = 5.0, message: str | Callable[[], str] = ""
) -> T:
    """Poll ``predicate`` on the event loop until it is truthy (tests.helpers.wait_for, async)."""
    deadline = time.monotonic() + within
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise AssertionError(f"condition not met within {within}s: {text}")
        await asyncio.sleep(0.01)


def run(scenario: Callable[[contextlib.AsyncExitStack], Awaitable[None]]) -> None:
    """Run ``scenario`` on a fresh loop; what it registers on the stack is torn down after."""

    async def main() -> None:
        async with contextlib.AsyncExitStack() as stack:
            await scenario(stack)

    asyncio.run(main())


async def start_leader(
    stack: contextlib.AsyncExitStack, *partitions: Partition
) -> tuple[LeaderServicer, grpc.aio.Server, int]:
    servicer = LeaderServicer({p.topic_partition: p for p in partitions})
    server, port = await serve(servicer)
    stack.push_async_callback(server.stop, None)
    return servicer, server, port


def start_fetcher(
    stack: contextlib.AsyncExitStack,
    port: int,
    cfg: FetcherConfig,
    partitions: dict[TopicPartition, Partition] | None = None,
    **kw: Any,
) -> ReplicaFetcher:
    fetcher = ReplicaFetcher(SourceBroker(LEADER, "127.0.0.1", port), cfg, executor=None, **kw)
    fetcher.start()
    stack.push_async_callback(fetcher.shutdown)
    if partitions:
        fetcher.add_partitions(partitions)
    return fetcher


def log_events(caplog: pytest.LogCaptureFixture, event: str) -> list[str]:
    """The fetcher's lines for ``event``, without their leading ``replica_fetcher``."""
    lines = [r.getMessage().partition(" ")[2] for r in caplog.records if r.name == FETCHER_LOGGER]
    return [line for line in lines if line.startswith(f"event={event} ")]


def fields(line: str) -> dict[str, str]:
    """The key=value fields of one of the fetcher's log lines."""
    return dict(part.split("=", 1) for part in line.split())


@pytest.fixture
def fetcher_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.DEBUG, logger=FETCHER_LOGGER):
        yield caplog


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.submitted = 0

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


# -- tests -----------------------------------------------------------------------------------


def test_follower_catches_up_byte_for_byte_across_epochs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Appends this large go to the executor here, so that path is exercised too (the
    # default threshold, 1 MiB, is above these 100 KiB responses).
    monkeypatch.setattr(replica_fetcher, "EXECUTOR_APPEND_MIN_BYTES", 64 * 1024)
    small_segments = LogConfig(segment_bytes=64 * 1024)
    leader = leader_partition(tmp_path, config=small_segments)
    follower = follower_partition(tmp_path, epoch=2, config=small_segments)
    payload = b"x" * 2000
    produce(leader, *(b"%d-" % i + payload for i in range(60)))
    leader.make_leader(leadership(1))
    produce(leader, *(b"%d-" % i + payload for i in range(60, 120)))
    leader.make_leader(leadership(2))
    produce(leader, *(b"%d-" % i + payload for i in range(120, 150)))
    seen: list[tuple[int, int, int]] = []

    def on_hw(tp: TopicPartition) -> None:
        seen.append((follower.high_watermark, follower.log_end_offset, leader.high_watermark))

    async def scenario(stack: contextlib.AsyncExitStack) -> None:
        servicer, _, port = await start_leader(stack, leader)
        executor = stack.enter_context(CountingExecutor())
        fetcher = ReplicaFetcher(
            SourceBroker(LEADER, "127.0.0.1", port),
            config(LE, fetch_max_bytes=100 * 1024),
            executor=executor,
            on_high_watermark_change=on_hw,
        )
        fetcher.start()
        stack.push_async_callback(fetcher.shutdown)
        fetcher.add_partitions({TP: follower})
        await eventually(lambda: follower.log_end_offset >= 100)
        produce(leader, *(b"%d-" % i + payload for i in range(150, 200)), servicer=servicer)
        await eventually(
            lambda: (
                follower.high_watermark == leader.high_watermark == leader.log_end_offset == 200
            ),
            message=lambda: f"follower {follower!r}, leader {leader!r}",
        )
        assert executor.submitted > 0  # responses of >= 64 KiB were appended off the loop

    run(scenario)
    assert log_bytes(follower) == log_bytes(leader)
    assert len(list(follower.log.directory.glob("*.log"))) > 1
    assert follower.log.epoch_cache.entries() == leader.log.epoch_cache.entries()
    assert [e.epoch for e in follower.log.epoch_cache.entries()] == [0, 1, 2]
    assert seen
    for hw, leo, leader_hw in seen:  # HW = min(leader HW, LEO), never ahead of either
        assert hw <= leo
        assert hw <= leader_hw


def test_leader_epoch_mode_truncates_the_divergent_tail_in_two_rounds(
    tmp_path: Path, fetcher_logs: pytest.LogCaptureFixture
) -> None:
    """KIP-279's worked example, with real logs: leader epochs 0@0, 2@10,
    4@15 (LEO 20); follower 0@0, 1@8, 3@11 (LEO 14), its epochs 1 and 3 unknown to the
    leader."""
    leader = leader_partition(tmp_path)
    produce(leader, *(b"a%d" % i for i in range(10)))
    leader.make_leader(leadership(2))
    produce(leader, *(b"b%d" % i for i in range(10, 15)))
    leader.make_leader(leadership(4))
    produce(leader, *(b"c%d" % i for i in range(15, 20)))
    assert leader.log.epoch_cache.entries() == [(0, 0), (2, 10), (4, 15)]

    follower = follower_partition(tmp_path)
    copy_prefix(leader, follower, 8)
    for offset in range(8, 14):
        epoch = 1 if offset < 11 else 3
        follower.append_as_follower(batch(b"stale%d" % offset, base_offset=offset, epoch=epoch))
    follower = restart(follower, hw=5, epoch=4)
    assert follower.log.epoch_cache.entries() == [(0, 0), (1, 8), (3, 11)]
    assert follower.log_end_offset == 14

    async def scenario(stack: contextlib.AsyncExitStack) -> None:
        servicer, _, port = await start_leader(stack, leader)
        start_fetcher(stack, port, config(LE), {TP: follower})
        await eventually(lambda: follower.log_end_offset == 20 and follower.high_watermark == 20)
        assert servicer.asked_epochs == [(TP, 3), (TP, 1)]
        assert servicer.fetch_offsets[0] == (TP, 8)

    run(scenario)
    truncations = [fields(line) for line in log_events(fetcher_logs, "truncate")]
    common = {"event": "truncate", "broker": "2", "source": "1", "tp": "t-0", "epoch": "4"}
    common |= {"mode": "leader-epoch", "hw": "5"}
    assert truncations == [
        {**common, "from": "14", "to": "11", "target": "11", "done": "False"}
        | {"asked_epoch": "3", "leader_epoch": "2", "leader_end": "15"},
        {**common, "from": "11", "to": "8", "target": "8", "done": "True"}
        | {"asked_epoch": "1", "leader_epoch": "0", "leader_end": "10"},
    ]
    assert log_bytes(follower) == log_bytes(leader)
    assert follower.log.epoch_cache.entries() == leader.log.epoch_cache.entries()


def test_an_empty_epoch_of_a_former_leader_does_not_stall_the_truncation_loop(
    tmp_path: Path,
) -> None:
    """The follower led epoch 3 briefly without writing anything: its cache holds 3@5 at its
    LEO (KAFKA-7415). Case 3b says "truncate to 5", a no-op for the log; the fetcher must
    still drop 3@5 from the cache, or it would ask about epoch 3 forever."""
    leader = leader_partition(tmp_path)
    produce(leader, b"a0", b"a1", b"a2")
    leader.make_leader(leadership(2))
    produce(leader, *(b"b%d" % i for i in range(3, 8)))
    leader.make_leader(leadership(4))
    produce(leader, b"c8", b"c9")
    assert leader.log.epoch_cache.entries() == [(0, 0), (2, 3), (4, 8)]

    follower = follower_partition(tmp_path)
    copy_prefix(leader, follower, 3)
    for offset in (3, 4):  # epoch 0 records the old leader never got replicated
        follower.append_as_follower(batch(b"stale%d" % offset, base_offset=offset, epoch=0))
    assert follower.make_leader(leadership(3, leader=FOLLOWER))
    assert follower.make_follower(leadership(4))
    assert follower.log.epoch_cache.entries() == [(0, 0), (3, 5)]

    async def scenario(stack: contextlib.AsyncExitStack) -> None:
        servicer, _, port = await start_leader(stack, leader)
        start_fetcher(stack, port, config(LE), {TP: follower})
        await eventually(lambda: follower.log_end_offset == 10)
        assert servicer.asked_epochs == [(TP, 3), (TP, 0)]

    run(scenario)
    assert log_bytes(follower) == log_bytes(leader)
    assert follower.log.epoch_cache.entries() == leader.log.epoch_cache.entries()


@pytest.mark.parametrize(("mode", "first_fetch_offset"), [(HW, 1), (LE, 3)])
def test_hw_mode_cuts_to_the_hw_snapshot_and_refetches(
    tmp_path: Path, mode: TruncationMode, first_fetch_offset: int
) -> None:
    """The follower holds m0..m2 like the leader but knows only HW 1. The HW rule cuts m1
    and m2 and fetches them again (a loss only if the leader dies meanwhile); the epoch
    rule keeps them."""
    leader = leader_partition(tmp_path)
    produce(leader, b"m0", b"m1", b"m2")
    follower = follower_partition(tmp_path)
    copy_prefix(leader, follower, 3)
    follower = restart(follower, hw=1)

    async def scenario(stack: contextlib.AsyncExitStack) -> None:
        servicer, _, port = await start_leader(stack, leader)
        start_fetcher(stack, port, config(mode), {TP: follower})
        await eventually(lambda: follower.high_watermark == 3)
        assert servicer.fetch_offsets[0] == (TP, first_fetch_offset)
        assert servicer.asked_epochs == ([] if mode is HW else [(TP, 0)])

    run(scenario)
    assert log_bytes(follower) == log_bytes(leader)
    assert values(follower) == [b"m0", b"m1", b"m2"]


@pytest.mark.parametrize("mode", [HW, LE])
def test_data_loss_scenario_with_the_leader_down(
    tmp_path: Path, mode: TruncationMode, fetcher_logs: pytest.LogCaptureFixture
) -> None:
    """docs/replication.md data loss: B holds m0, m1 (acknowledged: A's HW is 2) but knows only HW
    1 when it restarts as A's follower, and A is already gone. The HW rule cuts m1 without
    asking anyone; the epoch rule cannot truncate without the leader's answer and keeps
    it."""
    source = leader_partition(tmp_path)  # only to make A's bytes; A itself is down
    produce(source, b"m0", b"m1")
    b = follower_partition(tmp_path)
    copy_prefix(source, b, 2)
    b = restart(b, hw=1)

    async def scenario(stack: contextlib.AsyncExitStack) -> None:
        fetcher = start_fetcher(stack, unused_port(), config(mode), {TP: b})
        if mode is HW:
            await eventually(lambda: b.log_end_offset == 1)
            assert fetcher.phase(TP) is FetchPhase.FETCHING
        else:
            await eventually(lambda: len(log_events(fetcher_logs, "rpc-error")) >= 3)
            assert b.log_end_offset == 2
            assert fetcher.phase(TP) is FetchPhase.TRUNCATING
        assert fetcher.running

    run(scenario)
    assert values(b) == ([b"m0"] if mode is HW else [b"m0", b"m1"])


@pytest.mark.parametrize("mode", [HW, LE])
def test_divergence_scenario_after_an_unclean_election(
    tmp_path: Path, mode: TruncationMode
) -> None:
    """docs/replication.md divergence: A holds m0, m1 (HW 2), B holds m0; B leads epoch 1 after an
    unclean election and writes m2 at offset 1; A returns as B's follower."""
    b = leader_partition(tmp_path)
    produce(b, b"m0")
    b.make_leader(leadership(1))
    produce(b, b"m2")
    a = follower_partition(tmp_path)
    copy_prefix(b, a, 1)
    a.append_as_follower(batch(b"m1", base_offset=1, epoch=0))
    a = restart(a, hw=2, epoch=1)

    async def scenario(stack: contextlib.AsyncExitStack) -> None:
        servicer, _, port = await start_leader(stack, b)
        start_fetcher(stack, port, config(mode), {TP: a})
        # Settled: the follower fetched at its LEO twice (nothing more will come).
        await eventually(lambda: servicer.fetch_offsets.count((TP, 2)) >= 2)

    run(scenario)
    if mode is LE:
        assert values(a) == [b"m0", b"m2"]
        assert log_bytes(a) == log_bytes(b)
    else:
        assert values(a) == [b"m0", b"m1"]  # offset 1 differs from the leader's, for good
        assert values(b) == [b"m0", b"m2"]


@pytest.mark.parametrize("mode", [HW, LE])
def test_a_leader_batch_straddling_the_follower_leo_after_an_unclean_election(
    tmp_path: Path, mode: TruncationMode, fetcher_logs: pytest.LogCaptureFixture
) -> None:
    """The divergence above, but B writes m2 and m3 in one batch (offsets 1-2). A's HW 2 is
    inside it: B answers A's fetch at 2 with the whole batch, base offset 1, which A's log
    refuses as it stands. A refused it at every fetch, out of the ISR for good. The HW rule
    now cuts the batch at 2 and keeps A's m1, the divergence a pre-0.11 follower showed; the
    epoch rule truncates to 1 and takes the batch whole."""
    b = leader_partition(tmp_path)
    produce(b, b"m0")
    b.make_leader(leadership(1))
    b.append_records_to_leader(
        encode_batch(
            [Record(None, b"m2", 1_700_000_000_001), Record(None, b"m3", 1_700_000_000_002)]
        ),
        1,
    )
    a = follower_partition(tmp_path)
    copy_prefix(b, a, 1)
    a.append_as_follower(batch(b"m1", base_offset=1, epoch=0))
    a = restart(a, hw=2, epoch=1)

    async def scenario(stack: contextlib.AsyncExitStack) -> None:
        servicer, _, port = await start_leader(stack, b)
        fetcher = start_fetcher(stack, port, config(mode), {TP: a})
        await eventually(
            lambda: a.high_watermark == 3, message=lambda: f"A's LEO {a.log_end_offset}"
        )
        # B saw A fetch at its end: A is caught up, so B takes it back into the ISR.
        await eventually(lambda: servicer.fetch_offsets[-1] == (TP, 3))
        assert fetcher.phase(TP) is FetchPhase.FETCHING
        assert not log_events(fetcher_logs, "append-error")

    run(scenario)
    assert values(b) == [b"m0", b"m2", b"m3"]
    if mode is LE:
        assert values(a) == [b"m0", b"m2", b"m3"]
        assert log_bytes(a) == log_bytes(b)
        return
    assert values(a) == [b"m0", b"m1", b"m3"]  # offset 1 differs from the leader's, for good
    assert [(e.epoch, e.start_offset) for e in a.log.epoch_cache.entries()] == [(0, 0), (1, 2)]
    (line,) = [
        r.getMessage()
        for r in fetcher_logs.records
        if getattr(r, "event", None) == "straddling_batch_cut"
    ]
    said = fields(line.partition(" ")[2])
    assert said.pop("event") == "straddling_batch_cut"
    assert {k: said[k] for k in ("broker", "tp", "leader", "leader_epoch", "hw", "leo")} == {
        "broker": "2",
        "tp": "t-0",
        "leader": "1",
        "leader_epoch": "1",
        "hw": "2",
        "leo": "2",
    }
    assert {k: said[k] for k in ("local_epoch", "batch_epoch", "batch_base", "batch_last")} == {
        "local_epoch": "0",
        "batch_epoch": "1",
        "batch_base": "1",
        "batch_last": "2",
    }
    assert (said["own_from"], said["own_to"]) == ("1", "1")


@pytest.mark.parametrize("mode", [HW, LE])
def test_a_follower_starting_over_inside_a_leader_batch_takes_the_batch_whole(
    tmp_path: Path, mode: TruncationMode, fetcher_logs: pytest.LogCaptureFixture
) -> None:
    """KAFKA-6975: DeleteRecords put the leader's log start offset at 1, inside its batch
    0-2. A new follower starts over at 1 (out of range at 0) and is answered with the whole
    batch from 0: its log starts over at 0 and takes it, byte for byte, then follows the
    leader's log start offset to 1 again (Kafka's
    Partition.appendRecordsToFollowerOrFutureReplica). It had refused the batch for ever."""
    leader = open_partition(tmp_path, LEADER)
    # The leader alone in the ISR: its HW follows its LEO, so it may delete up to 1 at once.
    assert leader.make_leader(LeadershipState(LEADER, 0, (LEADER,), (LEADER, FOLLOWER), 0, 1))
    leader.append_records_to_leader(
        encode_batch([Record(None, b"m%d" % i, 1_700_000_000_000) for i in range(3)]), 1
    )
    assert leader.delete_records_on_leader(1) == 1
    follower = follower_partition(tmp_path)

    async def scenario(stack: contextlib.AsyncExitStack) -> None:
        servicer, _, port = await start_leader(stack, leader)
        start_fetcher(stack, port, config(mode), {TP: follower})
        await eventually(
            lambda: follower.log_end_offset == 3 and follower.log.log_start_offset == 1,
            message=lambda: (
                f"follower at {follower.log.log_start_offset}..{follower.log_end_offset}"
            ),
        )
        assert servicer.fetch_offsets[:2] == [(TP, 0), (TP, 1)]  # out of range, then inside

    run(scenario)
    assert log_bytes(follower) == log_bytes(leader)
    assert values(follower) == [b"m0", b"m1", b"m2"]  # the batch as stored; offset 0 unreadable
    assert not log_events(fetcher_logs, "append-error")
    (line,) = log_events(fetcher_logs, "truncate-fully")
    assert fields(line)["to"] == "1"


def test_out_of_range_above_the_leader_leo_truncates_to_it(tmp_path: Path) -> None:
    leader = leader_partition(tmp_path)
    produce(leader, b"m0", b"m1", b"m2")
    follower = follower_partition(tmp_path)
    copy_prefix(leader, follower, 3)
    for offset in (3, 4):
        follower.append_as_follower(batch(b"extra%d" % offset, base_offset=offset, epoch=0))
    follower = restart(follower, hw=5)

    async def scenario(stack: contextlib.AsyncExitStack) -> None:
        servicer, _, port = await start_leader(stack, leader)
        # HW mode: the HW (5) protects the extra records from truncation; only the
        # leader's OFFSET_OUT_OF_RANGE brings the follower back to its LEO.
        start_fetcher(stack, port, config(HW), {TP: follower})
        await eventually(lambda: (TP, 3) in servicer.fetch_offsets)
        assert servicer.fetch_offsets[0] == (TP, 5)

    run(scenario)
    assert follower.log_end_offset == 3
    assert log_bytes(follower) == log_bytes(leader)


def test_out_of_range_below_the_leader_log_start_starts_over_there(tmp_path: Path) -> None:
    leader = open_partition(tmp_path, LEADER)
    leader.log.truncate_fully_and_start_at(10)  # as if retention removed offsets 0-9
    assert leader.make_leader(leadership(0))
    produce(leader, b"m10", b"m11", b"m12")
    follower = follower_partition(tmp_path)  # no epochs yet: it "truncates" to HW 0

    async def scenario(stack: contextlib.AsyncExitStack) -> None:
        servicer, _, port = await start_leader(stack, leader)
        start_fetcher(stack, port, config(LE), {TP: follower})
        await eventually(lambda: follower.log_end_offset == 13)
        assert servicer.fetch_offsets[:2] == [(TP, 0), (TP, 10)]

    run(scenario)
    assert follower.log.log_start_offset == 10
    assert log_bytes(follower) == log_bytes(leader)
    assert values(follower) == [b"m10", b"m11", b"m12"]


def test_leader_down_retries_without_raising_and_resumes_on_the_same_port(
    tmp_path: Path, fetcher_logs: pytest.LogCaptureFixture
) -> None:
    leader = leader_partition(tmp_path)
    produce(leader, *(b"m%d" % i for i in range(5)))
    follower = follower_partition(tmp_path)
    errors_seen: list[TopicPartition] = []

    async def scenario(stack: contextlib.AsyncExitStack) -> None:
        servicer, server, port = await start_leader(stack, leader)
        fetcher = start_fetcher(
            stack,
            port,
            config(LE),
            {TP: follower},
            on_partition_error=lambda tp, err: errors_seen.append(tp),
        )
        await eventually(lambda: follower.log_end_offset == 5)
        await server.stop(None)
        produce(leader, *(b"m%d" % i for i in range(5, 10)))
        await eventually(lambda: len(log_events(fetcher_logs, "rpc-error")) >= 3)
        assert fetcher.running
        assert follower.log_end_offset == 5
        restarted, _ = await serve(servicer, port)
        stack.push_async_callback(restarted.stop, None)
        await eventually(lambda: follower.log_end_offset == 10)
        assert log_events(fetcher_logs, "source-reachable")

    run(scenario)
    assert not errors_seen
    assert log_bytes(follower) == log_bytes(leader)


class UnaryOnlyLeader(LeaderServicer):
    """A leader that predates FetchSession: the method is UNIMPLEMENTED."""

    async def FetchSession(  # type: ignore[override]
        self,
        request_iterator: AsyncIterator[pb.FetchRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> None:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")


def test_fetches_go_over_one_session_stream_and_fall_back_to_unary_calls(
    tmp_path: Path,
) -> None:
    """Against a leader with FetchSession every fetch travels on one stream, across many
    round trips and a restart of the leader (a new stream then); against one without it, the
    fetcher switches to unary Fetch calls and replicates all the same."""
    leader = leader_partition(tmp_path)
    follower = follower_partition(tmp_path)

    async def scenario(stack: contextlib.AsyncExitStack) -> None:
        servicer, server, port = await start_leader(stack, leader)
        start_fetcher(stack, port, config(LE), {TP: follower})
        for i in range(1, 21):
            produce(leader, b"m%d" % (i - 1), servicer=servicer)
            await eventually(functools.partial(lambda n: follower.log_end_offset == n, i))
        assert len(servicer.fetch_requests) >= 20
        assert (servicer.sessions, servicer.unary_fetches) == (1, 0)
        await server.stop(None)
        restarted, _ = await serve(servicer, port)
        stack.push_async_callback(restarted.stop, None)
        produce(leader, b"m20", servicer=servicer)
        await eventually(lambda: follower.log_end_offset == 21)
        assert (servicer.sessions, servicer.unary_fetches) == (2, 0)

    run(scenario)
    old_follower = follower_partition(tmp_path / "old")
    old = UnaryOnlyLeader({TP: leader})

    async def against_an_older_leader(stack: contextlib.AsyncExitStack) -> None:
        server, port = await serve(old)
        stack.push_async_callback(server.stop, None)
        start_fetcher(stack, port, config(LE), {TP: old_follower})
        await eventually(lambda: old_follower.log_end_offset == 21)
        assert old.unary_fetches >= 1

    run(against_an_older_leader)
    assert log_bytes(old_follower) == log_bytes(follower) == log_bytes(leader)


def test_removed_partitions_are_no_longer_fetched(tmp_path: Path) -> None:
    leaders = [leader_partition(tmp_path, tp) for tp in (TP, TP1)]
    followers = {tp: follower_partition(tmp_path, tp) for tp in (TP, TP1)}
    for leader in leaders:
        produce(leader, b"m0", b"m1")

    async def scenario(stack: contextlib.AsyncExitStack) -> None:
        servicer, _, port = await start_leader(stack, *leaders)
        fetcher = start_fetcher(stack, port, config(LE), dict(followers))
        await eventually(lambda: all(p.log_end_offset == 2 for p in followers.values()))
        fetcher.remove_partitions([TP1, TopicPartition("unknown", 0)])
        assert fetcher.partitions() == {TP}
        assert fetcher.partition_count == 1
        assert fetcher.phase(TP1) is None
        for leader in leaders:  # a long poll in flight may return this for TP1 too
            produce(leader, b"m2", b"m3", servicer=servicer)
        await eventually(lambda: servicer.fetch_requests[-1] == {TP: 4})
        assert followers[TP1].log_end_offset == 2
        # The request in flight at the removal carried TP1 and got its m2, m3: dropped.
        assert {TP: 2, TP1: 2} in servicer.fetch_requests

    run(scenario)


def test_fenced_epoch_fails_the_partition_until_re_added_with_the_new_epoch(
    tmp_path: Path,
) -> None:
    leader = leader_partition(tmp_path, epoch=3)
    produce(leader, b"m0", b"m1")
    follower = follower_partition(tmp_path, epoch=2)  # a stale LeaderAndIsr
    failures: list[tuple[TopicPartition, BaseException]] = []

    async def scenario(stack: contextlib.AsyncExitStack) -> None:
        _, _, port = await start_leader(stack, leader)
        fetcher = start_fetcher(
            stack,
            port,
            config(LE),
            {TP: follower},
            on_partition_error=lambda tp, err: failures.append((tp, err)),
        )
        await eventually(lambda: fetcher.phase(TP) is FetchPhase.FAILED)
        assert follower.log_end_offset == 0
        follower.make_follower(leadership(3))
        fetcher.add_partitions({TP: follower})
        assert fetcher.phase(TP) is FetchPhase.TRUNCATING
        await eventually(lambda: follower.log_end_offset == 2)

    run(scenario)
    assert len(failures) == 1
    assert failures[0][0] == TP
    assert isinstance(failures[0][1], errors.FencedLeaderEpochError)


def test_unknown_epoch_backs_off_until_the_leader_catches_up(tmp_path: Path) -> None:
    leader = leader_partition(tmp_path, epoch=3)
    produce(leader, b"m0")
    follower = follower_partition(tmp_path, epoch=4)  # the follower heard of epoch 4 first
    copy_prefix(leader, follower, 1)  # so it has an epoch to ask about
    failures: list[TopicPartition] = []

    async def scenario(stack: contextlib.AsyncExitStack) -> None:
        servicer, _, port = await start_leader(stack, leader)
        fetcher = start_fetcher(
            stack,
            port,
            config(LE),
            {TP: follower},
            on_partition_error=lambda tp, err: failures.append(tp),
        )
        await eventually(lambda: len(servicer.asked_epochs) >= 3)  # retried after backoffs
        assert fetcher.phase(TP) is FetchPhase.TRUNCATING
        leader.make_leader(leadership(4))
        produce(leader, b"m1", servicer=servicer)
        await eventually(lambda: follower.log_end_offset == 2)

    run(scenario)
    assert not failures
    assert log_bytes(follower) == log_bytes(leader)


def test_delayed_hw_update_leaves_the_follower_behind_the_leader_hw(tmp_path: Path) -> None:
    """The test hook behind docs/replication.md: the follower has the records, the leader has
    advanced its HW past them, and the follower does not know it yet."""
    leader = leader_partition(tmp_path)
    produce(leader, b"m0", b"m1")
    follower = follower_partition(tmp_path)

    async def scenario(stack: contextlib.AsyncExitStack) -> None:
        servicer, _, port = await start_leader(stack, leader)
        start_fetcher(stack, port, config(LE, follower_hw_update_delay_ms=600), {TP: follower})
        await eventually(lambda: 2 in servicer.sent_high_watermarks)
        seen = time.monotonic()
        assert follower.log_end_offset == 2
        assert leader.high_watermark == 2
        assert follower.high_watermark == 0
        await eventually(lambda: follower.high_watermark == 2)
        assert time.monotonic() - seen > 0.3

    run(scenario)


def test_idle_fetcher_sends_nothing_and_shutdown_survives_cancellation(tmp_path: Path) -> None:
    leader = leader_partition(tmp_path)
    produce(leader, b"m0")
    follower = follower_partition(tmp_path)

    async def scenario(stack: contextlib.AsyncExitStack) -> None:
        servicer, _, port = await start_leader(stack, leader)
        fetcher = start_fetcher(stack, port, config(LE))
        for _ in range(20):
            await asyncio.sleep(0)
        assert fetcher.running
        assert servicer.fetch_offsets == []
        fetcher.add_partitions({TP: follower})
        await eventually(lambda: follower.log_end_offset == 1)
        # Re-adding at the same epoch keeps the state: no new truncation round.
        fetcher.add_partitions({TP: follower})
        assert fetcher.phase(TP) is FetchPhase.FETCHING

        stopping = asyncio.create_task(fetcher.shutdown())
        await asyncio.sleep(0)
        stopping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stopping
        await fetcher.shutdown()  # waits for the shielded shutdown to finish
        assert not fetcher.running

    run(scenario)


def test_the_follower_follows_the_leaders_log_start_offset_and_reports_it(tmp_path: Path) -> None:
    """DeleteRecords on the leader: the follower raises its log start offset to the one in
    the fetch response (inside a batch it already holds) and its next fetch reports it, which
    is what the leader's low watermark is made of."""
    leader = leader_partition(tmp_path)
    produce(leader, b"m0", b"m1", b"m2", b"m3", b"m4")
    follower = follower_partition(tmp_path)

    async def scenario(stack: contextlib.AsyncExitStack) -> None:
        servicer, _, port = await start_leader(stack, leader)
        start_fetcher(stack, port, config(LE), {TP: follower})
        await eventually(lambda: leader.high_watermark == 5)
        assert leader.delete_records_on_leader(3) == 3
        assert leader.low_watermark_if_leader(lambda _: True) == 0  # the follower's, still
        produce(leader, b"m5", servicer=servicer)  # the long poll answers at once
        await eventually(lambda: follower.log.log_start_offset == 3)
        await eventually(lambda: leader.low_watermark_if_leader(lambda _: True) == 3)

    run(scenario)
    assert follower.log.epoch_cache.entries()[0].start_offset == 3
    with pytest.raises(errors.OffsetOutOfRangeError):
        follower.log.read(2, 1000)
