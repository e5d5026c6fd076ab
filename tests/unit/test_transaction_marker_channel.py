"""A decided transaction's markers reach its partitions and the transaction completes: the
coordinator, its state manager, the marker channel and the partition leader's
WriteTxnMarkers over real logs (the requests go straight to this broker's handler, as the
channel sends them to itself when it leads the partitions)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.coordinator.transaction_coordinator import TransactionCoordinator
from broker.coordinator.transaction_marker_channel import TransactionMarkerChannel
from broker.coordinator.transaction_state_manager import TransactionStateManager
from broker.log.log import Log
from broker.log.transaction_index import AbortedTxn
from broker.metadata_cache import MetadataCache, PartitionInfo
from broker.replication.partition import LeadershipState, Partition
from broker.replication.txn_markers import write_txn_markers
from proto.config.broker_config import BrokerConfig
from proto.config.log_config import LogConfig
from proto.coordinator.transaction_records import TransactionState
from proto.records.record_batch import TRANSACTIONAL_FLAG_MASK, Record, encode_batch
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.zk.znodes import BrokerRegistration, PartitionState
from tests.unit.test_replica_manager import _controlled_manager
from tests.unit.test_transaction_state_manager import TXN_TP, _leads, _wait_loaded, _Zk

A, B = TopicPartition("orders", 0), TopicPartition("orders", 1)


def test_markers_are_delivered_through_a_leader_change_then_the_transaction_completes(
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

    async def new_producer_id() -> tuple[int, int]:
        return pb.NONE, 5000

    async def scenario() -> None:
        async with _controlled_manager(tmp_path, zk, config) as replicas:
            cache = MetadataCache()
            for tp in (A, B):
                log = Log.open(tmp_path / tp.dir_name, LogConfig())
                partition = Partition(tp, 1, log, clock_ms=int)
                assert partition.make_leader(LeadershipState(1, 0, (1,), (1,), 0, 1))
                replicas.partitions[tp] = partition
            cache.add_partition(A, PartitionInfo(1, 0, (1,), (1,)))
            cache.add_partition(B, PartitionInfo(2, 0, (2, 1), (2, 1)))  # broker 2: gone
            sent: list[int] = []

            async def send(
                broker: int, request: pb.WriteTxnMarkersRequest
            ) -> pb.WriteTxnMarkersResponse:
                sent.append(broker)
                if broker != 1:
                    if len(sent) >= 3:  # the controller moved B's leadership here meanwhile
                        cache.add_partition(B, PartitionInfo(1, 1, (2, 1), (1,)))
                    raise ConnectionError(f"broker {broker} is unreachable")
                return await write_txn_markers(replicas, request)

            manager = TransactionStateManager(config, replicas, cache, None, made)
            channel = TransactionMarkerChannel(1, manager, cache, send, retry_backoff_s=0.01)
            coordinator = TransactionCoordinator(
                manager, new_producer_id, channel, max_timeout_ms=900_000
            )
            await replicas.become_leader_or_follower(_leads(1))
            await _wait_loaded(manager)

            assert await coordinator.init_producer_id("app", 60000) == (pb.NONE, 5000, 0)
            assert await coordinator.add_partitions("app", 5000, 0, frozenset({A, B})) == 0
            for tp in (A, B):  # the producer's writes, as a follower would copy them
                log = replicas.partitions[tp].log
                data = encode_batch(
                    [Record(b"k", b"v", 1)],
                    producer_id=5000,
                    producer_epoch=0,
                    base_sequence=0,
                    flags=TRANSACTIONAL_FLAG_MASK,
                )
                log.append_as_follower(data)
                replicas.partitions[tp].maybe_increment_high_watermark()
            assert replicas.partitions[A].last_stable_offset == 0

            assert await coordinator.end_transaction("app", 5000, 0, commit=False) == pb.NONE
            for _ in range(1000):
                if channel.in_flight == 0:
                    break
                await asyncio.sleep(0.01)
            metadata = manager.get("app")
            assert metadata is not None
            assert metadata.state == TransactionState.COMPLETE_ABORT
            assert metadata.pending is None
            assert 2 in sent  # B's old leader was tried, and failed
            for tp in (A, B):
                partition = replicas.partitions[tp]
                assert partition.log_end_offset == 2
                assert partition.last_stable_offset == 2
                assert partition.log.collect_aborted_transactions(0, 2) == [
                    AbortedTxn(5000, 0, 1, 2)
                ]
            # The id may start its next transaction.
            assert await coordinator.add_partitions("app", 5000, 0, frozenset({A})) == 0
            await channel.stop()
            await manager.stop()

    asyncio.run(scenario())
