"""The decisions of Kafka 2.8's ``AclAuthorizer`` over a snapshot of the ACLs: pure, so
every rule is tested without a server (docs/security.md).

An action (principal, host, operation, a resource by type and name) is allowed when the
principal is a super user; otherwise the ACLs that apply to the resource are its literal
pattern, the literal ``*`` of its type and every prefixed pattern of its type whose name
starts the resource's name. With none, ``allow.everyone.if.no.acl.found`` decides. With
some, a matching Deny refuses whatever Allows say; else a matching Allow is needed. An
entry matches when its principal is the caller's or ``User:*``, its host the caller's or
``*``, and its operation the one asked or ``All``; an Allow of Read, Write, Delete or Alter
also allows Describe, and one of AlterConfigs allows DescribeConfigs (a Deny is never
widened so).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from proto.zk.acl_bindings import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AccessControlEntry,
    AclOperation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)

__all__ = ["AclSnapshot", "implied_by"]

Acls = Mapping[ResourcePattern, frozenset[AccessControlEntry]]

_IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {
            AclOperation.DESCRIBE,
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.DELETE,
            AclOperation.ALTER,
        }
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset(
        {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    ),
}


def implied_by(operation: AclOperation) -> frozenset[AclOperation]:
    """The operations whose Allow allows ``operation`` (itself included; ``All`` aside)."""
    return _IMPLIED_BY.get(operation, frozenset({operation}))


def _matches(
    entry: AccessControlEntry,
    principal: str,
    host: str,
    operations: frozenset[AclOperation],
    permission: Permission,
) -> bool:
    return (
        entry.permission is permission
        and entry.principal in (principal, WILDCARD_PRINCIPAL)
        and entry.host in (host, WILDCARD)
        and (entry.operation in operations or entry.operation is AclOperation.ALL)
    )


class AclSnapshot:
    """The ACLs at one moment with the broker's ``super.users`` and
    ``allow.everyone.if.no.acl.found``; the authorizer swaps in a new one on each change,
    so a request sees one consistent set."""

    def __init__(
        self,
        acls: Acls,
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self.acls = dict(acls)
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._prefixed: dict[ResourceType, list[ResourcePattern]] = {}
        for pattern in self.acls:
            if pattern.pattern_type is PatternType.PREFIXED:
                self._prefixed.setdefault(pattern.resource_type, []).append(pattern)

    def applicable(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """Kafka's ``matchingAcls``: the entries of every pattern that covers the resource."""
        found: list[AccessControlEntry] = []
        for literal in (name, WILDCARD):
            found.extend(self.acls.get(ResourcePattern(resource_type, literal), ()))
        for pattern in self._prefixed.get(resource_type, ()):
            if name.startswith(pattern.name):
                found.extend(self.acls[pattern])
        return found

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """Kafka's ``authorizeAction`` (see the module docstring)."""
        if principal in self.super_users:
            return True
        entries = self.applicable(resource_type, name)
        if not entries:
            return self.allow_everyone_if_no_acl_found
        only = frozenset({operation})
        if any(_matches(e, principal, host, only, Permission.DENY) for e in entries):
            return False
        allowing = implied_by(operation)
        return any(_matches(e, principal, host, allowing, Permission.ALLOW) for e in entries)

    def authorize_any(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Kafka's ``authorizeByResourceType`` (KIP-679): whether some resource of the type
        may be acted on: a super user, else no Deny of the literal ``*``, else
        ``allow.everyone.if.no.acl.found``, else an Allow of a literal or prefixed pattern
        that no Deny covers (a literal Deny of the same name, or a prefixed Deny of a
        prefix of it)."""
        if principal in self.super_users:
            return True
        ops = frozenset({operation})
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allows: list[ResourcePattern] = []
        for pattern, entries in self.acls.items():
            if pattern.resource_type is not resource_type:
                continue
            for e in entries:
                if _matches(e, principal, host, ops, Permission.DENY):
                    target = (
                        deny_literal
                        if pattern.pattern_type is PatternType.LITERAL
                        else deny_prefixed
                    )
                    target.add(pattern.name)
                elif _matches(e, principal, host, ops, Permission.ALLOW):
                    allows.append(pattern)
        if WILDCARD in deny_literal:
            return False
        if self.allow_everyone_if_no_acl_found:
            return True

        def denied_by_prefix(name: str) -> bool:
            return any(name.startswith(prefix) for prefix in deny_prefixed)

        for pattern in allows:
            if pattern.pattern_type is PatternType.PREFIXED:
                if not denied_by_prefix(pattern.name):
                    return True
            elif pattern.name == WILDCARD or (
                pattern.name not in deny_literal and not denied_by_prefix(pattern.name)
            ):
                return True
        return False
