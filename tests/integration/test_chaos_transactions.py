"""``minibroker chaos run --workload transactions`` on the local backend: transactional
producers committing and aborting across partitions, a consume-transform-produce copier
committing its input offsets in its transactions, read_committed consumers, and the
transaction coordinator of a producer SIGKILLed and SIGSTOPped, then a data partition's
leader killed inside an open transaction; the run waits out the transaction timeout
before its final read, and the audit finds the run clean (what each of its transaction
checks finds is its own tests' to say: tests/integration/test_audit_transactions.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from chaos.schedule import Schedule, ScheduledFault
from proto.topic_partition import TRANSACTION_STATE_TOPIC

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_transactions_run_commits_aborts_and_survives_its_coordinator_s_faults(
    tmp_path: Path,
) -> None:
    replay = tmp_path / "schedule.json"
    faults = (
        ScheduledFault(3.0, "kill-txn-coordinator", 2.0, 0.2),
        ScheduledFault(7.0, "pause-txn-coordinator", 5.5, 0.7),  # past the 3 s session
        ScheduledFault(15.0, "kill-leader-mid-txn", 2.0, 0.4),
    )
    replay.write_text(Schedule(0, 19.0, 3.0, faults).to_json())
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [
            sys.executable, "-m", "client.cli", "chaos", "run", "--workload", "transactions",
            "--replay", str(replay), "--out", str(run_dir), "--producers", "2",
            "--rate", "50", "--transaction-timeout-ms", "5000", "--copiers", "1",
            "--master", "local[1]",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    # The audit judged the run clean: leader-epoch truncation, every acknowledged commit
    # committed everywhere, no read_committed consumer saw an aborted or open record, the
    # copier's offsets ended with its writes, nothing left hanging (not 1: violations, 2:
    # it could not run, 3: no fault struck).
    report = json.loads((run_dir / "audit" / "report.json").read_text())
    assert done.returncode == 0, [v["detail"] for v in report["violations"]] or output
    counts = report["summary"]["transactions"]
    assert counts["writes_checked"] > 0, counts
    assert counts["reads_checked"] > 0, counts
    assert counts["open_in_log"] == 0, counts

    history = _lines(run_dir / "history.jsonl")
    steps = [h for h in history if "f" in h]
    committed = {h["txn"] for h in steps if h["f"] == "commit" and h["type"] == "ok"}
    aborted = {h["txn"] for h in steps if h["f"] == "abort" and h["type"] == "ok"}
    assert len(committed) >= 10, output
    assert aborted, output  # 20% on purpose, seeded per producer
    assert not committed & aborted
    begun = [h for h in steps if h["f"] == "begin"]
    assert {h["timeout_ms"] for h in begun} == {5000}
    assert {h["type"] for h in steps} <= {"ok", "fail", "info"}
    writes = [h for h in history if h["type"] in ("ok", "fail", "info") and "topic" in h]
    assert writes
    assert all(h["txn"] in {b["txn"] for b in begun} for h in writes)
    # A committed transaction of 5 records spans 5 partitions.
    spans = {
        txn: {(h["topic"], h["partition"]) for h in writes if h["txn"] == txn} for txn in committed
    }
    assert max(len(s) for s in spans.values()) == 5
    reads = [h for h in history if h["type"] == "read"]
    workload_reads = [h for h in reads if h["process"] != 10_000]  # not the final read
    assert workload_reads
    assert {h.get("isolation") for h in workload_reads} == {"read_committed"}

    # The copier (process 2): its reads name the transaction that copies them, its
    # offsets go with each transaction, and no input is copied by two committed ones.
    sent = [h for h in steps if h["f"] == "send_offsets" and h["type"] == "ok"]
    assert sent, output
    assert {h["group"] for h in sent} == {"chaos-copiers"}
    copied = Counter(
        (h["topic"], h["partition"], h["offset"])
        for h in workload_reads
        if h["process"] == 2 and h.get("txn") in committed
    )
    assert copied, output
    assert max(copied.values()) == 1, [k for k, n in copied.items() if n > 1]
    copies = [h for h in writes if h["topic"] == "chaos-copies" and h["txn"] in committed]
    assert len(copies) == sum(copied.values())

    events = _lines(run_dir / "timeline.jsonl")
    strikes = {e["nemesis"]: e for e in events if e["f"] in ("kill", "pause") and "nemesis" in e}
    for name, verb in (("kill-txn-coordinator", "kill"), ("pause-txn-coordinator", "pause")):
        event = strikes[name]
        assert event["f"] == verb
        assert event["tp"].startswith(f"{TRANSACTION_STATE_TOPIC}-"), event
        assert event["transactional_id"] in ("chaos-txn-0", "chaos-txn-1", "chaos-txn-2")
    assert strikes["kill-leader-mid-txn"]["moment"] in ("mid-txn", "after-its-end"), strikes
    assert not [e for e in events if e["f"] == "skipped"], events
    assert sum(e["f"] == "healed" for e in events) == 3
    settled = [e for e in events if e["f"] == "transactions-settled"]
    assert [e["unstable"] for e in settled] == [{}], settled  # every LSO at its HW
    assert "waiting 8 s for the coordinators to abort" in output
    assert "transactions:" in output
    left = subprocess.run(
        ["pgrep", "-af", str(run_dir)], capture_output=True, text=True, check=False
    ).stdout
    assert not [line for line in left.splitlines() if "pgrep" not in line], left
