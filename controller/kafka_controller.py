"""The controller: election, failover and one event loop (Kafka 2.x's ``KafkaController``).

Every broker runs one :class:`KafkaController`; the one that creates ``/controller`` is the
controller (DESIGN.md §6, reference/kafka-replication.md §6). ZooKeeper watches only put
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
- ``IsrChangeNotification``: re-read the named states, UpdateMetadata to all, delete the
  notifications.
- ``Resign`` (ControllerMovedError from a fenced write, session loss, a broker answering
  STALE_CONTROLLER_EPOCH, another broker in ``/controller``): drop the cache and the
  channels, then stand again.

Not handled yet (left for later): topic deletion, controlled shutdown, preferred replica
election and partition reassignment (their pure decisions exist in
:mod:`controller.leader_election` and :mod:`controller.reassignment`).

Requests to brokers are queued on the :class:`ControllerChannelManager` without waiting for
the answers (Kafka's send threads), so a slow broker never holds up the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from broker.topic_partition import TopicPartition
from broker.zk_async import ZkError, ZkSessionExpiredError
from broker.zk_data import LEADER_NONE, PartitionState, PartitionStateData
from controller.channel_manager import ControllerChannelManager
from controller.controller_context import ControllerContext
from controller.controller_zk import ControllerMovedError, ControllerZkClient, ZkWatch
from controller.leader_election import (
    initial_leader_and_isr,
    new_leader_and_isr,
    offline_partition_leader_election,
    remove_replica_from_isr,
)
from controller.request_batch import (
    ALL_LIVE_BROKERS,
    ControllerBrokerRequestBatch,
    ControlRequest,
    ControlResponse,
    LiveBroker,
    PartitionLeadership,
    request_kind,
)
from proto.errors import StaleControllerEpochError

__all__ = ["KafkaController"]

log = logging.getLogger(__name__)

FAILOVER_RETRY_BACKOFF_S = 1.0
"""Pause before standing again after a failover failed with an unexpected error."""

UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"
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
class _IsrChangeNotification:
    pass


@dataclass(frozen=True, slots=True)
class _Resign:
    reason: str
    epoch: int | None = None
    """Resign only if still controller at this epoch (None: whatever the epoch)."""


_Decide = Callable[[TopicPartition, PartitionState], PartitionStateData | None]
"""A state change: the new content for a partition's current state, or None (no change)."""

