"""ZooKeeper's multiRead (proto/zk/multi_read.py) against a real ZooKeeper: hundreds of
znodes read in a few requests answer exactly what one getData per znode answers (data,
stat, a missing znode's NoNodeError, an empty znode), through a chroot, across the
request size; and the one-by-one reads a server without multiRead gets give the same."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import uvloop
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from broker.zk_client import BrokerZkClient
from proto.topic_partition import TopicPartition
from proto.zk import kafka_zk_client, sync_client
from proto.zk.multi_read import MULTI_READ_MAX_PATHS
from proto.zk.znodes import PartitionStateData, encode_partition_state, partition_state_path

COUNT = 2 * MULTI_READ_MAX_PATHS + 37
"""Three requests, the last one partly filled."""


def _populate(zk_client: KazooClient) -> list[str]:
    """COUNT state znodes (some missing, one empty, one large), their paths in order."""
    paths = [partition_state_path(TopicPartition("wide", p)) for p in range(COUNT)]
    zk_client.ensure_path(paths[0].rpartition("/")[0])
    pending = [zk_client.create_async(path.rpartition("/")[0]) for path in paths[1:]]
    for result in pending:
        result.get()
    writes = []
    for p, path in enumerate(paths):
        if p % 97 == 5:
            continue  # missing
        data = (
            b""
            if p == 11
            else b"x" * 50_000
            if p == 12
            else encode_partition_state(
                PartitionStateData(leader=p % 3, leader_epoch=p, isr=(1, 2), controller_epoch=1)
            )
        )
        writes.append(zk_client.create_async(path, data))
    for result in writes:
        result.get()
    zk_client.set(paths[7], b"changed")  # a version other than 0
    return paths


def _comparable(answer: Any) -> Any:
    if isinstance(answer, BaseException):
        return type(answer)
    data, stat = answer
    return data, stat


def test_multi_read_answers_what_reads_one_by_one_answer(
    zk_connect: str, zk_client: KazooClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = _populate(zk_client)
    expected = [_comparable(r) for r in _one_by_one(zk_client, paths)]
    assert expected.count(NoNodeError) == len([p for p in range(COUNT) if p % 97 == 5])

    async def scenario() -> tuple[list[Any], list[Any], bool]:
        client = BrokerZkClient(zk_connect, broker_id=1)
        await client.start()
        try:
            with monkeypatch.context() as patched:  # no getData one by one: all multiReads
                patched.setattr(kafka_zk_client, "_get", _no_single_reads)
                batched = await client.read_data("test", paths)
            client._multi_read = False  # as after a server said it has no multiRead
            single = await client.read_data("test", paths)
            return batched, single, await _state_read_matches(client)
        finally:
            await client.close()

    batched, single, states_match = uvloop.run(scenario())
    assert [_comparable(a) for a in batched] == expected
    assert [_comparable(a) for a in single] == expected
    assert states_match


def _no_single_reads(path: str) -> Any:
    raise AssertionError(f"{path} was read alone, not in a multiRead")


def _one_by_one(zk_client: KazooClient, paths: list[str]) -> list[Any]:
    out: list[Any] = []
    for result in [zk_client.get_async(path) for path in paths]:
        try:
            out.append(result.get())
        except NoNodeError as err:
            out.append(err)
    return out


async def _state_read_matches(client: BrokerZkClient) -> bool:
    """The typed read the controller and LeaderAndIsr checks use, through the multiRead."""
    client._multi_read = True
    tps = [TopicPartition("wide", p) for p in range(20, 20 + MULTI_READ_MAX_PATHS + 5)]
    states = await client.get_partition_states(tps)
    one = await asyncio.gather(*(client.read_partition_state(tp) for tp in tps))
    return list(states.values()) == list(one) and sum(s is None for s in one) > 0


def test_the_blocking_reads_of_tools_use_multi_read_alike(zk_client: KazooClient) -> None:
    """bench, chaos and the tests poll every state znode through proto/zk/sync_client."""
    _populate(zk_client)
    tps = [TopicPartition("wide", p) for p in range(COUNT)]
    batch = sync_client.read_partition_states(zk_client, tps)
    assert set(batch.found) == {tp for tp in tps if tp.partition % 97 != 5} - {
        TopicPartition("wide", 7),  # "changed": not a state
        TopicPartition("wide", 11),  # empty
        TopicPartition("wide", 12),  # 50 KB of x
    }
    assert set(batch.malformed) == {TopicPartition("wide", p) for p in (7, 11, 12)}
    assert batch.found[TopicPartition("wide", 40)].leader_epoch == 40
