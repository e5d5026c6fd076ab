"""What an audit finds: violations and the per-partition summary (plain data, no Spark)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chaos.audit.history import NemesisEvent
from chaos.audit.latency import SecondLatency, as_rows

__all__ = [
    "GROUP_KINDS",
    "KINDS",
    "READ_KINDS",
    "TRANSACTION_KINDS",
    "AuditResult",
    "PartitionSummary",
    "ReplicaSummary",
    "TornTail",
    "Violation",
]

TRANSACTION_KINDS = (
    "lost_committed",
    "committed_abort",
    "aborted_read",
    "dirty_read",
    "partial_txn",
    "hanging_txn",
)
"""The kinds the transaction checks find (:mod:`chaos.audit.transactions`)."""
GROUP_KINDS = ("lost_commit", "shared_partition", "read_below_commit")
"""The kinds the consumer group checks find (:mod:`chaos.audit.groups`)."""
KINDS = (
    "lost_ack",
    "divergence",
    "duplicate",
    "resent",
    "gap",
    "crc",
    "epoch_cache",
    "hw_above_leo",
    "phantom",
    "inconsistent_read",
    "nonmonotonic_poll",
    "poll_skip",
    "compaction_lost_latest",
    "compaction_moved",
    "tombstone_dropped_early",
    *TRANSACTION_KINDS,
    *GROUP_KINDS,
)
"""The violation kinds of docs/audit.md, in the order the report lists them (the three
``compaction_lost_latest`` .. ``tombstone_dropped_early`` judge compacted topics only:
:mod:`chaos.audit.compaction`; the next six transactions: :mod:`chaos.audit.transactions`;
the last three consumer groups: :mod:`chaos.audit.groups`)."""
READ_KINDS = ("inconsistent_read", "nonmonotonic_poll", "poll_skip")
"""The kinds judged on what consumers read (the history's ``read`` lines)."""


@dataclass(frozen=True, slots=True)
class Violation:
    """One finding: a single offset or a run of offsets with the same fault."""

    kind: str
    topic: str
    partition: int
    offset: int
    """The first offset concerned."""
    last_offset: int
    """The last offset of the run (== offset for a single one)."""
    count: int
    """How many records (or offsets, entries) the run covers."""
    brokers: tuple[int, ...]
    detail: str
    """What is wrong and what to look at, for a person."""
    time: float | None = None
    """History time of the run's first item: when a lost_ack's record was acknowledged, when
    a read kind's record was read."""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "last_offset": self.last_offset,
            "count": self.count,
            "brokers": list(self.brokers),
            "detail": self.detail,
            "time": self.time,
        }


@dataclass(frozen=True, slots=True)
class TornTail:
    """Bytes at the end of a replica's last segment that do not form a whole batch: what a
    crash leaves and recovery truncates. Reported, not a violation."""

    segment: str
    position: int
    remaining_bytes: int
    reason: str


