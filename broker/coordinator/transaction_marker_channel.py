"""Writing decided transactions' markers to their partitions' leaders, then completing them
(Kafka's ``TransactionMarkerChannelManager``): docs/transactions.md.

Once PrepareCommit or PrepareAbort is in ``__transaction_state`` the outcome is decided, and
it must reach every partition of the transaction, however long that takes: the markers are
sent (WriteTxnMarkers, grouped by the partitions' current leaders) and sent again to the
next leader after every retriable failure, until each partition has its marker. Then
CompleteCommit or CompleteAbort is written and the transactional id may start its next
transaction.

The delivery stops, leaving the transaction to whoever coordinates the id next (its load
finds it decided and starts over), when this broker stops coordinating the id or a leader
refuses the marker as fenced (a newer coordinator or producer epoch wrote there). A
partition whose topic was deleted needs no marker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from broker.coordinator.internal_topic import COORDINATOR_NOT_AVAILABLE
from broker.coordinator.transaction_metadata import TransactionMetadata, TxnTransit
from broker.coordinator.transaction_state_manager import TransactionStateManager
from broker.metadata_cache import MetadataCache
from proto.coordinator.transaction_records import TransactionState
from proto.records.control_records import ControlType
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb

logger = logging.getLogger(__name__)

__all__ = ["MarkerSender", "TransactionMarkerChannel"]

MarkerSender = Callable[[int, pb.WriteTxnMarkersRequest], Awaitable[pb.WriteTxnMarkersResponse]]
"""Sends a WriteTxnMarkers request to a broker (this one included) and returns its answer;
raises on a transport failure."""

_FENCED = frozenset({pb.INVALID_PRODUCER_EPOCH, pb.TRANSACTION_COORDINATOR_FENCED})


@dataclass
class _Delivery:
    coordinator_epoch: int
    result: ControlType
    metadata: TransactionMetadata
    completion: TxnTransit
    remaining: set[TopicPartition] = field(default_factory=set)


class TransactionMarkerChannel:
    """Delivers markers, one task per decided transaction."""

    def __init__(
        self,
        broker_id: int,
        state: TransactionStateManager,
        metadata_cache: MetadataCache,
        send: MarkerSender,
        *,
        retry_backoff_s: float = 0.1,
    ) -> None:
        self.broker_id = broker_id
        self.state = state
        self.metadata_cache = metadata_cache
        self._send = send
        self.retry_backoff_s = retry_backoff_s
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @property
    def in_flight(self) -> int:
        """Transactions whose markers are being delivered."""
        return len(self._tasks)

    def add_markers(
        self,
        coordinator_epoch: int,
        result: ControlType,
        metadata: TransactionMetadata,
        completion: TxnTransit,
    ) -> None:
        """Deliver ``result`` to the transaction's partitions, then write ``completion``."""
        transactional_id = metadata.transactional_id
        delivery = _Delivery(
            coordinator_epoch, result, metadata, completion, set(metadata.partitions)
        )
        previous = self._tasks.pop(transactional_id, None)
        if previous is not None:
            previous.cancel()  # an older coordinator epoch's delivery
        task = asyncio.get_running_loop().create_task(
            self._deliver(delivery), name=f"markers-{transactional_id}"
        )
        self._tasks[transactional_id] = task
        task.add_done_callback(lambda t: self._forget(transactional_id, t))

    def _forget(self, transactional_id: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(transactional_id) is task:
            del self._tasks[transactional_id]
        if not task.cancelled() and task.exception() is not None:
            logger.error(
                "event=txn_markers_failed broker=%d transactional_id=%s error=%r",
                self.broker_id,
                transactional_id,
                str(task.exception()),
            )

    def _still_coordinating(self, delivery: _Delivery) -> bool:
        epoch = self.state.coordinator_epoch(delivery.metadata.transactional_id)
        return epoch == delivery.coordinator_epoch

    async def _deliver(self, delivery: _Delivery) -> None:
        metadata = delivery.metadata
        while delivery.remaining:
            if not self._still_coordinating(delivery):
                self._log_stop(delivery, "no longer the coordinator")
                return
            if await self._send_round(delivery):
                return  # fenced
            if delivery.remaining:
                await asyncio.sleep(self.retry_backoff_s)
        completion = delivery.completion
        while True:
            if not self._still_coordinating(delivery):
                self._log_stop(delivery, "no longer the coordinator")
                return
            code = await self.state.append(metadata, completion)
            if code == pb.NONE:
                logger.info(
                    "event=transaction_completed broker=%d transactional_id=%s "
                    "producer_id=%d producer_epoch=%d result=%s coordinator_epoch=%d",
                    self.broker_id,
                    metadata.transactional_id,
                    metadata.producer_id,
                    metadata.producer_epoch,
                    delivery.result.name,
                    delivery.coordinator_epoch,
                )
                return
            if code != COORDINATOR_NOT_AVAILABLE or metadata.state not in (
                TransactionState.PREPARE_COMMIT,
                TransactionState.PREPARE_ABORT,
            ):
                self._log_stop(delivery, f"completion not written (error {code})")
                return
            await asyncio.sleep(self.retry_backoff_s)
            completion = metadata.prepare_complete(self.state.clock_ms())

    async def _send_round(self, delivery: _Delivery) -> bool:
        """One WriteTxnMarkers per leader of the remaining partitions; True when a leader
        answered the marker fenced (the delivery must stop)."""
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in sorted(delivery.remaining):
            info = self.metadata_cache.partition(tp)
            if info is None:
                if tp.topic not in self.metadata_cache.topics():
                    delivery.remaining.discard(tp)  # the topic was deleted: nothing to end
                continue
            if info.leader >= 0:
                by_leader.setdefault(info.leader, []).append(tp)
        metadata = delivery.metadata
        for leader, tps in by_leader.items():
            request = pb.WriteTxnMarkersRequest()
            wanted = request.markers.add(
                producer_id=metadata.producer_id,
                producer_epoch=metadata.producer_epoch,
                committed=delivery.result == ControlType.COMMIT,
                coordinator_epoch=delivery.coordinator_epoch,
            )
            for tp in tps:
                wanted.partitions.add(topic_name=tp.topic, partition_index=tp.partition)
            try:
                response = await self._send(leader, request)
            except Exception as err:  # the leader is unreachable: try again
                logger.warning(
                    "event=txn_markers_not_sent broker=%d transactional_id=%s leader=%d error=%r",
                    self.broker_id,
                    metadata.transactional_id,
                    leader,
                    str(err),
                )
                continue
            for answer in response.markers:
                for part in answer.partitions:
                    tp = TopicPartition(part.topic_name, part.partition_index)
                    if part.error_code == pb.NONE:
                        delivery.remaining.discard(tp)
                    elif part.error_code in _FENCED:
                        self._log_stop(delivery, f"{tp} refused the marker: {part.error_message}")
                        return True
        return False

    def _log_stop(self, delivery: _Delivery, why: str) -> None:
        logger.warning(
            "event=txn_markers_stopped broker=%d transactional_id=%s producer_id=%d "
            "coordinator_epoch=%d remaining=%d reason=%r",
            self.broker_id,
            delivery.metadata.transactional_id,
            delivery.metadata.producer_id,
            delivery.coordinator_epoch,
            len(delivery.remaining),
            why,
        )

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
