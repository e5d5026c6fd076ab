"""Hypothesis strategies for the fuzz tests: hostile record batches and hostile protobufs.

Two sources of bad input, as an attacker or a broken client would send them:

- **Batches**: random bytes, and mutations (bit flips, overwritten, cut, inserted or
  duplicated bytes) of well-formed batches and of the poison corpus
  (:mod:`tests.poison_batches`). A mutation is sent with its CRC re-stamped as often as
  not: a wrong CRC stops at the first check, a right one reaches the record walk.
- **Protobufs**: any message of ``proto/wire/minibroker.proto`` with every field drawn from
  its type's whole range (epochs and ids up to 2^63-1, unknown enum values, topic names
  that climb out of a directory), built from the message descriptor so that a field added
  to the contract is fuzzed without a change here.

The example count comes from the Hypothesis profile (``tests/conftest.py``): bounded in
``make test``, ``HYPOTHESIS_PROFILE=fuzz`` (``make fuzz``) for a long run.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import strategies as st

from proto.records.compression import Codec
from proto.records.record_batch import CRC_OFFSET, Record, compute_crc, encode_batch
from tests.poison_batches import POISONS

TOPIC_NAMES = ("guarded", "../../x", "/tmp", ".", "..", "", "a" * 300, "bad/name", "guarded\0")
"""Topic names worth more than a random string: the test's topic and path escapes."""

_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


def good_batches() -> list[bytes]:
    """Well-formed batches: the seeds that mutations start from."""
    return [
        encode_batch([Record(key=b"k", value=b"v", timestamp=1)]),
        encode_batch([Record(None, b"x" * 40, 2, (("h", b"1"),)), Record(b"k2", None, 3)]),
        encode_batch([Record(b"k", b"v", 5)], producer_id=7, producer_epoch=0, base_sequence=0),
        *(
            encode_batch([Record(b"k", b"v" * 30, 6), Record(None, b"w", 7)], compression=codec)
            for codec in (Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD)
        ),
    ]


def restamp_crc(batch: bytes) -> bytes:
    """``batch`` with the CRC its covered bytes would have (no-op on a short buffer)."""
    if len(batch) < CRC_OFFSET + 4:
        return batch
    out = bytearray(batch)
    struct.pack_into(">I", out, CRC_OFFSET, compute_crc(memoryview(out)[CRC_OFFSET + 4 :]))
    return bytes(out)


@st.composite
def _mutated(draw: st.DrawFn, seed: bytes) -> bytes:
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(("flip", "set", "cut", "insert", "duplicate")))
        at = draw(st.integers(0, len(data)))
        if kind == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and at < len(data):
            data[at] = draw(st.sampled_from((0x00, 0x01, 0x7F, 0x80, 0xFF)))
        elif kind == "cut":
            del data[at : at + draw(st.integers(1, 16))]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "duplicate":
            data += data[at:]
    out = bytes(data)
    return restamp_crc(out) if draw(st.booleans()) else out


def hostile_batches() -> st.SearchStrategy[bytes]:
    """Records fields as a broken or hostile producer would fill them."""
    seeds = good_batches() + [poison.batch for poison in POISONS]
    return st.one_of(
        st.binary(max_size=200),
        st.sampled_from(seeds).flatmap(_mutated),
        st.lists(st.sampled_from(seeds), min_size=1, max_size=3).map(b"".join).flatmap(_mutated),
    )


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[object]:
    if field.type in _INT_RANGES:
        low, high = _INT_RANGES[field.type]
        return st.one_of(st.integers(-2, 3).filter(lambda v: low <= v), st.integers(low, high))
    if field.type == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if field.type == FieldDescriptor.TYPE_STRING:
        return st.one_of(st.sampled_from(TOPIC_NAMES), st.text(max_size=40))
    if field.type == FieldDescriptor.TYPE_BYTES:
        return hostile_batches()
    if field.type == FieldDescriptor.TYPE_ENUM and field.enum_type is not None:
        known = [value.number for value in field.enum_type.values]
        return st.one_of(st.sampled_from(known), st.integers(-(2**31), 2**31 - 1))
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(width=32 if field.type == FieldDescriptor.TYPE_FLOAT else 64)
    raise NotImplementedError(f"no strategy for field {field.full_name} of type {field.type}")


def _field_setter(
    field: FieldDescriptor, depth: int
) -> st.SearchStrategy[Callable[[Message], None]]:
    """A strategy of functions that fill ``field`` of a message."""
    name = field.name
    if field.message_type is not None:
        inner = messages(field.message_type, depth + 1)
        if field.is_repeated:
            return st.lists(inner, max_size=3).map(
                lambda values: lambda m: getattr(m, name).extend(values)
            )
        return inner.map(lambda value: lambda m: getattr(m, name).CopyFrom(value))
    if field.is_repeated:
        return st.lists(_scalar(field), max_size=4).map(
            lambda values: lambda m: getattr(m, name).extend(values)
        )
    return _scalar(field).map(lambda value: lambda m: setattr(m, name, value))


def messages(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
    """Any message of ``descriptor``'s type, each field set or left at its default.

    Nested messages stop three levels down, which reaches every field of the contract.
    """
    cls = GetMessageClass(descriptor)
    if depth > 3:
        return st.just(cls())
    setters = {field.name: _field_setter(field, depth) for field in descriptor.fields}

    def build(chosen: dict[str, Callable[[Message], None]]) -> Message:
        message = cls()
        for setter in chosen.values():
            setter(message)
        return message

    return st.fixed_dictionaries({}, optional=setters).map(build)
