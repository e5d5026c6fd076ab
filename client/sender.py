"""The producer's network loop (Kafka's ``Sender``) and what it needs from the cluster.

- :class:`Sender` (one asyncio task) drains the accumulator's ready batches, groups them per
  leader into one ``Produce`` request, sent on the producer's produce session (one stream)
  to that leader (:mod:`client.produce_session`), retries what failed with a retriable
  error and completes the records' futures;
- :class:`ProducerMetadata` keeps the leaders of the producer's topics, refreshed when an
  error says the leadership it knew is stale;
- :class:`IdempotenceState` and :func:`init_producer_id` give the batches their producer id
  and sequence numbers.

Ordering and the idempotent producer. Kafka allows up to 5 requests in flight per
connection and, with idempotence, relies on the broker's sequence checks to keep order
across retries; so does this producer, with one difference. With idempotence, up to
``max_in_flight_requests_per_connection`` (5) batches of a partition are in flight: the
produce session delivers them in the order they were sent and the broker appends them in
that order, refusing any batch whose predecessor it has not written
(OUT_OF_ORDER_SEQUENCE). When one of them fails retriably, the partition sends nothing
more until all its batches in flight are answered; those refused for coming after the
missing one go back into the queue in their first order (Kafka's
``insertInSequenceOrder``) and everything is sent again from the oldest. Without
idempotence a partition has **one batch in flight**: a batch that fails with a retriable
error goes back to the head of its queue and is resent before anything behind it, so
retries never reorder records there either (Kafka lets them reorder in that case). Requests
to one leader carry every partition that is ready.

With idempotence (the default with ``acks=all``) the producer gets a producer id from
``InitProducerId`` at start and gives each batch, when it is first drained, the next
sequence number of its partition; a retry resends the very same bytes, so a batch whose
first attempt was written but not acknowledged (a timeout, a leader that died after
appending) is recognised by the broker as a duplicate and answered with its original
offset instead of being written twice. If a batch that carries a sequence number fails for
good (non-retriable error, or ``delivery_timeout_ms`` expired), the broker's expected
sequence for that partition is unknown; as Kafka does (KIP-360 in spirit), the producer
waits for its in-flight requests, asks for a new producer id and restarts every sequence
at 0. Batches still queued then are sent under the new id (re-encoded: the header only, a
compressed batch keeps its compressed records, so its CRC covers the new header and the
same records), except those in doubt: a batch one of whose attempts may have been written
(:attr:`~client.record_accumulator.ProducerBatch.maybe_written`) fails instead, with
:class:`InDoubtBatchError`, since under a new producer id the broker could not tell it
from a new write and would store it twice (librdkafka renumbers such batches and writes
them twice; docs/chaos.md, "Idempotent producers and duplicates"). Exactly-once holds
only within one producer id; a record is never stored twice by the producer's own
retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable

import grpc

from client.metadata import (
    BrokerConnections,
    BrokerNode,
    BrokerUnreachableError,
    ClientError,
    ClusterMetadata,
    MetadataClient,
)
from client.produce_session import ProduceSession, ProduceSessionEndedError
from client.producer_config import DeliveryTimeoutError, InDoubtBatchError, ProducerConfig
from client.record_accumulator import ProducerBatch, RecordAccumulator
from proto import errors
from proto.records.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.wire.minibroker_pb2 import ErrorCode

__all__ = ["IdempotenceState", "ProducerMetadata", "Sender", "init_producer_id"]

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1
_RETRIABLE_STATUS = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.INTERNAL,
    }
)
"""gRPC statuses that mean "the broker did not answer": retry, after a metadata refresh.
INTERNAL is one: a stream whose broker dies mid-call often ends with "INTERNAL: Internal
error from Core" rather than UNAVAILABLE. Treated as a refusal, it would fail a batch for
good, and the producer id reset that follows would write the batches in doubt a second
time; a broker's own INTERNAL (a bug) is as unknown an outcome."""
_DEADLINE_MARGIN_S = 1.0
"""The gRPC deadline exceeds the broker-side ``timeout_ms`` by this much, so an acks=all
request that times out at the broker comes back as REQUEST_TIMED_OUT, not as a deadline."""

