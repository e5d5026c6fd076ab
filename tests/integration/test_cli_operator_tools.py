"""The operator tools as a user runs them, against a real cluster (``minibroker cluster up``:
ZooKeeper and three broker processes on free ports, one per module): ``consumer-groups``
(minibroker's ZooKeeper groups, and Kafka clients' groups through the Kafka listener:
confluent-kafka and kafka-python), ``topics alter``, ``configs`` (changes that take effect
without a restart), ``topics describe``'s configs, and ``cluster status`` without
cluster.json and with hostile znodes.

Tests that kill a broker start it again and wait for it before they return, so the others
find three brokers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import confluent_kafka
import pytest
from kazoo.client import KazooClient

from proto.topic_partition import TopicPartition
from proto.zk import znodes
from proto.zk.sync_client import (
    kazoo_client,
    read_partition_state,
    read_registered_brokers,
)
from tests.helpers import free_port_run, minibroker, wait_for
from tests.kafka_group_member import GroupMember

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


class CliCluster:
    """A cluster of ``minibroker cluster up``, driven by the CLI as a user drives it."""

    def __init__(self, data_dir: Path, base: int) -> None:
        self.data_dir = data_dir
        self.zookeeper = f"127.0.0.1:{base + 3}"
        self.env = {
            "MINIBROKER_BOOTSTRAP": ",".join(f"127.0.0.1:{base + i}" for i in range(3)),
            "MINIBROKER_ZOOKEEPER": self.zookeeper,
            "MINIBROKER_DATA_DIR": str(data_dir),
        }

    def run(
        self, *args: str, input_text: str | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return minibroker(
            *args, input_text=input_text, timeout=120, env={**self.env, **(env or {})}
        )

    def ok(self, *args: str, input_text: str | None = None) -> str:
        result = self.run(*args, input_text=input_text)
        assert result.returncode == 0, f"{args}: {result.stderr}"
        return result.stdout

    def popen(self, *args: str, out: Path) -> subprocess.Popen[bytes]:
        with out.open("wb") as stdout, out.with_suffix(".err").open("wb") as stderr:
            return subprocess.Popen(
                [sys.executable, "-m", "client.cli", *args],
                stdout=stdout,
                stderr=stderr,
                env={**os.environ, **self.env},
            )

    @contextmanager
    def zk(self) -> Iterator[KazooClient]:
        with kazoo_client(self.zookeeper) as client:
            yield client

    def partitions(self, topic: str) -> dict[int, dict[str, str]]:
        """``topics describe``'s partition lines: partition -> Leader, Replicas, Isr."""
        found = {}
        for line in self.ok("topics", "describe", topic).splitlines():
            fields = dict(f.split(": ", 1) for f in line.strip().split("\t") if ": " in f)
            if "Partition" in fields:
                found[int(fields["Partition"])] = fields
        return found

    def leader(self, topic: str, partition: int = 0) -> int:
        return int(self.partitions(topic)[partition]["Leader"])

    def segments(self, broker: int, topic: str, partition: int = 0) -> int:
        directory = self.data_dir / f"broker-{broker}" / f"{topic}-{partition}"
        return len(list(directory.glob("*.log")))

    def produce(self, topic: str, count: int, *extra: str) -> None:
        """``count`` records of ~100 bytes, each its own batch."""
        lines = "".join(f"{i:05d}-{'x' * 94}\n" for i in range(count))
        self.ok("produce", topic, "--linger-ms", "0", "--batch-size", "1", *extra, input_text=lines)

    def kill(self, broker: int) -> None:
        self.ok("cluster", "kill", str(broker))
        wait_for(lambda: broker not in self.registered(), 30, message=f"broker {broker} gone")

    def start(self, broker: int) -> None:
        self.ok("cluster", "start", str(broker))

    def kafka_bootstrap(self) -> str:
        """Every broker's Kafka listener, as its registration advertises it."""
        addresses = []
        with self.zk() as zk:
            for broker, registered in read_registered_brokers(zk).require().items():
                endpoint = registered.kafka_endpoint
                assert endpoint is not None, f"broker {broker} has no Kafka listener"
                addresses.append(f"{endpoint[0]}:{endpoint[1]}")
        return ",".join(addresses)

    def committed(self, group: str, topic: str, partitions: int) -> dict[int, int | None]:
        """The group's committed offsets as Kafka's clients read them (None: nothing)."""
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": self.kafka_bootstrap(), "group.id": group}
        )
        try:
            asked = [confluent_kafka.TopicPartition(topic, p) for p in range(partitions)]
            found = consumer.committed(asked, timeout=30)
        finally:
            consumer.close()
        return {tp.partition: tp.offset if tp.offset >= 0 else None for tp in found}

    def registered(self) -> set[int]:
        with self.zk() as zk:
            return {int(b) for b in zk.get_children(znodes.BROKER_IDS_PATH)}

    def wait_for_full_isr(self, topic: str) -> None:
        def full() -> bool:
            return all(
                set(p["Isr"].split(",")) == set(p["Replicas"].split(","))
                for p in self.partitions(topic).values()
            )

        wait_for(full, 60, interval=0.5, message=f"every replica of {topic} back in the ISR")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliCluster]:
    base = free_port_run(7)
    local = CliCluster(tmp_path_factory.mktemp("ops") / "cluster", base)
    local.ok(
        "cluster", "up", "--base-port", str(base), "--zookeeper-port", str(base + 3),
        "--kafka-base-port", str(base + 4),
        "--override", "log.retention.check.interval.ms=300",
        "--override", "zookeeper.session.timeout.ms=3000",
        # Kafka clients' groups: tests.kafka_group_member's 3 s sessions, a short first join.
        "--override", "group.min.session.timeout.ms=1000",
        "--override", "group.initial.rebalance.delay.ms=300",
    )  # fmt: skip
    try:
        yield local
    finally:
        local.run("cluster", "down")


