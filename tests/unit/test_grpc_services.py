"""BrokerService.InitProducerId's answers when ZooKeeper cannot reserve a block: a retriable
REQUEST_TIMED_OUT when it does not answer in time, UNKNOWN_SERVER_ERROR when the znode is
unusable. (Success against a real ZooKeeper: tests/integration/test_idempotent_producer.py.)
Metadata's brokers with their Kafka listeners. ListGroups and DescribeGroups of the group
coordinator's groups."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from broker.coordinator.group_coordinator import GroupCoordinator, coordinator_for
from broker.coordinator.producer_id_manager import ProducerIdManager
from broker.grpc_listener.guarded_call import MalformedRequestError
from broker.grpc_listener.request_parsing import is_read_committed
from broker.grpc_listener.services import BrokerService
from broker.metadata_cache import MetadataCache
from broker.replication.replica_manager import ReplicaManager
from broker.security.acl_authorizer import Session
from proto.wire import minibroker_pb2 as pb
from proto.zk.znodes import BrokerInfo, ProducerIdBlock, ZkDataError
from tests.unit.test_group_coordinator import consumer_assignment


class _Replicas:
    broker_id = 1


class _UnreachableZooKeeper:
    """Never answers, as kazoo retrying through a long connection loss."""

    async def get_producer_id_block(self) -> tuple[ProducerIdBlock | None, int | None]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def set_producer_id_block_conditionally(
        self, block: ProducerIdBlock, expected_version: int | None
    ) -> bool:
        raise AssertionError("never reached")


class _MalformedZnode(_UnreachableZooKeeper):
    async def get_producer_id_block(self) -> tuple[ProducerIdBlock | None, int | None]:
        raise ZkDataError("znode /latest_producer_id_block: not valid JSON")


def init_producer_id(store: Any) -> pb.InitProducerIdResponse:
    service = BrokerService(
        cast(ReplicaManager, _Replicas()),
        MetadataCache(),
        ProducerIdManager(1, store),
        producer_id_timeout_ms=50,
    )
    anonymous = Session("User:ANONYMOUS", "127.0.0.1")
    return asyncio.run(service._init_producer_id(pb.InitProducerIdRequest(), anonymous))


def test_zookeeper_not_answering_is_a_retriable_timeout() -> None:
    response = init_producer_id(_UnreachableZooKeeper())
    assert response.error_code == pb.REQUEST_TIMED_OUT
    assert (response.producer_id, response.producer_epoch) == (-1, -1)


def test_a_malformed_block_znode_is_a_server_error() -> None:
    response = init_producer_id(_MalformedZnode())
    assert response.error_code == pb.UNKNOWN_SERVER_ERROR
    assert response.producer_id == -1


def test_metadata_names_each_brokers_kafka_listener_if_it_has_one() -> None:
    cache = MetadataCache()
    cache.update(
        controller_id=1,
        controller_epoch=1,
        brokers=[
            BrokerInfo(1, "10.0.0.1", 9091, kafka_endpoint=("10.0.0.1", 19091)),
            BrokerInfo(2, "10.0.0.2", 9092),
        ],
        partitions={},
    )
    service = BrokerService(
        cast(ReplicaManager, _Replicas()),
        cache,
        ProducerIdManager(1, _UnreachableZooKeeper()),
        producer_id_timeout_ms=50,
    )
    response = asyncio.run(service.Metadata(pb.MetadataRequest(), cast(Any, None)))
    assert [(b.node_id, b.kafka_host, b.kafka_port) for b in response.brokers] == [
        (1, "10.0.0.1", 19091),
        (2, "", 0),
    ]


def test_list_and_describe_groups_answer_with_the_coordinators_groups_and_members() -> None:
    cache = MetadataCache()
    cache.update(
        controller_id=1,
        controller_epoch=1,
        brokers=[
            BrokerInfo(b, f"10.0.0.{b}", 9090 + b, kafka_endpoint=(f"10.0.0.{b}", 19090 + b))
            for b in (1, 2, 3)
        ],
        partitions={},
    )
    groups = GroupCoordinator(1, initial_rebalance_delay_ms=0)
    service = BrokerService(
        cast(ReplicaManager, _Replicas()),
        cache,
        ProducerIdManager(1, _UnreachableZooKeeper()),
        group_coordinator=groups,
    )

    async def main() -> tuple[pb.ListGroupsResponse, pb.DescribeGroupsResponse]:
        joined = await groups.join_group(
            "billing",
            "",
            group_instance_id="pod-1",
            client_id="rdkafka",
            client_host="/10.1.2.3",
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            protocol_type="consumer",
            protocols=[("range", b"")],
        )
        plan = {joined.member_id: consumer_assignment("ck-events", [0, 1, 2])}
        await groups.sync_group("billing", joined.generation_id, joined.member_id, plan)
        listed = await service._list_groups(pb.ListGroupsRequest())
        described = await service.group_rpcs.describe_groups(
            pb.DescribeGroupsRequest(groups=["billing", "gone", "bad/name"])
        )
        return listed, described

    listed, described = asyncio.run(main())
    coordinator = coordinator_for("billing", [1, 2, 3])
    assert [
        (g.group_id, g.protocol_type, g.group_state, g.coordinator_id) for g in listed.groups
    ] == [("billing", "consumer", "Stable", coordinator)]
    billing, gone, bad = described.groups
    assert (billing.error_code, billing.group_state, billing.protocol_data) == (
        pb.NONE,
        "Stable",
        "range",
    )
    [member] = billing.members
    assert (member.client_id, member.client_host, member.group_instance_id) == (
        "rdkafka",
        "/10.1.2.3",
        "pod-1",
    )
    assert [(t.topic, list(t.partitions)) for t in member.assignment] == [("ck-events", [0, 1, 2])]
    assert (gone.error_code, gone.group_state, len(gone.members)) == (pb.NONE, "Dead", 0)
    assert bad.error_code == pb.INVALID_REQUEST

    filtered = asyncio.run(service._list_groups(pb.ListGroupsRequest(states_filter=["empty"])))
    assert list(filtered.groups) == []
    with pytest.raises(MalformedRequestError, match="'Lively'"):
        asyncio.run(service._list_groups(pb.ListGroupsRequest(states_filter=["Lively"])))


@pytest.mark.parametrize("level", [-1, 2, 7])
def test_an_isolation_level_other_than_0_or_1_is_a_malformed_request(level: int) -> None:
    assert (is_read_committed(0), is_read_committed(1)) == (False, True)
    with pytest.raises(MalformedRequestError, match="isolation_level"):
        is_read_committed(level)
