"""From a run of violation items (what the Spark job collects) to a sentence a person can act on.

The job groups items of one kind, partition, brokers and key into runs and collects, per
run, its offset range, its count and the facts of its first and last item (JSON made by
Spark). :func:`describe` turns one such :class:`Finding` into a :class:`Violation`: what
is wrong, where (offsets, brokers, history lines) and what to look at. Values
arrive as ``{"b64": first bytes in base64, "len": full length}`` and are shown quoted with
Python's escapes when they are UTF-8 text, else in hex, cut after a few dozen characters
either way: a sentence never carries raw binary, whatever the records hold.
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

_LISTED_OFFSETS = 5
"""Offsets a sentence lists; a duplicate stored a thousand times says how many in all."""


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
    """Earliest history time of the run's items (lost_ack and the read kinds)."""
    t_max: float | None = None


def show_value(shown: dict[str, Any] | None, limit: int = 40) -> str:
    """A value for a sentence: quoted text with non-printable characters escaped, or
    ``0x`` and hex digits with the length for bytes that are not UTF-8 text (``null`` for a
    null value), cut with ``...`` after ``limit`` characters."""
    if not shown or shown.get("len") is None:
        return "null"
    try:
        data = base64.b64decode(shown.get("b64") or "")
    except (binascii.Error, ValueError):
        data = b""
    length = int(shown["len"])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        if length > len(data) and e.start >= len(data) - 3:
            text = data[: e.start].decode("utf-8")  # a character cut by the first bytes
        else:
            hex_digits = data[: limit // 2].hex()
            cut = length > limit // 2
            return f"0x{hex_digits}{'...' if cut else ''} ({_plural(length, 'byte')})"
    cut = len(text) > limit or length > len(data)
    quoted = repr(text[:limit])
    return quoted[:-1] + "..." + quoted[-1] if cut else quoted


def _offset_list(offsets: Sequence[int], total: int) -> str:
    """``7 and 12``, ``7, 12 and 20``, or the first few and how many in all."""
    if not offsets:
        return "?"
    if total > len(offsets) or len(offsets) > _LISTED_OFFSETS:
        shown = ", ".join(map(str, offsets[:_LISTED_OFFSETS]))
        return f"{shown}, ... ({total} in all)"
    if len(offsets) == 1:
        return str(offsets[0])
    return ", ".join(map(str, offsets[:-1])) + f" and {offsets[-1]}"


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
            "high watermark (docs/replication.md)."
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
    copies = int(f.key.get("copies", 2))
    where = _offset_list(f.first.get("offsets") or [], copies)
    if f.key.get("rule") == "write":
        producer = f"producer {f.key.get('producer_id')} (epoch {f.key.get('producer_epoch')})"
        sequence = f.first.get("sequence")
        if f.count == 1:
            what = (
                f"the write of {producer} with sequence {sequence} "
                f"({show_value(f.first.get('value'))}) is stored {copies} times, at offsets "
                f"{where}"
            )
        else:
            what = (
                f"{f.count} writes of {producer}, sequences {sequence}.."
                f"{f.last.get('sequence')} ({_values(f)}), are stored {copies} times: at "
                f"{_offsets(f.start, f.end)} and again {f.key.get('delta')} offsets later "
                f"(first at {where})"
            )
        cause = (
            "The broker appended a retried batch again instead of answering it as a "
            "duplicate (DUPLICATE_SEQUENCE or the original offset): its producer state "
            "(Kafka's ProducerStateManager) lost or never had the batch's sequence."
        )
        return f"{what[0].upper()}{what[1:]}, on {_brokers(f.brokers)}. {cause}"
    if f.count == 1:
        what = f"{show_value(f.first.get('value'))} appears {copies} times, at offsets {where}"
    else:
        what = (
            f"{f.count} values ({_values(f)}) appear {copies} times: at {_offsets(f.start, f.end)}"
            f" and again {f.key.get('delta')} offsets later (first at {where})"
        )
    return (
        f"{what}, on {_brokers(f.brokers)}. The history's values are unique, so one produce "
        "was written more than once: a retried produce request without the idempotent "
        "producer (or after its producer id was reset), or a broker that appended a batch "
        "twice."
    )


def _resent(f: Finding, part: PartitionSummary) -> str:
    copies = int(f.key.get("copies", 2))
    where = _offset_list(f.first.get("offsets") or [], copies)
    writers = ", ".join(
        f"producer {w[0]} epoch {w[1]} sequence {w[2]}"
        for w in f.first.get("writers") or []
        if len(w) >= 3
    )
    if f.count == 1:
        what = f"{show_value(f.first.get('value'))} appears {copies} times, at offsets {where}"
    else:
        what = f"{f.count} values ({_values(f)}) appear {copies} times (first at {where})"
    return (
        f"{what}, on {_brokers(f.brokers)}, written by two producer sessions ({writers}). "
        "The producer sent the record again after its producer id or epoch changed, where "
        "the broker cannot recognise it as a retry: idempotence holds within one producer "
        'session. librdkafka does this after an epoch bump (docs/chaos.md, "Idempotent '
        'producers and duplicates"); consumers read the record twice.'
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


def _stream(f: Finding) -> str:
    """Who read: the process and its consumer session."""
    return f"process {f.key.get('process')} (consumer session {f.key.get('session')})"


def _read_lines(f: Finding) -> str:
    """The history lines of a step's two reads, and when the second was read."""
    return (
        f"history lines {f.first.get('previous_line')} and {f.first.get('line')}, {_when(f.t_min)}"
    )


_REPOSITIONED = (
    "if the consumer sought, was rebalanced or restarted there, its history must bump `session`"
)


def _inconsistent_read(f: Finding, part: PartitionSummary) -> str:
    one = f.count == 1
    single = f.start == f.end  # one offset: read once, or again (in another session)
    it = "it" if single else "them"
    reader = f"process {f.key.get('process')}"
    if single:
        times = "" if one else f" {f.count} times"
        what = f"{reader} read {show_value(f.first.get('value'))} at offset {f.start}{times}"
    else:
        what = f"{reader} read {f.count} records at {_offsets(f.start, f.end)} ({_values(f)})"
    when = (
        f" (history line {f.first.get('line')}{'' if one else ' first'}, consumer session "
        f"{f.first.get('session')}, {_when(f.t_min)})"
    )
    reason = f.key.get("reason")
    if reason == "beyond_leo" and not part.replicas:
        return (
            f"{what}{when}, a partition that no data dir given holds: the audit cannot tell "
            f"whether the log holds {it}. Give every broker's data dir."
        )
    if reason == "beyond_leo":
        ends = ", ".join(f"broker {r.broker} at {r.log_end_offset}" for r in part.replicas)
        return (
            f"{what}{when}, but the log does not reach {'that offset' if single else it}: "
            f"every replica ends before {it} ({ends}). The consumer saw "
            f"{'a record' if single else 'records'} that a truncation removed later: the "
            f"leader served {it} above its high watermark, or committed records were "
            "truncated away (a follower truncating to a stale high watermark, KAFKA-1211, "
            "that leader epochs fix, KIP-101; lost_ack names the acknowledged ones). Look at "
            "the leaders and faults around the read's time."
        )
    if reason == "cleaned":
        return (
            f"{what}{when}, which every replica of this compacted partition has cleaned away "
            f"since, but {'that offset' if single else 'those offsets'} "
            f"{'was' if single else 'were'} acknowledged with another value: the consumer "
            "was served a record the log never held there."
        )
    if reason == "missing":
        return (
            f"{what}{when}, but no replica holds {'that offset' if single else 'those offsets'}"
            " although the log goes on past it: look at the gap and crc findings of this "
            "partition's replicas."
        )
    held = show_value(f.first.get("held"))
    sentence = (
        f"{what}{when}, but the log holds {held} there"
        f"{'' if single else ' from offset ' + str(f.start)} (leader epoch "
        f"{f.key.get('held_epoch')})"
    )
    still = f.key.get("still_held") or []
    if still:
        sentence += (
            f"; {_brokers(still)} still {'holds' if len(still) == 1 else 'hold'} what was "
            "read there under an older leader epoch, a divergent copy"
        )
    sentence += (
        ". The consumer read a tail that a later leader replaced: it was served records "
        "above the high watermark, or from a replica whose log diverged (an unclean leader "
        "election, or a follower that kept a divergent tail)."
    )
    if f.key.get("moved"):
        sentence += (
            f" The value read is at offset {f.first.get('moved_to')} of the log instead"
            f"{'' if single else ' (the first of the run)'}: the consumer was handed it at "
            "the wrong offset."
        )
    return sentence


def _nonmonotonic_poll(f: Finding, part: PartitionSummary) -> str:
    previous, offset = f.first.get("previous"), f.first.get("offset")
    repeated = f.key.get("what") == "repeated"
    if f.count == 1 and repeated:
        what = f"{_stream(f)} read offset {offset} twice in a row ({_read_lines(f)})"
    elif f.count == 1:
        what = (
            f"{_stream(f)} read offset {offset} right after offset {previous} "
            f"({_read_lines(f)}): its position went back and it read "
            f"{_offsets(f.start, f.end)} again"
        )
    else:
        what = (
            f"{_stream(f)} {'repeated an offset' if repeated else 'went back'} {f.count} "
            f"times over {_offsets(f.start, f.end)}, first reading offset {offset} right "
            f"after offset {previous} ({_read_lines(f)})"
        )
    return (
        f"{what}. Within one session a consumer's position only moves forward: "
        f"{_REPOSITIONED}; otherwise a fetch returned records below the offset asked for, "
        "or the client rewound its position (a retried fetch whose records it had "
        "already returned)."
    )


def _poll_skip(f: Finding, part: PartitionSummary) -> str:
    previous, offset = f.first.get("previous"), f.first.get("offset")
    skipped = _plural(f.count, "committed record")
    if f.first == f.last:
        what = (
            f"{_stream(f)} read offset {offset} right after offset {previous} "
            f"({_read_lines(f)}): it skipped {skipped} at {_offsets(f.start, f.end)}"
        )
    else:
        what = (
            f"{_stream(f)} skipped {skipped} at {_offsets(f.start, f.end)}, first reading "
            f"offset {offset} right after offset {previous} ({_read_lines(f)})"
        )
    return (
        f"{what}, which the log holds below the committed end "
        f"{f.first.get('committed_end', part.committed_end)}. Within one session a consumer "
        f"returns every committed record from its position on: {_REPOSITIONED}; otherwise a "
        "fetch was answered from past the offset asked for, or the client advanced its "
        "position past records it never returned."
    )


def _key_of(f: Finding, info: dict[str, Any] | None = None) -> str:
    """The record's key, for a sentence."""
    return f"key {show_value((info or f.first).get('key'))}"


def _what_record(f: Finding) -> str:
    """The record a compaction finding is about: its key, value and acknowledgement."""
    value = f.first.get("value")
    what = f"{_key_of(f)}" + (f" = {show_value(value)}" if value else "")
    line = f.first.get("line")
    if line is not None:
        what += f" (acknowledged, history line {line}, {_when(f.t_min)})"
    return what


def _compaction_lost_latest(f: Finding, part: PartitionSummary) -> str:
    broker = f.brokers[0] if f.brokers else "?"
    if f.count == 1:
        what = f"the record at offset {f.start}, {_what_record(f)},"
    else:
        what = f"{f.count} records at {_offsets(f.start, f.end)} (the first {_what_record(f)}),"
    held = f.first.get("held")
    still = (
        f" Its latest record there is the older one at offset {held}: consumers of this "
        "replica read a superseded value."
        if held is not None and f.count == 1
        else ""
    )
    older = int(f.first.get("older") or 0)
    also = f" ({_plural(older, 'older record')} of the key gone too)" if older else ""
    source = "acknowledged there" if f.first.get("acked") else "held there by another replica"
    return (
        f"broker {broker}'s replica of this compacted partition lacks {what} {source}, "
        f"although it holds no later record of the key and no tombstone explains it{also}."
        f"{still} A cleaning keeps each key's latest record; this one removed it: an offset "
        "map that gave the key a later offset than the log holds, a cleaned segment written "
        "without it, or a swap that lost part of a group."
    )


def _compaction_moved(f: Finding, part: PartitionSummary) -> str:
    broker = f.brokers[0] if f.brokers else "?"
    moved_to = f.first.get("moved_to")
    what = (
        f"the record of offset {f.start}, {_what_record(f)}, is at offset {moved_to}"
        if f.count == 1
        else f"{f.count} records of {_offsets(f.start, f.end)} are held at other offsets "
        f"(the first, {_what_record(f)}, at {moved_to})"
    )
    return (
        f"On broker {broker}, {what}. Cleaning keeps every record at its offset; a cleaned "
        "batch that renumbered its records (offset deltas rewritten as 0, 1, 2, ...) or a "
        "segment written at the wrong base offset moves them, and consumers then commit "
        "and seek to offsets that name other records."
    )


def _tombstone_dropped_early(f: Finding, part: PartitionSummary) -> str:
    broker = f.brokers[0] if f.brokers else "?"
    what = (
        f"the tombstone at offset {f.start} ({_key_of(f)}"
        + (f", acknowledged, history line {f.first['line']}" if "line" in f.first else "")
        + ")"
        if f.count == 1
        else f"{f.count} tombstones at {_offsets(f.start, f.end)} (the first of {_key_of(f)})"
    )
    if f.key.get("reason") == "stale":
        return (
            f"broker {broker} dropped {what} while it still holds the key's older record at "
            f"offset {f.first.get('visible')}: the deleted value is visible again. A "
            "tombstone may go only once the values it deletes are gone (the cleaning that "
            "mapped it removed them); this replica's cleaner dropped it without that, e.g. "
            "after a cleaning that stopped part way was taken as done."
        )
    retention = f.first.get("retention_ms")
    newest = f.first.get("newest_segment_ms")
    stamp = f.first.get("timestamp")
    age = "?" if newest is None or stamp is None else f"{(newest - stamp) / 1000:.1f} s"
    return (
        f"broker {broker} dropped {what} before delete.retention.ms ({retention} ms) could "
        f"have passed: the tombstone's timestamp is {stamp} and the replica's newest segment "
        f"was last written at {newest}, {age} later. The cleaner removes a tombstone only "
        "once its segment is older than delete.retention.ms before the newest clean "
        "segment, so consumers that read the key's value in that time may never see it "
        "deleted."
    )


_SENTENCES: dict[str, Callable[[Finding, PartitionSummary], str]] = {
    "lost_ack": _lost_ack,
    "divergence": _divergence,
    "duplicate": _duplicate,
    "resent": _resent,
    "gap": _gap,
    "crc": _crc,
    "epoch_cache": _epoch_cache,
    "hw_above_leo": _hw_above_leo,
    "phantom": _phantom,
    "inconsistent_read": _inconsistent_read,
    "nonmonotonic_poll": _nonmonotonic_poll,
    "poll_skip": _poll_skip,
    "compaction_lost_latest": _compaction_lost_latest,
    "compaction_moved": _compaction_moved,
    "tombstone_dropped_early": _tombstone_dropped_early,
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
