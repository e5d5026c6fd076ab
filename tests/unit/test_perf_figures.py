"""The figures ``perf`` and ``make bench`` report: weighted latency percentiles (records
given to the producer together share a latency), results.json merging across partial
runs, and the pre-built batch of the side-by-side ceilings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import run as bench_run
from bench import side_by_side
from client.cli.perf import PerfResult, percentile
from proto.records.record_batch import check_batch, decode_batch


def test_percentiles_weigh_each_latency_by_its_record_count() -> None:
    # 90 records at 1 ms, 9 at 5 ms, 1 at 50 ms
    ordered = sorted([(5.0, 9), (1.0, 90), (50.0, 1)])
    assert percentile(ordered, 50) == 1.0
    assert percentile(ordered, 90) == 1.0
    assert percentile(ordered, 91) == 5.0
    assert percentile(ordered, 99) == 5.0
    assert percentile(ordered, 100) == 50.0
    assert percentile([], 99) == 0.0


def test_perf_result_json_has_the_weighted_percentiles() -> None:
    result = PerfResult(100, 2.0, 10_000, [(1.0, 90), (5.0, 9), (50.0, 1)])
    figures = result.to_json()
    assert figures["records_per_s"] == 50.0
    assert figures["latency_ms"] == {"p50": 1.0, "p95": 5.0, "p99": 5.0, "max": 50.0}
    assert "p99 5.0" in result.summary()


def test_results_json_keeps_the_sections_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"audit": {"records_per_s_best": 1.0}, "tls": {"old": 1}}))
    monkeypatch.setattr(bench_run, "RESULTS_JSON", path)
    run = bench_run._Run(stamp=["- run: now", "- command: `x`"])
    run.figures["tls"] = {"best_tls_over_best_plaintext": 0.9}
    bench_run._write_figures(run)
    written = json.loads(path.read_text())
    assert written["audit"] == {"records_per_s_best": 1.0}
    assert written["tls"] == {
        "measured": ["run: now", "command: `x`"],
        "best_tls_over_best_plaintext": 0.9,
    }


def test_the_ceilings_prebuilt_batch_is_a_valid_batch_of_the_bench_records() -> None:
    batch, count = side_by_side._prebuilt_batch(side_by_side.RAW_BATCH_BYTES)
    assert len(batch) <= side_by_side.RAW_BATCH_BYTES
    assert check_batch(batch).record_count == count > 2000
    assert {len(r.value or b"") for r in decode_batch(batch).records} == {side_by_side.RECORD_BYTES}
