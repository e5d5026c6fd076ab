"""What a partition knows of its idempotent and transactional producers (Kafka's
``ProducerStateManager``, simplified: no producer expiry).

For every producer id whose batches are in the log: its latest producer epoch and the
metadata (first and last sequence, base and last offset) of its last
:data:`BATCHES_PER_PRODUCER` batches. That is enough for the two promises of the idempotent
producer, for as many batches as it may have in flight
(``max.in.flight.requests.per.connection`` <= 5):

- a retried batch is never written twice: a batch equal (same epoch, first and last
  sequence) to one of the cached ones is a duplicate; the leader does not append it and
  answers with the offsets it was written at the first time;
- nothing is written out of order: the next batch of a producer must start at its last
  sequence + 1 (wrapping from INT32_MAX to 0), a new epoch or an unknown producer at 0.

Who calls what (all under the owning :class:`broker.log.log.Log`'s lock):

- the leader, before appending: :meth:`ProducerStateManager.check_leader_append`;
- every append, leader or follower, after writing: :meth:`ProducerStateManager.update`
  (no checks: a follower takes the leader's word), so a follower that becomes leader
  already knows every producer;
- loading and truncation: the state is a function of the batch headers in the log, so the
  Log replays them (:meth:`update` again, header fields only, records never decoded).
  :meth:`ProducerStateManager.take_snapshot` keeps in-memory copies of the state at the
  last segment boundaries (Kafka snapshots at every roll) so that a truncation replays one
  segment, not the whole log (:meth:`ProducerStateManager.truncate_to`); the Log writes
  the same state to a snapshot file at each roll and at a clean shutdown
  (:mod:`broker.log.producer_snapshot`), so that opening a log replays only what follows
  its latest snapshot (:meth:`ProducerStateManager.restore`).

Transactions (docs/transactions.md): a producer's first transactional batch opens its
transaction at that batch's offset, and a control batch (a commit or abort marker, which
the Log decodes and passes in) closes it. The offsets of the open transactions give the
first unstable offset, which bounds the last stable offset (LSO) read_committed consumers
may read to; each closed transaction is returned as a :class:`CompletedTxn` with the LSO at
its marker, so that the Log can index an aborted one (``.txnindex``). The leader also
refuses a plain batch from a producer whose transaction is open (INVALID_TXN_STATE), a
marker of an older producer epoch, and one from an older coordinator epoch than the last.

Retention does not drop producers whose batches it deleted (Kafka 2.x did, answering the
producer's next batch UNKNOWN_PRODUCER_ID): their cached offsets still answer duplicates
correctly, and a producer that writes rarely is not stranded. A broker that reloads the log
from disk knows them from its snapshot files; a new replica, which copies batches and no
snapshot, never knew them.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

from proto import errors
from proto.records.control_records import ControlType, EndTxnMarker
from proto.records.record_batch import NO_SEQUENCE, BatchHeader
from proto.topic_partition import TopicPartition

__all__ = [
    "BATCHES_PER_PRODUCER",
    "SNAPSHOTS_RETAINED",
    "AppendOrigin",
    "BatchMetadata",
    "CompletedTxn",
    "MarkerReader",
    "ProducerEntry",
    "ProducerStateManager",
    "in_sequence",
]

log = logging.getLogger(__name__)

BATCHES_PER_PRODUCER = 5
"""Kafka's ``ProducerStateEntry.NumBatchesToRetain``: the most batches an idempotent
producer may have in flight to one partition, so the most a retry may reach back."""
SNAPSHOTS_RETAINED = 2
"""In-memory snapshots kept (the latest segment boundaries); Kafka keeps the last two
snapshot files for the same purpose: truncation rarely reaches further back."""

_INT32_MAX = 2**31 - 1


class AppendOrigin(enum.Enum):
    """Who appends to a leader's log (Kafka's ``AppendOrigin``). A client's batches get
    every producer check; a coordinator's (the group coordinator's transactional offset
    commits in ``__consumer_offsets``) only the epoch's: the coordinator numbers no
    sequences, as its batches are never retried by a client."""

    CLIENT = "client"
    COORDINATOR = "coordinator"


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    """Whether ``next_sequence`` directly follows ``last_sequence``: +1, or INT32_MAX -> 0
    (the producer's sequences wrap, Kafka's ``ProducerStateManager.inSequence``)."""
    return next_sequence == last_sequence + 1 or (
        last_sequence == _INT32_MAX and next_sequence == 0
    )


class BatchMetadata(NamedTuple):
    """Where one batch of a producer went (Kafka's ``BatchMetadata``)."""

    first_sequence: int
    last_sequence: int
    """The batch's base sequence + lastOffsetDelta, wrapped past INT32_MAX."""
    base_offset: int
    last_offset: int

    @classmethod
    def of(cls, header: BatchHeader) -> BatchMetadata:
        # Built for every idempotent batch appended: tuple.__new__ skips the generated
        # __new__'s argument parsing (as proto.records.record_batch builds its headers).
        return _new_tuple(
            cls,
            (header.base_sequence, header.last_sequence, header.base_offset, header.last_offset),
        )


class CompletedTxn(NamedTuple):
    """A transaction a marker closed (Kafka's ``CompletedTxn``)."""

    producer_id: int
    first_offset: int
    last_offset: int
    """The marker's offset."""
    is_aborted: bool
    last_stable_offset: int
    """The partition's LSO once this transaction is closed: the first offset of another
    producer's open transaction, else the offset after the marker."""


MarkerReader = Callable[[BatchHeader], EndTxnMarker | None]
"""The marker a control batch holds (None for an empty batch, whose transaction the
cleaner removed, or a control type this broker does not know)."""


class ProducerEntry(NamedTuple):
    """One producer id's state. Immutable, so that a snapshot is a shallow dict copy."""

    epoch: int
    batches: tuple[BatchMetadata, ...]
    """The last batches of ``epoch``, oldest first; at most BATCHES_PER_PRODUCER (none
    after a marker of a new epoch, before the epoch's first batch)."""
    txn_first_offset: int = -1
    """The first offset of the producer's open transaction, -1 when none is open."""
    coordinator_epoch: int = -1
    """The coordinator epoch of the last marker written for the producer."""

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        """The cached batch ``header`` repeats (same epoch, same sequence range), if any."""
        if header.producer_epoch != self.epoch:
            return None
        first, last = header.base_sequence, header.last_sequence
        for batch in self.batches:
            if batch.first_sequence == first and batch.last_sequence == last:
                return batch
        return None

    def appended(self, header: BatchHeader) -> ProducerEntry:
        """This entry after ``header``'s batch is written: a new epoch starts afresh, and
        a transactional batch opens a transaction unless one is open."""
        batch = BatchMetadata.of(header)
        txn_first = self.txn_first_offset
        if txn_first < 0 and header.is_transactional:
            txn_first = header.base_offset
        if header.producer_epoch != self.epoch:
            fields = (header.producer_epoch, (batch,), txn_first, self.coordinator_epoch)
            return _new_tuple(ProducerEntry, fields)
        batches = (*self.batches[1 - BATCHES_PER_PRODUCER :], batch)
        return _new_tuple(ProducerEntry, (self.epoch, batches, txn_first, self.coordinator_epoch))


_new_tuple = tuple.__new__


def _new_entry(header: BatchHeader) -> ProducerEntry:
    txn_first = header.base_offset if header.is_transactional else -1
    return ProducerEntry(header.producer_epoch, (BatchMetadata.of(header),), txn_first, -1)


def _is_producer_batch(header: BatchHeader) -> bool:
    # Control batches (transaction markers, from Kafka-written logs) carry a producer id but
    # no sequence: they do not advance the producer's sequence (Kafka's ProducerAppendInfo).
    return header.has_producer_id and not header.is_control


class ProducerStateManager:
    """The producer state of one partition. Not thread-safe: its Log's lock guards it."""

    def __init__(self, topic_partition: TopicPartition) -> None:
        self.topic_partition = topic_partition
        self._producers: dict[int, ProducerEntry] = {}
        self._ongoing: dict[int, int] = {}
        """First offset of an open transaction -> its producer id, in offset order."""
        self._unreplicated: dict[int, int] = {}
        """First offset of a closed transaction -> its marker's offset, while the marker may
        lie at or above the high watermark (Kafka's ``unreplicatedTxns``): the LSO stays
        below it until the marker is replicated, as a leader that dies first leaves its
        successor without the marker."""
        self._last_marker_offset = -1
        self._snapshots: dict[int, _Snapshot] = {}
        """Offset -> the state covering exactly the batches below it; ascending offsets."""

    def __repr__(self) -> str:
        return f"ProducerStateManager({self.topic_partition}, producers={len(self._producers)})"

    @property
    def producers(self) -> Mapping[int, ProducerEntry]:
        """Producer id -> entry (a copy)."""
        return dict(self._producers)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    @property
    def snapshot_offsets(self) -> list[int]:
        return list(self._snapshots)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction, None when none is open: the
        LSO is never above it."""
        return min(self._ongoing, default=None)

    @property
    def has_unreplicated(self) -> bool:
        """Whether a closed transaction's marker may still lie at or above the HW."""
        return bool(self._unreplicated)

    def forget_replicated(self, high_watermark: int) -> None:
        """Forget the closed transactions whose markers are below ``high_watermark``."""
        unreplicated = self._unreplicated
        for first in [f for f, marker in unreplicated.items() if marker < high_watermark]:
            del unreplicated[first]

    def first_unstable_offset_at(self, high_watermark: int) -> int | None:
        """The LSO's bound at ``high_watermark``: the first offset of the earliest open
        transaction, or of a closed one whose marker is not below ``high_watermark`` yet
        (those whose markers are below it are forgotten here)."""
        self.forget_replicated(high_watermark)
        unreplicated = self._unreplicated
        first_open = min(self._ongoing, default=None)
        first_unreplicated = min(unreplicated, default=None)
        if first_open is None or first_unreplicated is None:
            return first_unreplicated if first_open is None else first_open
        return min(first_open, first_unreplicated)

    @property
    def ongoing_transactions(self) -> Mapping[int, int]:
        """First offset -> producer id of every open transaction (a copy)."""
        return dict(self._ongoing)

    # -- the leader's checks -----------------------------------------------------------------

    def check_leader_append(
        self, headers: Sequence[BatchHeader], origin: AppendOrigin = AppendOrigin.CLIENT
    ) -> BatchMetadata | None:
        """Check a produced entry's batches, in order, before the leader appends them.

        Returns None when every batch may be appended. Returns the original placement when
        every batch is a duplicate of one already written (a retry): the leader appends
        nothing and answers with the offsets the batches got the first time (base offset of
        the first, last offset of the last). Raises, appending nothing of the entry:

        - InvalidProducerEpochError: an epoch older than the producer id's latest;
        - OutOfOrderSequenceError: a sequence that does not follow the producer's last one
          (a gap, or a repeat older than the cached batches), a new epoch or an unknown
          producer not starting at 0;
        - InvalidRequestError: an entry mixing duplicates with new batches, which no retry
          of one request produces (its offsets could not be answered as one range).

        Batches without a producer id are not checked. A batch is checked against the
        state left by the entry's earlier batches; duplicates only against what is written,
        as Kafka's ``Log.analyzeAndValidateProducerState`` does. A coordinator's batches
        (``origin``) are checked for their epoch and transaction only.
        """
        if origin is AppendOrigin.COORDINATOR:
            self._check_coordinator_append(headers)
            return None
        pending: dict[int, ProducerEntry] = {}
        duplicates: list[BatchMetadata] = []
        new_batches = 0
        last_index = len(headers) - 1
        for index, header in enumerate(headers):
            if not _is_producer_batch(header):
                new_batches += 1
                continue
            producer_id = header.producer_id
            written = self._producers.get(producer_id)
            entry = pending.get(producer_id, written)
            # The common case first: the producer's next batch. It cannot also repeat a
            # cached batch, as the five cached ones are far from spanning 2**31 sequences.
            if (
                entry is None
                or header.producer_epoch != entry.epoch
                or not in_sequence(entry.last_sequence, header.base_sequence)
            ):
                if written is not None and (duplicate := written.find_duplicate(header)):
                    duplicates.append(duplicate)
                    continue
                self._check_sequence(entry, header)
            if entry is not None and entry.txn_first_offset >= 0 and not header.is_transactional:
                raise errors.InvalidTxnStateError(
                    f"{self.topic_partition}: producer {producer_id} sent a batch outside "
                    f"its transaction, open since offset {entry.txn_first_offset}"
                )
            if index < last_index:  # only a later batch of this entry needs it
                pending[producer_id] = (
                    _new_entry(header) if entry is None else entry.appended(header)
                )
            new_batches += 1
        if not duplicates:
            return None
        if new_batches:
            raise errors.InvalidRequestError(
                f"{self.topic_partition}: {len(duplicates)} of the entry's batches were "
                f"written before (first at offset {duplicates[0].base_offset}) and "
                f"{new_batches} are new; send new batches in a request of their own"
            )
        return BatchMetadata(
            duplicates[0].first_sequence,
            duplicates[-1].last_sequence,
            duplicates[0].base_offset,
            max(d.last_offset for d in duplicates),
        )

    def _check_coordinator_append(self, headers: Sequence[BatchHeader]) -> None:
        for header in headers:
            if not _is_producer_batch(header):
                continue
            entry = self._producers.get(header.producer_id)
            if entry is not None and header.producer_epoch < entry.epoch:
                raise errors.InvalidProducerEpochError(
                    f"{self.topic_partition}: producer {header.producer_id} epoch "
                    f"{header.producer_epoch} is fenced: the partition has seen epoch "
                    f"{entry.epoch}"
                )

    def _check_sequence(self, entry: ProducerEntry | None, header: BatchHeader) -> None:
        """Kafka 2.x's ``ProducerAppendInfo.checkProducerEpoch`` and ``checkSequence``."""
        producer_id, epoch, first = header.producer_id, header.producer_epoch, header.base_sequence
        where = f"{self.topic_partition}: producer {producer_id} epoch {epoch}"
        if entry is None:
            # Kafka answers UNKNOWN_PRODUCER_ID here when the producer's batches may have
            # been removed by retention; without that case a gap is all it can be.
            if first != 0:
                raise errors.OutOfOrderSequenceError(
                    f"{where}: first sequence of an unknown producer must be 0, got {first}"
                )
            return
        if epoch < entry.epoch:
            raise errors.InvalidProducerEpochError(
                f"{where} is fenced: the partition has seen epoch {entry.epoch}"
            )
        if epoch > entry.epoch:
            if first != 0:
                raise errors.OutOfOrderSequenceError(
                    f"{where}: a new epoch (after {entry.epoch}) must start at sequence 0, "
                    f"got {first}"
                )
            return
        if not in_sequence(entry.last_sequence, first):
            raise errors.OutOfOrderSequenceError(
                f"{where}: sequence {first} does not follow the last written sequence "
                f"{entry.last_sequence} (expected {(entry.last_sequence + 1) & _INT32_MAX})"
            )

    def check_leader_marker(self, header: BatchHeader, marker: EndTxnMarker) -> None:
        """Check a marker before the leader writes it (WriteTxnMarkers): raises
        InvalidProducerEpochError for an epoch older than the producer's, and
        TransactionCoordinatorFencedError for a coordinator epoch older than the one of the
        producer's last marker (Kafka's ``appendEndTxnMarker`` checks)."""
        entry = self._producers.get(header.producer_id)
        if entry is None:
            return
        where = f"{self.topic_partition}: marker for producer {header.producer_id}"
        if header.producer_epoch < entry.epoch:
            raise errors.InvalidProducerEpochError(
                f"{where} has epoch {header.producer_epoch}, the partition has seen {entry.epoch}"
            )
        if marker.coordinator_epoch < entry.coordinator_epoch:
            raise errors.TransactionCoordinatorFencedError(
                f"{where} comes from coordinator epoch {marker.coordinator_epoch}, older than "
                f"{entry.coordinator_epoch}"
            )

    # -- updates -------------------------------------------------------------------------

    def update(
        self, headers: Iterable[BatchHeader], markers: MarkerReader | None = None
    ) -> list[CompletedTxn]:
        """Record written batches (their headers as written: base offsets stamped), and
        return the transactions their markers closed.

        The leader after its checks, a follower after appending what it fetched, and the
        Log replaying its segments all come here; nothing is checked: the log is the truth.
        ``markers`` reads a control batch's marker; without it control batches are skipped
        (a log that holds none).
        """
        producers = self._producers
        completed: list[CompletedTxn] = []
        for header in headers:
            if not header.has_producer_id:
                continue
            producer_id = header.producer_id
            if header.is_control:
                marker = markers(header) if markers is not None else None
                if marker is not None:
                    done = self._close_transaction(header, marker)
                    if done is not None:
                        completed.append(done)
                continue
            entry = producers.get(producer_id)
            new = _new_entry(header) if entry is None else entry.appended(header)
            producers[producer_id] = new
            if new.txn_first_offset >= 0 and (entry is None or entry.txn_first_offset < 0):
                self._ongoing[new.txn_first_offset] = producer_id
        return completed

    def _close_transaction(self, header: BatchHeader, marker: EndTxnMarker) -> CompletedTxn | None:
        producer_id, epoch = header.producer_id, header.producer_epoch
        entry = self._producers.get(producer_id)
        completed = None
        if entry is not None and entry.txn_first_offset >= 0:
            first = entry.txn_first_offset
            del self._ongoing[first]
            self._unreplicated[first] = header.base_offset
            lso = min(self._ongoing, default=header.base_offset + 1)
            aborted = marker.control_type == ControlType.ABORT
            completed = CompletedTxn(producer_id, first, header.base_offset, aborted, lso)
        batches = entry.batches if entry is not None and entry.epoch == epoch else ()
        self._producers[producer_id] = ProducerEntry(epoch, batches, -1, marker.coordinator_epoch)
        self._last_marker_offset = header.base_offset
        return completed

    def state(self) -> tuple[dict[int, ProducerEntry], int]:
        """The producers (a copy) and the offset of the last marker: what a snapshot file
        keeps."""
        return dict(self._producers), self._last_marker_offset

    def restore(
        self, producers: Mapping[int, ProducerEntry], last_marker_offset: int, offset: int
    ) -> None:
        """Take the state of a snapshot file, that of the log below ``offset`` (then replay
        the batches from ``offset`` on). The open transactions follow from the entries."""
        self._producers = dict(producers)
        self._unreplicated = {}
        self._ongoing = {
            entry.txn_first_offset: producer_id
            for producer_id, entry in sorted(
                self._producers.items(), key=lambda item: item[1].txn_first_offset
            )
            if entry.txn_first_offset >= 0
        }
        self._last_marker_offset = last_marker_offset
        self._snapshots.clear()
        self.take_snapshot(offset)

    def clear(self) -> None:
        """Forget everything, snapshots included (the log was emptied)."""
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self._last_marker_offset = -1
        self._snapshots.clear()

    # -- snapshots and truncation ----------------------------------------------------------

    def take_snapshot(self, offset: int) -> None:
        """Remember the current state as that of the log below ``offset`` (the log end
        offset now: a segment boundary). Only the latest SNAPSHOTS_RETAINED are kept."""
        self._snapshots.pop(offset, None)
        self._snapshots[offset] = _Snapshot(
            dict(self._producers), dict(self._ongoing), self._last_marker_offset
        )
        while len(self._snapshots) > SNAPSHOTS_RETAINED:
            del self._snapshots[next(iter(self._snapshots))]

    def truncate_to(self, end_offset: int) -> int | None:
        """Forget batches at or above ``end_offset`` (the log was truncated there).

        Returns None when the state is already exact: no producer had a batch in the
        truncated part, the common case. Otherwise the state is reset to the latest snapshot
        at or below ``end_offset`` (empty if none) and the offset it covers up to is
        returned: the caller must replay (:meth:`update`) the log's batches from there to
        ``end_offset``, because the truncated producers' older batches, beyond their cached
        ones, are only in the log.
        """
        for offset in [o for o in self._snapshots if o > end_offset]:
            del self._snapshots[offset]
        if self._last_marker_offset < end_offset and all(
            entry.last_offset < end_offset for entry in self._producers.values()
        ):
            return None
        self._unreplicated = {f: m for f, m in self._unreplicated.items() if m < end_offset}
        base = max(self._snapshots, default=None)
        if base is None:
            self._producers, self._ongoing, self._last_marker_offset = {}, {}, -1
            return 0
        snapshot = self._snapshots[base]
        self._producers = dict(snapshot.producers)
        self._ongoing = dict(snapshot.ongoing)
        self._last_marker_offset = snapshot.last_marker_offset
        return base


class _Snapshot(NamedTuple):
    producers: dict[int, ProducerEntry]
    ongoing: dict[int, int]
    last_marker_offset: int
