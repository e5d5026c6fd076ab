"""The entries of a segment's ``.txnindex`` file (Kafka's ``AbortedTxn``), shared by the
broker's index (broker/log/transaction_index.py) and ``minibroker dump-log``:
docs/transactions.md.

Each entry is 34 bytes, big-endian::

    version int16 (0) | producer id int64 | first offset int64 | last offset int64
    | last stable offset int64
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from proto.errors import MinibrokerError

__all__ = [
    "ENTRY_SIZE",
    "AbortedTxn",
    "AbortedTxnFormatError",
    "decode_entries",
    "encode_entry",
]

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size
CURRENT_VERSION = 0


class AbortedTxnFormatError(MinibrokerError, ValueError):
    """Bytes that are not whole entries of a known version."""


class AbortedTxn(NamedTuple):
    """One aborted transaction of a producer, from its first batch to its marker."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode_entry(txn: AbortedTxn) -> bytes:
    return _ENTRY.pack(CURRENT_VERSION, *txn)


def decode_entries(data: bytes) -> list[AbortedTxn]:
    """Every entry of a ``.txnindex`` file's bytes, in order. AbortedTxnFormatError for a
    size that is not whole entries or an entry of another version."""
    if len(data) % ENTRY_SIZE:
        raise AbortedTxnFormatError(f"size {len(data)} is not a multiple of {ENTRY_SIZE}")
    entries = []
    for slot, (version, *fields) in enumerate(_ENTRY.iter_unpack(data)):
        if version != CURRENT_VERSION:
            raise AbortedTxnFormatError(f"entry {slot} has version {version}")
        entries.append(AbortedTxn(*fields))
    return entries
