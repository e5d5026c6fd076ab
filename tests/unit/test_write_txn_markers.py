"""The partition leader's side of WriteTxnMarkers: a marker closes the producer's open
transaction (and moves the LSO), acks=all, and a marker of an older producer or
coordinator epoch is refused without being written."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from broker.log.log import Log
from broker.log.transaction_index import AbortedTxn
from broker.replication.partition import LeadershipState, Partition
from broker.replication.replica_manager import MarkerAppend, ReplicaManager
from proto.config.log_config import LogConfig
from proto.records.control_records import ControlType, EndTxnMarker
from proto.records.record_batch import TRANSACTIONAL_FLAG_MASK, Record, encode_batch
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from tests.unit.test_replica_manager import empty_replica_manager

TP = TopicPartition("orders", 0)
OFFSETS = TopicPartition("__consumer_offsets", 3)


def leading(tmp_path: Path, executor: ThreadPoolExecutor) -> ReplicaManager:
    manager = empty_replica_manager(tmp_path, executor)
    for tp in (TP, OFFSETS):
        partition = Partition(tp, 1, Log.open(tmp_path / tp.dir_name, LogConfig()), clock_ms=int)
        assert partition.make_leader(LeadershipState(1, 0, (1,), (1,), 0, controller_epoch=1))
        manager.partitions[tp] = partition
    return manager


def open_transaction(partition: Partition, producer_id: int, epoch: int) -> None:
    """What a transactional producer's batch leaves in the log (written as a follower
    would copy it: the leader refuses transactional batches until the coordinator serves
    them)."""
    log = partition.log
    data = encode_batch(
        [Record(b"k", b"v", 1)],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=0,
        flags=TRANSACTIONAL_FLAG_MASK,
    )
    log.append_as_follower(log.log_end_offset.to_bytes(8, "big") + data[8:])
    partition.maybe_increment_high_watermark()


def test_markers_close_transactions_acks_all_and_refuse_older_epochs(tmp_path: Path) -> None:
    with ThreadPoolExecutor(1) as executor:
        manager = leading(tmp_path, executor)
        partition, offsets = manager.partitions[TP], manager.partitions[OFFSETS]
        open_transaction(partition, 9, 2)
        open_transaction(offsets, 9, 2)
        assert partition.last_stable_offset == 0

        abort = EndTxnMarker(ControlType.ABORT, 4)
        results = asyncio.run(
            manager.write_txn_markers(
                1000, {TP: MarkerAppend(abort, 9, 2), OFFSETS: MarkerAppend(abort, 9, 2)}
            )
        )
        assert {tp: r.error_code for tp, r in results.items()} == {TP: pb.NONE, OFFSETS: pb.NONE}
        assert results[TP].base_offset == 1
        assert partition.high_watermark == 2
        assert partition.last_stable_offset == 2
        assert partition.log.collect_aborted_transactions(0, 2) == [AbortedTxn(9, 0, 1, 2)]

        # A deposed coordinator's late marker, and one of the producer's old epoch.
        stale = {TP: MarkerAppend(EndTxnMarker(ControlType.COMMIT, 3), 9, 2)}
        [refused] = asyncio.run(manager.write_txn_markers(1000, stale)).values()
        assert refused.error_code == pb.TRANSACTION_COORDINATOR_FENCED
        fenced = {TP: MarkerAppend(EndTxnMarker(ControlType.COMMIT, 4), 9, 1)}
        [refused] = asyncio.run(manager.write_txn_markers(1000, fenced)).values()
        assert refused.error_code == pb.INVALID_PRODUCER_EPOCH
        assert partition.log.log_end_offset == 2  # neither was written

        # A partition this broker does not host.
        other = {TopicPartition("orders", 7): MarkerAppend(abort, 9, 2)}
        [missing] = asyncio.run(manager.write_txn_markers(1000, other)).values()
        assert missing.error_code == pb.UNKNOWN_TOPIC_OR_PARTITION
        for p in (partition, offsets):
            p.log.close()


def test_a_read_committed_long_poll_counts_bytes_only_below_the_lso(tmp_path: Path) -> None:
    """Records of an open transaction do not wake a read_committed fetch (it would read
    nothing and be answered empty at once, over and over, until the transaction ends)."""
    log = Log.open(tmp_path / TP.dir_name, LogConfig())
    partition = Partition(TP, 1, log, clock_ms=int)
    assert partition.make_leader(LeadershipState(1, 0, (1,), (1,), 0, controller_epoch=1))
    data = encode_batch(
        [Record(b"k", b"v" * 100, 1)],
        producer_id=9,
        producer_epoch=0,
        base_sequence=0,
        flags=TRANSACTIONAL_FLAG_MASK,
    )
    partition.append_records_to_leader(data, 1)
    assert partition.high_watermark == 1
    assert partition.bytes_available(0, False) > 100
    assert partition.bytes_available(0, False, read_committed=True) == 0
    partition.append_marker_to_leader(EndTxnMarker(ControlType.COMMIT, 0), 9, 0, 2)
    assert partition.bytes_available(0, False, read_committed=True) > 100
    log.close()
