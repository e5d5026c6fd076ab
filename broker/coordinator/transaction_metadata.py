"""One transactional id's state machine at its transaction coordinator (Kafka's
``TransactionMetadata``): docs/transactions.md.

Every change goes in two steps, because the coordinator may only believe a state once
``__transaction_state`` holds it (appended with acks=all). A ``prepare_*`` method checks the
change, sets the *pending* state and returns the target (:class:`TxnTransit`), which the
coordinator appends to the log; :meth:`TransactionMetadata.complete` applies the target
once the append is acknowledged, and :meth:`TransactionMetadata.abandon` drops the pending
state if it failed. While a state is pending no other change may be prepared (the
coordinator answers CONCURRENT_TRANSACTIONS), so two requests of one id never interleave.

The states and the only ways into each (Kafka's ``validPreviousStates``)::

    Empty              <- Empty, CompleteCommit, CompleteAbort     (InitProducerId)
    Ongoing            <- Ongoing, Empty, CompleteCommit, CompleteAbort  (AddPartitions)
    PrepareCommit      <- Ongoing                                  (EndTxn commit)
    PrepareAbort       <- Ongoing, PrepareEpochFence               (EndTxn abort, timeout)
    CompleteCommit     <- PrepareCommit                            (markers written)
    CompleteAbort      <- PrepareAbort                             (markers written)
    Dead               <- Empty, CompleteCommit, CompleteAbort     (id expired)
    PrepareEpochFence  <- Ongoing                                  (fencing a zombie)

Producer epochs: InitProducerId bumps the epoch, so a second instance of the same
transactional id fences the first (whose next request carries the old epoch and is
answered PRODUCER_FENCED). A retried InitProducerId (KIP-360: the producer names the epoch
it holds) that matches the previous epoch gets the current one again without a bump. When
the epoch would overflow the coordinator rotates to a new producer id, at epoch 0.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from proto.coordinator.transaction_records import TransactionLogValue, TransactionState
from proto.errors import MinibrokerError
from proto.topic_partition import TopicPartition

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "PRODUCER_FENCED",
    "TransactionMetadata",
    "TransactionStateError",
    "TxnTransit",
    "is_epoch_exhausted",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767
PRODUCER_FENCED = 90
"""Kafka's error code for a producer whose epoch a newer instance has replaced."""

S = TransactionState
_VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
_EXPIRATION_ALLOWED = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
_PENDING_TRANSACTION = frozenset({S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT})


class TransactionStateError(MinibrokerError, RuntimeError):
    """A transition the state machine forbids: a coordinator bug, never a client's doing
    (the coordinator checks requests before it prepares a change)."""


def is_epoch_exhausted(producer_epoch: int) -> bool:
    """Kafka keeps the last epoch below the maximum free, to fence with."""
    return producer_epoch >= SHORT_MAX - 1


