"""The Kafka listener's transaction APIs: FindCoordinator for a transactional id,
InitProducerId with one, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn, over
:mod:`broker.coordinator.transaction_coordinator` (docs/transactions.md). TxnOffsetCommit
goes to the group coordinator (:mod:`broker.kafka_listener.group_apis`).

The ACLs are Kafka 2.8's: Describe on the transactional id to find its coordinator, Write
on it for the others, Write on each topic a transaction adds, and Read on the group whose
offsets it adds. A request about an id
this broker does not coordinate is answered NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS
while its partition loads), and the client looks the coordinator up again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from broker.coordinator.transaction_coordinator import TransactionCoordinator
from broker.kafka_listener.messages import Tree
from broker.kafka_listener.wire_request import Answer, KafkaRequest, ms, session_of
from broker.metadata_cache import MetadataCache
from broker.request_handlers import denied_topics, partition_problem
from broker.security.acl_authorizer import AclAuthorizer
from proto.topic_partition import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.zk.acl_bindings import AclOperation, ResourceType

logger = logging.getLogger(__name__)

__all__ = ["TRANSACTION_VERSIONS", "TransactionApis"]

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN = 22, 24, 25, 26
TRANSACTION_VERSIONS: dict[int, tuple[int, int]] = {
    ADD_PARTITIONS_TO_TXN: (0, 3),
    ADD_OFFSETS_TO_TXN: (0, 3),
    END_TXN: (0, 3),
}
"""Kafka 2.8's versions (InitProducerId and FindCoordinator are listed by their doors)."""

COORDINATOR_NOT_AVAILABLE = 15
OPERATION_NOT_ATTEMPTED = 55


