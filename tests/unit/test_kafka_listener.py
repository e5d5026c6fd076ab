"""broker.kafka_listener's framing and connection handling against a real TCP socket: answers in
request order whatever order they become ready in, Kafka's answers to what is not served,
and hostile input closing only its own connection."""

from __future__ import annotations

import asyncio
import io
import struct
from collections.abc import Awaitable, Callable, Coroutine
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kazoo.exceptions import NoNodeError
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v4.response import FetchResponse as FetchV4
from kio.schema.fetch.v12.response import FetchResponse as FetchV12
from kio.schema.metadata.v1.request import MetadataRequest as MetadataV1Request
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer

from broker.coordinator.group_admin import GroupAdmin
from broker.coordinator.group_coordinator import GroupCoordinator
from broker.kafka_listener.apis import (
    API_VERSIONS,
    METADATA,
    SUPPORTED_VERSIONS,
    api_versions_tree,
)
from broker.kafka_listener.group_apis import GroupApis
from broker.kafka_listener.messages import Tree, build
from broker.kafka_listener.request_codec import (
    MalformedFrameError,
    decode_request,
    encode_response,
    request_schema,
    response_schema,
)
from broker.kafka_listener.server import KafkaListener, api_name
from broker.kafka_listener.wire_request import Answer, CloseConnection, KafkaRequest
from broker.metadata_cache import MetadataCache
from broker.security.acl_authorizer import AclAuthorizer
from broker.zk_client import BrokerZkClient
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.zk.kafka_zk_client import KafkaZkClient
from proto.zk.znode_reads import GetAnswer, ReadBatch, committed_offset_read, read_batch
from proto.zk.znodes import CommittedOffset

Handler = Callable[[KafkaRequest], Awaitable[Answer]]


def frame(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """A request frame as a Kafka client writes it."""
    schema = type(body)
    header_schema = schema.__header_schema__
    out = io.BytesIO()
    entity_writer(header_schema)(
        out,
        header_schema(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id="test",
        ),
    )
    entity_writer(schema)(out, body)
    data = out.getvalue()
    return struct.pack(">i", len(data)) + data


def metadata_request(*names: str) -> MetadataRequest:
    return MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(n)) for n in names),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    async with asyncio.timeout(10):
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        return await reader.readexactly(size)


def correlation_of(data: bytes) -> int:
    (correlation_id,) = struct.unpack_from(">i", data)
    return int(correlation_id)


async def closed(reader: asyncio.StreamReader) -> bool:
    """The broker closed the connection (EOF before any more bytes)."""
    async with asyncio.timeout(10):
        return await reader.read(1) == b""


def run(
    handlers: dict[int, Handler],
    scenario: Callable[[Callable[[], Awaitable[tuple[Any, Any]]]], Coroutine[Any, Any, None]],
    *,
    max_request_bytes: int = 1 << 20,
) -> None:
    async def main() -> None:
        listener = KafkaListener(1, handlers, max_request_bytes=max_request_bytes)
        port = await listener.start("127.0.0.1", 0)
        writers: list[asyncio.StreamWriter] = []

        async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writers.append(writer)
            return reader, writer

        try:
            await scenario(connect)
        finally:
            for writer in writers:
                writer.close()
            await listener.stop()

    asyncio.run(main())


def metadata_handler(release: dict[str, asyncio.Event]) -> Handler:
    """Answers Metadata with the named topic once ``release[name]`` is set."""

    async def stage(request: KafkaRequest) -> Answer:
        (topic,) = request.body.topics

        async def answer() -> Tree:
            await release[topic.name].wait()
            return {"topics": [{"name": topic.name, "error_code": 3}]}

        return answer()

    return stage


