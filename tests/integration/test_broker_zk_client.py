"""BrokerZkClient against a real ZooKeeper: registration and broker epoch, a broker id held by
another session, conditional partition-state updates, producer id block reservations, ISR
change notifications, reads, and a real session expiry followed by re-registration.

Each test runs its coroutine on uvloop (the broker's loop) in a chroot of its own
(``zk_client.chroot``), and observes ZooKeeper through the fixture's plain kazoo client.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
import uvloop
from kazoo.client import KazooClient

from broker.zk_client import (
    LEADER_NONE,
    BrokerIdInUseError,
    BrokerZkClient,
    PartitionState,
    PartitionStateData,
    ZkConnectionError,
    ZkState,
)
from deploy.zookeeper import ZooKeeperServer
from proto.topic_partition import TopicPartition
from proto.zk.znodes import (
    ProducerIdBlock,
    encode_controller,
    encode_topic_assignment,
    encode_topic_config,
)
from tests.helpers import close_session_from_another_client

zk_logger = logging.getLogger("broker.zk_client")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

T = TypeVar("T")
TP = TopicPartition("orders", 0)
WAIT_S = 20.0


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a test coroutine on uvloop, as the broker does (pytest-asyncio is not used)."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


@pytest.fixture
def connect(zookeeper: ZooKeeperServer, zk_client: KazooClient) -> str:
    """The connect string with this test's chroot, as a broker's ``zookeeper.connect``."""
    chroot: str = zk_client.chroot
    return zookeeper.connect_string + chroot


class _EventSeen(logging.Handler):
    """Sets an asyncio.Event when BrokerZkClient logs the structured event ``name`` (its
    records carry ``event``, see proto.process.event_log); they are logged on the loop thread."""

    def __init__(self, name: str) -> None:
        super().__init__(logging.DEBUG)
        self.name_ = name
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "event", None) == self.name_:
            self.seen.set()


def client(connect: str, broker_id: int = 1, **kwargs: Any) -> BrokerZkClient:
    return BrokerZkClient(connect, broker_id=broker_id, **kwargs)


# -- registration ----------------------------------------------------------------------------


def test_registration_json_and_broker_epoch_is_the_czxid(
    connect: str, zk_client: KazooClient
) -> None:
    async def scenario() -> None:
        async with client(connect) as zk:
            assert zk.connected
            assert zk.session_id is not None
            epoch = await zk.register_broker(1, "127.0.0.1", 9091)

            data, stat = await asyncio.to_thread(zk_client.get, "/brokers/ids/1")
            registration = json.loads(data)
            assert set(registration) == {"version", "host", "port", "timestamp", "endpoints"}
            assert registration["version"] == 1
            assert registration["host"] == "127.0.0.1"
            assert registration["port"] == 9091
            assert re.fullmatch(r"[0-9]{13}", registration["timestamp"])
            assert registration["endpoints"] == ["GRPC://127.0.0.1:9091"]
            assert epoch == stat.czxid  # KIP-380: the broker epoch
            assert stat.ephemeralOwner == zk.session_id

            # Registering again in the same session (a retry) keeps the node and its epoch.
            assert await zk.register_broker(1, "127.0.0.1", 9091) == epoch
            assert await zk.get_live_brokers() == {1: ("127.0.0.1", 9091)}
            # A new endpoint in the same session updates the node; the epoch stays.
            assert await zk.register_broker(1, "127.0.0.1", 9099) == epoch
            assert await zk.get_live_brokers() == {1: ("127.0.0.1", 9099)}

            await zk.deregister_broker(1)
            assert await asyncio.to_thread(zk_client.exists, "/brokers/ids/1") is None
            assert await zk.get_live_brokers() == {}
            await zk.deregister_broker(1)  # nothing left: no error

    run(scenario())


def test_registration_with_a_kafka_listener_names_both_endpoints_and_their_protocols(
    connect: str, zk_client: KazooClient
) -> None:
    async def scenario() -> None:
        async with client(connect) as zk:
            epoch = await zk.register_broker(
                4, "127.0.0.1", 9094, kafka_port=19094, grpc_security_protocol="SSL"
            )
            data, _ = await asyncio.to_thread(zk_client.get, "/brokers/ids/4")
            registration = json.loads(data)
            assert registration["version"] == 4
            assert (registration["host"], registration["port"]) == ("127.0.0.1", 9094)
            assert registration["endpoints"] == ["GRPC://127.0.0.1:9094", "KAFKA://127.0.0.1:19094"]
            assert registration["listener_security_protocol_map"] == {
                "GRPC": "SSL",
                "KAFKA": "PLAINTEXT",
            }
            # Registering again in the same session with other endpoints rewrites the node
            # (here a plain version 1 one again); the epoch stays.
            assert await zk.register_broker(4, "127.0.0.1", 9094) == epoch
            data, _ = await asyncio.to_thread(zk_client.get, "/brokers/ids/4")
            assert json.loads(data)["endpoints"] == ["GRPC://127.0.0.1:9094"]
            assert "listener_security_protocol_map" not in json.loads(data)

    run(scenario())


def test_a_missing_chroot_is_created(connect: str, zk_client: KazooClient) -> None:
    async def scenario() -> None:
        async with client(connect + "/nested/cluster") as zk:
            await zk.register_broker(2, "localhost", 9092)
        assert zk_client.exists("/nested/cluster") is not None
        # Closing ended the session: the ephemeral went with it.
        assert zk_client.exists("/nested/cluster/brokers/ids/2") is None
        assert zk_client.exists("/nested/cluster/brokers/ids") is not None

    run(scenario())


def test_broker_id_held_by_another_live_session_is_refused(
    connect: str, zk_client: KazooClient
) -> None:

    async def scenario() -> None:
        async with client(connect) as first, client(connect) as second:
            epoch = await first.register_broker(1, "10.0.0.1", 9091)
            with pytest.raises(BrokerIdInUseError, match=r"broker id 1 is already registered") as e:
                await second.register_broker(1, "10.0.0.2", 9091)
            assert e.value.owner_session_id == first.session_id
            assert "10.0.0.1:9091" in str(e.value)
            _, stat = await asyncio.to_thread(zk_client.get, "/brokers/ids/1")
            assert (stat.czxid, stat.ephemeralOwner) == (epoch, first.session_id)

            # second also may not delete first's registration.
            await second.deregister_broker(1)
            assert await asyncio.to_thread(zk_client.exists, "/brokers/ids/1") is not None

            # With a wait, second takes over once first's session ends.
            waiting_logged = _EventSeen("broker_id_in_use_waiting")
            zk_logger.addHandler(waiting_logged)
            try:
                waiting = asyncio.create_task(
                    second.register_broker(1, "10.0.0.2", 9091, wait_for_stale_s=WAIT_S)
                )
                await asyncio.wait_for(waiting_logged.seen.wait(), WAIT_S)  # it is waiting
                await first.close()
                new_epoch = await waiting
            finally:
                zk_logger.removeHandler(waiting_logged)
            _, stat = await asyncio.to_thread(zk_client.get, "/brokers/ids/1")
            assert (stat.czxid, stat.ephemeralOwner) == (new_epoch, second.session_id)
            assert new_epoch > epoch

    run(scenario())


# -- partition state -------------------------------------------------------------------------


def test_conditional_partition_state_update(connect: str, zk_client: KazooClient) -> None:
    path = "/brokers/topics/orders/partitions/0/state"
    initial = PartitionStateData(leader=1, leader_epoch=3, isr=(1, 2, 3), controller_epoch=2)
    shrunk = PartitionStateData(leader=1, leader_epoch=3, isr=(1, 2), controller_epoch=2)
    rival = PartitionStateData(leader=2, leader_epoch=4, isr=(2, 3), controller_epoch=2)

    async def scenario() -> None:
        async with client(connect) as zk:
            assert await zk.read_partition_state(TP) is None
            assert await zk.create_partition_state(TP, initial) == 0
            assert await zk.create_partition_state(TP, rival) is None  # exists: untouched
            assert await zk.read_partition_state(TP) == PartitionState.from_data(initial, 0)

            # The right version: written, version bumped, Kafka's exact JSON.
            assert await zk.update_partition_state_conditionally(TP, shrunk, 0) == 1
            data, stat = await asyncio.to_thread(zk_client.get, path)
            assert data == (
                b'{"controller_epoch":2,"leader":1,"version":1,"leader_epoch":3,"isr":[1,2]}'
            )
            assert stat.version == 1

            # A stale version: refused, nothing overwritten.
            assert await zk.update_partition_state_conditionally(TP, rival, 0) is None
            assert await zk.read_partition_state(TP) == PartitionState.from_data(shrunk, 1)

            # The same content at a stale version is our own earlier write (lost reply).
            assert await zk.update_partition_state_conditionally(TP, shrunk, 0) == 1
            # A PartitionState is accepted too; its zk_version is ignored.
            as_state = PartitionState.from_data(initial, zk_version=99)
            assert await zk.update_partition_state_conditionally(TP, as_state, 1) == 2

            missing = TopicPartition("orders", 7)
            assert await zk.update_partition_state_conditionally(missing, shrunk, 0) is None
            offline = PartitionStateData(LEADER_NONE, 4, (2,), 3)
            assert await zk.create_partition_state(missing, offline) == 0
            state = await zk.read_partition_state(missing)
            assert state is not None
            assert state.leader == LEADER_NONE

    run(scenario())


def test_conditional_producer_id_block_reservation(connect: str, zk_client: KazooClient) -> None:
    first = ProducerIdBlock(broker=1, block_start=0, block_end=999)
    rival = ProducerIdBlock(broker=2, block_start=0, block_end=999)
    second = ProducerIdBlock(broker=2, block_start=1000, block_end=1999)

    async def scenario() -> None:
        async with client(connect) as one, client(connect, broker_id=2) as two:
            assert await one.get_producer_id_block() == (None, None)
            assert await one.set_producer_id_block_conditionally(first, None)  # created
            assert not await two.set_producer_id_block_conditionally(rival, None)  # exists
            assert await two.get_producer_id_block() == (first, 0)
            assert await two.set_producer_id_block_conditionally(second, 0)
            # A stale version loses; the same block at a stale version is our own earlier
            # write whose reply was lost, and wins.
            assert not await one.set_producer_id_block_conditionally(first, 0)
            assert await two.set_producer_id_block_conditionally(second, 0)
            assert await one.get_producer_id_block() == (second, 1)

    run(scenario())
    data, _ = zk_client.get("/latest_producer_id_block")
    assert data == b'{"version":1,"broker":2,"block_start":"1000","block_end":"1999"}'


def test_an_empty_producer_id_block_znode_reads_as_no_block(
    connect: str, zk_client: KazooClient
) -> None:
    zk_client.create("/latest_producer_id_block", b"")  # as Kafka creates it at start-up

    async def scenario() -> None:
        async with client(connect) as zk:
            assert await zk.get_producer_id_block() == (None, 0)

    run(scenario())


def test_isr_change_notification_node(connect: str, zk_client: KazooClient) -> None:
    async def scenario() -> list[str]:
        async with client(connect) as zk:
            first = await zk.create_isr_change_notification([TP, TopicPartition("audit", 2)])
            second = await zk.create_isr_change_notification([TP])
            with pytest.raises(ValueError, match="at least one partition"):
                await zk.create_isr_change_notification([])
            return [first, second]

    first, second = run(scenario())
    assert re.fullmatch(r"/isr_change_notification/isr_change_[0-9]{10}", first)
    assert int(second[-10:]) > int(first[-10:])
    data, stat = zk_client.get(first)
    assert data == (
        b'{"version":1,"partitions":[{"topic":"orders","partition":0},'
        b'{"topic":"audit","partition":2}]}'
    )
    assert stat.ephemeralOwner == 0  # persistent: it outlives the session that wrote it
    assert sorted(zk_client.get_children("/isr_change_notification")) == [
        first.rsplit("/", 1)[1],
        second.rsplit("/", 1)[1],
    ]


# -- reads -----------------------------------------------------------------------------------


def test_reads_topic_config_assignment_brokers_and_controller(
    connect: str, zk_client: KazooClient
) -> None:
    async def scenario() -> None:
        async with client(connect) as zk:
            assert await zk.get_topic_config("orders") == {}
            assert await zk.get_topic_assignment("orders") is None
            assert await zk.get_live_brokers() == {}
            assert await zk.get_controller_id() is None

            await asyncio.to_thread(
                zk_client.create,
                "/config/topics/orders",
                encode_topic_config({"min.insync.replicas": "2"}),
                makepath=True,
            )
            await asyncio.to_thread(
                zk_client.create,
                "/brokers/topics/orders",
                encode_topic_assignment({0: [1, 2], 1: [2, 1]}),
                makepath=True,
            )
            await asyncio.to_thread(
                zk_client.create, "/controller", encode_controller(2, 1), ephemeral=True
            )
            await asyncio.to_thread(zk_client.ensure_path, "/brokers/ids/not-an-id")
            await asyncio.to_thread(zk_client.create, "/brokers/ids/9", b"{garbage", ephemeral=True)
            await zk.register_broker(3, "10.0.0.3", 9093)

            assert await zk.get_topic_config("orders") == {"min.insync.replicas": "2"}
            assert await zk.get_topic_assignment("orders") == {0: [1, 2], 1: [2, 1]}
            assert await zk.get_controller_id() == 2
            # The malformed registration of broker 9 is left out, not fatal.
            assert await zk.get_live_brokers() == {3: ("10.0.0.3", 9093)}

    run(scenario())


# -- sessions --------------------------------------------------------------------------------


def test_real_session_expiry_fires_lost_then_established_and_reregistration_restores_the_node(
    connect: str, zk_client: KazooClient
) -> None:
    async def scenario() -> None:
        async with client(connect, session_timeout_ms=4000) as zk:
            lost = asyncio.Event()
            established = asyncio.Event()
            lost_calls: list[int | None] = []
            states: list[ZkState] = []
            epochs: list[int] = []

            def on_lost() -> None:
                lost_calls.append(zk.session_id)
                lost.set()

            async def reregister() -> None:
                epochs.append(await zk.register_broker(1, "127.0.0.1", 9091))
                established.set()

            zk.on_session_lost(on_lost)
            zk.on_session_established(reregister)
            zk.add_state_listener(states.append)
            first_epoch = await zk.register_broker(1, "127.0.0.1", 9091)
            old_session = zk.session_id
            assert old_session is not None

            # The owner may win the session back before the thief closes it (it reconnects
            # by itself): then try again, within the deadline.
            deadline = asyncio.get_running_loop().time() + WAIT_S
            while not lost.is_set():
                assert asyncio.get_running_loop().time() < deadline, "the session never expired"
                credentials = zk._client.client_id  # password: only a thief needs it
                if credentials is not None and credentials[0] == old_session:
                    await asyncio.to_thread(close_session_from_another_client, connect, credentials)
                try:
                    await asyncio.wait_for(lost.wait(), 3.0)
                except TimeoutError:
                    continue

            assert lost_calls == [None]  # the session was already gone when it ran
            await asyncio.wait_for(established.wait(), WAIT_S)
            assert zk.session_id is not None
            assert zk.session_id != old_session
            assert zk.connected
            assert states.index(ZkState.LOST) < len(states) - 1
            assert states[-1] is ZkState.CONNECTED
            assert len(lost_calls) == 1

            # The old ephemeral died with its session; the new one is ours, a new epoch.
            data, stat = await asyncio.to_thread(zk_client.get, "/brokers/ids/1")
            assert stat.ephemeralOwner == zk.session_id
            assert epochs == [stat.czxid]
            assert stat.czxid > first_epoch
            assert json.loads(data)["endpoints"] == ["GRPC://127.0.0.1:9091"]

    run(scenario())


def test_close_fires_no_session_callbacks_and_later_calls_fail(connect: str) -> None:
    async def scenario() -> None:
        zk = client(connect)
        fired: list[str] = []
        zk.on_session_lost(lambda: fired.append("lost"))
        zk.on_session_established(lambda: fired.append("established"))
        await zk.start()
        await zk.register_broker(1, "127.0.0.1", 9091)
        await zk.close()
        await zk.close()  # idempotent
        assert not zk.connected
        assert zk.session_id is None
        with pytest.raises(ZkConnectionError, match="closed"):
            await zk.get_controller_id()
        await asyncio.sleep(0.1)  # any state change kazoo reported has been delivered
        assert fired == []

    run(scenario())


def test_start_fails_clearly_when_zookeeper_is_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once the socket is closed

    async def scenario() -> None:
        zk = client(f"127.0.0.1:{port}", session_timeout_ms=2000, connection_timeout_ms=500)
        with pytest.raises(ZkConnectionError, match=r"within 500 ms"):
            await zk.start()
        assert not zk.connected

    run(scenario())
