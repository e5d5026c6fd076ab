"""The consumer: reads partitions from their leaders, alone or in a ZooKeeper group (DESIGN.md §7).

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

How a poll works (Kafka's ``Fetcher``): for every assigned partition with a known position
and no fetched records waiting, one Fetch per leader (``replica_id`` -1, the leader epoch
from the metadata for KIP-320 fencing) stays in flight, long-polling up to
``fetch_max_wait_ms``; poll returns as soon as one of them brings records, and keeps the
others in flight for the next poll. A partition's position moves only when poll returns
its records, so the position is always "the next record the application has not seen":
what a commit writes, and what a seek or rebalance replaces (fetched data that no longer
starts at the position is dropped).

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
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType

import grpc

from broker.record_batch import CorruptRecordError, decode_batch, scan_batches
from broker.topic_partition import TopicPartition, topic_name_problem
from client.group import GroupMember, RebalanceFailedError, ZkError, group_name_problem
from client.metadata import (
    BrokerConnections,
    BrokerNode,
    BrokerUnreachableError,
    ClientError,
    ClusterMetadata,
    MetadataClient,
)
from proto import errors
from proto import minibroker_pb2 as pb
from proto import minibroker_pb2_grpc as pb_grpc

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

AUTO_OFFSET_RESET_POLICIES = ("earliest", "latest", "none")
EARLIEST = "earliest"
LATEST = "latest"
_LIST_OFFSETS_TIMESTAMP = {EARLIEST: -2, LATEST: -1}
"""ListOffsets' special timestamps: -2 the log start offset, -1 the high watermark."""


