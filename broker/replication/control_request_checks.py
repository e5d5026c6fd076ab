"""Whether a broker may believe a control request (LeaderAndIsr, UpdateMetadata, StopReplica),
as pure functions over the request and what ZooKeeper holds.

The controller is the only writer of controller epochs, leaders and leader epochs, and it
writes them to ZooKeeper *before* it tells a broker (docs/zookeeper.md, docs/replication.md). So
a request may name an epoch ZooKeeper already holds, or an older one, but never a newer one: a
request that claims more than ZooKeeper holds did not come from the controller, and believing it
would let one forged request refuse the real controller (an ``UpdateMetadata`` at controller
epoch 2^31-1), hijack a leadership (a ``LeaderAndIsr`` at leader epoch 2^31-1) or delete
healthy replicas (a ``StopReplica(delete_partition=true)``). The replica manager reads
ZooKeeper (after a ``sync``, so that the controller's fresh writes are visible) and asks
these functions; they return a :class:`Refusal` or None.

=========================  ====================================================  ==========
request field              believed when                                         else
=========================  ====================================================  ==========
``broker_epoch``           it is this broker's epoch or newer (KIP-380); -1      STALE_BROKER
                           (unknown) only with the upgrade setting               _EPOCH
                           ``control.request.unknown.broker.epoch.enable``
``controller_epoch``       not older than the newest one seen, and not newer    STALE_CONTRO
                           than ``/controller_epoch``                            LLER_EPOCH
LeaderAndIsr partition     its state znode exists; leader epoch <= the znode's;  per partition
                           at the znode's epoch, the znode's leader
UpdateMetadata partition   as LeaderAndIsr (an epoch older than the znode's:     dropped
                           the znode's leader is cached); ``-2`` (deleting)      per
                           only for a topic deleted or under                     partition
                           ``/admin/delete_topics``
UpdateMetadata partition   equal to the assignment in ``/brokers/topics/<t>``;   ZooKeeper's
``replicas``,              offline: exactly the replicas whose broker is not     (refused at
``offline_replicas``       registered in ``/brokers/ids``                        the znode's
                                                                                 epoch only)
UpdateMetadata broker      its endpoints are its ``/brokers/ids/<id>``           the
                           registration's                                        registration
                                                                                 or dropped
UpdateMetadata             the broker ``/controller`` names                      /controller's
``controller_id``                                                                (or -1)
LeaderAndIsr               registered at these endpoints in ``/brokers/ids``     the
``live_leaders``                                                                 registration
                                                                                 or dropped
StopReplica partition      leader epoch <= the znode's and not older than this   per partition
                           replica's (KIP-570); ``-2`` (topic deletion) only
                           for a topic deleted or under ``/admin/delete_topics``;
                           ``delete_partition`` only for a topic going away or a
                           replica no longer assigned here (reassignment); without
                           it, not for a replica the state znode names leader or
                           in the ISR (of a partition with a leader)
=========================  ====================================================  ==========

These checks stop forged requests that name impossible epochs. A well-formed request that
repeats what ZooKeeper holds can still be forged by anyone who can read ZooKeeper: that is
what authenticated control requests are for (mutual TLS with ``super.users``:
:mod:`broker.grpc_listener.authorizer`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proto.topic_partition import TopicPartition
from proto.wire.minibroker_pb2 import ErrorCode
from proto.zk.znodes import LEADER_DURING_DELETE, BrokerInfo, BrokerRegistration, PartitionState

__all__ = [
    "EPOCH_DURING_DELETE",
    "NO_EPOCH",
    "UNKNOWN_BROKER_EPOCH",
    "Refusal",
    "StopReplicaFacts",
    "broker_epoch_refusal",
    "controller_epoch_refusal",
    "leader_and_isr_refusal",
    "stop_replica_refusal",
    "update_metadata_controller_refusal",
    "update_metadata_endpoint_refusal",
    "update_metadata_leader_refusal",
    "update_metadata_replicas_refusal",
]

UNKNOWN_BROKER_EPOCH = -1
"""A control request's ``broker_epoch`` when the sender does not know it (Kafka < 2.2)."""
EPOCH_DURING_DELETE = -2
"""StopReplica's leader epoch for a topic being deleted (Kafka's ``EpochDuringDelete``)."""
NO_EPOCH = -1
"""StopReplica's leader epoch when the controller knows none (Kafka's ``NoEpoch``)."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request (or one partition of it) is not believed."""

    code: int
    message: str


def broker_epoch_refusal(
    request_epoch: int, own_epoch: int, *, accept_unknown: bool
) -> Refusal | None:
    """KIP-380: a request for an earlier incarnation of this broker is stale.

    Kafka skips the check for ``-1``; here ``-1`` is refused unless the upgrade setting
    allows it, since with it any sender could skip the check.
    """
    if request_epoch == UNKNOWN_BROKER_EPOCH:
        if accept_unknown:
            return None
        return Refusal(
            ErrorCode.STALE_BROKER_EPOCH,
            "broker epoch -1 (unknown) refused: the controller always names the broker "
            "epoch; set control.request.unknown.broker.epoch.enable=true only while "
            "upgrading from a controller that does not",
        )
    if request_epoch < own_epoch:
        return Refusal(
            ErrorCode.STALE_BROKER_EPOCH,
            f"request for broker epoch {request_epoch}, this broker is at epoch {own_epoch} "
            "(it restarted since)",
        )
    return None


