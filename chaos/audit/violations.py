"""From a run of violation items (what the Spark job collects) to a sentence a person can act on.

The job groups items of one kind, partition, brokers and key into runs and collects, per
run, its offset range, its count and the facts of its first and last item (JSON made by
Spark). :func:`describe` turns one such :class:`Finding` into a :class:`Violation`. Values
arrive as ``{"b64": first bytes in base64, "len": full length}`` and are shown quoted,
cut after a few dozen characters.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from chaos.audit.model import PartitionSummary, ReplicaSummary, Violation

__all__ = ["Finding", "describe", "segment_name", "show_value"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One run of violation items, as collected from Spark."""

    kind: str
    brokers: tuple[int, ...]
    start: int
    end: int
    count: int
    key: dict[str, Any] = field(default_factory=dict)
    """What every item of the run shares (the grouping key)."""
    first: dict[str, Any] = field(default_factory=dict)
    """Facts of the run's first item."""
    last: dict[str, Any] = field(default_factory=dict)
    """Facts of the run's last item."""
    t_min: float | None = None
    """Earliest history time of the run's items (lost_ack only)."""
    t_max: float | None = None


def show_value(shown: dict[str, Any] | None, limit: int = 40) -> str:
    """A value for a sentence: quoted text (or ``null``), cut with ``...`` when long."""
    if not shown or shown.get("len") is None:
        return "null"
    try:
        data = base64.b64decode(shown.get("b64") or "")
    except (binascii.Error, ValueError):
        data = b""
    text = data.decode("utf-8", errors="replace")
    cut = len(text) > limit or shown["len"] > len(data)
    text = text[:limit]
    return repr(text)[:-1] + "...'" if cut else repr(text)


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def _offsets(start: int, end: int) -> str:
    return f"offset {start}" if start == end else f"offsets {start}..{end}"


def _brokers(brokers: Sequence[int]) -> str:
    if not brokers:
        return "no broker"
    if len(brokers) == 1:
        return f"broker {brokers[0]}"
    return "brokers " + ", ".join(map(str, brokers[:-1])) + f" and {brokers[-1]}"


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one}" if n == 1 else f"{n} {many or one + 's'}"


def _when(t: float | None) -> str:
    if t is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d} UTC"


def _values(f: Finding, field_name: str = "value") -> str:
    """The value of the first item, and of the last when the run has several."""
    first = show_value(f.first.get(field_name))
    if f.count == 1 or f.first == f.last:
        return first
    return f"{first} .. {show_value(f.last.get(field_name))}"


def _replica(part: PartitionSummary, broker: int) -> ReplicaSummary | None:
    return next((r for r in part.replicas if r.broker == broker), None)


def _epoch_list(entries: Sequence[Sequence[int]]) -> str:
    return "[" + ", ".join(f"{e}@{o}" for e, o in entries) + "]" if entries else "nothing"


# -- one sentence per kind ------------------------------------------------------------------


def _lost_ack(f: Finding, part: PartitionSummary) -> str:
    what = (
        f"{show_value(f.first.get('value'))} acknowledged at {_offsets(f.start, f.end)}"
        if f.count == 1
        else f"{f.count} records acknowledged at {_offsets(f.start, f.end)} ({_values(f)})"
    )
    when = f" (history line {f.first.get('line')}, {_when(f.t_min)})" if f.t_min else ""
    reason = f.key.get("reason")
    if reason == "beyond_leo" and not part.replicas:
        sentence = (
            f"{what}{when} {'is' if f.count == 1 else 'are'} in no replica's log: no data "
            f"dir given holds {part.topic}-{part.partition}. Give every broker's data dir, "
            "or find out who deleted the partition."
        )
    elif reason == "beyond_leo":
        ends = ", ".join(f"broker {r.broker} at {r.log_end_offset}" for r in part.replicas)
        sentence = (
            f"{what}{when} {'is' if f.count == 1 else 'are'} in no replica's log: every "
            f"replica ends before {'it' if f.count == 1 else 'them'} ({ends}). A replica "
            "that held the records was truncated or a leader without them was elected; in "
            "high-watermark truncation mode a restarted follower truncates to its stale "
            "high watermark (DESIGN.md §8)."
        )
    elif reason == "missing":
        sentence = (
            f"{what}{when} {'is' if f.count == 1 else 'are'} held by no replica although "
            f"the log goes on past {'it' if f.count == 1 else 'them'}: look at the gap and "
            "crc findings of this partition's replicas."
        )
    else:
        held = show_value(f.first.get("held"))
        sentence = (
            f"{what}{when} {'is' if f.count == 1 else 'are'} not in the log: "
            f"{'it holds' if f.count == 1 else 'from offset ' + str(f.start) + ' it holds'} "
            f"{held} (leader epoch {f.key.get('held_epoch')})"
        )
        still = f.key.get("still_held") or []
        if still:
            sentence += (
                f"; {_brokers(still)} still {'holds' if len(still) == 1 else 'hold'} the "
                "acknowledged record there under an older leader epoch, a divergent copy"
            )
        sentence += (
            ". Two writes were acknowledged for one offset: typically an unclean leader "
            "election (the new leader lacked the acknowledged record) or a follower that kept "
            "a divergent tail."
        )
    if f.key.get("moved"):
        sentence += (
            f" The value is held at offset {f.first.get('moved_to')} instead"
            f"{' (the first of the run)' if f.count > 1 else ''}: it was written again, or the "
            "acknowledgement named the wrong offset."
        )
    return sentence