def _one_line_error(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert expected in lines[0], lines[0]


def _group_rows(described: str, group: str) -> list[list[str]]:
    """The data rows of ``consumer-groups --describe``: GROUP TOPIC PARTITION CURRENT-OFFSET
    LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID."""
    lines = described.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("GROUP"))
    assert lines[header].split() == [
        "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
        "HOST", "CLIENT-ID",
    ]  # fmt: skip
    rows = [line.split() for line in lines[header + 1 :] if line.strip()]
    assert all(row[0] == group for row in rows), rows
    return rows


# -- consumer-groups ---------------------------------------------------------------------------


def test_consumer_group_lag_after_a_consumer_stops_and_a_reset_to_earliest_rereads_everything(
    cluster: CliCluster,
) -> None:
    topic, group = "lagged", "lag-readers"
    cluster.ok("topics", "create", topic, "--partitions", "3", "--replication-factor", "2")
    produced, consumed = 30, 12
    lines = "".join(f"k{i}:v{i}\n" for i in range(produced))
    cluster.ok("produce", topic, "--key-separator", ":", input_text=lines)
    out = cluster.ok(
        "consume", topic, "--group", group, "--from-beginning", "--max-messages", str(consumed)
    )
    assert len(out.splitlines()) == consumed

    assert group in cluster.ok("consumer-groups", "--list").split()
    described = cluster.ok("consumer-groups", "--describe", "--group", group)
    assert f"Consumer group '{group}' has no active members." in described
    rows = _group_rows(described, group)
    assert sorted(int(row[2]) for row in rows) == [0, 1, 2]
    assert sum(int(row[3]) for row in rows) == consumed  # CURRENT-OFFSET
    assert sum(int(row[4]) for row in rows) == produced  # LOG-END-OFFSET
    assert sum(int(row[5]) for row in rows) == produced - consumed  # LAG
    assert {row[6] for row in rows} == {"-"}  # nobody owns them any more

    # Without --execute: the plan only, nothing written.
    dry = cluster.run(
        "consumer-groups", "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest"
    )
    assert dry.returncode == 0, dry.stderr
    assert "No action will be performed" in dry.stderr
    assert [line.split()[3] for line in dry.stdout.splitlines()[1:]] == ["0", "0", "0"]
    described = cluster.ok("consumer-groups", "--describe", "--group", group)
    assert sum(int(row[3]) for row in _group_rows(described, group)) == consumed

    cluster.ok(
        "consumer-groups", "--reset-offsets", "--group", group, "--topic", topic,
        "--to-earliest", "--execute",
    )  # fmt: skip
    rows = _group_rows(cluster.ok("consumer-groups", "--describe", "--group", group), group)
    assert [row[3] for row in rows] == ["0", "0", "0"]
    again = cluster.ok("consume", topic, "--group", group, "--timeout-ms", "3000")
    assert sorted(again.splitlines()) == sorted(f"v{i}" for i in range(produced))


