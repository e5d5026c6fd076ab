"""Fuzzing every RPC of a running broker with random protobufs and raw bytes.

A real broker (it is its own controller, so ControlledShutdown reaches the controller's
handler) holds a partition with acknowledged records. Every RPC of both services is sent
messages drawn from its request type's whole range (:func:`tests.fuzz.messages`: huge
epochs, unknown enums, path-escaping topic names, mutated batches) and raw bytes that may
not parse at all. After each one:

- the answer is a response or a clear gRPC error: INVALID_ARGUMENT or RESOURCE_EXHAUSTED
  with a message; never UNKNOWN or INTERNAL, which would mean a handler raised what it
  did not expect (a Fetch may also run out its long poll: DEADLINE_EXCEEDED);
- the broker still answers Metadata;
- the partition's segment files and epoch checkpoint are byte for byte what they were.

The example count follows the Hypothesis profile (``make fuzz`` runs it long).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from deploy.zookeeper import ZooKeeperServer
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from tests.cluster import Cluster, running_cluster
from tests.fuzz import messages
from tests.helpers import chrooted_client

pytestmark = pytest.mark.integration

TP = TopicPartition("guarded", 0)
CALL_TIMEOUT_S = 3.0
EXAMPLES = max(10, (settings.default or settings()).max_examples // 4)
"""Per RPC and input kind: 25 under the bounded profile (20 RPC tests, ~1,000 calls)."""

METHODS: list[MethodDescriptor] = [
    method for service in pb.DESCRIPTOR.services_by_name.values() for method in service.methods
]

CLEAR_ERRORS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED}


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("fuzz-rpcs")
    with (
        chrooted_client(zookeeper) as zk,
        running_cluster(zk, zookeeper.connect_string + zk.chroot, root, (1,)) as c,
    ):
        c.create_topic(TP.topic, {0: [1]})
        for i in range(5):
            assert c.produce(1, TP, [b"acked-%d" % i]).error_code == pb.NONE
        yield c


def partition_files(cluster: Cluster) -> dict[str, bytes]:
    directory: Path = cluster.partition_dir(1, TP)
    return {
        p.name: p.read_bytes()
        for p in sorted(directory.iterdir())
        if p.suffix == ".log" or p.name == "leader-epoch-checkpoint"
    }


def call(cluster: Cluster, method: MethodDescriptor, request: bytes) -> Message | grpc.RpcError:
    """Send ``request`` (serialized, or not a message at all) to ``method``."""
    response_type = GetMessageClass(method.output_type)
    stub = cluster.channel(1).unary_unary(
        f"/{method.containing_service.full_name}/{method.name}",
        request_serializer=None,
        response_deserializer=response_type.FromString,
    )
    try:
        response: Message = stub(request, timeout=CALL_TIMEOUT_S)
    except grpc.RpcError as e:
        return e
    return response


def check_answer(method: MethodDescriptor, answer: Message | grpc.RpcError) -> None:
    if not isinstance(answer, grpc.RpcError):
        event("response")
        return
    code = answer.code()
    details = answer.details()
    event(f"status {code.name}")
    if method.name == "Fetch" and code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return  # the request asked for a long poll
    assert code in CLEAR_ERRORS, f"{method.name}: {code} {details}"
    assert details


def _deletes_guarded(method: MethodDescriptor, request: Message) -> bool:
    """A well-formed DeleteRecords of the test's topic deletes its records, as asked: no
    harm done, but the records the last test checks would be gone (it is fuzzed on every
    other topic name; tests/integration/test_delete_records.py covers the real thing)."""
    return method.name == "DeleteRecords" and any(
        t.name == TP.topic
        for t in request.topics  # type: ignore[attr-defined]
    )


def check_unharmed(cluster: Cluster, before: dict[str, bytes]) -> None:
    metadata = cluster.broker_stub(1).Metadata(pb.MetadataRequest(), timeout=10)
    assert [b.node_id for b in metadata.brokers] == [1]
    assert partition_files(cluster) == before


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_random_messages_get_an_answer_and_harm_nothing(
    cluster: Cluster, method: MethodDescriptor
) -> None:
    before = partition_files(cluster)

    @settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
    @given(request=messages(method.input_type).filter(lambda r: not _deletes_guarded(method, r)))
    def fuzz(request: Message) -> None:
        check_answer(method, call(cluster, method, request.SerializeToString()))
        check_unharmed(cluster, before)

    fuzz()


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_raw_bytes_get_an_answer_and_harm_nothing(
    cluster: Cluster, method: MethodDescriptor
) -> None:
    before = partition_files(cluster)

    @settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
    @given(request=st.binary(max_size=300))
    def fuzz(request: bytes) -> None:
        check_answer(method, call(cluster, method, request))
        check_unharmed(cluster, before)

    fuzz()


def test_acknowledged_records_survive_the_fuzzing(cluster: Cluster) -> None:
    """Run last in the module: the records acknowledged before any fuzzing are all there."""
    values = [value for _, value in cluster.consume_all(1, TP)]
    assert values == [b"acked-%d" % i for i in range(5)]
