"""A consumer's reads of a partition, one step at a time: where its position went backwards,
repeated or jumped.

A consumer polls the records of a partition in offset order, one after the other, from the
position it fetches at (Kafka's ``SubscriptionState`` position, advanced past each record
returned). Its position may legitimately go back or jump only when the consumer says so in
its history by bumping ``session`` (a rebalance, a seek or reset, a restart: see
:mod:`chaos.audit.history`). So the reads of one *poll stream*, a (partition, process,
session), taken in the order their lines were written (time, then line number), must each
be the previous offset plus one. Every other step is reported here:

- ``backwards``: the offset is below the previous one; ``repeated``: equal to it. Both are a
  ``nonmonotonic_poll`` (the consumer saw records again without being asked to).
- ``skip``: the offset is more than one above the previous one. It is a ``poll_skip`` only
  if the committed log holds a record in between; the log may itself lack those offsets
  (a gap the audit reports apart), which the Spark job decides with the log's held ranges.

:func:`steps` finds them in columns (a partition's reads, in the chunk task that holds the
partition: one sort and one comparison of neighbours); :func:`poll_steps` is the same walk
one read at a time, the definition the columns are tested against.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from operator import itemgetter
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = [
    "BACKWARDS",
    "ORDER",
    "REPEATED",
    "SKIP",
    "STREAM",
    "WHAT",
    "PollRead",
    "PollStep",
    "poll_steps",
    "sort_key",
    "step_kind",
    "steps",
    "stream_of",
]

STREAM = ("pid", "process", "session")
"""The columns that name a poll stream: partition (its index in the audit), process, session."""
ORDER = (*STREAM, "time", "line")
"""The order :func:`poll_steps` needs its reads in: by stream, then as the lines were
written (time, then line number for lines of one instant)."""


class PollRead(NamedTuple):
    """One read, as :func:`poll_steps` takes it: the columns of :data:`ORDER`, then the
    offset."""

    pid: int
    process: int
    session: int
    time: float
    line: int
    offset: int


class PollStep(NamedTuple):
    """A step of a poll stream that is not the previous offset plus one."""

    pid: int
    process: int
    session: int
    what: str
    """``backwards``, ``repeated`` or ``skip`` (:func:`step_kind`)."""
    previous: int
    """The offset read before."""
    offset: int
    previous_line: int
    line: int
    """The line of this read."""
    time: float
    """When this read was written."""


stream_of = itemgetter(0, 1, 2)
"""A :class:`PollRead`'s poll stream, the :data:`STREAM` fields: (pid, process, session)."""
sort_key = itemgetter(0, 1, 2, 3, 4)
"""A :class:`PollRead`'s place in :data:`ORDER`."""


def step_kind(previous: int, offset: int) -> str | None:
    """What reading ``offset`` right after ``previous`` in one stream is: None for the next
    offset, else ``backwards``, ``repeated`` or ``skip``."""
    if offset == previous + 1:
        return None
    if offset < previous:
        return "backwards"
    if offset == previous:
        return "repeated"
    return "skip"


def poll_steps(reads: Iterable[Any]) -> Iterator[PollStep]:
    """The steps of the streams in ``reads`` that are not one offset up.

    ``reads`` are :class:`PollRead` (or rows with the same fields in the same order), sorted
    by :data:`ORDER`, as one Spark partition of reads partitioned by :data:`STREAM` is after
    the job's sort. Raises ValueError on reads out of that order: a stream's steps would be
    wrong, so no partial answer is given.
    """
    last: PollRead | None = None
    for row in reads:
        read = PollRead(*row)
        if last is not None and sort_key(read) < sort_key(last):
            raise ValueError(f"reads out of order: {read} after {last}")
        if last is not None and stream_of(read) == stream_of(last):
            what = step_kind(last.offset, read.offset)
            if what is not None:
                yield PollStep(
                    read.pid,
                    read.process,
                    read.session,
                    what,
                    last.offset,
                    read.offset,
                    last.line,
                    read.line,
                    read.time,
                )
        last = read


BACKWARDS, REPEATED, SKIP = 0, 1, 2
WHAT = ("backwards", "repeated", "skip")
"""Step kinds by code (:func:`steps`)."""


def steps(
    process: npt.NDArray[np.int64],
    session: npt.NDArray[np.int64],
    time: npt.NDArray[np.float64],
    line: npt.NDArray[np.int64],
    offset: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], npt.NDArray[np.int8]]:
    """The steps of one partition's reads (columns, in any order) that are not one offset
    up, as :func:`poll_steps` finds them: (index of the read before, index of the read,
    kind code of :data:`WHAT`), in stream order."""
    order = np.lexsort((line, time, session, process))
    before, after = order[:-1], order[1:]
    same = (process[after] == process[before]) & (session[after] == session[before])
    previous, current = offset[before], offset[after]
    chosen = np.flatnonzero(same & (current != previous + 1))
    previous, current = previous[chosen], current[chosen]
    kind = np.where(current < previous, BACKWARDS, np.where(current == previous, REPEATED, SKIP))
    return before[chosen], after[chosen], kind.astype(np.int8)
