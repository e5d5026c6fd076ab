"""The controller's request path against real broker processes: batches built by
ControllerBrokerRequestBatch from state znodes in a real (chrooted) ZooKeeper, sent through
ControllerChannelManager over the real Control service.

What each test drives: a new topic's batch makes the brokers lead and follow (Metadata shows
it, an acks=all produce commits through the followers the batch pointed at their leaders); a
broker killed with SIGKILL gets the request queued for it once it is back on its port; a
pipeline of requests to one broker is applied in order (each LeaderAndIsr carries a newer
leader epoch, so any overtaking would be refused as FENCED_LEADER_EPOCH); a request from an
older controller epoch is refused and reported to the callback.

The order test here is end to end, not a trap: on one HTTP/2 connection gRPC delivered even
concurrently sent requests in order. tests/unit/test_channel_manager.py holds a request at
a stand-in broker to show that nothing overtakes it.

The manager runs on uvloop, as in the broker process; waits poll with deadlines.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvloop
from kazoo.client import KazooClient

from controller.channel_manager import (
    DEFAULT_REQUEST_TIMEOUT_S,
    ControllerChannelManager,
    SendResult,
    StaleControllerEpochCallback,
)
from controller.request_batch import (
    BrokerRequest,
    ControllerBrokerRequestBatch,
    ControlRequest,
    ControlResponse,
    LiveBroker,
    PartitionLeadership,
)
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.wire.minibroker_pb2 import ErrorCode
from proto.zk.sync_client import (
    create_partition_state,
    read_partition_state,
    read_registered_brokers,
    set_partition_state,
)
from proto.zk.znodes import (
    BROKER_TOPICS_PATH,
    CONTROLLER_EPOCH_PATH,
    CONTROLLER_PATH,
    PartitionState,
    PartitionStateData,
    encode_controller,
    encode_topic_assignment,
    topic_path,
)
from tests.cluster import Cluster, running_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

T = TypeVar("T")
CONTROLLER_ID = 1
"""The controller runs inside a broker; broker 1 plays that part (no controller runs)."""
CONTROLLER_EPOCH = 3
LOGGER = "controller.channel_manager"


# -- the controller's side, as it will do it ---------------------------------------------------


def live_brokers(zk: KazooClient) -> dict[int, LiveBroker]:
    """Registered brokers with their epoch (registration czxid), read as the controller does."""
    return {
        broker_id: LiveBroker(broker_id, broker.host, broker.port, epoch=broker.broker_epoch)
        for broker_id, broker in read_registered_brokers(zk).require().items()
    }


def create_topic(
    zk: KazooClient, topic: str, assignment: Mapping[int, list[int]]
) -> dict[TopicPartition, PartitionLeadership]:
    """The assignment and initial state znodes (leader = first replica, epoch 0, ISR = all),
    as the controller writes them for a new topic; returned as read back, with versions."""
    zk.ensure_path(BROKER_TOPICS_PATH)
    zk.create(topic_path(topic), encode_topic_assignment(assignment))
    out = {}
    for partition, replicas in assignment.items():
        tp = TopicPartition(topic, partition)
        data = PartitionStateData(replicas[0], 0, tuple(replicas), CONTROLLER_EPOCH)
        create_partition_state(zk, tp, data)
        out[tp] = PartitionLeadership(read_state(zk, tp), replicas)
    return out


def elected_at(zk: KazooClient, epoch: int) -> None:
    """``/controller_epoch`` as it is once the controller of ``epoch`` was elected: brokers
    never believe a request from a controller epoch ZooKeeper does not hold."""
    zk.set(CONTROLLER_EPOCH_PATH, str(epoch).encode())


def read_state(zk: KazooClient, tp: TopicPartition) -> PartitionState:
    state = read_partition_state(zk, tp)
    assert state is not None, f"{tp} has no state znode"
    return state


def new_topic_batch(
    partitions: Mapping[TopicPartition, PartitionLeadership],
) -> ControllerBrokerRequestBatch:
    """onNewPartitionCreation: LeaderAndIsr(is_new) to each partition's replicas."""
    batch = ControllerBrokerRequestBatch()
    for tp, (state, replicas) in partitions.items():
        batch.add_leader_and_isr(replicas, tp, state, replicas, is_new=True)
    return batch


def assert_answered(results: list[SendResult]) -> None:
    for result in results:
        assert result.error is None, f"broker {result.broker_id}: {result.error!r}"
        assert result.response is not None
        assert result.response.error_code == ErrorCode.NONE, (result.broker_id, result.response)
        if not isinstance(result.response, pb.UpdateMetadataResponse):
            for e in result.response.partition_errors:
                assert e.error_code == ErrorCode.NONE, (result.broker_id, e)


