"""The Kafka listener's ACL APIs and cluster-level checks (docs/security.md).

CreateAcls, DescribeAcls and DeleteAcls (Kafka 2.8's ``KafkaApis.handle*Acls`` over
``AclAuthorizer``) read and write the ACL znodes through :mod:`proto.zk.acl_store`, the
code ``minibroker acls`` runs too; what this broker wrote is in its own cache at once, the
other brokers follow the change notifications. DescribeAcls needs Describe on the Cluster,
the others Alter; without ``authorizer.class.name`` they answer SECURITY_DISABLED, as
Kafka's brokers without an authorizer do.

:func:`cluster_checked` puts the APIs that act on the whole cluster (ElectLeaders,
partition reassignments, DescribeLogDirs, client quotas) behind their operation on the
Cluster, answering CLUSTER_AUTHORIZATION_FAILED in the response's error codes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from broker.kafka_listener.messages import Tree
from broker.kafka_listener.wire_request import Answer, KafkaRequest, done, session_of
from broker.security.acl_authorizer import AclAuthorizer
from broker.zk_client import BrokerZkClient, ZkError
from proto.wire import minibroker_pb2 as pb
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
)
from proto.zk.acl_store import create_acls, delete_acls, describe_acls

__all__ = ["ACL_VERSIONS", "AclApis", "cluster_checked"]

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
ACL_VERSIONS: dict[int, tuple[int, int]] = {
    DESCRIBE_ACLS: (1, 3),
    CREATE_ACLS: (1, 3),
    DELETE_ACLS: (1, 3),
}
"""Kafka 4 has no schema of version 0 (it predates prefixed patterns, KIP-290); version 3
adds only the ``User`` resource type, which is refused here as an unknown one."""

SECURITY_DISABLED = 54
ALTER_CLIENT_QUOTAS = 49
UNKNOWN_SERVER_ERROR = -1
_CLUSTER_OPERATIONS: dict[int, AclOperation] = {
    35: AclOperation.DESCRIBE,  # DescribeLogDirs
    43: AclOperation.ALTER,  # ElectLeaders
    45: AclOperation.ALTER,  # AlterPartitionReassignments
    46: AclOperation.DESCRIBE,  # ListPartitionReassignments
    48: AclOperation.DESCRIBE_CONFIGS,  # DescribeClientQuotas
    ALTER_CLIENT_QUOTAS: AclOperation.ALTER_CONFIGS,
}

Handler = Callable[[KafkaRequest], Awaitable[Answer]]


def cluster_checked(
    authorizer: AclAuthorizer, handlers: Mapping[int, Handler]
) -> dict[int, Handler]:
    """``handlers`` with those of :data:`_CLUSTER_OPERATIONS` behind their ACL check."""

    def checked(api_key: int, handler: Handler) -> Handler:
        operation = _CLUSTER_OPERATIONS[api_key]

        async def stage(request: KafkaRequest) -> Answer:
            if authorizer.authorize(session_of(request), operation, ResourceType.CLUSTER):
                return await handler(request)
            refusal: Tree = {
                "error_code": pb.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": f"no {operation.title} on the Cluster",
            }
            if api_key == ALTER_CLIENT_QUOTAS:  # its errors are per entry
                entries = [
                    {
                        **refusal,
                        "entity": [
                            {"entity_type": d.entity_type, "entity_name": d.entity_name}
                            for d in e.entity
                        ],
                    }
                    for e in request.body.entries
                ]
                return done({"entries": entries})
            return done(refusal)

        return stage

    return {
        key: checked(key, h) if key in _CLUSTER_OPERATIONS else h for key, h in handlers.items()
    }


E = TypeVar("E", ResourceType, PatternType, AclOperation, Permission)


def _enum(kind: type[E], code: int) -> E:
    try:
        return kind(code)
    except ValueError:
        return kind(0)  # UNKNOWN


def _binding_filter(f: object) -> AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter as an :class:`AclBindingFilter`."""
    return AclBindingFilter(
        PatternFilter(
            _enum(ResourceType, f.resource_type_filter),  # type: ignore[attr-defined]
            f.resource_name_filter,  # type: ignore[attr-defined]
            _enum(PatternType, f.pattern_type_filter),  # type: ignore[attr-defined]
        ),
        EntryFilter(
            f.principal_filter,  # type: ignore[attr-defined]
            f.host_filter,  # type: ignore[attr-defined]
            _enum(AclOperation, f.operation),  # type: ignore[attr-defined]
            _enum(Permission, f.permission_type),  # type: ignore[attr-defined]
        ),
    )


def _filter_problem(f: AclBindingFilter) -> str | None:
    unknown = [
        what
        for what, value in (
            ("resource type", f.pattern.resource_type),
            ("pattern type", f.pattern.pattern_type),
            ("operation", f.entry.operation),
            ("permission type", f.entry.permission),
        )
        if value == 0
    ]
    return f"unknown {', '.join(unknown)}" if unknown else None


def _binding_tree(b: AclBinding) -> Tree:
    return {
        "error_code": pb.NONE,
        "error_message": None,
        "resource_type": int(b.pattern.resource_type),
        "resource_name": b.pattern.name,
        "pattern_type": int(b.pattern.pattern_type),
        "principal": b.entry.principal,
        "host": b.entry.host,
        "operation": int(b.entry.operation),
        "permission_type": int(b.entry.permission),
    }


