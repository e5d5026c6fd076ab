"""ReplicaManager's produce path over real logs and partitions (no ZooKeeper, no gRPC)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest

from broker.log.log import Log
from broker.log.log_manager import LogManager
from broker.metadata_cache import MetadataCache, PartitionInfo
from broker.replication.fetch_session import FetchSpec
from broker.replication.partition import LeadershipState, Partition
from broker.replication.replica_manager import ReplicaManager, now_ms
from broker.zk_client import BrokerZkClient, ZkSessionExpiredError
from proto.config.broker_config import BrokerConfig
from proto.config.log_config import LogConfig
from proto.records.record_batch import Record, decode_batch, encode_batch
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.wire.minibroker_pb2 import ErrorCode
from proto.zk.znode_reads import ReadBatch, RegisteredBroker
from proto.zk.znodes import BrokerRegistration, PartitionState, ProducerIdBlock
from tests.poison_batches import POISONS, Poison

GOOD = TopicPartition("mixed", 0)
POISONED = TopicPartition("mixed", 1)


class _LeasedZk:
    """The ZooKeeper calls a produce makes: this broker's session is fine, and producer ids
    up to 999 were handed out."""

    async def ensure_session_lease(self) -> bool:
        return True

    async def sync(self) -> None:
        return None

    async def get_producer_id_block(self) -> tuple[ProducerIdBlock, int]:
        return ProducerIdBlock(1, 0, 999), 0


def empty_replica_manager(
    tmp_path: Path, executor: ThreadPoolExecutor, clock_ms: Callable[[], int] = now_ms
) -> ReplicaManager:
    """Broker 1's replica manager over ``tmp_path``, hosting nothing yet."""
    config = BrokerConfig(broker_id=1, zookeeper_connect="unused:2181", log_dir=tmp_path)
    return ReplicaManager(
        config,
        LogManager(tmp_path, LogConfig(), 1),
        cast(BrokerZkClient, _LeasedZk()),
        MetadataCache(),
        executor,
        clock_ms=clock_ms,
    )


def replica_manager(tmp_path: Path, executor: ThreadPoolExecutor) -> ReplicaManager:
    manager = empty_replica_manager(tmp_path, executor)
    for tp in (GOOD, POISONED):
        partition = Partition(tp, 1, Log.open(tmp_path / tp.dir_name, LogConfig()), clock_ms=int)
        assert partition.make_leader(LeadershipState(1, 0, (1,), (1,), 0, controller_epoch=1))
        manager.partitions[tp] = partition
    return manager


@pytest.mark.parametrize("poison", POISONS, ids=[p.name for p in POISONS])
def test_produce_mixing_a_good_and_a_poison_partition_writes_only_the_good_one(
    tmp_path: Path, poison: Poison
) -> None:
    good = encode_batch([Record(b"k", b"kept", 1), Record(None, b"also kept", 2)])
    with ThreadPoolExecutor(1) as executor:
        manager = replica_manager(tmp_path, executor)
        results = asyncio.run(manager.append_records(1, 1000, {GOOD: good, POISONED: poison.batch}))
        logs = {tp: manager.partitions[tp].log for tp in (GOOD, POISONED)}
        assert results[GOOD].error_code == ErrorCode.NONE
        assert results[GOOD].base_offset == 0
        assert results[POISONED].error_code == poison.code
        assert poison.fragment in results[POISONED].error_message.lower()
        assert results[POISONED].base_offset == -1
        written = logs[GOOD].read(0, 1 << 20).records
        assert [r.value for r in decode_batch(written).records] == [b"kept", b"also kept"]
        assert (logs[POISONED].log_end_offset, logs[POISONED].size_in_bytes) == (0, 0)
        for log in logs.values():
            log.close()


# -- where fetches read ------------------------------------------------------------------------


class _CountingExecutor(ThreadPoolExecutor):
    def __init__(self) -> None:
        super().__init__(1)
        self.submitted = 0

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


