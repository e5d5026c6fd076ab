"""Transactional ids' state in ``__transaction_state`` (Kafka's ``TransactionStateManager``):
docs/transactions.md.

A transactional id lives in partition ``abs(hash(id)) % transaction.state.log.num.partitions``
of the internal topic (:func:`proto.coordinator.placement.partition_for`), and the leader of
that partition is its transaction coordinator. Each change of an id's state machine
(:mod:`broker.coordinator.transaction_metadata`) is a record keyed by the id; an expired id
gets a tombstone. The coordinator applies a change only once every in-sync replica has its
record (:meth:`TransactionStateManager.append`), so a coordinator that takes over finds
exactly the states that were acknowledged.

A load (:mod:`broker.coordinator.internal_topic`) restores the last state of every id in a
partition. Ids found in PrepareCommit or PrepareAbort had their markers in flight when the
previous coordinator stopped: they are handed to ``on_partition_loaded``, and the
coordinator writes their markers again and completes them, as Kafka's does.

The coordinator epoch, which markers carry so that partition leaders refuse a deposed
coordinator's, is this broker's leader epoch of the id's partition.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor

from broker.coordinator.internal_topic import (
    COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR,
    InternalTopicPartitions,
)
from broker.coordinator.transaction_metadata import TransactionMetadata, TxnTransit
from broker.metadata_cache import MetadataCache
from broker.replication.replica_manager import ReplicaManager
from proto.config.broker_config import BrokerConfig
from proto.coordinator.transaction_records import (
    TransactionRecordError,
    TransactionState,
    decode_transaction_key,
    decode_transaction_value,
    encode_transaction_key,
    encode_transaction_value,
)
from proto.records.record_batch import Record
from proto.topic_partition import TRANSACTION_STATE_TOPIC
from proto.wire import minibroker_pb2 as pb

logger = logging.getLogger(__name__)

__all__ = ["TransactionStateManager", "transaction_append_error"]

UNKNOWN_SERVER_ERROR = -1

TopicCreator = Callable[[], Awaitable[int]]
"""Makes ``__transaction_state`` with its settings if it does not exist: the CreateTopics
error code (NONE or TOPIC_ALREADY_EXISTS when it is there)."""

InFlight = Callable[[int, list[TransactionMetadata]], None]
"""Called when a partition is loaded with the ids whose markers were in flight."""


def transaction_append_error(code: int) -> int:
    """What a client is told when appending its transactional id's state failed with
    ``code`` (Kafka's ``appendTransactionToLog``: a timed-out append is
    COORDINATOR_NOT_AVAILABLE, so that the client retries)."""
    if code in (
        pb.UNKNOWN_TOPIC_OR_PARTITION,
        pb.NOT_ENOUGH_REPLICAS,
        pb.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        pb.REQUEST_TIMED_OUT,
    ):
        return COORDINATOR_NOT_AVAILABLE
    if code in (pb.NOT_LEADER_OR_FOLLOWER, pb.KAFKA_STORAGE_ERROR, pb.FENCED_LEADER_EPOCH):
        return NOT_COORDINATOR
    if code in (pb.MESSAGE_TOO_LARGE, 18):  # RECORD_LIST_TOO_LARGE
        return UNKNOWN_SERVER_ERROR
    return code


class TransactionStateManager:
    """The ``__transaction_state`` partitions this broker leads and the ids in them."""

    def __init__(
        self,
        config: BrokerConfig,
        replica_manager: ReplicaManager,
        metadata_cache: MetadataCache,
        executor: Executor | None,
        create_topic: TopicCreator,
        *,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.metadata_cache = metadata_cache
        self.clock_ms = clock_ms
        self.ids: dict[str, TransactionMetadata] = {}
        """The transactional ids of the loaded partitions."""
        self._loading: dict[int, dict[str, TransactionMetadata]] = {}
        self.on_partition_loaded: InFlight = lambda partition, in_flight: None
        """Set by the coordinator: it completes the transactions whose markers were in
        flight."""
        self.partitions = InternalTopicPartitions(
            TRANSACTION_STATE_TOPIC,
            self.broker_id,
            replica_manager,
            metadata_cache,
            executor,
            partitions=config.transaction_state_log_num_partitions,
            create_topic=create_topic,
            apply=self._apply_record,
            unload=self._unload_ids,
            loaded=self._install_loaded,
            append_timeout_ms=lambda: config.request_timeout_ms,
        )

    # -- placement -----------------------------------------------------------------------------

    @property
    def partition_count(self) -> int:
        return self.partitions.partition_count

    def partition_of(self, key: str) -> int:
        return self.partitions.partition_of(key)

    def topic_exists(self) -> bool:
        return self.partitions.topic_exists()

    async def ensure_topic(self) -> int:
        return await self.partitions.ensure_topic()

    def refusal(self, transactional_id: str) -> int | None:
        """NOT_COORDINATOR unless this broker leads the id's partition,
        COORDINATOR_LOAD_IN_PROGRESS while it loads it, else None."""
        return self.partitions.refusal(self.partition_of(transactional_id))

    def coordinator_epoch(self, transactional_id: str) -> int | None:
        """The epoch this broker coordinates the id at (None: it does not)."""
        return self.partitions.leader_epoch(self.partition_of(transactional_id))

    # -- the cache -----------------------------------------------------------------------------

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        return self.ids.get(transactional_id)

    def put_if_absent(self, metadata: TransactionMetadata) -> TransactionMetadata:
        """The id's metadata: ``metadata`` unless the id has some already (Kafka's
        ``putTransactionStateIfNotExists``)."""
        return self.ids.setdefault(metadata.transactional_id, metadata)

    def timed_out(self, now_ms: int) -> list[TransactionMetadata]:
        """Ongoing transactions open past their timeout, with no change pending: the
        coordinator aborts them (Kafka's ``timedOutTransactions``)."""
        return [
            meta
            for meta in self.ids.values()
            if meta.state == TransactionState.ONGOING
            and meta.pending is None
            and meta.start_timestamp_ms + meta.timeout_ms < now_ms
        ]

    def expired(self, now_ms: int) -> list[TransactionMetadata]:
        """Idle ids whose last change is older than ``transactional.id.expiration.ms``."""
        limit = self.config.transactional_id_expiration_ms
        return [
            meta
            for meta in self.ids.values()
            if meta.expiration_allowed
            and meta.pending is None
            and meta.update_timestamp_ms + limit <= now_ms
        ]

    # -- loading -------------------------------------------------------------------------------

    def _apply_record(self, partition: int, record: Record, producer_id: int) -> None:
        found = self._loading.setdefault(partition, {})
        if record.key is None:
            logger.warning(
                "event=transaction_record_without_key broker=%d tp=%s-%d offset=%d",
                self.broker_id,
                TRANSACTION_STATE_TOPIC,
                partition,
                record.offset,
            )
            return
        try:
            transactional_id = decode_transaction_key(record.key)
            if record.value is None:
                found.pop(transactional_id, None)
                return
            value = decode_transaction_value(record.value)
        except TransactionRecordError as err:
            logger.error(
                "event=transaction_record_unreadable broker=%d tp=%s-%d offset=%d error=%r",
                self.broker_id,
                TRANSACTION_STATE_TOPIC,
                partition,
                record.offset,
                str(err),
            )
            return
        found[transactional_id] = TransactionMetadata.from_log(transactional_id, value)

    def _install_loaded(self, partition: int) -> int:
        found = self._loading.pop(partition, {})
        self.ids.update(found)
        in_flight = [
            meta
            for meta in found.values()
            if meta.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)
        ]
        self.on_partition_loaded(partition, in_flight)
        return len(found)

    def _unload_ids(self, partition: int) -> int:
        self._loading.pop(partition, None)
        gone = [t for t in self.ids if self.partition_of(t) == partition]
        for transactional_id in gone:
            del self.ids[transactional_id]
        return len(gone)

    # -- writes --------------------------------------------------------------------------------

    async def append(self, metadata: TransactionMetadata, transit: TxnTransit) -> int:
        """Write a prepared change and, once the ISR has it, apply it (Kafka's
        ``appendTransactionToLog``). The error code for the client: the change is
        abandoned if it was not written, and left unapplied (NOT_COORDINATOR) if this
        broker stopped coordinating the id meanwhile: the new coordinator's load decides."""
        transactional_id = metadata.transactional_id
        epoch = self.coordinator_epoch(transactional_id)
        value = (
            None
            if transit.state == TransactionState.DEAD
            else encode_transaction_value(transit.log_value())
        )
        record = Record(encode_transaction_key(transactional_id), value, self.clock_ms())
        appended = await self.partitions.append(self.partition_of(transactional_id), [record])
        if appended.error_code != pb.NONE:
            metadata.abandon()
            return transaction_append_error(appended.error_code)
        if not appended.still_owned or self.coordinator_epoch(transactional_id) != epoch:
            return NOT_COORDINATOR
        if transit.state == TransactionState.DEAD:
            metadata.pending = None
            self.ids.pop(transactional_id, None)
        else:
            metadata.complete(transit)
        logger.info(
            "event=transaction_state_written broker=%d transactional_id=%s producer_id=%d "
            "producer_epoch=%d state=%s coordinator_epoch=%s",
            self.broker_id,
            transactional_id,
            transit.producer_id,
            transit.producer_epoch,
            transit.state.kafka_name,
            epoch,
        )
        return pb.NONE

    async def stop(self) -> None:
        await self.partitions.stop()
