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

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
from kio.serial import entity_reader

from proto.errors import MinibrokerError
from proto.topic_partition import TopicPartition

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "ConsumerProtocolError",
    "decode_assignment",
    "decode_subscription",
]

CONSUMER_PROTOCOL_TYPE = "consumer"
"""The JoinGroup ``protocol_type`` of Kafka's consumers (Connect's workers say ``connect``)."""

_VERSION = struct.Struct(">h")
_read_assignment = entity_reader(ConsumerProtocolAssignment)
"""kio's reader of the version-0 fields, which every later version starts with."""
_read_subscription = entity_reader(ConsumerProtocolSubscription)


class ConsumerProtocolError(MinibrokerError):
    """Bytes that are not a consumer protocol assignment."""


def decode_assignment(data: bytes) -> list[TopicPartition]:
    """The partitions of a consumer protocol assignment, in the order it lists them. Empty
    bytes (a member between JoinGroup and SyncGroup, or given nothing) are no partitions;
    anything else that does not decode is a ConsumerProtocolError."""
    if not data:
        return []
    try:
        (version,) = _VERSION.unpack_from(data)
        if version < 0:
            raise ConsumerProtocolError(f"assignment version {version}")
        assignment, _ = _read_assignment(data, _VERSION.size)
    except ConsumerProtocolError:
        raise
    except Exception as err:  # kio's native reader: ValueError, UnicodeDecodeError, ...
        raise ConsumerProtocolError(
            f"{len(data)}-byte consumer protocol assignment: {err!r}"
        ) from None
    return [
        TopicPartition(topic.topic, partition)
        for topic in assignment.assigned_partitions
        for partition in topic.partitions
    ]


def decode_subscription(data: bytes) -> list[str]:
    """The topics of a consumer protocol subscription (a member's JoinGroup metadata: the
    same version-0 prefix in every version, ``version int16, [topic string], user_data``);
    ConsumerProtocolError for bytes that do not decode."""
    try:
        (version,) = _VERSION.unpack_from(data)
        if version < 0:
            raise ConsumerProtocolError(f"subscription version {version}")
        subscription, _ = _read_subscription(data, _VERSION.size)
    except ConsumerProtocolError:
        raise
    except Exception as err:  # kio's native reader: ValueError, UnicodeDecodeError, ...
        raise ConsumerProtocolError(
            f"{len(data)}-byte consumer protocol subscription: {err!r}"
        ) from None
    return list(subscription.topics)