def _divergence(f: Finding, part: PartitionSummary) -> str:
    versions = f.first.get("versions") or []
    shown = ", ".join(
        f"broker {v.get('broker')} {show_value(v.get('value'))} (epoch {v.get('epoch')})"
        for v in versions
    )
    epochs = {v.get("epoch") for v in versions}
    cause = (
        "The replica with the older leader epoch kept a tail it should have truncated: "
        "high-watermark truncation (KAFKA-1211); leader-epoch truncation (KIP-101) fixes it."
        if len(epochs) > 1
        else "The replicas hold different bytes under one leader epoch: a replica's data "
        "changed after it was replicated."
    )
    return (
        f"{_brokers(f.brokers)} hold different records at {_offsets(f.start, f.end)}, below "
        f"the committed end {f.first.get('committed_end', part.committed_end)}: at offset "
        f"{f.start} {shown}. Consumers read different data depending on which replica "
        f"leads. {cause}"
    )


def _duplicate(f: Finding, part: PartitionSummary) -> str:
    copies = f.key.get("copies", 2)
    offsets = f.first.get("offsets") or []
    where = " and ".join(map(str, offsets)) if offsets else "?"
    if f.count == 1:
        what = f"{show_value(f.first.get('value'))} appears {copies} times, at offsets {where}"
    else:
        delta = f.key.get("delta")
        what = (
            f"{f.count} values ({_values(f)}) appear {copies} times: at {_offsets(f.start, f.end)}"
            f" and again {delta} offsets later (first at {where})"
        )
    return (
        f"{what}, on {_brokers(f.brokers)}. One produce was written more than once: a "
        "retried produce request without the idempotent producer, or a broker that appended "
        "a batch twice."
    )


def _gap(f: Finding, part: PartitionSummary) -> str:
    broker = f.brokers[0] if f.brokers else "?"
    where = f"segment {segment_name(f.first.get('segment', 0))}, position {f.first.get('position')}"
    if f.key.get("what") == "overlap":
        return (
            f"broker {broker}'s log holds {_offsets(f.start, f.end)} twice: the batch at "
            f"{where} starts at {f.first.get('base_offset')}, before the previous batch ended "
            f"at {f.first.get('previous_end')}. A batch's baseOffset (outside the CRC) was "
            "damaged, or two writers appended to the log."
        )
    return (
        f"broker {broker}'s log has no batch for {_offsets(f.start, f.end)} "
        f"({_plural(f.count, 'offset')}): the batch before ends at "
        f"{f.first.get('previous_end')} and the next ({where}) starts at "
        f"{f.first.get('base_offset')}. Records were removed from the middle of the log (a "
        "deleted segment file, bytes cut out); copy the partition from an intact replica."
    )


