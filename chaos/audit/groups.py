"""The consumer group checks: what the members of a Kafka-protocol consumer group read and
committed, against what the log serves (docs/audit.md, "Consumer groups").

A group's contract is at-least-once: every record below a committed offset was delivered
to some member before the commit (the members commit only what they processed), a
partition belongs to one member per generation, and a member given a partition starts at
the group's last acknowledged commit. Redelivery is allowed (a member that dies after
processing and before committing leaves its successor to process the same records again)
and is counted, not judged. The kinds:

- ``lost_commit``: an acknowledged commit of offset ``C`` while records below ``C`` that the
  log serves had been delivered to no member of the group: a consumer that restarts from
  the commit never sees them (the records are in the log; the group skipped them).
- ``shared_partition``: two members of one generation held (were assigned, or read) the same
  partition: the coordinator's assignment in that generation gave it twice.
- ``read_below_commit``: a member's first read of a partition it was assigned in generation
  ``g`` lies below the group's last acknowledged commit of an earlier generation: the
  coordinator answered its OffsetFetch with an older offset (a commit lost with its
  coordinator), so records are processed again beyond what at-least-once needs. Excused
  when the commit's offset lies beyond what the log still holds (a truncated log: the
  member had to reset).

The history's group lines (reads naming a ``group``, and the members' ``assigned``,
``revoked``, ``lost`` and ``commit_offsets`` steps) are read here on the driver, as the
transaction lines are; the Spark job hands over each partition's served ranges (the
offsets it holds below its committed end that a consumer is served: no control batch, no
aborted transaction). Offsets are judged, not values: a record a high-watermark-mode
truncation replaced at an offset the group had read is the data checks' to judge. Topics
that are compacted are left out of ``lost_commit``: a cleaned batch keeps its offset range
but not every offset in it.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from chaos.audit.history import (
    COMMIT_OFFSETS,
    GroupStep,
    HistoryRead,
    NemesisEvent,
    parse_history_line,
)
from chaos.audit.model import GROUP_KINDS, PartitionSummary, Violation

__all__ = [
    "GROUP_KINDS",
    "GroupHistory",
    "GroupStats",
    "Rebalance",
    "judge_groups",
    "read_group_history",
]

REBALANCES_LISTED = 500
"""Rebalances report.json lists one by one (the summary's figures count them all)."""
FAULT_LOOKBACK_S = 120.0
"""How long before a rebalance a fault is taken as its likely cause."""

_TP = tuple[str, int]


@dataclass(slots=True)
class _Reads:
    """One group's reads of one partition, as columns."""

    offset: list[int] = field(default_factory=list)
    time: list[float] = field(default_factory=list)
    member: list[int] = field(default_factory=list)
    """The member's number (:attr:`GroupHistory.members`)."""
    generation: list[int] = field(default_factory=list)
    line: list[int] = field(default_factory=list)


@dataclass(slots=True)
class GroupHistory:
    """The history's consumer group lines."""

    reads: dict[tuple[str, str, int], _Reads] = field(default_factory=dict)
    """(group, topic, partition) -> the group's reads of it."""
    steps: list[GroupStep] = field(default_factory=list)
    processes: dict[str, int] = field(default_factory=dict)
    """Member id -> the history process it is."""
    members: dict[str, int] = field(default_factory=dict)
    """Member id -> its number in the reads' columns."""

    def member_number(self, member: str) -> int:
        return self.members.setdefault(member, len(self.members))

    def add_read(self, read: HistoryRead) -> None:
        assert read.group is not None
        assert read.member is not None
        assert read.generation is not None
        key = (read.group, read.topic, read.partition)
        reads = self.reads.get(key)
        if reads is None:
            reads = self.reads[key] = _Reads()
        reads.offset.append(read.offset)
        reads.time.append(read.time)
        reads.member.append(self.member_number(read.member))
        reads.generation.append(read.generation)
        reads.line.append(read.line)
        self.processes.setdefault(read.member, read.process)

    def __bool__(self) -> bool:
        return bool(self.reads or self.steps)


def read_group_history(path: Path) -> GroupHistory:
    """The consumer group lines of a history file (already validated by the job's parse: a
    line that does not parse here is skipped, never guessed)."""
    history = GroupHistory()
    with path.open("rb") as f:
        for number, text in enumerate(f, 1):
            if b'"group"' not in text:
                continue
            try:
                parsed = parse_history_line(number, text)
            except ValueError:
                continue
            if isinstance(parsed, GroupStep):
                history.steps.append(parsed)
                history.processes.setdefault(parsed.member, parsed.process)
            elif isinstance(parsed, HistoryRead) and parsed.group is not None:
                history.add_read(parsed)
    history.steps.sort(key=lambda s: (s.time, s.line))
    return history


@dataclass(frozen=True, slots=True)
class Rebalance:
    """One generation of a group coming into force, and how long the group read nothing."""

    group: str
    generation: int
    started: float
    """The first revoke or loss of a partition since the previous generation's assignment
    (the assignment itself when none came before it)."""
    assigned: float
    """The generation's first assignment."""
    resumed: float | None
    """The group's first read in the generation; None: it read nothing in it."""
    fault: str | None
    """The last fault to strike before ``started`` (within :data:`FAULT_LOOKBACK_S`)."""

    @property
    def pause_s(self) -> float | None:
        return None if self.resumed is None else max(0.0, self.resumed - self.started)

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "generation": self.generation,
            "started": self.started,
            "assigned": self.assigned,
            "resumed": self.resumed,
            "pause_s": self.pause_s,
            "fault": self.fault,
        }


