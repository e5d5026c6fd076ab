"""Writing the history and timeline files of a chaos run (the audit reads them:
:mod:`chaos.audit.history` has the format, docs/audit.md the contract).

Every workload process writes its own file, one JSON object per line, flushed line by line
so that a process killed in the middle leaves every line it finished; the run merges them
into ``history.jsonl`` in time order at the end (:func:`merge_histories`). One writer per
file keeps the lines whole without locks between processes.

The vocabulary is Jepsen's: ``ok`` (acknowledged, with its offset), ``fail`` (certainly not
written), ``info`` (unknown: a timeout, a lost connection; never guessed ``ok``), ``read``
(a consumer polled this record), and the nemesis's own lines in the timeline. A write to a
compacted topic names its record's ``key``; a null ``value`` is a tombstone.

A transactional producer's writes name their transaction (``txn``, ``p<process>-t<n>``),
its steps are lines of their own (``f``: ``begin``, ``commit``, ``abort``, ``send_offsets``;
no topic), and a read_committed consumer's reads say so (``isolation``): docs/audit.md has
the lines. A member of a Kafka-protocol consumer group (``chaos run --client kafka``) names
its ``group``, ``member`` and ``generation`` in its reads, and its steps (``f``:
``assigned``, ``revoked``, ``lost``, ``commit_offsets``; no topic) are lines of their own.
Fields a line does not use are left out, so the lines of a plain workload are what they
always were.
"""

from __future__ import annotations

import heapq
import json
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, Self

__all__ = ["HistoryRecorder", "TimelineRecorder", "merge_histories"]


