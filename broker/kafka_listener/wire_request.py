"""What every Kafka listener handler shares: the decoded request, the answer it returns and
the way it asks for the connection to be closed (see :mod:`broker.kafka_listener.server`)."""

from __future__ import annotations

from collections.abc import Awaitable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

from broker.kafka_listener.messages import Tree
from broker.security.acl_authorizer import Session, host_of
from proto.errors import MinibrokerError
from proto.topic_partition import TopicPartition
from proto.transport.tls import ANONYMOUS_PRINCIPAL

__all__ = [
    "Answer",
    "CloseConnection",
    "KafkaRequest",
    "done",
    "epoch_or_none",
    "ms",
    "per_topic",
    "session_of",
]

Answer = Awaitable[Tree | None]
"""A handler's answer: the response as a tree, or None for a request Kafka does not
answer (``acks=0``); awaited by the connection's writer, in request order."""


class CloseConnection(MinibrokerError):
    """The connection must be closed once the answers before this one are written (Kafka
    closes it when an ``acks=0`` produce fails, the only way such a producer learns of it;
    and on a request it cannot make sense of)."""


@dataclass(frozen=True, slots=True)
class KafkaRequest:
    """One decoded request: its header's fields and its body, a kio dataclass."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    client_host: str = ""
    """The address the request came from, as Kafka prints it (``/127.0.0.1``)."""
    principal: str = ANONYMOUS_PRINCIPAL
    """Who the connection authenticated as (``User:alice``); ``User:ANONYMOUS`` on a
    listener that authenticates no one."""


def session_of(request: KafkaRequest) -> Session:
    """Who sent ``request`` and from where, as the authorizer asks (docs/security.md)."""
    return Session(request.principal, host_of(request.client_host))


def ms(value: object) -> int:
    """A kio ``timedelta`` field (or an int) in whole milliseconds."""
    if isinstance(value, int):
        return value
    return int(value.total_seconds() * 1000)  # type: ignore[attr-defined]


def epoch_or_none(epoch: int) -> int | None:
    """KIP-320's current leader epoch: -1 asks for no fencing."""
    return None if epoch < 0 else epoch


def done(tree: Tree | None) -> Coroutine[Any, Any, Tree | None]:
    """An answer already known when the handler's stage runs."""

    async def answer() -> Tree | None:
        return tree

    return answer()


def per_topic(
    answers: Iterable[tuple[TopicPartition, Tree]], name: str, children: str
) -> list[Tree]:
    """Partition answers as Kafka's responses nest them: one entry per topic (its name under
    ``name``, its partitions' answers under ``children``), in the order given."""
    topics: dict[str, list[Tree]] = {}
    for tp, answer in answers:
        topics.setdefault(tp.topic, []).append(answer)
    return [{name: topic, children: partitions} for topic, partitions in topics.items()]
