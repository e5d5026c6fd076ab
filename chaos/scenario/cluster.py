"""The cluster of one scenario: its own ZooKeeper and brokers A and B, as processes under the
run directory, with every fault it injects written to the run's timeline.

Layout under ``root`` while the scenario runs (copied into the run directory's ``data/``
and ``logs/`` at the end, then removed)::

    zookeeper/ zookeeper.log     ZooKeeper's dataDir and log
    broker-1/ broker-1.log       A's data dir and log
    broker-2/ broker-2.log       B's

Ports are free ones picked at start. :meth:`ScenarioCluster.close` stops whatever still
runs (brokers first, paused or not, then ZooKeeper) and must run on every exit path:
success, failure, Ctrl-C. Not thread-safe: one scenario drives it from one thread.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from kazoo.client import KazooClient

from chaos.history_recorder import TimelineRecorder
from chaos.run_dir import RunDir
from deploy.broker_process import BrokerProcess, BrokerSpec
from deploy.cluster_probe import (
    checkpointed_high_watermark,
    leader_serving,
    replica_records,
    wait_until,
)
from deploy.zookeeper import ZooKeeperConfig, ZooKeeperServer
from proto.errors import MinibrokerError
from proto.records.record_batch import Record, encode_batch
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.zk.sync_client import read_partition_state, start_kazoo_client, stop_kazoo_client

__all__ = ["BROKER_PROPERTIES", "A", "B", "ScenarioCluster", "ScenarioError"]

A, B = 1, 2
"""The design notes' replicas: A leads first, B follows."""

BROKER_PROPERTIES = {
    # RF 2 with min.insync.replicas 1, as in both scenarios of the design notes.
    "min.insync.replicas": "1",
    # Short timeouts, so that each step takes a second or two rather than Kafka's tens.
    "zookeeper.session.timeout.ms": "2000",
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "100",
    "replica.high.watermark.checkpoint.interval.ms": "200",
    "controlled.shutdown.retry.backoff.ms": "100",
    "request.timeout.ms": "5000",
}
"""Every broker's properties, besides ``replication.truncation.mode``."""

_ZOOKEEPER_TIMEOUT_S = 60.0
_BROKER_START_TIMEOUT_S = 60.0
_PRODUCE_TIMEOUT_MS = 10_000


class ScenarioError(MinibrokerError):
    """The scenario could not run to its end (a process did not start, the cluster did not
    reach a state the scenario needs in time): the run cannot be judged."""


