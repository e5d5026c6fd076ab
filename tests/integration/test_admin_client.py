"""AdminClient against real brokers and ZooKeeper: create (znodes as Kafka's admin writes
them, the design notes' assignment, leaders elected by the real controller), describe,
list, delete; cluster health after a broker dies; every user error as one clear line."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kazoo.client import KazooClient

from client.admin import AdminClient
from client.metadata import BrokerConnections, ClientError
from deploy.zookeeper import ZooKeeperServer
from proto.zk import znodes
from tests.cluster import Cluster, running_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

T = TypeVar("T")


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


def bootstrap(cluster: Cluster) -> str:
    return ",".join(b.address for b in cluster.brokers.values())


async def eventually(
    probe: Callable[[], Awaitable[T]], check: Callable[[T], bool], within: float, what: str
) -> T:
    deadline = time.monotonic() + within
    while True:
        value = await probe()
        if check(value):
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} within {within}s; last: {value!r}")
        await asyncio.sleep(0.1)


def test_create_describe_list_delete(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:

        async def scenario() -> None:
            async with (
                BrokerConnections.from_bootstrap(bootstrap(cluster)) as connections,
                AdminClient(connections, zk_connect) as admin,
            ):
                assignment = await admin.create_topic("orders", 5, 3, {"min.insync.replicas": "2"})
                # docs/replication.md: partition i starts at broker i mod n, replica j at (i + j).
                assert assignment == {
                    0: [1, 2, 3],
                    1: [2, 3, 1],
                    2: [3, 1, 2],
                    3: [1, 2, 3],
                    4: [2, 3, 1],
                }
                data, _ = zk_client.get(znodes.topic_path("orders"))
                assert znodes.decode_topic_assignment(data) == assignment
                data, _ = zk_client.get(znodes.topic_config_path("orders"))
                assert znodes.decode_topic_config(data) == {"min.insync.replicas": "2"}

                # wait=True returned only once every partition had a leader.
                (orders,) = await admin.describe_topics(["orders"])
                assert orders.name == "orders"
                assert sorted(orders.partitions) == list(range(5))
                for p, meta in orders.partitions.items():
                    assert list(meta.replicas) == assignment[p]
                    assert meta.leader == assignment[p][0]  # the preferred replica
                    assert set(meta.isr) == {1, 2, 3}

                await admin.create_topic("logs", 1, 1)
                assert zk_client.exists(znodes.topic_config_path("logs")) is None
                assert await admin.list_topics() == ["logs", "orders"]
                described = await admin.describe_topics()
                assert [t.name for t in described] == ["logs", "orders"]

                health = await admin.describe_cluster()
                assert [b.node_id for b in health.brokers] == [1, 2, 3]
                assert health.controller_id in (1, 2, 3)
                assert (health.under_replicated, health.offline) == ([], [])

                await admin.delete_topic("orders")
                assert zk_client.exists(znodes.topic_path("orders")) is None
                await eventually(
                    admin.list_topics,
                    lambda topics: topics == ["logs"],
                    20,
                    "the brokers to forget 'orders'",
                )
                with pytest.raises(ClientError, match=r"^unknown topic 'orders'$"):
                    await admin.delete_topic("orders")

        run(scenario)


def test_user_errors_are_one_line_client_errors(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:

        async def scenario() -> None:
            async with (
                BrokerConnections.from_bootstrap(bootstrap(cluster)) as connections,
                AdminClient(connections, zk_connect) as admin,
            ):
                await admin.create_topic("dup", 1, 1)
                with pytest.raises(ClientError, match=r"^topic 'dup' already exists$"):
                    await admin.create_topic("dup", 3, 2)
                with pytest.raises(
                    ClientError, match=r"^replication factor 4 larger than available brokers: 3$"
                ):
                    await admin.create_topic("big", 1, 4)
                await admin.create_topic("a.b", 1, 1, wait=False)
                with pytest.raises(ClientError, match=r"collides with existing topic 'a\.b'"):
                    await admin.create_topic("a_b", 1, 1)
                with pytest.raises(
                    ClientError,
                    match=r"invalid config for topic 'cfg': Unknown topic config name: "
                    r"min\.insync\.replica \(did you mean 'min\.insync\.replicas'\?\)",
                ):
                    await admin.create_topic("cfg", 1, 1, {"min.insync.replica": "2"})
                with pytest.raises(
                    ClientError, match=r"Invalid value soon for configuration retention\.ms"
                ):
                    await admin.create_topic("cfg", 1, 1, {"retention.ms": "soon"})
                with pytest.raises(ClientError, match=r"^topic name 'bad name' contains ' '"):
                    await admin.create_topic("bad name", 1, 1)
                with pytest.raises(ClientError, match="number of partitions must be at least 1"):
                    await admin.create_topic("zero", 0, 1)
                with pytest.raises(ClientError, match="replication factor must be at least 1"):
                    await admin.create_topic("zero", 1, 0)
                with pytest.raises(ClientError, match=r"^unknown topic 'ghost'$"):
                    await admin.delete_topic("ghost")
                with pytest.raises(ClientError, match=r"^unknown topic 'ghost'$"):
                    await admin.describe_topics(["ghost"])
                with pytest.raises(ClientError, match=r"^unknown topics 'ghost', 'phantom'$"):
                    await admin.describe_topics(["phantom", "ghost", "dup"])
                # Nothing was written for a refused topic.
                for name in ("big", "a_b", "cfg", "zero"):
                    assert zk_client.exists(znodes.topic_path(name)) is None
                assert zk_client.exists(znodes.topic_config_path("cfg")) is None

        run(scenario)


def test_cluster_health_shows_under_replicated_and_offline_partitions(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:

        async def scenario() -> None:
            async with (
                BrokerConnections.from_bootstrap(bootstrap(cluster)) as connections,
                AdminClient(connections, zk_connect) as admin,
            ):
                await admin.create_topic("replicated", 1, 3)
                single = await admin.create_topic("single", 3, 1)
                assert single == {0: [1], 1: [2], 2: [3]}
                await asyncio.to_thread(cluster.brokers[3].kill)

                def unhealthy(health: Any) -> bool:
                    return bool(health.offline) and bool(health.under_replicated)

                health = await eventually(
                    admin.describe_cluster, unhealthy, 30, "broker 3's partitions to suffer"
                )
                assert [b.node_id for b in health.brokers] == [1, 2]
                assert [str(p.tp) for p in health.offline] == ["single-2"]
                assert "replicated-0" in [str(p.tp) for p in health.under_replicated]

        run(scenario)


def test_unreachable_zookeeper_names_the_connect_string() -> None:
    """Nothing listens on port 1: the refusal is reported as such, without first waiting
    out the connection timeout (an hour here) as kazoo's retries would."""

    async def scenario() -> None:
        async with (
            BrokerConnections([("127.0.0.1", 1)]) as connections,
            AdminClient(connections, "127.0.0.1:1", zookeeper_timeout_ms=3_600_000) as admin,
        ):
            with pytest.raises(
                ClientError,
                match=r"^cannot connect to ZooKeeper at 127\.0\.0\.1:1: connection refused",
            ):
                await admin.create_topic("t", 1, 1)
            with pytest.raises(ClientError, match="cannot connect to ZooKeeper"):
                await admin.delete_topic("t")

    run(scenario)


