"""ListGroups, DescribeGroups, DeleteGroups and OffsetDelete (Kafka's ``GroupCoordinator``
``handleListGroups``, ``handleDescribeGroup``, ``handleDeleteGroups``,
``handleDeleteOffsets``), answered alike by the Kafka listener and the gRPC ``Broker``
service.

A group, to these APIs, is what Kafka's coordinator holds of it: the members the
:class:`~broker.coordinator.group_coordinator.GroupCoordinator` holds in memory and what
``__consumer_offsets`` holds (its last generation, its committed offsets), plus, for
minibroker's own ZooKeeper consumer groups, what ``/consumers/<g>`` holds. Each broker
answers for the groups it coordinates
(:func:`~broker.coordinator.group_coordinator.coordinator_of`), so listing every broker
lists every group once, as Kafka's admin clients do. The state of a group:

- the coordinator's state while it holds the group with members (Kafka's clients);
- **Stable** with protocol type ``""`` while the group has live members of minibroker's own
  ZooKeeper consumer (``/consumers/<g>/ids/<c>``): Kafka's tools then list it as a
  "simple" group (offsets without Kafka's coordination, as Kafka lists a group whose
  consumers only ``assign()``), and never delete its offsets from under it;
- **Empty** when only offsets remain (in the topic or in ZooKeeper), or a generation
  without members, as Kafka lists a group whose members left; its protocol type is the
  last generation's (``consumer``), or ``""`` for offsets alone;
- **Dead** when there is nothing at all (Kafka's answer for an unknown group).

Deleting a group or its offsets writes tombstones to ``__consumer_offsets`` and deletes
the ZooKeeper offsets too, so that nothing of it comes back from either. While the group's
partition is being read after a leadership change the answer is
COORDINATOR_LOAD_IN_PROGRESS; a ZooKeeper failure answers COORDINATOR_NOT_AVAILABLE; both
are retried by Kafka's clients.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from kazoo.exceptions import KazooException, NotEmptyError

from broker.coordinator.group_coordinator import (
    COORDINATOR_NOT_AVAILABLE,
    GROUP_ID_NOT_FOUND,
    NON_EMPTY_GROUP,
    NOT_COORDINATOR,
    GroupCoordinator,
    GroupDescription,
    GroupOverview,
    GroupState,
    MemberDescription,
    coordinator_of,
)
from broker.coordinator.group_metadata_manager import CommittedOffset
from broker.metadata_cache import MetadataCache
from proto.topic_partition import TopicPartition, topic_name_problem
from proto.wire import minibroker_pb2 as pb
from proto.zk.kafka_zk_client import KafkaZkClient
from proto.zk.session import ZkError
from proto.zk.znodes import ZkDataError, consumer_ids_path, decode_consumer_subscription

logger = logging.getLogger(__name__)

__all__ = [
    "COORDINATOR_NOT_AVAILABLE",
    "GROUP_ID_NOT_FOUND",
    "GROUP_SUBSCRIBED_TO_TOPIC",
    "INVALID_GROUP_ID",
    "NON_EMPTY_GROUP",
    "ZOOKEEPER_GROUP_PROTOCOL",
    "GroupAdmin",
    "OffsetDeletion",
    "OffsetsFetched",
]

INVALID_GROUP_ID = 24
GROUP_SUBSCRIBED_TO_TOPIC = 86
ZOOKEEPER_GROUP_PROTOCOL = "range"
"""The assignor of minibroker's ZooKeeper consumer (:mod:`client.group`), shown as the
protocol of a ZooKeeper group as ``consumer-groups --describe --state`` shows it."""

_ZK_FAILURES = (ZkError, KazooException)


@dataclass(frozen=True)
class OffsetDeletion:
    """An OffsetDelete's answer: a group error, or an error code per partition."""

    error_code: int
    partitions: dict[TopicPartition, int]


