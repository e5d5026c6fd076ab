"""The producer: batches records per partition and sends them to the partition leaders.

Split as aiokafka (and Kafka's Java client) split it, each piece with one job:

- :class:`Partitioner` (``client.partitioner``) picks the partition of each record;
- :class:`RecordAccumulator` collects records into one open batch per partition, up to
  ``batch_size`` bytes or ``linger_ms`` of waiting;
- :class:`Sender` (one asyncio task) drains ready batches, groups them per leader into one
  ``Produce`` request, retries what failed with a retriable error, refreshes metadata when
  the error says the leadership it knew is stale, and completes the records' futures;
- :class:`IdempotenceState` holds the producer id from ``InitProducerId`` and the next
  sequence number of every partition;
- :class:`Producer` is the user's face: ``send``, ``flush``, ``close``.

Example::

    async with BrokerConnections.from_bootstrap("localhost:9091") as connections:
        async with Producer(connections, ProducerConfig(linger_ms=10)) as producer:
            future = await producer.send("orders", b"hello", key=b"customer-7")
            metadata = await future          # RecordMetadata(topic, partition, offset, ...)

What the ``acks`` setting guarantees once a record's future has a result:

- ``acks=-1`` (all, the default): every replica in the ISR has the record, so it survives
  the loss of all but one of them; with fewer in-sync replicas than the topic's
  ``min.insync.replicas`` the write is refused (retried until ``delivery_timeout_ms``).
- ``acks=1``: the leader appended it; it is lost if the leader dies before a follower
  copies it.
- ``acks=0``: the broker took the request; nothing is known about the append, and the
  offset is -1. (gRPC has no fire-and-forget call: the future completes when the
  broker's answer arrives, whatever it says.)

Ordering and the idempotent producer. Kafka allows up to 5 requests in flight per
connection and, with idempotence, relies on the broker's sequence checks to keep order
across retries. This producer keeps it simpler: **at most one request in flight per
partition**, always. A batch that fails with a retriable error goes back to the head of
its partition's queue and is resent before anything behind it, so retries never reorder
records, with or without idempotence. The price is throughput per partition (one batch per
round trip); requests to one leader still carry every partition that is ready.

With idempotence (the default with ``acks=all``) the producer gets a producer id from
``InitProducerId`` at start and gives each batch, when it is first drained, the next
sequence number of its partition; a retry resends the very same bytes, so a batch whose
first attempt was written but not acknowledged (a timeout, a leader that died after
appending) is recognised by the broker as a duplicate and answered with its original
offset instead of being written twice. If a batch that carries a sequence number fails for
good (non-retriable error, or ``delivery_timeout_ms`` expired), the broker's expected
sequence for that partition is unknown; as Kafka does (KIP-360 in spirit), the producer
waits for its in-flight requests, asks for a new producer id and restarts every sequence
at 0. Batches still queued then are sent under the new id (re-encoded), so a record that
was in doubt at that moment may be written twice: exactly-once holds only within one
producer id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import grpc

from broker.record_batch import (
    HEADER_SIZE,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    Record,
    encode_batch,
)
from broker.topic_partition import TopicPartition, topic_name_problem
from client.metadata import (
    BrokerConnections,
    BrokerNode,
    BrokerUnreachableError,
    ClientError,
    ClusterMetadata,
    MetadataClient,
)
from client.partitioner import Partitioner
from proto import errors
from proto import minibroker_pb2 as pb
from proto import minibroker_pb2_grpc as pb_grpc
from proto.minibroker_pb2 import ErrorCode

__all__ = [
    "ACKS_ALL",
    "DeliveryTimeoutError",
    "IdempotenceState",
    "Producer",
    "ProducerBatch",
    "ProducerClosedError",
    "ProducerConfig",
    "RecordAccumulator",
    "RecordMetadata",
    "RecordTooLargeError",
    "Sender",
    "parse_acks",
    "record_size",
]

log = logging.getLogger(__name__)

ACKS_ALL = -1
"""``acks=all``: the whole ISR has the records before they are acknowledged."""
UNKNOWN_TOPIC_WAIT_MS = 3000
"""How long ``send`` keeps refreshing metadata for a topic no broker knows (a topic the
controller is still creating appears within that), at most ``max_block_ms``."""
_INT32_MAX = 2**31 - 1
_RETRIABLE_STATUS = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)
"""gRPC statuses that mean "the broker did not answer": retry, after a metadata refresh."""
_DEADLINE_MARGIN_S = 1.0
"""The gRPC deadline exceeds the broker-side ``timeout_ms`` by this much, so an acks=all
request that times out at the broker comes back as REQUEST_TIMED_OUT, not as a deadline."""


# -- errors ----------------------------------------------------------------------------------


class ProducerClosedError(ClientError):
    """The producer was closed before the record could be delivered."""


class DeliveryTimeoutError(ClientError):
    """``delivery_timeout_ms`` passed before the record could even be sent (Kafka's
    TimeoutException "Expiring N record(s)")."""

    retriable = True


class RecordTooLargeError(ClientError):
    """A record larger than ``max_request_size`` (Kafka's RecordTooLargeException)."""


# -- config ----------------------------------------------------------------------------------


def parse_acks(value: str | int) -> int:
    """``"all"``, ``"-1"``, ``"1"``, ``"0"`` (or the ints) -> -1, 1 or 0."""
    text = str(value).strip().lower()
    if text == "all":
        return ACKS_ALL
    if text in ("-1", "0", "1"):
        return int(text)
    raise ClientError(f"acks must be 0, 1 or all (-1), got {value!r}")


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """The producer's settings, named as Kafka's (``batch.size`` -> ``batch_size``).

    Raises ClientError for a value Kafka would refuse too.
    """

    acks: int = ACKS_ALL
    """0, 1 or -1 (all); :func:`parse_acks` reads ``"all"``."""
    batch_size: int = 16384
    """Upper bound of one partition's batch in bytes (a larger record gets a batch of its
    own); 0 sends every record alone."""
    linger_ms: int = 5
    """How long a batch that is not full waits for more records before it is sent."""
    retries: int = _INT32_MAX
    """How often a batch is resent after a retriable error; ``delivery_timeout_ms`` is the
    bound that matters with the default."""
    retry_backoff_ms: int = 100
    """Pause before a batch is resent, and between metadata refreshes."""
    request_timeout_ms: int = 30000
    """How long one Produce request may take (also the broker's acks=all wait)."""
    delivery_timeout_ms: int = 120000
    """From ``send`` to the final outcome: after this a record fails with its last error.
    At least ``linger_ms + request_timeout_ms``."""
    enable_idempotence: bool | None = None
    """Producer id + sequence numbers, so retries cannot duplicate or reorder records.
    None (the default): on, unless ``acks`` is 0 or 1 or ``retries`` is 0 (Kafka 3's rule);
    True with acks 0/1 is an error. Resolved to a bool when the config is built."""
    max_request_size: int = 1048576
    """Largest Produce request; a record that cannot fit alone is refused by ``send``."""
    buffer_memory: int = 33554432
    """Bytes of records waiting to be acknowledged before ``send`` blocks."""
    max_block_ms: int = 60000
    """How long ``send`` and ``start`` may block: buffer full, metadata, producer id."""
    client_id: str = "minibroker-producer"

    def __post_init__(self) -> None:
        if isinstance(self.acks, bool) or self.acks not in (0, 1, ACKS_ALL):
            raise ClientError(f"acks must be 0, 1 or all (-1), got {self.acks!r}")
        for name, minimum in (
            ("batch_size", 0),
            ("linger_ms", 0),
            ("retries", 0),
            ("retry_backoff_ms", 0),
            ("request_timeout_ms", 1),
            ("delivery_timeout_ms", 1),
            ("max_request_size", HEADER_SIZE + 7),
            ("buffer_memory", 1),
            ("max_block_ms", 0),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ClientError(f"{name} must be an integer >= {minimum}, got {value!r}")
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            raise ClientError(
                f"delivery_timeout_ms ({self.delivery_timeout_ms}) must be at least "
                f"linger_ms + request_timeout_ms ({self.linger_ms + self.request_timeout_ms})"
            )
        idempotent = self.enable_idempotence
        if idempotent is None:
            idempotent = self.acks == ACKS_ALL and self.retries > 0
        elif idempotent and self.acks != ACKS_ALL:
            raise ClientError(
                f"enable_idempotence requires acks=all (-1), got acks={self.acks}; "
                "set acks=all or disable idempotence"
            )
        elif idempotent and self.retries == 0:
            raise ClientError("enable_idempotence requires retries > 0")
        object.__setattr__(self, "enable_idempotence", idempotent)

    @property
    def idempotent(self) -> bool:
        return bool(self.enable_idempotence)


# -- records and batches -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record was written."""

    topic: str
    partition: int
    offset: int
    """-1 with acks=0, and for a batch the broker reported as DUPLICATE_SEQUENCE (written
    earlier, offset not known)."""
    timestamp: int
    """The record's CreateTime in ms, or the broker's LogAppendTime if the topic uses it."""

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def _varint_size(value: int) -> int:
    """Bytes of ``value`` as a zig-zag varint/varlong (the record format's encoding)."""
    zigzag = (value << 1) ^ (value >> 63)
    return max(1, (zigzag.bit_length() + 6) // 7)


def _bytes_size(data: bytes | None) -> int:
    return 1 if data is None else _varint_size(len(data)) + len(data)


def record_size(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> int:
    """Exact encoded size of one record in a v2 batch (Kafka's ``DefaultRecord.sizeInBytes``)."""
    body = (
        1  # attributes
        + _varint_size(timestamp_delta)
        + _varint_size(offset_delta)
        + _bytes_size(key)
        + _bytes_size(value)
        + _varint_size(len(headers))
    )
    for header_key, header_value in headers:
        body += _bytes_size(header_key.encode("utf-8")) + _bytes_size(header_value)
    return _varint_size(body) + body


class ProducerBatch:
    """The records of one partition that travel together, and their futures."""

    __slots__ = (
        "attempts",
        "base_sequence",
        "closed",
        "created",
        "deadline",
        "done",
        "futures",
        "last_error",
        "payload",
        "producer_epoch",
        "producer_id",
        "records",
        "reserved",
        "retry_at",
        "size",
        "tp",
    )

    def __init__(self, tp: TopicPartition, created: float, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        self.tp = tp
        self.records: list[Record] = []
        self.futures: list[asyncio.Future[RecordMetadata]] = []
        self.size = HEADER_SIZE
        """Encoded size of the batch so far."""
        self.reserved = 0
        """Bytes of ``buffer_memory`` its records hold."""
        self.created = created
        """Loop time of the first record (linger and delivery timeout count from here)."""
        self.deadline = deadline
        self.closed = False
        """No more records go in: full, drained, or back for a retry."""
        self.payload: bytes | None = None
        """The encoded batch, fixed at the first drain: every retry sends these bytes."""
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.base_sequence = NO_SEQUENCE
        self.attempts = 0
        self.retry_at = 0.0
        """Loop time before which a retry must not be sent (retry_backoff_ms)."""
        self.last_error: Exception | None = None
        self.done: asyncio.Future[None] = loop.create_future()
        """Settled when every record's future is (flush and close wait for it)."""

    def __repr__(self) -> str:
        return (
            f"ProducerBatch({self.tp}, records={len(self.records)}, size={self.size}, "
            f"sequence={self.base_sequence}, attempts={self.attempts})"
        )

    def try_append(self, record: Record, batch_size: int) -> asyncio.Future[RecordMetadata] | None:
        """Add ``record`` if it fits (the first record always does); None if it does not."""
        if self.records:
            size = record_size(
                len(self.records),
                record.timestamp - self.records[0].timestamp,
                record.key,
                record.value,
                record.headers,
            )
            if self.size + size > batch_size:
                return None
        else:
            size = record_size(0, 0, record.key, record.value, record.headers)
        self.size += size
        self.records.append(record)
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        self.futures.append(future)
        return future

    def encode(self, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.payload = encode_batch(
            self.records,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
        )
        return self.payload

    def complete(self, base_offset: int, log_append_time_ms: int = -1) -> None:
        """Every record acknowledged, the first at ``base_offset`` (-1: unknown)."""
        topic, partition = self.tp
        for delta, (record, future) in enumerate(zip(self.records, self.futures, strict=True)):
            if not future.done():
                future.set_result(
                    RecordMetadata(
                        topic,
                        partition,
                        base_offset + delta if base_offset >= 0 else -1,
                        log_append_time_ms if log_append_time_ms >= 0 else record.timestamp,
                    )
                )
        if not self.done.done():
            self.done.set_result(None)

    def fail(self, error: Exception) -> None:
        for future in self.futures:
            if not future.done():
                future.set_exception(error)
        if not self.done.done():
            self.done.set_result(None)


# -- accumulator -------------------------------------------------------------------------------


class RecordAccumulator:
    """One queue of batches per partition; the last batch of a queue is the open one.

    Times are loop times in seconds, passed in, so the logic can be tested without a
    clock. Kafka's ``RecordAccumulator`` with its ``ready``/``drain``/``expiredBatches``.
    """

    def __init__(
        self,
        batch_size: int,
        linger_ms: int,
        delivery_timeout_ms: int,
        on_batch_closed: Callable[[TopicPartition], None] | None = None,
    ) -> None:
        self.batch_size = batch_size
        self.linger_s = linger_ms / 1000
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self._on_batch_closed = on_batch_closed
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.incomplete: set[ProducerBatch] = set()
        """Every batch created and not yet done: queued or in flight."""
        self.flushing = 0
        """Callers inside flush(): while > 0, every batch is ready regardless of linger."""
        self.closing = False
        self.wakeup = asyncio.Event()
        """Set when the sender may have something new to do (a batch created, filled,
        re-queued; a flush)."""

    def append(
        self,
        tp: TopicPartition,
        record: Record,
        now: float,
        *,
        reserved: int = 0,
        abort_on_new_batch: bool = False,
    ) -> asyncio.Future[RecordMetadata] | None:
        """Add ``record`` to the open batch of ``tp`` or to a new one; the batch holds
        ``reserved`` more bytes of buffer memory until it is done.

        With ``abort_on_new_batch`` (a keyless record on the sticky partition), a record
        that does not fit the open batch closes it and returns None instead: closing told
        the partitioner to move on, so the caller asks it again (KIP-480).
        """
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
        elif queue and not queue[-1].closed:
            last = queue[-1]
            future = last.try_append(record, self.batch_size)
            if future is not None:
                last.reserved += reserved
                if last.size >= self.batch_size:
                    self._close(last)
                return future
            self._close(last)
            if abort_on_new_batch:
                return None
        batch = ProducerBatch(tp, now, now + self.delivery_timeout_s)
        future = batch.try_append(record, self.batch_size)
        assert future is not None, "an empty batch takes any record"
        batch.reserved += reserved
        queue.append(batch)
        self.incomplete.add(batch)
        if batch.size >= self.batch_size:
            self._close(batch)
        self.wakeup.set()
        return future

    def _close(self, batch: ProducerBatch) -> None:
        if not batch.closed:
            batch.closed = True
            self.wakeup.set()
            if self._on_batch_closed is not None:
                self._on_batch_closed(batch.tp)

    def ready(
        self, now: float, muted: Collection[TopicPartition] = ()
    ) -> tuple[list[ProducerBatch], float]:
        """The head batches that may be sent now (their partition has nothing in flight),
        and the loop time when the next one becomes ready or expires (inf: nothing)."""
        ready = []
        next_time = math.inf
        exhausted = self.flushing > 0 or self.closing
        for tp, queue in self._queues.items():
            if not queue:
                continue
            head = queue[0]
            next_time = min(next_time, head.deadline)
            if tp in muted:
                continue
            if head.retry_at > now:
                next_time = min(next_time, head.retry_at)
            elif (
                head.closed  # full, or back for a retry
                or len(queue) > 1  # a newer batch exists, so this one is full
                or exhausted
                or head.created + self.linger_s <= now
            ):
                ready.append(head)
            else:
                next_time = min(next_time, head.created + self.linger_s)
        return ready, next_time

    def drain(self, batch: ProducerBatch) -> None:
        """Take ``batch`` (a head returned by :meth:`ready`) out of its queue to send it."""
        queue = self._queues[batch.tp]
        assert queue[0] is batch, f"{batch} is not the head of its queue"
        queue.popleft()
        self._close(batch)
        if not queue:
            del self._queues[batch.tp]

    def reenqueue(self, batch: ProducerBatch, retry_at: float) -> None:
        """Put a batch that failed retriably back at the head of its queue."""
        batch.retry_at = retry_at
        batch.closed = True
        queue = self._queues.get(batch.tp)
        if queue is None:
            queue = self._queues[batch.tp] = deque()
        queue.appendleft(batch)
        self.wakeup.set()

    def expire(self, now: float) -> list[ProducerBatch]:
        """Remove and return the queued batches whose delivery deadline has passed (queues
        are in creation order, so only heads need a look)."""
        expired = []
        for tp in list(self._queues):
            queue = self._queues[tp]
            while queue and queue[0].deadline <= now:
                batch = queue.popleft()
                self._close(batch)
                expired.append(batch)
            if not queue:
                del self._queues[tp]
        return expired

    def remove_all(self) -> list[ProducerBatch]:
        """Empty every queue (close without delivery); returns what was queued."""
        batches = [b for queue in self._queues.values() for b in queue]
        self._queues.clear()
        return batches

    def done(self, batch: ProducerBatch) -> None:
        self.incomplete.discard(batch)

    def queued(self, tp: TopicPartition) -> list[ProducerBatch]:
        """The batches of ``tp`` waiting to be sent, oldest first."""
        return list(self._queues.get(tp, ()))

    @property
    def has_queued(self) -> bool:
        return any(self._queues.values())


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
    background refreshes coalesced and at most one per ``retry_backoff_ms``."""

    def __init__(self, connections: BrokerConnections, retry_backoff_ms: int) -> None:
        self.client = MetadataClient(connections)
        self.topics: set[str] = set()
        self.backoff_s = retry_backoff_ms / 1000
        self.last_error: Exception | None = None
        """Why the last refresh failed (None if it succeeded)."""
        self.on_update: Callable[[], None] | None = None
        self._lock = asyncio.Lock()
        self._last_attempt = -math.inf
        self._update_requested = False
        self._updater: asyncio.Task[None] | None = None
        self._available: dict[str, list[int]] = {}

    @property
    def current(self) -> ClusterMetadata | None:
        return self.client.current

    async def refresh(self) -> ClusterMetadata:
        """Ask the cluster for every topic of this producer now. Raises
        BrokerUnreachableError when no broker answers."""
        async with self._lock:
            self._last_attempt = asyncio.get_running_loop().time()
            try:
                result = await self.client.refresh(sorted(self.topics))
            except ClientError as e:
                self.last_error = e
                raise
            finally:
                if self.on_update is not None:
                    self.on_update()
            self.last_error = None
            self._available.clear()
            return result

    def request_update(self) -> None:
        """Refresh in the background soon (coalesced with one under way or pending)."""
        self._update_requested = True
        if self._updater is None or self._updater.done():
            self._updater = asyncio.create_task(self._update_loop())

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
        cluster = self.client.current
        found = cluster.topics.get(topic) if cluster is not None else None
        if found is None or found.error_code != ErrorCode.NONE or not found.partitions:
            return None
        return len(found.partitions)

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
        self.in_flight: dict[TopicPartition, ProducerBatch] = {}
        """The one batch per partition whose Produce request is under way."""
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
                    await asyncio.wait_for(accumulator.wakeup.wait(), timeout)
        finally:
            for task in list(self._requests):
                task.cancel()
            if self._requests:
                await asyncio.gather(*self._requests, return_exceptions=True)

    async def _run_once(self, now: float) -> float:
        """Send what is ready; returns when to look again."""
        idempotence = self.idempotence
        if idempotence is not None and idempotence.needs_reset:
            if self.in_flight:
                return math.inf  # a response will wake us
            if now < self._reset_not_before:
                return self._reset_not_before
            await self._reset_producer_id()
            return now
        ready, next_time = self.accumulator.ready(now, self.in_flight)
        by_leader: dict[BrokerNode, list[ProducerBatch]] = {}
        missing_leader = False
        for batch in ready:
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
            if left:
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
        for batch in batches:
            if drained and total + batch.size > self.config.max_request_size:
                return drained, True
            self.accumulator.drain(batch)
            if batch.payload is None or (
                idempotence is not None and batch.producer_id != idempotence.producer_id
            ):
                if idempotence is not None:
                    sequence = idempotence.next_sequence(batch.tp, len(batch.records))
                    batch.encode(idempotence.producer_id, idempotence.producer_epoch, sequence)
                else:
                    batch.encode(NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE)
            assert batch.payload is not None
            total += len(batch.payload)
            batch.attempts += 1
            self.in_flight[batch.tp] = batch
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
                stub = pb_grpc.BrokerStub(self.connections.channel(node.address))
                response = await stub.Produce(
                    request, timeout=config.request_timeout_ms / 1000 + _DEADLINE_MARGIN_S
                )
            except grpc.aio.AioRpcError as e:
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
                    if part.error_code != ErrorCode.NONE:
                        # Nobody waits for an acks=0 outcome; still, a hint that the
                        # leadership moved is worth a refresh for the next batches.
                        self.metadata.request_update()
                    self._complete(batch, -1, -1)
                elif part.error_code == ErrorCode.NONE:
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
                if self.in_flight.get(batch.tp) is batch:
                    del self.in_flight[batch.tp]
            self.accumulator.wakeup.set()

    def _transport_error(self, node: BrokerNode, e: grpc.aio.AioRpcError) -> ClientError:
        code = e.code()
        where = f"broker {node.node_id} ({node.address})"
        if code in _RETRIABLE_STATUS:
            # Unreachable or silent: the leadership may have moved; ask again.
            self.metadata.request_update()
            return BrokerUnreachableError(f"{where} did not answer: {code.name.lower()}")
        return ClientError(f"{where} refused the produce request: {code.name}: {e.details()}")

    def _retry_or_fail(self, batch: ProducerBatch, error: Exception, now: float) -> None:
        batch.last_error = error
        retriable = isinstance(error, errors.MinibrokerError) and error.retriable
        if retriable and batch.attempts <= self.config.retries and now < batch.deadline:
            if isinstance(error, errors.MinibrokerError) and error.invalid_metadata:
                self.metadata.request_update()
            log.debug("retrying %s after %s", batch, error)
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

    def _expired_error(self, batch: ProducerBatch) -> Exception:
        timeout_ms = self.config.delivery_timeout_ms
        if batch.last_error is not None:
            return _with_context(
                batch.last_error,
                f"{batch.tp}: {{}} (gave up after {batch.attempts} attempt(s): "
                f"delivery_timeout_ms={timeout_ms} expired)",
            )
        return DeliveryTimeoutError(
            f"{batch.tp}: {len(batch.records)} record(s) expired: {timeout_ms} ms "
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


# -- producer ----------------------------------------------------------------------------------


class _BufferPool:
    """``buffer_memory``: how many bytes of records may wait for acknowledgement."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._freed = asyncio.Event()

    async def reserve(self, size: int, timeout_s: float) -> None:
        """Wait until ``size`` more bytes fit (or nothing is used: a huge record still
        goes, alone). Raises ClientError after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.used and self.used + size > self.limit:
            self._freed.clear()
            remaining = deadline - loop.time()
            try:
                await asyncio.wait_for(self._freed.wait(), max(0.0, remaining))
            except TimeoutError:
                raise ClientError(
                    f"producer buffer full: {self.used} bytes waiting for acknowledgement "
                    f"(buffer_memory={self.limit}) for {timeout_s * 1000:.0f} ms (max_block_ms)"
                ) from None
        self.used += size

    def release(self, size: int) -> None:
        self.used -= size
        self._freed.set()


class Producer:
    """Sends records to topics; an async context manager (``start`` and ``close``).

    The connections are the caller's: the producer does not close them.
    """

    def __init__(
        self,
        connections: BrokerConnections,
        config: ProducerConfig | None = None,
        *,
        partitioner: Partitioner | None = None,
    ) -> None:
        self.connections = connections
        self.config = config or ProducerConfig()
        self.partitioner = partitioner or Partitioner()
        self._metadata: ProducerMetadata | None = None
        self._accumulator: RecordAccumulator | None = None
        self._sender: Sender | None = None
        self._sender_task: asyncio.Task[None] | None = None
        self._idempotence = IdempotenceState() if self.config.idempotent else None
        self._buffer = _BufferPool(self.config.buffer_memory)
        self._start_lock: asyncio.Lock | None = None
        self._closing = False
        self._closed = False
        self._fatal: Exception | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Get a producer id (idempotence) and start the sender. Retries while no broker
        can give an id, up to ``max_block_ms``; raises ClientError then, or at once when
        the brokers cannot support idempotence. Idempotent; ``send`` calls it too."""
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._sender_task is not None:
                return
            self._check_open()
            loop = asyncio.get_running_loop()
            config = self.config
            metadata = ProducerMetadata(self.connections, config.retry_backoff_ms)
            if self._idempotence is not None:
                pid, epoch = await self._first_producer_id(loop.time() + config.max_block_ms / 1000)
                self._idempotence.set_producer_id(pid, epoch)
            accumulator = RecordAccumulator(
                config.batch_size,
                config.linger_ms,
                config.delivery_timeout_ms,
                self.partitioner.on_batch_closed,
            )
            metadata.on_update = accumulator.wakeup.set
            self._metadata = metadata
            self._accumulator = accumulator
            self._sender = Sender(
                self.connections, config, accumulator, metadata, self._idempotence, self._done
            )
            self._sender_task = asyncio.create_task(self._run_sender(self._sender))

    async def _first_producer_id(self, deadline: float) -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        backoff = self.config.retry_backoff_ms / 1000
        while True:
            found = await init_producer_id(self.connections, self.config.request_timeout_ms / 1000)
            if not isinstance(found, Exception):
                return found
            if loop.time() + backoff >= deadline:
                raise ClientError(
                    f"could not get a producer id within {self.config.max_block_ms} ms "
                    f"(max_block_ms): {found}"
                )
            log.info("waiting for a producer id: %s", found)
            await asyncio.sleep(backoff)

    async def _run_sender(self, sender: Sender) -> None:
        try:
            await sender.run()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug: do not leave futures hanging forever
            log.exception("producer sender failed")
            self._fatal = ClientError(f"the producer's sender failed: {e!r}")
            self._abort_all(self._fatal)

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # An ordinary exit (or an error in the caller's code) delivers what was sent;
        # cancellation or Ctrl-C does not wait for it.
        if exc is None or isinstance(exc, Exception):
            await self.close()
        else:
            await self.close(timeout_s=0)

    async def flush(self) -> None:
        """Send every record given to ``send`` so far without waiting for ``linger_ms``,
        and wait until each one is acknowledged or has failed. Does not raise for failed
        records (their futures do). Cancelling it only stops the waiting."""
        accumulator = self._accumulator
        if accumulator is None or not accumulator.incomplete:
            return
        pending = [batch.done for batch in accumulator.incomplete]
        accumulator.flushing += 1
        accumulator.wakeup.set()
        try:
            await asyncio.wait(pending)
        finally:
            accumulator.flushing -= 1

    async def close(self, timeout_s: float | None = None) -> None:
        """Flush (at most ``timeout_s``; None: until every record has an outcome, which
        ``delivery_timeout_ms`` bounds), then stop. Records still unsent after the timeout
        fail with ProducerClosedError. ``send`` refuses new records from the start of the
        close. Cancelling it stops at once, failing what was not delivered."""
        if self._closed:
            return
        self._closing = True
        try:
            if self._sender is not None and self._sender_task is not None:
                self._sender.stop_when_done()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self._sender_task), timeout_s)
        finally:
            self._closed = True
            if self._sender_task is not None and not self._sender_task.done():
                self._sender_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._sender_task
            self._abort_all(ProducerClosedError("the producer was closed before delivery"))
            if self._metadata is not None:
                await self._metadata.close()

    def _abort_all(self, error: Exception) -> None:
        accumulator = self._accumulator
        if accumulator is None:
            return
        accumulator.remove_all()
        for batch in list(accumulator.incomplete):
            batch.fail(error)
            self._done(batch)

    def _done(self, batch: ProducerBatch) -> None:
        assert self._accumulator is not None
        self._accumulator.done(batch)
        self._buffer.release(batch.reserved)
        batch.reserved = 0

    def _check_open(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._closing or self._closed:
            raise ProducerClosedError("the producer is closed")

    # -- sending ---------------------------------------------------------------------------

    @property
    def producer_id(self) -> int:
        """The producer id from InitProducerId (-1 without idempotence or before start)."""
        return self._idempotence.producer_id if self._idempotence is not None else NO_PRODUCER_ID

    @property
    def requests_sent(self) -> int:
        return 0 if self._sender is None else self._sender.requests_sent

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Iterable[tuple[str, bytes | None]] = (),
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; returns the future of its :class:`RecordMetadata`.

        Waits (up to ``max_block_ms``) only for what it cannot do without: the topic's
        metadata and room in ``buffer_memory``. Raises ClientError for an unknown topic
        (after a few metadata refreshes, ~3 s), a partition out of range, a record larger
        than ``max_request_size``, or a closed producer. The future fails with a
        ``proto.errors`` exception (or a ClientError) if delivery fails; see the module
        docstring for what its result guarantees for each ``acks``. Cancelling ``send``
        before it returns queues nothing; cancelling the returned future does not stop the
        record from being sent.
        """
        self._check_open()
        if self._sender_task is None:
            await self.start()
        _check_bytes("value", value)
        _check_bytes("key", key)
        header_tuple = tuple(headers)
        for header_key, header_value in header_tuple:
            if not isinstance(header_key, str):
                raise TypeError(f"header keys must be str, got {type(header_key).__name__}")
            _check_bytes(f"header {header_key!r}", header_value)
        num_partitions = await self._partition_count(topic)
        if partition is not None and not 0 <= partition < num_partitions:
            raise ClientError(
                f"partition {partition} out of range: topic '{topic}' has {num_partitions} "
                f"partition(s), 0 to {num_partitions - 1}"
            )
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        record = Record(key, value, timestamp_ms, header_tuple)
        size = HEADER_SIZE + record_size(0, 0, key, value, header_tuple)
        if size > self.config.max_request_size:
            raise RecordTooLargeError(
                f"a record of {size} bytes (as a batch of one) is larger than "
                f"max_request_size ({self.config.max_request_size})"
            )
        await self._buffer.reserve(size, self.config.max_block_ms / 1000)
        try:
            self._check_open()
            future = self._append(topic, num_partitions, record, size, partition)
        except BaseException:
            self._buffer.release(size)
            raise
        return future

    def _append(
        self,
        topic: str,
        num_partitions: int,
        record: Record,
        size: int,
        partition: int | None,
    ) -> asyncio.Future[RecordMetadata]:
        assert self._accumulator is not None
        assert self._metadata is not None
        accumulator = self._accumulator
        loop = asyncio.get_running_loop()
        sticky = partition is None and record.key is None
        for _ in range(2):
            chosen = self.partitioner.partition(
                topic,
                record.key,
                num_partitions,
                self._metadata.available(topic) if sticky else (),
                partition,
            )
            tp = TopicPartition(topic, chosen)
            future = accumulator.append(
                tp, record, loop.time(), reserved=size, abort_on_new_batch=sticky
            )
            if future is not None:
                return future
            sticky = False  # the partitioner moved on; the second attempt takes a new batch
        raise AssertionError("an append without abort_on_new_batch always succeeds")

    async def _partition_count(self, topic: str) -> int:
        if self._metadata is None:
            await self.start()
        metadata = self._metadata
        assert metadata is not None
        found = metadata.partitions(topic)
        if found is not None:
            return found
        problem = topic_name_problem(topic)
        if problem is not None:
            raise ClientError(problem)
        loop = asyncio.get_running_loop()
        start = loop.time()
        unknown_deadline = start + min(self.config.max_block_ms, UNKNOWN_TOPIC_WAIT_MS) / 1000
        unreachable_deadline = start + self.config.max_block_ms / 1000
        metadata.topics.add(topic)
        delay = max(self.config.retry_backoff_ms / 1000, 0.05)
        while True:
            try:
                await metadata.refresh()
            except BrokerUnreachableError:
                if loop.time() + delay > unreachable_deadline:
                    metadata.topics.discard(topic)
                    raise
            else:
                found = metadata.partitions(topic)
                if found is not None:
                    return found
                if loop.time() + delay > unknown_deadline:
                    metadata.topics.discard(topic)
                    raise ClientError(f"unknown topic '{topic}'")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)


def _check_bytes(what: str, data: Any) -> None:
    if data is not None and not isinstance(data, bytes):
        raise TypeError(f"{what} must be bytes or None, got {type(data).__name__}")
