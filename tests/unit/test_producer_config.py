"""ProducerConfig: Kafka's defaults and the combinations Kafka refuses."""

from __future__ import annotations

import pytest

from client.metadata import ClientError
from client.producer import ACKS_ALL, ProducerConfig, parse_acks


def test_defaults_are_kafkas() -> None:
    config = ProducerConfig()
    assert config.acks == ACKS_ALL == -1
    assert (config.batch_size, config.linger_ms) == (262144, 0)
    assert config.retries == 2**31 - 1
    assert (config.retry_backoff_ms, config.request_timeout_ms) == (100, 30000)
    assert config.delivery_timeout_ms == 120000
    assert config.max_request_size == 1048576
    assert config.enable_idempotence is True
    assert config.idempotent
    assert config.max_in_flight_requests_per_connection == config.in_flight_per_partition == 5


@pytest.mark.parametrize(
    ("text", "acks"), [("all", -1), ("ALL", -1), ("-1", -1), ("1", 1), ("0", 0), (1, 1)]
)
def test_parse_acks(text: str | int, acks: int) -> None:
    assert parse_acks(text) == acks


@pytest.mark.parametrize("text", ["2", "", "leader", "-2"])
def test_parse_acks_refuses_anything_else(text: str) -> None:
    with pytest.raises(ClientError, match="acks must be 0, 1 or all"):
        parse_acks(text)


@pytest.mark.parametrize("acks", [0, 1])
def test_idempotence_defaults_off_with_acks_0_or_1(acks: int) -> None:
    # Kafka 3's rule: the default idempotence gives way to a conflicting acks.
    config = ProducerConfig(acks=acks)
    assert config.enable_idempotence is False


def test_idempotence_defaults_off_without_retries() -> None:
    assert ProducerConfig(retries=0).enable_idempotence is False


@pytest.mark.parametrize("acks", [0, 1])
def test_explicit_idempotence_requires_acks_all(acks: int) -> None:
    with pytest.raises(
        ClientError, match=rf"enable_idempotence requires acks=all \(-1\), got acks={acks}"
    ):
        ProducerConfig(acks=acks, enable_idempotence=True)


def test_explicit_idempotence_requires_retries() -> None:
    with pytest.raises(ClientError, match="requires retries > 0"):
        ProducerConfig(retries=0, enable_idempotence=True)


def test_idempotence_can_be_turned_off_with_acks_all() -> None:
    config = ProducerConfig(enable_idempotence=False)
    assert (config.acks, config.idempotent) == (-1, False)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("acks", 2),
        ("acks", True),
        ("batch_size", -1),
        ("linger_ms", -5),
        ("retries", -1),
        ("request_timeout_ms", 0),
        ("max_request_size", 10),
        ("buffer_memory", 0),
        ("linger_ms", 1.5),
        ("max_in_flight_requests_per_connection", 0),
        ("max_in_flight_requests_per_connection", 6),
    ],
)
def test_bad_values_are_refused_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ClientError, match=field):
        ProducerConfig(**{field: value})  # type: ignore[arg-type]


def test_delivery_timeout_must_cover_linger_and_request_timeout() -> None:
    with pytest.raises(
        ClientError,
        match=r"delivery_timeout_ms \(1000\) must be at least "
        r"linger_ms \+ request_timeout_ms \(1005\)",
    ):
        ProducerConfig(delivery_timeout_ms=1000, request_timeout_ms=1000, linger_ms=5)
    ProducerConfig(delivery_timeout_ms=1005, request_timeout_ms=1000)


def test_without_idempotence_a_partition_has_one_batch_in_flight() -> None:
    config = ProducerConfig(acks=1, max_in_flight_requests_per_connection=8)
    assert (config.idempotent, config.in_flight_per_partition) == (False, 1)


@pytest.mark.parametrize(
    "settings",
    [
        {"transactional_id": ""},
        {"transactional_id": "app", "acks": 1},
        {"transactional_id": "app", "enable_idempotence": False},
        {"transactional_id": "app", "transaction_timeout_ms": 0},
    ],
)
def test_a_transactional_producer_needs_an_id_idempotence_and_a_timeout(
    settings: dict[str, object],
) -> None:
    with pytest.raises(ClientError):
        ProducerConfig(**settings)  # type: ignore[arg-type]
    assert ProducerConfig(transactional_id="app").idempotent
