"""The gRPC door's side of :class:`~broker.security.acl_authorizer.AclAuthorizer`: who a
call comes from, and the cluster actions (docs/security.md).

A call's principal is its TLS certificate's (:func:`proto.transport.tls.peer_principal`,
``User:CN=...``), ``User:ANONYMOUS`` without one; its host is the peer's address. Topic
and group checks answer with Kafka's per-partition codes in the services; the cluster
actions (LeaderAndIsr, UpdateMetadata, StopReplica, ControlledShutdown, a replica's fetch)
abort the call with gRPC PERMISSION_DENIED (Kafka's CLUSTER_AUTHORIZATION_FAILED), one log
line each. With ACLs they need ClusterAction on the Cluster; without, on a TLS broker, a
principal in ``super.users``; on a PLAINTEXT broker without ACLs every call is allowed, as
Kafka's PLAINTEXT listener without an authorizer allows it. On a TLS broker a request that
speaks for a broker (a replica fetch's ``replica_id``, a ControlledShutdown's
``broker_id``) must come from that broker's certificate
(:func:`proto.transport.tls.broker_principal`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol, TypeVar

import grpc

from broker.request_handlers import denied_topics
from broker.security.acl_authorizer import ANONYMOUS_SESSION, AclAuthorizer, Session, host_of
from proto.process.event_log import log_event
from proto.transport.tls import ANONYMOUS_PRINCIPAL, broker_principal, peer_principal
from proto.zk.acl_bindings import AclOperation, ResourceType

__all__ = ["GrpcAuthorizer"]

logger = logging.getLogger(__name__)


class _Group(Protocol):
    @property
    def group_id(self) -> str: ...


G = TypeVar("G", bound=_Group)


class GrpcAuthorizer:
    """Decides the calls of one broker's gRPC services (see the module docstring)."""

    def __init__(self, acls: AclAuthorizer) -> None:
        self.acls = acls

    @classmethod
    def open(cls, broker_id: int) -> GrpcAuthorizer:
        """One that allows everything (a PLAINTEXT broker without ACLs, in tests)."""
        return cls(AclAuthorizer(broker_id, None, enabled=False))

    def session(self, context: grpc.aio.ServicerContext[object, object]) -> Session:
        if not self.acls.enabled:
            return ANONYMOUS_SESSION  # nothing will ask who it is
        principal = peer_principal(context.auth_context()) or ANONYMOUS_PRINCIPAL
        return Session(principal, host_of(context.peer() or ""))

    def denied(self, session: Session, operation: AclOperation, topics: set[str]) -> set[str]:
        """The topics ``session`` may not ``operation``."""
        return denied_topics(self.acls, session, operation, topics)

    def replica_or_denied(self, session: Session, topics: set[str]) -> set[str]:
        """Kafka's OffsetsForLeaderEpoch check: a broker (ClusterAction) may ask of every
        topic, anyone else of those it may Describe."""
        if self.acls.authorize(
            session, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, log_denied=False
        ):
            return set()
        return self.denied(session, AclOperation.DESCRIBE, topics)

    def describable_groups(self, session: Session, groups: Iterable[G]) -> list[G]:
        """Kafka's ListGroups: every group with Describe on the Cluster, else those the
        session may Describe (unlogged: a filter)."""
        acls = self.acls
        if acls.authorize(session, AclOperation.DESCRIBE, ResourceType.CLUSTER, log_denied=False):
            return list(groups)
        return [
            g
            for g in groups
            if acls.authorize(
                session, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id, log_denied=False
            )
        ]

    async def authorize_cluster_action(
        self,
        context: grpc.aio.ServicerContext[object, object],
        rpc: str,
        *,
        as_broker: int | None = None,
    ) -> None:
        """Return if the caller may send ``rpc`` (as broker ``as_broker``, when the request
        speaks for one); otherwise abort the call with PERMISSION_DENIED."""
        acls = self.acls
        if not acls.enabled and not acls.tls_enabled:
            return
        principal = peer_principal(context.auth_context())
        host = host_of(context.peer() or "")
        if acls.tls_enabled and principal is None:
            problem = "no client certificate"
        elif not acls.authorize_cluster_action(principal or ANONYMOUS_PRINCIPAL, host):
            problem = (
                f"principal {principal or ANONYMOUS_PRINCIPAL} may not ClusterAction the Cluster"
                if acls.enabled
                else f"principal {principal} is not a broker (super.users)"
            )
        elif (
            acls.tls_enabled and as_broker is not None and principal != broker_principal(as_broker)
        ):
            problem = f"principal {principal} may not speak for broker {as_broker}"
        else:
            return
        log_event(
            logger,
            logging.WARNING,
            "authorizer",
            "acl_denied" if acls.enabled else "cluster_action_denied",
            broker=acls.broker_id,
            rpc=rpc,
            principal=principal or ANONYMOUS_PRINCIPAL,
            operation="ClusterAction",
            resource="Cluster:kafka-cluster",
            peer=context.peer(),
            reason=problem,
        )
        await context.abort(
            grpc.StatusCode.PERMISSION_DENIED, f"CLUSTER_AUTHORIZATION_FAILED: {rpc}: {problem}"
        )
