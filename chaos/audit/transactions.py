"""The transaction checks: what transactional producers were told and what read_committed
consumers read, against how each transaction ended in the replica logs (docs/audit.md,
"Transactions").

The Spark job hands the driver each partition's transaction spans
(:mod:`chaos.audit.transaction_log`: every transactional data batch, its outcome, the
marker that ended it); the history's transaction lines are few enough to read here (the
lines naming a ``txn`` or a read_committed read: each transactional write, each step, each
read of a read_committed consumer). The kinds, named as the anomaly literature does where a
name applies:

- ``lost_committed`` (a lost write): a write of a transaction whose commit was acknowledged
  lies in a batch the log aborts or never ends.
- ``committed_abort``: a write of a transaction whose abort was acknowledged is committed
  in the log (every read_committed consumer may read it).
- ``aborted_read`` (Adya's G1a): a read_committed consumer read a record of a transaction
  the log aborts, or one the producer was told aborted.
- ``dirty_read`` (P1, Berenson et al.'s dirty read): a read_committed consumer read a record
  whose transaction the log never ends, or read it before the leader wrote the commit
  marker (the marker's timestamp is later than the read, beyond the clocks' slack).
- ``partial_txn``: one transaction's writes end differently in different partitions (one
  commits, another aborts or never ends): the atomicity Kafka's two-phase commit promises.
- ``hanging_txn`` (KIP-664's hanging transaction): a transaction still open in a partition
  long after its timeout: the coordinator should have aborted it, and it pins the last
  stable offset, so read_committed consumers stall there.

Adya's G0 (write cycles) and G1c (circular information flow) are not judged: Kafka orders
two transactions' writes per partition only, and never promised one order across
partitions; nor does a read_committed consumer see a transaction's partitions at one
instant (each partition's part becomes visible at its own marker), so a consumer that has
read one partition's part and not yet another's is no anomaly. A record skipped within a
partition is the read checks' ``poll_skip``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from chaos.audit.history import (
    READ_COMMITTED,
    GroupStep,
    HistoryOp,
    HistoryRead,
    NemesisEvent,
    TxnStep,
    parse_history_line,
)
from chaos.audit.model import TRANSACTION_KINDS, PartitionSummary, Violation
from chaos.audit.transaction_log import ABORTED, COMMITTED, OPEN, TransactionSpans

__all__ = [
    "DEFAULT_TRANSACTION_TIMEOUT_MS",
    "TRANSACTION_KINDS",
    "TransactionHistory",
    "TransactionStats",
    "judge_transactions",
    "read_transaction_history",
]

DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
"""Kafka's transaction.timeout.ms default: the timeout judged when no begin line says."""
ABORT_CHECK_SLACK_MS = 20_000
"""How long after its timeout a transaction may stay open: Kafka's coordinator looks for
expired transactions every transaction.abort.timed.out.transaction.cleanup.interval.ms
(10 s by default), then writes the abort markers."""
CLOCK_SLACK_MS = 250
"""The clocks of a consumer's history and a leader's marker timestamps may differ by this
(one machine's clock, or containers sharing the host's)."""
_EXAMPLES = 3

_OUTCOME_NAMES = {COMMITTED: "committed", ABORTED: "aborted", OPEN: "never ended"}


@dataclass(slots=True)
class Txn:
    """One transaction of the history."""

    id: str
    process: int
    line: int
    """Its first line."""
    outcome: str = "unknown"
    """``committed`` (a commit ok), ``aborted`` (an abort ok or a commit that failed) or
    ``unknown``."""
    outcome_line: int | None = None
    timeout_ms: int | None = None
    writes: list[HistoryOp] = field(default_factory=list)
    first_time: float = math.inf
    """Its first step's time (the history's clock)."""
    last_time: float = 0.0
    """Its last step's."""
    offsets_sent: list[TxnStep] = field(default_factory=list)
    """Its acknowledged ``send_offsets`` steps."""


