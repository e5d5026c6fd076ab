"""The client commands as a user runs them: ``minibroker topics|produce|consume`` as
subprocesses against a local cluster started with ``minibroker cluster up`` (one per module:
ZooKeeper and three brokers on free ports)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from client.partitioner import partition_for_key
from tests.helpers import free_port_run, minibroker, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


class LocalCluster:
    def __init__(self, data_dir: Path, base: int) -> None:
        self.data_dir = data_dir
        self.env = {
            "MINIBROKER_BOOTSTRAP": ",".join(f"127.0.0.1:{base + i}" for i in range(3)),
            "MINIBROKER_ZOOKEEPER": f"127.0.0.1:{base + 3}",
            "MINIBROKER_DATA_DIR": str(data_dir),
        }

    def run(
        self, *args: str, input_text: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return minibroker(*args, input_text=input_text, timeout=timeout, env=self.env)

    def ok(self, *args: str, input_text: str | None = None) -> str:
        result = self.run(*args, input_text=input_text)
        assert result.returncode == 0, f"{args}: {result.stderr}"
        return result.stdout

    def popen(self, *args: str, out: Path, stdin: int | None = None) -> subprocess.Popen[bytes]:
        """Start a long-running command; stdout goes to ``out``, stderr next to it."""
        with out.open("wb") as stdout, out.with_suffix(".err").open("wb") as stderr:
            return subprocess.Popen(
                [sys.executable, "-m", "client.cli", *args],
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                env={**os.environ, **self.env},
            )

    def leader_of(self, topic: str, partition: int = 0) -> int:
        for line in self.ok("topics", "describe", topic).splitlines():
            fields = dict(f.split(": ", 1) for f in line.strip().split("\t") if ": " in f)
            if fields.get("Partition") == str(partition):
                return -1 if fields["Leader"] == "none" else int(fields["Leader"])
        raise AssertionError(f"{topic}-{partition} not described")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    base = free_port_run(4)
    local = LocalCluster(tmp_path_factory.mktemp("cli") / "cluster", base)
    local.ok("cluster", "up", "--base-port", str(base), "--zookeeper-port", str(base + 3))
    try:
        yield local
    finally:
        local.run("cluster", "down")


def _one_line_error(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert expected in lines[0], lines[0]


def test_create_describe_produce_consume_with_keys(cluster: LocalCluster) -> None:
    assert "Created topic keyed." in cluster.ok(
        "topics", "create", "keyed", "--partitions", "3", "--replication-factor", "3"
    )
    described = cluster.ok("topics", "describe", "keyed")
    assert "PartitionCount: 3\tReplicationFactor: 3" in described
    assert described.count("Isr: ") == 3
    assert "keyed" in cluster.ok("topics", "list").split()

    lines = [f"key-{i % 10}:value-{i}" for i in range(300)]
    cluster.ok("produce", "keyed", "--key-separator", ":", input_text="\n".join(lines) + "\n")
    out = cluster.ok(
        "consume", "keyed", "--from-beginning", "--timeout-ms", "3000",
        "--print-key", "--print-offset",
    )  # fmt: skip
    seen: dict[str, list[int]] = {}
    for line in out.splitlines():
        where, key, value = line.split("\t")
        partition = int(where.split(":")[0])
        assert partition == partition_for_key(key.encode(), 3), line  # murmur2, as Kafka
        seen.setdefault(key, []).append(int(value.removeprefix("value-")))
    assert sum(len(v) for v in seen.values()) == 300
    for key, values in seen.items():
        assert values == sorted(values), f"order of {key} not kept"
        assert len(values) == 30


def test_consumer_group_splits_rebalances_and_resumes_from_committed_offsets(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    topic, group = "grouped", "readers"
    cluster.ok("topics", "create", topic, "--partitions", "6", "--replication-factor", "2")

    def produce(start: int, count: int) -> None:
        lines = "".join(f"k{i}:v{i}\n" for i in range(start, start + count))
        cluster.ok("produce", topic, "--key-separator", ":", input_text=lines)

    outputs = [tmp_path / f"member-{i}.out" for i in range(3)]
    members = [
        cluster.popen("consume", topic, "--group", group, "--print-offset", out=path)
        for path in outputs
    ]

    def read(path: Path) -> list[tuple[int, str]]:
        text = path.read_text() if path.exists() else ""
        return [
            (int(line.split("\t")[0].split(":")[0]), line.split("\t")[1])
            for line in text.splitlines()
            if "\t" in line
        ]

    try:
        # All three have joined when each owns its two partitions in ZooKeeper; records
        # written from then on are split 2/2/2.
        wait_for(lambda: len(_owners(cluster, group, topic)) == 6, 60, message="6 owned partitions")
        produce(0, 600)
        wait_for(lambda: sum(len(read(p)) for p in outputs) >= 600, 60, message="600 read")
        partitions = [{p for p, _ in read(path)} for path in outputs]
        assert sorted(len(p) for p in partitions) == [2, 2, 2], partitions
        assert set().union(*partitions) == set(range(6))

        # One member leaves cleanly (Ctrl-C): the other two take 3 partitions each.
        members[0].send_signal(signal.SIGINT)
        assert members[0].wait(30) in (0, 130)
        wait_for(lambda: _owner_ids(cluster, group, topic) == 2, 60, message="two members own all")
        produce(600, 300)
        wait_for(lambda: sum(len(read(p)) for p in outputs) >= 900, 60, message="900 read")
        values = [v for path in outputs for _, v in read(path)]
        assert sorted(values) == sorted(f"v{i}" for i in range(900)), "not exactly once"
    finally:
        for member in members:
            if member.poll() is None:
                member.send_signal(signal.SIGINT)
        for member in members:
            member.wait(30)

    # Committed offsets survive: a new member of the group starts where the others stopped.
    produce(900, 10)
    rest = cluster.ok("consume", topic, "--group", group, "--timeout-ms", "4000")
    assert sorted(rest.split()) == sorted(f"v{i}" for i in range(900, 910))


def _owners(cluster: LocalCluster, group: str, topic: str) -> list[bytes]:
    """The member id owning each owned partition of ``topic`` in ``group``."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=cluster.env["MINIBROKER_ZOOKEEPER"])
    zk.start(10)
    try:
        path = f"/consumers/{group}/owners/{topic}"
        children = zk.get_children(path) if zk.exists(path) else []
        return [zk.get(f"{path}/{c}")[0] for c in children]
    finally:
        zk.stop()
        zk.close()


