"""The faults a chaos run injects, each with its inverse (Jepsen's nemeses).

A :class:`Nemesis` picks its target when it strikes (the leader of a partition, the active
controller, a random broker), breaks it through the backend, writes the timeline, and
returns a :class:`Fault` whose ``heal`` undoes it. The runner holds one fault at a time and
always heals it: at the end of its hold, on an error, or on Ctrl-C.

================  ==========================================  ================================
nemesis           fault                                       heal
================  ==========================================  ================================
``kill``          SIGKILL a random broker                     start it
``bounce``        SIGTERM (controlled shutdown) a broker       start it
``pause``         SIGSTOP a broker past its session timeout   SIGCONT (the zombie-leader case)
                  (the hold is made long enough)
``leader``        SIGKILL the leader of a random partition    start it
``controller``    SIGKILL the active controller's broker      start it
``zk-expire``     end a broker's ZooKeeper session for real   wait until it registered again
                  (the broker keeps running)
``torn-write``    SIGKILL a broker, cut an active segment     start it (recovery truncates)
                  mid-batch, as a power loss would
``partition``     isolate one broker from the others and      reconnect
                  from ZooKeeper (docker: off its network;
                  local: an iptables chain, by cgroup)
``split``         halves: the larger half of the brokers cut  reconnect
                  off from ZooKeeper and the other half
``cascade``       SIGKILL a partition's leader and the broker  start both
                  the controller will elect after it; end the
                  leader's session, then (once its successor
                  is elected) the successor's: the last ISR
                  member follows a dead leader, then leads
                  (KIP-101's first case, under real faults)
``cleaner-crash`` SIGKILL a broker while its log cleaner swaps   start it (its load finishes or
                  a cleaned segment in (``.cleaned`` or         drops the swap)
                  ``.swap`` files in a compacted partition's
                  directory), else once it has cleaned
``zk-kill``       SIGKILL one node of a 3-node ensemble        start it
``zk-quorum-loss``  SIGKILL two nodes of a 3-node ensemble    start them
``kill-txn-       SIGKILL the transaction coordinator of one   start it (the new coordinator
coordinator``     transactional producer (the leader of its     completes or aborts what
                  transactional id's ``__transaction_state``    it finds in the log)
                  partition)
``pause-txn-      SIGSTOP that coordinator past its session     SIGCONT (a zombie coordinator)
coordinator``     timeout
``kill-leader-    SIGKILL the leader of a partition an open      start it
mid-txn``         transaction wrote to, between its
                  AddPartitionsToTxn and its end (read from
                  the producers' histories)
``clean-shutdown-leader`` ... ``hard-bounce-controller``: Kafka's replication-test failure
modes (:data:`KAFKA_FAILURE_MODES`, ``chaos matrix``)
================  ==========================================  ================================

Choices come from the schedule's ``pick`` (a number in [0, 1)), not from a random source
of their own, so a replayed schedule makes the same choices on the same cluster state.
"""

from __future__ import annotations

import abc
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from chaos.backend import BackendUnavailableError, ClusterBackend
from chaos.cluster_checks import require_exported_sessions
from chaos.history_recorder import TimelineRecorder
from chaos.open_transactions import OpenTransactions
from chaos.zookeeper_session import close_session, expire_session
from controller.leader_election import offline_partition_leader_election
from proto.coordinator.placement import partition_for
from proto.errors import MinibrokerError
from proto.topic_partition import TRANSACTION_STATE_TOPIC, TopicPartition
from proto.zk import znodes
from proto.zk.sync_client import read_partition_state

__all__ = [
    "KAFKA_FAILURE_MODES",
    "NEMESES",
    "TRANSACTION_DEFAULT_NEMESES",
    "TRANSACTION_NEMESES",
    "Fault",
    "Nemesis",
    "NemesisContext",
    "NoTargetError",
    "nemesis_named",
    "swap_file",
    "transaction_coordinator",
]


class NoTargetError(MinibrokerError):
    """The cluster offers this nemesis no target right now (the run goes on with the next
    fault); unlike BackendUnavailableError, which means it never could."""


