"""The gRPC ``Broker`` service's transaction RPCs: FindCoordinator, InitProducerId with a
transactional id, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn, over
:class:`broker.transaction_requests.TransactionRequests`, which the Kafka listener's
handlers share (docs/transactions.md). A coordinator is answered by its gRPC address."""

from __future__ import annotations

from typing import cast

import grpc

from broker.coordinator.group_metadata_manager import CommittedOffset, GroupMetadataManager
from broker.coordinator.internal_topic import COORDINATOR_NOT_AVAILABLE
from broker.grpc_listener.authorizer import GrpcAuthorizer
from broker.grpc_listener.guarded_call import MalformedRequestError, guarded
from broker.grpc_listener.request_parsing import unique
from broker.metadata_cache import MetadataCache
from broker.request_handlers import find_group_coordinator
from broker.security.acl_authorizer import Session
from broker.transaction_requests import TransactionRequests
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb

__all__ = ["TransactionRpcMethods", "TransactionRpcs"]

GROUP_KEY, TRANSACTION_KEY = 0, 1


def _code(code: int) -> pb.ErrorCode.ValueType:
    return cast(pb.ErrorCode.ValueType, code)


def _producer(producer: pb.TransactionalProducer) -> tuple[str, tuple[int, int]]:
    if not producer.transactional_id:
        raise MalformedRequestError("the request names no transactional_id")
    return producer.transactional_id, (producer.producer_id, producer.producer_epoch)


class TransactionRpcs:
    """The transaction RPCs of one broker."""

    def __init__(
        self,
        requests: TransactionRequests,
        metadata_cache: MetadataCache,
        group_store: GroupMetadataManager | None,
    ) -> None:
        self.requests = requests
        self.metadata_cache = metadata_cache
        self.group_store = group_store

    async def find_coordinator(
        self, request: pb.FindCoordinatorRequest, session: Session
    ) -> pb.FindCoordinatorResponse:
        if request.key_type == TRANSACTION_KEY:
            code, node = await self.requests.find_coordinator(session, request.key)
        elif request.key_type == GROUP_KEY:
            code, node = await find_group_coordinator(
                self.requests.authorizer,
                session,
                self.group_store,
                self.metadata_cache,
                request.key,
            )
        else:
            raise MalformedRequestError(
                f"unknown key_type {request.key_type} (0: group, 1: transactional id)"
            )
        broker = self.metadata_cache.broker(node) if code == pb.NONE else None
        if broker is None:
            code = code if code != pb.NONE else COORDINATOR_NOT_AVAILABLE
            return pb.FindCoordinatorResponse(error_code=_code(code), node_id=-1, port=-1)
        return pb.FindCoordinatorResponse(
            error_code=pb.NONE, node_id=node, host=broker.host, port=broker.port
        )

    async def init_producer_id(
        self, request: pb.InitProducerIdRequest, session: Session
    ) -> pb.InitProducerIdResponse:
        expected = None
        if request.HasField("producer_id") and request.producer_id >= 0:
            expected = (request.producer_id, request.producer_epoch)
        result = await self.requests.init_producer_id(
            session, request.transactional_id, request.transaction_timeout_ms, expected
        )
        return pb.InitProducerIdResponse(
            error_code=_code(result.error_code),
            producer_id=result.producer_id,
            producer_epoch=result.producer_epoch,
        )

    async def add_partitions_to_txn(
        self, request: pb.AddPartitionsToTxnRequest, session: Session
    ) -> pb.AddPartitionsToTxnResponse:
        transactional_id, producer = _producer(request.producer)
        wanted = [TopicPartition(p.topic, p.partition) for p in request.partitions]
        unique("AddPartitionsToTxn", wanted)
        codes = await self.requests.add_partitions(session, transactional_id, producer, wanted)
        response = pb.AddPartitionsToTxnResponse()
        for tp in wanted:
            response.partitions.add(
                topic=tp.topic, partition=tp.partition, error_code=_code(codes[tp])
            )
        return response

    async def add_offsets_to_txn(
        self, request: pb.AddOffsetsToTxnRequest, session: Session
    ) -> pb.AddOffsetsToTxnResponse:
        transactional_id, producer = _producer(request.producer)
        code = await self.requests.add_offsets(
            session, transactional_id, producer, request.group_id
        )
        return pb.AddOffsetsToTxnResponse(error_code=_code(code))

    async def txn_offset_commit(
        self, request: pb.TxnOffsetCommitRequest, session: Session
    ) -> pb.TxnOffsetCommitResponse:
        transactional_id, producer = _producer(request.producer)
        order = [TopicPartition(o.topic, o.partition) for o in request.offsets]
        unique("TxnOffsetCommit", order)
        offsets = {
            TopicPartition(o.topic, o.partition): CommittedOffset(
                o.offset, o.leader_epoch, o.metadata
            )
            for o in request.offsets
        }
        codes = await self.requests.txn_offset_commit(
            session,
            transactional_id,
            request.group_id,
            producer,
            (request.generation_id, request.member_id),
            offsets,
        )
        response = pb.TxnOffsetCommitResponse()
        for tp in order:
            response.offsets.add(
                topic=tp.topic,
                partition=tp.partition,
                offset=offsets[tp].offset,
                error_code=_code(codes.get(tp, pb.NONE)),
            )
        return response

    async def end_txn(self, request: pb.EndTxnRequest, session: Session) -> pb.EndTxnResponse:
        transactional_id, producer = _producer(request.producer)
        code = await self.requests.end_txn(session, transactional_id, producer, request.committed)
        return pb.EndTxnResponse(error_code=_code(code))