def _owner_ids(cluster: LocalCluster, group: str, topic: str) -> int:
    """How many distinct members own the topic's partitions (all six owned), else 0."""
    owners = _owners(cluster, group, topic)
    return len(set(owners)) if len(owners) == 6 else 0


def test_user_errors_are_one_line_and_a_non_zero_exit(cluster: LocalCluster) -> None:
    unreachable = minibroker(
        "topics", "list", env={**cluster.env, "MINIBROKER_BOOTSTRAP": "127.0.0.1:1"}
    )
    _one_line_error(unreachable, "cannot reach any broker")
    _one_line_error(cluster.run("produce", "no-such-topic", input_text="x\n"), "unknown topic")
    _one_line_error(cluster.run("consume", "no-such-topic", "--timeout-ms", "500"), "unknown topic")
    _one_line_error(
        cluster.run("topics", "create", "wide", "--replication-factor", "4"),
        "replication factor 4 larger than available brokers: 3",
    )
    for bad in ("bad/name", ".", "..", "x" * 250, "sp ace"):
        _one_line_error(cluster.run("topics", "create", bad), "topic name")
    # acks=all with fewer in-sync replicas than min.insync.replicas: refused, retriable,
    # and reported once the delivery timeout runs out.
    cluster.ok("topics", "create", "lonely", "--config", "min.insync.replicas=2")
    refused = cluster.run(
        "produce", "lonely", "--acks", "all", "--delivery-timeout-ms", "3000", input_text="x\n"
    )
    _one_line_error(refused, "NOT_ENOUGH_REPLICAS")


def test_producer_rides_through_a_leader_kill_and_nothing_is_lost_or_duplicated(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    topic = "survivor"
    cluster.ok(
        "topics", "create", topic, "--replication-factor", "3",
        "--config", "min.insync.replicas=2",
    )  # fmt: skip
    leader = cluster.leader_of(topic)
    log = tmp_path / "producer.out"
    producer = cluster.popen("produce", topic, "--acks", "all", stdin=subprocess.PIPE, out=log)
    assert producer.stdin is not None
    written = threading.Event()

    def feed() -> None:
        assert producer.stdin is not None
        for i in range(3000):
            producer.stdin.write(f"line-{i}\n".encode())
            if i % 100 == 99:
                producer.stdin.flush()
                time.sleep(0.2)  # a steady stream: the kill lands in the middle
            if i == 1000:
                written.set()
        producer.stdin.close()

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        assert written.wait(60)
        cluster.ok("cluster", "kill", str(leader))
        feeder.join(120)
        assert producer.wait(120) == 0, log.with_suffix(".err").read_text()
    finally:
        if producer.poll() is None:
            producer.kill()
        feeder.join(10)
    wait_for(lambda: cluster.leader_of(topic) not in (leader, -1), 30, message="a new leader")
    out = cluster.ok("consume", topic, "--from-beginning", "--timeout-ms", "3000")
    assert out.split() == [f"line-{i}" for i in range(3000)]  # all, in order, once each
    cluster.ok("cluster", "start", str(leader))