@dataclass
class NemesisContext:
    """What a nemesis strikes with."""

    backend: ClusterBackend
    zk: KazooClient
    """A client of the cluster's ZooKeeper (for leaders, the controller, registrations)."""
    partitions: Sequence[TopicPartition]
    """The workload's partitions (the ``leader`` nemesis picks among them)."""
    timeline: TimelineRecorder
    session_timeout_s: float
    paused: set[int]
    """Brokers paused now: whatever happens, the run resumes them."""
    compacted: frozenset[str] = frozenset()
    """The workload's compacted topics (``cleaner-crash`` watches their partitions)."""
    transactional_ids: Mapping[int, str] = field(default_factory=dict)
    """The workload's transactional producers: process -> ``transactional.id`` (the
    transaction path's nemeses pick one)."""
    history_parts: Path | None = None
    """The directory of the workload processes' history files (``kill-leader-mid-txn``
    reads the transactional producers' there)."""


@dataclass
class Fault:
    """A fault in place; ``heal`` undoes it (and writes the timeline)."""

    nemesis: str
    target: object
    heal: Callable[[], None]
    detail: str = ""
    """How it struck, when that varies (``cleaner-crash``: during a swap or after a
    cleaning); in the timeline's ``fault`` line and the run's."""

    def __str__(self) -> str:
        text = f"{self.nemesis} {self.target}"
        return f"{text} ({self.detail})" if self.detail else text


def _choose(candidates: Sequence[int], pick: float) -> int:
    if not candidates:
        raise BackendUnavailableError("no broker to strike: none is running")
    ordered = sorted(candidates)
    return ordered[min(int(pick * len(ordered)), len(ordered) - 1)]


def _running(ctx: NemesisContext) -> list[int]:
    return [b for b in ctx.backend.broker_ids() if ctx.backend.is_running(b)]


def _restart(ctx: NemesisContext, broker_id: int) -> Callable[[], None]:
    def heal() -> None:
        if not ctx.backend.is_running(broker_id):
            ctx.backend.start(broker_id)
        ctx.timeline.event("start", broker_id)

    return heal


class Nemesis(abc.ABC):
    """One kind of fault."""

    name: str
    min_hold_s: float = 0.0
    """The shortest hold that makes sense (``pause`` must outlast the session timeout)."""
    needs_compacted: bool = False
    """It breaks what only a compacted topic has: a run without one cannot use it."""
    needs_transactions: bool = False
    """It strikes the transaction path: only the transactions workload gives it one."""

    def check(self, backend: ClusterBackend) -> None:  # noqa: B027 - most need nothing
        """Raise BackendUnavailableError if ``backend`` cannot do this (before a run)."""

    def hold_s(self, interval_s: float, session_timeout_s: float) -> float:
        """How long the fault is held in a run with faults every ``interval_s``."""
        return max(self.min_hold_s, interval_s / 2)

    @abc.abstractmethod
    def strike(self, ctx: NemesisContext, pick: float) -> Fault: ...


class _Kill(Nemesis):
    name = "kill"

    def target(self, ctx: NemesisContext, pick: float) -> int:
        return _choose(_running(ctx), pick)

    def strike(self, ctx: NemesisContext, pick: float) -> Fault:
        broker = self.target(ctx, pick)
        ctx.backend.kill(broker)
        ctx.timeline.event("kill", broker, nemesis=self.name)
        return Fault(self.name, broker, _restart(ctx, broker))


class _Leader(_Kill):
    name = "leader"

    def target(self, ctx: NemesisContext, pick: float) -> int:
        tp = ctx.partitions[min(int(pick * len(ctx.partitions)), len(ctx.partitions) - 1)]
        state = read_partition_state(ctx.zk, tp)
        if state is None or state.leader < 0 or not ctx.backend.is_running(state.leader):
            return _choose(_running(ctx), pick)  # offline: any broker, as Kafka's test would
        return state.leader


class _Controller(_Kill):
    name = "controller"

    def target(self, ctx: NemesisContext, pick: float) -> int:
        try:
            data, _ = ctx.zk.get(znodes.CONTROLLER_PATH)
            controller = znodes.decode_controller(data)
        except (NoNodeError, ValueError):
            return _choose(_running(ctx), pick)
        return controller if ctx.backend.is_running(controller) else _choose(_running(ctx), pick)


class _Bounce(Nemesis):
    name = "bounce"

    def strike(self, ctx: NemesisContext, pick: float) -> Fault:
        broker = _choose(_running(ctx), pick)
        # Written as the SIGTERM goes: the controlled shutdown that follows takes seconds,
        # and what clients see happens during it, not after the process is gone.
        ctx.timeline.event("stop", broker, nemesis=self.name)
        ctx.backend.stop(broker)
        return Fault(self.name, broker, _restart(ctx, broker))


