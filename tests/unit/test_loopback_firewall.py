"""The rules of a local partition (deploy/loopback_firewall.py) without iptables: what
``isolation_rules`` builds, read back by a small model of how iptables walks a chain, must
let a packet through exactly when sender and receiver are on the same side; the
``iptables-restore`` scripts install and remove a partition whole; partitions whose maker
died are the ones removed; and a run asking for ``partition`` where the machine cannot
make one is refused before it starts, saying what is missing."""

from __future__ import annotations

import itertools
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from chaos import runner
from chaos.backend import BackendUnavailableError
from deploy import loopback_firewall
from deploy.loopback_firewall import BrokerEndpoints, isolation_rules, restore_script
from deploy.process_cgroups import ClusterCgroups, cluster_key

CHAIN = "MB-0123abcd"
ZOOKEEPER_PORTS = (2181,)
BROKERS = {
    b: BrokerEndpoints(f"minibroker-0123abcd/broker-{b}", (9090 + b, 19090 + b)) for b in (1, 2, 3)
}
CLIENT = None
"""A process in no broker's cgroup: the workload's clients, ZooKeeper, the operator."""


def _verdict(rules: list[list[str]], sender: int | None, port: int) -> str:
    """What the chain does with a TCP packet from ``sender``'s cgroup to ``port``: the
    target of the first rule that matches, ``RETURN`` (back to OUTPUT, let through) when
    none does. ``-m cgroup --path P`` matches P's cgroup and its descendants."""
    cgroup = None if sender is None else BROKERS[sender].cgroup
    for rule in rules:
        assert rule[:4] == ["-A", CHAIN, "-p", "tcp"], rule
        args = dict(zip(rule[4::2], rule[5::2], strict=True))
        if int(args["--dport"]) != port:
            continue
        path = args.get("--path")
        if path is not None and (cgroup is None or not (cgroup + "/").startswith(path + "/")):
            continue
        return args["-j"]
    return "RETURN"


def _side(groups: Sequence[Sequence[int]], process: int | None) -> int:
    """Which group a process is in: clients, ZooKeeper and unlisted brokers are in the first."""
    for i, group in enumerate(groups):
        if process in group:
            return i
    return 0


LAYOUTS = [
    [[1, 2, 3]],
    [[1, 3], [2]],
    [[1], [2, 3]],
    [[1], [2], [3]],
    [[2], [1], [3]],
    [[1], [3]],
    [[], [1, 2]],
]


@pytest.mark.parametrize("groups", LAYOUTS, ids=str)
def test_a_packet_passes_exactly_when_sender_and_receiver_are_on_one_side(
    groups: list[list[int]],
) -> None:
    rules = isolation_rules(CHAIN, groups, BROKERS, ZOOKEEPER_PORTS)
    listeners: list[tuple[int | None, int]] = [(b, p) for b in BROKERS for p in BROKERS[b].ports]
    listeners += [(CLIENT, p) for p in ZOOKEEPER_PORTS]  # ZooKeeper is with the first group
    for sender, (receiver, port) in itertools.product([CLIENT, *BROKERS], listeners):
        together = _side(groups, sender) == _side(groups, receiver)
        verdict = _verdict(rules, sender, port)
        assert verdict == ("RETURN" if together else "DROP"), (groups, sender, receiver, port)


def test_ports_no_one_listens_on_and_a_whole_cluster_have_no_rules() -> None:
    rules = isolation_rules(CHAIN, [[1], [2, 3]], BROKERS, ZOOKEEPER_PORTS)
    for sender in (CLIENT, *BROKERS):
        assert _verdict(rules, sender, 40000) == "RETURN"  # a client's own port: replies pass
    assert isolation_rules(CHAIN, [[1, 2, 3]], BROKERS, ZOOKEEPER_PORTS) == []
    assert isolation_rules(CHAIN, [], BROKERS, ZOOKEEPER_PORTS) == []


def test_one_broker_cut_off_alone_is_these_rules() -> None:
    one = {b: BrokerEndpoints(f"c/broker-{b}", (9090 + b,)) for b in (1, 2)}
    path = ["-m", "cgroup", "--path"]
    assert isolation_rules("MB-x", [[1], [2]], one, (2181,)) == [
        ["-A", "MB-x", "-p", "tcp", "--dport", "9091", *path, "c/broker-2", "-j", "DROP"],
        ["-A", "MB-x", "-p", "tcp", "--dport", "2181", *path, "c/broker-2", "-j", "DROP"],
        ["-A", "MB-x", "-p", "tcp", "--dport", "9092", *path, "c/broker-2", "-j", "RETURN"],
        ["-A", "MB-x", "-p", "tcp", "--dport", "9092", "-j", "DROP"],
    ]