def test_reset_offsets_is_refused_while_the_group_has_a_live_member(
    cluster: CliCluster, tmp_path: Path
) -> None:
    topic, group = "busy", "busy-readers"
    cluster.ok("topics", "create", topic, "--replication-factor", "2")
    cluster.ok("produce", topic, input_text="a\nb\n")
    member = cluster.popen("consume", topic, "--group", group, out=tmp_path / "member.out")
    try:

        def owned() -> list[list[str]]:
            result = cluster.run("consumer-groups", "--describe", "--group", group)
            if result.returncode != 0:
                return []  # the group's znodes are not there yet
            rows = _group_rows(result.stdout, group)
            return rows if rows and rows[0][6].startswith(f"{group}_") else []

        [row] = wait_for(owned, 60, interval=0.5, message="the member owns partition 0")
        refused = cluster.run(
            "consumer-groups", "--reset-offsets", "--group", group, "--topic", topic,
            "--to-earliest", "--execute",
        )  # fmt: skip
        _one_line_error(
            refused,
            f"Assignments can only be reset if the group '{group}' is inactive, but it has "
            f"1 active member(s): {row[6]}",
        )
    finally:
        member.send_signal(signal.SIGINT)  # Ctrl-C: it commits and leaves the group
        member.wait(60)
    wait_for(
        lambda: (
            "has no active members" in cluster.ok("consumer-groups", "--describe", "--group", group)
        ),
        30,
        interval=0.5,
    )
    # Once it left, the same reset goes through.
    cluster.ok(
        "consumer-groups", "--reset-offsets", "--group", group, "--topic", topic,
        "--to-offset", "1", "--execute",
    )  # fmt: skip
    rows = _group_rows(cluster.ok("consumer-groups", "--describe", "--group", group), group)
    assert rows == [[group, topic, "0", "1", "2", "1", "-", "-", "-"]]


def _listed(cluster: CliCluster) -> dict[str, list[str]]:
    """``consumer-groups --list``: group -> [TYPE, STATE]."""
    lines = cluster.ok("consumer-groups", "--list").splitlines()
    assert lines[0].split() == ["GROUP", "TYPE", "STATE"]
    return {line.split()[0]: line.split()[1:] for line in lines[1:]}


