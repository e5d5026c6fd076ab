"""Cluster metadata for clients: bootstrap, broker channels, leaders (Kafka's ``Metadata``).

A client knows the cluster only through brokers: it asks any reachable one for
``Metadata`` (brokers, controller, each partition's leader, epoch, replicas and ISR) and
sends produce and fetch requests to the leaders named there. When a broker answers
NOT_LEADER_OR_FOLLOWER, or a leader cannot be reached, the client refreshes and retries;
that is how producers and consumers ride through leader elections.

Example usage::

    async with BrokerConnections.from_bootstrap("localhost:9091") as connections:
        metadata = MetadataClient(connections)
        cluster = await metadata.refresh(["orders"])
        leader = cluster.leader_of(TopicPartition("orders", 0))
        stub = connections.stub(leader)
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import grpc

from client.closing import AsyncClosing
from proto.errors import MinibrokerError
from proto.topic_partition import TopicPartition
from proto.transport.keepalive import CLIENT_KEEPALIVE_OPTIONS
from proto.transport.tls import TlsConfig, aio_channel
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc

__all__ = [
    "BOOTSTRAP_ENV",
    "DEFAULT_BOOTSTRAP",
    "BrokerConnections",
    "BrokerNode",
    "BrokerUnreachableError",
    "ClientError",
    "ClusterMetadata",
    "MetadataClient",
    "PartitionMetadata",
    "TopicMetadata",
    "default_bootstrap",
    "parse_bootstrap",
]

BOOTSTRAP_ENV = "MINIBROKER_BOOTSTRAP"
DEFAULT_BOOTSTRAP = "localhost:9091"
NO_LEADER = -1

_CHANNEL_OPTIONS = [
    *CLIENT_KEEPALIVE_OPTIONS,
    # Kafka's reconnect.backoff.ms / reconnect.backoff.max.ms: a restarted broker is found
    # again within a second, not after gRPC's default backoff of up to two minutes.
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.max_receive_message_length", 100 * 1024 * 1024),
    ("grpc.max_send_message_length", 100 * 1024 * 1024),
]


class ClientError(MinibrokerError):
    """A failure the user can act on; the CLI prints its message as one line."""


class BrokerUnreachableError(ClientError):
    """No broker answered (bootstrap servers down, wrong address). ``unavailable`` lists
    the ``host:port`` addresses that closed or refused the connection, which the command
    line probes for a Kafka listener (:mod:`client.reachability`)."""

    retriable = True

    def __init__(self, message: str, unavailable: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.unavailable = tuple(unavailable)


@dataclass(frozen=True, slots=True)
class BrokerNode:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    tp: TopicPartition
    leader: int
    """The leader's broker id, or -1 while the partition is offline."""
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    error_code: int = pb.NONE


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    error_code: int
    partitions: dict[int, PartitionMetadata] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """One Metadata answer."""

    brokers: dict[int, BrokerNode]
    controller_id: int
    topics: dict[str, TopicMetadata]
    cluster_id: str = ""
    """``/cluster/id`` ("" from a broker that answers none)."""

    @classmethod
    def from_response(cls, response: pb.MetadataResponse) -> ClusterMetadata:
        brokers = {b.node_id: BrokerNode(b.node_id, b.host, b.port) for b in response.brokers}
        topics = {}
        for t in response.topics:
            partitions = {
                p.partition_index: PartitionMetadata(
                    TopicPartition(t.name, p.partition_index),
                    p.leader_id,
                    p.leader_epoch,
                    tuple(p.replica_nodes),
                    tuple(p.isr_nodes),
                    tuple(p.offline_replicas),
                    p.error_code,
                )
                for p in t.partitions
            }
            topics[t.name] = TopicMetadata(t.name, t.error_code, partitions)
        return cls(brokers, response.controller_id, topics, response.cluster_id)

    def partitions_of(self, topic: str) -> list[PartitionMetadata]:
        """The topic's partitions in index order ([] if unknown)."""
        found = self.topics.get(topic)
        if found is None:
            return []
        return [found.partitions[p] for p in sorted(found.partitions)]

    def leader_of(self, tp: TopicPartition) -> BrokerNode | None:
        """The live leader of ``tp``, or None (unknown partition, offline, leader gone)."""
        topic = self.topics.get(tp.topic)
        if topic is None:
            return None
        partition = topic.partitions.get(tp.partition)
        if partition is None or partition.leader == NO_LEADER:
            return None
        return self.brokers.get(partition.leader)


