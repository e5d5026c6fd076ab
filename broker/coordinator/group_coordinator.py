"""The group coordinator of the Kafka listener: Kafka's classic consumer-group protocol
(``GroupCoordinator`` and ``GroupMetadata``), for clients that ``subscribe()``.

A group moves through Kafka's states: EMPTY, PREPARING_REBALANCE (members (re)join; the
join phase ends when every known member has joined, or when the rebalance timeout drops
those that did not), COMPLETING_REBALANCE (a new generation: the leader, which got every
member's subscription, computes the assignment and sends it in its SyncGroup) and STABLE
(members heartbeat; a join, a leave or a missed session timeout starts a rebalance). The
coordinator only relays the members' protocol metadata and assignments as bytes: the
assignor runs in the clients, as in Kafka.

Which broker coordinates a group: the leader of the group's partition of
``__consumer_offsets`` (:func:`coordinator_of`), where its generations and committed
offsets are kept (:mod:`broker.coordinator.group_metadata_manager`). When that partition's
leadership moves, the new leader reads the partition and takes the groups over with their
members (:meth:`GroupCoordinator._install`); the old one drops them, and members it was
answering are told NOT_COORDINATOR and look the coordinator up again. Until a client has
first asked for a coordinator the topic does not exist; minibroker's own ZooKeeper groups,
which need none, are then placed on the live brokers by rendezvous hashing
(:func:`coordinator_for`), for the group tools that describe and delete them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping

from broker.coordinator.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerProtocolError,
    decode_assignment,
    decode_subscription,
)
from broker.coordinator.group_metadata import (
    COORDINATOR_NOT_AVAILABLE,
    GROUP_ID_NOT_FOUND,
    GROUP_MAX_SIZE_REACHED,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_REQUEST,
    INVALID_SESSION_TIMEOUT,
    NON_EMPTY_GROUP,
    NOT_COORDINATOR,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    GroupDescription,
    GroupMetadata,
    GroupOverview,
    GroupState,
    JoinResult,
    MemberDescription,
    MemberMetadata,
    SyncResult,
    cancel_waiter,
    coordinator_for,
    coordinator_of,
    restored,
    stored_value,
)
from broker.coordinator.group_metadata_manager import GroupMetadataManager
from proto.coordinator.group_records import GroupMetadataValue
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb

logger = logging.getLogger(__name__)

__all__ = [  # the group's records are re-exported: callers import them from here
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
    "GroupCoordinator",
    "GroupDescription",
    "GroupOverview",
    "GroupState",
    "JoinResult",
    "MemberDescription",
    "SyncResult",
    "coordinator_for",
    "coordinator_of",
]

EXPIRY_CHECK_S = 0.25
"""How often members' sessions are checked (Kafka schedules a timer per heartbeat)."""