@dataclass(slots=True)
class TransactionHistory:
    """The history's transaction lines."""

    txns: dict[str, Txn] = field(default_factory=dict)
    reads: list[HistoryRead] = field(default_factory=list)
    """The reads of read_committed consumers."""
    last_time: float = 0.0
    """The history's latest line time (any line)."""

    def txn(self, txn_id: str, process: int, line: int) -> Txn:
        found = self.txns.get(txn_id)
        if found is None:
            found = self.txns[txn_id] = Txn(txn_id, process, line)
        return found


@dataclass(slots=True)
class TransactionStats:
    """What the transaction checks looked at (the report's counts)."""

    committed: int = 0
    aborted: int = 0
    unknown: int = 0
    writes_checked: int = 0
    """Writes of the history's transactions found in a transactional batch of the log."""
    reads_checked: int = 0
    """read_committed reads judged against the log's transactions."""
    open_in_log: int = 0
    """Transactions (producer id, partition) the log leaves open at its end."""

    def to_json(self) -> dict[str, int]:
        return {
            "committed": self.committed,
            "aborted": self.aborted,
            "unknown": self.unknown,
            "writes_checked": self.writes_checked,
            "reads_checked": self.reads_checked,
            "open_in_log": self.open_in_log,
        }


def _step(history: TransactionHistory, step: TxnStep) -> None:
    txn = history.txn(step.txn, step.process, step.line)
    txn.first_time = min(txn.first_time, step.time)
    txn.last_time = max(txn.last_time, step.time)
    if step.f == "begin" and step.timeout_ms is not None:
        txn.timeout_ms = step.timeout_ms
    if step.f == "send_offsets" and step.type == "ok":
        txn.offsets_sent.append(step)
    if txn.outcome != "unknown":
        return
    if step.f == "commit" and step.type == "ok":
        txn.outcome, txn.outcome_line = "committed", step.line
    elif (step.f == "abort" and step.type == "ok") or (step.f == "commit" and step.type == "fail"):
        txn.outcome, txn.outcome_line = "aborted", step.line


def read_transaction_history(path: Path) -> TransactionHistory:
    """The transaction lines of a history file (already validated by the job's parse: a
    line that does not parse here is skipped, never guessed)."""
    history = TransactionHistory()
    with path.open("rb") as f:
        for number, text in enumerate(f, 1):
            if b'"txn"' not in text and READ_COMMITTED.encode() not in text:
                _note_time(history, text)
                continue
            try:
                parsed = parse_history_line(number, text)
            except ValueError:
                continue
            if parsed is None or isinstance(parsed, NemesisEvent | GroupStep):
                continue
            history.last_time = max(history.last_time, parsed.time)
            if isinstance(parsed, TxnStep):
                _step(history, parsed)
            elif isinstance(parsed, HistoryRead):
                if parsed.isolation == READ_COMMITTED:
                    history.reads.append(parsed)
            elif parsed.txn is not None:
                txn = history.txn(parsed.txn, parsed.process, number)
                txn.writes.append(parsed)
                txn.first_time = min(txn.first_time, parsed.time)
                txn.last_time = max(txn.last_time, parsed.time)
    return history


def _note_time(history: TransactionHistory, text: bytes) -> None:
    """The line's time, cheaply (the history's last lines say when it ended)."""
    at = text.find(b'"time":')
    if at < 0:
        return
    end = at + 7
    while end < len(text) and text[end] in b"0123456789.eE+- ":
        end += 1
    try:
        history.last_time = max(history.last_time, float(text[at + 7 : end]))
    except ValueError:
        return


@dataclass(slots=True)
class _Item:
    kind: str
    topic: str
    partition: int
    offset: int
    reason: str
    text: str
    """One example, for the sentence."""
    brokers: tuple[int, ...] = ()
    time: float | None = None