@dataclass(slots=True)
class ReplicaSummary:
    """One broker's replica of a partition."""

    broker: int
    log_start_offset: int
    log_end_offset: int
    """Offset after the last batch the replica holds (the last segment's base when empty)."""
    high_watermark: int | None
    """As checkpointed; None when the checkpoint has no entry."""
    batches: int
    records: int
    """Records in batches that passed their CRC (the ones compared)."""
    epoch_starts: list[tuple[int, int]]
    """(epoch, first offset) of each run of batches of one leader epoch, in log order."""
    checkpoint_epochs: list[tuple[int, int]]
    """The leader-epoch-checkpoint entries, (epoch, start offset)."""
    first_batch_offset: int | None = None
    """Base offset of the first batch in the replica's files; None when it holds none."""
    torn_tail: TornTail | None = None
    compressed_batches: int = 0
    """Batches stored compressed that passed their CRC: their records are inflated and
    checked as any others' (one that does not inflate is a ``crc`` violation)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "broker": self.broker,
            "log_start_offset": self.log_start_offset,
            "log_end_offset": self.log_end_offset,
            "high_watermark": self.high_watermark,
            "batches": self.batches,
            "records": self.records,
            "epochs": [[e, o] for e, o in self.epoch_starts],
            "leader_epoch_checkpoint": [[e, o] for e, o in self.checkpoint_epochs],
            "torn_tail": None
            if self.torn_tail is None
            else {
                "segment": self.torn_tail.segment,
                "position": self.torn_tail.position,
                "remaining_bytes": self.torn_tail.remaining_bytes,
                "reason": self.torn_tail.reason,
            },
            "compressed_batches": self.compressed_batches,
        }


@dataclass(slots=True)
class PartitionSummary:
    """One partition across its replicas."""

    topic: str
    partition: int
    replicas: list[ReplicaSummary]
    committed_end: int
    """The committed range ends here: the largest checkpointed HW among the replicas,
    bounded by the largest log end offset (what the replicas hold)."""
    log_start_offset: int
    """The smallest log start offset among the replicas: acknowledged records below it
    were deleted by retention, not lost."""
    acked: int = 0
    """``ok`` operations of the history for this partition."""
    acked_checked: int = 0
    """Those at or above the log start offset, checked against the log."""
    reads: int = 0
    """``read`` lines of the history for this partition (what consumers polled)."""
    violations: int = 0
    compacted: bool = False
    """Its topic is compacted (the topic configs say so): judged by the compaction rules."""

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "replicas": [r.to_json() for r in self.replicas],
            "committed_end": self.committed_end,
            "log_start_offset": self.log_start_offset,
            "acked": self.acked,
            "acked_checked": self.acked_checked,
            "reads": self.reads,
            "violations": self.violations,
            "compacted": self.compacted,
        }


@dataclass(slots=True)
class AuditResult:
    """Everything the reports are made of."""

    violations: list[Violation]
    partitions: list[PartitionSummary]
    brokers: dict[int, str]
    """Broker id -> its data dir."""
    history: str | None
    """The history file, None when none was given."""
    operations: dict[str, int] = field(default_factory=dict)
    """History operations by type (ok, fail, info)."""
    acks_per_second: list[tuple[int, str, int]] = field(default_factory=list)
    """(unix second, op type, count) from the history, for the timeline."""
    latency: list[SecondLatency] = field(default_factory=list)
    """Per second, the latency of the acknowledged writes that say when they were sent."""
    timeline: list[NemesisEvent] = field(default_factory=list)
    records_decoded: int = 0
    """Records decoded across all replicas."""
    seconds: float = 0.0
    """Wall time of the Spark job (session start-up excluded)."""
    phases: dict[str, float] = field(default_factory=dict)
    """Wall seconds of the job's phases: history (read and parse it), segments (scan and
    decode them), checks (every violation query), statistics."""
    transactions: dict[str, int] | None = None
    """What the transaction checks counted (committed, aborted and unknown transactions of
    the history, writes and reads checked, transactions open in the logs); None when no
    log holds a transactional batch."""
    groups: dict[str, Any] | None = None
    """What the consumer group checks counted (reads, redeliveries, commits, rebalances and
    their pauses); None when the history names no group."""

    def by_kind(self) -> dict[str, int]:
        counts = dict.fromkeys(KINDS, 0)
        for v in self.violations:
            counts[v.kind] += 1
        return counts

    def to_json(self) -> dict[str, Any]:
        return {
            "violations": [v.to_json() for v in self.violations],
            "summary": {
                "clean": not self.violations,
                "violations_by_kind": self.by_kind(),
                "brokers": {str(b): path for b, path in sorted(self.brokers.items())},
                "history": self.history,
                "operations": self.operations,
                "records_decoded": self.records_decoded,
                "transactions": self.transactions,
                "groups": self.groups,
                "latency_per_second": as_rows(self.latency),
                "seconds": round(self.seconds, 3),
                "phases": {k: round(v, 3) for k, v in self.phases.items()},
                "partitions": [p.to_json() for p in self.partitions],
            },
        }