def default_bootstrap() -> str:
    """``$MINIBROKER_BOOTSTRAP``, else ``localhost:9091`` (docs/cli.md)."""
    return os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` -> addresses. Raises ClientError naming a bad entry."""
    addresses = []
    for entry in (e.strip() for e in servers.split(",")):
        if not entry:
            continue
        host, sep, port_text = entry.rpartition(":")
        if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ClientError(f"bad bootstrap server {entry!r}: expected host:port")
        addresses.append((host.strip("[]"), int(port_text)))
    if not addresses:
        raise ClientError("no bootstrap server given (expected host:port[,host:port...])")
    return addresses


class BrokerConnections(AsyncClosing):
    """One gRPC channel per broker address, shared by a client's producers and consumers."""

    def __init__(
        self,
        bootstrap: Sequence[tuple[str, int]],
        request_timeout_s: float = 30.0,
        tls: TlsConfig | None = None,
    ):
        """``tls``: the CA to check brokers against and this client's certificate
        (``security.protocol=SSL``); None speaks plaintext."""
        if not bootstrap:
            raise ClientError("no bootstrap server given")
        self.bootstrap = list(bootstrap)
        self.request_timeout_s = request_timeout_s
        self.tls = tls
        self._channels: dict[str, grpc.aio.Channel] = {}
        self.nodes: dict[int, BrokerNode] = {}
        """Brokers by id, as the last Metadata named them."""

    @classmethod
    def from_bootstrap(
        cls, servers: str, request_timeout_s: float = 30.0, tls: TlsConfig | None = None
    ) -> BrokerConnections:
        return cls(parse_bootstrap(servers), request_timeout_s, tls)

    def channel(self, address: str) -> grpc.aio.Channel:
        found = self._channels.get(address)
        if found is None:
            found = aio_channel(address, self.tls, _CHANNEL_OPTIONS)
            self._channels[address] = found
        return found

    def stub(self, node: BrokerNode | int) -> pb_grpc.BrokerStub:
        """The Broker service of a broker (by node, or by id from the last metadata)."""
        if isinstance(node, int):
            known = self.nodes.get(node)
            if known is None:
                raise BrokerUnreachableError(f"broker {node} is not in the cluster metadata")
            node = known
        return pb_grpc.BrokerStub(self.channel(node.address))

    def candidate_addresses(self) -> list[str]:
        """Known brokers first (they may have replaced a dead bootstrap server), then the
        bootstrap servers, without repeats."""
        seen: dict[str, None] = {}
        for node in self.nodes.values():
            seen.setdefault(node.address)
        for host, port in self.bootstrap:
            seen.setdefault(f"{host}:{port}")
        return list(seen)

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        await asyncio.gather(*(c.close(None) for c in channels.values()), return_exceptions=True)


class MetadataClient:
    """Fetches and caches cluster metadata from whichever broker answers."""

    def __init__(self, connections: BrokerConnections) -> None:
        self.connections = connections
        self.current: ClusterMetadata | None = None

    def _adopt(self, metadata: ClusterMetadata) -> ClusterMetadata:
        self.connections.nodes = dict(metadata.brokers)
        self.current = metadata
        return metadata

    async def refresh(
        self, topics: Iterable[str] | None = None, *, allow_auto_topic_creation: bool = False
    ) -> ClusterMetadata:
        """Ask the brokers in turn (known ones, then bootstrap) until one answers; None
        topics: all topics. ``allow_auto_topic_creation``: a broker with
        ``auto.create.topics.enable`` creates the named topics that do not exist (answered
        LEADER_NOT_AVAILABLE until they have leaders); the producer asks for it, the
        consumer with ``allow.auto.create.topics``, admin tools never. Raises
        BrokerUnreachableError naming what was tried."""
        request = pb.MetadataRequest(
            topics=sorted(set(topics)) if topics is not None else [],
            allow_auto_topic_creation=allow_auto_topic_creation and topics is not None,
        )
        problems = []
        unavailable = []
        not_ready: ClusterMetadata | None = None
        for address in self.connections.candidate_addresses():
            stub = pb_grpc.BrokerStub(self.connections.channel(address))
            try:
                response = await stub.Metadata(
                    request, timeout=min(self.connections.request_timeout_s, 5.0)
                )
            except grpc.aio.AioRpcError as e:
                problems.append(f"{address} ({e.code().name.lower()})")
                if e.code() == grpc.StatusCode.UNAVAILABLE:
                    unavailable.append(address)
                continue
            metadata = ClusterMetadata.from_response(response)
            if not metadata.brokers:
                # A broker that has not heard from the controller yet (just started) knows
                # no broker, not even itself, and no topic: ask another one first.
                not_ready = not_ready or metadata
                continue
            return self._adopt(metadata)
        if not_ready is not None:
            return self._adopt(not_ready)
        raise BrokerUnreachableError(
            "cannot reach any broker: " + ", ".join(problems) + " (is the cluster running? "
            f"set --bootstrap-server or ${BOOTSTRAP_ENV})",
            unavailable,
        )