class GroupCoordinator:
    """The groups this broker coordinates: their membership in memory, their generations
    written to ``__consumer_offsets`` through :attr:`store`."""

    def __init__(
        self,
        broker_id: int,
        *,
        initial_rebalance_delay_ms: int = 3000,
        min_session_timeout_ms: int = 6000,
        max_session_timeout_ms: int = 1_800_000,
        max_size: int = 2**31 - 1,
        max_protocol_metadata_bytes: int = 1_048_576,
        store: GroupMetadataManager | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.store = store
        """Where the groups' generations and offsets are kept (``__consumer_offsets``);
        None keeps them in memory only (the state machine's unit tests)."""
        if store is not None:
            store.on_group_loaded = self._install
            store.on_group_unloaded = self.forget
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        """Kafka's ``group.initial.rebalance.delay.ms``."""
        self.min_session_timeout_ms = min_session_timeout_ms
        """Kafka's ``group.min.session.timeout.ms``."""
        self.max_session_timeout_ms = max_session_timeout_ms
        """Kafka's ``group.max.session.timeout.ms``."""
        self.max_size = max_size
        """Kafka's ``group.max.size`` (KIP-389): members of a group at most."""
        self.max_protocol_metadata_bytes = max_protocol_metadata_bytes
        """``group.max.protocol.metadata.bytes`` (minibroker's own): a member's protocol
        metadata at most, all its protocols together. The coordinator keeps it for the
        member's life and hands every member's to the leader, so without a bound one
        JoinGroup as large as a request may be (100 MB) stays in memory."""
        self.groups: dict[str, GroupMetadata] = {}
        self._expiry: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._writes: dict[str, set[asyncio.Future[None]]] = {}
        """Group id -> the OffsetCommits being written (:meth:`committing`)."""

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._expiry = asyncio.create_task(self._expire_sessions(), name="group-session-expiry")

    async def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiry
        for group_id in list(self.groups):
            self.forget(group_id)

    def _log(self, event: str, group: GroupMetadata, **fields: object) -> None:
        text = " ".join(f"{k}={v}" for k, v in fields.items())
        logger.info(
            "event=%s broker=%d group=%s generation=%d state=%s members=%d %s",
            event,
            self.broker_id,
            group.group_id,
            group.generation_id,
            group.state.value,
            len(group.members),
            text,
        )

    def forget(self, group_id: str) -> None:
        """Drop a group this broker no longer coordinates: its waiting members are told
        NOT_COORDINATOR and find the new coordinator."""
        group = self.groups.pop(group_id, None)
        if group is None:
            return
        if group.join_deadline is not None:
            group.join_deadline.cancel()
        for member in group.members.values():
            cancel_waiter(member.joining, JoinResult(NOT_COORDINATOR, member.member_id))
            cancel_waiter(member.syncing, SyncResult(NOT_COORDINATOR))
        self._log("group_moved_away", group)

    def _install(self, group_id: str, stored: GroupMetadataValue) -> None:
        """A group read from ``__consumer_offsets`` (its partition was loaded here), with
        its members, who must heartbeat within their session timeout (:func:`restored`)."""
        self.forget(group_id)
        group = self.groups[group_id] = restored(
            group_id, stored, asyncio.get_running_loop().time()
        )
        self._log("group_loaded", group, protocol=group.protocol_name)

    def _store_empty(self, group: GroupMetadata) -> None:
        """Write that the group's new generation has no members (Kafka does, so that a
        reload does not bring back the members of the last one)."""
        if self.store is None:
            return
        store, value = self.store, stored_value(group)

        async def write() -> None:
            code = await store.store_group(group.group_id, value)
            if code != pb.NONE:
                self._log("empty_group_not_stored", group, error_code=code)

        task = asyncio.get_running_loop().create_task(write(), name=f"store-{group.group_id}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def begin_delete(self, group_id: str) -> int:
        """Mark ``group_id`` Dead for DeleteGroups (Kafka's ``handleDeleteGroups`` does it
        before removing the offsets): until :meth:`end_delete`, JoinGroup, SyncGroup,
        Heartbeat, LeaveGroup and OffsetCommit are answered COORDINATOR_NOT_AVAILABLE, which
        Kafka's clients retry, so nobody joins or commits into a half-deleted group.
        NON_EMPTY_GROUP if it has members (a JoinGroup got in first), GROUP_ID_NOT_FOUND if
        another deletion holds it Dead."""
        group = self.groups.setdefault(group_id, GroupMetadata(group_id))
        if group.state is not GroupState.EMPTY:
            return GROUP_ID_NOT_FOUND if group.state is GroupState.DEAD else NON_EMPTY_GROUP
        group.state = GroupState.DEAD
        self._log("group_dead", group, reason="'deleting'")
        return pb.NONE

    async def commits_written(self, group_id: str) -> None:
        """Wait for the writes of the commits checked before ``group_id`` was marked Dead
        (no commit is let through after)."""
        pending = list(self._writes.get(group_id, ()))
        if pending:
            await asyncio.wait(pending)

    def end_delete(self, group_id: str) -> None:
        """Forget the group marked Dead by :meth:`begin_delete` (its offsets are gone, or
        the deletion failed and it is Empty again to whoever asks next)."""
        group = self.groups.get(group_id)
        if group is not None and group.state is GroupState.DEAD:
            del self.groups[group_id]
            self._log("group_deleted", group)

    @contextlib.contextmanager
    def committing(self, group_id: str) -> Iterator[None]:
        """Around the write of an OffsetCommit that :meth:`check_commit` let through."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        writes = self._writes.setdefault(group_id, set())
        writes.add(done)
        try:
            yield
        finally:
            writes.discard(done)
            if not writes:
                del self._writes[group_id]
            done.set_result(None)

    def deleting(self, group_id: str) -> bool:
        """Whether ``group_id`` is marked Dead, being deleted."""
        group = self.groups.get(group_id)
        return group is not None and group.state is GroupState.DEAD

    # -- JoinGroup ---------------------------------------------------------------------------

    async def join_group(
        self,
        group_id: str,
        member_id: str,
        *,
        group_instance_id: str | None,
        client_id: str,
        client_host: str = "",
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> JoinResult:
        """Join (or rejoin) and wait for the join phase to end. Cancelled (the client went
        away), the member stays until its session expires, as in Kafka."""
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return JoinResult(INVALID_SESSION_TIMEOUT, member_id)
        metadata_bytes = sum(len(metadata) for _, metadata in protocols)
        if metadata_bytes > self.max_protocol_metadata_bytes:
            logger.warning(
                "event=group_metadata_refused broker=%d group=%s client_id=%s bytes=%d limit=%d",
                self.broker_id,
                group_id,
                client_id,
                metadata_bytes,
                self.max_protocol_metadata_bytes,
            )
            return JoinResult(INVALID_REQUEST, member_id)
        if self.deleting(group_id):
            # Kafka: "some other thread has just removed the group"; the member retries.
            return JoinResult(COORDINATOR_NOT_AVAILABLE, member_id)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(UNKNOWN_MEMBER_ID, member_id)
            group = self.groups[group_id] = GroupMetadata(group_id)
        if not protocols or (
            group.members
            and (
                protocol_type != group.protocol_type
                or not self._supported_by_all(group, [n for n, _ in protocols], member_id)
            )
        ):
            return JoinResult(INCONSISTENT_GROUP_PROTOCOL, member_id)
        loop = asyncio.get_running_loop()
        if not member_id and len(group.members) >= self.max_size:
            # KIP-389 (Kafka's acceptJoiningMember): a new member only while the group is
            # below group.max.size; its members carry on.
            self._log("member_refused", group, reason="'group.max.size'", limit=self.max_size)
            return JoinResult(GROUP_MAX_SIZE_REACHED, member_id)
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            member = MemberMetadata(
                member_id,
                group_instance_id,
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocols,
                loop.time(),
            )
            group.members[member_id] = member
            if group.leader_id is None:
                group.leader_id = member_id
            group.protocol_type = protocol_type
            self._log("member_joined", group, member=member_id)
        else:
            known = group.members.get(member_id)
            if known is None:
                return JoinResult(UNKNOWN_MEMBER_ID, member_id)
            member = known
            unchanged = member.protocols == protocols
            member.protocols = protocols
            member.session_timeout_ms = session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout_ms
            member.last_heard = loop.time()
            if (
                group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE)
                and unchanged
                and member_id != group.leader_id
            ):
                # A follower rejoining with what it had: it gets the current generation
                # (KafkaApis: "return the current group's state").
                return self._join_answer(group, member)
        if member.joining is not None and not member.joining.done():
            member.joining.set_result(JoinResult(UNKNOWN_MEMBER_ID, member_id))
        joining = member.joining = loop.create_future()
        if group.state is not GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"member {member_id} joined")
        self._maybe_complete_join(group)  # may answer it at once: keep our own reference
        return await asyncio.shield(joining)

    def _supported_by_all(self, group: GroupMetadata, names: list[str], member_id: str) -> bool:
        others = [m for m in group.members.values() if m.member_id != member_id]
        return any(all(n in m.protocol_names() for m in others) for n in names)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        loop = asyncio.get_running_loop()
        for member in group.members.values():
            cancel_waiter(member.syncing, SyncResult(REBALANCE_IN_PROGRESS))
            member.syncing = None
        initial = group.state is GroupState.EMPTY and self.initial_rebalance_delay_ms > 0
        group.state = GroupState.PREPARING_REBALANCE
        if group.join_deadline is not None:
            group.join_deadline.cancel()
        if initial:
            group.delaying = True
            delay_s = self.initial_rebalance_delay_ms / 1000
            group.join_deadline = loop.call_later(delay_s, self._initial_delay_over, group)
        else:
            timeout_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
            group.join_deadline = loop.call_later(
                timeout_ms / 1000, self._complete_join, group, True
            )
        self._log("rebalance_started", group, reason=repr(reason))

    def _initial_delay_over(self, group: GroupMetadata) -> None:
        group.delaying = False
        loop = asyncio.get_running_loop()
        timeout_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        group.join_deadline = loop.call_later(timeout_ms / 1000, self._complete_join, group, True)
        self._maybe_complete_join(group)

    def _maybe_complete_join(self, group: GroupMetadata) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE or group.delaying:
            return
        if all(m.joining is not None for m in group.members.values()):
            self._complete_join(group, False)

    def _complete_join(self, group: GroupMetadata, timed_out: bool) -> None:
        """End the join phase: members that did not rejoin are dropped, a new generation
        begins and every waiting JoinGroup is answered."""
        if self.groups.get(group.group_id) is not group:
            return
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        if group.join_deadline is not None:
            group.join_deadline.cancel()
            group.join_deadline = None
        group.delaying = False
        for member in [m for m in group.members.values() if m.joining is None]:
            del group.members[member.member_id]
            self._log("member_dropped", group, member=member.member_id, reason="did not rejoin")
        group.generation_id += 1
        if not group.members:
            group.state = GroupState.EMPTY
            group.leader_id = None
            group.protocol_name = None
            self._log("group_empty", group, timed_out=timed_out)
            self._store_empty(group)
            return
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.protocol_name = self._vote(group)
        group.state = GroupState.COMPLETING_REBALANCE
        now = asyncio.get_running_loop().time()
        self._log("generation_started", group, leader=group.leader_id, protocol=group.protocol_name)
        for member in group.members.values():
            member.last_heard = now
            waiter, member.joining = member.joining, None
            cancel_waiter(waiter, self._join_answer(group, member))

    def _vote(self, group: GroupMetadata) -> str:
        """Kafka's ``GroupMetadata.selectProtocol``: each member votes for its first
        protocol that every member supports; the most votes win."""
        members = list(group.members.values())
        common = [
            n for n in members[0].protocol_names() if all(n in m.protocol_names() for m in members)
        ]
        votes = Counter(next(n for n in m.protocol_names() if n in common) for m in members)
        return max(common, key=lambda n: (votes[n], -common.index(n)))

    def _join_answer(self, group: GroupMetadata, member: MemberMetadata) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if member.member_id == group.leader_id:
            members = tuple(
                (
                    m.member_id,
                    m.group_instance_id,
                    dict(m.protocols).get(group.protocol_name or "", b""),
                )
                for m in group.members.values()
            )
        return JoinResult(
            pb.NONE,
            member.member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            members,
        )

    # -- SyncGroup ---------------------------------------------------------------------------

    async def sync_group(
        self, group_id: str, generation_id: int, member_id: str, assignments: Mapping[str, bytes]
    ) -> SyncResult:
        """The member's assignment, once the leader has sent them all."""
        if self.deleting(group_id):
            return SyncResult(COORDINATOR_NOT_AVAILABLE)
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return SyncResult(UNKNOWN_MEMBER_ID)
        if generation_id != group.generation_id:
            return SyncResult(ILLEGAL_GENERATION)
        member.last_heard = asyncio.get_running_loop().time()
        if group.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(REBALANCE_IN_PROGRESS)
        if group.state is GroupState.STABLE:
            return self._sync_answer(group, member)
        if group.state is not GroupState.COMPLETING_REBALANCE:
            return SyncResult(UNKNOWN_MEMBER_ID)
        syncing = member.syncing = asyncio.get_running_loop().create_future()
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            if self.store is not None:
                generation = group.generation_id
                code = await self.store.store_group(group_id, stored_value(group))
                if (
                    self.groups.get(group_id) is not group
                    or group.state is not GroupState.COMPLETING_REBALANCE
                    or group.generation_id != generation
                ):
                    # Moved, deleted or rebalancing meanwhile: every waiter was answered.
                    return await asyncio.shield(syncing)
                if code != pb.NONE:
                    # Kafka: the generation is not used; its members are told why and
                    # rejoin (the coordinator errors make them look it up again).
                    self._log("generation_not_stored", group, error_code=code)
                    for m in group.members.values():
                        m.assignment = b""
                        waiter, m.syncing = m.syncing, None
                        cancel_waiter(waiter, SyncResult(code))
                    self._prepare_rebalance(group, "its generation could not be stored")
                    return await asyncio.shield(syncing)
            group.state = GroupState.STABLE
            self._log(
                "group_stable",
                group,
                assignments=",".join(
                    f"{m.member_id}:{len(m.assignment)}B" for m in group.members.values()
                ),
            )
            for m in group.members.values():
                waiter, m.syncing = m.syncing, None
                cancel_waiter(waiter, self._sync_answer(group, m))
        return await asyncio.shield(syncing)

    def _sync_answer(self, group: GroupMetadata, member: MemberMetadata) -> SyncResult:
        return SyncResult(pb.NONE, member.assignment, group.protocol_type, group.protocol_name)

    # -- Heartbeat, LeaveGroup, commits ------------------------------------------------------

    def heartbeat(self, group_id: str, generation_id: int, member_id: str) -> int:
        if self.deleting(group_id):
            return COORDINATOR_NOT_AVAILABLE
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return UNKNOWN_MEMBER_ID
        member.last_heard = asyncio.get_running_loop().time()
        if group.state is GroupState.PREPARING_REBALANCE:
            return REBALANCE_IN_PROGRESS
        if generation_id != group.generation_id:
            return ILLEGAL_GENERATION
        return pb.NONE

    def leave_group(self, group_id: str, member_ids: list[str]) -> list[int]:
        """Each member's error code: it leaves, and the others rebalance at once."""
        if self.deleting(group_id):
            return [COORDINATOR_NOT_AVAILABLE] * len(member_ids)
        group = self.groups.get(group_id)
        codes = []
        for member_id in member_ids:
            if group is None or member_id not in group.members:
                codes.append(UNKNOWN_MEMBER_ID)
                continue
            self._remove(group, member_id, "left the group")
            codes.append(pb.NONE)
        return codes

    def check_commit(self, group_id: str, generation_id: int, member_id: str) -> int:
        """May this commit be written? Kafka's ``doCommitOffsets`` checks: a commit from
        outside the group (generation -1, no member id: a consumer that ``assign()``s) only
        while the group has no members; none while it is Dead (being deleted). A commit let
        through is written inside :meth:`committing`."""
        if self.deleting(group_id):
            return COORDINATOR_NOT_AVAILABLE
        group = self.groups.get(group_id)
        if generation_id < 0 and not member_id:
            if group is None or group.state is GroupState.EMPTY:
                return pb.NONE
            return UNKNOWN_MEMBER_ID
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return UNKNOWN_MEMBER_ID
        if group.state is GroupState.COMPLETING_REBALANCE:
            return REBALANCE_IN_PROGRESS
        if generation_id != group.generation_id:
            return ILLEGAL_GENERATION
        member.last_heard = asyncio.get_running_loop().time()
        return pb.NONE

    def check_txn_commit(self, group_id: str, generation_id: int, member_id: str) -> int:
        """May this TxnOffsetCommit be written? Kafka's ``doTxnCommitOffsets`` checks: none
        while the group is Dead; a member id, when given, must be the group's, and a
        generation, when given (>= 0), the group's current one (KIP-447: a zombie of an
        older generation is refused). Unlike OffsetCommit, members may be present when
        neither is given: a producer's transaction commits for the consumer beside it."""
        if self.deleting(group_id):
            return COORDINATOR_NOT_AVAILABLE
        group = self.groups.get(group_id)
        if member_id and (group is None or member_id not in group.members):
            return UNKNOWN_MEMBER_ID
        current = -1 if group is None else group.generation_id
        if generation_id >= 0 and generation_id != current:
            return ILLEGAL_GENERATION
        return pb.NONE

    # -- ListGroups, DescribeGroups ----------------------------------------------------------

    def list_groups(self, states: Iterable[GroupState] = ()) -> list[GroupOverview]:
        """The groups this broker holds, by id; only those in ``states`` if any are given
        (Kafka's ListGroups and its KIP-518 states filter). A broker holds a group it no
        longer coordinates until its members' sessions expire or a request finds it moved."""
        wanted = set(states)
        return [
            GroupOverview(g.group_id, g.protocol_type or "", g.state)
            for g in sorted(self.groups.values(), key=lambda g: g.group_id)
            if g.state is not GroupState.DEAD and (not wanted or g.state in wanted)
        ]

    def describe_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        """Each group as held here, in the order asked; a group not held here is DEAD with
        no members, as Kafka's DescribeGroups answers an unknown group."""
        return [self._describe(group_id) for group_id in group_ids]

    def _describe(self, group_id: str) -> GroupDescription:
        group = self.groups.get(group_id)
        if group is None:
            return GroupDescription(group_id, GroupState.DEAD, "", "", ())
        stable = group.state is GroupState.STABLE
        members = []
        for m in group.members.values():
            metadata = dict(m.protocols).get(group.protocol_name or "", b"") if stable else b""
            assignment = m.assignment if stable else b""
            members.append(
                MemberDescription(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    metadata,
                    assignment,
                    self._partitions(group, m, assignment),
                )
            )
        return GroupDescription(
            group.group_id,
            group.state,
            group.protocol_type or "",
            # Kafka's GroupMetadata.summary: the protocol only once it is in use (Stable).
            group.protocol_name or "" if stable else "",
            tuple(members),
        )

    def subscribed_topics(self, group_id: str) -> set[str] | None:
        """The topics the members of a consumer group subscribe to, by the metadata each
        sent for the chosen protocol (Kafka's ``GroupMetadata.subscribedTopics``); None if
        unknown: not held, another protocol type, or metadata that does not decode."""
        group = self.groups.get(group_id)
        if group is None or group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        topics: set[str] = set()
        for m in group.members.values():
            protocols = dict(m.protocols)
            chosen = protocols.get(group.protocol_name or "", next(iter(protocols.values()), b""))
            try:
                topics.update(decode_subscription(chosen))
            except ConsumerProtocolError as err:
                self._log("subscription_undecodable", group, member=m.member_id, error=repr(err))
                return None
        return topics

    def _partitions(
        self, group: GroupMetadata, member: MemberMetadata, assignment: bytes
    ) -> tuple[TopicPartition, ...] | None:
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        try:
            return tuple(decode_assignment(assignment))
        except ConsumerProtocolError as err:
            self._log("assignment_undecodable", group, member=member.member_id, error=repr(err))
            return None

    # -- membership ------------------------------------------------------------------------

    def _remove(self, group: GroupMetadata, member_id: str, reason: str) -> None:
        member = group.members.pop(member_id)
        cancel_waiter(member.joining, JoinResult(UNKNOWN_MEMBER_ID, member_id))
        cancel_waiter(member.syncing, SyncResult(UNKNOWN_MEMBER_ID))
        self._log("member_removed", group, member=member_id, reason=repr(reason))
        if group.leader_id == member_id:
            group.leader_id = next(iter(group.members), None)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"member {member_id} {reason}")
        elif group.state is GroupState.PREPARING_REBALANCE and not group.members:
            self._complete_join(group, False)
        self._maybe_complete_join(group)

    async def _expire_sessions(self) -> None:
        """Members not heard from within their session timeout leave (Kafka's
        ``onExpireHeartbeat``); one waiting in JoinGroup or SyncGroup is alive."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(EXPIRY_CHECK_S)
            now = loop.time()
            for group in list(self.groups.values()):
                for member in list(group.members.values()):
                    waiting = member.joining is not None or member.syncing is not None
                    silent_s = now - member.last_heard
                    if not waiting and silent_s > member.session_timeout_ms / 1000:
                        self._remove(group, member.member_id, "session expired")
                if (
                    not group.members
                    and group.state is GroupState.EMPTY
                    and (self.store is None or not self.store.holds(group.group_id))
                ):
                    del self.groups[group.group_id]
