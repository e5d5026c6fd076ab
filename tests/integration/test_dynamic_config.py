"""DynamicConfigManager against a real ZooKeeper: it reads the dynamic broker configs at
start (per-broker over cluster default over static), applies each later ``/config/changes``
notification once, in order, skips hostile or foreign ones and invalid values, and deletes
expired notifications.

The broker's replica manager is replaced by a recorder of what it is told (the manager's
contract with it is two calls); ZooKeeper is real, in a chroot of each test.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
import uvloop
from kazoo.client import KazooClient

from broker.dynamic_config import DynamicConfigManager
from broker.replication.replica_manager import ReplicaManager
from broker.zk_client import BrokerZkClient
from proto.config.broker_config import BrokerConfig, TopicConfig
from proto.topic_partition import TopicPartition
from proto.zk.znodes import (
    CONFIG_CHANGE_PREFIX,
    CONFIG_CHANGES_PATH,
    broker_config_path,
    encode_config_change,
    encode_topic_config,
    topic_config_path,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

T = TypeVar("T")
WAIT_S = 20.0


class RecordingReplicaManager:
    """What the manager tells the replica manager, recorded."""

    def __init__(self, topics: list[str]) -> None:
        self.partitions = {TopicPartition(t, 0): None for t in topics}
        self.configs: list[BrokerConfig] = []
        self.topic_updates: list[tuple[str, TopicConfig]] = []

    def reconfigure(self, config: BrokerConfig) -> None:
        self.configs.append(config)

    def update_topic_config(self, topic: str, config: TopicConfig) -> list[TopicPartition]:
        self.topic_updates.append((topic, config))
        return [tp for tp in self.partitions if tp.topic == topic]


def run(coro: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


async def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def notify(zk: KazooClient, entity_path: str | None, data: bytes | None = None) -> None:
    content = encode_config_change(entity_path) if entity_path is not None else data
    zk.create(
        f"{CONFIG_CHANGES_PATH}/{CONFIG_CHANGE_PREFIX}", content, sequence=True, makepath=True
    )


def write(zk: KazooClient, path: str, config: dict[str, str]) -> None:
    data = encode_topic_config(config)
    if zk.exists(path) is None:
        zk.create(path, data, makepath=True)
    else:
        zk.set(path, data)


def with_manager(
    connect: str,
    tmp_path: Path,
    body: Callable[[DynamicConfigManager, RecordingReplicaManager], Awaitable[None]],
    *,
    clock_ms: Callable[[], int] | None = None,
) -> None:
    static = BrokerConfig(
        broker_id=1,
        zookeeper_connect=connect,
        log_dir=tmp_path,
        min_insync_replicas=1,
        log_properties={"log.retention.hours": "1"},
    )
    recorder = RecordingReplicaManager(["orders"])

    async def scenario() -> None:
        zk = BrokerZkClient(connect, broker_id=1)
        await zk.start()
        manager = DynamicConfigManager(
            static,
            zk,
            cast(ReplicaManager, recorder),
            clock_ms=clock_ms or (lambda: time.time_ns() // 1_000_000),
        )
        try:
            await manager.start()
            await body(manager, recorder)
        finally:
            await manager.stop()
            await zk.close()

    run(scenario())


def test_broker_layers_apply_at_start_and_on_change_with_per_broker_over_default(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    write(zk_client, broker_config_path("<default>"), {"min.insync.replicas": "3"})
    write(zk_client, broker_config_path(1), {"min.insync.replicas": "2"})
    write(zk_client, broker_config_path(2), {"min.insync.replicas": "9"})
    notify(zk_client, "brokers/1")  # there before the start: read, not replayed

    async def body(manager: DynamicConfigManager, recorder: RecordingReplicaManager) -> None:
        assert manager.config.min_insync_replicas == 2  # per-broker beats the default
        assert len(recorder.configs) == 1
        # A new cluster default: the retention applies (it hides the static hours), the
        # per-broker min.insync.replicas still wins; hosted topics are recomputed.
        write(
            zk_client,
            broker_config_path("<default>"),
            {"min.insync.replicas": "3", "log.retention.ms": "7000"},
        )
        notify(zk_client, "brokers/<default>")
        # The config is handed over first, the hosted topics recomputed after it: wait for
        # both (the second was read too early once, under a busy machine).
        await until(
            lambda: len(recorder.configs) == 2 and bool(recorder.topic_updates),
            "the default applied and the hosted topics recomputed",
        )
        config = recorder.configs[-1]
        assert (config.min_insync_replicas, config.default_log_config.retention_ms) == (2, 7000)
        assert recorder.topic_updates[-1][0] == "orders"
        assert recorder.topic_updates[-1][1].log_config.retention_ms == 7000
        # Another broker's entity: nothing to do here. An invalid value: the broker keeps
        # what it had (and says so in its log).
        notify(zk_client, "brokers/2")
        write(zk_client, broker_config_path(1), {"min.insync.replicas": "zero"})
        notify(zk_client, "brokers/1")
        await until(lambda: len(recorder.configs) == 3, "the invalid change processed")
        assert recorder.configs[-1].min_insync_replicas == 2
        write(zk_client, broker_config_path(1), {"min.insync.replicas": "4"})
        notify(zk_client, "brokers/1")
        await until(lambda: recorder.configs[-1].min_insync_replicas == 4, "the fixed value")
        assert [c.min_insync_replicas for c in recorder.configs] == [2, 2, 2, 4]

    with_manager(zk_connect, tmp_path, body)


def test_topic_changes_reach_hosted_topics_and_hostile_notifications_are_skipped(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    async def body(manager: DynamicConfigManager, recorder: RecordingReplicaManager) -> None:
        notify(zk_client, None, b'{"version":2,"entity_path":"topics/../../controller"}')
        notify(zk_client, None, b"not json")
        zk_client.create(f"{CONFIG_CHANGES_PATH}/stranger", b"")
        write(zk_client, topic_config_path("elsewhere"), {"retention.ms": "5"})
        notify(zk_client, "topics/elsewhere")  # not hosted here: nothing to apply
        write(
            zk_client, topic_config_path("orders"), {"retention.ms": "100", "flush.messages": "1"}
        )
        notify(zk_client, "topics/orders")
        await until(lambda: bool(recorder.topic_updates), "the topic update")
        [(topic, config)] = recorder.topic_updates
        assert topic == "orders"
        assert config.log_config.retention_ms == 100
        assert config.log_config.flush_interval_messages == 1
        assert config.min_insync_replicas == 1

    with_manager(zk_connect, tmp_path, body)


def test_expired_notifications_are_deleted_after_processing(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    later = 20 * 60 * 1000  # Kafka's 15 minute expiry has passed for every notification

    async def body(manager: DynamicConfigManager, recorder: RecordingReplicaManager) -> None:
        write(zk_client, topic_config_path("orders"), {"segment.bytes": "4096"})
        notify(zk_client, "topics/orders")
        await until(lambda: bool(recorder.topic_updates), "the topic update")
        await until(
            lambda: not [
                c for c in zk_client.get_children(CONFIG_CHANGES_PATH)
                if c.startswith(CONFIG_CHANGE_PREFIX)
            ],
            "the expired notifications deleted",
        )  # fmt: skip
        assert recorder.topic_updates[0][1].log_config.segment_bytes == 4096

    notify(zk_client, "topics/orders")  # an old one: seen at start, purged later
    with_manager(zk_connect, tmp_path, body, clock_ms=lambda: time.time_ns() // 1_000_000 + later)