def test_the_recent_tail_is_read_on_the_loop_and_older_data_in_the_executor(
    tmp_path: Path,
) -> None:
    """reads of what the partition appended lately (page cache, a copy of at
    most LOOP_READ_MAX_BYTES) skip the executor hop; data older than the partition's append
    marks, e.g. written before it was opened, may be on disk and is read in the executor."""
    batch = encode_batch([Record(None, b"v%d" % i, 1) for i in range(10)])

    async def fetch(manager: ReplicaManager, tp: TopicPartition) -> list[bytes | None]:
        results = await manager.fetch_messages(-1, 0, 1, 1 << 20, {tp: FetchSpec(0, 1 << 20)})
        assert results[tp].error_code == ErrorCode.NONE
        return [r.value for r in decode_batch(results[tp].records).records]

    with _CountingExecutor() as executor:
        manager = replica_manager(tmp_path, executor)
        asyncio.run(manager.append_records(1, 1000, {GOOD: batch}))
        assert len(asyncio.run(fetch(manager, GOOD))) == 10
        assert executor.submitted == 0
        # the same log reopened: its data predates the new partition's append marks
        log = manager.partitions[GOOD].log
        reopened = Partition(GOOD, 1, log, clock_ms=int, high_watermark=10)
        assert reopened.make_leader(LeadershipState(1, 1, (1,), (1,), 0, controller_epoch=1))
        manager.partitions[GOOD] = reopened
        assert len(asyncio.run(fetch(manager, GOOD))) == 10
        assert executor.submitted == 1
        for partition in manager.partitions.values():
            partition.log.close()


# -- LeaderAndIsr that fails part way ---------------------------------------------------------

FOLLOWED = TopicPartition("followed", 0)
UNREADABLE = TopicPartition("unreadable", 0)


class _ControlZk:
    """What a LeaderAndIsr reads from ZooKeeper: the controller epoch and the state znodes
    (as the request says), and topic configs, whose read fails for ``unreadable`` as it does
    when the broker's session expires mid-request."""

    def __init__(
        self,
        states: dict[TopicPartition, PartitionState],
        registrations: dict[int, BrokerRegistration] | None = None,
        assignments: dict[str, dict[int, list[int]]] | None = None,
        controller: int | None = 2,
    ) -> None:
        self.states = states
        self.registrations = registrations or {}
        self.assignments = assignments or {}
        self.controller = controller

    async def get_topic_assignment(self, topic: str) -> dict[int, list[int]] | None:
        return self.assignments.get(topic)

    async def get_controller_id(self) -> int | None:
        return self.controller

    async def read_registered_brokers(self) -> ReadBatch[int, RegisteredBroker]:
        return ReadBatch({b: RegisteredBroker(r, 100 + b) for b, r in self.registrations.items()})

    async def is_topic_marked_for_deletion(self, topic: str) -> bool:
        return False

    async def sync(self) -> None:
        return None

    async def get_controller_epoch(self) -> int:
        return 1

    async def get_partition_states(
        self, tps: list[TopicPartition]
    ) -> dict[TopicPartition, PartitionState | None]:
        return {tp: self.states.get(tp) for tp in tps}

    async def get_topic_config(self, topic: str) -> dict[str, str]:
        if topic == UNREADABLE.topic:
            raise ZkSessionExpiredError("get /config/topics/unreadable: the session expired")
        return {}


@contextlib.asynccontextmanager
async def _controlled_manager(
    tmp_path: Path, zk: _ControlZk, config: BrokerConfig
) -> AsyncIterator[ReplicaManager]:
    """A ReplicaManager (broker 1, epoch 5) over real logs and the stand-in ZooKeeper reads
    of a LeaderAndIsr, shut down with its logs afterwards."""
    with ThreadPoolExecutor(2) as executor:
        log_manager = LogManager(tmp_path, LogConfig(), 1)
        log_manager.startup()
        manager = ReplicaManager(
            config, log_manager, cast(BrokerZkClient, zk), MetadataCache(), executor
        )
        manager.broker_epoch = 5
        try:
            yield manager
        finally:
            await manager.shutdown()
            await asyncio.get_running_loop().run_in_executor(executor, log_manager.shutdown)


def _leader_and_isr(*tps: TopicPartition) -> pb.LeaderAndIsrRequest:
    request = pb.LeaderAndIsrRequest(controller_id=2, controller_epoch=1, broker_epoch=5)
    request.live_leaders.add(node_id=2, host="127.0.0.1", port=1)
    for tp in tps:
        request.partition_states.add(
            topic_name=tp.topic, partition_index=tp.partition, controller_epoch=1, leader=2,
            leader_epoch=3, isr=[2, 1], zk_version=1, replicas=[2, 1],
        )  # fmt: skip
    return request


