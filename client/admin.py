"""Topic and cluster administration (Kafka's ``kafka-topics.sh --zookeeper`` and ``AdminZkClient``).

Creating and deleting topics is done the way Kafka's ZooKeeper-era tools did it: the
admin client writes znodes and the controller does the rest (docs/zookeeper.md,
docs/replication.md).

- create: ``/config/topics/<t>`` (the overrides, if any) and then ``/brokers/topics/<t>``
  with the replica assignment of :func:`proto.replica_assignment.assign_replicas` over
  the live brokers of ``/brokers/ids``; the controller sees the new topic, writes each
  partition's state znode and sends LeaderAndIsr. With ``wait``, the client then polls
  Metadata until every partition has a leader.
- delete: ``/admin/delete_topics/<t>``; the controller stops the replicas, deletes the logs
  and removes the topic's znodes. With ``wait``, the client waits for
  ``/brokers/topics/<t>`` to disappear.

- add partitions: the extended assignment in ``/brokers/topics/<t>`` (Kafka 2.x's
  ``AdminZkClient.addPartitions``), new partitions placed by
  :func:`proto.replica_assignment.assign_new_partitions` and written by
  :func:`proto.zk.partition_admin.add_partitions`, the code under the Kafka listener's
  CreatePartitions too; the controller watches the znode and initialises them.
- alter configs: the entity's ``/config/topics/<t>`` or ``/config/brokers/<id|<default>>``,
  then a ``/config/changes/config_change_<seq>`` notification that every broker watches
  (``AdminZkClient.changeConfigs``; :mod:`broker.dynamic_config` applies it).

Reading (list, describe, cluster state) asks the brokers' Metadata instead, so it needs
no ZooKeeper: the ZooKeeper session is opened on the first ZooKeeper request only. Configs
and ZooKeeper consumer groups live in ZooKeeper and are read there; the groups of Kafka
clients live in the brokers' group coordinators, and every live broker is asked for those
it holds (ListGroups, DescribeGroups), as Kafka's ``AdminClient.listConsumerGroups`` asks
every broker: while a group's coordinator moves, the old one holds it until its members'
sessions expire, and a tool that must not act under live members has to see both.

ZooKeeper calls go through kazoo's asynchronous API bridged onto the event loop
(:func:`proto.zk.session.bridge`), and its only blocking calls, connect and close, run in an
executor, so the event loop never blocks on ZooKeeper.

Every mistake a user can make (bad name, too few brokers, existing or unknown topic,
unreachable ZooKeeper) is a :class:`~client.metadata.ClientError` whose message is one line
for the CLI.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from client.closing import AsyncClosing
from client.metadata import (
    BrokerConnections,
    BrokerNode,
    BrokerUnreachableError,
    ClientError,
    ClusterMetadata,
    MetadataClient,
    PartitionMetadata,
    TopicMetadata,
)
from client.reachability import all_refused
from proto import errors
from proto.config.broker_config import BrokerConfig
from proto.config.dynamic_broker_config import check_dynamic_broker_config
from proto.config.scram_credentials import (
    ScramAlteration,
    ScramError,
    alter_scram_credentials,
    describe_scram_credentials,
)
from proto.config.topic_config_def import check_topic_config
from proto.errors import error_name
from proto.replica_assignment import assign_new_partitions, assign_replicas
from proto.topic_partition import TopicPartition, topic_name_problem
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.wire.minibroker_pb2 import ErrorCode
from proto.zk import partition_admin, znodes
from proto.zk.client_quota_admin import (
    QuotaAlteration,
    alter_client_quotas,
    describe_client_quotas,
)
from proto.zk.client_quota_configs import FilterComponent, QuotaEntity, QuotaRequestError
from proto.zk.credentials import ZkCredentials
from proto.zk.kafka_zk_client import KafkaZkClient
from proto.zk.session import ZkConnectionError, ZkError, ZkNoChrootError
from proto.zk.znode_limits import JUTE_MAXBUFFER, ZnodeTooLargeError, check_assignment_floor
from proto.zk.znode_reads import ReadBatch, broker_ids

__all__ = [
    "EARLIEST",
    "LATEST",
    "AdminClient",
    "BrokerGroups",
    "ClusterDescription",
    "ConsumerGroupDescription",
    "EntityConfig",
    "GroupMember",
    "ListOffsetsResult",
]

T = TypeVar("T")
_Answer = TypeVar("_Answer")
COORDINATOR_ATTEMPTS = 5
"""How often a group's coordinator is looked for and asked before giving up."""
COORDINATOR_BACKOFF_S = 0.3
"""The wait before the second attempt (then twice, three times that...)."""

EARLIEST = -2
"""ListOffsets' timestamp for the log start offset."""
LATEST = -1
"""ListOffsets' timestamp for the high watermark (the end a consumer sees)."""
CONFIG_ENTITY_TYPES = ("topics", "brokers")
_CONDITIONAL_WRITE_ATTEMPTS = 5

