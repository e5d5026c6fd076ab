"""DeleteRecords (KIP-107), below both front doors: Kafka's ``ReplicaManager.deleteRecords``.

The leader of each partition raises its log start offset to the offset asked for (reads
below it are then OFFSET_OUT_OF_RANGE, ListOffsets earliest answers it, retention deletes
the segments wholly below it). The followers learn the new log start offset from their next
fetch response and raise theirs; their following fetch reports it back, which moves the
leader's *low watermark*, the smallest log start offset over the replicas on live brokers.
The answer waits in the purgatory, up to the request's timeout, until the low watermark
reached the offset, so that a successful answer means no live replica still serves the
deleted records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from broker.log.log import LogClosedError
from broker.replication.delayed_delete_records import (
    INVALID_LOW_WATERMARK,
    DelayedDeleteRecords,
    DeleteRecordsPartitionStatus,
)
from broker.replication.replica_manager import ReplicaManager
from proto import errors
from proto.process.event_log import log_event
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb

__all__ = ["DeleteRecordsPartitionStatus", "delete_records"]

logger = logging.getLogger(__name__)


async def delete_records(
    replica_manager: ReplicaManager, offsets: Mapping[TopicPartition, int], timeout_ms: int
) -> dict[TopicPartition, DeleteRecordsPartitionStatus]:
    """Delete the records below ``offsets[tp]`` (-1: the high watermark) of each partition
    this broker leads; the outcome per partition, once the low watermarks reached the
    offsets or ``timeout_ms`` passed (REQUEST_TIMED_OUT for those still behind)."""
    statuses = {tp: _delete_on_leader(replica_manager, tp, o) for tp, o in offsets.items()}
    waiting = {tp: s for tp, s in statuses.items() if s.error_code is None}
    if waiting:
        operation = DelayedDeleteRecords(
            max(timeout_ms, 0), waiting, replica_manager.partitions.get, _is_alive(replica_manager)
        )
        purgatory = replica_manager.delete_records_purgatory
        if not purgatory.try_complete_else_watch(operation, waiting):
            await operation.wait()
    return statuses


def _is_alive(replica_manager: ReplicaManager) -> Callable[[int], bool]:
    cache = replica_manager.metadata_cache
    return lambda broker_id: cache.broker(broker_id) is not None


def _delete_on_leader(
    replica_manager: ReplicaManager, tp: TopicPartition, offset: int
) -> DeleteRecordsPartitionStatus:
    """Kafka's ``deleteRecordsOnLocalLog`` for one partition: error_code None when the
    answer must wait for the followers."""
    broker_id = replica_manager.broker_id
    partition = replica_manager.partitions.get(tp)
    if partition is None:
        return _failed(pb.UNKNOWN_TOPIC_OR_PARTITION, f"broker {broker_id} does not host {tp}")
    if replica_manager.log_dir_failure is not None:
        return _failed(
            pb.KAFKA_STORAGE_ERROR,
            f"the log dir of broker {broker_id} is offline: {replica_manager.log_dir_failure}",
        )
    try:
        required = partition.delete_records_on_leader(offset)
        low = partition.low_watermark_if_leader(_is_alive(replica_manager))
    except errors.BrokerResponseError as err:
        return _failed(err.code, str(err.args[0]) if err.args else "")
    except LogClosedError as err:
        return _failed(pb.NOT_LEADER_OR_FOLLOWER, f"{tp}: the log was closed: {err}")
    except OSError as err:
        replica_manager.mark_log_dir_offline(err, "delete_records")
        return _failed(pb.KAFKA_STORAGE_ERROR, f"log directory I/O error: {err}")
    replica_manager.partition_changed(tp)  # the followers' fetch sessions answer it
    log_event(
        logger,
        logging.INFO,
        "replica_manager",
        "delete_records",
        broker=broker_id,
        tp=str(tp),
        offset=required,
        low_watermark=low,
    )
    if low >= required:
        return DeleteRecordsPartitionStatus(required, low, pb.NONE)
    return DeleteRecordsPartitionStatus(required, low)


def _failed(code: int, message: str) -> DeleteRecordsPartitionStatus:
    return DeleteRecordsPartitionStatus(INVALID_LOW_WATERMARK, INVALID_LOW_WATERMARK, code, message)
