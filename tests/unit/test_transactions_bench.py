"""bench/transactions.py's figures: a transaction's phases read from the coordinator's log
lines, the best run of each configuration, the ratios to the non-transactional runs, and
the reading under the tables."""

from __future__ import annotations

import pytest

from bench import transactions
from bench.transactions import (
    CONFLUENT,
    PERF,
    Phases,
    TransactionsBench,
    TxnRun,
    best_runs,
    log_findings,
    ratio_text,
    ratios,
    reading,
    transaction_phases,
)

_WRITTEN = (
    "2026-12-03 18:26:{t} INFO broker.coordinator.transaction_state_manager "
    "event=transaction_state_written broker=2 transactional_id={tid} producer_id=1000 "
    "producer_epoch=0 state={state} coordinator_epoch=0"
)
_DECIDED = (
    "2026-12-03 18:26:{t} INFO broker.coordinator.transaction_coordinator "
    "event=transaction_decided transactional_id={tid} producer_id=1000 producer_epoch=0 "
    "result=COMMIT partitions={partitions} coordinator_epoch=0"
)


def _written(t: str, state: str, tid: str = "p1") -> str:
    return _WRITTEN.format(t=t, tid=tid, state=state)


def _decided(t: str, partitions: int, tid: str = "p1") -> str:
    return _DECIDED.format(t=t, tid=tid, partitions=partitions)


def test_the_phases_of_committed_transactions_are_means_from_the_log() -> None:
    lines = [
        _written("00,000", "Empty"),  # InitProducerId: before the first transaction
        _written("00,010", "Ongoing"),
        _written("00,020", "Ongoing"),  # a second partition added: still the same transaction
        _written("00,030", "PrepareCommit"),
        _decided("00,030", 2),
        _written("00,034", "CompleteCommit"),
        _written("00,140", "Ongoing", tid="p10"),  # another id, whose name starts alike
        _written("00,138", "Ongoing"),
        _written("00,146", "PrepareCommit"),
        _decided("00,146", 1),
        _written("00,150", "CompleteCommit"),
        "2026-12-03 18:26:00,151 WARNING broker.x event=other transactional_id=p1 state=Ongoing",
        _written("00,254", "Ongoing"),
        _written("00,262", "PrepareCommit"),
        _decided("00,262", 1),
        _written("00,268", "CompleteCommit"),
    ]
    phases = transaction_phases("\n".join(lines), "p1")
    assert phases is not None
    assert phases.transactions == 3
    assert phases.open_ms == pytest.approx(12.0)  # 20, 8, 8
    assert phases.markers_ms == pytest.approx(4.7)  # 4, 4, 6
    assert phases.next_ms == pytest.approx(104.0)  # 104, 104
    assert phases.partitions == pytest.approx(1.33)  # 2, 1, 1


def test_the_lines_of_several_brokers_are_read_in_time_order() -> None:
    later = [_written("01,000", "Ongoing"), _written("01,010", "PrepareCommit")]
    earlier = [_written("00,000", "Ongoing"), _written("00,005", "PrepareCommit")]
    text = "\n".join([*later, _written("01,012", "CompleteCommit"), *earlier])
    text += "\n" + _written("00,007", "CompleteCommit")
    phases = transaction_phases(text, "p1")
    assert phases is not None
    assert (phases.transactions, phases.open_ms, phases.markers_ms) == (2, 7.5, 2.0)  # 5, 10; 2, 2
    assert phases.next_ms == pytest.approx(993.0)


def test_an_aborted_or_unfinished_transaction_is_not_counted() -> None:
    lines = [
        _written("00,000", "Ongoing"),
        _written("00,010", "PrepareAbort"),
        _written("00,020", "CompleteAbort"),
        _written("00,030", "Ongoing"),
        _written("00,040", "PrepareCommit"),  # no CompleteCommit yet
    ]
    assert transaction_phases("\n".join(lines), "p1") is None
    one = [_written("00,000", "Ongoing"), _written("00,004", "PrepareCommit")]
    phases = transaction_phases("\n".join([*one, _written("00,009", "CompleteCommit")]), "p1")
    assert phases is not None
    assert phases.next_ms is None
    assert phases.partitions == 0.0


def _run(writer: str, per_txn: int, records: int, seconds: float, problem: str = "") -> TxnRun:
    transactions = records // per_txn if per_txn else 0
    return TxnRun(writer, per_txn, records, transactions, seconds, problem=problem)


