"""The follower side of replication: one fetcher task per source (leader) broker.

Kafka's ``ReplicaFetcherThread`` / ``AbstractFetcherThread`` as one asyncio task. It keeps a
state per partition it follows on that broker and loops:

1. **Truncating** partitions find where their log stops agreeing with the leader's and
   truncate there (:mod:`broker.replication.truncation`). In ``leader-epoch`` mode this is one
   OffsetsForLeaderEpoch request for all of them, repeated while KIP-279's loop is not done;
   in ``high-watermark`` mode it is a local cut to the high watermark the partition had when
   it became follower, with no request at all (that is the pre-0.11 bug docs/replication.md shows).
2. **Fetching** partitions go in one Fetch request (fetch offset = local LEO). Fetched
   batches are appended with the leader's offsets and epochs, then the follower's HW
   becomes ``min(leader HW, own LEO)``. A first batch that holds the LEO but starts below
   it is fitted first (:meth:`Partition.fit_follower_append`: in ``high-watermark`` mode
   cut at the LEO, docs/replication.md "A batch across the follower's log end"). The
   fetches travel over one ``FetchSession`` stream to the leader
   (:class:`proto.transport.fetch_session.FetchSession`), a request and its answer at a
   time, as unary Fetch calls would, at about half the CPU per fetch. The stream is an
   incremental fetch session (KIP-227): a request names only the partitions whose
   fetch changed, and the leader answers only the partitions with something new; the others
   keep the state of their last answer.

A partition whose leader says FENCED_LEADER_EPOCH is **failed**: it is not fetched until a
newer LeaderAndIsr re-adds it. Any other error (per partition, or the leader being down)
backs that partition off ``fetch_backoff_ms`` and retries; the task itself never dies of an
error, only of :meth:`ReplicaFetcher.shutdown`.

Threading: every method must be called on the event loop thread that runs the fetcher.
Appends of large responses run in the executor (they are file writes, possibly fsyncs); see
:meth:`ReplicaFetcher.wait_for_appends` for what that means for callers.

Every event is logged as one ``key=value`` line, e.g.
``event=truncate broker=2 source=1 tp=t-0 epoch=3 from=14 to=11 mode=leader-epoch``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import grpc
import grpc.aio

from broker.log.log import LogAppendInfo, LogClosedError, UnexpectedAppendOffsetError
from broker.log.resource_limits import is_resource_exhaustion
from broker.replication.partition import Partition
from broker.replication.truncation import (
    OffsetTruncationState,
    TruncationMode,
    high_watermark_truncation_state,
    offset_truncation_state,
)
from proto import errors
from proto.errors import error_name
from proto.process.event_log import log_event
from proto.records.record_batch import CorruptRecordError, parse_header
from proto.topic_partition import TopicPartition
from proto.transport.fetch_session import FetchSession, PartitionFetch
from proto.transport.keepalive import CLIENT_KEEPALIVE_OPTIONS
from proto.transport.tls import TlsConfig, aio_channel
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.wire.minibroker_pb2 import ErrorCode

__all__ = ["FetchPhase", "FetcherConfig", "ReplicaFetcher", "SourceBroker"]

logger = logging.getLogger(__name__)

EXECUTOR_APPEND_MIN_BYTES = 1024 * 1024
"""Fetched data at least this large is appended in the executor; smaller appends are
cheaper on the loop than the thread hand-off. An append is a page-cache write (the fsyncs
of rolled segments run in the background), and with 256 KiB producer batches every
follower append had taken the hop at the old 64 KiB threshold (measured: together with
loop reads of the recent tail, perf produce at 100,000 records/s p99 201 -> 58 ms)."""
_RESPONSE_SLACK_BYTES = 4 * 1024 * 1024
"""Room above fetch_response_max_bytes for framing and for the one oversized batch per
partition a leader returns regardless of the limits (KIP-74)."""


@dataclass(frozen=True)
class SourceBroker:
    """The leader broker a fetcher replicates from."""

    broker_id: int
    host: str
    port: int


@dataclass(frozen=True)
class FetcherConfig:
    """A fetcher's settings, under Kafka's ``replica.*`` names where Kafka has them."""

    local_broker_id: int
    truncation_mode: TruncationMode
    fetch_wait_max_ms: int = 500
    """``replica.fetch.wait.max.ms``: how long the leader may hold a fetch for data."""
    fetch_min_bytes: int = 1
    """``replica.fetch.min.bytes``."""
    fetch_max_bytes: int = 1024 * 1024
    """``replica.fetch.max.bytes``, per partition."""
    fetch_response_max_bytes: int = 10 * 1024 * 1024
    """``replica.fetch.response.max.bytes``, the whole response."""
    fetch_backoff_ms: int = 1000
    """``replica.fetch.backoff.ms``: pause before retrying a partition after an error."""
    follower_hw_update_delay_ms: int = 0
    """Test-only: apply each HW learned from the leader this much later, so a test can
    catch a follower that holds records but not yet their HW (docs/replication.md)."""
    request_timeout_ms: int = 30_000
    """Margin over ``fetch_wait_max_ms`` for a Fetch; the whole timeout of an
    OffsetsForLeaderEpoch (``replica.socket.timeout.ms``)."""
    broker_epoch: int = -1
    """This broker's registration epoch (KIP-380), sent as the fetch's ``replica_epoch``."""
    tls: TlsConfig | None = None
    """The broker's certificate, presented to the leader (None: plaintext)."""
    reconnect_backoff_max_ms: int = 1000
    """``reconnect.backoff.max.ms``: the longest gRPC waits between reconnection attempts
    to a leader that is down (gRPC's own default, 120 s, would leave a follower idle for
    minutes after its leader restarts)."""