def controller_epoch_refusal(
    request_epoch: int, seen_epoch: int, zookeeper_epoch: int | None
) -> Refusal | None:
    """A request from an older controller is stale; one from a controller newer than
    ``/controller_epoch`` cannot exist. ``zookeeper_epoch`` must have been read (after a
    sync) whenever ``request_epoch > seen_epoch``; None means no controller was elected."""
    if request_epoch < seen_epoch:
        return Refusal(
            ErrorCode.STALE_CONTROLLER_EPOCH,
            f"request from controller epoch {request_epoch}, this broker has seen epoch "
            f"{seen_epoch}",
        )
    if request_epoch > seen_epoch and (zookeeper_epoch is None or request_epoch > zookeeper_epoch):
        return Refusal(
            ErrorCode.STALE_CONTROLLER_EPOCH,
            f"request claims controller epoch {request_epoch}, but /controller_epoch in "
            f"ZooKeeper is {zookeeper_epoch}: not from the elected controller",
        )
    return None


def leader_and_isr_refusal(
    tp: TopicPartition,
    leader: int,
    leader_epoch: int,
    zookeeper_state: PartitionState | None,
) -> Refusal | None:
    """A LeaderAndIsr partition state is believed only as far as its state znode goes."""
    if zookeeper_state is None:
        return Refusal(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"{tp}: no state znode in ZooKeeper, so no controller decided this leadership",
        )
    if leader_epoch > zookeeper_state.leader_epoch:
        return Refusal(
            ErrorCode.INVALID_REQUEST,
            f"{tp}: leader epoch {leader_epoch} is beyond the {zookeeper_state.leader_epoch} "
            "in ZooKeeper: not from the controller",
        )
    if leader_epoch == zookeeper_state.leader_epoch and leader != zookeeper_state.leader:
        return Refusal(
            ErrorCode.INVALID_REQUEST,
            f"{tp}: leader {leader} at epoch {leader_epoch}, but ZooKeeper names leader "
            f"{zookeeper_state.leader} at that epoch: not from the controller",
        )
    return None


@dataclass(frozen=True, slots=True)
class StopReplicaFacts:
    """What ZooKeeper and this broker hold for a partition named in a StopReplica."""

    assignment: Sequence[int] | None
    """The partition's replicas in ``/brokers/topics/<t>``; None: no such topic or
    partition there (deleted)."""
    marked_for_deletion: bool
    """``/admin/delete_topics/<t>`` exists."""
    state: PartitionState | None
    """The state znode, if any."""
    local_leader_epoch: int | None
    """The leader epoch this broker's replica is at; None if it hosts none."""


def stop_replica_refusal(
    broker_id: int,
    tp: TopicPartition,
    leader_epoch: int,
    delete_partition: bool,
    facts: StopReplicaFacts,
) -> Refusal | None:
    """Believe a StopReplica partition only if ZooKeeper agrees the replica should stop."""
    topic_going = facts.assignment is None or facts.marked_for_deletion
    if leader_epoch == EPOCH_DURING_DELETE:
        if topic_going:
            return None
        return Refusal(
            ErrorCode.INVALID_REQUEST,
            f"{tp}: StopReplica for a topic deletion, but ZooKeeper shows topic "
            f"{tp.topic!r} neither deleted nor under /admin/delete_topics",
        )
    if facts.state is not None and leader_epoch > facts.state.leader_epoch:
        return Refusal(
            ErrorCode.INVALID_REQUEST,
            f"{tp}: leader epoch {leader_epoch} is beyond the {facts.state.leader_epoch} in "
            "ZooKeeper: not from the controller",
        )
    if (
        leader_epoch != NO_EPOCH
        and facts.local_leader_epoch is not None
        and leader_epoch < facts.local_leader_epoch
    ):
        # KIP-570. Kafka also refuses an equal epoch; the controlled shutdown here stops a
        # follower that was already out of the ISR at the epoch it has, so equal is accepted.
        return Refusal(
            ErrorCode.FENCED_LEADER_EPOCH,
            f"{tp}: leader epoch {leader_epoch} is older than this replica's "
            f"{facts.local_leader_epoch}",
        )
    if (
        not delete_partition
        and not topic_going
        and facts.state is not None
        and facts.state.leader >= 0
        and (facts.state.leader == broker_id or broker_id in facts.state.isr)
        and facts.assignment is not None
        and broker_id in facts.assignment
    ):
        # The controller stops a replica without deleting it only in a controlled shutdown,
        # after it wrote a state znode in which the broker neither leads nor is in the ISR
        # (Kafka's OfflineReplica). Stopping one ZooKeeper says serves would take it offline
        # while every reader of ZooKeeper still sees it leading or in sync.
        role = "leader" if facts.state.leader == broker_id else "in the ISR"
        return Refusal(
            ErrorCode.INVALID_REQUEST,
            f"{tp}: refusing to stop the replica: ZooKeeper has broker {broker_id} {role} "
            f"(leader {facts.state.leader}, ISR {list(facts.state.isr)}, leader epoch "
            f"{facts.state.leader_epoch}), so it must keep serving it",
        )
    if delete_partition and not topic_going:
        assert facts.assignment is not None
        if broker_id in facts.assignment:
            return Refusal(
                ErrorCode.INVALID_REQUEST,
                f"{tp}: refusing to delete the replica: ZooKeeper still assigns it to broker "
                f"{broker_id} (replicas {list(facts.assignment)}) and the topic is not being "
                "deleted",
            )
    return None