def test_a_live_confluent_kafka_group_is_listed_described_and_not_reset_under_it(
    cluster: CliCluster,
) -> None:
    topic, group = "ck-events", "billing-ck"
    cluster.ok("topics", "create", topic, "--partitions", "3", "--replication-factor", "2")
    cluster.ok("produce", topic, input_text="".join(f"e{i}\n" for i in range(30)))
    member = GroupMember(cluster.kafka_bootstrap(), group, topic, client_id="billing-app")
    try:
        wait_for(
            lambda: member.snapshot()[0] == [0, 1, 2] and len(member.snapshot()[1]) >= 30,
            90,
            interval=0.2,
            message=lambda: f"the member to hold 0-2 and read 30 records: {member.snapshot()[0]}",
        )

        def all_committed() -> list[list[str]]:
            described = cluster.ok("consumer-groups", "--describe", "--group", group)
            assert "has no active members" not in described, described
            rows = _group_rows(described, group)
            return rows if sum(int(r[3]) for r in rows if r[3] != "-") == 30 else []

        rows = wait_for(all_committed, 60, interval=0.5, message="its commits of all 30")
        assert [r[1:3] for r in rows] == [[topic, "0"], [topic, "1"], [topic, "2"]]
        # LAG: it read everything (a partition the producer put nothing in has no commit).
        assert {r[5] for r in rows if r[3] != "-"} == {"0"}, rows
        [consumer_id] = {r[6] for r in rows}
        assert consumer_id.startswith("billing-app-"), consumer_id  # one member holds all 3
        assert {(r[7], r[8]) for r in rows} == {("/127.0.0.1", "billing-app")}  # HOST CLIENT-ID
        assert _listed(cluster)[group] == ["kafka", "Stable"]
        state = cluster.ok("consumer-groups", "--describe", "--group", group, "--state")
        assert state.splitlines()[1].split()[-3:] == ["range", "Stable", "1"], state
        members = cluster.ok("consumer-groups", "--describe", "--group", group, "--members")
        assert members.splitlines()[1].split() == [
            group, consumer_id, "/127.0.0.1", "billing-app", "3",
        ], members  # fmt: skip

        before = cluster.committed(group, topic, 3)
        refused = cluster.run(
            "consumer-groups", "--reset-offsets", "--group", group, "--topic", topic,
            "--to-earliest", "--execute",
        )  # fmt: skip
        _one_line_error(
            refused,
            f"Assignments can only be reset if the group '{group}' is inactive, but the "
            "current state is Stable.",
        )
        assert cluster.committed(group, topic, 3) == before
        assert set(before.values()) != {0}
    finally:
        member.stop()  # closes the consumer: it leaves the group

    wait_for(
        lambda: (
            "has no active members" in cluster.ok("consumer-groups", "--describe", "--group", group)
        ),
        30,
        interval=0.5,
        message="the group empty after its member closed",
    )
    assert _listed(cluster)[group] == ["kafka", "Empty"]
    cluster.ok(
        "consumer-groups", "--reset-offsets", "--group", group, "--topic", topic,
        "--to-earliest", "--execute",
    )  # fmt: skip
    assert cluster.committed(group, topic, 3) == {0: 0, 1: 0, 2: 0}


# kafka-python 3.0 calls importlib.resources' legacy API when imported (its own warning).
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_kafka_python_group_member_is_described_with_its_host_client_id_and_partitions(
    cluster: CliCluster,
) -> None:
    import kafka  # kafka-python

    topic, group = "kp-events", "kp-readers"
    cluster.ok("topics", "create", topic, "--partitions", "2", "--replication-factor", "2")
    cluster.ok("produce", topic, input_text="a\nb\nc\nd\n")
    consumer = kafka.KafkaConsumer(
        topic,
        bootstrap_servers=cluster.kafka_bootstrap().split(","),
        group_id=group,
        client_id="kp-app",
        auto_offset_reset="earliest",
    )
    stop = threading.Event()
    assigned: list[set[int]] = [set()]

    def poll() -> None:
        try:
            while not stop.is_set():
                consumer.poll(timeout_ms=200)
                assigned[0] = {tp.partition for tp in consumer.assignment()}
        finally:
            consumer.close()

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        wait_for(lambda: assigned[0] == {0, 1}, 90, interval=0.2, message="kafka-python assigned")

        def described() -> list[list[str]]:
            rows = _group_rows(cluster.ok("consumer-groups", "--describe", "--group", group), group)
            return rows if all(r[6] != "-" for r in rows) and len(rows) == 2 else []

        rows = wait_for(described, 60, interval=0.5, message="its member in --describe")
        assert [r[1:3] for r in rows] == [[topic, "0"], [topic, "1"]]
        [consumer_id] = {r[6] for r in rows}
        assert consumer_id.startswith("kp-app-"), consumer_id
        assert {(r[7], r[8]) for r in rows} == {("/127.0.0.1", "kp-app")}
        assert _listed(cluster)[group] == ["kafka", "Stable"]
    finally:
        stop.set()
        poller.join(30)


# -- topics alter ------------------------------------------------------------------------------


