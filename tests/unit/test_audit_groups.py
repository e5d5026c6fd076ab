"""The consumer group checks (chaos.audit.groups) on planted histories: each kind found
where it is planted, a clean history silent, the figures counted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chaos.audit.groups import GroupHistory, judge_groups, read_group_history
from chaos.audit.history import GroupStep, HistoryError, HistoryRead, parse_history_line
from chaos.audit.model import PartitionSummary, ReplicaSummary, Violation

G = "chaos-kafka-readers"
TP = ("t", 0)


def _summary(committed_end: int = 100) -> PartitionSummary:
    replica = ReplicaSummary(1, 0, committed_end, committed_end, 1, committed_end, [], [])
    return PartitionSummary("t", 0, [replica], committed_end, 0)


class _History:
    """Writes a planted history, line by line, with a clock that moves on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[dict[str, Any]] = []
        self.now = 1000.0

    def _at(self, **fields: Any) -> None:
        self.now += 0.01
        self.lines.append({"time": round(self.now, 3), **fields})

    def assigned(self, process: int, member: str, generation: int, *partitions: int) -> None:
        self._at(
            process=process, type="ok", f="assigned", group=G, member=member,
            generation=generation, partitions=[["t", p] for p in partitions],
        )  # fmt: skip

    def revoked(self, process: int, member: str, generation: int, *partitions: int) -> None:
        self._at(
            process=process, type="ok", f="revoked", group=G, member=member,
            generation=generation, partitions=[["t", p] for p in partitions],
        )  # fmt: skip

    def read(self, process: int, member: str, generation: int, *offsets: int) -> None:
        for o in offsets:
            self._at(
                process=process, type="read", topic="t", partition=0, offset=o,
                value=f"v{o}", session=generation, group=G, member=member,
                generation=generation,
            )  # fmt: skip

    def commit(
        self, process: int, member: str, generation: int, offset: int, outcome: str = "ok"
    ) -> None:
        self._at(
            process=process, type=outcome, f="commit_offsets", group=G, member=member,
            generation=generation, offsets=[["t", 0, offset]],
        )  # fmt: skip

    def nemesis(self, f: str, target: int) -> None:
        self._at(process="nemesis", type="info", f=f, target=target)

    def judge(
        self, committed_end: int = 100, held: list[tuple[int, int]] | None = None, **kw: Any
    ) -> tuple[list[Violation], dict[str, Any]]:
        self.path.write_text("".join(json.dumps(line) + "\n" for line in self.lines))
        history = read_group_history(self.path)
        ranges = [(0, committed_end - 1)] if held is None else held
        violations, stats = judge_groups(history, {TP: ranges}, {TP: _summary(committed_end)}, **kw)
        return violations, stats.to_json()


@pytest.fixture
def history(tmp_path: Path) -> _History:
    return _History(tmp_path / "history.jsonl")


def _handover(h: _History, *, second_starts_at: int, commit: int = 10) -> None:
    """Member a reads 0..9 and commits ``commit``; b takes over in generation 2."""
    h.assigned(1, "a", 1, 0)
    h.read(1, "a", 1, *range(10))
    h.commit(1, "a", 1, commit)
    h.revoked(1, "a", 1, 0)
    h.assigned(2, "b", 2, 0)
    h.read(2, "b", 2, *range(second_starts_at, 20))
    h.commit(2, "b", 2, 20)


def test_a_clean_handover_is_silent_and_counted(history: _History) -> None:
    _handover(history, second_starts_at=10)
    violations, stats = history.judge(committed_end=20)
    assert violations == []
    assert stats["reads"] == 20
    assert stats["delivered"] == 20
    assert stats["redelivered"] == 0
    assert stats["commits"] == {"ok": 2, "fail": 0, "info": 0}
    assert stats["commits_checked"] == 2
    assert stats["generations"] == 2
    assert stats["members"] == 2


def test_redelivery_after_an_uncommitted_handover_is_counted_not_judged(
    history: _History,
) -> None:
    """a read 0..9 but committed only 5 before it lost the partition: b reads 5..9 again,
    as at-least-once allows."""
    _handover(history, second_starts_at=5, commit=5)
    violations, stats = history.judge(committed_end=20)
    assert violations == []
    assert stats["redelivered"] == 5


