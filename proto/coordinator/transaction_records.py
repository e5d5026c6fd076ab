"""The records of ``__transaction_state``, as Kafka 2.8 writes them (its
``TransactionLogKey`` and ``TransactionLogValue`` schemas, version 0 of each):
docs/transactions.md.

The key is a transactional id. The value is what the transaction coordinator knows of it:
the producer id and epoch it was given, its transaction timeout, the state of its current
transaction, the partitions that transaction writes to, and two times. A null value (a
tombstone) is written when an idle transactional id expires; compaction then drops it.

Two rules Kafka's decoder enforces are kept: the partitions are null exactly when the state
is Empty (an Empty id has no transaction), and a state byte Kafka does not define is an
error, not a guess.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from proto.coordinator.struct_codec import StructError, StructReader, StructWriter
from proto.topic_partition import TopicPartition

__all__ = [
    "TransactionLogValue",
    "TransactionRecordError",
    "TransactionState",
    "decode_transaction_key",
    "decode_transaction_value",
    "encode_transaction_key",
    "encode_transaction_value",
]

KEY_VERSION = 0
VALUE_VERSION = 0


class TransactionRecordError(StructError):
    """A key or value of ``__transaction_state`` that does not decode."""


class TransactionState(enum.IntEnum):
    """A transactional id's state, with the byte Kafka stores for it."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka's tools print (``Ongoing``, ``PrepareCommit``, ...)."""
        return "".join(word.capitalize() for word in self.name.split("_"))


@dataclass(frozen=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    last_update_timestamp_ms: int
    start_timestamp_ms: int


def encode_transaction_key(transactional_id: str) -> bytes:
    return StructWriter().int16(KEY_VERSION).string(transactional_id).data


def decode_transaction_key(data: bytes) -> str:
    """The transactional id. TransactionRecordError if the key does not decode."""
    try:
        r = StructReader(data, "__transaction_state key")
        version = r.int16("version")
        if version != KEY_VERSION:
            raise TransactionRecordError(f"__transaction_state key: unknown version {version}")
        transactional_id = r.string("transactional_id")
        r.done()
        return transactional_id
    except TransactionRecordError:
        raise
    except StructError as err:
        raise TransactionRecordError(str(err)) from None


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return grouped


def encode_transaction_value(value: TransactionLogValue) -> bytes:
    """Kafka's ``valueToBytes``: an Empty id has no partitions, and writes a null array."""
    if value.state == TransactionState.EMPTY and value.partitions:
        raise TransactionRecordError(
            f"an Empty transactional id holds no partitions, not {sorted(value.partitions)}"
        )
    w = StructWriter().int16(VALUE_VERSION).int64(value.producer_id)
    w.int16(value.producer_epoch).int32(value.transaction_timeout_ms).int8(value.state)
    if value.state == TransactionState.EMPTY:
        w.int32(-1)
    else:
        grouped = _by_topic(value.partitions)
        w.int32(len(grouped))
        for topic, partitions in grouped.items():
            w.string(topic).int32(len(partitions))
            for partition in partitions:
                w.int32(partition)
    return w.int64(value.last_update_timestamp_ms).int64(value.start_timestamp_ms).data


def decode_transaction_value(data: bytes) -> TransactionLogValue:
    """Version 0. TransactionRecordError if it does not decode."""
    try:
        r = StructReader(data, "transaction log value")
        version = r.int16("version")
        if version != VALUE_VERSION:
            raise TransactionRecordError(f"transaction log value: unknown version {version}")
        producer_id = r.int64("producer_id")
        producer_epoch = r.int16("producer_epoch")
        timeout_ms = r.int32("transaction_timeout_ms")
        status = r.int8("transaction_status")
        try:
            state = TransactionState(status)
        except ValueError:
            raise TransactionRecordError(
                f"transaction log value: unknown transaction status {status}"
            ) from None
        partitions: set[TopicPartition] = set()
        topics = r.nullable_count("transaction_partitions")
        for _ in range(topics or 0):
            topic = r.string("topic")
            for _ in range(r.count("partition_ids")):
                partitions.add(TopicPartition(topic, r.int32("partition_id")))
        last_update = r.int64("transaction_last_update_timestamp_ms")
        start = r.int64("transaction_start_timestamp_ms")
        r.done()
        # Kafka ignores the partitions of an Empty id when it reads one.
        if state == TransactionState.EMPTY:
            partitions.clear()
        return TransactionLogValue(
            producer_id,
            producer_epoch,
            timeout_ms,
            state,
            frozenset(partitions),
            last_update,
            start,
        )
    except TransactionRecordError:
        raise
    except StructError as err:
        raise TransactionRecordError(str(err)) from None
