"""The ``minibroker`` CLI as a user runs it, from a benchmark: a subprocess of this Python
on a local cluster's data dir, failing loudly with its stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_minibroker(*args: str, data_dir: Path, timeout: float = 900) -> tuple[str, str]:
    """``minibroker ARGS --data-dir DATA_DIR``: its (stdout, stderr). Raises RuntimeError
    when it fails."""
    result = subprocess.run(
        [sys.executable, "-m", "client.cli", *args, "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=REPO,
    )
    if result.returncode != 0:
        raise RuntimeError(f"minibroker {' '.join(args)} failed: {result.stderr[-2000:]}")
    return result.stdout, result.stderr