_NOT_APPENDED = frozenset(
    {
        ErrorCode.OUT_OF_ORDER_SEQUENCE,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.UNKNOWN_PRODUCER_ID,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.INVALID_RECORD,
        ErrorCode.INVALID_TIMESTAMP,
        ErrorCode.INVALID_TOPIC,
        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
    }
)
"""Codes a leader gives only for a batch it did not append (refused before the append, as
Kafka's ``appendToLocalLog`` refuses it). Any other error, or no answer, leaves the batch
in doubt (:attr:`~client.record_accumulator.ProducerBatch.maybe_written`)."""

_NONE = ErrorCode.NONE
"""Looked up once: protobuf's enum wrapper makes each ``ErrorCode.X`` a slow call."""


# -- idempotence -------------------------------------------------------------------------------


class IdempotenceState:
    """The producer id and epoch, and each partition's next sequence number (the
    non-transactional part of Kafka's ``TransactionManager``)."""

    def __init__(self) -> None:
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self._next_sequence: dict[TopicPartition, int] = {}
        self.needs_reset = False
        """A batch with a sequence number failed for good: get a new producer id before
        sending anything else."""
        self.batch_flags = 0
        """Attribute bits of every batch: TRANSACTIONAL_FLAG_MASK for a transactional
        producer, whose producer id comes from its transaction coordinator and is never
        reset by the sender (its transaction aborts instead: :mod:`client.transaction_manager`)."""

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self._next_sequence.clear()
        self.needs_reset = False

    def next_sequence(self, tp: TopicPartition, count: int) -> int:
        """The base sequence for a batch of ``count`` records, and advance; sequences wrap
        from INT32_MAX to 0 as Kafka's do."""
        base = self._next_sequence.get(tp, 0)
        self._next_sequence[tp] = (base + count) % (_INT32_MAX + 1)
        return base

    def sequence_of(self, tp: TopicPartition) -> int:
        """The sequence the next batch of ``tp`` will get."""
        return self._next_sequence.get(tp, 0)


async def init_producer_id(
    connections: BrokerConnections, request_timeout_s: float
) -> tuple[int, int] | Exception:
    """One pass over the known brokers: (producer id, epoch) from the first that gives
    one, else the problem as a retriable error. Raises ClientError when a broker says it
    cannot ever give one (no InitProducerId, or a non-retriable error code)."""
    problems = []
    for address in connections.candidate_addresses():
        stub = pb_grpc.BrokerStub(connections.channel(address))
        try:
            response = await stub.InitProducerId(
                pb.InitProducerIdRequest(), timeout=request_timeout_s
            )
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                raise ClientError(
                    f"broker {address} does not support the idempotent producer "
                    f"({e.details()}); set enable_idempotence=False (or acks 0/1)"
                ) from None
            problems.append(f"{address} ({e.code().name.lower()})")
            continue
        error = errors.for_code(response.error_code)
        if error is None:
            return response.producer_id, response.producer_epoch
        if not error.retriable:
            raise ClientError(f"InitProducerId refused by {address}: {error}")
        problems.append(f"{address} ({error.code_name})")
    return BrokerUnreachableError("no broker gave a producer id: " + ", ".join(problems))


# -- metadata ----------------------------------------------------------------------------------


