"""The Produce response's frame packed directly, without kio's dataclasses.

Every produce request gets one answer, and the general encoder
(:func:`broker.kafka_listener.request_codec.encode_response`: a kio dataclass per message
built from the tree, then kio's writer walking it) spends about 20-40 µs on those few
dozen bytes, more than decoding a 500 KB request takes. This module writes the same bytes
with :mod:`struct` for the versions the listener serves (0-9), in the layout of Kafka's
``ProduceResponse.json`` (for 0-2, which kio lacks, it is the only encoder):

- header: correlation id; in v9 (flexible, KIP-482) also an empty tagged-field section;
- responses: per topic its name and its partitions; per partition index (int32),
  error code (int16), base offset, log append time (v2+, int64, -1 for CreateTime), log
  start offset (v5+, int64), record errors (v8+, always empty here) and error message
  (v8+, nullable); v9 uses compact arrays and strings and ends each struct with its tags;
- throttle time (v1+, int32 ms).

It packs only what the listener's produce answers hold; for anything else (record errors,
fields it does not know, a version outside 0-9) it returns None and the caller takes the
general encoder, so the two can only differ where a test compares them
(tests/unit/test_produce_response.py checks them byte for byte).
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Mapping
from typing import Any

__all__ = ["encode_produce_response"]

_MIN_VERSION, _MAX_VERSION = 0, 9
_FLEXIBLE = 9
_PARTITION_KEYS = frozenset(
    {"index", "error_code", "base_offset", "log_append_time", "log_start_offset", "error_message"}
)
_TOPIC_KEYS = frozenset({"name", "partition_responses"})
_BODY_KEYS = frozenset({"responses", "throttle_time"})
_INT32 = struct.Struct(">i")
_PARTITION_V0 = struct.Struct(">ihq")
"""index, error code, base offset (v0-v1)."""
_PARTITION_V3 = struct.Struct(">ihqq")
"""... and the log append time (v2-v4)."""
_PARTITION_V5 = struct.Struct(">ihqqq")
"""... and the log start offset (v5+)."""
_NULL_STRING = b"\xff\xff"
_NO_RECORD_ERRORS = b"\0\0\0\0"
_COMPACT_NULL = b"\0"
_COMPACT_EMPTY_ARRAY = b"\x01"
_NO_TAGS = b"\0"


def encode_produce_response(
    version: int, correlation_id: int, tree: Mapping[str, Any]
) -> bytes | None:
    """The whole frame, size first, of the ProduceResponse ``tree`` in ``version``, or None
    when the tree holds something this packer leaves to the general encoder."""
    if not _MIN_VERSION <= version <= _MAX_VERSION or not _BODY_KEYS.issuperset(tree):
        return None
    flexible = version >= _FLEXIBLE
    out = [b"", _INT32.pack(correlation_id)]
    if flexible:
        out.append(_NO_TAGS)
    topics = tree.get("responses", ())
    out.append(_uvarint(len(topics) + 1) if flexible else _INT32.pack(len(topics)))
    for topic in topics:
        if not _TOPIC_KEYS.issuperset(topic):
            return None
        out.append(_string(topic["name"], flexible))
        partitions = topic.get("partition_responses", ())
        out.append(_uvarint(len(partitions) + 1) if flexible else _INT32.pack(len(partitions)))
        for partition in partitions:
            packed = _partition(partition, version, flexible)
            if packed is None:
                return None
            out.append(packed)
        if flexible:
            out.append(_NO_TAGS)
    throttle = tree.get("throttle_time", 0)
    if isinstance(throttle, datetime.timedelta):
        throttle = int(throttle.total_seconds() * 1000)
    if version >= 1:
        out.append(_INT32.pack(throttle))
    if flexible:
        out.append(_NO_TAGS)
    size = sum(len(part) for part in out)
    out[0] = _INT32.pack(size)
    return b"".join(out)


def _partition(partition: Mapping[str, Any], version: int, flexible: bool) -> bytes | None:
    if not _PARTITION_KEYS.issuperset(partition):
        return None
    try:
        index, code, base = partition["index"], partition["error_code"], partition["base_offset"]
    except KeyError:
        return None
    if partition.get("log_append_time") is not None:
        return None  # LogAppendTime is never set here: the general encoder converts one
    start = partition.get("log_start_offset", -1)
    if version >= 5:
        head = _PARTITION_V5.pack(index, int(code), base, -1, start)
    elif version < 2:
        head = _PARTITION_V0.pack(index, int(code), base)
    else:
        head = _PARTITION_V3.pack(index, int(code), base, -1)
    if version < 8:
        return head
    message = partition.get("error_message")
    if not flexible:
        return head + _NO_RECORD_ERRORS + _nullable_string(message)
    compact = _COMPACT_NULL if message is None else _string(message, True)
    return head + _COMPACT_EMPTY_ARRAY + compact + _NO_TAGS


def _string(text: str, flexible: bool) -> bytes:
    data = text.encode()
    return (_uvarint(len(data) + 1) if flexible else struct.pack(">h", len(data))) + data


def _nullable_string(text: str | None) -> bytes:
    return _NULL_STRING if text is None else _string(text, False)


def _uvarint(value: int) -> bytes:
    """An unsigned varint (the compact lengths of KIP-482)."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
