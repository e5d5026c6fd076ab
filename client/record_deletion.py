"""Deleting records (KIP-107, Kafka's ``AdminClient.deleteRecords`` and
``kafka-delete-records.sh``): each partition's leader is asked to raise its log start offset.

The brokers do the work (``broker/replication/delete_records.py``, the same code behind the
Kafka listener's DeleteRecords); this client finds each partition's leader in the metadata,
sends one DeleteRecords per leader and, as Kafka's admin client does, asks once more after
a metadata refresh for the partitions whose leader moved meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

import grpc

from client.metadata import BrokerConnections, BrokerNode, MetadataClient
from proto import errors
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc

__all__ = ["DeleteRecordsResult", "delete_records"]

_RETRIABLE = (pb.NOT_LEADER_OR_FOLLOWER, pb.LEADER_NOT_AVAILABLE)


@dataclass
class DeleteRecordsResult:
    """Per partition: the low watermark (the smallest log start offset over its replicas),
    or why the records were not deleted."""

    low_watermarks: dict[TopicPartition, int] = field(default_factory=dict)
    errors: dict[TopicPartition, str] = field(default_factory=dict)


async def delete_records(
    connections: BrokerConnections, offsets: Mapping[TopicPartition, int], timeout_ms: int
) -> DeleteRecordsResult:
    """Delete the records below ``offsets[tp]`` (-1: the high watermark) of each partition;
    ``timeout_ms`` is how long each leader may wait for its followers."""
    metadata = MetadataClient(connections)
    result = DeleteRecordsResult()
    pending = sorted(offsets)
    for attempt in range(2):
        if not pending:
            break
        cluster = await metadata.refresh(sorted({tp.topic for tp in pending}))
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in pending:
            leader = cluster.leader_of(tp)
            topic = cluster.topics.get(tp.topic)
            if leader is not None:
                by_leader.setdefault(leader.node_id, []).append(tp)
            elif (
                topic is None or topic.error_code != pb.NONE or tp.partition not in topic.partitions
            ):
                result.errors[tp] = f"UNKNOWN_TOPIC_OR_PARTITION: unknown partition {tp}"
            else:
                result.errors[tp] = f"LEADER_NOT_AVAILABLE: {tp} has no live leader"
        answers = await asyncio.gather(
            *(
                _delete_on(
                    connections, cluster.brokers[b], {tp: offsets[tp] for tp in tps}, timeout_ms
                )
                for b, tps in by_leader.items()
            )
        )
        retry: list[TopicPartition] = []
        for answer in answers:
            for tp, (code, low, message) in answer.items():
                if code == pb.NONE:
                    result.low_watermarks[tp] = low
                    result.errors.pop(tp, None)
                    continue
                result.errors[tp] = message
                if code in _RETRIABLE and attempt == 0:
                    retry.append(tp)
        pending = sorted(retry)
    return result


async def _delete_on(
    connections: BrokerConnections,
    leader: BrokerNode,
    offsets: Mapping[TopicPartition, int],
    timeout_ms: int,
) -> dict[TopicPartition, tuple[int, int, str]]:
    """One DeleteRecords to ``leader``: (error code, low watermark, message) per partition."""
    request = pb.DeleteRecordsRequest(timeout_ms=timeout_ms)
    for topic in sorted({tp.topic for tp in offsets}):
        entry = request.topics.add(name=topic)
        for tp in sorted(offsets):
            if tp.topic == topic:
                entry.partitions.add(partition_index=tp.partition, offset=offsets[tp])
    stub = pb_grpc.BrokerStub(connections.channel(leader.address))
    try:
        response = await stub.DeleteRecords(
            request, timeout=connections.request_timeout_s + timeout_ms / 1000
        )
    except grpc.aio.AioRpcError as e:
        why = f"leader {leader.node_id} unreachable ({e.code().name.lower()})"
        return dict.fromkeys(offsets, (pb.LEADER_NOT_AVAILABLE, -1, why))
    answer: dict[TopicPartition, tuple[int, int, str]] = {}
    for t in response.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            error = errors.for_code(p.error_code, p.error_message)
            message = "" if error is None else f"{error.code_name}: {error}"
            answer[tp] = (p.error_code, p.low_watermark, message)
    return answer