class ProducerMetadata:
    """The cluster metadata of the topics this producer writes to: one refresh at a time,
    background refreshes coalesced and at most one per ``retry_backoff_ms``. Refreshes are
    numbered as they start, so that a batch back from a stale or silent leader can wait for
    one that started after the answer (:meth:`request_update`, :attr:`refreshes_done`)."""

    def __init__(self, connections: BrokerConnections, retry_backoff_ms: int) -> None:
        self.client = MetadataClient(connections)
        self.topics: set[str] = set()
        self.backoff_s = retry_backoff_ms / 1000
        self.last_error: Exception | None = None
        """Why the last refresh failed (None if it succeeded)."""
        self.on_update: Callable[[], None] | None = None
        self._lock = asyncio.Lock()
        self._last_attempt = -math.inf
        self._refreshes_started = 0
        self.refreshes_done = 0
        """The number of the last refresh that ended (they are numbered as they start),
        whether it succeeded or not."""
        self._update_requested = False
        self._updater: asyncio.Task[None] | None = None
        self._available: dict[str, list[int]] = {}
        self._partition_counts: dict[str, int] = {}
        """topic -> its partition count in the current metadata: ``send`` asks per record."""

    @property
    def current(self) -> ClusterMetadata | None:
        return self.client.current

    async def refresh(self) -> ClusterMetadata:
        """Ask the cluster for every topic of this producer now. Raises
        BrokerUnreachableError when no broker answers."""
        async with self._lock:
            self._last_attempt = asyncio.get_running_loop().time()
            self._refreshes_started += 1
            number = self._refreshes_started
            try:
                # Kafka's producer always lets the broker create a topic it writes to.
                result = await self.client.refresh(
                    sorted(self.topics), allow_auto_topic_creation=True
                )
            except ClientError as e:
                self.last_error = e
                raise
            finally:
                self.refreshes_done = number
                if self.on_update is not None:
                    self.on_update()
            self.last_error = None
            self._available.clear()
            self._partition_counts.clear()
            return result

    def request_update(self) -> int:
        """Refresh in the background soon (coalesced with one under way or pending).
        Returns the number of a refresh that starts after this call: once
        :attr:`refreshes_done` reaches it, the metadata is newer than the request."""
        self._update_requested = True
        if self._updater is None or self._updater.done():
            self._updater = asyncio.create_task(self._update_loop())
        return self._refreshes_started + 1

    async def _update_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._update_requested:
            self._update_requested = False
            pause = self._last_attempt + self.backoff_s - loop.time()
            if pause > 0:
                await asyncio.sleep(pause)
            try:
                await self.refresh()
            except ClientError as e:
                log.debug("metadata refresh failed: %s", e)

    def partitions(self, topic: str) -> int | None:
        """How many partitions ``topic`` has, or None while the metadata does not know it."""
        count = self._partition_counts.get(topic)
        if count is not None:
            return count
        cluster = self.client.current
        found = cluster.topics.get(topic) if cluster is not None else None
        if found is None or found.error_code != _NONE or not found.partitions:
            return None
        count = self._partition_counts[topic] = len(found.partitions)
        return count

    def available(self, topic: str) -> list[int]:
        """The partitions of ``topic`` with a live leader."""
        cached = self._available.get(topic)
        if cached is None:
            cluster = self.client.current
            cached = (
                []
                if cluster is None
                else [
                    p.tp.partition
                    for p in cluster.partitions_of(topic)
                    if p.leader >= 0 and p.leader in cluster.brokers
                ]
            )
            self._available[topic] = cached
        return cached

    def leader_of(self, tp: TopicPartition) -> BrokerNode | None:
        cluster = self.client.current
        return None if cluster is None else cluster.leader_of(tp)

    async def close(self) -> None:
        if self._updater is not None:
            self._updater.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._updater


# -- sender ------------------------------------------------------------------------------------


def _message_of(error: Exception) -> str:
    if isinstance(error, errors.BrokerResponseError):
        return str(error.args[0]) if error.args else ""
    return str(error)


def _with_context(error: Exception, context: str) -> Exception:
    """``error`` again, its message prefixed/suffixed with what failed, same class and
    flags (the CLI prints the message as its one line)."""
    text = context.format(_message_of(error))
    if isinstance(error, errors.BrokerResponseError):
        found = errors.for_code(error.code, text)
        assert found is not None
        return found
    if isinstance(error, ClientError):
        return type(error)(text)
    return ClientError(text)


