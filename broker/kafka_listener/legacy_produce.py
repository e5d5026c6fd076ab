"""Produce versions 0-2, which Kafka 2.8 serves and kio (generated from Kafka 4's schemas,
which dropped them, KIP-896) has no classes for.

Their requests are version 3's without its first field, ``transactional_id``: acks,
timeout and the topics' partitions with their records. A v0-2 request is read with kio's
v3 class as if that field were null, and answered by
:func:`broker.kafka_listener.produce_response.encode_produce_response`, which packs v0-2
too (v0: index, error code and base offset per partition; v1 adds the throttle time, v2
each partition's log append time). As in Kafka, the records may be any batches: those
not in format v2 are refused by the log like any batch it cannot store.

Why serve them: librdkafka before 2.11.1 (Debian's kcat, older confluent-kafka builds)
checks whether a broker takes gzip, snappy and lz4 by whether its Produce versions
include 0, and otherwise sends those batches uncompressed without a word.
"""

from __future__ import annotations

import functools
from typing import Any

from kio.index import load_request_schema, load_response_schema

__all__ = [
    "LEGACY_VERSIONS",
    "legacy_request_body",
    "legacy_request_schema",
    "legacy_response_schema",
]

LEGACY_VERSIONS = range(3)
_PRODUCE = 0
_NULL_STRING = b"\xff\xff"


@functools.cache
def legacy_request_schema(version: int) -> type[Any]:
    """A stand-in for the missing class of Produce request ``version``: kio's v3 class,
    named for ``version``, whose body :func:`legacy_request_body` reads."""
    v3 = load_request_schema(_PRODUCE, 3)
    return type(f"ProduceRequestV{version}", (), {
        "__api_key__": _PRODUCE, "__version__": version, "__flexible__": False,
        "__header_schema__": v3.__header_schema__, "__body_schema__": v3,
    })  # fmt: skip


@functools.cache
def legacy_response_schema(version: int) -> type[Any]:
    """A stand-in for the missing class of Produce response ``version``: only packed."""
    v3 = load_response_schema(_PRODUCE, 3)
    return type(f"ProduceResponseV{version}", (), {
        "__api_key__": _PRODUCE, "__version__": version, "__flexible__": False,
        "__header_schema__": v3.__header_schema__,
    })  # fmt: skip


def legacy_request_body(schema: type[Any], body: bytes) -> tuple[type[Any], bytes]:
    """kio's v3 class and the bytes it reads for a v0-2 ``body`` (its transactional id
    null)."""
    return schema.__body_schema__, _NULL_STRING + body