@dataclass(frozen=True)
class OffsetsFetched:
    """An OffsetFetch's answer: a group error, or the offsets found and the partitions
    whose stored offset is malformed (with why)."""

    error_code: int
    offsets: dict[TopicPartition, CommittedOffset]
    malformed: dict[TopicPartition, str]


class GroupAdmin:
    """The group APIs of one broker, over its coordinator and ZooKeeper session."""

    def __init__(
        self, coordinator: GroupCoordinator, metadata_cache: MetadataCache, zk: KafkaZkClient
    ) -> None:
        self.coordinator = coordinator
        self.metadata_cache = metadata_cache
        self.zk = zk
        self.broker_id = coordinator.broker_id

    def coordinates(self, group_id: str) -> bool:
        """Whether this broker coordinates the group: it leads and has loaded the group's
        partition of ``__consumer_offsets``; before that topic exists, whether the
        rendezvous placement of ZooKeeper groups names it."""
        store = self.coordinator.store
        if store is not None and store.topic_exists():
            return store.refusal(group_id) is None
        return coordinator_of(group_id, self.metadata_cache) == self.broker_id

    def refusal(self, group_id: str) -> int | None:
        """The error for a request about a group this broker must not answer, else None
        (Kafka's ``validateGroupStatus``): INVALID_GROUP_ID, NOT_COORDINATOR, or
        COORDINATOR_LOAD_IN_PROGRESS while its partition is read. A group that moved away
        is dropped here: its members, told NOT_COORDINATOR, find the new coordinator."""
        if topic_name_problem(group_id, "group") is not None:
            return INVALID_GROUP_ID
        store = self.coordinator.store
        if store is not None and store.topic_exists():
            code = store.refusal(group_id)
        else:
            code = None if self.coordinates(group_id) else NOT_COORDINATOR
        if code == NOT_COORDINATOR:
            self.coordinator.forget(group_id)
        return code

    # -- OffsetCommit, OffsetFetch -----------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        offsets: Mapping[TopicPartition, CommittedOffset],
    ) -> dict[TopicPartition, int]:
        """Kafka's ``handleCommitOffsets`` after the request's own checks (the partitions
        exist, the metadata fits): the group's generation is checked, then the commits are
        written, into ``__consumer_offsets`` (into ZooKeeper for a coordinator without a
        store: the state machine's unit tests). Each partition's error code."""
        code = self.refusal(group_id)
        if code is None:
            code = self.coordinator.check_commit(group_id, generation_id, member_id)
        if code != pb.NONE or not offsets:
            return dict.fromkeys(offsets, code)
        with self.coordinator.committing(group_id):
            store = self.coordinator.store
            if store is not None:
                return await store.store_offsets(group_id, offsets)
            try:
                await self.zk.commit_consumer_offsets(
                    group_id,
                    {tp: c.offset for tp, c in offsets.items()},
                    {tp: c.metadata for tp, c in offsets.items()},
                )
            except _ZK_FAILURES as err:
                self._log_failure("commit_offsets", group_id, err)
                return dict.fromkeys(offsets, COORDINATOR_NOT_AVAILABLE)
        return dict.fromkeys(offsets, pb.NONE)

    async def txn_commit_offsets(
        self,
        group_id: str,
        producer: tuple[int, int],
        generation_id: int,
        member_id: str,
        offsets: Mapping[TopicPartition, CommittedOffset],
    ) -> dict[TopicPartition, int]:
        """Kafka's ``handleTxnCommitOffsets`` after the request's own checks: the group's
        generation if given, then the commits written as ``producer``'s (id, epoch)
        transactional batch, applied when its transaction commits. Needs
        ``__consumer_offsets``: without it (a coordinator without a store) the answer is
        COORDINATOR_NOT_AVAILABLE. Each partition's error code."""
        code = self.refusal(group_id)
        if code is None:
            code = self.coordinator.check_txn_commit(group_id, generation_id, member_id)
        store = self.coordinator.store
        if code == pb.NONE and store is None:
            code = COORDINATOR_NOT_AVAILABLE
        if code != pb.NONE or store is None or not offsets:
            return dict.fromkeys(offsets, code)
        with self.coordinator.committing(group_id):
            return await store.store_txn_offsets(group_id, producer[0], producer[1], offsets)

    async def fetch_offsets(
        self, group_id: str, asked: Collection[TopicPartition] | None
    ) -> OffsetsFetched:
        """Kafka's ``handleFetchOffsets``: the group's committed offsets of ``asked`` (None:
        all it has). From ``__consumer_offsets``; what the group never committed there is
        read from ZooKeeper (offsets committed before the topic held them, and
        minibroker's own ZooKeeper groups'), until it commits anew. A malformed ZooKeeper
        offset is an error for its partition, never "no offset" (docs/zookeeper.md), which
        would make the client apply ``auto.offset.reset``."""
        refused = self.refusal(group_id)
        if refused is not None:
            return OffsetsFetched(refused, {}, {})
        store = self.coordinator.store
        committed = {} if store is None else store.committed(group_id)
        try:
            missing = None if asked is None else [tp for tp in asked if tp not in committed]
            batch = await self.zk.read_committed_offsets(group_id, missing)
        except _ZK_FAILURES as err:
            self._log_failure("fetch_offsets", group_id, err)
            return OffsetsFetched(COORDINATOR_NOT_AVAILABLE, {}, {})
        for tp, found in batch.found.items():
            if tp not in committed:
                committed[tp] = CommittedOffset(
                    found.offset,
                    metadata=found.metadata,
                    commit_timestamp_ms=found.commit_timestamp_ms,
                )
        malformed = {tp: str(e) for tp, e in batch.malformed.items() if tp not in committed}
        for tp, error in malformed.items():
            logger.warning(
                "event=unreadable_offset broker=%d group=%s tp=%s error=%r",
                self.broker_id,
                group_id,
                tp,
                error,
            )
        return OffsetsFetched(pb.NONE, committed, malformed)

    # -- ListGroups --------------------------------------------------------------------------

    async def list_groups(self, states: Collection[str] = ()) -> tuple[int, list[GroupOverview]]:
        """The groups this broker coordinates, by id (only those whose state is named in
        ``states``, KIP-518, if any are), with the error code of the listing."""
        held = {
            g.group_id: g for g in self.coordinator.list_groups() if self.coordinates(g.group_id)
        }
        store = self.coordinator.store
        in_topic = (
            {}
            if store is None
            else {g: store.stored_metadata(g) for g in store.groups if g not in held}
        )
        try:
            stored = [
                g
                for g in await self.zk.consumer_groups()
                if g not in held
                and g not in in_topic
                and topic_name_problem(g, "group") is None
                and self.coordinates(g)
            ]
            members = await asyncio.gather(*(self.zk.consumer_group_members(g) for g in stored))
        except _ZK_FAILURES as err:
            self._log_failure("list_groups", "*", err)
            return COORDINATOR_NOT_AVAILABLE, []
        overviews = list(held.values())
        for group_id, metadata in in_topic.items():
            # Offsets (or an empty generation) in __consumer_offsets, no member: Empty,
            # unless ZooKeeper consumers of minibroker's own kind read it now (below).
            protocol_type = "" if metadata is None else metadata.protocol_type
            overviews.append(GroupOverview(group_id, protocol_type, GroupState.EMPTY))
        for group_id, ids in zip(stored, members, strict=True):
            state = GroupState.STABLE if ids else GroupState.EMPTY
            overviews.append(GroupOverview(group_id, "", state))
        for overview in list(overviews):
            group_id = overview.group_id
            if overview.state is GroupState.EMPTY and group_id not in stored:
                # Held without members: live ZooKeeper members make it Stable.
                try:
                    ids = await self.zk.consumer_group_members(group_id)
                except _ZK_FAILURES as err:
                    self._log_failure("list_groups", group_id, err)
                    return COORDINATOR_NOT_AVAILABLE, []
                if ids:
                    overviews[overviews.index(overview)] = GroupOverview(
                        group_id, "", GroupState.STABLE
                    )
        wanted = set(states)
        chosen = [o for o in overviews if not wanted or o.state.value in wanted]
        return pb.NONE, sorted(chosen, key=lambda o: o.group_id)

    # -- DescribeGroups ----------------------------------------------------------------------

    async def describe_group(self, group_id: str) -> tuple[int, GroupDescription]:
        """The group as its coordinator knows it, with an error code (INVALID_GROUP_ID,
        NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE; then the description is Dead)."""
        dead = GroupDescription(group_id, GroupState.DEAD, "", "", ())
        refused = self.refusal(group_id)
        if refused is not None:
            return refused, dead
        try:
            return pb.NONE, await self._describe(group_id)
        except _ZK_FAILURES as err:
            self._log_failure("describe_group", group_id, err)
            return COORDINATOR_NOT_AVAILABLE, dead

    async def _describe(self, group_id: str) -> GroupDescription:
        [held] = self.coordinator.describe_groups([group_id])
        if held.state not in (GroupState.EMPTY, GroupState.DEAD):
            return held
        ids = await self.zk.consumer_group_members(group_id)
        if ids:
            members = tuple(MemberDescription(i, None, "", "", b"", b"", None) for i in ids)
            return GroupDescription(
                group_id, GroupState.STABLE, "", ZOOKEEPER_GROUP_PROTOCOL, members
            )
        store = self.coordinator.store
        metadata = None if store is None else store.stored_metadata(group_id)
        if (
            held.state is GroupState.EMPTY
            or (store is not None and store.holds(group_id))
            or await self._stored(group_id)
        ):
            protocol_type = held.protocol_type or (metadata.protocol_type if metadata else "")
            return GroupDescription(group_id, GroupState.EMPTY, protocol_type, "", ())
        return held

    async def _stored(self, group_id: str) -> bool:
        return group_id in await self.zk.consumer_groups()

    # -- DeleteGroups ------------------------------------------------------------------------

    async def delete_group(self, group_id: str) -> int:
        """Delete an empty group: its committed offsets (all of ``/consumers/<g>``) and what
        the coordinator holds of it. NON_EMPTY_GROUP while it has live members of either
        kind, GROUP_ID_NOT_FOUND if there is nothing to delete (or another deletion of it
        is under way).

        As Kafka's ``handleDeleteGroups``, the group is marked Dead first
        (:meth:`GroupCoordinator.begin_delete`): a JoinGroup or OffsetCommit arriving while
        the offsets are deleted is refused (retriable), and the commits checked before are
        written before the deletion starts, so none lands in a half-deleted group. A
        ZooKeeper consumer registering meanwhile is seen by the last check, or makes the
        deletion fail (NON_EMPTY_GROUP) on the znode it adds."""
        refused = self.refusal(group_id)
        if refused is not None:
            return refused
        try:
            described = await self._describe(group_id)
        except _ZK_FAILURES as err:
            self._log_failure("delete_group", group_id, err)
            return COORDINATOR_NOT_AVAILABLE
        if described.state is GroupState.DEAD:
            return GROUP_ID_NOT_FOUND
        if described.state is not GroupState.EMPTY:
            return NON_EMPTY_GROUP
        code = self.coordinator.begin_delete(group_id)
        if code != pb.NONE:
            return code
        try:
            await self.coordinator.commits_written(group_id)
            if await self.zk.consumer_group_members(group_id):
                return NON_EMPTY_GROUP
            store = self.coordinator.store
            if store is not None:
                code = await store.delete(group_id)
                if code != pb.NONE:
                    return code
            await self.zk.delete_consumer_group(group_id)
        except NotEmptyError:
            # A ZooKeeper member arrived while the group was being deleted.
            return NON_EMPTY_GROUP
        except _ZK_FAILURES as err:
            self._log_failure("delete_group", group_id, err)
            return COORDINATOR_NOT_AVAILABLE
        finally:
            self.coordinator.end_delete(group_id)
        logger.info("event=group_deleted broker=%d group=%s", self.broker_id, group_id)
        return pb.NONE

    # -- OffsetDelete ------------------------------------------------------------------------

    async def offset_delete(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> OffsetDeletion:
        """An OffsetDelete request as both doors answer it (Kafka's ``KafkaApis`` checks,
        then :meth:`delete_offsets`): a partition this broker's metadata does not know is
        UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC for an illegal name); a group error
        answers no partitions, as Kafka's ``getErrorResponse``."""
        codes: dict[TopicPartition, int] = {}
        known: list[TopicPartition] = []
        for tp in dict.fromkeys(partitions):
            if topic_name_problem(tp.topic) is not None:
                codes[tp] = pb.INVALID_TOPIC
            elif tp.partition < 0 or self.metadata_cache.partition(tp) is None:
                codes[tp] = pb.UNKNOWN_TOPIC_OR_PARTITION
            else:
                known.append(tp)
        result = await self.delete_offsets(group_id, known)
        if result.error_code != pb.NONE:
            return result
        return OffsetDeletion(pb.NONE, {**codes, **result.partitions})

    async def delete_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> OffsetDeletion:
        """Delete the group's committed offsets of ``partitions`` (Kafka's
        ``handleDeleteOffsets``): all of them while the group is Empty; while it has
        members, those of topics no member subscribes to, the others answered
        GROUP_SUBSCRIBED_TO_TOPIC. GROUP_ID_NOT_FOUND for a group that does not exist,
        NON_EMPTY_GROUP for an active group whose subscriptions are unknown (not the
        consumer protocol)."""
        wanted = list(dict.fromkeys(partitions))
        refused = self.refusal(group_id)
        if refused is not None:
            return OffsetDeletion(refused, {})
        if self.coordinator.deleting(group_id):
            return OffsetDeletion(GROUP_ID_NOT_FOUND, {})  # Kafka: the group is Dead
        try:
            described = await self._describe(group_id)
            if described.state is GroupState.DEAD:
                return OffsetDeletion(GROUP_ID_NOT_FOUND, {})
            subscribed: set[str] | None = set()
            if described.state is not GroupState.EMPTY:
                subscribed = await self._subscribed_topics(group_id, described)
            if subscribed is None:
                return OffsetDeletion(NON_EMPTY_GROUP, {})
            codes = {
                tp: GROUP_SUBSCRIBED_TO_TOPIC if tp.topic in subscribed else pb.NONE
                for tp in wanted
            }
            deleted = [tp for tp, code in codes.items() if code == pb.NONE]
            store = self.coordinator.store
            if store is not None:
                code = await store.delete(group_id, deleted)
                if code != pb.NONE:
                    return OffsetDeletion(code, {})
            await self.zk.delete_consumer_offsets(group_id, deleted)
        except _ZK_FAILURES as err:
            self._log_failure("delete_offsets", group_id, err)
            return OffsetDeletion(COORDINATOR_NOT_AVAILABLE, {})
        return OffsetDeletion(pb.NONE, codes)

    async def _subscribed_topics(
        self, group_id: str, described: GroupDescription
    ) -> set[str] | None:
        if described.protocol_type:
            return self.coordinator.subscribed_topics(group_id)
        # A ZooKeeper group: its members' subscriptions are in their ids znodes.
        topics: set[str] = set()
        for member in described.members:
            data = await self.zk.get_data_or_none(consumer_ids_path(group_id, member.member_id))
            if data is None:
                continue  # left meanwhile
            try:
                topics.update(decode_consumer_subscription(data))
            except ZkDataError:
                return None
        return topics

    def _log_failure(self, what: str, group_id: str, err: BaseException) -> None:
        logger.warning(
            "event=group_admin_failed broker=%d op=%s group=%s error=%r",
            self.broker_id,
            what,
            group_id,
            str(err),
        )
