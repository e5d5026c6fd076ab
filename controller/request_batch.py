"""The controller's per-event batch of Control requests (Kafka's ``ControllerBrokerRequestBatch``).

One controller event (a broker died, a topic was created, a reassignment step) changes the
state of many partitions; the brokers hear about all of it in **one request per broker and
kind**, never one per partition (an RPC costs ~0.5 ms of CPU). The
event handler adds what each broker must learn, then :meth:`ControllerBrokerRequestBatch.build`
turns it into the requests, in the order Kafka's ``sendRequestsToBrokers`` sends them:

1. ``LeaderAndIsr`` to each broker named for it: its role for those partitions, plus the
   endpoints of the leaders named (``live_leaders``) so a new follower can connect;
2. ``UpdateMetadata`` to every broker named for it: the partitions' states, every live
   broker, and each partition's offline replicas; a partition of a topic being deleted
   goes out with leader -2 (``LeaderDuringDelete``), which drops it from the cache;
3. ``StopReplica`` to each broker named for it.

A broker learns its role before anyone is told to send it produce requests, and stops a
replica only after the new leadership is out. The channel manager keeps one FIFO queue per
broker, so this order is also the order of arrival at each broker.

As in Kafka, :meth:`~ControllerBrokerRequestBatch.add_leader_and_isr` also queues
UpdateMetadata of that partition for every live broker: whoever learns a partition's
leadership from LeaderAndIsr, all other brokers must learn it too, so clients asking any
broker are sent to the new leader.

Pure request building, no I/O. Where Kafka consults its ``ControllerContext`` while adding
(the assignment, topics being deleted, live brokers), the caller passes what it knows, and the
live brokers are resolved once, at :meth:`~ControllerBrokerRequestBatch.build`: requests to
brokers that are not live are not built (Kafka drops them too). A batch is meant for one
event: make a new one per event (Kafka reuses one and checks it is empty in ``newBatch``).

Example, a partition elected after broker 3 died::

    batch = ControllerBrokerRequestBatch()
    batch.add_leader_and_isr([1, 2], tp, state, replicas=[3, 1, 2])
    batch.add_stop_replica([3], tp, delete=False, leader_epoch=state.leader_epoch)
    for broker_id, request in batch.build(controller_id, controller_epoch, live_brokers):
        ...  # LeaderAndIsr to 1 and 2, UpdateMetadata to 1 and 2; 3 is not live
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeAlias

from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.zk.znodes import LEADER_DURING_DELETE, BrokerInfo, PartitionState

__all__ = [
    "ALL_LIVE_BROKERS",
    "EPOCH_DURING_DELETE",
    "LEADER_DURING_DELETE",
    "NO_EPOCH",
    "BrokerRequest",
    "ControlRequest",
    "ControlResponse",
    "ControllerBrokerRequestBatch",
    "LiveBroker",
    "PartitionLeadership",
    "SentRequest",
    "request_kind",
]

EPOCH_DURING_DELETE = -2
"""StopReplica's ``leader_epoch`` for a topic being deleted: the broker skips the epoch check
(Kafka's ``LeaderAndIsr.EpochDuringDelete``)."""
NO_EPOCH = -1
"""StopReplica's ``leader_epoch`` when the controller knows no leadership for the partition
(Kafka's ``LeaderAndIsr.NoEpoch``)."""

ControlRequest: TypeAlias = (
    pb.LeaderAndIsrRequest | pb.UpdateMetadataRequest | pb.StopReplicaRequest
)
ControlResponse: TypeAlias = (
    pb.LeaderAndIsrResponse | pb.UpdateMetadataResponse | pb.StopReplicaResponse
)


class _AllLiveBrokers(enum.Enum):
    ALL_LIVE_BROKERS = "all live brokers"


ALL_LIVE_BROKERS = _AllLiveBrokers.ALL_LIVE_BROKERS
"""As ``broker_ids``: every broker live at :meth:`ControllerBrokerRequestBatch.build` time
(Kafka's ``controllerContext.liveOrShuttingDownBrokerIds``)."""
Recipients: TypeAlias = Iterable[int] | Literal[_AllLiveBrokers.ALL_LIVE_BROKERS]


@dataclass(frozen=True)
class LiveBroker(BrokerInfo):
    """A registered broker as the controller knows it: its endpoint and its epoch."""

    epoch: int
    """Its broker epoch: the czxid of its ``/brokers/ids/<id>`` registration (KIP-380), sent
    as ``broker_epoch`` so the broker can tell requests meant for a previous incarnation."""


class PartitionLeadership(NamedTuple):
    """What UpdateMetadata says of one partition: its state znode and its assignment."""

    state: PartitionState
    replicas: Sequence[int]
    """The assigned replicas, in assignment order."""


class BrokerRequest(NamedTuple):
    """One built request and the broker it is for."""

    broker_id: int
    request: ControlRequest


def request_kind(request: ControlRequest) -> str:
    """``LeaderAndIsr``, ``UpdateMetadata`` or ``StopReplica`` (the RPC's name)."""
    return type(request).DESCRIPTOR.name.removesuffix("Request")


@dataclass(slots=True)
class _UpdateMetadataEntry:
    leadership: PartitionLeadership
    deleting: bool


def _broker_ids(broker_ids: Iterable[int]) -> list[int]:
    # Kafka filters ``_ >= 0``: callers may pass a leader of -1 among the ids.
    return [b for b in broker_ids if b >= 0]


class ControllerBrokerRequestBatch:
    """LeaderAndIsr, UpdateMetadata and StopReplica being gathered for one controller event.

    Adding the same partition for the same broker again replaces what was added before (the
    later state is the newer one), except that ``is_new`` and ``delete`` stay set once set,
    as in Kafka: a partition created and then updated in one event is still new.
    """

    def __init__(self) -> None:
        self._leader_and_isr: dict[int, dict[TopicPartition, pb.LeaderAndIsrPartitionState]] = {}
        self._stop_replica: dict[int, dict[TopicPartition, pb.StopReplicaPartitionState]] = {}
        self._update_metadata_states: dict[TopicPartition, _UpdateMetadataEntry] = {}
        """The latest state of every partition any UpdateMetadata will carry."""
        self._update_metadata_targets: dict[int | _AllLiveBrokers, set[TopicPartition]] = {}
        """Which of those partitions each recipient gets (it may get none: the broker list
        alone is news after a broker joined or left)."""

    @property
    def is_empty(self) -> bool:
        return not (self._leader_and_isr or self._stop_replica or self._update_metadata_targets)

    def add_leader_and_isr(
        self,
        broker_ids: Iterable[int],
        tp: TopicPartition,
        state: PartitionState,
        replicas: Sequence[int],
        is_new: bool = False,
        *,
        adding_replicas: Sequence[int] = (),
        removing_replicas: Sequence[int] = (),
    ) -> None:
        """LeaderAndIsr with ``tp``'s ``state`` (as read from its state znode, zkVersion
        included) to ``broker_ids``, and UpdateMetadata of ``tp`` to every live broker.

        ``replicas`` is the full assignment in order; ``is_new`` lets the broker create an
        empty log (a partition just created); ``adding_replicas`` / ``removing_replicas``
        are a reassignment's AR and RR (controller/reassignment.py).
        """
        for broker_id in _broker_ids(broker_ids):
            states = self._leader_and_isr.setdefault(broker_id, {})
            previous = states.get(tp)
            states[tp] = pb.LeaderAndIsrPartitionState(
                topic_name=tp.topic,
                partition_index=tp.partition,
                controller_epoch=state.controller_epoch,
                leader=state.leader,
                leader_epoch=state.leader_epoch,
                isr=state.isr,
                zk_version=state.zk_version,
                replicas=replicas,
                adding_replicas=adding_replicas,
                removing_replicas=removing_replicas,
                is_new=is_new or (previous is not None and previous.is_new),
            )
        self.add_update_metadata(ALL_LIVE_BROKERS, {tp: PartitionLeadership(state, replicas)})

    def add_update_metadata(
        self,
        broker_ids: Recipients,
        partitions: Mapping[TopicPartition, PartitionLeadership] | None = None,
        *,
        deleting: bool = False,
    ) -> None:
        """UpdateMetadata with ``partitions`` to ``broker_ids`` (or :data:`ALL_LIVE_BROKERS`).

        Every UpdateMetadata carries the full list of live brokers, so with no partitions it
        still tells ``broker_ids`` who is alive. For a full update (a broker that just
        started, a new controller), pass every partition the controller knows. ``deleting``:
        the partitions belong to topics being deleted and go out with leader -2.
        """
        partitions = partitions or {}
        for tp, leadership in partitions.items():
            self._update_metadata_states[tp] = _UpdateMetadataEntry(leadership, deleting)
        targets: list[int | _AllLiveBrokers] = (
            [ALL_LIVE_BROKERS] if broker_ids is ALL_LIVE_BROKERS else list(_broker_ids(broker_ids))
        )
        for target in targets:
            self._update_metadata_targets.setdefault(target, set()).update(partitions)

    def add_stop_replica(
        self, broker_ids: Iterable[int], tp: TopicPartition, delete: bool, leader_epoch: int
    ) -> None:
        """StopReplica of ``tp`` to ``broker_ids``; with ``delete``, they delete its log.

        ``leader_epoch``: the partition's current leader epoch, :data:`EPOCH_DURING_DELETE`
        when its topic is being deleted, or :data:`NO_EPOCH` when there is none.
        """
        for broker_id in _broker_ids(broker_ids):
            states = self._stop_replica.setdefault(broker_id, {})
            previous = states.get(tp)
            states[tp] = pb.StopReplicaPartitionState(
                topic_name=tp.topic,
                partition_index=tp.partition,
                leader_epoch=leader_epoch,
                delete_partition=delete or (previous is not None and previous.delete_partition),
            )

    def build(
        self, controller_id: int, controller_epoch: int, live_brokers: Mapping[int, LiveBroker]
    ) -> list[BrokerRequest]:
        """The requests, LeaderAndIsr first, then UpdateMetadata, then StopReplica; within a
        kind by broker id. Brokers not in ``live_brokers`` get nothing. Does not change the
        batch (building twice gives the same requests)."""
        return [
            *self._build_leader_and_isr(controller_id, controller_epoch, live_brokers),
            *self._build_update_metadata(controller_id, controller_epoch, live_brokers),
            *self._build_stop_replica(controller_id, controller_epoch, live_brokers),
        ]

    def _build_leader_and_isr(
        self, controller_id: int, controller_epoch: int, live_brokers: Mapping[int, LiveBroker]
    ) -> list[BrokerRequest]:
        out = []
        for broker_id in sorted(self._leader_and_isr.keys() & live_brokers.keys()):
            states = self._leader_and_isr[broker_id]
            request = pb.LeaderAndIsrRequest(
                controller_id=controller_id,
                controller_epoch=controller_epoch,
                broker_epoch=live_brokers[broker_id].epoch,
                partition_states=states.values(),
            )
            # A leader that is not live is not named: its followers could not reach it, and
            # the broker does not start a fetcher without an endpoint (KAFKA-1647).
            for leader in sorted({s.leader for s in states.values()} & live_brokers.keys()):
                request.live_leaders.append(_endpoint(live_brokers[leader]))
            out.append(BrokerRequest(broker_id, request))
        return out

    def _build_update_metadata(
        self, controller_id: int, controller_epoch: int, live_brokers: Mapping[int, LiveBroker]
    ) -> list[BrokerRequest]:
        targets = self._update_metadata_targets
        everyone = targets.get(ALL_LIVE_BROKERS)
        recipients = live_brokers.keys() if everyone is not None else targets.keys()
        endpoints = [_endpoint(live_brokers[b]) for b in sorted(live_brokers)]
        states = {
            tp: _update_metadata_state(tp, entry, live_brokers)
            for tp, entry in self._update_metadata_states.items()
        }
        out = []
        for broker_id in sorted(b for b in recipients if isinstance(b, int) and b in live_brokers):
            wanted = targets.get(broker_id, set()) | (everyone or set())
            out.append(
                BrokerRequest(
                    broker_id,
                    pb.UpdateMetadataRequest(
                        controller_id=controller_id,
                        controller_epoch=controller_epoch,
                        broker_epoch=live_brokers[broker_id].epoch,
                        partition_states=[s for tp, s in states.items() if tp in wanted],
                        live_brokers=endpoints,
                    ),
                )
            )
        return out

    def _build_stop_replica(
        self, controller_id: int, controller_epoch: int, live_brokers: Mapping[int, LiveBroker]
    ) -> list[BrokerRequest]:
        return [
            BrokerRequest(
                broker_id,
                pb.StopReplicaRequest(
                    controller_id=controller_id,
                    controller_epoch=controller_epoch,
                    broker_epoch=live_brokers[broker_id].epoch,
                    partition_states=self._stop_replica[broker_id].values(),
                ),
            )
            for broker_id in sorted(self._stop_replica.keys() & live_brokers.keys())
        ]


def _endpoint(broker: BrokerInfo) -> pb.BrokerEndpoint:
    endpoint = pb.BrokerEndpoint(node_id=broker.broker_id, host=broker.host, port=broker.port)
    if broker.kafka_endpoint is not None:
        endpoint.kafka_host, endpoint.kafka_port = broker.kafka_endpoint
    return endpoint


def _update_metadata_state(
    tp: TopicPartition, entry: _UpdateMetadataEntry, live_brokers: Mapping[int, LiveBroker]
) -> pb.UpdateMetadataPartitionState:
    state, replicas = entry.leadership
    return pb.UpdateMetadataPartitionState(
        topic_name=tp.topic,
        partition_index=tp.partition,
        controller_epoch=state.controller_epoch,
        # Kafka's LeaderAndIsr.duringDelete also resets the epoch and zkVersion; keeping them
        # costs nothing and the broker drops the partition on -2 either way.
        leader=LEADER_DURING_DELETE if entry.deleting else state.leader,
        leader_epoch=state.leader_epoch,
        isr=state.isr,
        zk_version=state.zk_version,
        replicas=replicas,
        offline_replicas=[r for r in replicas if r not in live_brokers],
    )


class SentRequest(NamedTuple):
    """A request the controller queued for a broker, and the future of its answer."""

    broker_id: int
    request: ControlRequest
    response: asyncio.Future[Any]
