"""The steps of a consumer's reads (chaos.audit.polls): what goes backwards, repeats or jumps
within one poll stream, a (partition, process, session), in the order the lines were written."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos.audit.polls import (
    WHAT,
    PollRead,
    PollStep,
    poll_steps,
    sort_key,
    step_kind,
    steps,
    stream_of,
)


def _reads(
    offsets: list[int], *, pid: int = 0, process: int = 1, session: int = 0, t0: float = 0.0
) -> list[PollRead]:
    return [
        PollRead(pid, process, session, t0 + i, 100 + i, offset) for i, offset in enumerate(offsets)
    ]


def _steps(reads: list[PollRead]) -> list[tuple[str, int, int]]:
    return [(s.what, s.previous, s.offset) for s in poll_steps(sorted(reads, key=sort_key))]


@pytest.mark.parametrize(
    ("previous", "offset", "what"),
    [(4, 5, None), (4, 3, "backwards"), (4, 0, "backwards"), (4, 4, "repeated"), (4, 6, "skip")],
)
def test_step_kind_names_every_step_but_the_next_offset(
    previous: int, offset: int, what: str | None
) -> None:
    assert step_kind(previous, offset) == what


def test_reads_one_by_one_take_no_step() -> None:
    assert _steps(_reads(list(range(10)))) == []


def test_a_backwards_read_and_a_repeated_read_are_steps_with_their_lines() -> None:
    reads = _reads([0, 1, 2, 3, 1, 2, 2, 3])
    assert _steps(reads) == [("backwards", 3, 1), ("repeated", 2, 2)]
    first = next(iter(poll_steps(reads)))
    assert first == PollStep(0, 1, 0, "backwards", 3, 1, 103, 104, 4.0)


def test_a_jump_forward_is_a_skip_step() -> None:
    assert _steps(_reads([0, 1, 5, 6])) == [("skip", 1, 5)]


def test_a_session_bump_starts_a_new_stream() -> None:
    reads = _reads([0, 1, 2, 3]) + _reads([1, 2, 3], session=1, t0=10)
    reads += _reads([9, 10], session=2, t0=20)
    assert _steps(reads) == []


def test_processes_and_partitions_are_streams_of_their_own() -> None:
    # Interleaved in time: each stream is judged alone.
    reads = (
        _reads([0, 1, 2], process=1)
        + _reads([0, 1, 2], process=2, t0=0.5)
        + _reads([5, 6], pid=3, process=1, t0=0.2)
    )
    assert _steps(reads) == []
    assert {stream_of(r) for r in reads} == {(0, 1, 0), (0, 2, 0), (3, 1, 0)}


def test_reads_are_ordered_by_time_then_line_number() -> None:
    # Lines written in one instant keep their order in the file; a later time comes after
    # an earlier line number.
    reads = [
        PollRead(0, 1, 0, 5.0, 20, 2),
        PollRead(0, 1, 0, 5.0, 10, 1),
        PollRead(0, 1, 0, 4.0, 30, 0),
    ]
    assert [r.offset for r in sorted(reads, key=sort_key)] == [0, 1, 2]
    assert _steps(reads) == []


def test_reads_out_of_order_are_refused() -> None:
    reads = _reads([0, 1])
    with pytest.raises(ValueError, match="reads out of order"):
        list(poll_steps(reversed(reads)))


def test_rows_with_the_same_fields_as_tuples_are_accepted() -> None:
    rows = [tuple(r) for r in _reads([3, 2])]
    assert [s.what for s in poll_steps(rows)] == ["backwards"]


@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 1), st.integers(0, 3), st.integers(0, 9)),
        max_size=40,
    )
)
def test_steps_in_columns_are_the_walks_steps(rows: list[tuple[int, int, int, int]]) -> None:
    reads = [
        PollRead(0, process, session, float(t), line, offset)
        for line, (process, session, t, offset) in enumerate(rows)
    ]
    walked = [(s.line, s.what) for s in poll_steps(sorted(reads, key=sort_key))]
    columns = [
        np.array([getattr(r, f) for r in reads])
        for f in ("process", "session", "time", "line", "offset")
    ]
    before, after, kind = steps(*columns)
    found = [
        (int(columns[3][a]), WHAT[k]) for a, k in zip(after.tolist(), kind.tolist(), strict=True)
    ]
    assert found == walked
    assert [int(columns[3][b]) for b in before.tolist()] == [
        s.previous_line for s in poll_steps(sorted(reads, key=sort_key))
    ]
