"""The Produce response packer gives kio's bytes, for every version served and every shape
of answer the listener's produce handler builds."""

from __future__ import annotations

import datetime
import struct
from typing import Any

import pytest
from kio.serial import entity_reader

from broker.kafka_listener.apis import SUPPORTED_VERSIONS
from broker.kafka_listener.legacy_produce import legacy_response_schema
from broker.kafka_listener.produce_response import encode_produce_response
from broker.kafka_listener.request_codec import encode_response, encode_with_kio, response_schema

PRODUCE = 0


def schema_of(version: int) -> type[Any]:
    schema = response_schema(PRODUCE, version)
    assert schema is not None
    return schema


VERSIONS = range(3, SUPPORTED_VERSIONS[PRODUCE][1] + 1)
"""The versions kio has classes for; 0-2 are Kafka 2.8's oldest (broker.kafka_listener.
legacy_produce), packed here only."""

APPENDED = {
    "index": 2,
    "error_code": 0,
    "base_offset": 1_234_567_890_123,
    "log_append_time": None,
    "log_start_offset": 17,
    "error_message": None,
}
FAILED = {
    "index": 0,
    "error_code": 19,
    "base_offset": -1,
    "log_append_time": None,
    "log_start_offset": 0,
    "error_message": "NOT_ENOUGH_REPLICAS_AFTER_APPEND: é, and a message",
}
REFUSED = {  # the handler's shape for a partition refused before any append
    "index": 5,
    "error_code": 29,
    "base_offset": -1,
    "log_start_offset": -1,
    "error_message": "no Write on the topic",
}
TREES: list[dict[str, Any]] = [
    {"responses": [{"name": "perf", "partition_responses": [APPENDED]}]},
    {"responses": []},
    {
        "responses": [
            {"name": "a", "partition_responses": [APPENDED, FAILED, REFUSED]},
            {"name": "ü" * 70, "partition_responses": []},  # a name over one varint byte
            {"name": "b", "partition_responses": [REFUSED] * 130},  # an array over 127
        ]
    },
    {"responses": [{"name": "t", "partition_responses": [APPENDED]}], "throttle_time": 250},
    {
        "responses": [{"name": "t", "partition_responses": [FAILED]}],
        "throttle_time": datetime.timedelta(milliseconds=70_000),
    },
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("tree", TREES)
def test_packed_bytes_are_kios(version: int, tree: dict[str, Any]) -> None:
    schema = schema_of(version)
    packed = encode_produce_response(version, 123_456, tree)
    assert packed is not None
    assert packed == encode_with_kio(schema, 123_456, tree)
    assert encode_response(schema, 123_456, tree) == packed
    # and kio reads it back as the same response
    frame = packed[4:]
    header, at = entity_reader(schema.__header_schema__)(frame, 0)
    body, end = entity_reader(schema)(frame, at)
    assert header.correlation_id == 123_456
    assert at + end == len(frame)  # the sizes each read
    assert [t.name for t in body.responses] == [t["name"] for t in tree["responses"]]


@pytest.mark.parametrize(
    "tree",
    [
        {"responses": [], "unknown": 1},
        {"responses": [{"name": "t", "partition_responses": [], "extra": 1}]},
        {"responses": [{"name": "t", "partition_responses": [{**APPENDED, "record_errors": []}]}]},
        {"responses": [{"name": "t", "partition_responses": [{"index": 0, "error_code": 0}]}]},
        {
            "responses": [
                {
                    "name": "t",
                    "partition_responses": [
                        {**APPENDED, "log_append_time": datetime.datetime.now(datetime.UTC)}
                    ],
                }
            ]
        },
    ],
)
def test_what_it_does_not_pack_goes_to_kio(tree: dict[str, Any]) -> None:
    assert encode_produce_response(9, 1, tree) is None


@pytest.mark.parametrize("version", [-1, 10, 11])
def test_versions_outside_those_served_go_to_kio(version: int) -> None:
    assert encode_produce_response(version, 1, TREES[0]) is None


def test_an_error_response_is_kios() -> None:
    """The listener's error stubs (every error code the given error) stay kio's."""
    schema = schema_of(9)
    assert encode_response(schema, 7, {}, error=35) == encode_with_kio(schema, 7, {}, error=35)


@pytest.mark.parametrize("tree", TREES)
def test_versions_0_to_2_are_version_3_less_their_newer_fields(tree: dict[str, Any]) -> None:
    """Version 2's layout is version 3's (only the request changed); 1 lacks each
    partition's log append time, 0 also the throttle time at the end."""
    v3 = encode_with_kio(schema_of(3), 9, tree)
    assert encode_produce_response(2, 9, tree) == v3
    assert SUPPORTED_VERSIONS[PRODUCE][0] == 0
    v1 = encode_produce_response(1, 9, tree)
    v0 = encode_produce_response(0, 9, tree)
    assert v1 is not None
    assert v0 is not None
    partitions = sum(len(t["partition_responses"]) for t in tree["responses"])
    assert len(v1) == len(v3) - 8 * partitions
    assert v0 == struct.pack(">i", len(v1) - 8) + v1[4:-4]
    assert encode_response(legacy_response_schema(0), 9, tree) == v0
