"""The Kafka listener's transaction APIs: FindCoordinator for a transactional id,
InitProducerId with one, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn, read from
Kafka's messages and answered in them; the checks and the work are
:mod:`broker.transaction_requests`, which the gRPC door shares
(docs/transactions.md). TxnOffsetCommit goes to the group coordinator
(:mod:`broker.kafka_listener.group_apis`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from broker.coordinator.internal_topic import COORDINATOR_NOT_AVAILABLE
from broker.kafka_listener.messages import Tree
from broker.kafka_listener.wire_request import Answer, KafkaRequest, ms, session_of
from broker.metadata_cache import MetadataCache
from broker.transaction_requests import TransactionRequests
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb

logger = logging.getLogger(__name__)

__all__ = ["TRANSACTION_VERSIONS", "TransactionApis"]

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN = 22, 24, 25, 26
TRANSACTION_VERSIONS: dict[int, tuple[int, int]] = {
    ADD_PARTITIONS_TO_TXN: (0, 3),
    ADD_OFFSETS_TO_TXN: (0, 3),
    END_TXN: (0, 3),
}
"""Kafka 2.8's versions (InitProducerId and FindCoordinator are listed by their doors)."""


class TransactionApis:
    """The transaction handlers, by API key."""

    def __init__(self, requests: TransactionRequests, metadata_cache: MetadataCache) -> None:
        self.requests = requests
        self.metadata_cache = metadata_cache
        self.handlers: dict[int, Callable[[KafkaRequest], Awaitable[Answer]]] = {
            ADD_PARTITIONS_TO_TXN: self.add_partitions_to_txn,
            ADD_OFFSETS_TO_TXN: self.add_offsets_to_txn,
            END_TXN: self.end_txn,
        }

    async def find_coordinator(self, request: KafkaRequest, transactional_id: str) -> Tree:
        """FindCoordinator with key type 1: the coordinator's Kafka listener."""
        code, broker_id = await self.requests.find_coordinator(
            session_of(request), transactional_id
        )
        broker = self.metadata_cache.broker(broker_id) if code == pb.NONE else None
        if broker is None or broker.kafka_endpoint is None:
            code = code if code != pb.NONE else COORDINATOR_NOT_AVAILABLE
            return {"error_code": code, "node_id": -1, "host": "", "port": -1}
        host, port = broker.kafka_endpoint
        return {"error_code": pb.NONE, "node_id": broker.broker_id, "host": host, "port": port}

    async def init_producer_id(self, request: KafkaRequest, transactional_id: str) -> Tree:
        body = request.body
        producer_id = getattr(body, "producer_id", -1)
        producer_epoch = getattr(body, "producer_epoch", -1)
        expected = (producer_id, producer_epoch) if producer_id >= 0 else None
        result = await self.requests.init_producer_id(
            session_of(request), transactional_id, ms(body.transaction_timeout), expected
        )
        return {
            "error_code": result.error_code,
            "producer_id": result.producer_id,
            "producer_epoch": result.producer_epoch,
        }

    async def add_partitions_to_txn(self, request: KafkaRequest) -> Answer:
        return self._add_partitions(request)

    async def _add_partitions(self, request: KafkaRequest) -> Tree:
        body = request.body
        wanted = [
            TopicPartition(topic.name, partition)
            for topic in body.v3_and_below_topics
            for partition in topic.partitions
        ]
        codes = await self.requests.add_partitions(
            session_of(request),
            body.v3_and_below_transactional_id,
            (body.v3_and_below_producer_id, body.v3_and_below_producer_epoch),
            wanted,
        )
        return _partition_results(codes)

    async def add_offsets_to_txn(self, request: KafkaRequest) -> Answer:
        return self._add_offsets(request)

    async def _add_offsets(self, request: KafkaRequest) -> Tree:
        body = request.body
        code = await self.requests.add_offsets(
            session_of(request),
            body.transactional_id,
            (body.producer_id, body.producer_epoch),
            body.group_id,
        )
        return {"error_code": code}

    async def end_txn(self, request: KafkaRequest) -> Answer:
        return self._end_txn(request)

    async def _end_txn(self, request: KafkaRequest) -> Tree:
        body = request.body
        code = await self.requests.end_txn(
            session_of(request),
            body.transactional_id,
            (body.producer_id, body.producer_epoch),
            bool(body.committed),
        )
        return {"error_code": code}


def _partition_results(codes: dict[TopicPartition, int]) -> Tree:
    by_topic: dict[str, list[Tree]] = {}
    for tp, code in codes.items():
        by_topic.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "partition_error_code": code}
        )
    return {
        "results_by_topic_v3_and_below": [
            {"name": topic, "results_by_partition": results} for topic, results in by_topic.items()
        ]
    }