class AclApis:
    """The ACL handlers, by API key."""

    def __init__(self, authorizer: AclAuthorizer, zk: BrokerZkClient | None) -> None:
        self.authorizer = authorizer
        self._zk = zk
        """None only with the authorizer disabled (every ACL API is SECURITY_DISABLED)."""
        self.handlers: dict[int, Handler] = {
            DESCRIBE_ACLS: self.describe_acls,
            CREATE_ACLS: self.create_acls,
            DELETE_ACLS: self.delete_acls,
        }

    @property
    def zk(self) -> BrokerZkClient:
        assert self._zk is not None, "ACL APIs with an authorizer need ZooKeeper"
        return self._zk

    def _refusal(self, request: KafkaRequest, operation: AclOperation) -> tuple[int, str] | None:
        if not self.authorizer.enabled:
            return SECURITY_DISABLED, "no authorizer is configured on the broker"
        if not self.authorizer.authorize(session_of(request), operation, ResourceType.CLUSTER):
            return pb.CLUSTER_AUTHORIZATION_FAILED, f"no {operation.title} on the Cluster"
        return None

    async def describe_acls(self, request: KafkaRequest) -> Answer:
        return self._describe_acls(request)

    async def _describe_acls(self, request: KafkaRequest) -> Tree:
        refused = self._refusal(request, AclOperation.DESCRIBE)
        f = _binding_filter(request.body)
        if refused is None and (problem := _filter_problem(f)) is not None:
            refused = pb.INVALID_REQUEST, problem
        if refused is not None:
            return {"error_code": refused[0], "error_message": refused[1], "resources": []}
        try:
            found = await describe_acls(self.zk, f)
        except ZkError as err:
            return {"error_code": UNKNOWN_SERVER_ERROR, "error_message": str(err), "resources": []}
        grouped: dict[ResourcePattern, list[AccessControlEntry]] = {}
        for b in found:
            grouped.setdefault(b.pattern, []).append(b.entry)
        return {
            "error_code": pb.NONE,
            "error_message": None,
            "resources": [
                {
                    "resource_type": int(p.resource_type),
                    "resource_name": p.name,
                    "pattern_type": int(p.pattern_type),
                    "acls": [
                        {
                            "principal": e.principal,
                            "host": e.host,
                            "operation": int(e.operation),
                            "permission_type": int(e.permission),
                        }
                        for e in entries
                    ],
                }
                for p, entries in grouped.items()
            ],
        }

    async def create_acls(self, request: KafkaRequest) -> Answer:
        return self._create_acls(request)

    async def _create_acls(self, request: KafkaRequest) -> Tree:
        creations = request.body.creations
        refused = self._refusal(request, AclOperation.ALTER)
        if refused is not None:
            code, message = refused
            return {"results": [{"error_code": code, "error_message": message} for _ in creations]}
        bindings = [
            AclBinding(
                ResourcePattern(
                    _enum(ResourceType, c.resource_type),
                    c.resource_name,
                    _enum(PatternType, c.resource_pattern_type),
                ),
                AccessControlEntry(
                    c.principal,
                    c.host,
                    _enum(AclOperation, c.operation),
                    _enum(Permission, c.permission_type),
                ),
            )
            for c in creations
        ]
        try:
            problems = await create_acls(self.zk, bindings)
        except ZkError as err:
            problems = [f"ZooKeeper: {err}"] * len(bindings)
            code = UNKNOWN_SERVER_ERROR
        else:
            code = pb.INVALID_REQUEST
        await self.authorizer.refresh(b.pattern for b in bindings)
        return {
            "results": [
                {"error_code": pb.NONE if p is None else code, "error_message": p} for p in problems
            ]
        }

    async def delete_acls(self, request: KafkaRequest) -> Answer:
        return self._delete_acls(request)

    async def _delete_acls(self, request: KafkaRequest) -> Tree:
        filters = [_binding_filter(f) for f in request.body.filters]
        refused = self._refusal(request, AclOperation.ALTER)
        if refused is not None:
            code, message = refused
            return {
                "filter_results": [
                    {"error_code": code, "error_message": message, "matching_acls": []}
                    for _ in filters
                ]
            }
        problems = [_filter_problem(f) for f in filters]
        valid = [f for f, p in zip(filters, problems, strict=True) if p is None]
        try:
            deleted = iter(await delete_acls(self.zk, valid, self.authorizer.snapshot.acls))
        except ZkError as err:
            return {
                "filter_results": [
                    {"error_code": UNKNOWN_SERVER_ERROR, "error_message": str(err)} for _ in filters
                ]
            }
        results: list[Tree] = []
        touched: list[ResourcePattern] = []
        for problem in problems:
            if problem is not None:
                results.append({"error_code": pb.INVALID_REQUEST, "error_message": problem})
                continue
            bindings = next(deleted)
            touched.extend(b.pattern for b in bindings)
            results.append(
                {
                    "error_code": pb.NONE,
                    "error_message": None,
                    "matching_acls": [_binding_tree(b) for b in bindings],
                }
            )
        await self.authorizer.refresh(touched)
        return {"filter_results": results}
