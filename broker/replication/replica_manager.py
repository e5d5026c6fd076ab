"""The partitions this broker hosts and everything that moves them (Kafka's ``ReplicaManager``).

It applies the controller's LeaderAndIsr/StopReplica/UpdateMetadata, serves produce, fetch,
OffsetsForLeaderEpoch and ListOffsets for the gRPC layer, keeps the ISR (shrinking it on a
timer, expanding it on follower fetches, writing every change to the state znode with a
conditional update), checkpoints high watermarks, and fences its leaders when the ZooKeeper
session is lost.

Everything here runs on the broker's event loop. Appends run inline (page-cache writes of at
most ``message.max.bytes``); reads of the log's recent tail too (page cache, see
``LOOP_READ_MAX_BYTES``); older or larger reads and log creation go to the executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeGuard, TypeVar

from broker.broker_metrics import ReplicaManagerMetrics
from broker.log.cleaner_manager import LogCleanerManager
from broker.log.log import FetchData, Log, LogClosedError
from broker.log.log_manager import IllegalPartitionPathError, LogManager, LogOfflineError
from broker.log.producer_state import AppendOrigin
from broker.log.resource_limits import ResourceErrorReporter, is_resource_exhaustion
from broker.log.transaction_index import AbortedTxn
from broker.metadata_cache import MetadataCache, PartitionInfo
from broker.replication.control_request_checks import (
    StopReplicaFacts,
    broker_epoch_refusal,
    controller_epoch_refusal,
    leader_and_isr_refusal,
    stop_replica_refusal,
    update_metadata_controller_refusal,
    update_metadata_endpoint_refusal,
    update_metadata_leader_refusal,
    update_metadata_replicas_refusal,
)
from broker.replication.delayed_fetch import DelayedFetch, FetchPartitionStatus
from broker.replication.delayed_produce import DelayedProduce, ProducePartitionStatus
from broker.replication.fetch_session import FetchSessionState, FetchSpec
from broker.replication.issued_producer_ids import IssuedProducerIds, producer_ids_of
from broker.replication.partition import ACKS_ALL, LeadershipState, Partition, PartitionConfig
from broker.replication.purgatory import DelayedOperationPurgatory
from broker.replication.replica_fetcher import FetcherConfig, ReplicaFetcher, SourceBroker
from broker.replication.truncation import TruncationMode
from broker.zk_client import BrokerZkClient, ZkError
from proto import errors
from proto.config.broker_config import BrokerConfig, TopicConfig
from proto.process.event_log import capped, log_event
from proto.records.control_records import EndTxnMarker
from proto.records.record_batch import CorruptRecordError
from proto.topic_partition import INTERNAL_TOPICS, TopicPartition, topic_name_problem
from proto.transport.tls import TlsConfig
from proto.wire import minibroker_pb2 as pb
from proto.wire.minibroker_pb2 import ErrorCode
from proto.zk.znodes import LEADER_DURING_DELETE, BrokerInfo, PartitionState, PartitionStateData

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

LIST_OFFSETS_LATEST = -1
LIST_OFFSETS_EARLIEST = -2
LIST_OFFSETS_MAX_TIMESTAMP = -3
"""KIP-734 (ListOffsets v7): the record with the largest timestamp."""
ISR_CHANGE_PROPAGATION_INTERVAL_MS = 2500
"""Kafka's fixed cadence for checking pending ISR change notifications."""
ISR_CHANGE_QUIET_MS = 5000
"""Propagate once no ISR changed for this long (batches bursts of changes)..."""
ISR_CHANGE_MAX_DELAY_MS = 60_000
"""...or at the latest this long after the last propagation."""


LOG_DIR_RENOTIFY_S = 5.0
"""Least time between two log-dir failure notifications of one broker."""
_EPOCH_WRITE_THREADS = 16
"""Threads of the pool that writes new leaders' epoch checkpoints (two fsyncs each) in
parallel: concurrent fsyncs of separate files share the file system's journal commits
(measured on ext4 on this project's machines: 891 us per checkpoint on 4 threads, 355 on
16, 332 on 32), and a failover makes thousands of leaders at once. Idle threads cost
nothing but their stacks; the pool starts them when first needed."""
LOOP_READ_MAX_BYTES = 1024 * 1024
"""A fetch of at most this many recently appended bytes (the partition remembers how many
it appended lately, so this is known without I/O) is read on the loop: the tail of the
log is in the page cache, so the read is a copy, and the executor hop it replaces costs
two context switches and the GIL handed back and forth (measured: 1.3-1.5x
throughput without the hop). An empty read at the log end never leaves the loop. Older or
larger reads, which may touch the disk, still go to the executor."""
SESSION_FULL_READ_INTERVAL_S = 30.0
"""How often a fetch session's fetch reads every partition of the session, not only the
changed ones. Every change the replica manager makes wakes the partition's sessions
(appends, high watermarks, ISRs, leaderships, log start offsets); this is the backstop
that bounds how long a change made elsewhere could stay unseen. Reading 10,000 partitions
costs a leader about 0.1 s of CPU, so it is not done often."""


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class ProduceResult:
    """The outcome of one partition of a produce request."""

    error_code: int
    error_message: str = ""
    base_offset: int = -1
    log_start_offset: int = -1
    leader_epoch: int = -1


@dataclass(frozen=True)
class FetchPartitionResult:
    """One partition of a fetch response."""

    error_code: int
    error_message: str = ""
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    leader_epoch: int = -1
    records: bytes = b""
    last_stable_offset: int = -1
    aborted_transactions: tuple[AbortedTxn, ...] | None = None
    """read_committed only: the aborted transactions overlapping ``records``."""


class MarkerAppend(NamedTuple):
    """A transaction marker to append to a partition this broker leads (WriteTxnMarkers)."""

    marker: EndTxnMarker
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True)
class AppendedRecords:
    """What :meth:`ReplicaManager.append_to_local_logs` did, for
    :meth:`ReplicaManager.await_acks`."""

    results: dict[TopicPartition, ProduceResult]
    """Per partition: the append's outcome (filled in further by await_acks)."""
    waiting: dict[TopicPartition, ProducePartitionStatus]
    """The partitions appended with acks=all: what their acknowledgement waits for."""


def _checked_endpoint(endpoint: pb.BrokerEndpoint, field: str) -> BrokerInfo:
    """A broker endpoint from a control request, if it could be connected to; its Kafka
    listener's too, if it names one (``kafka_port`` 0 and no ``kafka_host``: none)."""
    if endpoint.node_id < 0 or not endpoint.host or not 0 < endpoint.port < 65536:
        raise errors.InvalidRequestError(
            f"{field} names broker {endpoint.node_id} at {endpoint.host!r}:{endpoint.port}, "
            "which is not a broker id and address"
        )
    kafka_endpoint = None
    if endpoint.kafka_host or endpoint.kafka_port:
        if not endpoint.kafka_host or not 0 < endpoint.kafka_port < 65536:
            raise errors.InvalidRequestError(
                f"{field} names broker {endpoint.node_id}'s Kafka listener at "
                f"{endpoint.kafka_host!r}:{endpoint.kafka_port}, which is not an address"
            )
        kafka_endpoint = (endpoint.kafka_host, endpoint.kafka_port)
    return BrokerInfo(endpoint.node_id, endpoint.host, endpoint.port, kafka_endpoint=kafka_endpoint)


def _error_of(err: BaseException) -> tuple[int, str]:
    """The error code and message a partition reports for an exception."""
    if isinstance(err, errors.BrokerResponseError):
        # The message alone: the code travels apart, and the client's error prefixes its name.
        return err.code, str(err.args[0]) if err.args else ""
    if isinstance(err, CorruptRecordError):
        return pb.CORRUPT_MESSAGE, str(err)
    if is_resource_exhaustion(err):
        # Retriable for every client (KafkaStorageException): the dir stays online.
        return pb.KAFKA_STORAGE_ERROR, f"broker out of a resource, retry: {err}"
    if isinstance(err, OSError):
        return pb.KAFKA_STORAGE_ERROR, f"log directory I/O error: {err}"
    raise err


async def _none() -> None:
    return None


def _checked_fields(info: PartitionInfo) -> tuple[object, ...]:
    """What an UpdateMetadata partition is checked on (the ISR moves at one leader epoch
    without the controller, so it is not)."""
    return info.leader, info.leader_epoch, info.replicas, tuple(sorted(info.offline_replicas))


def _record_epochs(todo: Sequence[tuple[Partition, int]]) -> None:
    """On an executor thread: each partition's leader epoch recorded at its LEO."""
    for partition, epoch in todo:
        with contextlib.suppress(OSError, LogClosedError):
            partition.log.epoch_cache.assign(epoch, partition.log.log_end_offset)


def _is_log_dir_failure(err: BaseException) -> TypeGuard[OSError]:
    """An I/O error of the log dir itself (ENOSPC, EIO, EROFS, ...). Not a log that failed
    to open at startup (already offline on its own), and not a file that vanished: a read
    racing the deletion of its partition meets ENOENT, which says nothing of the disk."""
    return isinstance(err, OSError) and not isinstance(err, (LogOfflineError, FileNotFoundError))


LeadershipListener = Callable[[Mapping[TopicPartition, int], Sequence[TopicPartition]], None]
"""Called with the partitions this broker has become leader of (their leader epochs) and
those it has become a follower of or stopped hosting; it must not block."""

MarkerListener = Callable[[TopicPartition, "MarkerAppend", int], None]
"""Called with each marker WriteTxnMarkers wrote to a partition led here and its offset,
once the ISR has it; it must not block."""


