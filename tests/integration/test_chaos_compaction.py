"""``minibroker chaos run --compacted`` with the cleaner-crash nemesis on real processes: the
brokers' cleaners compact the workload's keyed topic while one of them is SIGKILLed in the
middle of a swap (or, if every swap is missed, right after a cleaning), restarted, and the
audit, told the topic is compacted, finds nothing wrong in what the cleanings kept; the
replicas were cleaned for real (batches holding fewer records than offsets); and the
restarted broker catches up with leaders that cleaned while it was down."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from chaos.runner import RunSettings, run_chaos
from chaos.schedule import Schedule, ScheduledFault
from proto.records.record_batch import scan_batches

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

SESSION_TIMEOUT_MS = 2000


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from chaos.audit.session import start_session

    session = start_session("local[2]", {})
    yield session
    session.stop()


def _cleaned_batches(data: Path) -> tuple[int, int]:
    """(batches, batches holding fewer records than the offsets they span: cleaned ones and
    placeholders) in the workload's partitions of every broker's data dir."""
    batches = cleaned = 0
    for segment in sorted(data.glob("broker-*/chaos-*/*.log")):
        for found in scan_batches(segment.read_bytes()):
            header = found.header
            batches += 1
            cleaned += header.record_count < header.last_offset_delta + 1
    return batches, cleaned


@dataclass
class _Run:
    status: int
    path: Path
    report: dict[str, Any]
    timeline: list[dict[str, Any]]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> _Run:
    """One run of a compacted topic (one topic, two partitions, ten keys, two producers at
    100 records/s each) with two cleaner crashes, judged by the audit."""
    root = tmp_path_factory.mktemp("compacted-chaos")
    replay = root / "schedule.json"
    faults = (
        ScheduledFault(8.0, "cleaner-crash", 3.0, 0.2),
        ScheduledFault(40.0, "cleaner-crash", 3.0, 0.7),
    )
    replay.write_text(Schedule(0, 70.0, 10.0, faults).to_json())
    run_dir = root / "run"
    status = run_chaos(
        RunSettings(
            out=run_dir,
            replay=replay,
            compacted=True,
            keys=10,
            topics=1,
            partitions=2,
            producers=2,
            rate=100,
            consumers=1,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            spark=spark,
            quiet=True,
        )
    )
    timeline = [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()]
    report = json.loads((run_dir / "audit" / "report.json").read_text())
    return _Run(status, run_dir, report, timeline)


def test_a_compacted_workload_survives_a_cleaner_crash_and_audits_clean(run: _Run) -> None:
    report = run.report
    assert report["violations"] == [], json.dumps(report["violations"][:5], indent=1)
    assert run.status == 0

    kills = [e for e in run.timeline if e["f"] == "kill" and e.get("nemesis") == "cleaner-crash"]
    assert len(kills) == 2, run.timeline
    assert {k["moment"] for k in kills} <= {"mid-swap", "after-cleaning"}, kills

    topics = json.loads((run.path / "topics.json").read_text())["topics"]
    assert {c["cleanup.policy"] for c in topics.values()} == {"compact"}
    partitions = [p for p in report["summary"]["partitions"] if p["topic"] in topics]
    assert partitions
    assert all(p["compacted"] for p in partitions)
    assert sum(p["acked_checked"] for p in partitions) > 1000

    batches, cleaned = _cleaned_batches(run.path / "data")
    assert cleaned > 0, f"no cleaned batch among {batches}"
    # A cleaned replica decodes fewer records than the offsets it spans.
    replicas = [r for p in partitions for r in p["replicas"]]
    assert any(r["records"] < r["log_end_offset"] - r["log_start_offset"] for r in replicas)


def test_the_crashed_broker_catches_up_with_leaders_that_cleaned_meanwhile(run: _Run) -> None:
    """While the broker is down its leaders go on cleaning: the removed batches around its
    log end offset become one empty placeholder batch that starts before it. The restarted
    follower must still catch up (every ISR whole again after each heal, as after any
    kill)."""
    whole = [e["f"] for e in run.timeline if e["f"] in ("isr-whole", "isr-not-whole")]
    assert whole == ["isr-whole", "isr-whole"], [
        e for e in run.timeline if e["f"] == "isr-not-whole"
    ]
    ends = {
        p["partition"]: {r["log_end_offset"] for r in p["replicas"]}
        for p in run.report["summary"]["partitions"]
    }
    assert all(len(leos) == 1 for leos in ends.values()), ends
