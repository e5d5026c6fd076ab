"""A transaction's offsets in ``__consumer_offsets`` (GroupMetadataManager over a real
ReplicaManager and log): written as the producer's transactional batch, pending until the
transaction's marker reaches the group's partition, then applied or dropped; a reload
rebuilds the same from the batches and markers it reads; a fenced epoch writes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

from broker.coordinator.group_metadata_manager import (
    CommittedOffset,
    GroupMetadataManager,
    StoredGroup,
)
from broker.metadata_cache import MetadataCache
from broker.replication.replica_manager import MarkerAppend, ReplicaManager
from proto.config.broker_config import BrokerConfig
from proto.records.control_records import ControlType, EndTxnMarker
from proto.topic_partition import OFFSETS_TOPIC, TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.zk.znodes import BrokerRegistration, PartitionState, ProducerIdBlock
from tests.unit.test_replica_manager import _controlled_manager, _ControlZk

OFFSETS = TopicPartition(OFFSETS_TOPIC, 0)
A, B = TopicPartition("orders", 0), TopicPartition("orders", 1)
INVALID_PRODUCER_EPOCH = 47


def _leads(epoch: int) -> pb.LeaderAndIsrRequest:
    request = pb.LeaderAndIsrRequest(controller_id=2, controller_epoch=1, broker_epoch=5)
    request.live_leaders.add(node_id=1, host="127.0.0.1", port=1)
    request.partition_states.add(
        topic_name=OFFSETS.topic, partition_index=0, controller_epoch=1, leader=1,
        leader_epoch=epoch, isr=[1], zk_version=epoch, replicas=[1],
    )  # fmt: skip
    return request


class _Zk(_ControlZk):
    """LeaderAndIsr's reads, a session fine for appends, producer ids up to 999 issued."""

    async def ensure_session_lease(self) -> bool:
        return True

    async def get_producer_id_block(self) -> tuple[ProducerIdBlock, int]:
        return ProducerIdBlock(1, 0, 999), 0


async def _wait_loaded(manager: GroupMetadataManager) -> None:
    for _ in range(1000):  # 10 s
        if manager.loaded_partitions() == [0]:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the partition was not loaded within 10 s")


async def _marker(replicas: ReplicaManager, producer_id: int, epoch: int, commit: bool) -> int:
    kind = ControlType.COMMIT if commit else ControlType.ABORT
    [result] = (
        await replicas.write_txn_markers(
            1000, {OFFSETS: MarkerAppend(EndTxnMarker(kind, 0), producer_id, epoch)}
        )
    ).values()
    return result.error_code


def _offsets(manager: GroupMetadataManager, group: str) -> dict[TopicPartition, int]:
    return {tp: c.offset for tp, c in manager.committed(group).items()}


Relead = Callable[[int], Awaitable[None]]
"""Makes broker 1 leader of the offsets partition again, at the epoch given."""
Scenario = Callable[[GroupMetadataManager, ReplicaManager, Relead], Awaitable[None]]


def run(tmp_path: Path, scenario: Scenario) -> None:
    """``scenario`` over a manager whose one offsets partition broker 1 leads (epoch 1),
    loaded."""
    state = PartitionState(leader=1, leader_epoch=1, isr=(1,), controller_epoch=1, zk_version=1)
    zk = _Zk({OFFSETS: state}, {1: BrokerRegistration("127.0.0.1", 1, 0)})
    config = BrokerConfig(
        broker_id=1,
        zookeeper_connect="unused:2181",
        log_dir=tmp_path,
        offsets_topic_num_partitions=1,
    )

    async def made() -> int:
        return pb.NONE

    async def body() -> None:
        async with _controlled_manager(tmp_path, zk, config) as replicas:
            manager = GroupMetadataManager(config, replicas, MetadataCache(), None, made)

            async def relead(epoch: int) -> None:
                zk.states[OFFSETS] = replace(state, leader_epoch=epoch, zk_version=epoch)
                await replicas.become_leader_or_follower(_leads(epoch))

            await replicas.become_leader_or_follower(_leads(1))
            await _wait_loaded(manager)
            await scenario(manager, replicas, relead)
            await manager.stop()

    asyncio.run(body())