class _Partitions:
    """Each partition's spans as judged: the replica whose log goes furthest (the largest
    checkpointed high watermark, then log end), which leader-epoch truncation makes the
    others agree with below the high watermark."""

    def __init__(
        self,
        spans: Mapping[tuple[str, int], Sequence[TransactionSpans]],
        summaries: Mapping[tuple[str, int], PartitionSummary],
    ) -> None:
        self.chosen: dict[tuple[str, int], TransactionSpans] = {}
        self.log_start: dict[tuple[str, int], int] = {}
        for tp, replicas in spans.items():
            summary = summaries.get(tp)
            if summary is None or not replicas:
                continue
            reach = {r.broker: (r.high_watermark or 0, r.log_end_offset) for r in summary.replicas}
            self.chosen[tp] = max(replicas, key=lambda s: (reach.get(s.broker, (0, 0)), -s.broker))
            self.log_start[tp] = summary.log_start_offset

    def outcome(
        self, topic: str, partition: int, offset: int
    ) -> tuple[TransactionSpans, int] | None:
        """The spans and the index of the transactional batch holding ``offset``, if any."""
        spans = self.chosen.get((topic, partition))
        if spans is None or offset < self.log_start.get((topic, partition), 0):
            return None
        index, found = spans.find(np.array([offset], dtype=np.int64))
        return (spans, int(index[0])) if bool(found[0]) else None


def judge_transactions(
    history: TransactionHistory | None,
    spans: Mapping[tuple[str, int], Sequence[TransactionSpans]],
    summaries: Mapping[tuple[str, int], PartitionSummary],
    *,
    observed_until_ms: int | None = None,
) -> tuple[list[Violation], TransactionStats]:
    """The transaction checks' violations and counts. ``observed_until_ms``: the latest
    moment the logs are known to have been running (for ``hanging_txn``); the latest of the
    history's lines and the logs' markers and batches when None."""
    history = history or TransactionHistory()
    stats = TransactionStats()
    for txn in history.txns.values():
        if txn.outcome == "committed":
            stats.committed += 1
        elif txn.outcome == "aborted":
            stats.aborted += 1
        else:
            stats.unknown += 1
    parts = _Partitions(spans, summaries)
    items: list[_Item] = []
    items += _writes(history, parts, stats)
    items += _reads(history, parts, stats)
    newest = max(
        [
            int(history.last_time * 1000),
            *(int(s.max_timestamp.max()) for s in parts.chosen.values() if len(s)),
            *(int(s.marker_timestamp.max()) for s in parts.chosen.values() if len(s)),
        ]
    )
    until = observed_until_ms if observed_until_ms is not None else newest
    timeouts = [t.timeout_ms for t in history.txns.values() if t.timeout_ms is not None]
    timeout = max(timeouts) if timeouts else DEFAULT_TRANSACTION_TIMEOUT_MS
    items += _hanging(parts, until, timeout, stats)
    return _violations(items), stats


def _where(op: HistoryOp) -> str:
    return f"history line {op.line}"


def _what(op: HistoryOp) -> str:
    """A write's value, or what the offsets stand-in of :func:`_offsets` says it is."""
    return op.value or "" if op.topic == OFFSETS_TOPIC else repr(op.value)