def test_a_zookeeper_that_does_not_answer_times_out_naming_the_timeout() -> None:
    """A host that accepts nothing and refuses nothing (a listening socket that is never
    served): the connection timeout applies, as before."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(0)
        port = silent.getsockname()[1]

        async def scenario() -> None:
            async with (
                BrokerConnections([("127.0.0.1", 1)]) as connections,
                AdminClient(connections, f"127.0.0.1:{port}", zookeeper_timeout_ms=1000) as admin,
            ):
                with pytest.raises(ClientError, match=r"within 1000 ms"):
                    await admin.create_topic("t", 1, 1)

        run(scenario)


def test_a_missing_chroot_is_no_cluster(zookeeper: ZooKeeperServer) -> None:
    async def scenario() -> None:
        connect = f"{zookeeper.connect_string}/no-such-cluster"
        async with (
            BrokerConnections([("127.0.0.1", 1)]) as connections,
            AdminClient(connections, connect) as admin,
        ):
            with pytest.raises(ClientError, match="/no-such-cluster does not exist"):
                await admin.create_topic("t", 1, 1)

    run(scenario)


def test_validation_happens_before_any_connection() -> None:
    # Nothing listens on these addresses: the errors come from the arguments alone.
    async def scenario() -> None:
        async with (
            BrokerConnections([("127.0.0.1", 1)]) as connections,
            AdminClient(connections, "127.0.0.1:1", zookeeper_timeout_ms=100) as admin,
        ):
            with pytest.raises(ClientError, match=r"topic name is 250 characters long"):
                await admin.create_topic("x" * 250, 1, 1)
            with pytest.raises(ClientError, match=r"^topic name cannot be '\.\.'$"):
                await admin.delete_topic("..")
            with pytest.raises(ClientError, match=r"Unknown topic config name: cleanup\.polic"):
                await admin.create_topic("t", 1, 1, {"cleanup.polic": "delete"})

    run(scenario)
