"""Reading the typed znodes: one set of rules for what a ``get`` of a partition state, a
broker registration or a committed consumer offset answered (docs/zookeeper.md).

No I/O. The asyncio session (:class:`proto.zk.kafka_zk_client.KafkaZkClient`, for the
broker, the controller and the client) and the tools' synchronous kazoo helpers
(:mod:`proto.zk.sync_client`, for chaos, deploy, bench and tests) both send the ``get``
requests and hand the answers here, so each znode's path, "absent" rule, decoding and
version are written once and the two cannot drift.

An answer (:data:`GetAnswer`) is kazoo's ``(data, stat)`` or the ZooKeeper error answered, as
an exception instance (the form kazoo's pipelined and asynchronous calls deliver). The rules:

- **absent**: ``NoNodeError``; the znode does not exist (None, or left out of a batch);
- **malformed**: the data does not decode; :class:`~proto.zk.znodes.ZkDataError` naming the
  znode's path (raised by a single read, collected in :attr:`ReadBatch.malformed`);
- any other error answer is raised as it is.

Whether a malformed znode stops the caller is the caller's policy (the controller logs one
bad partition state and loads the rest), except for a committed consumer offset, whose one
behaviour is stated at :func:`consumer_offset_read`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from kazoo.exceptions import NoNodeError

from proto.topic_partition import TopicPartition, topic_name_problem
from proto.zk.znodes import (
    CLUSTER_ID_PATH,
    BrokerRegistration,
    CommittedOffset,
    PartitionState,
    ZkDataError,
    broker_path,
    consumer_offset_path,
    consumer_offsets_path,
    decode_broker_registration,
    decode_cluster_id,
    decode_committed_offset,
    decode_consumer_offset,
    decode_partition_state,
    partition_state_path,
)

__all__ = [
    "GetAnswer",
    "ReadBatch",
    "RegisteredBroker",
    "ZnodeRead",
    "broker_ids",
    "cluster_id_read",
    "committed_offset_read",
    "consumer_offset_partitions",
    "consumer_offset_read",
    "consumer_offset_topics",
    "decode_znode",
    "partition_state_read",
    "read_batch",
    "registered_broker_read",
]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")

GetAnswer = tuple[bytes, Any] | BaseException
"""What ZooKeeper answered a ``get``: ``(data, stat)``, or its error as an exception."""


@dataclass(frozen=True, slots=True)
class ZnodeRead(Generic[T]):
    """One typed znode: where it is, and how its data and stat decode."""

    path: str
    decode: Callable[[bytes, Any], T]
    """``(data, stat) -> value``; raises ZkDataError for data that is not what belongs there."""

    def value(self, answer: GetAnswer) -> T | None:
        """The decoded value of ``answer``; None if the znode is absent. Raises ZkDataError
        naming the path if it is malformed, and any other error answer as it is."""
        if isinstance(answer, NoNodeError):
            return None
        if isinstance(answer, BaseException):
            raise answer
        data, stat = answer
        return decode_znode(self.path, lambda raw: self.decode(raw, stat), bytes(data))


def decode_znode(path: str, decode: Callable[[bytes], T], data: bytes) -> T:
    """``decode(data)``, its ZkDataError re-raised with the znode's path in the message."""
    try:
        return decode(data)
    except ZkDataError as e:
        raise ZkDataError(f"znode {path}: {e}") from None


@dataclass(frozen=True, slots=True)
class ReadBatch(Generic[K, V]):
    """The typed znodes of many keys (partitions, broker ids), read together.

    A key whose znode is absent is in neither :attr:`found` nor :attr:`malformed`.
    """

    found: dict[K, V] = field(default_factory=dict)
    malformed: dict[K, ZkDataError] = field(default_factory=dict)
    """Keys whose znode exists but does not decode; each error names the znode."""
    ignored: list[str] = field(default_factory=list)
    """Children of a listed parent that name no key (an illegal topic name, a child that
    is not a number): why each was left out, for a tool to show."""

    def require(self) -> dict[K, V]:
        """:attr:`found`, or the first malformed znode's ZkDataError (for a caller that
        cannot go on without every value)."""
        for error in self.malformed.values():
            raise error
        return self.found


def read_batch(
    reads: Mapping[K, ZnodeRead[V]], answers: Sequence[GetAnswer], ignored: Iterable[str] = ()
) -> ReadBatch[K, V]:
    """The batch of ``reads`` (in their order) from the ``answers`` to their ``get``\\ s, in
    the same order. Error answers other than NoNode are raised."""
    batch: ReadBatch[K, V] = ReadBatch(ignored=list(ignored))
    for (key, read), answer in zip(reads.items(), answers, strict=True):
        try:
            value = read.value(answer)
        except ZkDataError as e:
            batch.malformed[key] = e
            continue
        if value is not None:
            batch.found[key] = value
    return batch


