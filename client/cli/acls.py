"""``minibroker acls`` (Kafka's ``kafka-acls.sh`` with ``--authorizer-properties
zookeeper.connect=...``): add, remove and list ACLs in ZooKeeper, where every broker with
``authorizer.class.name`` reads them (docs/security.md)::

    minibroker acls --add --allow-principal User:alice --operation Write --topic orders
    minibroker acls --add --allow-principal User:alice --producer --topic 'orders-' \\
        --resource-pattern-type prefixed
    minibroker acls --add --allow-principal User:bob --consumer --topic orders --group billing
    minibroker acls --add --deny-principal User:mallory --operation All --topic '*'
    minibroker acls --list --topic orders --resource-pattern-type match
    minibroker acls --remove --allow-principal User:alice --operation Write --topic orders

Written through :mod:`proto.zk.acl_store`, the code of the Kafka listener's CreateAcls,
DescribeAcls and DeleteAcls, with the change notifications the brokers follow. On a
cluster whose znodes carry the secure ACL the digest comes from ``--command-config``, as
for ``minibroker configs``. ``--remove`` does not ask for confirmation (Kafka's does,
unless ``--force``).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

from kazoo.exceptions import KazooException

from client.cli.common import (
    COMMAND_CONFIG_ENV,
    add_zookeeper_option,
    run_async,
    zookeeper_credentials,
)
from client.metadata import ClientError
from proto.errors import UsageError
from proto.zk.acl_bindings import (
    CLUSTER_NAME,
    WILDCARD,
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
)
from proto.zk.acl_store import create_acls, delete_acls, describe_acls
from proto.zk.kafka_zk_client import KafkaZkClient
from proto.zk.session import ZkConnectionError, ZkError, ZkNoChrootError

__all__ = ["add_parser"]

_PATTERN_TYPES = ("literal", "prefixed", "match", "any")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "acls",
        help="add, remove and list ACLs (with authorizer.class.name on the brokers)",
        description="Add, remove and list ACLs in ZooKeeper (as kafka-acls.sh).",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    for option, what in (
        ("--allow-principal", "principal allowed (User:alice)"),
        ("--deny-principal", "principal denied"),
        ("--allow-host", "host the allowed principals may come from (default: *)"),
        ("--deny-host", "host the denied principals are refused from (default: *)"),
        (
            "--operation",
            "Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
            "DescribeConfigs, AlterConfigs, IdempotentWrite or All (default: All)",
        ),
        ("--topic", "topic (or prefix, or * for every topic)"),
        ("--group", "consumer group"),
        ("--transactional-id", "transactional id"),
    ):
        parser.add_argument(option, action="append", default=[], metavar="NAME", help=what)
    parser.add_argument("--cluster", action="store_true", help="the Cluster resource")
    parser.add_argument(
        "--resource-pattern-type",
        choices=_PATTERN_TYPES,
        type=str.lower,
        default=None,
        help="literal (the default for --add and --remove), prefixed, match or any (the "
        "default for --list)",
    )
    parser.add_argument(
        "--producer", action="store_true", help="Write, Describe and Create on the topics"
    )
    parser.add_argument(
        "--consumer", action="store_true", help="Read and Describe on the topics, Read on the group"
    )
    parser.add_argument(
        "--idempotent", action="store_true", help="with --producer: IdempotentWrite on the Cluster"
    )
    parser.add_argument(
        "--principal", action="append", default=[], help="with --list: only this principal's"
    )
    parser.add_argument("--force", action="store_true", help="accepted for kafka-acls' sake")
    parser.add_argument(
        "--authorizer-properties",
        action="append",
        default=[],
        metavar="zookeeper.connect=HOST:PORT",
        help="as kafka-acls: zookeeper.connect (same as --zookeeper)",
    )
    parser.add_argument(
        "--command-config",
        type=Path,
        default=None,
        metavar="FILE",
        help="properties with zookeeper.auth.digest.file (and zookeeper.set.acl=true): the "
        f"digest of a cluster whose znodes carry the secure ACL (default: ${COMMAND_CONFIG_ENV})",
    )
    add_zookeeper_option(parser, "the ACLs")
    parser.set_defaults(run=lambda a: run_async(_run(a)))


def _resources(args: argparse.Namespace, pattern_type: PatternType) -> list[PatternFilter]:
    found = [PatternFilter(ResourceType.TOPIC, t, pattern_type) for t in args.topic]
    found += [PatternFilter(ResourceType.GROUP, g, pattern_type) for g in args.group]
    found += [
        PatternFilter(ResourceType.TRANSACTIONAL_ID, t, pattern_type) for t in args.transactional_id
    ]
    if args.cluster or (args.producer and args.idempotent):
        found.append(PatternFilter(ResourceType.CLUSTER, CLUSTER_NAME, pattern_type))
    return found


def _operations(args: argparse.Namespace, resource_type: ResourceType) -> list[AclOperation]:
    """The operations of ``--operation`` or, with ``--producer``/``--consumer``, those
    kafka-acls grants on that type of resource (AclCommand's ``getProducerResourceFilter``)."""
    ops: list[AclOperation] = []
    if args.producer:
        ops += {
            ResourceType.TOPIC: [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE],
            ResourceType.TRANSACTIONAL_ID: [AclOperation.WRITE, AclOperation.DESCRIBE],
            ResourceType.CLUSTER: [AclOperation.IDEMPOTENT_WRITE],
        }.get(resource_type, [])
    if args.consumer:
        ops += {
            ResourceType.TOPIC: [AclOperation.READ, AclOperation.DESCRIBE],
            ResourceType.GROUP: [AclOperation.READ],
        }.get(resource_type, [])
    if args.producer or args.consumer:
        return list(dict.fromkeys(ops))
    try:
        return [AclOperation.parse(o) for o in args.operation] or [AclOperation.ALL]
    except ValueError as err:
        raise UsageError(str(err)) from None


def _entries(args: argparse.Namespace, resource_type: ResourceType) -> Iterator[AccessControlEntry]:
    for permission, principals, hosts in (
        (Permission.ALLOW, args.allow_principal, args.allow_host),
        (Permission.DENY, args.deny_principal, args.deny_host),
    ):
        for principal in principals:
            for host in hosts or [WILDCARD]:
                for op in _operations(args, resource_type):
                    yield AccessControlEntry(principal, host, op, permission)


def _check(args: argparse.Namespace) -> PatternType:
    if args.producer and args.consumer:
        raise UsageError("--producer and --consumer go in separate commands")
    if args.consumer and not args.group and (args.add or args.remove):
        raise UsageError("--consumer needs --group")
    if (args.producer or args.consumer) and args.operation:
        raise UsageError("--operation does not go with --producer or --consumer")
    default = "any" if args.list else "literal"
    pattern_type = PatternType.parse(args.resource_pattern_type or default)
    if args.add and pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError("--add takes --resource-pattern-type literal or prefixed")
    for prop in args.authorizer_properties:
        key, sep, value = prop.partition("=")
        if not sep or key.strip() != "zookeeper.connect":
            raise UsageError(f"--authorizer-properties {prop}: only zookeeper.connect=HOST:PORT")
        args.zookeeper = value.strip()
    if not (args.topic or args.group or args.transactional_id or args.cluster) and not args.list:
        raise UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    return pattern_type


def _pattern_text(p: ResourcePattern) -> str:
    return (
        f"ResourcePattern(resourceType={p.resource_type.name}, name={p.name}, "
        f"patternType={p.pattern_type.name})"
    )


async def _connect(args: argparse.Namespace) -> KafkaZkClient:
    try:
        zk = KafkaZkClient(
            args.zookeeper,
            broker_id=-1,
            create_chroot=False,
            credentials=zookeeper_credentials(args),
        )
    except ValueError as err:
        raise ClientError(f"bad ZooKeeper connect string {args.zookeeper!r}: {err}") from None
    try:
        await zk.start()
    except ZkNoChrootError:
        raise ClientError(f"ZooKeeper at {args.zookeeper}: {zk.chroot} does not exist") from None
    except ZkConnectionError:
        raise ClientError(
            f"cannot connect to ZooKeeper at {args.zookeeper} (is it running? check --zookeeper)"
        ) from None
    return zk


async def _list(zk: KafkaZkClient, filters: list[AclBindingFilter]) -> None:
    found: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for f in filters:
        for b in await describe_acls(zk, f):
            found.setdefault(b.pattern, [])
            if b.entry not in found[b.pattern]:
                found[b.pattern].append(b.entry)
    for pattern, entries in found.items():
        print(f"Current ACLs for resource `{_pattern_text(pattern)}`: ")
        for e in entries:
            print(f" \t{e} ")
        print()


async def _run(args: argparse.Namespace) -> int:
    pattern_type = _check(args)
    resources = _resources(args, pattern_type)
    zk = await _connect(args)
    try:
        if args.list:
            principals = args.principal or [None]
            filters = [
                AclBindingFilter(r, EntryFilter(principal=p))
                for r in resources or [PatternFilter()]
                for p in principals
            ]
            await _list(zk, filters)
            return 0
        if args.add:
            bindings = [
                AclBinding(ResourcePattern(r.resource_type, r.name or "", pattern_type), e)
                for r in resources
                for e in _entries(args, r.resource_type)
            ]
            if not bindings:
                raise UsageError("--add needs --allow-principal or --deny-principal")
            for r in resources:
                pattern = ResourcePattern(r.resource_type, r.name or "", pattern_type)
                print(f"Adding ACLs for resource `{_pattern_text(pattern)}`: ")
                for b in bindings:
                    if b.pattern == pattern:
                        print(f" \t{b.entry} ")
                print()
            problems = await create_acls(zk, bindings)
            refused = {p for p in problems if p is not None}
            if refused:
                raise ClientError("; ".join(sorted(refused)))
            await _list(zk, [AclBindingFilter(r) for r in resources])
            return 0
        filters = []
        for r in resources:
            entries = list(_entries(args, r.resource_type))
            if not entries:  # no principal named: every ACL of the resource
                filters.append(AclBindingFilter(r))
            filters += [
                AclBindingFilter(r, EntryFilter(e.principal, e.host, e.operation, e.permission))
                for e in entries
            ]
        deleted = await delete_acls(zk, filters)
        for b in {b: None for group in deleted for b in group}:
            print(f"Removed ACL {b.entry} for resource `{_pattern_text(b.pattern)}`")
        return 0
    except (ZkError, KazooException) as err:
        raise ClientError(
            f"ZooKeeper at {args.zookeeper} failed: {type(err).__name__} {err} (writing ACLs "
            "on a cluster with zookeeper.set.acl needs its digest: --command-config)"
        ) from None
    finally:
        await zk.close()