@dataclass(frozen=True)
class TxnTransit:
    """The target of a prepared change: what is appended to the log, then applied."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    start_timestamp_ms: int
    update_timestamp_ms: int

    def log_value(self) -> TransactionLogValue:
        """The ``__transaction_state`` value that records this target."""
        return TransactionLogValue(
            self.producer_id,
            self.producer_epoch,
            self.timeout_ms,
            self.state,
            frozenset() if self.state == S.EMPTY else self.partitions,
            self.update_timestamp_ms,
            self.start_timestamp_ms,
        )


@dataclass(eq=False)
class TransactionMetadata:
    """What the coordinator knows of one transactional id (not thread-safe: the broker's
    event loop is its only user)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState = S.EMPTY
    partitions: set[TopicPartition] = dataclasses.field(default_factory=set)
    start_timestamp_ms: int = -1
    update_timestamp_ms: int = -1
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    pending: TransactionState | None = None
    """The state a prepared change is going to, until it is completed or abandoned."""
    has_failed_epoch_fence: bool = False
    """A fence's bumped epoch may not be in the log: the next fence does not bump again."""

    @classmethod
    def from_log(cls, transactional_id: str, value: TransactionLogValue) -> TransactionMetadata:
        """The state a load of ``__transaction_state`` restores (Kafka's
        ``readTxnRecordValue``: the last producer id and epoch are not in the log)."""
        return cls(
            transactional_id,
            value.producer_id,
            value.producer_epoch,
            value.transaction_timeout_ms,
            value.state,
            set(value.partitions),
            value.start_timestamp_ms,
            value.last_update_timestamp_ms,
        )

    # -- questions -----------------------------------------------------------------------------

    @property
    def expiration_allowed(self) -> bool:
        """Whether an idle id may be expired (no transaction in flight)."""
        return self.state in _EXPIRATION_ALLOWED

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in _PENDING_TRANSACTION

    @property
    def epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    # -- preparing changes ---------------------------------------------------------------------

    def prepare_fence_producer_epoch(self) -> TxnTransit:
        """Fence the current producer before aborting its transaction (a new instance's
        InitProducerId, or the timeout): bump the epoch unless an earlier fence failed."""
        if self.producer_epoch == SHORT_MAX:
            raise TransactionStateError(
                f"{self.transactional_id}: cannot fence epoch {SHORT_MAX}, it would overflow"
            )
        epoch = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(
            S.PREPARE_EPOCH_FENCE,
            self.producer_id,
            epoch,
            NO_PRODUCER_EPOCH,
            self.timeout_ms,
            frozenset(self.partitions),
            self.start_timestamp_ms,
            self.update_timestamp_ms,
        )

    def prepare_increment_producer_epoch(
        self, timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransit | int:
        """InitProducerId on an id without a transaction in flight: the target, or
        PRODUCER_FENCED when ``expected_epoch`` (KIP-360) is neither the current nor the
        previous epoch."""
        if self.epoch_exhausted:
            raise TransactionStateError(
                f"{self.transactional_id}: no epochs left for producer id {self.producer_id}"
            )
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            # A retry of a call that succeeded: the epoch it was given, without a bump.
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return PRODUCER_FENCED
        return self._prepare(
            S.EMPTY, self.producer_id, epoch, last_epoch, timeout_ms, frozenset(), -1, now_ms
        )

    def prepare_producer_id_rotation(
        self, producer_id: int, timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransit:
        """A new producer id at epoch 0, when the epoch is exhausted (or the id is new)."""
        if self.has_pending_transaction:
            raise TransactionStateError(
                f"{self.transactional_id}: cannot rotate the producer id during a transaction"
            )
        last_epoch = self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH
        return self._prepare(
            S.EMPTY, producer_id, 0, last_epoch, timeout_ms, frozenset(), -1, now_ms
        )

    def prepare_add_partitions(self, added: frozenset[TopicPartition], now_ms: int) -> TxnTransit:
        """AddPartitionsToTxn (and AddOffsetsToTxn's offsets partition): the transaction
        starts now unless one is already ongoing."""
        starting = self.state in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT)
        return self._prepare(
            S.ONGOING,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.timeout_ms,
            frozenset(self.partitions) | added,
            now_ms if starting else self.start_timestamp_ms,
            now_ms,
        )

    def prepare_abort_or_commit(self, state: TransactionState, now_ms: int) -> TxnTransit:
        """EndTxn (or the timeout's abort): PrepareCommit or PrepareAbort."""
        if state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise TransactionStateError(f"EndTxn prepares a commit or an abort, not {state!r}")
        return self._prepare(
            state,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.timeout_ms,
            frozenset(self.partitions),
            self.start_timestamp_ms,
            now_ms,
        )

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        """Every marker is written: CompleteCommit or CompleteAbort, without partitions."""
        state = S.COMPLETE_COMMIT if self.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        # The prepared state is in the log, so a fence that failed before is now recorded.
        self.has_failed_epoch_fence = False
        return self._prepare(
            state,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.timeout_ms,
            frozenset(),
            self.start_timestamp_ms,
            now_ms,
        )

    def prepare_dead(self) -> TxnTransit:
        """An idle id expires: a tombstone is written and the id is forgotten."""
        return self._prepare(
            S.DEAD,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.timeout_ms,
            frozenset(),
            self.start_timestamp_ms,
            self.update_timestamp_ms,
        )

    def _prepare(
        self,
        state: TransactionState,
        producer_id: int,
        epoch: int,
        last_epoch: int,
        timeout_ms: int,
        partitions: frozenset[TopicPartition],
        start_ms: int,
        update_ms: int,
    ) -> TxnTransit:
        if self.pending is not None:
            raise TransactionStateError(
                f"{self.transactional_id}: preparing {state.kafka_name} while "
                f"{self.pending.kafka_name} is pending"
            )
        if producer_id < 0 or epoch < 0:
            raise TransactionStateError(
                f"{self.transactional_id}: illegal producer id {producer_id} or epoch {epoch}"
            )
        if self.state not in _VALID_PREVIOUS[state]:
            raise TransactionStateError(
                f"{self.transactional_id}: {self.state.kafka_name} cannot go to {state.kafka_name}"
            )
        self.pending = state
        return TxnTransit(
            producer_id,
            self.producer_id,
            epoch,
            last_epoch,
            timeout_ms,
            state,
            partitions,
            start_ms,
            update_ms,
        )

    def start_fenced_abort(self, fence: TxnTransit) -> None:
        """Make a prepared fence's epoch current, so that the abort it leads to (prepared
        next) is written with the bumped epoch (Kafka's ``endTransaction`` on
        PrepareEpochFence). The epoch is never handed to a client: the new instance is told
        CONCURRENT_TRANSACTIONS and retries, and its retry bumps the epoch once more."""
        if self.pending != S.PREPARE_EPOCH_FENCE or fence.state != S.PREPARE_EPOCH_FENCE:
            raise TransactionStateError(
                f"{self.transactional_id}: no fence is pending to abort with"
            )
        self.pending = None
        self.producer_epoch = fence.producer_epoch
        self.last_producer_epoch = NO_PRODUCER_EPOCH

    # -- completing them -----------------------------------------------------------------------

    def abandon(self, *, failed_fence: bool = False) -> None:
        """The prepared change was not written: forget it. ``failed_fence``: it was the
        abort of a fence, whose bumped epoch may or may not be in the log, so the next
        fence must not bump it again."""
        self.pending = None
        if failed_fence:
            self.has_failed_epoch_fence = True

    def complete(self, transit: TxnTransit) -> None:
        """Apply a prepared change whose record the log now holds (Kafka's
        ``completeTransitionTo``, with its checks that the target is the one prepared)."""
        if self.pending is None or self.pending != transit.state:
            self._refuse(transit, "it is not the pending change")
        same_producer = (
            transit.producer_epoch == self.producer_epoch
            and transit.producer_id == self.producer_id
        )
        state = transit.state
        if state == S.EMPTY:
            bump = transit.producer_epoch == self.producer_epoch + 1 or (
                transit.producer_epoch == 0 and transit.producer_id != self.producer_id
            )
            if (
                (transit.producer_epoch != self.producer_epoch and not bump)
                or transit.partitions
                or transit.start_timestamp_ms != -1
            ):
                self._refuse(transit, "not an epoch bump of an idle id")
            self.timeout_ms = transit.timeout_ms
            self.producer_epoch = transit.producer_epoch
            self.last_producer_epoch = transit.last_producer_epoch
            self.producer_id = transit.producer_id
            self.last_producer_id = transit.last_producer_id
        elif state == S.ONGOING:
            if (
                not same_producer
                or not self.partitions <= transit.partitions
                or transit.timeout_ms != self.timeout_ms
            ):
                self._refuse(transit, "partitions may only be added, by the same producer")
            self.start_timestamp_ms = transit.start_timestamp_ms
            self.partitions |= transit.partitions
        elif state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            if (
                not same_producer
                or self.partitions != transit.partitions
                or transit.timeout_ms != self.timeout_ms
                or transit.start_timestamp_ms != self.start_timestamp_ms
            ):
                self._refuse(transit, "an end must keep the transaction as it is")
        elif state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            if (
                not same_producer
                or transit.timeout_ms != self.timeout_ms
                or transit.start_timestamp_ms == -1
            ):
                self._refuse(transit, "a completion must be of the same transaction")
            self.start_timestamp_ms = transit.start_timestamp_ms
            self.partitions.clear()
        else:
            # PrepareEpochFence is always followed by PrepareAbort before anything is
            # written, and Dead is never written: an expired id is removed instead.
            self._refuse(transit, f"{state.kafka_name} is never completed")
        self.update_timestamp_ms = transit.update_timestamp_ms
        self.pending = None
        self.state = state

    def _refuse(self, transit: TxnTransit, why: str) -> None:
        raise TransactionStateError(
            f"{self.transactional_id}: cannot complete {transit.state.kafka_name} from "
            f"{self.state.kafka_name} ({why}): {transit}"
        )