class NoOffsetForPartitionError(ClientError):
    """A partition has no position and ``auto_offset_reset`` is ``none`` (Kafka's
    ``NoOffsetForPartitionException``), or its position fell out of range under ``none``."""


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """The consumer's settings, named as Kafka's consumer configs (dots become underscores).

    Raises ClientError for a value Kafka would refuse.
    """

    group_id: str | None = None
    """The group whose offsets are committed and whose members share the partitions;
    None: no group (assign and seek only, nothing committed)."""
    client_id: str = "minibroker-consumer"
    auto_offset_reset: str = LATEST
    """Where to start without a committed offset or seek, and after OFFSET_OUT_OF_RANGE:
    ``earliest``, ``latest`` (the high watermark) or ``none`` (raise)."""
    fetch_max_wait_ms: int = 500
    """How long a leader may hold a fetch waiting for ``fetch_min_bytes``."""
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 50 * 1024 * 1024
    """Cap on one fetch response (the first batch is returned even when larger)."""
    max_partition_fetch_bytes: int = 1024 * 1024
    max_poll_records: int = 500
    """Most records one poll returns (the rest stay buffered for the next poll)."""
    enable_auto_commit: bool = True
    """Commit the positions every ``auto_commit_interval_ms`` (checked in poll), before each
    rebalance and on close. Without it only :meth:`Consumer.commit` commits."""
    auto_commit_interval_ms: int = 1000
    request_timeout_ms: int = 30_000
    """Deadline of one request to a broker, on top of a fetch's ``fetch_max_wait_ms``."""
    retry_backoff_ms: int = 100
    """Pause before retrying a failed request or refreshing the metadata again."""
    default_api_timeout_ms: int = 10_000
    """How long :meth:`Consumer.position` and friends may wait for the cluster, and how long
    a topic may stay unknown before poll gives up on it (Kafka's default is 60000)."""
    zookeeper_session_timeout_ms: int = 6000
    """The group member's ZooKeeper session: a consumer that dies is replaced this long after."""
    rebalance_max_retries: int = 4
    """Kafka's old-consumer setting: attempts after the first before a rebalance fails."""
    rebalance_backoff_ms: int = 2000
    """Kafka's old-consumer setting: how long one attempt waits for the partitions other
    members have not released yet, and the pause between attempts."""

    def __post_init__(self) -> None:
        if self.group_id is not None:
            problem = group_name_problem(self.group_id)
            if problem is not None:
                raise ClientError(f"illegal group name: {problem}")
        if self.auto_offset_reset not in AUTO_OFFSET_RESET_POLICIES:
            raise ClientError(
                f"auto_offset_reset must be one of {', '.join(AUTO_OFFSET_RESET_POLICIES)}, "
                f"got {self.auto_offset_reset!r}"
            )
        for name in (
            "fetch_min_bytes",
            "fetch_max_bytes",
            "max_partition_fetch_bytes",
            "max_poll_records",
            "auto_commit_interval_ms",
            "request_timeout_ms",
            "default_api_timeout_ms",
            "zookeeper_session_timeout_ms",
        ):
            if getattr(self, name) <= 0:
                raise ClientError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("fetch_max_wait_ms", "retry_backoff_ms", "rebalance_max_retries"):
            if getattr(self, name) < 0:
                raise ClientError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.rebalance_backoff_ms <= 0:
            raise ClientError(
                f"rebalance_backoff_ms must be positive, got {self.rebalance_backoff_ms}"
            )


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """One record as poll returns it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    """CreateTime in ms (LogAppendTime for topics that use it); -1 when unset."""
    headers: tuple[tuple[str, bytes | None], ...] = ()

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def records_from_fetch(
    tp: TopicPartition, fetch_offset: int, data: bytes
) -> tuple[list[ConsumerRecord], int]:
    """Decode the batches a leader returned for a fetch at ``fetch_offset``.

    Returns the records at or after ``fetch_offset`` (a fetch starts at the batch holding
    that offset, so the first batch may hold earlier ones) and the next fetch offset: after
    the last whole batch, or ``fetch_offset`` when there is none. Control batches advance
    the offset without yielding records; a partial batch at the end is left for the next
    fetch. Raises CorruptRecordError for a batch that fails validation.
    """
    records: list[ConsumerRecord] = []
    next_offset = fetch_offset
    scan = scan_batches(data)
    for scanned in scan:
        if scanned.problem is not None:
            raise CorruptRecordError(f"batch at position {scanned.position}: {scanned.problem}")
        header = scanned.header
        if header.next_offset <= fetch_offset:
            continue
        if not header.is_control:
            for record in decode_batch(data, scanned.position).records:
                if record.offset >= fetch_offset:
                    records.append(
                        ConsumerRecord(
                            tp.topic,
                            tp.partition,
                            record.offset,
                            record.key,
                            record.value,
                            record.timestamp,
                            record.headers,
                        )
                    )
        next_offset = max(next_offset, header.next_offset)
    if scan.stop_problem is not None and not scan.incomplete:
        raise CorruptRecordError(scan.stop_reason or "unreadable batch")
    return records, next_offset


class SubscriptionState:
    """Which partitions the consumer reads and from where (Kafka's ``SubscriptionState``).

    Each assigned partition has a position (the next offset to return) or none yet, in
    which case it waits for a reset: the strategy asked by seek_to_beginning/end, else the
    default policy. Pure bookkeeping, no I/O.
    """

    def __init__(self, default_reset: str = LATEST) -> None:
        if default_reset not in AUTO_OFFSET_RESET_POLICIES:
            raise ValueError(f"unknown offset reset policy {default_reset!r}")
        self.default_reset = default_reset
        self._positions: dict[TopicPartition, int | None] = {}
        self._resets: dict[TopicPartition, str] = {}
        """Strategies asked for explicitly (seek_to_beginning/end, out of range)."""

    def assigned(self) -> list[TopicPartition]:
        """The assigned partitions, sorted."""
        return sorted(self._positions)

    def is_assigned(self, tp: TopicPartition) -> bool:
        return tp in self._positions

    def assign(
        self, tps: Iterable[TopicPartition], positions: Mapping[TopicPartition, int | None] = {}
    ) -> None:
        """Replace the assignment. A partition given a position in ``positions`` starts
        there; one that stays assigned keeps its position; any other waits for a reset."""
        wanted = set(tps)
        previous = self._positions
        self._positions = {}
        for tp in sorted(wanted):
            given = positions.get(tp)
            self._positions[tp] = given if given is not None else previous.get(tp)
        self._resets = {tp: s for tp, s in self._resets.items() if tp in wanted}
        for tp, position in self._positions.items():
            if position is not None:
                self._resets.pop(tp, None)

    def position(self, tp: TopicPartition) -> int | None:
        """The next offset to return, None while a reset is pending. Raises KeyError for
        a partition that is not assigned."""
        return self._positions[tp]

    def positions(self) -> dict[TopicPartition, int]:
        """The known positions of the assigned partitions."""
        return {tp: p for tp, p in self._positions.items() if p is not None}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Set the position (KeyError if not assigned, ValueError if negative)."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        if tp not in self._positions:
            raise KeyError(tp)
        self._positions[tp] = offset
        self._resets.pop(tp, None)

    def request_reset(self, tp: TopicPartition, strategy: str | None = None) -> None:
        """Forget the position; the next reset uses ``strategy`` (default: the policy)."""
        if tp not in self._positions:
            raise KeyError(tp)
        self._positions[tp] = None
        self._resets[tp] = strategy or self.default_reset

    def awaiting_committed(self) -> list[TopicPartition]:
        """Partitions without a position and without an explicit reset: a consumer with a
        group starts them at the committed offset, if there is one."""
        return [tp for tp, p in self._positions.items() if p is None and tp not in self._resets]

    def pending_resets(self) -> dict[TopicPartition, str]:
        """Partitions without a position -> the strategy that will give them one."""
        return {
            tp: self._resets.get(tp, self.default_reset)
            for tp, p in self._positions.items()
            if p is None
        }

    def complete_reset(self, tp: TopicPartition, strategy: str, offset: int) -> bool:
        """Apply a reset's answer if the partition still waits for that strategy (a seek
        or reassignment meanwhile wins); returns whether it was applied."""
        if self._positions.get(tp, 0) is not None:
            return False
        if self._resets.get(tp, self.default_reset) != strategy:
            return False
        self.seek(tp, offset)
        return True


@dataclass(slots=True)
class _CompletedFetch:
    """Records fetched for one partition, returned by poll a slice at a time."""

    tp: TopicPartition
    position: int
    """Where the remaining records start: valid while it equals the partition's position."""
    records: list[ConsumerRecord]
    next_offset: int
    """The position once every record is returned."""
    index: int = 0


