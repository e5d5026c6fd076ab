"""What a request means, the same through either front door: the per-partition answers
that the gRPC services (:mod:`broker.grpc_listener.services`) and the Kafka listener
(:mod:`broker.kafka_listener.apis`) both give, so that neither front door owns them and a
client sees one broker whichever protocol it speaks.

Each returns error codes of ``proto/wire/minibroker.proto``, Kafka's numbers, which both
front doors put on the wire as they are.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from broker.coordinator.group_metadata import coordinator_of
from broker.coordinator.group_metadata_manager import CommittedOffset, GroupMetadataManager
from broker.coordinator.producer_id_manager import ProducerIdManager, ProducerIdsExhaustedError
from broker.metadata_cache import MetadataCache
from broker.replication.delete_records import delete_records
from broker.replication.replica_manager import ReplicaManager
from broker.security.acl_authorizer import AclAuthorizer, Session
from broker.zk_client import ZkDataError, ZkError
from proto.topic_partition import TopicPartition, topic_name_problem
from proto.wire import minibroker_pb2 as pb
from proto.zk.acl_bindings import AclOperation, ResourceType

logger = logging.getLogger(__name__)

ACKS_VALUES = (0, 1, -1)
"""The acks a produce request may ask for: none, the leader's, the whole ISR's."""

TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
"""The answer to FindCoordinator for a transactional id and to InitProducerId with one:
minibroker has no transaction coordinator. It is the one code that librdkafka
(``rd_kafka_txn_handle_FindCoordinator``, ``rd_kafka_idemp_check_error``), aiokafka
(``Sender._find_coordinator``) and kafka-python (``FindCoordinatorHandler``) all treat as
fatal for ``init_transactions``: every other code either loops (librdkafka retries
INVALID_REQUEST, UNSUPPORTED_VERSION and COORDINATOR_NOT_AVAILABLE every 500 ms forever)
or fails with a message that does not mention transactions. A Kafka broker answers it to
a principal that may not use the transactional id, which is what every transactional id
is here."""
TRANSACTIONS_UNSUPPORTED = (
    "transactions are not supported by this broker (no transaction coordinator): "
    "leave transactional.id unset; an idempotent producer needs none"
)


def partition_problem(tp: TopicPartition) -> int | None:
    """The error code of a partition no request may name (an invalid topic name, a negative
    index), else None."""
    if topic_name_problem(tp.topic) is not None:
        return pb.INVALID_TOPIC
    if tp.partition < 0:
        return pb.UNKNOWN_TOPIC_OR_PARTITION
    return None


def epoch_end_offset(
    replica_manager: ReplicaManager,
    tp: TopicPartition,
    current_leader_epoch: int | None,
    leader_epoch: int,
) -> tuple[int, int, int]:
    """(error code, epoch, end offset) of OffsetsForLeaderEpoch for one partition, on
    either listener."""
    problem = partition_problem(tp)
    if problem is not None:
        return problem, -1, -1
    return replica_manager.last_offset_for_leader_epoch(tp, current_leader_epoch, leader_epoch)


LIST_OFFSETS_SPEC_VERSIONS = {-1: 0, -2: 0, -3: 7}
"""ListOffsets' special timestamps (latest, earliest, KIP-734's max timestamp) and the
first version that may ask for each (Kafka's ``ReplicaManager.timestampMinSupportedVersion``);
any other negative timestamp is no spec at all."""
LIST_OFFSETS_LATEST_VERSION = 7
"""The ListOffsets version the gRPC front door speaks: every spec above."""
UNSUPPORTED_VERSION = 35


async def list_partition_offset(
    replica_manager: ReplicaManager,
    tp: TopicPartition,
    current_leader_epoch: int | None,
    timestamp: int,
    replica_id: int,
    version: int = LIST_OFFSETS_LATEST_VERSION,
    *,
    read_committed: bool = False,
) -> tuple[int, int, int, int]:
    """(error code, offset, timestamp, leader epoch) of ListOffsets for one partition, on
    either listener (``read_committed``: the latest offset is the LSO). A negative
    timestamp that is not a spec of ``version`` (-3 before v7, -4 or -5 of later Kafka
    versions) is refused per partition with UNSUPPORTED_VERSION, as Kafka refuses it."""
    problem = partition_problem(tp)
    if problem is not None:
        return problem, -1, -1, -1
    if timestamp < 0 and version < LIST_OFFSETS_SPEC_VERSIONS.get(timestamp, version + 1):
        return UNSUPPORTED_VERSION, -1, -1, -1
    return await replica_manager.list_offset(
        tp, current_leader_epoch, timestamp, replica_id, read_committed=read_committed
    )


async def new_producer_id(
    manager: ProducerIdManager, broker_id: int, timeout_ms: int
) -> tuple[pb.ErrorCode.ValueType, int]:
    """(error code, producer id): a new producer id, at epoch 0, for an idempotent producer
    (no transactions), on either listener.

    Any broker answers (Kafka routes a request without transactional id to any broker
    too). ZooKeeper not answering in time is REQUEST_TIMED_OUT, retriable: a block may
    have to be reserved first.
    """
    try:
        async with asyncio.timeout(timeout_ms / 1000):
            producer_id = await manager.generate_producer_id()
    except (TimeoutError, ZkError) as err:
        logger.warning(
            "no producer id: ZooKeeper unavailable event=init_producer_id_failed "
            "broker=%d error=%r",
            broker_id,
            err,
        )
        return pb.REQUEST_TIMED_OUT, -1
    except (ZkDataError, ProducerIdsExhaustedError) as err:
        logger.error(
            "no producer id event=init_producer_id_failed broker=%d error=%s", broker_id, err
        )
        return pb.UNKNOWN_SERVER_ERROR, -1
    logger.info(
        "producer id handed out event=init_producer_id broker=%d producer_id=%d",
        broker_id,
        producer_id,
    )
    return pb.NONE, producer_id


@dataclass(frozen=True)
class DeletedRecords:
    """One partition's answer to DeleteRecords."""

    error_code: int
    low_watermark: int
    """The smallest log start offset over the replicas (-1 with an error)."""
    error_message: str = ""


async def delete_partition_records(
    replica_manager: ReplicaManager, offsets: Mapping[TopicPartition, int], timeout_ms: int
) -> dict[TopicPartition, DeletedRecords]:
    """DeleteRecords (KIP-107) on either front door: the records below each offset (-1:
    the high watermark) are deleted by the partition's leader, answered when the replicas
    followed or at ``timeout_ms``. A partition the metadata does not know is
    UNKNOWN_TOPIC_OR_PARTITION, as Kafka's ``handleDeleteRecordsRequest`` answers it."""
    answers: dict[TopicPartition, DeletedRecords] = {}
    asked: dict[TopicPartition, int] = {}
    for tp, offset in offsets.items():
        problem = partition_problem(tp)
        if problem is None and replica_manager.metadata_cache.partition(tp) is None:
            problem = pb.UNKNOWN_TOPIC_OR_PARTITION
        if problem is not None:
            answers[tp] = DeletedRecords(problem, -1, f"unknown partition {tp}")
        else:
            asked[tp] = offset
    if asked:
        for tp, status in (await delete_records(replica_manager, asked, timeout_ms)).items():
            assert status.error_code is not None
            answers[tp] = DeletedRecords(
                status.error_code, status.low_watermark, status.error_message
            )
    return {tp: answers[tp] for tp in offsets}


# -- authorization (docs/security.md): Kafka's KafkaApis checks, for both front doors ------


def denied_topics(
    authorizer: AclAuthorizer, session: Session, operation: AclOperation, names: Iterable[str]
) -> set[str]:
    """The topics among ``names`` that ``session`` may not ``operation`` (their partitions
    are answered TOPIC_AUTHORIZATION_FAILED, each refusal logged once)."""
    wanted = set(names)
    if not authorizer.enabled:
        return set()
    return wanted - authorizer.authorized(session, operation, ResourceType.TOPIC, wanted)


def metadata_refusals(
    authorizer: AclAuthorizer,
    session: Session,
    names: Sequence[str],
    *,
    listing_all: bool,
    missing: Collection[str],
    may_create: bool,
) -> tuple[list[str], set[str]]:
    """Kafka's ``handleTopicMetadataRequest`` checks: the topics to describe and those
    answered TOPIC_AUTHORIZATION_FAILED. Listing every topic leaves out, unlogged, those
    the session may not Describe; a named one it may not Describe is refused, existing or
    not, so that its existence is not disclosed. A ``missing`` one it would create
    (``may_create``) needs Create on the Cluster or on the topic."""
    if not authorizer.enabled:
        return list(names), set()
    describable = authorizer.authorized(
        session, AclOperation.DESCRIBE, ResourceType.TOPIC, names, log_denied=not listing_all
    )
    if listing_all:
        return [n for n in names if n in describable], set()
    refused = set(names) - describable
    creating = [n for n in names if n in missing and n in describable]
    if (
        creating
        and may_create
        and not authorizer.authorize(
            session, AclOperation.CREATE, ResourceType.CLUSTER, log_denied=False
        )
    ):
        refused |= set(creating) - authorizer.authorized(
            session, AclOperation.CREATE, ResourceType.TOPIC, creating
        )
    return [n for n in names if n not in refused], refused


def init_producer_id_refusal(
    authorizer: AclAuthorizer, session: Session, transactional_id: str | None
) -> int | None:
    """Kafka 2.8's InitProducerId checks: Write on the transactional id, else (an
    idempotent producer) IdempotentWrite on the Cluster or Write on some topic (KIP-679).
    The error code to answer, None if allowed."""
    if not authorizer.enabled:
        return None
    if transactional_id is not None:
        allowed = authorizer.authorize(
            session, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
        )
        return None if allowed else pb.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if authorizer.authorize(
        session, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, log_denied=False
    ) or authorizer.authorize_any(session, AclOperation.WRITE, ResourceType.TOPIC):
        return None
    authorizer.authorize(session, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER)  # logs
    return pb.CLUSTER_AUTHORIZATION_FAILED


OFFSET_METADATA_TOO_LARGE = 12
OFFSET_METADATA_MAX_BYTES = 4096
"""Kafka's ``offset.metadata.max.bytes`` default: a longer commit metadata string is
refused with OFFSET_METADATA_TOO_LARGE."""


def offset_commit_problems(
    authorizer: AclAuthorizer,
    session: Session,
    metadata_cache: MetadataCache,
    offsets: Mapping[TopicPartition, CommittedOffset],
) -> dict[TopicPartition, int]:
    """The partitions of an OffsetCommit or TxnOffsetCommit that may not be committed, with
    their error codes (Kafka's ``handleOffsetCommitRequest`` and
    ``handleTxnOffsetCommitRequest``): no Read on the topic, an invalid or unknown
    partition, a negative offset, metadata over ``offset.metadata.max.bytes``."""
    denied = denied_topics(authorizer, session, AclOperation.READ, {tp.topic for tp in offsets})
    problems: dict[TopicPartition, int] = {}
    for tp, offset in offsets.items():
        problem = partition_problem(tp)
        if tp.topic in denied:
            problems[tp] = pb.TOPIC_AUTHORIZATION_FAILED
        elif problem is not None:
            problems[tp] = problem
        elif offset.offset < 0 or metadata_cache.partition(tp) is None:
            problems[tp] = pb.UNKNOWN_TOPIC_OR_PARTITION
        elif len(offset.metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
            problems[tp] = OFFSET_METADATA_TOO_LARGE
    return problems


INVALID_GROUP_ID = 24
COORDINATOR_NOT_AVAILABLE = 15


async def find_group_coordinator(
    authorizer: AclAuthorizer,
    session: Session,
    store: GroupMetadataManager | None,
    metadata_cache: MetadataCache,
    group_id: str,
) -> tuple[int, int]:
    """FindCoordinator for a group, on either door: (error code, broker id). Describe on
    the group; Kafka makes ``__consumer_offsets`` on the first lookup, and until its
    partitions have leaders the answer is COORDINATOR_NOT_AVAILABLE (retry)."""
    if topic_name_problem(group_id, "group") is not None:
        return INVALID_GROUP_ID, -1
    if not authorizer.authorize(session, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return pb.GROUP_AUTHORIZATION_FAILED, -1
    if store is not None and not store.topic_exists():
        await store.ensure_topic()
        return COORDINATOR_NOT_AVAILABLE, -1
    node = coordinator_of(group_id, metadata_cache)
    if node is None or metadata_cache.broker(node) is None:
        return COORDINATOR_NOT_AVAILABLE, -1
    return pb.NONE, node
