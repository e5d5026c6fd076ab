"""The admin writes that change a topic's partitions, as Kafka 2.x's ``AdminZkClient`` and
``ZkAdminManager`` make them: shared by ``minibroker topics alter`` (:mod:`client.admin`)
and the Kafka listener's CreatePartitions, AlterPartitionReassignments and ElectLeaders
(:mod:`broker.kafka_listener.partition_admin`), so both front doors write the same znodes
with the same checks, and the controller does the rest.

- add partitions: the topic's extended assignment in ``/brokers/topics/<t>``, written with
  a conditional update (a concurrent change is decided again, never overwritten);
- reassign: the targets merged into ``/admin/reassign_partitions`` (the controller
  watches it and removes it when every reassignment in it is done); a cancellation is a
  target equal to the original replicas the topic znode keeps while a reassignment runs
  (its version 2 ``adding_replicas``/``removing_replicas``), and the running
  reassignments are read from there too;
- preferred leaders: ``/admin/preferred_replica_election`` (the controller elects and
  deletes it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from proto.errors import BrokerResponseError, InvalidTopicError, UnknownTopicOrPartitionError
from proto.topic_partition import TopicPartition, topic_name_problem
from proto.wire.minibroker_pb2 import ErrorCode
from proto.zk import znodes
from proto.zk.session import ZooKeeperClient

__all__ = [
    "add_partitions",
    "read_ongoing_reassignments",
    "read_reassignments",
    "read_topic_assignment",
    "read_topic_assignment_and_version",
    "request_preferred_replica_election",
    "request_reassignments",
]

logger = logging.getLogger(__name__)

_CONDITIONAL_WRITE_ATTEMPTS = 10
_POLL_S = 0.05

NewPartitions = Callable[[dict[int, list[int]]], dict[int, list[int]]]
"""Existing assignment -> the added partitions' replicas (raises a BrokerResponseError)."""


async def add_partitions(
    zk: ZooKeeperClient, topic: str, new_partitions: NewPartitions, *, validate_only: bool
) -> dict[int, list[int]]:
    """Grow ``topic`` by what ``new_partitions`` decides from its current assignment
    (:func:`proto.replica_assignment.assign_new_partitions`) and return the added
    partitions' replicas; with ``validate_only`` nothing is written.

    Raises UnknownTopicOrPartitionError (no such topic), InvalidTopicError (queued for
    deletion, Kafka's "The topic is queued for deletion."), REASSIGNMENT_IN_PROGRESS (a
    partition of the topic is being reassigned: ``ZkAdminManager`` refuses to race the
    controller's writes of the same znode), whatever ``new_partitions`` raises, and
    BrokerResponseError(INVALID_REQUEST) if the topic keeps changing under the write.
    """
    path = znodes.topic_path(topic)
    for _ in range(_CONDITIONAL_WRITE_ATTEMPTS):
        try:
            data, stat = await zk.request("get", path)
        except NoNodeError:
            raise UnknownTopicOrPartitionError(f"The topic '{topic}' does not exist.") from None
        if await zk.request("exists", znodes.delete_topic_path(topic)) is not None:
            raise InvalidTopicError("The topic is queued for deletion.")
        full = znodes.decode_topic_replica_assignment(data)
        existing = {p: list(a.replicas) for p, a in full.items()}
        moving = any(a.is_being_reassigned for a in full.values()) or any(
            tp.topic == topic and existing.get(tp.partition) != target
            for tp, target in (await read_reassignments(zk)).items()
        )
        if moving:
            raise BrokerResponseError(
                f"A partition reassignment is in progress for the topic '{topic}'.",
                code=ErrorCode.REASSIGNMENT_IN_PROGRESS,
            )
        added = new_partitions(existing)
        if validate_only:
            return added
        grown = znodes.encode_topic_assignment({**full, **added})
        try:
            await zk.request("set", path, grown, stat.version)
        except BadVersionError:
            continue  # changed since we read it: decide again on the new content
        except NoNodeError:
            raise UnknownTopicOrPartitionError(f"The topic '{topic}' does not exist.") from None
        return added
    raise BrokerResponseError(
        f"topic '{topic}' kept changing while partitions were added; retry",
        code=ErrorCode.INVALID_REQUEST,
    )


async def read_topic_assignment(
    zk: ZooKeeperClient, topic: str
) -> dict[int, znodes.ReplicaAssignment] | None:
    """``/brokers/topics/<t>`` with each partition's adding and removing replicas; None if
    the topic does not exist. Raises ZkDataError for a malformed znode."""
    read = await read_topic_assignment_and_version(zk, topic)
    return None if read is None else read[0]


