"""What a consumer group is at its coordinator, and which broker coordinates it: the
states, the members and the answers of :mod:`broker.coordinator.group_coordinator` (Kafka's
``GroupMetadata`` and ``MemberMetadata``), and the placement of a group (see that module's
docstring)."""

from __future__ import annotations

import asyncio
import enum
import hashlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from broker.metadata_cache import MetadataCache
from proto.coordinator.group_records import GroupMetadataValue, StoredMember
from proto.coordinator.placement import partition_for
from proto.topic_partition import OFFSETS_TOPIC, TopicPartition

__all__ = [
    "COORDINATOR_NOT_AVAILABLE",
    "GROUP_ID_NOT_FOUND",
    "GROUP_MAX_SIZE_REACHED",
    "ILLEGAL_GENERATION",
    "INCONSISTENT_GROUP_PROTOCOL",
    "INVALID_REQUEST",
    "INVALID_SESSION_TIMEOUT",
    "NON_EMPTY_GROUP",
    "NOT_COORDINATOR",
    "REBALANCE_IN_PROGRESS",
    "UNKNOWN_MEMBER_ID",
    "GroupDescription",
    "GroupMetadata",
    "GroupOverview",
    "GroupState",
    "JoinResult",
    "MemberDescription",
    "MemberMetadata",
    "SyncResult",
    "cancel_waiter",
    "coordinator_for",
    "coordinator_of",
    "restored",
    "stored_value",
]

UNKNOWN_MEMBER_ID = 25
ILLEGAL_GENERATION = 22
REBALANCE_IN_PROGRESS = 27
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_SESSION_TIMEOUT = 26
NOT_COORDINATOR = 16
COORDINATOR_NOT_AVAILABLE = 15
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
GROUP_MAX_SIZE_REACHED = 81
INVALID_REQUEST = 42


def coordinator_for(group_id: str, broker_ids: Iterable[int]) -> int | None:
    """The broker that coordinates ``group_id`` among ``broker_ids`` (rendezvous hashing:
    the highest hash of group and broker wins), None if there is none."""
    best: tuple[bytes, int] | None = None
    for broker_id in broker_ids:
        digest = hashlib.blake2b(f"{group_id}\0{broker_id}".encode(), digest_size=8).digest()
        if best is None or (digest, broker_id) > best:
            best = (digest, broker_id)
    return None if best is None else best[1]


def coordinator_of(group_id: str, metadata_cache: MetadataCache) -> int | None:
    """The coordinator of ``group_id`` by this broker's metadata: the leader of its
    partition of ``__consumer_offsets`` (None while it has none); before that topic exists,
    :func:`coordinator_for` over the live brokers that run a Kafka listener, or over every
    live broker where none does (a TLS cluster: its ZooKeeper groups are still deleted at
    a coordinator)."""
    count = metadata_cache.partition_count(OFFSETS_TOPIC)
    if count:
        info = metadata_cache.partition(
            TopicPartition(OFFSETS_TOPIC, partition_for(group_id, count))
        )
        if info is None or info.leader < 0:
            return None
        return info.leader
    brokers = [b.broker_id for b in metadata_cache.brokers() if b.kafka_endpoint]
    return coordinator_for(group_id, brokers or [b.broker_id for b in metadata_cache.brokers()])


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"
    """No such group here (Kafka's answer for an unknown group), or a group being deleted
    (:meth:`GroupCoordinator.begin_delete`): held Dead until its offsets are gone."""


@dataclass(frozen=True)
class JoinResult:
    """A JoinGroup's answer: the leader gets every member's metadata, the others none."""

    error_code: int
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    """(member id, group instance id, metadata of the chosen protocol)."""


@dataclass(frozen=True)
class SyncResult:
    """A SyncGroup's answer: the member's assignment."""

    error_code: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True)
class GroupOverview:
    """One group of a ListGroups answer."""

    group_id: str
    protocol_type: str
    state: GroupState


@dataclass(frozen=True)
class MemberDescription:
    """One member of a described group (Kafka's ``DescribedGroupMember``)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    """The address its requests come from, as Kafka prints it (``/127.0.0.1``)."""
    metadata: bytes
    """Its metadata for the group's protocol; empty unless the group is Stable (Kafka's
    ``summaryNoMetadata`` while a rebalance is under way)."""
    assignment: bytes
    """Its assignment from the leader; empty unless the group is Stable."""
    partitions: tuple[TopicPartition, ...] | None
    """``assignment`` decoded, for the consumer protocol; None for another protocol type or
    bytes that do not decode."""


@dataclass(frozen=True)
class GroupDescription:
    """A group as its coordinator holds it (Kafka's ``DescribedGroup``)."""

    group_id: str
    state: GroupState
    protocol_type: str
    protocol_name: str
    """The protocol the members chose: for consumers, the assignor (``range``, ...)."""
    members: tuple[MemberDescription, ...]


@dataclass
class MemberMetadata:
    """A member as its coordinator holds it (Kafka's ``MemberMetadata``)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    last_heard: float
    """When the coordinator last heard from it (join, sync, heartbeat, commit)."""
    assignment: bytes = b""
    joining: asyncio.Future[JoinResult] | None = None
    """Set while its JoinGroup waits for the join phase to end."""
    syncing: asyncio.Future[SyncResult] | None = None
    """Set while its SyncGroup waits for the leader's assignment."""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_bytes(self) -> int:
        """The size of its protocol metadata, all protocols together."""
        return sum(len(metadata) for _, metadata in self.protocols)


@dataclass
class GroupMetadata:
    """A group as its coordinator holds it (Kafka's ``GroupMetadata``)."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    join_deadline: asyncio.TimerHandle | None = None
    delaying: bool = False
    """In the initial delay of an empty group's first rebalance
    (``group.initial.rebalance.delay.ms``), which lets more members arrive first."""


_T = TypeVar("_T")


def cancel_waiter(future: asyncio.Future[_T] | None, answer: _T) -> None:
    if future is not None and not future.done():
        future.set_result(answer)


def stored_value(group: GroupMetadata) -> GroupMetadataValue:
    """The group's generation as ``__consumer_offsets`` keeps it: each member's metadata
    for the chosen protocol and its assignment."""
    protocol = group.protocol_name or ""
    return GroupMetadataValue(
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        protocol=group.protocol_name,
        leader=group.leader_id,
        current_state_timestamp=int(time.time() * 1000),
        members=tuple(
            StoredMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                subscription=dict(m.protocols).get(protocol, b""),
                assignment=m.assignment,
            )
            for m in group.members.values()
        ),
    )


def restored(group_id: str, stored: GroupMetadataValue, now: float) -> GroupMetadata:
    """A group as its last stored generation left it, as Kafka's ``GroupMetadataManager``
    restores it: Stable with its members and their assignments (heard from ``now``, so
    those that heartbeat in time carry on in the same generation and those that do not
    are dropped and the others rebalance), or Empty."""
    group = GroupMetadata(
        group_id,
        state=GroupState.STABLE if stored.members else GroupState.EMPTY,
        generation_id=stored.generation,
        protocol_type=stored.protocol_type or None,
        protocol_name=stored.protocol if stored.members else None,
        leader_id=stored.leader if stored.members else None,
    )
    for m in stored.members:
        group.members[m.member_id] = MemberMetadata(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.session_timeout_ms,
            m.rebalance_timeout_ms,
            [(stored.protocol or "", m.subscription)],
            now,
            m.assignment,
        )
    return group
