"""History lines parsed a column at a time, by template: the fast path of
:mod:`chaos.audit.history_columns`.

A history is written by a few writers, each always the same way: the same keys in the same
order, the same separators (``json.dumps``), only the values differing. So the lines of a
range fall into a few *templates*: the line's text outside its values. A template is learnt
from one line (:func:`learn`, which tokenises it and checks the result with ``json.loads``)
and matched against every line with as many double quotes, all at once (:func:`match`):

- the template is an RE2 pattern (:attr:`Template.pattern`) run over all the lines by Arrow:
  the text outside the values byte for byte, and each value of the one form this path
  takes: printable ASCII strings without a backslash (so a string's bytes are its UTF-8
  text), JSON numbers of the simplest forms (digits, no leading zero, at most 18 of them,
  a fraction for ``time``), ``null`` where a field may be null;
- in a line that matches, the pieces of text contain the line's double quotes at known
  places, so the quotes' positions say where each value starts and ends; strings are
  hashed where they lie, numbers converted a column at a time (``time`` by Arrow's exact
  decimal-to-double conversion, as Python's ``float``);
- a ``key`` (a write to a compacted topic names its record's) is hashed as the value is;
  a null ``key`` or ``value`` (a tombstone) sends the line to the slow path;
- what :func:`chaos.audit.history.parse_history_line` checks of the values (the fields an
  ``ok`` or a read needs, the partition's range) is checked per column.

A line that fails any of this is left to ``parse_history_line``, so a line's meaning never
depends on which path parsed it; the fast path only has to be sure. Nemesis lines, whose
``process`` is a string, always take the slow path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from chaos.audit.hashing import hash_spans

__all__ = ["Matched", "Template", "learn", "match"]

I64 = npt.NDArray[np.int64]
_WS = b" \t\r"
_SCALAR = frozenset(b"0123456789+-.eEabcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_STRING_FIELDS = frozenset({"type", "topic", "value", "key", "txn", "isolation", "group", "member"})
_NUMBER_FIELDS = frozenset(
    {"time", "process", "partition", "offset", "session", "generation", "sent"}
)
_GROUP_FIELDS = ("group", "member", "generation")
"""A consumer group member's read names all three (or none)."""
_REQUIRED = ("time", "process", "type", "topic", "value")
_TYPES = (b"ok", b"fail", b"info", b"read")
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Template:
    """A line's text outside its values: ``pieces[k]`` comes before value k, the last
    piece after the last value."""

    pieces: tuple[bytes, ...]
    anchors: tuple[tuple[int, int], ...]
    """Per piece: (index of a double quote of the line in it, its offset in the piece), or
    (-1, 0) for a last piece without a quote, which ends the line."""
    fields: tuple[str, ...]
    """The key of each value."""
    quotes: int
    """Double quotes in a line of this template."""

    @property
    def pattern(self) -> str:
        """An RE2 pattern a line (with its newline) matches when it has this template and
        values of the forms the fast path takes."""
        parts = ["\\A"]
        for piece, key in zip(self.pieces, (*self.fields, None), strict=True):
            parts.append(_literal(piece))
            if key is not None:
                parts.append(_VALUE_PATTERNS.get(key, _STRING))
        parts.append("\\n?\\z")
        return "".join(parts)


_STRING = "[ !#-\\[\\]-~]*"
"""The content of a JSON string the fast path takes: printable ASCII, no quote, no backslash
(so its bytes are its text)."""
_UNSIGNED = "(?:0|[1-9][0-9]{0,17})"
_VALUE_PATTERNS = {
    "type": "(?:ok|fail|info|read)",
    "topic": "[ !#-\\[\\]-~]+",
    "txn": "[ !#-\\[\\]-~]+",
    "group": "[ !#-\\[\\]-~]+",
    "member": "[ !#-\\[\\]-~]+",
    "generation": _UNSIGNED,
    "isolation": "(?:read_uncommitted|read_committed)",
    "value": _STRING,
    "time": "(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?",
    "sent": "(?:(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?|null)",
    "process": f"-?{_UNSIGNED}",
    "partition": "(?:0|[1-9][0-9]{0,9}|null)",
    "offset": f"(?:{_UNSIGNED}|null)",
    "session": f"(?:{_UNSIGNED}|null)",
}
"""What each field's value must look like (a number of the simplest JSON form, at most 18
digits, so int64 holds it), else the line takes the slow path."""


def _literal(text: bytes) -> str:
    return "".join(chr(b) if chr(b).isalnum() else f"\\x{b:02x}" for b in text)


def _skip(line: bytes, p: int) -> int:
    while p < len(line) and line[p] in _WS:
        p += 1
    return p


