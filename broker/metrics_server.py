"""The broker's Prometheus endpoint: ``http://<host>:<metrics.prometheus.port>/metrics``.

``prometheus_client``'s HTTP server answers scrapes on its own threads; every scrape is
collected on the broker's event loop (one hop, a few hundred microseconds), because the
gauges of :class:`BrokerStateCollector` read the replica manager's and the controller's
state, which only the loop may touch. The counters and timers of
:mod:`broker.broker_metrics` and :mod:`controller.controller_metrics` are in the same
registry.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.replication.replica_manager import ReplicaManager
from controller.kafka_controller import KafkaController

SCRAPE_TIMEOUT_S = 10.0


class MetricsServer:
    """Serves ``registry`` over HTTP, each scrape collected on ``loop``."""

    def __init__(
        self, registry: CollectorRegistry, host: str, port: int, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._exposed = CollectorRegistry(auto_describe=False)
        self._exposed.register(_CollectedOnLoop(registry, loop))
        self._host = host
        self._port = port
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Bind and serve; returns the bound port. Raises OSError when the port is taken."""
        self._server, self._thread = start_http_server(
            self._port, self._host, registry=self._exposed
        )
        return int(self._server.server_port)

    def stop(self) -> None:
        """Stop serving (blocks up to the server's half-second poll: call off the loop)."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None


class _CollectedOnLoop(Collector):
    """``registry``'s metrics, collected by a task on ``loop`` for a scrape on another
    thread (or directly, when already on the loop's thread)."""

    def __init__(self, registry: CollectorRegistry, loop: asyncio.AbstractEventLoop) -> None:
        self._registry = registry
        self._loop = loop

    def collect(self) -> Iterator[Metric]:
        if _running_loop() is self._loop:
            return iter(list(self._registry.collect()))

        async def gather() -> list[Metric]:
            return list(self._registry.collect())

        future = asyncio.run_coroutine_threadsafe(gather(), self._loop)
        return iter(future.result(timeout=SCRAPE_TIMEOUT_S))


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


class BrokerStateCollector(Collector):
    """Gauges read from the replica manager and the controller at scrape time.

    Must be collected on the broker's event loop (see :mod:`broker.metrics_server`).
    """

    def __init__(self, replica_manager: ReplicaManager, controller: KafkaController) -> None:
        self._replica_manager = replica_manager
        self._controller = controller

    def collect(self) -> Iterator[Metric]:
        yield from self._replica_manager_gauges()
        yield from self._partition_gauges()
        yield from self._controller_gauges()

    def _replica_manager_gauges(self) -> Iterator[Metric]:
        rm = self._replica_manager
        partitions = list(rm.partitions.values())
        leaders = [p for p in partitions if p.is_leader]
        offline = rm.log_dir_failure is not None
        yield _gauge(
            "kafka_server_replicamanager_partitioncount",
            "Partitions with a replica on this broker",
            len(partitions),
        )
        yield _gauge(
            "kafka_server_replicamanager_leadercount",
            "Partitions this broker leads",
            len(leaders),
        )
        yield _gauge(
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Partitions this broker leads whose ISR is smaller than their replica set",
            sum(1 for p in leaders if len(p.isr) < len(p.replicas)),
        )
        yield _gauge(
            "kafka_server_replicamanager_offlinereplicacount",
            "Replicas on an offline log dir, and replicas assigned here that this broker "
            "does not host",
            (len(partitions) if offline else 0) + len(rm.metadata_cache.unhosted()),
        )
        yield _gauge(
            "kafka_log_logmanager_offlinelogdirectorycount",
            "Log dirs taken offline by an I/O error",
            1 if offline else 0,
        )
        for purgatory, label in (
            (rm.produce_purgatory, "Produce"),
            (rm.fetch_purgatory, "Fetch"),
            (rm.delete_records_purgatory, "DeleteRecords"),
        ):
            size = GaugeMetricFamily(
                "kafka_server_delayedoperationpurgatory_purgatorysize",
                "Watch entries in a purgatory (acks=all produces waiting for the ISR, "
                "fetches waiting for data, DeleteRecords waiting for the followers)",
                labels=["delayedOperation"],
            )
            size.add_metric([label], purgatory.purgatory_size)
            yield size
            delayed = GaugeMetricFamily(
                "kafka_server_delayedoperationpurgatory_numdelayedoperations",
                "Operations waiting in a purgatory",
                labels=["delayedOperation"],
            )
            delayed.add_metric([label], purgatory.num_delayed_operations)
            yield delayed

    def _partition_gauges(self) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        families = {
            "leo": GaugeMetricFamily(
                "kafka_log_log_logendoffset", "A replica's log end offset", labels=labels
            ),
            "lso": GaugeMetricFamily(
                "kafka_log_log_logstartoffset", "A replica's log start offset", labels=labels
            ),
            "size": GaugeMetricFamily(
                "kafka_log_log_size", "A replica's log size in bytes", labels=labels
            ),
            "hw": GaugeMetricFamily(
                "kafka_cluster_partition_highwatermark",
                "A replica's high watermark (the leader's is the partition's)",
                labels=labels,
            ),
            "urp": GaugeMetricFamily(
                "kafka_cluster_partition_underreplicated",
                "1 when this broker leads the partition and its ISR is short",
                labels=labels,
            ),
            "isr": GaugeMetricFamily(
                "kafka_cluster_partition_insyncreplicascount",
                "The ISR's size, on the partition's leader",
                labels=labels,
            ),
        }
        for tp, partition in sorted(self._replica_manager.partitions.items()):
            key = [tp.topic, str(tp.partition)]
            log = partition.log
            families["leo"].add_metric(key, partition.log_end_offset)
            families["lso"].add_metric(key, log.log_start_offset)
            families["size"].add_metric(key, log.size_in_bytes)
            families["hw"].add_metric(key, partition.high_watermark)
            if partition.is_leader:
                short = len(partition.isr) < len(partition.replicas)
                families["urp"].add_metric(key, 1 if short else 0)
                families["isr"].add_metric(key, len(partition.isr))
        yield from families.values()

    def _controller_gauges(self) -> Iterator[Metric]:
        controller = self._controller
        active = controller.is_active
        ctx = controller.context
        states = ctx.partition_states if active else {}
        deleting = ctx.topics_being_deleted if active else set()
        yield _gauge(
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 on the broker that is the active controller",
            1 if active else 0,
        )
        yield _gauge(
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "Partitions without a live leader (on the active controller)",
            sum(1 for tp in states if tp.topic not in deleting and not ctx.is_online(tp)),
        )
        yield _gauge(
            "kafka_controller_kafkacontroller_globalpartitioncount",
            "Partitions in the cluster (on the active controller)",
            len(states),
        )
        yield _gauge(
            "kafka_controller_kafkacontroller_globaltopiccount",
            "Topics in the cluster (on the active controller)",
            len(ctx.all_topics) if active else 0,
        )
