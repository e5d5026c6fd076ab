"""Kafka error codes map to exceptions whose flags drive the client's retry loops."""

from __future__ import annotations

import pytest

from proto import errors
from proto.wire.minibroker_pb2 import ErrorCode


def test_none_is_not_an_error() -> None:
    assert errors.for_code(ErrorCode.NONE) is None


@pytest.mark.parametrize(
    ("code", "cls", "retriable", "invalid_metadata"),
    [
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, errors.NotLeaderOrFollowerError, True, True),
        (ErrorCode.FENCED_LEADER_EPOCH, errors.FencedLeaderEpochError, True, True),
        (ErrorCode.UNKNOWN_LEADER_EPOCH, errors.UnknownLeaderEpochError, True, False),
        (ErrorCode.NOT_ENOUGH_REPLICAS, errors.NotEnoughReplicasError, True, False),
        (ErrorCode.REQUEST_TIMED_OUT, errors.RequestTimedOutError, True, False),
        (ErrorCode.MESSAGE_TOO_LARGE, errors.MessageTooLargeError, False, False),
        (ErrorCode.OFFSET_OUT_OF_RANGE, errors.OffsetOutOfRangeError, False, False),
        (ErrorCode.INVALID_TOPIC, errors.InvalidTopicError, False, False),
        (ErrorCode.OUT_OF_ORDER_SEQUENCE, errors.OutOfOrderSequenceError, False, False),
        (ErrorCode.INVALID_PRODUCER_EPOCH, errors.InvalidProducerEpochError, False, False),
    ],
)
def test_codes_map_to_classes_with_kafkas_flags(
    code: int, cls: type[errors.BrokerResponseError], retriable: bool, invalid_metadata: bool
) -> None:
    err = errors.for_code(code, "details")
    assert isinstance(err, cls)
    assert err.code == code
    assert err.retriable is retriable
    assert err.invalid_metadata is invalid_metadata
    assert str(err) == f"{ErrorCode.Name(ErrorCode.ValueType(code))}: details"


def test_code_without_a_class_keeps_its_code_and_flags() -> None:
    err = errors.for_code(ErrorCode.NOT_CONTROLLER)
    assert type(err) is errors.BrokerResponseError
    assert err.code == ErrorCode.NOT_CONTROLLER
    assert err.retriable
    assert str(err).startswith("NOT_CONTROLLER: ")
    # A class's own flag is not changed by a generic instance.
    assert errors.BrokerResponseError.retriable is False


def test_unknown_code_from_a_newer_peer_is_named_by_number() -> None:
    err = errors.for_code(999)
    assert err is not None
    assert err.code_name == "ERROR_999"


def test_default_message_describes_the_code() -> None:
    assert "min.insync.replicas" in str(errors.NotEnoughReplicasError())
