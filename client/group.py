"""One consumer's membership in a ZooKeeper consumer group (docs/zookeeper.md, docs/client.md).

Kafka's old high-level consumer (``ZookeeperConsumerConnector`` with its
``ZKRebalancerListener``) coordinated a group through ZooKeeper alone, and so does this::

    /consumers/<g>/ids/<consumer-id>     ephemeral   the member's subscription (JSON)
    /consumers/<g>/owners/<t>/<p>        ephemeral   the consumer id that reads <t>-<p>
    /consumers/<g>/offsets/<t>/<p>       persistent  the next offset the group will read

A member registers its ids znode and watches the ids children and the subscribed topics'
``/brokers/topics/<t>`` (their partition counts). On any change every member rebalances
on its own: it commits the positions of the partitions it owns, releases the owner znodes
it no longer gets, computes the range assignment (:mod:`client.range_assignor`) from the
same ZooKeeper view as the others, and claims its new owner znodes. A claim that finds
another member's owner znode waits for that member to release it (it rebalances at the
same time), with a backoff and a bounded number of attempts, as Kafka's
``rebalance.backoff.ms`` and ``rebalance.max.retries``. Owner znodes make the hand-over
safe: nobody reads a partition before its previous owner has committed and let go.

Watches: standing watches of the ZooKeeper layer (:class:`proto.zk.session.ZkWatch`), set
once when the member joins, fire at least once after every change and after every
reconnect, so a member also rebalances after a reconnect or a session expiry, which
re-registers it (its ephemerals are gone after an expiry).

:class:`GroupMember` does the ZooKeeper side; :class:`client.consumer.Consumer` decides when
to rebalance (on :attr:`GroupMember.changed`) and stops fetching meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import NamedTuple

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
)

from client.metadata import ClientError
from client.range_assignor import range_assign
from proto.topic_partition import TopicPartition, topic_name_problem
from proto.zk.kafka_zk_client import KafkaZkClient
from proto.zk.session import (
    RETRY_MAX_S,
    WatchKind,
    ZkError,
)
from proto.zk.znodes import (
    ZkDataError,
    consumer_ids_path,
    consumer_owner_path,
    decode_consumer_subscription,
    decode_topic_assignment,
    encode_consumer_subscription,
    topic_path,
)

__all__ = [
    "GroupAssignment",
    "GroupMember",
    "RebalanceFailedError",
    "ZkError",
    "group_name_problem",
    "make_consumer_id",
]

log = logging.getLogger(__name__)

_MAX_HOST_PART = 40
_MAX_ID_LENGTH = 249


class RebalanceFailedError(ClientError):
    """The member could not claim its partitions within ``rebalance.max.retries`` attempts
    (Kafka's ``ConsumerRebalanceFailedException``): another member kept them."""


class GroupAssignment(NamedTuple):
    """The outcome of one rebalance for this member."""

    partitions: dict[TopicPartition, int | None]
    """The partitions now owned, each with the group's committed offset (None: none yet)."""
    missing_topics: frozenset[str]
    """Subscribed topics that have no ``/brokers/topics/<t>`` (not created yet)."""


def group_name_problem(group_id: str) -> str | None:
    """Why ``group_id`` cannot name a group, or None: Kafka's topic-name rules, since the
    name becomes a ZooKeeper path segment."""
    return topic_name_problem(group_id, "group")


def make_consumer_id(group_id: str) -> str:
    """Kafka's consumer id: ``<group>_<host>-<ms>-<8 hex>``, unique per consumer instance.

    Ids sort by group and host, then by start time, so on one host the earlier members
    come first in the range assignment. Characters a host name may hold that a ZooKeeper
    name segment may not are replaced by ``-``; the result keeps to 249 characters.
    """
    host = "".join(
        c if c.isascii() and (c.isalnum() or c in "._-") else "-" for c in socket.gethostname()
    )
    suffix = f"_{host[:_MAX_HOST_PART] or 'host'}-{time.time_ns() // 1_000_000}-"
    suffix += uuid.uuid4().hex[:8]
    return group_id[: _MAX_ID_LENGTH - len(suffix)] + suffix


class GroupMember(KafkaZkClient):
    """One consumer's ZooKeeper session in a group: registration, watches, owner claims and
    offsets.

    Example usage::

        member = GroupMember("localhost:2181", "g", ["orders"], on_change=wake_up)
        await member.start()                         # registers, changed = True
        while member.changed:
            await member.commit(positions_of_owned_partitions)
            assignment = await member.rebalance()
        await member.commit({TopicPartition("orders", 0): 42})
        await member.close()                         # leaves the group

    All coroutines must be awaited on the loop that ran :meth:`start`. ZooKeeper requests
    interrupted by a connection loss are retried until they complete, the session expires
    (ZkSessionExpiredError) or the member is closed (ZkConnectionError); cancelling one
    stops the waiting, but ZooKeeper may still apply a request already sent.
    """

    _log_name = "group"

    def __init__(
        self,
        zookeeper_connect: str,
        group_id: str,
        topics: Iterable[str],
        *,
        consumer_id: str | None = None,
        session_timeout_ms: int = 6000,
        rebalance_max_retries: int = 4,
        rebalance_backoff_ms: int = 2000,
        retry_backoff_ms: int = 100,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        """``on_change()`` is called on the loop thread whenever :attr:`changed` becomes
        true (a watch fired). Raises ClientError for an illegal group name, ValueError for
        a malformed connect string."""
        problem = group_name_problem(group_id)
        if problem is not None:
            raise ClientError(f"illegal group name: {problem}")
        super().__init__(zookeeper_connect, broker_id=-1, session_timeout_ms=session_timeout_ms)
        self.group_id = group_id
        self.consumer_id = consumer_id or make_consumer_id(group_id)
        self.topics = frozenset(topics)
        self._rebalance_max_retries = rebalance_max_retries
        self._rebalance_backoff_s = rebalance_backoff_ms / 1000
        self._retry_backoff_s = retry_backoff_ms / 1000
        self._on_change = on_change
        self._owned: frozenset[TopicPartition] = frozenset()
        self._commit_lock = asyncio.Lock()
        self.changed = False
        """A watch fired (or the member just joined): a rebalance is due."""

    def __repr__(self) -> str:
        return f"GroupMember(group={self.group_id!r}, consumer={self.consumer_id!r})"

    @property
    def owned(self) -> frozenset[TopicPartition]:
        """The partitions whose owner znodes this member holds (as of its last rebalance)."""
        return self._owned

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self, *, join: bool = True) -> None:
        """Open the session and register ``/consumers/<g>/ids/<id>``; a rebalance is then
        due (:attr:`changed`). With ``join=False`` only the session is opened, for a
        consumer that assigns its partitions itself but keeps the group's offsets (no
        rebalance, no owner znodes). Raises ZkConnectionError when ZooKeeper cannot be
        reached within the session timeout; cancelling leaves nothing connected."""
        await super().start()
        if not join:
            return
        try:
            await self._register()
            # Set before the first rebalance reads, so none of its reads can miss a change.
            await self._watch(
                "members", WatchKind.CHILDREN, consumer_ids_path(self.group_id), self._on_watch
            )
            for topic in sorted(self.topics):
                await self._watch(
                    f"topic {topic}", WatchKind.DATA, topic_path(topic), self._on_watch
                )
        except BaseException:
            await self.close()
            raise
        self._mark_changed()
        self._log(logging.INFO, "joined", topics=",".join(sorted(self.topics)))

    def _closing_now(self) -> None:
        """Leaving the group: closing the session deletes the ids znode and every owner
        znode at once, so the others rebalance with nothing left to wait for. Commit first
        (the caller's job)."""
        self._owned = frozenset()
        self._log(logging.INFO, "left")

    def _log_context(self) -> dict[str, object]:
        return {"group": self.group_id, "consumer": self.consumer_id}

    # -- rebalance -------------------------------------------------------------------------

    async def rebalance(self) -> GroupAssignment:
        """Compute this member's range assignment from ZooKeeper, release the owner znodes
        it no longer gets and claim the new ones; return them with their committed offsets.
        Commit the owned partitions' positions first (:meth:`commit`): the next owner
        starts from there as soon as the release lets it in.

        :attr:`changed` is cleared at the start of each attempt; a watch that fires during
        the claims restarts the attempt on the new view. Raises RebalanceFailedError when
        other members still hold the partitions after ``rebalance.max.retries`` attempts
        (everything claimed is released then), ZkError when ZooKeeper fails. Cancelling
        it may leave owner znodes claimed: call :meth:`rebalance` again or :meth:`close`.
        """
        blocked: dict[TopicPartition, str] = {}
        for attempt in range(self._rebalance_max_retries + 1):
            self.changed = False
            await self._register()
            members = await self._members()
            counts = await self._partition_counts(self.topics)
            existing = {t: n for t, n in counts.items() if n is not None}
            target = frozenset(range_assign(members, existing).get(self.consumer_id, []))
            await self._release(self._owned - target)
            self._owned &= target
            blocked = await self._claim(target)
            if not blocked:
                offsets = await self.committed(target)
                self._log(
                    logging.INFO,
                    "rebalanced",
                    attempt=attempt,
                    members=len(members),
                    partitions=",".join(str(tp) for tp in sorted(target)) or "none",
                )
                return GroupAssignment(
                    {tp: offsets.get(tp) for tp in sorted(target)},
                    frozenset(t for t, n in counts.items() if n is None),
                )
            # Kafka releases everything after a failed attempt, so that members with
            # different views of the group cannot hold each other's partitions forever.
            await self._release(self._owned)
            self._owned = frozenset()
            self._log(
                logging.INFO,
                "rebalance_attempt_failed",
                attempt=attempt,
                blocked=",".join(f"{tp}={owner}" for tp, owner in sorted(blocked.items())),
            )
            if not self.changed:
                await asyncio.sleep(self._rebalance_backoff_s)
        raise RebalanceFailedError(
            f"group {self.group_id!r}: consumer {self.consumer_id} could not claim its "
            f"partitions in {self._rebalance_max_retries + 1} attempts; still owned: "
            + ", ".join(f"{tp} by {owner}" for tp, owner in sorted(blocked.items()))
        )

    async def _register(self) -> None:
        """Create the ephemeral ids znode unless this session holds it already (again after
        a session expiry deleted it)."""
        path = consumer_ids_path(self.group_id, self.consumer_id)
        data = encode_consumer_subscription(
            dict.fromkeys(self.topics, 1), time.time_ns() // 1_000_000
        )
        while True:
            try:
                await self.request("create", path, data, ephemeral=True, makepath=True)
                return
            except NodeExistsError:
                pass
            try:
                stat = await self.request("exists", path)
            except NoNodeError:
                continue
            if stat is None:
                continue
            if int(stat.ephemeralOwner) == self._current_session_id():
                return
            # Left by this consumer's previous session, which has ended by now.
            with contextlib.suppress(NoNodeError, BadVersionError):
                await self.request("delete", path, stat.version)

    async def _members(self) -> dict[str, frozenset[str]]:
        """Member id -> subscribed topics (the ids children are watched since joining)."""
        path = consumer_ids_path(self.group_id)
        ids = await self.request("get_children", path)
        datas = await asyncio.gather(
            *(self._get(f"{path}/{member}") for member in ids), return_exceptions=True
        )
        members: dict[str, frozenset[str]] = {}
        for member, data in zip(ids, datas, strict=True):
            if isinstance(data, NoNodeError):
                continue  # left meanwhile; its departure fires the watch again
            if isinstance(data, BaseException):
                raise data
            try:
                members[member] = frozenset(decode_consumer_subscription(data))
            except ZkDataError as e:
                # Kafka would fail the rebalance; skipping the member keeps the group going,
                # and every member skips it alike, so the assignment stays consistent.
                self._log(logging.WARNING, "bad_member", member=member, error=e)
        return members

    async def _partition_counts(self, topics: Collection[str]) -> dict[str, int | None]:
        """Topic -> partition count (None: no such topic); each topic's znode is watched
        since joining (its creation too, when it does not exist yet)."""
        counts: dict[str, int | None] = {}
        for topic in sorted(topics):
            path = topic_path(topic)
            try:
                data, _ = await self.request("get", path)
            except NoNodeError:
                counts[topic] = None
                continue
            counts[topic] = len(self._decode(path, decode_topic_assignment, data))
        return counts

    async def _claim(self, target: Collection[TopicPartition]) -> dict[TopicPartition, str]:
        """Create the owner znodes of ``target``, retrying those another member still holds
        for up to ``rebalance.backoff.ms``; return what remains blocked, by owner. Stops
        early when a watch fires (the assignment must be computed again)."""
        loop = self._require_loop()
        deadline = loop.time() + self._rebalance_backoff_s
        # Kept partitions too: after a session expiry their owner znodes are gone.
        pending = sorted(target)
        delay = self._retry_backoff_s
        blocked: dict[TopicPartition, str] = {}
        me = self.consumer_id.encode("utf-8")
        while True:
            blocked = {}
            for tp in pending:
                path = consumer_owner_path(self.group_id, tp)
                try:
                    await self.request("create", path, me, ephemeral=True, makepath=True)
                except NodeExistsError:
                    try:
                        owner = await self._get(path)
                    except NoNodeError:
                        blocked[tp] = "?"  # released just now: take it on the next round
                        continue
                    if owner != me:
                        blocked[tp] = owner.decode("utf-8", "replace")
                        continue
                self._owned |= {tp}
            pending = sorted(blocked)
            if not pending or self.changed or loop.time() >= deadline:
                return blocked
            await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))
            delay = min(delay * 2, RETRY_MAX_S)

    async def _release(self, tps: Iterable[TopicPartition]) -> None:
        """Delete the owner znodes of ``tps`` that name this member (never another's)."""
        me = self.consumer_id.encode("utf-8")
        released = sorted(tps)
        for tp in released:
            path = consumer_owner_path(self.group_id, tp)
            try:
                data, stat = await self.request("get", path)
                if data == me:
                    await self.request("delete", path, stat.version)
            except (NoNodeError, BadVersionError):
                pass
        self._owned -= set(released)

    # -- offsets ---------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Write each offset (the next one to read) to ``/consumers/<g>/offsets/<t>/<p>``.

        Commits are serialized, so an older commit never lands after a newer one. Cancelling
        it may leave some offsets written and others not.
        """
        async with self._commit_lock:
            await self.commit_consumer_offsets(self.group_id, offsets)
            if offsets:
                self._log(
                    logging.DEBUG,
                    "committed",
                    offsets=",".join(f"{tp}@{o}" for tp, o in sorted(offsets.items())),
                )

    async def committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets of ``tps`` (those without one are left out).
        ZkDataError naming the znode for a malformed one: never read as "no offset"
        (docs/zookeeper.md)."""
        return (await self.read_consumer_offsets(self.group_id, tps)).require()

    # -- ZooKeeper plumbing ----------------------------------------------------------------

    def _on_watch(self) -> None:
        """A standing watch fired (a change, or a reconnect), on the loop."""
        if not self._closing:
            self._mark_changed()

    def _mark_changed(self) -> None:
        self.changed = True
        if self._on_change is not None:
            self._on_change()

    async def _get(self, path: str) -> bytes:
        data, _ = await self.request("get", path)
        return bytes(data)
