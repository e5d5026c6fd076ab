"""Kafka protocol messages built from plain trees, whatever the version.

kio generates one frozen dataclass per message, per version, from Kafka's own JSON schemas
(``clients/src/main/resources/common/message``): a field appears in the versions that have
it and nowhere else. The handlers of :mod:`broker.kafka_wire.kafka_wire_apis` describe a
response once, as a dict tree keyed by the schema's field names, and :func:`build` makes
the dataclass of the version asked for: keys the version lacks are dropped, fields the tree
leaves out take the schema's default, or a zero value where the schema has none (Kafka's
generated ``Message`` classes initialise theirs the same way). So no struct is hand-written
per API or per version.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Mapping
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)

__all__ = ["Tree", "build", "error_code", "zero_value"]

Tree = Mapping[str, Any]
"""A message's fields by name; a nested message is a Tree, an array of them a list."""
_E = TypeVar("_E")

_ZERO_BY_KAFKA_TYPE: dict[str, object] = {
    "int8": 0,
    "int16": 0,
    "int32": 0,
    "int64": 0,
    "uint8": 0,
    "uint16": 0,
    "uint32": 0,
    "uint64": 0,
    "float64": 0.0,
    "bool": False,
    "string": "",
    "bytes": b"",
    "records": b"",
    "uuid": uuid.UUID(int=0),
    "error_code": ErrorCode.none,
    "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
}


def error_code(code: int) -> ErrorCode:
    """kio's member for a Kafka error code (our ``ErrorCode`` enum has Kafka's numbers)."""
    return ErrorCode(code)


def zero_value(field: dataclasses.Field[Any], *, error: int = 0) -> object:
    """What a field the tree does not set holds: its schema default, else null for a
    nullable field, an empty array, a nested message of zero values, or the type's zero.
    ``error`` fills the error code fields (an error response of any API, see
    :func:`build`)."""
    if field.default is not dataclasses.MISSING:
        return field.default
    kind = classify_field(field)
    if isinstance(kind, EntityTupleField | PrimitiveTupleField):
        return None if is_optional(field) else ()
    if is_optional(field):
        return None
    if isinstance(kind, EntityField):
        return build(kind.type_, {}, error=error)
    kafka_type = get_schema_field_type(field)
    if kafka_type == "error_code":
        return error_code(error)
    if kafka_type == "datetime_i64":
        return datetime.datetime.fromtimestamp(0, datetime.UTC)
    try:
        return _ZERO_BY_KAFKA_TYPE[kafka_type]
    except KeyError:
        raise TypeError(f"no zero value for kafka_type {kafka_type!r} ({field.name})") from None


def build(cls: type[_E], tree: Tree, *, error: int = 0) -> _E:
    """The message ``cls`` (one version of one schema) holding ``tree``.

    Keys this version lacks are ignored; nested trees become the version's nested classes;
    error codes may be given as ints; fields left out take :func:`zero_value`. With
    ``error``, every error code left out is that error: Kafka's ``getErrorResponse``.
    """
    values: dict[str, object] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.name not in tree:
            values[field.name] = zero_value(field, error=error)
            continue
        value = tree[field.name]
        kind = classify_field(field)
        if value is None:
            values[field.name] = None
        elif isinstance(kind, EntityTupleField):
            values[field.name] = tuple(build(kind.type_, item, error=error) for item in value)
        elif isinstance(kind, EntityField):
            values[field.name] = build(kind.type_, value, error=error)
        elif isinstance(kind, PrimitiveTupleField):
            values[field.name] = tuple(value)
        elif get_schema_field_type(field) == "error_code":
            values[field.name] = error_code(value)
        elif get_schema_field_type(field).startswith("timedelta") and isinstance(value, int):
            values[field.name] = datetime.timedelta(milliseconds=value)
        else:
            values[field.name] = value
    return cls(**values)
