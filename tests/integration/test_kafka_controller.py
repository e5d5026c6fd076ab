"""KafkaController against real broker processes in a real ZooKeeper: topic creation, leader
failover after kill -9, controller failover, and a partition going offline and back.

The controllers run on an asyncio loop in a background thread (as they would in a broker's
process, apart from the brokers here); the test thread drives the cluster with blocking
calls and polls ZooKeeper with deadlines.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kazoo.client import KazooClient

from broker import zk_data
from broker.topic_partition import TopicPartition
from controller.kafka_controller import KafkaController
from proto import minibroker_pb2 as pb
from tests.cluster import Cluster, running_cluster
from tests.helpers import wait_for

pytestmark = pytest.mark.integration

T = TypeVar("T")

BROKER_SESSION_TIMEOUT_S = 2.0  # tests.cluster's zookeeper.session.timeout.ms
FAILOVER_MARGIN_S = 15.0
CONTROLLER_SESSION_TIMEOUT_MS = 4000


class ControllerThread:
    """An event loop in a daemon thread where the KafkaControllers live."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.controllers: list[KafkaController] = []

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start_controller(self, broker_id: int, zk_connect: str) -> KafkaController:
        async def start() -> KafkaController:
            controller = KafkaController(
                broker_id, zk_connect, session_timeout_ms=CONTROLLER_SESSION_TIMEOUT_MS
            )
            self.controllers.append(controller)
            await controller.start()
            return controller

        return self.call(start())

    def close(self) -> None:
        try:
            for controller in self.controllers:
                self.call(controller.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()


@contextmanager
def controller_thread() -> Iterator[ControllerThread]:
    runner = ControllerThread()
    try:
        yield runner
    finally:
        runner.close()


def state(zk: KazooClient, tp: TopicPartition) -> zk_data.PartitionState | None:
    stat_data = zk.exists(zk_data.partition_state_path(tp))
    if stat_data is None:
        return None
    data, stat = zk.get(zk_data.partition_state_path(tp))
    return zk_data.PartitionState.from_data(zk_data.decode_partition_state(data), stat.version)


def create_topic(zk: KazooClient, topic: str, assignment: dict[int, list[int]]) -> None:
    zk.create(zk_data.topic_path(topic), zk_data.encode_topic_assignment(assignment), makepath=True)


def wait_for_state(
    zk: KazooClient, tp: TopicPartition, timeout: float, **expected: object
) -> zk_data.PartitionState:
    def matches() -> zk_data.PartitionState | None:
        current = state(zk, tp)
        if current is None:
            return None
        for key, value in expected.items():
            actual = getattr(current, key)
            if (list(actual) if key == "isr" else actual) != value:
                return None
        return current

    found = wait_for(
        matches, timeout, message=lambda: f"{tp} state {state(zk, tp)} to match {expected}"
    )
    assert found is not None
    return found


def produce_until_acked(
    cluster: Cluster, broker_id: int, tp: TopicPartition, values: list[bytes]
) -> int:
    """Produce acks=all, retrying while the broker has not yet learnt its leadership."""
    response: pb.PartitionProduceResponse | None = None

    def attempt() -> bool:
        nonlocal response
        response = cluster.produce(broker_id, tp, values, acks=-1, timeout_ms=5000)
        return response.error_code == pb.NONE

    wait_for(attempt, 20, interval=0.1, message=lambda: f"produce to {broker_id}: {response}")
    assert response is not None
    return response.base_offset


def controller_epoch(zk: KazooClient) -> int:
    return zk_data.decode_controller_epoch(zk.get(zk_data.CONTROLLER_EPOCH_PATH)[0])


def test_new_topic_gets_first_live_replica_as_leader_and_accepts_acks_all(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster, controller_thread() as ct:
        controller = ct.start_controller(100, zk_connect)
        wait_for(lambda: controller.is_active, 10, message="controller elected")
        assert controller.epoch == 1
        assert controller_epoch(zk_client) == 1
        create_topic(zk_client, "created", {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
        for p, leader in ((0, 1), (1, 2), (2, 3)):
            tp = TopicPartition("created", p)
            s = wait_for_state(zk_client, tp, 10, leader=leader, leader_epoch=0)
            assert set(s.isr) == {1, 2, 3}
            assert s.controller_epoch == 1
            assert produce_until_acked(cluster, leader, tp, [b"a", b"b"]) == 0
            assert [v for _, v in cluster.consume_all(leader, tp)] == [b"a", b"b"]


def test_leader_kill_9_elects_new_leader_from_isr_without_losing_acked_records(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    tp = TopicPartition("failover", 0)
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster, controller_thread() as ct:
        controller = ct.start_controller(100, zk_connect)
        create_topic(zk_client, tp.topic, {0: [1, 2, 3]})
        wait_for_state(zk_client, tp, 10, leader=1, leader_epoch=0, isr=[1, 2, 3])
        acked = [f"before-{i}".encode() for i in range(50)]
        produce_until_acked(cluster, 1, tp, acked[:1])
        for value in acked[1:]:
            assert cluster.produce(1, tp, [value]).error_code == pb.NONE

        cluster.brokers[1].kill()
        after = wait_for_state(
            zk_client, tp, BROKER_SESSION_TIMEOUT_S + FAILOVER_MARGIN_S, leader_epoch=1
        )
        assert after.leader in (2, 3)
        assert set(after.isr) == {2, 3}
        assert after.controller_epoch == controller.epoch == 1
        produce_until_acked(cluster, after.leader, tp, [b"after"])
        assert [v for _, v in cluster.consume_all(after.leader, tp)] == [*acked, b"after"]


def test_second_controller_takes_over_when_the_first_stops_and_handles_broker_failure(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    tp = TopicPartition("handover", 0)
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster, controller_thread() as ct:
        first = ct.start_controller(100, zk_connect)
        wait_for(lambda: first.is_active, 10, message="first controller elected")
        second = ct.start_controller(101, zk_connect)
        create_topic(zk_client, tp.topic, {0: [2, 3, 1]})
        wait_for_state(zk_client, tp, 10, leader=2, leader_epoch=0, controller_epoch=1)
        assert first.epoch == 1
        assert not second.is_active

        ct.call(first.stop())
        wait_for(lambda: second.is_active, 10, message="second controller elected")
        assert second.epoch == 2
        assert controller_epoch(zk_client) == 2
        produce_until_acked(cluster, 2, tp, [b"x"])

        cluster.brokers[2].kill()
        after = wait_for_state(
            zk_client,
            tp,
            BROKER_SESSION_TIMEOUT_S + FAILOVER_MARGIN_S,
            leader=3,
            leader_epoch=1,
            controller_epoch=2,
        )
        assert set(after.isr) == {1, 3}
        produce_until_acked(cluster, 3, tp, [b"y"])
        assert [v for _, v in cluster.consume_all(3, tp)] == [b"x", b"y"]


def test_partition_with_all_replicas_down_goes_offline_and_returns_with_its_isr_member(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    tp = TopicPartition("offline", 0)
    timeout = BROKER_SESSION_TIMEOUT_S + FAILOVER_MARGIN_S
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster, controller_thread() as ct:
        controller = ct.start_controller(100, zk_connect)
        create_topic(zk_client, tp.topic, {0: [1, 2]})
        wait_for_state(zk_client, tp, 10, leader=1, leader_epoch=0, isr=[1, 2])
        produce_until_acked(cluster, 1, tp, [b"kept"])

        cluster.brokers[1].kill()
        wait_for_state(zk_client, tp, timeout, leader=2, leader_epoch=1, isr=[2])
        cluster.brokers[2].kill()
        wait_for_state(zk_client, tp, timeout, leader=-1, leader_epoch=2, isr=[2])

        # Broker 1 is not in the ISR: its return does not bring the partition back (clean).
        cluster.brokers[1].start(zk_client)
        wait_for(lambda: 1 in controller.context.live_brokers, 10, message="1 seen live")
        offline = state(zk_client, tp)
        assert offline is not None
        assert offline.leader == -1

        cluster.brokers[2].start(zk_client)
        back = wait_for_state(zk_client, tp, timeout, leader=2, leader_epoch=3)
        assert list(back.isr) == [2]
        produce_until_acked(cluster, 2, tp, [b"back"])
        assert [v for _, v in cluster.consume_all(2, tp)] == [b"kept", b"back"]
