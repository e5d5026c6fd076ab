"""The history and nemesis timeline files of docs/audit.md, one JSON object per line.

History (the workload's producers, Jepsen's vocabulary)::

    {"time": 1732252800.5, "process": 3, "type": "ok", "topic": "t", "partition": 0,
     "value": "p3-17", "offset": 41}

``ok``: acknowledged, written at ``offset``; ``fail``: certainly not written; ``info``:
unknown (a timeout, a lost connection). ``sent`` (optional, unix seconds) is when the
producer handed the write to its client: ``time - sent`` is the write's latency, which the
report plots over the run. ``fail`` and ``info`` lines may leave ``partition``
and ``offset`` null or out when the producer never learnt them. A write to a compacted topic
names its record's ``key`` (a string; null or left out: none), which the audit of compacted
partitions needs (:mod:`chaos.audit.compaction`); ``"value": null`` is a tombstone (a record
with a null value), which only the key and offset tell apart from another.

Reads (the workload's consumers, one line per record polled)::

    {"time": 1732252801.2, "process": 7, "type": "read", "topic": "t", "partition": 0,
     "offset": 41, "value": "p3-17", "session": 2}

``partition``, ``offset`` and ``value`` are required (``"value": null``: the record read has
a null value, a tombstone). ``session`` (a non-negative integer,
0 when left out) is the consumer's own counter, bumped whenever its position for a
partition may legitimately jump or go back: partitions revoked or assigned by a rebalance,
a seek or an offset reset, a restart of the consumer. Within one (process, session, topic,
partition) the offsets read must go up one by one, except over offsets the committed log
does not hold; the audit judges that (``nonmonotonic_poll``, ``poll_skip``) and what was
read at each offset (``inconsistent_read``). A read is not an operation outcome: it takes
no part in the checks of what producers were told.

Transactions (docs/audit.md, "Transactions"): a write of a transactional producer names
its transaction (``"txn": "p3-t4"``, unique in the history); the producer's steps are lines
without a topic::

    {"time": 1732252801.4, "process": 3, "type": "ok", "f": "commit", "txn": "p3-t4"}

``f`` is ``begin`` (with the producer's ``timeout_ms``), ``commit``, ``abort`` or
``send_offsets`` (with the ``group`` and the ``offsets`` sent, ``[topic, partition,
offset]`` each). A read_committed consumer's reads say ``"isolation": "read_committed"``;
a consume-transform-produce process's reads name the ``txn`` that processes them.

Consumer groups (docs/audit.md, "Consumer groups"): a member of a Kafka-protocol group names
its ``group``, its ``member`` id and the ``generation`` of the assignment it read under on
each read line; its rebalances and commits are lines without a topic::

    {"time": 1732252801.6, "process": 7, "type": "ok", "f": "assigned",
     "group": "g", "member": "m-1", "generation": 4, "partitions": [["t", 0]]}
    {"time": 1732252802.1, "process": 7, "type": "ok", "f": "commit_offsets",
     "group": "g", "member": "m-1", "generation": 4, "offsets": [["t", 0, 42]]}

``f`` is ``assigned``, ``revoked`` or ``lost`` (with the member's ``partitions``) or
``commit_offsets`` (the next offsets committed; ``ok``: acknowledged, ``fail``: refused,
``info``: unknown).

Timeline (the nemesis)::

    {"time": 1732252803.0, "process": "nemesis", "type": "info", "f": "kill", "target": 2}

Its other fields (``nemesis``, ``hold_s``, ``reason``...) are kept for the report's time
axis (:mod:`chaos.audit.timeline`). A history file may hold nemesis lines as well (Jepsen
writes both to one file); they are parsed as timeline events. Blank lines are skipped.
Anything else is bad input, reported with its 1-based line number so a person can open the
file there.

:func:`parse_history_line` is the definition of a valid line: the audit's tasks parse most
lines a column at a time (:mod:`chaos.audit.history_columns`), but every line they cannot
be sure of goes through it, and so does every line a finding quotes.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal, NamedTuple, overload

from proto.errors import MinibrokerError

__all__ = [
    "OP_TYPES",
    "READ",
    "GroupStep",
    "HistoryError",
    "HistoryOp",
    "HistoryRead",
    "NemesisEvent",
    "TxnStep",
    "parse_history_line",
    "parse_timeline_line",
]

OP_TYPES = ("ok", "fail", "info")
"""The operation outcomes of producers."""
READ = "read"
"""A consumer's line: one record it polled."""
TXN_STEPS = ("begin", "commit", "abort", "send_offsets")
"""The ``f`` of a transactional producer's step lines."""
ASSIGNMENT_STEPS = ("assigned", "revoked", "lost")
COMMIT_OFFSETS = "commit_offsets"
GROUP_STEPS = (*ASSIGNMENT_STEPS, COMMIT_OFFSETS)
"""The ``f`` of a consumer group member's step lines."""
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = ("read_uncommitted", READ_COMMITTED)
NEMESIS = "nemesis"