def test_topics_alter_adds_partitions_that_get_leaders_and_take_records(
    cluster: CliCluster,
) -> None:
    cluster.ok("topics", "create", "grow", "--partitions", "3", "--replication-factor", "2")
    altered = cluster.ok("topics", "alter", "--topic", "grow", "--partitions", "5")
    assert "Adding partitions succeeded!" in altered
    partitions = cluster.partitions("grow")
    assert sorted(partitions) == [0, 1, 2, 3, 4]
    # docs/replication.md placement, continued from the existing partitions.
    assert [partitions[p]["Replicas"] for p in (3, 4)] == ["1,2", "2,3"]
    assert all(p["Leader"] != "none" for p in partitions.values()), partitions
    for partition in (3, 4):
        cluster.ok("produce", "grow", "--partition", str(partition), input_text=f"p{partition}\n")
        out = cluster.ok(
            "consume", "grow", "--partition", str(partition), "--offset", "earliest",
            "--max-messages", "1", "--timeout-ms", "10000",
        )  # fmt: skip
        assert out == f"p{partition}\n"


def test_topics_alter_to_fewer_or_as_many_partitions_is_refused(cluster: CliCluster) -> None:
    cluster.ok("topics", "create", "fixed", "--partitions", "2")
    for count in ("1", "2"):
        _one_line_error(
            cluster.run("topics", "alter", "fixed", "--partitions", count),
            f"The number of partitions for a topic can only be increased. Topic fixed "
            f"currently has 2 partitions, {count} would not be an increase.",
        )
    _one_line_error(cluster.run("topics", "alter", "nosuch", "--partitions", "3"), "unknown topic")
    assert sorted(cluster.partitions("fixed")) == [0, 1]


def test_a_topic_being_deleted_cannot_grow_and_the_controller_takes_added_partitions_back(
    cluster: CliCluster,
) -> None:
    topic = "doomed"
    cluster.ok("topics", "create", topic, "--partitions", "2", "--replication-factor", "3")
    cluster.kill(3)  # its replicas hold the deletion until it returns
    try:
        with cluster.zk() as zk:
            zk.create(znodes.delete_topic_path(topic), b"", makepath=True)
        # Deletion started: the brokers dropped the topic from their metadata.
        wait_for(lambda: topic not in cluster.ok("topics", "list").split(), 30)
        _one_line_error(
            cluster.run("topics", "alter", topic, "--partitions", "3"),
            f"topic '{topic}' is marked for deletion",
        )
        # A writer that skips the check: the controller restores the assignment
        # (Kafka's restorePartitionReplicaAssignment), so the deletion removes it all.
        with cluster.zk() as zk:
            path = znodes.topic_path(topic)
            assignment = znodes.decode_topic_assignment(zk.get(path)[0])
            zk.set(path, znodes.encode_topic_assignment({**assignment, 2: [1, 2, 3]}))

            def restored() -> bool:
                return sorted(znodes.decode_topic_assignment(zk.get(path)[0])) == [0, 1]

            wait_for(restored, 30, interval=0.2, message="the assignment restored to 2")
            assert read_partition_state(zk, TopicPartition(topic, 2)) is None
    finally:
        cluster.start(3)
    with cluster.zk() as zk:
        wait_for(lambda: zk.exists(znodes.topic_path(topic)) is None, 60, interval=0.2)


# -- configs -----------------------------------------------------------------------------------


