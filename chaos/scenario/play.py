"""What a scenario is (:class:`Scenario`) and what its steps act on (:class:`Play`): the
cluster, the producer whose acknowledgements go to the history, and the narrator that tells
the story one line per step."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO

import grpc

from broker.replication.truncation import TruncationMode
from chaos.history_recorder import HistoryRecorder
from chaos.scenario.cluster import A, B, ScenarioCluster, ScenarioError, shown
from chaos.scenario.verdict import Prediction
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb

__all__ = ["TP", "Narrator", "Play", "Scenario"]

TP = TopicPartition("scenario", 0)
"""The one partition of both scenarios."""


class Narrator:
    """Prints the story: one line per step, after the seconds since the scenario began,
    flushed at once so that a terminal or a pipe follows along."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.started = time.monotonic()

    def __call__(self, text: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:5.1f}s] {text}", file=self.out, flush=True)

    def line(self, text: str) -> None:
        """A line outside the steps (the header, the verdict), without the clock."""
        print(text, file=self.out, flush=True)


@dataclass
class Play:
    """One run of a scenario: what its steps act on."""

    cluster: ScenarioCluster
    mode: TruncationMode
    history: HistoryRecorder
    say: Narrator

    @property
    def truncates_to_high_watermark(self) -> bool:
        """The pre-0.11 rule (Kafka < 0.11) rather than leader epochs (KIP-101/KIP-279)."""
        return self.mode is TruncationMode.HIGH_WATERMARK

    def produce(self, broker_id: int, value: str, *, acks: int = -1) -> int:
        """Produce ``value`` to ``broker_id`` and return the offset it was acknowledged at;
        the outcome goes to the history (``ok`` with the offset, ``info`` when it is unknown
        whether the record was written). ScenarioError unless acknowledged: the scenario
        cannot go on from a state the design notes do not describe."""
        try:
            answer = self.cluster.produce(broker_id, TP, value, acks=acks)
        except grpc.RpcError as e:
            self.history.info(TP.topic, TP.partition, value)
            raise ScenarioError(
                f"{value} sent to broker {broker_id} got no answer ({e.code().name})"
            ) from None
        if answer.error_code != pb.NONE:
            self.history.info(TP.topic, TP.partition, value)
            raise ScenarioError(
                f"{value} sent to broker {broker_id} was not acknowledged: "
                f"{pb.ErrorCode.Name(answer.error_code)} {answer.error_message}".rstrip()
            )
        self.history.ok(TP.topic, TP.partition, value, answer.base_offset)
        return answer.base_offset

    def log(self, broker_id: int) -> list[str]:
        """The values the replica holds on disk."""
        return self.cluster.log(broker_id, TP)

    def holds(self, broker_id: int) -> str:
        """The values the replica holds on disk, for a sentence: ``m0, m1``."""
        return shown(self.log(broker_id))

    def high_watermark(self, broker_id: int) -> int | None:
        return self.cluster.high_watermark(broker_id, TP)

    def mark(self, label: str) -> None:
        """A key event of the story (``B truncates m1``), named on the report's time axis
        (a ``mark`` line of the timeline)."""
        self.cluster.timeline.event("mark", None, label=label)


@dataclass(frozen=True)
class Scenario:
    """One failure scenario of docs/replication.md, as the design notes tell it."""

    name: str
    summary: str
    """One line for ``--help``."""
    setting: str
    """The story's starting point, printed before the first step."""
    play: Callable[[Play], None]
    """The steps, on a cluster whose ZooKeeper runs and whose brokers do not yet."""
    predictions: Mapping[TruncationMode, Prediction]
    """What the audit should find afterwards, per truncation mode."""
    broker_properties: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    """Per-broker properties besides the common ones (the test-only knobs)."""
    note: str | None = None
    """Printed after the verdict in every mode."""
    roles: Mapping[str, int] = field(default_factory=lambda: {"A": A, "B": B})
    """The narration's names of the brokers (the timeline's ``roles`` line: the report
    titles the brokers' lanes with them)."""
