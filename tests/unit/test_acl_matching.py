"""broker/security/acl_matching.py: Kafka 2.8 AclAuthorizer's decisions, without servers."""

from __future__ import annotations

from broker.security.acl_matching import AclSnapshot, implied_by
from proto.zk.acl_bindings import (
    AccessControlEntry,
    AclOperation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)

ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
READ, WRITE, DESCRIBE = AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE
ALLOW, DENY = Permission.ALLOW, Permission.DENY


def entry(
    permission: Permission = ALLOW,
    operation: AclOperation = WRITE,
    principal: str = ALICE,
    host: str = "*",
) -> AccessControlEntry:
    return AccessControlEntry(principal, host, operation, permission)


def literal(name: str, rtype: ResourceType = TOPIC) -> ResourcePattern:
    return ResourcePattern(rtype, name, PatternType.LITERAL)


def prefixed(name: str, rtype: ResourceType = TOPIC) -> ResourcePattern:
    return ResourcePattern(rtype, name, PatternType.PREFIXED)


def snapshot(
    acls: dict[ResourcePattern, list[AccessControlEntry]], **kwargs: object
) -> AclSnapshot:
    return AclSnapshot({p: frozenset(e) for p, e in acls.items()}, **kwargs)  # type: ignore[arg-type]


def test_an_allow_grants_only_its_principal_operation_and_resource() -> None:
    acls = snapshot({literal("orders"): [entry()]})
    assert acls.authorize(ALICE, HOST, WRITE, TOPIC, "orders")
    assert not acls.authorize(BOB, HOST, WRITE, TOPIC, "orders")
    assert not acls.authorize(ALICE, HOST, READ, TOPIC, "orders")
    assert not acls.authorize(ALICE, HOST, WRITE, TOPIC, "orders2")
    assert not acls.authorize(ALICE, HOST, WRITE, GROUP, "orders")


def test_deny_beats_allow_whatever_the_pattern() -> None:
    acls = snapshot(
        {
            literal("*"): [entry(ALLOW, AclOperation.ALL)],
            prefixed("secret-"): [entry(DENY, WRITE)],
            literal("orders"): [entry(ALLOW, WRITE), entry(DENY, WRITE)],
        }
    )
    assert not acls.authorize(ALICE, HOST, WRITE, TOPIC, "orders")
    assert not acls.authorize(ALICE, HOST, WRITE, TOPIC, "secret-plans")
    assert acls.authorize(ALICE, HOST, READ, TOPIC, "secret-plans")  # deny names Write only
    assert acls.authorize(ALICE, HOST, WRITE, TOPIC, "public")


def test_a_deny_of_all_operations_denies_each() -> None:
    acls = snapshot({literal("t"): [entry(ALLOW, READ), entry(DENY, AclOperation.ALL)]})
    assert not acls.authorize(ALICE, HOST, READ, TOPIC, "t")


def test_a_prefixed_pattern_covers_every_name_it_starts() -> None:
    acls = snapshot({prefixed("team-a."): [entry()]})
    assert acls.authorize(ALICE, HOST, WRITE, TOPIC, "team-a.orders")
    assert acls.authorize(ALICE, HOST, WRITE, TOPIC, "team-a.")
    assert not acls.authorize(ALICE, HOST, WRITE, TOPIC, "team-b.orders")
    assert not acls.authorize(ALICE, HOST, WRITE, TOPIC, "team-a")


def test_the_wildcard_resource_and_principal() -> None:
    acls = snapshot({literal("*"): [entry(principal="User:*")]})
    assert acls.authorize(BOB, HOST, WRITE, TOPIC, "anything")
    # A literal pattern named "*" is the wildcard; a prefixed "*" is a plain prefix.
    acls = snapshot({prefixed("*"): [entry()]})
    assert not acls.authorize(ALICE, HOST, WRITE, TOPIC, "anything")


