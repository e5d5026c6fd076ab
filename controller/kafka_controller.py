"""The controller: election, failover and one event loop (Kafka 2.x's ``KafkaController``).

Every broker runs one :class:`KafkaController`; the one that creates ``/controller`` is the
controller (docs/replication.md). ZooKeeper watches only put
events on a queue; one task takes them off one at a time and handles each to the end
(Kafka's ``ControllerEventManager``), so handlers never race each other and the
:class:`~controller.controller_context.ControllerContext` needs no locks.

Events handled:

- ``Elect`` (start, ``/controller`` changed): stand with ``try_elect``; on winning, load the
  brokers, topics, assignments and states, initialise partitions that have no state, elect
  leaders for offline partitions that can have one, and send every live broker its
  LeaderAndIsr and a full UpdateMetadata.
- ``BrokerChange``: a dead broker's partitions get a new leader from the ISR
  (``offline_partition_leader_election``; unclean only if the topic says so) and it leaves
  the ISR of those it followed (``remove_replica_from_isr``); a partition with no eligible
  leader goes offline (leader -1, the last ISR member kept) and comes back when an ISR
  member returns. A new broker gets LeaderAndIsr for its partitions and everyone an
  UpdateMetadata. A bounced broker (new registration czxid, KIP-380) is both.
- ``TopicChange``: new topics get their initial states and LeaderAndIsr.
- ``PartitionModifications`` (a topic's ``/brokers/topics/<t>`` changed): partitions added
  to it are initialised like a new topic's (:mod:`controller.partition_modifications`).
- ``IsrChangeNotification``: re-read the named states, UpdateMetadata to all, delete the
  notifications.
- ``TopicDeletion`` (``/admin/delete_topics/<t>``): UpdateMetadata marks the topic's
  partitions deleted (leader -2), StopReplica(delete) goes to every replica; once all
  answered, the znodes go. A replica on a dead broker holds the deletion until it returns.
- ``ControlledShutdown`` (a broker's RPC on SIGTERM): leadership moves to another ISR
  member, the broker leaves every ISR and stops its replicas; the answer lists what it
  still leads (no other ISR member), and the broker retries.
- ``PreferredReplicaElection`` (``/admin/preferred_replica_election``) and
  ``AutoRebalance`` (every ``leader.imbalance.check.interval.seconds`` when
  ``auto.leader.rebalance.enable``): leadership back to the first assigned replica.
- ``UncleanElection`` (an ElectLeaders request of this broker's Kafka listener): a live
  replica leads each leaderless partition, in the ISR or not, whatever the topic's
  ``unclean.leader.election.enable`` (Kafka's ``processReplicaLeaderElection``).
- ``Reassignment`` (``/admin/reassign_partitions``, and the adding/removing replicas the
  topic znodes keep, so a move resumes after failover and can be cancelled): the steps of
  :mod:`controller.reassignment`, advanced again by ISR changes and broker startups.
- ``Resign`` (ControllerMovedError from a fenced write, session loss, a broker answering
  STALE_CONTROLLER_EPOCH, another broker in ``/controller``): drop the cache and the
  channels, then stand again.

Requests to brokers are queued on the :class:`ControllerChannelManager` without waiting for
the answers (Kafka's send threads), so a slow broker never holds up the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypedDict

from controller.channel_manager import ControllerChannelManager
from controller.controller_context import ControllerContext
from controller.controller_metrics import ControllerMetrics
from controller.controller_zk import ControllerMovedError, ControllerZkClient, ZkWatch
from controller.controller_zk import LiveBroker as RegisteredBroker
from controller.leader_election import (
    controlled_shutdown_leader_election,
    elected_state,
    initial_leader_and_isr,
    new_leader_and_isr,
    offline_partition_leader_election,
    preferred_replica_leader_election,
    remove_replica_from_isr,
)
from controller.partition_modifications import partition_modification
from controller.preferred_replica import partitions_to_rebalance
from controller.reassignment import (
    ReassignmentAction,
    next_reassignment_step,
    reassign_to,
    validate_reassignment,
)
from controller.request_batch import (
    ALL_LIVE_BROKERS,
    ControllerBrokerRequestBatch,
    ControlRequest,
    ControlResponse,
    LiveBroker,
    PartitionLeadership,
    SentRequest,
    request_kind,
)
from controller.topic_deletion import TopicDeletion, TopicDeletionManager, TopicDeletionStopped
from proto.config.broker_config import BrokerConfig
from proto.errors import BrokerResponseError, StaleControllerEpochError
from proto.process.event_log import log_event
from proto.replica_assignment import InvalidReplicaAssignmentError
from proto.topic_partition import TopicPartition
from proto.transport.tls import TlsConfig
from proto.wire.minibroker_pb2 import ErrorCode
from proto.zk.credentials import ZkCredentials
from proto.zk.session import ZkError, ZkSessionExpiredError
from proto.zk.znodes import (
    LEADER_NONE,
    PREFERRED_REPLICA_ELECTION_PATH,
    REASSIGN_PARTITIONS_PATH,
    PartitionState,
    PartitionStateData,
    ZkDataError,
)

__all__ = ["KafkaController"]

log = logging.getLogger(__name__)

FAILOVER_RETRY_BACKOFF_S = 1.0
"""Pause before standing again after a failover failed with an unexpected error."""

"""Pause before sending StopReplica again to replicas that failed to delete a topic."""

UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"
_STATE_LINES_AT_INFO = 100
"""The largest state change logged a line per partition at INFO."""
_UPDATE_ATTEMPTS = 3
"""How often a state write that lost a race with a leader's ISR change is re-decided."""


# -- events (Kafka's ControllerEvent subclasses) ----------------------------------------------


@dataclass(frozen=True, slots=True)
class _Elect:
    reason: str


@dataclass(frozen=True, slots=True)
class _BrokerChange:
    pass


@dataclass(frozen=True, slots=True)
class _TopicChange:
    pass


@dataclass(frozen=True, slots=True)
class _PartitionModifications:
    topic: str


@dataclass(frozen=True, slots=True)
class _IsrChangeNotification:
    pass


@dataclass(frozen=True, slots=True)
class _LogDirEventNotification:
    pass


@dataclass(frozen=True, slots=True)
class _ControlledShutdown:
    broker_id: int
    broker_epoch: int
    reply: asyncio.Future[list[TopicPartition]]


@dataclass(frozen=True, slots=True)
class _PreferredReplicaElection:
    pass


@dataclass(frozen=True, slots=True)
class _UncleanElection:
    """ElectLeaders with the unclean type (KIP-460), from this broker's Kafka listener."""

    partitions: tuple[TopicPartition, ...]
    reply: asyncio.Future[dict[TopicPartition, tuple[int, str | None]]]


@dataclass(frozen=True, slots=True)
class _AutoRebalance:
    pass


@dataclass(frozen=True, slots=True)
class _Reassignment:
    pass


@dataclass(frozen=True, slots=True)
class _Resign:
    reason: str
    epoch: int | None = None
    """Resign only if still controller at this epoch (None: whatever the epoch)."""
    unless_zookeeper_agrees: bool = False
    """A broker's word only: stay if ZooKeeper still names this controller at this epoch."""


class _ReplicaChanges(TypedDict):
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


_Decide = Callable[[TopicPartition, PartitionState], PartitionStateData | None]
"""A state change: the new content for a partition's current state, or None (no change)."""


_Event = (
    _Elect
    | _BrokerChange
    | _TopicChange
    | _PartitionModifications
    | _IsrChangeNotification
    | _LogDirEventNotification
    | _UncleanElection
    | TopicDeletion
    | TopicDeletionStopped
    | _ControlledShutdown
    | _PreferredReplicaElection
    | _AutoRebalance
    | _Reassignment
    | _Resign
)