_POLL_S = 0.1


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """The cluster as the brokers' Metadata shows it."""

    brokers: list[BrokerNode]
    """Live brokers, by id."""
    controller_id: int
    """The active controller's broker id, -1 if none is known."""
    under_replicated: list[PartitionMetadata]
    """Partitions whose ISR is smaller than their replica list."""
    offline: list[PartitionMetadata]
    """Partitions without a leader (leader -1)."""


@dataclass(frozen=True, slots=True)
class EntityConfig:
    """One config entity's dynamic configs, as ZooKeeper holds them."""

    entity_type: str
    """``topics`` or ``brokers``."""
    entity: str
    """The topic, the broker id, or ``<default>`` (the cluster-wide broker defaults)."""
    overrides: dict[str, str]
    """The entity's own configs (``/config/topics/<t>``, ``/config/brokers/<entity>``)."""
    cluster_default: dict[str, str]
    """``/config/brokers/<default>``: the layer under a topic's or a broker's own configs."""


@dataclass(frozen=True, slots=True)
class ListOffsetsResult:
    """The answers of :meth:`AdminClient.list_offsets`."""

    offsets: dict[TopicPartition, int]
    errors: dict[TopicPartition, str]
    """Partitions without an answer, with the reason (no leader, unknown, ...)."""


@dataclass(frozen=True, slots=True)
class GroupMember:
    """A member of a Kafka client group, as its coordinator describes it."""

    member_id: str
    client_id: str
    host: str
    """The address its requests come from, as Kafka shows it (``/127.0.0.1``)."""
    partitions: tuple[TopicPartition, ...] | None
    """Its assignment; None where the coordinator could not decode it (another protocol)."""


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    """A Kafka client group as one broker's group coordinator holds it."""

    group_id: str
    state: str
    """Kafka's group states: Empty, PreparingRebalance, CompletingRebalance, Stable."""
    protocol_type: str
    protocol: str
    """The chosen protocol: for consumers, the assignor."""
    members: tuple[GroupMember, ...]
    """Empty for a group only listed (ListGroups)."""
    broker_id: int
    """The broker that holds it."""
    coordinator_id: int
    """The group's coordinator by that broker's metadata (-1: none)."""
    coordinator_address: str = ""
    """The coordinator's gRPC address, as the cluster metadata names it ("" unknown)."""

    @property
    def active(self) -> bool:
        """Whether it has members (Kafka's "inactive" is Empty or Dead)."""
        return self.state not in ("Empty", "Dead")


@dataclass(frozen=True, slots=True)
class BrokerGroups:
    """The Kafka client groups the live brokers hold."""

    groups: dict[str, list[ConsumerGroupDescription]]
    """Group id -> each broker's holding of it, its coordinator's first (more than one
    while the group's coordinator moves)."""
    errors: dict[int, str]
    """Brokers that did not answer, with the reason."""


