"""``make bench``: run every benchmark and write bench/RESULTS.md."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

from bench import log_append
from bench.machine import describe

BENCH_DIR = Path(__file__).resolve().parent
RESULTS = BENCH_DIR / "RESULTS.md"
WORK_DIR = BENCH_DIR / "out"


def _log_append_section() -> list[str]:
    results = [
        log_append.measure(WORK_DIR, fsync_every=None),
        log_append.measure(WORK_DIR, batches=4000, fsync_every=100),
    ]
    lines = [
        "## Log append vs plain file writes",
        "",
        f"`Log.append_as_leader` of one {results[0].batch_bytes}-byte v2 batch (100-byte "
        "records) per call, against unbuffered writes of the same bytes to a plain file in "
        "the same directory, alternating, best of 3. Target: ratio >= 0.8.",
        "",
        "| fsync policy | batches | Log MB/s | plain MB/s | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.label} | {r.batches} | {r.log_mb_s:,.0f} | {r.plain_mb_s:,.0f} | {r.ratio:.2f} |"
        )
        print(
            f"log append, {r.label}: log {r.log_mb_s:,.0f} MB/s, plain "
            f"{r.plain_mb_s:,.0f} MB/s, ratio {r.ratio:.2f}"
        )
    return [*lines, ""]


def main() -> int:
    WORK_DIR.mkdir(exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    sections = _log_append_section()
    command = "make bench  # " + shlex.join([Path(sys.executable).name, "-m", "bench.run"])
    text = [
        "# Benchmark results",
        "",
        f"- run: {started}",
        f"- command: `{command}`",
        f"- machine: {describe(WORK_DIR)}",
        "",
        *sections,
    ]
    RESULTS.write_text("\n".join(text))
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