@dataclass(slots=True)
class _InflightFetch:
    node_id: int
    offsets: dict[TopicPartition, int]
    task: asyncio.Task[pb.FetchResponse]


class Consumer:
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
        self._completed: deque[_CompletedFetch] = deque()
        self._inflight: dict[int, _InflightFetch] = {}
        self._node_backoff_until: dict[int, float] = {}
        self._metadata_stale = False
        self._last_refresh = -float("inf")
        self._reset_backoff_until = -float("inf")
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

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

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
        self._drop_unassigned()

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
        ``default_api_timeout_ms`` for a topic not known yet. Raises ClientError for an
        unknown or illegal topic."""
        self._check_open()
        _check_topic(topic)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.default_api_timeout_ms / 1000
        while True:
            topics = {tp.topic for tp in self._state.assigned()} | {topic}
            metadata = await self._metadata.refresh(topics)
            self._last_refresh = loop.time()
            found = metadata.topics.get(topic)
            if found is not None and found.error_code == pb.INVALID_TOPIC:
                raise ClientError(f"invalid topic {topic!r}")
            if found is not None and found.partitions:
                return [TopicPartition(topic, p) for p in sorted(found.partitions)]
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
            self._collect_fetches()
            records = self._drain(limit)
            if records:
                return records
            self._check_unknown_topics()
            await self._maybe_refresh_metadata()
            await self._update_positions()
            self._send_fetches()
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            tasks = {f.task for f in self._inflight.values()}
            if tasks:
                await asyncio.wait(tasks, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            else:
                await asyncio.sleep(min(remaining, self._retry_backoff_s))

    def _drain(self, limit: int) -> list[ConsumerRecord]:
        """Up to ``limit`` buffered records that start at their partitions' positions,
        moving the positions past them; stale buffers (seek, reassignment) are dropped."""
        out: list[ConsumerRecord] = []
        while self._completed and len(out) < limit:
            done = self._completed[0]
            if (
                not self._state.is_assigned(done.tp)
                or self._state.position(done.tp) != done.position
            ):
                self._completed.popleft()
                continue
            taken = done.records[done.index : done.index + limit - len(out)]
            out += taken
            done.index += len(taken)
            if done.index >= len(done.records):
                done.position = done.next_offset
                self._completed.popleft()
            else:
                done.position = taken[-1].offset + 1
            self._state.seek(done.tp, done.position)
        return out

    # -- fetching --------------------------------------------------------------------------

    @property
    def _retry_backoff_s(self) -> float:
        return self.config.retry_backoff_ms / 1000

    def _send_fetches(self) -> None:
        """Start one fetch per leader for the partitions that have a position, no buffered
        records and no fetch in flight."""
        metadata = self._metadata.current
        if metadata is None:
            return
        now = asyncio.get_running_loop().time()
        busy = {tp for f in self._inflight.values() for tp in f.offsets}
        busy |= {c.tp for c in self._completed}
        by_node: dict[int, dict[TopicPartition, int]] = {}
        nodes: dict[int, BrokerNode] = {}
        epochs: dict[TopicPartition, int] = {}
        for tp, position in self._state.positions().items():
            if tp in busy:
                continue
            leader = _live_leader(metadata, tp)
            if leader is None:
                self._metadata_stale = True
                continue
            node, epoch = leader
            if node.node_id in self._inflight:
                continue
            if self._node_backoff_until.get(node.node_id, 0.0) > now:
                continue
            by_node.setdefault(node.node_id, {})[tp] = position
            nodes[node.node_id] = node
            epochs[tp] = epoch
        for node_id, offsets in by_node.items():
            request = pb.FetchRequest(
                replica_id=-1,
                max_wait_ms=self.config.fetch_max_wait_ms,
                min_bytes=self.config.fetch_min_bytes,
                max_bytes=self.config.fetch_max_bytes,
                client_id=self.config.client_id,
                replica_epoch=-1,
            )
            topics: dict[str, pb.FetchTopic] = {}
            for tp, offset in offsets.items():
                topic = topics.get(tp.topic)
                if topic is None:
                    topic = topics[tp.topic] = request.topics.add(topic=tp.topic)
                topic.partitions.add(
                    partition=tp.partition,
                    current_leader_epoch=epochs[tp],
                    fetch_offset=offset,
                    log_start_offset=-1,
                    partition_max_bytes=self.config.max_partition_fetch_bytes,
                )
            stub = pb_grpc.BrokerStub(self._connections.channel(nodes[node_id].address))
            timeout = (self.config.fetch_max_wait_ms + self.config.request_timeout_ms) / 1000
            task = asyncio.ensure_future(stub.Fetch(request, timeout=timeout))
            self._inflight[node_id] = _InflightFetch(node_id, offsets, task)

    def _collect_fetches(self) -> None:
        """Turn finished fetches into buffered records, resets and metadata refreshes."""
        for node_id, fetch in list(self._inflight.items()):
            if not fetch.task.done():
                continue
            del self._inflight[node_id]
            if fetch.task.cancelled():
                continue
            error = fetch.task.exception()
            if isinstance(error, grpc.aio.AioRpcError):
                self._leader_failed(node_id, f"fetch failed: {error.code().name}")
                continue
            if error is not None:
                raise error
            self._handle_fetch_response(node_id, fetch.offsets, fetch.task.result())

    def _handle_fetch_response(
        self, node_id: int, offsets: Mapping[TopicPartition, int], response: pb.FetchResponse
    ) -> None:
        if response.error_code != pb.NONE:
            self._leader_failed(node_id, f"fetch refused: {pb.ErrorCode.Name(response.error_code)}")
            return
        for topic in response.responses:
            for part in topic.partitions:
                tp = TopicPartition(topic.topic, part.partition_index)
                fetch_offset = offsets.get(tp)
                if (
                    fetch_offset is None
                    or not self._state.is_assigned(tp)
                    or self._state.position(tp) != fetch_offset
                ):
                    continue  # seek'd or reassigned while the fetch was in flight
                if part.error_code == pb.NONE:
                    try:
                        records, next_offset = records_from_fetch(tp, fetch_offset, part.records)
                    except CorruptRecordError as e:
                        raise ClientError(
                            f"corrupt record batch in {tp} at offset {fetch_offset}: {e}"
                        ) from None
                    if next_offset > fetch_offset:
                        self._completed.append(
                            _CompletedFetch(tp, fetch_offset, records, next_offset)
                        )
                elif part.error_code == pb.OFFSET_OUT_OF_RANGE:
                    log.info(
                        "consumer offset_out_of_range tp=%s offset=%d log_start=%d hw=%d reset=%s",
                        tp,
                        fetch_offset,
                        part.log_start_offset,
                        part.high_watermark,
                        self.config.auto_offset_reset,
                    )
                    if self.config.auto_offset_reset == "none":
                        raise NoOffsetForPartitionError(
                            f"offset {fetch_offset} of {tp} is out of range (log start "
                            f"{part.log_start_offset}, high watermark {part.high_watermark}) "
                            "and auto_offset_reset is none"
                        )
                    self._state.request_reset(tp)
                else:
                    self._partition_failed(node_id, tp, part.error_code, part.error_message)

    def _partition_failed(self, node_id: int, tp: TopicPartition, code: int, message: str) -> None:
        error = errors.for_code(code, message)
        if error is None:
            return
        if code == pb.UNKNOWN_TOPIC_OR_PARTITION:
            self._metadata_stale = True
        elif not error.retriable:
            raise ClientError(f"cannot fetch {tp}: {error}")
        log.debug("consumer fetch_error broker=%d tp=%s error=%s", node_id, tp, error)
        if error.invalid_metadata:
            self._metadata_stale = True
        self._node_backoff_until[node_id] = (
            asyncio.get_running_loop().time() + self._retry_backoff_s
        )

    def _leader_failed(self, node_id: int, why: str) -> None:
        """A leader could not be reached or refused the request: find the leaders again."""
        log.info("consumer leader_unreachable broker=%d %s", node_id, why)
        self._metadata_stale = True
        self._node_backoff_until[node_id] = (
            asyncio.get_running_loop().time() + self._retry_backoff_s
        )

    def _cancel_fetches(self) -> None:
        """Abandon every fetch in flight and every buffered record (seek and reassignment
        make them stale; the positions stay where the application is)."""
        for fetch in self._inflight.values():
            if fetch.task.done():
                if not fetch.task.cancelled():
                    fetch.task.exception()  # retrieved: asyncio does not log it as lost
            else:
                fetch.task.cancel()
        self._inflight.clear()
        self._completed.clear()

    def _drop_unassigned(self) -> None:
        self._completed = deque(c for c in self._completed if self._state.is_assigned(c.tp))

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
            metadata = await self._metadata.refresh(topics)
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
        await self._reset_positions()

    async def _reset_positions(self) -> None:
        """Look up the offsets of partitions waiting for a reset (ListOffsets to leaders)."""
        pending = self._state.pending_resets()
        if not pending:
            return
        for tp, strategy in pending.items():
            if strategy == "none":
                raise NoOffsetForPartitionError(
                    f"{tp} has no committed offset and auto_offset_reset is none"
                )
        loop = asyncio.get_running_loop()
        metadata = self._metadata.current
        if metadata is None or loop.time() < self._reset_backoff_until:
            return
        by_node: dict[int, list[tuple[TopicPartition, str, int]]] = {}
        nodes: dict[int, BrokerNode] = {}
        for tp, strategy in pending.items():
            leader = _live_leader(metadata, tp)
            if leader is None:
                self._metadata_stale = True
                continue
            node, epoch = leader
            by_node.setdefault(node.node_id, []).append((tp, strategy, epoch))
            nodes[node.node_id] = node
        if not by_node:
            return
        results = await asyncio.gather(
            *(self._list_offsets(nodes[n], parts) for n, parts in by_node.items()),
            return_exceptions=True,
        )
        failed = False
        for node_id, result in zip(by_node, results, strict=True):
            if isinstance(result, grpc.aio.AioRpcError):
                self._leader_failed(node_id, f"ListOffsets failed: {result.code().name}")
                failed = True
                continue
            if isinstance(result, BaseException):
                raise result
            strategies = {tp: s for tp, s, _ in by_node[node_id]}
            for tp, code, offset in result:
                if code == pb.NONE and offset >= 0:
                    if self._state.is_assigned(tp):
                        self._state.complete_reset(tp, strategies[tp], offset)
                    continue
                failed = True
                error = errors.for_code(code) if code != pb.NONE else None
                if error is not None and not error.retriable:
                    raise ClientError(f"cannot find the {strategies[tp]} offset of {tp}: {error}")
                if error is None or error.invalid_metadata:
                    self._metadata_stale = True
        if failed:
            self._reset_backoff_until = loop.time() + self._retry_backoff_s

    async def _list_offsets(
        self, node: BrokerNode, parts: list[tuple[TopicPartition, str, int]]
    ) -> list[tuple[TopicPartition, int, int]]:
        request = pb.ListOffsetsRequest(replica_id=-1, isolation_level=0)
        topics: dict[str, pb.ListOffsetsTopic] = {}
        for tp, strategy, epoch in parts:
            topic = topics.get(tp.topic)
            if topic is None:
                topic = topics[tp.topic] = request.topics.add(name=tp.topic)
            topic.partitions.add(
                partition_index=tp.partition,
                current_leader_epoch=epoch,
                timestamp=_LIST_OFFSETS_TIMESTAMP[strategy],
            )
        response = await pb_grpc.BrokerStub(self._connections.channel(node.address)).ListOffsets(
            request, timeout=self.config.request_timeout_ms / 1000
        )
        return [
            (TopicPartition(t.name, p.partition_index), p.error_code, p.offset)
            for t in response.topics
            for p in t.partitions
        ]

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
            self._cancel_fetches()
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
        inflight = [f.task for f in self._inflight.values()]
        self._cancel_fetches()
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
        "create it with `minibroker topics create`)"
    )


def _live_leader(metadata: ClusterMetadata, tp: TopicPartition) -> tuple[BrokerNode, int] | None:
    """The partition's leader and leader epoch, or None while it has none usable."""
    topic = metadata.topics.get(tp.topic)
    partition = None if topic is None else topic.partitions.get(tp.partition)
    if partition is None or partition.error_code != pb.NONE:
        return None
    node = metadata.leader_of(tp)
    return None if node is None else (node, partition.leader_epoch)