class AdminClient(AsyncClosing):
    """Creates, lists, describes and deletes topics; describes the cluster.

    ``zookeeper_connect`` is ``host:port[,host:port...][/chroot]``, as the brokers'
    ``zookeeper.connect``. The connections are the caller's; the ZooKeeper session is the
    client's own and ends with :meth:`close` (or the ``async with`` block).
    """

    def __init__(
        self,
        connections: BrokerConnections,
        zookeeper_connect: str,
        *,
        zookeeper_timeout_ms: int = 10_000,
        wait_timeout_s: float = 30.0,
        zookeeper_credentials: ZkCredentials | None = None,
    ) -> None:
        """``zookeeper_credentials``: the brokers' digest, needed to write to a cluster whose
        znodes carry the secure ACL (``zookeeper.set.acl``)."""
        self.connections = connections
        self.zookeeper_credentials = zookeeper_credentials
        self.zookeeper_connect = zookeeper_connect.strip()
        self.zookeeper_timeout_ms = zookeeper_timeout_ms
        self.wait_timeout_s = wait_timeout_s
        """How long ``wait=True`` waits for leaders (create) or removal (delete)."""
        self._metadata = MetadataClient(connections)
        self._zk: KafkaZkClient | None = None
        self._zk_lock: asyncio.Lock | None = None

    async def close(self) -> None:
        """End the ZooKeeper session, if one was opened."""
        zk, self._zk = self._zk, None
        if zk is not None:
            await zk.close()

    # -- topics ----------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        config: Mapping[str, str] | None = None,
        wait: bool = True,
    ) -> dict[int, list[int]]:
        """Create ``name`` and return its replica assignment (partition -> replicas,
        preferred leader first). With ``wait``, return once every partition has a leader
        (ClientError after ``wait_timeout_s``: the topic exists then, leaderless).

        Raises ClientError for an illegal name, partitions or replication factor < 1, a
        replication factor above the number of live brokers, an unknown or malformed topic
        config, an existing topic (or one whose name differs only by '.' vs '_'), and an
        unreachable ZooKeeper. Cancelling it after the topic znode was written leaves the
        topic to be created by the controller.
        """
        _check_name(name)
        if partitions < 1:
            raise ClientError(f"number of partitions must be at least 1, got {partitions}")
        if replication_factor < 1:
            raise ClientError(f"replication factor must be at least 1, got {replication_factor}")
        overrides = dict(config or {})
        self._check_config(name, overrides)
        live = await self._live_brokers()
        if not live:
            raise ClientError(
                f"no live brokers registered in ZooKeeper at {self.zookeeper_connect}"
            )
        if replication_factor > len(live):
            raise ClientError(
                f"replication factor {replication_factor} larger than available brokers: "
                f"{len(live)}"
            )
        existing = await self._children(znodes.BROKER_TOPICS_PATH)
        if name in existing:
            if await self._exists(znodes.delete_topic_path(name)):
                raise ClientError(f"topic '{name}' is marked for deletion; wait until it is gone")
            raise ClientError(f"topic '{name}' already exists")
        # Kafka's rule: '.' and '_' collide in metric names, so "a.b" and "a_b" cannot both be.
        for other in existing:
            if other.replace(".", "_") == name.replace(".", "_"):
                raise ClientError(
                    f"topic '{name}' collides with existing topic '{other}' "
                    "(names that differ only in '.' and '_' are not allowed)"
                )
        # A topic too large for one znode is refused before it is placed (which takes
        # seconds for a million partitions) and before its config is written.
        try:
            check_assignment_floor(
                znodes.topic_path(name), partitions, replication_factor, JUTE_MAXBUFFER
            )
        except ZnodeTooLargeError as e:
            raise ClientError(str(e)) from None
        assignment = assign_replicas(partitions, replication_factor, live)
        if overrides:
            await self._create_or_set(
                znodes.topic_config_path(name), znodes.encode_topic_config(overrides)
            )
        try:
            await self._call(
                "create",
                znodes.topic_path(name),
                znodes.encode_topic_assignment(assignment),
                makepath=True,
            )
        except NodeExistsError:
            raise ClientError(f"topic '{name}' already exists") from None
        if wait:
            await self._wait_for_leaders(name, partitions)
        return assignment

    async def delete_topic(self, name: str, wait: bool = True) -> None:
        """Mark ``name`` for deletion; with ``wait``, return once the controller has removed
        it (ClientError after ``wait_timeout_s``). Raises ClientError for an unknown topic
        or an unreachable ZooKeeper. Marking a topic already marked is not an error."""
        _check_name(name)
        if not await self._exists(znodes.topic_path(name)):
            raise ClientError(f"unknown topic '{name}'")
        with contextlib.suppress(NodeExistsError):  # marked already: the same deletion
            await self._call("create", znodes.delete_topic_path(name), b"", makepath=True)
        if not wait:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_timeout_s
        while await self._exists(znodes.topic_path(name)):
            if loop.time() >= deadline:
                raise ClientError(
                    f"topic '{name}' is marked for deletion but still exists after "
                    f"{self.wait_timeout_s:g} s (is a controller running?)"
                )
            await asyncio.sleep(_POLL_S)

    async def create_partitions(
        self, name: str, total: int, wait: bool = True
    ) -> dict[int, list[int]]:
        """Grow ``name`` to ``total`` partitions (Kafka 2.x's ``AdminZkClient.addPartitions``)
        and return the new partitions' replicas; with ``wait``, return once each has a
        leader. The assignment is written with a conditional update, so a concurrent change
        of the topic is not overwritten.

        Raises ClientError for an unknown topic, a topic marked for deletion, ``total`` not
        above the current count (Kafka's INVALID_PARTITIONS message), too few live brokers
        for the topic's replication factor, and an unreachable ZooKeeper.
        """
        _check_name(name)
        live = await self._live_brokers()

        def grow(existing: dict[int, list[int]]) -> dict[int, list[int]]:
            factor = len(existing.get(0, ()))
            check_assignment_floor(znodes.topic_path(name), total, factor, JUTE_MAXBUFFER)
            return assign_new_partitions(name, existing, total, live)

        try:
            added = await self._guarded(
                f"add partitions to {name}",
                lambda zk: partition_admin.add_partitions(zk, name, grow, validate_only=False),
            )
        except (errors.BrokerResponseError, znodes.ZkDataError) as e:
            raise ClientError(_partition_problem(name, e)) from None
        if wait:
            await self._wait_for_leaders(name, total)
        return added

    async def topic_configs(self, names: Iterable[str]) -> dict[str, dict[str, str]]:
        """The overrides in ``/config/topics/<t>`` of each topic that has some."""
        found: dict[str, dict[str, str]] = {}
        for name in sorted(set(names)):
            config = await self._entity_overrides("topics", name)
            if config:
                found[name] = config
        return found

    # -- configs (kafka-configs) -----------------------------------------------------------

    async def describe_configs(self, entity_type: str, entity: str | None) -> list[EntityConfig]:
        """The dynamic configs of one entity, or of every entity of the type that has some
        (``entity`` None), as ``kafka-configs --describe`` lists them. Raises ClientError for
        an unknown entity type, an illegal name, an unknown topic."""
        _check_entity_type(entity_type)
        cluster_default = await self._entity_overrides("brokers", znodes.DEFAULT_BROKER_ENTITY)
        if entity is None:
            parent = (
                znodes.CONFIG_TOPICS_PATH
                if entity_type == "topics"
                else (znodes.CONFIG_BROKERS_PATH)
            )
            names = []
            for child in sorted(await self._children(parent)):
                try:
                    names.append(_entity_name(entity_type, child))
                except ClientError:
                    continue  # not ours to show (an illegal name written by hand)
        else:
            names = [_entity_name(entity_type, entity)]
            if entity_type == "topics" and not await self._exists(znodes.topic_path(entity)):
                raise ClientError(f"unknown topic '{entity}'")
        return [
            EntityConfig(
                entity_type,
                name,
                await self._entity_overrides(entity_type, name),
                cluster_default,
            )
            for name in names
        ]

    async def alter_configs(
        self,
        entity_type: str,
        entity: str,
        add: Mapping[str, str],
        delete: Iterable[str] = (),
    ) -> EntityConfig:
        """Set ``add`` and remove ``delete`` in the entity's dynamic configs, then notify the
        brokers (Kafka's ``AdminZkClient.changeConfigs``); return the new configs.

        Names and values are checked first with the brokers' own rules: topic configs as
        ``topics create --config`` checks them, broker configs must be dynamic (Kafka's
        "Cannot update these configs dynamically: ..."). Deleting a config that is not set
        is an error, as in Kafka ("Invalid config(s): ..."). The entity znode is written
        with a conditional update, so concurrent alters do not undo each other.
        """
        _check_entity_type(entity_type)
        name = _entity_name(entity_type, entity)
        removed = sorted({key.strip() for key in delete})
        both = sorted(set(add) & set(removed))
        if both:
            raise ClientError(f"cannot both add and delete config(s): {', '.join(both)}")
        if entity_type == "topics":
            if not await self._exists(znodes.topic_path(name)):
                raise ClientError(f"Topic '{name}' does not exist.")
            added = {key.strip(): value.strip() for key, value in add.items()}
            self._check_config(name, added)
            path = znodes.topic_config_path(name)
        else:
            try:
                added = check_dynamic_broker_config(
                    add, per_broker=name != znodes.DEFAULT_BROKER_ENTITY
                )
            except ValueError as e:
                raise ClientError(str(e)) from None
            path = znodes.broker_config_path(name)
        for _ in range(_CONDITIONAL_WRITE_ATTEMPTS):
            current, version = await self._read_overrides(path)
            missing = [key for key in removed if key not in current]
            if missing:
                raise ClientError(
                    f"Invalid config(s): {','.join(missing)} (not set on {entity_type} '{name}')"
                )
            updated = {k: v for k, v in {**current, **added}.items() if k not in removed}
            if entity_type == "topics":
                self._check_config(name, updated)  # Kafka checks the whole set
            data = znodes.encode_topic_config(updated)
            try:
                if version is None:
                    await self._call("create", path, data, makepath=True)
                else:
                    await self._call("set", path, data, version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another alter won: apply ours to its result
            break
        else:
            raise ClientError(f"the configs of {entity_type} '{name}' kept changing; retry")
        await self._call(
            "create",
            f"{znodes.CONFIG_CHANGES_PATH}/{znodes.CONFIG_CHANGE_PREFIX}",
            znodes.encode_config_change(znodes.encode_config_entity_path(entity_type, name)),
            sequence=True,
            makepath=True,
        )
        cluster_default = (
            updated
            if (entity_type, name) == ("brokers", znodes.DEFAULT_BROKER_ENTITY)
            else await self._entity_overrides("brokers", znodes.DEFAULT_BROKER_ENTITY)
        )
        return EntityConfig(entity_type, name, updated, cluster_default)

    async def _entity_overrides(self, entity_type: str, name: str) -> dict[str, str]:
        path = (
            znodes.topic_config_path(name)
            if entity_type == "topics"
            else znodes.broker_config_path(name)
        )
        return (await self._read_overrides(path))[0]

    async def _read_overrides(self, path: str) -> tuple[dict[str, str], int | None]:
        """An entity znode's configs and zkVersion; ``({}, None)`` when it does not exist."""
        try:
            data, stat = await self._call("get", path)
        except NoNodeError:
            return {}, None
        try:
            return znodes.decode_topic_config(data), int(stat.version)
        except znodes.ZkDataError as e:
            raise ClientError(f"znode {path} is malformed: {e}") from None

    # -- offsets ---------------------------------------------------------------------------

    async def list_offsets(
        self, tps: Iterable[TopicPartition], timestamp: int
    ) -> ListOffsetsResult:
        """Each partition's offset for ``timestamp`` (:data:`EARLIEST`: the log start offset,
        :data:`LATEST`: the high watermark, the end a consumer sees), asked of its leader
        (Kafka's ``AdminClient.listOffsets``). A partition without a live leader, or whose
        leader refuses or cannot be reached, is asked once more after a metadata refresh,
        then reported in ``errors`` with the reason."""
        offsets: dict[TopicPartition, int] = {}
        problems: dict[TopicPartition, str] = {}
        pending = sorted(set(tps))
        for _ in range(2):
            if not pending:
                break
            cluster = await self._metadata.refresh(sorted({tp.topic for tp in pending}))
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in pending:
                leader = cluster.leader_of(tp)
                if leader is None:
                    known = _known(cluster, tp.topic)
                    exists = known is not None and tp.partition in known.partitions
                    problems[tp] = "no leader" if exists else "unknown partition"
                else:
                    by_leader.setdefault(leader.node_id, []).append(tp)
            answers = await asyncio.gather(
                *(
                    self._list_offsets_of(cluster.brokers[b], parts, timestamp)
                    for b, parts in by_leader.items()
                )
            )
            for answer in answers:
                for tp, (offset, problem) in answer.items():
                    if problem is None:
                        offsets[tp] = offset
                        problems.pop(tp, None)
                    else:
                        problems[tp] = problem
            pending = sorted(problems)
        return ListOffsetsResult(offsets, problems)

    async def _list_offsets_of(
        self, leader: BrokerNode, tps: list[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, tuple[int, str | None]]:
        """One ListOffsets to ``leader``: (offset, None) or (-1, why) per partition."""
        request = pb.ListOffsetsRequest(replica_id=-1, isolation_level=0)
        for topic in sorted({tp.topic for tp in tps}):
            entry = request.topics.add(name=topic)
            for tp in tps:
                if tp.topic == topic:
                    entry.partitions.add(partition_index=tp.partition, timestamp=timestamp)
        stub = pb_grpc.BrokerStub(self.connections.channel(leader.address))
        try:
            response = await stub.ListOffsets(request, timeout=self.connections.request_timeout_s)
        except grpc.aio.AioRpcError as e:
            why = f"leader {leader.node_id} unreachable ({e.code().name.lower()})"
            return dict.fromkeys(tps, (-1, why))
        answer: dict[TopicPartition, tuple[int, str | None]] = {}
        for t in response.topics:
            for p in t.partitions:
                error = errors.for_code(p.error_code)
                answer[TopicPartition(t.name, p.partition_index)] = (
                    (p.offset, None) if error is None else (-1, str(error))
                )
        return answer

    # -- Kafka client groups (the brokers' group coordinators) -----------------------------

    async def list_consumer_groups(self) -> BrokerGroups:
        """Every group of Kafka clients that a live broker holds (ListGroups to each; the
        holdings have no members)."""

        async def ask(
            stub: pb_grpc.BrokerAsyncStub, broker_id: int
        ) -> list[ConsumerGroupDescription]:
            response = await stub.ListGroups(
                pb.ListGroupsRequest(), timeout=self.connections.request_timeout_s
            )
            return [
                ConsumerGroupDescription(
                    g.group_id, g.group_state, g.protocol_type, "", (), broker_id, g.coordinator_id
                )
                for g in response.groups
            ]

        return await self._every_broker(ask)

    async def describe_consumer_groups(self, group_ids: Iterable[str]) -> BrokerGroups:
        """The groups ``group_ids`` as every live broker holds them (DescribeGroups to each;
        a broker that does not hold one answers Dead, which is left out)."""
        wanted = sorted(set(group_ids))

        async def ask(
            stub: pb_grpc.BrokerAsyncStub, broker_id: int
        ) -> list[ConsumerGroupDescription]:
            response = await stub.DescribeGroups(
                pb.DescribeGroupsRequest(groups=wanted), timeout=self.connections.request_timeout_s
            )
            return [
                ConsumerGroupDescription(
                    g.group_id,
                    g.group_state,
                    g.protocol_type,
                    g.protocol_data,
                    tuple(_group_member(m) for m in g.members),
                    broker_id,
                    g.coordinator_id,
                )
                for g in response.groups
                if g.error_code == ErrorCode.NONE and g.group_state != "Dead"
            ]

        return await self._every_broker(ask)

    async def _every_broker(
        self,
        ask: Callable[[pb_grpc.BrokerAsyncStub, int], Awaitable[list[ConsumerGroupDescription]]],
    ) -> BrokerGroups:
        cluster = await self._metadata.refresh(None)
        brokers = [cluster.brokers[b] for b in sorted(cluster.brokers)]

        async def one(node: BrokerNode) -> list[ConsumerGroupDescription] | str:
            try:
                return await ask(
                    pb_grpc.BrokerStub(self.connections.channel(node.address)), node.node_id
                )
            except grpc.aio.AioRpcError as e:
                return f"broker {node.node_id} at {node.address}: {e.code().name.lower()}"

        groups: dict[str, list[ConsumerGroupDescription]] = {}
        failed: dict[int, str] = {}
        for node, answer in zip(
            brokers, await asyncio.gather(*(one(b) for b in brokers)), strict=True
        ):
            if isinstance(answer, str):
                failed[node.node_id] = answer
                continue
            for group in answer:
                coordinator = cluster.brokers.get(group.coordinator_id)
                if coordinator is not None:
                    group = dataclasses.replace(group, coordinator_address=coordinator.address)
                groups.setdefault(group.group_id, []).append(group)
        for held in groups.values():
            held.sort(key=lambda g: (g.broker_id != g.coordinator_id, g.broker_id))
        return BrokerGroups(groups, failed)

    async def at_group_coordinator(
        self,
        group: str,
        call: Callable[[pb_grpc.BrokerAsyncStub, float], Awaitable[_Answer]],
        error_of: Callable[[_Answer], int],
    ) -> _Answer:
        """``call`` at the group's coordinator, found as the first broker that answers
        DescribeGroups names it; asked again, up to :data:`COORDINATOR_ATTEMPTS`
        times, while the answer is NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE (the
        coordinator moved, or is busy deleting the group), as Kafka's admin client does."""
        timeout = self.connections.request_timeout_s
        why = "no attempt"
        for attempt in range(COORDINATOR_ATTEMPTS):
            if attempt:
                await asyncio.sleep(COORDINATOR_BACKOFF_S * attempt)
            node = await self._group_coordinator(group)
            stub = pb_grpc.BrokerStub(self.connections.channel(node.address))
            try:
                answer = await call(stub, timeout)
            except grpc.aio.AioRpcError as e:
                why = f"coordinator {node.node_id} at {node.address}: {e.code().name.lower()}"
                continue
            code = error_of(answer)
            if code not in (
                ErrorCode.NOT_COORDINATOR,
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            ):
                return answer
            why = f"coordinator {node.node_id} at {node.address}: {error_name(code)}"
        raise ClientError(f"cannot reach the coordinator of group '{group}': {why}")

    async def _group_coordinator(self, group: str) -> BrokerNode:
        """The group's coordinator, as the first broker that answers DescribeGroups names it."""
        cluster = await self.describe_cluster()
        by_id = {b.node_id: b for b in cluster.brokers}
        request = pb.DescribeGroupsRequest(groups=[group])
        why = "no live broker"
        for node in cluster.brokers:
            stub = pb_grpc.BrokerStub(self.connections.channel(node.address))
            try:
                response = await stub.DescribeGroups(
                    request, timeout=self.connections.request_timeout_s
                )
            except grpc.aio.AioRpcError as e:
                why = f"broker {node.node_id} at {node.address}: {e.code().name.lower()}"
                continue
            coordinator = by_id.get(response.groups[0].coordinator_id) if response.groups else None
            if coordinator is not None:
                return coordinator
            why = f"broker {node.node_id} names no coordinator"
        raise ClientError(f"cannot find the coordinator of group '{group}': {why}")

    async def fetch_group_offsets(self, group: str) -> pb.FetchGroupOffsetsResponse:
        """The group's committed offsets as its coordinator answers them (Kafka's admin
        ``listConsumerGroupOffsets``): ``__consumer_offsets``, then ZooKeeper for what the
        group never committed there."""
        request = pb.FetchGroupOffsetsRequest(group_id=group)
        return await self.at_group_coordinator(
            group,
            lambda stub, timeout: stub.FetchGroupOffsets(request, timeout=timeout),
            lambda r: r.error_code,
        )

    async def commit_group_offsets(
        self, group: str, offsets: Mapping[TopicPartition, int]
    ) -> pb.CommitGroupOffsetsResponse:
        """Commit ``offsets`` for a group without members (Kafka's admin
        ``alterConsumerGroupOffsets``), at its coordinator."""
        request = pb.CommitGroupOffsetsRequest(group_id=group)
        for tp, offset in sorted(offsets.items()):
            request.offsets.add(topic=tp.topic, partition=tp.partition, offset=offset)
        return await self.at_group_coordinator(
            group,
            lambda stub, timeout: stub.CommitGroupOffsets(request, timeout=timeout),
            lambda r: next((o.error_code for o in r.offsets), ErrorCode.NONE),
        )

    # -- ZooKeeper, for the tools built on this client (consumer groups) -------------------

    async def describe_client_quotas(
        self, components: Iterable[FilterComponent], strict: bool = False
    ) -> dict[QuotaEntity, dict[str, float]]:
        """The client quotas that match the filter: the Kafka listener's
        DescribeClientQuotas, the same code (:mod:`proto.zk.client_quota_admin`).
        ClientError for a filter Kafka refuses."""
        try:
            return await self._guarded(
                "describe client quotas",
                lambda zk: describe_client_quotas(zk, list(components), strict),
            )
        except QuotaRequestError as e:
            raise ClientError(str(e)) from None

    async def alter_client_quotas(
        self, alterations: Iterable[QuotaAlteration], validate_only: bool = False
    ) -> list[QuotaRequestError | None]:
        """Apply each alteration and notify the brokers: the Kafka listener's
        AlterClientQuotas, the same code; per alteration, None or Kafka's error."""
        return await self._guarded(
            "alter client quotas",
            lambda zk: alter_client_quotas(zk, list(alterations), validate_only),
        )

    async def alter_scram_credentials(
        self, alterations: Iterable[ScramAlteration]
    ) -> dict[str, ScramError | None]:
        """Set or delete users' SCRAM credentials and notify the brokers: the Kafka
        listener's AlterUserScramCredentials, the same code; per user None or its error."""
        return await self._guarded(
            "alter SCRAM credentials", lambda zk: alter_scram_credentials(zk, list(alterations))
        )

    async def describe_scram_credentials(
        self, users: Iterable[str] | None
    ) -> dict[str, list[tuple[int, int]] | ScramError]:
        """Per user its SCRAM credentials as (mechanism type, iterations), or its error
        (DescribeUserScramCredentials' answer); None: every user that has one."""
        wanted = None if users is None else list(users)
        return await self._guarded(
            "describe SCRAM credentials", lambda zk: describe_scram_credentials(zk, wanted)
        )

    async def zk_children(self, path: str) -> list[str]:
        """The children of ``path`` ([] if it does not exist)."""
        return await self._children(path)

    async def zk_get(self, path: str) -> bytes | None:
        """The data of ``path``, or None if it does not exist."""
        try:
            data, _ = await self._call("get", path)
        except NoNodeError:
            return None
        return bytes(data)

    async def zk_exists(self, path: str) -> bool:
        """Whether ``path`` exists."""
        return await self._exists(path)

    async def zk_write(self, path: str, data: bytes) -> None:
        """Set ``path`` to ``data``, creating it (and its parents) if needed."""
        await self._create_or_set(path, data)

    async def read_committed_offsets(
        self, group: str
    ) -> ReadBatch[TopicPartition, znodes.CommittedOffset]:
        """Every committed offset of ``group``, with its metadata string and commit time
        (:meth:`~proto.zk.kafka_zk_client.KafkaZkClient.read_committed_offsets`)."""
        return await self._guarded(
            f"read the offsets of {group}", lambda zk: zk.read_committed_offsets(group)
        )

    async def commit_consumer_offsets(
        self, group: str, offsets: Mapping[TopicPartition, int]
    ) -> None:
        """Write ``offsets`` as ``group``'s committed offsets
        (:meth:`~proto.zk.kafka_zk_client.KafkaZkClient.commit_consumer_offsets`)."""
        await self._guarded(
            f"commit the offsets of {group}", lambda zk: zk.commit_consumer_offsets(group, offsets)
        )

    async def list_topics(self) -> list[str]:
        """Every topic the brokers know, sorted."""
        cluster = await self._metadata.refresh(None)
        return sorted(name for name, t in cluster.topics.items() if t.error_code == ErrorCode.NONE)

    async def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicMetadata]:
        """Leader, replicas and ISR of each partition of ``names`` (None: every topic),
        sorted by topic name. Raises ClientError naming the topics no broker knows."""
        wanted = None if names is None else sorted(set(names))
        if wanted:
            for name in wanted:
                _check_name(name)
        cluster = await self._metadata.refresh(wanted or None)
        if wanted:
            unknown = [n for n in wanted if _known(cluster, n) is None]
            if len(unknown) == 1:
                raise ClientError(f"unknown topic '{unknown[0]}'")
            if unknown:
                raise ClientError("unknown topics " + ", ".join(f"'{n}'" for n in unknown))
        found = (_known(cluster, n) for n in (wanted or sorted(cluster.topics)))
        return [t for t in found if t is not None]

    async def describe_cluster(self) -> ClusterDescription:
        """Brokers, controller, under-replicated and offline partitions (from Metadata)."""
        cluster = await self._metadata.refresh(None)
        partitions = [
            p
            for name in sorted(cluster.topics)
            for p in cluster.partitions_of(name)
            if cluster.topics[name].error_code == ErrorCode.NONE
        ]
        return ClusterDescription(
            brokers=[cluster.brokers[b] for b in sorted(cluster.brokers)],
            controller_id=cluster.controller_id,
            under_replicated=[p for p in partitions if len(p.isr) < len(p.replicas)],
            offline=[p for p in partitions if p.leader < 0],
        )

    # -- helpers ---------------------------------------------------------------------------

    def _check_config(self, topic: str, overrides: Mapping[str, str]) -> None:
        """The brokers' own rules for topic configs (the check CreateTopics and AlterConfigs
        make): Kafka's names, valid values, nothing this broker cannot do."""
        for key, value in overrides.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ClientError(
                    f"invalid config for topic '{topic}': {key!r}={value!r} (strings expected)"
                )
        defaults = BrokerConfig(
            broker_id=0, zookeeper_connect=self.zookeeper_connect, log_dir=Path()
        )
        try:
            check_topic_config(overrides, defaults)
        except ValueError as e:
            raise ClientError(f"invalid config for topic '{topic}': {e}") from None

    async def _wait_for_leaders(self, name: str, partitions: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_timeout_s
        missing: list[int] = list(range(partitions))
        problem = ""
        while True:
            try:
                cluster = await self._metadata.refresh([name])
            except BrokerUnreachableError as e:
                problem = f": {e}"
            else:
                problem = ""
                topic = _known(cluster, name)
                have = topic.partitions if topic is not None else {}
                missing = [
                    p
                    for p in range(partitions)
                    if p not in have or have[p].leader < 0 or have[p].leader not in cluster.brokers
                ]
                if not missing:
                    return
            if loop.time() >= deadline:
                which = ", ".join(str(p) for p in missing)
                raise ClientError(
                    f"topic '{name}' was created, but partition(s) {which} have no leader after "
                    f"{self.wait_timeout_s:g} s (is a controller running?){problem}"
                )
            await asyncio.sleep(_POLL_S)

    async def _live_brokers(self) -> list[int]:
        return broker_ids(await self._children(znodes.BROKER_IDS_PATH))[0]

    async def _children(self, path: str) -> list[str]:
        try:
            children: list[str] = await self._call("get_children", path)
        except NoNodeError:
            return []
        return children

    async def _exists(self, path: str) -> bool:
        return await self._call("exists", path) is not None

    async def _create_or_set(self, path: str, data: bytes) -> None:
        try:
            await self._call("create", path, data, makepath=True)
        except NodeExistsError:
            await self._call("set", path, data)

    async def _call(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        """kazoo's ``<method>_async(path, ...)`` through the session (see :meth:`_guarded`)."""
        return await self._guarded(
            f"{method} {path}", lambda zk: zk.request(method, path, *args, **kwargs)
        )

    async def _guarded(self, what: str, operation: Callable[[KafkaZkClient], Awaitable[T]]) -> T:
        """``operation`` on the session (its requests resent after a connection loss),
        bounded by the ZooKeeper timeout. ZooKeeper's answers that the callers handle
        (NoNode, NodeExists, BadVersion) pass through; anything else becomes a ClientError
        naming ZooKeeper and ``what`` was done."""
        zk = await self._client()
        try:
            async with asyncio.timeout(self.zookeeper_timeout_ms / 1000):
                return await operation(zk)
        except (NoNodeError, NodeExistsError, BadVersionError):
            raise
        except ZnodeTooLargeError as e:
            raise ClientError(str(e)) from None
        except (KazooException, ZkError, TimeoutError) as e:
            raise ClientError(
                f"ZooKeeper at {self.zookeeper_connect} failed: {type(e).__name__} ({what})"
            ) from None

    async def _client(self) -> KafkaZkClient:
        if self._zk is not None:
            return self._zk
        if self._zk_lock is None:
            self._zk_lock = asyncio.Lock()
        async with self._zk_lock:
            if self._zk is None:
                self._zk = await self._connect()
        return self._zk

    async def _connect(self) -> KafkaZkClient:
        connect = self.zookeeper_connect
        try:
            zk = KafkaZkClient(
                connect,
                broker_id=-1,
                session_timeout_ms=self.zookeeper_timeout_ms,
                create_chroot=False,  # a missing chroot is no cluster at all: never make one
                credentials=self.zookeeper_credentials,
            )
        except ValueError as e:
            raise ClientError(f"bad ZooKeeper connect string {connect!r}: {e}") from None
        if await all_refused(zk.hosts):
            raise ClientError(
                f"cannot connect to ZooKeeper at {connect}: connection refused "
                "(is it running? check --zookeeper)"
            )
        try:
            await zk.start()
        except ZkNoChrootError:
            raise ClientError(
                f"ZooKeeper at {connect}: {zk.chroot} does not exist (no cluster there?)"
            ) from None
        except ZkConnectionError:
            raise ClientError(
                f"cannot connect to ZooKeeper at {connect} within "
                f"{self.zookeeper_timeout_ms} ms (is it running? check --zookeeper)"
            ) from None
        return zk


def _group_member(member: pb.DescribedGroupMember) -> GroupMember:
    partitions = tuple(TopicPartition(t.topic, p) for t in member.assignment for p in t.partitions)
    # An assignment that is there but decoded to nothing: the coordinator could not read it.
    unknown = member.member_assignment and not partitions
    return GroupMember(
        member.member_id, member.client_id, member.client_host, None if unknown else partitions
    )


def _check_entity_type(entity_type: str) -> None:
    if entity_type not in CONFIG_ENTITY_TYPES:
        raise ClientError(
            f"unknown entity type {entity_type!r} (expected {' or '.join(CONFIG_ENTITY_TYPES)})"
        )


def _entity_name(entity_type: str, entity: str) -> str:
    """A checked entity name: a legal topic name, or a broker id or ``<default>``."""
    if entity_type == "topics":
        _check_name(entity)
        return entity
    try:
        return znodes.encode_config_entity_path("brokers", entity).partition("/")[2]
    except ValueError:
        raise ClientError(
            "The entity name for brokers must be a valid integer broker id or "
            f"{znodes.DEFAULT_BROKER_ENTITY}, found: {entity}"
        ) from None


def _check_name(name: str) -> None:
    problem = topic_name_problem(name)
    if problem is not None:
        raise ClientError(problem)


def _known(cluster: ClusterMetadata, name: str) -> TopicMetadata | None:
    topic = cluster.topics.get(name)
    if topic is None or topic.error_code != ErrorCode.NONE:
        return None
    return topic


def _partition_problem(topic: str, error: Exception) -> str:
    """The CLI's one line for a refused ``topics alter --partitions``."""
    if isinstance(error, errors.UnknownTopicOrPartitionError):
        return f"unknown topic '{topic}'"
    if isinstance(error, errors.InvalidTopicError):
        return f"topic '{topic}' is marked for deletion"
    if isinstance(error, znodes.ZkDataError):
        return f"topic '{topic}' has a malformed assignment: {error}"
    return str(error)