class HistoryError(MinibrokerError, ValueError):
    """A line of a history or timeline file that is not what docs/audit.md describes."""

    def __init__(self, line_number: int, reason: str) -> None:
        super().__init__(f"line {line_number}: {reason}")
        self.line_number = line_number
        """1-based number of the offending line."""
        self.reason = reason


class HistoryOp(NamedTuple):
    """One operation outcome of the workload."""

    line: int
    """1-based line number in the history file."""
    time: float
    """Unix seconds when the outcome was known."""
    process: int
    type: str
    """``ok``, ``fail`` or ``info``."""
    topic: str
    partition: int | None
    """None only for a fail or info whose partition the producer never learnt."""
    value: str | None
    """None: a tombstone (``"value": null``)."""
    offset: int | None
    """Where an ``ok`` write landed; None for fail and info unless the producer knew it."""
    key: str | None = None
    """The record's key, when the line names one (writes to a compacted topic must)."""
    txn: str | None = None
    """The transaction the write belongs to (a transactional producer's), None: none."""
    sent: float | None = None
    """When the producer handed the write to its client (unix seconds), None: not said."""


class HistoryRead(NamedTuple):
    """One record a consumer polled."""

    line: int
    """1-based line number in the history file."""
    time: float
    """Unix seconds when the consumer returned the record."""
    process: int
    topic: str
    partition: int
    offset: int
    value: str | None
    """None: the record read has a null value (a tombstone)."""
    session: int = 0
    """The consumer's counter of legitimate position changes (a rebalance, a seek, a
    restart): offsets are judged in order only within one session."""
    isolation: str = "read_uncommitted"
    """The consumer's isolation.level: a read_committed one must never see a record of a
    transaction that did not commit."""
    txn: str | None = None
    """The transaction that processes the record read (a consume-transform-produce
    process's input), None: none."""
    group: str | None = None
    """The Kafka-protocol consumer group of the member that read it, None: none."""
    member: str | None = None
    """That member's id."""
    generation: int | None = None
    """The generation of the assignment it read under."""


class TxnStep(NamedTuple):
    """One step of a transactional producer: begin, commit, abort or send_offsets."""

    line: int
    time: float
    process: int
    type: str
    """``ok`` (acknowledged), ``fail`` (certainly not done) or ``info`` (unknown)."""
    f: str
    txn: str
    timeout_ms: int | None = None
    """``begin``'s: the producer's transaction.timeout.ms."""
    group: str | None = None
    """``send_offsets``': the consumer group the offsets are committed for."""
    offsets: tuple[tuple[str, int, int], ...] = ()
    """``send_offsets``': (topic, partition, next offset to read) of each."""


class GroupStep(NamedTuple):
    """One step of a consumer group member: an assignment received, revoked or lost, or an
    offset commit."""

    line: int
    time: float
    process: int
    type: str
    """``ok``; for ``commit_offsets``: ``ok`` (acknowledged), ``fail`` (refused, certainly
    not stored) or ``info`` (unknown)."""
    f: str
    group: str
    member: str
    generation: int
    partitions: tuple[tuple[str, int], ...] = ()
    """``assigned``, ``revoked``, ``lost``: the member's partitions."""
    offsets: tuple[tuple[str, int, int], ...] = ()
    """``commit_offsets``: (topic, partition, next offset to read) of each."""


