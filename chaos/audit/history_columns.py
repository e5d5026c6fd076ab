"""A byte range of a history file as columns (numpy): what the audit's Spark tasks parse.

:func:`parse_range` turns the lines of a range into :class:`ParsedRange`: per line its kind
(``ok``, ``fail``, ``info``, ``read``), topic, partition, offset, the hash of its value
(:mod:`chaos.audit.hashing`, as the records' values are hashed; NULL for a null one), time,
process and session, and the hash of the key a write names where any line names one;
nemesis lines as events; and the first bad line, if any, with
:func:`chaos.audit.history.parse_history_line`'s reason. That function is the definition
of a valid line; every line here is parsed by it or, much faster, by the template path of
:mod:`chaos.audit.history_templates`, which accepts only lines whose meaning is certain and
leaves every other line to it.

Lines end with ``\\n`` (a ``\\r`` before it is JSON whitespace); line numbers are 1-based
within the range, the job adds the lines before it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from chaos.audit.hashing import hash_bytes
from chaos.audit.history import (
    GroupStep,
    HistoryError,
    HistoryOp,
    HistoryRead,
    NemesisEvent,
    TxnStep,
    parse_history_line,
)
from chaos.audit.history_templates import Matched, learn, match

__all__ = ["FAIL", "INFO", "KINDS", "OK", "READ", "Lines", "ParsedRange", "parse_range"]

OK, FAIL, INFO, READ = 0, 1, 2, 3
KINDS = ("ok", "fail", "info", "read")
"""Line kinds by code."""


@dataclass(slots=True)
class Lines:
    """History lines (operations and reads) as columns."""

    kind: npt.NDArray[np.int8]
    offset: npt.NDArray[np.int64]
    """-1 where the line gives none (a ``fail`` or ``info`` may not know it)."""
    value: npt.NDArray[np.uint64]
    """The value's hash."""
    line: npt.NDArray[np.int64]
    time: npt.NDArray[np.float64]
    process: npt.NDArray[np.int64]
    session: npt.NDArray[np.int64]
    """A read's consumer session (0 when the line leaves it out); 0 for operations."""
    key: npt.NDArray[np.uint64] | None = None
    """The hash of the key a write names (NULL: none); None when no line of these names
    one, as in a history of topics that are not compacted, so that those pay nothing for
    the column."""

    def __len__(self) -> int:
        return len(self.kind)

    @staticmethod
    def empty() -> Lines:
        return Lines(
            np.zeros(0, np.int8),
            np.zeros(0, np.int64),
            np.zeros(0, np.uint64),
            np.zeros(0, np.int64),
            np.zeros(0, np.float64),
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
        )

    def take(self, chosen: npt.NDArray[np.intp] | npt.NDArray[np.bool_]) -> Lines:
        return Lines(
            self.kind[chosen],
            self.offset[chosen],
            self.value[chosen],
            self.line[chosen],
            self.time[chosen],
            self.process[chosen],
            self.session[chosen],
            None if self.key is None else self.key[chosen],
        )

    def keys(self) -> npt.NDArray[np.uint64]:
        """The key column, NULL throughout when no line names a key."""
        return np.zeros(len(self), np.uint64) if self.key is None else self.key

    @staticmethod
    def concat(parts: list[Lines]) -> Lines:
        if not parts:
            return Lines.empty()
        keyed = any(p.key is not None for p in parts)
        return Lines(
            np.concatenate([p.kind for p in parts]),
            np.concatenate([p.offset for p in parts]),
            np.concatenate([p.value for p in parts]),
            np.concatenate([p.line for p in parts]),
            np.concatenate([p.time for p in parts]),
            np.concatenate([p.process for p in parts]),
            np.concatenate([p.session for p in parts]),
            np.concatenate([p.keys() for p in parts]) if keyed else None,
        )


@dataclass(slots=True)
class ParsedRange:
    """The lines of one byte range of a history file."""

    lines: Lines
    """Operations and reads; ``line`` is 1-based within the range."""
    topic: npt.NDArray[np.int32]
    """Per line: index into ``topics``."""
    partition: npt.NDArray[np.int64]
    """Per line: -1 where it gives none."""
    topics: list[str]
    count: int
    """Lines in the range (blank ones included)."""
    events: list[NemesisEvent] = field(default_factory=list)
    """Nemesis lines (``line`` within the range)."""
    error: tuple[int, str] | None = None
    """The first bad line (within the range) and why; the columns stop before it."""
    templated: int = 0
    """Lines the template path parsed (the rest went through parse_history_line)."""
    sent: npt.NDArray[np.float64] | None = None
    """Per line: when the write was sent (NaN: not said, a read); None when no line of the
    range says (the latency plot's input)."""