class FetchPhase(enum.Enum):
    """Where a partition is in the fetcher (Kafka's ``ReplicaState`` plus failed)."""

    TRUNCATING = "truncating"
    FETCHING = "fetching"
    FAILED = "failed"
    """Fenced or a storage error: not fetched until re-added by a newer LeaderAndIsr."""


class _PartitionState:
    """One partition's fetch state (Kafka's ``PartitionFetchState``).

    A new object replaces it whenever the partition is (re-)added with a new epoch, so a
    response to a request sent for an older object is recognised and dropped.
    """

    __slots__ = (
        "current_leader_epoch",
        "delay_until",
        "hw_snapshot",
        "last_error",
        "partition",
        "phase",
    )

    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self.current_leader_epoch = partition.leader_epoch
        self.hw_snapshot = partition.high_watermark
        """The HW when the partition became follower: the pre-0.11 truncation point and the
        KIP-279 fallback (Kafka's initial fetch offset)."""
        self.phase = FetchPhase.TRUNCATING
        self.delay_until = 0.0
        """Loop time before which the partition is not part of a request (backoff)."""
        self.last_error: int | None = None
        """The error code the leader last answered for it, logged once, not per retry."""


class ReplicaFetcher:
    """Replicates every partition this broker follows on one source broker."""

    def __init__(
        self,
        source: SourceBroker,
        config: FetcherConfig,
        *,
        executor: concurrent.futures.Executor | None,
        on_partition_error: Callable[[TopicPartition, BaseException], None] | None = None,
        on_high_watermark_change: Callable[[TopicPartition], None] | None = None,
    ) -> None:
        """Nothing runs until :meth:`start`.

        ``on_partition_error(tp, err)`` is called when the fetcher stops fetching a
        partition (FENCED_LEADER_EPOCH, a storage error); ``on_high_watermark_change(tp)``
        after the follower's HW moved. Both run on the loop and must not block; what they
        raise is logged and ignored.
        """
        self.source = source
        self.config = config
        self._executor = executor
        self._on_partition_error = on_partition_error
        self._on_high_watermark_change = on_high_watermark_change
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._shutdown_task: asyncio.Task[None] | None = None
        self._channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.BrokerAsyncStub | None = None
        self._session: FetchSession | None = None
        self._hw_updates: set[asyncio.TimerHandle] = set()
        self._appends: dict[TopicPartition, concurrent.futures.Future[list[LogAppendInfo]]] = {}
        self._source_reachable = True
        """False after a failed request, so "leader down" is logged once, not per retry."""

    def __repr__(self) -> str:
        return (
            f"ReplicaFetcher(broker={self.config.local_broker_id}, "
            f"source={self.source.broker_id}, partitions={len(self._states)})"
        )

    # -- partitions ------------------------------------------------------------------------

    def add_partitions(self, partitions: Mapping[TopicPartition, Partition]) -> None:
        """Start following these partitions at their current leader epoch.

        Each enters Truncating with the partition's leader epoch and HW as of now. A
        partition already here with the same epoch keeps its state (it was truncated for
        this epoch already); a new epoch, a new Partition object or a failed partition
        starts over (KAFKA-7164: every leader change forces a new truncation).
        """
        for tp, partition in partitions.items():
            current = self._states.get(tp)
            if (
                current is not None
                and current.partition is partition
                and current.current_leader_epoch == partition.leader_epoch
                and current.phase is not FetchPhase.FAILED
            ):
                continue
            state = _PartitionState(partition)
            self._states[tp] = state
            self._log(  # the replica manager's became_follower line says it at INFO
                logging.DEBUG,
                "add",
                tp,
                epoch=state.current_leader_epoch,
                hw=state.hw_snapshot,
                leo=partition.log_end_offset,
                mode=self.config.truncation_mode.value,
            )
        self._wake.set()

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        """Stop following these partitions; unknown ones are ignored.

        Takes effect before the next request; a response already on its way is dropped for
        them. An append already running in the executor still finishes: call
        :meth:`wait_for_appends` before making the partition leader.
        """
        for tp in tps:
            if self._states.pop(tp, None) is not None:
                self._log(logging.DEBUG, "remove", tp)
        self._wake.set()

    async def wait_for_appends(self, tps: Iterable[TopicPartition] | None = None) -> None:
        """Wait until no append for ``tps`` (default: any) runs in the executor.

        Kafka's ``removeFetcherForPartitions`` blocks on the fetcher's partition lock for
        the same reason: a follower append landing after ``make_leader`` would write the
        old epoch's batches after the new leader recorded its epoch at the LEO. Cancelling
        this stops the wait, not the appends.
        """
        wanted = None if tps is None else set(tps)
        pending = [
            asyncio.wrap_future(future)
            for tp, future in self._appends.items()
            if wanted is None or tp in wanted
        ]
        if pending:
            await asyncio.wait(pending)

    @property
    def partition_count(self) -> int:
        return len(self._states)

    def follows(self, tp: TopicPartition) -> bool:
        """Whether ``tp`` is followed here (failed included until removed); O(1), unlike
        :meth:`partitions`, which copies."""
        return tp in self._states

    def partitions(self) -> set[TopicPartition]:
        """The partitions followed here (failed ones included until removed)."""
        return set(self._states)

    def phase(self, tp: TopicPartition) -> FetchPhase | None:
        """Where ``tp`` is in the fetch state machine; None if it is not followed here."""
        state = self._states.get(tp)
        return None if state is None else state.phase

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True while the fetch loop is alive (started, not shut down)."""
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Open the channel to the source broker and start the loop (on the running loop)."""
        if self._task is not None:
            raise RuntimeError(f"{self!r} was already started")
        receive = max(self.config.fetch_response_max_bytes, self.config.fetch_max_bytes)
        limit = receive + _RESPONSE_SLACK_BYTES
        backoff = self.config.fetch_backoff_ms
        self._channel = aio_channel(
            f"{self.source.host}:{self.source.port}",
            self.config.tls,
            [
                *CLIENT_KEEPALIVE_OPTIONS,
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", limit),
                ("grpc.initial_reconnect_backoff_ms", backoff),
                ("grpc.min_reconnect_backoff_ms", backoff),
                (
                    "grpc.max_reconnect_backoff_ms",
                    max(backoff, self.config.reconnect_backoff_max_ms),
                ),
            ],
        )
        self._stub = pb_grpc.BrokerStub(self._channel)
        self._session = FetchSession(self._stub)
        self._task = asyncio.get_running_loop().create_task(
            self._run(),
            name=f"replica-fetcher-{self.config.local_broker_id}-{self.source.broker_id}",
        )
        self._log(logging.INFO, "start", host=self.source.host, port=self.source.port)

    async def shutdown(self) -> None:
        """Stop the loop, wait for executor appends, close the channel. Idempotent.

        When it returns no request is in flight and no append of this fetcher is running,
        so the caller may close the logs. Cancelling the caller does not interrupt the
        shutdown: it completes in the background (and a later call waits for it).
        """
        if self._shutdown_task is None:
            self._shutdown_task = asyncio.get_running_loop().create_task(self._shutdown())
        await asyncio.shield(self._shutdown_task)

    async def _shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])
        for handle in self._hw_updates:
            handle.cancel()
        self._hw_updates.clear()
        await self.wait_for_appends()
        if self._session is not None:
            self._session.close()
        if self._channel is not None:
            await self._channel.close(None)
        self._log(logging.INFO, "stop")

    # -- the loop --------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            try:
                now = loop.time()
                truncating = self._ready(FetchPhase.TRUNCATING, now)
                if truncating:
                    await self._truncate(truncating)
                fetching = self._ready(FetchPhase.FETCHING, loop.time())
                if fetching:
                    await self._fetch(fetching)
                elif not truncating:
                    await self._idle(loop)
            except asyncio.CancelledError:
                raise
            except Exception:
                # A bug, not a fetch error (those are handled where they happen): keep
                # replicating the other partitions rather than die silently.
                self._log(logging.ERROR, "loop_error", exc_info=True)
                self._back_off(self._states.values())
                await self._idle(loop)

    def _ready(self, phase: FetchPhase, now: float) -> dict[TopicPartition, _PartitionState]:
        return {
            tp: state
            for tp, state in self._states.items()
            if state.phase is phase and state.delay_until <= now
        }

    async def _idle(self, loop: asyncio.AbstractEventLoop) -> None:
        """Sleep until partitions change or the earliest backoff ends (no spinning)."""
        delays = [
            state.delay_until
            for state in self._states.values()
            if state.phase is not FetchPhase.FAILED
        ]
        if not delays:
            await self._wake.wait()
            return
        timeout = min(delays) - loop.time()
        if timeout > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()

    def _back_off(self, states: Iterable[_PartitionState]) -> None:
        until = asyncio.get_running_loop().time() + self.config.fetch_backoff_ms / 1000
        for state in states:
            state.delay_until = until

    def _fail(self, tp: TopicPartition, state: _PartitionState, err: BaseException) -> None:
        state.phase = FetchPhase.FAILED
        self._log(
            logging.WARNING,
            "partition-failed",
            tp,
            epoch=state.current_leader_epoch,
            error=err,
        )
        if self._on_partition_error is not None:
            try:
                self._on_partition_error(tp, err)
            except Exception:
                logger.exception("on_partition_error failed for %s", tp)

    def _current(self, tp: TopicPartition, state: _PartitionState, phase: FetchPhase) -> bool:
        """Is ``state`` still the partition's state, in ``phase``? (Requests await: the
        partition may have been removed or re-added with a new epoch meanwhile.)"""
        return self._states.get(tp) is state and state.phase is phase

    def _rpc_failed(self, what: str, err: Exception, states: Iterable[_PartitionState]) -> None:
        code = err.code().name if isinstance(err, grpc.aio.AioRpcError) else type(err).__name__
        level = logging.WARNING if self._source_reachable else logging.DEBUG
        self._source_reachable = False
        self._log(level, "rpc-error", request=what, code=code, error=_rpc_details(err))
        self._back_off(states)

    def _rpc_succeeded(self) -> None:
        if not self._source_reachable:
            self._source_reachable = True
            self._log(logging.INFO, "source-reachable")

    # -- truncation ------------------------------------------------------------------------

    async def _truncate(self, states: dict[TopicPartition, _PartitionState]) -> None:
        asked: dict[TopicPartition, tuple[_PartitionState, int]] = {}
        for tp, state in states.items():
            latest = state.partition.latest_epoch()
            if self.config.truncation_mode is TruncationMode.HIGH_WATERMARK:
                decision = high_watermark_truncation_state(high_watermark=state.hw_snapshot)
                self._apply_truncation(tp, state, decision, mode=TruncationMode.HIGH_WATERMARK)
            elif latest is None:
                # No epoch to ask about (an empty log, or written before epochs): Kafka falls
                # back to the HW it had, as the pre-0.11 rule does.
                decision = high_watermark_truncation_state(high_watermark=state.hw_snapshot)
                self._apply_truncation(
                    tp, state, decision, mode=TruncationMode.LEADER_EPOCH, rule="no-local-epoch"
                )
            else:
                asked[tp] = (state, latest)
        if not asked:
            return
        request = pb.OffsetsForLeaderEpochRequest(replica_id=self.config.local_broker_id)
        for topic, parts in _by_topic(asked).items():
            entry = request.topics.add(topic=topic)
            for tp in parts:
                state, latest = asked[tp]
                entry.partitions.add(
                    partition=tp.partition,
                    current_leader_epoch=state.current_leader_epoch,
                    leader_epoch=latest,
                )
        assert self._stub is not None
        try:
            response = await self._stub.OffsetsForLeaderEpoch(
                request, timeout=self.config.request_timeout_ms / 1000
            )
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self._rpc_failed("OffsetsForLeaderEpoch", err, (s for s, _ in asked.values()))
            return
        self._rpc_succeeded()
        for topic_result in response.topics:
            for result in topic_result.partitions:
                tp = TopicPartition(topic_result.topic, result.partition)
                entry_asked = asked.pop(tp, None)
                if entry_asked is None:
                    continue
                state, latest = entry_asked
                if not self._current(tp, state, FetchPhase.TRUNCATING):
                    continue  # removed or re-added with a new epoch while we waited
                if result.error_code != ErrorCode.NONE:
                    self._partition_error(tp, state, result.error_code, "OffsetsForLeaderEpoch")
                    continue
                partition = state.partition
                decision = offset_truncation_state(
                    leader_epoch=result.leader_epoch,
                    leader_end_offset=result.end_offset,
                    local_end_offset_for=partition.last_offset_for_leader_epoch,
                    log_end_offset=partition.log_end_offset,
                    high_watermark=state.hw_snapshot,
                )
                self._apply_truncation(
                    tp,
                    state,
                    decision,
                    mode=TruncationMode.LEADER_EPOCH,
                    asked_epoch=latest,
                    leader_epoch=result.leader_epoch,
                    leader_end=result.end_offset,
                )
        for state, _ in asked.values():  # the leader did not answer for these
            self._back_off([state])

    def _apply_truncation(
        self,
        tp: TopicPartition,
        state: _PartitionState,
        decision: OffsetTruncationState,
        *,
        mode: TruncationMode,
        **fields: object,
    ) -> None:
        partition = state.partition
        before, hw = partition.log_end_offset, partition.high_watermark
        try:
            # Also at or past the LEO: the log then trims its epoch cache at the LEO, which
            # case 3b needs (a lower latest epoch, or the next round asks the same question).
            partition.truncate_to(decision.offset)
        except (OSError, LogClosedError) as err:  # a failing log dir: Kafka fails the partition
            self._fail(tp, state, err)
            return
        after = partition.log_end_offset
        # A cut that removed nothing (every new replica's first step) is not an event.
        level = logging.INFO if after != before else logging.DEBUG
        if after < hw:
            level = logging.WARNING  # below the HW: expected only after an unclean election
        self._log(
            level,
            "truncate",
            tp,
            epoch=state.current_leader_epoch,
            mode=mode.value,
            **{"from": before, "to": after, "target": decision.offset, "hw": hw},
            done=decision.truncation_completed,
            **fields,
        )
        if decision.truncation_completed:
            state.phase = FetchPhase.FETCHING

    # -- fetching --------------------------------------------------------------------------

    async def _fetch(self, states: dict[TopicPartition, _PartitionState]) -> None:
        config = self.config
        request = pb.FetchRequest(
            replica_id=config.local_broker_id,
            max_wait_ms=config.fetch_wait_max_ms,
            min_bytes=config.fetch_min_bytes,
            max_bytes=config.fetch_response_max_bytes,
            client_id=f"replica-fetcher-{config.local_broker_id}",
            replica_epoch=config.broker_epoch,
        )
        max_bytes = config.fetch_max_bytes
        wanted: dict[TopicPartition, PartitionFetch] = {
            tp: (
                state.current_leader_epoch,
                state.partition.log.log_end_offset,
                state.partition.log.log_start_offset,
                max_bytes,
            )
            for tp, state in states.items()
        }
        assert self._session is not None
        try:
            response = await self._session.fetch_partitions(
                request, wanted, (config.fetch_wait_max_ms + config.request_timeout_ms) / 1000
            )
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self._rpc_failed("Fetch", err, states.values())
            return
        self._rpc_succeeded()
        if response.error_code != ErrorCode.NONE:
            self._log(logging.WARNING, "fetch-error", code=error_name(response.error_code))
            self._back_off(states.values())
            return
        for topic_response in response.responses:
            for data in topic_response.partitions:
                tp = TopicPartition(topic_response.topic, data.partition_index)
                state = states.pop(tp, None)  # each partition once, whatever the answer says
                if state is None:
                    continue
                fetch_offset = wanted[tp][1]
                if (
                    not self._current(tp, state, FetchPhase.FETCHING)
                    or state.partition.log_end_offset != fetch_offset
                ):
                    continue  # removed, re-added or truncated since the request went out
                await self._process_partition(tp, state, fetch_offset, data)

    async def _process_partition(
        self,
        tp: TopicPartition,
        state: _PartitionState,
        fetch_offset: int,
        data: pb.FetchPartitionData,
    ) -> None:
        code = data.error_code
        if code == ErrorCode.NONE:
            state.last_error = None
            if data.records and not await self._append(tp, state, fetch_offset, data.records):
                return
            if self._current(tp, state, FetchPhase.FETCHING):
                self._update_high_watermark(tp, state, data.high_watermark)
                self._follow_log_start_offset(tp, state, data.log_start_offset)
        elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
            self._handle_out_of_range(tp, state, data)
        else:
            self._partition_error(tp, state, code, "Fetch", data.error_message)

    async def _append(
        self, tp: TopicPartition, state: _PartitionState, fetch_offset: int, records: bytes
    ) -> bool:
        """Append fetched batches; False (after handling it) if the append failed."""
        partition = state.partition
        try:
            records = partition.fit_follower_append(
                records,
                cut_straddling_batch=self.config.truncation_mode is TruncationMode.HIGH_WATERMARK,
            )
            if self._executor is not None and len(records) >= EXECUTOR_APPEND_MIN_BYTES:
                future = self._executor.submit(_append_in_chunks, partition, records)
                self._appends[tp] = future
                try:
                    info = await asyncio.wrap_future(future)
                finally:
                    if self._appends.get(tp) is future:
                        del self._appends[tp]
            else:
                info = _append_in_chunks(partition, records)
        except (CorruptRecordError, UnexpectedAppendOffsetError) as err:
            # Kafka logs and retries; the log may not be where we think it is, so find the
            # truncation point again before the next fetch.
            self._log(
                logging.ERROR,
                "append-error",
                tp,
                epoch=state.current_leader_epoch,
                offset=fetch_offset,
                error=err,
            )
            if self._states.get(tp) is state and state.phase is FetchPhase.FETCHING:
                state.phase = FetchPhase.TRUNCATING
            self._back_off([state])
            return False
        except (OSError, LogClosedError) as err:
            if is_resource_exhaustion(err):
                # Out of descriptors or memory, not a bad disk: report it and fetch again
                # after the back-off, from a truncation point found anew.
                if self._on_partition_error is not None:
                    self._on_partition_error(tp, err)
                if self._states.get(tp) is state and state.phase is FetchPhase.FETCHING:
                    state.phase = FetchPhase.TRUNCATING
                self._back_off([state])
                return False
            if self._states.get(tp) is state:
                self._fail(tp, state, err)
            return False
        except Exception as err:
            self._log(logging.ERROR, "append-error", tp, offset=fetch_offset, error=err)
            self._back_off([state])
            return False
        self._log(
            logging.DEBUG,
            "append",
            tp,
            epoch=state.current_leader_epoch,
            first=info[0].first_offset,
            last=info[-1].last_offset,
            batches=sum(i.num_batches for i in info),
            bytes=len(records),
        )
        return True

    def _follow_log_start_offset(
        self, tp: TopicPartition, state: _PartitionState, leader_log_start_offset: int
    ) -> None:
        """Records deleted on the leader (DeleteRecords, retention) go here too: Kafka's
        ``ReplicaFetcherThread.processPartitionData`` raises the follower's log start offset
        to the leader's after each append. The next fetch reports it back to the leader."""
        partition = state.partition
        before = partition.log.log_start_offset
        if leader_log_start_offset <= before:
            return
        try:
            moved = partition.follow_leader_log_start_offset(leader_log_start_offset)
        except (OSError, LogClosedError) as err:
            self._fail(tp, state, err)
            return
        if moved:
            self._log(
                logging.INFO,
                "log-start-offset",
                tp,
                **{"from": before, "to": partition.log.log_start_offset},
                leader_log_start=leader_log_start_offset,
            )

    def _update_high_watermark(
        self, tp: TopicPartition, state: _PartitionState, leader_high_watermark: int
    ) -> None:
        delay_ms = self.config.follower_hw_update_delay_ms
        if delay_ms <= 0:
            self._apply_high_watermark(tp, state, leader_high_watermark)
            return
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def fire() -> None:
            self._hw_updates.discard(handle)
            self._apply_high_watermark(tp, state, leader_high_watermark)

        handle = loop.call_later(delay_ms / 1000, fire)
        self._hw_updates.add(handle)

    def _apply_high_watermark(
        self, tp: TopicPartition, state: _PartitionState, leader_high_watermark: int
    ) -> None:
        if self._states.get(tp) is not state or state.phase is FetchPhase.FAILED:
            return  # a delayed update for a partition no longer followed in this epoch
        before = state.partition.high_watermark
        if not state.partition.update_follower_high_watermark(leader_high_watermark):
            return
        self._log(
            logging.DEBUG,
            "high-watermark",
            tp,
            **{"from": before, "to": state.partition.high_watermark},
            leader_hw=leader_high_watermark,
        )
        if self._on_high_watermark_change is not None:
            try:
                self._on_high_watermark_change(tp)
            except Exception:
                logger.exception("on_high_watermark_change failed for %s", tp)

    def _handle_out_of_range(
        self, tp: TopicPartition, state: _PartitionState, data: pb.FetchPartitionData
    ) -> None:
        """Kafka's ``fetchOffsetAndTruncate``, from the offsets in the error response.

        The leader's log ends below ours (an unclean election gave it a shorter log):
        truncate to its LEO. Or it starts above our LEO (retention removed what we miss):
        start over empty at its log start offset.
        """
        partition = state.partition
        leo = partition.log_end_offset
        leader_leo, leader_start = data.log_end_offset, data.log_start_offset
        try:
            if leader_leo < 0 or leader_start < 0:
                pass  # the leader did not say where its log is: nothing to act on, retry
            elif leader_leo < leo:
                partition.truncate_to(leader_leo)
                self._log(
                    logging.WARNING,
                    "truncate",
                    tp,
                    epoch=state.current_leader_epoch,
                    mode="out-of-range",
                    **{"from": leo, "to": partition.log_end_offset},
                    leader_leo=leader_leo,
                    hw=partition.high_watermark,
                )
                return
            elif leader_start > leo:
                partition.truncate_fully_and_start_at(leader_start)
                self._log(
                    logging.WARNING,
                    "truncate-fully",
                    tp,
                    epoch=state.current_leader_epoch,
                    **{"from": leo, "to": leader_start},
                    leader_leo=leader_leo,
                )
                return
        except (OSError, LogClosedError) as err:
            self._fail(tp, state, err)
            return
        # Our offset is inside the leader's range after all (it moved meanwhile): retry.
        self._log(
            logging.INFO,
            "out-of-range",
            tp,
            offset=leo,
            leader_start=leader_start,
            leader_leo=leader_leo,
        )
        self._back_off([state])

    def _partition_error(
        self,
        tp: TopicPartition,
        state: _PartitionState,
        code: int,
        request: str,
        message: str = "",
    ) -> None:
        err = errors.for_code(code, message) or errors.BrokerResponseError(message, code=code)
        if code == ErrorCode.FENCED_LEADER_EPOCH:
            # The leader has a newer epoch than ours: our LeaderAndIsr is stale. Wait for
            # the newer one to re-add the partition rather than fetch as a zombie follower.
            self._fail(tp, state, err)
            return
        # Logged when the answer changes, not at every retry: a leader that has not yet
        # made the partitions of a new topic answers UNKNOWN_TOPIC_OR_PARTITION for each at
        # every fetch, and that logging had taken most of the brokers' time at 10,000.
        repeat = state.last_error == code
        state.last_error = code
        self._log(
            logging.DEBUG if repeat else logging.INFO,
            "partition-error",
            tp,
            request=request,
            epoch=state.current_leader_epoch,
            code=error_name(code),
        )
        self._back_off([state])

    # -- logging ---------------------------------------------------------------------------

    def _log(
        self,
        level: int,
        event: str,
        tp: TopicPartition | None = None,
        *,
        exc_info: object = False,
        **fields: object,
    ) -> None:
        """One line: ``replica_fetcher event=<e> broker=<id> source=<leader> tp=<tp> ...``."""
        context: dict[str, object] = {
            "broker": self.config.local_broker_id,
            "source": self.source.broker_id,
        }
        if tp is not None:
            context["tp"] = tp
        log_event(
            logger, level, "replica_fetcher", event, exc_info=exc_info, **{**context, **fields}
        )


