"""The partitions of a coordinator's internal topic that this broker leads:
``__consumer_offsets`` for the group coordinator, ``__transaction_state`` for the
transaction coordinator (Kafka's ``GroupMetadataManager`` and ``TransactionStateManager``
share this part): docs/consumer-groups.md, docs/transactions.md.

A coordinator's state lives in the log of the internal topic's partitions, and the leader
of a partition coordinates the keys placed on it. When this broker becomes leader of a
partition it reads the partition from its log start to its end, off the event loop, in
reads of ``LOAD_BUFFER_BYTES`` (Kafka's ``offsets.load.buffer.size``), and hands every
record to the coordinator's ``apply``; until that is done the partition's keys are
answered COORDINATOR_LOAD_IN_PROGRESS, which Kafka's clients retry. When it stops leading
the partition, the coordinator is told to drop the partition's keys. Appends wait for
every in-sync replica (acks=all): a coordinator believes only what the replicated log
holds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass

from broker.log.producer_state import AppendOrigin
from broker.metadata_cache import MetadataCache
from broker.replication.partition import ACKS_ALL
from broker.replication.replica_manager import ReplicaManager
from proto.coordinator.placement import partition_for
from proto.records.control_records import ControlRecordError, ControlType, decode_end_txn_marker
from proto.records.record_batch import (
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    CorruptRecordError,
    Record,
    decode_batch,
    encode_batch,
    parse_header,
)
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb

logger = logging.getLogger(__name__)

__all__ = [
    "COORDINATOR_LOAD_IN_PROGRESS",
    "COORDINATOR_NOT_AVAILABLE",
    "LOAD_BUFFER_BYTES",
    "NOT_COORDINATOR",
    "InternalTopicPartitions",
    "coordinator_error",
]

COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
LOAD_BUFFER_BYTES = 5 * 1024 * 1024
"""Kafka's ``offsets.load.buffer.size``: how much of the log one read of a load takes."""


def coordinator_error(code: int) -> int:
    """What a client is told when appending to the internal topic failed with ``code``
    (Kafka's mapping in ``GroupMetadataManager.storeOffsets`` and
    ``TransactionStateManager.appendTransactionToLog``): the partition's troubles become
    coordinator errors, on which Kafka's clients look the coordinator up again or retry."""
    if code in (pb.UNKNOWN_TOPIC_OR_PARTITION, pb.NOT_ENOUGH_REPLICAS, 20):
        return COORDINATOR_NOT_AVAILABLE  # 20: NOT_ENOUGH_REPLICAS_AFTER_APPEND
    if code in (pb.NOT_LEADER_OR_FOLLOWER, pb.KAFKA_STORAGE_ERROR, pb.FENCED_LEADER_EPOCH):
        return NOT_COORDINATOR
    return code


RecordApplier = Callable[[int, Record, int], None]
"""``apply(partition, record, producer_id)``: a record a load read, with the producer id
of its batch if the batch is transactional (-1 if not)."""
MarkerApplier = Callable[[int, int, bool, int], None]
"""``apply_marker(partition, producer_id, committed, offset)``: a transaction marker a
load read."""


@dataclass
class _OwnedPartition:
    leader_epoch: int
    loaded: bool = False
    task: asyncio.Task[None] | None = None


@dataclass(frozen=True)
class Appended:
    """An append's outcome: the broker's error code (as the replica manager answered it),
    the base offset, and whether this broker still leads the partition at that epoch."""

    error_code: int
    error_message: str
    base_offset: int
    still_owned: bool


