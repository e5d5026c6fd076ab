"""The transaction coordinator's requests (Kafka's ``TransactionCoordinator``):
InitProducerId with a transactional id, AddPartitionsToTxn (and AddOffsetsToTxn's offsets
partition), EndTxn, and the abort of transactions open past their timeout:
docs/transactions.md.

Each request checks the id's state (:mod:`broker.coordinator.transaction_metadata`),
prepares a change, and has it written to ``__transaction_state`` before it is answered
(:class:`broker.coordinator.transaction_state_manager.TransactionStateManager`). An EndTxn
is answered once PrepareCommit or PrepareAbort is written: from then on the transaction's
outcome is decided, and the coordinator's markers (:class:`MarkerWriter`) write it to
every partition of the transaction, after which CompleteCommit or CompleteAbort is
written. Until then the id is answered CONCURRENT_TRANSACTIONS, which clients retry.

A second instance of a transactional id fences the first: InitProducerId bumps the epoch,
and if a transaction is open it is first aborted under a bumped epoch that no client ever
holds (the new instance is told CONCURRENT_TRANSACTIONS and retries).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import NamedTuple, Protocol

from broker.coordinator.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    PRODUCER_FENCED,
    TransactionMetadata,
    TxnTransit,
    is_epoch_exhausted,
)
from broker.coordinator.transaction_state_manager import TransactionStateManager
from proto.coordinator.transaction_records import TransactionState
from proto.records.control_records import ControlType
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb

logger = logging.getLogger(__name__)

__all__ = ["InitProducerIdResult", "MarkerWriter", "TransactionCoordinator"]

S = TransactionState
INVALID_REQUEST = 42
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51


class InitProducerIdResult(NamedTuple):
    error_code: int
    producer_id: int = -1
    producer_epoch: int = -1


class MarkerWriter(Protocol):
    """Writes a decided transaction's markers to its partitions' leaders, then has the
    completion written (Kafka's ``TransactionMarkerChannelManager``)."""

    def add_markers(
        self,
        coordinator_epoch: int,
        result: ControlType,
        metadata: TransactionMetadata,
        completion: TxnTransit,
    ) -> None: ...


ProducerIds = Callable[[], Awaitable[tuple[int, int]]]
"""(error code, a new producer id): the broker's producer id manager."""


class TransactionCoordinator:
    """The requests of the transactional ids this broker coordinates."""

    def __init__(
        self,
        state: TransactionStateManager,
        new_producer_id: ProducerIds,
        markers: MarkerWriter,
        *,
        max_timeout_ms: int,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.state = state
        self._new_producer_id = new_producer_id
        self.markers = markers
        self.max_timeout_ms = max_timeout_ms
        self.clock_ms = clock_ms
        state.on_partition_loaded = self._complete_in_flight

    # -- InitProducerId ------------------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None = None
    ) -> InitProducerIdResult:
        """A producer id and epoch for ``transactional_id`` (``expected``: the producer id and
        epoch a retrying producer holds, KIP-360)."""
        if not transactional_id:
            return InitProducerIdResult(INVALID_REQUEST)
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return InitProducerIdResult(INVALID_TRANSACTION_TIMEOUT)
        refusal = self.state.refusal(transactional_id)
        if refusal is not None:
            return InitProducerIdResult(refusal)
        metadata = self.state.get(transactional_id)
        if metadata is None:
            code, producer_id = await self._new_producer_id()
            if code != pb.NONE:
                return InitProducerIdResult(code)
            refusal = self.state.refusal(transactional_id)
            if refusal is not None:  # the partition moved while the id was reserved
                return InitProducerIdResult(refusal)
            metadata = self.state.put_if_absent(
                TransactionMetadata(
                    transactional_id,
                    producer_id,
                    NO_PRODUCER_EPOCH,
                    timeout_ms,
                    update_timestamp_ms=self.clock_ms(),
                )
            )
        prepared = await self._prepare_init(metadata, timeout_ms, expected)
        if isinstance(prepared, int):
            return InitProducerIdResult(prepared)
        if prepared.state == S.PREPARE_EPOCH_FENCE:
            # Abort the open transaction under the fenced epoch, then make the new instance
            # retry: its retry bumps the epoch once more (Kafka's handleInitProducerId).
            metadata.start_fenced_abort(prepared)
            code = await self._end(metadata, ControlType.ABORT, fence=True)
            return InitProducerIdResult(CONCURRENT_TRANSACTIONS if code == pb.NONE else code)
        code = await self.state.append(metadata, prepared)
        if code != pb.NONE:
            return InitProducerIdResult(code)
        logger.info(
            "event=transactional_id_initialised transactional_id=%s producer_id=%d "
            "producer_epoch=%d partition=%d",
            transactional_id,
            metadata.producer_id,
            metadata.producer_epoch,
            self.state.partition_of(transactional_id),
        )
        return InitProducerIdResult(pb.NONE, metadata.producer_id, metadata.producer_epoch)

    async def _prepare_init(
        self,
        metadata: TransactionMetadata,
        timeout_ms: int,
        expected: tuple[int, int] | None,
    ) -> TxnTransit | int:
        """Kafka's ``prepareInitProducerIdTransit``."""
        if metadata.pending is not None:
            return CONCURRENT_TRANSACTIONS
        if expected is not None and not (
            metadata.producer_epoch == NO_PRODUCER_EPOCH
            or expected[0] == metadata.producer_id
            or (expected[0] == metadata.last_producer_id and is_epoch_exhausted(expected[1]))
        ):
            return PRODUCER_FENCED
        state = metadata.state
        if state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            return CONCURRENT_TRANSACTIONS
        if state == S.ONGOING:
            return metadata.prepare_fence_producer_epoch()
        if state not in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT):
            return INVALID_TXN_STATE  # Dead or PrepareEpochFence are never current states
        expected_epoch = None if expected is None else expected[1]
        if metadata.epoch_exhausted and expected_epoch in (None, metadata.producer_epoch):
            code, producer_id = await self._new_producer_id()
            if code != pb.NONE:
                return code
            if _pending(metadata):  # another request went first while we waited
                return CONCURRENT_TRANSACTIONS
            return metadata.prepare_producer_id_rotation(
                producer_id, timeout_ms, self.clock_ms(), expected is not None
            )
        return metadata.prepare_increment_producer_epoch(
            timeout_ms, expected_epoch, self.clock_ms()
        )

    def _producer_of(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> TransactionMetadata | int:
        """The id's metadata if this broker coordinates it and the request's producer is
        its current one, else the error code (Kafka's checks of AddPartitionsToTxn and
        EndTxn)."""
        if not transactional_id:
            return INVALID_REQUEST
        refusal = self.state.refusal(transactional_id)
        if refusal is not None:
            return refusal
        metadata = self.state.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING
        if metadata.producer_epoch != producer_epoch:
            return PRODUCER_FENCED
        return metadata

    # -- AddPartitionsToTxn --------------------------------------------------------------------

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: frozenset[TopicPartition],
    ) -> int:
        """Add ``partitions`` to the id's transaction, starting one if none is open."""
        metadata = self._producer_of(transactional_id, producer_id, producer_epoch)
        if isinstance(metadata, int):
            return metadata
        if metadata.pending is not None or metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return CONCURRENT_TRANSACTIONS
        if metadata.state == S.ONGOING and partitions <= metadata.partitions:
            return pb.NONE
        return await self.state.append(
            metadata, metadata.prepare_add_partitions(partitions, self.clock_ms())
        )

    # -- EndTxn --------------------------------------------------------------------------------

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> int:
        """Commit or abort the id's open transaction (a client's EndTxn)."""
        metadata = self._producer_of(transactional_id, producer_id, producer_epoch)
        if isinstance(metadata, int):
            return metadata
        result = ControlType.COMMIT if commit else ControlType.ABORT
        return await self._end(metadata, result, fence=False)

    async def _end(self, metadata: TransactionMetadata, result: ControlType, *, fence: bool) -> int:
        """Kafka's ``endTransaction``: write PrepareCommit/PrepareAbort, then hand the
        markers over (a repeated EndTxn of a completed transaction is answered at once)."""
        if metadata.pending is not None:
            return CONCURRENT_TRANSACTIONS
        state, commit = metadata.state, result == ControlType.COMMIT
        if state == S.COMPLETE_COMMIT:
            return pb.NONE if commit else INVALID_TXN_STATE
        if state == S.COMPLETE_ABORT:
            return INVALID_TXN_STATE if commit else pb.NONE
        if state == S.PREPARE_COMMIT:
            return CONCURRENT_TRANSACTIONS if commit else INVALID_TXN_STATE
        if state == S.PREPARE_ABORT:
            return INVALID_TXN_STATE if commit else CONCURRENT_TRANSACTIONS
        if state != S.ONGOING:
            return INVALID_TXN_STATE
        epoch = self.state.coordinator_epoch(metadata.transactional_id)
        producer_epoch = metadata.producer_epoch
        prepared = metadata.prepare_abort_or_commit(
            S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, self.clock_ms()
        )
        code = await self.state.append(metadata, prepared)
        if code != pb.NONE:
            if fence:
                metadata.has_failed_epoch_fence = True
            return code
        if (
            epoch is None
            or self.state.coordinator_epoch(metadata.transactional_id) != epoch
            or metadata.producer_epoch != producer_epoch
            or _pending(metadata)
        ):
            return pb.NOT_COORDINATOR if epoch is None else CONCURRENT_TRANSACTIONS
        self.markers.add_markers(
            epoch, result, metadata, metadata.prepare_complete(self.clock_ms())
        )
        logger.info(
            "event=transaction_decided transactional_id=%s producer_id=%d producer_epoch=%d "
            "result=%s partitions=%d coordinator_epoch=%d",
            metadata.transactional_id,
            metadata.producer_id,
            metadata.producer_epoch,
            result.name,
            len(metadata.partitions),
            epoch,
        )
        return pb.NONE

    # -- timeouts and failover -----------------------------------------------------------------

    async def abort_timed_out_transactions(self) -> int:
        """Abort every transaction open past its timeout, fencing its producer (Kafka's
        ``abortTimedOutTransactions``); how many were aborted."""
        aborted = 0
        for metadata in self.state.timed_out(self.clock_ms()):
            if metadata.pending is not None or metadata.state != S.ONGOING:
                continue  # changed since it was found
            metadata.start_fenced_abort(metadata.prepare_fence_producer_epoch())
            code = await self._end(metadata, ControlType.ABORT, fence=True)
            logger.info(
                "event=transaction_timed_out transactional_id=%s producer_id=%d "
                "producer_epoch=%d error_code=%d",
                metadata.transactional_id,
                metadata.producer_id,
                metadata.producer_epoch,
                code,
            )
            aborted += code == pb.NONE
        return aborted

    async def remove_expired_transactional_ids(self) -> int:
        """Forget the ids idle (no transaction open or completing) longer than
        ``transactional.id.expiration.ms`` (Kafka's ``removeExpiredTransactionalIds``): each
        gets a tombstone in ``__transaction_state``, so a reload forgets it too, and its next
        InitProducerId starts afresh with a new producer id. How many were removed."""
        removed = 0
        for metadata in self.state.expired(self.clock_ms()):
            if metadata.pending is not None or not metadata.expiration_allowed:
                continue  # changed since it was found
            code = await self.state.append(metadata, metadata.prepare_dead())
            logger.info(
                "event=transactional_id_expired transactional_id=%s producer_id=%d "
                "producer_epoch=%d error_code=%d",
                metadata.transactional_id,
                metadata.producer_id,
                metadata.producer_epoch,
                code,
            )
            removed += code == pb.NONE
        return removed

    def _complete_in_flight(self, partition: int, in_flight: list[TransactionMetadata]) -> None:
        """A partition was loaded: the transactions decided before the previous
        coordinator stopped get their markers written again, and complete."""
        for metadata in in_flight:
            epoch = self.state.coordinator_epoch(metadata.transactional_id)
            if epoch is None or metadata.pending is not None:
                continue
            result = ControlType.COMMIT if metadata.state == S.PREPARE_COMMIT else ControlType.ABORT
            self.markers.add_markers(
                epoch, result, metadata, metadata.prepare_complete(self.clock_ms())
            )
            logger.info(
                "event=transaction_resumed transactional_id=%s producer_id=%d result=%s "
                "partition=%d coordinator_epoch=%d",
                metadata.transactional_id,
                metadata.producer_id,
                result.name,
                partition,
                epoch,
            )


def _pending(metadata: TransactionMetadata) -> bool:
    """Whether a change of the id is pending: asked again after an await, during which
    another request may have prepared one."""
    return metadata.pending is not None