def test_lost_commit_a_commit_past_records_no_member_was_delivered(history: _History) -> None:
    history.assigned(1, "a", 1, 0)
    history.read(1, "a", 1, *range(5), *range(8, 10))  # 5, 6, 7 never delivered
    history.commit(1, "a", 1, 10)
    history.commit(1, "a", 1, 10)  # the same skip again: reported once
    violations, _ = history.judge(committed_end=10)
    assert [v.kind for v in violations] == ["lost_commit"]
    v = violations[0]
    assert (v.offset, v.last_offset, v.count) == (5, 7, 3)
    assert "committed offset 10" in v.detail
    assert "never read by the group" in v.detail
    assert "process 1" in v.detail


def test_lost_commit_when_the_records_are_read_only_after_the_commit(history: _History) -> None:
    history.assigned(1, "a", 1, 0)
    history.read(1, "a", 1, *range(5))
    history.commit(1, "a", 1, 8)
    history.read(1, "a", 1, 5, 6, 7)
    violations, _ = history.judge(committed_end=8)
    assert [(v.kind, v.offset, v.last_offset) for v in violations] == [("lost_commit", 5, 7)]
    assert "first read only after the commit" in violations[0].detail


def test_offsets_the_log_does_not_serve_are_no_lost_commit(history: _History) -> None:
    """Markers, aborted transactions, offsets beyond the committed end: not owed."""
    history.assigned(1, "a", 1, 0)
    history.read(1, "a", 1, *range(5), *range(8, 10))
    history.commit(1, "a", 1, 10)
    history.commit(1, "a", 1, 30)  # beyond what the log holds: a truncated log, not judged
    violations, _ = history.judge(committed_end=10, held=[(0, 4), (8, 9)])
    assert violations == []


def test_compacted_topics_are_not_judged_for_lost_commits(history: _History) -> None:
    history.assigned(1, "a", 1, 0)
    history.read(1, "a", 1, 0, 9)
    history.commit(1, "a", 1, 10)
    violations, _ = history.judge(committed_end=10, compacted={"t"})
    assert violations == []


def test_failed_and_unknown_commits_are_not_judged(history: _History) -> None:
    history.assigned(1, "a", 1, 0)
    history.read(1, "a", 1, 0)
    history.commit(1, "a", 1, 10, outcome="fail")
    history.commit(1, "a", 1, 10, outcome="info")
    violations, stats = history.judge(committed_end=10)
    assert violations == []
    assert stats["commits"] == {"ok": 0, "fail": 1, "info": 1}


def test_shared_partition_two_members_assigned_it_in_one_generation(history: _History) -> None:
    history.assigned(1, "a", 3, 0)
    history.assigned(2, "b", 3, 0)
    history.read(1, "a", 3, 0, 1)
    violations, _ = history.judge(committed_end=10)
    assert [v.kind for v in violations] == ["shared_partition"]
    assert violations[0].count == 2
    assert "generation 3" in violations[0].detail
    assert "'a'" in violations[0].detail
    assert "'b'" in violations[0].detail


def test_shared_partition_found_by_reads_alone(history: _History) -> None:
    history.assigned(1, "a", 3, 0)
    history.read(1, "a", 3, 0, 1)
    history.read(2, "b", 3, 2)  # b read it in generation 3 without being assigned it
    violations, _ = history.judge(committed_end=10)
    assert [(v.kind, v.offset) for v in violations] == [("shared_partition", 0)]
    assert "read it at history line" in violations[0].detail


def test_one_member_per_generation_is_no_shared_partition(history: _History) -> None:
    """A zombie of generation 1 reading on while b holds the partition in generation 2 is
    what Kafka allows: fetches are not fenced, only commits."""
    history.assigned(1, "a", 1, 0)
    history.read(1, "a", 1, 0, 1)
    history.assigned(2, "b", 2, 0)
    history.read(1, "a", 1, 2)
    history.read(2, "b", 2, 0, 1, 2)
    violations, _ = history.judge(committed_end=10)
    assert [v.kind for v in violations] == []


def test_read_below_commit_a_new_owner_started_below_the_last_commit(history: _History) -> None:
    _handover(history, second_starts_at=3, commit=10)
    violations, _ = history.judge(committed_end=20)
    assert [(v.kind, v.offset, v.last_offset, v.count) for v in violations] == [
        ("read_below_commit", 3, 9, 7)
    ]
    assert "generation 2" in violations[0].detail
    assert "offset 10" in violations[0].detail