def test_a_follower_made_before_a_failing_partition_still_fetches_and_a_repeat_restarts_it(
    tmp_path: Path,
) -> None:
    """Found by chaos (zk-expire right after a restart): the session expired while a
    LeaderAndIsr created its partitions; the ones already made followers never got a
    fetcher, and the controller's repeat at the same epoch was taken as a no-op."""
    state = PartitionState(leader=2, leader_epoch=3, isr=(2, 1), controller_epoch=1, zk_version=1)
    zk = _ControlZk(
        {FOLLOWED: state, UNREADABLE: state}, {2: BrokerRegistration("127.0.0.1", 1, 0)}
    )
    config = BrokerConfig(
        broker_id=1,
        zookeeper_connect="unused:2181",
        log_dir=tmp_path,
        request_timeout_ms=500,
        replica_fetch_backoff_ms=50,
    )

    async def scenario() -> None:
        async with _controlled_manager(tmp_path, zk, config) as manager:
            answer = await manager.become_leader_or_follower(_leader_and_isr(FOLLOWED, UNREADABLE))
            codes = {e.topic_name: e.error_code for e in answer.partition_errors}
            assert codes == {
                "followed": ErrorCode.NONE,
                "unreadable": ErrorCode.REQUEST_TIMED_OUT,
            }
            assert manager._is_fetching(FOLLOWED)
            # A fetcher that stopped on an error: the controller's repeat starts it again.
            for fetcher in manager.fetchers.values():
                fetcher.remove_partitions([FOLLOWED])
            assert not manager._is_fetching(FOLLOWED)
            await manager.become_leader_or_follower(_leader_and_isr(FOLLOWED))
            assert manager._is_fetching(FOLLOWED)

    asyncio.run(scenario())


def test_a_leader_and_isr_shows_no_new_partition_in_metadata_before_the_update_metadata(
    tmp_path: Path,
) -> None:
    """Found flaky under load: a LeaderAndIsr names only the partitions a broker replicates,
    so a Metadata answered between it and the UpdateMetadata that follows showed partition 1
    of a new two-partition topic alone, and librdkafka took the topic for one partition
    (failing a record for partition 1 with _UNKNOWN_PARTITION). A new partition waits for
    the UpdateMetadata, which names them all; a known one takes its new leader at once."""
    other = TopicPartition(FOLLOWED.topic, 1)
    state = PartitionState(leader=2, leader_epoch=3, isr=(2, 1), controller_epoch=1, zk_version=1)
    zk = _ControlZk(
        {FOLLOWED: state},
        {2: BrokerRegistration("127.0.0.1", 1, 0)},
        {FOLLOWED.topic: {0: [2, 1], 1: [2, 1]}},
    )
    config = BrokerConfig(broker_id=1, zookeeper_connect="unused:2181", log_dir=tmp_path)

    async def scenario() -> None:
        with ThreadPoolExecutor(2) as executor:
            log_manager = LogManager(tmp_path, LogConfig(), 1)
            log_manager.startup()
            cache = MetadataCache()
            manager = ReplicaManager(config, log_manager, cast(BrokerZkClient, zk), cache, executor)
            manager.broker_epoch = 5
            try:
                answer = await manager.become_leader_or_follower(_leader_and_isr(FOLLOWED))
                assert [e.error_code for e in answer.partition_errors] == [ErrorCode.NONE]
                assert FOLLOWED in manager.partitions
                assert cache.partitions_of(FOLLOWED.topic) == {}

                zk.registrations[1] = BrokerRegistration("127.0.0.1", 2, 0)
                update = _update_metadata(
                    pb.BrokerEndpoint(node_id=1, host="127.0.0.1", port=2),
                    pb.BrokerEndpoint(node_id=2, host="127.0.0.1", port=1),
                )
                zk.states[other] = replace(state, leader=1, isr=(1, 2))
                for tp, leader in ((FOLLOWED, 2), (other, 1)):
                    update.partition_states.add(
                        topic_name=tp.topic, partition_index=tp.partition, controller_epoch=1,
                        leader=leader, leader_epoch=3, isr=[leader], replicas=[2, 1],
                    )  # fmt: skip
                assert (await manager.update_metadata(update)).error_code == ErrorCode.NONE
                assert sorted(cache.partitions_of(FOLLOWED.topic)) == [0, 1]

                # A known partition's new leader is shown before the UpdateMetadata.
                zk.states[FOLLOWED] = replace(state, leader=1, leader_epoch=4, isr=(1,))
                moved = _leader_and_isr()
                moved.partition_states.add(
                    topic_name=FOLLOWED.topic, partition_index=0, controller_epoch=1, leader=1,
                    leader_epoch=4, isr=[1], zk_version=1, replicas=[2, 1],
                )  # fmt: skip
                answer = await manager.become_leader_or_follower(moved)
                assert [e.error_code for e in answer.partition_errors] == [ErrorCode.NONE]
                shown = cache.partition(FOLLOWED)
                assert shown is not None
                assert (shown.leader, shown.leader_epoch) == (1, 4)
            finally:
                await manager.shutdown()
                await asyncio.get_running_loop().run_in_executor(executor, log_manager.shutdown)

    asyncio.run(scenario())