class TransactionApis:
    """The transaction handlers, by API key."""

    def __init__(
        self,
        coordinator: TransactionCoordinator,
        metadata_cache: MetadataCache,
        authorizer: AclAuthorizer,
        offsets_partition_of: Callable[[str], int],
    ) -> None:
        """``offsets_partition_of``: the partition of ``__consumer_offsets`` holding a
        group (the group coordinator's placement)."""
        self.coordinator = coordinator
        self.offsets_partition_of = offsets_partition_of
        self.state = coordinator.state
        self.metadata_cache = metadata_cache
        self.authorizer = authorizer
        self.handlers: dict[int, Callable[[KafkaRequest], Awaitable[Answer]]] = {
            ADD_PARTITIONS_TO_TXN: self.add_partitions_to_txn,
            ADD_OFFSETS_TO_TXN: self.add_offsets_to_txn,
            END_TXN: self.end_txn,
        }

    def _allowed(
        self, request: KafkaRequest, operation: AclOperation, transactional_id: str
    ) -> bool:
        return self.authorizer.authorize(
            session_of(request), operation, ResourceType.TRANSACTIONAL_ID, transactional_id
        )

    # -- FindCoordinator (key type 1) ----------------------------------------------------------

    async def find_coordinator(self, request: KafkaRequest, transactional_id: str) -> Tree:
        """The leader of the id's partition of ``__transaction_state``, made on first use."""
        if not transactional_id:
            return {"error_code": pb.INVALID_REQUEST, "node_id": -1, "host": "", "port": -1}
        if not self._allowed(request, AclOperation.DESCRIBE, transactional_id):
            return {
                "error_code": pb.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "node_id": -1,
                "host": "",
                "port": -1,
            }
        if not self.state.topic_exists():
            await self.state.ensure_topic()
            return {"error_code": COORDINATOR_NOT_AVAILABLE, "node_id": -1, "host": "", "port": -1}
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, self.state.partition_of(transactional_id))
        info = self.metadata_cache.partition(tp)
        broker = None if info is None else self.metadata_cache.broker(info.leader)
        if broker is None or broker.kafka_endpoint is None:
            return {"error_code": COORDINATOR_NOT_AVAILABLE, "node_id": -1, "host": "", "port": -1}
        host, port = broker.kafka_endpoint
        return {"error_code": pb.NONE, "node_id": broker.broker_id, "host": host, "port": port}

    # -- InitProducerId with a transactional id -------------------------------------------------

    async def init_producer_id(self, request: KafkaRequest, transactional_id: str) -> Tree:
        body = request.body
        producer_id = getattr(body, "producer_id", -1)
        producer_epoch = getattr(body, "producer_epoch", -1)
        expected = (producer_id, producer_epoch) if producer_id >= 0 else None
        result = await self.coordinator.init_producer_id(
            transactional_id, ms(body.transaction_timeout), expected
        )
        return {
            "error_code": result.error_code,
            "producer_id": result.producer_id,
            "producer_epoch": result.producer_epoch,
        }

    # -- AddPartitionsToTxn --------------------------------------------------------------------

    async def add_partitions_to_txn(self, request: KafkaRequest) -> Answer:
        return self._add_partitions(request)

    async def _add_partitions(self, request: KafkaRequest) -> Tree:
        body = request.body
        transactional_id = body.v3_and_below_transactional_id
        wanted = [
            TopicPartition(topic.name, partition)
            for topic in body.v3_and_below_topics
            for partition in topic.partitions
        ]
        codes: dict[TopicPartition, int]
        if not self._allowed(request, AclOperation.WRITE, transactional_id):
            codes = dict.fromkeys(wanted, pb.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            return _partition_results(codes)
        denied = denied_topics(
            self.authorizer, session_of(request), AclOperation.WRITE, {tp.topic for tp in wanted}
        )
        problems = {
            tp: pb.TOPIC_AUTHORIZATION_FAILED
            if tp.topic in denied
            else partition_problem(tp)
            or (
                pb.UNKNOWN_TOPIC_OR_PARTITION if self.metadata_cache.partition(tp) is None else None
            )
            for tp in wanted
        }
        refused = {tp: code for tp, code in problems.items() if code is not None}
        if refused:
            # Kafka adds none of them then: the others are not attempted.
            codes = {tp: refused.get(tp, OPERATION_NOT_ATTEMPTED) for tp in wanted}
            return _partition_results(codes)
        code = await self.coordinator.add_partitions(
            transactional_id,
            body.v3_and_below_producer_id,
            body.v3_and_below_producer_epoch,
            frozenset(wanted),
        )
        return _partition_results(dict.fromkeys(wanted, code))

    # -- AddOffsetsToTxn -----------------------------------------------------------------------

    async def add_offsets_to_txn(self, request: KafkaRequest) -> Answer:
        return self._add_offsets(request)

    async def _add_offsets(self, request: KafkaRequest) -> Tree:
        """The group's partition of ``__consumer_offsets`` joins the transaction, so that
        its marker there applies (or drops) the offsets TxnOffsetCommit writes."""
        body = request.body
        if not self._allowed(request, AclOperation.WRITE, body.transactional_id):
            return {"error_code": pb.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
        if not self.authorizer.authorize(
            session_of(request), AclOperation.READ, ResourceType.GROUP, body.group_id
        ):
            return {"error_code": pb.GROUP_AUTHORIZATION_FAILED}
        tp = TopicPartition(OFFSETS_TOPIC, self.offsets_partition_of(body.group_id))
        code = await self.coordinator.add_partitions(
            body.transactional_id, body.producer_id, body.producer_epoch, frozenset([tp])
        )
        return {"error_code": code}

    # -- EndTxn --------------------------------------------------------------------------------

    async def end_txn(self, request: KafkaRequest) -> Answer:
        return self._end_txn(request)

    async def _end_txn(self, request: KafkaRequest) -> Tree:
        body = request.body
        if not self._allowed(request, AclOperation.WRITE, body.transactional_id):
            return {"error_code": pb.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
        code = await self.coordinator.end_transaction(
            body.transactional_id, body.producer_id, body.producer_epoch, bool(body.committed)
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
