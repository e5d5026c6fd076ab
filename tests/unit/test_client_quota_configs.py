"""Client quota entities, their znodes and the checks of AlterClientQuotas and
DescribeClientQuotas, as Kafka 2.8's ``ZkAdminManager`` makes them."""

from __future__ import annotations

import pytest

from proto.zk.client_quota_configs import (
    DEFAULT_ENTITY,
    FilterComponent,
    QuotaEntity,
    QuotaRequestError,
    apply_quota_ops,
    desanitize,
    filter_entities,
    quota_values,
    sanitize,
)
from proto.zk.znodes import (
    ZkDataError,
    decode_config_change,
    encode_config_change,
    encode_config_entity_path,
)


@pytest.mark.parametrize(
    ("name", "sanitized"),
    [
        ("app-1_x.y", "app-1_x.y"),
        ("a/b", "a%2Fb"),
        ("star*", "star%2A"),
        ("two words", "two%20words"),
        ("tilde~", "tilde%7E"),
        ("CN=alice,O=x", "CN%3Dalice%2CO%3Dx"),
        ("é", "%C3%A9"),
    ],
)
def test_names_are_sanitized_as_kafkas_sanitizer_does(name: str, sanitized: str) -> None:
    assert sanitize(name) == sanitized
    assert desanitize(sanitized) == name


def test_an_entity_has_kafkas_znode_and_change_path() -> None:
    assert QuotaEntity(None, "a%2Fb").path == "/config/clients/a%2Fb"
    assert QuotaEntity("alice", None).path == "/config/users/alice"
    both = QuotaEntity("alice", DEFAULT_ENTITY)
    assert both.path == "/config/users/alice/clients/<default>"
    assert encode_config_change(encode_config_entity_path(both.config_type, both.entity_name)) == (
        b'{"version":2,"entity_path":"users/alice/clients/<default>"}'
    )
    assert decode_config_change(b'{"version":2,"entity_path":"clients/<default>"}') == (
        "clients",
        "<default>",
    )


@pytest.mark.parametrize(
    "entity_path",
    ["clients/a/b", "clients/..", "users/u/clients", "users/u/x/c", "clients/a b", "clients/"],
)
def test_a_change_naming_an_impossible_quota_entity_is_refused(entity_path: str) -> None:
    with pytest.raises(ZkDataError):
        decode_config_change(b'{"version":2,"entity_path":"%s"}' % entity_path.encode())


def test_entities_come_from_the_protocols_parts() -> None:
    entity = QuotaEntity.of([("user", None), ("client-id", "my app")])
    assert entity == QuotaEntity(DEFAULT_ENTITY, "my%20app")
    assert entity.parts() == [("user", None), ("client-id", "my app")]
    assert entity.describe() == "the default user-principal, client-id 'my app'"


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ([], "Invalid empty client quota entity"),
        ([("client-id", "")], "Empty client-id not supported"),
        ([("group", "x")], "Unhandled client quota entity type: group"),
        ([("ip", "1.2.3.4")], "IP quotas"),
    ],
)
def test_entities_kafka_refuses(parts: list[tuple[str, str | None]], message: str) -> None:
    with pytest.raises(QuotaRequestError, match=message) as e:
        QuotaEntity.of(parts)
    assert e.value.code == 42


def test_ops_set_and_remove_with_kafkas_types() -> None:
    current = {"consumer_byte_rate": "5", "SCRAM-SHA-256": "kept"}
    updated = apply_quota_ops(
        current,
        [
            ("producer_byte_rate", 1024.0000001),
            ("request_percentage", 12.5),
            ("consumer_byte_rate", None),
        ],
    )
    assert updated == {
        "producer_byte_rate": "1024",
        "request_percentage": "12.5",
        "SCRAM-SHA-256": "kept",
    }
    assert apply_quota_ops(updated, [("nothing_set", None)]) == updated


@pytest.mark.parametrize(
    ("op", "message"),
    [
        (("producer_byte_rate", 10.5), "must be a LONG value"),
        (("retention.ms", 1.0), "Invalid configuration key retention.ms"),
        (("consumer_byte_rate", 0.0), "must be a positive number"),
        (("request_percentage", float("nan")), "must be a positive number"),
    ],
)
def test_ops_kafka_refuses(op: tuple[str, float], message: str) -> None:
    with pytest.raises(QuotaRequestError, match=message):
        apply_quota_ops({}, [op])


def test_quota_values_leave_out_other_configs_and_garbage() -> None:
    assert quota_values(
        {"producer_byte_rate": "10", "request_percentage": "x", "SCRAM-SHA-512": "s"}
    ) == {"producer_byte_rate": 10.0}


ENTITIES = {
    QuotaEntity(None, "c"): {"producer_byte_rate": 1.0},
    QuotaEntity(None, DEFAULT_ENTITY): {"producer_byte_rate": 2.0},
    QuotaEntity("u", None): {"producer_byte_rate": 3.0},
    QuotaEntity("u", "c"): {"producer_byte_rate": 4.0},
    QuotaEntity(DEFAULT_ENTITY, None): {"producer_byte_rate": 5.0},
    QuotaEntity("v", None): {},
}


def _found(components: list[FilterComponent], strict: bool) -> set[QuotaEntity]:
    return set(filter_entities(ENTITIES, components, strict))


def test_filters_match_as_kafkas_describe_client_quotas() -> None:
    exact_c = FilterComponent("client-id", 0, "c")
    assert _found([exact_c], strict=True) == {QuotaEntity(None, "c")}
    assert _found([exact_c], strict=False) == {QuotaEntity(None, "c"), QuotaEntity("u", "c")}
    assert _found([FilterComponent("client-id", 1)], strict=True) == {
        QuotaEntity(None, DEFAULT_ENTITY)
    }
    assert _found([FilterComponent("user", 2)], strict=True) == {
        QuotaEntity("u", None),
        QuotaEntity(DEFAULT_ENTITY, None),
    }
    assert _found([], strict=False) == {e for e, v in ENTITIES.items() if v}
    assert _found([], strict=True) == set()


@pytest.mark.parametrize(
    ("components", "code", "message"),
    [
        ([FilterComponent("user", 2), FilterComponent("user", 1)], 42, "Duplicate user"),
        ([FilterComponent("", 2)], 42, "empty filter component"),
        ([FilterComponent("group", 2)], 35, "Custom entity type 'group' not supported"),
        ([FilterComponent("user", 7)], 42, "Unexpected match type: 7"),
    ],
)
def test_filters_kafka_refuses(components: list[FilterComponent], code: int, message: str) -> None:
    with pytest.raises(QuotaRequestError, match=message) as e:
        filter_entities({}, components, strict=False)
    assert e.value.code == code
