"""What a read_committed consumer keeps of the batches a fetch returned (Kafka's consumer
``CompletedFetch.nextFetchedRecord``): docs/transactions.md, "The aborted-transaction
index".

A read_committed fetch returns the batches below the last stable offset and the aborted
transactions that may overlap them, each as (producer id, first offset). Walking the
batches in offset order, a producer's transaction counts as aborted from its first offset
on, until the producer's abort marker; its transactional data batches in between are
dropped. Control batches (markers) are never records for the application.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from proto.records.control_records import ControlRecordError, ControlType, decode_control_type
from proto.records.record_batch import BatchHeader, decode_batch

__all__ = ["AbortedTransactionFilter"]


class AbortedTransactionFilter:
    """Decides, batch by batch in offset order, which batches a read_committed consumer
    drops."""

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        """``aborted``: (producer id, first offset) of each aborted transaction the fetch
        answer listed."""
        self._pending = [(first_offset, producer_id) for producer_id, first_offset in aborted]
        heapq.heapify(self._pending)
        self._aborting: set[int] = set()

    def drops(self, header: BatchHeader, data: bytes | memoryview, position: int) -> bool:
        """Whether the batch at ``position`` of ``data`` is dropped (control batches always
        are). Call it for every batch, in order: markers close aborted transactions."""
        if header.has_producer_id:
            last_offset = header.next_offset - 1
            while self._pending and self._pending[0][0] <= last_offset:
                self._aborting.add(heapq.heappop(self._pending)[1])
        if header.is_control:
            if header.producer_id in self._aborting and _is_abort_marker(data, position):
                self._aborting.discard(header.producer_id)
            return True
        return header.is_transactional and header.producer_id in self._aborting


def _is_abort_marker(data: bytes | memoryview, position: int) -> bool:
    records = decode_batch(data, position).records
    if not records:
        return False
    try:
        return decode_control_type(records[0].key) is ControlType.ABORT
    except ControlRecordError:
        return False
