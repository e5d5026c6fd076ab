"""One partition replica on this broker: leader or follower state, high watermark and ISR.

The decisions of Kafka's ``Partition`` live here as plain, synchronous logic, so they can be
tested without servers: when the high watermark moves, when a follower counts as caught up,
which replicas fall out of the ISR and which one may rejoin it. Side effects that need the
network or ZooKeeper (writing the ISR to the state znode, waking the purgatories, starting
fetchers) belong to the replica manager, which calls in here and acts on the answers.

Threading: every method runs on the broker's event loop thread. Only the ``Log`` is shared
with executor threads (reads), and it locks itself.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from broker.log.log import FetchData, Log, LogAppendInfo
from broker.log.producer_state import AppendOrigin
from broker.log.transaction_index import AbortedTxn
from proto import errors
from proto.process.event_log import log_event
from proto.records.control_records import EndTxnMarker
from proto.records.record_batch import HEADER_SIZE, batch_tail, parse_header
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb

logger = logging.getLogger(__name__)

ACKS_ALL = -1
NO_LEADER = -1
UNKNOWN_OFFSET = -1
DELETE_TO_HIGH_WATERMARK = -1
"""DeleteRecords' offset meaning "everything below the high watermark"."""


@dataclass(frozen=True)
class PartitionConfig:
    """The per-topic settings a partition needs (broker defaults overridden by /config/topics)."""

    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = 10_000


@dataclass(frozen=True)
class LeadershipState:
    """A partition's state as a LeaderAndIsr request carries it (the state znode + assignment)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    zk_version: int
    """Version of the state znode the ISR was read from; the leader's conditional ISR writes
    are made against it."""
    controller_epoch: int
    """Epoch of the controller that made this leadership decision."""


class SessionClock:
    """When an incremental fetch session last fetched (see ``ReplicaState.session_clock``)."""

    __slots__ = ("last_fetch_ms",)

    def __init__(self) -> None:
        self.last_fetch_ms = 0


@dataclass
class ReplicaState:
    """A follower as its leader sees it, from that follower's fetches (Kafka's ``Replica``)."""

    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    """The fetch offset of the follower's latest fetch; unknown (-1) right after the local
    broker became leader, so the HW cannot move until every ISR follower has fetched."""
    log_start_offset: int = UNKNOWN_OFFSET
    last_caught_up_time_ms: int = 0
    """When the follower last had everything the leader had (KAFKA-4485)."""
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0
    session_clock: SessionClock | None = None
    """Set while the partition is unchanged since the last fetch of this follower's
    incremental fetch session that read it: each later fetch of the session fetched it too,
    at the same offsets, and the clock says when the last one was. Kept this way, not
    recorded per partition at every fetch, as that had been most of an idle leader's work
    at 10,000 partitions. :meth:`settle` records those fetches when the partition changes."""

    def caught_up_time_ms(self) -> int:
        """When the follower last had everything the leader had, its session's fetches
        included (``last_caught_up_time_ms`` once settled)."""
        clock = self.session_clock
        if clock is None:
            return self.last_caught_up_time_ms
        return self._caught_up_as_of(clock.last_fetch_ms)

    def settle(self) -> None:
        """Record the session's fetches since the last one that read the partition (as
        :meth:`update_fetch_state` would have at the last of them), and stop counting them."""
        clock = self.session_clock
        if clock is None:
            return
        self.session_clock = None
        if clock.last_fetch_ms > self.last_fetch_time_ms:
            self.last_caught_up_time_ms = self._caught_up_as_of(clock.last_fetch_ms)
            self.last_fetch_time_ms = clock.last_fetch_ms

    def _caught_up_as_of(self, fetch_ms: int) -> int:
        """A fetch at ``fetch_ms`` from the same offset as the last one, the leader's LEO
        unchanged since: caught up then if it was caught up at the last one."""
        if self.log_end_offset >= self.last_fetch_leader_log_end_offset:
            return max(self.last_caught_up_time_ms, fetch_ms)
        return self.last_caught_up_time_ms

    def update_fetch_state(
        self, fetch_offset: int, log_start_offset: int, leader_log_end_offset: int, now_ms: int
    ) -> None:
        """Kafka's ``Replica.updateFetchState``.

        A fetch from the leader's current LEO means caught up now; a fetch from at least
        the LEO the leader had at the previous fetch means caught up as of that fetch. This
        keeps a follower that fetches continuously under a steady write load in sync even
        though it is never exactly at the LEO.
        """
        self.settle()
        if fetch_offset >= leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_log_end_offset = leader_log_end_offset
        self.last_fetch_time_ms = now_ms

    def reset(self, caught_up_time_ms: int) -> None:
        self.session_clock = None
        self.log_end_offset = UNKNOWN_OFFSET
        self.log_start_offset = UNKNOWN_OFFSET
        self.last_caught_up_time_ms = caught_up_time_ms
        self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
        self.last_fetch_time_ms = 0


@dataclass(frozen=True)
class FetchResult:
    """A read plus the partition's offsets, as the fetch response reports them."""

    data: FetchData
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    leader_epoch: int
    last_stable_offset: int = -1
    aborted: tuple[AbortedTxn, ...] | None = None
    """For read_committed: the aborted transactions overlapping what was read."""


