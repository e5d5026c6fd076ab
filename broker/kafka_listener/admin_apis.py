"""The Kafka listener's admin APIs: CreateTopics and DeleteTopics, over
:mod:`broker.topic_admin` (the controller's ZooKeeper paths, as Kafka
2.x's brokers write them). Any broker answers, as in Kafka 2.x; they do not need the controller."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from broker.kafka_listener.messages import Tree
from broker.kafka_listener.wire_request import Answer, KafkaRequest, ms, session_of
from broker.request_handlers import denied_topics
from broker.security.acl_authorizer import AclAuthorizer
from broker.topic_admin import NewTopic, TopicAdmin
from proto.wire import minibroker_pb2 as pb
from proto.zk.acl_bindings import AclOperation, ResourceType

__all__ = ["ADMIN_VERSIONS", "AdminApis"]

CREATE_TOPICS, DELETE_TOPICS = 19, 20
ADMIN_VERSIONS: dict[int, tuple[int, int]] = {
    CREATE_TOPICS: (2, 5),
    DELETE_TOPICS: (1, 5),
}
"""The highs stop before topic ids (CreateTopics 7, DeleteTopics 6)."""

INVALID_REQUEST = 42


class AdminApis:
    """The admin handlers, by API key."""

    def __init__(
        self, admin: TopicAdmin, broker_id: int, authorizer: AclAuthorizer | None = None
    ) -> None:
        self.admin = admin
        self.authorizer = authorizer or AclAuthorizer(broker_id, None, enabled=False)
        """CreateTopics needs Create on the Cluster or the topic, DeleteTopics Delete."""
        self.broker_id = broker_id
        self.handlers: dict[int, Callable[[KafkaRequest], Awaitable[Answer]]] = {
            CREATE_TOPICS: self.create_topics,
            DELETE_TOPICS: self.delete_topics,
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
                {c.name: c.value for c in t.configs},
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
        session = session_of(request)
        denied: set[str] = set()
        if not self.authorizer.authorize(
            session, AclOperation.CREATE, ResourceType.CLUSTER, log_denied=False
        ):
            denied = denied_topics(self.authorizer, session, AclOperation.CREATE, names)
        outcomes = await self.admin.create_topics(
            [t for t in topics if t.name not in denied],
            ms(body.timeout),
            getattr(body, "validate_only", False),
        )
        refused: list[Tree] = [
            {"name": n, "error_code": pb.TOPIC_AUTHORIZATION_FAILED, "error_message": None}
            for n in names
            if n in denied
        ]
        return {
            "topics": refused
            + [
                {
                    "name": name,
                    "error_code": o.error_code,
                    "error_message": o.error_message,
                    "num_partitions": o.num_partitions,
                    "replication_factor": o.replication_factor,
                    "configs": None
                    if o.configs is None
                    else [
                        {
                            "name": c.name,
                            "value": c.value,
                            "read_only": c.read_only,
                            "config_source": int(c.source),
                            "is_sensitive": c.sensitive,
                        }
                        for c in o.configs
                    ],
                }
                for name, o in outcomes.items()
            ]
        }

    async def delete_topics(self, request: KafkaRequest) -> Answer:
        return self._delete_topics(request)

    async def _delete_topics(self, request: KafkaRequest) -> Tree:
        body = request.body
        names = list(dict.fromkeys(body.topic_names))
        denied = denied_topics(self.authorizer, session_of(request), AclOperation.DELETE, names)
        codes: dict[str, int] = {n: pb.TOPIC_AUTHORIZATION_FAILED for n in names if n in denied}
        codes.update(
            await self.admin.delete_topics([n for n in names if n not in denied], ms(body.timeout))
        )
        return {
            "responses": [
                {"name": name, "error_code": code, "error_message": None}
                for name, code in codes.items()
            ]
        }
