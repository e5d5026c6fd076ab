"""Every ZooKeeper write is measured against ``jute.maxbuffer`` before it is queued: a
too-large one fails at once with ZnodeTooLargeError, naming the size and the limit,
instead of reaching a server that would drop the session."""

from __future__ import annotations

import pytest
from kazoo.exceptions import ConnectionClosedError
from kazoo.protocol.serialization import Create, GetData, SetData, Transaction
from kazoo.security import OPEN_ACL_UNSAFE

from proto.replica_assignment import assign_replicas
from proto.zk import znodes
from proto.zk.znode_limits import (
    JUTE_MAXBUFFER,
    REQUEST_HEADER_BYTES,
    SizeCheckedKazooClient,
    ZnodeTooLargeError,
    assignment_size_floor,
    check_assignment_floor,
    check_create,
    check_write,
    create_size_floor,
    write_size,
)


def test_the_default_is_zookeepers_jute_maxbuffer() -> None:
    assert JUTE_MAXBUFFER == 0xFFFFF == 1_048_575


def test_a_write_is_measured_as_the_server_reads_it() -> None:
    create = Create("/brokers/topics/t", b"x" * 100, list(OPEN_ACL_UNSAFE), 0)
    size = write_size(create)
    assert size == REQUEST_HEADER_BYTES + len(create.serialize())
    assert size >= create_size_floor("/brokers/topics/t", b"x" * 100)
    assert write_size(SetData("/a", b"y" * 10, -1)) == REQUEST_HEADER_BYTES + 4 + 2 + 4 + 10 + 4
    assert write_size(GetData("/a", None)) is None  # reads are not checked


def test_a_write_over_the_limit_is_refused_with_its_size_and_the_limit() -> None:
    check_write(SetData("/a", b"y" * 1000, -1), limit=2000)
    with pytest.raises(ZnodeTooLargeError) as raised:
        check_write(SetData("/brokers/topics/big", b"y" * 3000, -1), limit=2000)
    err = raised.value
    assert (err.path, err.limit) == ("/brokers/topics/big", 2000)
    assert err.size == REQUEST_HEADER_BYTES + 4 + len("/brokers/topics/big") + 4 + 3000 + 4
    assert f"would be {err.size} bytes" in str(err)
    assert "more than zookeeper.jute.maxbuffer (2000 bytes)" in str(err)


def test_a_multi_is_measured_whole() -> None:
    ops = [SetData(f"/p/{i}", b"z" * 600, -1) for i in range(4)]
    with pytest.raises(ZnodeTooLargeError, match=r"multi\(/p/0, /p/1, /p/2, \.\.\.\)"):
        check_write(Transaction(ops), limit=2000)
    check_write(Transaction(ops[:2]), limit=2000)


def test_the_assignment_floor_never_exceeds_the_encoded_assignment() -> None:
    for partitions, factor in [(1, 1), (9, 1), (10, 2), (11, 3), (1000, 3), (12_345, 2)]:
        encoded = znodes.encode_topic_assignment(assign_replicas(partitions, factor, [1, 2, 3]))
        floor = assignment_size_floor(partitions, factor)
        assert floor <= len(encoded) < floor + 100, (partitions, factor)
    assert assignment_size_floor(0, 3) == 0
    # A million partitions need more than 12 MB: refused without placing them.
    assert assignment_size_floor(1_000_000, 1) > 12 * 10**6
    with pytest.raises(ZnodeTooLargeError, match="would be at least 1288"):
        check_assignment_floor("/brokers/topics/t", 1_000_000, 1, JUTE_MAXBUFFER)
    check_assignment_floor("/brokers/topics/t", 10_000, 3, JUTE_MAXBUFFER)
    with pytest.raises(ZnodeTooLargeError, match="at least"):
        check_create("/brokers/topics/t", b"x" * 5000, 4096)


def test_the_client_fails_a_large_write_before_queueing_it() -> None:
    client = SizeCheckedKazooClient(hosts="127.0.0.1:1", jute_maxbuffer=4096)
    try:
        refused = client.create_async("/t", b"x" * 5000)
        with pytest.raises(ZnodeTooLargeError, match=r"/t would be \d+ bytes"):
            refused.get(timeout=1)
        assert not client._queue  # nothing was queued for the connection
        refused_set = client.set_async("/t", b"x" * 5000)
        with pytest.raises(ZnodeTooLargeError):
            refused_set.get(timeout=1)
        transaction = client.transaction()
        for i in range(3):
            transaction.create(f"/t{i}", b"x" * 2000)
        with pytest.raises(ZnodeTooLargeError, match="multi"):
            transaction.commit_async().get(timeout=1)
        # A small write goes on to kazoo, which refuses it only because nothing is connected.
        with pytest.raises(ConnectionClosedError):
            client.create_async("/t", b"x").get(timeout=1)
    finally:
        client.close()


def test_a_write_near_the_limit_is_measured_exactly() -> None:
    # The payload alone fits; with the header and lengths it does not.
    limit = 5000
    data = b"d" * (limit - REQUEST_HEADER_BYTES - 4 - 2 - 4 - 4 + 1)
    with pytest.raises(ZnodeTooLargeError, match=f"would be {limit + 1} bytes"):
        check_write(SetData("/a", data, -1), limit)
    check_write(SetData("/a", data[:-1], -1), limit)
