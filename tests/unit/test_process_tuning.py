"""proto.process.tuning: large buffers come from the reused heap, not from fresh mappings;
the cyclic collector runs less often."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

_HEAP_OR_MAPPING = """
import ctypes, sys
from proto.process.tuning import tune_malloc
tuned = tune_malloc()
buffer = bytearray(4 * 1024 * 1024)
address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
for line in open("/proc/self/maps"):
    span, *rest = line.split()
    low, high = (int(x, 16) for x in span.split("-"))
    if low <= address < high:
        print(tuned, rest[-1] if len(rest) == 5 else "anonymous")
        break
"""

glibc_only = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="mallopt thresholds are glibc's",
)


def _where_a_large_buffer_lands(env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _HEAP_OR_MAPPING],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=60,
    )
    return done.stdout.strip()


def _env_without_malloc_settings() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}


@glibc_only
def test_a_large_buffer_comes_from_the_heap_once_tuned() -> None:
    """Untuned, glibc maps a 4 MiB buffer afresh (above its 128 KiB threshold) and unmaps
    it when freed; tuned, it comes from the main arena's heap and its pages are reused."""
    assert _where_a_large_buffer_lands(_env_without_malloc_settings()) == "True [heap]"


@glibc_only
def test_settings_in_the_environment_win_and_are_left_alone() -> None:
    env = _env_without_malloc_settings() | {"MALLOC_MMAP_THRESHOLD_": "131072"}
    assert _where_a_large_buffer_lands(env) == "False anonymous"


def test_the_youngest_generation_is_collected_less_often() -> None:
    code = (
        "import gc\n"
        "from proto.process.tuning import tune_process\n"
        "before = gc.get_threshold()\n"
        "tune_process()\n"
        "print(before[1:] == gc.get_threshold()[1:], gc.get_threshold()[0])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.split() == ["True", "50000"]
