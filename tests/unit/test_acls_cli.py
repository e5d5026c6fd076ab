"""client/cli/acls.py: kafka-acls' options turned into bindings and filters, without a
cluster; and broker/security/acl_authorizer.py's host of a peer."""

from __future__ import annotations

import argparse

import pytest

from broker.security.acl_authorizer import host_of
from client.cli.acls import _check, _entries, _resources, add_parser
from proto.errors import UsageError
from proto.zk.acl_bindings import AclOperation, PatternType, Permission, ResourceType


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["acls", *argv])


def test_producer_and_consumer_grant_what_kafka_acls_grants() -> None:
    args = parse("--add", "--allow-principal", "User:a", "--producer", "--idempotent",
                 "--topic", "t", "--transactional-id", "x")  # fmt: skip
    pattern_type = _check(args)
    granted = {
        (r.resource_type, e.operation)
        for r in _resources(args, pattern_type)
        for e in _entries(args, r.resource_type)
    }
    assert granted == {
        (ResourceType.TOPIC, AclOperation.WRITE),
        (ResourceType.TOPIC, AclOperation.DESCRIBE),
        (ResourceType.TOPIC, AclOperation.CREATE),
        (ResourceType.TRANSACTIONAL_ID, AclOperation.WRITE),
        (ResourceType.TRANSACTIONAL_ID, AclOperation.DESCRIBE),
        (ResourceType.CLUSTER, AclOperation.IDEMPOTENT_WRITE),
    }
    args = parse("--add", "--allow-principal", "User:b", "--consumer", "--topic", "t",
                 "--group", "g")  # fmt: skip
    pattern_type = _check(args)
    granted = {
        (r.resource_type, e.operation)
        for r in _resources(args, pattern_type)
        for e in _entries(args, r.resource_type)
    }
    assert granted == {
        (ResourceType.TOPIC, AclOperation.READ),
        (ResourceType.TOPIC, AclOperation.DESCRIBE),
        (ResourceType.GROUP, AclOperation.READ),
    }


def test_hosts_operations_and_pattern_types_default_as_kafka_acls() -> None:
    args = parse("--add", "--deny-principal", "User:m", "--topic", "p-",
                 "--resource-pattern-type", "PREFIXED")  # fmt: skip
    assert _check(args) is PatternType.PREFIXED
    [entry] = list(_entries(args, ResourceType.TOPIC))
    assert (entry.host, entry.operation, entry.permission) == (
        "*",
        AclOperation.ALL,
        Permission.DENY,
    )
    assert _check(parse("--list")) is PatternType.ANY


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (("--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type",
          "match"), "literal or prefixed"),
        (("--add", "--allow-principal", "User:a", "--consumer", "--topic", "t"), "--group"),
        (("--add", "--allow-principal", "User:a"), "name a resource"),
        (("--list", "--authorizer-properties", "zookeeper.url=x"), "zookeeper.connect"),
    ],
)  # fmt: skip
def test_a_command_kafka_acls_refuses_is_a_usage_error(argv: tuple[str, ...], problem: str) -> None:
    with pytest.raises(UsageError, match=problem):
        _check(parse(*argv))


def test_the_authorizer_properties_name_zookeeper() -> None:
    args = parse("--list", "--authorizer-properties", "zookeeper.connect=h:2181/c")
    _check(args)
    assert args.zookeeper == "h:2181/c"


def test_the_host_of_a_peer_is_its_address() -> None:
    assert host_of("/127.0.0.1") == "127.0.0.1"
    assert host_of("ipv4:10.0.0.7:51234") == "10.0.0.7"
    assert host_of("ipv6:[::1]:51234") == "::1"