class InternalTopicPartitions:
    """Which partitions of ``topic`` this broker leads, their loading, and appends."""

    def __init__(
        self,
        topic: str,
        broker_id: int,
        replica_manager: ReplicaManager,
        metadata_cache: MetadataCache,
        executor: Executor | None,
        *,
        partitions: int,
        create_topic: Callable[[], Awaitable[int]],
        apply: RecordApplier,
        unload: Callable[[int], int],
        loaded: Callable[[int], int],
        append_timeout_ms: Callable[[], int],
        apply_marker: MarkerApplier | None = None,
    ) -> None:
        """``apply`` takes each record a load reads, in offset order, and ``apply_marker``
        each transaction marker (None: markers are skipped); ``loaded(partition)`` is
        called once a load is done and ``unload(partition)`` when
        the partition is no longer led here; both answer how many keys they concern (for
        the log line). ``partitions`` is the count the topic is made with
        (``offsets.topic.num.partitions``, ...), and ``create_topic`` makes it."""
        self.topic = topic
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self.metadata_cache = metadata_cache
        self.executor = executor
        self._default_partitions = partitions
        self._create_topic = create_topic
        self._creating = False
        self._apply = apply
        self._apply_marker = apply_marker
        self._unload_keys = unload
        self._loaded = loaded
        self._append_timeout_ms = append_timeout_ms
        self._owned: dict[int, _OwnedPartition] = {}
        replica_manager.leadership_listeners.append(self.on_leadership_change)

    # -- placement -----------------------------------------------------------------------------

    @property
    def partition_count(self) -> int:
        """The partitions of the topic: as it exists, else as it would be made."""
        count = self.metadata_cache.partition_count(self.topic)
        return count if count else self._default_partitions

    def partition_of(self, key: str) -> int:
        """The partition of a group id or transactional id (Kafka's ``partitionFor``)."""
        return partition_for(key, self.partition_count)

    def topic_exists(self) -> bool:
        return bool(self.metadata_cache.partition_count(self.topic))

    async def ensure_topic(self) -> int:
        """Make the topic unless it exists (FindCoordinator's first step in Kafka). While
        one lookup is making it, the others do not try again: COORDINATOR_NOT_AVAILABLE."""
        if self.topic_exists():
            return pb.NONE
        if self._creating:
            return COORDINATOR_NOT_AVAILABLE
        self._creating = True
        try:
            return await self._create_topic()
        finally:
            self._creating = False

    # -- leadership state ----------------------------------------------------------------------

    def refusal(self, partition: int) -> int | None:
        """NOT_COORDINATOR unless this broker leads ``partition``, COORDINATOR_LOAD_IN_PROGRESS
        while it loads it, else None. A partition the metadata already names this broker
        the leader of, before its LeaderAndIsr is applied here, is loading too: a client
        sent here by another broker's FindCoordinator (whose UpdateMetadata came first)
        retries instead of looking the coordinator up again, which some (librdkafka's
        AlterConsumerGroupOffsets) do not do."""
        owned = self._owned.get(partition)
        if owned is None:
            info = self.metadata_cache.partition(TopicPartition(self.topic, partition))
            if info is not None and info.leader == self.broker_id:
                return COORDINATOR_LOAD_IN_PROGRESS
            return NOT_COORDINATOR
        if not owned.loaded:
            return COORDINATOR_LOAD_IN_PROGRESS
        return None

    def leader_epoch(self, partition: int) -> int | None:
        """The leader epoch at which this broker leads ``partition`` (None: it does not).
        The transaction coordinator writes it in its markers as the coordinator epoch."""
        owned = self._owned.get(partition)
        return None if owned is None else owned.leader_epoch

    def loaded_partitions(self) -> list[int]:
        return sorted(p for p, owned in self._owned.items() if owned.loaded)

    # -- leadership ----------------------------------------------------------------------------

    def on_leadership_change(
        self, led: Mapping[TopicPartition, int], resigned: Iterable[TopicPartition]
    ) -> None:
        """The replica manager's listener: load what is now led, drop what is not."""
        for tp in resigned:
            if tp.topic == self.topic:
                self._unload(tp.partition)
        for tp, epoch in led.items():
            if tp.topic != self.topic:
                continue
            owned = self._owned.get(tp.partition)
            if owned is not None and owned.leader_epoch == epoch:
                continue  # a repeated LeaderAndIsr
            self._unload(tp.partition)
            owned = self._owned[tp.partition] = _OwnedPartition(epoch)
            owned.task = asyncio.get_running_loop().create_task(
                self._load(tp.partition, owned), name=f"load-{tp}"
            )

    def _unload(self, partition: int) -> None:
        owned = self._owned.pop(partition, None)
        if owned is None:
            return
        if owned.task is not None:
            owned.task.cancel()
        keys = self._unload_keys(partition)
        logger.info(
            "event=coordinator_partition_unloaded broker=%d tp=%s-%d leader_epoch=%d keys=%d",
            self.broker_id,
            self.topic,
            partition,
            owned.leader_epoch,
            keys,
        )

    async def _load(self, partition: int, owned: _OwnedPartition) -> None:
        tp = TopicPartition(self.topic, partition)
        started = time.monotonic()
        try:
            records = await self._read_partition(tp, owned)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            logger.error(
                "event=coordinator_load_failed broker=%d tp=%s leader_epoch=%d error=%r",
                self.broker_id,
                tp,
                owned.leader_epoch,
                str(err),
            )
            return
        if self._owned.get(partition) is not owned:
            return
        owned.loaded = True
        keys = self._loaded(partition)
        logger.info(
            "event=coordinator_partition_loaded broker=%d tp=%s leader_epoch=%d keys=%d "
            "records=%d ms=%d",
            self.broker_id,
            tp,
            owned.leader_epoch,
            keys,
            records,
            round((time.monotonic() - started) * 1000),
        )

    async def _read_partition(self, tp: TopicPartition, owned: _OwnedPartition) -> int:
        partition = self.replica_manager.partitions.get(tp)
        if partition is None:
            raise LookupError(f"broker {self.broker_id} does not host {tp}")
        log = partition.log
        offset, end = log.log_start_offset, log.log_end_offset
        records = 0
        loop = asyncio.get_running_loop()
        while offset < end:
            data = await loop.run_in_executor(self.executor, log.read, offset, LOAD_BUFFER_BYTES)
            if not data.records or self._owned.get(tp.partition) is not owned:
                break
            records += self._apply_batches(tp, data.records, offset)
            offset = data.next_offset
        return records

    def _apply_batches(self, tp: TopicPartition, buf: bytes, start: int) -> int:
        applied = 0
        pos = 0
        while pos < len(buf):
            header = parse_header(buf, pos)
            try:
                batch = decode_batch(buf, pos)
            except CorruptRecordError as err:
                logger.error(
                    "event=coordinator_batch_unreadable broker=%d tp=%s base_offset=%d error=%r",
                    self.broker_id,
                    tp,
                    header.base_offset,
                    str(err),
                )
                pos += header.size
                continue
            pos += header.size
            if header.is_control:
                if header.base_offset >= start:
                    self._apply_control(tp, header, batch.records)
                continue
            producer_id = header.producer_id if header.is_transactional else -1
            for record in batch.records:
                if record.offset < start:
                    continue
                applied += 1
                self._apply(tp.partition, record, producer_id)
        return applied

    def _apply_control(
        self, tp: TopicPartition, header: BatchHeader, records: list[Record]
    ) -> None:
        if self._apply_marker is None or not records:
            return
        try:
            marker = decode_end_txn_marker(records[0])
        except ControlRecordError as err:
            logger.error(
                "event=coordinator_marker_unreadable broker=%d tp=%s offset=%d error=%r",
                self.broker_id,
                tp,
                header.base_offset,
                str(err),
            )
            return
        committed = marker.control_type is ControlType.COMMIT
        self._apply_marker(tp.partition, header.producer_id, committed, header.base_offset)

    # -- appends -------------------------------------------------------------------------------

    async def append(
        self, partition: int, records: list[Record], producer: tuple[int, int] | None = None
    ) -> Appended:
        """Append ``records`` as one batch to ``partition`` and wait for the ISR. A
        partition this broker does not lead, or has not loaded, is answered with the
        coordinator error, without writing. With ``producer`` (id, epoch) the batch is
        that producer's transactional batch (a transaction's offset commits), refused
        INVALID_PRODUCER_EPOCH if the partition has seen a newer epoch; its sequence is 0,
        as Kafka's coordinator writes it."""
        owned = self._owned.get(partition)
        refusal = self.refusal(partition)
        if owned is None or refusal is not None:
            return Appended(refusal or NOT_COORDINATOR, "", -1, False)
        tp = TopicPartition(self.topic, partition)
        batch = (
            encode_batch(records)
            if producer is None
            else encode_batch(
                records,
                producer_id=producer[0],
                producer_epoch=producer[1],
                base_sequence=0,
                flags=TRANSACTIONAL_FLAG_MASK,
            )
        )
        results = await self.replica_manager.append_records(
            ACKS_ALL,
            self._append_timeout_ms(),
            {tp: batch},
            origin=AppendOrigin.COORDINATOR,
        )
        result = results[tp]
        if result.error_code != pb.NONE:
            logger.warning(
                "event=coordinator_append_failed broker=%d tp=%s leader_epoch=%d "
                "error_code=%d message=%r",
                self.broker_id,
                tp,
                owned.leader_epoch,
                result.error_code,
                result.error_message,
            )
        return Appended(
            result.error_code,
            result.error_message,
            result.base_offset,
            self._owned.get(partition) is owned,
        )

    async def stop(self) -> None:
        tasks = [o.task for o in self._owned.values() if o.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
