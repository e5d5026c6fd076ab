"""ZooKeeper's ``multiRead`` (3.6+): the data of many znodes in one request.

Reading every state znode of a large cluster (a new controller's state load, the check of a
``LeaderAndIsr`` against ZooKeeper, docs/zookeeper.md) was one ``getData`` per znode. Each
costs the ZooKeeper server little, but kazoo handles every request with Python on both of
its threads, handing the GIL back and forth per request: 6,000 reads took 2.4 s of which
2.2 s the asyncio thread spent blocked in kazoo's per-request wake-up of its connection
thread. ``multiRead`` (ZooKeeper's ``OpCode.multiRead``, ``ZooKeeper.multi`` of
``Op.getData``) carries hundreds of reads in one request and one response.

Unlike a write ``multi`` it is not a transaction: every op has its own answer, a missing
znode fails only its own read. Kazoo has no ``multiRead``, so :class:`MultiRead` is a
request in kazoo's own protocol (``type``, ``serialize``, ``deserialize``, as its
``Transaction``), sent with the client's internal ``_call``; the answer is a list with, per
path, ``(data, ZnodeStat)`` or the ZooKeeper error (e.g. NoNodeError), exactly what a
``get_async`` of that path answers. A server older than 3.6 answers UnimplementedError for
the whole request; the caller then reads one znode per request.

Wire format (ZooKeeper's ``MultiOperationRecord``/``MultiResponse``): per op a
``MultiHeader`` (type int, done bool, err int) and a ``GetDataRequest`` (path string, watch
bool), ended by the header ``(-1, true, -1)``; the response has per op a header of type 4
followed by ``GetDataResponse`` (data buffer, stat), or of type -1 followed by the error
code, and the same end header.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kazoo.exceptions import EXCEPTIONS
from kazoo.protocol.serialization import (
    MultiHeader,
    int_struct,
    multiheader_struct,
    read_buffer,
    stat_struct,
    write_string,
)
from kazoo.protocol.states import ZnodeStat

__all__ = ["MULTI_READ_MAX_PATHS", "MultiRead", "multi_read_async", "multi_read_chunks"]

MULTI_READ_MAX_PATHS = 500
"""Paths per request: an answer of 500 partition states is about 100 KB, well inside
``jute.maxbuffer`` (1 MB), which bounds what a client accepts."""

_GET_DATA = 4
_ERROR = -1


class MultiRead:
    """A kazoo request: ``getData`` of each of ``paths`` (already chrooted), no watches."""

    type = 22
    """ZooKeeper's ``OpCode.multiRead``."""

    __slots__ = ("paths",)

    def __init__(self, paths: tuple[str, ...]) -> None:
        self.paths = paths

    def __repr__(self) -> str:
        return f"MultiRead({len(self.paths)} paths, first {self.paths[:1]})"

    def serialize(self) -> bytearray:
        out = bytearray()
        for path in self.paths:
            out += MultiHeader(_GET_DATA, False, -1).serialize()
            out += write_string(path)
            out.append(0)  # no watch
        out += multiheader_struct.pack(-1, True, -1)
        return out

    @classmethod
    def deserialize(cls, data: bytes, offset: int) -> list[Any]:
        """Per path ``(bytes, ZnodeStat)`` or the error's exception instance."""
        results: list[Any] = []
        header, offset = MultiHeader.deserialize(data, offset)
        while not header.done:
            if header.type == _GET_DATA:
                value, offset = read_buffer(data, offset)
                stat = ZnodeStat._make(stat_struct.unpack_from(data, offset))
                offset += stat_struct.size
                results.append((value, stat))
            elif header.type == _ERROR:
                (code,) = int_struct.unpack_from(data, offset)
                offset += int_struct.size
                results.append(EXCEPTIONS[code]())
            else:
                raise ValueError(f"multiRead answered an op of type {header.type}")
            header, offset = MultiHeader.deserialize(data, offset)
        return results


def multi_read_chunks(paths: Sequence[str]) -> list[list[str]]:
    """``paths`` cut into the requests of :data:`MULTI_READ_MAX_PATHS` each, in order."""
    return [
        list(paths[i : i + MULTI_READ_MAX_PATHS])
        for i in range(0, len(paths), MULTI_READ_MAX_PATHS)
    ]


def multi_read_async(client: Any, paths: list[str]) -> Any:
    """Start a :class:`MultiRead` of ``paths`` (unchrooted, as kazoo's own calls take them)
    on a started kazoo client; returns kazoo's IAsyncResult."""
    chroot = client.chroot or ""
    result = client.handler.async_result()
    client._call(MultiRead(tuple(chroot + path for path in paths)), result)
    return result
