"""Reading the commit and abort markers out of control batches, for the producer state
(broker.log.producer_state): from an append's bytes, or from a segment during a replay.

Markers are rare, so only control batches are ever decoded, and data batches cost one flag
test. A control batch whose record does not decode as a marker is skipped with a warning,
as Kafka skips an unknown control type: the leader wrote it (clients cannot), and nothing
the partition serves depends on it but the transaction it would close, which then stays
open and holds the LSO back, visibly, rather than exposing records that were never
committed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

from broker.log.log_segment import LogSegment
from broker.log.producer_state import MarkerReader
from proto.records.control_records import (
    ControlRecordError,
    EndTxnMarker,
    decode_control_type,
    decode_end_txn_marker,
)
from proto.records.record_batch import (
    CONTROL_FLAG_MASK,
    BatchHeader,
    CorruptRecordError,
    decode_batch,
)
from proto.topic_partition import TopicPartition

__all__ = ["append_markers", "marker_at", "replay_headers"]

log = logging.getLogger(__name__)


def marker_at(
    buf: bytes | bytearray | memoryview, position: int, where: TopicPartition
) -> EndTxnMarker | None:
    """The marker of the control batch at ``position`` of ``buf``; None for an empty batch
    (the cleaner removed its transaction), an unknown control type, or one that does not
    decode."""
    try:
        records = decode_batch(buf, position).records
        if not records or decode_control_type(records[0].key) is None:
            return None
        return decode_end_txn_marker(records[0])
    except (CorruptRecordError, ControlRecordError) as e:
        log.warning("%s: skipping a control batch that holds no marker: %s", where, e)
        return None


def append_markers(
    records: bytes | bytearray | memoryview,
    headers: Sequence[BatchHeader],
    where: TopicPartition,
) -> MarkerReader | None:
    """A reader of the markers among an append's batches (``records`` holds them in the
    order of ``headers``), or None when none is a control batch: the common case."""
    for header in headers:
        if header.attributes & CONTROL_FLAG_MASK:
            break
    else:
        return None  # the common case, checked at the cost of one bit test per batch
    positions: dict[int, int] = {}
    position = 0
    for header in headers:
        if header.is_control:
            positions[header.base_offset] = position
        position += header.size
    return lambda header: marker_at(records, positions[header.base_offset], where)


def replay_headers(
    segment: LogSegment, from_offset: int, where: TopicPartition
) -> tuple[Iterator[BatchHeader], MarkerReader]:
    """The headers of ``segment``'s batches from ``from_offset`` on, and a reader of the
    markers among them (which reads a control batch from the segment when it is met)."""
    positions: dict[int, tuple[int, int]] = {}

    def headers() -> Iterator[BatchHeader]:
        for position, header in segment.batch_headers():
            if header.base_offset < from_offset:
                continue
            if header.is_control:
                positions[header.base_offset] = (position, header.size)
            yield header

    def read(header: BatchHeader) -> EndTxnMarker | None:
        position, size = positions[header.base_offset]
        return marker_at(segment.read_at(position, size), 0, where)

    return headers(), read