class NemesisEvent(NamedTuple):
    """One fault (or its end) of the nemesis timeline."""

    line: int
    time: float
    f: str
    """What the nemesis did: ``kill``, ``start``, ``pause``, ``resume``, ``partition``..."""
    target: str
    """The broker(s) acted on, as text (``2``, ``[1, 3]``), empty when none."""
    type: str = "info"
    """The line's ``type``: ``info``, or ``fail`` for a fault that could not strike (runs
    written before the ``skipped`` event)."""
    nemesis: str = ""
    """The nemesis the event belongs to (its ``nemesis`` field), empty when it names none."""
    fields: str = ""
    """The line's other fields (``hold_s``, ``reason``, ``tp``, ...) as a JSON object with
    sorted keys, empty when it has none: for the report's tooltips (:meth:`extra`)."""

    def extra(self) -> dict[str, Any]:
        """The line's other fields."""
        return json.loads(self.fields) if self.fields else {}


def _load(line_number: int, text: str | bytes) -> dict[str, Any] | None:
    """The line's JSON object, None for a blank line."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise HistoryError(line_number, f"not UTF-8 (byte {e.start})") from None
    if not text.strip():
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise HistoryError(line_number, f"not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(obj, dict):
        raise HistoryError(line_number, f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _time(line_number: int, obj: dict[str, Any]) -> float:
    value = obj.get("time")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise HistoryError(line_number, f'"time" must be a number of unix seconds, got {value!r}')
    return float(value)


_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_LIMITS = {"partition": _INT32_MAX}
"""Kafka's partitions are int32; offsets, sessions and processes int64."""


@overload
def _integer(
    line_number: int, obj: dict[str, Any], field: str, *, required: Literal[True], why: str = ""
) -> int: ...


@overload
def _integer(
    line_number: int, obj: dict[str, Any], field: str, *, required: bool, why: str = ""
) -> int | None: ...


def _integer(
    line_number: int, obj: dict[str, Any], field: str, *, required: bool, why: str = ""
) -> int | None:
    value = obj.get(field)
    if value is None:
        if required:
            raise HistoryError(line_number, f'"{field}" is missing{why}')
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise HistoryError(line_number, f'"{field}" must be a non-negative integer, got {value!r}')
    limit = _LIMITS.get(field, _INT64_MAX)
    if value > limit:
        raise HistoryError(line_number, f'"{field}" must be at most {limit}, got {value!r}')
    return value


def _event(line_number: int, obj: dict[str, Any]) -> NemesisEvent:
    f = obj.get("f")
    if not isinstance(f, str) or not f:
        raise HistoryError(line_number, f'a nemesis line needs "f" (what it did), got {f!r}')
    target = obj.get("target")
    shown = "" if target is None else target if isinstance(target, str) else json.dumps(target)
    kind = obj.get("type")
    nemesis = obj.get("nemesis")
    rest = {k: v for k, v in obj.items() if k not in _EVENT_KEYS}
    return NemesisEvent(
        line_number,
        _time(line_number, obj),
        f,
        shown,
        kind if isinstance(kind, str) else "info",
        nemesis if isinstance(nemesis, str) else "",
        json.dumps(rest, sort_keys=True, separators=(",", ":")) if rest else "",
    )


_EVENT_KEYS = frozenset({"time", "process", "type", "f", "target", "nemesis"})
"""The fields of a nemesis line that NemesisEvent holds apart from ``fields``."""


def _txn_id(line_number: int, obj: dict[str, Any], *, required: bool) -> str | None:
    txn = obj.get("txn")
    if txn is None and not required:
        return None
    if not isinstance(txn, str) or not txn:
        raise HistoryError(line_number, f'"txn" must be a non-empty string, got {txn!r}')
    return txn


