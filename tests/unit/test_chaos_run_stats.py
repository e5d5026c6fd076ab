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
    assert "1 faults, 250 acked in 30 s" in stats.summary()