def update_metadata_leader_refusal(
    tp: TopicPartition,
    leader: int,
    leader_epoch: int,
    zookeeper_state: PartitionState | None,
    *,
    marked_for_deletion: bool,
) -> Refusal | None:
    """An UpdateMetadata partition's leader is believed only as ZooKeeper names it: at the
    state znode's epoch, the znode's leader; never beyond that epoch. (At an older epoch the
    request is merely late: the caller caches the znode's newer leader instead.) The
    deletion marker ``-2`` is believed only for a topic that is going."""
    if leader == LEADER_DURING_DELETE:
        if zookeeper_state is None or marked_for_deletion:
            return None
        return Refusal(
            ErrorCode.INVALID_REQUEST,
            f"{tp}: marked deleted, but ZooKeeper shows topic {tp.topic!r} neither deleted "
            "nor under /admin/delete_topics",
        )
    if zookeeper_state is None:
        return Refusal(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"{tp}: leader {leader}, but no state znode in ZooKeeper: no controller decided it",
        )
    return leader_and_isr_refusal(tp, leader, leader_epoch, zookeeper_state)


def update_metadata_endpoint_refusal(
    endpoint: BrokerInfo, registration: BrokerRegistration | None
) -> Refusal | None:
    """An UpdateMetadata broker is believed only at the endpoints it registered in
    ``/brokers/ids/<id>``: the controller copies them from there, so anything else (or a
    broker that is not registered) did not come from it."""
    if registration is None:
        return Refusal(
            ErrorCode.INVALID_REQUEST,
            f"broker {endpoint.broker_id} at {endpoint.host}:{endpoint.port} is not "
            "registered in ZooKeeper",
        )
    named = (endpoint.host, endpoint.port, endpoint.kafka_endpoint)
    registered = (registration.host, registration.port, registration.kafka_endpoint)
    if named != registered:
        return Refusal(
            ErrorCode.INVALID_REQUEST,
            f"broker {endpoint.broker_id}'s endpoints {_endpoints(*named)} differ from its "
            f"registration in ZooKeeper, {_endpoints(*registered)}",
        )
    return None


def update_metadata_controller_refusal(
    controller_id: int, zookeeper_controller: int | None
) -> Refusal | None:
    """An UpdateMetadata's ``controller_id`` is believed only if ``/controller`` names that
    broker (None: no controller is elected): a controller sends only while it holds the
    znode, so a request naming another broker is forged or from a controller that resigned."""
    if controller_id == zookeeper_controller:
        return None
    named = "no controller" if zookeeper_controller is None else f"broker {zookeeper_controller}"
    return Refusal(
        ErrorCode.INVALID_REQUEST,
        f"controller id {controller_id}, but /controller in ZooKeeper names {named}",
    )


def update_metadata_replicas_refusal(
    tp: TopicPartition,
    replicas: Sequence[int],
    offline_replicas: Sequence[int],
    assignment: Sequence[int] | None,
) -> Refusal | None:
    """An UpdateMetadata partition's replicas are believed only as ``/brokers/topics/<t>``
    assigns them (the controller writes an assignment before it sends it), and its offline
    replicas only among them. Which assigned replicas are offline is the controller's to
    say, not ZooKeeper's: a replica on a failed log dir of a registered broker is offline
    (Kafka's controller counts it so), and a broker whose registration just went is still
    online to a controller that has not yet handled its loss, so comparing with the
    registrations would refuse the real controller's requests whenever brokers come and go."""
    if assignment is None:
        return Refusal(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"{tp}: replicas {list(replicas)}, but ZooKeeper assigns no such partition",
        )
    if list(replicas) != list(assignment):
        return Refusal(
            ErrorCode.INVALID_REQUEST,
            f"{tp}: replicas {list(replicas)}, but ZooKeeper assigns {list(assignment)}",
        )
    strangers = sorted(r for r in offline_replicas if r not in assignment)
    if strangers:
        return Refusal(
            ErrorCode.INVALID_REQUEST,
            f"{tp}: offline replicas {strangers} are not replicas of it "
            f"(ZooKeeper assigns {list(assignment)})",
        )
    return None


def _endpoints(host: str, port: int, kafka_endpoint: tuple[str, int] | None) -> str:
    kafka = "none" if kafka_endpoint is None else f"{kafka_endpoint[0]}:{kafka_endpoint[1]}"
    return f"gRPC {host}:{port}, Kafka {kafka}"
