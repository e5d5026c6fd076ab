"""Kafka's framing: a request's header and body from a frame, a response's bytes from a tree.

Every frame is a big-endian int32 size and that many bytes. A request starts with its
header: api key (int16), api version (int16), correlation id (int32), client id (nullable
int16 string), and, in the flexible versions (KIP-482), tagged fields; the body follows.
The response header is the correlation id, plus tagged fields when the response version is
flexible, except ApiVersions' which stays version 0 so a client can always read it. kio's
schemas say which header each API version takes.
"""

from __future__ import annotations

import functools
import io
import struct
from typing import Any

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from broker.kafka_listener.legacy_produce import (
    LEGACY_VERSIONS,
    legacy_request_body,
    legacy_request_schema,
    legacy_response_schema,
)
from broker.kafka_listener.messages import Tree, build
from broker.kafka_listener.produce_response import encode_produce_response
from broker.kafka_listener.wire_request import KafkaRequest
from proto.errors import MinibrokerError
from proto.transport.tls import ANONYMOUS_PRINCIPAL

__all__ = [
    "MalformedFrameError",
    "decode_request",
    "encode_response",
    "encode_with_kio",
    "peek_header",
    "request_schema",
    "response_schema",
]

_KEY_VERSION_CORRELATION = struct.Struct(">hhi")
_PRODUCE = 0


class MalformedFrameError(MinibrokerError):
    """A frame that is not a request of the version it names: the connection is closed."""


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id): the fields every header version starts
    with, so even a request we cannot decode can be answered or logged."""
    if len(frame) < _KEY_VERSION_CORRELATION.size:
        raise MalformedFrameError(f"a {len(frame)}-byte frame is too short for a header")
    return _KEY_VERSION_CORRELATION.unpack_from(frame)


@functools.cache
def request_schema(api_key: int, api_version: int) -> type[Any] | None:
    """kio's class for this request version, or None if Kafka has no such version
    (Produce 0-2: :mod:`broker.kafka_listener.legacy_produce`'s stand-ins)."""
    if api_key == _PRODUCE and api_version in LEGACY_VERSIONS:
        return legacy_request_schema(api_version)
    try:
        return load_request_schema(api_key, api_version)
    except KioIndexError:
        return None


@functools.cache
def response_schema(api_key: int, api_version: int) -> type[Any] | None:
    """kio's class for this response version, or None if Kafka has no such version."""
    if api_key == _PRODUCE and api_version in LEGACY_VERSIONS:
        return legacy_response_schema(api_version)
    try:
        return load_response_schema(api_key, api_version)
    except KioIndexError:
        return None


def decode_request(
    frame: bytes, schema: type[Any], client_host: str = "", principal: str = ANONYMOUS_PRINCIPAL
) -> KafkaRequest:
    """The request in ``frame``, whose header names ``schema``'s API and version, sent from
    ``client_host`` by a connection authenticated as ``principal``.

    Bytes after the request's last field are ignored, as Kafka's generated parsers ignore
    them (librdkafka 2.x sends three after its Metadata v12 requests); a frame too short for
    its fields, or holding values its types cannot have, is a MalformedFrameError."""
    try:
        header, size = entity_reader(schema.__header_schema__)(frame, 0)
        if hasattr(schema, "__body_schema__"):  # Produce 0-2
            body_schema, data = legacy_request_body(schema, frame[size:])
            body, _ = entity_reader(body_schema)(data, 0)
        else:
            body, _ = entity_reader(schema)(frame, size)
    except Exception as err:  # kio's native reader: ValueError, UnicodeDecodeError, ...
        raise MalformedFrameError(f"undecodable {schema.__name__}: {err!r}") from err
    return KafkaRequest(
        header.request_api_key,
        header.request_api_version,
        header.correlation_id,
        header.client_id,
        body,
        client_host,
        principal,
    )


def encode_response(schema: type[Any], correlation_id: int, tree: Tree, *, error: int = 0) -> bytes:
    """The whole frame, size first, of the response ``tree`` in ``schema``'s version.

    A Produce answer is packed directly (:mod:`broker.kafka_listener.produce_response`:
    the same bytes, a tenth of the time); everything else goes through kio."""
    if schema.__api_key__ == _PRODUCE and schema.__version__ in LEGACY_VERSIONS:
        frame = encode_produce_response(schema.__version__, correlation_id, tree)
        if frame is None:
            raise ValueError(f"Produce v{schema.__version__} cannot answer {tree!r}")
        return frame
    if schema.__api_key__ == _PRODUCE and not error:
        frame = encode_produce_response(schema.__version__, correlation_id, tree)
        if frame is not None:
            return frame
    return encode_with_kio(schema, correlation_id, tree, error=error)


def encode_with_kio(schema: type[Any], correlation_id: int, tree: Tree, *, error: int = 0) -> bytes:
    """:func:`encode_response` by kio's dataclasses and writers, for every API."""
    header_schema = schema.__header_schema__
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    entity_writer(header_schema)(out, build(header_schema, {"correlation_id": correlation_id}))
    entity_writer(schema)(out, build(schema, tree, error=error))
    with out.getbuffer() as frame:
        struct.pack_into(">i", frame, 0, len(frame) - 4)
    return out.getvalue()
