"""bench/scale.py's reading of a new controller's state load from its log lines."""

from __future__ import annotations

import pytest

from bench.scale import controller_load_s, step_deadline_s

_ELECTED = (
    "2026-11-28 10:20:01,100 INFO controller.kafka_controller controller event=elected "
    "broker=1 epoch=2 reason=x"
)
_DONE = (
    "2026-11-28 10:20:03,350 INFO controller.kafka_controller controller event=failover_done "
    "broker=1 epoch=2 live_brokers=[1,2] topics=1 partitions=1000"
)


def test_the_load_is_from_the_last_election_to_the_failover_done_after_it() -> None:
    earlier = _ELECTED.replace("10:20:01,100", "10:10:00,000").replace("epoch=2", "epoch=1")
    found = controller_load_s("\n".join([earlier, "noise", _ELECTED, "other line", _DONE]))
    assert found is not None
    seconds, line = found
    assert seconds == pytest.approx(2.25)
    assert line.startswith("failover_done broker=1 epoch=2")


def test_no_done_line_yet_is_none() -> None:
    assert controller_load_s(_ELECTED) is None
    assert controller_load_s(_DONE) is None  # a done line without its election


def test_step_deadlines_grow_with_the_size() -> None:
    assert step_deadline_s(1_000) < step_deadline_s(10_000) < step_deadline_s(30_000)
