"""Settings of the Python process for a broker or a client: every minibroker process.

:func:`tune_process` applies both of these in the CLI's ``main`` as soon as the command
line is parsed, before the command runs (brokers start there too); a program using the
client library decides for its own process.

**malloc** (:func:`tune_malloc`).

A broker or client of this project allocates and frees a few large buffers per request:
a 256 KiB produce batch arrives as a bytes object, is parsed out of a protobuf message,
read back for each follower's fetch, and each of these is a fresh allocation. glibc serves
allocations above ``M_MMAP_THRESHOLD`` (128 KiB at start) with a new ``mmap`` and returns
them with ``munmap``, and trims the heap's free top above ``M_TRIM_THRESHOLD``; both hand
the pages back to the kernel, so the next buffer is page-faulted in again, each page
zeroed and charged to the cgroup, and every ``munmap`` shoots down TLB entries on the
other cores. glibc raises the thresholds itself once it frees an mmapped chunk, but only
in the arena that freed it, and gRPC's threads use several.

Measured (`perf record` of a leader during `perf produce` on its defaults, 3
brokers, RF 3): page faults, page zeroing and TLB shootdowns were about a fifth of the
broker's CPU; with the thresholds below the brokers spent 1.75 instead of 2.56 µs of CPU
per acknowledged record and `perf produce` went from 320k-476k to 540k-697k records/s on
the same (loaded) machine. The price is memory: up to ``TRIM_THRESHOLD_BYTES`` of freed
heap stays mapped per arena instead of going back to the system.

The same settings can be given as ``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_``
environment variables; those win (a user who set them knows better), and on a C library
other than glibc this does nothing.

**The cyclic garbage collector** (:func:`tune_gc`): run less often; see there.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import gc
import logging
import os
from collections.abc import Callable

__all__ = [
    "GC_GENERATION0_THRESHOLD",
    "MMAP_THRESHOLD_BYTES",
    "TRIM_THRESHOLD_BYTES",
    "release_free_memory",
    "tune_gc",
    "tune_malloc",
    "tune_process",
]

logger = logging.getLogger(__name__)

MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
"""Allocations below this come from the heap and are reused: above every request, batch
and fetch response size the defaults allow (glibc's own ceiling for its dynamic threshold
is the same 32 MiB on 64-bit systems)."""
TRIM_THRESHOLD_BYTES = 128 * 1024 * 1024
"""Free heap kept at the top of an arena before it is given back to the kernel."""

GC_GENERATION0_THRESHOLD = 50_000
"""Allocations of tracked objects between two collections of the youngest generation
(CPython's default: 700). See :func:`tune_gc`."""

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
"""mallopt's parameter numbers, from glibc's malloc.h."""
_ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def tune_malloc() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; True if they were set.

    Call it early, once per process; allocations made before keep their pages. False
    (and nothing changed) without glibc, or when the environment already sets them.
    """
    if any(name in os.environ for name in _ENVIRONMENT):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # not glibc (musl has no mallopt)
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
    if not done:
        logger.debug("mallopt refused the thresholds; malloc keeps its defaults")
    return done


LARGE_REQUEST_BYTES = 8 * 1024 * 1024
"""A request at least this large has the broker give free memory back after it
(:func:`release_free_memory_soon`)."""
RELEASE_DELAYS_S = (1.0, 4.0)
"""After the last large request, when the free memory is given back (seconds after it, then
after the first release): its buffers, and the copies gRPC and the decoders made, are freed
only once its answer is sent, a moment later on a busy broker."""


class _Releaser:
    """The pending releases of :func:`release_free_memory_soon`: one timer per process."""

    timer: asyncio.TimerHandle | None = None
    left = 0


def release_free_memory_soon(size: int) -> None:
    """After a request of ``size`` bytes: if it is large, give the free memory back to the
    kernel :data:`RELEASE_DELAYS_S` after it (a burst of large requests shares the timer).
    Call it on the event loop."""
    if size < LARGE_REQUEST_BYTES:
        return
    _Releaser.left = len(RELEASE_DELAYS_S)
    if _Releaser.timer is None:
        loop = asyncio.get_running_loop()
        _Releaser.timer = loop.call_later(RELEASE_DELAYS_S[0], _release_pass, loop)


def _release_pass(loop: asyncio.AbstractEventLoop) -> None:
    # A request refused by an exception stays in a reference cycle with its traceback,
    # which the collector (run rarely here, tune_gc) would free at some later time: too late
    # for the trim. A full collection is a few ms, after a large request only.
    gc.collect()
    release_free_memory()
    _Releaser.left -= 1
    if _Releaser.left > 0:
        delay = RELEASE_DELAYS_S[len(RELEASE_DELAYS_S) - _Releaser.left]
        _Releaser.timer = loop.call_later(delay, _release_pass, loop)
    else:
        _Releaser.timer = None


def release_free_memory() -> bool:
    """Give the free memory malloc keeps back to the kernel (glibc's ``malloc_trim(0)``:
    every arena's free top above the trim threshold and its free pages inside); True if
    any was. A broker calls it after a large request, at most once a second: with
    :data:`TRIM_THRESHOLD_BYTES` kept per arena for speed, a burst of large requests would
    otherwise leave its heap mapped for good (bench/RESULTS.md, "Memory after a flood")."""
    trim = _malloc_trim()
    return trim is not None and bool(trim(0))


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, looked up once; None elsewhere (musl has none)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        function = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    trim: Callable[[int], int] = function
    return trim


def tune_gc() -> None:
    """Collect the youngest generation every GC_GENERATION0_THRESHOLD allocations instead of
    every 700.

    A consumer builds a record tuple per record it returns, a broker or producer a handful
    of objects per request, and CPython's default threshold makes the cyclic collector run
    every 700 of them, each run also walking the survivors that the records being handed
    over keep alive. Measured (``perf consume`` of 4,000,000 records on this
    project's machine, alternating): 0.90-0.96 million records/s with the default, 1.32
    million with 10,000, 1.46-1.48 million with 50,000 or 100,000, 1.52-1.56 million with
    the collector off. Cycles are still collected, a little later; reference counting
    frees everything else as before.
    """
    _, second, third = gc.get_threshold()
    gc.set_threshold(GC_GENERATION0_THRESHOLD, second, third)


def tune_process() -> None:
    """:func:`tune_malloc` and :func:`tune_gc`."""
    tune_malloc()
    tune_gc()