class Sender:
    """The network loop (Kafka's ``Sender``): drain, group per leader, send, complete."""

    def __init__(
        self,
        connections: BrokerConnections,
        config: ProducerConfig,
        accumulator: RecordAccumulator,
        metadata: ProducerMetadata,
        idempotence: IdempotenceState | None,
        on_batch_done: Callable[[ProducerBatch], None],
    ) -> None:
        self.connections = connections
        self.config = config
        self.accumulator = accumulator
        self.metadata = metadata
        self.idempotence = idempotence
        self._on_batch_done = on_batch_done
        self.in_flight: dict[TopicPartition, list[ProducerBatch]] = {}
        """Per partition, the batches whose Produce requests are under way, in drain order
        (at most ``config.in_flight_per_partition``)."""
        self._limit = config.in_flight_per_partition
        self._recovering: set[TopicPartition] = set()
        """Partitions with a batch back for a retry while later ones were still in flight:
        nothing more is sent for them until every one in flight is answered (and those
        refused for coming after the missing one are back in the queue, in order)."""
        self._drained: dict[TopicPartition, int] = {}
        """Per partition, how many batches were drained (each batch's drain_order)."""
        self._sessions: dict[str, ProduceSession] = {}
        """One produce session (stream) per broker address."""
        self._requests: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._reset_not_before = 0.0
        self.requests_sent = 0
        """Produce requests sent so far (for tests and perf)."""

    def stop_when_done(self) -> None:
        """Finish once every batch is delivered or failed (close)."""
        self._stopping = True
        self.accumulator.closing = True  # no more lingering: send everything now
        self.accumulator.wakeup.set()

    async def run(self) -> None:
        """Until stopped with nothing left; cancel it to stop at once."""
        loop = asyncio.get_running_loop()
        accumulator = self.accumulator
        try:
            while True:
                accumulator.wakeup.clear()
                now = loop.time()
                for batch in accumulator.expire(now):
                    self._fail(batch, self._expired_error(batch), now)
                if self._stopping and not accumulator.incomplete and not self.in_flight:
                    return
                next_time = await self._run_once(now)
                timeout = None if next_time == math.inf else max(0.0, next_time - now)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await accumulator.wakeup.wait()
        finally:
            for task in list(self._requests):
                task.cancel()
            if self._requests:
                await asyncio.gather(*self._requests, return_exceptions=True)
            for session in self._sessions.values():
                session.close()
            self._sessions.clear()

    async def _run_once(self, now: float) -> float:
        """Send what is ready; returns when to look again."""
        idempotence = self.idempotence
        if idempotence is not None and idempotence.needs_reset:
            if idempotence.batch_flags:
                # A transactional producer's transaction can only abort now: what is queued
                # fails with it, and nothing is sent until the abort sets a new epoch.
                for batch in self.accumulator.remove_all():
                    self._fail(batch, self._abortable_error(batch), now)
                return math.inf
            if self.in_flight:
                return math.inf  # a response will wake us
            if now < self._reset_not_before:
                return self._reset_not_before
            await self._reset_producer_id()
            return now
        muted = self._recovering.union(
            tp for tp, batches in self.in_flight.items() if len(batches) >= self._limit
        )
        ready, next_time = self.accumulator.ready(now, muted, self.in_flight)
        by_leader: dict[BrokerNode, list[ProducerBatch]] = {}
        missing_leader = False
        refreshes_done = self.metadata.refreshes_done
        for batch in ready:
            if batch.metadata_wait > refreshes_done:
                continue  # back from a stale or unreachable leader: new metadata first
            leader = self.metadata.leader_of(batch.tp)
            if leader is None:
                missing_leader = True
                if batch.last_error is None:
                    batch.last_error = self.metadata.last_error or errors.LeaderNotAvailableError(
                        f"no leader for {batch.tp} in the cluster metadata"
                    )
                continue
            by_leader.setdefault(leader, []).append(batch)
        if missing_leader:
            self.metadata.request_update()
        for node, batches in by_leader.items():
            drained, left = self._drain(batches)
            if left or any(
                self.accumulator.has_queued_for(b.tp) and len(self.in_flight[b.tp]) < self._limit
                for b in drained
            ):
                next_time = now  # the rest goes in the next request
            task = asyncio.create_task(self._send(node, drained))
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)
        return next_time

    def _drain(self, batches: list[ProducerBatch]) -> tuple[list[ProducerBatch], bool]:
        """Take batches for one request, up to ``max_request_size`` (at least one); give
        each its sequence and bytes on its first drain. Returns (drained, any left)."""
        drained: list[ProducerBatch] = []
        total = 0
        idempotence = self.idempotence
        compressing = self.accumulator.compression != 0
        for batch in batches:
            # A compressed batch counts as what it sends: compressed on its first drain
            # (once: a retry's seal is its cached size). An uncompressed size is exact.
            size = self.accumulator.seal(batch) if compressing else batch.size
            if drained and total + size > self.config.max_request_size:
                return drained, True
            self.accumulator.drain(batch)
            if batch.drain_order < 0:
                batch.drain_order = self._drained.get(batch.tp, 0)
                self._drained[batch.tp] = batch.drain_order + 1
            if batch.payload is None or (
                idempotence is not None and batch.producer_id != idempotence.producer_id
            ):
                if idempotence is not None:
                    sequence = idempotence.next_sequence(batch.tp, batch.record_count)
                    batch.encode(
                        idempotence.producer_id,
                        idempotence.producer_epoch,
                        sequence,
                        idempotence.batch_flags,
                    )
                else:
                    batch.encode(NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE)
            assert batch.payload is not None
            total += len(batch.payload)
            batch.attempts += 1
            self.in_flight.setdefault(batch.tp, []).append(batch)
            drained.append(batch)
        return drained, False

    async def _send(self, node: BrokerNode, batches: list[ProducerBatch]) -> None:
        config = self.config
        request = pb.ProduceRequest(
            acks=config.acks, timeout_ms=config.request_timeout_ms, client_id=config.client_id
        )
        topics: dict[str, pb.TopicProduceData] = {}
        for batch in batches:
            topic = topics.get(batch.tp.topic)
            if topic is None:
                topic = topics[batch.tp.topic] = request.topics.add(name=batch.tp.topic)
            topic.partitions.add(index=batch.tp.partition, records=batch.payload)
        self.requests_sent += 1
        loop = asyncio.get_running_loop()
        try:
            try:
                response = await self._session(node).produce(
                    request, config.request_timeout_ms / 1000 + _DEADLINE_MARGIN_S
                )
            except (grpc.aio.AioRpcError, TimeoutError, ProduceSessionEndedError) as e:
                error = self._transport_error(node, e)
                now = loop.time()
                for batch in batches:
                    self._retry_or_fail(batch, error, now)
                return
            now = loop.time()
            results = {(t.name, p.index): p for t in response.responses for p in t.partitions}
            for batch in batches:
                part = results.get(batch.tp)
                if part is None:
                    self._retry_or_fail(
                        batch,
                        errors.BrokerResponseError(
                            f"broker {node.node_id} answered without a result for {batch.tp}"
                        ),
                        now,
                    )
                elif config.acks == 0:
                    if part.error_code != _NONE:
                        # Nobody waits for an acks=0 outcome; still, a hint that the
                        # leadership moved is worth a refresh for the next batches.
                        self.metadata.request_update()
                    self._complete(batch, -1, -1)
                elif part.error_code == _NONE:
                    self._complete(batch, part.base_offset, part.log_append_time_ms)
                elif part.error_code == ErrorCode.DUPLICATE_SEQUENCE:
                    # Kafka's Sender: the broker has the batch already (older than the
                    # ones whose offsets it remembers): a success without an offset.
                    self._complete(batch, -1, -1)
                else:
                    refused = errors.for_code(part.error_code, part.error_message)
                    assert refused is not None
                    self._retry_or_fail(batch, refused, now)
        finally:
            for batch in batches:
                in_flight = self.in_flight.get(batch.tp)
                if in_flight is not None and batch in in_flight:
                    in_flight.remove(batch)
                    if not in_flight:
                        del self.in_flight[batch.tp]
                        self._recovering.discard(batch.tp)
            self.accumulator.wakeup.set()

    def _session(self, node: BrokerNode) -> ProduceSession:
        session = self._sessions.get(node.address)
        if session is None:
            stub = pb_grpc.BrokerStub(self.connections.channel(node.address))
            session = self._sessions[node.address] = ProduceSession(stub)
        return session

    def _transport_error(
        self, node: BrokerNode, e: grpc.aio.AioRpcError | TimeoutError | ProduceSessionEndedError
    ) -> ClientError:
        where = f"broker {node.node_id} ({node.address})"
        if not isinstance(e, grpc.aio.AioRpcError):
            # No answer in time, or the stream ended under the request: as a connection
            # Kafka drops, the leadership may have moved; ask again.
            self.metadata.request_update()
            what = "deadline_exceeded" if isinstance(e, TimeoutError) else str(e)
            return BrokerUnreachableError(f"{where} did not answer: {what}")
        code = e.code()
        if code in _RETRIABLE_STATUS:
            # Unreachable or silent: the leadership may have moved; ask again.
            self.metadata.request_update()
            return BrokerUnreachableError(f"{where} did not answer: {code.name.lower()}")
        return ClientError(f"{where} refused the produce request: {code.name}: {e.details()}")

    def _retry_or_fail(self, batch: ProducerBatch, error: Exception, now: float) -> None:
        batch.last_error = error
        if not (isinstance(error, errors.BrokerResponseError) and error.code in _NOT_APPENDED):
            batch.maybe_written = True
        retriable = isinstance(error, errors.MinibrokerError) and error.retriable
        if isinstance(error, errors.OutOfOrderSequenceError) and batch.tp in self._recovering:
            # An earlier batch of this partition failed after this one was sent: the broker
            # refused this one for the gap, and it goes again after that one (Kafka retries
            # such a batch too, KIP-360).
            retriable = True
        if retriable and batch.attempts <= self.config.retries and now < batch.deadline:
            if isinstance(error, BrokerUnreachableError) or (
                isinstance(error, errors.MinibrokerError) and error.invalid_metadata
            ):
                # The leader it went to is stale or did not answer: the retry waits for
                # metadata newer than this answer (and retry_backoff_ms), instead of going
                # where the same metadata sends it, to be refused again (Kafka's producer
                # also gets newer metadata first in practice: its refresh is sent at once
                # and answered well within retry.backoff.ms).
                batch.metadata_wait = self.metadata.request_update()
            log.debug("retrying %s after %s", batch, error)
            if any(b is not batch for b in self.in_flight.get(batch.tp, ())):
                self._recovering.add(batch.tp)
            self.accumulator.reenqueue(batch, now + self.config.retry_backoff_ms / 1000)
            return
        if retriable and batch.attempts > self.config.retries:
            context = f"{batch.tp}: {{}} (gave up after {batch.attempts} attempts: retries)"
        elif retriable:
            context = (
                f"{batch.tp}: {{}} (gave up after {batch.attempts} attempt(s): "
                f"delivery_timeout_ms={self.config.delivery_timeout_ms} expired)"
            )
        else:
            context = f"{batch.tp}: {{}}"
        self._fail(batch, _with_context(error, context), now)

    def _abortable_error(self, batch: ProducerBatch) -> Exception:
        return ClientError(
            f"{batch.tp}: not sent, an earlier record of the transaction failed; "
            "abort the transaction"
        )

    def _expired_error(self, batch: ProducerBatch) -> Exception:
        timeout_ms = self.config.delivery_timeout_ms
        if batch.last_error is not None:
            return _with_context(
                batch.last_error,
                f"{batch.tp}: {{}} (gave up after {batch.attempts} attempt(s): "
                f"delivery_timeout_ms={timeout_ms} expired)",
            )
        return DeliveryTimeoutError(
            f"{batch.tp}: {batch.record_count} record(s) expired: {timeout_ms} ms "
            "(delivery_timeout_ms) passed before they could be sent"
        )

    def _complete(self, batch: ProducerBatch, base_offset: int, log_append_time_ms: int) -> None:
        batch.complete(base_offset, log_append_time_ms)
        self._on_batch_done(batch)

    def _fail(self, batch: ProducerBatch, error: Exception, now: float) -> None:
        log.debug("failed %s: %s", batch, error)
        batch.fail(error)
        self._on_batch_done(batch)
        idempotence = self.idempotence
        if (
            idempotence is not None
            and batch.base_sequence != NO_SEQUENCE
            and batch.producer_id == idempotence.producer_id
        ):
            # The broker's next expected sequence for this partition is now unknown.
            idempotence.needs_reset = True
            if any(b is not batch for b in self.in_flight.get(batch.tp, ())):
                # Those sent after it will be refused for the gap: they go again, under the
                # new producer id, instead of failing with it.
                self._recovering.add(batch.tp)

    async def _reset_producer_id(self) -> None:
        assert self.idempotence is not None
        loop = asyncio.get_running_loop()
        try:
            found = await init_producer_id(self.connections, self.config.request_timeout_ms / 1000)
        except ClientError as e:
            found = e
        if isinstance(found, Exception):
            log.warning("could not get a new producer id, will retry: %s", found)
            self._reset_not_before = loop.time() + self.config.retry_backoff_ms / 1000
            return
        old = self.idempotence.producer_id
        self.idempotence.set_producer_id(*found)
        log.info("producer id reset from %d to %d (a sequenced batch failed)", old, found[0])
        now = loop.time()
        for batch in self.accumulator.remove_in_doubt(old):
            self._fail(
                batch,
                InDoubtBatchError(
                    f"{batch.tp}: {batch.record_count} record(s) in doubt (sent under "
                    f"producer id {old}, last error: {batch.last_error}); not resent under "
                    f"producer id {found[0]}, which would store them twice if they were "
                    "written"
                ),
                now,
            )