class _JsonLines:
    """Appends JSON objects as lines, flushed one by one; usable from several threads."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[str] = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, separators=(",", ":"), ensure_ascii=False) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _sent(at: float | None) -> dict[str, object]:
    return {} if at is None else {"sent": at}


def _said(error: str | None) -> dict[str, object]:
    return {} if error is None else {"error": error}


class HistoryRecorder(_JsonLines):
    """One workload process's history: producers' outcomes and consumers' reads."""

    def __init__(self, path: Path, process: int) -> None:
        super().__init__(path)
        self.process = process

    def _op(
        self,
        kind: str,
        topic: str,
        partition: int | None,
        value: str | None,
        offset: int | None,
        key: str | None = None,
        txn: str | None = None,
        **extra: object,
    ) -> None:
        entry: dict[str, object] = {
            "time": time.time(),
            "process": self.process,
            "type": kind,
            "topic": topic,
            "partition": partition,
            "value": value,
            "offset": offset,
        }
        if key is not None:  # a compacted topic's write; other lines stay as they were
            entry["key"] = key
        if txn is not None:  # a write inside a transaction
            entry["txn"] = txn
        self.write({**entry, **extra})

    def ok(
        self,
        topic: str,
        partition: int,
        value: str | None,
        offset: int,
        key: str | None = None,
        txn: str | None = None,
        *,
        sent: float | None = None,
    ) -> None:
        """``value`` (None: a tombstone of ``key``) was acknowledged at ``offset``
        (acks=all); inside transaction ``txn``, if one is named. ``sent``: when the write
        was handed to the client (``time.time()``), for the report's latency plot."""
        self._op("ok", topic, partition, value, offset, key, txn, **_sent(sent))

    def fail(
        self,
        topic: str,
        partition: int | None,
        value: str | None,
        key: str | None = None,
        txn: str | None = None,
        *,
        sent: float | None = None,
        error: str | None = None,
    ) -> None:
        """``value`` was certainly not written (the broker refused it before appending);
        ``error``: what the client said, for a person reading the history."""
        self._op("fail", topic, partition, value, None, key, txn, **_sent(sent), **_said(error))

    def info(
        self,
        topic: str,
        partition: int | None,
        value: str | None,
        key: str | None = None,
        txn: str | None = None,
        *,
        sent: float | None = None,
        error: str | None = None,
    ) -> None:
        """Whether ``value`` was written is unknown (a timeout, a lost connection);
        ``error``: what the client said."""
        self._op("info", topic, partition, value, None, key, txn, **_sent(sent), **_said(error))

    def step(self, f: str, txn: str, kind: str, **fields: object) -> None:
        """A step of transaction ``txn``: ``f`` is ``begin``, ``commit``, ``abort`` or
        ``send_offsets``; ``kind`` is ``ok`` (acknowledged), ``fail`` (certainly did not
        happen) or ``info`` (unknown), never guessed. ``fields``: the step's own
        (``timeout_ms`` of a begin, ``group`` and ``offsets`` of a send_offsets)."""
        self.write(
            {"time": time.time(), "process": self.process, "type": kind, "f": f, "txn": txn}
            | fields
        )

    def group_step(
        self, f: str, kind: str, group: str, member: str, generation: int, **fields: object
    ) -> None:
        """A step of a Kafka-protocol consumer group member ``member`` of ``group`` in
        ``generation``: ``f`` is ``assigned``, ``revoked`` or ``lost`` (``partitions``: the
        member's whole assignment, ``[topic, partition]`` each), or ``commit_offsets``
        (``offsets``: ``[topic, partition, next offset]`` each); ``kind`` is ``ok``,
        ``fail`` (certainly not done) or ``info`` (unknown), never guessed."""
        self.write(
            {
                "time": time.time(),
                "process": self.process,
                "type": kind,
                "f": f,
                "group": group,
                "member": member,
                "generation": generation,
            }
            | fields
        )

    def read(
        self,
        topic: str,
        partition: int,
        offset: int,
        value: str | None,
        session: int = 0,
        *,
        isolation: str | None = None,
        txn: str | None = None,
        group: tuple[str, str, int] | None = None,
    ) -> None:
        """A consumer polled ``value`` (None: a null one) at ``offset``. ``session`` changes
        whenever the consumer's position may legitimately jump (a rebalance, a seek, a
        reset): the audit compares the offsets of one session only. ``isolation``: a
        read_committed consumer says so (None: read_uncommitted, left out); ``txn``: the
        transaction that processes the record read (a consume-transform-produce copier);
        ``group``: a Kafka-protocol group member's (group, member id, generation) at the
        poll."""
        extra: dict[str, object] = {"session": session}
        if isolation is not None and isolation != "read_uncommitted":
            extra["isolation"] = isolation
        if group is not None:
            extra["group"], extra["member"], extra["generation"] = group
        self._op("read", topic, partition, value, offset, None, txn, **extra)


class TimelineRecorder(_JsonLines):
    """The nemesis's timeline: one line per fault injected or healed."""

    def event(self, f: str, target: object, *, kind: str = "info", **fields: object) -> None:
        """``f`` is the fault (``kill``, ``start``, ``pause``, ...), ``target`` what it hit."""
        self.write(
            {
                "time": time.time(),
                "process": "nemesis",
                "type": kind,
                "f": f,
                "target": target,
                **fields,
            }
        )


def merge_histories(parts: Iterable[Path], out: Path) -> int:
    """Merge per-process history files (each in time order) into ``out`` by time; returns
    the number of lines. A last line cut short by a killed process is left out."""

    def lines(path: Path) -> Iterator[tuple[float, str]]:
        with path.open(encoding="utf-8") as f:
            for line in f:
                if not line.endswith("\n"):
                    return  # torn by a kill: never finished, never acknowledged to anyone
                try:
                    yield float(json.loads(line)["time"]), line
                except (ValueError, KeyError, TypeError):
                    continue

    count = 0
    with out.open("w", encoding="utf-8") as merged:
        for _, line in heapq.merge(*(lines(p) for p in sorted(parts)), key=lambda t: t[0]):
            merged.write(line)
            count += 1
    return count
