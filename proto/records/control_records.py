"""Control records: the commit and abort markers a partition leader writes to end a
transaction (Kafka's ``ControlRecordType`` and ``EndTransactionMarker``): docs/transactions.md.

A marker is a batch of its own, flagged control and transactional, carrying the producer
id and epoch of the transaction it ends and no sequence (-1). Its one record has

- a key ``version int16 (0), type int16`` (0 abort, 1 commit);
- a value ``version int16 (0), coordinator_epoch int32``: the epoch of the transaction
  coordinator that wrote it, so that a deposed coordinator's late marker can be refused.

Clients never write control batches (the leader refuses them); consumers skip them, and
their offsets are not returned as records, though they advance the consumer's position.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from proto.errors import MinibrokerError
from proto.records.record_batch import (
    CONTROL_FLAG_MASK,
    TRANSACTIONAL_FLAG_MASK,
    Record,
    encode_batch,
)

__all__ = [
    "ControlRecordError",
    "ControlType",
    "EndTxnMarker",
    "decode_control_type",
    "decode_end_txn_marker",
    "encode_marker_batch",
]

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
CURRENT_VERSION = 0


class ControlRecordError(MinibrokerError, ValueError):
    """A control record whose key or value is not a marker's."""


class ControlType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


class EndTxnMarker(NamedTuple):
    """A commit or abort marker and the coordinator epoch that wrote it."""

    control_type: ControlType
    coordinator_epoch: int


def encode_marker_batch(
    marker: EndTxnMarker,
    *,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    partition_leader_epoch: int = -1,
) -> bytes:
    """The one-record control batch of ``marker`` (base offset 0: the log assigns it)."""
    key = _KEY.pack(CURRENT_VERSION, marker.control_type)
    value = _VALUE.pack(CURRENT_VERSION, marker.coordinator_epoch)
    return encode_batch(
        [Record(key, value, timestamp)],
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        flags=TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK,
    )


def decode_control_type(key: bytes | None) -> ControlType | None:
    """The type a control record's key names; None for a type this version does not
    know (Kafka's UNKNOWN, which readers skip). ControlRecordError for a key too short."""
    if key is None or len(key) < _KEY.size:
        raise ControlRecordError(f"a control record key needs {_KEY.size} bytes, not {key!r}")
    version, kind = _KEY.unpack_from(key)
    if version < 0:
        raise ControlRecordError(f"control record key version {version}")
    try:
        return ControlType(kind)
    except ValueError:
        return None


def decode_end_txn_marker(record: Record) -> EndTxnMarker:
    """The marker a control record holds. ControlRecordError if it is not one."""
    control_type = decode_control_type(record.key)
    if control_type is None:
        raise ControlRecordError(f"control record at offset {record.offset} is not a marker")
    value = record.value
    if value is None or len(value) < _VALUE.size:
        raise ControlRecordError(
            f"marker at offset {record.offset}: its value needs {_VALUE.size} bytes"
        )
    version, coordinator_epoch = _VALUE.unpack_from(value)
    if version < 0:
        raise ControlRecordError(f"marker at offset {record.offset}: value version {version}")
    return EndTxnMarker(control_type, coordinator_epoch)