def _update_metadata(*live_brokers: pb.BrokerEndpoint) -> pb.UpdateMetadataRequest:
    return pb.UpdateMetadataRequest(
        controller_id=2, controller_epoch=1, broker_epoch=5, live_brokers=live_brokers
    )


@pytest.mark.parametrize(
    ("kafka_host", "kafka_port"), [("", 19092), ("10.0.0.2", 0), ("10.0.0.2", 70000)]
)
def test_update_metadata_carries_kafka_endpoints_and_refuses_half_of_one(
    tmp_path: Path, kafka_host: str, kafka_port: int
) -> None:
    """kafka_port 0 with no kafka_host is a broker without a Kafka listener; half an
    address, or a port no listener has, is a malformed request as a whole."""
    config = BrokerConfig(broker_id=1, zookeeper_connect="unused:2181", log_dir=tmp_path)
    cache = MetadataCache()

    async def scenario() -> None:
        with ThreadPoolExecutor(1) as executor:
            registered = {
                1: BrokerRegistration("10.0.0.1", 9091, 0, kafka_endpoint=("10.0.0.1", 19091)),
                2: BrokerRegistration("10.0.0.2", 9092, 0),
            }
            zk = cast(BrokerZkClient, _ControlZk({}, registered))
            manager = ReplicaManager(
                config, LogManager(tmp_path, LogConfig(), 1), zk, cache, executor
            )
            manager.broker_epoch = 5
            one = pb.BrokerEndpoint(
                node_id=1, host="10.0.0.1", port=9091, kafka_host="10.0.0.1", kafka_port=19091
            )
            two = pb.BrokerEndpoint(node_id=2, host="10.0.0.2", port=9092)
            answer = await manager.update_metadata(_update_metadata(one, two))
            assert answer.error_code == ErrorCode.NONE
            assert [b.kafka_endpoint for b in cache.brokers()] == [("10.0.0.1", 19091), None]

            bad = pb.BrokerEndpoint(
                node_id=2, host="10.0.0.2", port=9092, kafka_host=kafka_host, kafka_port=kafka_port
            )
            answer = await manager.update_metadata(_update_metadata(one, bad))
            assert answer.error_code == ErrorCode.INVALID_REQUEST
            assert [b.kafka_endpoint for b in cache.brokers()] == [("10.0.0.1", 19091), None]

    asyncio.run(scenario())


