"""Test-side cluster helpers: real broker processes, each running its controller candidate.

By default the brokers elect their controller and it does all leadership work: a test
creates a topic as an admin client does (:meth:`Cluster.create_topic` writes
``/config/topics/<t>`` and ``/brokers/topics/<t>``) and observes the outcome in ZooKeeper
and through the brokers. With ``scripted_controller=True`` a
:class:`~chaos.scripted_controller.ProcessController` wins the election before the brokers
start and the test dictates each LeaderAndIsr (see that module for when that is needed).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import grpc
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from chaos.scripted_controller import ProcessController
from deploy.broker_process import BrokerProcess, BrokerSpec, stop_brokers
from deploy.cluster_probe import (
    checkpointed_high_watermark,
    create_topic,
    leader_serving,
    replica_records,
)
from proto.records.record_batch import Record, decode_batch, encode_batch, scan_batches
from proto.topic_partition import TopicPartition
from proto.transport.tls import TlsConfig, sync_channel
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.zk import znodes
from proto.zk.sync_client import read_partition_state
from tests.helpers import wait_for

_APPENDED_UNACKNOWLEDGED = frozenset({pb.REQUEST_TIMED_OUT, pb.NOT_ENOUGH_REPLICAS_AFTER_APPEND})
"""acks=all answers that leave the records in the leader's log, not yet committed."""


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
        tls: TlsConfig | None = None,
    ) -> None:
        """``tls``: the test's own certificate, for its channels to TLS brokers."""
        broker_ids = tuple(broker_ids)
        self.zk = zk
        self.tls = tls
        self.root = root
        base = {
            "zookeeper.session.timeout.ms": "2000",
            "replica.lag.time.max.ms": "2000",
            "replica.fetch.wait.max.ms": "200",
            "replica.fetch.backoff.ms": "100",
            "replica.high.watermark.checkpoint.interval.ms": "200",
            "controlled.shutdown.retry.backoff.ms": "100",
            "request.timeout.ms": "5000",
            # As Kafka's own test harness: a few offsets partitions, replicated on what runs.
            "offsets.topic.num.partitions": "5",
            "offsets.topic.replication.factor": str(min(3, len(broker_ids))),
            "transaction.state.log.num.partitions": "5",
            "transaction.state.log.replication.factor": str(min(3, len(broker_ids))),
            "transaction.state.log.min.isr": str(min(2, len(broker_ids))),
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
        self._scripted = ProcessController(zk, self.brokers) if scripted_controller else None
        if self._scripted is not None:
            self._scripted.take_over()
        self._channels: dict[int, tuple[str, grpc.Channel]] = {}

    @property
    def controller(self) -> ProcessController:
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
        stop_brokers(self.brokers.values())

    def channel(self, broker_id: int) -> grpc.Channel:
        address = self.brokers[broker_id].address
        cached = self._channels.get(broker_id)
        if cached is None or cached[0] != address:
            if cached is not None:
                cached[1].close()
            cached = (address, sync_channel(address, self.tls))
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

    def state(self, tp: TopicPartition) -> znodes.PartitionState | None:
        """The partition's state znode now, or None if it has none."""
        return read_partition_state(self.zk, tp)

    def leader_serving(self, tp: TopicPartition) -> int | None:
        """The leader named by the state znode if it is running, not paused, and its
        metadata says it leads at that epoch (it has become leader), else None."""
        addresses = {i: b.address for i, b in self.brokers.items() if b.is_running and not b.paused}
        state = leader_serving(self.zk, tp, addresses, self.tls)
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
            data, _ = self.zk.get(znodes.CONTROLLER_PATH)
        except NoNodeError:
            return None
        return znodes.decode_controller(data)

    def controller_epoch(self) -> int:
        data, _ = self.zk.get(znodes.CONTROLLER_EPOCH_PATH)
        return znodes.decode_controller_epoch(data)

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
        return replica_records(self.partition_dir(broker_id, tp))

    def checkpointed_hw(self, broker_id: int, tp: TopicPartition) -> int | None:
        return checkpointed_high_watermark(self.brokers[broker_id].spec.data_dir, tp)

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

    def produce_until_acked(
        self, tp: TopicPartition, values: list[bytes], timeout: float = 30
    ) -> int:
        """Produce ``values`` acks=all to the current leader until acknowledged, through
        leadership changes; returns the base offset.

        A retry must not write the records twice (tests check exact offsets), so only a
        refusal that wrote nothing is sent again. After REQUEST_TIMED_OUT or
        NOT_ENOUGH_REPLICAS_AFTER_APPEND the records are in the leader's log at the offset
        the response names: wait until a leader serves them committed there (acknowledged
        after all) or holds something else there (truncated away: send again).
        """
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            leader = self.leader_serving(tp)
            if leader is None:
                last = "no leader serving"
                time.sleep(0.05)
                continue
            try:
                response = self.produce(leader, tp, values, acks=-1, timeout_ms=10_000)
            except grpc.RpcError as e:
                last = e
                time.sleep(0.05)
                continue
            last = response
            if response.error_code == pb.NONE:
                return response.base_offset
            if response.error_code in _APPENDED_UNACKNOWLEDGED and response.base_offset >= 0:
                outcome = self._committed_at(tp, values, response.base_offset, deadline)
                if outcome is not None:
                    return outcome
            else:
                time.sleep(0.05)
        raise AssertionError(f"produce to {tp} not acknowledged within {timeout} s: {last}")

    def _committed_at(
        self, tp: TopicPartition, values: list[bytes], offset: int, deadline: float
    ) -> int | None:
        """``offset`` once a leader serves ``values`` committed there; None once a leader
        holds other records there (they were truncated away) or the deadline passed."""
        while time.monotonic() < deadline:
            leader = self.leader_serving(tp)
            if leader is not None:
                try:
                    held = dict(self.replica_records(leader, tp))
                    committed = dict(self.consume_all(leader, tp))
                except (grpc.RpcError, AssertionError, OSError):
                    held, committed = {}, {}
                if all(committed.get(offset + i) == v for i, v in enumerate(values)):
                    return offset
                if any(offset + i in held and held[offset + i] != v for i, v in enumerate(values)):
                    return None
            time.sleep(0.05)
        return None

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
        records = self.try_consume_all(broker_id, tp, retry=frozenset())
        assert records is not None
        return records

    def try_consume_all(
        self,
        broker_id: int,
        tp: TopicPartition,
        retry: frozenset[int] = frozenset({pb.NOT_LEADER_OR_FOLLOWER}),
    ) -> list[tuple[int, bytes | None]] | None:
        """:meth:`consume_all`, or None when a fetch answers an error in ``retry`` (a
        client retries it: a leader applying a LeaderAndIsr is fenced until its new
        epoch is recorded, while its Metadata already shows that epoch)."""
        out: list[tuple[int, bytes | None]] = []
        offset = 0
        while True:
            part = self.fetch(broker_id, tp, offset)
            if part.error_code in retry:
                return None
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
    tls: TlsConfig | None = None,
) -> Iterator[Cluster]:
    cluster = Cluster(
        zk,
        zookeeper_connect,
        root,
        broker_ids,
        overrides,
        broker_overrides,
        scripted_controller=scripted_controller,
        tls=tls,
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop_all()