def _append_in_chunks(partition: Partition, records: bytes) -> list[LogAppendInfo]:
    """Append fetched batches in pieces of at most ``segment.bytes`` (whole batches).

    The Log refuses an append larger than a segment (as Kafka's does), but a fetch response
    is bounded by ``replica.fetch.max.bytes``, not by the follower's segment size: without
    splitting, a topic with small segments would stall its followers forever.
    """
    limit = partition.log.config.segment_bytes
    if len(records) <= limit:
        return [partition.append_as_follower(records)]
    infos = []
    start = pos = 0
    while pos < len(records):
        try:
            size = parse_header(records, pos).size
        except CorruptRecordError:
            break  # the append below reports it, with the Log's own message
        if size <= 0:
            break
        if pos > start and pos + size - start > limit:
            infos.append(partition.append_as_follower(records[start:pos]))
            start = pos
        pos += size
    infos.append(partition.append_as_follower(records[start:]))
    return infos


def _by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[TopicPartition]]:
    grouped: dict[str, list[TopicPartition]] = {}
    for tp in tps:
        grouped.setdefault(tp.topic, []).append(tp)
    return grouped


def _rpc_details(err: Exception) -> str:
    if isinstance(err, grpc.aio.AioRpcError):
        return err.details() or ""
    return str(err)