@dataclass(slots=True)
class GroupStats:
    """What the group checks looked at (the report's figures)."""

    groups: int = 0
    members: int = 0
    generations: int = 0
    reads: int = 0
    delivered: int = 0
    """Distinct (group, partition, offset) read."""
    commits: dict[str, int] = field(default_factory=lambda: {"ok": 0, "fail": 0, "info": 0})
    """commit_offsets lines by outcome."""
    commits_checked: int = 0
    """Acknowledged commits of a partition judged against the log."""
    rebalances: list[Rebalance] = field(default_factory=list)

    @property
    def redelivered(self) -> int:
        """Reads of a record the group had been delivered already."""
        return self.reads - self.delivered

    def to_json(self) -> dict[str, Any]:
        pauses = [r.pause_s for r in self.rebalances if r.pause_s is not None]
        return {
            "groups": self.groups,
            "members": self.members,
            "generations": self.generations,
            "reads": self.reads,
            "delivered": self.delivered,
            "redelivered": self.redelivered,
            "commits": dict(self.commits),
            "commits_checked": self.commits_checked,
            "rebalance_count": len(self.rebalances),
            "rebalance_pause_max_s": max(pauses) if pauses else None,
            "rebalance_pause_median_s": statistics.median(pauses) if pauses else None,
            "rebalances": [r.to_json() for r in self.rebalances[:REBALANCES_LISTED]],
        }


@dataclass(frozen=True, slots=True)
class _Commit:
    step: GroupStep
    topic: str
    partition: int
    offset: int


