"""Kafka protocol messages built from plain trees, whatever the version.

kio generates one frozen dataclass per message, per version, from Kafka's own JSON schemas
(``clients/src/main/resources/common/message``): a field appears in the versions that have
it and nowhere else. The handlers of :mod:`broker.kafka_listener.apis` describe a
response once, as a dict tree keyed by the schema's field names, and :func:`build` makes
the dataclass of the version asked for: keys the version lacks are dropped, fields the tree
leaves out take the schema's default, or a zero value where the schema has none (Kafka's
generated ``Message`` classes initialise theirs the same way). So no struct is hand-written
per API or per version.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
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

__all__ = ["Tree", "build", "error_code"]

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


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldPlan:
    """What :func:`build` needs of one field, read once per message class: kio's field
    introspection walks typing annotations, too slow to repeat per response."""

    name: str
    default: object
    kafka_type: str | None
    """None for a nested message or an array of them."""
    optional: bool
    array: bool
    nested: type[Any] | None
    """The nested message class of an entity field or an array of them."""


@functools.cache
def _plan(cls: type[Any]) -> tuple[_FieldPlan, ...]:
    plans = []
    for field in dataclasses.fields(cls):
        kind = classify_field(field)
        nested = kind.type_ if isinstance(kind, EntityField | EntityTupleField) else None
        plans.append(
            _FieldPlan(
                field.name,
                field.default,
                None if nested is not None else get_schema_field_type(field),
                is_optional(field),
                isinstance(kind, EntityTupleField | PrimitiveTupleField),
                nested,
            )
        )
    return tuple(plans)


def _zero_value(plan: _FieldPlan, error: int) -> object:
    """What a field the tree does not set holds: its schema default, else null for a
    nullable field, an empty array, a nested message of zero values, or the type's zero.
    ``error`` fills the error code fields (an error response of any API, see
    :func:`build`)."""
    if plan.default is not dataclasses.MISSING:
        return plan.default
    if plan.array:
        return None if plan.optional else ()
    if plan.optional:
        return None
    if plan.nested is not None:
        return build(plan.nested, {}, error=error)
    if plan.kafka_type == "error_code":
        return error_code(error)
    if plan.kafka_type == "datetime_i64":
        return datetime.datetime.fromtimestamp(0, datetime.UTC)
    try:
        return _ZERO_BY_KAFKA_TYPE[plan.kafka_type or ""]
    except KeyError:
        raise TypeError(f"no zero value for kafka_type {plan.kafka_type!r} ({plan.name})") from None


def build(cls: type[_E], tree: Tree, *, error: int = 0) -> _E:
    """The message ``cls`` (one version of one schema) holding ``tree``.

    Keys this version lacks are ignored; nested trees become the version's nested classes;
    error codes may be given as ints; fields left out take their schema default, else null,
    an empty array or the type's zero. With ``error``, every error code left out is that
    error: Kafka's ``getErrorResponse``.
    """
    values: dict[str, object] = {}
    for plan in _plan(cls):  # type: ignore[arg-type]  # a class is hashable
        if plan.name not in tree:
            values[plan.name] = _zero_value(plan, error)
            continue
        value = tree[plan.name]
        if value is None:
            values[plan.name] = None
        elif plan.nested is not None:
            if plan.array:
                values[plan.name] = tuple(build(plan.nested, item, error=error) for item in value)
            else:
                values[plan.name] = build(plan.nested, value, error=error)
        elif plan.array:
            values[plan.name] = tuple(value)
        elif plan.kafka_type == "error_code":
            values[plan.name] = error_code(value)
        elif isinstance(value, int) and (plan.kafka_type or "").startswith("timedelta"):
            values[plan.name] = datetime.timedelta(milliseconds=value)
        else:
            values[plan.name] = value
    return cls(**values)
