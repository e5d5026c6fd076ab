"""``minibroker chaos matrix`` on the local backend: Kafka's replication test matrix (clean
and hard shutdowns and bounces of the leader and of the controller), each cell a run of its
own on a new cluster, every one judged clean by the audit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.matrix import run_matrix

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from chaos.audit.session import start_session

    session = start_session("local[2]", {})
    yield session
    session.stop()


def test_every_cell_of_kafkas_replication_matrix_is_clean(tmp_path: Path, spark: Any) -> None:
    out = tmp_path / "matrix"
    status = run_matrix(out, cell_duration_s=14, producers=1, rate=40, spark=spark, quiet=True)
    cells = json.loads((out / "matrix.json").read_text())["cells"]
    assert status == 0, cells
    assert sorted((c["failure_mode"], c["broker_type"]) for c in cells) == sorted(
        (f"{clean}_{kind}", target)
        for clean in ("clean", "hard")
        for kind in ("shutdown", "bounce")
        for target in ("leader", "controller")
    )
    for cell in cells:
        assert cell["status"] == 0, cell
        assert cell["violations"] == 0, cell
        assert cell["acked"] > 0, cell
        events = [
            json.loads(line)
            for line in (Path(cell["run_dir"]) / "timeline.jsonl").read_text().splitlines()
        ]
        faults = [e for e in events if e["f"] == "fault"]
        assert len(faults) == 1, (cell, events)
        struck = [
            e
            for e in events
            if e.get("nemesis") and e["f"] not in ("strike", "fault", "healed", "skipped")
        ]
        assert [e["f"] for e in events if e["f"] in ("strike", "healed")] == ["strike", "healed"]
        bounces = 3 if cell["failure_mode"].endswith("bounce") else 1
        assert len(struck) == bounces, (cell, events)
