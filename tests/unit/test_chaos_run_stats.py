"""A run's availability figures, from its history and timeline files."""

from __future__ import annotations

import json
from pathlib import Path

from chaos.run_stats import run_stats


def _write(path: Path, lines: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_acks_per_second_the_worst_window_the_silent_seconds_and_heals(tmp_path: Path) -> None:
    t0 = 1000.0
    timeline = [
        {"time": t0, "process": "nemesis", "type": "info", "f": "run-start", "target": None},
        {"time": t0 + 5, "process": "nemesis", "type": "info", "f": "kill", "target": 1,
         "nemesis": "torn-write"},
        {"time": t0 + 5.1, "process": "nemesis", "type": "info", "f": "torn-write",
         "target": 1, "nemesis": "torn-write"},
        {"time": t0 + 5.2, "process": "nemesis", "type": "info", "f": "fault", "target": 1,
         "nemesis": "torn-write"},
        {"time": t0 + 9, "process": "nemesis", "type": "info", "f": "start", "target": 1},
        {"time": t0 + 12, "process": "nemesis", "type": "info", "f": "isr-whole",
         "target": None, "after_heal_s": 3.0},
        {"time": t0 + 30, "process": "nemesis", "type": "info", "f": "run-end", "target": None},
    ]  # fmt: skip
    _write(tmp_path / "timeline.jsonl", timeline)
    # 10 acks a second, except seconds 10..14 (none) and one ack before the run started.
    acks = [t0 - 1] + [t0 + s + i / 10 for s in range(30) if not 10 <= s < 15 for i in range(10)]
    _write(
        tmp_path / "history.jsonl",
        [
            {
                "time": t,
                "process": 0,
                "type": "ok",
                "topic": "t",
                "partition": 0,
                "value": "v",
                "offset": 0,
            }
            for t in acks
        ]
        + [
            {
                "time": t0 + 2,
                "process": 0,
                "type": "info",
                "topic": "t",
                "partition": 0,
                "value": "w",
                "offset": None,
            }
        ],
    )
    stats = run_stats(tmp_path)
    assert stats.duration_s == 30
    assert stats.acked == 250
    assert stats.acked_total == 251
    assert stats.faults == {"torn-write": 1}
    assert stats.seconds_without_ack == 5
    assert stats.worst_window_acks_per_s == 5.0  # seconds 5..14 or 10..19: 50 acks
    assert stats.heal_to_isr_s == [3.0]
    assert stats.violations is None
    assert "1 fault done; 251 acknowledged in all, 250 of them in the 30 s fault window" in (
        stats.summary()
    )


def _event(t: float, f: str, target: object = None, **fields: object) -> dict[str, object]:
    return {"time": t, "process": "nemesis", "type": "info", "f": f, "target": target, **fields}


def _acks_at(times: list[float]) -> list[dict[str, object]]:
    return [
        {"time": t, "process": p, "type": "ok", "topic": "t", "partition": 0, "value": f"{p}-{t}",
         "offset": 0}
        for p, t in ((int(t * 10) % 3, t) for t in times)
    ]  # fmt: skip


def test_the_longest_ack_gap_around_each_fault_and_the_faults_skipped(tmp_path: Path) -> None:
    """Three producers acknowledged every 0.1 s in turn (the gap is over all producers),
    except for 5.2 s after a bounce's heal and 0.9 s during a kill; a cascade was skipped."""
    t0 = 1000.0
    timeline = [
        _event(t0, "run-start"),
        _event(t0 + 10, "strike", nemesis="kill", hold_s=2.0),
        _event(t0 + 10.2, "kill", 1, nemesis="kill"),
        _event(t0 + 10.2, "fault", 1, nemesis="kill", hold_s=2.0),
        _event(t0 + 12.5, "start", 1),
        _event(t0 + 12.5, "healed", 1, nemesis="kill"),
        _event(t0 + 13.0, "isr-whole", after_heal_s=0.5),
        _event(t0 + 20, "strike", nemesis="cascade", hold_s=3.0),
        _event(
            t0 + 20.1,
            "skipped",
            nemesis="cascade",
            reason="no partition whose ISR is whole",
        ),
        _event(t0 + 34.1, "strike", nemesis="bounce", hold_s=2.0),
        _event(t0 + 34.5, "stop", 2, nemesis="bounce"),
        _event(t0 + 34.5, "fault", 2, nemesis="bounce", hold_s=2.0),
        _event(t0 + 36.5, "start", 2),
        _event(t0 + 36.5, "healed", 2, nemesis="bounce"),
        _event(t0 + 38.0, "isr-whole", after_heal_s=1.5),
        _event(t0 + 50, "run-end"),
    ]
    _write(tmp_path / "timeline.jsonl", timeline)
    times = [
        round(t0 + i / 10, 3)
        for i in range(0, 600)
        if not (105 <= i < 113) and not (372 <= i < 423)  # 10.4..11.2, 37.1..42.2 silent
    ]
    _write(tmp_path / "history.jsonl", _acks_at(times))

    stats = run_stats(tmp_path)
    assert stats.faults == {"kill": 1, "bounce": 1}
    assert stats.skipped == [("cascade", "no partition whose ISR is whole")]
    assert [(g.nemesis, g.target, g.struck_s, g.healed_s) for g in stats.fault_gaps] == [
        ("kill", 1, 10.0, 12.5),
        ("bounce", 2, 34.1, 36.5),
    ]
    kill, bounce = stats.fault_gaps
    assert (kill.gap_s, kill.gap_start_s, kill.when) == (0.9, 10.4, "during")
    assert (bounce.gap_s, bounce.gap_start_s, bounce.when) == (5.2, 37.1, "after")
    assert str(bounce) == "longest ack gap 5.20 s from 37.1 s (after bounce 2 at 34.1 s)"
    lines = stats.summary().splitlines()
    assert lines[0].startswith(
        "2 faults done, 1 skipped: cascade (no partition whose ISR is whole); "
        f"{len(times):,} acknowledged in all"
    )
    assert lines[1:] == [
        "  longest ack gap 0.90 s from 10.4 s (during kill 1 at 10.0 s)",
        "  longest ack gap 5.20 s from 37.1 s (after bounce 2 at 34.1 s)",
    ]


def test_a_skip_in_a_timeline_of_an_older_run_is_read_too(tmp_path: Path) -> None:
    _write(
        tmp_path / "timeline.jsonl",
        [
            {
                "time": 1.0,
                "process": "nemesis",
                "type": "fail",
                "f": "cascade",
                "target": None,
                "error": "no active controller",
            }
        ],
    )
    stats = run_stats(tmp_path)
    assert stats.skipped == [("cascade", "no active controller")]
    assert stats.faults_line() == "0 faults done, 1 skipped: cascade (no active controller)"