class _Pause(Nemesis):
    name = "pause"

    def hold_s(self, interval_s: float, session_timeout_s: float) -> float:
        # Past the session timeout: ZooKeeper expires the session, the controller moves the
        # leaderships, and the frozen broker wakes up as a zombie leader.
        return max(interval_s / 2, session_timeout_s * 1.5 + 1)

    def strike(self, ctx: NemesisContext, pick: float) -> Fault:
        broker = _choose([b for b in _running(ctx) if b not in ctx.paused], pick)
        return self._pause(ctx, broker, None)

    def _pause(self, ctx: NemesisContext, broker: int, coordinator: _Coordinator | None) -> Fault:
        ctx.backend.pause(broker)
        ctx.paused.add(broker)
        if coordinator is None:
            ctx.timeline.event("pause", broker, nemesis=self.name)
        else:
            ctx.timeline.event(
                "pause", broker, nemesis=self.name,
                transactional_id=coordinator.transactional_id, tp=str(coordinator.tp),
            )  # fmt: skip

        def heal() -> None:
            ctx.backend.resume(broker)
            ctx.paused.discard(broker)
            ctx.timeline.event("resume", broker)

        return Fault(self.name, broker, heal, "" if coordinator is None else coordinator.detail)


class _ZkExpire(Nemesis):
    name = "zk-expire"

    def check(self, backend: ClusterBackend) -> None:
        # Before the run: without the export every strike would fail, faults into it (a
        # cluster given keeps its own properties; chaos run sets this one on its own).
        require_exported_sessions(backend, self.name)

    def strike(self, ctx: NemesisContext, pick: float) -> Fault:
        broker = _choose(_running(ctx), pick)
        credentials = ctx.backend.zookeeper_session(broker)
        if credentials is None:
            raise BackendUnavailableError(
                f"broker {broker} does not export its ZooKeeper session: start the cluster "
                "with test.zookeeper.session.export.enable=true (chaos run does)"
            )
        session_id, password = credentials
        ctx.timeline.event("zk-expire", broker, nemesis=self.name, session=f"0x{session_id:x}")
        expire_session(
            ctx.backend.zookeeper_connect(),
            session_id,
            password,
            znodes.broker_path(broker),
            timeout=ctx.session_timeout_s * 5,
        )

        def heal() -> None:
            # The broker registers again by itself with a new session; wait for it.
            deadline = time.monotonic() + max(30.0, ctx.session_timeout_s * 5)
            while time.monotonic() < deadline:
                stat = ctx.zk.exists(znodes.broker_path(broker))
                if stat is not None and int(stat.ephemeralOwner) != session_id:
                    break
                time.sleep(0.2)
            ctx.timeline.event("zk-registered", broker)

        return Fault(self.name, broker, heal)


class _TornWrite(Nemesis):
    name = "torn-write"

    def strike(self, ctx: NemesisContext, pick: float) -> Fault:
        broker = _choose(_running(ctx), pick)
        ctx.backend.kill(broker)
        ctx.timeline.event("kill", broker, nemesis=self.name)
        where = ctx.backend.tear_segment(broker, random.Random(int(pick * 2**31)))
        ctx.timeline.event("torn-write", broker, nemesis=self.name, detail=where)
        return Fault(self.name, broker, _restart(ctx, broker))


class _DiskFull(Nemesis):
    """A broker's disk fills up (KIP-112): its log dir goes offline, the controller moves
    its leaderships to the other ISR members; healed as Kafka heals it, by freeing the
    space and restarting the broker. The strike prefers a leader of the workload."""

    name = "disk-full"

    def check(self, backend: ClusterBackend) -> None:
        if not backend.can_fill_log_dir:
            backend.fill_log_dir(-1)  # raises, saying why

    def strike(self, ctx: NemesisContext, pick: float) -> Fault:
        broker = _Leader().target(ctx, pick)
        detail = ctx.backend.fill_log_dir(broker)
        ctx.timeline.event("disk-full", broker, nemesis=self.name, detail=detail)

        def heal() -> None:
            ctx.backend.free_log_dir(broker)
            ctx.timeline.event("disk-freed", broker)
            if ctx.backend.is_running(broker):
                ctx.backend.kill(broker)  # an offline log dir comes back only with a restart
                ctx.timeline.event("kill", broker)
            ctx.backend.start(broker)
            ctx.timeline.event("start", broker)

        return Fault(self.name, broker, heal)


