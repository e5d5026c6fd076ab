"""The controller's ZooKeeper access, for asyncio code: candidacy, fenced writes, reads, watches.

Kafka's ``KafkaController`` does all its ZooKeeper work through ``KafkaZkClient``; this is
that client for the controller that runs inside every minibroker process (docs/replication.md).
 It never blocks the event loop: every request is a
kazoo ``*_async`` call bridged to an asyncio future (:mod:`proto.zk.session`), and every
watch and state change is handed to the loop thread before any of our code runs.

Candidacy (``KafkaController.elect``)
    :meth:`ControllerZkClient.try_elect` creates the ephemeral ``/controller`` and bumps
    ``/controller_epoch`` in **one multi-op** conditional on the epoch znode's zkVersion
    (Kafka 2.x's ``KafkaZkClient.registerControllerAndIncrementControllerEpoch``): there is
    no moment where ``/controller`` names a new controller while the epoch is still the old
    one. The winner keeps the epoch znode's new zkVersion as its fencing token.

Fencing (KAFKA-6082)
    Every controller write (partition state create/set, topic assignment, deleting admin
    znodes and ISR change notifications) is a multi-op whose first op checks
    ``/controller_epoch`` at that token. If another controller was elected since, the check
    fails, nothing of the write is applied, and :class:`ControllerMovedError` is raised
    (Kafka's ``ControllerMovedException``): the caller resigns. Writes of independent
    znodes are one multi each, all sent at once (pipelined, as ``KafkaZkClient`` does with
    ``ZkVersionCheck`` on each request), so a batch costs about one round trip and one
    partition's version conflict does not undo the others.

Watches
    ``watch_*`` set a standing watch whose callback runs on the event loop thread, with no
    arguments: the caller re-reads what it needs, as Kafka's ``ZNodeChangeHandler`` /
    ``ZNodeChildChangeHandler`` only enqueue a controller event that reads ZooKeeper when it
    runs. The promise is *at least once after every change*: raw ZooKeeper watches fire
    once, and kazoo drops them all on a connection loss without restoring them (it sends
    no SetWatches), so each watch is re-registered after each fire
    and after every reconnect, and the callback runs only once ZooKeeper acknowledged the
    new registration (a later change fires it again, an earlier one is seen by the
    re-read). It is also called once after every reconnect, because changes made while
    disconnected are reported by nobody. Calls may be spurious. kazoo's DataWatch and
    ChildrenWatch recipes are not used: they block while registering, a ChildrenWatch
    whose znode is missing stops for good, they stay silent after a reconnect when the
    children look unchanged (a broker that bounced meanwhile, KIP-380, would go unseen),
    and they cannot be unregistered.

Sessions
    The controller's ``/controller`` is an ephemeral of this client's session. When the
    session expires (LOST, or a new session without LOST first) the client forgets its
    epoch, so later fenced writes raise ControllerMovedError, and calls the
    :meth:`~ControllerZkClient.on_session_lost` callbacks: the caller must stop acting as
    controller. kazoo then opens a new session by itself; the watches come back in it and
    fire, so a ``watch_controller`` callback that runs :meth:`try_elect` stands again.
    Unlike Kafka, where the controller shares the broker's session, this client has a
    session of its own (one process, so both normally die together); the epoch fencing
    does not depend on that.

Requests interrupted by a connection loss are resent until they complete, the session
expires (ZkSessionExpiredError) or the client is closed (ZkConnectionError), like Kafka's
``retryRequestsUntilConnected``; each write is safe to resend (see each method). Cancelling
a coroutine stops the waiting, but a request already sent may still be applied.

Errors::

    ZkError (broker.zk_client)
     ├── ZkConnectionError        not started, unreachable at start, or closed
     ├── ZkSessionExpiredError    the session expired while a request was pending
     └── ControllerMovedError     a fenced write found another controller's epoch, or this
                                  client is not the elected controller (any more)
    ZkDataError (ValueError)      a znode's content is malformed (proto.zk.znodes)
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)

from proto.topic_partition import TopicPartition, topic_name_problem
from proto.zk.credentials import ZkCredentials
from proto.zk.kafka_zk_client import KafkaZkClient
from proto.zk.session import (
    WatchCallback,
    WatchKind,
    ZkConnectionError,
    ZkError,
    ZkSessionExpiredError,
    ZkWatch,
)
from proto.zk.znode_limits import JUTE_MAXBUFFER
from proto.zk.znode_reads import RegisteredBroker
from proto.zk.znodes import (
    ADMIN_DELETE_TOPICS_PATH,
    BROKER_IDS_PATH,
    BROKER_TOPICS_PATH,
    CONTROLLER_EPOCH_PATH,
    CONTROLLER_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    PREFERRED_REPLICA_ELECTION_PATH,
    REASSIGN_PARTITIONS_PATH,
    PartitionState,
    PartitionStateData,
    ReplicaAssignment,
    ZkDataError,
    broker_path,
    check_admin_path,
    decode_controller,
    decode_controller_epoch,
    decode_isr_change_notification,
    decode_log_dir_event_notification,
    decode_preferred_replica_election,
    decode_reassign_partitions,
    decode_topic_assignment,
    decode_topic_config,
    decode_topic_replica_assignment,
    delete_topic_path,
    encode_controller,
    encode_controller_epoch,
    encode_partition_state,
    encode_topic_assignment,
    isr_change_notification_path,
    log_dir_event_notification_path,
    partition_state_path,
    partitions_path,
    topic_config_path,
    topic_path,
)

__all__ = [
    "INITIAL_CONTROLLER_EPOCH",
    "ControllerMovedError",
    "ControllerZkClient",
    "LiveBroker",
    "WatchCallback",
    "WatchKind",
    "ZkWatch",
    "fenced_results",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")

INITIAL_CONTROLLER_EPOCH = 0
"""What a missing ``/controller_epoch`` is created with, so the first controller has epoch 1
(Kafka's ``KafkaController.InitialControllerEpoch``)."""

_MULTI_BYSTANDERS = (RolledBackError, RuntimeInconsistency)
"""What kazoo reports for the ops of a failed multi other than the one that failed it."""
MULTI_GROUP = 100
"""Per-partition writes sent as one multi (creations and updates of state znodes): a
hundred partition states are about 15 KB, far below ``jute.maxbuffer`` (1 MB)."""
_TREE_DELETE_ATTEMPTS = 5
"""How often :meth:`ControllerZkClient.delete_topic_znodes` re-lists a topic's subtree that
changed under it before giving up."""


class ControllerMovedError(ZkError):
    """Kafka's ``ControllerMovedException`` (KAFKA-6082): this broker is not the controller.

    Raised by a fenced write whose ``check`` of ``/controller_epoch`` failed (another
    controller was elected since ours, nothing of the write was applied), or that was not
    sent because this client holds no epoch (never elected, resigned, or its session
    expired). The caller must resign: stop acting as controller and clear its state.
    """


LiveBroker = RegisteredBroker
"""A registered broker as the controller sees it (Kafka's ``Broker`` + its epoch): the
shared :class:`proto.zk.znode_reads.RegisteredBroker`."""


# -- pure helpers ------------------------------------------------------------------------------


def fenced_results(results: Sequence[Any], *, expected_version: int) -> list[Any]:
    """The results of a fenced multi-op's own ops, without the leading epoch ``check``.

    ``results`` is kazoo's answer to ``[check(/controller_epoch, v), op1, op2, ...]``: one
    entry per op, each a value or, when the multi failed, an exception instance (the
    failing op's own error, ``RolledBackError`` for the ops before it and
    ``RuntimeInconsistency`` for those after). A failed check (BADVERSION, or NONODE for a
    deleted epoch znode) means another controller was elected: ControllerMovedError.
    """
    if not results:
        raise ZkError("a fenced multi-op returned no results")
    check = results[0]
    if isinstance(check, (BadVersionError, NoNodeError)):
        raise ControllerMovedError(
            f"{CONTROLLER_EPOCH_PATH} is no longer at zkVersion {expected_version}: "
            "another controller was elected since (KAFKA-6082), nothing was written"
        )
    if isinstance(check, BaseException) and not isinstance(check, RolledBackError):
        raise check
    return list(results[1:])


def _partition_path(tp: TopicPartition) -> str:
    """``/brokers/topics/<t>/partitions/<p>``: the (empty) parent of the state znode."""
    return partition_state_path(tp).rpartition("/")[0]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _register_controller(data: bytes, new_epoch: int, version: int) -> Callable[[Any], Any]:
    """The election multi-op (Kafka's ``registerControllerAndIncrementControllerEpoch``):
    create the ephemeral ``/controller`` and set ``/controller_epoch`` to ``new_epoch`` only
    if it is still at ``version``, atomically."""

    def start(client: Any) -> Any:
        transaction = client.transaction()
        transaction.create(CONTROLLER_PATH, data, ephemeral=True)
        transaction.set_data(CONTROLLER_EPOCH_PATH, encode_controller_epoch(new_epoch), version)
        return transaction.commit_async()

    return start


def _get(path: str) -> Callable[[Any], Any]:
    return lambda client: client.get_async(path)


def _get_children(path: str) -> Callable[[Any], Any]:
    return lambda client: client.get_children_async(path)


@dataclass(frozen=True, slots=True)
class _Op:
    """One write op of a fenced multi."""

    kind: Literal["create", "set", "delete"]
    path: str
    data: bytes = b""
    version: int = -1
    """Expected zkVersion for set and delete; -1 = any."""

    def add_to(self, transaction: Any) -> None:
        if self.kind == "create":
            transaction.create(self.path, self.data)
        elif self.kind == "set":
            transaction.set_data(self.path, self.data, self.version)
        else:
            transaction.delete(self.path, self.version)


# -- the client --------------------------------------------------------------------------------


class ControllerZkClient(KafkaZkClient):
    """One controller candidate's ZooKeeper session, used from its asyncio event loop.

    Example usage (the controller's event loop does this)::

        zk = ControllerZkClient.from_config(config)
        await zk.start()
        zk.on_session_lost(lambda: events.put_nowait(Expire()))
        await zk.watch_controller(lambda: events.put_nowait(Reelect()))
        epoch = await zk.try_elect()
        if epoch is not None:
            ...  # failover: watch_brokers(...), load state, fenced writes
        ...
        await zk.resign()
        await zk.close()

    All coroutines must be awaited on the loop that ran :meth:`start`.
    """

    _log_name = "controller_zk"

    def __init__(
        self,
        connect: str,
        *,
        broker_id: int,
        session_timeout_ms: int = 6000,
        connection_timeout_ms: int | None = None,
        credentials: ZkCredentials | None = None,
        jute_maxbuffer: int = JUTE_MAXBUFFER,
    ) -> None:
        """See :class:`ZooKeeperClient`; ``broker_id`` is also the candidate written into
        ``/controller``. Raises ValueError for a malformed connect string."""
        super().__init__(
            connect,
            broker_id=broker_id,
            session_timeout_ms=session_timeout_ms,
            connection_timeout_ms=connection_timeout_ms,
            credentials=credentials,
            jute_maxbuffer=jute_maxbuffer,
        )
        self._epoch: int | None = None
        self._epoch_zk_version: int | None = None

    # -- hooks of ZooKeeperClient ----------------------------------------------------------

    def _closing_now(self) -> None:
        self._epoch = self._epoch_zk_version = None

    def _session_ended(self) -> dict[str, object]:
        """``/controller`` (if ours) is gone with the session: forget the epoch, so the
        caller's session-lost callback (Kafka's ``onControllerResignation`` after
        ``Expire``) finds this client no longer the controller."""
        was_epoch = self._epoch
        self._epoch = self._epoch_zk_version = None
        return {"was_controller": was_epoch is not None, "lost_epoch": was_epoch}

    def _log_context(self) -> dict[str, object]:
        return {"broker": self._broker_id, "epoch": self._epoch}

    def __repr__(self) -> str:
        return (
            f"ControllerZkClient({self._connect!r}, broker={self._broker_id}, "
            f"session={self._session_hex()}, epoch={self._epoch})"
        )

    # -- state -----------------------------------------------------------------------------

    @property
    def broker_id(self) -> int:
        return self._broker_id

    @property
    def epoch(self) -> int | None:
        """The controller epoch this client won, or None when it is not the controller."""
        return self._epoch

    @property
    def epoch_zk_version(self) -> int | None:
        """``/controller_epoch``'s zkVersion after our election: the fencing token."""
        return self._epoch_zk_version

    # -- lifecycle -------------------------------------------------------------------------

    # -- session ---------------------------------------------------------------------------

    # -- candidacy -------------------------------------------------------------------------

    async def try_elect(self) -> int | None:
        """Stand for controller once; return the new controller epoch if this broker won,
        None if another broker is the controller (then :meth:`watch_controller` says when
        to stand again).

        Kafka's ``KafkaController.elect``: if ``/controller`` exists, stop. Else read
        ``/controller_epoch`` (creating it with 0 if missing) and, in one multi-op, create
        the ephemeral ``/controller`` and set the epoch to +1 at the version read. A lost
        race on the epoch (BADVERSION) re-reads and tries again; a lost race on
        ``/controller`` (NODEEXISTS) checks whether the winner is in fact us, i.e. the reply
        to our own multi was lost and it was sent again. If this client already is the
        controller, its epoch is returned. Cancelled after its multi-op was applied, it leaves
        ``/controller`` ours with no epoch kept: the next call gives it up and stands again.
        """
        while True:
            current = await self._read_controller()
            if current is not None:
                controller_id, owner = current
                if owner == self._current_session_id():
                    if self._epoch is not None:
                        return self._epoch
                    # Ours without a known epoch (an election cancelled after its multi was
                    # applied): nobody else can win while it exists, and we cannot vouch for
                    # the epoch, so give it up and stand again with a fresh one.
                    self._log(logging.WARNING, "own_controller_without_epoch")
                    await self._delete_own_controller()
                    continue
                self._forget_epoch("controller_exists", active_controller=controller_id)
                return None
            epoch, version = await self._read_or_create_epoch()
            new_epoch = epoch + 1
            data = encode_controller(self._broker_id, _now_ms())

            [results] = await self._pipeline(
                "elect", [_register_controller(data, new_epoch, version)]
            )
            _raise_unexpected(results)
            created, epoch_stat = results
            if not isinstance(created, BaseException):
                return self._elected(new_epoch, int(epoch_stat.version))
            if isinstance(created, NodeExistsError):
                won = await self._won_anyway(new_epoch)
                if won is not None:
                    return self._elected(new_epoch, won)
                self._log(logging.INFO, "election_lost", tried_epoch=new_epoch)
                continue  # re-read: usually the winner is there now and we return None
            if isinstance(epoch_stat, (BadVersionError, NoNodeError)):
                self._log(logging.INFO, "election_epoch_race", tried_epoch=new_epoch)
                continue
            _raise_unexpected(created)
            _raise_unexpected(epoch_stat)
            raise ZkError(f"unexpected election multi-op result: {results!r}")

    async def resign(self) -> None:
        """Stop being the controller: forget the epoch (fenced writes now raise
        ControllerMovedError) and delete ``/controller`` if this session holds it, so the
        other candidates' watches fire. Never deletes another broker's ``/controller``.
        Idempotent; a session that expired or was closed meanwhile took the znode with it.
        """
        self._forget_epoch("resigned")
        with contextlib.suppress(ZkSessionExpiredError, ZkConnectionError):
            await self._delete_own_controller()

    async def controller_id(self) -> int | None:
        """The active controller's broker id, or None when there is none."""
        current = await self._read_controller()
        return None if current is None else current[0]

    async def controller_epoch(self) -> tuple[int, int] | None:
        """``(epoch, zkVersion)`` of ``/controller_epoch`` as stored, or None if missing."""
        [result] = await self._pipeline("get", [_get(CONTROLLER_EPOCH_PATH)])
        if isinstance(result, NoNodeError):
            return None
        _raise_unexpected(result)
        data, stat = result
        epoch = self._decode(CONTROLLER_EPOCH_PATH, decode_controller_epoch, data)
        return epoch, int(stat.version)

    def _elected(self, epoch: int, zk_version: int) -> int:
        self._epoch, self._epoch_zk_version = epoch, zk_version
        self._log(logging.INFO, "elected", epoch_zk_version=zk_version, session=self._session_hex())
        return epoch

    def _forget_epoch(self, event: str, **fields: Any) -> None:
        if self._epoch is None:
            self._log(logging.INFO, event, **fields)
            return
        self._log(logging.WARNING, event, resigned_epoch=self._epoch, **fields)
        self._epoch = self._epoch_zk_version = None

    async def _read_controller(self) -> tuple[int, int] | None:
        """(broker id, owning session) of ``/controller``, or None if there is none."""
        [result] = await self._pipeline("get", [_get(CONTROLLER_PATH)])
        if isinstance(result, NoNodeError):
            return None
        _raise_unexpected(result)
        data, stat = result
        return self._decode(CONTROLLER_PATH, decode_controller, data), int(stat.ephemeralOwner)

    async def _read_or_create_epoch(self) -> tuple[int, int]:
        """(epoch, zkVersion) of ``/controller_epoch``, created with 0 when missing (Kafka's
        ``KafkaController.maybeCreateControllerEpochZNode``)."""
        initial = encode_controller_epoch(INITIAL_CONTROLLER_EPOCH)
        while True:
            [result] = await self._pipeline("get", [_get(CONTROLLER_EPOCH_PATH)])
            if not isinstance(result, NoNodeError):
                _raise_unexpected(result)
                data, stat = result
                epoch = self._decode(CONTROLLER_EPOCH_PATH, decode_controller_epoch, data)
                return epoch, int(stat.version)
            [created] = await self._pipeline(
                "create",
                [lambda client: client.create_async(CONTROLLER_EPOCH_PATH, initial)],
            )
            if not isinstance(created, NodeExistsError):  # else: another candidate made it
                _raise_unexpected(created)
                self._log(logging.INFO, "controller_epoch_created", path=CONTROLLER_EPOCH_PATH)

    async def _won_anyway(self, new_epoch: int) -> int | None:
        """After NODEEXISTS on ``/controller``: the epoch zkVersion if the znode is ours and
        the epoch is the one we tried to write (our multi was applied, its reply lost)."""
        controller, epoch = await self._pipeline(
            "get", [_get(CONTROLLER_PATH), _get(CONTROLLER_EPOCH_PATH)]
        )
        if isinstance(controller, NoNodeError) or isinstance(epoch, NoNodeError):
            return None
        _raise_unexpected(controller)
        _raise_unexpected(epoch)
        if int(controller[1].ephemeralOwner) != self._current_session_id():
            return None
        stored = self._decode(CONTROLLER_EPOCH_PATH, decode_controller_epoch, epoch[0])
        if stored == new_epoch:
            return int(epoch[1].version)
        # Ours, but the epoch is not the one we wrote: we cannot vouch for it. Give the znode
        # up so that an election with a fresh epoch can run (ours or another candidate's).
        self._log(logging.WARNING, "controller_epoch_mismatch", stored=stored, tried=new_epoch)
        await self._delete_own_controller()
        return None

    async def _delete_own_controller(self) -> None:
        [result] = await self._pipeline("get", [_get(CONTROLLER_PATH)])
        if isinstance(result, NoNodeError):
            return
        _raise_unexpected(result)
        stat = result[1]
        if int(stat.ephemeralOwner) != self._current_session_id():
            return
        version = int(stat.version)
        [deleted] = await self._pipeline(
            "delete", [lambda client: client.delete_async(CONTROLLER_PATH, version)]
        )
        if not isinstance(deleted, (NoNodeError, BadVersionError)):
            _raise_unexpected(deleted)
            self._log(logging.INFO, "controller_znode_deleted")

    # -- watches ---------------------------------------------------------------------------

    async def watch_controller(self, callback: WatchCallback) -> ZkWatch:
        """``/controller`` created, changed or deleted (Kafka's ``ControllerChangeHandler``):
        a loser stands again with :meth:`try_elect`; a controller that sees another
        broker's id there resigns."""
        return await self._watch("controller", WatchKind.DATA, CONTROLLER_PATH, callback)

    async def watch_brokers(self, callback: WatchCallback) -> ZkWatch:
        """Children of ``/brokers/ids``: a broker registered or went away
        (``BrokerChangeHandler``); compare :meth:`live_brokers` epochs to find bounces."""
        return await self._watch("brokers", WatchKind.CHILDREN, BROKER_IDS_PATH, callback)

    async def watch_topics(self, callback: WatchCallback) -> ZkWatch:
        """Children of ``/brokers/topics``: topics created or deleted (``TopicChangeHandler``)."""
        return await self._watch("topics", WatchKind.CHILDREN, BROKER_TOPICS_PATH, callback)

    async def watch_topic_assignment(self, topic: str, callback: WatchCallback) -> ZkWatch:
        """``/brokers/topics/<t>`` changed (``PartitionModificationsHandler``): partitions
        were added, or a reassignment was completed. ValueError for an illegal name."""
        return await self._watch(f"topic:{topic}", WatchKind.DATA, topic_path(topic), callback)

    async def watch_topic_deletions(self, callback: WatchCallback) -> ZkWatch:
        """Children of ``/admin/delete_topics`` (``TopicDeletionHandler``)."""
        return await self._watch(
            "topic_deletions", WatchKind.CHILDREN, ADMIN_DELETE_TOPICS_PATH, callback
        )

    async def watch_isr_change_notifications(self, callback: WatchCallback) -> ZkWatch:
        """Children of ``/isr_change_notification`` (``IsrChangeNotificationHandler``)."""
        return await self._watch(
            "isr_change_notifications", WatchKind.CHILDREN, ISR_CHANGE_NOTIFICATION_PATH, callback
        )

    async def watch_log_dir_event_notifications(self, callback: WatchCallback) -> ZkWatch:
        """Children of ``/log_dir_event_notification`` (``LogDirEventNotificationHandler``)."""
        return await self._watch(
            "log_dir_event_notifications",
            WatchKind.CHILDREN,
            LOG_DIR_EVENT_NOTIFICATION_PATH,
            callback,
        )

    async def watch_reassignment(self, callback: WatchCallback) -> ZkWatch:
        """``/admin/reassign_partitions`` created, changed or deleted
        (``PartitionReassignmentHandler``)."""
        return await self._watch("reassignment", WatchKind.DATA, REASSIGN_PARTITIONS_PATH, callback)

    async def watch_preferred_replica_election(self, callback: WatchCallback) -> ZkWatch:
        """``/admin/preferred_replica_election`` created, changed or deleted
        (``PreferredReplicaElectionHandler``)."""
        return await self._watch(
            "preferred_replica_election",
            WatchKind.DATA,
            PREFERRED_REPLICA_ELECTION_PATH,
            callback,
        )

    # -- reads -----------------------------------------------------------------------------

    async def live_brokers(self) -> dict[int, LiveBroker]:
        """Broker id -> registration and broker epoch (czxid) of every registered broker.

        A broker that deregisters while being read is left out; so is a malformed
        registration (logged), rather than failing the whole listing.
        """
        batch = await self.read_registered_brokers()
        for broker_id, error in batch.malformed.items():
            path = broker_path(broker_id)
            self._log(logging.WARNING, "bad_broker_registration", path=path, error=str(error))
        return batch.found

    async def topics(self) -> set[str]:
        """Names of the topics under ``/brokers/topics`` (illegal names logged and left out:
        no path can be built for them)."""
        return self._legal_topics(
            BROKER_TOPICS_PATH, (await self._children_or_none(BROKER_TOPICS_PATH) or [])
        )

    async def topic_assignment(self, topic: str) -> dict[int, list[int]] | None:
        """Partition -> replicas (assignment order) of ``/brokers/topics/<t>``; None if the
        topic does not exist. Raises ZkDataError if the znode is malformed."""
        path = topic_path(topic)
        [result] = await self._pipeline("get", [_get(path)])
        if isinstance(result, NoNodeError):
            return None
        _raise_unexpected(result)
        return self._decode(path, decode_topic_assignment, result[0])

    async def topic_assignments(self, topics: Iterable[str]) -> dict[str, dict[int, list[int]]]:
        """:meth:`topic_assignment` of many topics, pipelined (the controller's failover
        load). Missing topics are left out; so are malformed ones (logged), so one bad
        znode cannot stop the controller from loading the rest."""
        return await self._get_many(
            sorted(set(topics)),
            topic_path,
            lambda data, _: decode_topic_assignment(data),
            logging.ERROR,
            "bad_topic_assignment",
        )

    async def topic_replica_assignments(
        self, topics: Iterable[str]
    ) -> dict[str, dict[int, ReplicaAssignment]]:
        """:meth:`topic_assignments` with each partition's adding and removing replicas."""
        return await self._get_many(
            sorted(set(topics)),
            topic_path,
            lambda data, _: decode_topic_replica_assignment(data),
            logging.ERROR,
            "bad_topic_assignment",
        )

    async def partition_states(
        self, tps: Iterable[TopicPartition]
    ) -> dict[TopicPartition, PartitionState]:
        """The state znodes of ``tps`` with their zkVersions, pipelined. Partitions without
        one are left out; so are malformed ones (logged)."""
        batch = await self.read_partition_states(tps)
        for tp, error in batch.malformed.items():
            self._log(logging.ERROR, "bad_partition_state", partition=tp, error=error)
        return batch.found

    async def _get_many(
        self,
        keys: Sequence[K],
        path_of: Callable[[K], str],
        decode: Callable[[bytes, Any], V],
        level: int,
        bad_event: str,
    ) -> dict[K, V]:
        """Read the znodes of ``keys`` in one pipeline and decode them (data, stat). Missing
        znodes are left out, and so are malformed ones (logged as ``bad_event``): one bad
        znode must not stop the controller from loading the rest."""
        results = await self.read_data("get", [path_of(key) for key in keys])
        decoded: dict[K, V] = {}
        for key, result in zip(keys, results, strict=True):
            if isinstance(result, NoNodeError):
                continue
            _raise_unexpected(result)
            try:
                decoded[key] = decode(result[0], result[1])
            except ZkDataError as e:
                self._log(level, bad_event, path=path_of(key), error=e)
        return decoded

    async def isr_change_notifications(self) -> list[tuple[str, list[TopicPartition]]]:
        """(name, partitions) of every ``/isr_change_notification/isr_change_<seq>``, oldest
        first. A malformed one comes with no partitions (logged) so that the caller still
        deletes it, as Kafka's ``processIsrChangeNotification`` does."""
        children = await self._children_or_none(ISR_CHANGE_NOTIFICATION_PATH) or []
        names = sorted(child for child in children if _is_isr_change_name(child))
        results = await self._pipeline(
            "get", [_get(isr_change_notification_path(name)) for name in names]
        )
        notifications: list[tuple[str, list[TopicPartition]]] = []
        for name, result in zip(names, results, strict=True):
            if isinstance(result, NoNodeError):
                continue  # processed and deleted meanwhile
            _raise_unexpected(result)
            try:
                partitions = decode_isr_change_notification(result[0])
            except ZkDataError as e:
                path = isr_change_notification_path(name)
                self._log(logging.WARNING, "bad_isr_change_notification", path=path, error=e)
                partitions = []
            notifications.append((name, partitions))
        return notifications

    async def log_dir_event_notifications(self) -> list[tuple[str, int | None, int]]:
        """(name, broker id, czxid) of every ``/log_dir_event_notification/log_dir_event_<seq>``,
        oldest first. The czxid tells a notification from before the broker's latest
        registration (its broker epoch) from one after it. A malformed one comes with no
        broker (logged) so that the caller still deletes it."""
        children = await self._children_or_none(LOG_DIR_EVENT_NOTIFICATION_PATH) or []
        names = []
        for child in sorted(children):
            try:
                log_dir_event_notification_path(child)
            except ValueError:
                continue
            names.append(child)
        results = await self._pipeline(
            "get", [_get(log_dir_event_notification_path(name)) for name in names]
        )
        notifications: list[tuple[str, int | None, int]] = []
        for name, result in zip(names, results, strict=True):
            if isinstance(result, NoNodeError):
                continue  # processed and deleted meanwhile
            _raise_unexpected(result)
            data, stat = result
            broker: int | None
            try:
                broker = decode_log_dir_event_notification(data)
            except ZkDataError as e:
                path = log_dir_event_notification_path(name)
                self._log(logging.WARNING, "bad_log_dir_event_notification", path=path, error=e)
                broker = None
            notifications.append((name, broker, int(stat.czxid)))
        return notifications

    async def delete_log_dir_event_notifications(self, names: Iterable[str]) -> None:
        """Delete processed ``/log_dir_event_notification/<name>`` znodes; already deleted
        is fine. ControllerMovedError if another controller was elected."""
        paths = [log_dir_event_notification_path(name) for name in names]
        if not paths:
            return
        results = await self._fenced_pipeline(
            "delete_log_dir_event_notifications", [[_Op("delete", p)] for p in paths]
        )
        for [result] in results:
            if not isinstance(result, NoNodeError):
                _raise_unexpected(result)

    async def topic_configs(self, topics: Iterable[str]) -> dict[str, dict[str, str]]:
        """The overrides in ``/config/topics/<t>`` of each topic, pipelined; topics with no
        config znode are left out, so are malformed ones (logged): the broker defaults then
        apply, as Kafka's ``LogConfig.fromProps`` falls back to them."""
        return await self._get_many(
            sorted(set(topics)),
            topic_config_path,
            lambda data, _: decode_topic_config(data),
            logging.WARNING,
            "bad_topic_config",
        )

    async def topics_to_delete(self) -> set[str]:
        """Topics marked for deletion under ``/admin/delete_topics``."""
        children = await self._children_or_none(ADMIN_DELETE_TOPICS_PATH) or []
        return self._legal_topics(ADMIN_DELETE_TOPICS_PATH, children)

    async def reassign_request(self) -> dict[TopicPartition, list[int]] | None:
        """The target replicas of ``/admin/reassign_partitions``; None if there is no
        request. Raises ZkDataError if it is malformed (the caller deletes it)."""
        return await self._read_admin(REASSIGN_PARTITIONS_PATH, decode_reassign_partitions)

    async def preferred_replica_election_request(self) -> set[TopicPartition] | None:
        """The partitions of ``/admin/preferred_replica_election``; None if there is no
        request. Raises ZkDataError if it is malformed (the caller deletes it)."""
        partitions = await self._read_admin(
            PREFERRED_REPLICA_ELECTION_PATH, decode_preferred_replica_election
        )
        return None if partitions is None else set(partitions)

    async def _read_admin(self, path: str, decode: Callable[[bytes], T]) -> T | None:
        [result] = await self._pipeline("get", [_get(path)])
        if isinstance(result, NoNodeError):
            return None
        _raise_unexpected(result)
        return self._decode(path, decode, result[0])

    def _legal_topics(self, parent: str, names: Iterable[str]) -> set[str]:
        topics = set()
        for name in names:
            problem = topic_name_problem(name)
            if problem is None:
                topics.add(name)
            else:
                self._log(logging.WARNING, "illegal_topic_znode", parent=parent, problem=problem)
        return topics

    # -- fenced writes (KAFKA-6082) --------------------------------------------------------

    async def create_partition_states(
        self, states: Mapping[TopicPartition, PartitionStateData]
    ) -> dict[TopicPartition, int | None]:
        """Create the state znodes of new partitions (Kafka's
        ``PartitionStateMachine.initializeLeaderAndIsrForPartitions``); return each one's
        zkVersion (0), or None where it was not created: it exists already with other
        content (the caller re-reads), or the topic znode is gone.

        The parents (``.../partitions`` and ``.../partitions/<p>``) are created first, in
        the same pipeline, each under the epoch check; "exists already" is fine for them.
        A state that already holds exactly ``states[tp]`` counts as created (our resent
        create). Raises ControllerMovedError if another controller was elected.
        """
        if not states:
            return {}
        tps = sorted(states)
        topics = sorted({tp.topic for tp in tps})
        batches = (
            [[_Op("create", partitions_path(topic))] for topic in topics]
            + [[_Op("create", _partition_path(tp))] for tp in tps]
            + [
                [_Op("create", partition_state_path(tp), encode_partition_state(states[tp]))]
                for tp in tps
            ]
        )
        results = await self._grouped_fenced_pipeline("create_partition_states", batches)
        for [parent] in results[: len(topics) + len(tps)]:
            if not isinstance(parent, (NodeExistsError, NoNodeError)):
                _raise_unexpected(parent)
        created: dict[TopicPartition, int | None] = {}
        existing: list[TopicPartition] = []
        for tp, [result] in zip(tps, results[len(topics) + len(tps) :], strict=True):
            if isinstance(result, NodeExistsError):
                existing.append(tp)
            elif isinstance(result, NoNodeError):
                self._log(logging.WARNING, "partition_state_topic_missing", partition=tp)
                created[tp] = None
            else:
                _raise_unexpected(result)
                created[tp] = 0
        created.update(await self._same_content(existing, states, "partition_state_exists"))
        self._log_batch("partition_states_created", created)
        return created

    async def update_partition_states(
        self, updates: Mapping[TopicPartition, tuple[PartitionStateData, int]]
    ) -> dict[TopicPartition, int | None]:
        """Write each partition's new state if its znode is still at the expected zkVersion;
        return the new zkVersion, or None where it moved on or is gone (BADVERSION: the
        caller re-reads and decides again, never overwrites). Kafka's
        ``KafkaZkClient.updateLeaderAndIsr``.

        One fenced multi per partition, all pipelined: a multi is all-or-nothing, so one
        per partition keeps a conflict on one partition from failing the rest, without a
        retry round per conflict; ZooKeeper answers the pipeline in one round trip and
        group-commits it. A BADVERSION is re-read once: if the znode already holds exactly
        our state, it was our own write whose reply was lost and resent, and its version
        is returned. Raises ControllerMovedError if another controller was elected (the
        writes answered before that were applied under our epoch and stay valid).
        """
        if not updates:
            return {}
        tps = sorted(updates)
        batches = [
            [
                _Op(
                    "set",
                    partition_state_path(tp),
                    encode_partition_state(updates[tp][0]),
                    updates[tp][1],
                )
            ]
            for tp in tps
        ]
        results = await self._grouped_fenced_pipeline("update_partition_states", batches)
        written: dict[TopicPartition, int | None] = {}
        conflicts: list[TopicPartition] = []
        for tp, [result] in zip(tps, results, strict=True):
            if isinstance(result, BadVersionError):
                conflicts.append(tp)
            elif isinstance(result, NoNodeError):
                written[tp] = None
            else:
                _raise_unexpected(result)
                written[tp] = int(result.version)
        wanted = {tp: updates[tp][0] for tp in conflicts}
        written.update(await self._same_content(conflicts, wanted, "partition_state_conflict"))
        self._log_batch("partition_states_updated", written)
        return written

    async def set_topic_assignment(
        self,
        topic: str,
        assignment: Mapping[int, Iterable[int] | ReplicaAssignment],
        *,
        expected_version: int = -1,
    ) -> int | None:
        """Write ``/brokers/topics/<t>`` (reassignment completion, Kafka's
        ``KafkaZkClient.setTopicAssignment``); return the new zkVersion, or None if the
        topic does not exist or is not at ``expected_version`` (-1: any). Raises
        ControllerMovedError if another controller was elected."""
        path = topic_path(topic)
        op = _Op("set", path, encode_topic_assignment(assignment), expected_version)
        [[result]] = await self._fenced_pipeline("set_topic_assignment", [[op]])
        if isinstance(result, (NoNodeError, BadVersionError)):
            self._log(logging.WARNING, "topic_assignment_not_set", path=path, error=repr(result))
            return None
        _raise_unexpected(result)
        self._log(logging.INFO, "topic_assignment_set", path=path, version=result.version)
        return int(result.version)

    async def delete_topic_znodes(self, topic: str) -> None:
        """Delete a topic's znodes when its deletion is complete (Kafka's
        ``TopicDeletionManager.completeDeleteTopic``): ``/brokers/topics/<t>`` with its
        partitions and states, ``/config/topics/<t>`` and ``/admin/delete_topics/<t>``.

        One fenced multi, children before parents, so the topic disappears all at once or
        not at all. ZooKeeper has no recursive delete: the tree is listed first, and if it
        changed before the multi ran (NONODE or NOTEMPTY) it is listed again. Missing
        znodes are fine. Raises ControllerMovedError if another controller was elected.
        """
        roots = [topic_path(topic), topic_config_path(topic), delete_topic_path(topic)]
        for _ in range(_TREE_DELETE_ATTEMPTS):
            paths = await self._list_trees(roots)
            if not paths:
                return
            ops = [_Op("delete", path) for path in reversed(paths)]  # children first
            [results] = await self._fenced_pipeline("delete_topic_znodes", [ops])
            failures = [r for r in results if isinstance(r, BaseException)]
            causes = [r for r in failures if not isinstance(r, _MULTI_BYSTANDERS)]
            if not failures:
                self._log(logging.INFO, "topic_znodes_deleted", topic=topic, znodes=len(paths))
                return
            for cause in causes:
                if not isinstance(cause, (NoNodeError, NotEmptyError)):
                    raise cause
            self._log(logging.INFO, "topic_znodes_changed_retrying", topic=topic)
        raise ZkError(
            f"delete_topic_znodes {topic}: its znodes kept changing, "
            f"{_TREE_DELETE_ATTEMPTS} attempts failed"
        )

    async def delete_isr_change_notifications(self, names: Iterable[str]) -> None:
        """Delete processed ``/isr_change_notification/<name>`` znodes (Kafka's
        ``deleteIsrChangeNotifications``); already deleted is fine. Raises ValueError for
        a name that is not a notification, ControllerMovedError if another controller was
        elected."""
        paths = [isr_change_notification_path(name) for name in names]
        if not paths:
            return
        results = await self._fenced_pipeline(
            "delete_isr_change_notifications", [[_Op("delete", p)] for p in paths]
        )
        for [result] in results:
            if not isinstance(result, NoNodeError):
                _raise_unexpected(result)
        self._log(logging.DEBUG, "isr_change_notifications_deleted", count=len(paths))

    async def delete_admin_node(self, path: str) -> None:
        """Delete a handled admin request: ``/admin/reassign_partitions``,
        ``/admin/preferred_replica_election`` or ``/admin/delete_topics/<t>``; already
        deleted is fine. Raises ValueError for any other path, ControllerMovedError if
        another controller was elected."""
        check_admin_path(path)
        [[result]] = await self._fenced_pipeline("delete_admin_node", [[_Op("delete", path)]])
        if not isinstance(result, NoNodeError):
            _raise_unexpected(result)
        self._log(logging.INFO, "admin_node_deleted", path=path)

    async def _same_content(
        self,
        tps: Sequence[TopicPartition],
        wanted: Mapping[TopicPartition, PartitionStateData],
        event: str,
    ) -> dict[TopicPartition, int | None]:
        """For writes refused with NODEEXISTS/BADVERSION: the zkVersion where the znode holds
        exactly what we wanted (our own resent write), else None."""
        if not tps:
            return {}
        current = await self.partition_states(tps)
        outcome: dict[TopicPartition, int | None] = {}
        for tp in tps:
            state = current.get(tp)
            if state is not None and state.data == wanted[tp]:
                outcome[tp] = state.zk_version
            else:
                outcome[tp] = None
                self._log(
                    logging.INFO,
                    event,
                    partition=tp,
                    actual_version=None if state is None else state.zk_version,
                )
        return outcome

    async def _list_trees(self, roots: Sequence[str]) -> list[str]:
        """Every existing znode under ``roots`` (roots included), parents before children,
        one pipelined get_children per level."""
        found: list[str] = []
        level = list(roots)
        while level:
            results = await self._pipeline("get_children", [_get_children(p) for p in level])
            next_level: list[str] = []
            for path, result in zip(level, results, strict=True):
                if isinstance(result, NoNodeError):
                    continue
                _raise_unexpected(result)
                found.append(path)
                next_level.extend(f"{path}/{child}" for child in sorted(result))
            level = next_level
        return found

    def _fenced_version(self) -> int:
        version = self._epoch_zk_version
        if version is None:
            raise ControllerMovedError(
                f"broker {self._broker_id} is not the elected controller "
                "(never elected, resigned, or its ZooKeeper session expired)"
            )
        return version

    async def _fenced_pipeline(
        self, what: str, batches: Sequence[Sequence[_Op]]
    ) -> list[list[Any]]:
        """Send one multi per batch, each ``[check(/controller_epoch, token), *ops]``, all at
        once; return each batch's op results. Raises ControllerMovedError if any check
        failed, or if this client lost its epoch before a (re)send."""
        version = self._fenced_version()

        def fenced(ops: Sequence[_Op]) -> Callable[[Any], Any]:
            def start(client: Any) -> Any:
                # Resent after a connection loss: only under the epoch we started with.
                if self._epoch_zk_version != version:
                    raise ControllerMovedError(
                        f"{what}: broker {self._broker_id} stopped being the controller"
                    )
                transaction = client.transaction()
                transaction.check(CONTROLLER_EPOCH_PATH, version)
                for op in ops:
                    op.add_to(transaction)
                return transaction.commit_async()

            return start

        raw = await self._pipeline(what, [fenced(ops) for ops in batches])
        results: list[list[Any]] = []
        for outcome in raw:
            _raise_unexpected(outcome)
            try:
                results.append(fenced_results(outcome, expected_version=version))
            except ControllerMovedError:
                self._log(logging.WARNING, "controller_moved", op=what, epoch_zk_version=version)
                raise
        return results

    async def _grouped_fenced_pipeline(
        self, what: str, items: Sequence[Sequence[_Op]]
    ) -> list[list[Any]]:
        """What :meth:`_fenced_pipeline` answers for ``items`` (one multi each), sent as one
        multi per :data:`MULTI_GROUP` items: ZooKeeper then commits a hundredth of the
        transactions (creating 10,000 partitions was 20,000 multis, 7 s). A multi is all or
        nothing, so a group with one failing op (a state that moved on, a znode that
        exists) is sent again item by item, in the original order, for each item's own
        result; conflicts are rare, so this costs a second round trip only then."""
        groups = [items[i : i + MULTI_GROUP] for i in range(0, len(items), MULTI_GROUP)]
        grouped = await self._fenced_pipeline(
            what, [[op for item in group for op in item] for group in groups]
        )
        failed = {
            i
            for i, results in enumerate(grouped)
            if any(isinstance(r, BaseException) for r in results)
        }
        retried = iter(
            await self._fenced_pipeline(what, [item for i in sorted(failed) for item in groups[i]])
            if failed
            else []
        )
        out: list[list[Any]] = []
        for i, (group, results) in enumerate(zip(groups, grouped, strict=True)):
            if i in failed:
                out.extend(next(retried) for _ in group)
                continue
            position = 0
            for item in group:
                out.append(list(results[position : position + len(item)]))
                position += len(item)
        return out

    # -- internals -------------------------------------------------------------------------

    def _log_batch(self, event: str, outcome: Mapping[TopicPartition, int | None]) -> None:
        refused = [str(tp) for tp, version in outcome.items() if version is None]
        self._log(
            logging.INFO,
            event,
            count=len(outcome),
            refused=",".join(refused) if refused else "none",
        )


def _raise_unexpected(result: Any) -> None:
    """Raise ``result`` if it is an error answer the caller did not handle."""
    if isinstance(result, BaseException):
        raise result


def _is_isr_change_name(name: str) -> bool:
    try:
        isr_change_notification_path(name)
    except ValueError:
        return False
    return True