# -- /brokers/topics/<t>/partitions/<p>/state ------------------------------------------------


def partition_state_read(tp: TopicPartition) -> ZnodeRead[PartitionState]:
    """The partition's state znode, with its ``stat.version`` (the expected version of the
    next conditional update)."""
    return ZnodeRead(
        partition_state_path(tp),
        lambda data, stat: PartitionState.from_data(
            decode_partition_state(data), int(stat.version)
        ),
    )


# -- /brokers/ids ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RegisteredBroker:
    """A live broker's ``/brokers/ids/<id>`` as read: its registration and broker epoch."""

    registration: BrokerRegistration
    """The content of ``/brokers/ids/<id>``."""
    broker_epoch: int
    """The registration znode's czxid (KIP-380): it grows when the broker registers again,
    so the controller can tell a bounced broker from one that stayed."""

    @property
    def host(self) -> str:
        return self.registration.host

    @property
    def port(self) -> int:
        return self.registration.port

    @property
    def kafka_endpoint(self) -> tuple[str, int] | None:
        return self.registration.kafka_endpoint


def broker_ids(children: Iterable[str]) -> tuple[list[int], list[str]]:
    """The broker ids among the children of ``/brokers/ids``, sorted, and why each other
    child was left out (anything a stranger created there)."""
    ids: list[int] = []
    ignored: list[str] = []
    for child in sorted(children):
        if child.isascii() and child.isdigit():
            ids.append(int(child))
        else:
            ignored.append(f"ignoring broker znode /brokers/ids/{child!r}: not an id")
    return sorted(ids), ignored


def registered_broker_read(broker_id: int) -> ZnodeRead[RegisteredBroker]:
    """``/brokers/ids/<id>``: the registration with its czxid (the broker epoch)."""
    return ZnodeRead(
        broker_path(broker_id),
        lambda data, stat: RegisteredBroker(decode_broker_registration(data), int(stat.czxid)),
    )


# -- /cluster/id -----------------------------------------------------------------------------


def cluster_id_read() -> ZnodeRead[str]:
    """``/cluster/id``: the cluster's id, made by the first broker that started."""
    return ZnodeRead(CLUSTER_ID_PATH, lambda data, _: decode_cluster_id(data))


# -- /consumers/<g>/offsets/<t>/<p> ----------------------------------------------------------


def consumer_offset_read(group: str, tp: TopicPartition) -> ZnodeRead[int]:
    """The group's committed offset of ``tp``: the next offset the group will read, as
    decimal text (Kafka's ZooKeeper consumer layout), or JSON with the commit's metadata
    string (:func:`~proto.zk.znodes.encode_consumer_offset`).

    The one behaviour for a malformed offset, everywhere (docs/zookeeper.md): a znode that
    does not hold a decimal integer >= 0 is an error for that partition, never "no
    committed offset", which would let ``auto.offset.reset`` silently skip or replay it.
    A consumer needing it fails, the broker answers OffsetFetch for it with an error, and
    ``consumer-groups --describe`` warns and shows no current offset; a reset overwrites it.
    """
    return ZnodeRead(consumer_offset_path(group, tp), lambda data, _: decode_consumer_offset(data))


def committed_offset_read(group: str, tp: TopicPartition) -> ZnodeRead[CommittedOffset]:
    """:func:`consumer_offset_read` with the commit's metadata string and time (the znode's
    mtime: every commit sets the znode, so it is when the offset was last committed)."""
    return ZnodeRead(
        consumer_offset_path(group, tp),
        lambda data, stat: decode_committed_offset(data, int(stat.mtime)),
    )


def consumer_offset_topics(group: str, children: Iterable[str]) -> tuple[list[str], list[str]]:
    """The topics among the children of ``/consumers/<g>/offsets``, sorted, and why each
    other child (an illegal topic name) was left out."""
    parent = consumer_offsets_path(group)
    topics: list[str] = []
    ignored: list[str] = []
    for topic in sorted(children):
        problem = topic_name_problem(topic)
        if problem is None:
            topics.append(topic)
        else:
            ignored.append(f"ignoring znode {parent}/{topic!r}: illegal name: {problem}")
    return topics, ignored


def consumer_offset_partitions(
    group: str, topic: str, children: Iterable[str]
) -> tuple[list[TopicPartition], list[str]]:
    """The partitions among the children of ``/consumers/<g>/offsets/<t>``, sorted, and why
    each other child (not a partition number) was left out."""
    parent = consumer_offsets_path(group, topic)
    tps: list[TopicPartition] = []
    ignored: list[str] = []
    for child in sorted(children):
        if child.isascii() and child.isdigit():
            tps.append(TopicPartition(topic, int(child)))
        else:
            ignored.append(f"ignoring znode {parent}/{child!r}: not a partition")
    return sorted(tps), ignored