class _Partition(Nemesis):
    name = "partition"

    def check(self, backend: ClusterBackend) -> None:
        if not backend.can_partition:
            backend.isolate([])  # raises, saying why

    def groups(self, brokers: list[int], pick: float) -> list[list[int]]:
        alone = _choose(brokers, pick)
        return [[b for b in brokers if b != alone], [alone]]

    def strike(self, ctx: NemesisContext, pick: float) -> Fault:
        groups = self.groups(sorted(ctx.backend.broker_ids()), pick)
        ctx.backend.isolate(groups)
        ctx.timeline.event(self.name, groups, nemesis=self.name)

        def heal() -> None:
            ctx.backend.heal_network()
            ctx.timeline.event("heal", groups)

        return Fault(self.name, groups, heal)


class _Split(_Partition):
    """The cluster cut in two halves (Jepsen's random halves): ZooKeeper with the smaller
    half of the brokers, the larger half together on its own. The cut-off brokers still
    replicate among themselves but have lost ZooKeeper: after a session timeout they must
    stop acting as leaders, and the side with ZooKeeper elects from its own."""

    name = "split"

    def groups(self, brokers: list[int], pick: float) -> list[list[int]]:
        size = (len(brokers) + 1) // 2
        start = min(int(pick * len(brokers)), len(brokers) - 1)
        cut = [brokers[(start + i) % len(brokers)] for i in range(size)]
        return [[b for b in brokers if b not in cut], sorted(cut)]


class _Cascade(Nemesis):
    """Two leaders of a partition die in turn before the last in-sync follower has fetched
    from the second: the interleaving where pre-0.11 Kafka lost acknowledged writes.

    The leader L1 and its successor L2 (the replica the controller's clean election will
    pick) are both SIGKILLed first, their ZooKeeper sessions still open. L1's session is
    then ended: the controller elects L2, which looks alive, and tells the follower F to
    follow it. F becomes a follower of a dead leader; in ``high-watermark`` mode it cuts
    its log to its own high watermark at once, which lags the leader's by a fetch round,
    so it drops records the leader had acknowledged. In ``leader-epoch`` mode it asks L2
    for its epoch's end offset, gets no answer, and keeps its log. L2's session is ended
    next and the controller elects F, the last ISR member (a clean election), which leads
    with whatever its log now holds. Ending the sessions by hand instead of waiting for
    them to expire is what makes the order certain.

    The active controller must be F (ending a dead controller's session is not possible
    from the exported registration session), so the nemesis looks for a partition, from
    the schedule's pick on, whose leader and successor are the other two brokers and
    whose ISR holds every replica.
    """

    name = "cascade"
    SETTLE_S = 1.0
    """After L2's election, time for F to act on it before L2's session ends."""

    def check(self, backend: ClusterBackend) -> None:
        if len(backend.broker_ids()) < 3:
            raise BackendUnavailableError(f"{self.name} needs 3 brokers or more")
        # It ends the leader's and the successor's sessions, any two of the brokers.
        require_exported_sessions(backend, self.name)

    def _target(
        self, ctx: NemesisContext, pick: float, controller: int
    ) -> tuple[TopicPartition, znodes.PartitionState, int, int]:
        live = set(_running(ctx))
        count = len(ctx.partitions)
        first = min(int(pick * count), count - 1)
        for i in range(count):
            tp = ctx.partitions[(first + i) % count]
            state = read_partition_state(ctx.zk, tp)
            assignment = _assignment(ctx.zk, tp)
            if state is None or assignment is None or len(assignment) < 3:
                continue
            if sorted(state.isr) != sorted(assignment) or not set(assignment) <= live:
                continue
            successor = offline_partition_leader_election(
                assignment, state.isr, live - {state.leader}
            ).leader
            if controller not in (state.leader, successor) and successor is not None:
                return tp, state, state.leader, successor
        raise NoTargetError(
            "no partition whose ISR is whole and whose leader and successor are not the controller"
        )

    def strike(self, ctx: NemesisContext, pick: float) -> Fault:
        try:
            data, _ = ctx.zk.get(znodes.CONTROLLER_PATH)
        except NoNodeError:
            raise NoTargetError("no active controller") from None
        controller = znodes.decode_controller(data)
        tp, before, leader, successor = self._target(ctx, pick, controller)
        found = {b: ctx.backend.zookeeper_session(b) for b in (leader, successor)}
        sessions = {b: session for b, session in found.items() if session is not None}
        missing = [b for b in found if b not in sessions]
        if missing:
            raise BackendUnavailableError(
                f"brokers {missing} do not export their ZooKeeper sessions: start the cluster "
                "with test.zookeeper.session.export.enable=true (chaos run does)"
            )
        killed: list[int] = []
        try:
            for broker in (leader, successor):
                ctx.backend.kill(broker)
                killed.append(broker)
                ctx.timeline.event("kill", broker, nemesis=self.name, tp=str(tp))
            elected = []
            for broker, then in ((leader, successor), (successor, controller)):
                session_id, password = sessions[broker]
                close_session(ctx.backend.zookeeper_connect(), session_id, password)
                ctx.timeline.event("zk-session-closed", broker, session=f"0x{session_id:x}")
                state = _wait_for_leader(ctx, tp, then, ctx.session_timeout_s * 5)
                elected.append(f"{then}@{state.leader_epoch if state else '?'}")
                if broker == leader:
                    time.sleep(self.SETTLE_S)
            ctx.timeline.event(
                "cascade",
                [leader, successor, controller],
                tp=str(tp),
                leader_epoch=before.leader_epoch,
                elected=elected,
            )
        except BaseException:
            for broker in killed:
                _restart(ctx, broker)()
            raise

        def heal() -> None:
            for broker in killed:
                _restart(ctx, broker)()

        return Fault(self.name, killed, heal)


