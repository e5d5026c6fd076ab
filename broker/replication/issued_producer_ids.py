"""Whether a produced batch's producer id was ever handed out (docs/zookeeper.md, "What is
trusted").

Every broker hands out producer ids from blocks it reserves in ``/latest_producer_id_block``
(:mod:`broker.coordinator.producer_id_manager`), and it reserves a block *before* it hands
out any id of it. So every id ever handed out is at most the ``block_end`` that znode holds
now, and a batch naming a larger one (or a negative one other than -1, "no producer id")
was not sent by a producer any broker initialised: the leader refuses it with
UNKNOWN_PRODUCER_ID. (Kafka 2.8 does not check: it accepts any id, and a partition that
holds no state for it takes any sequence.)

The bound only grows, so a cached bound is never wrong about an id at or below it: such
ids are judged without ZooKeeper, which matters while ZooKeeper is unreachable (a failed
ensemble member, a lost session): producing with ids already handed out goes on. Only an
id above the cached bound makes the leader read the znode again (after a ``sync``, so that
a block reserved a moment ago through another ZooKeeper server is seen), and when that read
fails or takes longer than the refresh timeout, the batch gets REQUEST_TIMED_OUT, which
every Kafka client retries (idempotent producers with the same sequence): an id is never
judged against a bound that could not be refreshed. Concurrent refreshes share one read.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable, Iterable

from proto import errors
from proto.records.record_batch import LOG_OVERHEAD, NO_PRODUCER_ID

__all__ = ["IssuedProducerIds", "producer_ids_of"]

_PRODUCER_ID_OFFSET = 43
"""Where a v2 batch's producerId lies (after baseOffset 8, batchLength 4, partitionLeader
Epoch 4, magic 1, crc 4, attributes 2, lastOffsetDelta 4, baseTimestamp 8, maxTimestamp 8)."""
_INT64 = struct.Struct(">q")
_LENGTH = struct.Struct(">i")


def producer_ids_of(records: bytes | bytearray | memoryview) -> set[int]:
    """The producer ids (other than -1) of the batches in ``records``, read from their
    headers only. Framing is not checked here (the log's validation does that, and refuses
    what does not frame): the walk stops at the first batch that does not fit."""
    found: set[int] = set()
    pos, end = 0, len(records)
    while pos + _PRODUCER_ID_OFFSET + 8 <= end:
        (batch_length,) = _LENGTH.unpack_from(records, pos + 8)
        if batch_length < 0:
            break
        (producer_id,) = _INT64.unpack_from(records, pos + _PRODUCER_ID_OFFSET)
        if producer_id != NO_PRODUCER_ID:
            found.add(producer_id)
        pos += LOG_OVERHEAD + batch_length
    return found


class IssuedProducerIds:
    """The highest producer id any broker may have handed out, cached; see the module."""

    def __init__(self, read_bound: Callable[[], Awaitable[int]], refresh_timeout_s: float) -> None:
        """``read_bound`` reads the ``block_end`` of ``/latest_producer_id_block`` after a
        sync (-1 when no block was reserved yet) and raises when ZooKeeper cannot answer."""
        self._read_bound = read_bound
        self._refresh_timeout_s = refresh_timeout_s
        self._bound = -1
        self._refresh: asyncio.Task[None] | None = None

    @property
    def bound(self) -> int:
        """Every id above it is unknown as far as this broker last read (-1: none read)."""
        return self._bound

    def raise_bound(self, block_end: int) -> None:
        """This broker reserved a block ending at ``block_end`` (or read of one)."""
        self._bound = max(self._bound, block_end)

    async def check(self, producer_ids: Iterable[int]) -> None:
        """Raise UnknownProducerIdError for an id no broker handed out, RequestTimedOutError
        when an id above the cached bound needs a refresh that fails. Returns at once (no
        await) when every id is at or below the cached bound."""
        highest = -1
        for producer_id in producer_ids:
            if producer_id < 0 and producer_id != NO_PRODUCER_ID:
                raise errors.UnknownProducerIdError(
                    f"producer id {producer_id} is negative: no broker hands out such an id"
                )
            highest = max(highest, producer_id)
        if highest <= self._bound:
            return
        # A refresh already under way may have read the znode before this id's block was
        # reserved: if it leaves the id above the bound, read once more.
        for _ in range(2):
            await self._refreshed()
            if highest <= self._bound:
                return
        raise errors.UnknownProducerIdError(
            f"producer id {highest} was never handed out: /latest_producer_id_block in "
            f"ZooKeeper ends at {self._bound} (initialise the producer with InitProducerId)"
        )

    async def _refreshed(self) -> None:
        refresh = self._refresh
        if refresh is None or refresh.done():
            refresh = self._refresh = asyncio.create_task(self._read())
            refresh.add_done_callback(_retrieve)
        try:
            # shield: one caller's timeout or cancellation does not cancel the others' read.
            async with asyncio.timeout(self._refresh_timeout_s):
                await asyncio.shield(refresh)
        except Exception as err:  # a ZooKeeper error, a malformed znode, the timeout
            raise errors.RequestTimedOutError(
                "cannot check the producer id against /latest_producer_id_block in ZooKeeper "
                f"(cached bound {self._bound}): {type(err).__name__}: {err}; retry"
            ) from err

    async def _read(self) -> None:
        self.raise_bound(await self._read_bound())


def _retrieve(task: asyncio.Task[None]) -> None:
    """A refresh every waiter gave up on still has its exception retrieved."""
    if not task.cancelled():
        task.exception()
