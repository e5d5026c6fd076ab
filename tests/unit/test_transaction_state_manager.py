"""TransactionStateManager over a real ReplicaManager and log: a transactional id's changes
are written to ``__transaction_state`` before they apply, and a new leadership of the
partition reloads them, handing over the transactions whose markers were in flight."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from broker.coordinator.transaction_metadata import NO_PRODUCER_EPOCH, TransactionMetadata
from broker.coordinator.transaction_state_manager import (
    TransactionStateManager,
    transaction_append_error,
)
from broker.metadata_cache import MetadataCache
from proto.config.broker_config import BrokerConfig
from proto.coordinator.transaction_records import TransactionState
from proto.topic_partition import TRANSACTION_STATE_TOPIC, TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.zk.znodes import BrokerRegistration, PartitionState
from tests.unit.test_replica_manager import _controlled_manager, _ControlZk

TXN_TP = TopicPartition(TRANSACTION_STATE_TOPIC, 0)
A = TopicPartition("orders", 0)
S = TransactionState


def _leads(epoch: int) -> pb.LeaderAndIsrRequest:
    """Broker 1 leads partition 0 of the topic alone, at ``epoch``."""
    request = pb.LeaderAndIsrRequest(controller_id=2, controller_epoch=1, broker_epoch=5)
    request.live_leaders.add(node_id=1, host="127.0.0.1", port=1)
    request.partition_states.add(
        topic_name=TXN_TP.topic, partition_index=0, controller_epoch=1, leader=1,
        leader_epoch=epoch, isr=[1], zk_version=epoch, replicas=[1],
    )  # fmt: skip
    return request


class _Zk(_ControlZk):
    """The ZooKeeper reads of a LeaderAndIsr, and a session that is fine for appends."""

    async def ensure_session_lease(self) -> bool:
        return True


async def _wait_loaded(manager: TransactionStateManager) -> None:
    for _ in range(1000):  # 10 s
        if manager.partitions.loaded_partitions() == [0]:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the partition was not loaded within 10 s")


def test_changes_are_written_then_applied_and_reloaded_with_markers_in_flight(
    tmp_path: Path,
) -> None:
    state = PartitionState(leader=1, leader_epoch=1, isr=(1,), controller_epoch=1, zk_version=1)
    zk = _Zk({TXN_TP: state}, {1: BrokerRegistration("127.0.0.1", 1, 0)})
    config = BrokerConfig(
        broker_id=1,
        zookeeper_connect="unused:2181",
        log_dir=tmp_path,
        transaction_state_log_num_partitions=1,
    )

    async def made() -> int:
        return pb.NONE

    async def scenario() -> None:
        async with _controlled_manager(tmp_path, zk, config) as replicas:
            manager = TransactionStateManager(
                config, replicas, MetadataCache(), None, made, clock_ms=lambda: 1000
            )
            handed: list[tuple[int, list[str]]] = []
            manager.on_partition_loaded = lambda p, metas: handed.append(
                (p, [m.transactional_id for m in metas])
            )
            assert manager.refusal("app") == 16  # NOT_COORDINATOR: nothing led yet
            await replicas.become_leader_or_follower(_leads(1))
            await _wait_loaded(manager)
            assert manager.refusal("app") is None
            assert manager.coordinator_epoch("app") == 1

            meta = manager.put_if_absent(
                TransactionMetadata("app", producer_id=77, producer_epoch=NO_PRODUCER_EPOCH,
                                    timeout_ms=60000, update_timestamp_ms=1000)
            )  # fmt: skip
            init = meta.prepare_increment_producer_epoch(60000, None, 1000)
            assert not isinstance(init, int)
            assert await manager.append(meta, init) == pb.NONE
            assert (meta.producer_epoch, meta.state) == (0, S.EMPTY)
            added = meta.prepare_add_partitions(frozenset({A}), 1100)
            assert await manager.append(meta, added) == pb.NONE
            commit = meta.prepare_abort_or_commit(S.PREPARE_COMMIT, 1200)
            assert await manager.append(meta, commit) == pb.NONE
            assert meta.state == S.PREPARE_COMMIT
            assert replicas.partitions[TXN_TP].log_end_offset == 3

            # A new leader epoch: the partition is read again and the in-flight commit is
            # handed over with what the log says.
            zk.states[TXN_TP] = replace(state, leader_epoch=2, zk_version=2)
            await replicas.become_leader_or_follower(_leads(2))
            await _wait_loaded(manager)
            assert handed == [(0, []), (0, ["app"])]
            reloaded = manager.get("app")
            assert reloaded is not None
            assert reloaded is not meta
            assert (reloaded.state, reloaded.partitions) == (S.PREPARE_COMMIT, {A})
            assert (reloaded.producer_id, reloaded.producer_epoch) == (77, 0)
            assert manager.coordinator_epoch("app") == 2
            await manager.stop()

    asyncio.run(scenario())


def test_append_errors_are_the_coordinators() -> None:
    assert transaction_append_error(pb.REQUEST_TIMED_OUT) == 15  # COORDINATOR_NOT_AVAILABLE
    assert transaction_append_error(pb.NOT_ENOUGH_REPLICAS) == 15
    assert transaction_append_error(pb.NOT_LEADER_OR_FOLLOWER) == 16  # NOT_COORDINATOR
    assert transaction_append_error(pb.MESSAGE_TOO_LARGE) == -1  # UNKNOWN_SERVER_ERROR
