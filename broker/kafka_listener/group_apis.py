"""The Kafka listener's consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit and OffsetFetch, over
:mod:`broker.coordinator.group_coordinator` and the offsets in ``__consumer_offsets``
(:mod:`broker.coordinator.group_metadata_manager`); ListGroups, DescribeGroups, DeleteGroups and
OffsetDelete over :mod:`broker.coordinator.group_admin`, which the gRPC side shares.

Every group API but FindCoordinator and ListGroups is answered NOT_COORDINATOR by a broker
that does not coordinate the group, and that broker drops what it held of the group: the
client asks FindCoordinator again and joins there (see the coordinator module for the
choice). ListGroups lists the groups this broker coordinates, as Kafka's brokers do.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from broker.coordinator.group_admin import GroupAdmin
from broker.coordinator.group_coordinator import (
    GroupCoordinator,
    GroupDescription,
    GroupState,
)
from broker.coordinator.group_metadata_manager import CommittedOffset
from broker.kafka_listener.messages import Tree
from broker.kafka_listener.transaction_apis import TransactionApis
from broker.kafka_listener.wire_request import (
    Answer,
    KafkaRequest,
    done,
    ms,
    per_topic,
    session_of,
)
from broker.metadata_cache import MetadataCache
from broker.request_handlers import (
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    TRANSACTIONS_UNSUPPORTED,
    denied_topics,
    find_group_coordinator,
    offset_commit_problems,
    partition_problem,
)
from broker.security.acl_authorizer import AclAuthorizer
from broker.zk_client import BrokerZkClient
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.zk.acl_bindings import AclOperation, ResourceType

logger = logging.getLogger(__name__)

__all__ = ["GROUP_VERSIONS", "GroupApis"]

FIND_COORDINATOR, JOIN_GROUP, SYNC_GROUP, HEARTBEAT = 10, 11, 14, 12
LEAVE_GROUP, OFFSET_COMMIT, OFFSET_FETCH = 13, 8, 9
LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 16, 15, 42, 47
TXN_OFFSET_COMMIT = 28
GROUP_VERSIONS: dict[int, tuple[int, int]] = {
    TXN_OFFSET_COMMIT: (0, 3),
    LIST_GROUPS: (0, 4),
    DESCRIBE_GROUPS: (0, 5),
    DELETE_GROUPS: (0, 2),
    OFFSET_DELETE: (0, 0),
    OFFSET_COMMIT: (2, 8),
    OFFSET_FETCH: (1, 7),
    FIND_COORDINATOR: (0, 3),
    JOIN_GROUP: (0, 7),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 4),
    SYNC_GROUP: (0, 4),
}
"""Kafka 2.8's highs. They stop before KIP-848's member epochs (OffsetCommit 9), batched
groups (OffsetFetch 8, FindCoordinator 4), KIP-800's leave reasons (JoinGroup 8, LeaveGroup
5), KIP-848's group types (ListGroups 5) and error messages (DescribeGroups 6)."""

COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE = 14, 15
GROUP_KEY, TRANSACTION_KEY = 0, 1
UNSTABLE_OFFSET_COMMIT = 88
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
"""DescribeGroups' ``authorized_operations`` without ACLs: READ, DELETE and DESCRIBE, the
operations on a group (Kafka's ``AclOperation`` bit positions)."""
NO_OPERATIONS = -(2**31)
"""``authorized_operations`` when the client did not ask for them."""


