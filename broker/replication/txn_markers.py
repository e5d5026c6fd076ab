"""WriteTxnMarkers as a partition leader answers it (Kafka's
``KafkaApis.handleWriteTxnMarkersRequest``), shared by the gRPC ``Control`` service and the
transaction coordinator writing to partitions this broker leads: docs/transactions.md."""

from __future__ import annotations

from broker.replication.replica_manager import MarkerAppend, ReplicaManager
from proto.records.control_records import ControlType, EndTxnMarker
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.wire.minibroker_pb2 import ErrorCode

__all__ = ["write_txn_markers"]


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
