"""The client commands as a user runs them: ``minibroker topics|produce|consume`` as
subprocesses against a local cluster started with ``minibroker cluster up`` (one per module:
ZooKeeper and three brokers on free ports)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from client.partitioner import partition_for_key
from client.range_assignor import range_assign
from proto.zk import znodes
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
    base = free_port_run(7)
    local = LocalCluster(tmp_path_factory.mktemp("cli") / "cluster", base)
    # Without auto topic creation (Kafka's default, tested in test_auto_topic_creation.py),
    # so that a topic these tests never created stays unknown.
    local.ok(
        "cluster", "up", "--base-port", str(base), "--zookeeper-port", str(base + 3),
        "--kafka-base-port", str(base + 4), "--override", "auto.create.topics.enable=false",
    )  # fmt: skip
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
        # --from-beginning: a partition a member takes over before anything was committed
        # starts at the earliest offset, not at the end (which would skip records
        # produced while the group was still rebalancing).
        cluster.popen(
            "consume", topic, "--group", group, "--from-beginning", "--print-offset", out=path
        )
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
        wait_for(lambda: _settled(cluster, group, topic, 3), 60, message="a 2/2/2 split")
        produce(0, 600)
        wait_for(lambda: sum(len(read(p)) for p in outputs) >= 600, 60, message="600 read")
        partitions = [{p for p, _ in read(path)} for path in outputs]
        assert sorted(len(p) for p in partitions) == [2, 2, 2], partitions
        assert set().union(*partitions) == set(range(6))

        # One member leaves cleanly (Ctrl-C): the other two take 3 partitions each.
        members[0].send_signal(signal.SIGINT)
        assert members[0].wait(30) in (0, 130)
        wait_for(lambda: _settled(cluster, group, topic, 2), 60, message="a 3/3 split")
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


def _settled(cluster: LocalCluster, group: str, topic: str, members: int) -> bool:
    """``members`` members are registered and the owner znodes are exactly their range
    assignment of the topic's 6 partitions: the group's rebalance is over.

    Owning all 6 partitions is not enough: the first member to join owns them all until
    the others have joined, and a member that has not yet seen a join still holds its
    old share. Owner and id znodes are ephemeral, so one listed may be gone by the time it
    is read: it simply is not there at this instant.
    """
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError

    zk = KazooClient(hosts=cluster.env["MINIBROKER_ZOOKEEPER"])
    zk.start(10)
    try:
        try:
            ids = zk.get_children(f"/consumers/{group}/ids")
            owned = zk.get_children(f"/consumers/{group}/owners/{topic}")
        except NoNodeError:
            return False
        owners: dict[int, str] = {}
        for child in owned:
            try:
                owners[int(child)] = zk.get(f"/consumers/{group}/owners/{topic}/{child}")[
                    0
                ].decode()
            except NoNodeError:
                continue
    finally:
        zk.stop()
        zk.close()
    if len(ids) != members:
        return False
    expected = range_assign({member: [topic] for member in ids}, {topic: 6})
    return owners == {tp.partition: m for m, tps in expected.items() for tp in tps}


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


# -- the first hour as a Kafka user --------------------------------------------------


def _defaults_env(cluster: LocalCluster) -> dict[str, str]:
    """Only the data dir: no bootstrap server or ZooKeeper given (empty is unset)."""
    return {
        "MINIBROKER_BOOTSTRAP": "",
        "MINIBROKER_ZOOKEEPER": "",
        "MINIBROKER_DATA_DIR": str(cluster.data_dir),
    }


def test_default_bootstrap_is_every_local_broker_so_killing_broker_1_breaks_no_command(
    cluster: LocalCluster,
) -> None:
    env = _defaults_env(cluster)

    def ok(*args: str, input_text: str | None = None) -> str:
        result = minibroker(*args, input_text=input_text, env=env)
        assert result.returncode == 0, f"{args}: {result.stderr}"
        return result.stdout

    # ZooKeeper's address comes from cluster.json too (topics create writes there).
    ok("topics", "create", "after-kill", "--partitions", "2", "--replication-factor", "3")
    cluster.ok("cluster", "kill", "1")
    try:
        started = time.monotonic()
        ok("produce", "after-kill", "--data-dir", str(cluster.data_dir), input_text="a\nb\nc\n")
        assert time.monotonic() - started < 45  # not the 60 s wait for a producer id
        out = ok("consume", "after-kill", "--from-beginning", "--timeout-ms", "3000")
        assert sorted(out.split()) == ["a", "b", "c"]
        assert "after-kill" in ok("topics", "list").split()
    finally:
        cluster.ok("cluster", "start", "1")


def test_produce_to_no_reachable_broker_fails_at_once_and_an_explicit_bootstrap_wins(
    cluster: LocalCluster,
) -> None:
    env = _defaults_env(cluster)  # cluster.json names live brokers: the option must win
    for args in (
        ["produce", "t", "--bootstrap-server", "127.0.0.1:1"],
        ["perf", "produce", "t", "--bootstrap-server", "127.0.0.1:1", "--num-records", "5"],
    ):
        started = time.monotonic()
        result = minibroker(*args, input_text="x\n", env=env)
        elapsed = time.monotonic() - started
        _one_line_error(result, "cannot reach any broker: 127.0.0.1:1")
        assert "is the cluster running?" in result.stderr
        assert elapsed < 20, elapsed  # was 60 s: the producer's max_block_ms
    started = time.monotonic()
    result = minibroker(
        "produce", "t", input_text="x\n", env={**env, "MINIBROKER_BOOTSTRAP": "127.0.0.1:1"}
    )
    _one_line_error(result, "cannot reach any broker: 127.0.0.1:1")
    assert time.monotonic() - started < 20


def test_consume_partition_from_beginning_starts_at_the_earliest_offset(
    cluster: LocalCluster,
) -> None:
    cluster.ok("topics", "create", "early", "--partitions", "2")
    cluster.ok("produce", "early", "--partition", "1", input_text="one\ntwo\nthree\n")
    out = cluster.ok(
        "consume", "early", "--partition", "1", "--from-beginning",
        "--max-messages", "3", "--timeout-ms", "10000",
    )  # fmt: skip
    assert out.split() == ["one", "two", "three"]


def test_consume_of_an_unknown_topic_gives_up_within_timeout_ms(cluster: LocalCluster) -> None:
    started = time.monotonic()
    result = cluster.run("consume", "never-created", "--timeout-ms", "300")
    elapsed = time.monotonic() - started
    _one_line_error(result, "unknown topic 'never-created' (not in the cluster after 300 ms")
    assert elapsed < 8, elapsed  # was 10 s: the consumer's default_api_timeout_ms


def test_consume_with_a_group_of_an_unknown_topic_is_an_error_and_creates_no_group(
    cluster: LocalCluster,
) -> None:
    result = cluster.run(
        "consume", "--topic", "nosuch", "--group", "g-nosuch", "--timeout-ms", "300"
    )
    _one_line_error(result, "unknown topic 'nosuch' (not in the cluster after 300 ms")
    zk = KazooClient(hosts=cluster.env["MINIBROKER_ZOOKEEPER"])
    zk.start(10)
    try:
        assert zk.exists(f"{znodes.CONSUMERS_PATH}/g-nosuch") is None
    finally:
        zk.stop()
        zk.close()


def test_kafka_habits_topic_option_properties_and_perf_count_names(cluster: LocalCluster) -> None:
    cluster.ok("topics", "create", "habits")
    cluster.ok(
        "produce", "--topic", "habits",
        "--property", "parse.key=true", "--property", "key.separator=:",
        input_text="k1:v1\nk2:v2\n",
    )  # fmt: skip
    out = cluster.ok(
        "consume", "--topic", "habits", "--from-beginning", "--timeout-ms", "3000",
        "--property", "print.key=true", "--property", "key.separator==",
        "--property", "print.offset=true",
    )  # fmt: skip
    assert out.splitlines() == ["0:0\tk1=v1", "0:1\tk2=v2"]
    produced = cluster.ok("perf", "produce", "--topic", "habits", "--messages", "50")
    assert produced.startswith("50 records in ")
    bulk = cluster.ok("perf", "produce", "--topic", "habits", "--messages", "30", "--bulk")
    assert bulk.startswith("30 records in ")
    consumed = cluster.ok("perf", "consume", "habits", "--num-records", "82")
    assert consumed.startswith("82 records in ")
    # --json: one object per run, so runs can be compared.
    as_json = json.loads(cluster.ok("perf", "produce", "habits", "--messages", "20", "--json"))
    assert as_json["records"] == 20
    assert as_json["records_per_s"] > 0
    assert set(as_json["latency_ms"]) == {"p50", "p95", "p99", "max"}
    read = json.loads(cluster.ok("perf", "consume", "habits", "--num-records", "102", "--json"))
    assert (read["records"], "latency_ms" in read) == (102, False)