_APPENDED_MARKS = 4096
"""How many recent appends a partition remembers the sizes of (at least)."""


@dataclass
class _AppendedBytes:
    """Recent (next offset, cumulative bytes) marks, to estimate the bytes a fetch would get
    without touching the disk (the fetch purgatory's ``min_bytes`` check)."""

    offsets: list[int] = field(default_factory=list)
    totals: list[int] = field(default_factory=list)
    total: int = 0

    def reset(self, offset: int) -> None:
        """Forget the marks: what is below ``offset`` is now of unknown size."""
        self.offsets.clear()
        self.totals.clear()
        self.offsets.append(offset)
        self.totals.append(self.total)

    def record(self, next_offset: int, size: int) -> None:
        self.total += size
        self.offsets.append(next_offset)
        self.totals.append(self.total)
        if len(self.offsets) > 2 * _APPENDED_MARKS:
            # Forget the oldest half at once: amortised O(1), and lists stay bisectable.
            del self.offsets[:_APPENDED_MARKS]
            del self.totals[:_APPENDED_MARKS]

    def between(self, start_offset: int, end_offset: int) -> int:
        if end_offset <= start_offset:
            return 0
        if not self.offsets or start_offset < self.offsets[0]:
            # Older than what we remember: at least one whole batch, probably much more.
            return 1 << 30
        start = bisect.bisect_right(self.offsets, start_offset) - 1
        end = bisect.bisect_right(self.offsets, end_offset) - 1
        return max(1, self.totals[end] - self.totals[start]) if end >= 0 else 1