def test_update_metadata_keeps_only_the_leaders_and_endpoints_zookeeper_agrees_with(
    tmp_path: Path,
) -> None:
    """A forged broker endpoint takes the registration's, an unregistered broker and a leader
    the state znode does not name are dropped, a late leader gives way to ZooKeeper's."""
    config = BrokerConfig(broker_id=1, zookeeper_connect="unused:2181", log_dir=tmp_path)
    cache = MetadataCache()
    forged_tp, late_tp, good_tp, unknown_tp = (TopicPartition("t", p) for p in range(4))
    states = {
        tp: PartitionState(leader=2, leader_epoch=3, isr=(2, 1), controller_epoch=1, zk_version=1)
        for tp in (forged_tp, late_tp, good_tp)
    }
    registered = {1: BrokerRegistration("10.0.0.1", 9091, 0)}

    async def scenario() -> None:
        with ThreadPoolExecutor(1) as executor:
            assignment = {p: [2, 1] for p in range(4)}
            zk = cast(BrokerZkClient, _ControlZk(states, registered, {"t": assignment}))
            manager = ReplicaManager(
                config, LogManager(tmp_path, LogConfig(), 1), zk, cache, executor
            )
            manager.broker_epoch = 5
            request = _update_metadata(
                pb.BrokerEndpoint(node_id=1, host="evil.example", port=1),
                pb.BrokerEndpoint(node_id=9, host="evil.example", port=1),
            )
            for tp, leader, epoch in (
                (forged_tp, 9, 3),
                (late_tp, 9, 2),
                (good_tp, 2, 3),
                (unknown_tp, 2, 0),
            ):
                request.partition_states.add(
                    topic_name=tp.topic, partition_index=tp.partition, controller_epoch=1,
                    leader=leader, leader_epoch=epoch, isr=[leader], replicas=[2, 1],
                )  # fmt: skip
            answer = await manager.update_metadata(request)
            assert answer.error_code == ErrorCode.NONE
            assert [(b.broker_id, b.host, b.port) for b in cache.brokers()] == [
                (1, "10.0.0.1", 9091)
            ]
            assert cache.partition(forged_tp) is None
            assert cache.partition(unknown_tp) is None
            late = cache.partition(late_tp)
            assert late is not None
            assert (late.leader, late.leader_epoch, late.isr) == (2, 3, (2, 1))
            good = cache.partition(good_tp)
            assert good is not None
            assert (good.leader, good.leader_epoch) == (2, 3)

    asyncio.run(scenario())


# -- leaderships handed over by a controlled shutdown ------------------------------------------


def test_handing_over_leaderships_ends_waiting_writes_and_refuses_new_ones_not_leader(
    tmp_path: Path,
) -> None:
    """Once its controlled shutdown moved its leaderships, a broker that still believes it
    leads answers the acks=all write waiting for a follower (which now follows the new
    leader) at once with a retriable NOT_LEADER_OR_FOLLOWER, refuses later ones the same
    way."""
    batch = encode_batch([Record(None, b"v", 1)])

    async def scenario(manager: ReplicaManager) -> None:
        partition = manager.partitions[GOOD]
        assert partition.make_leader(LeadershipState(1, 1, (1, 2), (1, 2), 0, controller_epoch=1))
        waiting = asyncio.create_task(manager.append_records(-1, 60_000, {GOOD: batch}))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # follower 2 has not fetched it
        await manager.leaderships_handed_over()
        async with asyncio.timeout(10):
            ended = await waiting
        assert ended[GOOD].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        refused = await manager.append_records(-1, 60_000, {GOOD: batch})
        assert refused[GOOD].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert "shutting down" in refused[GOOD].error_message

    with ThreadPoolExecutor(1) as executor:
        manager = replica_manager(tmp_path, executor)
        asyncio.run(scenario(manager))
        for partition in manager.partitions.values():
            partition.log.close()


def test_an_assigned_replica_this_broker_does_not_host_is_reported_offline(
    tmp_path: Path,
) -> None:
    """Metadata and the offline-replica gauge name a replica the controller assigns here but
    this broker does not host (it serves nothing), instead of showing it online."""
    from broker.metrics_server import BrokerStateCollector
    from controller.kafka_controller import KafkaController

    unhosted = TopicPartition("mixed", 2)
    elsewhere = TopicPartition("mixed", 3)
    with ThreadPoolExecutor(1) as executor:
        manager = replica_manager(tmp_path, executor)
        cache = manager.metadata_cache
        for tp, replicas in ((GOOD, (1, 2)), (unhosted, (2, 1)), (elsewhere, (2, 3))):
            cache.add_partition(tp, PartitionInfo(2, 0, replicas, replicas))
        infos = cache.partitions_of("mixed")
        assert infos[GOOD.partition].offline_replicas == ()
        assert infos[unhosted.partition].offline_replicas == (1,)
        assert infos[elsewhere.partition].offline_replicas == ()
        assert cache.unhosted() == [unhosted]

        class _Idle:
            is_active = False
            context = None

        collector = BrokerStateCollector(manager, cast(KafkaController, _Idle()))
        [gauge] = [
            m
            for m in collector._replica_manager_gauges()
            if m.name == "kafka_server_replicamanager_offlinereplicacount"
        ]
        assert gauge.samples[0].value == 1


