"""The chaos schedule: seeded, replayable, one fault at a time, pauses past the session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.nemesis import NEMESES
from chaos.schedule import Schedule, ScheduleError, make_schedule

LOCAL = ["kill", "bounce", "pause", "leader", "controller", "zk-expire", "torn-write"]


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    one = make_schedule(LOCAL, 300, 10, seed=7, session_timeout_s=3)
    assert one == make_schedule(LOCAL, 300, 10, seed=7, session_timeout_s=3)
    assert one != make_schedule(LOCAL, 300, 10, seed=8, session_timeout_s=3)
    assert len(one.faults) > 5


def test_faults_come_one_at_a_time_and_end_before_the_run_does() -> None:
    schedule = make_schedule(LOCAL, 120, 5, seed=1, session_timeout_s=3)
    for before, after in zip(schedule.faults, schedule.faults[1:], strict=False):
        assert before.at_s + before.hold_s < after.at_s
    assert all(f.at_s + f.hold_s <= 120 for f in schedule.faults)
    assert all(0 <= f.pick < 1 for f in schedule.faults)


def test_a_pause_outlasts_the_zookeeper_session_timeout() -> None:
    schedule = make_schedule(["pause"], 200, 2, seed=3, session_timeout_s=6)
    assert schedule.faults
    assert all(f.hold_s > 6 for f in schedule.faults)


def test_a_schedule_replays_from_its_file(tmp_path: Path) -> None:
    schedule = make_schedule(LOCAL, 60, 8, seed=11, session_timeout_s=3)
    path = tmp_path / "schedule.json"
    path.write_text(schedule.to_json())
    assert Schedule.read(path) == schedule


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "not JSON"),
        ('{"version": 9, "faults": []}', "version"),
        ('{"version": 1, "seed": 1, "duration_s": 5, "interval_s": 1}', "faults"),
        (
            json.dumps(
                {
                    "version": 1,
                    "seed": 1,
                    "duration_s": 5,
                    "interval_s": 1,
                    "faults": [{"at_s": 1, "nemesis": "meteor", "hold_s": 1, "pick": 0.5}],
                }
            ),
            "unknown nemesis 'meteor'",
        ),
        (
            json.dumps(
                {
                    "version": 1,
                    "seed": 1,
                    "duration_s": 5,
                    "interval_s": 1,
                    "faults": [{"at_s": 1, "nemesis": "kill", "hold_s": 1, "pick": 1.5}],
                }
            ),
            "out of range",
        ),
    ],
)
def test_a_schedule_file_that_cannot_be_replayed_names_what_is_wrong(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "schedule.json"
    path.write_text(content)
    with pytest.raises(ScheduleError, match=problem):
        Schedule.read(path)


def test_every_nemesis_has_a_name_and_a_hold() -> None:
    for name, nemesis in NEMESES.items():
        assert nemesis.name == name
        assert nemesis.hold_s(10, 3) > 0