class ScenarioCluster:
    """ZooKeeper and brokers A and B for one scenario, in one truncation mode."""

    def __init__(
        self,
        root: Path,
        timeline: TimelineRecorder,
        properties: Mapping[str, str],
        broker_properties: Mapping[int, Mapping[str, str]] | None = None,
    ) -> None:
        self.root = root
        self.timeline = timeline
        self.properties = {**BROKER_PROPERTIES, **properties}
        self.broker_properties = dict(broker_properties or {})
        self.zookeeper = ZooKeeperServer(
            ZooKeeperConfig(data_dir=root / "zookeeper", log_path=root / "zookeeper.log")
        )
        self.brokers: dict[int, BrokerProcess] = {}
        """A and B, once :meth:`open` has started ZooKeeper (not the brokers)."""
        self._zk: KazooClient | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def open(self) -> None:
        """Start ZooKeeper on a free port and prepare A and B (not started)."""
        (self.root / "zookeeper").mkdir(parents=True, exist_ok=True)
        self.zookeeper.start(timeout=_ZOOKEEPER_TIMEOUT_S)
        connect = self.zookeeper.connect_string
        self._zk = start_kazoo_client(connect, connect_timeout_s=_ZOOKEEPER_TIMEOUT_S)
        for broker_id in (A, B):
            overrides = {**self.properties, **self.broker_properties.get(broker_id, {})}
            spec = BrokerSpec(
                broker_id, self.root / f"broker-{broker_id}", connect, overrides=overrides
            )
            self.brokers[broker_id] = BrokerProcess(spec)

    @property
    def zk(self) -> KazooClient:
        if self._zk is None:
            raise ScenarioError("the scenario's ZooKeeper is not started")
        return self._zk

    def stop_brokers(self) -> None:
        """SIGTERM every running broker at once (controlled shutdown, checkpoints written)
        and wait for each."""
        running = [b for b in self.brokers.values() if b.is_running]
        if running:
            with ThreadPoolExecutor(max_workers=len(running)) as pool:
                list(pool.map(lambda broker: broker.stop(), running))

    def close(self) -> None:
        """SIGKILL whatever broker still runs (paused ones too), then close the ZooKeeper
        session and stop ZooKeeper. Idempotent."""
        for broker in self.brokers.values():
            broker.kill()
        if self._zk is not None:
            stop_kazoo_client(self._zk)
            self._zk = None
        self.zookeeper.stop()

    def collect(self, run: RunDir) -> None:
        """Copy the stopped brokers' data dirs and every log into ``run``, then remove the
        cluster's own directory."""
        run.collect(
            {i: b.spec.data_dir for i, b in self.brokers.items()},
            [*(b.log_path for b in self.brokers.values()), self.zookeeper.log_path],
        )
        shutil.rmtree(self.root, ignore_errors=True)

    # -- faults, each written to the timeline ------------------------------------------------

    def start(self, broker_id: int) -> None:
        """Start the broker and wait until it has registered in ZooKeeper."""
        self.brokers[broker_id].start(self.zk, timeout=_BROKER_START_TIMEOUT_S)
        self.timeline.event("start", broker_id)

    def kill(self, broker_id: int) -> None:
        """SIGKILL: a crash; only what the broker wrote to its files survives."""
        self.timeline.event("kill", broker_id)
        self.brokers[broker_id].kill()

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: the broker freezes, its sockets stay open and unanswered."""
        self.timeline.event("pause", broker_id)
        self.brokers[broker_id].pause()

    def resume(self, broker_id: int) -> None:
        self.brokers[broker_id].resume()
        self.timeline.event("resume", broker_id)

    # -- what the replicas hold --------------------------------------------------------------

    def log(self, broker_id: int, tp: TopicPartition) -> list[str]:
        """The values in the replica's segment files, read from disk, as text."""
        records = replica_records(self.brokers[broker_id].spec.data_dir / tp.dir_name)
        return [(v or b"").decode("utf-8", errors="replace") for _, v in records]

    def high_watermark(self, broker_id: int, tp: TopicPartition) -> int | None:
        """The broker's checkpointed high watermark of ``tp`` (what a restart starts from)."""
        return checkpointed_high_watermark(self.brokers[broker_id].spec.data_dir, tp)

    def serving_leader(self, tp: TopicPartition) -> int | None:
        """The leader the state znode names, once it serves ``tp`` at that epoch."""
        addresses = {i: b.address for i, b in self.brokers.items() if b.is_running and not b.paused}
        state = leader_serving(self.zk, tp, addresses)
        return None if state is None else state.leader

    def leader_epoch(self, tp: TopicPartition) -> int | None:
        state = read_partition_state(self.zk, tp)
        return None if state is None else state.leader_epoch

    def isr(self, tp: TopicPartition) -> set[int]:
        state = read_partition_state(self.zk, tp)
        return set() if state is None else set(state.isr)

    # -- waiting -----------------------------------------------------------------------------

    @staticmethod
    def settle(condition: Callable[[], object], timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for ``condition``; whether it came true. For what
        the truncation mode decides: the scenario goes on either way and the audit judges."""
        return wait_until(condition, timeout) is not None

    @staticmethod
    def require(condition: Callable[[], object], timeout: float, what: str) -> None:
        """Wait up to ``timeout`` seconds for a state the scenario needs; ScenarioError
        naming ``what`` if it does not come."""
        if wait_until(condition, timeout) is None:
            raise ScenarioError(f"{what} did not happen within {timeout:.0f} s")

    # -- the producer ------------------------------------------------------------------------

    def produce(
        self, broker_id: int, tp: TopicPartition, value: str, *, acks: int
    ) -> pb.PartitionProduceResponse:
        """Send one record to ``broker_id`` (the leader the scenario expects) and return its
        partition's answer; grpc.RpcError if the broker does not answer."""
        record = Record(key=None, value=value.encode("utf-8"), timestamp=int(time.time() * 1000))
        batch = encode_batch([record])
        request = pb.ProduceRequest(acks=acks, timeout_ms=_PRODUCE_TIMEOUT_MS)
        request.topics.add(name=tp.topic).partitions.add(index=tp.partition, records=batch)
        with grpc.insecure_channel(self.brokers[broker_id].address) as channel:
            response = pb_grpc.BrokerStub(channel).Produce(
                request, timeout=_PRODUCE_TIMEOUT_MS / 1000 + 10
            )
        return response.responses[0].partitions[0]


def shown(values: Iterable[str]) -> str:
    """``m0, m1`` (``nothing`` for an empty log)."""
    return ", ".join(values) or "nothing"
