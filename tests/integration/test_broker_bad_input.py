"""Bad input gets a clear error and never crashes a broker or changes its log."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import grpc
import pytest

from deploy.zookeeper import ZooKeeperServer
from proto.records.record_batch import (
    BATCH_LENGTH_OFFSET,
    CRC_OFFSET,
    MAGIC_OFFSET,
    RECORDS_COUNT_OFFSET,
    Record,
    compute_crc,
    encode_batch,
)
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from tests.cluster import Cluster, running_cluster
from tests.helpers import chrooted_client
from tests.poison_batches import POISONS, Poison

pytestmark = pytest.mark.integration

TP = TopicPartition("guarded", 0)
MESSAGE_MAX_BYTES = 20_000
REQUEST_MAX_BYTES = 200_000


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """One single-broker cluster for the whole module: every test checks that the same
    broker keeps serving after the bad input of the one before."""
    overrides = {
        "message.max.bytes": str(MESSAGE_MAX_BYTES),
        "socket.request.max.bytes": str(REQUEST_MAX_BYTES),
    }
    root = tmp_path_factory.mktemp("bad-input")
    with (
        chrooted_client(zookeeper) as zk,
        running_cluster(
            zk,
            zookeeper.connect_string + zk.chroot,
            root,
            (1,),
            overrides,
            scripted_controller=True,
        ) as c,
    ):
        c.controller.create_topic(TP.topic, {0: [1]})
        assert c.produce(1, TP, [b"first"]).error_code == pb.NONE
        # The poison batches name producer id 7: handed out (block 0-999 reserved) here.
        init = c.broker_stub(1).InitProducerId(pb.InitProducerIdRequest(), timeout=30)
        assert init.error_code == pb.NONE
        yield c


def good_batch() -> bytes:
    return encode_batch([Record(key=b"k", value=b"v", timestamp=1), Record(None, b"w", 2)])


def with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(memoryview(batch)[CRC_OFFSET + 4 :]))
    return bytes(batch)


def log_bytes(cluster: Cluster) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(cluster.partition_dir(1, TP).glob("*.log")))


def still_serving(cluster: Cluster) -> None:
    """The broker answers and appends after the bad request."""
    before = log_bytes(cluster)
    response = cluster.produce(1, TP, [b"after"], acks=1)
    assert response.error_code == pb.NONE, response.error_message
    assert log_bytes(cluster).startswith(before)
    assert cluster.brokers[1].is_running


def corrupt_crc() -> bytes:
    batch = bytearray(good_batch())
    batch[-1] ^= 0x01
    return bytes(batch)


def wrong_magic() -> bytes:
    batch = bytearray(good_batch())
    batch[MAGIC_OFFSET] = 1
    return bytes(batch)


def length_too_long() -> bytes:
    batch = bytearray(good_batch())
    struct.pack_into(">i", batch, BATCH_LENGTH_OFFSET, len(batch) + 100)
    return bytes(batch)


def length_too_short() -> bytes:
    batch = bytearray(good_batch())
    struct.pack_into(">i", batch, BATCH_LENGTH_OFFSET, 20)
    return bytes(batch)


def count_mismatch() -> bytes:
    batch = bytearray(good_batch())
    struct.pack_into(">i", batch, RECORDS_COUNT_OFFSET, 5)
    return with_crc(batch)  # a valid CRC: only the count lies


def trailing_garbage() -> bytes:
    return good_batch() + b"\x00\x01\x02"


@pytest.mark.parametrize(
    ("records", "fragment"),
    [
        (corrupt_crc(), "CRC"),
        (wrong_magic(), "magic"),
        (length_too_long(), "length"),
        (length_too_short(), "length"),
        (count_mismatch(), "count"),
        (trailing_garbage(), ""),
        (b"", "no record batches"),
    ],
    ids=["crc", "magic", "length-long", "length-short", "count", "trailing", "empty"],
)
def test_malformed_batch_is_corrupt_message_and_log_unchanged(
    cluster: Cluster, records: bytes, fragment: str
) -> None:
    before = log_bytes(cluster)
    response = cluster.produce_raw(1, TP, records, acks=-1)
    assert response.error_code == pb.CORRUPT_MESSAGE
    assert fragment.lower() in response.error_message.lower()
    assert response.base_offset == -1
    assert log_bytes(cluster) == before
    still_serving(cluster)


@pytest.mark.parametrize("poison", POISONS, ids=[p.name for p in POISONS])
def test_poison_batch_is_refused_and_the_partition_stays_readable(
    cluster: Cluster, poison: Poison
) -> None:
    """a batch the leader could not serve (valid CRC, broken records or
    attributes) gets its code and a message saying what is wrong, and nothing of it is
    written: the log end offset stays, and a consumer still decodes the partition from
    offset 0, before and after."""
    before = cluster.consume_all(1, TP)
    log_end_offset = cluster.fetch(1, TP, 0).log_end_offset
    before_bytes = log_bytes(cluster)
    response = cluster.produce_raw(1, TP, poison.batch, acks=-1)
    assert response.error_code == poison.code, response.error_message
    assert poison.fragment in response.error_message.lower()
    assert response.base_offset == -1
    assert cluster.fetch(1, TP, 0).log_end_offset == log_end_offset
    assert log_bytes(cluster) == before_bytes
    still_serving(cluster)
    assert cluster.consume_all(1, TP) == [*before, (log_end_offset, b"after")]


@pytest.mark.parametrize(
    ("topic", "partition", "code"),
    [
        ("guarded", -1, pb.UNKNOWN_TOPIC_OR_PARTITION),
        ("guarded", 7, pb.UNKNOWN_TOPIC_OR_PARTITION),
        ("no-such-topic", 0, pb.UNKNOWN_TOPIC_OR_PARTITION),
        ("bad/name", 0, pb.INVALID_TOPIC),
        ("..", 0, pb.INVALID_TOPIC),
    ],
)
def test_unknown_or_invalid_partitions_get_their_code(
    cluster: Cluster, topic: str, partition: int, code: int
) -> None:
    tp = TopicPartition(topic, partition)
    assert cluster.produce_raw(1, tp, good_batch()).error_code == code
    assert cluster.fetch(1, tp, 0).error_code == code
    still_serving(cluster)


def test_batch_above_message_max_bytes_is_refused(cluster: Cluster) -> None:
    big = encode_batch([Record(None, b"x" * (MESSAGE_MAX_BYTES + 1), 0)])
    before = log_bytes(cluster)
    response = cluster.produce_raw(1, TP, big)
    assert response.error_code == pb.MESSAGE_TOO_LARGE
    assert "message.max.bytes" in response.error_message
    assert log_bytes(cluster) == before
    still_serving(cluster)


def test_request_above_socket_request_max_bytes_is_resource_exhausted(cluster: Cluster) -> None:
    request = pb.ProduceRequest(acks=1, timeout_ms=1000)
    topic = request.topics.add(name=TP.topic)
    for i in range(REQUEST_MAX_BYTES // 10_000 + 2):
        topic.partitions.add(index=i, records=encode_batch([Record(None, b"y" * 10_000, 0)]))
    with pytest.raises(grpc.RpcError) as raised:
        cluster.broker_stub(1).Produce(request, timeout=10)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    still_serving(cluster)


def test_malformed_requests_are_invalid_argument(cluster: Cluster) -> None:
    bad_acks = pb.ProduceRequest(acks=2, timeout_ms=1000)
    bad_acks.topics.add(name=TP.topic).partitions.add(index=0, records=good_batch())
    twice = pb.ProduceRequest(acks=1, timeout_ms=1000)
    topic = twice.topics.add(name=TP.topic)
    topic.partitions.add(index=0, records=good_batch())
    topic.partitions.add(index=0, records=good_batch())
    negative_fetch = pb.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1000)
    negative_fetch.topics.add(topic=TP.topic).partitions.add(
        partition=0, fetch_offset=-5, partition_max_bytes=1000
    )
    stub = cluster.broker_stub(1)
    with pytest.raises(grpc.RpcError) as bad_acks_error:
        stub.Produce(bad_acks, timeout=10)
    with pytest.raises(grpc.RpcError) as twice_error:
        stub.Produce(twice, timeout=10)
    with pytest.raises(grpc.RpcError) as negative_error:
        stub.Fetch(negative_fetch, timeout=10)
    for raised, fragment in [
        (bad_acks_error, "acks must be 0, 1 or -1"),
        (twice_error, "twice"),
        (negative_error, "fetch_offset"),
    ]:
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert fragment in (raised.value.details() or "")
    still_serving(cluster)


def test_stale_epochs_are_fenced(cluster: Cluster) -> None:
    state = cluster.controller.state(TP)
    # A fetch naming an older leader epoch than the partition's.
    cluster.controller.elect(TP, 1)  # same leader, epoch + 1
    request = pb.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1000)
    request.topics.add(topic=TP.topic).partitions.add(
        partition=0, fetch_offset=0, partition_max_bytes=1000,
        current_leader_epoch=state.leader_epoch,
    )  # fmt: skip
    fetched = cluster.broker_stub(1).Fetch(request, timeout=10).responses[0].partitions[0]
    assert fetched.error_code == pb.FENCED_LEADER_EPOCH
    request.topics[0].partitions[0].current_leader_epoch = state.leader_epoch + 5
    fetched = cluster.broker_stub(1).Fetch(request, timeout=10).responses[0].partitions[0]
    assert fetched.error_code == pb.UNKNOWN_LEADER_EPOCH

    # A LeaderAndIsr carrying an older leader epoch than the broker has.
    current = cluster.controller.state(TP)
    epoch = cluster.controller.broker_epoch(1)
    stale = pb.LeaderAndIsrRequest(controller_id=0, controller_epoch=1, broker_epoch=epoch)
    stale.partition_states.add(
        topic_name=TP.topic, partition_index=0, controller_epoch=1, leader=1,
        leader_epoch=current.leader_epoch - 1, isr=[1], zk_version=current.zk_version,
        replicas=[1],
    )  # fmt: skip
    answer = cluster.control_stub(1).LeaderAndIsr(stale, timeout=10)
    assert answer.partition_errors[0].error_code == pb.FENCED_LEADER_EPOCH
    # One addressed to an earlier incarnation of the broker (KIP-380 broker epoch).
    stale.broker_epoch = epoch - 1
    assert cluster.control_stub(1).LeaderAndIsr(stale, timeout=10).error_code == (
        pb.STALE_BROKER_EPOCH
    )
    stale.broker_epoch = epoch
    # And one from an older controller epoch.
    stale.controller_epoch = 0
    assert cluster.control_stub(1).LeaderAndIsr(stale, timeout=10).error_code == (
        pb.STALE_CONTROLLER_EPOCH
    )
    still_serving(cluster)


def test_data_dir_holds_only_what_was_acknowledged(cluster: Cluster) -> None:
    values = [v for _, v in cluster.replica_records(1, TP)]
    assert values[0] == b"first"
    assert set(values[1:]) <= {b"after"}
