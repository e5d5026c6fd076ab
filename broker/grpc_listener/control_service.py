"""The gRPC ``Control`` service of proto/wire/minibroker.proto: the requests a controller
sends a broker (LeaderAndIsr, UpdateMetadata, StopReplica), ControlledShutdown, which
brokers send to the active controller, and WriteTxnMarkers, which transaction coordinators
send to partition leaders. Only brokers may call it (``super.users`` with TLS); it
translates each request into a call on the :class:`ReplicaManager` or the controller."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from broker.grpc_listener.authorizer import GrpcAuthorizer
from broker.grpc_listener.guarded_call import guarded
from broker.replication.replica_manager import MarkerAppend, ReplicaManager
from controller.kafka_controller import KafkaController
from proto import errors
from proto.records.control_records import ControlType, EndTxnMarker
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.wire.minibroker_pb2 import ErrorCode

__all__ = ["ControlService"]

_Response = TypeVar("_Response")


class ControlService(pb_grpc.ControlServicer):
    """LeaderAndIsr, UpdateMetadata and StopReplica from the controller; ControlledShutdown
    from brokers to this broker's controller, when it is the active one."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        controller: KafkaController | None = None,
        authorizer: GrpcAuthorizer | None = None,
    ) -> None:
        self.replica_manager = replica_manager
        self.controller = controller
        """This broker's controller candidate: ControlledShutdown goes to it when active."""
        self.authorizer = authorizer or GrpcAuthorizer.open(replica_manager.broker_id)
        """Every control request only from a broker (``super.users``)."""

    async def _authorized(
        self,
        context: grpc.aio.ServicerContext[object, object],
        rpc: str,
        handle: Callable[[], Awaitable[_Response]],
    ) -> _Response:
        """A controller's request: only from a broker, then :func:`guarded`."""
        await self.authorizer.authorize_cluster_action(context, rpc)
        return await guarded(context, rpc, handle)

    async def LeaderAndIsr(
        self, request: pb.LeaderAndIsrRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.LeaderAndIsrResponse:
        return await self._authorized(
            context, "LeaderAndIsr", lambda: self.replica_manager.become_leader_or_follower(request)
        )

    async def UpdateMetadata(
        self, request: pb.UpdateMetadataRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.UpdateMetadataResponse:
        return await self._authorized(
            context, "UpdateMetadata", lambda: self.replica_manager.update_metadata(request)
        )

    async def StopReplica(
        self, request: pb.StopReplicaRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.StopReplicaResponse:
        return await self._authorized(
            context, "StopReplica", lambda: self.replica_manager.stop_replicas(request)
        )

    async def ControlledShutdown(
        self,
        request: pb.ControlledShutdownRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> pb.ControlledShutdownResponse:
        await self.authorizer.authorize_cluster_action(
            context, "ControlledShutdown", as_broker=request.broker_id
        )
        if self.controller is None or not self.controller.is_active:
            return pb.ControlledShutdownResponse(
                error_code=pb.NOT_CONTROLLER,
                error_message=f"broker is not the controller (controller is "
                f"{self.replica_manager.metadata_cache.controller_id})",
            )
        try:
            remaining = await self.controller.controlled_shutdown(
                request.broker_id, request.broker_epoch
            )
        except errors.BrokerResponseError as err:
            return pb.ControlledShutdownResponse(
                error_code=ErrorCode.ValueType(err.code), error_message=str(err)
            )
        response = pb.ControlledShutdownResponse(error_code=pb.NONE)
        for tp in remaining:
            response.remaining_partitions.add(topic_name=tp.topic, partition_index=tp.partition)
        return response

    async def WriteTxnMarkers(
        self,
        request: pb.WriteTxnMarkersRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> pb.WriteTxnMarkersResponse:
        return await self._authorized(
            context, "WriteTxnMarkers", lambda: write_txn_markers(self.replica_manager, request)
        )


async def write_txn_markers(
    replica_manager: ReplicaManager, request: pb.WriteTxnMarkersRequest
) -> pb.WriteTxnMarkersResponse:
    """Append each marker of the request to its partitions (those this broker leads; the
    others are answered NOT_LEADER_OR_FOLLOWER or UNKNOWN_TOPIC_OR_PARTITION), acks=all."""
    response = pb.WriteTxnMarkersResponse()
    timeout_ms = replica_manager.config.request_timeout_ms
    for wanted in request.markers:
        marker = EndTxnMarker(
            ControlType.COMMIT if wanted.committed else ControlType.ABORT,
            wanted.coordinator_epoch,
        )
        appends = {
            TopicPartition(p.topic_name, p.partition_index): MarkerAppend(
                marker, wanted.producer_id, wanted.producer_epoch
            )
            for p in wanted.partitions
        }
        results = await replica_manager.write_txn_markers(timeout_ms, appends)
        answer = response.markers.add(producer_id=wanted.producer_id)
        for tp, result in results.items():
            answer.partitions.add(
                topic_name=tp.topic,
                partition_index=tp.partition,
                error_code=ErrorCode.ValueType(result.error_code),
                error_message=result.error_message,
            )
    return response
