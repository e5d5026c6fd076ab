"""A scripted controller for broker tests that must dictate every leadership decision.

Every broker process runs a real controller candidate (controller/). A few broker tests
need control requests no real controller would send at that moment: the DESIGN.md §8
data-loss interleaving (a restarted follower still in the ISR when the leader dies, which
the controller's KIP-380 bounce handling never allows), a LeaderAndIsr with the same
leader and a new epoch, a zombie leader at an exact epoch. :class:`ScriptedController`
plays the controller for those: :meth:`ScriptedController.take_over` wins the real
election (it creates the ephemeral ``/controller`` in the test's session and bumps
``/controller_epoch`` in the same multi, as the controller does), so the brokers'
candidates stand by, and its requests carry the newest controller epoch. It then writes
the state znodes and sends LeaderAndIsr and UpdateMetadata over the real ``Control``
gRPC service, exactly when the test says.

Example usage::

    controller = ScriptedController(zk, {1: BrokerAddress("127.0.0.1", 9091)})
    controller.take_over()          # before the brokers start
    controller.create_topic("t", {0: [1, 2]})
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import grpc
from kazoo.client import KazooClient

from broker import zk_data
from broker.topic_partition import TopicPartition
from deploy.broker_process import BrokerProcess
from proto import minibroker_pb2 as pb
from proto import minibroker_pb2_grpc as pb_grpc

CONTROLLER_ID = 0
"""Requests from the scripted controller name broker 0 as their controller; no broker has
id 0."""
REQUEST_TIMEOUT_S = 10.0


class LeadershipError(RuntimeError):
    """A broker refused LeaderAndIsr or UpdateMetadata (the message has its answer)."""


class BrokerAddress(NamedTuple):
    """Where a broker's gRPC server listens."""

    host: str
    port: int


