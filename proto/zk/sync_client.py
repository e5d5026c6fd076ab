"""ZooKeeper for the synchronous tools (chaos, deploy, bench, the tests' helpers): a started
kazoo client from a connect string, and the typed reads of partition states, broker
registrations and consumer offsets over any kazoo client (and the state writes of the
scripted controller).

The broker, controller and client use the asyncio session
(:class:`proto.zk.kafka_zk_client.KafkaZkClient`) instead; both hand their ``get`` answers to the
same rules (:mod:`proto.zk.znode_reads`), so a tool reads a znode exactly as a broker does.
Reads of many znodes are sent back to back (kazoo's ``*_async``) and then awaited: one
round trip, as the session's pipeline. There is no retry after a connection loss here: the
error is raised, as every plain kazoo call of a tool raises it.

Example usage::

    with kazoo_client(connect) as zk:
        state = read_partition_state(zk, TopicPartition("orders", 0))
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError, UnimplementedError

from proto.topic_partition import TopicPartition
from proto.zk.credentials import SECURE_ACL, ZkCredentials
from proto.zk.multi_read import multi_read_async, multi_read_chunks
from proto.zk.session import ZkConnectionError, stop_kazoo
from proto.zk.znode_limits import SizeCheckedKazooClient
from proto.zk.znode_reads import (
    GetAnswer,
    ReadBatch,
    RegisteredBroker,
    ZnodeRead,
    broker_ids,
    cluster_id_read,
    consumer_offset_partitions,
    consumer_offset_read,
    consumer_offset_topics,
    partition_state_read,
    read_batch,
    registered_broker_read,
)
from proto.zk.znodes import (
    BROKER_IDS_PATH,
    PartitionState,
    PartitionStateData,
    consumer_offsets_path,
    encode_partition_state,
    partition_state_path,
)

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "create_partition_state",
    "kazoo_client",
    "read_cluster_id",
    "read_consumer_offset",
    "read_consumer_offsets",
    "read_partition_state",
    "read_partition_states",
    "read_registered_broker",
    "read_registered_brokers",
    "read_znode",
    "read_znodes",
    "set_partition_state",
    "start_kazoo_client",
    "stop_kazoo_client",
]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")

DEFAULT_TIMEOUT_S = 10.0
"""kazoo's own default session timeout, and how long a tool waits to connect."""


def start_kazoo_client(
    connect: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    connect_timeout_s: float | None = None,
    credentials: ZkCredentials | None = None,
) -> KazooClient:
    """A kazoo client connected to ``connect`` (``host:port[,...][/chroot]``); the caller
    stops and closes it (or use :func:`kazoo_client`).

    ``timeout_s`` is the session timeout; ``connect_timeout_s`` (default: the same) how
    long to wait for the connection, after which ZkConnectionError is raised and nothing
    is left running. ``credentials`` authenticate the session with their digest and, with
    ``set_acl``, give the znodes it creates the secure ACL, as a broker's session does.
    """
    client = SizeCheckedKazooClient(
        hosts=connect,
        timeout=timeout_s,
        auth_data=None if credentials is None else credentials.auth_data,
        default_acl=SECURE_ACL if credentials is not None and credentials.set_acl else None,
    )
    wait_s = timeout_s if connect_timeout_s is None else connect_timeout_s
    try:
        client.start(timeout=wait_s)
    except Exception as e:  # kazoo raises its handler's timeout type, not a stdlib one
        with contextlib.suppress(Exception):
            stop_kazoo(client)
        raise ZkConnectionError(
            f"cannot connect to ZooKeeper at {connect} within {wait_s:g} s: {e}"
        ) from None
    return client


def stop_kazoo_client(client: KazooClient) -> None:
    """Close the session (its ephemerals go at once) and release kazoo's threads."""
    stop_kazoo(client)


@contextlib.contextmanager
def kazoo_client(
    connect: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    connect_timeout_s: float | None = None,
    credentials: ZkCredentials | None = None,
) -> Iterator[KazooClient]:
    """:func:`start_kazoo_client`, stopped and closed when the block ends."""
    client = start_kazoo_client(
        connect, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s, credentials=credentials
    )
    try:
        yield client
    finally:
        stop_kazoo_client(client)


# -- typed reads -------------------------------------------------------------------------------


def read_znode(zk: KazooClient, read: ZnodeRead[T]) -> T | None:
    """One typed znode (None if absent); ZkDataError naming it if malformed."""
    [answer] = _get_all(zk, [read.path])
    return read.value(answer)


def read_znodes(
    zk: KazooClient, reads: Mapping[K, ZnodeRead[V]], ignored: Iterable[str] = ()
) -> ReadBatch[K, V]:
    """Many typed znodes, sent back to back."""
    return read_batch(reads, _get_all(zk, [read.path for read in reads.values()]), ignored)


