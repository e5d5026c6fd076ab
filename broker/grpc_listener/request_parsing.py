"""What the gRPC ``Broker`` service's handlers share to read a request and shape its answer:
duplicate partitions refused, partitions grouped by topic in request order, KIP-320's
optional leader epoch, Fetch's and ListOffsets' isolation level, and a produce request
checked before anything is appended."""

from __future__ import annotations

from dataclasses import dataclass

from broker.grpc_listener.guarded_call import MalformedRequestError
from broker.replication.replica_manager import ProduceResult
from broker.request_handlers import ACKS_VALUES, partition_problem
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb

__all__ = [
    "ParsedProduce",
    "by_topic",
    "current_leader_epoch",
    "is_read_committed",
    "parse_produce",
    "produce_response",
    "unique",
]


def unique(kind: str, keys: list[TopicPartition]) -> None:
    seen: set[TopicPartition] = set()
    for tp in keys:
        if tp in seen:
            raise MalformedRequestError(f"{kind} names partition {tp} twice")
        seen.add(tp)


READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def is_read_committed(isolation_level: int) -> bool:
    """Fetch's and ListOffsets' ``isolation_level``: 1 is read_committed, 0 not."""
    if isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise MalformedRequestError(
            f"isolation_level must be 0 (read_uncommitted) or 1 (read_committed), "
            f"got {isolation_level}"
        )
    return isolation_level == READ_COMMITTED


def by_topic(order: list[TopicPartition]) -> dict[str, list[TopicPartition]]:
    """The partitions grouped by topic, topics and partitions in request order."""
    grouped: dict[str, list[TopicPartition]] = {}
    for tp in order:
        grouped.setdefault(tp.topic, []).append(tp)
    return grouped


def current_leader_epoch(
    part: pb.FetchPartition | pb.OffsetForLeaderPartition | pb.ListOffsetsPartition,
) -> int | None:
    """KIP-320's optional current_leader_epoch: None (no fencing) when the client omits it."""
    return part.current_leader_epoch if part.HasField("current_leader_epoch") else None


@dataclass(frozen=True)
class ParsedProduce:
    """A produce request checked: what to append, what is refused up front, in what order
    the response lists the partitions."""

    entries: dict[TopicPartition, bytes]
    refused: dict[TopicPartition, ProduceResult]
    order: list[TopicPartition]


def parse_produce(request: pb.ProduceRequest) -> ParsedProduce:
    if request.acks not in ACKS_VALUES:
        raise MalformedRequestError(f"acks must be 0, 1 or -1 (all), got {request.acks}")
    if request.timeout_ms < 0:
        raise MalformedRequestError(f"timeout_ms must be >= 0, got {request.timeout_ms}")
    entries: dict[TopicPartition, bytes] = {}
    refused: dict[TopicPartition, ProduceResult] = {}
    order: list[TopicPartition] = []
    for topic in request.topics:
        for part in topic.partitions:
            tp = TopicPartition(topic.name, part.index)
            order.append(tp)
            problem = partition_problem(tp)
            if problem is not None:
                refused[tp] = ProduceResult(problem, f"invalid partition {tp!r}")
            elif not part.records:
                refused[tp] = ProduceResult(pb.CORRUPT_MESSAGE, f"{tp}: no record batches")
            else:
                entries[tp] = part.records
    unique("produce request", order)
    return ParsedProduce(entries, refused, order)


def produce_response(
    parsed: ParsedProduce, results: dict[TopicPartition, ProduceResult]
) -> pb.ProduceResponse:
    results.update(parsed.refused)
    response = pb.ProduceResponse()
    for name, tps in by_topic(parsed.order).items():
        topic_response = response.responses.add(name=name)
        for tp in tps:
            r = results[tp]
            topic_response.partitions.add(
                index=tp.partition,
                error_code=r.error_code,
                error_message=r.error_message,
                base_offset=r.base_offset,
                log_append_time_ms=-1,
                log_start_offset=r.log_start_offset,
                leader_epoch=r.leader_epoch,
            )
    return response
