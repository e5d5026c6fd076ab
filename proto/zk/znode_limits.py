"""ZooKeeper's packet limit, checked before a write is sent (``jute.maxbuffer``).

A ZooKeeper server closes the connection of a client whose request is longer than its
``jute.maxbuffer`` (default ``0xfffff``, one byte short of 1 MiB): no error answer, just a
dropped connection. kazoo then reconnects and resends the same request, which drops the
connection again, until the session expires: a broker that wrote a too-large topic
assignment lost its session over and over, and with it its registration and leadership.

So every write (create, set, multi) of every session of this project is measured before it
is queued, by :class:`SizeCheckedKazooClient`, at kazoo's one queueing point
(``KazooClient._call``), so no write path can bypass the check: a too-large request fails
at once with :class:`ZnodeTooLargeError`, the connection stays up, nothing is written. The
size compared is the request's length as the server reads it (the 8-byte request header and
the serialized body, the chroot included in its paths).

Kafka 2.8 has no broker property for the limit: the JVM reads the ``jute.maxbuffer``
system property. minibroker's is ``zookeeper.jute.maxbuffer`` (docs/zookeeper.md); it
must not exceed the servers' own ``jute.maxbuffer``.
"""

from __future__ import annotations

from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.serialization import Create, Create2, SetData, Transaction

from proto.errors import MinibrokerError

__all__ = [
    "JUTE_MAXBUFFER",
    "REQUEST_HEADER_BYTES",
    "SizeCheckedKazooClient",
    "ZnodeTooLargeError",
    "assignment_size_floor",
    "check_assignment_floor",
    "check_create",
    "check_write",
    "create_size_floor",
    "write_size",
]

JUTE_MAXBUFFER = 0xFFFFF
"""ZooKeeper's default ``jute.maxbuffer``: 1,048,575 bytes."""

REQUEST_HEADER_BYTES = 8
"""A request's header (xid and op type), counted in the length the server checks."""

_WRITES = (Create, Create2, SetData, Transaction)


class ZnodeTooLargeError(MinibrokerError):
    """A ZooKeeper write longer than ``zookeeper.jute.maxbuffer``: refused before sending.

    Not a :class:`~proto.zk.session.ZkError` (which callers treat as "ZooKeeper unavailable,
    retry"): sending the same write again can never succeed. The Kafka listener answers it
    POLICY_VIOLATION with this message."""

    def __init__(self, path: str, size: int, limit: int, *, at_least: bool = False) -> None:
        super().__init__(
            f"the ZooKeeper write to {path} would be {'at least ' if at_least else ''}"
            f"{size} bytes, more than zookeeper.jute.maxbuffer ({limit} bytes); "
            "ZooKeeper would drop the session"
        )
        self.path = path
        self.size = size
        self.limit = limit


def write_size(request: Any) -> int | None:
    """The length the server reads for kazoo request ``request``, or None if it is no
    write (reads are small, and their answers are the server's to bound)."""
    if not isinstance(request, _WRITES):
        return None
    return REQUEST_HEADER_BYTES + len(request.serialize())


def _path_of(request: Any) -> str:
    if isinstance(request, Transaction):
        paths = [getattr(op, "path", "?") for op in request.operations]
        return f"multi({', '.join(paths[:3])}{', ...' if len(paths) > 3 else ''})"
    return str(request.path)


_SMALL_BYTES = 4096
"""A write whose data and paths stay this far below the limit is not serialized to be
measured (its header, ACLs and flags are far smaller): the common small writes (offset
commits, ISR updates) pay nothing for the check."""


def _payload(request: Any) -> int:
    ops = request.operations if isinstance(request, Transaction) else (request,)
    return sum(len(getattr(op, "data", None) or b"") + len(op.path) for op in ops)


def check_write(request: Any, limit: int) -> None:
    """Raise ZnodeTooLargeError if ``request`` is a write longer than ``limit`` bytes."""
    if not isinstance(request, _WRITES) or _payload(request) + _SMALL_BYTES < limit:
        return
    size = write_size(request)
    if size is not None and size > limit:
        raise ZnodeTooLargeError(_path_of(request), size, limit)


def create_size_floor(path: str, data: bytes) -> int:
    """The fewest bytes a create of ``path`` with ``data`` takes (its ACL, flags and the
    chroot left out): for checking a znode before the writes that must come first."""
    return REQUEST_HEADER_BYTES + 4 + len(path.encode()) + 4 + len(data)


def check_create(path: str, data: bytes, limit: int) -> None:
    """Raise ZnodeTooLargeError if creating ``path`` with ``data`` cannot fit ``limit``."""
    size = create_size_floor(path, data)
    if size > limit:
        raise ZnodeTooLargeError(path, size, limit, at_least=True)


def assignment_size_floor(partitions: int, replication_factor: int) -> int:
    """The fewest bytes a ``/brokers/topics/<t>`` assignment of ``partitions`` partitions
    with ``replication_factor`` replicas can encode to (``"<p>":[<b>,...]`` per partition,
    at least one digit a broker id): what a tool compares with the limit before computing
    an assignment it cannot write (a million partitions takes seconds to place)."""
    if partitions <= 0:
        return 0
    digits = 0
    width, start = 1, 0
    while start < partitions:
        end = min(partitions, 10**width)
        digits += (end - start) * width
        start, width = end, width + 1
    per_partition = len('"":[],') + 2 * replication_factor - 1
    return digits + partitions * per_partition


def check_assignment_floor(path: str, partitions: int, replication_factor: int, limit: int) -> None:
    """Raise ZnodeTooLargeError if no assignment of ``partitions`` partitions with
    ``replication_factor`` replicas fits one znode of ``limit`` bytes at ``path``."""
    floor = assignment_size_floor(partitions, replication_factor)
    if floor > limit:
        raise ZnodeTooLargeError(path, floor, limit, at_least=True)


class SizeCheckedKazooClient(KazooClient):  # type: ignore[misc]  # kazoo is untyped
    """A kazoo client that refuses a write longer than ``jute_maxbuffer`` before queueing
    it: the request's async result fails with ZnodeTooLargeError, the call returns False as
    kazoo's own short-circuits (a closed or expired session) do."""

    def __init__(self, *args: Any, jute_maxbuffer: int = JUTE_MAXBUFFER, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.jute_maxbuffer = jute_maxbuffer

    def _call(self, request: Any, async_object: Any) -> Any:
        try:
            check_write(request, self.jute_maxbuffer)
        except ZnodeTooLargeError as err:
            async_object.set_exception(err)
            return False
        return super()._call(request, async_object)