class GroupApis:
    """The group handlers, by API key (stages, as :class:`KafkaWireApis`'s are)."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        metadata_cache: MetadataCache,
        zk: BrokerZkClient,
        group_admin: GroupAdmin,
        authorizer: AclAuthorizer | None = None,
        transaction_apis: TransactionApis | None = None,
    ) -> None:
        self.transaction_requests = None if transaction_apis is None else transaction_apis.requests
        """TxnOffsetCommit's checks and write (None: refused, as before transactions)."""
        self.coordinator = coordinator
        self.transaction_apis = transaction_apis
        """FindCoordinator for a transactional id goes there (None: refused, as before
        transactions)."""
        self.authorizer = authorizer or AclAuthorizer(coordinator.broker_id, None, enabled=False)
        """Group ACLs (docs/security.md): Read on the group to join, sync, heartbeat,
        leave and commit; Describe to find its coordinator, describe it and fetch its
        offsets; Delete to delete it."""
        self.metadata_cache = metadata_cache
        self.zk = zk
        self.group_admin = group_admin
        self.broker_id = coordinator.broker_id
        self.handlers: dict[int, Callable[[KafkaRequest], Awaitable[Answer]]] = {
            FIND_COORDINATOR: self.find_coordinator,
            JOIN_GROUP: self.join_group,
            SYNC_GROUP: self.sync_group,
            HEARTBEAT: self.heartbeat,
            LEAVE_GROUP: self.leave_group,
            OFFSET_COMMIT: self.offset_commit,
            OFFSET_FETCH: self.offset_fetch,
            LIST_GROUPS: self.list_groups,
            DESCRIBE_GROUPS: self.describe_groups,
            DELETE_GROUPS: self.delete_groups,
            OFFSET_DELETE: self.offset_delete,
            TXN_OFFSET_COMMIT: self.txn_offset_commit,
        }

    def _refusal(
        self, request: KafkaRequest, group_id: str, operation: AclOperation = AclOperation.READ
    ) -> int | None:
        """The error code for a group request this broker must not serve (the group's ACLs
        refuse it, or another broker coordinates it), else None."""
        if not self._allowed(request, operation, group_id):
            return pb.GROUP_AUTHORIZATION_FAILED
        return self.group_admin.refusal(group_id)

    def _allowed(
        self, request: KafkaRequest, operation: AclOperation, group_id: str, *, log: bool = True
    ) -> bool:
        return self.authorizer.authorize(
            session_of(request), operation, ResourceType.GROUP, group_id, log_denied=log
        )

    async def find_coordinator(self, request: KafkaRequest) -> Answer:
        body = request.body
        key_type = getattr(body, "key_type", GROUP_KEY)
        if key_type == TRANSACTION_KEY and self.transaction_apis is not None:
            return done(await self.transaction_apis.find_coordinator(request, body.key))
        if key_type == TRANSACTION_KEY:
            logger.info(
                "transaction coordinator asked for event=transactions_refused broker=%d "
                "client_id=%s",
                self.broker_id,
                request.client_id,
            )
            return done(
                {
                    "error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "error_message": TRANSACTIONS_UNSUPPORTED,
                    "node_id": -1,
                    "host": "",
                    "port": -1,
                }
            )
        if key_type != GROUP_KEY:
            message = f"unknown coordinator key type {key_type} (0: group, 1: transaction)"
            return done({"error_code": pb.INVALID_REQUEST, "error_message": message, "node_id": -1})
        code, node = await find_group_coordinator(
            self.authorizer,
            session_of(request),
            self.coordinator.store,
            self.metadata_cache,
            body.key,
        )
        broker = self.metadata_cache.broker(node) if code == pb.NONE else None
        if broker is None or broker.kafka_endpoint is None:
            code = code if code != pb.NONE else COORDINATOR_NOT_AVAILABLE
            return done({"error_code": code, "node_id": -1, "host": "", "port": -1})
        host, port = broker.kafka_endpoint
        return done({"error_code": pb.NONE, "node_id": node, "host": host, "port": port})

    async def join_group(self, request: KafkaRequest) -> Answer:
        return self._join_group(request)

    async def _join_group(self, request: KafkaRequest) -> Tree:
        body = request.body
        refused = self._refusal(request, body.group_id)
        if refused is not None:
            return {"error_code": refused, "generation_id": -1, "member_id": body.member_id}
        session_ms = ms(body.session_timeout)
        result = await self.coordinator.join_group(
            body.group_id,
            body.member_id,
            group_instance_id=getattr(body, "group_instance_id", None),
            client_id=request.client_id or "",
            client_host=request.client_host,
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=ms(getattr(body, "rebalance_timeout", session_ms)),
            protocol_type=body.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in body.protocols],
        )
        return {
            "error_code": result.error_code,
            "generation_id": result.generation_id,
            "protocol_type": result.protocol_type,
            "protocol_name": result.protocol_name or "",
            "leader": result.leader,
            "member_id": result.member_id,
            "members": [
                {"member_id": m, "group_instance_id": i, "metadata": meta}
                for m, i, meta in result.members
            ],
        }

    async def sync_group(self, request: KafkaRequest) -> Answer:
        return self._sync_group(request)

    async def _sync_group(self, request: KafkaRequest) -> Tree:
        body = request.body
        refused = self._refusal(request, body.group_id)
        if refused is not None:
            return {"error_code": refused, "assignment": b""}
        assignments = {a.member_id: bytes(a.assignment) for a in body.assignments}
        result = await self.coordinator.sync_group(
            body.group_id, body.generation_id, body.member_id, assignments
        )
        return {
            "error_code": result.error_code,
            "assignment": result.assignment,
            "protocol_type": result.protocol_type,
            "protocol_name": result.protocol_name,
        }

    async def heartbeat(self, request: KafkaRequest) -> Answer:
        body = request.body
        refused = self._refusal(request, body.group_id)
        if refused is not None:
            return done({"error_code": refused})
        code = self.coordinator.heartbeat(body.group_id, body.generation_id, body.member_id)
        return done({"error_code": code})

    async def leave_group(self, request: KafkaRequest) -> Answer:
        body = request.body
        refused = self._refusal(request, body.group_id)
        members = getattr(body, "members", None)
        ids = [m.member_id for m in members] if members is not None else [body.member_id]
        if refused is not None:
            return done({"error_code": refused, "members": []})
        codes = self.coordinator.leave_group(body.group_id, ids)
        top = codes[0] if members is None else pb.NONE
        return done(
            {
                "error_code": top,
                "members": [
                    {"member_id": m, "group_instance_id": None, "error_code": c}
                    for m, c in zip(ids, codes, strict=True)
                ],
            }
        )

    async def offset_commit(self, request: KafkaRequest) -> Answer:
        return self._offset_commit(request)

    async def _offset_commit(self, request: KafkaRequest) -> Tree:
        """The group's ACL and each partition checked here, then
        :meth:`GroupAdmin.commit_offsets` (the gRPC door's too): the generation, then
        ``__consumer_offsets``."""
        body = request.body
        generation: int = getattr(
            body, "generation_id_or_member_epoch", getattr(body, "generation_id", -1)
        )
        code = self._refusal(request, body.group_id)
        if code is None:
            code = self.coordinator.check_commit(body.group_id, generation, body.member_id)
        retention_ms: int = getattr(body, "retention_time_ms", -1)
        expire_ms = -1 if retention_ms < 0 else int(time.time() * 1000) + retention_ms
        order, codes, offsets = self._offsets_to_commit(request, body.topics, code, expire_ms)
        if offsets:
            codes.update(
                await self.group_admin.commit_offsets(
                    body.group_id, generation, body.member_id, offsets
                )
            )
        return _commit_answers(order, codes)

    def _offsets_to_commit(
        self, request: KafkaRequest, topics: Iterable[Any], code: int, expire_ms: int
    ) -> tuple[
        list[TopicPartition], dict[TopicPartition, int], dict[TopicPartition, CommittedOffset]
    ]:
        """An OffsetCommit's or TxnOffsetCommit's partitions in order, the error codes
        found (``code``, the group's error if not NONE, for all; else
        :func:`offset_commit_problems`), and the offsets left to write."""
        order, asked = _asked_offsets(topics, expire_ms)
        if code != pb.NONE:
            return order, dict.fromkeys(asked, code), {}
        codes = offset_commit_problems(
            self.authorizer, session_of(request), self.metadata_cache, asked
        )
        return order, codes, {tp: c for tp, c in asked.items() if tp not in codes}

    async def txn_offset_commit(self, request: KafkaRequest) -> Answer:
        return self._txn_offset_commit(request)

    async def _txn_offset_commit(self, request: KafkaRequest) -> Tree:
        """:meth:`TransactionRequests.txn_offset_commit`, which the gRPC door shares."""
        body = request.body
        order, offsets = _asked_offsets(body.topics, -1)
        if self.transaction_requests is None:
            codes = dict.fromkeys(offsets, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        else:
            codes = await self.transaction_requests.txn_offset_commit(
                session_of(request),
                body.transactional_id,
                body.group_id,
                (body.producer_id, body.producer_epoch),
                (getattr(body, "generation_id", -1), getattr(body, "member_id", "")),
                offsets,
            )
        if request.api_version < 2:  # Kafka's answer to clients before KAFKA-7296
            codes = {
                tp: COORDINATOR_NOT_AVAILABLE if c == COORDINATOR_LOAD_IN_PROGRESS else c
                for tp, c in codes.items()
            }
        return _commit_answers(order, codes)

    async def offset_fetch(self, request: KafkaRequest) -> Answer:
        return self._offset_fetch(request)

    async def _offset_fetch(self, request: KafkaRequest) -> Tree:
        body = request.body
        refused = self._refusal(request, body.group_id, AclOperation.DESCRIBE)
        if refused is not None:
            return {"error_code": refused, "topics": []}
        asked: list[TopicPartition] | None = None
        if body.topics is not None:
            asked = [
                TopicPartition(t.name, p)
                for t in body.topics
                for p in t.partition_indexes
                if partition_problem(TopicPartition(t.name, p)) is None
            ]
        fetched = await self.group_admin.fetch_offsets(body.group_id, asked)
        if fetched.error_code != pb.NONE:
            return {"error_code": fetched.error_code, "topics": []}
        committed, malformed = fetched.offsets, fetched.malformed
        wanted = asked if asked is not None else sorted({*committed, *malformed})
        # Kafka: offsets of topics the principal may not Describe are refused when named,
        # left out when the whole group's offsets are asked for.
        denied = denied_topics(
            self.authorizer,
            session_of(request),
            AclOperation.DESCRIBE,
            {tp.topic for tp in wanted},
        )
        if asked is None:
            wanted = [tp for tp in wanted if tp.topic not in denied]
        unstable: set[TopicPartition] = set()
        store = self.coordinator.store
        if getattr(body, "require_stable", False) and asked is not None and store is not None:
            # KIP-447: a partition with offsets of an open transaction is not answered
            # until the transaction ends; the client retries.
            unstable = store.pending_partitions(body.group_id)
        answers = [
            (
                tp,
                {
                    "partition_index": tp.partition,
                    "committed_offset": committed[tp].offset if tp in committed else -1,
                    "committed_leader_epoch": (
                        committed[tp].leader_epoch if tp in committed else -1
                    ),
                    "metadata": committed[tp].metadata if tp in committed else "",
                    "error_code": pb.UNKNOWN_SERVER_ERROR if tp in malformed else pb.NONE,
                }
                if tp.topic not in denied and tp not in unstable
                else {
                    "partition_index": tp.partition,
                    "committed_offset": -1,
                    "error_code": pb.TOPIC_AUTHORIZATION_FAILED
                    if tp.topic in denied
                    else UNSTABLE_OFFSET_COMMIT,
                },
            )
            for tp in wanted
        ]
        return {"error_code": pb.NONE, "topics": per_topic(answers, "name", "partitions")}

    async def list_groups(self, request: KafkaRequest) -> Answer:
        states = getattr(request.body, "states_filter", None) or ()
        code, groups = await self.group_admin.list_groups(states)
        session = session_of(request)
        if not self.authorizer.authorize(
            session, AclOperation.DESCRIBE, ResourceType.CLUSTER, log_denied=False
        ):  # Kafka: the groups the principal may Describe, unless it may Describe the cluster
            groups = [
                g
                for g in groups
                if self._allowed(request, AclOperation.DESCRIBE, g.group_id, log=False)
            ]
        listed = [
            {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state.value}
            for g in groups
        ]
        return done({"error_code": code, "groups": listed})

    async def describe_groups(self, request: KafkaRequest) -> Answer:
        body = request.body
        operations = (
            GROUP_OPERATIONS if getattr(body, "include_authorized_operations", False) else None
        )
        described = []
        for group_id in body.groups:
            if not self._allowed(request, AclOperation.DESCRIBE, group_id):
                described.append(
                    _described_group(
                        pb.GROUP_AUTHORIZATION_FAILED,
                        GroupDescription(group_id, GroupState.DEAD, "", "", ()),
                        None,
                    )
                )
                continue
            code, group = await self.group_admin.describe_group(group_id)
            described.append(_described_group(code, group, operations))
        return done({"groups": described})

    async def delete_groups(self, request: KafkaRequest) -> Answer:
        results = []
        for group_id in dict.fromkeys(request.body.groups_names):
            if not self._allowed(request, AclOperation.DELETE, group_id):
                results.append({"group_id": group_id, "error_code": pb.GROUP_AUTHORIZATION_FAILED})
                continue
            code = await self.group_admin.delete_group(group_id)
            results.append({"group_id": group_id, "error_code": code})
        return done({"results": results})

    async def offset_delete(self, request: KafkaRequest) -> Answer:
        """:meth:`GroupAdmin.offset_delete`, which the gRPC door shares."""
        body = request.body
        asked = [
            TopicPartition(topic.name, part.partition_index)
            for topic in body.topics
            for part in topic.partitions
        ]
        if not self._allowed(request, AclOperation.DELETE, body.group_id):
            return done({"error_code": pb.GROUP_AUTHORIZATION_FAILED, "topics": []})
        result = await self.group_admin.offset_delete(body.group_id, asked)
        if result.error_code != pb.NONE:
            return done({"error_code": result.error_code, "topics": []})
        answers = [
            (tp, {"partition_index": tp.partition, "error_code": code})
            for tp, code in result.partitions.items()
        ]
        return done({"error_code": pb.NONE, "topics": per_topic(answers, "name", "partitions")})


def _asked_offsets(
    topics: Iterable[Any], expire_ms: int
) -> tuple[list[TopicPartition], dict[TopicPartition, CommittedOffset]]:
    """An OffsetCommit's or TxnOffsetCommit's partitions in request order, and the offset
    each asks to commit."""
    order: list[TopicPartition] = []
    asked: dict[TopicPartition, CommittedOffset] = {}
    for topic in topics:
        for part in topic.partitions:
            tp = TopicPartition(topic.name, part.partition_index)
            order.append(tp)
            asked[tp] = CommittedOffset(
                part.committed_offset,
                getattr(part, "committed_leader_epoch", -1),
                part.committed_metadata or "",
                expire_timestamp_ms=expire_ms,
            )
    return order, asked


def _commit_answers(order: list[TopicPartition], codes: dict[TopicPartition, int]) -> Tree:
    answers = [
        (tp, {"partition_index": tp.partition, "error_code": codes.get(tp, pb.NONE)})
        for tp in order
    ]
    return {"topics": per_topic(answers, "name", "partitions")}


def _described_group(code: int, group: GroupDescription, operations: int | None) -> Tree:
    """A DescribeGroups entry: an error answers empty strings and no members, as Kafka's
    ``DescribeGroupsResponse.groupError``."""
    entry: Tree = {
        "error_code": code,
        "group_id": group.group_id,
        "group_state": "" if code != pb.NONE else group.state.value,
        "protocol_type": group.protocol_type,
        "protocol_data": group.protocol_name,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": m.metadata,
                "member_assignment": m.assignment,
            }
            for m in group.members
        ],
        "authorized_operations": NO_OPERATIONS if operations is None else operations,
    }
    return entry
