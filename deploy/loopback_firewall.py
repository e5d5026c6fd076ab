"""Network partitions between the processes of one machine: an iptables chain per local
cluster that drops loopback packets by the cgroup of the socket that sends them.

Docker partitions a cluster by taking containers off a network; local brokers share
127.0.0.1, so here a partition is a set of rules on what leaves through ``lo``. Each broker
runs in a cgroup of its own (:mod:`deploy.process_cgroups`), and iptables' ``cgroup``
match tells which one sent a packet. For every group but the first (which stays with
ZooKeeper and the clients, as :meth:`chaos.docker_backend.DockerBackend.isolate` has it),
the chain ``MB-<key>`` drops

1. packets from a member's cgroup to the listening ports (gRPC and Kafka) of the brokers
   outside its group, and to ZooKeeper's client ports;
2. packets to a member's listening ports from any cgroup but its group's (the other
   brokers, the workload's clients, the operator's tools).

The rules match every packet, not only new connections, so established connections stall
as they do behind a cut cable; they DROP rather than REJECT, because a real partition is
silent: the sender learns of it from its timeouts. A member's links within its group are
untouched, and replies leave from the listening port, which no rule names.

One jump from ``OUTPUT`` (``-o lo``) leads to the chain; its comment names the process
that made the partition (pid and start time), so that the partition of a process that died
without healing it (a chaos run killed with SIGKILL) is recognised and removed by the next
:func:`remove_orphans`. :func:`isolate` installs chain and jump in one ``iptables-restore``
transaction; :func:`heal` removes both. Root only; :func:`problem` says what is missing.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from proto.errors import MinibrokerError

__all__ = [
    "BrokerEndpoints",
    "LoopbackFirewallError",
    "chain_name",
    "heal",
    "isolate",
    "isolation_rules",
    "problem",
    "remove_orphans",
    "restore_script",
]

CHAIN_PREFIX = "MB-"
_CHAIN = re.compile(r"MB-[0-9a-f]{8}")
_OWNER = re.compile(r"minibroker partition by pid (\d+) started (\d+)")
_TIMEOUT_S = 30.0
"""An iptables command that takes longer waits for the xtables lock in vain."""


class LoopbackFirewallError(MinibrokerError):
    """iptables refused a partition's rules (the message has its own words)."""


@dataclass(frozen=True)
class BrokerEndpoints:
    """What the rules need to know of one broker."""

    cgroup: str
    """Its cgroup below the cgroup2 root, as ``-m cgroup --path`` takes it."""
    ports: tuple[int, ...]
    """The ports it listens on (gRPC, and Kafka's protocol if it runs that listener)."""


def chain_name(key: str) -> str:
    """The cluster's chain: ``MB-`` and the key of :func:`deploy.process_cgroups.cluster_key`."""
    return f"{CHAIN_PREFIX}{key}"


def isolation_rules(
    chain: str,
    groups: Sequence[Sequence[int]],
    brokers: Mapping[int, BrokerEndpoints],
    zookeeper_ports: Sequence[int],
) -> list[list[str]]:
    """The rules (``iptables`` arguments, ``-A <chain> ...``) that cut every group after the
    first off from everything outside it: ZooKeeper and brokers not in ``groups`` stay with
    the first. Drops of a member's own packets come first, then, per listening port of a
    member, a RETURN for each cgroup of its group and a DROP for the rest. A pure function.
    """
    seen: set[int] = set()
    for group in groups:
        for broker in group:
            if broker not in brokers:
                raise ValueError(f"broker {broker} is not one of {sorted(brokers)}")
            if broker in seen:
                raise ValueError(f"broker {broker} is in two groups: {list(groups)}")
            seen.add(broker)
    cut = [sorted(set(g)) for g in groups[1:] if g]

    def rule(port: int, sender: str | None, target: str) -> list[str]:
        sent_by = [] if sender is None else ["-m", "cgroup", "--path", sender]
        return ["-A", chain, "-p", "tcp", "--dport", str(port), *sent_by, "-j", target]

    rules = []
    for group in cut:
        away = [p for b in sorted(brokers) if b not in group for p in brokers[b].ports]
        for member in group:
            sender = brokers[member].cgroup
            rules += [rule(port, sender, "DROP") for port in [*away, *zookeeper_ports]]
    for group in cut:
        for member in group:
            for port in brokers[member].ports:
                rules += [rule(port, brokers[peer].cgroup, "RETURN") for peer in group]
                rules.append(rule(port, None, "DROP"))
    return rules


def owner_comment(pid: int, start_ticks: int) -> str:
    """The jump's comment: who made the partition (pid and start time, against reuse)."""
    return f"minibroker partition by pid {pid} started {start_ticks}"


def restore_script(chain: str, rules: Sequence[Sequence[str]], comment: str) -> str:
    """The ``iptables-restore --noflush`` input that creates (or empties) ``chain``, fills
    it with ``rules`` and jumps to it first thing in ``OUTPUT`` for loopback: one
    transaction, so that a partition is whole or absent."""
    lines = ["*filter", f":{chain} - [0:0]"]
    lines += [_restore_line(r) for r in rules]
    jump = ["-I", "OUTPUT", "1", "-o", "lo", "-m", "comment", "--comment", comment, "-j", chain]
    lines.append(_restore_line(jump))
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"


