"""Test-side cluster helpers: real broker processes plus a stand-in for the controller.

Until the controller issue lands, :class:`TestController` plays its part as Kafka's
controller would: it writes the topic assignment and the partition state znodes in
ZooKeeper (the controller is their only writer of leader and leader_epoch) and then pushes
LeaderAndIsr and UpdateMetadata to the brokers over the real ``Control`` gRPC service.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import grpc
from kazoo.client import KazooClient

from broker import zk_data
from broker.checkpoints import REPLICATION_OFFSET_CHECKPOINT, OffsetCheckpointFile
from broker.record_batch import Record, decode_batch, encode_batch, scan_batches
from broker.topic_partition import TopicPartition
from deploy.broker_process import BrokerProcess, BrokerSpec
from proto import minibroker_pb2 as pb
from proto import minibroker_pb2_grpc as pb_grpc
from tests.helpers import wait_for

CONTROLLER_ID = 0
"""Requests from the stand-in controller name broker 0, which never exists."""


class Cluster:
    """ZooKeeper (from the session fixture, under a chroot) and N broker processes."""

    def __init__(
        self,
        zk: KazooClient,
        zookeeper_connect: str,
        root: Path,
        broker_ids: Iterable[int] = (1, 2, 3),
        overrides: Mapping[str, str] | None = None,
        broker_overrides: Mapping[int, Mapping[str, str]] | None = None,
    ) -> None:
        self.zk = zk
        self.root = root
        base = {
            "zookeeper.session.timeout.ms": "2000",
            "replica.lag.time.max.ms": "2000",
            "replica.fetch.wait.max.ms": "200",
            "replica.fetch.backoff.ms": "100",
            "replica.high.watermark.checkpoint.interval.ms": "200",
            **(overrides or {}),
        }
        per_broker = broker_overrides or {}
        self.brokers = {
            i: BrokerProcess(
                BrokerSpec(
                    i,
                    root / f"broker-{i}",
                    zookeeper_connect,
                    overrides={**base, **per_broker.get(i, {})},
                )
            )
            for i in broker_ids
        }
        self.controller = TestController(zk, self)
        self._channels: dict[int, tuple[str, grpc.Channel]] = {}

    def start(self, *ids: int) -> None:
        for i in ids or tuple(self.brokers):
            self.brokers[i].start(self.zk)

    def stop_all(self) -> None:
        for channel in self._channels.values():
            channel[1].close()
        self._channels.clear()
        for broker in self.brokers.values():
            broker.stop()

    def channel(self, broker_id: int) -> grpc.Channel:
        address = self.brokers[broker_id].address
        cached = self._channels.get(broker_id)
        if cached is None or cached[0] != address:
            if cached is not None:
                cached[1].close()
            cached = (address, grpc.insecure_channel(address))
            self._channels[broker_id] = cached
        return cached[1]

    def broker_stub(self, broker_id: int) -> pb_grpc.BrokerStub:
        return pb_grpc.BrokerStub(self.channel(broker_id))

    def control_stub(self, broker_id: int) -> pb_grpc.ControlStub:
        return pb_grpc.ControlStub(self.channel(broker_id))

    def live(self) -> list[int]:
        """Brokers that are running and not paused: those a controller can talk to."""
        return [i for i, b in self.brokers.items() if b.is_running and not b.paused]

    def partition_dir(self, broker_id: int, tp: TopicPartition) -> Path:
        return self.brokers[broker_id].spec.data_dir / tp.dir_name

    def replica_records(self, broker_id: int, tp: TopicPartition) -> list[tuple[int, bytes | None]]:
        """(offset, value) of every record in a replica's segment files, read from disk."""
        out: list[tuple[int, bytes | None]] = []
        for segment in sorted(self.partition_dir(broker_id, tp).glob("*.log")):
            data = segment.read_bytes()
            for scanned in scan_batches(data):
                out += [(r.offset, r.value) for r in decode_batch(data, scanned.position).records]
        return out

    def checkpointed_hw(self, broker_id: int, tp: TopicPartition) -> int | None:
        path = self.brokers[broker_id].spec.data_dir / REPLICATION_OFFSET_CHECKPOINT
        return OffsetCheckpointFile(path).read().get(tp) if path.exists() else None

    # -- client operations over the wire -----------------------------------------------------

    def produce(
        self,
        broker_id: int,
        tp: TopicPartition,
        values: list[bytes],
        *,
        acks: int = -1,
        timeout_ms: int = 10_000,
    ) -> pb.PartitionProduceResponse:
        batch = encode_batch(
            [Record(key=None, value=v, timestamp=int(time.time() * 1000)) for v in values]
        )
        return self.produce_raw(broker_id, tp, batch, acks=acks, timeout_ms=timeout_ms)

    def produce_raw(
        self,
        broker_id: int,
        tp: TopicPartition,
        records: bytes,
        *,
        acks: int = -1,
        timeout_ms: int = 10_000,
    ) -> pb.PartitionProduceResponse:
        request = pb.ProduceRequest(acks=acks, timeout_ms=timeout_ms)
        request.topics.add(name=tp.topic).partitions.add(index=tp.partition, records=records)
        response = self.broker_stub(broker_id).Produce(request, timeout=timeout_ms / 1000 + 10)
        return response.responses[0].partitions[0]

    def fetch(
        self,
        broker_id: int,
        tp: TopicPartition,
        offset: int,
        *,
        max_wait_ms: int = 0,
        max_bytes: int = 1 << 20,
    ) -> pb.FetchPartitionData:
        request = pb.FetchRequest(
            replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes
        )
        request.topics.add(topic=tp.topic).partitions.add(
            partition=tp.partition, fetch_offset=offset, partition_max_bytes=max_bytes
        )
        response = self.broker_stub(broker_id).Fetch(request, timeout=max_wait_ms / 1000 + 10)
        return response.responses[0].partitions[0]

    def consume_all(self, broker_id: int, tp: TopicPartition) -> list[tuple[int, bytes | None]]:
        """Every (offset, value) a consumer can read from the leader, up to the HW."""
        out: list[tuple[int, bytes | None]] = []
        offset = 0
        while True:
            part = self.fetch(broker_id, tp, offset)
            assert part.error_code == pb.NONE, part.error_message
            if not part.records:
                return out
            for batch_start in _batch_positions(part.records):
                for record in decode_batch(part.records, batch_start).records:
                    if record.offset >= offset:
                        assert record.offset < part.high_watermark, "consumer saw offset >= HW"
                        out.append((record.offset, record.value))
            offset = out[-1][0] + 1