def test_min_insync_replicas_altered_on_a_live_topic_changes_acks_all_without_a_restart(
    cluster: CliCluster,
) -> None:
    topic = "strict"
    cluster.ok(
        "topics", "create", topic, "--replication-factor", "3",
        "--config", "min.insync.replicas=2",
    )  # fmt: skip
    assert "Configs: min.insync.replicas=2" in cluster.ok("topics", "describe", topic)
    cluster.kill(3)
    try:
        wait_for(lambda: "3" not in cluster.partitions(topic)[0]["Isr"].split(","), 30)
        cluster.ok("produce", topic, "--acks", "all", input_text="two in sync suffice\n")
        cluster.ok(
            "configs", "--alter", "--entity-type", "topics", "--entity-name", topic,
            "--add-config", "min.insync.replicas=3",
        )  # fmt: skip

        def produce(line: str) -> subprocess.CompletedProcess[str]:
            return cluster.run(
                "produce", topic, "--acks", "all", "--delivery-timeout-ms", "3000",
                input_text=f"{line}\n",
            )  # fmt: skip

        def refused() -> subprocess.CompletedProcess[str] | None:
            result = produce("three needed")
            return result if result.returncode != 0 else None

        refusal = wait_for(refused, 60, message="acks=all refused with min.insync.replicas=3")
        assert refusal is not None
        _one_line_error(refusal, "NOT_ENOUGH_REPLICAS")
        cluster.ok(
            "configs", "--alter", "--entity-type", "topics", "--entity-name", topic,
            "--add-config", "min.insync.replicas=2",
        )  # fmt: skip
        wait_for(lambda: produce("two again").returncode == 0, 60, message="acks=all accepted")
        described = cluster.ok(
            "configs", "--describe", "--entity-type", "topics", "--entity-name", topic
        )
        assert "min.insync.replicas=2 sensitive=false" in described
    finally:
        cluster.start(3)
    cluster.wait_for_full_isr(topic)


def test_segment_and_retention_changes_reach_the_log_without_a_restart(
    cluster: CliCluster,
) -> None:
    topic = "aging"
    cluster.ok("topics", "create", topic)
    leader = cluster.leader(topic)
    cluster.produce(topic, 20)
    assert cluster.segments(leader, topic) == 1  # 1 GiB segments by default
    cluster.ok(
        "configs", "--alter", "--entity-type", "topics", "--entity-name", topic,
        "--add-config", "segment.bytes=1024",
    )  # fmt: skip

    def rolled() -> bool:
        cluster.produce(topic, 20)
        return cluster.segments(leader, topic) >= 3

    wait_for(rolled, 60, interval=0.2, message="segments rolled at 1024 bytes")
    # Retention, checked every 300 ms by this cluster's brokers, now deletes every segment
    # (the active one too once it expired, as Kafka does): the log starts further on.
    cluster.ok(
        "configs", "--alter", "--entity-type", "topics", "--entity-name", topic,
        "--add-config", "retention.ms=1",
    )  # fmt: skip
    directory = cluster.data_dir / f"broker-{leader}" / f"{topic}-0"

    def log_start_moved() -> bool:
        names = sorted(path.name for path in directory.glob("*.log"))
        return len(names) == 1 and names[0] != f"{0:020d}.log"

    wait_for(log_start_moved, 60, interval=0.2, message="old segments deleted by retention")


def test_topic_config_overrides_still_apply_to_a_log_after_its_broker_restarts(
    cluster: CliCluster,
) -> None:
    """Regression: a log loaded at startup kept the broker defaults, not its topic's
    overrides, because the replica manager reused the loaded log as it was."""
    topic = "kept"
    cluster.ok("topics", "create", topic, "--config", "segment.bytes=1024")
    leader = cluster.leader(topic)
    cluster.produce(topic, 20)
    assert cluster.segments(leader, topic) >= 2
    cluster.ok("cluster", "stop", str(leader))
    cluster.start(leader)
    wait_for(lambda: cluster.partitions(topic)[0]["Leader"] == str(leader), 60, interval=0.5)
    before = cluster.segments(leader, topic)
    cluster.produce(topic, 20)
    assert cluster.segments(leader, topic) > before