async def read_topic_assignment_and_version(
    zk: ZooKeeperClient, topic: str
) -> tuple[dict[int, znodes.ReplicaAssignment], int] | None:
    """:func:`read_topic_assignment` with the znode's zkVersion."""
    try:
        data, stat = await zk.request("get", znodes.topic_path(topic))
    except NoNodeError:
        return None
    return znodes.decode_topic_replica_assignment(data), int(stat.version)


async def read_ongoing_reassignments(
    zk: ZooKeeperClient, topics: Iterable[str] | None = None
) -> dict[TopicPartition, znodes.ReplicaAssignment]:
    """The partitions of ``topics`` (None: every topic) whose topic znode has adding or
    removing replicas: the reassignments the controller is carrying out, exactly as it
    recorded them (Kafka's ``ListPartitionReassignments``). A topic whose name or znode
    is malformed is left out (logged): it cannot be reassigned either."""
    if topics is None:
        try:
            names = await zk.request("get_children", znodes.BROKER_TOPICS_PATH)
        except NoNodeError:
            names = []
    else:
        names = list(topics)
    result: dict[TopicPartition, znodes.ReplicaAssignment] = {}
    for topic in sorted(set(names)):
        if topic_name_problem(topic) is not None:
            continue
        try:
            assignment = await read_topic_assignment(zk, topic)
        except znodes.ZkDataError as err:
            logger.warning("event=bad_topic_assignment topic=%s error=%s", topic, err)
            continue
        for partition, full in (assignment or {}).items():
            if full.is_being_reassigned:
                result[TopicPartition(topic, partition)] = full
    return result


async def read_reassignments(zk: ZooKeeperClient) -> dict[TopicPartition, list[int]]:
    """The targets in ``/admin/reassign_partitions`` (empty if none). Partitions already
    moved stay in it until the last one is done; compare with the topic's assignment."""
    try:
        data, _ = await zk.request("get", znodes.REASSIGN_PARTITIONS_PATH)
    except NoNodeError:
        return {}
    return znodes.decode_reassign_partitions(data)


async def request_reassignments(
    zk: ZooKeeperClient,
    targets: Mapping[TopicPartition, Iterable[int]],
    *,
    unless_changed: Mapping[str, int] | None = None,
) -> bool:
    """Add ``targets`` to ``/admin/reassign_partitions`` (a newer target for a partition
    replaces the older one, as in Kafka), created if absent, else updated conditionally.

    ``unless_changed`` maps topics to the zkVersion of ``/brokers/topics/<t>`` the targets
    were decided from: the write is one multi-op with a check of each, and nothing is
    written (False) if one has changed, so a cancellation built from the original
    replicas read there cannot cross the controller completing the move."""
    new = {tp: list(replicas) for tp, replicas in targets.items()}
    checks = sorted((unless_changed or {}).items())
    path = znodes.REASSIGN_PARTITIONS_PATH
    for _ in range(_CONDITIONAL_WRITE_ATTEMPTS):
        try:
            data, stat = await zk.request("get", path)
        except NoNodeError:
            data, stat = None, None
        merged = new if data is None else {**znodes.decode_reassign_partitions(data), **new}
        content = znodes.encode_reassign_partitions(merged)

        def build(transaction: Any, content: bytes = content, stat: Any = stat) -> None:
            for topic, version in checks:
                transaction.check(znodes.topic_path(topic), version)
            if stat is None:
                transaction.create(path, content)
            else:
                transaction.set_data(path, content, stat.version)

        results = await zk.multi("request_reassignments", build)
        if not any(isinstance(r, BaseException) for r in results):
            return True
        if any(isinstance(r, (BadVersionError, NoNodeError)) for r in results[: len(checks)]):
            return False  # a topic changed: the caller decides again
        if stat is None and isinstance(results[-1], NoNodeError):
            await zk.request("ensure_path", path.rpartition("/")[0])  # no /admin yet
        # /admin/reassign_partitions changed (or appeared, or went) meanwhile: merge again
    raise BrokerResponseError(
        "/admin/reassign_partitions kept changing while the reassignment was added; retry",
        code=ErrorCode.INVALID_REQUEST,
    )


async def request_preferred_replica_election(
    zk: ZooKeeperClient, partitions: Iterable[TopicPartition], timeout_s: float
) -> bool:
    """Create ``/admin/preferred_replica_election`` naming ``partitions``. While another
    request is pending (the znode exists until the controller has acted on it), wait for
    it to go, up to ``timeout_s``; returns False if it never went."""
    data = znodes.encode_preferred_replica_election(sorted(set(partitions)))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            await zk.request("create", znodes.PREFERRED_REPLICA_ELECTION_PATH, data, makepath=True)
        except NodeExistsError:
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(_POLL_S)
            continue
        return True