def test_answers_are_written_in_request_order() -> None:
    async def scenario(connect: Callable[[], Awaitable[tuple[Any, Any]]]) -> None:
        reader, writer = await connect()
        for i, name in enumerate(["a", "b", "c"]):
            writer.write(frame(METADATA, 12, 100 + i, metadata_request(name)))
        await writer.drain()
        release["c"].set()
        release["b"].set()
        await asyncio.sleep(0)
        release["a"].set()
        got = [correlation_of(await read_frame(reader)) for _ in range(3)]
        assert got == [100, 101, 102]

    release = {n: asyncio.Event() for n in "abc"}
    run({METADATA: metadata_handler(release)}, scenario)


def test_api_versions_lists_what_is_served() -> None:
    async def scenario(connect: Callable[[], Awaitable[tuple[Any, Any]]]) -> None:
        reader, writer = await connect()
        body = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        writer.write(frame(API_VERSIONS, 3, 7, body))
        data = await read_frame(reader)
        # ApiVersions answers with a version-0 header whatever the version (KIP-511).
        assert correlation_of(data) == 7
        schema = response_schema(API_VERSIONS, 3)
        assert schema is not None
        response, _ = entity_reader(schema)(data, 4)
        served = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert served == SUPPORTED_VERSIONS
        assert response.error_code == 0

    async def api_versions(request: KafkaRequest) -> Answer:
        async def answer() -> Tree:
            return api_versions_tree(0)

        return answer()

    run({API_VERSIONS: api_versions}, scenario)


def test_api_versions_in_an_unknown_version_is_answered_in_version_0() -> None:
    async def scenario(connect: Callable[[], Awaitable[tuple[Any, Any]]]) -> None:
        reader, writer = await connect()
        body = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        data = bytearray(frame(API_VERSIONS, 3, 9, body))
        struct.pack_into(">h", data, 6, 99)  # the version field: ApiVersions v99
        writer.write(bytes(data))
        answer = await read_frame(reader)
        assert correlation_of(answer) == 9
        response, _ = entity_reader(ApiVersionsV0)(answer, 4)
        assert response.error_code == 35  # UNSUPPORTED_VERSION
        assert {k.api_key for k in response.api_keys} == set(SUPPORTED_VERSIONS)

    run({}, scenario)


def test_sasl_handshake_is_refused_with_unsupported_version() -> None:
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
    from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse

    async def scenario(connect: Callable[[], Awaitable[tuple[Any, Any]]]) -> None:
        reader, writer = await connect()
        writer.write(frame(17, 1, 12, SaslHandshakeRequest(mechanism="PLAIN")))
        data = await read_frame(reader)
        assert correlation_of(data) == 12
        response, _ = entity_reader(SaslHandshakeResponse)(data, 4)
        assert response.error_code == 35
        assert response.mechanisms == ()

    run({}, scenario)


def test_a_none_answer_writes_nothing_and_later_answers_follow() -> None:
    async def scenario(connect: Callable[[], Awaitable[tuple[Any, Any]]]) -> None:
        reader, writer = await connect()
        writer.write(frame(METADATA, 12, 1, metadata_request("silent")))
        writer.write(frame(METADATA, 12, 2, metadata_request("loud")))
        assert correlation_of(await read_frame(reader)) == 2

    async def stage(request: KafkaRequest) -> Answer:
        silent = request.body.topics[0].name == "silent"

        async def answer() -> Tree | None:
            return None if silent else {}

        return answer()

    run({METADATA: stage}, scenario)


def test_close_connection_writes_the_answers_before_it_then_closes() -> None:
    async def scenario(connect: Callable[[], Awaitable[tuple[Any, Any]]]) -> None:
        reader, writer = await connect()
        for i, name in enumerate(["ok", "fail", "never"]):
            writer.write(frame(METADATA, 12, i, metadata_request(name)))
        assert correlation_of(await read_frame(reader)) == 0
        assert await closed(reader)

    async def stage(request: KafkaRequest) -> Answer:
        name = request.body.topics[0].name

        async def answer() -> Tree:
            if name == "fail":
                raise CloseConnection("acks=0 produce failed")
            return {}

        return answer()

    run({METADATA: stage}, scenario)