_Event = _Elect | _BrokerChange | _TopicChange | _IsrChangeNotification | _Resign


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
    ) -> None:
        """``unclean_leader_election_enable`` is the broker default, which a topic's
        ``/config/topics/<t>`` overrides."""
        self._broker_id = broker_id
        self._zk = ControllerZkClient(
            zookeeper_connect,
            broker_id=broker_id,
            session_timeout_ms=session_timeout_ms,
            connection_timeout_ms=connection_timeout_ms,
        )
        self._request_timeout_s = request_timeout_s
        self._default_unclean = unclean_leader_election_enable
        self._ctx = ControllerContext()
        self._active = False
        self._channels: ControllerChannelManager | None = None
        self._queue: asyncio.Queue[_Event] = asyncio.Queue()
        self._loop_task: asyncio.Task[None] | None = None
        self._watches: list[ZkWatch] = []
        self._send_tasks: set[asyncio.Task[None]] = set()

    # -- public ------------------------------------------------------------------------------

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
    def context(self) -> ControllerContext:
        """The cache (read-only use: the event loop owns it)."""
        return self._ctx

    async def start(self) -> None:
        """Connect to ZooKeeper, set the watches and stand for election (in the background:
        this returns once the candidacy is queued, not once elected). Raises
        ZkConnectionError if ZooKeeper is unreachable. Cancelling it leaves the controller
        half started: call :meth:`stop`."""
        await self._zk.start()
        self._zk.on_session_lost(lambda: self._put(_Resign("session_lost")))
        self._loop_task = asyncio.get_running_loop().create_task(
            self._run(), name=f"controller-{self._broker_id}"
        )
        self._watches = [
            await self._zk.watch_controller(lambda: self._put(_Elect("controller_changed"))),
            await self._zk.watch_brokers(lambda: self._put(_BrokerChange())),
            await self._zk.watch_topics(lambda: self._put(_TopicChange())),
            await self._zk.watch_isr_change_notifications(
                lambda: self._put(_IsrChangeNotification())
            ),
        ]
        self._put(_Elect("startup"))

    async def stop(self) -> None:
        """Stop the event loop, give up ``/controller`` if held, close the channels and the
        ZooKeeper session. Idempotent. Requests already queued to brokers are dropped."""
        for watch in self._watches:
            watch.cancel()
        self._watches = []
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
            self._loop_task = None
        if self._active:
            await self._resign("stopped", stand_again=False)
        await self._close_channels()
        await self._zk.close()

    # -- the event loop ----------------------------------------------------------------------

    def _put(self, event: _Event) -> None:
        self._queue.put_nowait(event)

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await self._handle(event)
            except asyncio.CancelledError:
                raise
            except (ControllerMovedError, StaleControllerEpochError) as e:
                await self._resign(f"{type(e).__name__}: {e}")
            except ZkSessionExpiredError:
                await self._resign("session_expired")
            except Exception:
                log.exception(
                    "controller event=event_failed broker=%s epoch=%s event_type=%s",
                    self._broker_id,
                    self.epoch,
                    type(event).__name__,
                )
                if isinstance(event, _Elect):
                    # A failed election or failover: give up what we hold and try again,
                    # after a pause so that a persistent fault does not spin.
                    await self._resign("failover_failed", stand_again=False)
                    await asyncio.sleep(FAILOVER_RETRY_BACKOFF_S)
                    self._put(_Elect("retry_after_failed_failover"))

    async def _handle(self, event: _Event) -> None:
        if isinstance(event, _Elect):
            await self._elect(event.reason)
        elif isinstance(event, _Resign):
            if self._active and event.epoch in (None, self._ctx.epoch):
                await self._resign(event.reason)
        elif not self._active:
            return  # only the controller acts on the cluster's changes
        elif isinstance(event, _BrokerChange):
            await self._on_broker_change()
        elif isinstance(event, _TopicChange):
            await self._on_topic_change()
        else:
            await self._on_isr_change_notification()

    # -- election and failover ---------------------------------------------------------------

    async def _elect(self, reason: str) -> None:
        if self._active:
            if await self._zk.controller_id() != self._broker_id:
                await self._resign("controller_moved")
            else:
                return
        epoch = await self._zk.try_elect()
        if epoch is None:
            self._log(logging.INFO, "not_elected", reason=reason)
            return
        zk_version = self._zk.epoch_zk_version
        self._ctx.reset()
        self._ctx.epoch = epoch
        self._ctx.epoch_zk_version = -1 if zk_version is None else zk_version
        self._active = True
        self._channels = ControllerChannelManager(
            request_timeout_s=self._request_timeout_s,
            on_stale_controller_epoch=self._on_stale_controller_epoch,
        )
        self._log(logging.INFO, "elected", reason=reason)
        await self._on_controller_failover()

    async def _on_controller_failover(self) -> None:
        """Kafka's ``onControllerFailover``: load the cluster, bring partitions online and
        tell every live broker everything."""
        ctx = self._ctx
        for broker_id, broker in (await self._zk.live_brokers()).items():
            self._add_live_broker(broker_id, broker.host, broker.port, broker.broker_epoch)
        topics = await self._zk.topics()
        for topic, assignment in (await self._zk.topic_assignments(topics)).items():
            ctx.add_topic(topic, assignment)
        ctx.partition_states.update(await self._zk.partition_states(ctx.assignments))
        batch = ControllerBrokerRequestBatch()
        changed = await self._bring_online(sorted(ctx.assignments), batch)
        for tp, state in ctx.partition_states.items():
            if tp not in changed and state.leader != LEADER_NONE:
                batch.add_leader_and_isr(ctx.live_replicas(tp), tp, state, ctx.assignments[tp])
        batch.add_update_metadata(ALL_LIVE_BROKERS, self._all_leaderships())
        self._log(
            logging.INFO,
            "failover_done",
            live_brokers=sorted(ctx.live_brokers),
            topics=len(ctx.all_topics),
            partitions=len(ctx.assignments),
        )
        self._send(batch)
        # Notifications written while there was no controller are processed now.
        self._put(_IsrChangeNotification())

    async def _resign(self, reason: str, *, stand_again: bool = True) -> None:
        """Kafka's ``onControllerResignation``: stop acting, forget the cache, close the
        channels, give up ``/controller`` if this session holds it; then stand again."""
        was_epoch = self._ctx.epoch if self._active else None
        self._active = False
        self._ctx.reset()
        await self._close_channels()
        with contextlib.suppress(ZkError):
            await self._zk.resign()
        self._log(logging.WARNING, "resigned", reason=reason, resigned_epoch=was_epoch)
        if stand_again:
            self._put(_Elect(f"after_resign:{reason}"))

    def _on_stale_controller_epoch(
        self, broker_id: int, request: ControlRequest, response: ControlResponse
    ) -> None:
        self._log(
            logging.WARNING,
            "stale_controller_epoch",
            from_broker=broker_id,
            request=request_kind(request),
        )
        self._put(_Resign(f"stale_controller_epoch_from_{broker_id}", request.controller_epoch))

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
        self._log(logging.INFO, "broker_change", dead=dead, new=new, bounced=bounced)
        for broker_id in (*dead, *bounced):
            await self._remove_live_broker(broker_id)
        batch = ControllerBrokerRequestBatch()
        if dead or bounced:
            await self._on_broker_failure([*dead, *bounced], batch)
        for broker_id in (*new, *bounced):
            broker = current[broker_id]
            self._add_live_broker(broker_id, broker.host, broker.port, broker.broker_epoch)
        if new or bounced:
            await self._on_broker_startup([*new, *bounced], batch)
        # Every UpdateMetadata carries the broker list: all brokers learn who is alive.
        batch.add_update_metadata(ALL_LIVE_BROKERS)
        self._send(batch)

    async def _on_broker_failure(
        self, dead: Iterable[int], batch: ControllerBrokerRequestBatch
    ) -> None:
        """Elect new leaders for the partitions the dead brokers led and take them out of
        the ISR of the others (Kafka's ``onBrokerFailure``: OfflinePartition then
        OfflineReplica transitions, written here as one state change per partition)."""
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

        await self._change_states(affected, decide, batch)

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
                    self._log(logging.WARNING, "unclean_leader_election", partition=tp)
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
            batch.add_leader_and_isr([b for b in ids if b in replicas], tp, state, replicas)

    # -- topics and ISR changes --------------------------------------------------------------

    async def _on_topic_change(self) -> None:
        """Kafka's ``processTopicChange``: initialise the partitions of new topics."""
        ctx = self._ctx
        topics = await self._zk.topics()
        for topic in sorted(ctx.all_topics - topics):
            ctx.remove_topic(topic)  # deleted behind our back; deletion proper is not handled
        new = topics - ctx.all_topics
        if not new:
            return
        assignments = await self._zk.topic_assignments(new)
        for topic, assignment in sorted(assignments.items()):
            ctx.add_topic(topic, assignment)
        tps = sorted(tp for tp in ctx.assignments if tp.topic in assignments)
        ctx.partition_states.update(await self._zk.partition_states(tps))
        self._log(logging.INFO, "topics_created", topics=sorted(assignments), partitions=len(tps))
        batch = ControllerBrokerRequestBatch()
        changed = await self._bring_online(tps, batch)
        for tp in tps:
            state = ctx.partition_states.get(tp)
            if tp not in changed and state is not None and state.leader != LEADER_NONE:
                batch.add_leader_and_isr(ctx.live_replicas(tp), tp, state, ctx.assignments[tp])
        self._send(batch)

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
        self._send(batch)
        await self._zk.delete_isr_change_notifications(name for name, _ in notifications)
        self._log(
            logging.INFO,
            "isr_changes",
            notifications=len(notifications),
            partitions=",".join(f"{tp}:{list(s.isr)}" for tp, s in sorted(states.items())),
        )

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
                batch.add_leader_and_isr(ctx.live_replicas(tp), tp, state, ctx.assignments[tp])
                self._log_state("partition_state_changed", tp, state)
            if not pending:
                break
            ctx.partition_states.update(await self._zk.partition_states(pending))
        if pending:
            self._log(logging.ERROR, "partition_state_not_written", partitions=sorted(pending))
        return changed

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
        ctx = self._ctx
        return {
            tp: PartitionLeadership(state, ctx.assignments[tp])
            for tp, state in ctx.partition_states.items()
            if tp in ctx.assignments
        }

    # -- brokers and sending -----------------------------------------------------------------

    def _add_live_broker(self, broker_id: int, host: str, port: int, epoch: int) -> None:
        self._ctx.live_brokers[broker_id] = LiveBroker(broker_id, host, port, epoch)
        if self._channels is not None:
            self._channels.add_broker(broker_id, host, port)

    async def _remove_live_broker(self, broker_id: int) -> None:
        self._ctx.live_brokers.pop(broker_id, None)
        if self._channels is not None:
            await self._channels.remove_broker(broker_id)

    def _send(self, batch: ControllerBrokerRequestBatch) -> None:
        """Queue the batch's requests now (one per broker and kind, in Kafka's order) and
        log the answers in the background; the event loop does not wait for brokers."""
        channels = self._channels
        if channels is None or batch.is_empty:
            return
        requests = batch.build(self._broker_id, self._ctx.epoch, self._ctx.live_brokers)
        futures = [(b, r, channels.send(b, r)) for b, r in requests]
        for broker_id, request, _ in futures:
            self._log(
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
                    self._log(
                        logging.INFO,
                        "request_failed",
                        to_broker=broker_id,
                        request=request_kind(request),
                        error=repr(e),
                    )
                    continue
                code = getattr(response, "error_code", 0)
                if code:
                    self._log(
                        logging.WARNING,
                        "request_error",
                        to_broker=broker_id,
                        request=request_kind(request),
                        error_code=code,
                    )

        task = asyncio.get_running_loop().create_task(report())
        self._send_tasks.add(task)
        task.add_done_callback(self._send_tasks.discard)

    async def _close_channels(self) -> None:
        channels, self._channels = self._channels, None
        if channels is not None:
            await channels.close()

    # -- logging -----------------------------------------------------------------------------

    def _log_state(self, event: str, tp: TopicPartition, state: PartitionState) -> None:
        self._log(
            logging.INFO,
            event,
            partition=tp,
            leader=state.leader,
            leader_epoch=state.leader_epoch,
            isr=list(state.isr),
            zk_version=state.zk_version,
        )

    def _log(self, level: int, event: str, **fields: object) -> None:
        """One line: ``controller event=<e> broker=<id> epoch=<controller epoch> k=v ...``."""
        if log.isEnabledFor(level):
            details = " ".join(f"{k}={_fmt(v)}" for k, v in fields.items())
            log.log(
                level,
                "controller event=%s broker=%s epoch=%s %s",
                event,
                self._broker_id,
                self._ctx.epoch if self._active else None,
                details,
            )


def _fmt(value: object) -> str:
    if isinstance(value, (list, tuple, set)) and not isinstance(value, TopicPartition):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value)