def test_offsets_apply_at_the_commit_marker_and_are_dropped_at_an_abort(tmp_path: Path) -> None:
    async def scenario(
        manager: GroupMetadataManager, replicas: ReplicaManager, relead: Relead
    ) -> None:
        assert await manager.store_offsets("g", {A: CommittedOffset(1)}) == {A: pb.NONE}
        codes = await manager.store_txn_offsets(
            "g", 7, 0, {A: CommittedOffset(10), B: CommittedOffset(20)}
        )
        assert codes == {A: pb.NONE, B: pb.NONE}
        # Pending: not the group's offsets yet.
        assert _offsets(manager, "g") == {A: 1}
        assert manager.pending_partitions("g") == {A, B}
        assert await _marker(replicas, 7, 0, commit=True) == pb.NONE
        assert _offsets(manager, "g") == {A: 10, B: 20}
        assert manager.pending_partitions("g") == set()

        # An aborted transaction's offsets never apply.
        await manager.store_txn_offsets("g", 7, 0, {A: CommittedOffset(99)})
        assert manager.pending_partitions("g") == {A}
        assert await _marker(replicas, 7, 0, commit=False) == pb.NONE
        assert _offsets(manager, "g") == {A: 10, B: 20}

        # Another producer's transaction is left open, and a plain commit written
        # after it wins over it when it commits (it is later in the log).
        await manager.store_txn_offsets("g", 8, 3, {A: CommittedOffset(30)})
        await manager.store_txn_offsets("h", 8, 3, {B: CommittedOffset(5)})
        await manager.store_offsets("g", {A: CommittedOffset(31)})

        # A fenced epoch of producer 7 writes nothing and holds nothing pending.
        await manager.store_txn_offsets("g", 7, 1, {B: CommittedOffset(21)})
        await _marker(replicas, 7, 1, commit=True)
        stale = await manager.store_txn_offsets("g", 7, 0, {B: CommittedOffset(666)})
        assert stale == {B: INVALID_PRODUCER_EPOCH}
        assert manager.pending_partitions("g") == {A}
        assert _offsets(manager, "g") == {A: 31, B: 21}

        # A new leader epoch: the load rebuilds the same, producer 8 still pending...
        await relead(2)
        await _wait_loaded(manager)
        assert _offsets(manager, "g") == {A: 31, B: 21}
        assert manager.pending_partitions("g") == {A}
        assert _offsets(manager, "h") == {}
        assert manager.pending_partitions("h") == {B}

        # ... until its marker, which applies to every group of the partition.
        assert await _marker(replicas, 8, 3, commit=True) == pb.NONE
        assert _offsets(manager, "g") == {A: 31, B: 21}
        assert _offsets(manager, "h") == {B: 5}
        assert manager.pending_partitions("g") == manager.pending_partitions("h") == set()

    run(tmp_path, scenario)


def test_a_marker_written_while_the_partition_loads_is_applied_after_the_load(
    tmp_path: Path,
) -> None:
    async def scenario(
        manager: GroupMetadataManager, replicas: ReplicaManager, relead: Relead
    ) -> None:
        await manager.store_txn_offsets("g", 7, 0, {A: CommittedOffset(10)})
        # The next leadership's load has not run yet when the marker is written (the
        # load task starts at the next turn of the loop; the append needs none).
        await relead(2)
        assert manager.partitions.refusal(0) == 14  # COORDINATOR_LOAD_IN_PROGRESS
        assert await _marker(replicas, 7, 0, commit=True) == pb.NONE
        await _wait_loaded(manager)
        assert _offsets(manager, "g") == {A: 10}
        assert manager.pending_partitions("g") == set()

    run(tmp_path, scenario)


def test_a_commit_applies_only_offsets_newer_in_the_log_than_the_groups() -> None:
    group = StoredGroup(offsets={A: CommittedOffset(5, record_offset=40)})
    group.pending[7] = {
        A: CommittedOffset(3, record_offset=30),
        B: CommittedOffset(9, record_offset=31),
    }
    assert group.complete_transaction(7, committed=True) == 1
    assert {tp: c.offset for tp, c in group.offsets.items()} == {A: 5, B: 9}
    group.pending[8] = {A: CommittedOffset(6, record_offset=50)}
    assert group.complete_transaction(8, committed=False) == 0
    assert group.offsets[A].offset == 5
    assert not group.pending
    assert group.complete_transaction(9, committed=True) == 0
