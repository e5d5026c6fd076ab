"""The typed reads and writes of Kafka's znodes over a session (Kafka's ``KafkaZkClient``
over its ``ZooKeeperClient``): partition states, broker registrations and committed consumer
offsets, each read by the rules of :mod:`proto.zk.znode_reads` (docs/zookeeper.md).

:class:`~proto.zk.session.ZooKeeperClient` is the session: connection, one retry loop,
standing watches. :class:`KafkaZkClient` adds what every asyncio user of the cluster's
znodes needs, the broker (``broker.zk_client``), the controller
(``controller.controller_zk``), a consumer group member (``client.group``) and the admin
client, each of which adds its own operations on top. The tools' synchronous counterpart,
with the same reads, is :mod:`proto.zk.sync_client`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    UnimplementedError,
)

from proto.topic_partition import TopicPartition
from proto.zk.multi_read import multi_read_async, multi_read_chunks
from proto.zk.session import ZooKeeperClient
from proto.zk.znode_reads import (
    ReadBatch,
    RegisteredBroker,
    ZnodeRead,
    broker_ids,
    cluster_id_read,
    committed_offset_read,
    consumer_offset_partitions,
    consumer_offset_read,
    consumer_offset_topics,
    partition_state_read,
    read_batch,
    registered_broker_read,
)
from proto.zk.znodes import (
    BROKER_IDS_PATH,
    CLUSTER_ID_PATH,
    CONSUMERS_PATH,
    CommittedOffset,
    PartitionState,
    PartitionStateData,
    consumer_group_path,
    consumer_ids_path,
    consumer_offset_path,
    consumer_offsets_path,
    encode_cluster_id,
    encode_consumer_offset,
    encode_partition_state,
    new_cluster_id,
    partition_state_path,
)

__all__ = ["KafkaZkClient"]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


class KafkaZkClient(ZooKeeperClient):
    """A ZooKeeper session with typed reads and writes of the cluster's znodes."""

    _multi_read: bool = True
    """False once the server answered that it has no multiRead (ZooKeeper < 3.6)."""

    async def read_data(self, what: str, paths: Sequence[str]) -> list[Any]:
        """What ``get_async`` answers for each of ``paths``, in order: ``(data, stat)`` or
        the ZooKeeper error (NoNodeError, ...). Many paths go as multiReads of
        :data:`MULTI_READ_MAX_PATHS` each (:mod:`proto.zk.multi_read`); one path, or a
        server without multiRead, one ``getData`` each, pipelined."""
        if len(paths) > 1 and self._multi_read:
            chunks = multi_read_chunks(paths)
            outcomes = await self._pipeline(
                what, [partial(multi_read_async, paths=chunk) for chunk in chunks]
            )
            if all(
                isinstance(o, list) and len(o) == len(c)
                for o, c in zip(outcomes, chunks, strict=True)
            ):
                return [answer for outcome in outcomes for answer in outcome]
            if any(isinstance(o, UnimplementedError) for o in outcomes):
                self._multi_read = False
                self._log(logging.INFO, "multi_read_unsupported", what=what)
            # Any other refusal of a whole multiRead: the reads one by one say what it was.
        return await self._pipeline(what, [_get(path) for path in paths])

    async def read_znode(self, read: ZnodeRead[T]) -> T | None:
        """One typed znode (None if absent); ZkDataError naming it if malformed."""
        [answer] = await self._pipeline(f"get {read.path}", [_get(read.path)])
        return read.value(answer)

    async def read_znodes(
        self, what: str, reads: Mapping[K, ZnodeRead[V]], ignored: Iterable[str] = ()
    ) -> ReadBatch[K, V]:
        """Many typed znodes in one pipeline (one round trip); ``ignored`` is carried into
        the batch (what a listing left out)."""
        answers = await self.read_data(what, [read.path for read in reads.values()])
        return read_batch(reads, answers, ignored)

    async def get_data_or_none(self, path: str) -> bytes | None:
        """The data of ``path``, None if it does not exist."""
        [answer] = await self._pipeline(f"get {path}", [_get(path)])
        if isinstance(answer, NoNodeError):
            return None
        if isinstance(answer, BaseException):
            raise answer
        return bytes(answer[0])

    async def _children_or_none(self, path: str) -> list[str] | None:
        [answer] = await self._pipeline(f"get_children {path}", [_get_children(path)])
        if isinstance(answer, NoNodeError):
            return None
        if isinstance(answer, BaseException):
            raise answer
        return list(answer)

    async def read_partition_state(self, tp: TopicPartition) -> PartitionState | None:
        """The partition's state znode with its version, or None if it does not exist;
        ZkDataError if malformed."""
        return await self.read_znode(partition_state_read(tp))

    async def read_partition_states(
        self, tps: Iterable[TopicPartition]
    ) -> ReadBatch[TopicPartition, PartitionState]:
        """The state znodes of ``tps`` with their versions, pipelined."""
        reads = {tp: partition_state_read(tp) for tp in sorted(set(tps))}
        return await self.read_znodes("get partition states", reads)

    async def read_registered_brokers(self) -> ReadBatch[int, RegisteredBroker]:
        """Every ``/brokers/ids/<id>`` with its broker epoch; a broker that deregisters
        while being read is left out, a child that is not an id is ignored."""
        children = await self._children_or_none(BROKER_IDS_PATH)
        ids, ignored = broker_ids(children or [])
        reads = {broker_id: registered_broker_read(broker_id) for broker_id in ids}
        return await self.read_znodes("get broker registrations", reads, ignored)

    async def read_registered_broker(self, broker_id: int) -> RegisteredBroker | None:
        """``/brokers/ids/<id>``, or None if that broker is not registered."""
        return await self.read_znode(registered_broker_read(broker_id))

    async def read_cluster_id(self) -> str | None:
        """``/cluster/id``, or None before any broker made it; ZkDataError if malformed."""
        return await self.read_znode(cluster_id_read())

    async def get_or_create_cluster_id(self) -> str:
        """The cluster's id, made now if no broker made it before (Kafka's
        ``KafkaServer.getOrGenerateClusterId``): brokers starting together race to create
        ``/cluster/id`` and the losers read the winner's."""
        existing = await self.read_cluster_id()
        if existing is not None:
            return existing
        proposed = new_cluster_id()
        try:
            await self.request(
                "create", CLUSTER_ID_PATH, encode_cluster_id(proposed), makepath=True
            )
        except NodeExistsError:
            winner = await self.read_cluster_id()
            if winner is None:  # created and deleted meanwhile: only a person does that
                raise
            return winner
        self._log(logging.INFO, "cluster_id_created", path=CLUSTER_ID_PATH, cluster_id=proposed)
        return proposed

    async def _offset_partitions(self, group: str) -> tuple[list[TopicPartition], list[str]]:
        """Every partition ``group`` has an offset znode for, and the children ignored."""
        topics, ignored = consumer_offset_topics(
            group, await self._children_or_none(consumer_offsets_path(group)) or []
        )
        listings = await self._pipeline(
            f"list offsets of {group}",
            [_get_children(consumer_offsets_path(group, topic)) for topic in topics],
        )
        found: list[TopicPartition] = []
        for topic, listing in zip(topics, listings, strict=True):
            if isinstance(listing, NoNodeError):
                continue
            if isinstance(listing, BaseException):
                raise listing
            partitions, skipped = consumer_offset_partitions(group, topic, listing)
            found += partitions
            ignored += skipped
        return found, ignored

    async def read_consumer_offsets(
        self, group: str, tps: Iterable[TopicPartition] | None = None
    ) -> ReadBatch[TopicPartition, int]:
        """The group's committed offsets of ``tps`` (None: of every partition it has an
        offset znode for), pipelined. Malformed ones are in the batch's ``malformed``: see
        :func:`~proto.zk.znode_reads.consumer_offset_read` for what a reader does then.
        ValueError for a group or topic name that cannot be a znode."""
        ignored: list[str] = []
        if tps is None:
            tps, ignored = await self._offset_partitions(group)
        reads = {tp: consumer_offset_read(group, tp) for tp in sorted(set(tps))}
        return await self.read_znodes(f"fetch offsets of {group}", reads, ignored)

    async def read_committed_offsets(
        self, group: str, tps: Iterable[TopicPartition] | None = None
    ) -> ReadBatch[TopicPartition, CommittedOffset]:
        """:meth:`read_consumer_offsets` with each commit's metadata string and time."""
        ignored: list[str] = []
        if tps is None:
            tps, ignored = await self._offset_partitions(group)
        reads = {tp: committed_offset_read(group, tp) for tp in sorted(set(tps))}
        return await self.read_znodes(f"fetch offsets of {group}", reads, ignored)

    async def commit_consumer_offsets(
        self,
        group: str,
        offsets: Mapping[TopicPartition, int],
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> None:
        """Write each offset (with its metadata string from ``metadata``, if any) to
        ``/consumers/<g>/offsets/<t>/<p>`` whatever its version, creating a znode (and its
        parents) never written before. The writes are pipelined in partition order; writing
        never reads, so it also repairs a malformed offset. Cancelling it may leave some
        offsets written and others not. ValueError for a negative offset or a group or
        topic name that cannot be a znode."""
        notes = metadata or {}
        data = {
            tp: encode_consumer_offset(offsets[tp], notes.get(tp, "")) for tp in sorted(offsets)
        }
        paths = {tp: consumer_offset_path(group, tp) for tp in data}
        results = await self._pipeline(
            f"commit offsets of {group}", [_set(paths[tp], data[tp]) for tp in data]
        )
        for tp, result in zip(data, results, strict=True):
            if isinstance(result, NoNodeError):
                try:
                    await self.request("create", paths[tp], data[tp], makepath=True)
                except NodeExistsError:
                    await self.request("set", paths[tp], data[tp])
            elif isinstance(result, BaseException):
                raise result

    async def consumer_groups(self) -> list[str]:
        """The children of ``/consumers`` (unchecked names: hostile until checked)."""
        return sorted(await self._children_or_none(CONSUMERS_PATH) or [])

    async def consumer_group_members(self, group: str) -> list[str] | None:
        """The live members of a ZooKeeper group (``/consumers/<g>/ids``), None if the group
        has no ``ids`` znode (no ZooKeeper consumer ever joined it)."""
        ids = await self._children_or_none(consumer_ids_path(group))
        return None if ids is None else sorted(ids)

    async def delete_consumer_offsets(self, group: str, tps: Iterable[TopicPartition]) -> None:
        """Delete the group's offset znodes of ``tps`` (absent ones are fine), then the
        topic znodes left without partitions."""
        wanted = sorted(set(tps))
        results = await self._pipeline(
            f"delete offsets of {group}",
            [_delete(consumer_offset_path(group, tp)) for tp in wanted],
        )
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, NoNodeError):
                raise result
        topics = sorted({tp.topic for tp in wanted})
        emptied = await self._pipeline(
            f"delete emptied offset topics of {group}",
            [_delete(consumer_offsets_path(group, t)) for t in topics],
        )
        for result in emptied:
            # NotEmpty: the topic has other partitions' offsets; NoNode: already gone.
            if isinstance(result, BaseException) and not isinstance(
                result, NoNodeError | NotEmptyError
            ):
                raise result

    async def delete_consumer_group(self, group: str) -> bool:
        """Delete ``/consumers/<g>`` and everything under it; False if it did not exist.
        A znode created under it meanwhile (a commit racing the deletion) makes the
        deletion fail with NotEmptyError rather than lose that commit silently."""
        root = consumer_group_path(group)
        tree = [root]
        level = [root]
        while level:
            listings = await self._pipeline(f"list {root}", [_get_children(path) for path in level])
            below = []
            for path, listing in zip(level, listings, strict=True):
                if isinstance(listing, NoNodeError):
                    continue
                if isinstance(listing, BaseException):
                    raise listing
                below += [f"{path}/{child}" for child in listing]
            tree += below
            level = below
        results = await self._pipeline(f"delete {root}", [_delete(p) for p in reversed(tree)])
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, NoNodeError):
                raise result
        return not isinstance(results[-1], NoNodeError)

    async def create_partition_state(
        self, tp: TopicPartition, state: PartitionStateData
    ) -> int | None:
        """Create the state znode (and its parents); return its version (0), or None if it
        already exists. For tests: the controller creates states with fenced multi-ops
        (``controller.controller_zk``), a broker only updates them."""
        path = partition_state_path(tp)
        data = encode_partition_state(state)
        try:
            _, stat = await self._call(
                "create",
                path,
                lambda c: c.create_async(path, data, makepath=True, include_data=True),
            )
        except NodeExistsError:
            return None
        self._log(logging.INFO, "partition_state_created", path=path)
        return int(stat.version)

    async def update_partition_state_conditionally(
        self,
        tp: TopicPartition,
        new_state: PartitionStateData | PartitionState,
        expected_version: int,
    ) -> int | None:
        """Write ``new_state`` only if the znode is still at ``expected_version``; return the
        new version, or None if it moved on (or no longer exists). On None the caller must
        re-read and must not overwrite: another writer (the controller) won.

        When the znode already holds exactly ``new_state``, e.g. our own write whose reply
        was lost to a connection loss, that counts as success and its version is returned
        (Kafka's ``ReplicationUtils.checkLeaderAndIsrZkData``). A PartitionState may be
        passed as ``new_state``; its ``zk_version`` is ignored.
        """
        if isinstance(new_state, PartitionState):
            new_state = new_state.data  # its zk_version is ignored: expected_version rules
        path = partition_state_path(tp)
        data = encode_partition_state(new_state)
        try:
            stat = await self._call(
                "set", path, lambda c: c.set_async(path, data, expected_version)
            )
        except NoNodeError:
            self._log(logging.WARNING, "partition_state_missing", path=path)
            return None
        except BadVersionError:
            current = await self.read_partition_state(tp)
            if current is not None and current.data == new_state:
                self._log(
                    logging.INFO,
                    "partition_state_already_written",
                    path=path,
                    version=current.zk_version,
                )
                return current.zk_version
            self._log(
                logging.INFO,
                "partition_state_update_rejected",
                path=path,
                expected_version=expected_version,
                actual_version=None if current is None else current.zk_version,
            )
            return None
        self._log(
            logging.INFO,
            "partition_state_updated",
            path=path,
            version=stat.version,
            leader=new_state.leader,
            leader_epoch=new_state.leader_epoch,
            isr=",".join(map(str, new_state.isr)),
        )
        return int(stat.version)


def _get(path: str) -> Callable[[Any], Any]:
    return lambda client: client.get_async(path)


def _get_children(path: str) -> Callable[[Any], Any]:
    return lambda client: client.get_children_async(path)


def _delete(path: str) -> Callable[[Any], Any]:
    return lambda client: client.delete_async(path)


def _set(path: str, data: bytes) -> Callable[[Any], Any]:
    """Set ``path`` to ``data`` whatever its version."""
    return lambda client: client.set_async(path, data)
