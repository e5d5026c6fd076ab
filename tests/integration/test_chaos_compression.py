"""``minibroker chaos run --compression-type``: the workload's producers compress their
batches (every replica of the chaos topics stores them in that codec) and the audit of a
run with a fault finds nothing wrong in them."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.schedule import Schedule, ScheduledFault
from client.cli.dump_log import dump
from tests.helpers import cluster_up_on_free_ports

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]


def test_a_run_with_compressed_producers_stores_their_codec_and_audits_clean(
    tmp_path: Path, cluster_dir: Path
) -> None:
    cluster_up_on_free_ports(cluster_dir)
    replay = tmp_path / "schedule.json"
    replay.write_text(Schedule(0, 6.0, 2.0, (ScheduledFault(2.0, "kill", 2.0, 0.5),)).to_json())
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [
            sys.executable, "-m", "client.cli", "chaos", "run", "--replay", str(replay),
            "--data-dir", str(cluster_dir), "--out", str(run_dir), "--producers", "2",
            "--rate", "50", "--compression-type", "zstd", "--master", "local[1]",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    report = json.loads((run_dir / "audit" / "report.json").read_text())
    assert report["violations"] == []
    chaos = [p for p in report["summary"]["partitions"] if p["topic"].startswith("chaos-")]
    assert sum(p["acked_checked"] for p in chaos) > 0, report["summary"]["partitions"]

    codecs: dict[str, int] = {}
    replicas = 0
    for partition_dir in sorted(cluster_dir.glob("broker-*/chaos-*")):
        out = io.StringIO()
        dump(partition_dir, out=out, as_json=True, print_data=False)
        batches = [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]
        replicas += 1
        for batch in batches:
            if "compression" in batch:
                codecs[batch["compression"]] = codecs.get(batch["compression"], 0) + 1
    assert replicas >= 3
    assert set(codecs) == {"zstd"}, codecs  # every batch the producers wrote, as they sent it
