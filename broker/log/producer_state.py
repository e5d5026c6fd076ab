"""What a partition knows of its idempotent producers (Kafka's ``ProducerStateManager``,
simplified: no transactions, no snapshot files, no producer expiry).

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
  segment, not the whole log (:meth:`ProducerStateManager.truncate_to`).

Retention does not drop producers whose batches it deleted (Kafka 2.x did, answering the
producer's next batch UNKNOWN_PRODUCER_ID): their cached offsets still answer duplicates
correctly, and a producer that writes rarely is not stranded. A broker that reloads the log
from disk forgets them, as a new replica would never have known them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from proto import errors
from proto.records.record_batch import NO_SEQUENCE, BatchHeader
from proto.topic_partition import TopicPartition

__all__ = [
    "BATCHES_PER_PRODUCER",
    "SNAPSHOTS_RETAINED",
    "BatchMetadata",
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


class ProducerEntry(NamedTuple):
    """One producer id's state. Immutable, so that a snapshot is a shallow dict copy."""

    epoch: int
    batches: tuple[BatchMetadata, ...]
    """The last batches of ``epoch``, oldest first; at most BATCHES_PER_PRODUCER, never none."""

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
        """This entry after ``header``'s batch is written: a new epoch starts afresh."""
        batch = BatchMetadata.of(header)
        if header.producer_epoch != self.epoch:
            return _new_tuple(ProducerEntry, (header.producer_epoch, (batch,)))
        return _new_tuple(
            ProducerEntry, (self.epoch, (*self.batches[1 - BATCHES_PER_PRODUCER :], batch))
        )


_new_tuple = tuple.__new__


def _new_entry(header: BatchHeader) -> ProducerEntry:
    return ProducerEntry(header.producer_epoch, (BatchMetadata.of(header),))


def _is_producer_batch(header: BatchHeader) -> bool:
    # Control batches (transaction markers, from Kafka-written logs) carry a producer id but
    # no sequence: they do not advance the producer's sequence (Kafka's ProducerAppendInfo).
    return header.has_producer_id and not header.is_control


class ProducerStateManager:
    """The producer state of one partition. Not thread-safe: its Log's lock guards it."""

    def __init__(self, topic_partition: TopicPartition) -> None:
        self.topic_partition = topic_partition
        self._producers: dict[int, ProducerEntry] = {}
        self._snapshots: dict[int, dict[int, ProducerEntry]] = {}
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

    # -- the leader's checks -----------------------------------------------------------------

    def check_leader_append(self, headers: Sequence[BatchHeader]) -> BatchMetadata | None:
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
        as Kafka's ``Log.analyzeAndValidateProducerState`` does.
        """
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

    # -- updates -------------------------------------------------------------------------

    def update(self, headers: Iterable[BatchHeader]) -> None:
        """Record written batches (their headers as written: base offsets stamped).

        The leader after its checks, a follower after appending what it fetched, and the
        Log replaying its segments all come here; nothing is checked: the log is the truth.
        """
        producers = self._producers
        for header in headers:
            if not _is_producer_batch(header):
                continue
            entry = producers.get(header.producer_id)
            producers[header.producer_id] = (
                _new_entry(header) if entry is None else entry.appended(header)
            )

    def clear(self) -> None:
        """Forget everything, snapshots included (the log was emptied)."""
        self._producers.clear()
        self._snapshots.clear()

    # -- snapshots and truncation ----------------------------------------------------------

    def take_snapshot(self, offset: int) -> None:
        """Remember the current state as that of the log below ``offset`` (the log end
        offset now: a segment boundary). Only the latest SNAPSHOTS_RETAINED are kept."""
        self._snapshots.pop(offset, None)
        self._snapshots[offset] = dict(self._producers)
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
        if all(entry.last_offset < end_offset for entry in self._producers.values()):
            return None
        base = max(self._snapshots, default=None)
        self._producers = {} if base is None else dict(self._snapshots[base])
        return 0 if base is None else base