# -- test helpers ----------------------------------------------------------------------------


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run a test coroutine on uvloop, as the broker and its controller do."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())


async def eventually(predicate: Callable[[], T], within: float, what: str) -> T:
    deadline = time.monotonic() + within
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {within}s: {what}")
        await asyncio.sleep(0.05)


def metadata(cluster: Cluster, broker_id: int, topic: str) -> dict[int, pb.PartitionMetadata]:
    response = cluster.broker_stub(broker_id).Metadata(
        pb.MetadataRequest(topics=[topic]), timeout=10
    )
    [topic_metadata] = response.topics
    return {p.partition_index: p for p in topic_metadata.partitions}


def manager_for(
    brokers: Mapping[int, LiveBroker],
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    on_stale_controller_epoch: StaleControllerEpochCallback | None = None,
) -> ControllerChannelManager:
    """A channel manager with a channel to each of ``brokers`` (on the running loop)."""
    manager = ControllerChannelManager(
        request_timeout_s=request_timeout_s, on_stale_controller_epoch=on_stale_controller_epoch
    )
    for b in brokers.values():
        manager.add_broker(b.broker_id, b.host, b.port)
    return manager


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        yield caplog


def retries_to(caplog: pytest.LogCaptureFixture, broker_id: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER
        and getattr(r, "event", None) == "retry"
        and getattr(r, "event_fields", {}).get("broker") == broker_id
    ]


# -- tests -----------------------------------------------------------------------------------