def test_the_last_commit_counts_not_the_largest(history: _History) -> None:
    """Generation 2 reset to 0 and committed 4 (a truncated log made it): generation 3
    starting at 4 is right."""
    history.assigned(1, "a", 1, 0)
    history.read(1, "a", 1, *range(10))
    history.commit(1, "a", 1, 10)
    history.assigned(2, "b", 2, 0)
    history.read(2, "b", 2, *range(4))
    history.commit(2, "b", 2, 4)
    history.assigned(1, "a", 3, 0)
    history.read(1, "a", 3, *range(4, 12))
    violations, _ = history.judge(committed_end=20)
    assert [v.kind for v in violations if v.kind == "read_below_commit"] == ["read_below_commit"]
    assert all(v.detail.count("generation 2") for v in violations)


def test_a_commit_beyond_the_log_excuses_the_reset(history: _History) -> None:
    history.assigned(1, "a", 1, 0)
    history.read(1, "a", 1, *range(10))
    history.commit(1, "a", 1, 10)
    history.assigned(2, "b", 2, 0)
    history.read(2, "b", 2, *range(6))
    violations, _ = history.judge(committed_end=6)  # the log was truncated to 6
    assert violations == []


def test_rebalance_pauses_with_the_fault_before_them(history: _History) -> None:
    history.assigned(1, "a", 1, 0)
    history.read(1, "a", 1, 0, 1)
    history.nemesis("kill", 2)
    history.revoked(1, "a", 1, 0)
    history.now += 5.0
    history.assigned(2, "b", 2, 0)
    history.now += 1.0
    history.read(2, "b", 2, 2, 3)
    from chaos.audit.history import parse_timeline_line

    events = [
        e
        for n, line in enumerate(history.lines, 1)
        if (e := parse_timeline_line(n, json.dumps(line))) is not None
    ]
    _, stats = history.judge(committed_end=10, timeline=events)
    assert stats["rebalance_count"] == 2
    second = stats["rebalances"][1]
    assert second["generation"] == 2
    assert second["pause_s"] == pytest.approx(6.02, abs=0.01)
    assert second["fault"].startswith("kill 2 at ")
    assert stats["rebalance_pause_max_s"] == pytest.approx(6.02, abs=0.01)


def test_group_lines_parse_and_bad_ones_are_refused() -> None:
    step = parse_history_line(
        1,
        '{"time": 1.5, "process": 7, "type": "ok", "f": "assigned", "group": "g", '
        '"member": "m", "generation": 4, "partitions": [["t", 0], ["t", 2]]}',
    )
    assert step == GroupStep(1, 1.5, 7, "ok", "assigned", "g", "m", 4, (("t", 0), ("t", 2)))
    read = parse_history_line(
        2,
        '{"time": 2.0, "process": 7, "type": "read", "topic": "t", "partition": 0, '
        '"offset": 3, "value": "v", "group": "g", "member": "m", "generation": 4}',
    )
    assert isinstance(read, HistoryRead)
    assert (read.group, read.member, read.generation) == ("g", "m", 4)
    bad = [
        ('"f": "assigned", "group": "g", "member": "m", "generation": 1', "partitions"),
        ('"f": "commit_offsets", "group": "g", "member": "m", "generation": 1', "offsets"),
        ('"f": "assigned", "member": "m", "generation": 1, "partitions": []', "group"),
        ('"f": "lost", "group": "g", "member": "m", "partitions": []', "generation"),
        (
            '"f": "revoked", "group": "g", "member": "m", "generation": 1, "partitions": [[1]]',
            "entries",
        ),
    ]
    for fields, said in bad:
        with pytest.raises(HistoryError, match=said):
            parse_history_line(3, '{"time": 1, "process": 1, "type": "ok", ' + fields + "}")
    with pytest.raises(HistoryError, match="member"):
        parse_history_line(
            4,
            '{"time": 2.0, "process": 7, "type": "read", "topic": "t", "partition": 0, '
            '"offset": 3, "value": "v", "group": "g", "generation": 4}',
        )


def test_an_empty_history_has_no_groups(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text('{"time": 1, "process": 1, "type": "ok", "topic": "t", "partition": 0, '
                    '"value": "v", "offset": 0}\n')  # fmt: skip
    assert not read_group_history(path)
    assert not GroupHistory()
