"""The producer: batches records per partition and sends them to the partition leaders.

Split as aiokafka (and Kafka's Java client) split it, each piece with one job:

- :class:`Partitioner` (``client.partitioner``) picks the partition of each record;
- :class:`RecordAccumulator` (``client.record_accumulator``) collects records into one open
  batch per partition, up to ``batch_size`` bytes or ``linger_ms`` of waiting, and
  compresses each batch once when it is sealed to be sent (``compression_type``);
- :class:`Sender` (``client.sender``, one asyncio task) drains ready batches, groups them per
  leader into one ``Produce`` request, retries what failed with a retriable error, refreshes
  metadata when the error says the leadership it knew is stale, and completes the batches;
- :class:`IdempotenceState` (``client.sender``) holds the producer id from ``InitProducerId``
  and the next sequence number of every partition;
- :class:`ProducerConfig` and :class:`RecordMetadata` (``client.producer_config``) are the
  settings and what an acknowledged record's handle holds;
- :class:`FutureRecordMetadata` (``client.future_record_metadata``) is that handle: light,
  one per record, reading its batch's one outcome (Kafka's);
- :class:`Producer` (this module) is the user's face: ``send``, ``flush``, ``close``.

Example::

    async with BrokerConnections.from_bootstrap("localhost:9091") as connections:
        async with Producer(connections, ProducerConfig(linger_ms=10)) as producer:
            handle = await producer.send("orders", b"hello", key=b"customer-7")
            metadata = await handle          # RecordMetadata(topic, partition, offset, ...)

What the ``acks`` setting guarantees once a record's handle has a result:

- ``acks=-1`` (all, the default): every replica in the ISR has the record, so it survives
  the loss of all but one of them; with fewer in-sync replicas than the topic's
  ``min.insync.replicas`` the write is refused (retried until ``delivery_timeout_ms``).
- ``acks=1``: the leader appended it; it is lost if the leader dies before a follower
  copies it.
- ``acks=0``: the broker took the request; nothing is known about the append, and the
  offset is -1. (gRPC has no fire-and-forget call: the future completes when the
  broker's answer arrives, whatever it says.)

Ordering: at most one request in flight per partition, so retries never reorder records;
with idempotence (the default with ``acks=all``) a retried batch is not written twice,
within one producer id. How, and at what price: :mod:`client.sender`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from client.future_record_metadata import FutureRecordMetadata
from client.metadata import BrokerConnections, BrokerUnreachableError, ClientError
from client.partitioner import Partitioner
from client.producer_config import (
    ACKS_ALL,
    DeliveryTimeoutError,
    InDoubtBatchError,
    ProducerClosedError,
    ProducerConfig,
    RecordMetadata,
    RecordRange,
    RecordTooLargeError,
    parse_acks,
)
from client.record_accumulator import BufferPool, ProducerBatch, RecordAccumulator, record_size
from client.sender import IdempotenceState, ProducerMetadata, Sender, init_producer_id
from client.transaction_manager import (
    TransactionAbortableError,
    TransactionFencedError,
    TransactionManager,
)
from proto.records.builder import batch_of_one_size, encode_record_tail
from proto.records.record_batch import HEADER_SIZE, NO_PRODUCER_ID, TRANSACTIONAL_FLAG_MASK
from proto.topic_partition import TopicPartition, topic_name_problem
from proto.wire import minibroker_pb2 as pb

__all__ = [
    "ACKS_ALL",
    "DeliveryTimeoutError",
    "FutureRecordMetadata",
    "IdempotenceState",
    "InDoubtBatchError",
    "Producer",
    "ProducerBatch",
    "ProducerClosedError",
    "ProducerConfig",
    "RecordAccumulator",
    "RecordMetadata",
    "RecordRange",
    "RecordTooLargeError",
    "Sender",
    "TransactionAbortableError",
    "TransactionFencedError",
    "parse_acks",
    "record_size",
]

log = logging.getLogger(__name__)

UNKNOWN_TOPIC_WAIT_MS = 3000
"""How long ``send`` keeps refreshing metadata for a topic no broker knows (a topic the
controller is still creating appears within that), at most ``max_block_ms``. A topic the
brokers answer LEADER_NOT_AVAILABLE for (being created, automatically or not) is waited
for up to ``max_block_ms``."""


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
        self._default_partitioner = type(self.partitioner).partition is Partitioner.partition
        """Keyed records may go straight to ``partition_for_key`` (with its cache of
        hashes); a subclass that decides otherwise is asked for each record."""
        self._topic_partitions: dict[str, list[TopicPartition]] = {}
        """topic -> its TopicPartitions by index, built once rather than per record."""
        self._metadata: ProducerMetadata | None = None
        self._accumulator: RecordAccumulator | None = None
        self._accumulator_append: Callable[..., FutureRecordMetadata | None] = _not_started
        """``self._accumulator.append_tail``, bound once (an attribute lookup less per record)."""
        self._max_request_size = self.config.max_request_size
        self._sender: Sender | None = None
        self._sender_task: asyncio.Task[None] | None = None
        self._idempotence = IdempotenceState() if self.config.idempotent else None
        self._txn: TransactionManager | None = None
        """The transaction's side (``transactional_id``): None for other producers."""
        if self.config.transactional_id is not None:
            assert self._idempotence is not None  # ProducerConfig requires it
            self._idempotence.batch_flags = TRANSACTIONAL_FLAG_MASK
            self._txn = TransactionManager(
                connections,
                self.config.transactional_id,
                transaction_timeout_ms=self.config.transaction_timeout_ms,
                request_timeout_ms=self.config.request_timeout_ms,
                retry_backoff_ms=self.config.retry_backoff_ms,
                max_block_ms=self.config.max_block_ms,
            )
        self._buffer = BufferPool(self.config.buffer_memory)
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
            if self._txn is not None:
                assert self._idempotence is not None
                self._idempotence.set_producer_id(*await self._txn.init())
            elif self._idempotence is not None:
                pid, epoch = await self._first_producer_id(loop.time() + config.max_block_ms / 1000)
                self._idempotence.set_producer_id(pid, epoch)
            accumulator = RecordAccumulator(
                config.batch_size,
                config.linger_ms,
                config.delivery_timeout_ms,
                self.partitioner.on_batch_closed,
                config.compression_codec,
            )
            metadata.on_update = accumulator.wakeup.set
            self._metadata = metadata
            self._accumulator = accumulator
            self._accumulator_append = accumulator.append_tail
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
                    async with asyncio.timeout(timeout_s):
                        await asyncio.shield(self._sender_task)
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
        error = batch.result.error
        if self._txn is not None and isinstance(error, Exception):
            self._txn.record_failed(error)
        self._buffer.release(batch.reserved)
        batch.reserved = 0

    def _check_open(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._closing or self._closed:
            raise ProducerClosedError("the producer is closed")

    # -- transactions (transactional_id) ----------------------------------------------------

    def _transaction(self) -> TransactionManager:
        if self._txn is None:
            raise ClientError("the producer has no transactional_id")
        return self._txn

    async def init_transactions(self) -> None:
        """Find the transactional id's coordinator and get its producer id and epoch,
        fencing any earlier producer with the id and aborting its open transaction
        (``start`` does it for a transactional producer; calling it again does nothing)."""
        self._transaction()
        await self.start()

    def begin_transaction(self) -> None:
        """Open a transaction: the records sent until its end belong to it."""
        self._check_open()
        self._transaction().begin()

    async def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group_id: str
    ) -> None:
        """Commit a consumer group's ``offsets`` (the next records to read) with the
        transaction: they apply if it commits, never if it aborts (consume-transform-produce)."""
        self._check_open()
        await self._transaction().send_offsets(offsets, group_id)

    async def commit_transaction(self) -> None:
        """Deliver the transaction's records, then commit it. Raises
        TransactionAbortableError if one of its records failed (abort it then: it did not
        commit), TransactionFencedError if the producer was fenced (close it: it did not
        commit), another error when the coordinator could not be told in ``max_block_ms``
        (the outcome is then unknown: commit again, or close)."""
        txn = self._transaction()
        txn.in_transaction()
        await self.flush()
        await txn.end(commit=True)

    async def abort_transaction(self) -> None:
        """Abort the transaction: read_committed consumers never see its records. After
        a record failed with its sequence number spent, the producer then gets a new epoch
        from its coordinator (KIP-360) and goes on with the next transaction. Raises
        TransactionFencedError if the producer was fenced (its transaction never commits;
        the coordinator that fenced it aborts it)."""
        txn = self._transaction()
        txn.in_transaction()
        await self.flush()
        await txn.end(commit=False)
        idempotence = self._idempotence
        assert idempotence is not None
        if idempotence.needs_reset:
            # The partitions' sequences are unknown: the coordinator bumps the epoch for
            # the same producer id (KIP-360), and sequences start again at 0.
            idempotence.set_producer_id(*await txn.init())
            if self._accumulator is not None:
                self._accumulator.wakeup.set()

    async def _in_transaction(self, topic: str, key: bytes | None, partition: int | None) -> int:
        """The partition a transactional record goes to, added to the transaction first."""
        txn = self._transaction()
        txn.in_transaction()
        num_partitions = await self._partition_count(topic)
        _check_partition(topic, partition, num_partitions)
        if partition is None:
            if key is not None and self._default_partitioner:
                partition = self.partitioner.partition_for_key(key, num_partitions)
            else:
                assert self._metadata is not None
                available = self._metadata.available(topic) if key is None else ()
                partition = self.partitioner.partition(topic, key, num_partitions, available)
        await txn.add_partition(TopicPartition(topic, partition))
        return partition

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
    ) -> FutureRecordMetadata:
        """Queue one record; returns its :class:`FutureRecordMetadata`, the handle that
        ``await`` (or ``result()`` once ``done()``) turns into its :class:`RecordMetadata`.

        Waits (up to ``max_block_ms``) only for what it cannot do without: the topic's
        metadata and room in ``buffer_memory``. Raises ClientError for an unknown topic
        (after a few metadata refreshes, ~3 s), a partition out of range, a record larger
        than ``max_request_size``, or a closed producer. The handle fails with a
        ``proto.errors`` exception (or a ClientError) if delivery fails, the same one for
        every record of the batch; see the module docstring for what its result guarantees
        for each ``acks``. Cancelling ``send`` before it returns queues nothing; a handle
        cannot be cancelled (the record goes with its batch). A handle nobody looks at
        does not warn when dropped, failed or not (as Kafka's future without a callback:
        the outcome is for whoever asks).
        """
        if self._txn is not None:
            partition = await self._in_transaction(topic, key, partition)
        # The common case, in this one frame: no wait, no lock, no loop turn. One encoding
        # of the record gives both its bytes and its exact size, and a keyed record goes
        # from here to its batch in two calls (a call is much of the per-record cost:
        # bench/RESULTS.md). Anything that would wait goes to _send_waiting.
        accumulator = self._accumulator
        if accumulator is None or accumulator.wakeup.is_set():
            return await self._send_waiting(topic, value, key, partition, headers, timestamp_ms)
        if self._closing or self._fatal is not None:
            self._check_open()
        tail = encode_record_tail(key, value, headers)
        metadata = self._metadata
        assert metadata is not None
        num_partitions = metadata.partitions(topic)
        if num_partitions is None:
            return await self._send_waiting(topic, value, key, partition, headers, timestamp_ms)
        if partition is not None:
            _check_partition(topic, partition, num_partitions)
        body = len(tail) + 3  # batch_of_one_size(tail), its varint inline for < 8 KiB
        size = HEADER_SIZE + body + (1 if body < 64 else 2 if body < 8192 else 3)
        if body >= 8192:
            size = batch_of_one_size(tail)
        if size > self._max_request_size:
            raise _too_large(size, self._max_request_size)
        if not self._buffer.try_reserve(size):
            return await self._send_waiting(topic, value, key, partition, headers, timestamp_ms)
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        try:
            if partition is None and key is not None and self._default_partitioner:
                partition = self.partitioner.partition_for_key(key, num_partitions)
            if partition is not None:
                tps = self._topic_partitions.get(topic)
                if tps is None or len(tps) != num_partitions:
                    tps = self._partitions_of(topic, num_partitions)
                handle = self._accumulator_append(tps[partition], timestamp_ms, tail, reserved=size)
                assert handle is not None, "an append without abort_on_new_batch succeeds"
                return handle
            return self._append(topic, num_partitions, key, timestamp_ms, tail, size, partition)
        except BaseException:
            self._buffer.release(size)
            raise

    async def _send_waiting(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int | None,
        headers: Iterable[tuple[str, bytes | None]],
        timestamp_ms: int | None,
    ) -> FutureRecordMetadata:
        """``send`` where it may wait: to start, for the sender to take the last batch, for
        the topic's metadata or for room in ``buffer_memory``."""
        self._check_open()
        if self._sender_task is None:
            await self.start()
        accumulator = self._accumulator
        if accumulator is not None and accumulator.wakeup.is_set():
            # The last send created or closed a batch: let the sender take it now, before
            # this record is queued (so cancelling here still queues nothing). Without
            # this yield a caller that never waits would queue up to buffer_memory before
            # the first request leaves; with it, the loop turns once per batch.
            await asyncio.sleep(0)
            self._check_open()
        tail = encode_record_tail(key, value, headers)
        metadata = self._metadata
        known = metadata.partitions(topic) if metadata is not None else None
        num_partitions = known if known is not None else await self._partition_count(topic)
        _check_partition(topic, partition, num_partitions)
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        size = batch_of_one_size(tail)
        if size > self.config.max_request_size:
            raise _too_large(size, self.config.max_request_size)
        if not self._buffer.try_reserve(size):
            await self._buffer.reserve(size, self.config.max_block_ms / 1000)
        try:
            self._check_open()
            future = self._append(topic, num_partitions, key, timestamp_ms, tail, size, partition)
        except BaseException:
            self._buffer.release(size)
            raise
        return future

    async def send_many(
        self,
        topic: str,
        values: Sequence[bytes | None],
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> list[asyncio.Future[RecordRange]]:
        """Queue keyless records without headers, in order, all with one timestamp: the
        bulk ``send``, for a caller with many values at hand (``perf produce``). Returns
        one future per run of consecutive ``values`` that went into one batch; each
        future's :class:`RecordRange` says where its ``count`` records were written, and
        the counts add up to ``len(values)`` in the order given. Per record it costs a
        small fraction of ``send``: no coroutine, no future, no size arithmetic of its own.

        Without ``partition`` the records fill the topic's sticky partition, moving on
        whenever a batch fills (KIP-480). Waits and raises as ``send`` does; every record
        is queued, or (cancelled or raised while waiting) none is. ``buffer_memory``
        bounds it as ``send``: a call larger than the whole buffer waits for it to empty.
        """
        self._check_open()
        if self._sender_task is None:
            await self.start()
        if not values:
            return []
        if self._txn is not None:  # one partition: the one added to the transaction
            partition = await self._in_transaction(topic, None, partition)
        if self._accumulator is not None and self._accumulator.wakeup.is_set():
            await asyncio.sleep(0)  # as in send: the sender takes the last batch first
            self._check_open()
        largest = 0
        value_bytes = 0
        for value in values:
            if value is not None:
                if type(value) is not bytes:
                    _check_bytes("value", value)
                n = len(value)
                value_bytes += n
                if n > largest:
                    largest = n
        num_partitions = await self._partition_count(topic)
        _check_partition(topic, partition, num_partitions)
        largest_batch = HEADER_SIZE + _MAX_BULK_RECORD_OVERHEAD + largest
        if largest_batch > self.config.max_request_size:
            raise RecordTooLargeError(
                f"a record of {largest} value bytes may need {largest_batch} bytes as a batch "
                f"of one, more than max_request_size ({self.config.max_request_size})"
            )
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        reservation = _bulk_reservation(len(values), value_bytes, largest, self.config.batch_size)
        if not self._buffer.try_reserve(reservation):
            await self._buffer.reserve(reservation, self.config.max_block_ms / 1000)
        used = 0
        try:
            self._check_open()
            futures, used = self._append_values(
                topic, num_partitions, values, timestamp_ms, partition
            )
        finally:
            self._buffer.release(reservation - used)
        return futures

    def _append_values(
        self,
        topic: str,
        num_partitions: int,
        values: Sequence[bytes | None],
        timestamp_ms: int,
        partition: int | None,
    ) -> tuple[list[asyncio.Future[RecordRange]], int]:
        assert self._accumulator is not None
        assert self._metadata is not None
        accumulator = self._accumulator
        partitioner = self.partitioner
        now = asyncio.get_running_loop().time()
        sticky = partition is None
        futures: list[asyncio.Future[RecordRange]] = []
        used = 0
        start = 0
        end = len(values)
        while start < end:
            if sticky:
                chosen = partitioner.sticky_partition(
                    topic, num_partitions, self._metadata.available(topic)
                )
            else:
                assert partition is not None
                chosen = partition
            start, future, added = accumulator.append_values(
                TopicPartition(topic, chosen),
                values,
                start,
                timestamp_ms,
                now,
                abort_on_new_batch=sticky,
            )
            used += added
            if future is not None:
                futures.append(future)
        return futures, used

    def _append(
        self,
        topic: str,
        num_partitions: int,
        key: bytes | None,
        timestamp_ms: int,
        tail: bytes,
        size: int,
        partition: int | None,
    ) -> FutureRecordMetadata:
        accumulator = self._accumulator
        assert accumulator is not None
        tps = self._topic_partitions.get(topic)
        if tps is None or len(tps) != num_partitions:
            tps = self._partitions_of(topic, num_partitions)
        if partition is None and key is not None and self._default_partitioner:
            partition = self.partitioner.partition_for_key(key, num_partitions)
        if partition is not None:
            future = accumulator.append_tail(tps[partition], timestamp_ms, tail, reserved=size)
            assert future is not None, "an append without abort_on_new_batch always succeeds"
            return future
        assert self._metadata is not None
        sticky = key is None
        for _ in range(2):
            chosen = self.partitioner.partition(
                topic,
                key,
                num_partitions,
                self._metadata.available(topic) if sticky else (),
            )
            future = accumulator.append_tail(
                tps[chosen], timestamp_ms, tail, reserved=size, abort_on_new_batch=sticky
            )
            if future is not None:
                return future
            sticky = False  # the partitioner moved on; the second attempt takes a new batch
        raise AssertionError("an append without abort_on_new_batch always succeeds")

    def _partitions_of(self, topic: str, num_partitions: int) -> list[TopicPartition]:
        tps = self._topic_partitions[topic] = [
            TopicPartition(topic, p) for p in range(num_partitions)
        ]
        return tps

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
                if _being_created(metadata, topic):
                    deadline = unreachable_deadline  # created, waiting for its leaders
                else:
                    deadline = unknown_deadline
                if loop.time() + delay > deadline:
                    metadata.topics.discard(topic)
                    raise ClientError(f"unknown topic '{topic}'{_why_not_created(metadata, topic)}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)


def _not_started(*args: object, **kwargs: object) -> FutureRecordMetadata | None:
    raise AssertionError("the producer's accumulator is made by start()")


def _being_created(metadata: ProducerMetadata, topic: str) -> bool:
    """The last metadata answered LEADER_NOT_AVAILABLE for ``topic``: it exists (or was
    just created for this producer) and waits for the controller to elect its leaders."""
    cluster = metadata.current
    found = cluster.topics.get(topic) if cluster is not None else None
    return found is not None and found.error_code == pb.LEADER_NOT_AVAILABLE


def _why_not_created(metadata: ProducerMetadata, topic: str) -> str:
    """Why the brokers did not create ``topic`` although they were asked to, when they said
    (a suffix for the "unknown topic" message), else ""."""
    cluster = metadata.current
    found = cluster.topics.get(topic) if cluster is not None else None
    if found is not None and found.error_code == pb.INVALID_REPLICATION_FACTOR:
        return (
            ": the brokers cannot create it, fewer brokers are alive than their "
            "default.replication.factor (create it with `minibroker topics create`)"
        )
    return ""


_MAX_BULK_RECORD_OVERHEAD = 28
"""The most bytes a keyless, header-less record adds to a batch beyond its value: length
(5), attributes (1), timestamp delta (10), offset delta (5), null key (1), value length (5),
header count (1)."""


def _bulk_reservation(count: int, value_bytes: int, largest: int, batch_size: int) -> int:
    """An upper bound of the buffer memory ``count`` keyless records of ``value_bytes`` in
    all take once batched: the records, plus a header for every batch they might open
    (each full one holds more than ``batch_size`` less one record). The excess is given
    back as soon as they are queued."""
    records = value_bytes + count * _MAX_BULK_RECORD_OVERHEAD
    room = batch_size - HEADER_SIZE - _MAX_BULK_RECORD_OVERHEAD - largest
    batches = count if room <= 0 else min(count, records // room + 2)
    return records + batches * HEADER_SIZE


def _too_large(size: int, max_request_size: int) -> RecordTooLargeError:
    return RecordTooLargeError(
        f"a record of {size} bytes (as a batch of one) is larger than "
        f"max_request_size ({max_request_size})"
    )


def _check_partition(topic: str, partition: int | None, num_partitions: int) -> None:
    if partition is not None and not 0 <= partition < num_partitions:
        raise ClientError(
            f"partition {partition} out of range: topic '{topic}' has {num_partitions} "
            f"partition(s), 0 to {num_partitions - 1}"
        )


def _check_bytes(what: str, data: Any) -> None:
    if data is not None and not isinstance(data, bytes):
        raise TypeError(f"{what} must be bytes or None, got {type(data).__name__}")
