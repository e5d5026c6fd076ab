"""The transactional producer's side of KIP-98 (Kafka's ``TransactionManager``, the
transactional part): the coordinator of the ``transactional_id``, InitProducerId with it,
each partition added to the transaction before its first record is queued, offsets sent
to the transaction, and the commit or abort (docs/transactions.md).

States: a producer with a transactional id is READY after ``init_transactions``, IN
TRANSACTION from ``begin_transaction`` until ``commit_transaction`` or
``abort_transaction`` ends it, and FATAL once fenced (a newer instance of the id took
over: PRODUCER_FENCED, or an epoch the brokers refuse), after which every call raises
:class:`TransactionFencedError`: the application closes the producer (and may start
another, whose ``init_transactions`` fences this one for good). A record that failed inside
a transaction makes it *abortable*: the commit raises :class:`TransactionAbortableError`
before anything reaches the coordinator, and the application aborts and may go on (Kafka's
``TransactionManager`` tells the two apart the same way). Requests answered with a
retriable coordinator error (the coordinator moved or is loading, CONCURRENT_TRANSACTIONS
while the previous transaction's markers are written) are sent again, after looking the
coordinator up again when it moved, until ``max_block_ms``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar, cast

import grpc

from client.metadata import BrokerConnections, ClientError
from proto import errors
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc

__all__ = [
    "TransactionAbortableError",
    "TransactionFencedError",
    "TransactionManager",
    "TransactionState",
]

log = logging.getLogger(__name__)

GROUP_KEY, TRANSACTION_KEY = 0, 1
_COORDINATOR_MOVED = {pb.NOT_COORDINATOR, pb.COORDINATOR_NOT_AVAILABLE}
_RETRY = {
    pb.COORDINATOR_LOAD_IN_PROGRESS,
    pb.CONCURRENT_TRANSACTIONS,
    pb.REQUEST_TIMED_OUT,
    pb.UNKNOWN_TOPIC_OR_PARTITION,
    pb.NOT_ENOUGH_REPLICAS,
    pb.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    pb.NOT_LEADER_OR_FOLLOWER,
    pb.KAFKA_STORAGE_ERROR,
}
_FENCED = {pb.PRODUCER_FENCED, pb.INVALID_PRODUCER_EPOCH, pb.TRANSACTION_COORDINATOR_FENCED}
FIRST_ADD_RETRY_BACKOFF_S = 0.020
"""How soon a transaction's first AddPartitionsToTxn (or AddOffsetsToTxn) is sent again
after CONCURRENT_TRANSACTIONS: the previous transaction's markers are being written, which
takes milliseconds (Kafka's producer: ADD_PARTITIONS_RETRY_BACKOFF_MS, 20 ms, rather than
``retry.backoff.ms``)."""

R = TypeVar("R")


def _name(code: int) -> str:
    try:
        return pb.ErrorCode.Name(cast(pb.ErrorCode.ValueType, code))
    except ValueError:
        return f"error {code}"


class TransactionAbortableError(ClientError):
    """The transaction can only be aborted (a record of it failed): the commit was refused
    before it reached the coordinator, so the transaction certainly did not commit;
    ``abort_transaction`` ends it and the producer goes on."""


class TransactionFencedError(ClientError):
    """The producer is fenced (a newer epoch of its transactional id exists: another
    instance, or the coordinator's abort of a transaction past its timeout): its open
    transaction can never commit, every later call raises this, and the producer must be
    closed."""


class TransactionState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    FATAL = "fatal"


class TransactionManager:
    """One transactional id's requests, for one :class:`client.producer.Producer`."""

    def __init__(
        self,
        connections: BrokerConnections,
        transactional_id: str,
        *,
        transaction_timeout_ms: int,
        request_timeout_ms: int,
        retry_backoff_ms: int,
        max_block_ms: int,
    ) -> None:
        self.connections = connections
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self._request_timeout_s = request_timeout_ms / 1000
        self._backoff_s = retry_backoff_ms / 1000
        self._max_block_s = max_block_ms / 1000
        self.state = TransactionState.UNINITIALIZED
        self.producer_id = -1
        self.producer_epoch = -1
        self.partitions: set[TopicPartition] = set()
        """The partitions added to the current transaction."""
        self.abortable: Exception | None = None
        """Why the current transaction can only be aborted (a record failed in it)."""
        self.offsets_sent = False
        """Whether the current transaction holds offsets (its coordinator must end it)."""
        self.fatal: Exception | None = None
        self._coordinators: dict[tuple[int, str], str] = {}
        """(key type, key) -> the coordinator's address, once found."""
        self._adding: dict[TopicPartition, asyncio.Future[None]] = {}

    # -- state -----------------------------------------------------------------------------------

    def _require(self, *states: TransactionState) -> None:
        if self.fatal is not None:
            raise self.fatal
        if self.state not in states:
            wanted = " or ".join(s.value for s in states)
            raise ClientError(
                f"transactional id {self.transactional_id!r} is {self.state.value}, "
                f"the call needs it {wanted}"
            )

    def _fenced(self, code: int, what: str) -> TransactionFencedError:
        self.state = TransactionState.FATAL
        fenced = TransactionFencedError(
            f"{what}: the producer of transactional id {self.transactional_id!r} is fenced "
            f"({_name(code)}): a newer instance took over; close this producer"
        )
        self.fatal = fenced
        return fenced

    def record_failed(self, error: Exception) -> None:
        """A record of the current transaction failed: it can only be aborted."""
        if self.state is TransactionState.IN_TRANSACTION and self.abortable is None:
            self.abortable = error

    # -- requests --------------------------------------------------------------------------------

    async def _coordinator(
        self, key_type: int, key: str, deadline: float
    ) -> pb_grpc.BrokerAsyncStub:
        loop = asyncio.get_running_loop()
        address = self._coordinators.get((key_type, key))
        while address is None:
            problems = []
            for candidate in self.connections.candidate_addresses():
                stub = pb_grpc.BrokerStub(self.connections.channel(candidate))
                try:
                    found = await stub.FindCoordinator(
                        pb.FindCoordinatorRequest(key=key, key_type=key_type),
                        timeout=self._request_timeout_s,
                    )
                except grpc.aio.AioRpcError as err:
                    problems.append(f"{candidate} ({err.code().name.lower()})")
                    continue
                if found.error_code == pb.NONE:
                    address = self._coordinators[(key_type, key)] = f"{found.host}:{found.port}"
                    break
                if found.error_code not in _COORDINATOR_MOVED | _RETRY:
                    raise errors.for_code(found.error_code) or ClientError(
                        f"FindCoordinator({key}): error {found.error_code}"
                    )
                problems.append(f"{candidate} ({_name(found.error_code)})")
            if address is None:
                if loop.time() + self._backoff_s > deadline:
                    raise ClientError(
                        f"no coordinator for {key!r} found within max_block_ms: "
                        + ", ".join(problems)
                    )
                await asyncio.sleep(self._backoff_s)
        return pb_grpc.BrokerStub(self.connections.channel(address))

    async def _call(
        self,
        what: str,
        key_type: int,
        key: str,
        call: Callable[[pb_grpc.BrokerAsyncStub], Awaitable[R]],
        code_of: Callable[[R], int],
        *,
        first_of_transaction: bool = False,
    ) -> R:
        """``call`` at the key's coordinator until it answers NONE or an error not worth
        retrying (raised: fenced ones make the producer FATAL), within ``max_block_ms``;
        the ``first_of_transaction`` addition retried sooner on CONCURRENT_TRANSACTIONS."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._max_block_s
        while True:
            stub = await self._coordinator(key_type, key, deadline)
            try:
                answer = await call(stub)
                code = code_of(answer)
            except grpc.aio.AioRpcError as err:
                if err.code() == grpc.StatusCode.INVALID_ARGUMENT:
                    raise ClientError(f"{what} refused: {err.details()}") from None
                code = pb.NOT_COORDINATOR  # unreachable: look it up again
            if code == pb.NONE:
                return answer
            if code in _FENCED:
                raise self._fenced(code, what)
            if code not in _COORDINATOR_MOVED | _RETRY:
                raise errors.for_code(code) or ClientError(f"{what}: error {code}")
            if code in _COORDINATOR_MOVED:
                self._coordinators.pop((key_type, key), None)
            backoff = self._backoff_s
            if first_of_transaction and code == pb.CONCURRENT_TRANSACTIONS:
                backoff = min(backoff, FIRST_ADD_RETRY_BACKOFF_S)
            if loop.time() + backoff > deadline:
                raise ClientError(f"{what} not done within max_block_ms: last error {code}")
            log.debug("%s retried: %s", what, _name(code))
            await asyncio.sleep(backoff)

    def _producer(self) -> pb.TransactionalProducer:
        return pb.TransactionalProducer(
            transactional_id=self.transactional_id,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
        )

    # -- the API ---------------------------------------------------------------------------------

    async def init(self) -> tuple[int, int]:
        """InitProducerId with the transactional id (again after an abortable error: the
        coordinator bumps the epoch, KIP-360); the producer id and epoch."""
        if self.fatal is not None:
            raise self.fatal
        expected = self.producer_id >= 0
        answer = await self._call(
            "InitProducerId",
            TRANSACTION_KEY,
            self.transactional_id,
            lambda stub: stub.InitProducerId(
                pb.InitProducerIdRequest(
                    transactional_id=self.transactional_id,
                    transaction_timeout_ms=self.transaction_timeout_ms,
                    producer_id=self.producer_id if expected else None,
                    producer_epoch=self.producer_epoch if expected else None,
                ),
                timeout=self._request_timeout_s,
            ),
            lambda r: r.error_code,
        )
        self.producer_id, self.producer_epoch = answer.producer_id, answer.producer_epoch
        self.state = TransactionState.READY
        self.partitions.clear()
        self.abortable = None
        self.offsets_sent = False
        log.info(
            "transactional producer ready transactional_id=%s producer_id=%d producer_epoch=%d",
            self.transactional_id,
            self.producer_id,
            self.producer_epoch,
        )
        return self.producer_id, self.producer_epoch

    def begin(self) -> None:
        self._require(TransactionState.READY)
        self.state = TransactionState.IN_TRANSACTION
        self.partitions.clear()
        self.abortable = None
        self.offsets_sent = False

    def in_transaction(self) -> None:
        """Raises unless a transaction is open (``send`` needs one)."""
        self._require(TransactionState.IN_TRANSACTION)

    async def add_partition(self, tp: TopicPartition) -> None:
        """Add ``tp`` to the transaction unless it is in it (concurrent sends to one new
        partition share one AddPartitionsToTxn)."""
        if tp in self.partitions:
            return
        self.in_transaction()
        adding = self._adding.get(tp)
        if adding is None:
            adding = self._adding[tp] = asyncio.get_running_loop().create_future()
            first = not self.partitions and not self.offsets_sent
            try:
                await self._call(
                    "AddPartitionsToTxn",
                    TRANSACTION_KEY,
                    self.transactional_id,
                    lambda stub: stub.AddPartitionsToTxn(
                        pb.AddPartitionsToTxnRequest(
                            producer=self._producer(),
                            partitions=[pb.TxnPartition(topic=tp.topic, partition=tp.partition)],
                        ),
                        timeout=self._request_timeout_s,
                    ),
                    lambda r: max((p.error_code for p in r.partitions), key=abs, default=0),
                    first_of_transaction=first,
                )
                self.partitions.add(tp)
                adding.set_result(None)
            except BaseException as err:
                adding.set_exception(err if isinstance(err, Exception) else ClientError(str(err)))
                adding.exception()  # retrieved: the waiters below re-raise it
                raise
            finally:
                del self._adding[tp]
        else:
            await asyncio.shield(adding)

    async def send_offsets(self, offsets: Mapping[TopicPartition, int], group_id: str) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit at the group's coordinator: the offsets
        apply only if the transaction commits."""
        self.in_transaction()
        first = not self.partitions and not self.offsets_sent
        self.offsets_sent = True
        await self._call(
            "AddOffsetsToTxn",
            TRANSACTION_KEY,
            self.transactional_id,
            lambda stub: stub.AddOffsetsToTxn(
                pb.AddOffsetsToTxnRequest(producer=self._producer(), group_id=group_id),
                timeout=self._request_timeout_s,
            ),
            lambda r: r.error_code,
            first_of_transaction=first,
        )
        await self._call(
            "TxnOffsetCommit",
            GROUP_KEY,
            group_id,
            lambda stub: stub.TxnOffsetCommit(
                pb.TxnOffsetCommitRequest(
                    producer=self._producer(),
                    group_id=group_id,
                    generation_id=-1,
                    offsets=[
                        pb.GroupPartitionOffset(topic=tp.topic, partition=tp.partition, offset=o)
                        for tp, o in offsets.items()
                    ],
                ),
                timeout=self._request_timeout_s,
            ),
            lambda r: max((o.error_code for o in r.offsets), key=abs, default=0),
        )

    async def end(self, commit: bool) -> None:
        """EndTxn (the producer has flushed first). A commit of an abortable transaction
        raises its error instead (the application aborts it)."""
        self.in_transaction()
        if commit and self.abortable is not None:
            raise TransactionAbortableError(
                f"transaction of {self.transactional_id!r} cannot commit: a record failed "
                f"({self.abortable}); abort it"
            )
        if self.partitions or self.offsets_sent:  # else the coordinator knows of none
            await self._call(
                "EndTxn",
                TRANSACTION_KEY,
                self.transactional_id,
                lambda stub: stub.EndTxn(
                    pb.EndTxnRequest(producer=self._producer(), committed=commit),
                    timeout=self._request_timeout_s,
                ),
                lambda r: r.error_code,
            )
        self.state = TransactionState.READY
        self.partitions.clear()
        self.abortable = None
        self.offsets_sent = False
