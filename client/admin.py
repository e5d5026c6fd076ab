"""Topic and cluster administration (Kafka's ``kafka-topics.sh --zookeeper`` and ``AdminZkClient``).

Creating and deleting topics is done the way Kafka's ZooKeeper-era tools did it: the
admin client writes znodes and the controller does the rest (DESIGN.md §4, §6).

- create: ``/config/topics/<t>`` (the overrides, if any) and then ``/brokers/topics/<t>``
  with the replica assignment of :func:`controller.replica_assignment.assign_replicas` over
  the live brokers of ``/brokers/ids``; the controller sees the new topic, writes each
  partition's state znode and sends LeaderAndIsr. With ``wait``, the client then polls
  Metadata until every partition has a leader.
- delete: ``/admin/delete_topics/<t>``; the controller stops the replicas, deletes the logs
  and removes the topic's znodes. With ``wait``, the client waits for
  ``/brokers/topics/<t>`` to disappear.

Reading (list, describe, cluster state) asks the brokers' Metadata instead, so it needs
no ZooKeeper: the ZooKeeper session is opened on the first write only.

ZooKeeper calls go through kazoo's asynchronous API bridged onto the event loop
(:func:`broker.zk_async.bridge`), and its only blocking calls, connect and close, run in an
executor, so the event loop never blocks on ZooKeeper.

Every mistake a user can make (bad name, too few brokers, existing or unknown topic,
unreachable ZooKeeper) is a :class:`~client.metadata.ClientError` whose message is one line
for the CLI.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.retry import KazooRetry

from broker import zk_data
from broker.config import BrokerConfig, split_zookeeper_connect
from broker.topic_partition import topic_name_problem
from broker.zk_async import bridge, start_kazoo, stop_kazoo
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
from controller.replica_assignment import assign_replicas
from proto.minibroker_pb2 import ErrorCode

__all__ = ["AdminClient", "ClusterDescription"]

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
    ) -> None:
        self.connections = connections
        self.zookeeper_connect = zookeeper_connect.strip()
        self.zookeeper_timeout_ms = zookeeper_timeout_ms
        self.wait_timeout_s = wait_timeout_s
        """How long ``wait=True`` waits for leaders (create) or removal (delete)."""
        self._metadata = MetadataClient(connections)
        self._zk: Any = None
        self._zk_lock: asyncio.Lock | None = None

    async def close(self) -> None:
        """End the ZooKeeper session, if one was opened."""
        client, self._zk = self._zk, None
        if client is not None:
            await asyncio.get_running_loop().run_in_executor(None, stop_kazoo, client)

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
        existing = await self._children(zk_data.BROKER_TOPICS_PATH)
        if name in existing:
            if await self._exists(zk_data.delete_topic_path(name)):
                raise ClientError(f"topic '{name}' is marked for deletion; wait until it is gone")
            raise ClientError(f"topic '{name}' already exists")
        # Kafka's rule: '.' and '_' collide in metric names, so "a.b" and "a_b" cannot both be.
        for other in existing:
            if other.replace(".", "_") == name.replace(".", "_"):
                raise ClientError(
                    f"topic '{name}' collides with existing topic '{other}' "
                    "(names that differ only in '.' and '_' are not allowed)"
                )
        assignment = assign_replicas(partitions, replication_factor, live)
        if overrides:
            await self._create_or_set(
                zk_data.topic_config_path(name), zk_data.encode_topic_config(overrides)
            )
        try:
            await self._call(
                "create",
                zk_data.topic_path(name),
                zk_data.encode_topic_assignment(assignment),
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
        if not await self._exists(zk_data.topic_path(name)):
            raise ClientError(f"unknown topic '{name}'")
        with contextlib.suppress(NodeExistsError):  # marked already: the same deletion
            await self._call("create", zk_data.delete_topic_path(name), b"", makepath=True)
        if not wait:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_timeout_s
        while await self._exists(zk_data.topic_path(name)):
            if loop.time() >= deadline:
                raise ClientError(
                    f"topic '{name}' is marked for deletion but still exists after "
                    f"{self.wait_timeout_s:g} s (is a controller running?)"
                )
            await asyncio.sleep(_POLL_S)

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
        """The broker's own rules for topic configs: known names, valid values."""
        for key, value in overrides.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ClientError(
                    f"invalid config for topic '{topic}': {key!r}={value!r} (strings expected)"
                )
        defaults = BrokerConfig(
            broker_id=0, zookeeper_connect=self.zookeeper_connect, log_dir=Path()
        )
        try:
            defaults.topic_config(overrides, strict=True)
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
        return sorted(int(c) for c in await self._children(zk_data.BROKER_IDS_PATH) if c.isdigit())

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

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``client.<method>_async(...)`` awaited on the loop; NoNode/NodeExists pass
        through, a lost connection becomes a ClientError naming ZooKeeper."""
        client = await self._client()
        loop = asyncio.get_running_loop()
        try:
            result = getattr(client, f"{method}_async")(*args, **kwargs)
            return await asyncio.wait_for(bridge(loop, result), self.zookeeper_timeout_ms / 1000)
        except (NoNodeError, NodeExistsError):
            raise
        except (KazooException, TimeoutError) as e:
            raise ClientError(
                f"ZooKeeper at {self.zookeeper_connect} failed: {type(e).__name__} "
                f"({method} {args[0] if args else ''})"
            ) from None

    async def _client(self) -> Any:
        if self._zk is not None:
            return self._zk
        if self._zk_lock is None:
            self._zk_lock = asyncio.Lock()
        async with self._zk_lock:
            if self._zk is None:
                self._zk = await self._connect()
        return self._zk

    async def _connect(self) -> Any:
        connect = self.zookeeper_connect
        try:
            _, chroot = split_zookeeper_connect(connect)
        except ValueError as e:
            raise ClientError(f"bad ZooKeeper connect string {connect!r}: {e}") from None
        timeout_s = self.zookeeper_timeout_ms / 1000
        client = KazooClient(
            hosts=connect,
            timeout=timeout_s,
            connection_retry=KazooRetry(max_tries=-1, max_delay=1.0),
        )
        loop = asyncio.get_running_loop()
        connected = False
        try:
            connected = await loop.run_in_executor(None, start_kazoo, client, timeout_s)
            if connected and chroot is not None:
                # kazoo resolves "/" inside the chroot: a missing chroot is no cluster at all.
                found = await asyncio.wait_for(bridge(loop, client.exists_async("/")), timeout_s)
                if found is None:
                    await asyncio.shield(loop.run_in_executor(None, stop_kazoo, client))
                    raise ClientError(
                        f"ZooKeeper at {connect}: {chroot} does not exist (no cluster there?)"
                    )
        finally:
            if not connected:
                await asyncio.shield(loop.run_in_executor(None, stop_kazoo, client))
        if not connected:
            raise ClientError(
                f"cannot connect to ZooKeeper at {connect} within "
                f"{self.zookeeper_timeout_ms} ms (is it running? check --zookeeper)"
            )
        return client


def _check_name(name: str) -> None:
    problem = topic_name_problem(name)
    if problem is not None:
        raise ClientError(problem)


def _known(cluster: ClusterMetadata, name: str) -> TopicMetadata | None:
    topic = cluster.topics.get(name)
    if topic is None or topic.error_code != ErrorCode.NONE:
        return None
    return topic
