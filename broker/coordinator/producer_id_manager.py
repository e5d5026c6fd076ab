"""Producer ids for idempotent producers, unique across the cluster (Kafka 2.x's
``ProducerIdManager``, ZooKeeper mode).

Every broker hands out ids from a block it reserved in ``/latest_producer_id_block``
(``{"version":1,"broker":B,"block_start":"1000","block_end":"1999"}``): the znode holds the
last block reserved by any broker, so the next block starts right after it. A reservation is
a conditional update: read the znode and its version, write the following block against
that version, and on a lost race (another broker reserved one meanwhile) read again. No two
brokers can ever get the same block, and a broker asks ZooKeeper once per
:data:`PRODUCER_ID_BLOCK_SIZE` ids. Ids of a block a broker did not use up before it
stopped are never handed out, as in Kafka.

Unlike Kafka, which reserves a block at start-up, the first block is reserved when the
first id is asked for: a broker nobody asks reserves nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from proto.errors import MinibrokerError
from proto.zk.znodes import ProducerIdBlock

__all__ = [
    "PRODUCER_ID_BLOCK_SIZE",
    "ProducerIdBlockStore",
    "ProducerIdManager",
    "ProducerIdsExhaustedError",
    "next_block",
]

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_SIZE = 1000
"""Kafka's ``ProducerIdManager.PidBlockSize``."""
_INT64_MAX = 2**63 - 1


class ProducerIdsExhaustedError(MinibrokerError):
    """Every producer id up to 2**63 - 1 has been reserved (Kafka: "Have exhausted all
    producerIds")."""


class ProducerIdBlockStore(Protocol):
    """Where blocks are reserved: :class:`broker.zk_client.BrokerZkClient` (a fake in tests)."""

    async def get_producer_id_block(self) -> tuple[ProducerIdBlock | None, int | None]: ...

    async def set_producer_id_block_conditionally(
        self, block: ProducerIdBlock, expected_version: int | None
    ) -> bool: ...


def next_block(
    latest: ProducerIdBlock | None, broker_id: int, size: int = PRODUCER_ID_BLOCK_SIZE
) -> ProducerIdBlock:
    """The block following ``latest`` (the first, from 0, if there is none) for ``broker_id``.

    Raises ProducerIdsExhaustedError when no whole block fits below 2**63.
    """
    if latest is None:
        return ProducerIdBlock(broker_id, 0, size - 1)
    if latest.block_end > _INT64_MAX - size:
        raise ProducerIdsExhaustedError(
            f"every producer id has been reserved (the latest block ends at {latest.block_end})"
        )
    return ProducerIdBlock(broker_id, latest.block_end + 1, latest.block_end + size)


class ProducerIdManager:
    """Hands out this broker's producer ids, reserving blocks in ZooKeeper as needed."""

    def __init__(
        self,
        broker_id: int,
        store: ProducerIdBlockStore,
        *,
        block_size: int = PRODUCER_ID_BLOCK_SIZE,
        on_block_reserved: Callable[[ProducerIdBlock], None] | None = None,
    ) -> None:
        """``on_block_reserved`` is told each block before any id of it is handed out (the
        replica manager's bound of issued ids, broker.replication.issued_producer_ids)."""
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.broker_id = broker_id
        self._store = store
        self._block_size = block_size
        self._on_block_reserved = on_block_reserved
        self._block: ProducerIdBlock | None = None
        self._next_id = 0
        self._lock = asyncio.Lock()
        """One reservation at a time: concurrent callers wait for it instead of each
        reserving a block of its own."""

    @property
    def current_block(self) -> ProducerIdBlock | None:
        """The block ids are handed out from now (None before the first id)."""
        return self._block

    async def generate_producer_id(self) -> int:
        """A producer id never handed out before by any broker.

        Reserves a new block first when the current one is used up (or there is none);
        that waits for ZooKeeper, retrying through connection losses
        (:class:`broker.zk_client.BrokerZkClient`), so callers bound it with a timeout.
        Cancelling it hands out no id; a block whose reservation was already sent may be
        reserved and left unused. Raises the ZooKeeper client's errors, ZkDataError for a
        malformed znode, and ProducerIdsExhaustedError.
        """
        async with self._lock:
            if self._block is None or self._next_id > self._block.block_end:
                self._block = await self._reserve_block()
                if self._on_block_reserved is not None:
                    self._on_block_reserved(self._block)
                self._next_id = self._block.block_start
            producer_id = self._next_id
            self._next_id += 1
            return producer_id

    async def _reserve_block(self) -> ProducerIdBlock:
        """Kafka's ``getNewProducerIdBlock``: read, compute the next block, write it
        conditionally on the version read; on a lost race, read again."""
        attempts = 0
        while True:
            attempts += 1
            latest, version = await self._store.get_producer_id_block()
            block = next_block(latest, self.broker_id, self._block_size)
            if await self._store.set_producer_id_block_conditionally(block, version):
                log.info(
                    "reserved producer id block event=producer_id_block broker=%d start=%d "
                    "end=%d attempts=%d",
                    self.broker_id,
                    block.block_start,
                    block.block_end,
                    attempts,
                )
                return block
