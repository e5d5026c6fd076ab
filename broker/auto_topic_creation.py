"""Auto topic creation, below both front doors (Kafka 2.8's ``AutoTopicCreationManager``).

A Metadata request that names topics this broker does not know, and allows their creation
(Kafka's ``allow_auto_topic_creation``; the gRPC MetadataRequest has the same field), creates
them when ``auto.create.topics.enable`` is on, with ``num.partitions`` and
``default.replication.factor``. The topics are written by CreateTopics' own code (the
broker's topic admin, handed in by the server as :data:`TopicWriter`, so that this module
needs neither listener): ``/brokers/topics/<t>``, which the controller watches. Nothing
waits for the controller: the answer for such a topic is LEADER_NOT_AVAILABLE, and the
client asks again until the controller has elected leaders and told this broker, as
Kafka's clients do.

Several brokers (or one broker's several connections) may create the same topic at once:
the first write of ``/brokers/topics/<t>`` wins, the others see TOPIC_ALREADY_EXISTS, which
is the same answer, LEADER_NOT_AVAILABLE. While one request of this broker is creating a
topic, another naming it is answered UNKNOWN_TOPIC_OR_PARTITION, as Kafka's in-flight set
answers; both are retriable.

A topic that cannot be created is answered with why: INVALID_TOPIC for an illegal name,
INVALID_REPLICATION_FACTOR when fewer brokers are alive than ``default.replication.factor``,
UNKNOWN_TOPIC_OR_PARTITION when creation is off or not allowed by the request. Kafka's
internal topics (``__consumer_offsets``, ``__transaction_state``) are never created here:
their coordinators make them, with their own settings, when a client first looks for a
coordinator; until then they are answered as any unknown topic.

Who may create: any client that may send Metadata. Kafka asks its authorizer for CREATE on
the cluster or the topic; minibroker has no topic ACLs and, with TLS, leaves every request
but the brokers' own open (Kafka's ``allow.everyone.if.no.acl.found=true``), which allows it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

from proto.config.broker_config import BrokerConfig
from proto.topic_partition import INTERNAL_TOPICS, topic_name_problem
from proto.wire import minibroker_pb2 as pb

logger = logging.getLogger(__name__)

__all__ = [
    "AutoTopicCreator",
    "TopicWriter",
    "metadata_error_of_create",
    "refusal_before_create",
]

TOPIC_ALREADY_EXISTS = 36


TopicWriter = Callable[[Sequence[str]], Awaitable[Mapping[str, tuple[int, str | None]]]]
"""Writes the named topics with the broker's defaults (partitions and replication factor
-1), without waiting for leaders: topic -> (CreateTopics error code, message)."""


def refusal_before_create(name: str, allowed: bool) -> int | None:
    """The Metadata error of a missing topic that is not to be created, or None if it may
    be: INVALID_TOPIC for an illegal name (whether creation is allowed or not, as Kafka
    validates it first), UNKNOWN_TOPIC_OR_PARTITION when creation is not ``allowed`` (the
    request's flag and ``auto.create.topics.enable``) or the name is an internal topic's."""
    if topic_name_problem(name) is not None:
        return pb.INVALID_TOPIC
    if not allowed or name in INTERNAL_TOPICS:
        return pb.UNKNOWN_TOPIC_OR_PARTITION
    return None


def metadata_error_of_create(code: int) -> int:
    """A CreateTopics outcome as the Metadata answer for the topic: created, or created
    meanwhile by another broker or request (TOPIC_ALREADY_EXISTS), or not known to be
    written because ZooKeeper did not answer in time (REQUEST_TIMED_OUT; the next Metadata
    request tries again): LEADER_NOT_AVAILABLE, the retriable "not ready yet" of Kafka's
    clients. Anything else (INVALID_REPLICATION_FACTOR, INVALID_TOPIC, ...) as it is."""
    if code in (pb.NONE, TOPIC_ALREADY_EXISTS, pb.REQUEST_TIMED_OUT):
        return pb.LEADER_NOT_AVAILABLE
    return code


class AutoTopicCreator:
    """Creates the missing topics of Metadata requests on both listeners."""

    def __init__(self, config: BrokerConfig, write: TopicWriter) -> None:
        self.config = config
        self._write = write
        self._in_flight: set[str] = set()

    @property
    def enabled(self) -> bool:
        """``auto.create.topics.enable``."""
        return self.config.auto_create_topics_enable

    async def answer_missing(self, names: Sequence[str], allowed: bool) -> dict[str, int]:
        """The Metadata error code of each of ``names``, topics this broker's metadata does
        not hold, creating those that may be created. ``allowed``: the request's
        ``allow_auto_topic_creation``."""
        answers: dict[str, int] = {}
        creatable: list[str] = []
        for name in dict.fromkeys(names):
            refusal = refusal_before_create(name, allowed and self.enabled)
            if refusal is None and name in self._in_flight:
                refusal = pb.UNKNOWN_TOPIC_OR_PARTITION
            if refusal is not None:
                answers[name] = refusal
            else:
                creatable.append(name)
        if not creatable:
            return answers
        self._in_flight.update(creatable)
        try:
            outcomes = await self._write(creatable)
        except Exception:
            logger.exception(
                "event=auto_topic_creation_failed broker=%d topics=%s",
                self.config.broker_id,
                ",".join(creatable),
            )
            outcomes = {}
        finally:
            self._in_flight.difference_update(creatable)
        for name in creatable:
            code, message = outcomes.get(name, (pb.UNKNOWN_SERVER_ERROR, "no outcome"))
            answers[name] = metadata_error_of_create(code)
            if code == pb.NONE:
                logger.info(
                    "event=topic_auto_created broker=%d topic=%s partitions=%d "
                    "replication_factor=%d",
                    self.config.broker_id,
                    name,
                    self.config.num_partitions,
                    self.config.default_replication_factor,
                )
            elif answers[name] != pb.LEADER_NOT_AVAILABLE:
                logger.warning(
                    "event=topic_auto_create_refused broker=%d topic=%s error_code=%d message=%s",
                    self.config.broker_id,
                    name,
                    code,
                    message,
                )
        return answers
