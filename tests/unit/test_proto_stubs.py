"""The committed gRPC/protobuf stubs must match proto/wire/minibroker.proto."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from proto.wire import generate, minibroker_pb2

# Lines that name the generator's own version: they change with grpcio-tools releases but
# say nothing about whether the stubs match the .proto file.
_VERSION_LINES = re.compile(
    r"^(# Protobuf Python Version:.*|GRPC_GENERATED_VERSION = .*)$", re.MULTILINE
)
_RUNTIME_CHECK = re.compile(r"ValidateProtobufRuntimeVersion\([^)]*\)", re.DOTALL)


def _normalised(text: str) -> str:
    return _RUNTIME_CHECK.sub("ValidateProtobufRuntimeVersion(...)", _VERSION_LINES.sub("", text))


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("stubs")
    generate.generate(out)
    return out / "proto" / "wire"


@pytest.mark.parametrize("name", generate.GENERATED_FILES)
def test_committed_stub_is_current(regenerated: Path, name: str) -> None:
    committed = (generate.WIRE_DIR / name).read_text()
    fresh = (regenerated / name).read_text()
    assert _normalised(committed) == _normalised(fresh), (
        f"proto/wire/{name} is stale: run `make proto` and commit the result"
    )


def test_error_codes_use_kafkas_numbers() -> None:
    codes = minibroker_pb2.ErrorCode
    assert codes.Value("NONE") == 0
    assert codes.Value("UNKNOWN_SERVER_ERROR") == -1
    assert codes.Value("NOT_LEADER_OR_FOLLOWER") == 6
    assert codes.Value("NOT_ENOUGH_REPLICAS_AFTER_APPEND") == 20
    assert codes.Value("KAFKA_STORAGE_ERROR") == 56
    assert codes.Value("FENCED_LEADER_EPOCH") == 74
    assert codes.Value("UNKNOWN_LEADER_EPOCH") == 75
    assert codes.Value("NOT_COORDINATOR") == 16
    assert codes.Value("GROUP_ID_NOT_FOUND") == 69
    assert codes.Value("GROUP_SUBSCRIBED_TO_TOPIC") == 86


def test_services_are_complete() -> None:
    services = minibroker_pb2.DESCRIPTOR.services_by_name
    assert set(services["Broker"].methods_by_name) == {
        "Produce",
        "ProduceSession",
        "Fetch",
        "FetchSession",
        "OffsetsForLeaderEpoch",
        "ListOffsets",
        "Metadata",
        "InitProducerId",
        "ListGroups",
        "DescribeGroups",
        "DeleteRecords",
        "DeleteGroups",
        "DeleteGroupOffsets",
        "FetchGroupOffsets",
        "CommitGroupOffsets",
        "FindCoordinator",
        "AddPartitionsToTxn",
        "AddOffsetsToTxn",
        "TxnOffsetCommit",
        "EndTxn",
    }
    assert set(services["Control"].methods_by_name) == {
        "LeaderAndIsr",
        "UpdateMetadata",
        "StopReplica",
        "ControlledShutdown",
        "WriteTxnMarkers",
    }