@pytest.mark.parametrize(
    "garbage",
    [
        struct.pack(">i", (1 << 20) + 1) + b"x" * 16,  # over socket.request.max.bytes
        struct.pack(">i", -5),
        bytes.fromhex("16030100a5010000a103"),  # a TLS ClientHello on a PLAINTEXT listener
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        struct.pack(">i", 6) + b"\x00\x03\x00\x0c\x00\x00",  # too short for a header
        struct.pack(">i", 12) + b"\x00\x03\x00\x0c\x00\x00\x00\x01\x00\x09ab",  # cut string
        struct.pack(">i", 10) + b"\x7f\x00\x00\x00\x00\x00\x00\x01\x00\x00",  # no such API
    ],
)
def test_hostile_input_closes_its_connection_and_the_listener_serves_on(garbage: bytes) -> None:
    async def scenario(connect: Callable[[], Awaitable[tuple[Any, Any]]]) -> None:
        reader, writer = await connect()
        writer.write(garbage)
        assert await closed(reader)
        reader, writer = await connect()
        writer.write(frame(METADATA, 12, 5, metadata_request("t")))
        assert correlation_of(await read_frame(reader)) == 5

    async def stage(request: KafkaRequest) -> Answer:
        async def answer() -> Tree:
            return {}

        return answer()

    run({METADATA: stage}, scenario, max_request_bytes=1 << 20)


def test_a_handler_bug_is_answered_with_unknown_server_error() -> None:
    async def scenario(connect: Callable[[], Awaitable[tuple[Any, Any]]]) -> None:
        reader, writer = await connect()
        writer.write(frame(METADATA, 1, 3, MetadataV1Request(topics=())))
        data = await read_frame(reader)
        assert correlation_of(data) == 3
        writer.write(frame(METADATA, 1, 4, MetadataV1Request(topics=())))
        assert correlation_of(await read_frame(reader)) == 4

    async def stage(request: KafkaRequest) -> Answer:
        async def answer() -> Tree:
            raise RuntimeError("a bug")

        return answer()

    run({METADATA: stage}, scenario)


def test_decode_request_reads_both_header_versions() -> None:
    for version, header in ((1, HeaderV1), (12, HeaderV2)):
        schema = request_schema(METADATA, version)
        assert schema is not None
        assert schema.__header_schema__ is header
        body = build(schema, {"topics": [{"name": "t"}]})
        data = frame(METADATA, version, 42, body)[4:]
        request = decode_request(data, schema)
        assert (request.api_key, request.api_version, request.correlation_id) == (3, version, 42)
        assert request.client_id == "test"
        assert request.body == body


def test_decode_request_ignores_trailing_bytes_and_refuses_missing_ones() -> None:
    schema = request_schema(METADATA, 12)
    assert schema is not None
    # librdkafka 2.16's Metadata v12 for all topics, as sent: three bytes after the body's
    # tagged fields, which Kafka ignores.
    sent = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    assert decode_request(sent, schema).body.topics is None
    data = frame(METADATA, 12, 1, metadata_request("t"))[4:]
    with pytest.raises(MalformedFrameError, match="undecodable"):
        decode_request(data[:-3], schema)


def test_build_fits_one_tree_to_every_version() -> None:
    tree = {
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                "topic": "t",
                "partitions": [
                    {"partition_index": 2, "error_code": 6, "high_watermark": 10, "records": b""}
                ],
            }
        ],
    }
    old, new = build(FetchV4, tree), build(FetchV12, tree)
    assert not hasattr(old, "session_id")
    assert new.session_id == 0
    part = new.responses[0].partitions[0]
    assert (part.partition_index, part.error_code, part.high_watermark) == (2, 6, 10)
    assert part.preferred_read_replica == -1  # the schema's default
    assert part.aborted_transactions is None  # nullable and not given
    assert part.log_start_offset == -1  # the schema's default
    assert part.last_stable_offset == -1
    schema = response_schema(1, 12)
    assert schema is FetchV12
    encoded = encode_response(schema, 77, tree)
    assert correlation_of(encoded[4:]) == 77
    assert struct.unpack(">i", encoded[:4])[0] == len(encoded) - 4


