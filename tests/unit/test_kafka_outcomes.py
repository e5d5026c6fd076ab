"""What Kafka's clients report, mapped to the history's outcomes (chaos/kafka_outcomes.py):
librdkafka's serialized group metadata, delivery reports and commit errors."""

from __future__ import annotations

import struct
import sys

import confluent_kafka
import pytest

from chaos.kafka_outcomes import (
    CERTAIN_COMMIT_REFUSALS,
    GroupMetadata,
    commit_outcome,
    delivery_outcome,
    parse_group_metadata,
)

MEMBER = "rdkafka-eec6cfaf-1b17-49a9-a89b-20768e5f8c10"
little_endian = pytest.mark.skipif(
    sys.byteorder != "little", reason="librdkafka writes the generation in host byte order"
)


@little_endian
@pytest.mark.parametrize("generation", [1, 2, 3])
def test_the_bytes_of_a_live_member_give_its_generation_group_and_member_id(
    generation: int,
) -> None:
    # As confluent-kafka 2.16 (librdkafka 2.16) returned them to a member of probe-g
    # through three rebalances.
    data = (
        b"CGMDv2:" + bytes([generation, 0, 0, 0]) + b"probe-g\x00" + MEMBER.encode() + b"\x00\x01"
    )
    assert parse_group_metadata(data) == GroupMetadata("probe-g", generation, MEMBER, None)


@little_endian
def test_before_its_first_join_a_member_has_generation_minus_one_and_no_member_id() -> None:
    data = b"CGMDv2:\xff\xff\xff\xffprobe-s\x00\x00\x00inst-1\x00"
    assert parse_group_metadata(data) == GroupMetadata("probe-s", -1, "", "inst-1")


def test_a_static_member_names_its_instance_id_after_a_zero_flag() -> None:
    data = b"CGMDv2:" + struct.pack("=i", 70_000) + b"g\x00m-1\x00\x00inst-1\x00"
    assert parse_group_metadata(data) == GroupMetadata("g", 70_000, "m-1", "inst-1")


def test_a_live_consumer_s_metadata_parses() -> None:
    """librdkafka's own serializer, without a broker: a consumer that never joined."""
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": "127.0.0.1:1", "group.id": "never-joined", "log_level": 0}
    )
    try:
        md = parse_group_metadata(consumer.consumer_group_metadata())
    finally:
        consumer.close()
    assert md == GroupMetadata("never-joined", -1, "", None)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"CGMDv1:\x01\x00\x00\x00g\x00m\x00\x01",  # another version
        b"CGMDv2:\x01\x00",  # cut inside the generation
        b"CGMDv2:\x01\x00\x00\x00g",  # no NUL after the group
        b"CGMDv2:\x01\x00\x00\x00g\x00m",  # no NUL after the member
        b"CGMDv2:\x01\x00\x00\x00g\x00m\x00",  # no instance id flag
        b"CGMDv2:\x01\x00\x00\x00g\x00m\x00\x02",  # a flag that is neither
        b"CGMDv2:\x01\x00\x00\x00g\x00m\x00\x00inst",  # no NUL after the instance id
        b"CGMDv2:\x01\x00\x00\x00g\x00m\x00\x01more",  # bytes left over
    ],
)
def test_anything_else_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError, match="group metadata"):
        parse_group_metadata(data)


def test_a_delivery_report_without_error_is_ok_with_its_offset() -> None:
    assert delivery_outcome(None, 0) == "ok"
    assert delivery_outcome(None, 41) == "ok"


@pytest.mark.parametrize(
    "code",
    [
        confluent_kafka.KafkaError._MSG_TIMED_OUT,  # timed out in the queue, or in flight
        confluent_kafka.KafkaError._TRANSPORT,
        confluent_kafka.KafkaError.NOT_LEADER_FOR_PARTITION,
        confluent_kafka.KafkaError.NOT_ENOUGH_REPLICAS,  # after the retries
        confluent_kafka.KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
    ],
)
def test_a_delivery_report_with_any_error_is_info_never_fail(code: int) -> None:
    error = confluent_kafka.KafkaError(code)
    assert delivery_outcome(error, None) == "info"
    assert delivery_outcome(error, 12) == "info"  # whatever offset it names


def test_an_acknowledgement_without_an_offset_cannot_be_checked_so_it_is_info() -> None:
    assert delivery_outcome(None, None) == "info"
    assert delivery_outcome(None, confluent_kafka.OFFSET_INVALID) == "info"


def test_an_aiokafka_future_that_failed_is_info() -> None:
    from aiokafka.errors import KafkaTimeoutError, RequestTimedOutError

    assert delivery_outcome(KafkaTimeoutError(), None) == "info"
    assert delivery_outcome(RequestTimedOutError(), None) == "info"


def test_the_certain_refusals_are_kafka_s_codes_of_the_coordinator_s_checks() -> None:
    assert {
        confluent_kafka.KafkaError.ILLEGAL_GENERATION,
        confluent_kafka.KafkaError.UNKNOWN_MEMBER_ID,
        confluent_kafka.KafkaError.REBALANCE_IN_PROGRESS,
        confluent_kafka.KafkaError.FENCED_INSTANCE_ID,
    } == CERTAIN_COMMIT_REFUSALS


def test_a_commit_is_ok_without_error_fail_when_refused_and_info_otherwise() -> None:
    assert commit_outcome(None) == "ok"
    assert commit_outcome(0) == "ok"
    for code in CERTAIN_COMMIT_REFUSALS:
        assert commit_outcome(code) == "fail"
    for code in (
        confluent_kafka.KafkaError._TIMED_OUT,
        confluent_kafka.KafkaError._TRANSPORT,
        confluent_kafka.KafkaError._WAIT_COORD,
        confluent_kafka.KafkaError.NOT_COORDINATOR,
        confluent_kafka.KafkaError.COORDINATOR_NOT_AVAILABLE,
        confluent_kafka.KafkaError.REQUEST_TIMED_OUT,
        -1,
    ):
        assert commit_outcome(code) == "info", code
