"""An acks=all producer load for fault tests: one thread, one record per request, following
leadership through the partition state znodes as a client follows metadata.

It records every acknowledged (partition, offset, value), every error it retried, and every
error that is not retriable (``proto.errors`` decides, with Kafka's flags). Fault tests
run it while they kill, pause or stop brokers, then check that each acknowledged record is
in the log at its offset, that no offset was acknowledged twice, and that producers saw
only retriable errors.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import grpc

from proto import errors
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from tests.cluster import Cluster
from tests.helpers import wait_for

_RETRIABLE_STATUS = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
}
_RETRY_BACKOFF_S = 0.02


@dataclass
class Acked:
    tp: TopicPartition
    offset: int
    value: bytes
    leader: int
    at: float
    """time.monotonic() of the acknowledgement."""


@dataclass
class LoadReport:
    acked: list[Acked] = field(default_factory=list)
    retried: Counter[str] = field(default_factory=Counter)
    fatal: list[str] = field(default_factory=list)
    """Non-retriable errors: each is a failure of the test that ran the load."""

    def acked_after(self, t: float, tp: TopicPartition | None = None) -> list[Acked]:
        return [a for a in self.acked if a.at > t and (tp is None or a.tp == tp)]


class AcksAllLoad:
    """Produce ``<prefix>-<n>`` values round-robin over ``tps`` until stopped."""

    def __init__(
        self,
        cluster: Cluster,
        tps: Iterable[TopicPartition],
        *,
        prefix: str = "load",
        timeout_ms: int = 3000,
    ) -> None:
        self.cluster = cluster
        self.tps = list(tps)
        self.prefix = prefix
        self.timeout_ms = timeout_ms
        self.report = LoadReport()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="acks-all-load", daemon=True)

    def __enter__(self) -> AcksAllLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> LoadReport:
        self._stop.set()
        self._thread.join(30)
        return self.report

    def acked_count(self) -> int:
        with self._lock:
            return len(self.report.acked)

    def wait_for_more_acks(self, count: int, timeout: float = 30) -> None:
        """Wait until ``count`` more records than now have been acknowledged."""
        target = self.acked_count() + count
        wait_for(
            lambda: self.acked_count() >= target,
            timeout,
            message=lambda: f"{target} acks (have {self.acked_count()}, fatal {self.report.fatal})",
        )

    def snapshot(self) -> list[Acked]:
        with self._lock:
            return list(self.report.acked)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            tp = self.tps[n % len(self.tps)]
            value = f"{self.prefix}-{n}".encode()
            while not self._stop.is_set():
                outcome = self._produce_once(tp, value)
                if outcome is None:
                    break
                with self._lock:
                    self.report.retried[outcome] += 1
                time.sleep(_RETRY_BACKOFF_S)
            n += 1

    def _produce_once(self, tp: TopicPartition, value: bytes) -> str | None:
        """None when acknowledged (or fatally refused, recorded); else why to retry."""
        state = self.cluster.state(tp)
        if state is None or state.leader < 0:
            return "no_leader"
        broker = self.cluster.brokers.get(state.leader)
        if broker is None or not broker.is_running or broker.paused:
            return "leader_not_running"
        try:
            response = self.cluster.produce(
                state.leader, tp, [value], acks=-1, timeout_ms=self.timeout_ms
            )
        except grpc.RpcError as e:
            code_of = getattr(e, "code", None)
            code = code_of() if callable(code_of) else None
            if code in _RETRIABLE_STATUS:
                return f"grpc_{code.name}"
            with self._lock:
                self.report.fatal.append(f"{tp} via {state.leader}: {e}")
            return None
        if response.error_code == pb.NONE:
            with self._lock:
                self.report.acked.append(
                    Acked(tp, response.base_offset, value, state.leader, time.monotonic())
                )
            return None
        error = errors.for_code(response.error_code, response.error_message)
        name = pb.ErrorCode.Name(response.error_code)
        if error is not None and error.retriable:
            return name
        with self._lock:
            self.report.fatal.append(f"{tp} via {state.leader}: {name} {response.error_message}")
        return None


def check_acked_records_survive(cluster: Cluster, report: LoadReport) -> None:
    """Every acknowledged record is in its partition's current leader's log at its offset
    (read as a consumer reads, so below the HW), and no offset was acknowledged twice."""
    by_tp: dict[TopicPartition, list[Acked]] = {}
    for a in report.acked:
        by_tp.setdefault(a.tp, []).append(a)
    for tp, acked in by_tp.items():
        offsets = [a.offset for a in acked]
        assert len(offsets) == len(set(offsets)), f"{tp}: an offset was acknowledged twice"
        log = dict(cluster.consume_all(cluster.wait_for_leader(tp), tp))
        lost = [a for a in acked if log.get(a.offset) != a.value]
        assert not lost, f"{tp}: {len(lost)} acknowledged records lost, first {lost[:3]}"
