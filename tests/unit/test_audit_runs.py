"""Runs of violation items (chaos.audit.runs): merged where one kind, partition, brokers and key
cover touching offsets, and merged the same whether all at once or chunk by chunk."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.audit.runs import Run, item, merge


def _key(run: Run) -> tuple[Any, ...]:
    return (
        run.kind, run.pid, run.brokers, run.group()[3], run.start, run.end, run.n,
        run.first, run.last, run.t_min, run.t_max,
    )  # fmt: skip


items = st.lists(
    st.builds(
        lambda kind, pid, broker, what, start, length, t: item(
            kind,
            pid,
            (broker,),
            {"what": what},
            start,
            start + length,
            length + 1,
            {"line": start * 10 + length},
            t,
        ),
        st.sampled_from(["gap", "lost_ack"]),
        st.integers(0, 1),
        st.integers(1, 2),
        st.sampled_from(["a", "b"]),
        st.integers(0, 60),
        st.integers(0, 3),
        st.one_of(st.none(), st.floats(0, 100)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(items, st.lists(st.integers(0, 40), max_size=4))
def test_merging_chunk_by_chunk_equals_merging_all_at_once(
    found: list[Run], cuts: list[int]
) -> None:
    bounds = sorted({0, len(found), *(c for c in cuts if c < len(found))})
    chunks = [merge(found[a:b]) for a, b in itertools.pairwise(bounds)]
    assert sorted(map(_key, merge([r for c in chunks for r in c]))) == sorted(
        map(_key, merge(found))
    )


def test_touching_offsets_merge_and_a_hole_or_another_key_splits() -> None:
    runs = merge(
        [
            item("gap", 0, (1,), {"what": "a"}, 5, 5, 1, {"i": 1}, 2.0),
            item("gap", 0, (1,), {"what": "a"}, 6, 8, 3, {"i": 2}, 1.0),
            item("gap", 0, (1,), {"what": "a"}, 10, 10, 1, {"i": 3}),
            item("gap", 0, (1,), {"what": "b"}, 9, 9, 1, {"i": 4}),
            item("gap", 0, (2,), {"what": "a"}, 9, 9, 1, {"i": 5}),
        ]
    )
    spans = sorted((r.brokers, r.key["what"], r.start, r.end, r.n) for r in runs)
    assert spans == [
        ((1,), "a", 5, 8, 4),
        ((1,), "a", 10, 10, 1),
        ((1,), "b", 9, 9, 1),
        ((2,), "a", 9, 9, 1),
    ]
    first = next(r for r in runs if r.start == 5)
    assert (first.first, first.last, first.t_min, first.t_max) == ({"i": 1}, {"i": 2}, 1.0, 2.0)
