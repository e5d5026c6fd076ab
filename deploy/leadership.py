"""Fixed partition leadership for a cluster that has no controller yet.

:class:`StaticLeadership` does once what Kafka's controller does when a topic is created:
it writes the assignment and each partition's state znode (leader = first replica, leader
epoch 0, ISR = every replica), then sends LeaderAndIsr to the replicas and UpdateMetadata to
every broker over the real ``Control`` gRPC service. It never elects again: a benchmark or a
test that needs failover drives the brokers itself, or waits for the controller.

Example usage::

    leadership = StaticLeadership.of(zk, brokers)   # BrokerProcesses already registered
    leadership.create_topic("bench", {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

import grpc
from kazoo.client import KazooClient

from broker import zk_data
from broker.topic_partition import TopicPartition
from deploy.broker_process import BrokerProcess
from proto import minibroker_pb2 as pb
from proto import minibroker_pb2_grpc as pb_grpc

CONTROLLER_ID = 0
"""Requests from the stand-in name broker 0 as their controller; no broker has id 0."""
REQUEST_TIMEOUT_S = 10.0


class LeadershipError(RuntimeError):
    """A broker refused LeaderAndIsr or UpdateMetadata (the message has its answer)."""


class BrokerAddress(NamedTuple):
    """Where a broker's gRPC server listens."""

    host: str
    port: int


class StaticLeadership:
    """Writes topic and partition-state znodes and pushes them to the brokers, once."""

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
    ) -> StaticLeadership:
        """For running, registered broker processes (their ports are known once registered)."""
        brokers = {p.broker_id: BrokerAddress(p.spec.host, p.port) for p in processes}
        return cls(zk, brokers, controller_epoch)

    def create_topic(
        self,
        topic: str,
        assignment: Mapping[int, list[int]],
        config: Mapping[str, str] | None = None,
    ) -> dict[TopicPartition, zk_data.PartitionState]:
        """Create ``topic`` with ``assignment`` (partition -> replicas, leader first).

        Returns the partition states as written. Raises kazoo's NodeExistsError if the topic
        exists, LeadershipError if a broker refuses a request, grpc.RpcError if one is down.
        """
        self.zk.ensure_path(zk_data.BROKER_TOPICS_PATH)
        self.zk.create(zk_data.topic_path(topic), zk_data.encode_topic_assignment(assignment))
        if config:
            self.zk.create(
                zk_data.topic_config_path(topic), zk_data.encode_topic_config(config), makepath=True
            )
        tps = []
        for partition, replicas in assignment.items():
            tp = TopicPartition(topic, partition)
            self.assignments[tp] = list(replicas)
            isr = tuple(r for r in replicas if r in self.brokers)
            state = zk_data.PartitionStateData(isr[0], 0, isr, self.controller_epoch)
            self.zk.create(
                zk_data.partition_state_path(tp),
                zk_data.encode_partition_state(state),
                makepath=True,
            )
            tps.append(tp)
        states = {tp: self.state(tp) for tp in tps}
        self.push(states)
        return states

    def state(self, tp: TopicPartition) -> zk_data.PartitionState:
        """The partition's state znode as it is now (the leaders rewrite it on ISR changes)."""
        data, stat = self.zk.get(zk_data.partition_state_path(tp))
        return zk_data.PartitionState.from_data(zk_data.decode_partition_state(data), stat.version)

    def push(self, states: Mapping[TopicPartition, zk_data.PartitionState]) -> None:
        """LeaderAndIsr to each replica of ``states``, then UpdateMetadata to every broker.

        In that order, as Kafka's controller sends them: a broker must know its role before
        clients are told to send it produce requests.
        """
        leaders = {s.leader for s in states.values() if s.leader in self.brokers}
        for broker_id, address in sorted(self.brokers.items()):
            request = pb.LeaderAndIsrRequest(
                controller_id=CONTROLLER_ID, controller_epoch=self.controller_epoch, broker_epoch=-1
            )
            for tp, s in states.items():
                if broker_id in self.assignments[tp]:
                    request.partition_states.add(
                        topic_name=tp.topic,
                        partition_index=tp.partition,
                        controller_epoch=s.controller_epoch,
                        leader=s.leader,
                        leader_epoch=s.leader_epoch,
                        isr=s.isr,
                        zk_version=s.zk_version,
                        replicas=self.assignments[tp],
                    )
            for leader in sorted(leaders):
                leader_address = self.brokers[leader]
                request.live_leaders.add(
                    node_id=leader, host=leader_address.host, port=leader_address.port
                )
            if not request.partition_states:
                continue
            with _channel(address) as channel:
                response = pb_grpc.ControlStub(channel).LeaderAndIsr(
                    request, timeout=REQUEST_TIMEOUT_S
                )
            refused = [e for e in response.partition_errors if e.error_code != pb.NONE]
            if response.error_code != pb.NONE or refused:
                raise LeadershipError(f"broker {broker_id} refused LeaderAndIsr: {response}")
        self._update_metadata(states)

    def _update_metadata(self, states: Mapping[TopicPartition, zk_data.PartitionState]) -> None:
        request = pb.UpdateMetadataRequest(
            controller_id=CONTROLLER_ID, controller_epoch=self.controller_epoch, broker_epoch=-1
        )
        for broker_id, address in sorted(self.brokers.items()):
            request.live_brokers.add(node_id=broker_id, host=address.host, port=address.port)
        for tp, s in states.items():
            request.partition_states.add(
                topic_name=tp.topic,
                partition_index=tp.partition,
                controller_epoch=s.controller_epoch,
                leader=s.leader,
                leader_epoch=s.leader_epoch,
                isr=s.isr,
                zk_version=s.zk_version,
                replicas=self.assignments[tp],
            )
        for broker_id, address in sorted(self.brokers.items()):
            with _channel(address) as channel:
                response = pb_grpc.ControlStub(channel).UpdateMetadata(
                    request, timeout=REQUEST_TIMEOUT_S
                )
            if response.error_code != pb.NONE:
                raise LeadershipError(f"broker {broker_id} refused UpdateMetadata: {response}")


def _channel(address: BrokerAddress) -> grpc.Channel:
    return grpc.insecure_channel(f"{address.host}:{address.port}")
