"""The broker's Prometheus metrics, under the names Kafka's JMX exporter gives Kafka's MBeans.

``kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions`` becomes
``kafka_server_replicamanager_underreplicatedpartitions``, so a dashboard or alert written
for Kafka reads minibroker too. Two kinds:

- counters and timers updated as things happen: ISR shrinks and expands
  (:class:`ReplicaManagerMetrics`; Kafka's ``IsrShrinksPerSec`` is the rate of the
  ``_total`` counter), requests and their latency per API (:class:`RequestMetrics`,
  Kafka's ``RequestMetrics``), the controller's (:mod:`controller.controller_metrics`);
- gauges read from the broker's state when scraped (:mod:`broker.metrics_server`): partition
  counts, under-replicated and offline partitions, each partition's log end offset, log
  start offset, size and high watermark, the purgatories, offline log dirs, the active
  controller. Reading at scrape time costs nothing on the produce path; the scrape runs on
  the event loop, so it never sees a state half-changed.

Where Kafka has no metric (a partition's high watermark), the name follows the same scheme:
``kafka_cluster_partition_highwatermark``.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

REQUEST_TIME_BUCKETS_MS = (0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


class ReplicaManagerMetrics:
    """The replica manager's counters. With ``registry=None`` they count, exported nowhere."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.isr_shrinks = Counter(
            "kafka_server_replicamanager_isrshrinks",
            "ISR shrinks written by this broker as leader (Kafka's IsrShrinksPerSec)",
            registry=registry,
        )
        self.isr_expands = Counter(
            "kafka_server_replicamanager_isrexpands",
            "ISR expands written by this broker as leader (Kafka's IsrExpandsPerSec)",
            registry=registry,
        )
        self.resource_errors = Counter(
            "minibroker_log_resource_errors",
            "Checkpoint or segment operations that failed for want of a process resource "
            "(EMFILE, ENFILE, ENOMEM): retried, the log dir stays online",
            ["errno"],
            registry=registry,
        )


class RequestMetrics:
    """Requests served and their total time, per API (Kafka's ``kafka.network:type=
    RequestMetrics,name=RequestsPerSec|TotalTimeMs|ErrorsPerSec,request=<api>``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.requests = Counter(
            "kafka_network_requestmetrics_requests",
            "Requests served, by API",
            ["request"],
            registry=registry,
        )
        self.total_time_ms = Histogram(
            "kafka_network_requestmetrics_totaltimems",
            "Time from a request's arrival to its answer (ms), by API; an acks=all produce "
            "includes its wait for the ISR, a fetch its long poll",
            ["request"],
            buckets=REQUEST_TIME_BUCKETS_MS,
            registry=registry,
        )
        self.errors = Counter(
            "kafka_network_requestmetrics_errors",
            "Requests refused as a whole (gRPC INVALID_ARGUMENT or INTERNAL), by API and status",
            ["request", "error"],
            registry=registry,
        )

        self._children: dict[str, tuple[Any, Any]] = {}
        """Per API, its counter and histogram children: ``labels()`` looks them up under a
        lock on every call, and the produce and fetch paths observe thousands a second."""

    def observe(self, request: str, elapsed_ms: float) -> None:
        children = self._children.get(request)
        if children is None:
            children = self._children[request] = (
                self.requests.labels(request),
                self.total_time_ms.labels(request),
            )
        children[0].inc()
        children[1].observe(elapsed_ms)