def _restore_line(args: Sequence[str]) -> str:
    """One command of an ``iptables-restore`` script: its parser knows double quotes only
    (not a shell's single ones), which an argument with a space needs."""
    quoted = []
    for arg in args:
        if '"' in arg or "\\" in arg or "\n" in arg:
            raise ValueError(f"cannot pass {arg!r} to iptables-restore")
        quoted.append(f'"{arg}"' if not arg or any(c.isspace() for c in arg) else arg)
    return " ".join(quoted)


def isolate(
    key: str,
    groups: Sequence[Sequence[int]],
    brokers: Mapping[int, BrokerEndpoints],
    zookeeper_ports: Sequence[int],
) -> None:
    """Partition the cluster ``key`` into ``groups`` (replacing a partition in place)."""
    chain = chain_name(key)
    rules = isolation_rules(chain, groups, brokers, zookeeper_ports)
    heal(key)
    if not rules:
        return
    comment = owner_comment(os.getpid(), _start_ticks(os.getpid()) or 0)
    done = _run(["iptables-restore", "-w", "--noflush"], restore_script(chain, rules, comment))
    if done.returncode != 0:
        raise LoopbackFirewallError(
            f"iptables-restore refused the partition's rules: {_said(done)}"
        )


def heal(key: str) -> None:
    """Remove the cluster's partition, jump and chain; nothing when there is none."""
    _remove([chain_name(key)], _listing())


def remove_orphans() -> list[str]:
    """Remove every partition on this machine whose maker has exited without healing it
    (and chains no jump leads to, left by an interrupted removal); returns their chains."""
    listing = _listing()
    chains = {line.split()[1] for line in listing if _is_ours_new(line)}
    alive = set()
    for line in listing:
        jump = _jump_of(line)
        match = _OWNER.search(line)
        if jump is not None and match is not None:
            pid, ticks = int(match.group(1)), int(match.group(2))
            if _start_ticks(pid) == ticks:
                alive.add(jump)
    orphans = sorted(chains - alive)
    _remove(orphans, listing)
    return orphans


@cache
def problem() -> str | None:
    """Why this process cannot partition a local cluster's loopback traffic (None: it can).
    Tried once per process: a throw-away chain with a ``cgroup`` match is installed and
    removed again."""
    if os.geteuid() != 0:
        return f"iptables needs root (running as uid {os.geteuid()})"
    for tool in ("iptables", "iptables-restore"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: apt-get install iptables)"
    chain = f"MBP-{os.getpid()}"
    probe = ["-A", chain, "-o", "lo", "-p", "tcp", "--dport", "9", "-m", "cgroup",
             "--path", "/", "-j", "DROP"]  # fmt: skip
    script = f"*filter\n:{chain} - [0:0]\n{_restore_line(probe)}\nCOMMIT\n"
    done = _run(["iptables-restore", "-w", "--noflush"], script)
    if done.returncode != 0:
        return f"iptables cannot match packets by cgroup here: {_said(done)}"
    _run(["iptables-restore", "-w", "--noflush"], f"*filter\n-F {chain}\n-X {chain}\nCOMMIT\n")
    return None


# -- internals ---------------------------------------------------------------------------


def _run(args: list[str], script: str | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            args, input=script, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return subprocess.CompletedProcess(args, 1, "", str(err))


def _said(done: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in done.stderr.splitlines() if ln.strip() and not ln.startswith("#")]
    return " ".join(lines)[-300:] or f"exit status {done.returncode}"


def _listing() -> list[str]:
    """``iptables -S`` of the filter table; empty where iptables cannot be run (then there
    is nothing of ours to remove either)."""
    if os.geteuid() != 0 or shutil.which("iptables") is None:
        return []
    done = _run(["iptables", "-w", "-S"])
    return done.stdout.splitlines() if done.returncode == 0 else []


def _is_ours_new(line: str) -> bool:
    parts = line.split()
    return len(parts) == 2 and parts[0] == "-N" and _CHAIN.fullmatch(parts[1]) is not None


def _jump_of(line: str) -> str | None:
    """The chain of ours that an ``OUTPUT`` rule of the listing jumps to."""
    parts = line.split()
    if len(parts) < 4 or parts[:2] != ["-A", "OUTPUT"] or parts[-2] != "-j":
        return None
    return parts[-1] if _CHAIN.fullmatch(parts[-1]) else None


def _remove(chains: Sequence[str], listing: list[str]) -> None:
    """Delete the jumps to ``chains``, then the chains, in one transaction."""
    wanted = set(chains)
    commands = [["-D", *shlex.split(line)[1:]] for line in listing if _jump_of(line) in wanted]
    for chain in sorted(wanted):
        if f"-N {chain}" in listing:
            commands += [["-F", chain], ["-X", chain]]
    if not commands:
        return
    script = "*filter\n" + "".join(_restore_line(c) + "\n" for c in commands) + "COMMIT\n"
    done = _run(["iptables-restore", "-w", "--noflush"], script)
    if done.returncode != 0:
        raise LoopbackFirewallError(f"cannot remove the partition {sorted(wanted)}: {_said(done)}")


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot, ``/proc/<pid>/stat`` field 22); None
    when it does not run. A pid and its start time name one process, recycled pids apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])
