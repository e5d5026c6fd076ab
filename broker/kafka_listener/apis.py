"""The Kafka protocol's face of a broker: Kafka's ``KafkaApis`` for the Kafka listener.

It serves the same :class:`ReplicaManager`, metadata cache and producer ids as the gRPC
services of :mod:`broker.grpc_listener.services`, only spelled in Kafka's messages: a
second front door, not a second broker. Record batches pass through as the bytes the log stores.

Each handler is a *stage*: what must happen in the order the connection's requests arrived
runs when the stage is awaited (a Produce's append, so a pipelining idempotent producer's
batches reach the log in order, as Kafka's one-request-at-a-time connection guarantees), and
the stage returns the *answer*: an awaitable of the response as a tree
(:mod:`broker.kafka_listener.messages`), or of None for a request Kafka does not answer
(``acks=0``). The connection writes the answers in request order.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from broker.auto_topic_creation import AutoTopicCreator
from broker.coordinator.producer_id_manager import ProducerIdManager
from broker.kafka_listener.acl_apis import ACL_VERSIONS, AclApis, cluster_checked
from broker.kafka_listener.admin_apis import ADMIN_VERSIONS, AdminApis
from broker.kafka_listener.config_apis import CONFIG_VERSIONS, ConfigApis
from broker.kafka_listener.group_apis import GROUP_VERSIONS, GroupApis
from broker.kafka_listener.messages import Tree
from broker.kafka_listener.partition_admin_apis import (
    PARTITION_ADMIN_VERSIONS,
    PartitionAdminApis,
)
from broker.kafka_listener.quota_apis import QUOTA_VERSIONS, QuotaApis
from broker.kafka_listener.records_admin_apis import RECORDS_ADMIN_VERSIONS, RecordsAdminApis
from broker.kafka_listener.scram_apis import SCRAM_VERSIONS, ScramApis
from broker.kafka_listener.transaction_apis import TRANSACTION_VERSIONS, TransactionApis
from broker.kafka_listener.wire_request import (
    Answer,
    CloseConnection,
    KafkaRequest,
    done,
    epoch_or_none,
    ms,
    per_topic,
    session_of,
)
from broker.metadata_cache import MetadataCache
from broker.replication.fetch_session import FetchSpec
from broker.replication.replica_manager import (
    AppendedRecords,
    FetchPartitionResult,
    ReplicaManager,
)
from broker.request_handlers import (
    ACKS_VALUES,
    denied_topics,
    epoch_end_offset,
    init_producer_id_refusal,
    list_partition_offset,
    metadata_refusals,
    new_producer_id,
    partition_problem,
)
from broker.security.acl_authorizer import AclAuthorizer
from proto.records.compression import Codec
from proto.records.record_batch import holds_codec
from proto.topic_partition import INTERNAL_TOPICS, TopicPartition, topic_name_problem
from proto.wire import minibroker_pb2 as pb
from proto.zk.acl_bindings import AclOperation, ResourceType

logger = logging.getLogger(__name__)

__all__ = [
    "SUPPORTED_VERSIONS",
    "KafkaWireApis",
    "api_versions_tree",
]

API_VERSIONS, METADATA, PRODUCE, FETCH, LIST_OFFSETS = 18, 3, 0, 1, 2
OFFSET_FOR_LEADER_EPOCH, INIT_PRODUCER_ID, DESCRIBE_CLUSTER = 23, 22, 60

SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    PRODUCE: (0, 9),
    FETCH: (4, 12),
    LIST_OFFSETS: (1, 7),
    METADATA: (1, 12),
    API_VERSIONS: (0, 3),
    INIT_PRODUCER_ID: (0, 4),
    OFFSET_FOR_LEADER_EPOCH: (2, 4),
    DESCRIBE_CLUSTER: (0, 1),
    **GROUP_VERSIONS,
    **ADMIN_VERSIONS,
    **CONFIG_VERSIONS,
    **PARTITION_ADMIN_VERSIONS,
    **QUOTA_VERSIONS,
    **RECORDS_ADMIN_VERSIONS,
    **ACL_VERSIONS,
    **SCRAM_VERSIONS,
    **TRANSACTION_VERSIONS,
}
"""API key -> (min, max) version this listener serves: what ApiVersions lists, and all it
lists. The lows are the oldest versions kio has schemas for (Kafka 4 dropped the older
ones), except Produce's, which are Kafka 2.8's (:mod:`broker.kafka_listener.legacy_produce`:
librdkafka before 2.11.1 compresses only for a broker that lists Produce 0); the highs
stop before versions whose semantics minibroker lacks: Fetch 13 and
Produce 13 name topics by id (ZooKeeper-era topics have none here), ListOffsets 8 asks for
tiered storage's offsets (KIP-405), Produce 10 reports the new leader (KIP-951),
DescribeCluster 2 lists fenced brokers (KRaft's)."""

ZSTD_PRODUCE_VERSION, ZSTD_FETCH_VERSION = 7, 10
"""The first Produce and Fetch versions that may carry zstd batches (KIP-110): Kafka refuses
older ones UNSUPPORTED_COMPRESSION_TYPE, and so does this listener."""
INVALID_SESSION_ID = 0
UNSUPPORTED_VERSION = 35
FETCH_SESSION_ID_NOT_FOUND = 70
LISTENER_NOT_FOUND = 72
MISMATCHED_ENDPOINT_TYPE, UNSUPPORTED_ENDPOINT_TYPE = 114, 115
BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2
"""DescribeCluster's endpoint types (KIP-919): a broker answers for brokers only."""
TOPIC_AUTHORIZED_OPERATIONS_UNKNOWN = -(2**31)
"""Kafka's ``MetadataResponse.AUTHORIZED_OPERATIONS_OMITTED``."""
READ_COMMITTED = 1


class KafkaWireApis:
    """The handlers of every API in :data:`SUPPORTED_VERSIONS`, by API key."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        metadata_cache: MetadataCache,
        producer_id_manager: ProducerIdManager,
        *,
        group_apis: GroupApis,
        admin_apis: AdminApis,
        config_apis: ConfigApis,
        partition_admin_apis: PartitionAdminApis,
        quota_apis: QuotaApis,
        scram_apis: ScramApis,
        transaction_apis: TransactionApis,
        producer_id_timeout_ms: int = 6000,
        cluster_id: str = "",
        auto_topic_creator: AutoTopicCreator | None = None,
        authorizer: AclAuthorizer | None = None,
        acl_apis: AclApis | None = None,
    ) -> None:
        self.replica_manager = replica_manager
        self.authorizer = authorizer or AclAuthorizer(
            replica_manager.broker_id, None, enabled=False
        )
        """Who may do what (docs/security.md); everything is allowed without ACLs."""
        self.auto_topic_creator = auto_topic_creator
        """Creates the missing topics a Metadata request allows (None: never)."""
        self.metadata_cache = metadata_cache
        self.producer_id_manager = producer_id_manager
        self.producer_id_timeout_ms = producer_id_timeout_ms
        self.cluster_id = cluster_id
        """``/cluster/id``, answered in Metadata and DescribeCluster (librdkafka's
        ``describe_cluster()`` crashed on a null one)."""
        self.broker_id = replica_manager.broker_id
        self.transaction_apis = transaction_apis
        acl_apis = acl_apis or AclApis(self.authorizer, None)
        handlers: dict[int, Callable[[KafkaRequest], Awaitable[Answer]]] = {
            API_VERSIONS: self.api_versions,
            METADATA: self.metadata,
            PRODUCE: self.produce,
            FETCH: self.fetch,
            LIST_OFFSETS: self.list_offsets,
            OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch,
            INIT_PRODUCER_ID: self.init_producer_id,
            DESCRIBE_CLUSTER: self.describe_cluster,
            **group_apis.handlers,
            **admin_apis.handlers,
            **config_apis.handlers,
            **partition_admin_apis.handlers,
            **quota_apis.handlers,
            **RecordsAdminApis(replica_manager, self.authorizer).handlers,
            **acl_apis.handlers,
            **scram_apis.handlers,
            **transaction_apis.handlers,
        }
        self.handlers = cluster_checked(self.authorizer, handlers)
        assert set(self.handlers) == set(SUPPORTED_VERSIONS)

    async def api_versions(self, request: KafkaRequest) -> Answer:
        return done(api_versions_tree(pb.NONE))

    async def metadata(self, request: KafkaRequest) -> Answer:
        return self._metadata(request)

    def _kafka_brokers(self) -> list[tuple[int, str, int]]:
        """(id, host, port) of every live broker with a Kafka listener: the brokers a Kafka
        client can reach (the others are left out of its Metadata, as Kafka leaves out the
        brokers without the request's listener)."""
        return [
            (b.broker_id, *b.kafka_endpoint)
            for b in self.metadata_cache.brokers()
            if b.kafka_endpoint
        ]

    async def describe_cluster(self, request: KafkaRequest) -> Answer:
        """KIP-700: the cluster's id, its controller and its brokers, without Metadata's
        topics (Kafka's ``handleDescribeCluster``). Version 1 (KIP-919) names the endpoint
        type asked for; a broker serves the brokers' (controllers are KRaft's), and refuses
        the others with Kafka's codes (kafka-python reads ``endpoint_type`` from every
        answer, so version 0 alone breaks its ``describe_cluster``)."""
        asked = getattr(request.body, "endpoint_type", BROKER_ENDPOINT)
        if asked != BROKER_ENDPOINT:
            v0 = request.api_version == 0
            known = asked == CONTROLLER_ENDPOINT
            code = (
                pb.INVALID_REQUEST
                if v0
                else (MISMATCHED_ENDPOINT_TYPE if known else UNSUPPORTED_ENDPOINT_TYPE)
            )
            message = (
                "this is a broker: DescribeCluster of controllers is KRaft's"
                if known
                else f"unsupported endpoint type {asked}"
            )
            return done({"error_code": code, "error_message": message, "cluster_id": ""})
        return done(
            {
                "error_code": pb.NONE,
                "endpoint_type": BROKER_ENDPOINT,
                "cluster_id": self.cluster_id,
                "controller_id": self.metadata_cache.controller_id,
                "brokers": [
                    {"broker_id": node, "host": host, "port": port}
                    for node, host, port in self._kafka_brokers()
                ],
                "cluster_authorized_operations": TOPIC_AUTHORIZED_OPERATIONS_UNKNOWN,
            }
        )

    async def _metadata(self, request: KafkaRequest) -> Tree:
        cache = self.metadata_cache
        brokers = []
        reachable: set[int] = set()
        for node, host, port in self._kafka_brokers():
            brokers.append({"node_id": node, "host": host, "port": port})
            reachable.add(node)
        asked = request.body.topics
        listing_all = asked is None or (request.api_version == 0 and not asked)
        if listing_all:
            names = sorted(cache.topics())
        else:
            names = [t.name for t in asked if t.name is not None]
        live = {b.broker_id for b in cache.brokers()}
        names, refused = metadata_refusals(
            self.authorizer,
            session_of(request),
            names,
            listing_all=listing_all,
            missing=[n for n in names if not cache.partitions_of(n)],
            may_create=request.api_version < 4 or bool(request.body.allow_auto_topic_creation),
        )
        missing = await self._missing_topics(request, names)
        missing.update({n: pb.TOPIC_AUTHORIZATION_FAILED for n in refused})
        topics = []
        for name in [*names, *sorted(refused)]:
            if name in missing:
                topics.append({"name": name, "error_code": missing[name]})
                continue
            partitions = cache.partitions_of(name)
            described = []
            for index in sorted(partitions):
                info = partitions[index]
                code: int
                if info.leader < 0 or info.leader not in live:
                    code = pb.LEADER_NOT_AVAILABLE
                elif info.leader not in reachable:
                    code = LISTENER_NOT_FOUND
                else:
                    code = pb.NONE
                described.append(
                    {
                        "error_code": code,
                        "partition_index": index,
                        "leader_id": info.leader,
                        "leader_epoch": info.leader_epoch,
                        "replica_nodes": info.replicas,
                        "isr_nodes": info.isr,
                        "offline_replicas": info.offline_replicas,
                    }
                )
            topics.append(
                {
                    "name": name,
                    "error_code": pb.NONE,
                    "is_internal": name in INTERNAL_TOPICS,
                    "partitions": described,
                    "topic_authorized_operations": TOPIC_AUTHORIZED_OPERATIONS_UNKNOWN,
                }
            )
        return {
            "brokers": brokers,
            "cluster_id": self.cluster_id,
            "controller_id": cache.controller_id,
            "topics": topics,
            "cluster_authorized_operations": TOPIC_AUTHORIZED_OPERATIONS_UNKNOWN,
        }

    async def _missing_topics(self, request: KafkaRequest, names: list[str]) -> dict[str, int]:
        """The error of each named topic this broker does not know (or whose name is
        illegal), creating those the request allows (v1-3 always allow, as Kafka's
        brokers treat them; v4+ carry ``allow_auto_topic_creation``)."""
        cache = self.metadata_cache
        unknown = [
            n for n in names if topic_name_problem(n) is not None or not cache.partitions_of(n)
        ]
        if not unknown:
            return {}
        allowed = request.api_version < 4 or bool(request.body.allow_auto_topic_creation)
        creator = self.auto_topic_creator
        if creator is None:
            return {
                n: pb.UNKNOWN_TOPIC_OR_PARTITION
                if topic_name_problem(n) is None
                else pb.INVALID_TOPIC
                for n in unknown
            }
        return await creator.answer_missing(unknown, allowed)

    async def produce(self, request: KafkaRequest) -> Answer:
        """Appended now, in the connection's order; answered when the acks are met."""
        body = request.body
        acks = body.acks
        order: list[TopicPartition] = []
        entries: dict[TopicPartition, bytes] = {}
        refused: dict[TopicPartition, tuple[int, str]] = {}
        denied = denied_topics(
            self.authorizer,
            session_of(request),
            AclOperation.WRITE,
            {t.name for t in body.topic_data},
        )
        transactional_denied = body.transactional_id is not None and not self.authorizer.authorize(
            session_of(request),
            AclOperation.WRITE,
            ResourceType.TRANSACTIONAL_ID,
            body.transactional_id,
        )
        for topic in body.topic_data:
            for part in topic.partition_data:
                tp = TopicPartition(topic.name, part.index)
                if tp in refused or tp in entries:
                    raise CloseConnection(f"produce request names {tp} twice")
                order.append(tp)
                problem = partition_problem(tp)
                if transactional_denied:
                    refused[tp] = (
                        pb.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                        "no Write on the transactional id",
                    )
                elif tp.topic in denied:
                    refused[tp] = (pb.TOPIC_AUTHORIZATION_FAILED, "no Write on the topic")
                elif acks not in ACKS_VALUES:
                    refused[tp] = (pb.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1: {acks}")
                elif problem is not None:
                    refused[tp] = (problem, f"invalid partition {tp!r}")
                elif not part.records:
                    refused[tp] = (pb.CORRUPT_MESSAGE, f"{tp}: no record batches")
                elif request.api_version < ZSTD_PRODUCE_VERSION and holds_codec(
                    part.records, Codec.ZSTD
                ):
                    refused[tp] = (
                        pb.UNSUPPORTED_COMPRESSION_TYPE,
                        f"Produce requests with version {request.api_version} are not "
                        "allowed to use ZStandard compression",
                    )
                else:
                    entries[tp] = bytes(part.records)
        appended = (
            await self.replica_manager.append_to_local_logs(acks, entries)
            if entries
            else AppendedRecords({}, {})
        )
        return self._produce_answer(acks, ms(body.timeout), order, refused, appended)

    async def _produce_answer(
        self,
        acks: int,
        timeout_ms: int,
        order: list[TopicPartition],
        refused: dict[TopicPartition, tuple[int, str]],
        appended: AppendedRecords,
    ) -> Tree | None:
        results = await self.replica_manager.await_acks(appended, timeout_ms)
        if acks == 0:
            failed = [tp for tp in order if tp in refused or results[tp].error_code != pb.NONE]
            if failed:
                raise CloseConnection(f"acks=0 produce failed for {failed}")
            return None
        answers: list[tuple[TopicPartition, Tree]] = []
        for tp in order:
            if tp in refused:
                code, message = refused[tp]
                partition: Tree = {
                    "index": tp.partition,
                    "error_code": code,
                    "base_offset": -1,
                    "log_start_offset": -1,
                    "error_message": message,
                }
            else:
                r = results[tp]
                partition = {
                    "index": tp.partition,
                    "error_code": r.error_code,
                    "base_offset": r.base_offset,
                    "log_append_time": None,
                    "log_start_offset": r.log_start_offset,
                    "error_message": r.error_message or None,
                }
            answers.append((tp, partition))
        return {"responses": per_topic(answers, "name", "partition_responses")}

    async def fetch(self, request: KafkaRequest) -> Answer:
        return self._fetch(request)

    async def _fetch(self, request: KafkaRequest) -> Tree:
        """A consumer's fetch, sessionless (KIP-227's session id 0: every request names its
        partitions, which every client supports). Replica fetches belong to the gRPC
        listener, where the broker's identity is checked."""
        body = request.body
        session_id = getattr(body, "session_id", INVALID_SESSION_ID)
        if session_id != INVALID_SESSION_ID:
            return {"error_code": FETCH_SESSION_ID_NOT_FOUND, "session_id": 0, "responses": []}
        order: list[TopicPartition] = []
        specs: dict[TopicPartition, FetchSpec] = {}
        refused: dict[TopicPartition, int] = {}
        diverging: dict[TopicPartition, Tree] = {}
        read_committed = getattr(body, "isolation_level", 0) == READ_COMMITTED
        denied = denied_topics(
            self.authorizer, session_of(request), AclOperation.READ, {t.topic for t in body.topics}
        )
        for topic in body.topics:
            for part in topic.partitions:
                tp = TopicPartition(topic.topic, part.partition)
                if tp in specs or tp in refused or tp in diverging:
                    continue  # Kafka keeps one entry per partition
                order.append(tp)
                problem = partition_problem(tp)
                current = epoch_or_none(getattr(part, "current_leader_epoch", -1))
                if body.replica_id >= 0:
                    refused[tp] = pb.INVALID_REQUEST
                elif tp.topic in denied:
                    refused[tp] = pb.TOPIC_AUTHORIZATION_FAILED
                elif problem is not None:
                    refused[tp] = problem
                elif part.fetch_offset < 0:
                    refused[tp] = pb.OFFSET_OUT_OF_RANGE
                elif (found := self._divergence(tp, current, part)) is not None:
                    diverging[tp] = found
                else:
                    specs[tp] = FetchSpec(
                        fetch_offset=part.fetch_offset,
                        max_bytes=max(part.partition_max_bytes, 0),
                        current_leader_epoch=current,
                        read_committed=read_committed,
                    )
        max_bytes = getattr(body, "max_bytes", 0)
        if max_bytes <= 0:
            max_bytes = sum(s.max_bytes for s in specs.values())
        results = (
            await self.replica_manager.fetch_messages(
                -1, max(ms(body.max_wait), 0), max(body.min_bytes, 0), max_bytes, specs
            )
            if specs
            else {}
        )
        answers: list[tuple[TopicPartition, Tree]] = []
        for tp in order:
            if tp in refused:
                partition: Tree = {
                    "partition_index": tp.partition,
                    "error_code": refused[tp],
                    "high_watermark": -1,
                    "last_stable_offset": -1,
                    "log_start_offset": -1,
                    "records": None,
                }
            elif tp in diverging:
                partition = diverging[tp]
            elif request.api_version < ZSTD_FETCH_VERSION and holds_codec(
                results[tp].records, Codec.ZSTD
            ):
                # Kafka's answer to a consumer too old to read zstd (KIP-110).
                partition = {
                    "partition_index": tp.partition,
                    "error_code": pb.UNSUPPORTED_COMPRESSION_TYPE,
                    "high_watermark": -1,
                    "last_stable_offset": -1,
                    "log_start_offset": -1,
                    "records": None,
                }
            else:
                r = results[tp]
                partition = {
                    "partition_index": tp.partition,
                    "error_code": r.error_code,
                    "high_watermark": r.high_watermark,
                    "last_stable_offset": r.last_stable_offset,
                    "log_start_offset": r.log_start_offset,
                    "aborted_transactions": _aborted_answer(r, read_committed),
                    "records": r.records,
                }
            answers.append((tp, partition))
        return {
            "error_code": pb.NONE,
            "session_id": INVALID_SESSION_ID,
            "responses": per_topic(answers, "topic", "partitions"),
        }

    def _divergence(self, tp: TopicPartition, current: int | None, part: Any) -> Tree | None:
        """Fetch 12's diverging epoch (added with KIP-595; Kafka's leaders check it for
        every fetcher that names ``last_fetched_epoch``): if the leader's log for that epoch
        ends before the fetch offset, or the epoch is unknown to it, the answer is the
        diverging epoch and its end offset, without records, so the client truncates or
        resets first."""
        last_fetched_epoch = getattr(part, "last_fetched_epoch", -1)
        if last_fetched_epoch < 0:
            return None
        code, epoch, end = epoch_end_offset(self.replica_manager, tp, current, last_fetched_epoch)
        if code != pb.NONE or (epoch == last_fetched_epoch and end >= part.fetch_offset):
            return None  # an error is the fetch's to report; no divergence: fetch as usual
        partition = self.replica_manager.partitions[tp]
        return {
            "partition_index": tp.partition,
            "error_code": pb.NONE,
            "high_watermark": partition.high_watermark,
            "last_stable_offset": partition.last_stable_offset,
            "log_start_offset": partition.log.log_start_offset,
            "diverging_epoch": {"epoch": epoch, "end_offset": end},
            "records": None,
        }

    async def list_offsets(self, request: KafkaRequest) -> Answer:
        return self._list_offsets(request)

    async def _list_offsets(self, request: KafkaRequest) -> Tree:
        # Only the gRPC listener serves replicas: a Kafka client is a consumer (-1) here.
        topics = []
        denied = denied_topics(
            self.authorizer,
            session_of(request),
            AclOperation.DESCRIBE,
            {t.name for t in request.body.topics},
        )
        for topic in request.body.topics:
            partitions = []
            for part in topic.partitions:
                if topic.name in denied:
                    partitions.append(
                        {
                            "partition_index": part.partition_index,
                            "error_code": pb.TOPIC_AUTHORIZATION_FAILED,
                            "timestamp": -1,
                            "offset": -1,
                            "leader_epoch": -1,
                        }
                    )
                    continue
                code, offset, timestamp, epoch = await list_partition_offset(
                    self.replica_manager,
                    TopicPartition(topic.name, part.partition_index),
                    epoch_or_none(getattr(part, "current_leader_epoch", -1)),
                    part.timestamp,
                    -1,
                    request.api_version,
                    read_committed=getattr(request.body, "isolation_level", 0) == READ_COMMITTED,
                )
                partitions.append(
                    {
                        "partition_index": part.partition_index,
                        "error_code": code,
                        "timestamp": timestamp,
                        "offset": offset,
                        "leader_epoch": epoch,
                    }
                )
            topics.append({"name": topic.name, "partitions": partitions})
        return {"topics": topics}

    async def offset_for_leader_epoch(self, request: KafkaRequest) -> Answer:
        """KIP-320: a consumer asks where the leader's log ends for the epoch of the last
        record it read, to find out whether its position was truncated away."""
        topics = []
        denied = denied_topics(
            self.authorizer,
            session_of(request),
            AclOperation.DESCRIBE,
            {t.topic for t in request.body.topics},
        )
        for topic in request.body.topics:
            partitions = []
            for part in topic.partitions:
                if topic.topic in denied:
                    code, epoch, end = int(pb.TOPIC_AUTHORIZATION_FAILED), -1, -1
                else:
                    code, epoch, end = epoch_end_offset(
                        self.replica_manager,
                        TopicPartition(topic.topic, part.partition),
                        epoch_or_none(part.current_leader_epoch),
                        part.leader_epoch,
                    )
                partitions.append(
                    {
                        "error_code": code,
                        "partition": part.partition,
                        "leader_epoch": epoch,
                        "end_offset": end,
                    }
                )
            topics.append({"topic": topic.topic, "partitions": partitions})
        return done({"topics": topics})

    async def init_producer_id(self, request: KafkaRequest) -> Answer:
        return self._init_producer_id(request)

    async def _init_producer_id(self, request: KafkaRequest) -> Tree:
        """A new id at epoch 0 for an idempotent producer, also when it asks for its epoch
        to be bumped (KIP-360): a fresh id serves it as well, since its sequences start
        again at 0 either way. A transactional producer's goes to the transaction
        coordinator (:mod:`broker.kafka_listener.transaction_apis`)."""
        if request.body.transactional_id is not None:
            return await self.transaction_apis.init_producer_id(
                request, request.body.transactional_id
            )
        refusal = init_producer_id_refusal(self.authorizer, session_of(request), None)
        if refusal is not None:
            return {"error_code": refusal, "producer_id": -1, "producer_epoch": -1}
        code, producer_id = await new_producer_id(
            self.producer_id_manager, self.broker_id, self.producer_id_timeout_ms
        )
        epoch = 0 if code == pb.NONE else -1
        return {"error_code": code, "producer_id": producer_id, "producer_epoch": epoch}


def _aborted_answer(result: FetchPartitionResult, read_committed: bool) -> list[Tree] | None:
    """Fetch's ``aborted_transactions``: null for read_uncommitted (Kafka sends null then),
    else each aborted transaction's producer id and first offset."""
    if not read_committed:
        return None
    return [
        {"producer_id": txn.producer_id, "first_offset": txn.first_offset}
        for txn in result.aborted_transactions or ()
    ]


def api_versions_tree(code: int) -> Tree:
    """ApiVersions' answer: every API this listener serves and its versions; ``code`` is
    UNSUPPORTED_VERSION when the client asked in a version we do not have (KIP-511: the
    answer then comes as version 0, which every client can read)."""
    return {
        "error_code": code,
        "api_keys": [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())
        ],
    }
