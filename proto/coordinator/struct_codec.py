"""Kafka's non-flexible struct types (int8/16/32/64 big-endian, int16-length strings, int32-length
bytes, int32-count arrays): what the coordinators' internal-topic records are made of."""

from __future__ import annotations

import struct

from proto.errors import MinibrokerError

__all__ = ["StructError", "StructReader", "StructWriter"]

_I8, _I16 = struct.Struct(">b"), struct.Struct(">h")
_I32, _I64 = struct.Struct(">i"), struct.Struct(">q")


class StructError(MinibrokerError, ValueError):
    """Bytes that are not the struct they should be (truncated, bad length, trailing)."""


class StructReader:
    """Reads fields one after the other; :meth:`done` checks nothing is left over."""

    def __init__(self, data: bytes, what: str) -> None:
        self._data = data
        self._pos = 0
        self._what = what

    def _take(self, size: int, field: str) -> bytes:
        end = self._pos + size
        if size < 0 or end > len(self._data):
            raise StructError(
                f"{self._what}: {field} needs {size} bytes at position {self._pos}, "
                f"{len(self._data) - self._pos} left"
            )
        chunk = self._data[self._pos : end]
        self._pos = end
        return chunk

    def int8(self, field: str) -> int:
        return int(_I8.unpack(self._take(1, field))[0])

    def int16(self, field: str) -> int:
        return int(_I16.unpack(self._take(2, field))[0])

    def int32(self, field: str) -> int:
        return int(_I32.unpack(self._take(4, field))[0])

    def int64(self, field: str) -> int:
        return int(_I64.unpack(self._take(8, field))[0])

    def nullable_string(self, field: str) -> str | None:
        length = self.int16(field)
        if length == -1:
            return None
        if length < 0:
            raise StructError(f"{self._what}: {field} has length {length}")
        try:
            return self._take(length, field).decode("utf-8")
        except UnicodeDecodeError as err:
            raise StructError(f"{self._what}: {field} is not UTF-8: {err}") from None

    def string(self, field: str) -> str:
        value = self.nullable_string(field)
        if value is None:
            raise StructError(f"{self._what}: {field} is null")
        return value

    def bytes(self, field: str) -> bytes:
        length = self.int32(field)
        if length < 0:
            raise StructError(f"{self._what}: {field} has length {length}")
        return self._take(length, field)

    def count(self, field: str) -> int:
        n = self.nullable_count(field)
        if n is None:
            raise StructError(f"{self._what}: {field} is null")
        return n

    def nullable_count(self, field: str) -> int | None:
        """An array's element count, None for a null array (count -1)."""
        n = self.int32(field)
        if n == -1:
            return None
        if n < 0 or n > len(self._data) - self._pos:
            raise StructError(f"{self._what}: {field} has {n} elements")
        return n

    def done(self) -> None:
        if self._pos != len(self._data):
            raise StructError(f"{self._what}: {len(self._data) - self._pos} bytes after the end")


class StructWriter:
    """Builds a struct field by field; :attr:`data` is the result."""

    def __init__(self) -> None:
        self._out = bytearray()

    @property
    def data(self) -> bytes:
        return bytes(self._out)

    def int8(self, value: int) -> StructWriter:
        self._out += _I8.pack(value)
        return self

    def int16(self, value: int) -> StructWriter:
        self._out += _I16.pack(value)
        return self

    def int32(self, value: int) -> StructWriter:
        self._out += _I32.pack(value)
        return self

    def int64(self, value: int) -> StructWriter:
        self._out += _I64.pack(value)
        return self

    def string(self, value: str | None) -> StructWriter:
        if value is None:
            return self.int16(-1)
        encoded = value.encode("utf-8")
        if len(encoded) > 32767:
            raise StructError(f"a string of {len(encoded)} bytes does not fit an int16 length")
        self.int16(len(encoded))
        self._out += encoded
        return self

    def bytes(self, value: bytes) -> StructWriter:
        self.int32(len(value))
        self._out += value
        return self
