"""The transaction requests as both doors serve them (the Kafka listener's
:mod:`broker.kafka_listener.transaction_apis` and the gRPC ``Broker`` service): Kafka 2.8's
checks, then :class:`~broker.coordinator.transaction_coordinator.TransactionCoordinator`
(docs/transactions.md). A door only reads its request and shapes the answer.

The ACLs are Kafka 2.8's: Describe on the transactional id to find its coordinator, Write
on it for the others, Write on each topic a transaction adds, and Read on the group whose
offsets it adds. A request about an id this broker does not coordinate is answered
NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while its partition loads), and the client
looks the coordinator up again.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from broker.coordinator.group_admin import GroupAdmin
from broker.coordinator.group_metadata_manager import CommittedOffset
from broker.coordinator.internal_topic import COORDINATOR_NOT_AVAILABLE
from broker.coordinator.transaction_coordinator import (
    InitProducerIdResult,
    TransactionCoordinator,
)
from broker.metadata_cache import MetadataCache
from broker.request_handlers import (
    denied_topics,
    init_producer_id_refusal,
    offset_commit_problems,
    partition_problem,
)
from broker.security.acl_authorizer import AclAuthorizer, Session
from proto.topic_partition import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.zk.acl_bindings import AclOperation, ResourceType

__all__ = ["OPERATION_NOT_ATTEMPTED", "TransactionRequests"]

OPERATION_NOT_ATTEMPTED = 55


class TransactionRequests:
    """FindCoordinator (for a transactional id), InitProducerId with one,
    AddPartitionsToTxn, AddOffsetsToTxn and EndTxn, checked and handed to the transaction
    coordinator; TxnOffsetCommit, checked and handed to the group coordinator."""

    def __init__(
        self,
        coordinator: TransactionCoordinator,
        metadata_cache: MetadataCache,
        authorizer: AclAuthorizer,
        group_admin: GroupAdmin,
        offsets_partition_of: Callable[[str], int],
    ) -> None:
        """``offsets_partition_of``: the partition of ``__consumer_offsets`` holding a
        group (the group coordinator's placement)."""
        self.coordinator = coordinator
        self.group_admin = group_admin
        self.state = coordinator.state
        self.metadata_cache = metadata_cache
        self.authorizer = authorizer
        self.offsets_partition_of = offsets_partition_of

    def _allowed(self, session: Session, operation: AclOperation, transactional_id: str) -> bool:
        return self.authorizer.authorize(
            session, operation, ResourceType.TRANSACTIONAL_ID, transactional_id
        )

    async def find_coordinator(self, session: Session, transactional_id: str) -> tuple[int, int]:
        """(error code, broker id) of the id's coordinator: the leader of its partition of
        ``__transaction_state``, which is made on first use (COORDINATOR_NOT_AVAILABLE
        until its partitions have leaders). The door answers the broker's own endpoint."""
        if not transactional_id:
            return pb.INVALID_REQUEST, -1
        if not self._allowed(session, AclOperation.DESCRIBE, transactional_id):
            return pb.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1
        if not self.state.topic_exists():
            await self.state.ensure_topic()
            return COORDINATOR_NOT_AVAILABLE, -1
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, self.state.partition_of(transactional_id))
        info = self.metadata_cache.partition(tp)
        if info is None or self.metadata_cache.broker(info.leader) is None:
            return COORDINATOR_NOT_AVAILABLE, -1
        return pb.NONE, info.leader

    async def init_producer_id(
        self,
        session: Session,
        transactional_id: str,
        timeout_ms: int,
        expected: tuple[int, int] | None,
    ) -> InitProducerIdResult:
        """``expected``: the producer id and epoch a retrying producer holds (KIP-360)."""
        refusal = init_producer_id_refusal(self.authorizer, session, transactional_id)
        if refusal is not None:
            return InitProducerIdResult(refusal)
        return await self.coordinator.init_producer_id(transactional_id, timeout_ms, expected)

    async def add_partitions(
        self,
        session: Session,
        transactional_id: str,
        producer: tuple[int, int],
        wanted: Collection[TopicPartition],
    ) -> dict[TopicPartition, int]:
        """Each partition's error code. A partition refused (no Write, invalid, unknown)
        adds none of them: the others are OPERATION_NOT_ATTEMPTED, as in Kafka."""
        if not self._allowed(session, AclOperation.WRITE, transactional_id):
            return dict.fromkeys(wanted, pb.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        denied = denied_topics(
            self.authorizer, session, AclOperation.WRITE, {tp.topic for tp in wanted}
        )
        problems = {
            tp: pb.TOPIC_AUTHORIZATION_FAILED
            if tp.topic in denied
            else partition_problem(tp)
            or (
                pb.UNKNOWN_TOPIC_OR_PARTITION if self.metadata_cache.partition(tp) is None else None
            )
            for tp in wanted
        }
        refused = {tp: code for tp, code in problems.items() if code is not None}
        if refused:
            return {tp: refused.get(tp, OPERATION_NOT_ATTEMPTED) for tp in wanted}
        code = await self.coordinator.add_partitions(
            transactional_id, producer[0], producer[1], frozenset(wanted)
        )
        return dict.fromkeys(wanted, code)

    async def add_offsets(
        self, session: Session, transactional_id: str, producer: tuple[int, int], group_id: str
    ) -> int:
        """The group's partition of ``__consumer_offsets`` joins the transaction, so that
        its marker there applies (or drops) the offsets TxnOffsetCommit writes."""
        if not self._allowed(session, AclOperation.WRITE, transactional_id):
            return pb.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if not self.authorizer.authorize(session, AclOperation.READ, ResourceType.GROUP, group_id):
            return pb.GROUP_AUTHORIZATION_FAILED
        tp = TopicPartition(OFFSETS_TOPIC, self.offsets_partition_of(group_id))
        return await self.coordinator.add_partitions(
            transactional_id, producer[0], producer[1], frozenset([tp])
        )

    async def end_txn(
        self, session: Session, transactional_id: str, producer: tuple[int, int], committed: bool
    ) -> int:
        if not self._allowed(session, AclOperation.WRITE, transactional_id):
            return pb.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return await self.coordinator.end_transaction(
            transactional_id, producer[0], producer[1], committed
        )

    async def txn_offset_commit(
        self,
        session: Session,
        transactional_id: str,
        group_id: str,
        producer: tuple[int, int],
        member: tuple[int, str],
        offsets: Mapping[TopicPartition, CommittedOffset],
    ) -> dict[TopicPartition, int]:
        """Kafka's ``handleTxnOffsetCommitRequest``: Write on the transactional id, Read on
        the group and each topic, then :meth:`GroupAdmin.txn_commit_offsets` (``member``:
        the generation and member id, checked when given), which holds the offsets pending
        until the transaction's marker. Each partition's error code."""
        code: int | None
        if not self._allowed(session, AclOperation.WRITE, transactional_id):
            code = pb.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif not self.authorizer.authorize(
            session, AclOperation.READ, ResourceType.GROUP, group_id
        ):
            code = pb.GROUP_AUTHORIZATION_FAILED
        else:
            code = self.group_admin.refusal(group_id)
        if code is not None:
            return dict.fromkeys(offsets, code)
        codes = offset_commit_problems(self.authorizer, session, self.metadata_cache, offsets)
        writable = {tp: c for tp, c in offsets.items() if tp not in codes}
        if writable:
            codes.update(
                await self.group_admin.txn_commit_offsets(
                    group_id, producer, member[0], member[1], writable
                )
            )
        return codes