def judge_groups(
    history: GroupHistory,
    held: Mapping[_TP, Sequence[tuple[int, int]]],
    summaries: Mapping[_TP, PartitionSummary],
    *,
    compacted: Collection[str] = (),
    timeline: Sequence[NemesisEvent] = (),
) -> tuple[list[Violation], GroupStats]:
    """The group checks' violations and figures. ``held``: each partition's served ranges
    ([first, last] offsets); a partition without an entry (or a summary) is not judged."""
    stats = GroupStats()
    groups = {g for g, _, _ in history.reads} | {s.group for s in history.steps}
    stats.groups = len(groups)
    stats.members = len(history.processes)
    stats.generations = len({(s.group, s.generation) for s in history.steps})
    commits: dict[tuple[str, str, int], list[_Commit]] = defaultdict(list)
    for step in history.steps:
        if step.f != COMMIT_OFFSETS:
            continue
        stats.commits[step.type] = stats.commits.get(step.type, 0) + 1
        if step.type == "ok":
            for topic, partition, offset in step.offsets:
                commits[(step.group, topic, partition)].append(
                    _Commit(step, topic, partition, offset)
                )
    violations: list[Violation] = []
    columns = {key: _columns(reads) for key, reads in history.reads.items()}
    for reads in columns.values():
        stats.reads += len(reads.offset)
        stats.delivered += len(np.unique(reads.offset))
    for key in sorted(commits):
        group, topic, partition = key
        ranges = held.get((topic, partition))
        summary = summaries.get((topic, partition))
        if ranges is None or summary is None or topic in compacted:
            continue
        violations += _lost_commits(
            history, group, topic, partition, commits[key], columns.get(key), ranges, summary, stats
        )
    violations += _shared_partitions(history, columns, summaries)
    violations += _reads_below_commit(history, columns, commits, summaries)
    stats.rebalances = _rebalances(history, columns, timeline)
    return violations, stats


@dataclass(frozen=True, slots=True)
class _Columns:
    offset: npt.NDArray[np.int64]
    time: npt.NDArray[np.float64]
    member: npt.NDArray[np.int64]
    generation: npt.NDArray[np.int64]
    line: npt.NDArray[np.int64]
    by_holder: npt.NDArray[np.intp]
    """The reads in (generation, member, time, line) order."""
    holder: npt.NDArray[np.int64]
    """:func:`_holder` of each read, in that order."""
    first_offset: npt.NDArray[np.int64]
    """The distinct offsets read, sorted."""
    first_time: npt.NDArray[np.float64]
    """When each was first read."""
    first_line: npt.NDArray[np.int64]


_MEMBERS_BOUND = 1 << 24
"""More members than a history could name: a generation and a member number in one int64."""


def _holder(generation: int | npt.NDArray[np.int64], member: int | npt.NDArray[np.int64]) -> Any:
    return generation * _MEMBERS_BOUND + member


def _columns(reads: _Reads) -> _Columns:
    offset = np.asarray(reads.offset, dtype=np.int64)
    time = np.asarray(reads.time, dtype=np.float64)
    line = np.asarray(reads.line, dtype=np.int64)
    member = np.asarray(reads.member, dtype=np.int64)
    generation = np.asarray(reads.generation, dtype=np.int64)
    holder = _holder(generation, member)
    by_holder = np.lexsort((line, time, holder))
    order = np.lexsort((time, offset))
    first = np.ones(len(order), dtype=np.bool_)
    first[1:] = offset[order][1:] != offset[order][:-1]
    chosen = order[first]
    return _Columns(
        offset,
        time,
        member,
        generation,
        line,
        by_holder,
        holder[by_holder],
        offset[chosen],
        time[chosen],
        line[chosen],
    )


def _served_offsets(ranges: Sequence[tuple[int, int]]) -> npt.NDArray[np.int64]:
    if not ranges:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([np.arange(f, t + 1, dtype=np.int64) for f, t in ranges])


def _member(history: GroupHistory, member: str) -> str:
    process = history.processes.get(member)
    return f"member {member!r}" + ("" if process is None else f" (process {process})")