def _offsets_sent(line_number: int, value: object) -> tuple[tuple[str, int, int], ...]:
    if not isinstance(value, list):
        raise HistoryError(line_number, f'"offsets" must be a list, got {value!r}')
    sent = []
    for entry in value:
        if (
            not isinstance(entry, list)
            or len(entry) != 3
            or not isinstance(entry[0], str)
            or not entry[0]
            or any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in entry[1:])
            or entry[1] > _INT32_MAX
        ):
            raise HistoryError(
                line_number, f'"offsets" entries must be [topic, partition, offset], got {entry!r}'
            )
        sent.append((entry[0], entry[1], entry[2]))
    return tuple(sent)


def _txn_step(line_number: int, obj: dict[str, Any], process: int) -> TxnStep:
    f = obj.get("f")
    if f not in TXN_STEPS:
        raise HistoryError(
            line_number,
            f'"f" must be one of {", ".join(TXN_STEPS)} (a transaction step) or '
            f"{', '.join(GROUP_STEPS)} (a consumer group step), got {f!r}",
        )
    kind = obj.get("type")
    if kind not in OP_TYPES:
        raise HistoryError(line_number, f'"type" must be "ok", "fail" or "info", got {kind!r}')
    txn = _txn_id(line_number, obj, required=True)
    assert txn is not None
    group = obj.get("group")
    if group is not None and not isinstance(group, str):
        raise HistoryError(line_number, f'"group" must be a string, got {group!r}')
    return TxnStep(
        line_number,
        _time(line_number, obj),
        process,
        kind,
        f,
        txn,
        _integer(line_number, obj, "timeout_ms", required=False),
        group,
        _offsets_sent(line_number, obj["offsets"]) if "offsets" in obj else (),
    )


def _text(line_number: int, obj: dict[str, Any], field: str, *, required: bool) -> str | None:
    value = obj.get(field)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise HistoryError(line_number, f'"{field}" must be a non-empty string, got {value!r}')
    return value


def _partitions_held(line_number: int, value: object) -> tuple[tuple[str, int], ...]:
    if not isinstance(value, list):
        raise HistoryError(line_number, f'"partitions" must be a list, got {value!r}')
    held = []
    for entry in value:
        if (
            not isinstance(entry, list)
            or len(entry) != 2
            or not isinstance(entry[0], str)
            or not entry[0]
            or isinstance(entry[1], bool)
            or not isinstance(entry[1], int)
            or not 0 <= entry[1] <= _INT32_MAX
        ):
            raise HistoryError(
                line_number, f'"partitions" entries must be [topic, partition], got {entry!r}'
            )
        held.append((entry[0], entry[1]))
    return tuple(held)


def _group_step(line_number: int, obj: dict[str, Any], process: int) -> GroupStep:
    f = obj["f"]
    kind = obj.get("type")
    if kind not in OP_TYPES:
        raise HistoryError(line_number, f'"type" must be "ok", "fail" or "info", got {kind!r}')
    group = _text(line_number, obj, "group", required=True)
    member = _text(line_number, obj, "member", required=True)
    assert group is not None
    assert member is not None
    generation = _integer(line_number, obj, "generation", required=True)
    if f == COMMIT_OFFSETS:
        if "offsets" not in obj:
            raise HistoryError(line_number, '"offsets" is missing (a commit says what it commits)')
        return GroupStep(
            line_number, _time(line_number, obj), process, kind, f, group, member, generation,
            offsets=_offsets_sent(line_number, obj["offsets"]),
        )  # fmt: skip
    if "partitions" not in obj:
        raise HistoryError(line_number, f'"partitions" is missing (the partitions {f})')
    return GroupStep(
        line_number, _time(line_number, obj), process, kind, f, group, member, generation,
        _partitions_held(line_number, obj["partitions"]),
    )  # fmt: skip


