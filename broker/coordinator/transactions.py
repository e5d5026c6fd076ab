"""One broker's transaction coordinator, assembled: the state in ``__transaction_state``,
the requests, the markers (to this broker's own partitions directly, to the others over
the ``Control`` service), the periodic abort of transactions open past their timeout, and
the periodic removal of transactional ids idle past ``transactional.id.expiration.ms``:
docs/transactions.md."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor

import grpc

from broker.coordinator.producer_id_manager import ProducerIdManager
from broker.coordinator.transaction_coordinator import TransactionCoordinator
from broker.coordinator.transaction_marker_channel import TransactionMarkerChannel
from broker.coordinator.transaction_state_manager import TransactionStateManager
from broker.metadata_cache import MetadataCache
from broker.replication.replica_manager import ReplicaManager
from broker.replication.txn_markers import write_txn_markers
from proto.config.broker_config import BrokerConfig
from proto.transport.tls import TlsConfig, aio_channel
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc

logger = logging.getLogger(__name__)

__all__ = ["Transactions"]

TopicCreator = Callable[[], Awaitable[int]]


class Transactions:
    """The transaction coordinator of one broker and what it needs."""

    def __init__(
        self,
        config: BrokerConfig,
        replica_manager: ReplicaManager,
        metadata_cache: MetadataCache,
        executor: Executor | None,
        create_topic: TopicCreator,
        producer_ids: ProducerIdManager,
        tls: TlsConfig | None,
    ) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.replica_manager = replica_manager
        self.metadata_cache = metadata_cache
        self.tls = tls
        self._producer_ids = producer_ids
        self.state = TransactionStateManager(
            config, replica_manager, metadata_cache, executor, create_topic
        )
        self.markers = TransactionMarkerChannel(
            self.broker_id, self.state, metadata_cache, self._send
        )
        self.coordinator = TransactionCoordinator(
            self.state,
            self._new_producer_id,
            self.markers,
            max_timeout_ms=config.transaction_max_timeout_ms,
        )
        self._channels: dict[tuple[int, str, int], grpc.aio.Channel] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def _new_producer_id(self) -> tuple[int, int]:
        try:
            async with asyncio.timeout(self.config.zookeeper_session_timeout_ms / 1000):
                return pb.NONE, await self._producer_ids.generate_producer_id()
        except Exception as err:
            logger.warning(
                "event=transactional_producer_id_failed broker=%d error=%r", self.broker_id, err
            )
            return pb.COORDINATOR_NOT_AVAILABLE, -1

    async def _send(
        self, broker_id: int, request: pb.WriteTxnMarkersRequest
    ) -> pb.WriteTxnMarkersResponse:
        """WriteTxnMarkers to ``broker_id``: this broker's own handler, or the broker's
        ``Control`` service (one channel per broker address, kept)."""
        if broker_id == self.broker_id:
            return await write_txn_markers(self.replica_manager, request)
        broker = self.metadata_cache.broker(broker_id)
        if broker is None:
            raise ConnectionError(f"broker {broker_id} is not alive")
        key = (broker_id, broker.host, broker.port)
        channel = self._channels.get(key)
        if channel is None:
            channel = self._channels[key] = aio_channel(f"{broker.host}:{broker.port}", self.tls)
        stub = pb_grpc.ControlStub(channel)
        timeout_s = self.config.request_timeout_ms / 1000
        response: pb.WriteTxnMarkersResponse = await stub.WriteTxnMarkers(
            request, timeout=timeout_s
        )
        return response

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        config = self.config
        self._tasks = [
            loop.create_task(
                self._every(
                    config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                    self.coordinator.abort_timed_out_transactions,
                    "timed_out_transactions_not_aborted",
                ),
                name="abort-timed-out-transactions",
            ),
            loop.create_task(
                self._every(
                    config.transaction_remove_expired_transaction_cleanup_interval_ms,
                    self.coordinator.remove_expired_transactional_ids,
                    "expired_transactional_ids_not_removed",
                ),
                name="remove-expired-transactional-ids",
            ),
        ]

    async def _every(
        self, interval_ms: int, work: Callable[[], Awaitable[int]], failure: str
    ) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await work()
            except Exception as err:  # the next round tries again
                logger.error("event=%s broker=%d error=%r", failure, self.broker_id, err)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.markers.stop()
        await self.state.stop()
        for channel in self._channels.values():
            await channel.close(None)
        self._channels.clear()
