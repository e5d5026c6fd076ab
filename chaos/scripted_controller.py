"""A scripted controller: the data-loss scenario's stand-in for a controller from before
KIP-380, and the broker tests' way to dictate every leadership decision.

Every broker process runs a real controller candidate (controller/). Since KIP-380 (Kafka
2.2) a controller sees a broker's fast restart (a new registration czxid, its broker epoch)
and handles it as a failure and a return: the restarted replica leaves the ISR. So the
docs/replication.md data-loss interleaving, a restarted follower that truncated and is still in
the ISR when the leader dies, never happens under the real controller. A controller that
missed the restart, as Kafka's did before 2.2, would have let it happen.
:class:`ScriptedController` plays that controller for ``minibroker chaos scenario
hw-data-loss`` (and, for the broker tests, sends control requests no real controller would
send at that moment: a LeaderAndIsr with the same leader and a new epoch, a zombie leader at
an exact epoch). It is a reproduction tool, not a controller to run a cluster with.

:meth:`ScriptedController.take_over` wins the real election (it creates the ephemeral
``/controller`` in its own session and bumps ``/controller_epoch`` in the same multi, as the
controller does), so the brokers' candidates stand by, and its requests carry the newest
controller epoch. It then writes the state znodes and sends LeaderAndIsr and UpdateMetadata
over the real ``Control`` gRPC service, exactly when its caller says.
:class:`ProcessController` is the same over :class:`~deploy.broker_process.BrokerProcess`
objects, whose ports and pauses it follows.

Example usage::

    controller = ProcessController(zk, {1: broker_1, 2: broker_2})
    controller.take_over()          # before the brokers start
    controller.create_topic("t", {0: [1, 2]})
    controller.elect(TopicPartition("t", 0), 2, isr=[2])
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import grpc
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError

from deploy.broker_process import BrokerProcess
from deploy.cluster_probe import wait_until
from proto.errors import MinibrokerError
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.zk import znodes
from proto.zk.sync_client import create_partition_state, read_partition_state, set_partition_state

CONTROLLER_ID = 0
"""Requests from the scripted controller name broker 0 as their controller; no broker has
id 0."""
REQUEST_TIMEOUT_S = 10.0


class LeadershipError(MinibrokerError, RuntimeError):
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
        self.zk.ensure_path(znodes.CONTROLLER_EPOCH_PATH)
        data, stat = self.zk.get(znodes.CONTROLLER_EPOCH_PATH)
        epoch = (znodes.decode_controller_epoch(data) if data else 0) + 1
        transaction = self.zk.transaction()
        transaction.create(
            znodes.CONTROLLER_PATH,
            znodes.encode_controller(CONTROLLER_ID, int(time.time() * 1000)),
            ephemeral=True,
        )
        transaction.set_data(
            znodes.CONTROLLER_EPOCH_PATH, str(epoch).encode(), version=stat.version
        )
        results = transaction.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            raise failures[0]
        self.controller_epoch = epoch
        return epoch

    def broker_epoch(self, broker_id: int) -> int:
        """The broker's epoch as the controller knows it (KIP-380): the czxid of its
        registration. Brokers refuse requests naming no epoch (-1)."""
        stat = self.zk.exists(znodes.broker_path(broker_id))
        if stat is None:
            raise LeadershipError(f"broker {broker_id} is not registered in ZooKeeper")
        return int(stat.czxid)

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
    ) -> dict[TopicPartition, znodes.PartitionState]:
        """Create ``topic`` with ``assignment`` (partition -> replicas, leader first).

        Leader = first reachable replica, ISR = the reachable replicas, leader epoch 0.
        Returns the partition states as written. Raises kazoo's NodeExistsError if the topic
        exists, LeadershipError if a broker refuses a request, grpc.RpcError if one is down.
        """
        self.zk.ensure_path(znodes.BROKER_TOPICS_PATH)
        self.zk.create(znodes.topic_path(topic), znodes.encode_topic_assignment(assignment))
        if config:
            self.zk.create(
                znodes.topic_config_path(topic), znodes.encode_topic_config(config), makepath=True
            )
        live = self.reachable_brokers()
        tps = []
        for partition, replicas in assignment.items():
            tp = TopicPartition(topic, partition)
            self.assignments[tp] = list(replicas)
            isr = tuple(r for r in replicas if r in live)
            state = znodes.PartitionStateData(isr[0], 0, isr, self.controller_epoch)
            create_partition_state(self.zk, tp, state)
            tps.append(tp)
        self.push(tps)
        return {tp: self.state(tp) for tp in tps}

    def state(self, tp: TopicPartition) -> znodes.PartitionState:
        """The partition's state znode as it is now (the leaders rewrite it on ISR changes);
        kazoo's NoNodeError if it has none."""
        state = read_partition_state(self.zk, tp)
        if state is None:
            raise NoNodeError(f"{tp} has no state znode")
        return state

    def elect(
        self, tp: TopicPartition, leader: int, isr: Iterable[int] | None = None
    ) -> znodes.PartitionState:
        """Make ``leader`` the leader with the leader epoch bumped, as the controller does
        (clean or unclean is the caller's choice), and push the new state."""
        while True:
            current = self.state(tp)
            data = znodes.PartitionStateData(
                leader,
                current.leader_epoch + 1,
                tuple(isr) if isr is not None else current.isr,
                self.controller_epoch,
            )
            try:
                set_partition_state(self.zk, tp, data, current.zk_version)
                break
            except BadVersionError:
                continue  # the leader changed the ISR meanwhile: decide again, as Kafka's does
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
                controller_id=CONTROLLER_ID,
                controller_epoch=self.controller_epoch,
                broker_epoch=self.broker_epoch(broker_id),
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
        states: Mapping[TopicPartition, znodes.PartitionState],
        reachable: Mapping[int, BrokerAddress],
    ) -> None:
        request = pb.UpdateMetadataRequest(
            controller_id=CONTROLLER_ID, controller_epoch=self.controller_epoch
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
            request.broker_epoch = self.broker_epoch(broker_id)
            with _channel(address) as channel:
                response = pb_grpc.ControlStub(channel).UpdateMetadata(
                    request, timeout=REQUEST_TIMEOUT_S
                )
            if response.error_code != pb.NONE:
                raise LeadershipError(f"broker {broker_id} refused UpdateMetadata: {response}")


class ProcessController(ScriptedController):
    """The scripted controller over broker processes: it sends requests to those that run
    and are not paused, and names a paused leader's endpoint (ZooKeeper counts a frozen
    broker alive until its session expires). ``processes`` is read at every request, so a
    caller may add to it."""

    def __init__(
        self, zk: KazooClient, processes: Mapping[int, BrokerProcess], controller_epoch: int = 1
    ) -> None:
        super().__init__(zk, {}, controller_epoch)
        self.processes = processes

    def reachable_brokers(self) -> dict[int, BrokerAddress]:
        return {i: _address(p) for i, p in self.processes.items() if p.is_running and not p.paused}

    def alive_brokers(self) -> dict[int, BrokerAddress]:
        return {i: _address(p) for i, p in self.processes.items() if p.is_running}

    def wait_for_isr(self, tp: TopicPartition, isr: set[int], timeout: float = 20) -> None:
        """Wait until the state znode's ISR is ``isr`` (the leader expands it as followers
        catch up); TimeoutError otherwise."""
        if wait_until(lambda: set(self.state(tp).isr) == isr, timeout) is None:
            raise TimeoutError(
                f"the ISR of {tp} did not become {sorted(isr)} within {timeout:.0f} s "
                f"(it is {list(self.state(tp).isr)})"
            )


def _address(process: BrokerProcess) -> BrokerAddress:
    return BrokerAddress(process.spec.host, process.port)


def _state_fields(state: znodes.PartitionState) -> dict[str, Any]:
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