def test_api_names_are_kafkas() -> None:
    assert api_name(18) == "ApiVersions"
    assert api_name(23) == "OffsetForLeaderEpoch"
    assert api_name(9999) == "9999"


def test_a_misdirected_client_is_named_in_the_log_line(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario(connect: Callable[[], Awaitable[tuple[Any, Any]]]) -> None:
        for garbage in (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", bytes.fromhex("16030100a5010000")):
            reader, writer = await connect()
            writer.write(garbage)
            assert await closed(reader)

    run({}, scenario)
    assert "a gRPC client, such as minibroker's own CLI, on the Kafka port" in caplog.text
    assert "a TLS handshake: this listener is PLAINTEXT" in caplog.text


class _OffsetsInZooKeeper:
    """The broker's ZooKeeper as OffsetFetch reads it: the shared reading rules
    (proto.zk.znode_reads) over fixed znode contents."""

    def __init__(self, data: dict[int, bytes]) -> None:
        self.data = data

    async def read_committed_offsets(
        self, group: str, tps: list[TopicPartition] | None
    ) -> ReadBatch[TopicPartition, CommittedOffset]:
        wanted = tps if tps is not None else [TopicPartition("t", p) for p in sorted(self.data)]
        reads = {tp: committed_offset_read(group, tp) for tp in wanted}
        answers: list[GetAnswer] = [
            (self.data[tp.partition], SimpleNamespace(mtime=1_700_000_000_000))
            if tp.partition in self.data
            else NoNodeError()
            for tp in wanted
        ]
        return read_batch(reads, answers)


@pytest.mark.parametrize("listed", [True, False])
def test_offset_fetch_answers_a_malformed_offset_with_an_error_never_no_offset(
    listed: bool,
) -> None:
    """docs/zookeeper.md: a malformed committed offset is an error for its partition
    (UNKNOWN_SERVER_ERROR, as Kafka's KafkaApis answers an offset it cannot parse), not
    "no offset" (-1 and NONE), which would make the client apply auto.offset.reset."""
    apis = GroupApis.__new__(GroupApis)
    apis.zk = cast(
        BrokerZkClient,
        _OffsetsInZooKeeper({0: b"7", 1: b"seven", 3: b'{"version":1,"offset":9,"metadata":"m"}'}),
    )
    apis.broker_id = 1
    apis.coordinator = GroupCoordinator(1)  # no store: the offsets are ZooKeeper's
    apis.group_admin = GroupAdmin(apis.coordinator, MetadataCache(), cast(KafkaZkClient, apis.zk))
    apis.group_admin.refusal = lambda _: None  # type: ignore[method-assign,assignment]
    apis._refusal = lambda *_: None  # type: ignore[method-assign]
    apis.authorizer = AclAuthorizer(1, None, enabled=False)
    topics = [SimpleNamespace(name="t", partition_indexes=[0, 1, 2, 3])] if listed else None
    request = SimpleNamespace(
        body=SimpleNamespace(group_id="g", topics=topics),
        principal="User:ANONYMOUS",
        client_host="/127.0.0.1",
    )
    tree = asyncio.run(apis._offset_fetch(cast(KafkaRequest, request)))
    answers = {p["partition_index"]: p for t in tree["topics"] for p in t["partitions"]}
    assert (answers[0]["committed_offset"], answers[0]["error_code"]) == (7, pb.NONE)
    assert (answers[1]["committed_offset"], answers[1]["error_code"]) == (
        -1,
        pb.UNKNOWN_SERVER_ERROR,
    )
    assert (answers[3]["committed_offset"], answers[3]["metadata"]) == (9, "m")
    assert answers[0]["metadata"] == ""
    if listed:
        assert (answers[2]["committed_offset"], answers[2]["error_code"]) == (-1, pb.NONE)
    else:
        assert sorted(answers) == [0, 1, 3]
