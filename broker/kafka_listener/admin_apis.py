"""The Kafka listener's admin APIs: CreateTopics, DeleteTopics and DescribeConfigs, over
:mod:`broker.kafka_listener.topic_admin` (the controller's ZooKeeper paths, as Kafka
2.x's brokers write them). Any broker answers, as in Kafka 2.x; they do not need the controller."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from broker.kafka_listener.messages import Tree
from broker.kafka_listener.topic_admin import NewTopic, TopicAdmin
from broker.kafka_listener.wire_request import Answer, KafkaRequest, ms
from proto.wire import minibroker_pb2 as pb

__all__ = ["ADMIN_VERSIONS", "AdminApis"]

CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS = 19, 20, 32
ADMIN_VERSIONS: dict[int, tuple[int, int]] = {
    CREATE_TOPICS: (2, 5),
    DELETE_TOPICS: (1, 5),
    DESCRIBE_CONFIGS: (1, 4),
}
"""The highs stop before topic ids (CreateTopics 7, DeleteTopics 6)."""

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
INVALID_REQUEST = 42


class AdminApis:
    """The admin handlers, by API key."""

    def __init__(self, admin: TopicAdmin, broker_id: int) -> None:
        self.admin = admin
        self.broker_id = broker_id
        self.handlers: dict[int, Callable[[KafkaRequest], Awaitable[Answer]]] = {
            CREATE_TOPICS: self.create_topics,
            DELETE_TOPICS: self.delete_topics,
            DESCRIBE_CONFIGS: self.describe_configs,
        }

    async def create_topics(self, request: KafkaRequest) -> Answer:
        return self._create_topics(request)

    async def _create_topics(self, request: KafkaRequest) -> Tree:
        body = request.body
        topics = [
            NewTopic(
                t.name,
                t.num_partitions,
                t.replication_factor,
                {a.partition_index: list(a.broker_ids) for a in t.assignments},
                {c.name: c.value for c in t.configs if c.value is not None},
            )
            for t in body.topics
        ]
        names = [t.name for t in topics]
        if len(set(names)) != len(names):
            message = "a topic is named more than once in the request"
            return {
                "topics": [
                    {"name": n, "error_code": INVALID_REQUEST, "error_message": message}
                    for n in dict.fromkeys(names)
                ]
            }
        outcomes = await self.admin.create_topics(
            topics, ms(body.timeout), getattr(body, "validate_only", False)
        )
        return {
            "topics": [
                {
                    "name": name,
                    "error_code": o.error_code,
                    "error_message": o.error_message,
                    "num_partitions": o.num_partitions,
                    "replication_factor": o.replication_factor,
                    "configs": None,
                }
                for name, o in outcomes.items()
            ]
        }

    async def delete_topics(self, request: KafkaRequest) -> Answer:
        return self._delete_topics(request)

    async def _delete_topics(self, request: KafkaRequest) -> Tree:
        body = request.body
        names = list(dict.fromkeys(body.topic_names))
        codes = await self.admin.delete_topics(names, ms(body.timeout))
        return {
            "responses": [
                {"name": name, "error_code": code, "error_message": None}
                for name, code in codes.items()
            ]
        }

    async def describe_configs(self, request: KafkaRequest) -> Answer:
        return self._describe_configs(request)

    async def _describe_configs(self, request: KafkaRequest) -> Tree:
        results = []
        for resource in request.body.resources:
            keys = resource.configuration_keys
            code: int = pb.NONE
            message: str | None = None
            if resource.resource_type == TOPIC_RESOURCE:
                code, message, entries = await self.admin.describe_topic_configs(
                    resource.resource_name, keys
                )
            elif resource.resource_type == BROKER_RESOURCE and resource.resource_name in (
                "",
                str(self.broker_id),
            ):
                entries = self.admin.describe_broker_configs(keys)
            else:
                entries = []
                code = INVALID_REQUEST
                message = (
                    f"resource type {resource.resource_type} {resource.resource_name!r}: "
                    f"this broker describes topics and itself (broker {self.broker_id})"
                )
            results.append(
                {
                    "error_code": code,
                    "error_message": message,
                    "resource_type": resource.resource_type,
                    "resource_name": resource.resource_name,
                    "configs": [
                        {
                            "name": e.name,
                            "value": e.value,
                            "read_only": e.read_only,
                            "config_source": e.source,
                            "is_sensitive": False,
                            "synonyms": [],
                        }
                        for e in entries
                    ],
                }
            )
        return {"results": results}