def learn(line: bytes) -> Template | None:
    """The template of one history line; None for a line the fast path does not take: not
    a flat JSON object of distinct keys, a key of the history's with a value of the wrong
    kind (a string ``process``: a nemesis line), a field the line needs missing, any other
    key with a value but a string."""
    if any(b == 0x5C or b >= 0x80 or (b < 0x20 and b not in b"\t\r") for b in line):
        return None
    pieces: list[bytes] = []
    fields: list[str] = []
    kinds: list[bool] = []
    piece = bytearray()
    p = _skip(line, 0)
    if p >= len(line) or line[p] != ord("{"):
        return None
    piece += line[: p + 1]
    p += 1
    while True:
        q = _skip(line, p)
        piece += line[p:q]
        p = q
        if p >= len(line) or line[p] != ord('"'):
            return None
        end = line.find(b'"', p + 1)
        if end < 0:
            return None
        key = line[p + 1 : end].decode("ascii")
        q = _skip(line, end + 1)
        if q >= len(line) or line[q] != ord(":"):
            return None
        q = _skip(line, q + 1)
        piece += line[p:q]
        p = q
        if p >= len(line):
            return None
        if line[p] == ord('"'):
            end = line.find(b'"', p + 1)
            if end < 0:
                return None
            piece += b'"'
            pieces.append(bytes(piece))
            piece = bytearray(b'"')
            p = end + 1
            kinds.append(True)
        else:
            q = p
            while q < len(line) and line[q] in _SCALAR:
                q += 1
            if q == p:
                return None
            pieces.append(bytes(piece))
            piece = bytearray()
            p = q
            kinds.append(False)
        fields.append(key)
        q = _skip(line, p)
        piece += line[p:q]
        p = q
        if p >= len(line):
            return None
        if line[p] == ord(","):
            piece += b","
            p += 1
            continue
        if line[p] != ord("}"):
            return None
        p += 1
        q = _skip(line, p)
        if q != len(line):
            return None
        piece += line[p - 1 : q]
        pieces.append(bytes(piece))
        break
    if len(set(fields)) != len(fields):
        return None
    for key, is_string in zip(fields, kinds, strict=True):
        if key in _STRING_FIELDS and not is_string:
            return None
        if key in _NUMBER_FIELDS and is_string:
            return None
        if key not in _STRING_FIELDS and key not in _NUMBER_FIELDS and not is_string:
            return None
    if any(key not in fields for key in _REQUIRED):
        return None
    if any(key in fields for key in _GROUP_FIELDS) and any(k not in fields for k in _GROUP_FIELDS):
        return None
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict) or list(obj) != fields:
        return None
    anchors = []
    seen = 0
    for piece_bytes in pieces:
        at = piece_bytes.find(b'"')
        anchors.append((seen, at) if at >= 0 else (-1, 0))
        seen += piece_bytes.count(b'"')
    return Template(tuple(pieces), tuple(anchors), tuple(fields), seen)


@dataclass(slots=True)
class Matched:
    """The lines a template matched, as columns (indices into the lines handed to
    :func:`match`)."""

    lines: npt.NDArray[np.intp]
    kind: npt.NDArray[np.int8]
    time: npt.NDArray[np.float64]
    process: I64
    topic_hash: npt.NDArray[np.uint64]
    topic_start: I64
    topic_length: I64
    partition: I64
    offset: I64
    session: I64
    value: npt.NDArray[np.uint64]
    key: npt.NDArray[np.uint64] | None = None
    """The keys' hashes; None for a template without a ``key`` field."""
    sent: npt.NDArray[np.float64] | None = None
    """When each write was sent (NaN: null); None for a template without a ``sent``."""


def _bytes_at(buffer: npt.NDArray[np.uint8], starts: I64, width: int) -> npt.NDArray[np.uint8]:
    """``width`` bytes from each start (zeros past the buffer's end)."""
    windows = np.lib.stride_tricks.as_strided(
        buffer, shape=(max(len(buffer) - width + 1, 0), width), strides=(1, 1), writeable=False
    )
    inside = starts < len(windows)
    if inside.all():
        return windows[starts]
    rows = np.zeros((len(starts), width), dtype=np.uint8)
    rows[inside] = windows[starts[inside]]
    for i in np.flatnonzero(~inside):
        tail = buffer[starts[i] : starts[i] + width]
        rows[i, : len(tail)] = tail
    return rows


