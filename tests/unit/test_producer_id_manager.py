"""ProducerIdManager's block reservation (Kafka's ProducerIdManager): the next block after the
latest one in /latest_producer_id_block, a conditional write that re-reads on a lost race, and
unique ids across brokers. ZooKeeper is a scripted in-memory store here; the real znode is
exercised by tests/integration/test_idempotent_producer.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from broker.coordinator.producer_id_manager import (
    PRODUCER_ID_BLOCK_SIZE,
    ProducerIdManager,
    ProducerIdsExhaustedError,
    next_block,
)
from proto.zk.znodes import ProducerIdBlock


class FakeZnode:
    """``/latest_producer_id_block`` with ZooKeeper's version semantics."""

    def __init__(self) -> None:
        self.block: ProducerIdBlock | None = None
        self.version: int | None = None  # None: the znode does not exist
        self.writes = 0
        self.before_write: Callable[[], None] | None = None
        """Runs before each conditional write: lets a test slip in another broker's write."""

    async def get_producer_id_block(self) -> tuple[ProducerIdBlock | None, int | None]:
        await asyncio.sleep(0)
        return self.block, self.version

    async def set_producer_id_block_conditionally(
        self, block: ProducerIdBlock, expected_version: int | None
    ) -> bool:
        await asyncio.sleep(0)
        if self.before_write is not None:
            hook, self.before_write = self.before_write, None
            hook()
        if expected_version != self.version:
            return False
        self.writes += 1
        self.block = block
        self.version = 0 if self.version is None else self.version + 1
        return True


def test_next_block_follows_the_latest_one() -> None:
    assert next_block(None, 3) == ProducerIdBlock(3, 0, 999)
    assert next_block(ProducerIdBlock(1, 0, 999), 3) == ProducerIdBlock(3, 1000, 1999)
    assert next_block(ProducerIdBlock(1, 10, 19), 2, size=10) == ProducerIdBlock(2, 20, 29)
    with pytest.raises(ProducerIdsExhaustedError):
        next_block(ProducerIdBlock(1, 0, 2**63 - 1 - PRODUCER_ID_BLOCK_SIZE + 1), 1)


def test_ids_come_from_a_reserved_block_and_a_new_block_when_it_is_used_up() -> None:
    async def scenario() -> None:
        znode = FakeZnode()
        manager = ProducerIdManager(1, znode, block_size=3)
        assert manager.current_block is None  # nothing reserved before the first id
        ids = [await manager.generate_producer_id() for _ in range(7)]
        assert ids == list(range(7))
        assert znode.writes == 3  # blocks 0-2, 3-5, 6-8
        assert znode.block == ProducerIdBlock(1, 6, 8)
        assert manager.current_block == ProducerIdBlock(1, 6, 8)

    asyncio.run(scenario())


def test_an_empty_znode_counts_as_no_block() -> None:
    async def scenario() -> None:
        znode = FakeZnode()
        znode.version = 0  # Kafka creates the znode empty at start-up
        assert await ProducerIdManager(2, znode).generate_producer_id() == 0
        assert (znode.block, znode.version) == (ProducerIdBlock(2, 0, 999), 1)

    asyncio.run(scenario())


def test_brokers_get_distinct_blocks() -> None:
    async def scenario() -> None:
        znode = FakeZnode()
        one, two = ProducerIdManager(1, znode), ProducerIdManager(2, znode)
        assert await one.generate_producer_id() == 0
        assert await two.generate_producer_id() == 1000
        assert await one.generate_producer_id() == 1
        assert two.current_block == ProducerIdBlock(2, 1000, 1999)

    asyncio.run(scenario())


def test_a_lost_race_rereads_and_reserves_the_following_block() -> None:
    async def scenario() -> None:
        znode = FakeZnode()
        manager = ProducerIdManager(1, znode)

        def other_broker_reserves() -> None:
            znode.block, znode.version = ProducerIdBlock(2, 0, 999), 0

        znode.before_write = other_broker_reserves
        assert await manager.generate_producer_id() == 1000
        assert znode.block == ProducerIdBlock(1, 1000, 1999)

    asyncio.run(scenario())


def test_concurrent_requests_share_one_reservation() -> None:
    async def scenario() -> None:
        znode = FakeZnode()
        manager = ProducerIdManager(1, znode, block_size=10)
        ids = await asyncio.gather(*(manager.generate_producer_id() for _ in range(25)))
        assert sorted(ids) == list(range(25))
        assert znode.writes == 3

    asyncio.run(scenario())


def test_block_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="block_size"):
        ProducerIdManager(1, FakeZnode(), block_size=0)