@pytest.mark.parametrize(
    ("groups", "problem"),
    [([[1], [4]], "broker 4 is not one of"), ([[1, 2], [2, 3]], "broker 2 is in two groups")],
)
def test_groups_naming_an_unknown_broker_or_one_twice_are_refused(
    groups: list[list[int]], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        isolation_rules(CHAIN, groups, BROKERS, ZOOKEEPER_PORTS)


def test_the_restore_script_installs_chain_rules_and_jump_in_one_transaction() -> None:
    rules = [["-A", CHAIN, "-p", "tcp", "--dport", "9091", "-j", "DROP"]]
    comment = loopback_firewall.owner_comment(42, 1234)
    assert restore_script(CHAIN, rules, comment) == (
        "*filter\n"
        f":{CHAIN} - [0:0]\n"
        f"-A {CHAIN} -p tcp --dport 9091 -j DROP\n"
        '-I OUTPUT 1 -o lo -m comment --comment "minibroker partition by pid 42 started 1234"'
        f" -j {CHAIN}\n"
        "COMMIT\n"
    )
    with pytest.raises(ValueError, match="cannot pass"):
        restore_script(CHAIN, [["-A", CHAIN, "-m", "comment", "--comment", 'a "b"']], comment)


def _listing(*owners: tuple[str, int, int]) -> list[str]:
    """``iptables -S`` with a chain and its jump per (chain, pid, start ticks)."""
    lines = ["-P INPUT ACCEPT", "-P OUTPUT ACCEPT", "-N DOCKER", "-N MB-notours"]
    lines += [f"-N {chain}" for chain, _, _ in owners]
    lines += [
        f'-A OUTPUT -o lo -m comment --comment "minibroker partition by pid {pid} started '
        f'{ticks}" -j {chain}'
        for chain, pid, ticks in owners
    ]
    lines += ["-A OUTPUT -o docker0 -j DOCKER"]
    return lines


def test_partitions_whose_maker_is_gone_are_removed_and_live_ones_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    live, dead, recycled = "MB-11111111", "MB-22222222", "MB-33333333"
    stray = "MB-44444444"  # a chain no jump leads to (a removal cut short)
    listing = [*_listing((live, 10, 100), (dead, 20, 200), (recycled, 30, 300)), f"-N {stray}"]
    scripts: list[str] = []
    running = {10: 100, 30: 999}  # pid 30 runs, started later: not the maker
    monkeypatch.setattr(loopback_firewall, "_listing", lambda: listing)
    monkeypatch.setattr(loopback_firewall, "_start_ticks", running.get)

    def run(args: list[str], script: str | None = None) -> subprocess.CompletedProcess[str]:
        assert args == ["iptables-restore", "-w", "--noflush"]
        scripts.append(script or "")
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(loopback_firewall, "_run", run)
    assert loopback_firewall.remove_orphans() == [dead, recycled, stray]
    [script] = scripts
    assert script == (
        "*filter\n"
        '-D OUTPUT -o lo -m comment --comment "minibroker partition by pid 20 started 200"'
        f" -j {dead}\n"
        '-D OUTPUT -o lo -m comment --comment "minibroker partition by pid 30 started 300"'
        f" -j {recycled}\n"
        f"-F {dead}\n-X {dead}\n-F {recycled}\n-X {recycled}\n-F {stray}\n-X {stray}\n"
        "COMMIT\n"
    )
    scripts.clear()
    loopback_firewall.heal("11111111")  # the live one, healed by its cluster
    assert scripts[0].splitlines()[1].startswith("-D OUTPUT -o lo")
    assert scripts[0].splitlines()[2:] == [f"-F {live}", f"-X {live}", "COMMIT"]
    scripts.clear()
    loopback_firewall.heal("55555555")  # none: nothing to run
    assert scripts == []


def test_cgroup_names_are_per_cluster_and_below_the_cgroup2_root(tmp_path: Path) -> None:
    key = cluster_key(tmp_path / "a")
    assert re.fullmatch("[0-9a-f]{8}", key)
    assert key == cluster_key(tmp_path / "a" / ".." / "a")  # the resolved data dir
    assert key != cluster_key(tmp_path / "b")
    unified = ClusterCgroups(Path("/sys/fs/cgroup/unified"), "/", key)
    assert unified.path("broker-1") == f"minibroker-{key}/broker-1"
    assert unified.directory("broker-1") == unified.mount / f"minibroker-{key}" / "broker-1"
    nested = ClusterCgroups(Path("/sys/fs/cgroup"), "/machine.slice/box", key)
    assert nested.path("broker-2") == f"machine.slice/box/minibroker-{key}/broker-2"


def test_a_run_asking_for_partitions_where_none_can_be_made_says_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        runner, "partition_problem", lambda: "it needs root to create cgroups (running as uid 1000)"
    )
    settings = runner.RunSettings(out=tmp_path / "run", nemeses=("kill", "split", "partition"))
    with pytest.raises(BackendUnavailableError) as refused:
        runner.run_chaos(settings)
    assert str(refused.value) == (
        "partition, split cannot run on the local backend here: it needs root to create "
        "cgroups (running as uid 1000); or use --backend docker"
    )
    assert not (tmp_path / "run").exists()  # refused before anything started
