"""Probes of a running cluster through ZooKeeper, the brokers and their data dirs, shared by
the tests, the benchmarks and chaos (the harness, docs/design.md): create a topic as an
admin client does, tell whether the leader a partition's state znode names has taken over,
read what a replica holds on disk, and poll for a condition with a deadline. A partition's
state itself is read with :func:`proto.zk.sync_client.read_partition_state`.

Example usage::

    create_topic(zk, "orders", {0: [1, 2, 3]})
    while leader_serving(zk, TopicPartition("orders", 0), {1: "127.0.0.1:9091", ...}) is None:
        time.sleep(0.05)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import grpc
from kazoo.client import KazooClient

from broker.log.checkpoints import REPLICATION_OFFSET_CHECKPOINT, OffsetCheckpointFile
from proto.records.record_batch import decode_batch, scan_batches
from proto.topic_partition import TopicPartition
from proto.transport.tls import TlsConfig, sync_channel
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.zk import znodes
from proto.zk.sync_client import read_partition_state, read_partition_states

__all__ = [
    "checkpointed_high_watermark",
    "create_topic",
    "leader_serving",
    "partition_states",
    "replica_records",
    "wait_until",
]

T = TypeVar("T")

_POLL_S = 0.05


def create_topic(
    zk: KazooClient,
    topic: str,
    assignment: Mapping[int, list[int]],
    config: Mapping[str, str] | None = None,
) -> None:
    """Create ``topic`` as Kafka's admin client does: its config first (if any), then the
    replica assignment, which the controller watches and acts on."""
    if config:
        zk.create(
            znodes.topic_config_path(topic), znodes.encode_topic_config(config), makepath=True
        )
    zk.create(znodes.topic_path(topic), znodes.encode_topic_assignment(assignment), makepath=True)


def leader_serving(
    zk: KazooClient,
    tp: TopicPartition,
    addresses: Mapping[int, str],
    tls: TlsConfig | None = None,
) -> znodes.PartitionState | None:
    """The partition's state if the leader it names is among ``addresses`` (broker id ->
    ``host:port`` of the brokers to ask) and its Metadata shows itself leading at the
    state's leader epoch, hosting the replica; else None. A broker's Metadata takes a
    known partition's leader from the LeaderAndIsr it applied, a new partition's from the
    UpdateMetadata the controller sends it after that LeaderAndIsr was answered (one that
    failed leaves the replica unhosted, named among the offline replicas)."""
    state = read_partition_state(zk, tp)
    if state is None or state.leader == znodes.LEADER_NONE or state.leader not in addresses:
        return None
    try:
        with sync_channel(addresses[state.leader], tls) as channel:
            meta = pb_grpc.BrokerStub(channel).Metadata(
                pb.MetadataRequest(topics=[tp.topic]), timeout=5
            )
    except grpc.RpcError:
        return None
    for topic in meta.topics:
        for part in topic.partitions:
            if (
                topic.name == tp.topic
                and part.partition_index == tp.partition
                and part.leader_id == state.leader
                and part.leader_epoch == state.leader_epoch
                and state.leader not in part.offline_replicas
            ):
                return state
    return None


def partition_states(
    zk: KazooClient, topic: str, partitions: int, timeout: float = 30.0
) -> list[znodes.PartitionState | None]:
    """The state znode of each of ``topic``'s partitions 0..``partitions``-1 (None: none
    yet), read by multiReads of hundreds of paths each (proto/zk/multi_read.py): a topic of
    30,000 partitions is read in a few requests, not 30,000. ``timeout`` is kept for the
    callers; kazoo's session timeout bounds each request."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    found = read_partition_states(zk, tps).require()
    return [found.get(tp) for tp in tps]


def replica_records(partition_dir: Path) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record in a replica's segment files, read from disk (the
    broker may be running: a segment deleted meanwhile is skipped)."""
    out: list[tuple[int, bytes | None]] = []
    for segment in sorted(partition_dir.glob("*.log")):
        try:
            data = segment.read_bytes()
        except FileNotFoundError:
            continue  # deleted since the listing (retention, truncation, StopReplica)
        for scanned in scan_batches(data):
            out += [(r.offset, r.value) for r in decode_batch(data, scanned.position).records]
    return out


def checkpointed_high_watermark(data_dir: Path, tp: TopicPartition) -> int | None:
    """The partition's high watermark in the broker's replication-offset-checkpoint (what a
    restart would start from), or None without an entry."""
    path = data_dir / REPLICATION_OFFSET_CHECKPOINT
    return OffsetCheckpointFile(path).read().get(tp) if path.exists() else None


def wait_until(predicate: Callable[[], T], timeout: float, interval: float = _POLL_S) -> T | None:
    """Poll ``predicate`` until it returns a truthy value and return it; None once
    ``timeout`` seconds passed (it is tried once more at the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        now = time.monotonic()
        if now >= deadline:
            return None
        time.sleep(min(interval, deadline - now))
