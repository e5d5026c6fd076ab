"""The consumer: reads partitions from their leaders, alone or in a ZooKeeper group.

See docs/client.md.

Kafka's ``KafkaConsumer`` on the wire, Kafka's old ``ZookeeperConsumerConnector`` for
groups (:mod:`client.group`). Example usage::

    async with BrokerConnections.from_bootstrap("localhost:9091") as connections:
        config = ConsumerConfig(group_id="audit", auto_offset_reset="earliest")
        async with Consumer(connections, config, zookeeper_connect="localhost:2181") as c:
            c.subscribe(["orders"])
            while True:
                for record in await c.poll(timeout_ms=1000):
                    print(record.offset, record.value)

Without a group, :meth:`Consumer.assign` names the partitions and :meth:`Consumer.seek`
(or ``auto_offset_reset``) the starting offsets.

Split as Kafka's consumer is, each piece with one job:

- :class:`ConsumerConfig` and :class:`ConsumerRecord` (``client.consumer_config``): the
  settings, and what poll returns;
- :class:`SubscriptionState` (``client.subscription_state``): which partitions are read and
  from where, and the ``auto_offset_reset`` policies;
- :class:`Fetcher` (``client.fetcher``): the fetches in flight to the leaders and the
  records they brought, the offset lookups of resets; how a poll fetches is told there;
- :class:`Consumer` (this module): the user's face (assign, subscribe, seek, poll, commit),
  the metadata refreshes and the group.

Errors, per partition: NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, an unknown partition, a
missing leader, or a leader that cannot be reached refresh the metadata (at most once per
``retry_backoff_ms``) and fetch again from whoever leads now: that is how a consumer rides
through a leader election. OFFSET_OUT_OF_RANGE resets the position per
``auto_offset_reset``. A topic still unknown after ``default_api_timeout_ms`` (a freshly
created topic reaches the brokers' metadata a moment after ZooKeeper) raises ClientError.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable

from client.closing import AsyncClosing
from client.consumer_config import ConsumerConfig, ConsumerRecord
from client.fetcher import Fetcher, records_from_fetch
from client.group import GroupMember, RebalanceFailedError, ZkError
from client.metadata import BrokerConnections, BrokerUnreachableError, ClientError, MetadataClient
from client.subscription_state import (
    AUTO_OFFSET_RESET_POLICIES,
    EARLIEST,
    LATEST,
    NoOffsetForPartitionError,
    SubscriptionState,
)
from proto.topic_partition import TopicPartition, topic_name_problem
from proto.wire import minibroker_pb2 as pb

__all__ = [
    "AUTO_OFFSET_RESET_POLICIES",
    "Consumer",
    "ConsumerConfig",
    "ConsumerRecord",
    "NoOffsetForPartitionError",
    "SubscriptionState",
    "records_from_fetch",
]

log = logging.getLogger(__name__)


class Consumer(AsyncClosing):
    """Reads records from partition leaders; see the module docstring.

    Use it as an async context manager (or call :meth:`close`). Its methods must be called
    from one event loop, and one coroutine at a time (as Kafka's consumer is not
    thread-safe); a group's rebalances run in the background on that loop.
    """

    def __init__(
        self,
        connections: BrokerConnections,
        config: ConsumerConfig | None = None,
        zookeeper_connect: str | None = None,
    ) -> None:
        """``connections`` stays the caller's (not closed by :meth:`close`);
        ``zookeeper_connect`` (``host:port[,...][/chroot]``) is needed for :meth:`subscribe`."""
        self.config = config or ConsumerConfig()
        self._connections = connections
        self._zookeeper_connect = zookeeper_connect
        self._metadata = MetadataClient(connections)
        self._state = SubscriptionState(self.config.auto_offset_reset)
        self._subscription: frozenset[str] | None = None
        self._user_assigned = False
        self._closed = False
        self._fetcher = Fetcher(
            connections, self.config, self._state, self._metadata, self._request_metadata_update
        )
        self._metadata_stale = False
        self._last_refresh = -float("inf")
        self._unknown_since: dict[str | TopicPartition, float] = {}
        """Topic (or partition of a known topic) -> loop time since which it has been
        missing from the metadata (or, for a group's topics, from ZooKeeper)."""
        self._group: GroupMember | None = None
        self._rebalance_task: asyncio.Task[None] | None = None
        self._group_error: BaseException | None = None
        self._pending_commit: dict[TopicPartition, int] = {}
        """Positions a running rebalance has yet to commit (committed on close if it dies)."""
        self._last_committed: dict[TopicPartition, int] = {}
        self._next_auto_commit = 0.0

    # -- what to read ----------------------------------------------------------------------

    def assign(self, tps: Iterable[TopicPartition]) -> None:
        """Read exactly ``tps`` (no group rebalancing). Partitions already assigned keep
        their positions; new ones start per ``auto_offset_reset`` (or the committed offset,
        with a group) unless seek'd. Raises ClientError after :meth:`subscribe`, or for an
        illegal topic name or partition."""
        self._check_open()
        if self._subscription is not None:
            raise ClientError("assign() cannot follow subscribe(): the group assigns partitions")
        wanted = list(dict.fromkeys(tps))
        for tp in wanted:
            _check_topic(tp.topic)
            if tp.partition < 0:
                raise ClientError(f"partition must be >= 0, got {tp}")
        self._user_assigned = True
        self._state.assign(wanted)
        self._fetcher.drop_unassigned()

    def subscribe(self, topics: Iterable[str]) -> None:
        """Join ``config.group_id`` for ``topics``: the group splits their partitions among
        its members (range assignment) and rebalances when members come and go. The
        joining happens on the first :meth:`poll`. Raises ClientError without a group id
        or ZooKeeper connect string, after :meth:`assign`, for an illegal topic name, or
        when already subscribed to other topics."""
        self._check_open()
        wanted = frozenset(topics)
        if not wanted:
            raise ClientError("subscribe() needs at least one topic")
        for topic in wanted:
            _check_topic(topic)
        if self.config.group_id is None:
            raise ClientError("subscribe() needs a group: set ConsumerConfig.group_id")
        if not self._zookeeper_connect:
            raise ClientError(
                "subscribe() needs ZooKeeper (consumer groups live there): pass zookeeper_connect"
            )
        if self._user_assigned:
            raise ClientError("subscribe() cannot follow assign()")
        if self._subscription is not None and self._subscription != wanted:
            raise ClientError(
                f"already subscribed to {', '.join(sorted(self._subscription))}; "
                "use another consumer for other topics"
            )
        self._subscription = wanted

    @property
    def position_epoch(self) -> int:
        """Grows whenever a position may jump or go back (a rebalance, a seek, a reset):
        between two values, each partition's polled offsets only grow. For a reader that
        checks its own reads, as the chaos workload does."""
        return self._state.position_epoch

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this consumer reads now (empty while a rebalance runs)."""
        return frozenset(self._state.assigned())

    def subscription(self) -> frozenset[str]:
        return self._subscription or frozenset()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Read ``tp`` from ``offset`` on the next poll. An offset outside the log is reset
        per ``auto_offset_reset`` when the leader refuses it. Raises ClientError when
        ``tp`` is not assigned or ``offset`` is negative."""
        self._check_open()
        try:
            self._state.seek(tp, offset)
        except KeyError:
            raise ClientError(f"cannot seek {tp}: it is not assigned to this consumer") from None
        except ValueError as e:
            raise ClientError(f"cannot seek {tp}: {e}") from None

    def seek_to_beginning(self, tps: Iterable[TopicPartition] | None = None) -> None:
        """Read ``tps`` (default: all assigned) from their log start offsets."""
        self._request_reset(tps, EARLIEST)

    def seek_to_end(self, tps: Iterable[TopicPartition] | None = None) -> None:
        """Read ``tps`` (default: all assigned) from their high watermarks: only new records."""
        self._request_reset(tps, LATEST)

    def _request_reset(self, tps: Iterable[TopicPartition] | None, strategy: str) -> None:
        self._check_open()
        for tp in self._state.assigned() if tps is None else list(tps):
            try:
                self._state.request_reset(tp, strategy)
            except KeyError:
                raise ClientError(
                    f"cannot seek {tp}: it is not assigned to this consumer"
                ) from None

    async def position(self, tp: TopicPartition) -> int:
        """The offset of the next record poll returns for ``tp``, looked up first (ListOffsets)
        if a reset is pending. Raises ClientError when ``tp`` is not assigned, or when the
        offset cannot be found within ``default_api_timeout_ms``. Cancelling it is safe."""
        self._check_open()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.default_api_timeout_ms / 1000
        while True:
            if not self._state.is_assigned(tp):
                raise ClientError(f"{tp} is not assigned to this consumer")
            position = self._state.position(tp)
            if position is not None:
                return position
            if loop.time() >= deadline:
                raise ClientError(
                    f"could not find the position of {tp} within "
                    f"{self.config.default_api_timeout_ms} ms (no leader answered)"
                )
            await self._ensure_group()
            await self._maybe_refresh_metadata()
            await self._update_positions()
            if self._state.position(tp) is None:
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    async def partitions_for(self, topic: str) -> list[TopicPartition]:
        """The topic's partitions from the cluster metadata, waiting up to
        ``default_api_timeout_ms`` for a topic not known yet. With
        ``allow_auto_create_topics`` the brokers may create it (then its leaders are waited
        for up to ``request_timeout_ms``). Raises ClientError for an unknown or illegal
        topic."""
        self._check_open()
        _check_topic(topic)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.default_api_timeout_ms / 1000
        created_deadline = loop.time() + self.config.request_timeout_ms / 1000
        while True:
            topics = {tp.topic for tp in self._state.assigned()} | {topic}
            metadata = await self._metadata.refresh(
                topics, allow_auto_topic_creation=self.config.allow_auto_create_topics
            )
            self._last_refresh = loop.time()
            found = metadata.topics.get(topic)
            if found is not None and found.error_code == pb.INVALID_TOPIC:
                raise ClientError(f"invalid topic {topic!r}")
            if found is not None and found.partitions:
                return [TopicPartition(topic, p) for p in sorted(found.partitions)]
            if found is not None and found.error_code == pb.LEADER_NOT_AVAILABLE:
                # It exists (created for this request, or just before): only its leaders
                # are missing, which the controller elects within a request timeout.
                deadline = max(deadline, created_deadline)
            if loop.time() >= deadline:
                raise ClientError(_unknown_topic_message(topic, self.config))
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    # -- poll ------------------------------------------------------------------------------

    async def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> list[ConsumerRecord]:
        """Records at the positions of the assigned partitions, waiting up to ``timeout_ms``
        for some to arrive; [] when none did. At most ``max_records`` (default
        ``max_poll_records``) are returned; the positions move past exactly those.

        With a group, poll joins it on first use and waits (within ``timeout_ms``) for a
        rebalance in progress. Raises ClientError for an unknown topic (after
        ``default_api_timeout_ms``), a corrupt batch, a failed rebalance or unreachable
        brokers/ZooKeeper on first contact. Cancelling it loses nothing: no position moves
        before it returns, and fetches in flight are kept for the next poll.
        """
        self._check_open()
        limit = self.config.max_poll_records if max_records is None else max_records
        if limit <= 0:
            raise ClientError(f"max_records must be positive, got {limit}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, timeout_ms) / 1000
        if self._subscription is None and not self._user_assigned:
            raise ClientError("poll() needs partitions: call subscribe() or assign() first")
        while True:
            await self._ensure_group()
            if self._subscription is not None:
                await self._await_rebalance(deadline)
            await self._maybe_auto_commit()
            self._fetcher.collect_fetches()
            records = self._fetcher.fetched_records(limit)
            if records:
                return records
            self._check_unknown_topics()
            await self._maybe_refresh_metadata()
            await self._update_positions()
            self._fetcher.send_fetches()
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            tasks = self._fetcher.in_flight
            if tasks:
                await asyncio.wait(tasks, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            else:
                await asyncio.sleep(min(remaining, self._retry_backoff_s))

    @property
    def _retry_backoff_s(self) -> float:
        return self.config.retry_backoff_ms / 1000

    # -- metadata and positions ------------------------------------------------------------

    async def _maybe_refresh_metadata(self) -> None:
        topics = {tp.topic for tp in self._state.assigned()}
        if not topics:
            return
        current = self._metadata.current
        if (
            current is not None
            and not self._metadata_stale
            and all(
                tp.topic in current.topics and tp.partition in current.topics[tp.topic].partitions
                for tp in self._state.assigned()
            )
        ):
            return
        loop = asyncio.get_running_loop()
        if loop.time() - self._last_refresh < self._retry_backoff_s:
            return
        self._last_refresh = loop.time()
        try:
            metadata = await self._metadata.refresh(
                topics, allow_auto_topic_creation=self.config.allow_auto_create_topics
            )
        except BrokerUnreachableError:
            if current is None:
                raise  # never reached the cluster: a wrong address, say so now
            log.warning("consumer metadata_refresh_failed topics=%s", ",".join(sorted(topics)))
            return
        self._metadata_stale = False
        now = loop.time()
        for topic in topics:
            found = metadata.topics.get(topic)
            if found is not None and found.error_code == pb.INVALID_TOPIC:
                raise ClientError(f"invalid topic {topic!r}")
            known_topic = found is not None and found.error_code == pb.NONE
            self._note_known(topic, known_topic, now)
            for tp in self._state.assigned():
                if tp.topic == topic:
                    known = known_topic and found is not None and tp.partition in found.partitions
                    self._note_known(tp, known or not known_topic, now)

    def _request_metadata_update(self) -> None:
        """The fetcher found a leader missing, moved or unreachable: refresh the metadata
        at the next chance (at most once per ``retry_backoff_ms``)."""
        self._metadata_stale = True

    def _note_known(self, what: str | TopicPartition, known: bool, now: float) -> None:
        """Track since when a topic (or a partition of a known topic) has been missing."""
        if known:
            self._unknown_since.pop(what, None)
        else:
            self._unknown_since.setdefault(what, now)
            self._metadata_stale = True

    def _check_unknown_topics(self) -> None:
        now = asyncio.get_running_loop().time()
        limit = self.config.default_api_timeout_ms / 1000
        for what, since in self._unknown_since.items():
            if now - since < limit:
                continue
            if isinstance(what, TopicPartition):
                raise ClientError(
                    f"unknown partition {what} (the topic has no partition {what.partition}; "
                    "see `minibroker topics describe`)"
                )
            raise ClientError(_unknown_topic_message(what, self.config))

    async def _update_positions(self) -> None:
        """Give positions to the partitions that have none: the group's committed offset
        (a consumer that assigned its partitions but has a group), else a reset."""
        awaiting = self._state.awaiting_committed()
        if awaiting and self._group is not None and self._subscription is None:
            try:
                committed = await self._group.committed(awaiting)
            except ZkError as e:
                raise ClientError(f"cannot read the group's committed offsets: {e}") from None
            for tp in awaiting:
                if not self._state.is_assigned(tp) or self._state.position(tp) is not None:
                    continue  # reassigned or seek'd meanwhile
                if tp in committed:
                    self._state.seek(tp, committed[tp])
                    self._last_committed[tp] = committed[tp]
                else:
                    self._state.request_reset(tp)
        await self._fetcher.reset_positions()

    # -- group -----------------------------------------------------------------------------

    async def commit(self) -> None:
        """Commit the positions of the assigned partitions to ZooKeeper
        (``/consumers/<g>/offsets/<t>/<p>`` = the next offset to read). Nothing is
        committed while a rebalance runs (no partition is assigned then). Raises
        ClientError without a group or when ZooKeeper fails. Cancelling it may leave
        some offsets written and others not."""
        self._check_open()
        if self.config.group_id is None:
            raise ClientError("commit() needs a group: set ConsumerConfig.group_id")
        await self._commit(only_changed=False)

    async def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset of ``tp`` (None: nothing committed). Raises
        ClientError without a group; needs :meth:`subscribe` (a joined group)."""
        self._check_open()
        if self.config.group_id is None:
            raise ClientError("committed() needs a group: set ConsumerConfig.group_id")
        await self._ensure_group()
        if self._group is None:
            raise ClientError("committed() needs ZooKeeper: pass zookeeper_connect")
        try:
            return (await self._group.committed([tp])).get(tp)
        except ZkError as e:
            raise ClientError(f"cannot read the committed offset of {tp}: {e}") from None

    async def _commit(self, *, only_changed: bool) -> None:
        await self._ensure_group()
        group = self._group
        if group is None:
            raise ClientError(
                "commit() needs ZooKeeper, where groups keep their offsets: pass zookeeper_connect"
            )
        offsets = {
            tp: p
            for tp, p in self._state.positions().items()
            if not only_changed or self._last_committed.get(tp) != p
        }
        if not offsets:
            return
        try:
            await group.commit(offsets)
        except ZkError as e:
            raise ClientError(f"commit to ZooKeeper failed: {e}") from None
        self._last_committed.update(offsets)

    async def _maybe_auto_commit(self) -> None:
        if self._group is None or not self.config.enable_auto_commit:
            return
        now = asyncio.get_running_loop().time()
        if now < self._next_auto_commit:
            return
        self._next_auto_commit = now + self.config.auto_commit_interval_ms / 1000
        try:
            await self._commit(only_changed=True)
        except ClientError as e:
            log.warning("consumer auto_commit_failed group=%s error=%s", self.config.group_id, e)

    async def _ensure_group(self) -> None:
        """Join the group after subscribe(); with assign(), a group id and ZooKeeper, open
        a session for the group's offsets only (no membership, as Kafka's standalone
        consumer)."""
        if self._group is not None or self.config.group_id is None:
            return
        if not self._zookeeper_connect or (self._subscription is None and not self._user_assigned):
            return
        join = self._subscription is not None
        topics = self._subscription or {tp.topic for tp in self._state.assigned()}
        try:
            group = GroupMember(
                self._zookeeper_connect,
                self.config.group_id,
                topics,
                session_timeout_ms=self.config.zookeeper_session_timeout_ms,
                rebalance_max_retries=self.config.rebalance_max_retries,
                rebalance_backoff_ms=self.config.rebalance_backoff_ms,
                retry_backoff_ms=self.config.retry_backoff_ms,
                on_change=self._schedule_rebalance,
            )
        except ValueError as e:
            raise ClientError(f"bad ZooKeeper connect string: {e}") from None
        try:
            await group.start(join=join)
        except ZkError as e:
            raise ClientError(f"cannot join group {self.config.group_id!r}: {e}") from None
        self._group = group
        self._next_auto_commit = (
            asyncio.get_running_loop().time() + self.config.auto_commit_interval_ms / 1000
        )
        if join:
            self._schedule_rebalance()

    def _schedule_rebalance(self) -> None:
        """Called on the loop when the group changes: run the rebalance in the background,
        as Kafka's old consumer did on its watcher thread, so a member that is not polling
        still hands its partitions over."""
        if self._closed or self._group is None or self._subscription is None:
            return
        if self._rebalance_task is None or self._rebalance_task.done():
            self._rebalance_task = asyncio.get_running_loop().create_task(self._rebalance_loop())

    async def _rebalance_loop(self) -> None:
        group = self._group
        assert group is not None
        while group.changed and not self._closed:
            # Stop fetching first, synchronously: from here no position moves, so what is
            # committed is exactly what the application has seen.
            if self.config.enable_auto_commit:
                self._pending_commit.update(self._state.positions())
            self._state.assign([])
            self._fetcher.cancel_fetches()
            try:
                if self._pending_commit:
                    await group.commit(self._pending_commit)
                    self._last_committed = self._pending_commit
                    # Committed before any release: never again, as a later write could
                    # overwrite what the partitions' next owners commit.
                    self._pending_commit = {}
                result = await group.rebalance()
            except RebalanceFailedError as e:
                self._group_error = e
                return
            except ZkError as e:
                log.warning("consumer rebalance_retry group=%s error=%s", group.group_id, e)
                group.changed = True
                await asyncio.sleep(max(self._retry_backoff_s, 0.05))
                continue
            except Exception as e:
                self._group_error = e
                return
            # Kafka's old consumer starts every owned partition from the committed offset;
            # with auto commit those are the positions just committed.
            self._state.assign(result.partitions, result.partitions)
            for tp, committed in result.partitions.items():
                if committed is None:
                    self._state.request_reset(tp)  # nothing committed: auto_offset_reset
            self._last_committed.update(
                {tp: o for tp, o in result.partitions.items() if o is not None}
            )
            now = asyncio.get_running_loop().time()
            for topic in self._subscription or ():
                self._note_known(topic, topic not in result.missing_topics, now)
            if result.missing_topics and self.config.allow_auto_create_topics:
                await self._create_missing(result.missing_topics)

    async def _create_missing(self, topics: frozenset[str]) -> None:
        """Ask the brokers for subscribed topics ZooKeeper does not have, allowing their
        creation (as Kafka's consumer's metadata requests for its subscription do); the
        topic znode the controller's path writes fires the group's watch, and the next
        rebalance assigns its partitions."""
        try:
            await self._metadata.refresh(topics, allow_auto_topic_creation=True)
        except BrokerUnreachableError as e:
            log.warning("consumer auto_create_failed topics=%s error=%s", ",".join(topics), e)

    async def _await_rebalance(self, deadline: float) -> None:
        task = self._rebalance_task
        loop = asyncio.get_running_loop()
        if task is not None and not task.done() and deadline > loop.time():
            await asyncio.wait({task}, timeout=deadline - loop.time())
        if task is not None and task.done():
            self._rebalance_task = None
            if not task.cancelled() and task.exception() is not None:
                self._group_error = task.exception()
        if self._group_error is not None:
            error = self._group_error
            if isinstance(error, ClientError):
                raise error
            raise ClientError(f"group {self.config.group_id!r}: {error}") from error

    # -- close -----------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop fetching, commit the positions (with a group and auto commit) and leave the
        group. The connections stay open (they are the caller's). Idempotent; a commit
        that fails is logged, not raised."""
        if self._closed:
            return
        self._closed = True
        task, self._rebalance_task = self._rebalance_task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        inflight = self._fetcher.in_flight
        self._fetcher.close()
        if inflight:
            await asyncio.gather(*inflight, return_exceptions=True)
        group, self._group = self._group, None
        if group is None:
            return
        try:
            if self.config.enable_auto_commit:
                offsets = {**self._pending_commit, **self._state.positions()}
                if offsets:
                    await group.commit(offsets)
        except ZkError as e:
            log.warning("consumer final_commit_failed group=%s error=%s", group.group_id, e)
        finally:
            self._state.assign([])
            await group.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientError("the consumer is closed")


def _check_topic(topic: str) -> None:
    problem = topic_name_problem(topic)
    if problem is not None:
        raise ClientError(f"illegal topic name: {problem}")


def _unknown_topic_message(topic: str, config: ConsumerConfig) -> str:
    return (
        f"unknown topic {topic!r} (not in the cluster after {config.default_api_timeout_ms} ms; "
        "create it with `minibroker topics create`, or let the brokers create it: "
        "auto.create.topics.enable)"
    )
