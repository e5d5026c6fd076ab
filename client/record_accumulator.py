"""Batching, the producer's accumulator (aiokafka's and Kafka's ``RecordAccumulator``): records
collect into one open :class:`ProducerBatch` per partition, up to ``batch_size`` bytes or
``linger_ms`` of waiting, until the sender drains them; with ``compression.type`` a batch is
compressed once, when it is sealed for its first drain (:meth:`RecordAccumulator.seal`).
:func:`record_size` is the exact arithmetic behind ``batch_size`` (uncompressed bytes);
:class:`BufferPool` is ``buffer_memory``, the bound that makes ``send`` block while too many
bytes wait for acknowledgement.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable, Collection, Sequence

from client.future_record_metadata import FutureRecordMetadata, ProduceRequestResult
from client.metadata import ClientError
from client.producer_config import RecordRange
from proto.records.builder import RecordsBuilder, encode_record_tail
from proto.records.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, Record
from proto.topic_partition import TopicPartition

__all__ = ["BufferPool", "ProducerBatch", "RecordAccumulator", "record_size"]


# -- records and batches -----------------------------------------------------------------------


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
    """The records of one partition that travel together, encoded as they are appended
    (:class:`RecordsBuilder`), and who waits for them: one :class:`ProduceRequestResult`
    for the records given to ``send`` (each with a handle that reads it), a future per run
    of records given to ``send_many``."""

    __slots__ = (
        "attempts",
        "base_sequence",
        "builder",
        "closed",
        "created",
        "deadline",
        "done",
        "drain_order",
        "last_error",
        "maybe_written",
        "metadata_wait",
        "payload",
        "producer_epoch",
        "producer_id",
        "range_futures",
        "reserved",
        "result",
        "retry_at",
        "tp",
    )

    def __init__(
        self, tp: TopicPartition, created: float, deadline: float, compression: int = 0
    ) -> None:
        self.tp = tp
        self.builder = RecordsBuilder(compression)
        """Its records; with a codec (``compression``), compressed when sealed."""
        self.result = ProduceRequestResult(tp.topic, tp.partition, asyncio.get_running_loop())
        """The outcome the handles of the records given to ``send`` read theirs from."""
        self.range_futures: list[tuple[int, int, int, asyncio.Future[RecordRange]]] = []
        """(first offset delta, count, timestamp, future) of each run of ``send_many``."""
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
        self.drain_order = -1
        """The partition's count of batches drained before this one's first drain: the
        order of its sequence numbers (which wrap), kept by retries."""
        self.attempts = 0
        self.retry_at = 0.0
        """Loop time before which a retry must not be sent (retry_backoff_ms)."""
        self.last_error: Exception | None = None
        self.maybe_written = False
        """An attempt ended without an answer that says the leader did not append it (no
        answer in time, a lost stream, NOT_LEADER_OR_FOLLOWER or REQUEST_TIMED_OUT, which a
        leader also gives for a write it holds but cannot acknowledge): the broker may hold
        it, so it is never sent again under another producer id or epoch, where the broker
        could not recognise it as a retry and would store it twice."""
        self.metadata_wait = 0
        """The metadata refresh (:attr:`ProducerMetadata.refreshes_done` numbering) a retry
        waits for: the last error said the leader it was sent to is stale or unreachable,
        and the same metadata would send it there again."""
        self.done: asyncio.Future[None] = self.result.future
        """Settled (with None) when every record has its outcome (flush and close wait
        for it)."""

    def __repr__(self) -> str:
        return (
            f"ProducerBatch({self.tp}, records={self.record_count}, size={self.size}, "
            f"sequence={self.base_sequence}, attempts={self.attempts})"
        )

    @property
    def size(self) -> int:
        """Encoded size of the batch so far, uncompressed (what ``batch_size`` bounds)."""
        return self.builder.size

    def seal(self) -> int:
        """Compress the records now if the batch has a codec (once; no record may be
        appended after); the size its payload will have (:meth:`RecordsBuilder.seal`)."""
        return self.builder.seal()

    @property
    def record_count(self) -> int:
        return self.builder.count

    def try_append(self, record: Record, batch_size: int) -> FutureRecordMetadata | None:
        """Add ``record`` if it fits (the first record always does); None if it does not."""
        tail = encode_record_tail(record.key, record.value, record.headers)
        return self.try_append_tail(record.timestamp, tail, batch_size)

    def try_append_tail(
        self, timestamp: int, tail: bytes, batch_size: int
    ) -> FutureRecordMetadata | None:
        """:meth:`try_append` of a record encoded by :func:`encode_record_tail`."""
        builder = self.builder
        delta = builder.count
        if not builder.append_tail(timestamp, tail, batch_size):
            return None
        return FutureRecordMetadata(self.result, delta, timestamp)

    def append_values(
        self, values: Sequence[bytes | None], start: int, timestamp: int, batch_size: int
    ) -> tuple[int, asyncio.Future[RecordRange] | None]:
        """Add keyless records ``values[start:]`` while they fit (at least one if the batch
        is empty): the index of the first value left out, and the future of those added
        (None: none fitted)."""
        first = self.builder.count
        end = self.builder.append_values(values, start, timestamp, batch_size)
        if end == start:
            return start, None
        future: asyncio.Future[RecordRange] = asyncio.get_running_loop().create_future()
        self.range_futures.append((first, end - start, timestamp, future))
        return end, future

    def encode(
        self, producer_id: int, producer_epoch: int, base_sequence: int, flags: int = 0
    ) -> bytes:
        """The batch's bytes under this producer id and sequence (its payload from now on),
        with attribute ``flags`` (transactional); a compressed batch is sealed first if it
        was not, and a second call only re-encodes the header."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.payload = self.builder.build(producer_id, producer_epoch, base_sequence, flags=flags)
        return self.payload

    def complete(self, base_offset: int, log_append_time_ms: int = -1) -> None:
        """Every record acknowledged, the first at ``base_offset`` (-1: unknown)."""
        topic, partition = self.tp
        known = base_offset >= 0
        append_time = log_append_time_ms >= 0
        for first, count, timestamp, range_future in self.range_futures:
            if not range_future.done():
                range_future.set_result(
                    RecordRange(
                        topic,
                        partition,
                        base_offset + first if known else -1,
                        count,
                        log_append_time_ms if append_time else timestamp,
                    )
                )
        self.result.complete(base_offset, log_append_time_ms)

    def fail(self, error: Exception) -> None:
        """Every record failed with ``error`` (the sender logs it, at DEBUG)."""
        if self.result.done():
            return
        for _, _, _, range_future in self.range_futures:
            if not range_future.done():
                range_future.set_exception(error)
        self.result.fail(error)


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
        on_batch_closed: Callable[[TopicPartition, int, int], None] | None = None,
        compression: int = 0,
    ) -> None:
        self.batch_size = batch_size
        self.compression = compression
        """The codec id of every new batch (``compression.type``; 0: none)."""
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
    ) -> FutureRecordMetadata | None:
        """Add ``record`` to the open batch of ``tp`` or to a new one; the batch holds
        ``reserved`` more bytes of buffer memory until it is done.

        With ``abort_on_new_batch`` (a keyless record on the sticky partition), a record
        that does not fit the open batch closes it and returns None instead: closing told
        the partitioner to move on, so the caller asks it again (KIP-480).
        """
        tail = encode_record_tail(record.key, record.value, record.headers)
        return self.append_tail(
            tp,
            record.timestamp,
            tail,
            now,
            reserved=reserved,
            abort_on_new_batch=abort_on_new_batch,
        )

    def append_tail(
        self,
        tp: TopicPartition,
        timestamp: int,
        tail: bytes,
        now: float | None = None,
        *,
        reserved: int = 0,
        abort_on_new_batch: bool = False,
    ) -> FutureRecordMetadata | None:
        """:meth:`append` of a record already encoded by :func:`encode_record_tail` (the
        producer's ``send``); ``now`` (None: the loop's time) is only needed to open a
        new batch."""
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
        elif queue:
            last = queue[-1]
            if not last.closed:
                # try_append_tail, inlined: this is the per-record path of every send.
                builder = last.builder
                delta = builder.count
                if builder.append_tail(timestamp, tail, self.batch_size):
                    last.reserved += reserved
                    if builder.size >= self.batch_size:
                        self._close(last)
                    return FutureRecordMetadata(last.result, delta, timestamp)
                self._close(last)
                if abort_on_new_batch:
                    return None
        if now is None:
            now = asyncio.get_running_loop().time()
        batch = ProducerBatch(tp, now, now + self.delivery_timeout_s, self.compression)
        future = batch.try_append_tail(timestamp, tail, self.batch_size)
        assert future is not None, "an empty batch takes any record"
        batch.reserved += reserved
        queue.append(batch)
        self.incomplete.add(batch)
        if batch.size >= self.batch_size:
            self._close(batch)
        self.wakeup.set()
        return future

    def append_values(
        self,
        tp: TopicPartition,
        values: Sequence[bytes | None],
        start: int,
        timestamp: int,
        now: float,
        *,
        abort_on_new_batch: bool = False,
    ) -> tuple[int, asyncio.Future[RecordRange] | None, int]:
        """The bulk :meth:`append`: keyless records ``values[start:]`` into the open batch
        of ``tp``, then, if some are left, a new one, until one batch is full. Returns the
        index of the first value not taken, the future of those taken (None: none), and
        the bytes they added (the caller's buffer-memory share of them; the batches hold
        it as ``reserved``).

        A full batch is closed, so the sticky partitioner moves on and the caller asks it
        again for the rest. With ``abort_on_new_batch``, nothing goes into a new batch:
        the caller asks the partitioner first (KIP-480), as :meth:`append` does.
        """
        batch_size = self.batch_size
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
        elif queue and not queue[-1].closed:
            last = queue[-1]
            before = last.size
            end, future = last.append_values(values, start, timestamp, batch_size)
            added = last.size - before
            last.reserved += added
            if end < len(values) or last.size >= batch_size:
                self._close(last)
            if future is not None or abort_on_new_batch:
                return end, future, added
        batch = ProducerBatch(tp, now, now + self.delivery_timeout_s, self.compression)
        end, future = batch.append_values(values, start, timestamp, batch_size)
        assert future is not None, "an empty batch takes a record"
        batch.reserved += batch.size
        queue.append(batch)
        self.incomplete.add(batch)
        if end < len(values) or batch.size >= batch_size:
            self._close(batch)
        self.wakeup.set()
        return end, future, batch.size

    def seal(self, batch: ProducerBatch) -> int:
        """Close ``batch`` (a head returned by :meth:`ready`) and compress its records, so
        that the sender can count its compressed size against ``max_request_size`` before
        it drains it; returns that size. Once per batch: a retry's seal returns the size
        at once. Only for a compressing accumulator: an uncompressed batch's ``size`` is
        already exact."""
        self._close(batch)
        return batch.seal()

    def _close(self, batch: ProducerBatch) -> None:
        if not batch.closed:
            batch.closed = True
            self.wakeup.set()
            if self._on_batch_closed is not None:
                self._on_batch_closed(batch.tp, batch.size, self.batch_size)

    def ready(
        self,
        now: float,
        muted: Collection[TopicPartition] = (),
        busy: Collection[TopicPartition] = (),
    ) -> tuple[list[ProducerBatch], float]:
        """The head batches that may be sent now, and the loop time when the next one
        becomes ready or expires (inf: nothing).

        A ``muted`` partition has no room for another batch in flight. A head is ready when
        it is full (or back for a retry, or a flush or close wants everything), or has
        waited ``linger_ms``; with ``linger_ms`` 0, a partial head waits while its partition
        is ``busy`` (has a batch in flight): Nagle's rule, so that at low rates each record
        leaves at once and under load the records that arrive during a round trip share
        the next request (a request costs the brokers far more than Kafka's do)."""
        ready = []
        next_time = math.inf
        exhausted = self.flushing > 0 or self.closing
        nagle = self.linger_s == 0
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
                or (not nagle and head.created + self.linger_s <= now)
                or (nagle and tp not in busy)
            ):
                ready.append(head)
            elif not nagle:
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
        """Put a batch that failed retriably back in its queue: before every batch drained
        after it or never drained (Kafka's ``insertInSequenceOrder``), so that batches back
        from several requests in flight are sent again in their first order."""
        batch.retry_at = retry_at
        batch.closed = True
        queue = self._queues.get(batch.tp)
        if queue is None:
            queue = self._queues[batch.tp] = deque()
        at = 0
        while at < len(queue) and 0 <= queue[at].drain_order < batch.drain_order:
            at += 1
        queue.insert(at, batch)
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

    def remove_in_doubt(self, producer_id: int) -> list[ProducerBatch]:
        """Take out of their queues the batches sent under ``producer_id`` that may have
        been written (:attr:`ProducerBatch.maybe_written`); returns them."""
        removed = []
        for tp in list(self._queues):
            queue = self._queues[tp]
            keep: deque[ProducerBatch] = deque()
            for batch in queue:
                if batch.maybe_written and batch.producer_id == producer_id:
                    removed.append(batch)
                else:
                    keep.append(batch)
            if keep:
                self._queues[tp] = keep
            else:
                del self._queues[tp]
        return removed

    def done(self, batch: ProducerBatch) -> None:
        self.incomplete.discard(batch)

    def queued(self, tp: TopicPartition) -> list[ProducerBatch]:
        """The batches of ``tp`` waiting to be sent, oldest first."""
        return list(self._queues.get(tp, ()))

    def has_queued_for(self, tp: TopicPartition) -> bool:
        return bool(self._queues.get(tp))


# -- buffer memory -----------------------------------------------------------------------------


class BufferPool:
    """``buffer_memory``: how many bytes of records may wait for acknowledgement."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._freed = asyncio.Event()

    def try_reserve(self, size: int) -> bool:
        """Take ``size`` bytes if they fit now, without waiting (the common case, kept
        free of a coroutine per record); False if :meth:`reserve` must wait."""
        if self.used and self.used + size > self.limit:
            return False
        self.used += size
        return True

    async def reserve(self, size: int, timeout_s: float) -> None:
        """Wait until ``size`` more bytes fit (or nothing is used: a huge record still
        goes, alone). Raises ClientError after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.used and self.used + size > self.limit:
            self._freed.clear()
            remaining = deadline - loop.time()
            try:
                async with asyncio.timeout(max(0.0, remaining)):
                    await self._freed.wait()
            except TimeoutError:
                raise ClientError(
                    f"producer buffer full: {self.used} bytes waiting for acknowledgement "
                    f"(buffer_memory={self.limit}) for {timeout_s * 1000:.0f} ms (max_block_ms)"
                ) from None
        self.used += size

    def release(self, size: int) -> None:
        self.used -= size
        self._freed.set()
