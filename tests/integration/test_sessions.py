"""ProduceSession and FetchSession on a real broker: order, answers, and bad input.

A produce session's promise is that the broker appends its requests in the order they were
written, whatever order their answers come back in; a fetch session answers each request as
Fetch would and speaks for one replica. Malformed and undecodable requests end a session
with INVALID_ARGUMENT, after the answers owed to the requests before them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest

from deploy.zookeeper import ZooKeeperServer
from proto.records.record_batch import Record, encode_batch
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from tests.cluster import Cluster, running_cluster
from tests.helpers import chrooted_client
from tests.integration.test_hostile_control_requests import log_of

pytestmark = pytest.mark.integration

TOPIC = "sessions"
P0, P1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("sessions")
    with (
        chrooted_client(zookeeper) as zk,
        running_cluster(
            zk, zookeeper.connect_string + zk.chroot, root, (1,), scripted_controller=True
        ) as c,
    ):
        c.controller.create_topic(TOPIC, {0: [1], 1: [1]})
        c.wait_for_leader(P0)
        c.wait_for_leader(P1)
        yield c


def produce_request(
    tp: TopicPartition, value: bytes, correlation_id: int, acks: int = -1
) -> pb.ProduceRequest:
    batch = encode_batch([Record(key=None, value=value, timestamp=int(time.time() * 1000))])
    request = pb.ProduceRequest(acks=acks, timeout_ms=10_000, correlation_id=correlation_id)
    request.topics.add(name=tp.topic).partitions.add(index=tp.partition, records=batch)
    return request


def values(cluster: Cluster, tp: TopicPartition) -> list[bytes | None]:
    return [value for _, value in cluster.consume_all(1, tp)]


def test_a_produce_session_appends_in_the_order_written_and_answers_each_request_once(
    cluster: Cluster,
) -> None:
    before = {tp: values(cluster, tp) for tp in (P0, P1)}
    requests = [
        produce_request(P0 if i % 3 else P1, b"ordered-%d" % i, i, acks=(-1, 1, 0)[i % 3])
        for i in range(30)
    ]
    answers = list(cluster.broker_stub(1).ProduceSession(iter(requests), timeout=30))
    assert sorted(a.correlation_id for a in answers) == list(range(30))
    offsets: dict[TopicPartition, list[int]] = {P0: [], P1: []}
    for answer in sorted(answers, key=lambda a: a.correlation_id):
        [topic] = answer.responses
        [part] = topic.partitions
        assert part.error_code == pb.NONE, part.error_message
        offsets[TopicPartition(topic.name, part.index)].append(part.base_offset)
    for tp in (P0, P1):
        assert offsets[tp] == sorted(offsets[tp])  # appended in the order written
        expected = [r.topics[0].partitions[0].index for r in requests].count(tp.partition)
        assert len(set(offsets[tp])) == expected
        written = [
            b"ordered-%d" % i
            for i, r in enumerate(requests)
            if r.topics[0].partitions[0].index == tp.partition
        ]
        assert values(cluster, tp) == before[tp] + written


def test_a_malformed_request_ends_the_session_after_the_answers_before_it(
    cluster: Cluster,
) -> None:
    before = values(cluster, P0)
    malformed = produce_request(P0, b"never", 2)
    malformed.acks = 7
    requests = [
        produce_request(P0, b"kept-0", 0),
        produce_request(P0, b"kept-1", 1),
        malformed,
        produce_request(P0, b"after-the-malformed-one", 3),
    ]
    answers: list[pb.ProduceResponse] = []

    def read_all() -> None:
        for answer in cluster.broker_stub(1).ProduceSession(iter(requests), timeout=30):
            answers.append(answer)

    with pytest.raises(grpc.RpcError) as raised:
        read_all()
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "acks" in str(raised.value.details())
    assert sorted(a.correlation_id for a in answers) == [0, 1]
    assert values(cluster, P0) == [*before, b"kept-0", b"kept-1"]


def test_a_fetch_session_answers_each_fetch_in_turn_for_one_replica(cluster: Cluster) -> None:
    assert cluster.produce(1, P1, [b"fetched-a", b"fetched-b"]).error_code == pb.NONE
    committed = cluster.consume_all(1, P1)

    def fetch(offset: int, replica_id: int = -1) -> pb.FetchRequest:
        request = pb.FetchRequest(replica_id=replica_id, max_wait_ms=0, max_bytes=1 << 20)
        request.topics.add(topic=TOPIC).partitions.add(
            partition=1, fetch_offset=offset, partition_max_bytes=1 << 20
        )
        return request

    first, last = committed[0][0], committed[-1][0]
    answers = list(
        cluster.broker_stub(1).FetchSession(iter([fetch(first), fetch(last), fetch(last + 1)]))
    )
    parts = [a.responses[0].partitions[0] for a in answers]
    assert [p.error_code for p in parts] == [pb.NONE] * 3
    assert parts[0].records
    assert parts[1].records
    assert not parts[2].records
    assert parts[2].high_watermark == last + 1

    with pytest.raises(grpc.RpcError) as raised:
        list(cluster.broker_stub(1).FetchSession(iter([fetch(first), fetch(first, 7)])))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "one replica_id" in str(raised.value.details())


@pytest.mark.parametrize("method", ["ProduceSession", "FetchSession"])
def test_an_undecodable_request_in_a_session_gets_invalid_argument_and_one_log_line(
    cluster: Cluster, method: str
) -> None:
    before = log_of(cluster, 1)
    session = cluster.channel(1).stream_stream(
        f"/minibroker.Broker/{method}",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.RpcError) as raised:
        list(session(iter([b"\xff\xff\xff\xff\x0f not a protobuf message"]), timeout=10))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert method in str(raised.value.details())
    new_lines = log_of(cluster, 1)[len(before) :]
    assert new_lines.count("event=request_undecodable") == 1, new_lines
    assert "Traceback" not in new_lines
    assert cluster.produce(1, P0, [b"still-served"]).error_code == pb.NONE
