"""proto/zk/acl_bindings.py and the znode formats of proto/zk/acl_store.py: Kafka's names,
JSON and filters."""

from __future__ import annotations

import json

import pytest

from proto.zk.acl_bindings import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    EntryFilter,
    PatternFilter,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    decode_acls,
    encode_acls,
)
from proto.zk.acl_store import acl_path, decode_acl_change, encode_acl_change
from proto.zk.znodes import ZkDataError

WRITE = AccessControlEntry("User:alice", "*", AclOperation.WRITE, Permission.ALLOW)


def test_the_znode_json_is_kafkas() -> None:
    data = encode_acls([WRITE])
    assert json.loads(data) == {
        "version": 1,
        "acls": [
            {
                "principal": "User:alice",
                "permissionType": "Allow",
                "operation": "Write",
                "host": "*",
            }
        ],
    }
    assert decode_acls("/p", data) == {WRITE}
    # As Kafka writes them (other key order, spaces) and with its other names.
    kafka = (
        b'{"version": 1, "acls": [{"host": "h", "permissionType": "Deny", '
        b'"operation": "DescribeConfigs", "principal": "User:bob"}, {"host": "*", '
        b'"permissionType": "Allow", "operation": "IdempotentWrite", "principal": "User:*"}]}'
    )
    assert decode_acls("/p", kafka) == {
        AccessControlEntry("User:bob", "h", AclOperation.DESCRIBE_CONFIGS, Permission.DENY),
        AccessControlEntry("User:*", "*", AclOperation.IDEMPOTENT_WRITE, Permission.ALLOW),
    }
    for bad in (b"{", b'{"version": 2, "acls": []}', b'{"version": 1, "acls": [{"host": "*"}]}'):
        with pytest.raises(ZkDataError, match="/p"):
            decode_acls("/p", bad)


def test_paths_and_change_notifications_are_kafkas() -> None:
    assert acl_path(ResourcePattern(ResourceType.TOPIC, "t")) == "/kafka-acl/Topic/t"
    assert (
        acl_path(ResourcePattern(ResourceType.TRANSACTIONAL_ID, "x", PatternType.PREFIXED))
        == "/kafka-acl-extended/prefixed/TransactionalId/x"
    )
    literal = ResourcePattern(ResourceType.GROUP, "g:1")
    assert encode_acl_change(literal) == ("/kafka-acl-changes", b"GROUP:g:1")
    assert decode_acl_change(*encode_acl_change(literal)) == literal
    prefixed = ResourcePattern(ResourceType.TOPIC, "a", PatternType.PREFIXED)
    parent, data = encode_acl_change(prefixed)
    assert parent == "/kafka-acl-extended-changes"
    assert json.loads(data) == {
        "version": 1,
        "resourceType": "TOPIC",
        "name": "a",
        "patternType": "PREFIXED",
    }
    assert decode_acl_change(parent, data) == prefixed
    with pytest.raises(ValueError, match="znode"):
        acl_path(ResourcePattern(ResourceType.TOPIC, "a/b"))


def test_a_binding_kafka_would_refuse_names_its_problem() -> None:
    topic = ResourcePattern(ResourceType.TOPIC, "t")
    assert AclBinding(topic, WRITE).problem() is None
    group_write = AclBinding(ResourcePattern(ResourceType.GROUP, "g"), WRITE)
    assert "does not apply" in (group_write.problem() or "")
    cluster = AclBinding(ResourcePattern(ResourceType.CLUSTER, "other"), WRITE)
    assert "kafka-cluster" in (cluster.problem() or "")
    matching = AclBinding(ResourcePattern(ResourceType.TOPIC, "t", PatternType.MATCH), WRITE)
    assert matching.problem() is not None
    nobody = AclBinding(topic, AccessControlEntry("alice", "*", AclOperation.ALL, Permission.ALLOW))
    assert "Type:name" in (nobody.problem() or "")


def test_filters_match_as_kafkas_do() -> None:
    lit = ResourcePattern(ResourceType.TOPIC, "orders")
    star = ResourcePattern(ResourceType.TOPIC, "*")
    pre = ResourcePattern(ResourceType.TOPIC, "ord", PatternType.PREFIXED)
    other = ResourcePattern(ResourceType.TOPIC, "x", PatternType.PREFIXED)
    match = PatternFilter(ResourceType.TOPIC, "orders", PatternType.MATCH)
    assert [p for p in (lit, star, pre, other) if match.matches(p)] == [lit, star, pre]
    any_ = PatternFilter(ResourceType.TOPIC, "orders", PatternType.ANY)
    assert [p for p in (lit, star, pre) if any_.matches(p)] == [lit]
    assert PatternFilter().matches(other)
    assert not PatternFilter(ResourceType.GROUP).matches(lit)
    assert any_.exact_patterns() == [
        lit,
        ResourcePattern(ResourceType.TOPIC, "orders", PatternType.PREFIXED),
    ]
    assert match.exact_patterns() == []
    f = AclBindingFilter(
        PatternFilter(), EntryFilter(principal="User:alice", permission=Permission.ALLOW)
    )
    assert f.matches(AclBinding(lit, WRITE))
    assert not f.matches(
        AclBinding(lit, AccessControlEntry("User:alice", "*", AclOperation.WRITE, Permission.DENY))
    )


def test_names_parse_in_any_spelling() -> None:
    assert AclOperation.parse("DescribeConfigs") is AclOperation.DESCRIBE_CONFIGS
    assert AclOperation.parse("describe_configs") is AclOperation.DESCRIBE_CONFIGS
    assert ResourceType.parse("TransactionalId") is ResourceType.TRANSACTIONAL_ID
    assert AclOperation.CLUSTER_ACTION.title == "ClusterAction"
    with pytest.raises(ValueError, match="maybe"):
        Permission.parse("maybe")
