"""64-bit hashes of values, writes and record versions, computed a column at a time (numpy).

The audit compares values by hash wherever it has many of them: a history's values with
the records' (lost_ack, phantom, inconsistent_read), the values of a partition with each
other (duplicate), two replicas' versions of a record (divergence). Values are compared
byte for byte wherever a finding shows them. Both sides of every comparison are hashed
here, with the same function, so the history's UTF-8 text and the records' bytes agree.

:func:`hash_spans` hashes byte strings lying anywhere in a buffer: strings of one word
count are copied out as rows of words (a fancy index over a sliding-window view: a row
copy each, the fastest gather numpy has) and hashed together, a word column per step (an
xor, a multiply and an xor-shift, then a splitmix64 finaliser). :data:`NULL` (0) stands
for a null value: no string hashes to it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = [
    "NULL",
    "U64",
    "combine",
    "hash_bytes",
    "hash_spans",
    "mix",
]

U64 = npt.NDArray[np.uint64]
NULL = 0
"""The hash of a null value (and of no write): no byte string hashes to it."""

_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xBF58476D1CE4E5B9)
_M3 = np.uint64(0x94D049BB133111EB)
_SEED = np.uint64(0x6A09E667F3BCC909)
_S27, _S30, _S31, _S32 = np.uint64(27), np.uint64(30), np.uint64(31), np.uint64(32)
_SEVEN, _THREE = np.int64(7), np.int64(3)
_LOW_MASKS = np.array([(1 << (8 * n)) - 1 for n in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
"""_LOW_MASKS[n]: the low n bytes of a little-endian word."""


def mix(x: U64) -> U64:
    """splitmix64's finaliser: every input bit moves every output bit (in place)."""
    x ^= x >> _S30
    x *= _M2
    x ^= x >> _S27
    x *= _M3
    x ^= x >> _S31
    return x


def combine(*columns: npt.NDArray[np.integer] | npt.NDArray[np.uint64]) -> U64:
    """One hash of several integer columns, position by position (order matters)."""
    h = np.full(len(columns[0]), _SEED, dtype=np.uint64)
    for column in columns:
        h ^= column.astype(np.uint64, copy=False)
        h *= _M1
        h = mix(h)
    return h


_BLOCK = 1 << 16
"""Strings hashed per step: their words (at most _BLOCK x their width) stay in the cache."""


def _rows(buffer: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], width: int) -> U64:
    """The ``width`` bytes from each of ``starts`` (width a multiple of 8) as rows of
    little-endian words: one fancy index over a sliding-window view of the buffer (a row
    copy each), rows running past the buffer's end zero-filled."""
    windows = np.lib.stride_tricks.as_strided(
        buffer, shape=(max(len(buffer) - width + 1, 0), width), strides=(1, 1), writeable=False
    )
    inside = starts < len(windows)
    if inside.all():
        rows = windows[starts]
    else:
        rows = np.zeros((len(starts), width), dtype=np.uint8)
        rows[inside] = windows[starts[inside]]
        for i in np.flatnonzero(~inside):
            tail = buffer[starts[i] : starts[i] + width]
            rows[i, : len(tail)] = tail
    return rows.view("<u8")


def hash_spans(
    buffer: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
) -> U64:
    """The hash of each byte string ``buffer[start : start + length]``; NULL where
    ``start`` is negative (a null value). Bytes past a string's end are masked off, so
    where it lies does not matter.
    """
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    out = np.zeros(len(starts), dtype=np.uint64)
    counts = np.where(starts >= 0, (lengths + _SEVEN) >> _THREE, -1)
    uniform = len(counts) and bool(np.all(counts == counts[0]))
    for count in counts[:1] if uniform else np.unique(counts):
        if count < 0:
            continue
        chosen = np.arange(len(counts)) if uniform else np.flatnonzero(counts == count)
        for block in range(0, len(chosen), _BLOCK):
            picked = chosen[block : block + _BLOCK]
            length = lengths[picked]
            h = (length.astype(np.uint64) * _M1) ^ _SEED
            if count:
                words = _rows(buffer, starts[picked], 8 * int(count))
                last = words[:, -1] & _LOW_MASKS[length - 8 * (int(count) - 1)]
                spread = np.empty_like(h)
                for j in range(int(count)):
                    h ^= words[:, j] if j < count - 1 else last
                    h *= _M2
                    np.right_shift(h, _S32, out=spread)
                    h ^= spread
            h = mix(h)
            h[h == NULL] = 1
            out[picked] = h
    return out


def hash_bytes(values: Sequence[bytes | None]) -> U64:
    """:func:`hash_spans` of Python byte strings (None: NULL), for the few values hashed
    outside a buffer and for tests."""
    data = b"".join(v for v in values if v is not None)
    starts = np.empty(len(values), dtype=np.int64)
    lengths = np.zeros(len(values), dtype=np.int64)
    at = 0
    for i, v in enumerate(values):
        if v is None:
            starts[i] = -1
        else:
            starts[i] = at
            lengths[i] = len(v)
            at += len(v)
    return hash_spans(np.frombuffer(data, dtype=np.uint8), starts, lengths)
