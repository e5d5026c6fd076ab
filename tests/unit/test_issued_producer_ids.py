"""The bound of issued producer ids: ids at or below the cached bound need no ZooKeeper, an id
above it refreshes the bound, and a refresh that fails is a retriable error, never a verdict
against a stale bound."""

from __future__ import annotations

import asyncio

import pytest

from broker.replication.issued_producer_ids import IssuedProducerIds, producer_ids_of
from proto import errors
from proto.records.record_batch import Record, encode_batch
from proto.zk.session import ZkConnectionError


class _Znode:
    """``/latest_producer_id_block``'s end as a fake ZooKeeper serves it."""

    def __init__(self, block_end: int) -> None:
        self.block_end = block_end
        self.reads = 0
        self.down = False
        self.hang = False

    async def read(self) -> int:
        self.reads += 1
        if self.hang:  # a read ZooKeeper never answers: only the caller's timeout ends it
            await asyncio.Event().wait()
        if self.down:
            raise ZkConnectionError("get /latest_producer_id_block: connection lost")
        return self.block_end


def _check(issued: IssuedProducerIds, *ids: int) -> None:
    asyncio.run(issued.check(ids))


def test_ids_at_or_below_the_bound_need_no_zookeeper_even_when_it_is_down() -> None:
    znode = _Znode(999)
    issued = IssuedProducerIds(znode.read, 1.0)
    _check(issued, 5)  # above the initial -1: one read
    assert (znode.reads, issued.bound) == (1, 999)
    znode.down = True
    _check(issued, 0, 1, 999)
    assert znode.reads == 1


def test_an_id_above_every_block_is_unknown_after_a_refresh() -> None:
    znode = _Znode(999)
    issued = IssuedProducerIds(znode.read, 1.0)
    with pytest.raises(errors.UnknownProducerIdError, match="1000 was never handed out"):
        _check(issued, 1000)
    znode.block_end = 1999  # another broker reserved the next block
    _check(issued, 1000)
    assert issued.bound == 1999


@pytest.mark.parametrize("failure", ["down", "hang"])
def test_a_refresh_that_fails_is_retriable_not_a_verdict(failure: str) -> None:
    znode = _Znode(999)
    issued = IssuedProducerIds(znode.read, 0.2)
    issued.raise_bound(999)
    setattr(znode, failure, True)
    with pytest.raises(errors.RequestTimedOutError, match="retry") as raised:
        _check(issued, 1500)
    assert raised.value.retriable
    assert issued.bound == 999


def test_negative_ids_other_than_none_are_unknown_without_zookeeper() -> None:
    znode = _Znode(999)
    issued = IssuedProducerIds(znode.read, 1.0)
    with pytest.raises(errors.UnknownProducerIdError, match="negative"):
        _check(issued, -2)
    assert znode.reads == 0


def test_a_reserved_block_raises_the_bound_without_a_read() -> None:
    znode = _Znode(0)
    znode.down = True
    issued = IssuedProducerIds(znode.read, 1.0)
    issued.raise_bound(1999)
    issued.raise_bound(999)  # never lowered
    _check(issued, 1999)
    assert (issued.bound, znode.reads) == (1999, 0)


def test_concurrent_checks_share_one_read() -> None:
    znode = _Znode(999)
    issued = IssuedProducerIds(znode.read, 1.0)

    async def main() -> None:
        await asyncio.gather(*(issued.check([i]) for i in range(20)))

    asyncio.run(main())
    assert znode.reads == 1


def test_producer_ids_of_reads_every_batch_header() -> None:
    plain = encode_batch([Record(None, b"v", 1)])
    first = encode_batch([Record(None, b"v", 1)], producer_id=7, producer_epoch=0, base_sequence=0)
    second = encode_batch([Record(None, b"w", 1)], producer_id=9, producer_epoch=0, base_sequence=0)
    assert producer_ids_of(plain + first + second) == {7, 9}
    assert producer_ids_of(plain) == set()
    assert producer_ids_of(first[:30]) == set()  # not framed: the log refuses it later