def _crc(f: Finding, part: PartitionSummary) -> str:
    broker = f.brokers[0] if f.brokers else "?"
    what = f.key.get("what")
    problem = f.first.get("problem")
    if what == "unframed":
        return (
            f"broker {broker}: segment {segment_name(f.first.get('segment', 0))} cannot be "
            f"read past position {f.first.get('position')} ({f.first.get('size')} bytes, "
            f"from offset {f.start}): {problem}. Only a replica's last segment may end in a "
            "torn write; this one is followed by others, so the bytes were damaged later. "
            "Restore the replica from an intact one."
        )
    if what == "records":
        return (
            f"broker {broker}: the batch at {_offsets(f.start, f.end)} {problem}; a producer "
            "wrote a malformed batch that the broker accepted without decoding its records."
        )
    single = not f.last or f.first == f.last
    batches = "batch" if single else "batches"
    where = (
        f"{'at' if single else 'first at'} position {f.first.get('position')} of segment "
        f"{segment_name(f.first.get('segment', 0))}"
    )
    return (
        f"broker {broker}: the {batches} at {_offsets(f.start, f.end)} "
        f"({_plural(f.count, 'record')}) {'fail their' if batches == 'batches' else 'fails its'}"
        f" {'CRC' if what == 'crc' else 'record count check'} ({where}: {problem}). The bytes "
        "changed on disk after they were written; on recovery the broker truncates the log at "
        "the first bad batch. Restore the replica from an intact one."
    )


def _epoch_cache(f: Finding, part: PartitionSummary) -> str:
    broker = f.brokers[0] if f.brokers else -1
    replica = _replica(part, broker)
    file_says = _epoch_list(replica.checkpoint_epochs) if replica else "?"
    batches_say = _epoch_list(replica.epoch_starts) if replica else "?"
    return (
        f"broker {broker}'s leader-epoch-checkpoint contradicts its batches from offset "
        f"{f.start}: the file says {file_says}, the batches' leader epochs say {batches_say} "
        "(epoch@first offset). Asked for an epoch's end offset (OffsetsForLeaderEpoch), this "
        "broker would answer from the wrong entries and a follower would truncate at the "
        "wrong offset; recovery rebuilds the file from the batches."
    )


def _hw_above_leo(f: Finding, part: PartitionSummary) -> str:
    broker = f.brokers[0] if f.brokers else "?"
    return (
        f"broker {broker}'s replication-offset-checkpoint says the high watermark is "
        f"{f.first.get('hw')} but its log ends at {f.first.get('leo')}: "
        f"{_offsets(f.start, f.end)}, counted as committed, "
        f"{'is' if f.start == f.end else 'are'} not on this replica. It "
        "truncated after checkpointing the high watermark, or lost unflushed data in a "
        "power failure."
    )


def _phantom(f: Finding, part: PartitionSummary) -> str:
    what = (
        f"{show_value(f.first.get('value'))} at {_offsets(f.start, f.end)} is committed"
        if f.count == 1
        else f"{f.count} committed records at {_offsets(f.start, f.end)} ({_values(f)}) are"
    )
    if f.key.get("reason") == "failed":
        return (
            f"{what}{' although' if f.count == 1 else ' committed although'} the history says "
            f"{'its write' if f.count == 1 else 'their writes'} failed (history line "
            f"{f.first.get('failed_line')}): a producer reported a failure for a write that "
            "succeeded, which `fail` promises never happens."
        )
    if f.count == 1:
        what += ","
    return (
        f"{what} written by no operation of the history. Check that the history holds "
        "every producer's operations and comes from this cluster; if it does, a broker "
        "invented or misplaced records."
    )


_SENTENCES: dict[str, Callable[[Finding, PartitionSummary], str]] = {
    "lost_ack": _lost_ack,
    "divergence": _divergence,
    "duplicate": _duplicate,
    "gap": _gap,
    "crc": _crc,
    "epoch_cache": _epoch_cache,
    "hw_above_leo": _hw_above_leo,
    "phantom": _phantom,
}


def describe(finding: Finding, part: PartitionSummary) -> Violation:
    """The violation a finding stands for, with its sentence."""
    return Violation(
        kind=finding.kind,
        topic=part.topic,
        partition=part.partition,
        offset=finding.start,
        last_offset=finding.end,
        count=finding.count,
        brokers=tuple(sorted(finding.brokers)),
        detail=_SENTENCES[finding.kind](finding, part),
        time=finding.t_min,
    )