def _integers(
    buffer: npt.NDArray[np.uint8], begin: I64, length: I64
) -> tuple[npt.NDArray[np.bool_], I64]:
    """(null, value) of numbers the pattern checked: ``null``, or at most 18 digits after an
    optional minus sign; their bytes copied out as rows, the digits summed a column at a
    time."""
    width = int(length.max(initial=1))
    rows = _bytes_at(buffer, begin, width).astype(np.int64)
    null = rows[:, 0] == ord("n")
    minus = rows[:, 0] == ord("-")
    value = np.zeros(len(begin), dtype=np.int64)
    for j in range(width):
        use = (j < length) & ~null & ~(minus & (j == 0))
        value = np.where(use, value * 10 + rows[:, j] - ord("0"), value)
    return null, np.where(minus, -value, value)


def _times(buffer: npt.NDArray[np.uint8], begin: I64, length: I64) -> npt.NDArray[np.float64]:
    """The numbers (digits, an optional fraction: the pattern checked) as Arrow's exact
    decimal-to-double conversion gives them, as Python's ``float`` does."""
    if not len(begin):
        return np.zeros(0, dtype=np.float64)
    width = int(length.max())
    rows = _bytes_at(buffer, begin, width)
    offsets = np.zeros(len(begin) + 1, dtype=np.int32)
    np.cumsum(length, out=offsets[1:])
    data = np.ascontiguousarray(rows[np.arange(width)[None, :] < length[:, None]])
    text = pa.StringArray.from_buffers(len(begin), pa.py_buffer(offsets), pa.py_buffer(data))
    return pc.cast(text, pa.float64()).to_numpy(zero_copy_only=False)  # type: ignore[no-any-return]


_KIND_OF_FIRST = np.full(256, -1, dtype=np.int8)
for _code, _name in enumerate(_TYPES):
    _KIND_OF_FIRST[_name[0]] = _code


def match(
    template: Template,
    lines: pa.Array,
    buffer: npt.NDArray[np.uint8],
    starts: I64,
    ends: I64,
    quotes: I64,
    first_quote: I64,
    candidates: npt.NDArray[np.bool_],
) -> Matched:
    """The ``candidates`` among ``lines`` (an Arrow binary array of the lines [starts,
    ends) of ``buffer``, newlines included; ``quotes``: the buffer's double quotes,
    ``first_quote``: each line's first among them) that have the template and hold values
    the fast path takes, and their columns."""
    fits = pc.match_substring_regex(lines, template.pattern).to_numpy(zero_copy_only=False)
    chosen = np.flatnonzero(fits & candidates)
    ends = ends[chosen]
    quote_base = first_quote[chosen]
    piece_starts = []
    for piece, (quote, at) in zip(template.pieces, template.anchors, strict=True):
        piece_starts.append(quotes[quote_base + quote] - at if quote >= 0 else ends - len(piece))
    spans: dict[str, tuple[I64, I64]] = {}
    for k, key in enumerate(template.fields):
        begin = piece_starts[k] + len(template.pieces[k])
        spans[key] = (begin, piece_starts[k + 1] - begin)

    begin, _ = spans["type"]
    kind = _KIND_OF_FIRST[buffer[begin]]
    _, process = _integers(buffer, *spans["process"])
    n = len(chosen)
    ok = np.ones(n, dtype=np.bool_)

    def optional(key: str) -> tuple[npt.NDArray[np.bool_], I64]:
        if key not in spans:
            return np.zeros(n, dtype=np.bool_), np.full(n, -1, dtype=np.int64)
        null, value = _integers(buffer, *spans[key])
        return ~null, np.where(null, -1, value)

    has_partition, partition = optional("partition")
    has_offset, offset = optional("offset")
    needs = (kind == 0) | (kind == 3)
    ok &= ~needs | (has_partition & has_offset)
    ok &= partition <= _INT32_MAX
    has_session, session = optional("session")
    session = np.where(has_session & (kind == 3), session, 0)

    keep = np.flatnonzero(ok)
    topic_start, topic_length = (column[keep] for column in spans["topic"])
    time_start, time_length = (column[keep] for column in spans["time"])
    value_start, value_length = (column[keep] for column in spans["value"])
    key_hash = None
    if "key" in spans:
        key_start, key_length = (column[keep] for column in spans["key"])
        key_hash = hash_spans(buffer, key_start, key_length)
    sent = None
    if "sent" in spans:
        sent_start, sent_length = (column[keep] for column in spans["sent"])
        given = buffer[sent_start] != ord("n")
        sent = np.full(len(keep), np.nan)
        sent[given] = _times(buffer, sent_start[given], sent_length[given])
    return Matched(
        chosen[keep],
        kind[keep],
        _times(buffer, time_start, time_length),
        process[keep],
        hash_spans(buffer, topic_start, topic_length),
        topic_start,
        topic_length,
        partition[keep],
        offset[keep],
        session[keep],
        hash_spans(buffer, value_start, value_length),
        key_hash,
        sent,
    )
