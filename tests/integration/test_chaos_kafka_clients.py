"""``minibroker chaos run --client kafka|mixed``: the workload through the brokers' Kafka
listeners with Kafka's own clients (confluent-kafka and aiokafka producers, a confluent-kafka
consumer group, an aiokafka reader), brokers killed under it, judged by the audit.

Each run is short (a replayed schedule: a broker killed, then a partition's leader), on the
local backend with real ZooKeeper and brokers; the history must hold what every kind of
client was told, and the audit (consumer group checks included) must find nothing.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.runner import RunSettings, run_chaos
from chaos.schedule import Schedule, ScheduledFault
from chaos.workload import GRPC, KAFKA, KAFKA_GROUP, MIXED, producer_client

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

PRODUCERS = 3
CONSUMERS = 2
SESSION_TIMEOUT_MS = 2000


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from chaos.audit.session import start_session

    session = start_session("local[2]", {})
    yield session
    session.stop()


def _run(tmp_path: Path, client: str, spark: Any) -> list[dict[str, Any]]:
    """A run of ``client``'s workload with a broker and a leader killed; its history."""
    replay = tmp_path / "schedule.json"
    faults = (ScheduledFault(4.0, "kill", 3.0, 0.3), ScheduledFault(13.0, "leader", 3.0, 0.7))
    replay.write_text(Schedule(0, 24.0, 2.0, faults).to_json())
    run_dir = tmp_path / "run"
    status = run_chaos(
        RunSettings(
            out=run_dir,
            replay=replay,
            producers=PRODUCERS,
            rate=40,
            consumers=CONSUMERS,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            client=client,
            spark=spark,
        )
    )
    summary = run_dir / "audit" / "summary.txt"
    assert status == 0, summary.read_text() if summary.exists() else f"status {status}"
    report = json.loads((run_dir / "audit" / "report.json").read_text())
    assert report["violations"] == []
    found = subprocess.run(
        ["pgrep", "-af", str(run_dir)], capture_output=True, text=True, check=False
    ).stdout
    assert not [line for line in found.splitlines() if "pgrep" not in line], found
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


def _writes_by_client(history: list[dict[str, Any]], client: str) -> dict[str, int]:
    acked: dict[str, int] = {}
    for h in history:
        if h["type"] == "ok" and "topic" in h and h["process"] < PRODUCERS:
            name = producer_client(client, h["process"])
            acked[name] = acked.get(name, 0) + 1
    return acked


def _assert_the_kafka_group_was_recorded(history: list[dict[str, Any]], members: range) -> None:
    group = [h for h in history if h.get("group") == KAFKA_GROUP]
    assert {h["process"] for h in group} == set(members)
    reads = [h for h in group if h["type"] == "read"]
    assert len(reads) > 100
    for r in reads:
        assert isinstance(r["member"], str), r
        assert r["member"].startswith("chaos-c"), r
        assert r["generation"] >= 1, r
    assigned = [h for h in group if h.get("f") == "assigned"]
    assert {h["process"] for h in assigned} == set(members)
    # Each generation's assignments share the group's partitions out, none twice.
    by_generation: dict[int, list[list[Any]]] = {}
    for h in assigned:
        by_generation.setdefault(h["generation"], []).extend(h["partitions"])
    for generation, held in by_generation.items():
        assert len(held) == len({tuple(p) for p in held}), (generation, held)
    commits = [h for h in group if h.get("f") == "commit_offsets"]
    assert any(h["type"] == "ok" for h in commits)
    assert {h["process"] for h in commits if h["type"] == "ok"} == set(members)
    # Members left the group at the end: each revoked what it held.
    assert {h["process"] for h in group if h.get("f") == "revoked"} == set(members)


def test_kafka_clients_write_and_read_through_the_kafka_listeners_and_audit_clean(
    tmp_path: Path, spark: Any
) -> None:
    history = _run(tmp_path, KAFKA, spark)
    acked = _writes_by_client(history, KAFKA)
    assert acked.get("confluent", 0) > 100, acked
    assert acked.get("aiokafka", 0) > 100, acked
    # Processes: the producers, the group members, the aiokafka reader.
    members = range(PRODUCERS, PRODUCERS + CONSUMERS)
    _assert_the_kafka_group_was_recorded(history, members)
    reader = PRODUCERS + CONSUMERS
    reads = [h for h in history if h["type"] == "read" and h["process"] == reader]
    assert len(reads) >= sum(acked.values()) * 0.9
    assert all("group" not in r and r["session"] == 0 for r in reads)


def test_mixed_clients_run_side_by_side_and_audit_clean(tmp_path: Path, spark: Any) -> None:
    history = _run(tmp_path, MIXED, spark)
    acked = _writes_by_client(history, MIXED)
    assert {name for name, n in acked.items() if n > 100} == {GRPC, "confluent", "aiokafka"}
    grpc_members = range(PRODUCERS, PRODUCERS + CONSUMERS)
    kafka_members = range(PRODUCERS + CONSUMERS, PRODUCERS + 2 * CONSUMERS)
    _assert_the_kafka_group_was_recorded(history, kafka_members)
    grpc_reads = [h for h in history if h["type"] == "read" and h["process"] in grpc_members]
    assert len(grpc_reads) > 100
    assert not [h for h in grpc_reads if "group" in h]  # minibroker's own group: no such fields
    grpc_reader, aiokafka_reader = PRODUCERS + 2 * CONSUMERS, PRODUCERS + 2 * CONSUMERS + 1
    for reader in (grpc_reader, aiokafka_reader):
        reads = [h for h in history if h["type"] == "read" and h["process"] == reader]
        assert len(reads) >= sum(acked.values()) * 0.9, reader
