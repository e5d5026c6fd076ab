"""The transaction coordinator's requests over a real TransactionStateManager, ReplicaManager
and log: InitProducerId and fencing, AddPartitionsToTxn, EndTxn, the timeout's abort, and
the markers of decided transactions handed over again after a new leadership."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

from broker.coordinator.transaction_coordinator import TransactionCoordinator
from broker.coordinator.transaction_metadata import TransactionMetadata, TxnTransit
from broker.coordinator.transaction_state_manager import TransactionStateManager
from broker.metadata_cache import MetadataCache
from proto.config.broker_config import BrokerConfig
from proto.coordinator.transaction_records import TransactionState
from proto.records.control_records import ControlType
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.zk.znodes import BrokerRegistration, PartitionState
from tests.unit.test_replica_manager import _controlled_manager
from tests.unit.test_transaction_state_manager import TXN_TP, _leads, _wait_loaded, _Zk

S = TransactionState
A, B = TopicPartition("orders", 0), TopicPartition("orders", 1)
PRODUCER_FENCED, CONCURRENT_TRANSACTIONS = 90, 51


class RecordedMarkers:
    """Records what the coordinator hands the marker channel; :meth:`deliver` then does
    what the channel does once every marker is written: it writes the completion."""

    def __init__(self, state: TransactionStateManager) -> None:
        self.state = state
        self.handed: list[tuple[int, ControlType, str, int, frozenset[TopicPartition]]] = []
        self._pending: list[tuple[TransactionMetadata, TxnTransit]] = []

    def add_markers(
        self,
        coordinator_epoch: int,
        result: ControlType,
        metadata: TransactionMetadata,
        completion: TxnTransit,
    ) -> None:
        self.handed.append(
            (
                coordinator_epoch,
                result,
                metadata.transactional_id,
                metadata.producer_epoch,
                frozenset(metadata.partitions),
            )
        )
        self._pending.append((metadata, completion))

    async def deliver(self) -> None:
        while self._pending:
            metadata, completion = self._pending.pop(0)
            assert await self.state.append(metadata, completion) == pb.NONE


Scenario = Callable[[TransactionCoordinator, RecordedMarkers, list[int]], Awaitable[None]]


def run(tmp_path: Path, scenario: Scenario) -> None:
    state = PartitionState(leader=1, leader_epoch=1, isr=(1,), controller_epoch=1, zk_version=1)
    zk = _Zk({TXN_TP: state}, {1: BrokerRegistration("127.0.0.1", 1, 0)})
    config = BrokerConfig(
        broker_id=1,
        zookeeper_connect="unused:2181",
        log_dir=tmp_path,
        transaction_state_log_num_partitions=1,
    )
    now = [1000]
    ids = iter(range(5000, 6000))

    async def made() -> int:
        return pb.NONE

    async def new_producer_id() -> tuple[int, int]:
        return pb.NONE, next(ids)

    async def body() -> None:
        async with _controlled_manager(tmp_path, zk, config) as replicas:
            manager = TransactionStateManager(
                config, replicas, MetadataCache(), None, made, clock_ms=lambda: now[0]
            )
            markers = RecordedMarkers(manager)
            coordinator = TransactionCoordinator(
                manager, new_producer_id, markers, max_timeout_ms=900_000, clock_ms=lambda: now[0]
            )
            await replicas.become_leader_or_follower(_leads(1))
            await _wait_loaded(manager)
            await scenario(coordinator, markers, now)
            await manager.stop()

    asyncio.run(body())


def test_a_transaction_commits_and_a_second_instance_fences_the_first(tmp_path: Path) -> None:
    async def scenario(c: TransactionCoordinator, markers: RecordedMarkers, now: list[int]) -> None:
        first = await c.init_producer_id("app", 60000)
        assert first == (pb.NONE, 5000, 0)
        assert await c.add_partitions("app", 5000, 0, frozenset({A})) == pb.NONE
        assert await c.add_partitions("app", 5000, 0, frozenset({A, B})) == pb.NONE
        assert await c.end_transaction("app", 5000, 0, commit=True) == pb.NONE
        assert markers.handed == [(1, ControlType.COMMIT, "app", 0, frozenset({A, B}))]
        # Until the markers are written, the id is busy.
        assert await c.add_partitions("app", 5000, 0, frozenset({A})) == CONCURRENT_TRANSACTIONS
        await markers.deliver()
        metadata = c.state.get("app")
        assert metadata is not None
        assert metadata.state == S.COMPLETE_COMMIT
        # A retried EndTxn of the same outcome is answered at once; the other is refused.
        assert await c.end_transaction("app", 5000, 0, commit=True) == pb.NONE
        assert await c.end_transaction("app", 5000, 0, commit=False) == 48  # INVALID_TXN_STATE
        # A second instance: the epoch goes up and the first instance is fenced.
        assert await c.init_producer_id("app", 60000) == (pb.NONE, 5000, 1)
        assert await c.add_partitions("app", 5000, 0, frozenset({A})) == PRODUCER_FENCED
        assert await c.add_partitions("app", 4999, 1, frozenset({A})) == 49  # not its id
        assert await c.add_partitions("other", 5000, 1, frozenset({A})) == 49

    run(tmp_path, scenario)


def test_an_init_during_a_transaction_aborts_it_under_a_fenced_epoch(tmp_path: Path) -> None:
    async def scenario(c: TransactionCoordinator, markers: RecordedMarkers, now: list[int]) -> None:
        assert await c.init_producer_id("app", 60000) == (pb.NONE, 5000, 0)
        assert await c.add_partitions("app", 5000, 0, frozenset({A})) == pb.NONE
        # The new instance is told to retry while the old transaction is aborted at epoch 1.
        assert await c.init_producer_id("app", 60000) == (CONCURRENT_TRANSACTIONS, -1, -1)
        assert markers.handed == [(1, ControlType.ABORT, "app", 1, frozenset({A}))]
        assert await c.init_producer_id("app", 60000) == (CONCURRENT_TRANSACTIONS, -1, -1)
        await markers.deliver()
        assert await c.init_producer_id("app", 60000) == (pb.NONE, 5000, 2)
        assert await c.end_transaction("app", 5000, 0, commit=True) == PRODUCER_FENCED

    run(tmp_path, scenario)


def test_a_transaction_open_past_its_timeout_is_aborted(tmp_path: Path) -> None:
    async def scenario(c: TransactionCoordinator, markers: RecordedMarkers, now: list[int]) -> None:
        assert await c.init_producer_id("slow", 5000) == (pb.NONE, 5000, 0)
        assert await c.init_producer_id("fast", 5000) == (pb.NONE, 5001, 0)
        assert await c.add_partitions("slow", 5000, 0, frozenset({A})) == pb.NONE
        now[0] += 4000
        assert await c.add_partitions("fast", 5001, 0, frozenset({B})) == pb.NONE
        now[0] += 2000  # slow's transaction is 6 s old, fast's 2 s
        assert await c.abort_timed_out_transactions() == 1
        assert markers.handed == [(1, ControlType.ABORT, "slow", 1, frozenset({A}))]
        await markers.deliver()
        assert await c.end_transaction("slow", 5000, 0, commit=True) == PRODUCER_FENCED
        assert await c.end_transaction("fast", 5001, 0, commit=True) == pb.NONE

    run(tmp_path, scenario)


def test_an_id_idle_past_its_expiration_is_forgotten_and_starts_afresh(tmp_path: Path) -> None:
    async def scenario(c: TransactionCoordinator, markers: RecordedMarkers, now: list[int]) -> None:
        assert await c.init_producer_id("idle", 60000) == (pb.NONE, 5000, 0)
        assert await c.init_producer_id("busy", 900_000) == (pb.NONE, 5001, 0)
        assert await c.add_partitions("busy", 5001, 0, frozenset({A})) == pb.NONE
        now[0] += 604_800_000 - 1  # transactional.id.expiration.ms, Kafka's 7 days
        assert await c.remove_expired_transactional_ids() == 0
        now[0] += 1
        # The idle one goes; the one with a transaction open stays (its timeout aborts it).
        assert await c.remove_expired_transactional_ids() == 1
        assert c.state.get("idle") is None
        busy = c.state.get("busy")
        assert busy is not None
        assert busy.state == S.ONGOING
        assert await c.init_producer_id("idle", 60000) == (pb.NONE, 5002, 0)

    run(tmp_path, scenario)


def test_bad_requests_are_refused(tmp_path: Path) -> None:
    async def scenario(c: TransactionCoordinator, markers: RecordedMarkers, now: list[int]) -> None:
        assert (await c.init_producer_id("app", 900_001)).error_code == 50
        assert (await c.init_producer_id("", 1000)).error_code == 42
        assert await c.end_transaction("ghost", 1, 0, commit=True) == 49
        assert await c.init_producer_id("app", 1000) == (pb.NONE, 5000, 0)
        assert await c.end_transaction("app", 5000, 0, commit=True) == 48  # no transaction

    run(tmp_path, scenario)


def test_decided_transactions_get_their_markers_again_after_a_new_leadership(
    tmp_path: Path,
) -> None:
    async def scenario(c: TransactionCoordinator, markers: RecordedMarkers, now: list[int]) -> None:
        assert await c.init_producer_id("app", 60000) == (pb.NONE, 5000, 0)
        assert await c.add_partitions("app", 5000, 0, frozenset({A})) == pb.NONE
        assert await c.end_transaction("app", 5000, 0, commit=False) == pb.NONE
        # The coordinator stops before the markers are written; at its next leadership of
        # the partition, the decided abort is handed over again, at the new epoch.
        replicas = c.state.partitions.replica_manager
        zk = replicas.zk
        zk.states[TXN_TP] = replace(zk.states[TXN_TP], leader_epoch=2, zk_version=2)  # type: ignore[attr-defined]
        await replicas.become_leader_or_follower(_leads(2))
        await _wait_loaded(c.state)
        assert markers.handed[-1] == (2, ControlType.ABORT, "app", 0, frozenset({A}))
        markers._pending = markers._pending[-1:]  # the old coordinator's delivery is gone
        await markers.deliver()
        metadata = c.state.get("app")
        assert metadata is not None
        assert metadata.state == S.COMPLETE_ABORT

    run(tmp_path, scenario)