Context = grpc.aio.ServicerContext[object, object]


class TransactionRpcMethods:
    """The ``Broker`` service's transaction methods, for
    :class:`broker.grpc_listener.services.BrokerService` to inherit: each one guarded, as
    the service's others are. Without :class:`TransactionRpcs` (a broker without a
    transaction coordinator, in tests) they answer COORDINATOR_NOT_AVAILABLE."""

    authorizer: GrpcAuthorizer
    transaction_rpcs: TransactionRpcs | None

    def _rpcs(self) -> TransactionRpcs:
        if self.transaction_rpcs is None:
            raise MalformedRequestError("this broker has no transaction coordinator")
        return self.transaction_rpcs

    async def FindCoordinator(
        self, request: pb.FindCoordinatorRequest, context: Context
    ) -> pb.FindCoordinatorResponse:
        session = self.authorizer.session(context)
        return await guarded(
            context, "FindCoordinator", lambda: self._rpcs().find_coordinator(request, session)
        )

    async def AddPartitionsToTxn(
        self, request: pb.AddPartitionsToTxnRequest, context: Context
    ) -> pb.AddPartitionsToTxnResponse:
        session = self.authorizer.session(context)
        return await guarded(
            context,
            "AddPartitionsToTxn",
            lambda: self._rpcs().add_partitions_to_txn(request, session),
        )

    async def AddOffsetsToTxn(
        self, request: pb.AddOffsetsToTxnRequest, context: Context
    ) -> pb.AddOffsetsToTxnResponse:
        session = self.authorizer.session(context)
        return await guarded(
            context, "AddOffsetsToTxn", lambda: self._rpcs().add_offsets_to_txn(request, session)
        )

    async def TxnOffsetCommit(
        self, request: pb.TxnOffsetCommitRequest, context: Context
    ) -> pb.TxnOffsetCommitResponse:
        session = self.authorizer.session(context)
        return await guarded(
            context, "TxnOffsetCommit", lambda: self._rpcs().txn_offset_commit(request, session)
        )

    async def EndTxn(self, request: pb.EndTxnRequest, context: Context) -> pb.EndTxnResponse:
        session = self.authorizer.session(context)
        return await guarded(context, "EndTxn", lambda: self._rpcs().end_txn(request, session))
