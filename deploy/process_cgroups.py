"""A cgroup (v2) of its own for each broker process of a local cluster, so that the kernel
can tell their packets apart.

The brokers of ``minibroker cluster up`` share 127.0.0.1 in one network namespace: an
address says nothing about which process sent a packet. A cgroup does: every socket
remembers the cgroup v2 of the process that created it, and iptables' ``cgroup`` match
(``-m cgroup --path``) tests that, which is what :mod:`deploy.loopback_firewall` builds
partitions from. So each broker runs in ``<cgroup2 mount>/minibroker-<key>/broker-<id>``,
``<key>`` a short hash of the cluster's data dir (one parent per cluster, so that clusters
side by side never share a cgroup). No controller is enabled: the cgroups limit nothing,
they only name.

A process must be in its cgroup before it opens a socket (a socket keeps the cgroup it was
created in), so the broker's command joins it before it execs Python (:func:`command_in`),
and a broker restarted into the same cgroup is matched by the same rules. It all needs
root and a writable cgroup2 mount; without them a cluster runs as before and
:func:`problem` says why it cannot be partitioned. The cgroups outlive kills and restarts
and are removed by ``cluster down`` (:meth:`ClusterCgroups.remove`).
"""

from __future__ import annotations

import errno
import hashlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

__all__ = ["ClusterCgroups", "cgroup2_mount", "cgroup_of", "cluster_key", "command_in", "problem"]

PREFIX = "minibroker-"
_REMOVE_TIMEOUT_S = 10.0
"""How long a cgroup may stay busy after its last process was reaped (the kernel tears
the process down a moment after its parent saw it exit)."""
_POLL_S = 0.02
_JOIN_THEN_EXEC = 'echo $$ > "$0/cgroup.procs"; exec "$@"'
"""``sh -c`` script: ``$0`` the cgroup directory, ``"$@"`` the command."""


def cluster_key(data_dir: Path) -> str:
    """8 hex digits naming the cluster in ``data_dir``: its cgroups' parent
    (``minibroker-<key>``) and its firewall chain (``MB-<key>``)."""
    return hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:8]


@cache
def cgroup2_mount() -> tuple[Path, str] | None:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup`` on a unified system,
    ``/sys/fs/cgroup/unified`` on a hybrid one) and the cgroup at that mount's root as
    ``/proc/<pid>/cgroup`` names it (``/`` unless in a cgroup namespace's view); None
    without one."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields, _, rest = line.partition(" - ")
        if rest.split(" ", 1)[0] == "cgroup2":
            parts = fields.split()
            return Path(parts[4]), parts[3]
    return None


def problem() -> str | None:
    """Why this process cannot give local brokers cgroups of their own (None: it can)."""
    if os.geteuid() != 0:
        return f"it needs root to create cgroups (running as uid {os.geteuid()})"
    mount = cgroup2_mount()
    if mount is None:
        return "no cgroup v2 hierarchy is mounted (/proc/self/mountinfo has no cgroup2)"
    if not os.access(mount[0], os.W_OK):
        return f"the cgroup v2 hierarchy at {mount[0]} is not writable"
    return None


def command_in(directory: Path, command: Sequence[str]) -> list[str]:
    """``command`` run in the cgroup ``directory``: a shell moves itself there, then execs
    the command (same pid), so the broker's first socket is already the cgroup's. Not a
    ``preexec_fn``: Python code between fork and exec may deadlock in a process with
    threads, as a chaos run is. Should the move fail, the shell says why on stderr (the
    broker's log) and the broker runs on outside the cgroup, which
    :meth:`ClusterCgroups.holds` shows: a cluster is never kept from starting for it."""
    return ["/bin/sh", "-c", _JOIN_THEN_EXEC, str(directory), *command]


def cgroup_of(pid: int) -> str | None:
    """The cgroup v2 of ``pid`` as ``/proc/<pid>/cgroup`` names it (``/minibroker-.../...``);
    None when the process is gone."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            return line[3:]
    return None


@dataclass(frozen=True)
class ClusterCgroups:
    """The cgroups of one cluster's brokers, under ``<mount>/minibroker-<key>``."""

    mount: Path
    """The cgroup v2 mount point."""
    mount_root: str
    """The cgroup at the mount's root, as ``/proc/<pid>/cgroup`` names cgroups."""
    key: str

    @classmethod
    def of(cls, data_dir: Path) -> ClusterCgroups | None:
        """The cgroups of the cluster in ``data_dir``, or None where this process cannot
        make cgroups (see :func:`problem`)."""
        mount = cgroup2_mount()
        if problem() is not None or mount is None:
            return None
        return cls(mount[0], mount[1], cluster_key(data_dir))

    @property
    def parent(self) -> Path:
        return self.mount / f"{PREFIX}{self.key}"

    @staticmethod
    def broker_member(broker_id: int) -> str:
        return f"broker-{broker_id}"

    def directory(self, member: str) -> Path:
        """The cgroup directory of ``member`` (``broker-<id>``)."""
        return self.parent / member

    def path(self, member: str) -> str:
        """``member``'s cgroup as iptables' ``--path`` takes it: below the cgroup2 root."""
        return f"{self.mount_root.strip('/')}/{PREFIX}{self.key}/{member}".lstrip("/")

    def create(self, member: str) -> Path | None:
        """Make ``member``'s cgroup if missing; its directory, or None if that fails (the
        process then runs outside one: best effort)."""
        directory = self.directory(member)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
        return directory

    def holds(self, pid: int, member: str) -> bool:
        """Whether process ``pid`` runs in ``member``'s cgroup."""
        return cgroup_of(pid) == "/" + self.path(member)

    def remove(self, timeout: float = _REMOVE_TIMEOUT_S) -> list[str]:
        """Remove the cluster's cgroups, once their processes have gone; returns the ones
        still busy after ``timeout`` (a process left running) or not removable (and why),
        empty when all are gone."""
        if not self.parent.is_dir():
            return []
        deadline = time.monotonic() + timeout
        busy: list[str] = []
        for directory in [*sorted(p for p in self.parent.iterdir() if p.is_dir()), self.parent]:
            while True:
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as err:
                    if err.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                        busy.append(f"{directory} ({err.strerror})")
                        break
                    if time.monotonic() > deadline:
                        busy.append(str(directory))
                        break
                    time.sleep(_POLL_S)
        return busy