class _MovedStateZk(_LeasedZk):
    """A state znode that moved on under the leader's conditional ISR write."""

    def __init__(self, current: PartitionState) -> None:
        self.current = current
        self.writes = 0

    async def update_partition_state_conditionally(
        self, tp: TopicPartition, new_state: object, expected_version: int
    ) -> int | None:
        self.writes += 1
        return None

    async def read_partition_state(self, tp: TopicPartition) -> PartitionState:
        return self.current


def _isr_race(tmp_path: Path, current: PartitionState) -> tuple[Partition, _MovedStateZk]:
    zk = _MovedStateZk(current)
    config = BrokerConfig(broker_id=1, zookeeper_connect="unused:2181", log_dir=tmp_path)

    async def scenario() -> Partition:
        with ThreadPoolExecutor(1) as executor:
            manager = ReplicaManager(
                config,
                LogManager(tmp_path, LogConfig(), 1),
                cast(BrokerZkClient, zk),
                MetadataCache(),
                executor,
            )
            partition = Partition(
                GOOD, 1, Log.open(tmp_path / GOOD.dir_name, LogConfig()), clock_ms=int
            )
            assert partition.make_leader(
                LeadershipState(1, 4, (1, 2), (1, 2), 3, controller_epoch=1)
            )
            manager.partitions[GOOD] = partition
            await manager._update_isr(partition, (1,), reason="test")
            return partition

    return asyncio.run(scenario()), zk


def test_a_leader_that_lost_an_isr_race_takes_the_znode_it_still_leads_in(
    tmp_path: Path,
) -> None:
    """KAFKA-2729: retrying with the stale zkVersion fails at every fetch. The znode names
    this broker leader at its epoch, with another ISR and version: the leader starts from
    them, so its next write can succeed."""
    current = PartitionState(leader=1, leader_epoch=4, isr=(1, 2), controller_epoch=1, zk_version=7)
    partition, zk = _isr_race(tmp_path, current)
    assert zk.writes == 1
    assert (partition.isr, partition.zk_version) == ((1, 2), 7)
    assert not partition.fenced
    assert not partition.isr_update_in_flight


def test_a_leader_that_lost_an_isr_race_to_a_new_leader_is_fenced(tmp_path: Path) -> None:
    """The znode names another leader at a newer epoch: this broker stops taking writes at
    its old epoch until the controller's LeaderAndIsr."""
    current = PartitionState(leader=2, leader_epoch=5, isr=(2,), controller_epoch=2, zk_version=9)
    partition, _ = _isr_race(tmp_path, current)
    assert partition.fenced
    assert "leader 2 at epoch 5" in partition.fenced_because
    assert (partition.isr, partition.zk_version) == ((1, 2), 3)


def test_a_leader_and_isr_whose_caller_went_away_is_applied_to_its_end(tmp_path: Path) -> None:
    """The controller's deadline cancels the call, not the work: its resend finds the
    partitions made (at 30,000 partitions a first attempt cancelled half way had made its
    logs for nothing)."""
    state = PartitionState(leader=2, leader_epoch=3, isr=(2, 1), controller_epoch=1, zk_version=1)
    zk = _ControlZk({FOLLOWED: state}, {2: BrokerRegistration("127.0.0.1", 1, 0)})
    config = BrokerConfig(broker_id=1, zookeeper_connect="unused:2181", log_dir=tmp_path)

    async def scenario() -> None:
        async with _controlled_manager(tmp_path, zk, config) as manager:
            call = asyncio.ensure_future(
                manager.become_leader_or_follower(_leader_and_isr(FOLLOWED))
            )
            await asyncio.sleep(0)  # started: the check awaits ZooKeeper
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            async with manager._lock:  # the applying task holds it to its end
                pass
            partition = manager.partitions[FOLLOWED]
            assert (partition.leader_id, partition.leader_epoch) == (2, 3)
            assert manager._is_fetching(FOLLOWED)

    asyncio.run(scenario())