def test_a_cluster_default_broker_config_applies_to_topics_without_overrides(
    cluster: CliCluster,
) -> None:
    topic = "plain"
    cluster.ok("topics", "create", topic)
    leader = cluster.leader(topic)
    cluster.produce(topic, 20)
    assert cluster.segments(leader, topic) == 1
    cluster.ok(
        "configs", "--alter", "--entity-type", "brokers", "--entity-default",
        "--add-config", "log.segment.bytes=1024",
    )  # fmt: skip
    try:

        def rolled() -> bool:
            cluster.produce(topic, 20)
            return cluster.segments(leader, topic) >= 3

        wait_for(rolled, 60, interval=0.2, message="segments rolled at the new default")
        described = cluster.ok(
            "configs", "--describe", "--entity-type", "brokers", "--entity-name", str(leader)
        )
        assert (
            "log.segment.bytes=1024 sensitive=false synonyms={"
            "DYNAMIC_DEFAULT_BROKER_CONFIG:log.segment.bytes=1024" in described
        )
    finally:
        cluster.ok(
            "configs", "--alter", "--entity-type", "brokers", "--entity-default",
            "--delete-config", "log.segment.bytes",
        )  # fmt: skip


def test_read_only_unknown_and_invalid_configs_are_refused_with_one_line(
    cluster: CliCluster,
) -> None:
    def alter(entity_type: str, name: str, *change: str) -> subprocess.CompletedProcess[str]:
        return cluster.run(
            "configs", "--alter", "--entity-type", entity_type, "--entity-name", name, *change
        )

    _one_line_error(
        alter("brokers", "1", "--add-config", "broker.id=7,log.dirs=/x"),
        "Cannot update these configs dynamically: broker.id, log.dirs",
    )
    _one_line_error(alter("brokers", "one", "--add-config", "log.retention.ms=1"), "broker id")
    cluster.ok("topics", "create", "checked")
    _one_line_error(
        alter("topics", "checked", "--add-config", "min.insync.replica=2"),
        "Unknown topic config name: min.insync.replica (did you mean 'min.insync.replicas'?)",
    )
    _one_line_error(
        alter("topics", "checked", "--add-config", "min.insync.replicas=0"),
        "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1",
    )
    _one_line_error(
        alter("topics", "checked", "--delete-config", "retention.ms"),
        "Invalid config(s): retention.ms",
    )
    _one_line_error(
        alter("topics", "nosuch", "--add-config", "retention.ms=1"),
        "Topic 'nosuch' does not exist.",
    )
    with cluster.zk() as zk:
        assert zk.exists(znodes.topic_config_path("checked")) is None


# -- cluster status ----------------------------------------------------------------------------


def test_cluster_status_without_cluster_json_reads_zookeeper_or_asks_the_brokers(
    cluster: CliCluster, tmp_path: Path
) -> None:
    elsewhere = ["--data-dir", str(tmp_path / "not-a-cluster")]
    by_zookeeper = cluster.run("cluster", "status", *elsewhere, "--zookeeper", cluster.zookeeper)
    assert by_zookeeper.returncode == 0, by_zookeeper.stderr
    assert f"ZooKeeper {cluster.zookeeper}: running" in by_zookeeper.stdout
    assert "Controller: " in by_zookeeper.stdout
    assert "Controller: none" not in by_zookeeper.stdout
    assert by_zookeeper.stdout.count("yes") == 3
    by_metadata = cluster.run("cluster", "status", *elsewhere, env={"MINIBROKER_ZOOKEEPER": ""})
    assert by_metadata.returncode == 0, by_metadata.stderr
    assert "asked the brokers" in by_metadata.stdout
    assert by_metadata.stdout.count("yes") == 3


def test_cluster_status_survives_topic_znodes_with_illegal_names(cluster: CliCluster) -> None:
    """Regression: `cluster status` died with a traceback on /brokers/topics/<illegal>."""
    hostile = ["/brokers/topics/bad name", "/brokers/topics/..x"]
    with cluster.zk() as zk:
        for path in hostile:
            zk.create(path, b"", makepath=True)
    try:
        status = cluster.run("cluster", "status")
        assert status.returncode == 0, status.stderr
        assert "Traceback" not in status.stderr
        assert "ignoring topic znode /brokers/topics/'bad name': illegal name" in status.stderr
        assert "Controller: " in status.stdout
        assert cluster.run("topics", "list").returncode == 0
        assert cluster.run("consumer-groups", "--list").returncode == 0
    finally:
        with cluster.zk() as zk:
            for path in hostile:
                zk.delete(path)
