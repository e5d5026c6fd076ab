"""Kafka's consumer protocol (``ConsumerProtocol``): what the members of a group of protocol
type ``consumer`` send as JoinGroup metadata and SyncGroup assignments.

The group coordinator relays these bytes without reading them (the assignor runs in the
clients); it decodes an assignment only to describe a group to an operator, as Kafka's
``kafka-consumer-groups --describe`` does on the client side. The assignment has the same
layout in every version (0-3, ``ConsumerProtocolAssignment.json``)::

    version int16, [topic string, [partition int32]], user_data nullable bytes

and a reader ignores what a newer version appends, as Kafka's does.
"""

from __future__ import annotations

import struct

from proto.errors import MinibrokerError
from proto.topic_partition import TopicPartition

__all__ = ["CONSUMER_PROTOCOL_TYPE", "ConsumerProtocolError", "decode_assignment"]

CONSUMER_PROTOCOL_TYPE = "consumer"
"""The JoinGroup ``protocol_type`` of Kafka's consumers (Connect's workers say ``connect``)."""

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class ConsumerProtocolError(MinibrokerError):
    """Bytes that are not a consumer protocol assignment."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, size: int) -> bytes:
        if size < 0 or self.at + size > len(self.data):
            raise ConsumerProtocolError(
                f"{len(self.data)}-byte assignment ends inside a field at byte {self.at}"
            )
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def int16(self) -> int:
        value: int = _INT16.unpack(self.take(2))[0]
        return value

    def int32(self) -> int:
        value: int = _INT32.unpack(self.take(4))[0]
        return value

    def count(self) -> int:
        """An array's length; -1 (null) reads as empty."""
        n = self.int32()
        if n < -1 or n > len(self.data):  # each element takes at least a byte
            raise ConsumerProtocolError(f"array of {n} elements in {len(self.data)} bytes")
        return max(n, 0)


def decode_assignment(data: bytes) -> list[TopicPartition]:
    """The partitions of a consumer protocol assignment, in the order it lists them. Empty
    bytes (a member between JoinGroup and SyncGroup, or given nothing) are no partitions;
    anything else that does not decode is a ConsumerProtocolError."""
    if not data:
        return []
    reader = _Reader(data)
    version = reader.int16()
    if version < 0:
        raise ConsumerProtocolError(f"assignment version {version}")
    partitions: list[TopicPartition] = []
    for _ in range(reader.count()):
        size = reader.int16()
        try:
            topic = reader.take(size).decode()
        except UnicodeDecodeError as err:
            raise ConsumerProtocolError(f"topic name is not UTF-8: {err}") from None
        partitions.extend(TopicPartition(topic, reader.int32()) for _ in range(reader.count()))
    return partitions
