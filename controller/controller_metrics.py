"""The controller's own metrics (Kafka's ``kafka.controller:type=ControllerStats``).

Named as Prometheus' JMX exporter names Kafka's MBeans, so dashboards and alerts written for
Kafka find them: ``kafka_controller_controllerstats_leaderelectionrateandtimems`` and
``kafka_controller_controllerstats_uncleanleaderelections_total``. The controller's gauges
(active controller, offline partitions) are read from its context when scraped, by
:mod:`broker.broker_metrics`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

ELECTION_TIME_BUCKETS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


class ControllerMetrics:
    """Counters and timers the controller updates as it works.

    With ``registry=None`` (a controller in a unit test) they count but are exported nowhere.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.leader_election_time_ms = Histogram(
            "kafka_controller_controllerstats_leaderelectionrateandtimems",
            "Time the controller took to handle a broker change or a log-dir failure, the "
            "events that elect leaders for partitions left without one (ms; the count is "
            "Kafka's LeaderElectionRate)",
            buckets=ELECTION_TIME_BUCKETS_MS,
            registry=registry,
        )
        self.unclean_leader_elections = Counter(
            "kafka_controller_controllerstats_uncleanleaderelections",
            "Leaders elected from outside the ISR (unclean.leader.election.enable): each "
            "may have lost acknowledged writes",
            registry=registry,
        )
