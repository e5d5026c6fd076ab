"""ACL bindings as Kafka 2.8 names and stores them (``org.apache.kafka.common.acl`` and
``resource``; ``kafka.security.authorizer.AclEntry``): resource patterns, access control
entries, the filters of DescribeAcls and DeleteAcls, and the JSON of an ACL znode.

Pure data and codecs: the ZooKeeper operations are :mod:`proto.zk.acl_store`, the
decisions the broker's authorizer makes are :mod:`broker.security.acl_matching`
(docs/security.md). The wire codes are Kafka's (``ResourceType.code``,
``PatternType.code``, ``AclOperation.code``, ``AclPermissionType.code``); the names are
those of the znodes and of ``kafka-acls`` (``Topic``, ``Prefixed``, ``DescribeConfigs``,
``Allow``).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Self

from proto.zk.znodes import ZkDataError

__all__ = [
    "CLUSTER_NAME",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AccessControlEntry",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "EntryFilter",
    "PatternFilter",
    "PatternType",
    "Permission",
    "ResourcePattern",
    "ResourceType",
    "decode_acls",
    "encode_acls",
    "parse_principal",
]

WILDCARD = "*"
"""``ResourcePattern.WILDCARD_RESOURCE`` and ``AclEntry.WildcardHost``."""
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"
"""The one ``Cluster`` resource's name (Kafka's ``Resource.CLUSTER_NAME``)."""


class _Named(enum.IntEnum):
    """A Kafka enum: its wire code is the int, :attr:`title` the znode's and CLI's name."""

    @property
    def title(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def parse(cls, text: str) -> Self:
        """By name in any case, with or without underscores (Kafka's ``fromString``)."""
        wanted = text.replace("_", "").replace("-", "").lower()
        for member in cls:
            if member.name.replace("_", "").lower() == wanted:
                return member
        raise ValueError(f"unknown {cls.__name__} {text!r}")


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Named):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class Permission(_Named):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset(
        AclOperation[n]
        for n in [
            "READ",
            "WRITE",
            "CREATE",
            "DESCRIBE",
            "DELETE",
            "ALTER",
            "DESCRIBE_CONFIGS",
            "ALTER_CONFIGS",
        ]
    ),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}),
    ResourceType.CLUSTER: frozenset(
        AclOperation[n]
        for n in [
            "CREATE",
            "CLUSTER_ACTION",
            "DESCRIBE_CONFIGS",
            "ALTER_CONFIGS",
            "IDEMPOTENT_WRITE",
            "ALTER",
            "DESCRIBE",
        ]
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
}
"""``AclEntry.supportedOperations`` (``All`` goes with every type)."""


def parse_principal(text: str) -> str:
    """``Type:name`` checked (Kafka's ``SecurityUtils.parseKafkaPrincipal``)."""
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise ValueError(f"principal {text!r} is not Type:name (e.g. User:alice)")
    return text


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    """What ACLs apply to: a resource type, a name (``*`` for every one with LITERAL) and
    whether the name is the resource's (LITERAL) or a prefix of it (PREFIXED)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        return f"{self.resource_type.title}:{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    """Who (``User:alice``, ``User:*``) may or may not do what from which host (``*``)."""

    principal: str
    host: str
    operation: AclOperation
    permission: Permission

    def __str__(self) -> str:
        return (
            f"(principal={self.principal}, host={self.host}, "
            f"operation={self.operation.name}, permissionType={self.permission.name})"
        )


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: an entry on a resource pattern."""

    pattern: ResourcePattern
    entry: AccessControlEntry

    def problem(self) -> str | None:
        """Why Kafka refuses to create it (``AuthorizerUtils.validateAclBinding`` and
        ``AclEntry.supportedOperations``), None if it may be."""
        p, e = self.pattern, self.entry
        if p.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            return f"invalid resource type {p.resource_type.name}"
        if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return f"invalid pattern type {p.pattern_type.name}"
        if not p.name:
            return "the resource name must not be empty"
        if p.resource_type is ResourceType.CLUSTER and p.name != CLUSTER_NAME:
            return f"the Cluster resource is named {CLUSTER_NAME}"
        if e.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            return f"invalid operation {e.operation.name}"
        if e.permission not in (Permission.ALLOW, Permission.DENY):
            return f"invalid permission type {e.permission.name}"
        if e.operation is not AclOperation.ALL and e.operation not in _SUPPORTED_OPERATIONS.get(
            p.resource_type, frozenset()
        ):
            return f"operation {e.operation.title} does not apply to {p.resource_type.title}"
        try:
            parse_principal(e.principal)
        except ValueError as err:
            return str(err)
        if not e.host:
            return "the host must not be empty (use * for any)"
        return None


