"""A broker's ZooKeeper session, for asyncio code: registration, ISR changes, producer id
blocks, configs; partition states and consumer offsets through the reads and writes every
ZooKeeper user shares (:class:`proto.zk.session.ZooKeeperClient`).

:class:`BrokerZkClient` adds the broker's operations and its session lease to
:class:`proto.zk.session.ZooKeeperClient`, which owns the session, the retry loop and the
watches and never blocks the event loop: state changes (CONNECTED, SUSPENDED, LOST) reach
the registered callbacks on the loop thread, so callbacks may touch the broker's state
freely and may be coroutine functions (run as tasks).

Sessions: SUSPENDED means the connection dropped but the session may live on (kazoo
reconnects by itself); LOST means it expired and ZooKeeper deleted our ephemerals, above all
``/brokers/ids/<id>``. The next CONNECTED then carries a new session: the broker must
register again (:meth:`BrokerZkClient.on_session_established`) and, meanwhile, must not act
as a leader (docs/replication.md: no zombie leader acknowledges writes).

Operations interrupted by a connection loss are retried until they complete, the session
expires or the client is closed (Kafka's ``retryRequestUntilConnected``); each write is safe
to repeat (see each method). Cancelling an operation's coroutine stops the retrying, but a
request already sent may still be applied by ZooKeeper.

Errors::

    ZkError
     ├── ZkConnectionError        no connection within zookeeper.connection.timeout.ms,
     │                            or the client was closed
     ├── ZkSessionExpiredError    the session expired before the operation completed
     └── BrokerIdInUseError       /brokers/ids/<id> belongs to another live session
    ZkDataError (ValueError)      a znode's content is malformed (proto.zk.znodes)

Other kazoo errors (e.g. ``NoAuthError``) propagate unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from typing import Any, TypeVar

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
)

from proto.topic_partition import TopicPartition
from proto.zk.acl_store import ACL_CHANGE_PATHS
from proto.zk.credentials import ZkCredentials
from proto.zk.kafka_zk_client import KafkaZkClient
from proto.zk.session import (
    WatchCallback,
    WatchKind,
    ZkConnectionError,
    ZkError,
    ZkSessionExpiredError,
    ZkState,
    ZkWatch,
)
from proto.zk.znode_limits import JUTE_MAXBUFFER
from proto.zk.znodes import (
    CONFIG_CHANGES_PATH,
    CONTROLLER_EPOCH_PATH,
    CONTROLLER_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    ISR_CHANGE_PREFIX,
    LATEST_PRODUCER_ID_BLOCK_PATH,
    LEADER_NONE,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    LOG_DIR_EVENT_PREFIX,
    PERSISTENT_PATHS,
    PartitionState,
    PartitionStateData,
    ProducerIdBlock,
    ZkDataError,
    broker_config_path,
    broker_path,
    config_change_path,
    decode_broker_registration,
    decode_controller,
    decode_controller_epoch,
    decode_producer_id_block,
    decode_topic_assignment,
    decode_topic_config,
    delete_topic_path,
    encode_broker_registration,
    encode_isr_change_notification,
    encode_log_dir_event_notification,
    encode_producer_id_block,
    topic_config_path,
    topic_path,
)

__all__ = [
    "LEADER_NONE",
    "BrokerIdInUseError",
    "BrokerZkClient",
    "PartitionState",
    "PartitionStateData",
    "ZkConnectionError",
    "ZkDataError",
    "ZkError",
    "ZkSessionExpiredError",
    "ZkState",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

_REGISTER_POLL_S = 0.2
"""How often a registration held by a stale session is looked at again."""


class BrokerIdInUseError(ZkError):
    """``/brokers/ids/<id>`` is held by another live ZooKeeper session."""

    def __init__(self, message: str, broker_id: int, owner_session_id: int) -> None:
        super().__init__(message)
        self.broker_id = broker_id
        """The contested broker id."""
        self.owner_session_id = owner_session_id
        """The ZooKeeper session that owns the registration."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class BrokerZkClient(KafkaZkClient):
    """One broker's ZooKeeper session, used from its asyncio event loop.

    Example usage::

        zk = BrokerZkClient.from_config(config)
        await zk.start()
        zk.on_session_lost(replica_manager.stop_leading)
        zk.on_session_established(register)       # an async def that calls register_broker
        epoch = await zk.register_broker(config.broker_id, config.host, port)
        ...
        await zk.close()

    All coroutines must be awaited on the loop that ran :meth:`start`.
    """

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
        """See :class:`ZooKeeperClient`; raises ValueError for a malformed connect string."""
        super().__init__(
            connect,
            broker_id=broker_id,
            session_timeout_ms=session_timeout_ms,
            connection_timeout_ms=connection_timeout_ms,
            credentials=credentials,
            jute_maxbuffer=jute_maxbuffer,
        )
        self._lease_confirmed_at: float | None = None
        """Loop time at which a request was sent that this session later saw answered."""
        self._lease_task: asyncio.Task[None] | None = None

    # -- hooks of ZooKeeperClient ----------------------------------------------------------

    def _started(self) -> None:
        loop = self._require_loop()
        self._lease_confirmed_at = loop.time()
        self._lease_task = loop.create_task(self._renew_session_lease())

    def _closing_now(self) -> None:
        if self._lease_task is not None:
            self._lease_task.cancel()

    def _answered(self, sent: float, session: int | None) -> None:
        # An answer proves the session alive after `sent`: it renews the lease.
        if session is not None and session == self._session_id:
            self._lease_confirmed_at = max(self._lease_confirmed_at or sent, sent)

    # -- lifecycle -------------------------------------------------------------------------

    # -- session lease ---------------------------------------------------------------------

    def session_lease_valid(self) -> bool:
        """Whether ZooKeeper cannot yet have expired this broker's session.

        ZooKeeper expires a session only after hearing nothing from it for the session
        timeout. A request sent at time t and answered proves the session was alive at some
        moment after t, so it cannot expire before t + timeout. Past that, this broker may
        already have been declared dead and replaced (a long GC pause, a SIGSTOP): a leader
        must then acknowledge nothing until a fresh round trip proves the session alive.
        The price: with ZooKeeper unreachable for a whole timeout, leaders stop accepting
        writes, which is what "no zombie leaders" means.
        """
        confirmed = self._lease_confirmed_at
        if confirmed is None or self._session_id is None or self._closing:
            return False
        return self._require_loop().time() - confirmed < self._session_timeout_ms / 1000

    async def ensure_session_lease(self) -> bool:
        """:meth:`session_lease_valid`, renewing a stale lease with one round trip first.

        A stale lease with a live session is the normal state right after a long pause or
        a new session; one read settles it. Cancelling only abandons the wait.
        """
        if self.session_lease_valid():
            return True
        if self._session_id is None or self._closing:
            return False
        with contextlib.suppress(ZkError, TimeoutError):
            async with asyncio.timeout(self._session_timeout_ms / 3000):
                await self._ping()
        return self.session_lease_valid()

    async def _ping(self) -> None:
        await self._call("exists", "/", lambda c: c.exists_async("/"))

    async def _renew_session_lease(self) -> None:
        """Renew the lease with a cheap read every third of the session timeout (every other
        successful request renews it too, see :meth:`_answered`)."""
        loop = self._require_loop()
        interval = self._session_timeout_ms / 3000
        while not self._closing:
            started = loop.time()
            with contextlib.suppress(ZkError, TimeoutError):
                async with asyncio.timeout(interval):
                    await self._ping()
            await asyncio.sleep(max(0.0, interval - (loop.time() - started)))

    # -- session callbacks -----------------------------------------------------------------

    # -- broker registration ---------------------------------------------------------------

    async def create_top_level_paths(self) -> None:
        """Create the persistent parents that are missing (Kafka's ``createTopLevelPaths``),
        with the ACL of :meth:`_acl_for`; for ``zookeeper.set.acl``, where they must exist
        before a client without credentials could create them."""
        for path in PERSISTENT_PATHS:
            try:
                await self.request("create", path, b"", makepath=True)
            except NodeExistsError:
                continue
            self._log(logging.INFO, "top_level_path_created", path=path)

    async def register_broker(
        self,
        broker_id: int,
        host: str,
        port: int,
        *,
        kafka_port: int | None = None,
        grpc_security_protocol: str = "PLAINTEXT",
        kafka_security_protocol: str = "PLAINTEXT",
        wait_for_stale_s: float = 0.0,
    ) -> int:
        """Create the ephemeral ``/brokers/ids/<id>`` and return the broker epoch (its czxid,
        KIP-380). Parent znodes are created as needed. ``kafka_port``: the bound port of the
        broker's Kafka protocol listener on ``host`` (None: it runs none); with it the
        registration names both listeners and ``grpc_security_protocol`` (``SSL`` for a TLS
        broker) and ``kafka_security_protocol`` the Kafka listener's, see
        :func:`proto.zk.znodes.encode_broker_registration`.

        If the znode already belongs to this session (a retry after a lost reply, or a
        second call), it is kept (updated if an endpoint changed) and its czxid returned.
        If another live session owns it, raises BrokerIdInUseError; with
        ``wait_for_stale_s`` it first waits up to that long for the znode to go away, which
        is what happens when this broker's previous process was killed and its session has
        not timed out yet.
        """
        path = broker_path(broker_id)
        data = encode_broker_registration(
            host,
            port,
            _now_ms(),
            kafka_port=kafka_port,
            grpc_security_protocol=grpc_security_protocol,
            kafka_security_protocol=kafka_security_protocol,
        )
        endpoints = (host, port, None if kafka_port is None else (host, kafka_port))
        loop = self._require_loop()
        deadline = loop.time() + wait_for_stale_s
        while True:
            try:
                _, stat = await self._call(
                    "create",
                    path,
                    lambda c: c.create_async(
                        path, data, ephemeral=True, makepath=True, include_data=True
                    ),
                )
            except NodeExistsError:
                pass
            else:
                self._log(
                    logging.INFO,
                    "broker_registered",
                    path=path,
                    endpoint=f"{host}:{port}",
                    kafka_endpoint="-" if kafka_port is None else f"{host}:{kafka_port}",
                    broker_epoch=stat.czxid,
                    session=self._session_hex(),
                )
                return int(stat.czxid)
            try:
                existing, stat = await self._call("get", path, lambda c: c.get_async(path))
            except NoNodeError:
                continue  # its owner's session ended meanwhile: create it again
            owner = int(stat.ephemeralOwner)
            if owner == self._current_session_id():
                current = self._decode(path, decode_broker_registration, existing)
                if (current.host, current.port, current.kafka_endpoint) != endpoints:
                    await self._set(path, data, int(stat.version))
                self._log(
                    logging.INFO,
                    "broker_registration_kept",
                    path=path,
                    broker_epoch=stat.czxid,
                    session=self._session_hex(),
                )
                return int(stat.czxid)
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise BrokerIdInUseError(
                    f"broker id {broker_id} is already registered at {path} by another live "
                    f"ZooKeeper session 0x{owner:x} ({_describe_registration(existing)}): "
                    "another broker with this id is running, or this broker's previous "
                    "process died less than zookeeper.session.timeout.ms ago",
                    broker_id,
                    owner,
                )
            self._log(
                logging.WARNING,
                "broker_id_in_use_waiting",
                path=path,
                owner=f"0x{owner:x}",
                remaining_s=f"{remaining:.1f}",
            )
            await asyncio.sleep(min(_REGISTER_POLL_S, remaining))

    async def deregister_broker(self, broker_id: int) -> None:
        """Delete ``/brokers/ids/<id>`` if this session owns it (never another broker's)."""
        path = broker_path(broker_id)
        try:
            _, stat = await self._call("get", path, lambda c: c.get_async(path))
        except NoNodeError:
            return
        owner = int(stat.ephemeralOwner)
        if owner != self._current_session_id():
            self._log(
                logging.WARNING, "deregister_skipped_not_owner", path=path, owner=f"0x{owner:x}"
            )
            return
        with contextlib.suppress(NoNodeError):
            await self._call("delete", path, lambda c: c.delete_async(path, stat.version))
        self._log(logging.INFO, "broker_deregistered", path=path)

    # -- partition state -------------------------------------------------------------------

    async def create_isr_change_notification(self, partitions: Iterable[TopicPartition]) -> str:
        """Create ``/isr_change_notification/isr_change_<seq>`` naming ``partitions``; return
        its path. A retry after a connection loss may create a duplicate, which the
        controller handles like any repeated notification. Raises ValueError if empty."""
        listed = list(partitions)
        if not listed:
            raise ValueError("an ISR change notification needs at least one partition")
        data = encode_isr_change_notification(listed)
        prefix = f"{ISR_CHANGE_NOTIFICATION_PATH}/{ISR_CHANGE_PREFIX}"
        created: str = await self._call(
            "create", prefix, lambda c: c.create_async(prefix, data, sequence=True, makepath=True)
        )
        self._log(
            logging.INFO,
            "isr_change_notified",
            path=created,
            partitions=",".join(str(tp) for tp in listed),
        )
        return created

    async def create_log_dir_event_notification(self) -> str:
        """Create ``/log_dir_event_notification/log_dir_event_<seq>`` saying this broker's log
        dir failed (Kafka's ``propagateLogDirEvent``); return its path. A duplicate after a
        connection loss is harmless: the controller takes the broker's replicas offline
        once."""
        data = encode_log_dir_event_notification(self._broker_id)
        prefix = f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{LOG_DIR_EVENT_PREFIX}"
        created: str = await self._call(
            "create", prefix, lambda c: c.create_async(prefix, data, sequence=True, makepath=True)
        )
        self._log(logging.WARNING, "log_dir_event_notified", path=created)
        return created

    # -- producer id blocks ----------------------------------------------------------------

    async def get_producer_id_block(self) -> tuple[ProducerIdBlock | None, int | None]:
        """``/latest_producer_id_block``: (the last reserved block, the znode's version).

        (None, None) when the znode does not exist; (None, version) when it exists but is
        empty (Kafka creates it empty at start-up). Raises ZkDataError when malformed.
        """
        path = LATEST_PRODUCER_ID_BLOCK_PATH
        try:
            data, stat = await self._call("get", path, lambda c: c.get_async(path))
        except NoNodeError:
            return None, None
        if not data:
            return None, int(stat.version)
        return self._decode(path, decode_producer_id_block, data), int(stat.version)

    async def set_producer_id_block_conditionally(
        self, block: ProducerIdBlock, expected_version: int | None
    ) -> bool:
        """Reserve ``block``: write it only if the znode is still at ``expected_version``
        (create it when that is None); return whether this write won.

        False means another broker reserved a block meanwhile: re-read and try the next.
        When the znode already holds exactly ``block``, our own write whose reply was lost
        to a connection loss, that counts as a win (Kafka's ``checkProducerIdBlockZkData``;
        the block names this broker, so no other broker's write can look like it).
        """
        path = LATEST_PRODUCER_ID_BLOCK_PATH
        data = encode_producer_id_block(block)
        try:
            if expected_version is None:
                await self._call(
                    "create", path, lambda c: c.create_async(path, data, makepath=True)
                )
            else:
                await self._set(path, data, expected_version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            current, _ = await self.get_producer_id_block()
            if current != block:
                self._log(
                    logging.INFO,
                    "producer_id_block_race_lost",
                    path=path,
                    expected_version=expected_version,
                    wanted=f"{block.block_start}-{block.block_end}",
                )
                return False
        self._log(
            logging.INFO,
            "producer_id_block_reserved",
            path=path,
            block_start=block.block_start,
            block_end=block.block_end,
        )
        return True

    # -- reads -----------------------------------------------------------------------------

    async def get_topic_config(self, topic: str) -> dict[str, str]:
        """The overrides in ``/config/topics/<t>``; ``{}`` if the znode does not exist."""
        path = topic_config_path(topic)
        try:
            data, _ = await self._call("get", path, lambda c: c.get_async(path))
        except NoNodeError:
            return {}
        return self._decode(path, decode_topic_config, data)

    async def get_topic_assignment(self, topic: str) -> dict[int, list[int]] | None:
        """Partition -> replicas (assignment order) from ``/brokers/topics/<t>``; None if the
        topic does not exist."""
        path = topic_path(topic)
        try:
            data, _ = await self._call("get", path, lambda c: c.get_async(path))
        except NoNodeError:
            return None
        return self._decode(path, decode_topic_assignment, data)

    async def get_live_brokers(self) -> dict[int, tuple[str, int]]:
        """Broker id -> (host, port) of every registered broker, by id.

        A broker that deregisters while being read is left out; a malformed registration is
        logged and left out rather than failing the whole listing.
        """
        batch = await self.read_registered_brokers()
        for broker_id, error in batch.malformed.items():
            self._log_bad_registration(broker_id, error)
        return {broker_id: (b.host, b.port) for broker_id, b in batch.found.items()}

    async def get_broker_address(self, broker_id: int) -> tuple[str, int] | None:
        """A live broker's (host, port), or None if it is not registered (or its
        registration is malformed: logged)."""
        try:
            broker = await self.read_registered_broker(broker_id)
        except ZkDataError as e:
            self._log_bad_registration(broker_id, e)
            return None
        return None if broker is None else (broker.host, broker.port)

    def _log_bad_registration(self, broker_id: int, error: ZkDataError) -> None:
        self._log(
            logging.WARNING,
            "bad_broker_registration",
            path=broker_path(broker_id),
            error=str(error),
        )

    async def get_controller_id(self) -> int | None:
        """The active controller's broker id, or None when there is none."""
        try:
            data, _ = await self._call(
                "get", CONTROLLER_PATH, lambda c: c.get_async(CONTROLLER_PATH)
            )
        except NoNodeError:
            return None
        return self._decode(CONTROLLER_PATH, decode_controller, data)

    def session_credentials(self) -> tuple[int, bytes] | None:
        """The current session's (id, password), or None without a session. Only for
        ``test.zookeeper.session.export.enable``: with them a second client can end it."""
        client_id = self._client.client_id
        if client_id is None or self._session_id is None:
            return None
        return int(client_id[0]), bytes(client_id[1])

    # -- what ZooKeeper says, for checking control requests ---------------------------------

    async def sync(self) -> None:
        """Make the next reads see every write committed before this call (ZooKeeper's
        ``sync``): reads are served by whichever server the session is on, which may lag
        the ensemble's leader. Checks of a control request against ZooKeeper sync first, so
        that the real controller's fresh writes are never mistaken for absent."""
        await self._call("sync", "/", lambda c: c.sync_async("/"))

    async def get_controller_epoch(self) -> int | None:
        """``/controller_epoch``, or None if no controller was ever elected."""
        path = CONTROLLER_EPOCH_PATH
        try:
            data, _ = await self._call("get", path, lambda c: c.get_async(path))
        except NoNodeError:
            return None
        return self._decode(path, decode_controller_epoch, data)

    async def get_partition_states(
        self, tps: Iterable[TopicPartition]
    ) -> dict[TopicPartition, PartitionState | None]:
        """The state znodes of ``tps`` (None where absent), pipelined; ZkDataError for a
        malformed one."""
        wanted = list(dict.fromkeys(tps))
        states = (await self.read_partition_states(wanted)).require()
        return {tp: states.get(tp) for tp in wanted}

    async def is_topic_marked_for_deletion(self, topic: str) -> bool:
        """Whether ``/admin/delete_topics/<topic>`` exists."""
        path = delete_topic_path(topic)
        return await self._call("exists", path, lambda c: c.exists_async(path)) is not None

    # -- dynamic configs (Kafka's ZkNodeChangeNotificationListener side) ---------------------

    async def watch_config_changes(self, callback: WatchCallback) -> ZkWatch:
        """Children of ``/config/changes`` (a config entity changed), with the promise of
        :class:`~proto.zk.session.ZkWatch`: at least once after every change, and once after
        every reconnect. Returns once ZooKeeper holds the watch."""
        return await self._watch(
            "config_changes", WatchKind.CHILDREN, CONFIG_CHANGES_PATH, callback
        )

    async def watch_acl_changes(self, callback: WatchCallback) -> list[ZkWatch]:
        """Children of ``/kafka-acl-changes`` and ``/kafka-acl-extended-changes`` (an ACL
        changed, :mod:`proto.zk.acl_store`), with the promise of :meth:`watch_config_changes`."""
        return [
            await self._watch("acl_changes", WatchKind.CHILDREN, path, callback)
            for path in ACL_CHANGE_PATHS
        ]

    async def config_change_names(self) -> list[str]:
        """The names of the ``/config/changes`` notifications, oldest first; other children
        (anything a stranger created there) are left out."""
        try:
            children: list[str] = await self._call(
                "get_children",
                CONFIG_CHANGES_PATH,
                lambda c: c.get_children_async(CONFIG_CHANGES_PATH),
            )
        except NoNodeError:
            return []
        names = []
        for child in children:
            try:
                config_change_path(child)
            except ValueError:
                continue
            names.append(child)
        return sorted(names)

    async def get_config_change(self, name: str) -> tuple[bytes, int] | None:
        """A notification's content (:func:`~proto.zk.znodes.decode_config_change` reads it)
        and its creation time (ms), or None if it is gone (purged meanwhile)."""
        path = config_change_path(name)
        try:
            data, stat = await self._call("get", path, lambda c: c.get_async(path))
        except NoNodeError:
            return None
        return bytes(data), int(stat.ctime)

    async def delete_config_change(self, name: str) -> None:
        """Delete an expired notification (Kafka's ``purgeObsoleteNotifications``); gone
        already is fine."""
        path = config_change_path(name)
        with contextlib.suppress(NoNodeError):
            await self._call("delete", path, lambda c: c.delete_async(path))

    async def get_broker_config(self, entity: int | str) -> dict[str, str]:
        """The dynamic configs in ``/config/brokers/<id>`` or ``/config/brokers/<default>``;
        ``{}`` if the znode does not exist."""
        path = broker_config_path(entity)
        try:
            data, _ = await self._call("get", path, lambda c: c.get_async(path))
        except NoNodeError:
            return {}
        return self._decode(path, decode_topic_config, data)

    # -- internals -------------------------------------------------------------------------

    async def _set(self, path: str, data: bytes, version: int) -> Any:
        return await self._call("set", path, lambda c: c.set_async(path, data, version))


def _describe_registration(data: bytes) -> str:
    try:
        registration = decode_broker_registration(data)
    except ZkDataError:
        return "unreadable registration"
    return f"registered as {registration.host}:{registration.port}"