def test_implied_operations_allow_describe_but_never_widen_a_deny() -> None:
    assert implied_by(DESCRIBE) == {
        DESCRIBE,
        READ,
        WRITE,
        AclOperation.DELETE,
        AclOperation.ALTER,
    }
    assert implied_by(AclOperation.DESCRIBE_CONFIGS) == {
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    }
    for op in (READ, WRITE, AclOperation.DELETE, AclOperation.ALTER):
        assert snapshot({literal("t"): [entry(ALLOW, op)]}).authorize(
            ALICE, HOST, DESCRIBE, TOPIC, "t"
        )
    acls = snapshot({literal("t"): [entry(ALLOW, AclOperation.ALTER_CONFIGS)]})
    assert acls.authorize(ALICE, HOST, AclOperation.DESCRIBE_CONFIGS, TOPIC, "t")
    assert not acls.authorize(ALICE, HOST, AclOperation.ALTER, TOPIC, "t")
    # Describe does not imply Read; a Deny of Read does not deny Describe.
    assert not snapshot({literal("t"): [entry(ALLOW, DESCRIBE)]}).authorize(
        ALICE, HOST, READ, TOPIC, "t"
    )
    acls = snapshot({literal("t"): [entry(ALLOW, AclOperation.ALL), entry(DENY, READ)]})
    assert acls.authorize(ALICE, HOST, DESCRIBE, TOPIC, "t")
    assert not acls.authorize(ALICE, HOST, READ, TOPIC, "t")


def test_hosts_must_match_unless_the_entry_says_any() -> None:
    acls = snapshot({literal("t"): [entry(host="10.0.0.1"), entry(DENY, host="10.0.0.9")]})
    assert acls.authorize(ALICE, "10.0.0.1", WRITE, TOPIC, "t")
    assert not acls.authorize(ALICE, "10.0.0.2", WRITE, TOPIC, "t")
    acls = snapshot({literal("t"): [entry(), entry(DENY, host="10.0.0.9")]})
    assert acls.authorize(ALICE, "10.0.0.2", WRITE, TOPIC, "t")
    assert not acls.authorize(ALICE, "10.0.0.9", WRITE, TOPIC, "t")


def test_super_users_pass_even_a_deny() -> None:
    acls = snapshot(
        {literal("t"): [entry(DENY, AclOperation.ALL, principal="User:*")]},
        super_users={"User:admin"},
    )
    assert acls.authorize("User:admin", HOST, WRITE, TOPIC, "t")
    assert acls.authorize("User:admin", HOST, AclOperation.CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    assert not acls.authorize(ALICE, HOST, WRITE, TOPIC, "t")


def test_no_acl_for_a_resource_closes_it_unless_allow_everyone_if_no_acl_found() -> None:
    acls = snapshot({literal("other"): [entry()]})
    assert not acls.authorize(ALICE, HOST, WRITE, TOPIC, "t")
    opened = snapshot(
        {literal("other"): [entry(principal=BOB)]}, allow_everyone_if_no_acl_found=True
    )
    assert opened.authorize(ALICE, HOST, WRITE, TOPIC, "t")
    # A resource with ACLs is decided by them, whatever the flag.
    assert not opened.authorize(ALICE, HOST, WRITE, TOPIC, "other")


def test_authorize_any_finds_an_allow_no_deny_covers() -> None:
    acls = snapshot({literal("t"): [entry()]})
    assert acls.authorize_any(ALICE, HOST, WRITE, TOPIC)
    assert not acls.authorize_any(BOB, HOST, WRITE, TOPIC)
    denied = snapshot({literal("t"): [entry()], prefixed("t"): [entry(DENY)]})
    assert not denied.authorize_any(ALICE, HOST, WRITE, TOPIC)
    everything_denied = snapshot({prefixed("a"): [entry()], literal("*"): [entry(DENY)]})
    assert not everything_denied.authorize_any(ALICE, HOST, WRITE, TOPIC)
    assert snapshot({prefixed("a"): [entry()]}).authorize_any(ALICE, HOST, WRITE, TOPIC)
