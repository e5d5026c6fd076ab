"""The soak's stop rules and figures (chaos.soak), as pure logic."""

from __future__ import annotations

import json
from pathlib import Path

from chaos.run_dir import EXIT_CANNOT_RUN
from chaos.runner import EXIT_VIOLATIONS, RunSettings
from chaos.soak import SoakResult, SoakSettings, WindowResult, stop_reason, window_result
from chaos.workload import MIXED


def _settings(**kw: object) -> SoakSettings:
    return SoakSettings(RunSettings(out=Path("/nowhere")), **kw)  # type: ignore[arg-type]


def _window(index: int, status: int = 0, faults: int = 10, **kw: object) -> WindowResult:
    return WindowResult(index, f"w{index}", status, 60.0, {"kill": faults}, **kw)  # type: ignore[arg-type]


def test_the_soak_goes_on_until_enough_faults_struck() -> None:
    result = SoakResult([_window(0), _window(1)])
    assert stop_reason(result, _settings(faults=21), None, 0.0) is None
    result.windows.append(_window(2, faults=1))
    assert stop_reason(result, _settings(faults=21), None, 0.0) == "21 faults struck (--faults 21)"


def test_the_first_violation_or_failed_window_stops_it() -> None:
    found = SoakResult([_window(0), _window(1, EXIT_VIOLATIONS)])
    assert stop_reason(found, _settings(), None, 0.0) == "window 1 found violations: w1 is kept"
    failed = SoakResult([_window(0, EXIT_CANNOT_RUN)])
    assert "window 0 could not run" in (stop_reason(failed, _settings(), None, 0.0) or "")
    assert found.status() == EXIT_VIOLATIONS
    assert failed.status() == EXIT_CANNOT_RUN
    assert stop_reason(found, _settings(keep_going=True), None, 0.0) is None  # but counted
    assert "could not run" in (stop_reason(failed, _settings(keep_going=True), None, 0.0) or "")


def test_the_time_and_window_limits() -> None:
    result = SoakResult([_window(0)])
    assert stop_reason(result, _settings(max_hours=1.0), 100.0, 99.0) is None
    assert stop_reason(result, _settings(max_hours=1.0), 100.0, 100.0) == "--max-hours 1 reached"
    assert stop_reason(result, _settings(max_windows=1), None, 0.0) == "--max-windows 1 done"
    assert stop_reason(SoakResult(), _settings(max_windows=1), None, 0.0) is None


def test_the_totals_add_up_the_windows() -> None:
    result = SoakResult(
        [
            _window(0, acked=100, reads=50, heal_to_isr_s=[1.0, 3.0]),
            _window(1, faults=4, acked=10, reads=5, violations={"lost_ack": 2}),
        ]
    )
    result.windows[1].faults = {"kill": 1, "pause": 3}
    totals = result.to_json()["totals"]
    assert totals["faults"] == 14
    assert totals["faults_by_nemesis"] == {"kill": 11, "pause": 3}
    assert (totals["acked"], totals["reads_checked"]) == (110, 55)
    assert totals["violations_by_kind"] == {"lost_ack": 2}
    assert totals["heal_to_isr_s"] == {"count": 2, "median": 2.0, "p99": 3.0, "max": 3.0}
    assert SoakResult().status() == EXIT_CANNOT_RUN  # nothing ran


def _window_dir(tmp_path: Path, values: list[str]) -> Path:
    """A window's run directory whose audit found one ``resent`` per value."""
    violations = [
        {"kind": "resent", "count": 1, "detail": f"{v!r} appears 2 times, at offsets 3 and 9"}
        for v in values
    ]
    summary = {"operations": {"read": 7}, "violations_by_kind": {"resent": len(values)}}
    (tmp_path / "audit").mkdir(parents=True)
    (tmp_path / "audit" / "report.json").write_text(
        json.dumps({"violations": violations, "summary": summary})
    )
    return tmp_path


def test_a_kafka_clients_resend_is_counted_and_does_not_stop_the_soak(tmp_path: Path) -> None:
    """Under the mixed workload producer 1 is librdkafka's, producer 0 a gRPC one: the
    first's resend is its client's behaviour, counted; the second's is a defect."""
    judged = window_result(0, _window_dir(tmp_path / "a", ["p1-941"]), EXIT_VIOLATIONS, 1.0, MIXED)
    assert (judged.status, judged.violations, judged.kafka_client_resends) == (0, {}, 1)
    assert stop_reason(SoakResult([judged]), _settings(), None, 0.0) is None
    grpc = window_result(0, _window_dir(tmp_path / "b", ["p0-5"]), EXIT_VIOLATIONS, 1.0, MIXED)
    assert (grpc.status, grpc.violations, grpc.kafka_client_resends) == (
        EXIT_VIOLATIONS,
        {"resent": 1},
        0,
    )