def _writes(
    history: TransactionHistory, parts: _Partitions, stats: TransactionStats
) -> list[_Item]:
    items = []
    for txn in history.txns.values():
        ended: dict[int, list[tuple[HistoryOp, int, int, TransactionSpans]]] = defaultdict(list)
        for op in txn.writes:
            partition, offset = op.partition, op.offset
            if op.type != "ok" or partition is None or offset is None:
                continue
            found = parts.outcome(op.topic, partition, offset)
            if found is None:
                continue  # not in a transactional batch: lost_ack judges what it holds
            stats.writes_checked += 1
            spans, i = found
            outcome = int(spans.outcome[i])
            ended[outcome].append((op, partition, offset, spans))
            said = f"transaction {txn.id!r} (process {txn.process}"
            said += f", outcome line {txn.outcome_line})" if txn.outcome_line else ")"
            if txn.outcome == "committed" and outcome != COMMITTED:
                ending = (
                    f"aborted by the marker at offset {int(spans.marker_offset[i])}"
                    if outcome == ABORTED
                    else "in a transaction the log never ends (no marker follows)"
                )
                items.append(
                    _Item(
                        "lost_committed", op.topic, partition, offset,
                        _OUTCOME_NAMES[outcome],
                        f"{op.value!r} ({_where(op)}) of {said}, whose commit was acknowledged, "
                        f"is {ending} in broker {spans.broker}'s log",
                        (spans.broker,), op.time,
                    )
                )  # fmt: skip
            elif txn.outcome == "aborted" and outcome == COMMITTED:
                items.append(
                    _Item(
                        "committed_abort", op.topic, partition, offset, "committed",
                        f"{op.value!r} ({_where(op)}) of {said}, whose abort was acknowledged, "
                        f"is committed by the marker at offset {int(spans.marker_offset[i])} "
                        f"in broker {spans.broker}'s log",
                        (spans.broker,), op.time,
                    )
                )  # fmt: skip
        if txn.offsets_sent and ended:
            items += _offsets(txn, ended, parts)
        if COMMITTED in ended and (ABORTED in ended or OPEN in ended):
            committed, c_partition, c_offset, _ = ended[COMMITTED][0]
            for outcome in (ABORTED, OPEN):
                for op, partition, offset, spans in ended.get(outcome, [])[:1]:
                    items.append(
                        _Item(
                            "partial_txn", op.topic, partition, offset,
                            _OUTCOME_NAMES[outcome],
                            f"transaction {txn.id!r} (process {txn.process}) is "
                            f"{_OUTCOME_NAMES[outcome]} here ({_what(op)}, {_where(op)}) but "
                            f"committed in {committed.topic}-{c_partition} at offset "
                            f"{c_offset} ({_what(committed)}, {_where(committed)})",
                            (spans.broker,), op.time,
                        )
                    )  # fmt: skip
    return items


OFFSETS_TOPIC = "__consumer_offsets"
_STEP_SLACK_S = 1.0
"""How long after its last line a transaction that the log leaves open may have had its
offsets written."""


