"""Who may act as a broker: Kafka's ``ClusterAction`` on the ``Cluster`` resource, decided by
``super.users`` over the principals TLS authenticates.

With TLS (``ssl.keystore.location`` set) every peer's principal comes from its certificate
(:func:`proto.transport.tls.peer_principal`). Only a principal in ``super.users`` may send
the control requests (LeaderAndIsr, UpdateMetadata, StopReplica, ControlledShutdown) and fetch as a
replica; and it may only speak for itself: a replica fetch's ``replica_id`` and a
ControlledShutdown's ``broker_id`` must be the broker its certificate names
(:func:`proto.transport.tls.broker_principal`). Anyone else is refused with gRPC PERMISSION_DENIED
(Kafka's CLUSTER_AUTHORIZATION_FAILED), one log line each. Produce, consumer fetches,
Metadata, ListGroups, DescribeGroups and the rest stay open to every authenticated client,
as with Kafka's authorizer and ``allow.everyone.if.no.acl.found=true``; there are no topic
or group ACLs.

Without TLS there is no principal and every request is allowed: PLAINTEXT trusts its
network, as Kafka's PLAINTEXT listener without an authorizer does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import grpc

from proto.process.event_log import log_event
from proto.transport.tls import broker_principal, peer_principal

__all__ = ["ClusterAuthorizer"]

logger = logging.getLogger(__name__)


class ClusterAuthorizer:
    """Decides the cluster actions of one broker's requests (see the module docstring)."""

    def __init__(self, broker_id: int, *, enabled: bool, super_users: Iterable[str] = ()) -> None:
        self._broker_id = broker_id
        self._enabled = enabled
        self._super_users = frozenset(super_users)

    @property
    def enabled(self) -> bool:
        return self._enabled

    async def authorize_cluster_action(
        self,
        context: grpc.aio.ServicerContext[object, object],
        rpc: str,
        *,
        as_broker: int | None = None,
    ) -> None:
        """Return if the caller may send ``rpc`` (as broker ``as_broker``, when the request
        speaks for one); otherwise abort the call with PERMISSION_DENIED."""
        if not self._enabled:
            return
        principal = peer_principal(context.auth_context())
        if principal is None:
            problem = "no client certificate"
        elif principal not in self._super_users:
            problem = f"principal {principal} is not a broker (super.users)"
        elif as_broker is not None and principal != broker_principal(as_broker):
            problem = f"principal {principal} may not speak for broker {as_broker}"
        else:
            return
        log_event(
            logger,
            logging.WARNING,
            "authorizer",
            "cluster_action_denied",
            broker=self._broker_id,
            rpc=rpc,
            principal=principal,
            peer=context.peer(),
            reason=problem,
        )
        await context.abort(
            grpc.StatusCode.PERMISSION_DENIED, f"CLUSTER_AUTHORIZATION_FAILED: {rpc}: {problem}"
        )