_MAX_TEMPLATES = 8
"""Templates tried per quote count; lines none of them matches take the slow path."""


def _lines(array: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Start and end (the ``\\n`` excluded) of each line."""
    newlines = np.flatnonzero(array == 0x0A)
    ends = newlines
    if len(array) and array[-1] != 0x0A:
        ends = np.append(newlines, len(array))
    starts = np.zeros(len(ends), dtype=np.int64)
    starts[1:] = newlines[: len(ends) - 1] + 1
    return starts, ends.astype(np.int64)


def _fast(
    data: Text,
    array: npt.NDArray[np.uint8],
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
) -> list[Matched]:
    """The lines the template path parses, per template."""
    if not len(starts):
        return []
    quotes = np.flatnonzero(array == 0x22)
    first, count = _quotes_per_line(quotes, starts, ends)
    offsets = np.empty(len(starts) + 1, dtype=np.int64)
    offsets[:-1] = starts
    offsets[-1] = len(array)
    lines = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(array)]
    )
    left = np.ones(len(starts), dtype=np.bool_)
    found = []
    tried = 0
    while tried < _MAX_TEMPLATES:
        remaining = np.flatnonzero(left)
        if not len(remaining):
            break
        sample = remaining[0]
        tried += 1
        template = learn(bytes(data[starts[sample] : ends[sample]]))
        if template is None:
            left[sample] = False  # for the slow path
            continue
        matched = match(
            template, lines, array, starts, ends, quotes, first, left & (count == template.quotes)
        )
        left[sample] = False
        left[matched.lines] = False
        found.append(matched)
    return found


Text = bytes | memoryview
"""A range's bytes: read, or a view of the mapped file."""


def parse_range(data: Text) -> ParsedRange:
    """The lines of ``data`` (whole lines of a history file)."""
    array = np.frombuffer(data, dtype=np.uint8)
    starts, ends = _lines(array)
    count = len(starts)
    fast = _fast(data, array, starts, ends)
    taken = np.zeros(count, dtype=np.bool_)
    for m in fast:
        taken[m.lines] = True
    slow = _slow(data, starts, ends, np.flatnonzero(~taken))
    topics = {name: i for i, name in enumerate(slow.topics)}
    parts = [slow.lines]
    topic_parts = [slow.topic]
    partition_parts = [slow.partition]
    any_sent = slow.sent is not None or any(m.sent is not None for m in fast)
    sent_parts = [_or_nan(slow.sent, len(slow.lines))] if any_sent else []
    for m in fast:
        if len(m.topic_hash) and bool(np.all(m.topic_hash == m.topic_hash[0])):
            hashes, first = m.topic_hash[:1], np.zeros(1, dtype=np.intp)  # one topic
        else:
            hashes, first = np.unique(m.topic_hash, return_index=True)
        index = np.empty(len(hashes), dtype=np.int32)
        for k, at in enumerate(first.tolist()):
            start = int(m.topic_start[at])
            name = bytes(data[start : start + int(m.topic_length[at])]).decode("ascii")
            index[k] = topics.setdefault(name, len(topics))
        topic_parts.append(
            np.full(len(m.topic_hash), index[0], dtype=np.int32)
            if len(hashes) == 1
            else index[np.searchsorted(hashes, m.topic_hash)]
        )
        partition_parts.append(m.partition)
        if any_sent:
            sent_parts.append(_or_nan(m.sent, len(m.lines)))
        parts.append(
            Lines(
                m.kind,
                m.offset,
                m.value,
                m.lines.astype(np.int64) + 1,
                m.time,
                m.process,
                m.session,
                m.key,
            )
        )
    if slow.error is not None:
        # Lines past the first bad one are not the history's: the audit stops there.
        before = [p.line < slow.error[0] for p in parts]
        parts = [p.take(b) for p, b in zip(parts, before, strict=True)]
        topic_parts = [t[b] for t, b in zip(topic_parts, before, strict=True)]
        partition_parts = [q[b] for q, b in zip(partition_parts, before, strict=True)]
        if any_sent:
            sent_parts = [q[b] for q, b in zip(sent_parts, before, strict=True)]
    lines = Lines.concat(parts)
    topic = np.concatenate(topic_parts)
    partition = np.concatenate(partition_parts)
    sent = np.concatenate(sent_parts) if any_sent else None
    if not bool(np.all(lines.line[1:] > lines.line[:-1])):
        order = np.argsort(lines.line, kind="stable")
        lines, topic, partition = lines.take(order), topic[order], partition[order]
        sent = None if sent is None else sent[order]
    return ParsedRange(
        lines,
        topic,
        partition,
        list(topics),
        count,
        slow.events,
        slow.error,
        int(taken.sum()),
        sent,
    )


def _or_nan(sent: npt.NDArray[np.float64] | None, n: int) -> npt.NDArray[np.float64]:
    return np.full(n, np.nan) if sent is None else sent


def _quotes_per_line(
    quotes: npt.NDArray[np.int64], starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Each line's first double quote (its index in ``quotes``) and how many it has. When
    every line has as many (a range of one line shape) that is arithmetic, checked; else
    two binary searches."""
    n = len(starts)
    if n and len(quotes) % n == 0 and len(quotes):
        c = len(quotes) // n
        grid = quotes.reshape(n, c)
        if bool(np.all(grid[:, 0] >= starts)) and bool(np.all(grid[:, -1] < ends)):
            return np.arange(n, dtype=np.int64) * c, np.full(n, c, dtype=np.int64)
    first = np.searchsorted(quotes, starts)
    return first, np.searchsorted(quotes, ends) - first


def _slow(
    data: Text,
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    chosen: npt.NDArray[np.intp],
) -> ParsedRange:
    """The lines ``chosen`` parsed one by one by parse_history_line, up to the first bad one."""
    kinds: list[int] = []
    offsets: list[int] = []
    values: list[bytes | None] = []
    keys: list[bytes | None] = []
    numbers: list[int] = []
    times: list[float] = []
    processes: list[int] = []
    sessions: list[int] = []
    sent: list[float] = []
    topic_of: list[int] = []
    partitions: list[int] = []
    topics: dict[str, int] = {}
    events: list[NemesisEvent] = []
    error = None
    for i in chosen.tolist():
        number = i + 1
        text = bytes(data[starts[i] : ends[i]])
        try:
            parsed = parse_history_line(number, text)
        except HistoryError as e:
            error = (number, e.reason)
            break
        if parsed is None:
            continue
        if isinstance(parsed, NemesisEvent):
            events.append(parsed)
            continue
        if isinstance(parsed, TxnStep | GroupStep):
            continue  # the transaction and group checks read these (chaos/audit/groups.py)
        if isinstance(parsed, HistoryRead):
            kinds.append(READ)
            sessions.append(parsed.session)
        else:
            kinds.append(KINDS.index(parsed.type))
            sessions.append(0)
        offsets.append(-1 if parsed.offset is None else parsed.offset)
        values.append(None if parsed.value is None else parsed.value.encode("utf-8"))
        key = parsed.key if isinstance(parsed, HistoryOp) else None
        keys.append(None if key is None else key.encode("utf-8"))
        sent_at = parsed.sent if isinstance(parsed, HistoryOp) else None
        sent.append(math.nan if sent_at is None else sent_at)
        numbers.append(number)
        times.append(parsed.time)
        processes.append(parsed.process)
        topic_of.append(topics.setdefault(parsed.topic, len(topics)))
        partitions.append(-1 if parsed.partition is None else parsed.partition)
    lines = Lines(
        np.array(kinds, dtype=np.int8),
        np.array(offsets, dtype=np.int64),
        hash_bytes(values),
        np.array(numbers, dtype=np.int64),
        np.array(times, dtype=np.float64),
        np.array(processes, dtype=np.int64),
        np.array(sessions, dtype=np.int64),
        hash_bytes(keys) if any(k is not None for k in keys) else None,
    )
    return ParsedRange(
        lines,
        np.array(topic_of, dtype=np.int32),
        np.array(partitions, dtype=np.int64),
        list(topics),
        len(starts),
        events,
        error,
        sent=np.array(sent, dtype=np.float64) if not all(map(math.isnan, sent)) else None,
    )