def _offsets(
    txn: Txn,
    ended: dict[int, list[tuple[HistoryOp, int, int, TransactionSpans]]],
    parts: _Partitions,
) -> list[_Item]:
    """The offsets a transaction sent (TxnOffsetCommit): the group coordinator wrote them
    to ``__consumer_offsets`` as a transactional batch of the transaction's producer id, so
    they end as its writes do. Found by that producer id (the spans of its writes name it)
    and a timestamp from the transaction's begin line to the marker of its writes. Their
    outcome joins the writes' in
    ``ended`` (``partial_txn``: offsets applied without the writes, or writes without the
    offsets); a committed transaction's offsets aborted, never ended or missing are
    ``lost_committed``."""
    _, _, offset, spans = next(w[0] for w in ended.values() if w)
    i = _index(spans, offset)
    pid = int(spans.producer_id[i])
    # From its begin line (the previous transaction's offsets were written before the
    # commit that came before it) to the marker ending its writes (it sends EndTxn after
    # its offsets): the latest batch of the producer id in that window, per partition.
    low = math.floor(txn.first_time * 1000)
    ended_at = int(spans.marker_timestamp[i])
    high = ended_at if ended_at >= 0 else (txn.last_time + _STEP_SLACK_S) * 1000
    offsets_partitions = [(tp, s) for tp, s in parts.chosen.items() if tp[0] == OFFSETS_TOPIC]
    if not offsets_partitions:
        return []  # the data dirs hold no __consumer_offsets: nothing to judge them by
    sent = txn.offsets_sent[0]
    label = HistoryOp(
        sent.line, sent.time, txn.process, "ok", OFFSETS_TOPIC, None,
        f"offsets for group {sent.group!r}", None,
    )  # fmt: skip
    found = False
    items = []
    for (topic, partition), spans in offsets_partitions:
        mine = np.flatnonzero(
            (spans.producer_id == pid)
            & (spans.max_timestamp >= low)
            & (spans.max_timestamp <= high)
        )
        for i in mine[-1:].tolist():
            found = True
            offset = int(spans.base_offset[i])
            outcome = int(spans.outcome[i])
            ended[outcome].append((label, partition, offset, spans))
            if txn.outcome == "committed" and outcome != COMMITTED:
                items.append(
                    _Item(
                        "lost_committed", topic, partition, offset, "offsets",
                        f"the offsets transaction {txn.id!r} (process {txn.process}) sent for "
                        f"group {sent.group!r} (history line {sent.line}), whose commit was "
                        f"acknowledged, are {_OUTCOME_NAMES[outcome]} in broker "
                        f"{spans.broker}'s log at offset {offset}: the group resumes before "
                        "records the transaction processed",
                        (spans.broker,), sent.time,
                    )
                )  # fmt: skip
    if not found and txn.outcome == "committed":
        op, partition, offset, spans = next(w[0] for w in ended.values() if w)
        items.append(
            _Item(
                "lost_committed", op.topic, partition, offset, "offsets missing",
                f"the offsets transaction {txn.id!r} (process {txn.process}) sent for group "
                f"{sent.group!r} (history line {sent.line}), whose commit was acknowledged, "
                f"are in no {OFFSETS_TOPIC} partition: no batch of its producer id {pid} "
                f"was written there during the transaction (its write {op.value!r} is here)",
                (spans.broker,), sent.time,
            )
        )  # fmt: skip
    return items


def _index(spans: TransactionSpans, offset: int) -> int:
    return int(spans.find(np.array([offset], dtype=np.int64))[0][0])


def _reads(history: TransactionHistory, parts: _Partitions, stats: TransactionStats) -> list[_Item]:
    told_aborted: dict[tuple[str, str | None], Txn] = {
        (op.topic, op.value): txn
        for txn in history.txns.values()
        if txn.outcome == "aborted"
        for op in txn.writes
        if op.value is not None
    }
    items = []
    for read in history.reads:
        who = f"process {read.process} (session {read.session}, history line {read.line})"
        found = parts.outcome(read.topic, read.partition, read.offset)
        txn = told_aborted.get((read.topic, read.value))
        if found is None:
            if txn is not None:
                items.append(_aborted_by_history(read, txn, who, ()))
            continue
        stats.reads_checked += 1
        spans, i = found
        outcome = int(spans.outcome[i])
        brokers = (spans.broker,)
        marker = int(spans.marker_offset[i])
        if outcome == ABORTED:
            items.append(
                _Item(
                    "aborted_read", read.topic, read.partition, read.offset, "aborted in the log",
                    f"{who} read {read.value!r} at offset {read.offset}, a record of a "
                    f"transaction broker {spans.broker}'s log aborts (marker at offset {marker})",
                    brokers, read.time,
                )
            )  # fmt: skip
        elif txn is not None:
            items.append(_aborted_by_history(read, txn, who, brokers))
        elif outcome == OPEN:
            items.append(
                _Item(
                    "dirty_read", read.topic, read.partition, read.offset, "never ended",
                    f"{who} read {read.value!r} at offset {read.offset}, a record of a "
                    f"transaction broker {spans.broker}'s log never ends: it was served "
                    "beyond the last stable offset",
                    brokers, read.time,
                )
            )  # fmt: skip
        elif int(spans.marker_timestamp[i]) > read.time * 1000 + CLOCK_SLACK_MS:
            early = int(spans.marker_timestamp[i]) - read.time * 1000
            items.append(
                _Item(
                    "dirty_read", read.topic, read.partition, read.offset, "read before commit",
                    f"{who} read {read.value!r} at offset {read.offset} {early / 1000:.3f} s "
                    f"before the leader wrote its transaction's commit marker (offset {marker}): "
                    "served beyond the last stable offset of the time (or the marker was "
                    "lost and written again, a truncation)",
                    brokers, read.time,
                )
            )  # fmt: skip
    return items