def parse_history_line(
    line_number: int, text: str | bytes
) -> HistoryOp | HistoryRead | TxnStep | GroupStep | NemesisEvent | None:
    """One line of a history file: an operation, a read, a transaction or consumer group
    step, a nemesis event, or None when blank.

    Raises HistoryError naming the line and what is wrong with it.
    """
    obj = _load(line_number, text)
    if obj is None:
        return None
    process = obj.get("process")
    if process == NEMESIS:
        return _event(line_number, obj)
    if isinstance(process, bool) or not isinstance(process, int) or abs(process) > _INT64_MAX:
        raise HistoryError(
            line_number, f'"process" must be an integer (or "nemesis"), got {process!r}'
        )
    if "f" in obj and "topic" not in obj:
        if obj["f"] in GROUP_STEPS:
            return _group_step(line_number, obj, process)
        return _txn_step(line_number, obj, process)
    op_type = obj.get("type")
    if op_type not in OP_TYPES and op_type != READ:
        raise HistoryError(
            line_number, f'"type" must be "ok", "fail", "info" or "read", got {op_type!r}'
        )
    topic = obj.get("topic")
    if not isinstance(topic, str) or not topic:
        raise HistoryError(line_number, f'"topic" must be a non-empty string, got {topic!r}')
    if "value" not in obj:
        what = "a read must say what it saw" if op_type == READ else "null for a tombstone"
        raise HistoryError(line_number, f'"value" is missing ({what})')
    value = obj["value"]
    if value is not None and not isinstance(value, str):
        raise HistoryError(line_number, f'"value" must be a string or null, got {value!r}')
    key = obj.get("key")
    if key is not None and not isinstance(key, str):
        raise HistoryError(line_number, f'"key" must be a string or null, got {key!r}')
    for field, text_value in (("topic", topic), ("value", value), ("key", key)):
        if text_value is None:
            continue
        try:
            text_value.encode("utf-8")
        except UnicodeEncodeError:
            raise HistoryError(
                line_number, f'"{field}" is not valid Unicode (it holds a lone surrogate)'
            ) from None
    if op_type == READ:
        return _read(line_number, obj, process, topic, value)
    ok = op_type == "ok"
    why = " (an acknowledged write must say where it was written)" if ok else ""
    partition = _integer(line_number, obj, "partition", required=ok, why=why)
    offset = _integer(line_number, obj, "offset", required=ok, why=why)
    return HistoryOp(
        line_number,
        _time(line_number, obj),
        process,
        op_type,
        topic,
        partition,
        value,
        offset,
        key,
        _txn_id(line_number, obj, required=False),
        _sent(line_number, obj),
    )


def _sent(line_number: int, obj: dict[str, Any]) -> float | None:
    if obj.get("sent") is None:
        return None
    value = obj["sent"]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise HistoryError(line_number, f'"sent" must be a number of unix seconds, got {value!r}')
    return float(value)


def _read(
    line_number: int, obj: dict[str, Any], process: int, topic: str, value: str | None
) -> HistoryRead:
    why = " (a read must say where it read)"
    partition = _integer(line_number, obj, "partition", required=True, why=why)
    offset = _integer(line_number, obj, "offset", required=True, why=why)
    session = _integer(line_number, obj, "session", required=False)
    isolation = obj.get("isolation", ISOLATION_LEVELS[0])
    if isolation not in ISOLATION_LEVELS:
        raise HistoryError(
            line_number,
            f'"isolation" must be "read_uncommitted" or "read_committed", got {isolation!r}',
        )
    return HistoryRead(
        line_number,
        _time(line_number, obj),
        process,
        topic,
        partition,
        offset,
        value,
        0 if session is None else session,
        isolation,
        _txn_id(line_number, obj, required=False),
        *_group_fields(line_number, obj),
    )


def _group_fields(
    line_number: int, obj: dict[str, Any]
) -> tuple[str | None, str | None, int | None]:
    """A read's group, member and generation: all three or none."""
    group = _text(line_number, obj, "group", required=False)
    if group is None:
        return None, None, None
    member = _text(line_number, obj, "member", required=True)
    generation = _integer(
        line_number, obj, "generation", required=True, why=" (a group member's read names it)"
    )
    return group, member, generation


def parse_timeline_line(line_number: int, text: str | bytes) -> NemesisEvent | None:
    """One line of a nemesis timeline file; None for a blank line or a non-nemesis line
    (a timeline may be a whole Jepsen history: only the nemesis lines matter here).

    Raises HistoryError naming the line.
    """
    obj = _load(line_number, text)
    if obj is None or obj.get("process") != NEMESIS:
        return None
    return _event(line_number, obj)