class Partition:
    """A replica of one partition on this broker (Kafka's ``cluster.Partition``)."""

    def __init__(
        self,
        topic_partition: TopicPartition,
        local_broker_id: int,
        log: Log,
        *,
        high_watermark: int = 0,
        config: PartitionConfig | None = None,
        clock_ms: Callable[[], int],
    ) -> None:
        self.topic_partition = topic_partition
        self.local_broker_id = local_broker_id
        self.log = log
        self.config = config or PartitionConfig()
        self._clock_ms = clock_ms
        self.leader_id = NO_LEADER
        self.leader_epoch = -1
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        """The LEO when this broker became leader: a follower must reach it to rejoin the ISR
        (KAFKA-7128)."""
        self.isr: tuple[int, ...] = ()
        self.replicas: tuple[int, ...] = ()
        self.zk_version = -1
        self.controller_epoch = -1
        self.remote_replicas: dict[int, ReplicaState] = {}
        self.isr_update_in_flight = False
        """A conditional write of the ISR is under way: start no second one meanwhile."""
        self.fenced = False
        """Set when this broker may no longer be leader (its ZooKeeper session was lost, or
        its controlled shutdown moved its leaderships): it refuses writes and fetches as a
        leader until the controller tells it its role again."""
        self.fenced_because = ""
        """Why it is fenced, for the NOT_LEADER_OR_FOLLOWER message."""
        self._high_watermark = self._clamp(high_watermark)
        self._appended = _AppendedBytes()
        self._appended.reset(log.log_end_offset)

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic_partition}, leader={self.leader_id}, "
            f"epoch={self.leader_epoch}, isr={list(self.isr)}, hw={self._high_watermark}, "
            f"leo={self.log.log_end_offset})"
        )

    # -- state ---------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def _clamp(self, offset: int) -> int:
        return max(self.log.log_start_offset, min(offset, self.log.log_end_offset))

    def log_context(self) -> dict[str, Any]:
        """Fields for one structured log line about this partition."""
        return {
            "broker": self.local_broker_id,
            "tp": str(self.topic_partition),
            "leader": self.leader_id,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
            "hw": self._high_watermark,
            "leo": self.log.log_end_offset,
        }

    # -- leadership changes ----------------------------------------------------------------

    def make_leader(self, state: LeadershipState) -> bool:
        """Become leader. Returns False if the state's leader epoch is not newer than ours.

        KAFKA-7415: the new epoch is recorded in the epoch cache at the current LEO at once,
        before any data is written, so the leader can answer OffsetsForLeaderEpoch for every
        epoch a follower may ask about after back-to-back elections.
        """
        if state.leader_epoch < self.leader_epoch:
            return False
        # First, as the one step that can fail (a checkpoint write): a failure then leaves
        # the partition in its old role, not a leader without its epoch recorded.
        self.log.epoch_cache.assign(state.leader_epoch, self.log.log_end_offset)
        now = self._clock_ms()
        self._adopt(state)
        self.fenced = False
        self.leader_epoch_start_offset = self.log.log_end_offset
        self.remote_replicas = {
            b: ReplicaState(b) for b in state.replicas if b != self.local_broker_id
        }
        for broker_id, replica in self.remote_replicas.items():
            replica.reset(now if broker_id in self.isr else 0)
        self.maybe_increment_high_watermark()
        return True

    def make_follower(self, state: LeadershipState) -> bool:
        """Become follower of ``state.leader``. Returns True if the leader or its epoch
        changed, i.e. the fetcher must (re)truncate before fetching (KAFKA-7164)."""
        if state.leader_epoch < self.leader_epoch:
            return False
        changed = state.leader != self.leader_id or state.leader_epoch != self.leader_epoch
        self._adopt(state)
        self.fenced = False
        self.remote_replicas = {}
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        return changed

    def _adopt(self, state: LeadershipState) -> None:
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.isr = state.isr
        self.replicas = state.replicas
        self.zk_version = state.zk_version
        self.controller_epoch = state.controller_epoch
        self.isr_update_in_flight = False

    def check_leader_epoch(self, current_leader_epoch: int | None) -> None:
        """KIP-320 fencing of a request that names the epoch it believes current."""
        if current_leader_epoch is None or current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise errors.FencedLeaderEpochError(
                f"{self.topic_partition}: request epoch {current_leader_epoch} is older than "
                f"the current leader epoch {self.leader_epoch}"
            )
        if current_leader_epoch > self.leader_epoch:
            raise errors.UnknownLeaderEpochError(
                f"{self.topic_partition}: request epoch {current_leader_epoch} is newer than "
                f"this broker's leader epoch {self.leader_epoch}"
            )

    def fence(self, because: str) -> None:
        """Stop acting as leader (``because`` says why) until a LeaderAndIsr sets the role."""
        self.fenced = True
        self.fenced_because = because

    def require_leader(self) -> None:
        if not self.is_leader or self.fenced:
            raise errors.NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of {self.topic_partition} "
                f"(leader {self.leader_id}, epoch {self.leader_epoch}"
                f"{', fenced: ' + self.fenced_because if self.fenced else ''})"
            )

    # -- leader: produce -------------------------------------------------------------------

    def append_records_to_leader(
        self, records: bytes, required_acks: int, origin: AppendOrigin = AppendOrigin.CLIENT
    ) -> LogAppendInfo:
        """Append a producer's batches (Kafka's ``appendRecordsToLeader``).

        With acks=all, a partition whose ISR is below ``min.insync.replicas`` refuses the
        write before touching the log (NOT_ENOUGH_REPLICAS). Batches of an idempotent
        producer are checked against its sequence (the Log raises OUT_OF_ORDER_SEQUENCE or
        INVALID_PRODUCER_EPOCH errors); a retried batch is not appended again, and the
        result (``duplicate``) carries its original offsets, which the caller answers and,
        for acks=all, waits on like a fresh append: the first attempt may not be
        replicated yet.
        """
        self.require_leader()
        min_isr = self.config.min_insync_replicas
        if required_acks == ACKS_ALL and len(self.isr) < min_isr:
            raise errors.NotEnoughReplicasError(
                f"{self.topic_partition}: ISR {list(self.isr)} has {len(self.isr)} replicas, "
                f"min.insync.replicas is {min_isr}"
            )
        info = self.log.append_as_leader(records, self.leader_epoch, origin)
        if not info.duplicate:
            self._appended.record(info.last_offset + 1, info.valid_bytes)
            self.maybe_increment_high_watermark()
        return info

    def append_marker_to_leader(
        self, marker: EndTxnMarker, producer_id: int, producer_epoch: int, timestamp: int
    ) -> LogAppendInfo:
        """Append a transaction marker (WriteTxnMarkers), acks=all as Kafka writes them:
        refused NOT_ENOUGH_REPLICAS while the ISR is below ``min.insync.replicas``."""
        self.require_leader()
        min_isr = self.config.min_insync_replicas
        if len(self.isr) < min_isr:
            raise errors.NotEnoughReplicasError(
                f"{self.topic_partition}: ISR {list(self.isr)} has {len(self.isr)} replicas, "
                f"min.insync.replicas is {min_isr}"
            )
        info = self.log.append_marker_as_leader(
            marker, producer_id, producer_epoch, self.leader_epoch, timestamp
        )
        self._appended.record(info.last_offset + 1, info.valid_bytes)
        self.maybe_increment_high_watermark()
        return info

    def produce_status(self, required_offset: int) -> int | None:
        """For the produce purgatory: None while an acks=all write at offsets below
        ``required_offset`` is still waiting for the ISR, else its error code."""
        try:
            self.require_leader()
        except errors.NotLeaderOrFollowerError as err:
            return err.code
        if self._high_watermark < required_offset:
            return None
        if len(self.isr) < self.config.min_insync_replicas:
            return errors.NotEnoughReplicasAfterAppendError.code
        return pb.NONE

    # -- leader: followers -----------------------------------------------------------------

    def update_follower_fetch_state(
        self, replica_id: int, fetch_offset: int, log_start_offset: int
    ) -> bool:
        """Record a follower's fetch; returns True if the high watermark moved."""
        replica = self.remote_replicas.get(replica_id)
        if replica is None:
            raise errors.NotLeaderOrFollowerError(
                f"broker {replica_id} is not a replica of {self.topic_partition} "
                f"(replicas {list(self.replicas)})"
            )
        replica.update_fetch_state(
            fetch_offset, log_start_offset, self.log.log_end_offset, self._clock_ms()
        )
        return self.maybe_increment_high_watermark()

    def follow_in_session(self, replica_id: int, clock: SessionClock) -> None:
        """The follower's fetch was just recorded by a fetch of its incremental session: its
        session's later fetches count as fetching this partition again until it changes
        (see ``ReplicaState.session_clock``)."""
        replica = self.remote_replicas.get(replica_id)
        if replica is not None:
            replica.session_clock = clock

    def settle_follower(self, replica_id: int) -> None:
        """The partition changed: record the session fetches that did not read it."""
        replica = self.remote_replicas.get(replica_id)
        if replica is not None:
            replica.settle()

    def isr_to_expand(self, replica_id: int) -> tuple[int, ...] | None:
        """The ISR with ``replica_id`` added, if that follower may rejoin now.

        It must have caught up with the high watermark and with the start of the current
        leader epoch (KAFKA-7128): otherwise a follower that still holds a stale tail from an
        earlier epoch could join and then be elected with it.
        """
        if not self.is_leader or self.isr_update_in_flight or replica_id in self.isr:
            return None
        replica = self.remote_replicas.get(replica_id)
        if replica is None:
            return None
        leo = replica.log_end_offset
        if leo >= self._high_watermark and leo >= self.leader_epoch_start_offset:
            return tuple(sorted({*self.isr, replica_id}))
        return None

    def isr_to_shrink(self) -> tuple[int, ...] | None:
        """The ISR without the followers that have not caught up for replica.lag.time.max.ms.

        Kafka's rule: a follower is out of sync when its LEO differs from the leader's and it
        has not been caught up within the lag time; the leader itself is never removed. A
        fenced leader changes no ISR: it may have been replaced already.
        """
        if not self.is_leader or self.fenced or self.isr_update_in_flight:
            return None
        now = self._clock_ms()
        leo = self.log.log_end_offset
        lag = self.config.replica_lag_time_max_ms
        out_of_sync = {
            b
            for b in self.isr
            if b != self.local_broker_id
            and (replica := self.remote_replicas.get(b)) is not None
            and replica.log_end_offset != leo
            and now - replica.caught_up_time_ms() > lag
        }
        if not out_of_sync:
            return None
        return tuple(b for b in self.isr if b not in out_of_sync)

    def apply_isr(self, isr: Iterable[int], zk_version: int) -> bool:
        """Adopt an ISR that was written to the state znode; returns True if the HW moved."""
        self.isr = tuple(isr)
        self.zk_version = zk_version
        self.isr_update_in_flight = False
        return self.maybe_increment_high_watermark()

    def maybe_increment_high_watermark(self) -> bool:
        """HW = min LEO over the ISR and the followers caught up within the lag time.

        Counting caught-up followers outside the ISR (KAFKA-4485) lets one that is about to
        rejoin hold the HW back instead of racing ahead of it. The HW only moves forward; an
        unknown follower LEO (-1, right after becoming leader) keeps it where it is.
        """
        if not self.is_leader:
            return False
        now = self._clock_ms()
        lag = self.config.replica_lag_time_max_ms
        new_hw = self.log.log_end_offset
        for broker_id, replica in self.remote_replicas.items():
            if broker_id in self.isr or now - replica.caught_up_time_ms() <= lag:
                new_hw = min(new_hw, replica.log_end_offset)
        if new_hw > self._high_watermark:
            old = self._high_watermark
            self._high_watermark = new_hw
            self.log.forget_replicated_markers(new_hw)
            logger.debug("high watermark %d -> %d %s", old, new_hw, self.log_context())
            return True
        return False

    # -- leader: DeleteRecords (KIP-107) ---------------------------------------------------

    def delete_records_on_leader(self, offset: int) -> int:
        """Raise the log start offset to ``offset`` (-1: the high watermark); return the
        offset asked for (Kafka's ``deleteRecordsOnLeader``).

        Only committed records may go: an offset above the high watermark is
        OFFSET_OUT_OF_RANGE, as Kafka's ``maybeIncrementLogStartOffset`` refuses it. An
        offset at or below the current log start offset changes nothing. The log start
        offset reaches the disk with the next ``log-start-offset-checkpoint``; whole
        segments below it go with the next retention pass.
        """
        self.require_leader()
        wanted = self._high_watermark if offset == DELETE_TO_HIGH_WATERMARK else offset
        if wanted < 0:
            raise errors.OffsetOutOfRangeError(
                f"{self.topic_partition}: the offset {wanted} is not valid"
            )
        if wanted > self._high_watermark:
            raise errors.OffsetOutOfRangeError(
                f"{self.topic_partition}: cannot delete records up to {wanted}, above the "
                f"high watermark {self._high_watermark}"
            )
        if self.log.maybe_increment_log_start_offset(wanted):
            logger.info("log start offset raised to %d %s", wanted, self.log_context())
        return wanted

    def low_watermark_if_leader(self, is_alive: Callable[[int], bool]) -> int:
        """The smallest log start offset among this leader and the replicas on live brokers
        (Kafka's ``lowWatermarkIfLeader``): DeleteRecords is answered once it reaches the
        offset asked for. A follower's log start offset is what its latest fetch said, -1
        before it fetched, which keeps the answer waiting until it has."""
        self.require_leader()
        low = self.log.log_start_offset
        for broker_id, replica in self.remote_replicas.items():
            if is_alive(broker_id) and replica.log_start_offset < low:
                low = replica.log_start_offset
        return low

    # -- follower ----------------------------------------------------------------------------

    def fit_follower_append(self, records: bytes, *, cut_straddling_batch: bool) -> bytes:
        """What of fetched ``records`` to append when their first batch holds the LEO but
        starts below it (docs/replication.md, "A batch across the follower's log end"):
        in a log empty at its log start offset, all of them, the log started over at the
        batch's base offset (Kafka's ``Partition.appendRecordsToFollowerOrFutureReplica``,
        KAFKA-6975); else, with ``cut_straddling_batch`` (the high-watermark mode), the
        batch cut at the LEO, this replica keeping its own records below, as a pre-0.11
        follower did; else ``records`` unchanged, which the Log refuses. On the loop,
        before the append; CorruptRecordError, or OSError from the truncation."""
        if len(records) < HEADER_SIZE:
            return records  # nothing, or a fragment the Log reports
        first = parse_header(records)
        leo = self.log.log_end_offset
        if not first.base_offset < leo <= first.last_offset:
            return records
        fields = {
            **self.log_context(),
            "local_epoch": self.latest_epoch(),
            "batch_epoch": first.partition_leader_epoch,
            "batch_base": first.base_offset,
            "batch_last": first.last_offset,
        }
        if leo == self.log.log_start_offset:
            self.truncate_fully_and_start_at(first.base_offset)
            log_event(logger, logging.INFO, "partition", "follower_log_restarted", **fields)
            return records
        if not cut_straddling_batch:
            return records
        tail = batch_tail(records, 0, leo)
        # own_from..own_to: this replica's own records where the leader's batch holds others.
        own = {"own_from": first.base_offset, "own_to": leo - 1}
        log_event(logger, logging.WARNING, "partition", "straddling_batch_cut", **fields, **own)
        return tail + records[first.size :]

    def append_as_follower(self, records: bytes) -> LogAppendInfo:
        info = self.log.append_as_follower(records)
        if info.num_batches:
            self._appended.record(info.last_offset + 1, info.valid_bytes)
        return info

    def update_follower_high_watermark(self, leader_high_watermark: int) -> bool:
        """Follower HW = min(leader HW, own LEO): it may lag one fetch behind the leader's,
        and move back after a truncation. Returns True if it changed."""
        new_hw = self._clamp(leader_high_watermark)
        if new_hw == self._high_watermark:
            return False
        self._high_watermark = new_hw
        self.log.forget_replicated_markers(new_hw)
        return True

    def follow_leader_log_start_offset(self, leader_log_start_offset: int) -> bool:
        """Raise the log start offset to the leader's, as its fetch response reports it
        (Kafka's follower calls ``maybeIncrementLogStartOffset`` after each append): records
        deleted on the leader are deleted here too, at most up to the local LEO. Returns
        True if it moved."""
        offset = min(leader_log_start_offset, self.log.log_end_offset)
        if not self.log.maybe_increment_log_start_offset(offset):
            return False
        self._high_watermark = self._clamp(self._high_watermark)
        return True

    def truncate_to(self, offset: int) -> None:
        """Truncate the local log (follower truncation); the HW follows it down. At or
        past the LEO nothing is removed but the epoch cache is trimmed at the LEO
        (:meth:`Log.truncate_to`)."""
        if self.log.truncate_to(offset):
            self._high_watermark = self._clamp(self._high_watermark)
            self._appended.reset(self.log.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)
        self._high_watermark = self._clamp(offset)
        self._appended.reset(offset)

    # -- reads -------------------------------------------------------------------------------

    def fetch_end_offset(self, is_follower_fetch: bool, read_committed: bool = False) -> int:
        """What a fetch may read up to: the LEO for followers, the HW for consumers, the
        LSO for read_committed ones."""
        if is_follower_fetch:
            return self.log.log_end_offset
        return self.last_stable_offset if read_committed else self._high_watermark

    def bytes_available(
        self, fetch_offset: int, is_follower_fetch: bool, read_committed: bool = False
    ) -> int:
        """An estimate, without disk I/O, of the bytes a fetch from ``fetch_offset`` gets
        (a read_committed fetch's stop at the LSO: its long poll waits while only an open
        transaction's records are new, rather than waking to read nothing)."""
        end = self.fetch_end_offset(is_follower_fetch, read_committed)
        return self._appended.between(fetch_offset, end)

    @property
    def last_stable_offset(self) -> int:
        """The LSO: the high watermark, or below it the first offset of the earliest
        transaction that is open or whose marker is not replicated yet (docs/transactions.md).
        read_committed consumers read below it."""
        hw = self._high_watermark
        unstable = self.log.first_unstable_offset_at(hw)
        return hw if unstable is None or unstable > hw else unstable

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        is_follower_fetch: bool,
        min_one_batch: bool,
        read_committed: bool = False,
    ) -> FetchResult:
        """Read batches for a fetch (blocking file I/O: call it from an executor): a
        follower's up to the LEO, a consumer's up to the HW, or the LSO for read_committed,
        with the aborted transactions it must drop.

        The offsets are taken before the read, as Kafka does, so a follower never learns of
        an HW above the data it was sent.
        """
        high_watermark = self._high_watermark
        # A follower reads to the LEO and is told the HW as its LSO, which costs no look
        # at the producer state under the log's lock.
        lso = high_watermark if is_follower_fetch else self.last_stable_offset
        if is_follower_fetch:
            end = self.log.log_end_offset
        else:
            end = lso if read_committed else high_watermark
        data = self.log.read(fetch_offset, max_bytes, max_offset=end, min_one_batch=min_one_batch)
        aborted = None
        if read_committed and not is_follower_fetch:
            aborted = tuple(self.log.collect_aborted_transactions(fetch_offset, end))
        return FetchResult(
            data,
            high_watermark,
            data.log_start_offset,
            data.log_end_offset,
            self.leader_epoch,
            lso,
            aborted,
        )

    def latest_epoch(self) -> int | None:
        """The latest leader epoch in the log's epoch cache (None: no entry)."""
        return self.log.epoch_cache.latest_epoch()

    def last_offset_for_leader_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """(largest epoch <= ``leader_epoch`` known here, its end offset): KIP-279."""
        return self.log.epoch_cache.end_offset_for(leader_epoch, self.log.log_end_offset)