def _batch_positions(records: bytes) -> Iterator[int]:
    for scanned in scan_batches(records):
        yield scanned.position


class TestController:
    """Writes state znodes and sends LeaderAndIsr/UpdateMetadata as Kafka's controller does."""

    __test__ = False  # not a pytest test class

    def __init__(self, zk: KazooClient, cluster: Cluster, controller_epoch: int = 1) -> None:
        self.zk = zk
        self.cluster = cluster
        self.controller_epoch = controller_epoch
        self.assignments: dict[TopicPartition, list[int]] = {}

    def create_topic(
        self,
        topic: str,
        assignment: Mapping[int, list[int]],
        config: Mapping[str, str] | None = None,
    ) -> None:
        self.zk.ensure_path(zk_data.BROKER_TOPICS_PATH)
        self.zk.create(zk_data.topic_path(topic), zk_data.encode_topic_assignment(assignment))
        if config:
            self.zk.create(
                zk_data.topic_config_path(topic), zk_data.encode_topic_config(config), makepath=True
            )
        live = set(self.cluster.live())
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
        self.push(list(self.assignments_of(topic)))

    def assignments_of(self, topic: str) -> list[TopicPartition]:
        return [tp for tp in self.assignments if tp.topic == topic]

    def state(self, tp: TopicPartition) -> zk_data.PartitionState:
        data, stat = self.zk.get(zk_data.partition_state_path(tp))
        return zk_data.PartitionState.from_data(zk_data.decode_partition_state(data), stat.version)

    def elect(
        self, tp: TopicPartition, leader: int, isr: Iterable[int] | None = None
    ) -> zk_data.PartitionState:
        """Make ``leader`` the leader with a bumped epoch (clean or unclean: the caller says)."""
        current = self.state(tp)
        new_isr = tuple(isr) if isr is not None else current.isr
        data = zk_data.PartitionStateData(
            leader, current.leader_epoch + 1, new_isr, self.controller_epoch
        )
        self.zk.set(
            zk_data.partition_state_path(tp),
            zk_data.encode_partition_state(data),
            version=current.zk_version,
        )
        self.push([tp])
        return self.state(tp)

    def push(self, tps: list[TopicPartition], to: Iterable[int] | None = None) -> None:
        """LeaderAndIsr to the live replicas of ``tps``, then UpdateMetadata to all live."""
        live = set(self.cluster.live())
        states = {tp: self.state(tp) for tp in tps}
        leaders = {s.leader for s in states.values() if s.leader >= 0}
        targets = set(to) if to is not None else live
        for broker_id in sorted(targets & live):
            request = pb.LeaderAndIsrRequest(
                controller_id=CONTROLLER_ID, controller_epoch=self.controller_epoch, broker_epoch=-1
            )
            for tp, s in states.items():
                if broker_id not in self.assignments[tp]:
                    continue
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
            # A paused leader is still alive as far as ZooKeeper knows (until its session
            # expires), so a real controller would still name it.
            running = {i for i, b in self.cluster.brokers.items() if b.is_running}
            for leader in sorted(leaders & running):
                b = self.cluster.brokers[leader]
                request.live_leaders.add(node_id=leader, host=b.spec.host, port=b.port)
            if request.partition_states:
                response = self.cluster.control_stub(broker_id).LeaderAndIsr(request, timeout=10)
                assert response.error_code == pb.NONE, response
                for err in response.partition_errors:
                    assert err.error_code == pb.NONE, err
        self.update_metadata(states)

    def update_metadata(self, states: Mapping[TopicPartition, zk_data.PartitionState]) -> None:
        live = self.cluster.live()
        request = pb.UpdateMetadataRequest(
            controller_id=CONTROLLER_ID, controller_epoch=self.controller_epoch, broker_epoch=-1
        )
        for broker_id in live:
            b = self.cluster.brokers[broker_id]
            request.live_brokers.add(node_id=broker_id, host=b.spec.host, port=b.port)
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
        for broker_id in live:
            self.cluster.control_stub(broker_id).UpdateMetadata(request, timeout=10)

    def wait_for_isr(self, tp: TopicPartition, isr: set[int], timeout: float = 20) -> None:
        wait_for(
            lambda: set(self.state(tp).isr) == isr,
            timeout,
            message=f"ISR of {tp} to become {sorted(isr)}",
        )


@contextmanager
def running_cluster(
    zk: KazooClient,
    zookeeper_connect: str,
    root: Path,
    broker_ids: Iterable[int] = (1, 2, 3),
    overrides: Mapping[str, str] | None = None,
    broker_overrides: Mapping[int, Mapping[str, str]] | None = None,
) -> Iterator[Cluster]:
    cluster = Cluster(zk, zookeeper_connect, root, broker_ids, overrides, broker_overrides)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop_all()
