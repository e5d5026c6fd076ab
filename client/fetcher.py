"""The consumer's fetches: what a poll asks the leaders for, and what it makes of the answers.

How a poll works (Kafka's ``Fetcher``): for every assigned partition with a known position
and no fetched records waiting, one Fetch per leader (``replica_id`` -1, the leader epoch
from the metadata for KIP-320 fencing, sent on the consumer's fetch session with that
leader: :mod:`proto.transport.fetch_session`) stays in flight, long-polling up to
``fetch_max_wait_ms``; poll returns as soon as one of them brings records, and keeps the
others in flight for the next poll. A partition's position moves only when poll returns
its records, so the position is always "the next record the application has not seen":
what a commit writes, and what a seek or rebalance replaces (fetched data that no longer
starts at the position is dropped).

A partition without a position gets one from its leader too: the fetcher looks up the
offset its ``auto_offset_reset`` strategy names (ListOffsets, as Kafka's
``Fetcher.resetOffsetsIfNeeded`` does). :func:`records_from_fetch` decodes what a leader
returned into :class:`ConsumerRecord` objects.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import grpc

from client.consumer_config import ConsumerConfig, ConsumerRecord
from client.metadata import (
    BrokerConnections,
    BrokerNode,
    ClientError,
    ClusterMetadata,
    MetadataClient,
)
from client.subscription_state import EARLIEST, LATEST, NoOffsetForPartitionError, SubscriptionState
from proto import errors
from proto.records.read_committed import AbortedTransactionFilter
from proto.records.record_batch import CorruptRecordError, decode_rows, scan_batches
from proto.topic_partition import TopicPartition
from proto.transport.fetch_session import FetchSession, SessionEndedError
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc

__all__ = ["Fetcher", "records_from_fetch"]

log = logging.getLogger(__name__)

_LIST_OFFSETS_TIMESTAMP = {EARLIEST: -2, LATEST: -1}
"""ListOffsets' special timestamps: -2 the log start offset, -1 the high watermark (the
last stable offset for read_committed)."""
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
"""Fetch's and ListOffsets' ``isolation_level``."""


def records_from_fetch(
    tp: TopicPartition,
    fetch_offset: int,
    data: bytes,
    aborted: Iterable[tuple[int, int]] | None = None,
) -> tuple[list[ConsumerRecord], int]:
    """Decode the batches a leader returned for a fetch at ``fetch_offset``.

    Returns the records at or after ``fetch_offset`` (a fetch starts at the batch holding
    that offset, so the first batch may hold earlier ones) and the next fetch offset: after
    the last whole batch, or ``fetch_offset`` when there is none. Control batches advance
    the offset without yielding records; a partial batch at the end is left for the next
    fetch. ``aborted`` (read_committed: the answer's aborted transactions, as producer id
    and first offset) drops those transactions' batches. Raises CorruptRecordError for a
    batch that fails validation.
    """
    records: list[ConsumerRecord] = []
    next_offset = fetch_offset
    committed = None if aborted is None else AbortedTransactionFilter(aborted)
    scan = scan_batches(data)
    for scanned in scan:
        if scanned.problem is not None:
            raise CorruptRecordError(f"batch at position {scanned.position}: {scanned.problem}")
        header = scanned.header
        if header.next_offset <= fetch_offset:
            if committed is not None:
                committed.drops(header, data, scanned.position)
            continue
        if committed is not None:
            dropped = committed.drops(header, data, scanned.position)
        else:
            dropped = header.is_control
        if not dropped:
            records += decode_rows(
                data, scanned.position, header, ConsumerRecord, tp, min_offset=fetch_offset
            )
        next_offset = max(next_offset, header.next_offset)
    if scan.stop_problem is not None and not scan.incomplete:
        raise CorruptRecordError(scan.stop_reason or "unreadable batch")
    return records, next_offset


@dataclass(slots=True)
class _CompletedFetch:
    """Records fetched for one partition, returned by poll a slice at a time."""

    tp: TopicPartition
    position: int
    """Where the remaining records start: valid while it equals the partition's position."""
    records: list[ConsumerRecord]
    next_offset: int
    """The position once every record is returned."""
    index: int = 0


@dataclass(slots=True)
class _InflightFetch:
    node_id: int
    offsets: dict[TopicPartition, int]
    task: asyncio.Task[pb.FetchResponse]