def _lost_commits(
    history: GroupHistory,
    group: str,
    topic: str,
    partition: int,
    commits: list[_Commit],
    reads: _Columns | None,
    ranges: Sequence[tuple[int, int]],
    summary: PartitionSummary,
    stats: GroupStats,
) -> list[Violation]:
    """Each acknowledged commit against the served offsets below it: the first commit to
    skip each undelivered offset is reported (later commits skip it too)."""
    served = _served_offsets(ranges)
    if reads is None:
        first_time = np.full(len(served), np.inf)
    else:
        at = np.searchsorted(reads.first_offset, served)
        inside = at < len(reads.first_offset)
        clipped = np.where(inside, at, 0)
        found = inside & (reads.first_offset[clipped] == served) if len(served) else inside
        first_time = np.where(found, reads.first_time[clipped], np.inf)
    delivered_by = np.maximum.accumulate(first_time) if len(served) else first_time
    found_violations = []
    reported: set[int] = set()
    for commit in sorted(commits, key=lambda c: (c.step.time, c.step.line)):
        below = int(np.searchsorted(served, commit.offset))
        stats.commits_checked += 1
        if below == 0 or delivered_by[below - 1] <= commit.step.time:
            continue
        undelivered = np.flatnonzero(first_time[:below] > commit.step.time)
        first = int(served[undelivered[0]])
        if first in reported:
            continue
        reported.add(first)
        last = int(served[undelivered[-1]])
        never = not np.isfinite(first_time[undelivered[0]])
        found_violations.append(
            Violation(
                "lost_commit",
                topic,
                partition,
                first,
                last,
                len(undelivered),
                tuple(r.broker for r in summary.replicas),
                f"group {group!r} committed offset {commit.offset} of {topic}-{partition} "
                f"(history line {commit.step.line}, {_member(history, commit.step.member)}, "
                f"generation {commit.step.generation}), acknowledged, while "
                f"{len(undelivered)} record(s) below it that the log serves had been delivered "
                f"to no member: offsets {first}..{last}; offset {first} was "
                + ("never read by the group." if never else "first read only after the commit."),
                commit.step.time,
            )
        )
    return found_violations


def _shared_partitions(
    history: GroupHistory,
    columns: Mapping[tuple[str, str, int], _Columns],
    summaries: Mapping[_TP, PartitionSummary],
) -> list[Violation]:
    """Partitions held by two members in one generation: by assignment or by reads."""
    holders: dict[tuple[str, int, str, int], dict[str, str]] = defaultdict(dict)
    for step in history.steps:
        if step.f != "assigned":
            continue
        for topic, partition in step.partitions:
            holders[(step.group, step.generation, topic, partition)].setdefault(
                step.member, f"assigned it at history line {step.line}"
            )
    first_read: dict[tuple[str, int, str, int], tuple[int, float]] = {}
    names = {number: member for member, number in history.members.items()}
    for (group, topic, partition), reads in columns.items():
        # each (generation, member)'s first read, in (generation, member, time) order
        starts = np.flatnonzero(np.r_[True, reads.holder[1:] != reads.holder[:-1]])
        for i in reads.by_holder[starts]:
            key = (group, int(reads.generation[i]), topic, partition)
            holders[key].setdefault(
                names[int(reads.member[i])], f"read it at history line {int(reads.line[i])}"
            )
            seen = first_read.get(key)
            if seen is None or reads.offset[i] < seen[0]:
                first_read[key] = (int(reads.offset[i]), float(reads.time[i]))
    found = []
    for (group, generation, topic, partition), members in sorted(holders.items()):
        if len(members) < 2:
            continue
        offset, at = first_read.get((group, generation, topic, partition), (0, None))
        summary = summaries.get((topic, partition))
        said = "; ".join(f"{_member(history, m)} {how}" for m, how in sorted(members.items()))
        found.append(
            Violation(
                "shared_partition",
                topic,
                partition,
                offset,
                offset,
                len(members),
                () if summary is None else tuple(r.broker for r in summary.replicas),
                f"{topic}-{partition} was held by {len(members)} members of group {group!r} "
                f"in generation {generation}: {said}.",
                at,
            )
        )
    return found