@dataclass(frozen=True, slots=True)
class PatternFilter:
    """Kafka's ``ResourcePatternFilter``: ANY type matches every type, a None name every
    name; pattern ANY matches LITERAL and PREFIXED patterns of the name; MATCH matches the
    patterns that would apply to a resource of that name (the literal name, the literal
    ``*``, and every prefix of it)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    def matches(self, pattern: ResourcePattern) -> bool:
        if (
            self.resource_type is not ResourceType.ANY
            and self.resource_type != pattern.resource_type
        ):
            return False
        if (
            self.pattern_type not in (PatternType.ANY, PatternType.MATCH)
            and self.pattern_type != pattern.pattern_type
        ):
            return False
        if self.name is None:
            return True
        if self.pattern_type is not PatternType.MATCH:
            return self.name == pattern.name
        if pattern.pattern_type is PatternType.LITERAL:
            return pattern.name in (self.name, WILDCARD)
        return pattern.pattern_type is PatternType.PREFIXED and self.name.startswith(pattern.name)

    def exact_patterns(self) -> list[ResourcePattern]:
        """The patterns this filter names outright (Kafka's ``matchesAtMostOne``): so a
        delete finds them in ZooKeeper even before this broker's cache has them."""
        if (
            self.name is None
            or self.resource_type is ResourceType.ANY
            or self.pattern_type is PatternType.MATCH
        ):
            return []
        if self.pattern_type is PatternType.ANY:
            kinds = [PatternType.LITERAL, PatternType.PREFIXED]
        else:
            kinds = [self.pattern_type]
        return [ResourcePattern(self.resource_type, self.name, kind) for kind in kinds]


@dataclass(frozen=True, slots=True)
class EntryFilter:
    """Kafka's ``AccessControlEntryFilter``: None (principal, host) and ANY match all."""

    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: Permission = Permission.ANY

    def matches(self, entry: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == entry.principal)
            and (self.host is None or self.host == entry.host)
            and (self.operation is AclOperation.ANY or self.operation == entry.operation)
            and (self.permission is Permission.ANY or self.permission == entry.permission)
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A filter of DescribeAcls and DeleteAcls, as the Kafka protocol carries it."""

    pattern: PatternFilter = PatternFilter()
    entry: EntryFilter = EntryFilter()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)


def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    """An ACL znode: ``{"version":1,"acls":[{"principal":...,"permissionType":"Allow",
    "operation":"Write","host":"*"}]}`` (``AclEntry.toJsonCompatibleMap``)."""
    acls = [
        {
            "principal": e.principal,
            "permissionType": e.permission.title,
            "operation": e.operation.title,
            "host": e.host,
        }
        for e in sorted(set(entries))
    ]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_acls(path: str, data: bytes) -> frozenset[AccessControlEntry]:
    """The entries of an ACL znode (``AclEntry.fromBytes``); empty data: none. ZkDataError
    naming ``path`` if it is not version 1 of that JSON."""
    if not data:
        return frozenset()
    try:
        tree = json.loads(data)
        if tree.get("version") != 1:
            raise ValueError(f"unsupported version {tree.get('version')!r}")
        return frozenset(
            AccessControlEntry(
                parse_principal(str(item["principal"])),
                str(item["host"]),
                AclOperation.parse(str(item["operation"])),
                Permission.parse(str(item["permissionType"])),
            )
            for item in tree["acls"]
        )
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise ZkDataError(f"{path}: not an ACL znode: {err}") from None