class Fetcher:
    """The consumer's fetches (Kafka's ``Fetcher``): one Fetch in flight per leader, the
    records they brought buffered until poll takes them, and the ListOffsets lookups of
    partitions waiting for a reset.

    It shares the consumer's :class:`SubscriptionState` (a position moves only in
    :meth:`fetched_records`) and metadata, and never refreshes the metadata itself: it calls
    ``request_metadata_update`` when a leader is missing, moved or unreachable.
    """

    def __init__(
        self,
        connections: BrokerConnections,
        config: ConsumerConfig,
        subscriptions: SubscriptionState,
        metadata: MetadataClient,
        request_metadata_update: Callable[[], None],
    ) -> None:
        self.config = config
        self._connections = connections
        self._state = subscriptions
        self._metadata = metadata
        self._request_metadata_update = request_metadata_update
        self._completed: deque[_CompletedFetch] = deque()
        self._inflight: dict[int, _InflightFetch] = {}
        self._sessions: dict[str, FetchSession] = {}
        """One fetch session (stream) per leader address: a fetch is a message on it."""
        self._node_backoff_until: dict[int, float] = {}
        self._reset_backoff_until = -float("inf")
        self._isolation_level = (
            READ_COMMITTED if config.isolation_level == "read_committed" else READ_UNCOMMITTED
        )

    @property
    def in_flight(self) -> set[asyncio.Task[pb.FetchResponse]]:
        """The fetches under way, one per leader."""
        return {f.task for f in self._inflight.values()}

    @property
    def _retry_backoff_s(self) -> float:
        return self.config.retry_backoff_ms / 1000

    # -- records ---------------------------------------------------------------------------

    def fetched_records(self, limit: int) -> list[ConsumerRecord]:
        """Up to ``limit`` buffered records that start at their partitions' positions,
        moving the positions past them; stale buffers (seek, reassignment) are dropped."""
        out: list[ConsumerRecord] = []
        while self._completed and len(out) < limit:
            done = self._completed[0]
            if (
                not self._state.is_assigned(done.tp)
                or self._state.position(done.tp) != done.position
            ):
                self._completed.popleft()
                continue
            taken = done.records[done.index : done.index + limit - len(out)]
            out += taken
            done.index += len(taken)
            if done.index >= len(done.records):
                done.position = done.next_offset
                self._completed.popleft()
            else:
                done.position = taken[-1].offset + 1
            self._state.seek(done.tp, done.position)
        return out

    # -- fetching --------------------------------------------------------------------------

    def send_fetches(self) -> None:
        """Start one fetch per leader for the partitions that have a position, no buffered
        records and no fetch in flight."""
        metadata = self._metadata.current
        if metadata is None:
            return
        now = asyncio.get_running_loop().time()
        busy = {tp for f in self._inflight.values() for tp in f.offsets}
        busy |= {c.tp for c in self._completed}
        by_node: dict[int, dict[TopicPartition, int]] = {}
        nodes: dict[int, BrokerNode] = {}
        epochs: dict[TopicPartition, int] = {}
        for tp, position in self._state.positions().items():
            if tp in busy:
                continue
            leader = _live_leader(metadata, tp)
            if leader is None:
                self._request_metadata_update()
                continue
            node, epoch = leader
            if node.node_id in self._inflight:
                continue
            if self._node_backoff_until.get(node.node_id, 0.0) > now:
                continue
            by_node.setdefault(node.node_id, {})[tp] = position
            nodes[node.node_id] = node
            epochs[tp] = epoch
        for node_id, offsets in by_node.items():
            request = pb.FetchRequest(
                replica_id=-1,
                max_wait_ms=self.config.fetch_max_wait_ms,
                min_bytes=self.config.fetch_min_bytes,
                max_bytes=self.config.fetch_max_bytes,
                client_id=self.config.client_id,
                replica_epoch=-1,
                isolation_level=self._isolation_level,
            )
            topics: dict[str, pb.FetchTopic] = {}
            for tp, offset in offsets.items():
                topic = topics.get(tp.topic)
                if topic is None:
                    topic = topics[tp.topic] = request.topics.add(topic=tp.topic)
                topic.partitions.add(
                    partition=tp.partition,
                    current_leader_epoch=epochs[tp],
                    fetch_offset=offset,
                    log_start_offset=-1,
                    partition_max_bytes=self.config.max_partition_fetch_bytes,
                )
            timeout = (self.config.fetch_max_wait_ms + self.config.request_timeout_ms) / 1000
            session = self._session(nodes[node_id].address)
            task = asyncio.ensure_future(session.fetch(request, timeout))
            self._inflight[node_id] = _InflightFetch(node_id, offsets, task)

    def collect_fetches(self) -> None:
        """Turn finished fetches into buffered records, resets and metadata refreshes."""
        for node_id, fetch in list(self._inflight.items()):
            if not fetch.task.done():
                continue
            del self._inflight[node_id]
            if fetch.task.cancelled():
                continue
            error = fetch.task.exception()
            if isinstance(error, grpc.aio.AioRpcError):
                self._leader_failed(node_id, f"fetch failed: {error.code().name}")
                continue
            if isinstance(error, TimeoutError | SessionEndedError):
                self._leader_failed(node_id, f"fetch failed: {error or 'no answer in time'}")
                continue
            if error is not None:
                raise error
            self._handle_fetch_response(node_id, fetch.offsets, fetch.task.result())

    def _handle_fetch_response(
        self, node_id: int, offsets: Mapping[TopicPartition, int], response: pb.FetchResponse
    ) -> None:
        if response.error_code != pb.NONE:
            self._leader_failed(node_id, f"fetch refused: {pb.ErrorCode.Name(response.error_code)}")
            return
        for topic in response.responses:
            for part in topic.partitions:
                tp = TopicPartition(topic.topic, part.partition_index)
                fetch_offset = offsets.get(tp)
                if (
                    fetch_offset is None
                    or not self._state.is_assigned(tp)
                    or self._state.position(tp) != fetch_offset
                ):
                    continue  # seek'd or reassigned while the fetch was in flight
                if part.error_code == pb.NONE:
                    try:
                        aborted = (
                            [(a.producer_id, a.first_offset) for a in part.aborted_transactions]
                            if self._isolation_level == READ_COMMITTED
                            else None
                        )
                        records, next_offset = records_from_fetch(
                            tp, fetch_offset, part.records, aborted
                        )
                    except CorruptRecordError as e:
                        raise ClientError(
                            f"corrupt record batch in {tp} at offset {fetch_offset}: {e}"
                        ) from None
                    if next_offset > fetch_offset:
                        self._completed.append(
                            _CompletedFetch(tp, fetch_offset, records, next_offset)
                        )
                elif part.error_code == pb.OFFSET_OUT_OF_RANGE:
                    log.info(
                        "consumer offset_out_of_range tp=%s offset=%d log_start=%d hw=%d reset=%s",
                        tp,
                        fetch_offset,
                        part.log_start_offset,
                        part.high_watermark,
                        self.config.auto_offset_reset,
                    )
                    if self.config.auto_offset_reset == "none":
                        raise NoOffsetForPartitionError(
                            f"offset {fetch_offset} of {tp} is out of range (log start "
                            f"{part.log_start_offset}, high watermark {part.high_watermark}) "
                            "and auto_offset_reset is none"
                        )
                    self._state.request_reset(tp)
                else:
                    self._partition_failed(node_id, tp, part.error_code, part.error_message)

    def _partition_failed(self, node_id: int, tp: TopicPartition, code: int, message: str) -> None:
        error = errors.for_code(code, message)
        if error is None:
            return
        if code == pb.UNKNOWN_TOPIC_OR_PARTITION:
            self._request_metadata_update()
        elif not error.retriable:
            raise ClientError(f"cannot fetch {tp}: {error}")
        log.debug("consumer fetch_error broker=%d tp=%s error=%s", node_id, tp, error)
        if error.invalid_metadata:
            self._request_metadata_update()
        self._node_backoff_until[node_id] = (
            asyncio.get_running_loop().time() + self._retry_backoff_s
        )

    def _leader_failed(self, node_id: int, why: str) -> None:
        """A leader could not be reached or refused the request: find the leaders again."""
        log.info("consumer leader_unreachable broker=%d %s", node_id, why)
        self._request_metadata_update()
        self._node_backoff_until[node_id] = (
            asyncio.get_running_loop().time() + self._retry_backoff_s
        )

    def cancel_fetches(self) -> None:
        """Abandon every fetch in flight and every buffered record (seek and reassignment
        make them stale; the positions stay where the application is)."""
        for fetch in self._inflight.values():
            if fetch.task.done():
                if not fetch.task.cancelled():
                    fetch.task.exception()  # retrieved: asyncio does not log it as lost
            else:
                fetch.task.cancel()
        self._inflight.clear()
        self._completed.clear()

    def close(self) -> None:
        """Abandon the fetches (:meth:`cancel_fetches`) and end the fetch sessions."""
        self.cancel_fetches()
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()

    def _session(self, address: str) -> FetchSession:
        session = self._sessions.get(address)
        if session is None:
            stub = pb_grpc.BrokerStub(self._connections.channel(address))
            session = self._sessions[address] = FetchSession(stub)
        return session

    def drop_unassigned(self) -> None:
        self._completed = deque(c for c in self._completed if self._state.is_assigned(c.tp))

    # -- offset resets ---------------------------------------------------------------------

    async def reset_positions(self) -> None:
        """Look up the offsets of partitions waiting for a reset (ListOffsets to leaders)."""
        pending = self._state.pending_resets()
        if not pending:
            return
        for tp, strategy in pending.items():
            if strategy == "none":
                raise NoOffsetForPartitionError(
                    f"{tp} has no committed offset and auto_offset_reset is none"
                )
        loop = asyncio.get_running_loop()
        metadata = self._metadata.current
        if metadata is None or loop.time() < self._reset_backoff_until:
            return
        by_node: dict[int, list[tuple[TopicPartition, str, int]]] = {}
        nodes: dict[int, BrokerNode] = {}
        for tp, strategy in pending.items():
            leader = _live_leader(metadata, tp)
            if leader is None:
                self._request_metadata_update()
                continue
            node, epoch = leader
            by_node.setdefault(node.node_id, []).append((tp, strategy, epoch))
            nodes[node.node_id] = node
        if not by_node:
            return
        results = await asyncio.gather(
            *(self._list_offsets(nodes[n], parts) for n, parts in by_node.items()),
            return_exceptions=True,
        )
        failed = False
        for node_id, result in zip(by_node, results, strict=True):
            if isinstance(result, grpc.aio.AioRpcError):
                self._leader_failed(node_id, f"ListOffsets failed: {result.code().name}")
                failed = True
                continue
            if isinstance(result, BaseException):
                raise result
            strategies = {tp: s for tp, s, _ in by_node[node_id]}
            for tp, code, offset in result:
                if code == pb.NONE and offset >= 0:
                    if self._state.is_assigned(tp):
                        self._state.complete_reset(tp, strategies[tp], offset)
                    continue
                failed = True
                error = errors.for_code(code) if code != pb.NONE else None
                if error is not None and not error.retriable:
                    raise ClientError(f"cannot find the {strategies[tp]} offset of {tp}: {error}")
                if error is None or error.invalid_metadata:
                    self._request_metadata_update()
        if failed:
            self._reset_backoff_until = loop.time() + self._retry_backoff_s

    async def _list_offsets(
        self, node: BrokerNode, parts: list[tuple[TopicPartition, str, int]]
    ) -> list[tuple[TopicPartition, int, int]]:
        request = pb.ListOffsetsRequest(replica_id=-1, isolation_level=self._isolation_level)
        topics: dict[str, pb.ListOffsetsTopic] = {}
        for tp, strategy, epoch in parts:
            topic = topics.get(tp.topic)
            if topic is None:
                topic = topics[tp.topic] = request.topics.add(name=tp.topic)
            topic.partitions.add(
                partition_index=tp.partition,
                current_leader_epoch=epoch,
                timestamp=_LIST_OFFSETS_TIMESTAMP[strategy],
            )
        response = await pb_grpc.BrokerStub(self._connections.channel(node.address)).ListOffsets(
            request, timeout=self.config.request_timeout_ms / 1000
        )
        return [
            (TopicPartition(t.name, p.partition_index), p.error_code, p.offset)
            for t in response.topics
            for p in t.partitions
        ]


def _live_leader(metadata: ClusterMetadata, tp: TopicPartition) -> tuple[BrokerNode, int] | None:
    """The partition's leader and leader epoch, or None while it has none usable."""
    topic = metadata.topics.get(tp.topic)
    partition = None if topic is None else topic.partitions.get(tp.partition)
    if partition is None or partition.error_code != pb.NONE:
        return None
    node = metadata.leader_of(tp)
    return None if node is None else (node, partition.leader_epoch)