class ReplicaManager:
    """Hosts this broker's partition replicas. Create, then ``start()``; ``shutdown()``."""

    def __init__(
        self,
        config: BrokerConfig,
        log_manager: LogManager,
        zk: BrokerZkClient,
        metadata_cache: MetadataCache,
        executor: Executor,
        *,
        clock_ms: Callable[[], int] = now_ms,
        metrics: ReplicaManagerMetrics | None = None,
        tls: TlsConfig | None = None,
    ) -> None:
        self.config = config
        self.tls = tls
        """The broker's certificate, for its fetchers' channels (None: plaintext)."""
        self.metrics = metrics if metrics is not None else ReplicaManagerMetrics()
        self.resource_errors = ResourceErrorReporter(
            logger,
            "replica_manager",
            lambda name: self.metrics.resource_errors.labels(name).inc(),
        )
        self.broker_id = config.broker_id
        self.log_manager = log_manager
        self.zk = zk
        self.metadata_cache = metadata_cache
        metadata_cache.local_broker_id = self.broker_id
        metadata_cache.hosts = self._hosts
        self.executor = executor
        self.clock_ms = clock_ms
        self.partitions: dict[TopicPartition, Partition] = {}
        self.controller_epoch = -1
        self.broker_epoch = -1
        self.produce_purgatory: DelayedOperationPurgatory[TopicPartition] = (
            DelayedOperationPurgatory("produce")
        )
        self.fetch_purgatory: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory(
            "fetch"
        )
        self.delete_records_purgatory: DelayedOperationPurgatory[TopicPartition] = (
            DelayedOperationPurgatory("delete_records")
        )
        """DeleteRecords waiting for the followers' log start offsets (delete_records.py)."""
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._epoch_writer: ThreadPoolExecutor | None = None
        """The pool of ``_EPOCH_WRITE_THREADS`` for new leaders' epoch checkpoints."""
        self.log_cleaner: LogCleanerManager | None = None
        """The log cleaner (``log.cleaner.enable``), started with the replica manager."""
        self._cleaner_thread: ThreadPoolExecutor | None = None
        self._fetch_sessions: dict[TopicPartition, list[FetchSessionState]] = {}
        """The incremental fetch sessions each partition is in (woken by :meth:`_wake`)."""
        self._checkpointed_hws: dict[TopicPartition, int] = {}
        self._pending_isr_changes: set[TopicPartition] = set()
        self._states_read: dict[TopicPartition, PartitionState] = {}
        """The state znodes last read for a LeaderAndIsr: they vouch for the UpdateMetadata
        that follows (a topic's deletion forgets its partitions')."""
        self._last_isr_change_ms = 0
        self._last_isr_propagation_ms = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._hw_checkpointing = False
        self._lock = asyncio.Lock()
        """Serialises control requests (LeaderAndIsr, StopReplica) against each other."""
        self._epoch_check_lock = asyncio.Lock()
        """Serialises the controller-epoch checks of all control requests (UpdateMetadata
        too), which may wait for ZooKeeper."""
        self.log_dir_failure: OSError | None = None
        """The I/O error that took the log dir offline (see :meth:`mark_log_dir_offline`)."""
        self._log_dir_notified_at = -math.inf
        self.issued_producer_ids = IssuedProducerIds(
            self._read_producer_id_bound, config.zookeeper_session_timeout_ms / 1000
        )
        """Refuses produced batches with a producer id no broker handed out."""
        self.leadership_listeners: list[LeadershipListener] = []
        """Told, after each LeaderAndIsr and StopReplica, which partitions this broker now
        leads (with their leader epochs) and which it no longer leads: the coordinators
        load and unload their internal topics' partitions (Kafka's ``onLeadershipChange``)."""
        self.marker_listeners: list[MarkerListener] = []
        """Told of every transaction marker written and replicated here: the group
        coordinator applies or drops a transaction's offsets when its marker reaches
        ``__consumer_offsets`` (Kafka's ``scheduleHandleTxnCompletion``)."""

    def _hosts(self, tp: TopicPartition) -> bool:
        return tp in self.partitions

    def _log(self, level: int, event: str, *, exc_info: object = False, **fields: object) -> None:
        """One line per event: ``replica_manager event=<e> broker=<id> key=value ...``."""
        fields = {"broker": self.broker_id, **fields}  # a partition's context names it too
        log_event(logger, level, "replica_manager", event, exc_info=exc_info, **fields)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        self._checkpointed_hws = await self._in_executor(self.log_manager.read_high_watermarks)
        lag = self.config.replica_lag_time_max_ms
        self._spawn(self._every(max(lag // 2, 50), self._maybe_shrink_isrs), "isr-expiration")
        self._spawn(
            self._every(ISR_CHANGE_PROPAGATION_INTERVAL_MS, self._maybe_propagate_isr_changes),
            "isr-change-propagation",
        )
        self._spawn(
            self._every(self.config.log_retention_check_interval_ms, self._cleanup_logs),
            "log-retention",
        )
        self._spawn(self._every(1000, self._purge_purgatories), "purgatory-purge")
        if self.config.log_cleaner_enable:
            self.log_cleaner = LogCleanerManager(
                self.log_manager.data_dir,
                dedupe_buffer_size=self.config.log_cleaner_dedupe_buffer_size,
                io_max_bytes_per_second=self.config.log_cleaner_io_max_bytes_per_second,
                clock_ms=self.clock_ms,
            )
            self._cleaner_thread = ThreadPoolExecutor(1, thread_name_prefix="log-cleaner")
            self._spawn(self._clean_logs(self.log_cleaner, self._cleaner_thread), "log-cleaner")
        self._spawn(
            self._every(
                self.config.log_flush_offset_checkpoint_interval_ms,
                self._checkpoint_recovery_points,
            ),
            "recovery-point-checkpoint",
        )
        self._spawn(
            self._every(
                self.config.log_flush_start_offset_checkpoint_interval_ms,
                self._checkpoint_log_start_offsets,
            ),
            "log-start-offset-checkpoint",
        )

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self._tasks.add(asyncio.create_task(coro, name=f"broker-{self.broker_id}-{name}"))

    async def _every(
        self, interval_ms: int, action: Callable[[], Coroutine[Any, Any, None]]
    ) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await action()
            except Exception:
                self._log(
                    logging.ERROR, "periodic_task_failed", exc_info=True, task=action.__name__
                )

    # -- log dir failure (Kafka's LogDirFailureChannel and handleLogDirFailure) ---------------

    def mark_log_dir_offline(self, error: OSError, where: str) -> None:
        """An I/O error (ENOSPC, EIO, a read-only file system) hit the log dir: take it
        offline, as Kafka does, instead of answering KAFKA_STORAGE_ERROR for ever while
        keeping the leaderships. From now on every partition answers KAFKA_STORAGE_ERROR,
        nothing more is written to the dir (not even checkpoints or the clean-shutdown
        marker: the next start recovers), the fetchers stop, and the controller is told
        through ``/log_dir_event_notification`` so that it moves the leaderships to other
        in-sync replicas and takes this broker out of the ISRs. Acknowledged writes are
        safe: an acks=all write is on the other ISR members, which the controller elects.
        Freeing the disk and restarting the broker brings the dir back (recovery cuts a
        torn tail). Idempotent; on the event loop.

        EMFILE, ENFILE and ENOMEM do not take the dir offline: the process ran out of
        something that comes back (a connection flood ends), the disk is fine. They are
        counted and logged at a bounded rate, and the operation is retried (a checkpoint
        on its next period, a produce by its client, a follower's append after a back-off)."""
        if is_resource_exhaustion(error):
            self.resource_errors.report(where, error, dir=self.log_manager.data_dir)
            return
        if self.log_dir_failure is not None:
            return
        self.log_dir_failure = error
        self.log_manager.mark_dir_offline(error)
        self._log(
            logging.ERROR,
            "log_dir_offline",
            dir=self.log_manager.data_dir,
            where=where,
            error=error,
            partitions=len(self.partitions),
        )
        for tp, partition in self.partitions.items():
            # As a zombie leader's: acks=all writes waiting here end with a retriable
            # NOT_LEADER_OR_FOLLOWER, and their producers find the new leader.
            partition.fence(f"log dir {self.log_manager.data_dir} offline")
            self._wake(tp)
        self._log_dir_notified_at = time.monotonic()
        self._spawn(self._propagate_log_dir_failure(), "log-dir-failure")

    async def _propagate_log_dir_failure(self) -> None:
        await self._remove_from_fetchers_and_wait(list(self.partitions))
        await self._notify_log_dir_failure()

    def _renotify_log_dir_failure(self) -> None:
        """A LeaderAndIsr reached the offline dir: its controller has not heard of the
        failure (a new controller after the notification was processed and deleted), so
        tell it again, at most every few seconds (Kafka's controller learns it from the
        KAFKA_STORAGE_ERROR in the response instead)."""
        now = time.monotonic()
        if now - self._log_dir_notified_at >= LOG_DIR_RENOTIFY_S:
            self._log_dir_notified_at = now
            self._spawn(self._notify_log_dir_failure(), "log-dir-renotify")

    async def _notify_log_dir_failure(self) -> None:
        delay = 0.1
        while True:
            try:
                await self.zk.create_log_dir_event_notification()
                return
            except ZkError as err:
                # The controller must hear of it; a new session registers this broker
                # anew, which the controller also treats as its replicas going away.
                self._log(logging.WARNING, "log_dir_event_not_sent", error=err, retry_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _storage_error(self) -> tuple[int, str]:
        return pb.KAFKA_STORAGE_ERROR, (
            f"the log dir {self.log_manager.data_dir} of broker {self.broker_id} is offline "
            f"after an I/O error: {self.log_dir_failure}"
        )

    def _error_of_storage(self, err: BaseException, where: str) -> tuple[int, str]:
        """:func:`_error_of`, taking the log dir offline for an I/O error."""
        if _is_log_dir_failure(err):
            self.mark_log_dir_offline(err, where)
        return _error_of(err)

    async def leaderships_handed_over(self) -> None:
        """The controller moved every leadership off this broker and took it out of every
        ISR (its controlled shutdown left nothing): do at once what the StopReplica the
        controller sends this broker would do, which cannot be counted on to arrive before
        the broker stops serving (the controller answers the ControlledShutdown before it
        is delivered, and a stopping gRPC server takes no new call).

        Every partition it still believes it leads is fenced: an acks=all write waiting in
        the purgatory for followers that now follow the new leader ends at once with a
        retriable NOT_LEADER_OR_FOLLOWER, and so does every later write and fetch on a
        session still open, so clients move to the new leaders instead of waiting, their
        requests unanswered, until the server's shutdown grace ends their sessions (Kafka's
        broker closes its connections at this point). Every fetcher stops, so that no
        leader adds this broker back to an ISR on its way out."""
        fenced = []
        for tp, partition in self.partitions.items():
            if partition.is_leader and not partition.fenced:
                partition.fence(
                    "this broker is shutting down; the controller moved its leaderships"
                )
                fenced.append(str(tp))
                self._wake(tp)
        fetching_from = sorted(self.fetchers)
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        await asyncio.gather(*(f.shutdown() for f in fetchers))
        self._log(
            logging.INFO,
            "leaderships_handed_over",
            fenced_count=len(fenced),
            fenced=capped(fenced),
            stopped_fetching_from=fetching_from,
        )

    async def shutdown(self) -> None:
        """Stop fetchers and background tasks, then checkpoint the high watermarks."""
        if self.log_cleaner is not None:
            self.log_cleaner.stop()  # a cleaning in progress gives up at its next chunk
        tasks = list(self._tasks)  # finishing tasks remove themselves from the set
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await asyncio.gather(*(f.shutdown() for f in self.fetchers.values()))
        self.fetchers.clear()
        await self.checkpoint_high_watermarks()
        if self._epoch_writer is not None:
            self._epoch_writer.shutdown(wait=False)  # idle: control requests hold _lock
        if self._cleaner_thread is not None:
            self._cleaner_thread.shutdown(wait=False)

    async def _in_executor(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    # -- control requests ----------------------------------------------------------------------

    async def _check_control_request(
        self, kind: str, controller_epoch: int, broker_epoch: int, tps: list[TopicPartition]
    ) -> None:
        """Fence a control request from an old controller, one addressed to an earlier
        incarnation of this broker (KIP-380: the broker epoch is the czxid of our own
        registration), one claiming a controller epoch ZooKeeper does not hold, or one
        naming a partition that could not be a directory of the data dir
        (:mod:`broker.replication.control_request_checks`). Raises BrokerResponseError."""
        for tp in tps:
            if topic_name_problem(tp.topic) is not None or tp.partition < 0:
                raise errors.InvalidRequestError(
                    f"{kind} names an invalid partition {tp.topic!r}/{tp.partition}: "
                    f"{topic_name_problem(tp.topic) or 'negative partition'}"
                )
        refusal = broker_epoch_refusal(
            broker_epoch,
            self.broker_epoch,
            accept_unknown=self.config.control_request_unknown_broker_epoch_enable,
        )
        # FIFO: checks complete in the order requests arrived, so a request's epoch is
        # adopted before a later one is compared with it.
        async with self._epoch_check_lock:
            if refusal is None and controller_epoch > self.controller_epoch:
                # A new controller, or a forger: only ZooKeeper can tell (never adopt an
                # epoch beyond /controller_epoch, or one request could make this broker
                # refuse the real controller for ever).
                zookeeper_epoch = await self._zookeeper(
                    "the controller epoch", self._synced_controller_epoch()
                )
                refusal = controller_epoch_refusal(
                    controller_epoch, self.controller_epoch, zookeeper_epoch
                )
            elif refusal is None:
                refusal = controller_epoch_refusal(controller_epoch, self.controller_epoch, None)
            if refusal is not None:
                raise errors.BrokerResponseError(refusal.message, code=refusal.code)
            self.controller_epoch = controller_epoch

    async def _synced_controller_epoch(self) -> int | None:
        await self.zk.sync()
        return await self.zk.get_controller_epoch()

    async def _zookeeper(self, what: str, read: Coroutine[Any, Any, _T]) -> _T:
        """Await a ZooKeeper read that a control request's check depends on; ZooKeeper
        unreachable refuses the request (retriable: the controller sends again once this
        broker's session is back, or a new one once it re-registers)."""
        try:
            return await read
        except ZkError as err:
            raise errors.RequestTimedOutError(
                f"cannot check {what} against ZooKeeper: {err}"
            ) from err

    async def become_leader_or_follower(
        self, request: pb.LeaderAndIsrRequest
    ) -> pb.LeaderAndIsrResponse:
        """Apply a LeaderAndIsr request (Kafka's ``becomeLeaderOrFollower``).

        A request from an older controller epoch is refused as a whole; a partition state
        with an older leader epoch than the one this broker has is refused for that
        partition (FENCED_LEADER_EPOCH); an equal epoch is a harmless repeat.

        Once started it runs to its end even if the caller goes away: the controller's
        deadline (``request.timeout.ms``) cancels the call, not the work, which the
        controller's resend then finds done (a repeat at the same epochs). Cancelled half
        way, the 30,000 new logs of a first attempt had been made for nothing and the
        resend waited behind them. Broker shutdown still cancels it (``self._tasks``).
        """
        task = asyncio.ensure_future(self._become_leader_or_follower(request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(task)

    async def _become_leader_or_follower(
        self, request: pb.LeaderAndIsrRequest
    ) -> pb.LeaderAndIsrResponse:
        async with self._lock:
            started = time.monotonic()
            tps = [
                TopicPartition(ps.topic_name, ps.partition_index) for ps in request.partition_states
            ]
            try:
                await self._check_control_request(
                    "LeaderAndIsr", request.controller_epoch, request.broker_epoch, tps
                )
                endpoints = {
                    b.node_id: _checked_endpoint(b, "live_leaders") for b in request.live_leaders
                }
                zookeeper_states = await self._zookeeper(
                    "the partition states", self._synced_partition_states(tps)
                )
                endpoints = await self._zookeeper(
                    "the leaders' endpoints", self._registered_endpoints(endpoints)
                )
            except errors.BrokerResponseError as err:
                self._log(logging.WARNING, "refused_leader_and_isr", reason=err)
                return pb.LeaderAndIsrResponse(error_code=ErrorCode.ValueType(err.code))
            response = pb.LeaderAndIsrResponse(error_code=pb.NONE)
            new_followers: dict[int, dict[TopicPartition, Partition]] = {}
            checked = time.monotonic()
            try:
                await self._apply_partition_states(
                    request, tps, zookeeper_states, new_followers, response
                )
            finally:
                # Whatever failed or was cancelled part way, every partition that became a
                # follower fetches: a follower without a fetcher never catches up.
                self._start_fetchers(new_followers, endpoints)
            self._hw_checkpointing_started()
            done = time.monotonic()
            self._log(
                logging.INFO,
                "leader_and_isr_handled",
                controller_epoch=request.controller_epoch,
                partitions=len(tps),
                errors=sum(1 for e in response.partition_errors if e.error_code != pb.NONE),
                check_ms=round((checked - started) * 1000),
                apply_ms=round((done - checked) * 1000),
            )
            return response

    async def _apply_partition_states(
        self,
        request: pb.LeaderAndIsrRequest,
        tps: list[TopicPartition],
        zookeeper_states: dict[TopicPartition, PartitionState | None],
        new_followers: dict[int, dict[TopicPartition, Partition]],
        response: pb.LeaderAndIsrResponse,
    ) -> None:
        """Judge each partition state alone, then do for all the accepted ones at once what
        costs a round trip or a thread hop: the topic configs, the new logs, giving up
        their fetchers, the new leaders' epoch checkpoints. A LeaderAndIsr for a new topic
        names every partition a broker hosts, and one await per partition had made 3,000
        partitions take 20 s (docs/replication.md, "Many partitions").

        A partition named twice is applied once, as its last state says (Kafka's request
        is a map too); each of its entries is answered with that result.
        """
        states: dict[TopicPartition, pb.LeaderAndIsrPartitionState] = {}
        for ps, tp in zip(request.partition_states, tps, strict=True):
            states[tp] = ps
        results: dict[TopicPartition, tuple[int, str]] = {}
        accepted: dict[TopicPartition, LeadershipState] = {}
        for tp, ps in states.items():
            refusal = leader_and_isr_refusal(tp, ps.leader, ps.leader_epoch, zookeeper_states[tp])
            if refusal is not None:
                self._log(
                    logging.WARNING,
                    "refused_partition_state",
                    tp=tp,
                    leader=ps.leader,
                    leader_epoch=ps.leader_epoch,
                    reason=refusal.message,
                )
                results[tp] = refusal.code, refusal.message
                continue
            verdict = self._judge_partition_state(tp, ps, new_followers)
            if isinstance(verdict, LeadershipState):
                accepted[tp] = verdict
            else:
                results[tp] = verdict
        results.update(
            await self._create_partitions([tp for tp in accepted if tp not in self.partitions])
        )
        for tp in results.keys() & accepted.keys():
            del accepted[tp]
        # A fetched append still running in the executor must land before the new role
        # records its epoch, or it would be written after the epoch cache moved on.
        await self._remove_from_fetchers_and_wait(list(accepted))
        await self._write_new_leader_epochs(accepted)
        led: dict[TopicPartition, int] = {}
        resigned: list[TopicPartition] = []
        for tp, state in accepted.items():
            partition = self.partitions[tp]
            if state.leader == self.broker_id:
                try:
                    partition.make_leader(state)
                except OSError as err:  # the epoch checkpoint: the partition keeps its role
                    self._log(logging.ERROR, "cannot_become_leader", tp=tp, error=err)
                    results[tp] = self._error_of_storage(err, "make_leader")
                    continue
                self._log(logging.INFO, "became_leader", **partition.log_context())
                led[tp] = state.leader_epoch
            else:
                partition.make_follower(state)
                resigned.append(tp)
                if state.leader >= 0:
                    new_followers.setdefault(state.leader, {})[tp] = partition
                self._log(logging.INFO, "became_follower", **partition.log_context())
            # Metadata names the new role once it is taken, not while its epoch is written:
            # a client sent here before would only be refused.
            self.metadata_cache.refresh_partition(
                tp, PartitionInfo(state.leader, state.leader_epoch, state.replicas, state.isr)
            )
            self._wake(tp)
            results[tp] = pb.NONE, ""
        self._tell_leadership(led, resigned)
        for tp in tps:
            code, message = results[tp]
            response.partition_errors.add(
                topic_name=tp.topic,
                partition_index=tp.partition,
                error_code=code,
                error_message=message,
            )

    def _tell_leadership(
        self, led: Mapping[TopicPartition, int], resigned: Sequence[TopicPartition]
    ) -> None:
        if not led and not resigned:
            return
        for listener in self.leadership_listeners:
            try:
                listener(led, resigned)
            except Exception:  # a coordinator's fault must not fail the control request
                logger.exception(
                    "event=leadership_listener_failed broker=%d listener=%r",
                    self.broker_id,
                    listener,
                )

    def _judge_partition_state(
        self,
        tp: TopicPartition,
        ps: pb.LeaderAndIsrPartitionState,
        new_followers: dict[int, dict[TopicPartition, Partition]],
    ) -> LeadershipState | tuple[int, str]:
        """The state to apply to ``tp``, or the answer for it when there is nothing to
        apply: not a replica here, an offline log dir, an older epoch (FENCED_LEADER_EPOCH),
        or a repeat of the epoch it has (a follower that fetches from nobody then starts
        fetching again)."""
        state = LeadershipState(
            leader=ps.leader,
            leader_epoch=ps.leader_epoch,
            isr=tuple(ps.isr),
            replicas=tuple(ps.replicas),
            zk_version=ps.zk_version,
            controller_epoch=ps.controller_epoch,
        )
        if self.broker_id not in state.replicas:
            return pb.UNKNOWN_TOPIC_OR_PARTITION, (
                f"broker {self.broker_id} is not a replica of {tp} "
                f"(replicas {list(state.replicas)})"
            )
        if self.log_dir_failure is not None:
            self._renotify_log_dir_failure()
            return self._storage_error()  # Kafka: a replica on an offline dir
        existing = self.partitions.get(tp)
        if existing is not None and state.leader_epoch < existing.leader_epoch:
            self._log(
                logging.WARNING,
                "ignored_stale_partition_state",
                tp=tp,
                request_epoch=state.leader_epoch,
                epoch=existing.leader_epoch,
            )
            return pb.FENCED_LEADER_EPOCH, (
                f"{tp}: leader epoch {state.leader_epoch} is older than {existing.leader_epoch}"
            )
        if (
            existing is not None
            and state.leader_epoch == existing.leader_epoch
            and (state.leader == existing.leader_id and not existing.fenced)
        ):
            if existing.is_leader or state.leader < 0 or self._is_fetching(tp):
                return pb.NONE, ""
            # A follower at this epoch that fetches from nobody (its fetcher stopped on an
            # error, or an earlier request failed before it started one): the controller's
            # repeat is the "next LeaderAndIsr" that starts it again.
            new_followers.setdefault(state.leader, {})[tp] = existing
            self._log(logging.INFO, "follower_fetches_again", **existing.log_context())
            return pb.NONE, ""
        return state

    async def _create_partitions(
        self, tps: list[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, str]]:
        """Host ``tps`` (not hosted yet): each topic's config read once, every log created
        in one executor call. Returns the answers of those that could not be created."""
        failed: dict[TopicPartition, tuple[int, str]] = {}
        if not tps:
            return failed
        topics = sorted({tp.topic for tp in tps})
        read = await asyncio.gather(
            *(self.zk.get_topic_config(topic) for topic in topics), return_exceptions=True
        )
        topic_configs: dict[str, TopicConfig] = {}
        for topic, overrides in zip(topics, read, strict=True):
            if isinstance(overrides, ZkError):
                # This broker's session ended meanwhile: the controller sends the state
                # again once the broker is registered anew.
                self._log(logging.WARNING, "cannot_read_topic_config", topic=topic, error=overrides)
            elif isinstance(overrides, BaseException):
                raise overrides
            else:
                topic_configs[topic] = self.config.topic_config(overrides)
        for tp in tps:
            if tp.topic not in topic_configs:
                failed[tp] = pb.REQUEST_TIMED_OUT, f"{tp}: cannot read the topic config"
        wanted = {tp: topic_configs[tp.topic].log_config for tp in tps if tp not in failed}
        logs = await self._in_executor(self.log_manager.get_or_create_logs, wanted)
        for tp, log in logs.items():
            if isinstance(log, IllegalPartitionPathError):
                failed[tp] = pb.INVALID_TOPIC, str(log)
            elif isinstance(log, OSError):
                self._log(logging.ERROR, "cannot_open_log", tp=tp, error=log)
                if _is_log_dir_failure(log):
                    self.mark_log_dir_offline(log, "open_log")
                failed[tp] = pb.KAFKA_STORAGE_ERROR, f"cannot open the log of {tp}: {log}"
            elif isinstance(log, Exception):
                raise log
            else:
                self.partitions[tp] = self._new_partition(tp, log, topic_configs[tp.topic])
        return failed

    def _new_partition(self, tp: TopicPartition, log: Log, topic_config: TopicConfig) -> Partition:
        # A log loaded at startup got the broker defaults (the topic configs are read from
        # ZooKeeper only now): apply the topic's overrides to it too.
        log.update_config(topic_config.log_config)
        return Partition(
            tp,
            self.broker_id,
            log,
            high_watermark=self._checkpointed_hws.get(tp, 0),
            config=PartitionConfig(
                min_insync_replicas=topic_config.min_insync_replicas,
                replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
            ),
            clock_ms=self.clock_ms,
        )

    async def _write_new_leader_epochs(
        self, accepted: Mapping[TopicPartition, LeadershipState]
    ) -> None:
        """Record the new leaders' epochs in their epoch caches, on executor threads.

        ``make_leader`` records its epoch at the LEO (KAFKA-7415), a checkpoint write with
        two fsyncs; done on the loop for each of thousands of new leaders it held the loop
        for seconds (a controlled shutdown bumps the epoch of every partition the stopping
        broker replicates). Done here first, ``make_leader`` finds the entry recorded and
        writes nothing. The LEO must not move in between: a follower's fetcher is gone
        already, and a partition that leads now is fenced first, so that it takes no
        produce at its old epoch meanwhile (appends run on the loop; a producer retries
        the NOT_LEADER_OR_FOLLOWER, as it would wait for Kafka's partition lock). A write
        that fails here is left to ``make_leader``, which fails as it always did.
        """
        todo: list[tuple[Partition, int]] = []
        for tp, state in accepted.items():
            partition = self.partitions[tp]
            if state.leader != self.broker_id or state.leader_epoch < partition.leader_epoch:
                continue
            if partition.is_leader:
                if state.leader_epoch == partition.leader_epoch:
                    continue  # a repeat (fenced before): nothing new to record
                partition.fence(f"becoming leader at epoch {state.leader_epoch}")
            todo.append((partition, state.leader_epoch))
        if not todo:
            return
        chunks = [todo[i::_EPOCH_WRITE_THREADS] for i in range(_EPOCH_WRITE_THREADS)]
        if self._epoch_writer is None:
            self._epoch_writer = ThreadPoolExecutor(
                _EPOCH_WRITE_THREADS, thread_name_prefix="epoch-checkpoint"
            )
        loop = asyncio.get_running_loop()
        await asyncio.gather(
            *(
                loop.run_in_executor(self._epoch_writer, _record_epochs, chunk)
                for chunk in chunks
                if chunk
            )
        )

    async def _registered_endpoints(
        self, endpoints: dict[int, BrokerInfo]
    ) -> dict[int, BrokerInfo]:
        """A LeaderAndIsr's ``live_leaders`` as registered in ``/brokers/ids`` (a follower
        fetches from there, so a forged one would have it fetch from anyone): one that
        differs from the metadata cache's (itself so checked) is read from ZooKeeper
        (already synced by the partition states' read); refused, it takes its
        registration's endpoints or is dropped, with one log line."""
        doubtful = [b for b in endpoints.values() if self.metadata_cache.broker(b.broker_id) != b]
        if not doubtful:
            return endpoints
        registered = await self.zk.read_registered_brokers()
        believed = dict(endpoints)
        for broker in doubtful:
            found = registered.found.get(broker.broker_id)
            registration = None if found is None else found.registration
            refusal = update_metadata_endpoint_refusal(broker, registration)
            if refusal is None:
                continue
            self._log(logging.WARNING, "refused_leader_and_isr_endpoint", reason=refusal.message)
            if registration is None:
                del believed[broker.broker_id]
            else:
                believed[broker.broker_id] = BrokerInfo(
                    broker.broker_id,
                    registration.host,
                    registration.port,
                    kafka_endpoint=registration.kafka_endpoint,
                )
        return believed

    async def _synced_partition_states(
        self, tps: list[TopicPartition]
    ) -> dict[TopicPartition, PartitionState | None]:
        await self.zk.sync()
        states = await self.zk.get_partition_states(tps)
        for tp, state in states.items():
            if state is None:
                self._states_read.pop(tp, None)
            else:
                self._states_read[tp] = state
        return states

    def reconfigure(self, config: BrokerConfig) -> None:
        """Take the broker's config with its dynamic changes (only the dynamic settings of
        :mod:`proto.config.dynamic_broker_config` differ): partitions created from now on use its
        defaults; hosted ones get theirs through :meth:`update_topic_config`."""
        self.config = config

    def update_topic_config(self, topic: str, topic_config: TopicConfig) -> list[TopicPartition]:
        """Apply a changed config of ``topic`` to its partitions hosted here, without a
        restart (Kafka's ``TopicConfigHandler``): the log settings (segment size, retention,
        flush interval, max message size: each read at its next use) and
        ``min.insync.replicas`` (read by the next acks=all produce). Returns the partitions
        updated; a partition created later reads the config from ZooKeeper itself."""
        updated = sorted(tp for tp in self.partitions if tp.topic == topic)
        for tp in updated:
            partition = self.partitions[tp]
            partition.log.update_config(topic_config.log_config)
            partition.config = dataclasses.replace(
                partition.config, min_insync_replicas=topic_config.min_insync_replicas
            )
        return updated

    def _is_fetching(self, tp: TopicPartition) -> bool:
        return any(fetcher.follows(tp) for fetcher in self.fetchers.values())

    def _start_fetchers(
        self,
        new_followers: dict[int, dict[TopicPartition, Partition]],
        endpoints: dict[int, BrokerInfo],
    ) -> None:
        for leader_id, partitions in new_followers.items():
            endpoint = endpoints.get(leader_id) or self.metadata_cache.broker(leader_id)
            if endpoint is None:
                self._log(
                    logging.WARNING,
                    "no_endpoint_for_leader",
                    leader=leader_id,
                    partitions=sorted(map(str, partitions)),
                )
                self._truncate_to_high_watermarks(partitions)
                continue
            fetcher = self.fetchers.get(leader_id)
            if fetcher is not None and (fetcher.source.host, fetcher.source.port) != (
                endpoint.host,
                endpoint.port,
            ):
                # The leader restarted elsewhere: a new fetcher for its new address.
                self._retire_fetcher(leader_id)
                fetcher = None
            if fetcher is None:
                fetcher = ReplicaFetcher(
                    SourceBroker(leader_id, endpoint.host, endpoint.port),
                    self._fetcher_config(),
                    executor=self.executor,
                    on_partition_error=self._on_fetch_partition_error,
                    on_high_watermark_change=self._wake,
                )
                self.fetchers[leader_id] = fetcher
                fetcher.start()
            fetcher.add_partitions(partitions)

    def _truncate_to_high_watermarks(self, partitions: dict[TopicPartition, Partition]) -> None:
        """In ``high-watermark`` mode a new follower cuts its log to its high watermark, a
        local step that needs nothing from the leader (pre-0.11 Kafka's ``makeFollowers``
        does it before it adds a fetcher): done here where no fetcher can start, because
        the leader has no endpoint ZooKeeper vouches for (it is not registered)."""
        if self.config.replication_truncation_mode != TruncationMode.HIGH_WATERMARK.value:
            return
        for tp, partition in sorted(partitions.items()):
            before, hw = partition.log_end_offset, partition.high_watermark
            try:
                partition.truncate_to(hw)
            except (OSError, LogClosedError) as err:
                self._log(logging.WARNING, "truncate_failed", tp=tp, error=repr(err))
                continue
            self._log(
                logging.INFO,
                "truncate",
                tp=tp,
                mode=TruncationMode.HIGH_WATERMARK.value,
                **{"from": before, "to": partition.log_end_offset, "hw": hw},
            )

    def _fetcher_config(self) -> FetcherConfig:
        c = self.config
        return FetcherConfig(
            local_broker_id=self.broker_id,
            truncation_mode=TruncationMode(c.replication_truncation_mode),
            fetch_wait_max_ms=c.replica_fetch_wait_max_ms,
            fetch_min_bytes=c.replica_fetch_min_bytes,
            fetch_max_bytes=c.replica_fetch_max_bytes,
            fetch_response_max_bytes=c.replica_fetch_response_max_bytes,
            fetch_backoff_ms=c.replica_fetch_backoff_ms,
            follower_hw_update_delay_ms=c.test_follower_hw_update_delay_ms,
            request_timeout_ms=c.request_timeout_ms,
            broker_epoch=self.broker_epoch,
            tls=self.tls,
        )

    async def _remove_from_fetchers_and_wait(self, tps: list[TopicPartition]) -> None:
        """Stop fetching ``tps`` and wait until no fetched append of theirs is in flight."""
        wanted = set(tps)
        for leader_id, fetcher in list(self.fetchers.items()):
            if not any(fetcher.follows(tp) for tp in wanted):
                continue
            fetcher.remove_partitions(tps)
            await fetcher.wait_for_appends(tps)
            if fetcher.partition_count == 0 and self.fetchers.get(leader_id) is fetcher:
                self._retire_fetcher(leader_id)

    def _retire_fetcher(self, leader_id: int) -> None:
        fetcher = self.fetchers.pop(leader_id)
        task = asyncio.create_task(fetcher.shutdown())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_fetch_partition_error(self, tp: TopicPartition, err: BaseException) -> None:
        if is_resource_exhaustion(err):
            assert isinstance(err, OSError)
            self.mark_log_dir_offline(err, "follower_append")  # reported; the fetcher retries
            return
        self._log(logging.WARNING, "fetching_stopped_until_next_leader_and_isr", tp=tp, error=err)
        if _is_log_dir_failure(err):
            self.mark_log_dir_offline(err, "follower_append")

    async def stop_replicas(self, request: pb.StopReplicaRequest) -> pb.StopReplicaResponse:
        """Stop replicating partitions, deleting their logs when asked (topic deletion)."""
        async with self._lock:
            tps = [
                TopicPartition(s.topic_name, s.partition_index) for s in request.partition_states
            ]
            try:
                await self._check_control_request(
                    "StopReplica", request.controller_epoch, request.broker_epoch, tps
                )
                facts = await self._zookeeper(
                    "the partitions to stop", self._stop_replica_facts(tps)
                )
            except errors.BrokerResponseError as err:
                self._log(logging.WARNING, "refused_stop_replica", reason=err)
                return pb.StopReplicaResponse(error_code=ErrorCode.ValueType(err.code))
            response = pb.StopReplicaResponse(error_code=pb.NONE)
            stopping: list[tuple[pb.StopReplicaPartitionState, TopicPartition]] = []
            for s, tp in zip(request.partition_states, tps, strict=True):
                refusal = stop_replica_refusal(
                    self.broker_id, tp, s.leader_epoch, s.delete_partition, facts[tp]
                )
                if refusal is None:
                    stopping.append((s, tp))
                    continue
                self._log(
                    logging.WARNING,
                    "refused_to_stop_replica",
                    tp=tp,
                    delete=s.delete_partition,
                    leader_epoch=s.leader_epoch,
                    reason=refusal.message,
                )
                response.partition_errors.add(
                    topic_name=tp.topic,
                    partition_index=tp.partition,
                    error_code=ErrorCode.ValueType(refusal.code),
                    error_message=refusal.message,
                )
            await self._remove_from_fetchers_and_wait([tp for _, tp in stopping])
            self._tell_leadership({}, [tp for _, tp in stopping])
            for s, tp in stopping:
                code, message = pb.NONE, ""
                self.partitions.pop(tp, None)
                self._checkpointed_hws.pop(tp, None)
                self._wake(tp)
                if s.delete_partition:
                    self._states_read.pop(tp, None)  # a topic made again starts at epoch 0
                    try:
                        await self._in_executor(self.log_manager.delete_log, tp)
                    except IllegalPartitionPathError as err:
                        code, message = pb.INVALID_TOPIC, str(err)
                    except OSError as err:
                        code, message = pb.KAFKA_STORAGE_ERROR, str(err)
                self._log(
                    logging.INFO, "stopped_replica", tp=tp, delete=s.delete_partition, error=code
                )
                response.partition_errors.add(
                    topic_name=tp.topic,
                    partition_index=tp.partition,
                    error_code=code,
                    error_message=message,
                )
            return response

    async def _stop_replica_facts(
        self, tps: list[TopicPartition]
    ) -> dict[TopicPartition, StopReplicaFacts]:
        await self.zk.sync()
        topics = sorted({tp.topic for tp in tps})
        assignments, marked, states = await asyncio.gather(
            asyncio.gather(*(self.zk.get_topic_assignment(t) for t in topics)),
            asyncio.gather(*(self.zk.is_topic_marked_for_deletion(t) for t in topics)),
            self.zk.get_partition_states(tps),
        )
        by_topic = dict(zip(topics, zip(assignments, marked, strict=True), strict=True))
        facts = {}
        for tp in tps:
            assignment, marked_for_deletion = by_topic[tp.topic]
            local = self.partitions.get(tp)
            facts[tp] = StopReplicaFacts(
                assignment=None if assignment is None else assignment.get(tp.partition),
                marked_for_deletion=marked_for_deletion,
                state=states[tp],
                local_leader_epoch=None if local is None else local.leader_epoch,
            )
        return facts

    async def update_metadata(self, request: pb.UpdateMetadataRequest) -> pb.UpdateMetadataResponse:
        started = time.monotonic()
        tps = [TopicPartition(s.topic_name, s.partition_index) for s in request.partition_states]
        try:
            await self._check_control_request(
                "UpdateMetadata", request.controller_epoch, request.broker_epoch, tps
            )
            brokers = [_checked_endpoint(b, "live_brokers") for b in request.live_brokers]
            partitions = {
                TopicPartition(s.topic_name, s.partition_index): PartitionInfo(
                    s.leader,
                    s.leader_epoch,
                    tuple(s.replicas),
                    tuple(s.isr),
                    tuple(s.offline_replicas),
                )
                for s in request.partition_states
            }
            controller_id, brokers, partitions = await self._zookeeper(
                "the controller, leaders, replicas and endpoints",
                self._as_zookeeper_agrees(request.controller_id, brokers, partitions),
            )
        except errors.BrokerResponseError as err:
            self._log(logging.WARNING, "refused_update_metadata", reason=err)
            return pb.UpdateMetadataResponse(error_code=ErrorCode.ValueType(err.code))
        self.metadata_cache.update(
            controller_id=controller_id,
            controller_epoch=request.controller_epoch,
            brokers=brokers,
            partitions=partitions,
        )
        if tps:
            self._log(
                logging.INFO,
                "update_metadata_handled",
                controller_epoch=request.controller_epoch,
                partitions=len(tps),
                took_ms=round((time.monotonic() - started) * 1000),
            )
        return pb.UpdateMetadataResponse(error_code=pb.NONE)

    async def _as_zookeeper_agrees(
        self,
        controller_id: int,
        brokers: list[BrokerInfo],
        partitions: dict[TopicPartition, PartitionInfo],
    ) -> tuple[int, list[BrokerInfo], dict[TopicPartition, PartitionInfo]]:
        """An UpdateMetadata's controller, brokers and partitions as far as ZooKeeper agrees
        (:mod:`broker.replication.control_request_checks`): a refused controller id takes
        ``/controller``'s, a refused broker its registration's endpoints (dropped if
        unregistered), a refused leader drops its partition, refused replicas (or offline
        replicas not among them) take the assignment's and the registrations'; one log line
        each. Only
        what differs from the cache (itself so checked) is read, so a repeat costs no
        ZooKeeper read."""
        cache = self.metadata_cache
        doubtful_controller = controller_id != cache.controller_id
        doubtful_brokers = [b for b in brokers if cache.broker(b.broker_id) != b]
        doubtful_tps = [
            tp
            for tp, info in partitions.items()
            if (cached := cache.partition(tp)) is None
            or _checked_fields(cached) != _checked_fields(info)
        ]
        if not doubtful_controller and not doubtful_brokers and not doubtful_tps:
            return controller_id, brokers, partitions
        await self.zk.sync()
        topics = sorted({tp.topic for tp in doubtful_tps})
        deleting = sorted(
            {tp.topic for tp in doubtful_tps if partitions[tp].leader == LEADER_DURING_DELETE}
        )
        # A leader at the epoch this broker read in the state znode for a LeaderAndIsr is
        # what ZooKeeper held: not read again (the UpdateMetadata for a new topic follows its
        # LeaderAndIsr at once, and reading every state znode twice doubled its cost).
        vouched = {
            tp: state
            for tp in doubtful_tps
            if (state := self._states_read.get(tp)) is not None
            and state.leader == partitions[tp].leader
            and state.leader_epoch == partitions[tp].leader_epoch
        }
        to_read = [tp for tp in doubtful_tps if tp not in vouched]
        registered, read, marked, assignments, zookeeper_controller = await asyncio.gather(
            self.zk.read_registered_brokers(),
            self.zk.get_partition_states(to_read),
            asyncio.gather(*(self.zk.is_topic_marked_for_deletion(t) for t in deleting)),
            asyncio.gather(*(self.zk.get_topic_assignment(t) for t in topics)),
            self.zk.get_controller_id() if doubtful_controller else _none(),
        )
        if doubtful_controller:
            refusal = update_metadata_controller_refusal(controller_id, zookeeper_controller)
            if refusal is not None:
                self._log(
                    logging.WARNING, "refused_update_metadata_controller", reason=refusal.message
                )
                controller_id = -1 if zookeeper_controller is None else zookeeper_controller
        believed_brokers = []
        for broker in brokers:
            found = registered.found.get(broker.broker_id)
            registration = None if found is None else found.registration
            refusal = (
                update_metadata_endpoint_refusal(broker, registration)
                if broker in doubtful_brokers
                else None
            )
            if refusal is None:
                believed_brokers.append(broker)
                continue
            self._log(logging.WARNING, "refused_update_metadata_broker", reason=refusal.message)
            if registration is not None:
                believed_brokers.append(
                    BrokerInfo(
                        broker.broker_id,
                        registration.host,
                        registration.port,
                        kafka_endpoint=registration.kafka_endpoint,
                    )
                )
        states = {**read, **vouched}
        marked_topics = {t for t, m in zip(deleting, marked, strict=True) if m}
        assigned = dict(zip(topics, assignments, strict=True))
        believed = dict(partitions)
        for tp in doubtful_tps:
            info, state = partitions[tp], states[tp]
            refusal = update_metadata_leader_refusal(
                tp,
                info.leader,
                info.leader_epoch,
                state,
                marked_for_deletion=tp.topic in marked_topics,
            )
            if refusal is not None:
                self._log(
                    logging.WARNING, "refused_update_metadata_partition", reason=refusal.message
                )
                del believed[tp]
                continue
            if info.leader == LEADER_DURING_DELETE:
                continue
            assert state is not None  # update_metadata_leader_refusal refuses a missing one
            if info.leader_epoch < state.leader_epoch:
                # Late (ZooKeeper moved on since): cache the newer leadership it names.
                info = believed[tp] = dataclasses.replace(
                    info, leader=state.leader, leader_epoch=state.leader_epoch, isr=state.isr
                )
            assignment = (assigned[tp.topic] or {}).get(tp.partition)
            refusal = update_metadata_replicas_refusal(
                tp, info.replicas, info.offline_replicas, assignment
            )
            if refusal is None:
                continue
            if assignment is None:
                self._log(
                    logging.WARNING, "refused_update_metadata_partition", reason=refusal.message
                )
                del believed[tp]
                continue
            if partitions[tp].leader_epoch >= state.leader_epoch:
                # At the znode's epoch the controller sent what ZooKeeper holds: a request
                # that differs is not its (an older epoch's replicas are merely late).
                self._log(
                    logging.WARNING, "refused_update_metadata_replicas", reason=refusal.message
                )
            # A refused request's offline replicas are not believed either: the assigned
            # replicas whose broker is not registered stand in for them.
            live = registered.found.keys()
            believed[tp] = dataclasses.replace(
                info,
                replicas=tuple(assignment),
                offline_replicas=tuple(r for r in assignment if r not in live),
            )
        return controller_id, believed_brokers, believed

    # -- produce -----------------------------------------------------------------------------

    async def append_records(
        self,
        required_acks: int,
        timeout_ms: int,
        entries: dict[TopicPartition, bytes],
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> dict[TopicPartition, ProduceResult]:
        """Append to the partitions this broker leads; with acks=all wait for the ISR.

        Every acks setting gets the idempotent producer's checks (Partition.
        append_records_to_leader): a gap or a fenced epoch is a per-partition error, a
        retried batch is answered with its original base offset and not written again.
        Cancelling the call (the client went away) leaves what was appended in the logs;
        it only stops waiting for the acknowledgement. The two halves,
        :meth:`append_to_local_logs` and :meth:`await_acks`, serve a produce session, which
        appends its requests in order and answers each when its acks are met.
        """
        appended = await self.append_to_local_logs(required_acks, entries, origin=origin)
        return await self.await_acks(appended, timeout_ms)

    async def write_txn_markers(
        self, timeout_ms: int, markers: Mapping[TopicPartition, MarkerAppend]
    ) -> dict[TopicPartition, ProduceResult]:
        """Append transaction markers to the partitions this broker leads, acks=all, as
        Kafka's ``handleWriteTxnMarkersRequest`` appends them (internal topics included:
        a transaction's offsets live in ``__consumer_offsets``). Each partition's result;
        a marker the producer state refuses is written nowhere (docs/transactions.md)."""
        appended = await self.append_to_local_logs(
            ACKS_ALL, markers, origin=AppendOrigin.COORDINATOR
        )
        results = await self.await_acks(appended, timeout_ms)
        for tp, result in results.items():
            if result.error_code == pb.NONE:
                for listener in self.marker_listeners:
                    listener(tp, markers[tp], result.base_offset)
        return results

    async def append_to_local_logs(
        self,
        required_acks: int,
        entries: Mapping[TopicPartition, bytes | MarkerAppend],
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> AppendedRecords:
        """The first half of :meth:`append_records`: check the ZooKeeper session, then
        append every entry with no await in between, so that requests whose appends are
        awaited one after the other are appended in that order (a produce session's
        promise). Cancelled before it appends, it appends nothing.

        Kafka's internal topics (``__consumer_offsets``, ``__transaction_state``) take only
        their coordinators' writes (``origin``): a client's produce to one is refused
        INVALID_TOPIC, as Kafka's ``appendToLocalLog`` refuses it. A coordinator's batches
        get only the producer epoch check (:class:`AppendOrigin`)."""
        waiting: dict[TopicPartition, ProducePartitionStatus] = {}
        results: dict[TopicPartition, ProduceResult] = {}
        if origin is AppendOrigin.CLIENT:
            for tp in entries:
                if tp.topic in INTERNAL_TOPICS:
                    results[tp] = ProduceResult(
                        pb.INVALID_TOPIC, f"Cannot append to internal topic {tp.topic}"
                    )
        if results:
            entries = {tp: r for tp, r in entries.items() if tp not in results}
        produced = {tp: r for tp, r in entries.items() if not isinstance(r, MarkerAppend)}
        results.update(await self._refuse_unissued_producer_ids(produced))
        if not await self.zk.ensure_session_lease():
            for tp in entries:
                results[tp] = self._zombie_result(tp, "nothing was written")
            return AppendedRecords(results, waiting)
        for tp, records in entries.items():
            if tp in results:
                continue
            partition = self.partitions.get(tp)
            if partition is None:
                results[tp] = ProduceResult(
                    pb.UNKNOWN_TOPIC_OR_PARTITION,
                    f"broker {self.broker_id} does not host {tp}",
                )
                continue
            if self.log_dir_failure is not None:
                code, message = self._storage_error()
                results[tp] = ProduceResult(code, message, leader_epoch=partition.leader_epoch)
                continue
            try:
                if isinstance(records, MarkerAppend):
                    info = partition.append_marker_to_leader(
                        records.marker, records.producer_id, records.producer_epoch, now_ms()
                    )
                else:
                    info = partition.append_records_to_leader(records, required_acks, origin)
            except Exception as err:
                code, message = self._error_of_storage(err, "append")
                results[tp] = ProduceResult(code, message, leader_epoch=partition.leader_epoch)
                continue
            results[tp] = ProduceResult(
                pb.NONE,
                base_offset=info.first_offset,
                log_start_offset=partition.log.log_start_offset,
                leader_epoch=partition.leader_epoch,
            )
            if info.duplicate:
                # A retry of an idempotent producer's batch: answered with its original
                # offsets, and for acks=all only once those are replicated, like a new one.
                self._log(
                    logging.DEBUG,
                    "duplicate_batch_not_appended",
                    tp=tp,
                    base_offset=info.first_offset,
                    last_offset=info.last_offset,
                )
            else:
                self._wake(tp)
            if required_acks == ACKS_ALL:
                waiting[tp] = ProducePartitionStatus(info.last_offset + 1, info.first_offset)
        return AppendedRecords(results, waiting)

    async def _refuse_unissued_producer_ids(
        self, entries: dict[TopicPartition, bytes]
    ) -> dict[TopicPartition, ProduceResult]:
        """The entries for partitions led here whose batches name a producer id no broker
        handed out (UNKNOWN_PRODUCER_ID), or one above the cached bound that ZooKeeper
        could not confirm (REQUEST_TIMED_OUT, retriable), with their results: see
        :mod:`broker.replication.issued_producer_ids`. No await when every id is known."""
        refused: dict[TopicPartition, ProduceResult] = {}
        for tp, records in entries.items():
            partition = self.partitions.get(tp)
            if partition is None or not partition.is_leader:
                continue
            producer_ids = producer_ids_of(records)
            if not producer_ids:
                continue
            try:
                await self.issued_producer_ids.check(producer_ids)
            except errors.BrokerResponseError as err:
                code, message = _error_of(err)
                if code == pb.UNKNOWN_PRODUCER_ID:
                    self._log(logging.WARNING, "refused_unknown_producer_id", tp=tp, reason=message)
                refused[tp] = ProduceResult(code, message, leader_epoch=partition.leader_epoch)
        return refused

    async def _read_producer_id_bound(self) -> int:
        await self.zk.sync()
        block, _ = await self.zk.get_producer_id_block()
        return -1 if block is None else block.block_end

    async def await_acks(
        self, appended: AppendedRecords, timeout_ms: int
    ) -> dict[TopicPartition, ProduceResult]:
        """The second half of :meth:`append_records`: for acks=all, wait until the ISR has
        the appended records or ``timeout_ms`` passes; then confirm the ZooKeeper session."""
        results = appended.results
        if not any(r.error_code == pb.NONE for r in results.values()):
            return results  # nothing written: nothing to wait for or to withhold
        if appended.waiting:
            await self._wait_for_isr(timeout_ms, appended.waiting, results)
        if not await self.zk.ensure_session_lease():
            # The session may have expired while we appended or waited: this broker may
            # have been replaced as leader, so it must not acknowledge (no zombie acks).
            for tp, result in results.items():
                if result.error_code == pb.NONE:
                    results[tp] = self._zombie_result(tp, "written here but not acknowledged")
        return results

    def _zombie_result(self, tp: TopicPartition, what: str) -> ProduceResult:
        return ProduceResult(
            pb.NOT_LEADER_OR_FOLLOWER,
            f"broker {self.broker_id} cannot confirm its ZooKeeper session, so it may have "
            f"been replaced as leader of {tp}; {what}",
        )

    async def _wait_for_isr(
        self,
        timeout_ms: int,
        waiting: dict[TopicPartition, ProducePartitionStatus],
        results: dict[TopicPartition, ProduceResult],
    ) -> None:
        operation = DelayedProduce(timeout_ms, waiting, self.partitions.get)
        if not self.produce_purgatory.try_complete_else_watch(operation, waiting):
            await operation.wait()
        for tp, status in waiting.items():
            assert status.error_code is not None
            if status.error_code != pb.NONE:
                previous = results[tp]
                results[tp] = ProduceResult(
                    status.error_code,
                    str(errors.for_code(status.error_code)),
                    base_offset=previous.base_offset,
                    leader_epoch=previous.leader_epoch,
                )

    def partition_changed(self, tp: TopicPartition) -> None:
        """Something outside the replica manager changed the partition (DeleteRecords moved
        its log start offset): re-check what waits on it, and tell its fetch sessions."""
        self._wake(tp)

    def _wake(self, tp: TopicPartition) -> None:
        """The partition changed (append, HW, leadership): re-check what waits on it."""
        self.produce_purgatory.check_and_complete(tp)
        self.fetch_purgatory.check_and_complete(tp)
        self.delete_records_purgatory.check_and_complete(tp)
        sessions = self._fetch_sessions.get(tp)
        if sessions:
            partition = self.partitions.get(tp)
            for session in sessions:
                session.partition_changed(tp, partition)

    # -- fetch -------------------------------------------------------------------------------

    async def fetch_messages(
        self,
        replica_id: int,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        specs: dict[TopicPartition, FetchSpec],
    ) -> dict[TopicPartition, FetchPartitionResult]:
        """Serve a fetch: long-poll until ``min_bytes`` or ``max_wait_ms``, then read.

        A follower's fetch also tells the leader that follower's LEO, which may move the HW
        and let the follower back into the ISR. Cancelling only abandons the long poll.
        """
        is_follower = replica_id >= 0
        results = await self._read(replica_id, max_bytes, specs)
        ready = sum(len(r.records) for r in results.values())
        has_error = any(r.error_code != pb.NONE for r in results.values())
        if max_wait_ms <= 0 or not specs or ready >= min_bytes or has_error:
            return results
        statuses = {
            tp: FetchPartitionStatus(
                spec.fetch_offset, p.leader_epoch, p.is_leader, spec.read_committed
            )
            for tp, spec in specs.items()
            if (p := self.partitions.get(tp)) is not None
        }
        operation = DelayedFetch(max_wait_ms, min_bytes, is_follower, statuses, self.partitions.get)
        if not self.fetch_purgatory.try_complete_else_watch(operation, statuses):
            await operation.wait()
        return await self._read(replica_id, max_bytes, specs)

    # -- incremental fetch sessions (KIP-227, fetch_session.py) -----------------------------------

    def open_fetch_session(self, replica_id: int) -> FetchSessionState:
        """A new, empty session; :meth:`close_fetch_session` it when its stream ends."""
        return FetchSessionState(replica_id)

    def close_fetch_session(self, session: FetchSessionState) -> None:
        self._forget_in_session(session, list(session.specs))

    def _forget_in_session(self, session: FetchSessionState, tps: list[TopicPartition]) -> None:
        for tp in session.forget(tps):
            sessions = self._fetch_sessions[tp]
            sessions.remove(session)
            if not sessions:
                del self._fetch_sessions[tp]

    async def fetch_in_session(
        self,
        session: FetchSessionState,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        changed: dict[TopicPartition, FetchSpec],
        forgotten: list[TopicPartition],
    ) -> dict[TopicPartition, FetchPartitionResult]:
        """Serve one request of an incremental fetch session; returns what to answer.

        ``changed`` are the partitions the request names (all of them in the session's first
        request), ``forgotten`` those it drops. Read are the named partitions and those
        changed since the last fetch (every ``SESSION_FULL_READ_INTERVAL_S`` all of them);
        the others count as fetched again at their last offsets (for a follower's fetch
        state: ``ReplicaState.session_clock``). Answered are the named partitions and those
        with records, an error, or offsets or an epoch other than the last answer (all of
        them in the first answer)."""
        self._forget_in_session(session, forgotten)
        for tp in session.name(changed):
            self._fetch_sessions.setdefault(tp, []).append(session)
        first = not session.started
        fetch_ms = self.clock_ms()
        now = asyncio.get_running_loop().time()
        read_all = first or now - session.last_full_read >= SESSION_FULL_READ_INTERVAL_S
        results = await self._read_in_session(session, max_bytes, changed, read_all)
        ready = sum(len(r.records) for r in results.values())
        has_error = any(r.error_code != pb.NONE for r in results.values())
        if max_wait_ms > 0 and ready < min_bytes and not has_error:
            await session.wait(max_wait_ms / 1000, min_bytes, self.partitions)
            results.update(await self._read_in_session(session, max_bytes, changed, read_all))
        session.started = True
        session.clock.last_fetch_ms = fetch_ms  # the unread partitions were fetched too
        if read_all:
            session.last_full_read = now
        answer = {}
        for tp, r in results.items():
            state = (r.high_watermark, r.log_start_offset, r.log_end_offset, r.leader_epoch)
            if (
                session.needs_answer(tp, state)
                or first
                or tp in changed
                or r.records
                or r.error_code != pb.NONE
            ):
                answer[tp] = r
        # A partition answered with an error leaves the session; named again, it is fetched
        # again (the fetcher backs it off meanwhile). This also keeps partitions this broker
        # does not host out of the session, however many a fetcher names.
        self._forget_in_session(session, [tp for tp, r in answer.items() if r.error_code])
        return answer

    async def _read_in_session(
        self,
        session: FetchSessionState,
        max_bytes: int,
        named: dict[TopicPartition, FetchSpec],
        read_all: bool,
    ) -> dict[TopicPartition, FetchPartitionResult]:
        dirty = session.take_dirty()
        specs = session.specs
        if read_all:
            wanted = specs
        else:
            wanted = dict(named)
            for tp in dirty:
                spec = specs.get(tp)
                if spec is not None:
                    wanted[tp] = spec
        results = await self._read(session.replica_id, max_bytes, wanted)
        partitions = self.partitions
        replica_id = session.replica_id
        for tp in wanted:
            partition = partitions.get(tp)
            session.watch(tp, partition)
            if replica_id >= 0 and partition is not None and results[tp].error_code == pb.NONE:
                partition.follow_in_session(replica_id, session.clock)
        return results

    async def _read(
        self, replica_id: int, max_bytes: int, specs: dict[TopicPartition, FetchSpec]
    ) -> dict[TopicPartition, FetchPartitionResult]:
        is_follower = replica_id >= 0
        results: dict[TopicPartition, FetchPartitionResult] = {}
        budget = max_bytes
        for tp, spec in specs.items():
            partition = self.partitions.get(tp)
            if partition is None:
                results[tp] = FetchPartitionResult(
                    pb.UNKNOWN_TOPIC_OR_PARTITION,
                    f"broker {self.broker_id} does not host {tp}",
                )
                continue
            if self.log_dir_failure is not None:
                results[tp] = FetchPartitionResult(*self._storage_error())
                continue
            try:
                partition.require_leader()
                partition.check_leader_epoch(spec.current_leader_epoch)
                # KIP-74: the first partition with data gets at least one whole batch, even
                # one larger than the limits, so that a fetch can always make progress.
                read_args = (
                    spec.fetch_offset,
                    max(0, min(spec.max_bytes, budget)),
                    is_follower,
                    budget == max_bytes,
                    spec.read_committed,
                )
                if partition.bytes_available(spec.fetch_offset, is_follower) <= LOOP_READ_MAX_BYTES:
                    result = partition.read(*read_args)
                else:
                    result = await self._in_executor(partition.read, *read_args)
                data: FetchData = result.data
            except Exception as err:
                code, message = self._error_of_storage(err, "read")
                results[tp] = FetchPartitionResult(
                    code,
                    message,
                    partition.high_watermark,
                    partition.log.log_start_offset,
                    partition.log_end_offset,
                    partition.leader_epoch,
                    last_stable_offset=partition.last_stable_offset,
                )
                continue
            budget -= len(data.records)
            if is_follower:
                self._record_follower_fetch(partition, replica_id, spec)
            results[tp] = FetchPartitionResult(
                pb.NONE,
                high_watermark=result.high_watermark,
                log_start_offset=result.log_start_offset,
                log_end_offset=result.log_end_offset,
                leader_epoch=result.leader_epoch,
                records=data.records,
                last_stable_offset=result.last_stable_offset,
                aborted_transactions=result.aborted,
            )
        return results

    def _record_follower_fetch(
        self, partition: Partition, replica_id: int, spec: FetchSpec
    ) -> None:
        try:
            hw_moved = partition.update_follower_fetch_state(
                replica_id, spec.fetch_offset, spec.log_start_offset
            )
        except errors.NotLeaderOrFollowerError as err:
            self._log(
                logging.WARNING, "fetch_from_a_non_replica", tp=partition.topic_partition, error=err
            )
            return
        if hw_moved:
            self._wake(partition.topic_partition)
        else:  # the follower's log start offset may have moved the low watermark
            self.delete_records_purgatory.check_and_complete(partition.topic_partition)
        expanded = partition.isr_to_expand(replica_id)
        if expanded is not None:
            self._spawn_isr_update(partition, expanded, reason=f"follower {replica_id} caught up")

    # -- OffsetsForLeaderEpoch and ListOffsets ------------------------------------------------

    def _leader_partition(self, tp: TopicPartition, current_leader_epoch: int | None) -> Partition:
        """The partition, if this broker leads it in the epoch the requester names."""
        partition = self.partitions.get(tp)
        if partition is None:
            raise errors.UnknownTopicOrPartitionError(f"broker {self.broker_id} does not host {tp}")
        partition.check_leader_epoch(current_leader_epoch)
        if not partition.is_leader:
            raise errors.NotLeaderOrFollowerError(
                f"broker {self.broker_id} is not the leader of {tp} (leader {partition.leader_id})"
            )
        return partition

    def last_offset_for_leader_epoch(
        self, tp: TopicPartition, current_leader_epoch: int | None, leader_epoch: int
    ) -> tuple[int, int, int]:
        """(error code, epoch, end offset) for one partition, served by the leader only."""
        try:
            partition = self._leader_partition(tp, current_leader_epoch)
        except errors.BrokerResponseError as err:
            return err.code, -1, -1
        epoch, end_offset = partition.last_offset_for_leader_epoch(leader_epoch)
        return pb.NONE, epoch, end_offset

    async def list_offset(
        self,
        tp: TopicPartition,
        current_leader_epoch: int | None,
        timestamp: int,
        replica_id: int,
        *,
        read_committed: bool = False,
    ) -> tuple[int, int, int, int]:
        """(error code, offset, timestamp, leader epoch): earliest, latest (the HW for
        consumers, the LSO for read_committed ones), max timestamp, or by time. A record
        found by its timestamp answers its own timestamp and its batch's leader epoch, and,
        for a consumer, only if it is below the high watermark (the LSO: Kafka's
        ``lastFetchableOffset``); else no offset (-1)."""
        try:
            partition = self._leader_partition(tp, current_leader_epoch)
        except errors.BrokerResponseError as err:
            known = self.partitions.get(tp)
            return err.code, -1, -1, known.leader_epoch if known else -1
        epoch = partition.leader_epoch
        if timestamp == LIST_OFFSETS_EARLIEST:
            return pb.NONE, partition.log.log_start_offset, -1, epoch
        if timestamp == LIST_OFFSETS_LATEST:
            if replica_id >= 0:
                return pb.NONE, partition.log_end_offset, -1, epoch
            if partition.high_watermark < partition.leader_epoch_start_offset:
                # KIP-207: a new leader's HW may still be below what the old one exposed.
                return pb.OFFSET_NOT_AVAILABLE, -1, -1, -1
            latest = partition.last_stable_offset if read_committed else partition.high_watermark
            return pb.NONE, latest, -1, epoch
        if timestamp == LIST_OFFSETS_MAX_TIMESTAMP:
            found = await self._in_executor(partition.log.max_timestamp_offset)
        else:
            found = await self._in_executor(partition.log.offset_for_timestamp, timestamp)
        if replica_id >= 0:
            fetchable = partition.log_end_offset
        elif read_committed:
            fetchable = partition.last_stable_offset
        else:
            fetchable = partition.high_watermark
        if found is None or found.offset >= fetchable:
            if replica_id < 0 and partition.high_watermark < partition.leader_epoch_start_offset:
                return pb.OFFSET_NOT_AVAILABLE, -1, -1, -1
            return pb.NONE, -1, -1, -1
        return pb.NONE, found.offset, found.timestamp, found.leader_epoch

    # -- ISR maintenance ---------------------------------------------------------------------

    async def _maybe_shrink_isrs(self) -> None:
        for partition in list(self.partitions.values()):
            shrunk = partition.isr_to_shrink()
            if shrunk is not None:
                out = sorted(set(partition.isr) - set(shrunk))
                self._spawn_isr_update(partition, shrunk, reason=f"followers {out} fell behind")

    def _spawn_isr_update(self, partition: Partition, isr: tuple[int, ...], reason: str) -> None:
        partition.isr_update_in_flight = True
        task = asyncio.create_task(self._update_isr(partition, isr, reason))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _update_isr(self, partition: Partition, isr: tuple[int, ...], reason: str) -> None:
        """Write the new ISR to the state znode, conditional on the version we hold.

        Kafka's ZK-mode rule: the leader never overwrites a state it has not seen. On a
        version conflict it reads the znode (:meth:`_after_lost_isr_race`) rather than try
        again with the version it holds, which fails at every fetch until the controller's
        next LeaderAndIsr (KAFKA-2729: 58,517 such writes in a 10,000-partition run).
        """
        tp = partition.topic_partition
        epoch = partition.leader_epoch
        desired = PartitionStateData(
            leader=self.broker_id,
            leader_epoch=epoch,
            isr=isr,
            controller_epoch=partition.controller_epoch,
        )
        try:
            # None: the znode moved on (the controller won); our own earlier write whose
            # reply was lost counts as success inside the client.
            version = await self.zk.update_partition_state_conditionally(
                tp, desired, partition.zk_version
            )
        except Exception as err:
            self._log(logging.WARNING, "isr_update_failed", tp=tp, isr=list(isr), error=err)
            version = None
        if partition.leader_epoch != epoch or not partition.is_leader:
            return  # leadership changed meanwhile: the controller's state wins
        if version is None:
            partition.isr_update_in_flight = False
            self._log(
                logging.WARNING,
                "isr_update_lost_race",
                **partition.log_context(),
                wanted=list(isr),
            )
            await self._after_lost_isr_race(partition, epoch)
            self._wake(tp)  # the next fetch tries again, also for an unchanged partition
            return
        old = self._take_isr(partition, isr, version)
        if len(isr) < len(old):
            self.metrics.isr_shrinks.inc()
        elif len(isr) > len(old):
            self.metrics.isr_expands.inc()
        self._record_isr_change(tp)
        self._log(
            logging.INFO,
            "isr_changed",
            **partition.log_context(),
            old_isr=old,
            zk_version=version,
            reason=repr(reason),
        )

    def _take_isr(self, partition: Partition, isr: tuple[int, ...], zk_version: int) -> list[int]:
        """The ISR as the state znode holds it at ``zk_version`` becomes the partition's
        (and the metadata cache's); returns the ISR it had."""
        tp = partition.topic_partition
        old = list(partition.isr)
        if partition.apply_isr(isr, zk_version):
            self._wake(tp)
        self.metadata_cache.refresh_partition(
            tp, PartitionInfo(self.broker_id, partition.leader_epoch, partition.replicas, isr)
        )
        return old

    async def _after_lost_isr_race(self, partition: Partition, epoch: int) -> None:
        """The state znode moved on under a conditional ISR write: take what it says. If it
        still names this broker leader at this epoch, its ISR and version are the truth to
        start from (what Kafka's AlterIsr answers a leader with); the next fetch or lag
        check decides again from there. If it names another leader or a newer epoch, this
        broker no longer leads: it is fenced (no produce at its old epoch) until the
        controller's LeaderAndIsr tells it its role."""
        tp = partition.topic_partition
        try:
            current = await self.zk.read_partition_state(tp)
        except ZkError as err:
            self._log(logging.WARNING, "isr_state_unreadable", tp=tp, error=err)
            return
        if current is None or partition.leader_epoch != epoch or not partition.is_leader:
            return
        if current.leader == self.broker_id and current.leader_epoch == epoch:
            old = self._take_isr(partition, current.isr, current.zk_version)
            self._log(
                logging.INFO,
                "isr_adopted",
                **partition.log_context(),
                old_isr=old,
                zk_version=current.zk_version,
            )
        elif current.leader_epoch >= epoch:
            partition.fence(
                f"ZooKeeper names leader {current.leader} at epoch {current.leader_epoch}"
            )
            self._log(
                logging.WARNING,
                "fenced_by_zookeeper_state",
                **partition.log_context(),
                zookeeper_leader=current.leader,
                zookeeper_leader_epoch=current.leader_epoch,
            )

    def _record_isr_change(self, tp: TopicPartition) -> None:
        self._pending_isr_changes.add(tp)
        self._last_isr_change_ms = self.clock_ms()

    async def _maybe_propagate_isr_changes(self) -> None:
        """Tell the controller through /isr_change_notification, in batches (Kafka's rule)."""
        if not self._pending_isr_changes:
            return
        now = self.clock_ms()
        if (
            now - self._last_isr_change_ms < ISR_CHANGE_QUIET_MS
            and now - self._last_isr_propagation_ms < ISR_CHANGE_MAX_DELAY_MS
        ):
            return
        changed = sorted(self._pending_isr_changes)
        await self.zk.create_isr_change_notification(changed)
        self._pending_isr_changes.difference_update(changed)
        self._last_isr_propagation_ms = now

    # -- checkpoints, retention, session loss --------------------------------------------------

    def _hw_checkpointing_started(self) -> None:
        """Kafka starts the HW checkpoint task only after the first LeaderAndIsr, so a
        restarted broker never overwrites the checkpointed HWs of partitions it has not
        been told about yet."""
        if not self._hw_checkpointing:
            self._hw_checkpointing = True
            self._spawn(
                self._every(
                    self.config.replica_high_watermark_checkpoint_interval_ms,
                    self.checkpoint_high_watermarks,
                ),
                "hw-checkpoint",
            )

    async def checkpoint_high_watermarks(self) -> None:
        if self.log_dir_failure is not None:
            return  # nothing more is written to an offline dir
        # Keep the checkpointed HW of logs that have no partition object yet.
        hws = {tp: hw for tp, hw in self._checkpointed_hws.items() if self.log_manager.get_log(tp)}
        hws.update({tp: p.high_watermark for tp, p in self.partitions.items()})
        try:
            await self._in_executor(self.log_manager.write_high_watermarks, hws)
        except OSError as err:
            self.mark_log_dir_offline(err, "high_watermark_checkpoint")
            if is_resource_exhaustion(err):
                return  # reported; written again on the next period
            raise
        self._checkpointed_hws = hws

    async def _clean_logs(self, cleaner: LogCleanerManager, thread: ThreadPoolExecutor) -> None:
        """The log cleaner's loop (docs/storage.md, "Compacted logs"): on its own thread,
        the dirtiest compacted log is cleaned below its high watermark; when none needs it,
        the loop sleeps ``log.cleaner.backoff.ms``."""
        loop = asyncio.get_running_loop()
        backoff = self.config.log_cleaner_backoff_ms / 1000
        while True:
            if self.log_dir_failure is not None:
                await asyncio.sleep(backoff)
                continue
            logs = {tp: p.log for tp, p in self.partitions.items() if p.log.config.compact}
            hws = {tp: self.partitions[tp].high_watermark for tp in logs}
            try:
                result = await loop.run_in_executor(thread, cleaner.clean_dirtiest, logs, hws)
            except OSError as err:
                self.mark_log_dir_offline(err, "log_cleaner")
                continue
            except Exception:
                self._log(logging.ERROR, "log_cleaner_failed", exc_info=True)
                result = None
            if result is None:
                await asyncio.sleep(backoff)
            else:
                stats = result.stats
                self._log(
                    logging.INFO,
                    "log_cleaned",
                    tp=result.topic_partition,
                    first_dirty=result.first_dirty,
                    end_offset=result.end_offset,
                    segments=result.segments_cleaned,
                    groups=result.groups_swapped,
                    abandoned=result.groups_abandoned,
                    records_before=stats.records_read,
                    records_after=stats.records_kept,
                    tombstones_removed=stats.tombstones_removed,
                    bytes_before=stats.bytes_read,
                    bytes_after=stats.bytes_written,
                )

    async def _cleanup_logs(self) -> None:
        if self.log_dir_failure is not None:
            return
        hws = {tp: p.high_watermark for tp, p in self.partitions.items()}
        starts = {tp: p.log.log_start_offset for tp, p in self.partitions.items()}
        await self._in_executor(self.log_manager.cleanup_logs, hws, self.clock_ms())
        for tp, start in starts.items():
            partition = self.partitions.get(tp)
            if partition is not None and partition.log.log_start_offset != start:
                self._wake(tp)  # its followers learn the new log start offset

    async def _checkpoint_recovery_points(self) -> None:
        if self.log_dir_failure is not None:
            return
        try:
            await self._in_executor(self.log_manager.checkpoint_recovery_points)
        except OSError as err:
            self.mark_log_dir_offline(err, "checkpoint_recovery_points")
            if is_resource_exhaustion(err):
                return  # reported; written again on the next period
            raise

    async def _checkpoint_log_start_offsets(self) -> None:
        if self.log_dir_failure is not None:
            return
        try:
            await self._in_executor(self.log_manager.checkpoint_log_start_offsets)
        except OSError as err:
            self.mark_log_dir_offline(err, "checkpoint_log_start_offsets")
            if is_resource_exhaustion(err):
                return  # reported; written again on the next period
            raise

    async def _purge_purgatories(self) -> None:
        self.produce_purgatory.purge_completed()
        self.fetch_purgatory.purge_completed()
        self.delete_records_purgatory.purge_completed()

    def on_session_lost(self) -> None:
        """No zombie leaders: with its session gone this broker may already have been
        replaced, so it acknowledges nothing as leader until a LeaderAndIsr says otherwise."""
        fenced = []
        for tp, partition in self.partitions.items():
            if partition.is_leader and not partition.fenced:
                partition.fence("ZooKeeper session lost")
                fenced.append(str(tp))
                self._wake(tp)
        self._log(
            logging.WARNING,
            "session_lost_fenced_leaders",
            count=len(fenced),
            partitions=capped(fenced),
        )