def _aborted_by_history(read: HistoryRead, txn: Txn, who: str, brokers: tuple[int, ...]) -> _Item:
    return _Item(
        "aborted_read", read.topic, read.partition, read.offset, "told aborted",
        f"{who} read {read.value!r} at offset {read.offset}, written by transaction "
        f"{txn.id!r} (process {txn.process}) whose abort was acknowledged (history line "
        f"{txn.outcome_line})",
        brokers, read.time,
    )  # fmt: skip


def _hanging(
    parts: _Partitions, until_ms: int, timeout_ms: int, stats: TransactionStats
) -> list[_Item]:
    items = []
    for (topic, partition), spans in sorted(parts.chosen.items()):
        open_ = np.flatnonzero(spans.outcome == OPEN)
        first: dict[int, int] = {}
        for i in open_.tolist():
            first.setdefault(int(spans.producer_id[i]), i)
        stats.open_in_log += len(first)
        for pid, i in sorted(first.items(), key=lambda t: t[1]):
            started = int(spans.max_timestamp[i])
            overdue = until_ms - (started + timeout_ms + ABORT_CHECK_SLACK_MS)
            if overdue <= 0:
                continue
            items.append(
                _Item(
                    "hanging_txn", topic, partition, int(spans.base_offset[i]), "open",
                    f"producer id {pid}'s transaction from offset {int(spans.base_offset[i])} "
                    f"is still open in broker {spans.broker}'s log "
                    f"{(until_ms - started) / 1000:.1f} s after its first record, past its "
                    f"timeout ({timeout_ms} ms): no marker ends it, and it holds the last "
                    "stable offset there, so read_committed consumers cannot read past it",
                    (spans.broker,), started / 1000,
                )
            )  # fmt: skip
    return items


_ADVICE = {
    "lost_committed": "A committed transaction must be committed in every partition it "
    "wrote: look for the coordinator's markers to this partition (a marker lost with a "
    "truncated tail, or an abort written after a commit was acknowledged).",
    "committed_abort": "The coordinator wrote a commit marker for a transaction it "
    "acknowledged as aborted: look at its state transitions in the broker log.",
    "aborted_read": "read_committed must filter aborted transactions by the fetch's "
    "aborted-transactions list (docs/transactions.md).",
    "dirty_read": "A read_committed fetch must stop at the last stable offset.",
    "partial_txn": "Every partition of a transaction gets the same marker: look at the "
    "coordinator's markers for this producer and at truncations of the partitions.",
    "hanging_txn": "The coordinator aborts a transaction past transaction.timeout.ms; one "
    "that stays open was lost by it (its state in __transaction_state, or a marker never "
    "written).",
}


def _violations(items: Iterable[_Item]) -> list[Violation]:
    """One violation per kind, partition and reason, with a few examples."""
    grouped: dict[tuple[str, str, int, str], list[_Item]] = defaultdict(list)
    for item in items:
        grouped[(item.kind, item.topic, item.partition, item.reason)].append(item)
    violations = []
    for (kind, topic, partition, _), found in grouped.items():
        found.sort(key=lambda i: i.offset)
        shown = "; ".join(i.text for i in found[:_EXAMPLES])
        more = f"; and {len(found) - _EXAMPLES} more" if len(found) > _EXAMPLES else ""
        times = [i.time for i in found if i.time is not None]
        violations.append(
            Violation(
                kind,
                topic,
                partition,
                found[0].offset,
                found[-1].offset,
                len(found),
                tuple(sorted({b for i in found for b in i.brokers})),
                f"{shown}{more}. {_ADVICE[kind]}",
                min(times) if times else None,
            )
        )
    return violations