class ScriptedController:
    """Writes topic and partition-state znodes and pushes them to the brokers.

    The brokers it talks to come from :meth:`reachable_brokers` and the leader endpoints it
    names from :meth:`alive_brokers`; a subclass that watches processes come and go
    overrides both.
    """

    def __init__(
        self, zk: KazooClient, brokers: Mapping[int, BrokerAddress], controller_epoch: int = 1
    ) -> None:
        self.zk = zk
        self.brokers = dict(brokers)
        """Every live broker, by id: the UpdateMetadata recipients and the ISR candidates."""
        self.controller_epoch = controller_epoch
        self.assignments: dict[TopicPartition, list[int]] = {}

    @classmethod
    def of(
        cls, zk: KazooClient, processes: Iterable[BrokerProcess], controller_epoch: int = 1
    ) -> ScriptedController:
        """For running, registered broker processes (their ports are known once registered)."""
        brokers = {p.broker_id: BrokerAddress(p.spec.host, p.port) for p in processes}
        return cls(zk, brokers, controller_epoch)

    def take_over(self) -> int:
        """Become the controller through the real election: create ``/controller`` (an
        ephemeral of this kazoo session) and bump ``/controller_epoch`` in one multi.
        Returns the new controller epoch, which every request then carries. Raises
        kazoo's NodeExistsError if another controller holds ``/controller``."""
        self.zk.ensure_path(zk_data.CONTROLLER_EPOCH_PATH)
        data, stat = self.zk.get(zk_data.CONTROLLER_EPOCH_PATH)
        epoch = (zk_data.decode_controller_epoch(data) if data else 0) + 1
        transaction = self.zk.transaction()
        transaction.create(
            zk_data.CONTROLLER_PATH,
            zk_data.encode_controller(CONTROLLER_ID, int(time.time() * 1000)),
            ephemeral=True,
        )
        transaction.set_data(
            zk_data.CONTROLLER_EPOCH_PATH, str(epoch).encode(), version=stat.version
        )
        results = transaction.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            raise failures[0]
        self.controller_epoch = epoch
        return epoch

    def reachable_brokers(self) -> dict[int, BrokerAddress]:
        """The brokers requests are sent to."""
        return dict(self.brokers)

    def alive_brokers(self) -> dict[int, BrokerAddress]:
        """The brokers ZooKeeper still counts as alive (a frozen one is, until its session
        expires): their endpoints are named as leaders even if they cannot answer now."""
        return self.reachable_brokers()

    def create_topic(
        self,
        topic: str,
        assignment: Mapping[int, list[int]],
        config: Mapping[str, str] | None = None,
    ) -> dict[TopicPartition, zk_data.PartitionState]:
        """Create ``topic`` with ``assignment`` (partition -> replicas, leader first).

        Leader = first reachable replica, ISR = the reachable replicas, leader epoch 0.
        Returns the partition states as written. Raises kazoo's NodeExistsError if the topic
        exists, LeadershipError if a broker refuses a request, grpc.RpcError if one is down.
        """
        self.zk.ensure_path(zk_data.BROKER_TOPICS_PATH)
        self.zk.create(zk_data.topic_path(topic), zk_data.encode_topic_assignment(assignment))
        if config:
            self.zk.create(
                zk_data.topic_config_path(topic), zk_data.encode_topic_config(config), makepath=True
            )
        live = self.reachable_brokers()
        tps = []
        for partition, replicas in assignment.items():
            tp = TopicPartition(topic, partition)
            self.assignments[tp] = list(replicas)
            isr = tuple(r for r in replicas if r in live)
            state = zk_data.PartitionStateData(isr[0], 0, isr, self.controller_epoch)
            self.zk.create(
                zk_data.partition_state_path(tp),
                zk_data.encode_partition_state(state),
                makepath=True,
            )
            tps.append(tp)
        self.push(tps)
        return {tp: self.state(tp) for tp in tps}

    def state(self, tp: TopicPartition) -> zk_data.PartitionState:
        """The partition's state znode as it is now (the leaders rewrite it on ISR changes)."""
        data, stat = self.zk.get(zk_data.partition_state_path(tp))
        return zk_data.PartitionState.from_data(zk_data.decode_partition_state(data), stat.version)

    def elect(
        self, tp: TopicPartition, leader: int, isr: Iterable[int] | None = None
    ) -> zk_data.PartitionState:
        """Make ``leader`` the leader with the leader epoch bumped, as the controller does
        (clean or unclean is the caller's choice), and push the new state."""
        current = self.state(tp)
        data = zk_data.PartitionStateData(
            leader,
            current.leader_epoch + 1,
            tuple(isr) if isr is not None else current.isr,
            self.controller_epoch,
        )
        self.zk.set(
            zk_data.partition_state_path(tp),
            zk_data.encode_partition_state(data),
            version=current.zk_version,
        )
        self.push([tp])
        return self.state(tp)

    def push(self, tps: Iterable[TopicPartition], to: Iterable[int] | None = None) -> None:
        """LeaderAndIsr with the current states of ``tps`` to their reachable replicas (or
        only to ``to``), then UpdateMetadata to every reachable broker.

        In that order, as Kafka's controller sends them: a broker must know its role before
        clients are told to send it produce requests.
        """
        states = {tp: self.state(tp) for tp in tps}
        reachable = self.reachable_brokers()
        alive = self.alive_brokers()
        targets = set(reachable) if to is None else set(to) & set(reachable)
        leaders = sorted({s.leader for s in states.values()} & set(alive))
        for broker_id in sorted(targets):
            request = pb.LeaderAndIsrRequest(
                controller_id=CONTROLLER_ID, controller_epoch=self.controller_epoch, broker_epoch=-1
            )
            for tp, s in states.items():
                if broker_id in self.assignments[tp]:
                    request.partition_states.add(
                        topic_name=tp.topic,
                        partition_index=tp.partition,
                        replicas=self.assignments[tp],
                        **_state_fields(s),
                    )
            for leader in leaders:
                request.live_leaders.add(
                    node_id=leader, host=alive[leader].host, port=alive[leader].port
                )
            if not request.partition_states:
                continue
            with _channel(reachable[broker_id]) as channel:
                response = pb_grpc.ControlStub(channel).LeaderAndIsr(
                    request, timeout=REQUEST_TIMEOUT_S
                )
            refused = [e for e in response.partition_errors if e.error_code != pb.NONE]
            if response.error_code != pb.NONE or refused:
                raise LeadershipError(f"broker {broker_id} refused LeaderAndIsr: {response}")
        self._update_metadata(states, reachable)

    def _update_metadata(
        self,
        states: Mapping[TopicPartition, zk_data.PartitionState],
        reachable: Mapping[int, BrokerAddress],
    ) -> None:
        request = pb.UpdateMetadataRequest(
            controller_id=CONTROLLER_ID, controller_epoch=self.controller_epoch, broker_epoch=-1
        )
        for broker_id, address in sorted(reachable.items()):
            request.live_brokers.add(node_id=broker_id, host=address.host, port=address.port)
        for tp, s in states.items():
            request.partition_states.add(
                topic_name=tp.topic,
                partition_index=tp.partition,
                replicas=self.assignments[tp],
                **_state_fields(s),
            )
        for broker_id, address in sorted(reachable.items()):
            with _channel(address) as channel:
                response = pb_grpc.ControlStub(channel).UpdateMetadata(
                    request, timeout=REQUEST_TIMEOUT_S
                )
            if response.error_code != pb.NONE:
                raise LeadershipError(f"broker {broker_id} refused UpdateMetadata: {response}")


def _state_fields(state: zk_data.PartitionState) -> dict[str, Any]:
    """The state znode's fields as LeaderAndIsr and UpdateMetadata both carry them."""
    return {
        "controller_epoch": state.controller_epoch,
        "leader": state.leader,
        "leader_epoch": state.leader_epoch,
        "isr": state.isr,
        "zk_version": state.zk_version,
    }


def _channel(address: BrokerAddress) -> grpc.Channel:
    return grpc.insecure_channel(f"{address.host}:{address.port}")