def _wait_for_leader(
    ctx: NemesisContext, tp: TopicPartition, leader: int, timeout_s: float
) -> znodes.PartitionState | None:
    """The partition's state once ``leader`` leads it; None if it does not in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = read_partition_state(ctx.zk, tp)
        if state is not None and state.leader == leader:
            return state
        time.sleep(0.02)
    return None


def _topic_assignment(zk: KazooClient, topic: str) -> dict[int, list[int]] | None:
    try:
        data, _ = zk.get(znodes.topic_path(topic))
    except NoNodeError:
        return None
    return znodes.decode_topic_assignment(data)


def _assignment(zk: KazooClient, tp: TopicPartition) -> list[int] | None:
    assignment = _topic_assignment(zk, tp.topic)
    return None if assignment is None else assignment.get(tp.partition)


# -- the transaction path -------------------------------------------------------------------


def transaction_coordinator(
    zk: KazooClient, transactional_id: str
) -> tuple[TopicPartition, int | None]:
    """The partition of ``__transaction_state`` that holds ``transactional_id`` (placed as
    every broker places it: :func:`proto.coordinator.placement.partition_for` over the
    topic's partitions) and its leader, the id's coordinator (None: it has none now).
    NoTargetError before the topic exists (no transactional producer found its
    coordinator yet)."""
    assignment = _topic_assignment(zk, TRANSACTION_STATE_TOPIC)
    if not assignment:
        raise NoTargetError(f"no {TRANSACTION_STATE_TOPIC} topic yet")
    tp = TopicPartition(TRANSACTION_STATE_TOPIC, partition_for(transactional_id, len(assignment)))
    state = read_partition_state(zk, tp)
    return tp, state.leader if state is not None and state.leader >= 0 else None


def _transactional_producers(ctx: NemesisContext) -> list[tuple[int, str]]:
    if not ctx.transactional_ids:
        raise NoTargetError(
            "the workload has no transactional producer (chaos run --workload transactions)"
        )
    return sorted(ctx.transactional_ids.items())


@dataclass(frozen=True)
class _Coordinator:
    transactional_id: str
    tp: TopicPartition
    broker: int

    @property
    def detail(self) -> str:
        return f"coordinator of {self.transactional_id}, {self.tp}"


def _coordinator_target(ctx: NemesisContext, pick: float) -> _Coordinator:
    """The coordinator of the transactional producer the pick names, or of the next one
    whose coordinator runs (and is not paused)."""
    producers = _transactional_producers(ctx)
    first = min(int(pick * len(producers)), len(producers) - 1)
    missing = []
    for i in range(len(producers)):
        _, transactional_id = producers[(first + i) % len(producers)]
        tp, leader = transaction_coordinator(ctx.zk, transactional_id)
        if leader is not None and ctx.backend.is_running(leader) and leader not in ctx.paused:
            return _Coordinator(transactional_id, tp, leader)
        missing.append(f"{transactional_id} ({tp}: {'no leader' if leader is None else leader})")
    raise NoTargetError("no running transaction coordinator: " + ", ".join(missing))


class _KillTxnCoordinator(Nemesis):
    name = "kill-txn-coordinator"
    needs_transactions = True

    def strike(self, ctx: NemesisContext, pick: float) -> Fault:
        target = _coordinator_target(ctx, pick)
        ctx.backend.kill(target.broker)
        ctx.timeline.event(
            "kill", target.broker, nemesis=self.name,
            transactional_id=target.transactional_id, tp=str(target.tp),
        )  # fmt: skip
        return Fault(self.name, target.broker, _restart(ctx, target.broker), target.detail)


class _PauseTxnCoordinator(_Pause):
    """The coordinator frozen past its session timeout: another broker leads the id's
    partition and coordinates, and the frozen one wakes up believing it still does (its
    appends to ``__transaction_state`` then fail, its markers are refused as fenced)."""

    name = "pause-txn-coordinator"
    needs_transactions = True

    def strike(self, ctx: NemesisContext, pick: float) -> Fault:
        target = _coordinator_target(ctx, pick)
        return self._pause(ctx, target.broker, target)


class _KillLeaderMidTxn(Nemesis):
    """SIGKILL the leader of a partition an open transaction has written to: after its
    AddPartitionsToTxn, before its end (the producer's commit or abort, and the markers
    that must reach that partition). The strike watches the transactional producers'
    history files (:class:`chaos.open_transactions.OpenTransactions`, a look every
    :data:`POLL_S`) and kills the leader of a partition of the first open transaction it
    finds whose leader runs. Whether the transaction was still open in the history when
    the SIGKILL went (``mid-txn``) or had ended just before (``after-its-end``) is read
    again after the kill and is the fault's detail; after :data:`WAIT_S` without an open
    transaction it kills the leader the schedule's pick names (``no-open-txn-seen``)."""

    name = "kill-leader-mid-txn"
    needs_transactions = True
    WAIT_S = 10.0
    POLL_S = 0.005

    def strike(self, ctx: NemesisContext, pick: float) -> Fault:
        producers = _transactional_producers(ctx)
        if ctx.history_parts is None:
            raise NoTargetError("the workload's history files are not known to the nemesis")
        watch = OpenTransactions({p: ctx.history_parts / f"{p}.jsonl" for p, _ in producers})
        deadline = time.monotonic() + self.WAIT_S
        while time.monotonic() < deadline:
            for open_txn in sorted(watch.poll().values(), key=lambda t: t.txn):
                tps = open_txn.partitions
                tp = tps[min(int(pick * len(tps)), len(tps) - 1)]
                state = read_partition_state(ctx.zk, tp)
                if state is None or state.leader < 0 or not ctx.backend.is_running(state.leader):
                    continue
                if state.leader in ctx.paused:
                    continue
                killed_at = time.time()
                ctx.backend.kill(state.leader)
                watch.poll()
                ended = watch.ended.get(open_txn.txn)
                written = f"{len(tps)} partition(s) written"
                if ended is not None and ended <= killed_at:
                    moment = "after-its-end"
                    detail = (
                        f"{moment}: {open_txn.txn} ({written}) ended just before the leader "
                        f"of {tp} was killed"
                    )
                else:
                    moment = "mid-txn"
                    detail = f"{moment}: {open_txn.txn} open, {written}, the leader of {tp} killed"
                ctx.timeline.event(
                    "kill", state.leader, nemesis=self.name, tp=str(tp), txn=open_txn.txn,
                    moment=moment, detail=detail,
                )  # fmt: skip
                return Fault(self.name, state.leader, _restart(ctx, state.leader), detail)
            time.sleep(self.POLL_S)
        broker = _Leader().target(ctx, pick)
        detail = f"no open transaction seen in {self.WAIT_S:g} s: a leader killed"
        ctx.backend.kill(broker)
        ctx.timeline.event(
            "kill", broker, nemesis=self.name, moment="no-open-txn-seen", detail=detail
        )
        return Fault(self.name, broker, _restart(ctx, broker), detail)


SWAP_SUFFIXES = (".cleaned", ".swap")
"""What a cleaning's files are called until its swap is done (broker/log/segment_swap.py)."""
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
"""Rewritten in the data dir after every cleaning (broker/log/cleaner_manager.py)."""


def swap_file(directory: Path) -> str | None:
    """A file of a cleaning in progress in a partition directory, if one is there."""
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.endswith(SWAP_SUFFIXES):
                    return entry.name
    except FileNotFoundError:
        pass
    return None


def _checkpoint_mark(data_dir: Path) -> tuple[int, int] | None:
    """The cleaner offset checkpoint's (modification time, size): it changes with every
    cleaning."""
    try:
        stat = (data_dir / CLEANER_CHECKPOINT).stat()
    except FileNotFoundError:
        return None
    return stat.st_mtime_ns, stat.st_size


class _CleanerCrash(Nemesis):
    """A broker SIGKILLed while its log cleaner swaps a cleaned segment in: what a crash at
    any step of a swap leaves (``.cleaned`` files, ``.swap`` files, old segments half
    deleted), which the broker's load must finish or drop, and the audit then checks what
    the cleaning kept.

    The strike watches the compacted partitions' directories of every running broker, a
    directory listing every :data:`POLL_S`, and kills the first broker in which a
    cleaning's files appear (``mid-swap``). A swap lasts milliseconds, so the watch may
    miss every one: after :data:`WAIT_S` it kills a broker that finished a cleaning
    meanwhile (its cleaner offset checkpoint changed: ``after-cleaning``), else the
    broker the schedule's pick names (``no-cleaning-seen``). Which it was is the fault's
    detail, in the timeline and on the console."""

    name = "cleaner-crash"
    needs_compacted = True
    WAIT_S = 20.0
    POLL_S = 0.002

    def check(self, backend: ClusterBackend) -> None:
        ids = backend.broker_ids()
        if ids:
            backend.broker_data_dir(ids[0])  # raises where the backend cannot show it

    def strike(self, ctx: NemesisContext, pick: float) -> Fault:
        running = _running(ctx)
        if not running:
            raise BackendUnavailableError("no broker to strike: none is running")
        watched = [tp for tp in ctx.partitions if tp.topic in ctx.compacted]
        if not watched:
            raise NoTargetError("the workload has no compacted topic (chaos run --compacted)")
        data_dirs = {b: ctx.backend.broker_data_dir(b) for b in running}
        directories = [(b, d / tp.dir_name) for b, d in data_dirs.items() for tp in watched]
        marks = {b: _checkpoint_mark(d) for b, d in data_dirs.items()}
        cleaned: list[int] = []
        deadline = time.monotonic() + self.WAIT_S
        while True:
            for broker, directory in directories:
                found = swap_file(directory)
                if found is not None:
                    where = f"{directory.name}/{found}"
                    return self._kill(ctx, broker, "mid-swap", f"mid-swap: {where} seen")
            for broker, data_dir in data_dirs.items():
                if broker not in cleaned and _checkpoint_mark(data_dir) != marks[broker]:
                    cleaned.append(broker)
            if time.monotonic() >= deadline:
                break
            time.sleep(self.POLL_S)
        if cleaned:
            broker = _choose(cleaned, pick)
            return self._kill(
                ctx,
                broker,
                "after-cleaning",
                f"after a cleaning: no swap seen in {self.WAIT_S:g} s",
            )
        broker = _choose(running, pick)
        return self._kill(ctx, broker, "no-cleaning-seen", f"no cleaning seen in {self.WAIT_S:g} s")

    def _kill(self, ctx: NemesisContext, broker: int, moment: str, detail: str) -> Fault:
        ctx.backend.kill(broker)
        ctx.timeline.event("kill", broker, nemesis=self.name, moment=moment, detail=detail)
        return Fault(self.name, broker, _restart(ctx, broker), detail)


class _ZkKill(Nemesis):
    name = "zk-kill"
    count = 1

    def check(self, backend: ClusterBackend) -> None:
        if len(backend.zookeeper_nodes()) < 3:
            raise BackendUnavailableError(
                f"{self.name} needs a 3-node ZooKeeper ensemble; this cluster has "
                f"{len(backend.zookeeper_nodes())} node"
            )

    def strike(self, ctx: NemesisContext, pick: float) -> Fault:
        nodes = sorted(ctx.backend.zookeeper_nodes())
        first = min(int(pick * len(nodes)), len(nodes) - 1)
        victims = [nodes[(first + i) % len(nodes)] for i in range(self.count)]
        for node in victims:
            ctx.backend.kill_zookeeper(node)
            ctx.timeline.event("zk-kill", f"zookeeper-{node}", nemesis=self.name)

        def heal() -> None:
            for node in victims:
                ctx.backend.start_zookeeper(node)
                ctx.timeline.event("zk-start", f"zookeeper-{node}")

        return Fault(self.name, victims, heal)


class _ZkQuorumLoss(_ZkKill):
    name = "zk-quorum-loss"
    count = 2


class _KafkaFailureMode(Nemesis):
    """The failure modes of Kafka's ducktape ``replication_test`` against the leader of a
    partition or the controller: a clean or hard shutdown (the broker stays down for the
    hold), or a clean or hard bounce (the broker is restarted at once, three times over,
    chasing the current leader or controller each time)."""

    BOUNCES = 3

    def __init__(self, clean: bool, bounce: bool, target: str) -> None:
        self.clean = clean
        self.bounce = bounce
        self.target_kind = target
        self.name = f"{'clean' if clean else 'hard'}-{'bounce' if bounce else 'shutdown'}-{target}"
        self._find = _Leader() if target == "leader" else _Controller()

    def _down(self, ctx: NemesisContext, broker: int) -> None:
        if self.clean:
            ctx.timeline.event("stop", broker, nemesis=self.name)  # as the SIGTERM goes
            ctx.backend.stop(broker)
        else:
            ctx.backend.kill(broker)
            ctx.timeline.event("kill", broker, nemesis=self.name)

    def strike(self, ctx: NemesisContext, pick: float) -> Fault:
        if not self.bounce:
            broker = self._find.target(ctx, pick)
            self._down(ctx, broker)
            return Fault(self.name, broker, _restart(ctx, broker))
        bounced = []
        for _ in range(self.BOUNCES):
            broker = self._find.target(ctx, pick)
            self._down(ctx, broker)
            ctx.backend.start(broker)
            ctx.timeline.event("start", broker)
            bounced.append(broker)
        return Fault(self.name, bounced, lambda: None)


KAFKA_FAILURE_MODES = tuple(
    _KafkaFailureMode(clean, bounce, target)
    for target in ("leader", "controller")
    for bounce in (False, True)
    for clean in (True, False)
)
"""Kafka's replication test matrix as nemeses: (clean|hard)-(shutdown|bounce)-(leader|
controller)."""


NEMESES: dict[str, Nemesis] = {
    n.name: n
    for n in (
        _Kill(),
        _Bounce(),
        _Pause(),
        _Leader(),
        _Controller(),
        _ZkExpire(),
        _TornWrite(),
        _DiskFull(),
        _Cascade(),
        _CleanerCrash(),
        _Partition(),
        _Split(),
        _ZkKill(),
        _ZkQuorumLoss(),
        _KillTxnCoordinator(),
        _PauseTxnCoordinator(),
        _KillLeaderMidTxn(),
        *KAFKA_FAILURE_MODES,
    )
}
"""Every nemesis, by the name ``--nemesis`` takes."""
TRANSACTION_NEMESES = tuple(name for name, n in NEMESES.items() if n.needs_transactions)
"""The nemeses of the transaction path."""
TRANSACTION_DEFAULT_NEMESES = (
    *TRANSACTION_NEMESES,
    "kill",
    "bounce",
    "pause",
    "leader",
    "controller",
)
"""The transactions workload's faults unless ``--nemesis`` names others: the transaction
path's and the broker faults every workload gets (among all of them, ``all``, the
transaction path's would come one time in eight)."""


def nemesis_named(name: str) -> Nemesis:
    """The nemesis called ``name``; BackendUnavailableError naming the known ones."""
    try:
        return NEMESES[name]
    except KeyError:
        raise BackendUnavailableError(
            f"unknown nemesis {name!r}: choose from {', '.join(NEMESES)} (or all)"
        ) from None