def read_partition_state(zk: KazooClient, tp: TopicPartition) -> PartitionState | None:
    """The partition's state znode with its version, or None while it has none;
    ZkDataError if malformed."""
    return read_znode(zk, partition_state_read(tp))


def read_partition_states(
    zk: KazooClient, tps: Iterable[TopicPartition]
) -> ReadBatch[TopicPartition, PartitionState]:
    """The state znodes of ``tps`` with their versions."""
    return read_znodes(zk, {tp: partition_state_read(tp) for tp in sorted(set(tps))})


def read_registered_brokers(zk: KazooClient) -> ReadBatch[int, RegisteredBroker]:
    """Every ``/brokers/ids/<id>`` with its broker epoch; a broker that deregisters while
    being read is left out, a child that is not an id is ignored."""
    ids, ignored = broker_ids(_children_or_empty(zk, BROKER_IDS_PATH))
    return read_znodes(zk, {i: registered_broker_read(i) for i in ids}, ignored)


def read_registered_broker(zk: KazooClient, broker_id: int) -> RegisteredBroker | None:
    """``/brokers/ids/<id>``, or None if that broker is not registered."""
    return read_znode(zk, registered_broker_read(broker_id))


def read_cluster_id(zk: KazooClient) -> str | None:
    """``/cluster/id``, or None before any broker made it."""
    return read_znode(zk, cluster_id_read())


def read_consumer_offsets(
    zk: KazooClient, group: str, tps: Iterable[TopicPartition] | None = None
) -> ReadBatch[TopicPartition, int]:
    """The group's committed offsets of ``tps`` (None: of every partition it has an offset
    znode for); malformed ones are in the batch's ``malformed`` (see
    :func:`~proto.zk.znode_reads.consumer_offset_read`)."""
    ignored: list[str] = []
    if tps is None:
        topics, ignored = consumer_offset_topics(
            group, _children_or_empty(zk, consumer_offsets_path(group))
        )
        found: list[TopicPartition] = []
        for topic in topics:
            partitions, skipped = consumer_offset_partitions(
                group, topic, _children_or_empty(zk, consumer_offsets_path(group, topic))
            )
            found += partitions
            ignored += skipped
        tps = found
    reads = {tp: consumer_offset_read(group, tp) for tp in sorted(set(tps))}
    return read_znodes(zk, reads, ignored)


def read_consumer_offset(zk: KazooClient, group: str, tp: TopicPartition) -> int | None:
    """The group's committed offset of ``tp``, None if it has none; ZkDataError naming the
    znode if it is malformed (never None: see
    :func:`~proto.zk.znode_reads.consumer_offset_read`)."""
    return read_znode(zk, consumer_offset_read(group, tp))


# -- typed writes ------------------------------------------------------------------------------


def create_partition_state(zk: KazooClient, tp: TopicPartition, state: PartitionStateData) -> None:
    """Create the partition's state znode (and its parents); kazoo's NodeExistsError if it
    exists."""
    zk.create(partition_state_path(tp), encode_partition_state(state), makepath=True)


def set_partition_state(
    zk: KazooClient, tp: TopicPartition, state: PartitionStateData, expected_version: int
) -> int:
    """Write the state znode if it is still at ``expected_version`` (-1: whatever its
    version); its new version. kazoo's BadVersionError if it moved on (re-read and decide
    again)."""
    stat = zk.set(partition_state_path(tp), encode_partition_state(state), expected_version)
    return int(stat.version)


# -- internals ---------------------------------------------------------------------------------


def _get_all(zk: KazooClient, paths: Sequence[str]) -> list[GetAnswer]:
    """Each path's ``get`` answer, as multiReads of many paths when there are several
    (:mod:`proto.zk.multi_read`), else the requests sent back to back before any is awaited;
    ZooKeeper's error answers (NoNode, ...) are returned as exceptions."""
    if len(paths) > 1:
        chunks = multi_read_chunks(paths)
        batched: list[GetAnswer] = []
        try:
            for result in [multi_read_async(zk, chunk) for chunk in chunks]:
                batched.extend(result.get())
        except UnimplementedError:
            pass  # ZooKeeper < 3.6: one read per path below
        else:
            return batched
    pending = [zk.get_async(path) for path in paths]
    answers: list[GetAnswer] = []
    for result in pending:
        try:
            answers.append(result.get())
        except KazooException as e:
            answers.append(e)
    return answers


def _children_or_empty(zk: KazooClient, path: str) -> list[str]:
    try:
        children: list[Any] = zk.get_children(path)
    except NoNodeError:
        return []
    return [str(child) for child in children]