def _reads_below_commit(
    history: GroupHistory,
    columns: Mapping[tuple[str, str, int], _Columns],
    commits: Mapping[tuple[str, str, int], list[_Commit]],
    summaries: Mapping[_TP, PartitionSummary],
) -> list[Violation]:
    """Each assignment's first read of each partition against the group's last commit of an
    earlier generation."""
    found = []
    for step in history.steps:
        if step.f != "assigned":
            continue
        for topic, partition in step.partitions:
            key = (step.group, topic, partition)
            reads = columns.get(key)
            summary = summaries.get((topic, partition))
            if reads is None or summary is None:
                continue
            holder = _holder(step.generation, history.member_number(step.member))
            lo = int(np.searchsorted(reads.holder, holder, side="left"))
            hi = int(np.searchsorted(reads.holder, holder, side="right"))
            times = reads.time[reads.by_holder[lo:hi]]
            after = lo + int(np.searchsorted(times, step.time, side="left"))
            if after >= hi:
                continue
            first = int(reads.by_holder[after])
            earlier = [c for c in commits.get(key, []) if c.step.generation < step.generation]
            if not earlier:
                continue
            last = max(earlier, key=lambda c: (c.step.generation, c.step.time, c.step.line))
            offset = int(reads.offset[first])
            if offset >= last.offset or last.offset > summary.committed_end:
                continue
            found.append(
                Violation(
                    "read_below_commit",
                    topic,
                    partition,
                    offset,
                    last.offset - 1,
                    last.offset - offset,
                    tuple(r.broker for r in summary.replicas),
                    f"{_member(history, step.member)} of group {step.group!r}, assigned "
                    f"{topic}-{partition} in generation {step.generation} (history line "
                    f"{step.line}), first read offset {offset} (line {int(reads.line[first])}), "
                    f"below the group's last acknowledged commit, offset {last.offset} "
                    f"(line {last.step.line}, generation {last.step.generation}, "
                    f"{_member(history, last.step.member)}).",
                    float(reads.time[first]),
                )
            )
    return found


_NOT_FAULTS = frozenset(
    {"healed", "start", "resume", "heal", "isr-whole", "isr-not-whole", "run-start", "run-end"}
)
"""Timeline lines that end a fault or mark the run, in timelines without ``strike``."""


def _strikes(timeline: Sequence[NemesisEvent]) -> list[NemesisEvent]:
    """The timeline's faults as they began: its ``strike`` lines, or, in a timeline
    without them (an older run's, a scenario's), every line that does not end a fault."""
    events = sorted(timeline, key=lambda e: e.time)
    strikes = [e for e in events if e.f == "strike"]
    return strikes or [e for e in events if e.f not in _NOT_FAULTS]


def _rebalances(
    history: GroupHistory,
    columns: Mapping[tuple[str, str, int], _Columns],
    timeline: Sequence[NemesisEvent],
) -> list[Rebalance]:
    """Each group's generations in order, with the pause in its reads around each."""
    times: dict[tuple[str, int], list[float]] = defaultdict(list)
    for (group, _, _), reads in columns.items():
        for generation in np.unique(reads.generation):
            chosen = reads.generation == generation
            times[(group, int(generation))].append(float(reads.time[chosen].min()))
    events = _strikes(timeline)
    event_times = [e.time for e in events]
    found = []
    by_group: dict[str, list[GroupStep]] = defaultdict(list)
    for step in history.steps:
        by_group[step.group].append(step)
    for group, steps in sorted(by_group.items()):
        seen: set[int] = set()
        losing: float | None = None
        for step in steps:  # in time order
            if step.f in ("revoked", "lost") and step.partitions and losing is None:
                losing = step.time
            if step.f != "assigned" or step.generation in seen:
                continue
            seen.add(step.generation)
            started = step.time if losing is None else losing
            losing = None
            resumed = [t for t in times.get((group, step.generation), []) if t >= started]
            fault = None
            k = int(np.searchsorted(event_times, started, side="right")) - 1
            if k >= 0 and started - events[k].time <= FAULT_LOOKBACK_S:
                e = events[k]
                fault = f"{e.nemesis or e.f} {e.target}".strip() + f" at {e.time:.3f}"
            found.append(
                Rebalance(
                    group, step.generation, started, step.time,
                    min(resumed) if resumed else None, fault,
                )
            )  # fmt: skip
    return found
