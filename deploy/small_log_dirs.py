"""Broker data dirs on small file systems of their own, and filling one up: the disk-full
fault (chaos's ``disk-full`` nemesis, ``cluster up --log-dir-size``).

A broker's log dir fails when its own disk fills, not its neighbours'. On one machine that
takes a file system per broker: a tmpfs of a fixed size mounted on each data dir (root only).
tmpfs lives as long as it is mounted, not as long as the broker runs, so kills and restarts
keep the data; :func:`unmount_keeping` copies it back to the disk below before unmounting,
so that ``cluster down`` leaves the data dirs as a cluster without tmpfs would (for the
audit). The filler takes every free byte (:func:`fill`), so the broker's next write fails
with ENOSPC, and :func:`free` gives them back.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

from proto.errors import MinibrokerError

FILLER = ".chaos-disk-filler"
"""The filler's name in a data dir (a dot file: no partition directory looks like it)."""


class SmallLogDirError(MinibrokerError):
    """A data dir could not be mounted, filled or freed."""


def mount(directory: Path, size_bytes: int) -> None:
    """Mount a tmpfs of ``size_bytes`` on ``directory`` (created if missing; root only)."""
    directory.mkdir(parents=True, exist_ok=True)
    if any(directory.iterdir()):
        raise SmallLogDirError(f"{directory} is not empty: a small log dir starts empty")
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0755", "tmpfs", str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SmallLogDirError(
            f"cannot mount a {size_bytes}-byte tmpfs on {directory} (needs root): "
            f"{result.stderr.strip() or result.returncode}"
        )


def is_mounted(directory: Path) -> bool:
    return os.path.ismount(directory)


def unmount_keeping(directory: Path) -> None:
    """Copy the tmpfs's files to the disk below and unmount it: the data dir keeps its
    content and no longer needs the mount."""
    if not is_mounted(directory):
        return
    copy = directory.with_name(directory.name + ".unmounting")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(directory, copy, ignore=shutil.ignore_patterns(FILLER), symlinks=True)
    result = subprocess.run(["umount", str(directory)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        shutil.rmtree(copy, ignore_errors=True)
        raise SmallLogDirError(f"cannot unmount {directory}: {result.stderr.strip()}")
    shutil.rmtree(directory)
    copy.rename(directory)


def fill(directory: Path) -> int:
    """Take every free byte of ``directory``'s file system with a filler file; returns its
    size. The broker's next write there fails with ENOSPC."""
    fd = os.open(directory / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    written = 0
    chunk = b"\0" * (1 << 20)
    try:
        while chunk:
            try:
                written += os.write(fd, chunk)
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise SmallLogDirError(f"cannot fill {directory}: {err}") from err
                chunk = chunk[: len(chunk) // 2]  # down to the last free bytes
    finally:
        os.close(fd)
    return written


def free(directory: Path) -> None:
    """Give the filler's bytes back."""
    (directory / FILLER).unlink(missing_ok=True)
