"""The Kafka listener's DeleteRecords (KIP-107), over :mod:`broker.request_handlers`.

Kafka's admin clients send it to each partition's leader; a broker that does not lead a
partition answers NOT_LEADER_OR_FOLLOWER and the client retries with fresh metadata."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from broker.kafka_listener.messages import Tree
from broker.kafka_listener.wire_request import Answer, KafkaRequest, ms, per_topic, session_of
from broker.replication.replica_manager import ReplicaManager
from broker.request_handlers import DeletedRecords, delete_partition_records, denied_topics
from broker.security.acl_authorizer import AclAuthorizer
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.zk.acl_bindings import AclOperation

__all__ = ["RECORDS_ADMIN_VERSIONS", "RecordsAdminApis"]

DELETE_RECORDS = 21
RECORDS_ADMIN_VERSIONS: dict[int, tuple[int, int]] = {DELETE_RECORDS: (0, 2)}
"""What Kafka 2.8 serves (v2 is the flexible one, KIP-482)."""


class RecordsAdminApis:
    """The handlers of the record admin APIs, by API key."""

    def __init__(self, replica_manager: ReplicaManager, authorizer: AclAuthorizer) -> None:
        self.replica_manager = replica_manager
        self.authorizer = authorizer
        self.handlers: dict[int, Callable[[KafkaRequest], Awaitable[Answer]]] = {
            DELETE_RECORDS: self.delete_records,
        }

    async def delete_records(self, request: KafkaRequest) -> Answer:
        return self._delete_records(request)

    async def _delete_records(self, request: KafkaRequest) -> Tree:
        body = request.body
        offsets: dict[TopicPartition, int] = {}
        for topic in body.topics:
            for part in topic.partitions:
                # A partition named twice: the last offset counts, as in Kafka's handler.
                offsets[TopicPartition(topic.name, part.partition_index)] = part.offset
        denied = denied_topics(
            self.authorizer, session_of(request), AclOperation.DELETE, {tp.topic for tp in offsets}
        )
        refused = {
            tp: DeletedRecords(pb.TOPIC_AUTHORIZATION_FAILED, -1)
            for tp in offsets
            if tp.topic in denied
        }
        offsets = {tp: o for tp, o in offsets.items() if tp not in refused}
        results = await delete_partition_records(self.replica_manager, offsets, ms(body.timeout))
        results.update(refused)
        answers: list[tuple[TopicPartition, Tree]] = [
            (
                tp,
                {
                    "partition_index": tp.partition,
                    "low_watermark": r.low_watermark,
                    "error_code": r.error_code,
                },
            )
            for tp, r in results.items()
        ]
        return {"throttle_time": 0, "topics": per_topic(answers, "name", "partitions")}
