"""How each transaction ended in one replica's log, from its batch headers (docs/audit.md,
"Transactions").

A transactional producer's batches carry the transactional flag and its producer id; the
transaction they belong to ends, in that partition, at the next control batch of the same
producer id: a commit or an abort marker (``control_type``), written by the partition
leader when the coordinator completes the transaction (docs/transactions.md). So walking a
replica's transactional batches in offset order, keeping each producer id's batches since
its last marker, tells every data batch its outcome: ``COMMITTED``, ``ABORTED``, or
``OPEN`` when no marker follows (the transaction is in flight, or hangs). Markers are
matched by producer id alone: an abort after a producer epoch bump (KIP-360, a fenced
producer) carries the new epoch and still ends the old epoch's batches, as Kafka's
``ProducerStateManager`` ends them.

What consumers are served follows: a read_committed consumer gets committed data only; no
consumer ever gets a control batch (it advances the position, returns no record). So the
offsets of control batches, and of aborted transactions' batches, are no records a poll
can be said to skip (:func:`hidden_spans`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from chaos.audit.log_checks import BatchTable
from proto.records.control_records import ControlType
from proto.records.record_batch import CONTROL_FLAG_MASK, TRANSACTIONAL_FLAG_MASK

__all__ = [
    "ABORTED",
    "COMMITTED",
    "COORDINATOR_TOPICS",
    "OPEN",
    "TransactionSpans",
    "aborted_ranges",
    "any_transactional",
    "hidden_spans",
    "in_ranges",
    "outcomes",
    "served",
]

I64 = npt.NDArray[np.int64]

COORDINATOR_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
"""Internal topics whose batches the coordinators write, under a transactional producer's
id and epoch with sequence 0 each time (as Kafka's group coordinator writes a
TxnOffsetCommit): equal sequences there are no retry written twice."""

COMMITTED = int(ControlType.COMMIT)
ABORTED = int(ControlType.ABORT)
OPEN = -1
"""No marker of the producer follows the batch in this log."""


@dataclass(slots=True)
class TransactionSpans:
    """One replica's transactional data batches (in offset order) and their outcomes, and
    its control batches; small enough to hand to the driver (a few numbers a batch)."""

    broker: int
    base_offset: I64
    last_offset: I64
    producer_id: I64
    max_timestamp: I64
    """The batch's largest record timestamp (ms, the producer's clock)."""
    outcome: I64
    """:data:`COMMITTED`, :data:`ABORTED` or :data:`OPEN`."""
    marker_offset: I64
    """The offset of the marker that ended the batch's transaction, -1 while open."""
    marker_timestamp: I64
    """When the leader wrote that marker (ms, the broker's clock), -1 while open."""
    control_offsets: I64
    """Offsets of the replica's control batches (one record each)."""
    control_types: I64
    """Their markers (0 abort, 1 commit, other: unknown)."""

    def __len__(self) -> int:
        return len(self.base_offset)

    def find(self, offsets: I64) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
        """For each offset, the index of the data batch holding it and whether one does."""
        index = np.searchsorted(self.last_offset, offsets)
        inside = index < len(self)
        clipped = np.where(inside, index, 0)
        found = inside & (self.base_offset[clipped] <= offsets) if len(self) else inside
        return clipped, found


