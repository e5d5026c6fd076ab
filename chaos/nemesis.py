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
``partition``     isolate one broker from the others and      reconnect (docker only)
                  from ZooKeeper
``split``         halves: the larger half of the brokers cut  reconnect (docker only)
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from chaos.backend import BackendUnavailableError, ClusterBackend
from chaos.history_recorder import TimelineRecorder
from chaos.zookeeper_session import close_session, expire_session
from controller.leader_election import offline_partition_leader_election
from proto.errors import MinibrokerError
from proto.topic_partition import TopicPartition
from proto.zk import znodes
from proto.zk.sync_client import read_partition_state

__all__ = [
    "KAFKA_FAILURE_MODES",
    "NEMESES",
    "Fault",
    "Nemesis",
    "NemesisContext",
    "NoTargetError",
    "nemesis_named",
    "swap_file",
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
        ctx.backend.pause(broker)
        ctx.paused.add(broker)
        ctx.timeline.event("pause", broker, nemesis=self.name)

        def heal() -> None:
            ctx.backend.resume(broker)
            ctx.paused.discard(broker)
            ctx.timeline.event("resume", broker)

        return Fault(self.name, broker, heal)


class _ZkExpire(Nemesis):
    name = "zk-expire"

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


def _assignment(zk: KazooClient, tp: TopicPartition) -> list[int] | None:
    try:
        data, _ = zk.get(znodes.topic_path(tp.topic))
    except NoNodeError:
        return None
    return znodes.decode_topic_assignment(data).get(tp.partition)


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
        *KAFKA_FAILURE_MODES,
    )
}
"""Every nemesis, by the name ``--nemesis`` takes."""


def nemesis_named(name: str) -> Nemesis:
    """The nemesis called ``name``; BackendUnavailableError naming the known ones."""
    try:
        return NEMESES[name]
    except KeyError:
        raise BackendUnavailableError(
            f"unknown nemesis {name!r}: choose from {', '.join(NEMESES)} (or all)"
        ) from None
