"""Which transactions the workload's transactional producers have open right now, read from
the tails of their history files (the ``kill-leader-mid-txn`` nemesis strikes in one).

A transaction is *open* once its ``begin`` line and at least one acknowledged write
(``ok`` with its ``txn``) are in its producer's file and no ``commit`` or ``abort`` line
of it is yet: its writes' partitions are in the transaction (each added before its first
record went out) and its end is still to come, so their leaders will be asked for its
markers. A producer records every write's outcome before the step that ends its
transaction (:mod:`chaos.workload`), so an end line always follows the writes of its
transaction in the file.

Each file is read from near its end the first time (:data:`TAIL_BYTES`: many times a
transaction's lines) and then only as it grows, whole lines only: a file of a long run
is not read again from the start at every strike.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proto.topic_partition import TopicPartition

__all__ = ["ENDS", "TAIL_BYTES", "OpenTransaction", "OpenTransactions"]

TAIL_BYTES = 64 << 10
"""How far from its end a history file is first read."""
ENDS = frozenset({"commit", "abort"})
"""The steps that end a transaction (whatever their ``type``: the producer is done with it)."""


@dataclass
class OpenTransaction:
    """A transaction begun, written to and not ended, as its producer's file shows it."""

    txn: str
    process: int
    partitions: list[TopicPartition] = field(default_factory=list)
    """The partitions of its acknowledged writes, first write first, each once."""


@dataclass
class _Tail:
    path: Path
    position: int | None = None
    """Where the next read starts (None: not read yet)."""
    partial: bytes = b""
    """The start of a line not finished yet."""
    cut: bool = False
    """The first read began inside a line: drop what comes before its first newline."""


class OpenTransactions:
    """The open transactions of the producers whose history files ``paths`` names
    (process -> file); :meth:`poll` reads what the files gained."""

    def __init__(self, paths: Mapping[int, Path], *, tail_bytes: int = TAIL_BYTES) -> None:
        self._tails = [_Tail(path) for _, path in sorted(paths.items())]
        self._tail_bytes = tail_bytes
        self.open: dict[str, OpenTransaction] = {}
        """Open now, by transaction."""
        self.ended: dict[str, float] = {}
        """Transactions seen ending, with the time of the line that ended each."""
        self._begun: set[str] = set()

    def poll(self) -> dict[str, OpenTransaction]:
        """Read the lines written since the last poll; the transactions open now."""
        for tail in self._tails:
            for line in self._read(tail):
                self.feed(line)
        return self.open

    def feed(self, line: dict[str, Any]) -> None:
        """One history line, in its file's order."""
        txn = line.get("txn")
        process = line.get("process")
        if not isinstance(txn, str) or not isinstance(process, int):
            return
        f = line.get("f")
        if f == "begin":
            self._begun.add(txn)
        elif f in ENDS:
            self._begun.discard(txn)
            self.open.pop(txn, None)
            self.ended.setdefault(txn, float(line.get("time", 0.0)))
        elif f is None and line.get("type") == "ok" and txn in self._begun:
            tp = TopicPartition(str(line.get("topic")), int(line.get("partition", -1)))
            found = self.open.setdefault(txn, OpenTransaction(txn, process))
            if tp not in found.partitions:
                found.partitions.append(tp)

    def _read(self, tail: _Tail) -> list[dict[str, Any]]:
        try:
            with tail.path.open("rb") as f:
                if tail.position is None:
                    tail.position = max(0, f.seek(0, 2) - self._tail_bytes)
                    if tail.position:
                        f.seek(tail.position - 1)
                        tail.cut = f.read(1) != b"\n"
                f.seek(tail.position)
                chunk = f.read()
        except FileNotFoundError:
            return []
        tail.position += len(chunk)
        data = tail.partial + chunk
        end = data.rfind(b"\n") + 1
        tail.partial = data[end:]
        complete = data[:end].split(b"\n")[:-1]
        if tail.cut and complete:
            complete, tail.cut = complete[1:], False
        lines = []
        for raw in complete:
            try:
                lines.append(json.loads(raw))
            except ValueError:
                continue
        return lines