def test_the_table_takes_the_faster_plain_run_and_a_failed_run_only_alone() -> None:
    runs = [
        _run(PERF, 0, 400_000, 4.0),  # 100,000/s
        _run(PERF, 1, 200, 20.0),
        _run(PERF, 0, 400_000, 2.0),  # 200,000/s: the better
        _run(CONFLUENT, 0, 0, 0.0, problem="hung"),
        _run(CONFLUENT, 0, 400_000, 2.5),
        _run(CONFLUENT, 10, 0, 0.0, problem="failed: boom"),
    ]
    best = best_runs(runs)
    assert list(best) == [
        "perf produce, not transactional",
        "perf produce, 1 record per transaction",
        "confluent-kafka, not transactional",
        "confluent-kafka, 10 records per transaction",
    ]
    assert best["perf produce, not transactional"].seconds == 2.0
    assert best["confluent-kafka, not transactional"].records_per_s == 160_000
    assert best["confluent-kafka, 10 records per transaction"].problem == "failed: boom"
    found = ratios(best.values())
    assert found == {"perf produce 1": pytest.approx(10 / 200_000)}  # the failed one has none
    assert best["perf produce, 1 record per transaction"].transactions_per_s == 10.0


def test_ratios_print_as_decimals_or_as_one_in_n() -> None:
    assert ratio_text(0.85) == "0.85"
    assert ratio_text(0.1) == "0.10"
    assert ratio_text(0.0048) == "1/208"
    assert ratio_text(10 / 200_000) == "1/20,000"
    assert ratio_text(0.0) == "0.00"


def test_the_reading_names_the_wait_and_every_failed_run() -> None:
    slow = _run(PERF, 10, 2000, 22.0)
    slow.phases = Phases(200, 8.0, 4.0, 98.0, 1.0)
    runs = [_run(PERF, 0, 400_000, 2.0), slow, _run(CONFLUENT, 1, 0, 0.0, problem="hung")]
    bench = TransactionsBench(runs, [], "2.16.0", 60.0, (1.0, 2.0))
    text = "\n".join(reading(bench))
    assert "perf produce: 9.1 (10) transactions/s" in text
    assert "transaction hardly depends on its records (110.0 ms, the median of the 1)" in text
    assert "98 ms of it on average (89%)" in text
    assert "confluent-kafka, 1 record per transaction: hung" in text
    figures = bench.figures()
    assert figures["ratios"] == {"perf produce 10": pytest.approx(0.00045, abs=1e-5)}
    assert [r["problem"] for r in figures["runs"]] == ["", "", "hung"]


def test_the_brokers_cpu_per_transaction_is_less_their_idle_cpu() -> None:
    run = TxnRun(PERF, 1, 200, 200, 22.0, wall_s=24.0, broker_cpu_s=4.8)
    assert run.broker_cpu_ms_per_transaction(0.0) == pytest.approx(24.0)
    assert run.broker_cpu_ms_per_transaction(0.1) == pytest.approx(12.0)  # 2.4 s idle
    assert run.broker_cpu_ms_per_transaction(1.0) == 0.0  # never below nothing
    assert TxnRun(PERF, 0, 400_000, 0, 2.0).broker_cpu_ms_per_transaction(0.1) == 0.0


def test_log_findings_are_the_warnings_errors_and_tracebacks() -> None:
    text = "\n".join(
        [
            _written("00,000", "Ongoing"),
            "2026-12-03 18:26:00,001 WARNING broker.x event=txn_markers_not_sent broker=1",
            "2026-12-03 18:26:00,002 ERROR broker.y event=boom",
            "Traceback (most recent call last):",
            '  File "x.py", line 1, in <module>',
            "2026-12-03 18:26:00,003 INFO broker.z message=WARNING in a value",
        ]
    )
    assert [line.split()[2] for line in log_findings(text)[:2]] == ["WARNING", "ERROR"]
    assert log_findings(text)[2] == "Traceback (most recent call last):"
    assert len(log_findings(text)) == 3


def test_a_hung_or_failed_client_is_reported_in_its_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactions, "RUN_TIMEOUT_S", 0.5)
    hung = transactions._run(TxnRun(CONFLUENT, 1), ["-c", "import signal; signal.pause()"], [])
    assert hung.problem == "hung: no answer within 0.5 s (killed)"
    failed = transactions._run(
        TxnRun(CONFLUENT, 10), ["-c", "raise SystemExit('no coordinator')"], []
    )
    assert failed.problem.startswith("failed: ")
    assert "no coordinator" in failed.problem
    silent = transactions._run(TxnRun(PERF, 0), ["-c", "pass"], [])
    assert silent.problem.startswith("failed: ")
    done = transactions._run(
        TxnRun(PERF, 10),
        ["-c", 'print(\'{"records": 20, "transactions": 2, "seconds": 0.5}\')'],
        [],
    )
    assert (done.problem, done.records_per_s, done.transactions_per_s) == ("", 40.0, 4.0)
