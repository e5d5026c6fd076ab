"""What machine a benchmark ran on, for the header of bench/RESULTS.md."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    return "unknown memory"


def _filesystem(path: Path) -> str:
    try:
        out = (
            subprocess.run(["df", "-hT", str(path)], capture_output=True, text=True, check=True)
            .stdout.splitlines()[-1]
            .split()
        )
        return f"{out[1]} on {out[0]}"
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown filesystem"


def _load() -> str:
    try:
        return f"load average {os.getloadavg()[0]:.1f} at the start"
    except OSError:
        return "load average unknown"


def describe(data_path: Path) -> str:
    """One line: CPU, cores, memory, OS, Python, the filesystem holding ``data_path``, and
    the 1-minute load average (other work on the machine slows the Python side most)."""
    return (
        f"{_cpu_model()}, {os.cpu_count()} cores, {_memory()}, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}, "
        f"data on {_filesystem(data_path)}, {_load()}"
    )