class KafkaController:
    """One controller candidate; the active controller while it holds ``/controller``."""

    def __init__(
        self,
        broker_id: int,
        zookeeper_connect: str,
        *,
        session_timeout_ms: int = 6000,
        connection_timeout_ms: int | None = None,
        request_timeout_s: float = 30.0,
        unclean_leader_election_enable: bool = False,
        auto_leader_rebalance_enable: bool = False,
        leader_imbalance_check_interval_s: float = 300.0,
        leader_imbalance_per_broker_percentage: int = 10,
        metrics: ControllerMetrics | None = None,
        tls: TlsConfig | None = None,
        zookeeper_credentials: ZkCredentials | None = None,
    ) -> None:
        """``unclean_leader_election_enable`` is the broker default, which a topic's
        ``/config/topics/<t>`` overrides."""
        self._broker_id = broker_id
        self.metrics = metrics if metrics is not None else ControllerMetrics()
        self._tls = tls
        self._zk = ControllerZkClient(
            zookeeper_connect,
            broker_id=broker_id,
            session_timeout_ms=session_timeout_ms,
            connection_timeout_ms=connection_timeout_ms,
            credentials=zookeeper_credentials,
        )
        self._request_timeout_s = request_timeout_s
        self._session_timeout_s = session_timeout_ms / 1000
        self._default_unclean = unclean_leader_election_enable
        self._auto_rebalance = auto_leader_rebalance_enable
        self._imbalance_check_interval_s = leader_imbalance_check_interval_s
        self._imbalance_percentage = leader_imbalance_per_broker_percentage
        self._rebalance_task: asyncio.Task[None] | None = None
        self.topic_deletion = TopicDeletionManager(self)
        """Per topic being deleted: brokers that confirmed deleting their replicas."""
        self._ctx = ControllerContext()
        self._active = False
        self._channels: ControllerChannelManager | None = None
        self._queue: asyncio.Queue[_Event] = asyncio.Queue()
        self._loop_task: asyncio.Task[None] | None = None
        self._watches: list[ZkWatch] = []
        self._topic_watches: dict[str, ZkWatch] = {}
        """The active controller's watch on each topic's znode (partitions added)."""
        self._send_tasks: set[asyncio.Task[None]] = set()

    @classmethod
    def from_config(
        cls,
        config: BrokerConfig,
        metrics: ControllerMetrics | None = None,
        tls: TlsConfig | None = None,
    ) -> KafkaController:
        """The candidate a broker process runs, with the broker's Kafka properties."""
        return cls(
            config.broker_id,
            config.zookeeper_connect,
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            connection_timeout_ms=config.zookeeper_connection_timeout_ms,
            request_timeout_s=config.request_timeout_ms / 1000,
            unclean_leader_election_enable=config.unclean_leader_election_enable,
            auto_leader_rebalance_enable=config.auto_leader_rebalance_enable,
            leader_imbalance_check_interval_s=config.leader_imbalance_check_interval_seconds,
            leader_imbalance_per_broker_percentage=config.leader_imbalance_per_broker_percentage,
            metrics=metrics,
            tls=tls,
            zookeeper_credentials=config.zookeeper_credentials(),
        )

    # -- public ------------------------------------------------------------------------------

    def reconfigure(self, config: BrokerConfig) -> None:
        """Take this broker's dynamically changed configs (Kafka's controller reads its
        broker's ``KafkaConfig``, which ``DynamicBrokerConfig`` keeps current): the default
        of ``unclean.leader.election.enable``, read at the next election. A topic's own
        setting is read from ``/config/topics/<t>`` at each election anyway."""
        self._default_unclean = config.unclean_leader_election_enable

    @property
    def broker_id(self) -> int:
        return self._broker_id

    @property
    def is_active(self) -> bool:
        """True while this broker is the controller."""
        return self._active

    @property
    def epoch(self) -> int | None:
        """The controller epoch while active, else None."""
        return self._ctx.epoch if self._active else None

    @property
    def zk(self) -> ControllerZkClient:
        """This candidate's ZooKeeper session."""
        return self._zk

    @property
    def context(self) -> ControllerContext:
        """The cache; only code running on the controller's event loop may change it."""
        return self._ctx

    async def start(self) -> None:
        """Connect to ZooKeeper and start the event loop, which sets the watches and then
        stands for election (in the background: this returns once connected, not once
        elected, so a broker's start-up never waits on the watches). Raises
        ZkConnectionError if ZooKeeper is unreachable. Cancelling it leaves the controller
        half started: call :meth:`stop`."""
        await self._zk.start()
        self._zk.on_session_lost(lambda: self.put(_Resign("session_lost")))
        self._loop_task = asyncio.get_running_loop().create_task(
            self._run(), name=f"controller-{self._broker_id}"
        )

    async def _set_watches(self) -> None:
        """Set the standing watches (they re-arm themselves after each fire and after a
        reconnect); on a ZooKeeper error cancel those set so far and try again."""
        setters: list[Callable[[], Awaitable[ZkWatch]]] = [
            lambda: self._zk.watch_controller(lambda: self.put(_Elect("controller_changed"))),
            lambda: self._zk.watch_brokers(lambda: self.put(_BrokerChange())),
            lambda: self._zk.watch_topics(lambda: self.put(_TopicChange())),
            lambda: self._zk.watch_isr_change_notifications(
                lambda: self.put(_IsrChangeNotification())
            ),
            lambda: self._zk.watch_topic_deletions(lambda: self.put(TopicDeletion())),
            lambda: self._zk.watch_log_dir_event_notifications(
                lambda: self.put(_LogDirEventNotification())
            ),
            lambda: self._zk.watch_preferred_replica_election(
                lambda: self.put(_PreferredReplicaElection())
            ),
            lambda: self._zk.watch_reassignment(lambda: self.put(_Reassignment())),
        ]
        while True:
            try:
                for setter in setters:
                    self._watches.append(await setter())
                return
            except ZkError as e:
                self.log(logging.WARNING, "watches_not_set", error=repr(e))
                for watch in self._watches:
                    watch.cancel()
                self._watches = []
                await asyncio.sleep(FAILOVER_RETRY_BACKOFF_S)

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TopicPartition]:
        """Handle a broker's ControlledShutdown (Kafka's ``doControlledShutdown``): move its
        leaderships to other ISR members, take it out of every ISR, stop its replicas.
        Returns the partitions it still leads (no other ISR member could take over); the
        broker retries until none is left. Raises BrokerResponseError NOT_CONTROLLER if
        this broker is not the controller, STALE_BROKER_EPOCH for any epoch but the
        registered one (-1 included),
        BROKER_NOT_AVAILABLE for a broker that is not registered."""
        if not self._active:
            raise BrokerResponseError(
                f"broker {self._broker_id} is not the controller", code=ErrorCode.NOT_CONTROLLER
            )
        reply: asyncio.Future[list[TopicPartition]] = asyncio.get_running_loop().create_future()
        self.put(_ControlledShutdown(broker_id, broker_epoch, reply))
        return await reply

    async def elect_unclean_leaders(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, str | None]]:
        """An unclean election (KIP-460) of each partition: (error code, message) by
        partition, NONE where a leader was elected (ELECTION_NOT_NEEDED where its leader is
        live, ELIGIBLE_LEADERS_NOT_AVAILABLE where no replica is). Raises
        BrokerResponseError NOT_CONTROLLER if this broker is not (or stops being) the
        controller."""
        if not self._active:
            raise BrokerResponseError(
                f"broker {self._broker_id} is not the controller", code=ErrorCode.NOT_CONTROLLER
            )
        reply: asyncio.Future[dict[TopicPartition, tuple[int, str | None]]]
        reply = asyncio.get_running_loop().create_future()
        self.put(_UncleanElection(tuple(partitions), reply))
        return await reply

    async def stop(self) -> None:
        """Stop the event loop, give up ``/controller`` if held, close the channels and the
        ZooKeeper session. Idempotent. Requests already queued to brokers are dropped."""
        for watch in self._watches:
            watch.cancel()
        self._watches = []
        self.unwatch_topics(list(self._topic_watches))
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
            self._loop_task = None
        if self._active:
            # Deleting /controller lets a successor stand at once; if ZooKeeper does not
            # answer, closing the session (or its expiry) removes it anyway.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._session_timeout_s):
                    await self._resign("stopped", stand_again=False)
        await self._close_channels()
        await self._zk.close()
        while not self._queue.empty():  # nobody will answer these any more
            event = self._queue.get_nowait()
            if isinstance(event, _ControlledShutdown | _UncleanElection) and not event.reply.done():
                event.reply.set_exception(
                    BrokerResponseError("the controller stopped", code=ErrorCode.NOT_CONTROLLER)
                )

    # -- the event loop ----------------------------------------------------------------------

    def put(self, event: _Event) -> None:
        self._queue.put_nowait(event)

    async def _run(self) -> None:
        await self._set_watches()
        self.put(_Elect("startup"))
        while True:
            event = await self._queue.get()
            try:
                await self._handle(event)
            except asyncio.CancelledError:
                if isinstance(event, _ControlledShutdown | _UncleanElection):
                    event.reply.cancel()
                raise
            except (ControllerMovedError, StaleControllerEpochError) as e:
                self._refuse(event)
                await self._resign(f"{type(e).__name__}: {e}")
            except ZkSessionExpiredError:
                self._refuse(event)
                await self._resign("session_expired")
            except Exception:
                self.log(
                    logging.ERROR, "event_failed", exc_info=True, event_type=type(event).__name__
                )
                if (
                    isinstance(event, _ControlledShutdown | _UncleanElection)
                    and not event.reply.done()
                ):
                    event.reply.set_exception(
                        BrokerResponseError("the controller failed to handle it; retry")
                    )
                if isinstance(event, _Elect):
                    # A failed election or failover: give up what we hold and try again,
                    # after a pause so that a persistent fault does not spin.
                    await self._resign("failover_failed", stand_again=False)
                    await asyncio.sleep(FAILOVER_RETRY_BACKOFF_S)
                    self.put(_Elect("retry_after_failed_failover"))

    @staticmethod
    def _refuse(event: _Event) -> None:
        """Answer a waiting ControlledShutdown (or election) NOT_CONTROLLER: its broker
        (or client) asks again."""
        if isinstance(event, _ControlledShutdown | _UncleanElection) and not event.reply.done():
            event.reply.set_exception(
                BrokerResponseError("the controller moved", code=ErrorCode.NOT_CONTROLLER)
            )

    async def _handle(self, event: _Event) -> None:
        if isinstance(event, _Elect):
            await self._elect(event.reason)
        elif isinstance(event, _Resign):
            if not self._active or event.epoch not in (None, self._ctx.epoch):
                return
            if event.unless_zookeeper_agrees and await self._still_elected():
                self.log(
                    logging.WARNING, "stale_controller_epoch_not_believed", reason=event.reason
                )
                return
            await self._resign(event.reason)
        elif not self._active:
            self._refuse(event)  # only the controller acts on the cluster's changes
        elif isinstance(event, _BrokerChange):
            with self._election_timer():
                await self._on_broker_change()
        elif isinstance(event, _TopicChange):
            await self._on_topic_change()
        elif isinstance(event, _PartitionModifications):
            await self._on_partition_modifications(event.topic)
        elif isinstance(event, _IsrChangeNotification):
            await self._on_isr_change_notification()
        elif isinstance(event, _LogDirEventNotification):
            with self._election_timer():
                await self._on_log_dir_event_notification()
        elif isinstance(event, TopicDeletion):
            await self.topic_deletion.on_topic_deletion()
        elif isinstance(event, TopicDeletionStopped):
            await self.topic_deletion.on_replicas_stopped(event)
        elif isinstance(event, _ControlledShutdown):
            await self._on_controlled_shutdown(event)
        elif isinstance(event, _PreferredReplicaElection):
            await self._on_preferred_replica_election()
        elif isinstance(event, _UncleanElection):
            await self._on_unclean_election(event)
        elif isinstance(event, _AutoRebalance):
            await self._on_auto_rebalance()
        else:
            await self._on_reassignment()

    @contextlib.contextmanager
    def _election_timer(self) -> Iterator[None]:
        """Time an event that elects leaders (Kafka's LeaderElectionRateAndTimeMs times the
        broker-change state the same way)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.metrics.leader_election_time_ms.observe((time.perf_counter() - started) * 1000)

    # -- election and failover ---------------------------------------------------------------

    async def _elect(self, reason: str) -> None:
        if self._active:
            if await self._zk.controller_id() != self._broker_id:
                await self._resign("controller_moved")
            else:
                return
        epoch = await self._zk.try_elect()
        if epoch is None:
            self.log(logging.INFO, "not_elected", reason=reason)
            return
        zk_version = self._zk.epoch_zk_version
        self._ctx.reset()
        self._ctx.epoch = epoch
        self._ctx.epoch_zk_version = -1 if zk_version is None else zk_version
        self._active = True
        self._channels = ControllerChannelManager(
            request_timeout_s=self._request_timeout_s,
            on_stale_controller_epoch=self._on_stale_controller_epoch,
            tls=self._tls,
        )
        self.log(logging.INFO, "elected", reason=reason)
        await self._on_controller_failover()

    async def _on_controller_failover(self) -> None:
        """Kafka's ``onControllerFailover``: load the cluster, bring partitions online and
        tell every live broker everything."""
        ctx = self._ctx
        for broker_id, broker in (await self._zk.live_brokers()).items():
            self._add_live_broker(broker_id, broker)
        topics = await self._zk.topics()
        # Watched before the assignments are read, so no partition added meanwhile is missed.
        await self._watch_topics(topics)
        for topic, assignment in (await self._zk.topic_replica_assignments(topics)).items():
            ctx.add_topic(topic, assignment)
        ctx.partition_states.update(await self._zk.partition_states(ctx.assignments))
        batch = ControllerBrokerRequestBatch()
        # Brokers that died while there was no controller (or with the old one) are still
        # leaders or ISR members in the states: handle them as a broker failure now
        # (Kafka's replica state machine startup takes their replicas offline).
        dead = {
            b
            for state in ctx.partition_states.values()
            for b in (state.leader, *state.isr)
            if b != LEADER_NONE and b not in ctx.live_brokers
        }
        changed: set[TopicPartition] = set()
        if dead:
            self.log(logging.INFO, "failover_dead_brokers", dead=sorted(dead))
            changed |= await self._on_broker_failure(dead, batch)
        changed |= await self._bring_online(sorted(ctx.assignments), batch)
        for tp, state in ctx.partition_states.items():
            if tp not in changed and state.leader != LEADER_NONE:
                batch.add_leader_and_isr(
                    ctx.live_replicas(tp), tp, state, ctx.assignments[tp], **self._moving(tp)
                )
        batch.add_update_metadata(ALL_LIVE_BROKERS, self._all_leaderships())
        self.log(
            logging.INFO,
            "failover_done",
            live_brokers=sorted(ctx.live_brokers),
            topics=len(ctx.all_topics),
            partitions=len(ctx.assignments),
        )
        self.send(batch)
        # Work requested while there was no controller is picked up now.
        self.put(_IsrChangeNotification())
        self.put(_LogDirEventNotification())
        self.put(TopicDeletion())
        self.put(_Reassignment())
        self.put(_PreferredReplicaElection())
        if self._auto_rebalance:
            self._rebalance_task = asyncio.get_running_loop().create_task(
                self._rebalance_timer(self._ctx.epoch), name=f"rebalance-{self._broker_id}"
            )

    async def _resign(self, reason: str, *, stand_again: bool = True) -> None:
        """Kafka's ``onControllerResignation``: stop acting, forget the cache, close the
        channels, give up ``/controller`` if this session holds it; then stand again."""
        was_epoch = self._ctx.epoch if self._active else None
        self._active = False
        self._ctx.reset()
        self.topic_deletion.reset()
        self.unwatch_topics(list(self._topic_watches))
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
            self._rebalance_task = None
        await self._close_channels()
        with contextlib.suppress(ZkError):
            await self._zk.resign()
        self.log(logging.WARNING, "resigned", reason=reason, resigned_epoch=was_epoch)
        if stand_again:
            self.put(_Elect(f"after_resign:{reason}"))

    def _on_stale_controller_epoch(
        self, broker_id: int, request: ControlRequest, response: ControlResponse
    ) -> None:
        self.log(
            logging.WARNING,
            "stale_controller_epoch",
            from_broker=broker_id,
            request=request_kind(request),
        )
        self.put(
            _Resign(
                f"stale_controller_epoch_from_{broker_id}",
                request.controller_epoch,
                unless_zookeeper_agrees=True,
            )
        )

    async def _still_elected(self) -> bool:
        """ZooKeeper still names this broker the controller at this epoch. A broker that
        answers STALE_CONTROLLER_EPOCH to the elected controller was misled (brokers never
        adopt an epoch beyond /controller_epoch, but a resignation on a broker's word alone
        would turn one lying broker into an election storm)."""
        try:
            controller, epoch = await asyncio.gather(
                self._zk.controller_id(), self._zk.controller_epoch()
            )
        except ZkError:
            return False
        return controller == self._broker_id and epoch is not None and epoch[0] == self._ctx.epoch

    # -- broker changes ----------------------------------------------------------------------

    async def _on_broker_change(self) -> None:
        """Kafka's ``processBrokerChange``: dead, new and bounced brokers."""
        ctx = self._ctx
        current = await self._zk.live_brokers()
        known = dict(ctx.live_brokers)
        dead = sorted(set(known) - set(current))
        new = sorted(set(current) - set(known))
        bounced = sorted(
            b for b in set(current) & set(known) if current[b].broker_epoch != known[b].epoch
        )
        if not (dead or new or bounced):
            return
        self.log(logging.INFO, "broker_change", dead=dead, new=new, bounced=bounced)
        for broker_id in (*dead, *bounced):
            self._ctx.shutting_down_brokers.discard(broker_id)
            self._ctx.offline_log_dir_brokers.discard(broker_id)
            await self._remove_live_broker(broker_id)
        batch = ControllerBrokerRequestBatch()
        if dead or bounced:
            await self._on_broker_failure([*dead, *bounced], batch)
        for broker_id in (*new, *bounced):
            broker = current[broker_id]
            self._add_live_broker(broker_id, broker)
        if new or bounced:
            await self._on_broker_startup([*new, *bounced], batch)
        # Every UpdateMetadata carries the broker list: all brokers learn who is alive.
        batch.add_update_metadata(ALL_LIVE_BROKERS)
        self.send(batch)
        if new or bounced:
            if self._ctx.topics_being_deleted:
                self.put(TopicDeletion())  # a replica that held a deletion may be back
            if self._ctx.reassignments:
                await self._advance_reassignments(sorted(self._ctx.reassignments))

    async def _on_broker_failure(
        self, dead: Iterable[int], batch: ControllerBrokerRequestBatch
    ) -> set[TopicPartition]:
        """Elect new leaders for the partitions the dead brokers led and take them out of
        the ISR of the others (Kafka's ``onBrokerFailure``: OfflinePartition then
        OfflineReplica transitions, written here as one state change per partition).

        The partitions without a live leader come first: their states are written and
        their requests sent (in a batch of their own) before the ISRs of the others are
        written, which at RF 3 are twice as many, as Kafka elects the offline partitions
        before it takes the dead replicas offline. ``batch`` gets the requests of the
        others."""
        ctx = self._ctx
        gone = set(dead)
        affected = sorted(
            tp
            for tp, state in ctx.partition_states.items()
            if state.leader in gone or gone & set(state.isr)
        )
        unclean = await self._unclean_topics({tp.topic for tp in affected})

        def decide(tp: TopicPartition, current: PartitionState) -> PartitionStateData | None:
            return self._after_failure(tp, current, gone, tp.topic in unclean)

        leaderless = [
            tp
            for tp in affected
            if ctx.partition_states[tp].leader in gone
            or ctx.partition_states[tp].leader == LEADER_NONE
        ]
        first = ControllerBrokerRequestBatch()
        changed = await self._change_states(leaderless, decide, first)
        if changed:
            first.add_update_metadata(ALL_LIVE_BROKERS, self.leaderships(changed))
            self.send(first)
        first_step = set(leaderless)
        rest = [tp for tp in affected if tp not in first_step]
        return changed | await self._change_states(rest, decide, batch)

    def _after_failure(
        self, tp: TopicPartition, current: PartitionState, gone: set[int], unclean: bool
    ) -> PartitionStateData | None:
        ctx = self._ctx
        live = ctx.live_broker_ids()
        if current.leader in gone or current.leader == LEADER_NONE:
            result = offline_partition_leader_election(
                ctx.assignments.get(tp, []), current.isr, live, unclean
            )
            if result.leader is not None:
                if result.unclean:
                    self.metrics.unclean_leader_elections.inc()
                    self.log(logging.WARNING, "unclean_leader_election", partition=tp)
                return new_leader_and_isr(current.data, result.leader, result.isr, ctx.epoch)
        # No leader change: each dead replica leaves the ISR (the last member stays, so its
        # return brings the partition back cleanly); one write, one epoch bump.
        data = current.data
        for replica in sorted(gone):
            shrunk = remove_replica_from_isr(data, replica, ctx.epoch)
            data = shrunk if shrunk is not None else data
        if data == current.data:
            return None
        return dataclasses.replace(data, leader_epoch=current.leader_epoch + 1)

    async def _on_broker_startup(
        self, started: Iterable[int], batch: ControllerBrokerRequestBatch
    ) -> None:
        """Kafka's ``onBrokerStartup``: a full UpdateMetadata and LeaderAndIsr for its
        replicas to each new broker, then bring online what it can lead."""
        ctx = self._ctx
        ids = sorted(started)
        batch.add_update_metadata(ids, self._all_leaderships())
        candidates = sorted({tp for b in ids for tp in ctx.partitions_on_broker(b)})
        changed = await self._bring_online(candidates, batch)
        for tp in candidates:
            state = ctx.partition_states.get(tp)
            if tp in changed or state is None or state.leader == LEADER_NONE:
                continue
            replicas = ctx.assignments[tp]
            batch.add_leader_and_isr(
                [b for b in ids if b in replicas], tp, state, replicas, **self._moving(tp)
            )

    # -- topics and ISR changes --------------------------------------------------------------

    async def _on_topic_change(self) -> None:
        """Kafka's ``processTopicChange``: initialise the partitions of new topics."""
        ctx = self._ctx
        topics = await self._zk.topics()
        for topic in sorted(ctx.all_topics - topics):
            ctx.remove_topic(topic)  # deleted behind our back; deletion proper is not handled
        self.unwatch_topics(set(self._topic_watches) - topics)
        new = topics - ctx.all_topics
        if not new:
            return
        await self._watch_topics(new)
        assignments = await self._zk.topic_replica_assignments(new)
        for topic, assignment in sorted(assignments.items()):
            ctx.add_topic(topic, assignment)
        tps = sorted(tp for tp in ctx.assignments if tp.topic in assignments)
        ctx.partition_states.update(await self._zk.partition_states(tps))
        self.log(logging.INFO, "topics_created", topics=sorted(assignments), partitions=len(tps))
        await self._on_new_partitions(tps)

    async def _on_partition_modifications(self, topic: str) -> None:
        """Kafka's ``processPartitionModifications``: initialise partitions added to a
        known topic; while it is being deleted, restore its assignment instead."""
        ctx = self._ctx
        if topic not in ctx.all_topics:
            return  # a new topic: TopicChange initialises it
        try:
            assignment = await self._zk.topic_assignment(topic)
        except ZkDataError as e:
            self.log(logging.ERROR, "bad_topic_assignment", topic=topic, error=str(e))
            return
        if assignment is None:
            return  # deleted meanwhile
        known = {tp.partition for tp in ctx.partitions_of_topic(topic)}
        change = partition_modification(known, assignment, topic in ctx.topics_being_deleted)
        if change.restore is not None:
            self.log(
                logging.WARNING,
                "partitions_not_added_topic_being_deleted",
                topic=topic,
                partitions=sorted(set(assignment) - known),
            )
            await self._zk.set_topic_assignment(
                topic,
                {p: ctx.full_assignment(TopicPartition(topic, p)) for p in change.restore},
            )
            return
        if not change.added:
            return
        for partition, replicas in change.added.items():
            ctx.assignments[TopicPartition(topic, partition)] = replicas
        tps = [TopicPartition(topic, p) for p in sorted(change.added)]
        ctx.partition_states.update(await self._zk.partition_states(tps))
        self.log(logging.INFO, "partitions_added", topic=topic, partitions=sorted(change.added))
        await self._on_new_partitions(tps)

    async def _on_new_partitions(self, tps: list[TopicPartition]) -> None:
        """Kafka's ``onNewPartitionCreation``: bring the partitions online (their state
        znodes are loaded) and tell their replicas the states that already existed."""
        ctx = self._ctx
        batch = ControllerBrokerRequestBatch()
        changed = await self._bring_online(tps, batch)
        for tp in tps:
            state = ctx.partition_states.get(tp)
            if tp not in changed and state is not None and state.leader != LEADER_NONE:
                batch.add_leader_and_isr(
                    ctx.live_replicas(tp), tp, state, ctx.assignments[tp], **self._moving(tp)
                )
        self.send(batch)

    async def _watch_topics(self, topics: Iterable[str]) -> None:
        """Watch each topic's znode for added partitions (Kafka's
        ``registerPartitionModificationsHandlers``), all registrations sent at once."""
        new = sorted(set(topics) - set(self._topic_watches))

        async def watch(topic: str) -> None:
            self._topic_watches[topic] = await self._zk.watch_topic_assignment(
                topic, lambda: self.put(_PartitionModifications(topic))
            )

        await asyncio.gather(*(watch(topic) for topic in new))

    def unwatch_topics(self, topics: Iterable[str]) -> None:
        for topic in topics:
            watch = self._topic_watches.pop(topic, None)
            if watch is not None:
                watch.cancel()

    async def _on_log_dir_event_notification(self) -> None:
        """Kafka's ``processLogDirEventNotification`` then ``onBrokerLogDirFailure``: the
        replicas of a broker whose log dir went offline go offline too, as a dead broker's
        do (new leaders from the other ISR members, the broker out of every ISR), while the
        broker stays registered. It has one log dir, so all its replicas are affected, and
        they stay offline until it registers anew (a restart after the disk is fixed). A
        notification created before the broker's latest registration is stale: it
        restarted since."""
        ctx = self._ctx
        notifications = await self._zk.log_dir_event_notifications()
        failed: set[int] = set()
        for _, broker_id, czxid in notifications:
            if broker_id is None:
                continue  # malformed (logged): deleted below
            live = ctx.live_brokers.get(broker_id)
            if live is not None and czxid > live.epoch:
                failed.add(broker_id)
        new = sorted(failed - ctx.offline_log_dir_brokers)
        if new:
            ctx.offline_log_dir_brokers.update(new)
            batch = ControllerBrokerRequestBatch()
            changed = await self._on_broker_failure(new, batch)
            batch.add_update_metadata(ALL_LIVE_BROKERS, self.leaderships(changed))
            self.send(batch)
            self.log(logging.WARNING, "log_dir_failure", brokers=new, partitions=sorted(changed))
        await self._zk.delete_log_dir_event_notifications([name for name, _, _ in notifications])

    async def _on_isr_change_notification(self) -> None:
        """Kafka's ``processIsrChangeNotification``: the leaders changed ISRs; tell all."""
        ctx = self._ctx
        notifications = await self._zk.isr_change_notifications()
        if not notifications:
            return
        tps = sorted({tp for _, parts in notifications for tp in parts if tp in ctx.assignments})
        states = await self._zk.partition_states(tps)
        ctx.partition_states.update(states)
        batch = ControllerBrokerRequestBatch()
        batch.add_update_metadata(
            ALL_LIVE_BROKERS,
            {tp: PartitionLeadership(s, ctx.assignments[tp]) for tp, s in states.items()},
        )
        self.send(batch)
        await self._zk.delete_isr_change_notifications(name for name, _ in notifications)
        self.log(
            logging.INFO,
            "isr_changes",
            notifications=len(notifications),
            partitions=",".join(f"{tp}:{list(s.isr)}" for tp, s in sorted(states.items())),
        )
        moving = [tp for tp in tps if tp in ctx.reassignments]
        if moving:
            await self._advance_reassignments(moving)

    # -- controlled shutdown -----------------------------------------------------------------

    async def _on_controlled_shutdown(self, event: _ControlledShutdown) -> None:
        ctx = self._ctx
        broker = ctx.live_brokers.get(event.broker_id)
        if broker is None:
            event.reply.set_exception(
                BrokerResponseError(
                    f"broker {event.broker_id} is not registered",
                    code=ErrorCode.BROKER_NOT_AVAILABLE,
                )
            )
            return
        if event.broker_epoch != broker.epoch:
            # Kafka 2.8 refuses only an epoch older than the registration and lets -1
            # (unknown, before KIP-380) through; every broker here names its epoch, and
            # with -1 or a guessed newer one any sender could move all leaderships off a
            # broker. So only the registered epoch (the czxid of /brokers/ids/<id>) counts.
            message = (
                f"controlled shutdown of broker {event.broker_id} at broker epoch "
                f"{event.broker_epoch} refused: its registration is at epoch {broker.epoch}"
            )
            self.log(
                logging.WARNING,
                "refused_controlled_shutdown",
                shutting_down=event.broker_id,
                broker_epoch=event.broker_epoch,
                registered_epoch=broker.epoch,
            )
            event.reply.set_exception(
                BrokerResponseError(message, code=ErrorCode.STALE_BROKER_EPOCH)
            )
            return
        leaving = event.broker_id
        ctx.shutting_down_brokers.add(leaving)
        live = ctx.live_broker_ids()
        tps = [
            tp
            for tp in ctx.partitions_on_broker(leaving)
            if tp.topic not in ctx.topics_being_deleted and tp in ctx.partition_states
        ]

        def elect(tp: TopicPartition, current: PartitionState) -> PartitionStateData | None:
            if current.leader != leaving:
                return None
            result = controlled_shutdown_leader_election(
                ctx.assignments[tp], current.isr, live | {leaving}, ctx.shutting_down_brokers
            )
            return elected_state(current.data, result, ctx.epoch)

        def shrink(tp: TopicPartition, current: PartitionState) -> PartitionStateData | None:
            if current.leader == leaving:
                return None
            return remove_replica_from_isr(current.data, leaving, ctx.epoch)

        # Its leaderships first, sent before its ISR memberships are written: the new
        # leaders take over while the controller writes the other states (twice as many
        # at RF 3), as the partition state machine's step precedes the replica state
        # machine's in Kafka's doControlledShutdown (docs/replication.md, "Many
        # partitions"). Leadership moves only through the controller, so its cache of
        # the leaders is current; the ISRs are re-read before each write.
        led = [tp for tp in tps if ctx.partition_states[tp].leader == leaving]
        followed = [tp for tp in tps if ctx.partition_states[tp].leader != leaving]
        for step, group in ((elect, led), (shrink, followed)):
            batch = ControllerBrokerRequestBatch()
            await self._change_states(group, step, batch)
            # The leaving broker stops every replica it no longer leads, after the
            # LeaderAndIsr of its new state: it refuses produce at once (retriable
            # NOT_LEADER_OR_FOLLOWER) and stops fetching, so no leader adds it back to an
            # ISR on its way out. It may stop serving before this arrives, so on an answer
            # with nothing remaining it does the same by itself
            # (ReplicaManager.leaderships_handed_over).
            for tp in group:
                state = ctx.partition_states[tp]
                if state.leader != leaving:
                    batch.add_stop_replica([leaving], tp, False, state.leader_epoch)
            batch.add_update_metadata(ALL_LIVE_BROKERS, self.leaderships(group))
            self.send(batch)
        # Still led by the leaving broker: worth a retry only if another replica is up (it
        # may be catching up to the ISR). Kafka also retries when every other replica is
        # down; nothing can change then, and the last broker of a cluster would wait out
        # all its retries.
        remaining = sorted(
            tp
            for tp in tps
            if ctx.partition_states[tp].leader == leaving
            and any(r != leaving and r in live for r in ctx.assignments[tp])
        )
        self.log(
            logging.INFO,
            "controlled_shutdown",
            shutting_down=leaving,
            partitions=len(tps),
            remaining=remaining,
        )
        if not event.reply.done():
            event.reply.set_result(remaining)

    # -- preferred replica election ----------------------------------------------------------

    async def _on_preferred_replica_election(self) -> None:
        """``/admin/preferred_replica_election``: elect the preferred replica of each named
        partition where it is live and in the ISR, then delete the request."""
        try:
            requested = await self._zk.preferred_replica_election_request()
        except ZkDataError as e:
            self.log(logging.WARNING, "bad_preferred_replica_election", error=str(e))
            await self._zk.delete_admin_node(PREFERRED_REPLICA_ELECTION_PATH)
            return
        if requested is None:
            return
        ctx = self._ctx
        unknown = sorted(tp for tp in requested if tp not in ctx.assignments)
        if unknown:
            self.log(logging.WARNING, "preferred_replica_election_unknown", partitions=unknown)
        await self._elect_preferred_replicas(
            sorted(tp for tp in requested if tp in ctx.assignments), "admin_request"
        )
        await self._zk.delete_admin_node(PREFERRED_REPLICA_ELECTION_PATH)

    async def _on_unclean_election(self, event: _UncleanElection) -> None:
        ctx = self._ctx
        live = ctx.live_broker_ids()
        results: dict[TopicPartition, tuple[int, str | None]] = {}
        wanted: list[TopicPartition] = []
        for tp in dict.fromkeys(event.partitions):
            state = ctx.partition_states.get(tp)
            if state is None or tp not in ctx.assignments:
                results[tp] = (
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    "The partition does not exist.",
                )
            elif tp.topic in ctx.topics_being_deleted:
                results[tp] = (ErrorCode.INVALID_TOPIC, "The topic is being deleted")
            elif state.leader != LEADER_NONE and state.leader in live:
                results[tp] = (ErrorCode.ELECTION_NOT_NEEDED, None)
            else:
                wanted.append(tp)
        unclean: set[TopicPartition] = set()

        def decide(tp: TopicPartition, current: PartitionState) -> PartitionStateData | None:
            if current.leader != LEADER_NONE and current.leader in live:
                return None
            result = offline_partition_leader_election(ctx.assignments[tp], current.isr, live, True)
            if result.unclean:
                unclean.add(tp)
            return elected_state(current.data, result, ctx.epoch)

        batch = ControllerBrokerRequestBatch()
        changed = await self._change_states(wanted, decide, batch)
        batch.add_update_metadata(ALL_LIVE_BROKERS, self.leaderships(changed))
        self.send(batch)
        for tp in wanted:
            if tp in changed:
                results[tp] = (ErrorCode.NONE, None)
            else:
                results[tp] = (
                    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                    f"Failed to elect leader for partition {tp} under strategy "
                    "OfflinePartitionLeaderElectionStrategy(true): no assigned replica is live",
                )
        for tp in sorted(unclean & changed):
            self.metrics.unclean_leader_elections.inc()
            self.log(logging.WARNING, "unclean_leader_election", partition=tp, reason="admin")
        if not event.reply.done():
            event.reply.set_result(results)

    async def _on_auto_rebalance(self) -> None:
        """Kafka's ``checkAndTriggerAutoLeaderRebalance``."""
        ctx = self._ctx
        tps = partitions_to_rebalance(
            ctx.assignments,
            {tp: state.data for tp, state in ctx.partition_states.items()},
            ctx.live_broker_ids(),
            self._imbalance_percentage,
            topics_being_deleted=ctx.topics_being_deleted,
            reassignment_in_progress=bool(ctx.reassignments),
        )
        if tps:
            await self._elect_preferred_replicas(tps, "auto_rebalance")

    async def _elect_preferred_replicas(self, tps: list[TopicPartition], reason: str) -> None:
        ctx = self._ctx
        live = ctx.live_broker_ids()
        wanted = [
            tp
            for tp in tps
            if tp.topic not in ctx.topics_being_deleted
            and tp in ctx.partition_states
            and ctx.partition_states[tp].leader != ctx.assignments[tp][0]
        ]

        def decide(tp: TopicPartition, current: PartitionState) -> PartitionStateData | None:
            if current.leader == ctx.assignments[tp][0]:
                return None  # ELECTION_NOT_NEEDED
            result = preferred_replica_leader_election(ctx.assignments[tp], current.isr, live)
            return elected_state(current.data, result, ctx.epoch)

        batch = ControllerBrokerRequestBatch()
        changed = await self._change_states(wanted, decide, batch)
        batch.add_update_metadata(
            ALL_LIVE_BROKERS,
            self.leaderships(changed),
        )
        self.send(batch)
        self.log(
            logging.INFO,
            "preferred_replica_election",
            reason=reason,
            elected=sorted(changed),
            not_eligible=sorted(set(wanted) - changed),
        )

    async def _rebalance_timer(self, epoch: int) -> None:
        while self._active and self._ctx.epoch == epoch:
            await asyncio.sleep(self._imbalance_check_interval_s)
            self.put(_AutoRebalance())

    # -- partition reassignment --------------------------------------------------------------

    async def _on_reassignment(self) -> None:
        """``/admin/reassign_partitions`` created or changed: validate the targets, then
        advance each partition's reassignment as far as it goes now. A partition whose
        topic znode says it is being reassigned but that the admin znode does not name
        (the znode deleted by hand, its entry gone or refused) resumes towards
        the target the topic znode keeps, as Kafka's API reassignments do."""
        ctx = self._ctx
        try:
            request = await self._zk.reassign_request()
        except ZkDataError as e:
            self.log(logging.WARNING, "bad_reassignment_request", error=str(e))
            await self._zk.delete_admin_node(REASSIGN_PARTITIONS_PATH)
            request = None
        accepted: dict[TopicPartition, tuple[int, ...]] = {}
        for tp, target in sorted((request or {}).items()):
            if ctx.reassignments.get(tp) == tuple(target):
                accepted[tp] = tuple(target)
                continue
            problem = None
            if tp not in ctx.assignments or tp not in ctx.partition_states:
                problem = "the partition does not exist"
            elif tp.topic in ctx.topics_being_deleted:
                problem = "its topic is being deleted"
            elif reassign_to(ctx.full_assignment(tp), target) != ctx.full_assignment(tp):
                # Not yet recorded in the topic znode: a new request, whose new replicas
                # must be live. One already recorded resumes (a failover), as in Kafka.
                try:
                    validate_reassignment(
                        ctx.full_assignment(tp).origin_replicas, target, ctx.live_broker_ids()
                    )
                except InvalidReplicaAssignmentError as e:
                    problem = str(e)
            if problem is not None:
                self.log(logging.WARNING, "reassignment_refused", partition=tp, problem=problem)
                continue
            accepted[tp] = tuple(target)
            full = ctx.full_assignment(tp)
            cancel = full.is_being_reassigned and tuple(target) == full.origin_replicas
            self.log(
                logging.INFO,
                "reassignment_cancelled" if cancel else "reassignment_started",
                partition=tp,
                target=list(target),
            )
        for tp, full in sorted(ctx.reassigning.items()):
            if tp not in accepted:
                accepted[tp] = full.target_replicas
                self.log(
                    logging.INFO,
                    "reassignment_resumed",
                    partition=tp,
                    target=list(full.target_replicas),
                )
        ctx.reassignments.clear()
        ctx.reassignments.update(accepted)
        await self._advance_reassignments(sorted(ctx.reassignments))

    async def _advance_reassignments(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            await self._advance_reassignment(tp)
        if not self._ctx.reassignments:
            await self._zk.delete_admin_node(REASSIGN_PARTITIONS_PATH)

    async def _advance_reassignment(self, tp: TopicPartition) -> None:
        """Apply :func:`~controller.reassignment.next_reassignment_step` until it waits or
        is done. Every step writes the state znode first (conditional), then the topic
        znode (RS, AR, RR), then talks to the brokers."""
        ctx = self._ctx
        for _ in range(8):  # MOVE, ADD, MOVE, REMOVE, DONE, and a few re-reads after races
            target = ctx.reassignments.get(tp)
            current = ctx.partition_states.get(tp)
            if target is None or current is None or tp not in ctx.assignments:
                ctx.reassignments.pop(tp, None)
                return
            full = ctx.full_assignment(tp)
            step = next_reassignment_step(
                full, target, current.data, ctx.live_broker_ids(), ctx.epoch
            )
            self.log(
                logging.INFO,
                "reassignment_step",
                partition=tp,
                action=step.action.value,
                detail=step.reason,
            )
            if step.action is ReassignmentAction.WAIT:
                return
            if step.action is ReassignmentAction.DONE:
                ctx.reassignments.pop(tp, None)
                batch = ControllerBrokerRequestBatch()
                batch.add_update_metadata(
                    ALL_LIVE_BROKERS, {tp: PartitionLeadership(current, ctx.assignments[tp])}
                )
                self.send(batch)
                return
            if step.state is not None:
                written = await self._zk.update_partition_states(
                    {tp: (step.state, current.zk_version)}
                )
                version = written.get(tp)
                if version is None:  # a leader changed the ISR meanwhile: decide again
                    ctx.partition_states.update(await self._zk.partition_states([tp]))
                    continue
                ctx.partition_states[tp] = PartitionState.from_data(step.state, version)
                self._log_state("partition_state_changed", tp, ctx.partition_states[tp])
            if full != step.assignment:
                topic_assignment = ctx.full_topic_assignment(tp.topic)
                topic_assignment[tp.partition] = step.assignment
                if await self._zk.set_topic_assignment(tp.topic, topic_assignment) is None:
                    ctx.reassignments.pop(tp, None)  # the topic is gone
                    return
                ctx.set_full_assignment(tp, step.assignment)
            state = ctx.partition_states[tp]
            assignment = ctx.full_assignment(tp)
            batch = ControllerBrokerRequestBatch()
            batch.add_leader_and_isr(
                ctx.live_replicas(tp),
                tp,
                state,
                ctx.assignments[tp],
                is_new=bool(step.new_replicas),
                adding_replicas=assignment.adding_replicas,
                removing_replicas=assignment.removing_replicas,
            )
            for removed in step.removed_replicas:
                batch.add_stop_replica([removed], tp, True, state.leader_epoch)
            batch.add_update_metadata(
                ALL_LIVE_BROKERS, {tp: PartitionLeadership(state, ctx.assignments[tp])}
            )
            self.send(batch)
        self.log(logging.WARNING, "reassignment_not_settled", partition=tp)

    def _moving(self, tp: TopicPartition) -> _ReplicaChanges:
        """A reassigning partition's AR and RR for its LeaderAndIsr, as Kafka sends them."""
        full = self._ctx.full_assignment(tp)
        return {
            "adding_replicas": full.adding_replicas,
            "removing_replicas": full.removing_replicas,
        }

    def leaderships(
        self, tps: Iterable[TopicPartition]
    ) -> dict[TopicPartition, PartitionLeadership]:
        """UpdateMetadata content for the known partitions among ``tps``."""
        ctx = self._ctx
        return {
            tp: PartitionLeadership(ctx.partition_states[tp], ctx.assignments[tp])
            for tp in sorted(tps)
            if tp in ctx.partition_states and tp in ctx.assignments
        }

    # -- state changes -----------------------------------------------------------------------

    async def _bring_online(
        self, tps: Iterable[TopicPartition], batch: ControllerBrokerRequestBatch
    ) -> set[TopicPartition]:
        """Initialise partitions with no state (NewPartition -> Online) and elect a leader for
        those whose leader is not live (OfflinePartition -> Online) where one is eligible.
        Adds LeaderAndIsr for what changed; returns the partitions that changed."""
        ctx = self._ctx
        live = ctx.live_broker_ids()
        wanted = list(tps)
        initial: dict[TopicPartition, PartitionStateData] = {}
        for tp in wanted:
            if tp not in ctx.partition_states:
                first = initial_leader_and_isr(ctx.assignments[tp], live, ctx.epoch)
                if first is not None:
                    initial[tp] = first
        changed: set[TopicPartition] = set()
        if initial:
            created = await self._zk.create_partition_states(initial)
            reread = [tp for tp, version in created.items() if version is None]
            for tp, version in created.items():
                if version is not None:
                    state = PartitionState.from_data(initial[tp], version)
                    ctx.partition_states[tp] = state
                    batch.add_leader_and_isr(
                        ctx.live_replicas(tp), tp, state, ctx.assignments[tp], is_new=True
                    )
                    changed.add(tp)
                    self._log_state("partition_created", tp, state)
            ctx.partition_states.update(await self._zk.partition_states(reread))
        offline = [tp for tp in wanted if tp in ctx.partition_states and not ctx.is_online(tp)]
        if offline:
            unclean = await self._unclean_topics({tp.topic for tp in offline})

            def decide(tp: TopicPartition, current: PartitionState) -> PartitionStateData | None:
                if current.leader != LEADER_NONE and current.leader in live:
                    return None
                result = offline_partition_leader_election(
                    ctx.assignments[tp], current.isr, live, tp.topic in unclean
                )
                if result.leader is None:
                    return None
                if result.unclean:
                    self.metrics.unclean_leader_elections.inc()
                    self.log(logging.WARNING, "unclean_leader_election", partition=tp)
                return new_leader_and_isr(current.data, result.leader, result.isr, ctx.epoch)

            changed |= await self._change_states(offline, decide, batch)
        return changed

    async def _change_states(
        self,
        tps: Iterable[TopicPartition],
        decide: _Decide,
        batch: ControllerBrokerRequestBatch,
    ) -> set[TopicPartition]:
        """Write ``decide(tp, current_state)`` for each partition (None: no change) with a
        conditional update; a partition whose znode moved on (a leader changed its ISR) is
        re-read and decided again. Adds LeaderAndIsr to its live replicas for each write."""
        ctx = self._ctx
        pending = list(tps)
        changed: set[TopicPartition] = set()
        # Decide from the znodes as they are now, as Kafka's elections do: leaders change
        # their ISR without telling the controller until the (batched) notification.
        if pending:
            ctx.partition_states.update(await self._zk.partition_states(pending))
        for _ in range(_UPDATE_ATTEMPTS):
            updates: dict[TopicPartition, tuple[PartitionStateData, int]] = {}
            for tp in pending:
                current = ctx.partition_states.get(tp)
                if current is None:
                    continue
                data = decide(tp, current)
                if data is not None:
                    updates[tp] = (data, current.zk_version)
            pending = []
            if not updates:
                break
            written = await self._zk.update_partition_states(updates)
            for tp, version in written.items():
                if version is None:
                    pending.append(tp)
                    continue
                state = PartitionState.from_data(updates[tp][0], version)
                ctx.partition_states[tp] = state
                changed.add(tp)
                batch.add_leader_and_isr(
                    ctx.live_replicas(tp), tp, state, ctx.assignments[tp], **self._moving(tp)
                )
            if not pending:
                break
            ctx.partition_states.update(await self._zk.partition_states(pending))
        self._log_states_changed(changed)
        if pending:
            self.log(logging.ERROR, "partition_state_not_written", partitions=sorted(pending))
        return changed

    def _log_states_changed(self, changed: set[TopicPartition]) -> None:
        """One ``partition_state_changed`` line per partition, at INFO for a change of up
        to :data:`_STATE_LINES_AT_INFO` partitions; a larger one is one INFO line of
        counts, and its partitions' lines are DEBUG. Kafka's partition state machine
        logs these at TRACE only: at 30,000 partitions the lines were a fifth of the
        controller's time in a failover, and every broker still logs each partition's new
        role and epoch (``became_leader``/``became_follower``)."""
        level = logging.INFO if len(changed) <= _STATE_LINES_AT_INFO else logging.DEBUG
        if log.isEnabledFor(level):
            for tp in sorted(changed):
                state = self._ctx.partition_states[tp]
                self._log_state("partition_state_changed", tp, state, level)
        if level != logging.INFO:
            leaders: dict[int, int] = {}
            for tp in changed:
                leader = self._ctx.partition_states[tp].leader
                leaders[leader] = leaders.get(leader, 0) + 1
            self.log(
                logging.INFO,
                "partition_states_changed",
                partitions=len(changed),
                leaders=[f"{b}:{n}" for b, n in sorted(leaders.items())],
            )

    async def _unclean_topics(self, topics: Iterable[str]) -> set[str]:
        """The topics whose unclean leader election is enabled (topic config over the broker
        default)."""
        names = set(topics)
        configs = await self._zk.topic_configs(names)
        enabled = set()
        for topic in names:
            value = configs.get(topic, {}).get(UNCLEAN_LEADER_ELECTION_ENABLE)
            if value is None:
                if self._default_unclean:
                    enabled.add(topic)
            elif value.strip().lower() == "true":
                enabled.add(topic)
        return enabled

    def _all_leaderships(self) -> dict[TopicPartition, PartitionLeadership]:
        return self.leaderships(self._ctx.partition_states)

    # -- brokers and sending -----------------------------------------------------------------

    def _add_live_broker(self, broker_id: int, broker: RegisteredBroker) -> None:
        self._ctx.live_brokers[broker_id] = LiveBroker(
            broker_id,
            broker.host,
            broker.port,
            broker.broker_epoch,
            kafka_endpoint=broker.kafka_endpoint,
        )
        if self._channels is not None:
            self._channels.add_broker(broker_id, broker.host, broker.port)

    async def _remove_live_broker(self, broker_id: int) -> None:
        self._ctx.live_brokers.pop(broker_id, None)
        if self._channels is not None:
            await self._channels.remove_broker(broker_id)

    def send(self, batch: ControllerBrokerRequestBatch) -> list[SentRequest]:
        """Queue the batch's requests now (one per broker and kind, in Kafka's order) and
        log the answers in the background; the event loop does not wait for brokers.
        Returns what was queued, for the rare handler that wants the answers."""
        channels = self._channels
        if channels is None or batch.is_empty:
            return []
        requests = batch.build(self._broker_id, self._ctx.epoch, self._ctx.live_brokers)
        futures = [SentRequest(b, r, channels.send(b, r)) for b, r in requests]
        for broker_id, request, _ in futures:
            self.log(
                logging.DEBUG,
                "request_queued",
                to_broker=broker_id,
                request=request_kind(request),
            )

        async def report() -> None:
            for broker_id, request, future in futures:
                try:
                    response = await future
                except Exception as e:
                    self.log(
                        logging.INFO,
                        "request_failed",
                        to_broker=broker_id,
                        request=request_kind(request),
                        error=repr(e),
                    )
                    continue
                code = getattr(response, "error_code", 0)
                if code:
                    self.log(
                        logging.WARNING,
                        "request_error",
                        to_broker=broker_id,
                        request=request_kind(request),
                        error_code=code,
                    )

        self.background(report())
        return futures

    def background(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._send_tasks.add(task)
        task.add_done_callback(self._send_tasks.discard)

    async def _close_channels(self) -> None:
        channels, self._channels = self._channels, None
        if channels is not None:
            await channels.close()

    # -- logging -----------------------------------------------------------------------------

    def _log_state(
        self, event: str, tp: TopicPartition, state: PartitionState, level: int = logging.INFO
    ) -> None:
        self.log(
            level,
            event,
            partition=tp,
            leader=state.leader,
            leader_epoch=state.leader_epoch,
            isr=list(state.isr),
            zk_version=state.zk_version,
        )

    def log(self, level: int, event: str, *, exc_info: object = False, **fields: object) -> None:
        """One line: ``controller event=<e> broker=<id> epoch=<controller epoch> k=v ...``."""
        epoch = self._ctx.epoch if self._active else None
        log_event(
            log,
            level,
            "controller",
            event,
            exc_info=exc_info,
            broker=self._broker_id,
            epoch=epoch,
            **fields,
        )
