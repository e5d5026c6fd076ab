"""Test-side cluster helpers: real broker processes, each running its controller candidate.

By default the brokers elect their controller and it does all leadership work: a test
creates a topic as an admin client does (:meth:`Cluster.create_topic` writes
``/config/topics/<t>`` and ``/brokers/topics/<t>``) and observes the outcome in ZooKeeper
and through the brokers. With ``scripted_controller=True`` a
:class:`~tests.scripted_controller.ScriptedController` wins the election before the
brokers start and the test dictates each LeaderAndIsr (see that module for when that is
needed).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import grpc
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from broker import zk_data
from broker.checkpoints import REPLICATION_OFFSET_CHECKPOINT, OffsetCheckpointFile
from broker.record_batch import Record, decode_batch, encode_batch, scan_batches
from broker.topic_partition import TopicPartition
from deploy.broker_process import BrokerProcess, BrokerSpec
from deploy.cluster_probe import create_topic, leader_serving, partition_state
from proto import minibroker_pb2 as pb
from proto import minibroker_pb2_grpc as pb_grpc
from tests.helpers import wait_for
from tests.scripted_controller import BrokerAddress, ScriptedController


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
        *,
        scripted_controller: bool = False,
    ) -> None:
        self.zk = zk
        self.root = root
        base = {
            "zookeeper.session.timeout.ms": "2000",
            "replica.lag.time.max.ms": "2000",
            "replica.fetch.wait.max.ms": "200",
            "replica.fetch.backoff.ms": "100",
            "replica.high.watermark.checkpoint.interval.ms": "200",
            "controlled.shutdown.retry.backoff.ms": "100",
            "request.timeout.ms": "5000",
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
        self._scripted = TestController(zk, self) if scripted_controller else None
        if self._scripted is not None:
            self._scripted.take_over()
        self._channels: dict[int, tuple[str, grpc.Channel]] = {}

    @property
    def controller(self) -> TestController:
        """The scripted controller (only with ``scripted_controller=True``)."""
        assert self._scripted is not None, "this cluster's brokers elect their own controller"
        return self._scripted

    def start(self, *ids: int) -> None:
        for i in ids or tuple(self.brokers):
            self.brokers[i].start(self.zk)

    def stop_all(self) -> None:
        """Stop every broker cleanly, all at once (each one's controlled shutdown finds the
        others still there or gone; either way it ends within its few retries)."""
        for channel in self._channels.values():
            channel[1].close()
        self._channels.clear()
        with ThreadPoolExecutor(max_workers=len(self.brokers)) as pool:
            list(pool.map(lambda broker: broker.stop(), self.brokers.values()))

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

    # -- leadership as the real controller decides it -----------------------------------------

    def create_topic(
        self,
        topic: str,
        assignment: Mapping[int, list[int]],
        config: Mapping[str, str] | None = None,
        *,
        timeout: float = 20,
    ) -> None:
        """Create ``topic`` as Kafka's admin client does (config first, then the assignment
        that the controller watches) and wait until every partition's leader serves it."""
        create_topic(self.zk, topic, assignment, config)
        for partition in assignment:
            self.wait_for_leader(TopicPartition(topic, partition), timeout=timeout)

    def state(self, tp: TopicPartition) -> zk_data.PartitionState | None:
        """The partition's state znode now, or None if it has none."""
        return partition_state(self.zk, tp)

    def leader_serving(self, tp: TopicPartition) -> int | None:
        """The leader named by the state znode if it is running, not paused, and its
        metadata says it leads at that epoch (it has become leader), else None."""
        addresses = {i: b.address for i, b in self.brokers.items() if b.is_running and not b.paused}
        state = leader_serving(self.zk, tp, addresses)
        return None if state is None else state.leader

    def wait_for_leader(
        self, tp: TopicPartition, accept: Iterable[int] | None = None, timeout: float = 20
    ) -> int:
        """Wait until a leader (one of ``accept``, if given) serves ``tp``; return it."""
        wanted = None if accept is None else set(accept)
        found: list[int] = []

        def serving() -> bool:
            leader = self.leader_serving(tp)
            if leader is None or (wanted is not None and leader not in wanted):
                return False
            found.append(leader)
            return True

        wait_for(serving, timeout, message=f"a leader of {tp} in {wanted or 'any broker'}")
        return found[-1]

    def wait_for_isr(self, tp: TopicPartition, isr: set[int], timeout: float = 20) -> None:
        def matches() -> bool:
            state = self.state(tp)
            return state is not None and set(state.isr) == isr

        wait_for(matches, timeout, message=f"ISR of {tp} to become {sorted(isr)}")

    def controller_id(self) -> int | None:
        """The broker in ``/controller`` now, or None."""
        try:
            data, _ = self.zk.get(zk_data.CONTROLLER_PATH)
        except NoNodeError:
            return None
        return zk_data.decode_controller(data)

    def controller_epoch(self) -> int:
        data, _ = self.zk.get(zk_data.CONTROLLER_EPOCH_PATH)
        return zk_data.decode_controller_epoch(data)

    def wait_for_controller(self, accept: Iterable[int] | None = None, timeout: float = 20) -> int:
        wanted = set(accept) if accept is not None else set(self.brokers)
        found: list[int] = []

        def elected() -> bool:
            current = self.controller_id()
            if current in wanted:
                found.append(current)
                return True
            return False

        wait_for(elected, timeout, message=f"a controller among {sorted(wanted)}")
        return found[-1]

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


class TestController(ScriptedController):
    """The scripted controller over a :class:`Cluster`'s processes: it talks to the brokers
    that run and are not paused, and names a paused leader's endpoint (ZooKeeper still
    counts it alive until its session expires)."""

    __test__ = False  # not a pytest test class

    def __init__(self, zk: KazooClient, cluster: Cluster, controller_epoch: int = 1) -> None:
        super().__init__(zk, {}, controller_epoch)
        self.cluster = cluster

    def reachable_brokers(self) -> dict[int, BrokerAddress]:
        return {i: self._address(i) for i in self.cluster.live()}

    def alive_brokers(self) -> dict[int, BrokerAddress]:
        return {i: self._address(i) for i, b in self.cluster.brokers.items() if b.is_running}

    def _address(self, broker_id: int) -> BrokerAddress:
        broker = self.cluster.brokers[broker_id]
        return BrokerAddress(broker.spec.host, broker.port)

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
    *,
    scripted_controller: bool = False,
) -> Iterator[Cluster]:
    cluster = Cluster(
        zk,
        zookeeper_connect,
        root,
        broker_ids,
        overrides,
        broker_overrides,
        scripted_controller=scripted_controller,
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop_all()
