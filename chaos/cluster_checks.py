"""What a chaos run asks of the cluster between faults: topics made, ISRs whole, every
transaction ended (a last stable offset at its high watermark), a final read.

These talk to the cluster as a client would (the admin client, a consumer) and to
ZooKeeper (the state znodes), never to a broker's internals.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence

from kazoo.client import KazooClient

from chaos.history_recorder import HistoryRecorder
from client.admin import LATEST, AdminClient
from client.consumer import Consumer, ConsumerConfig
from client.metadata import BrokerConnections, ClientError
from proto.topic_partition import TopicPartition
from proto.zk import znodes
from proto.zk.sync_client import read_partition_state

__all__ = [
    "create_topics",
    "final_read",
    "under_replicated",
    "unstable_partitions",
    "wait_for_full_isr",
]


async def create_topics(
    bootstrap: str,
    zookeeper: str,
    topics: Sequence[str],
    partitions: int,
    replication_factor: int,
    config: Mapping[str, str],
) -> None:
    """Create the workload's topics and wait until every partition has a leader."""
    async with (
        BrokerConnections.from_bootstrap(bootstrap) as connections,
        AdminClient(connections, zookeeper, wait_timeout_s=60) as admin,
    ):
        for topic in topics:
            await admin.create_topic(topic, partitions, replication_factor, dict(config))


def under_replicated(zk: KazooClient, tps: Sequence[TopicPartition]) -> dict[TopicPartition, str]:
    """The partitions whose ISR is not their whole replica set (or that have no leader),
    with what they lack."""
    problems: dict[TopicPartition, str] = {}
    assignments: dict[str, dict[int, list[int]]] = {}
    for tp in tps:
        if tp.topic not in assignments:
            data, _ = zk.get(znodes.topic_path(tp.topic))
            assignments[tp.topic] = znodes.decode_topic_assignment(data)
        replicas = assignments[tp.topic].get(tp.partition, [])
        state = read_partition_state(zk, tp)
        if state is None:
            problems[tp] = "no state"
        elif state.leader < 0:
            problems[tp] = "no leader"
        elif set(state.isr) != set(replicas):
            problems[tp] = f"ISR {sorted(state.isr)} of {sorted(replicas)}"
    return problems


def wait_for_full_isr(
    zk: KazooClient, tps: Sequence[TopicPartition], timeout_s: float
) -> dict[TopicPartition, str]:
    """Wait until every partition has its whole replica set in sync; returns what is still
    missing at the deadline (empty: all whole)."""
    deadline = time.monotonic() + timeout_s
    while True:
        missing = under_replicated(zk, tps)
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(0.25)


async def unstable_partitions(
    bootstrap: str, zookeeper: str, tps: Sequence[TopicPartition]
) -> dict[TopicPartition, str]:
    """The partitions whose last stable offset (where a read_committed consumer's end is,
    ListOffsets read_committed) is below their high watermark: a transaction is still
    open on them, or its marker is not written yet. With what each lacks."""
    async with (
        BrokerConnections.from_bootstrap(bootstrap) as connections,
        AdminClient(connections, zookeeper) as admin,
    ):
        ends = await admin.list_offsets(tps, LATEST)
    problems = {tp: f"no high watermark: {why}" for tp, why in ends.errors.items()}
    config = ConsumerConfig(isolation_level="read_committed")
    async with (
        BrokerConnections.from_bootstrap(bootstrap) as connections,
        Consumer(connections, config) as consumer,
    ):
        consumer.assign(sorted(ends.offsets))
        consumer.seek_to_end()
        for tp, high_watermark in sorted(ends.offsets.items()):
            try:
                stable = await consumer.position(tp)
            except ClientError as e:
                problems[tp] = f"no last stable offset: {e}"
                continue
            if stable < high_watermark:
                problems[tp] = f"last stable offset {stable} < high watermark {high_watermark}"
    return problems


async def final_read(
    bootstrap: str,
    zookeeper: str,
    tps: Sequence[TopicPartition],
    history: HistoryRecorder,
    timeout_s: float,
) -> tuple[int, dict[TopicPartition, str]]:
    """Read every partition once from its log start to its high watermark, recording each
    record as a ``read``; returns the records read and the partitions it could not finish."""
    async with (
        BrokerConnections.from_bootstrap(bootstrap) as connections,
        AdminClient(connections, zookeeper) as admin,
    ):
        ends = await admin.list_offsets(tps, LATEST)
        unfinished = {tp: f"no high watermark: {why}" for tp, why in ends.errors.items()}
        targets = {tp: end for tp, end in ends.offsets.items() if end > 0}
    config = ConsumerConfig(auto_offset_reset="earliest", fetch_max_wait_ms=100)
    read = 0
    async with (
        BrokerConnections.from_bootstrap(bootstrap) as connections,
        Consumer(connections, config) as consumer,
    ):
        consumer.assign(sorted(targets))
        consumer.seek_to_beginning()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        remaining = dict(targets)
        while remaining and loop.time() < deadline:
            for r in await consumer.poll(timeout_ms=500):
                value = None if r.value is None else r.value.decode("utf-8", "replace")
                history.read(r.topic, r.partition, r.offset, value)
                read += 1
            for tp in list(remaining):
                if await consumer.position(tp) >= remaining[tp]:
                    del remaining[tp]
        unfinished.update({tp: f"read stopped short of {end}" for tp, end in remaining.items()})
    return read, unfinished
