"""Transactions through the gRPC door (docs/transactions.md) against real broker
processes: FindCoordinator, InitProducerId with a transactional id, AddPartitionsToTxn,
a transactional produce, AddOffsetsToTxn and TxnOffsetCommit, EndTxn; the same
coordinator as the Kafka listener's, so a commit and an abort read back as they do there,
and a second InitProducerId fences the first instance."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import grpc
import pytest
from kazoo.client import KazooClient

from proto.records.record_batch import TRANSACTIONAL_FLAG_MASK, Record, encode_batch
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from tests.cluster import Cluster, running_cluster
from tests.helpers import minibroker, wait_for
from tests.integration.test_group_admin import grpc_bootstrap

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

T = TypeVar("T")
RETRIABLE = {
    pb.COORDINATOR_NOT_AVAILABLE,
    pb.COORDINATOR_LOAD_IN_PROGRESS,
    pb.NOT_COORDINATOR,
    pb.CONCURRENT_TRANSACTIONS,
}


@pytest.fixture
def cluster(zk_client: KazooClient, zk_connect: str, tmp_path: Path) -> Iterator[Cluster]:
    with running_cluster(zk_client, zk_connect, tmp_path) as c:
        yield c


def until_answered(call: Callable[[], T], code_of: Callable[[T], int], what: str) -> T:
    """``call`` again while it answers a retriable coordinator error (within 30 s)."""
    deadline = time.monotonic() + 30
    while True:
        answer = call()
        if code_of(answer) not in RETRIABLE or time.monotonic() > deadline:
            assert code_of(answer) == pb.NONE, f"{what}: error code {code_of(answer)}"
            return answer
        time.sleep(0.1)


def coordinator(cluster: Cluster, key: str, key_type: int) -> pb_grpc.BrokerStub:
    any_broker = cluster.broker_stub(cluster.live()[0])
    found = until_answered(
        lambda: any_broker.FindCoordinator(
            pb.FindCoordinatorRequest(key=key, key_type=key_type), timeout=10
        ),
        lambda r: r.error_code,
        f"FindCoordinator({key})",
    )
    assert f"{found.host}:{found.port}" == cluster.brokers[found.node_id].address
    return cluster.broker_stub(found.node_id)


def produce_in_transaction(
    cluster: Cluster, tp: TopicPartition, producer: pb.TransactionalProducer, seq: int, value: bytes
) -> None:
    batch = encode_batch(
        [Record(None, value, int(time.time() * 1000))],
        producer_id=producer.producer_id,
        producer_epoch=producer.producer_epoch,
        base_sequence=seq,
        flags=TRANSACTIONAL_FLAG_MASK,
    )
    leader = cluster.leader_serving(tp)
    assert leader is not None
    answer = cluster.produce_raw(leader, tp, batch)
    assert answer.error_code == pb.NONE, answer.error_message


def test_a_transaction_over_grpc_commits_aborts_and_is_fenced(cluster: Cluster) -> None:
    tp = TopicPartition("ledger", 0)
    cluster.create_topic(tp.topic, {0: [1, 2, 3]})
    cluster.wait_for_leader(tp)
    txn = coordinator(cluster, "grpc-app", 1)
    init = until_answered(
        lambda: txn.InitProducerId(
            pb.InitProducerIdRequest(transactional_id="grpc-app", transaction_timeout_ms=60000),
            timeout=10,
        ),
        lambda r: r.error_code,
        "InitProducerId",
    )
    producer = pb.TransactionalProducer(
        transactional_id="grpc-app",
        producer_id=init.producer_id,
        producer_epoch=init.producer_epoch,
    )

    def add_partition() -> None:
        added = until_answered(
            lambda: txn.AddPartitionsToTxn(
                pb.AddPartitionsToTxnRequest(
                    producer=producer, partitions=[pb.TxnPartition(topic=tp.topic, partition=0)]
                ),
                timeout=10,
            ),
            lambda r: r.partitions[0].error_code,
            "AddPartitionsToTxn",
        )
        assert [p.error_code for p in added.partitions] == [pb.NONE]

    def end(committed: bool) -> None:
        until_answered(
            lambda: txn.EndTxn(
                pb.EndTxnRequest(producer=producer, committed=committed), timeout=10
            ),
            lambda r: r.error_code,
            "EndTxn",
        )

    # A committed transaction with offsets of a group.
    add_partition()
    produce_in_transaction(cluster, tp, producer, 0, b"committed")
    until_answered(
        lambda: txn.AddOffsetsToTxn(
            pb.AddOffsetsToTxnRequest(producer=producer, group_id="grpc-readers"), timeout=10
        ),
        lambda r: r.error_code,
        "AddOffsetsToTxn",
    )
    group = coordinator(cluster, "grpc-readers", 0)
    committed_offsets = until_answered(
        lambda: group.TxnOffsetCommit(
            pb.TxnOffsetCommitRequest(
                producer=producer,
                group_id="grpc-readers",
                generation_id=-1,
                offsets=[pb.GroupPartitionOffset(topic=tp.topic, partition=0, offset=1)],
            ),
            timeout=10,
        ),
        lambda r: r.offsets[0].error_code,
        "TxnOffsetCommit",
    )
    assert [o.error_code for o in committed_offsets.offsets] == [pb.NONE]
    end(committed=True)
    # An aborted one.
    add_partition()
    produce_in_transaction(cluster, tp, producer, 1, b"aborted")
    end(committed=False)

    def committed_offset() -> int:
        request = pb.FetchGroupOffsetsRequest(group_id="grpc-readers")
        answer = group.FetchGroupOffsets(request, timeout=10)
        return next((o.offset for o in answer.offsets if o.partition == 0), -1)

    wait_for(lambda: committed_offset() == 1, timeout=30, message="the transaction's offset")
    bootstrap = grpc_bootstrap(cluster)

    def consume(isolation: str) -> list[str]:
        done = minibroker(
            "consume", tp.topic, "--bootstrap-server", bootstrap, "--from-beginning",
            "--isolation-level", isolation, "--timeout-ms", "3000", timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert consume("read_committed") == ["committed"]
    assert consume("read_uncommitted") == ["committed", "aborted"]

    # A second instance fences the first: its epoch is refused from then on.
    until_answered(
        lambda: txn.InitProducerId(
            pb.InitProducerIdRequest(transactional_id="grpc-app", transaction_timeout_ms=60000),
            timeout=10,
        ),
        lambda r: r.error_code,
        "InitProducerId again",
    )
    fenced = txn.EndTxn(pb.EndTxnRequest(producer=producer, committed=True), timeout=10)
    assert fenced.error_code == pb.PRODUCER_FENCED

    # A request without a transactional id is malformed, not a crash.
    with pytest.raises(grpc.RpcError) as malformed:
        txn.EndTxn(pb.EndTxnRequest(committed=True), timeout=10)
    assert malformed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