def outcomes(table: BatchTable, broker: int) -> TransactionSpans:
    """The transaction spans of one replica's batches (its whole log, in file order: a
    transaction's marker may lie segments after its first batch)."""
    chosen = np.flatnonzero(table.valid & ((table.flags & TRANSACTIONAL_FLAG_MASK) != 0))
    chosen = chosen[np.argsort(table.base_offset[chosen], kind="stable")]
    control = (table.flags[chosen] & CONTROL_FLAG_MASK) != 0
    data = chosen[~control]
    markers = chosen[control]
    outcome = np.full(len(data), OPEN, dtype=np.int64)
    marker_offset = np.full(len(data), -1, dtype=np.int64)
    marker_timestamp = np.full(len(data), -1, dtype=np.int64)
    position = {int(i): k for k, i in enumerate(data.tolist())}
    open_batches: dict[int, list[int]] = {}
    pids = table.producer_id
    for i, is_control in zip(chosen.tolist(), control.tolist(), strict=True):
        pid = int(pids[i])
        if not is_control:
            open_batches.setdefault(pid, []).append(position[i])
            continue
        kind = int(table.control_type[i])
        if kind not in (COMMITTED, ABORTED):
            continue  # not a marker Kafka knows: readers skip it, the transaction goes on
        ended = open_batches.pop(pid, [])
        outcome[ended] = kind
        marker_offset[ended] = int(table.base_offset[i])
        marker_timestamp[ended] = int(table.max_timestamp[i])
    return TransactionSpans(
        broker,
        table.base_offset[data],
        table.last_offset[data],
        pids[data],
        table.max_timestamp[data],
        outcome,
        marker_offset,
        marker_timestamp,
        table.base_offset[markers],
        table.control_type[markers],
    )


def hidden_spans(table: BatchTable) -> npt.NDArray[np.bool_]:
    """Of the table's batches: those no consumer is served as records a poll could skip:
    control batches, and data batches of transactions the log aborts (a read_committed
    consumer never sees them; one reading uncommitted does, so its skips over them go
    unjudged)."""
    hidden: npt.NDArray[np.bool_] = (table.flags & CONTROL_FLAG_MASK) != 0
    transactional = table.valid & ((table.flags & TRANSACTIONAL_FLAG_MASK) != 0) & ~hidden
    if not transactional.any():
        return hidden
    spans = outcomes(table, -1)
    aborted = spans.base_offset[spans.outcome == ABORTED]
    aborted_batch: npt.NDArray[np.bool_] = np.isin(table.base_offset, aborted)
    hidden = hidden | (transactional & aborted_batch)
    return hidden


def served(table: BatchTable) -> BatchTable:
    """The table's batches a consumer could be served as records (the held ranges of the
    poll checks are made of these): all but :func:`hidden_spans`'."""
    hidden = hidden_spans(table)
    return table.take(np.flatnonzero(~hidden)) if hidden.any() else table


def aborted_ranges(tables: Sequence[BatchTable]) -> list[tuple[int, int]]:
    """The [first, last] offsets of the data batches some replica's log aborts: records a
    cleaning removes (Kafka's cleaner drops aborted transactions), which no replica owes."""
    found: list[tuple[int, int]] = []
    for table in tables:
        if not bool(((table.flags & TRANSACTIONAL_FLAG_MASK) != 0).any()):
            continue
        spans = outcomes(table, -1)
        aborted = spans.outcome == ABORTED
        firsts, lasts = spans.base_offset[aborted].tolist(), spans.last_offset[aborted].tolist()
        found += zip(firsts, lasts, strict=True)
    merged: list[tuple[int, int]] = []
    for first, last in sorted(found):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def in_ranges(offsets: I64, ranges: Sequence[tuple[int, int]]) -> npt.NDArray[np.bool_]:
    """Which offsets lie in one of the sorted [first, last] ``ranges``."""
    if not ranges:
        return np.zeros(len(offsets), dtype=np.bool_)
    firsts = np.array([f for f, _ in ranges], dtype=np.int64)
    lasts = np.array([t for _, t in ranges], dtype=np.int64)
    at = np.searchsorted(firsts, offsets, side="right") - 1
    inside: npt.NDArray[np.bool_] = (at >= 0) & (offsets <= lasts[np.maximum(at, 0)])
    return inside


def any_transactional(tables: Sequence[BatchTable]) -> bool:
    """Whether any of the tables holds a transactional batch."""
    return any(bool(((t.flags & TRANSACTIONAL_FLAG_MASK) != 0).any()) for t in tables)
