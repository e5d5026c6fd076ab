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
from broker.replication.replica_manager import ReplicaManager
from broker.replication.txn_markers import write_txn_markers
from controller.kafka_controller import KafkaController
from proto import errors
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