def test_new_topic_batch_makes_brokers_lead_and_follow(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path, scripted_controller=True) as cluster:
        elected_at(zk_client, CONTROLLER_EPOCH)
        brokers = live_brokers(zk_client)
        assert sorted(brokers) == [1, 2, 3]
        # docs/replication.md placement over [1, 2, 3]: partition i starts at broker i mod 3.
        partitions = create_topic(zk_client, "orders", {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
        requests = new_topic_batch(partitions).build(CONTROLLER_ID, CONTROLLER_EPOCH, brokers)
        assert [(r.broker_id, type(r.request).__name__) for r in requests] == [
            (1, "LeaderAndIsrRequest"),
            (2, "LeaderAndIsrRequest"),
            (3, "LeaderAndIsrRequest"),
            (1, "UpdateMetadataRequest"),
            (2, "UpdateMetadataRequest"),
            (3, "UpdateMetadataRequest"),
        ]

        async def scenario() -> None:
            manager = manager_for(brokers)
            try:
                assert_answered(await manager.send_batch(requests))
            finally:
                await manager.close()

        run(scenario)

        for broker_id in (1, 2, 3):
            seen = metadata(cluster, broker_id, "orders")
            assert {p: (m.leader_id, list(m.isr_nodes)) for p, m in seen.items()} == {
                0: (1, [1, 2, 3]),
                1: (2, [2, 3, 1]),
                2: (3, [3, 1, 2]),
            }, f"broker {broker_id}"
            assert [list(m.replica_nodes) for m in seen.values()] == [
                [1, 2, 3],
                [2, 3, 1],
                [3, 1, 2],
            ]
        # The followers found their leaders through live_leaders: an acks=all produce is
        # committed with the whole ISR, whose logs hold it (no follower was dropped from it).
        for tp, (state, replicas) in partitions.items():
            response = cluster.produce(state.leader, tp, [b"m0", b"m1"], acks=-1)
            assert response.error_code == ErrorCode.NONE, response
            assert (response.base_offset, response.leader_epoch) == (0, 0)
            for replica in replicas:
                assert cluster.replica_records(replica, tp) == [(0, b"m0"), (1, b"m1")]
            cluster.wait_for_isr(tp, set(replicas))  # (a loaded follower may drop and rejoin)


def test_request_queued_for_killed_broker_is_delivered_after_restart(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    # The request below names no broker epoch (-1), which brokers accept only with the
    # upgrade setting (see the comment there).
    unknown_epoch_accepted = {"control.request.unknown.broker.epoch.enable": "true"}
    with running_cluster(
        zk_client,
        zk_connect,
        tmp_path,
        broker_ids=(1, 2),
        overrides=unknown_epoch_accepted,
        scripted_controller=True,
    ) as cluster:
        elected_at(zk_client, CONTROLLER_EPOCH)
        brokers = live_brokers(zk_client)
        partitions = create_topic(zk_client, "bounce", {0: [1, 2]})
        tp = TopicPartition("bounce", 0)
        port = cluster.brokers[2].port

        async def scenario() -> None:
            manager = manager_for(brokers, request_timeout_s=1.0)
            try:
                first = new_topic_batch(partitions).build(CONTROLLER_ID, CONTROLLER_EPOCH, brokers)
                assert_answered(await manager.send_batch(first))

                await asyncio.to_thread(cluster.brokers[2].kill)
                # The controller has not noticed yet: it still counts broker 2 as live. The
                # request names no broker epoch (-1): one naming the old incarnation's is
                # refused STALE_BROKER_EPOCH once the new one has registered (KIP-380), and
                # whether the retry lands before or after that is a race.
                batch = ControllerBrokerRequestBatch()
                batch.add_update_metadata([2], partitions)
                unknown = {**brokers, 2: dataclasses.replace(brokers[2], epoch=-1)}
                [(broker_id, request)] = batch.build(CONTROLLER_ID, CONTROLLER_EPOCH, unknown)
                pending = manager.send(broker_id, request)
                await eventually(
                    lambda: retries_to(logs, 2), within=10, what="an attempt on the dead broker"
                )
                assert not pending.done()
                assert manager.queue_size(2) == 1

                await asyncio.to_thread(cluster.brokers[2].start, zk_client)
                assert cluster.brokers[2].port == port
                response = await asyncio.wait_for(pending, timeout=20)
                assert response.error_code == ErrorCode.NONE
            finally:
                await manager.close()

        run(scenario)

        # The restarted broker's metadata cache starts empty: this came from the request.
        seen = metadata(cluster, 2, "bounce")
        assert (seen[0].leader_id, list(seen[0].isr_nodes)) == (1, [1, 2])
        assert read_state(zk_client, tp).leader == 1


def test_requests_to_one_broker_are_applied_in_order(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(
        zk_client, zk_connect, tmp_path, broker_ids=(1,), scripted_controller=True
    ) as cluster:
        elected_at(zk_client, CONTROLLER_EPOCH)
        brokers = live_brokers(zk_client)
        partitions = create_topic(zk_client, "ordered", {0: [1]})
        [(tp, (created, replicas))] = partitions.items()
        # The controller writes each epoch to the state znode before it sends it; here the
        # znode jumps to the last one at once (brokers never believe an epoch beyond it).
        last = PartitionStateData(1, 29, (1,), CONTROLLER_EPOCH)
        set_partition_state(zk_client, tp, last, expected_version=-1)
        # 30 leader epochs, each its own LeaderAndIsr + UpdateMetadata, all queued at once.
        requests: list[BrokerRequest] = []
        for epoch in range(30):
            batch = ControllerBrokerRequestBatch()
            state = PartitionState(1, epoch, (1,), CONTROLLER_EPOCH, created.zk_version)
            batch.add_leader_and_isr([1], tp, state, replicas, is_new=epoch == 0)
            requests += batch.build(CONTROLLER_ID, CONTROLLER_EPOCH, brokers)

        async def scenario() -> None:
            manager = manager_for(brokers)
            try:
                # A LeaderAndIsr overtaken by a newer epoch would be FENCED_LEADER_EPOCH.
                assert_answered(await manager.send_batch(requests))
            finally:
                await manager.close()

        run(scenario)
        assert metadata(cluster, 1, "ordered")[0].leader_epoch == 29
        response = cluster.produce(1, tp, [b"x"], acks=1)
        assert (response.error_code, response.leader_epoch) == (ErrorCode.NONE, 29)


def test_old_controller_epoch_is_refused_and_reported(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(
        zk_client, zk_connect, tmp_path, broker_ids=(1,), scripted_controller=True
    ) as cluster:
        elected_at(zk_client, 4)
        # The controller of epoch 4 is broker 2, as /controller says: brokers believe an
        # UpdateMetadata's controller id only as ZooKeeper names it.
        zk_client.set(CONTROLLER_PATH, encode_controller(2, 0))
        brokers = live_brokers(zk_client)
        partitions = create_topic(zk_client, "fenced", {0: [1]})
        reported: list[tuple[int, ControlRequest, ControlResponse]] = []

        async def scenario() -> None:
            manager = manager_for(
                brokers, on_stale_controller_epoch=lambda *args: reported.append(args)
            )
            try:
                # The broker hears from controller epoch 4 ...
                newer = ControllerBrokerRequestBatch()
                newer.add_update_metadata([1])
                assert_answered(await manager.send_batch(newer.build(2, 4, brokers)))
                # ... and then from the zombie of epoch 3.
                requests = new_topic_batch(partitions).build(CONTROLLER_ID, 3, brokers)
                results = await manager.send_batch(requests)
                assert [r.response.error_code for r in results if r.response is not None] == [
                    ErrorCode.STALE_CONTROLLER_EPOCH,
                    ErrorCode.STALE_CONTROLLER_EPOCH,
                ]
                assert [(b, req) for b, req, _ in reported] == [tuple(r) for r in requests]
            finally:
                await manager.close()

        run(scenario)
        response = cluster.broker_stub(1).Metadata(pb.MetadataRequest(topics=["fenced"]))
        assert response.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert response.controller_id == 2
