"""``chaos run --client kafka|mixed``: which processes the workload starts with which client
(chaos/workload.py), and what a Kafka group member writes for its reads, rebalances and
commits (chaos/kafka_workload.py), against a stand-in for confluent-kafka's consumer."""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import confluent_kafka
import pytest

from chaos.history_recorder import HistoryRecorder
from chaos.kafka_workload import _GroupMember
from chaos.runner import kafka_clients_problem
from chaos.workload import (
    GRPC,
    KAFKA,
    KAFKA_GROUP,
    MIXED,
    TRANSACTIONS,
    Workload,
    WorkloadSpec,
    producer_client,
)

REPO = Path(__file__).resolve().parents[2]
GROUP_FIELDS = ["time", "process", "type", "f", "group", "member", "generation"]


def _planned(spec: WorkloadSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """(name, role and options, process) of every process ``spec`` starts, none started."""
    spawned: list[tuple[str, list[str], int]] = []
    monkeypatch.setattr(
        Workload, "_spawn", lambda self, name, args, process: spawned.append((name, args, process))
    )
    Workload(spec, tmp_path / "h", tmp_path / "w").start()
    return spawned


def _option(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_kafka_producers_alternate_confluent_and_aiokafka_and_mixed_rotates_three() -> None:
    assert [producer_client(KAFKA, p) for p in range(4)] == [
        "confluent", "aiokafka", "confluent", "aiokafka",
    ]  # fmt: skip
    assert [producer_client(MIXED, p) for p in range(4)] == [
        "grpc", "confluent", "aiokafka", "grpc",
    ]  # fmt: skip
    assert {producer_client(GRPC, p) for p in range(4)} == {"grpc"}


def test_the_kafka_workload_goes_through_the_kafka_listeners_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = WorkloadSpec(
        "grpc:1", "zk:1", ["t"], 3, producers=2, group_consumers=2, client=KAFKA,
        kafka_bootstrap="kafka:1",
    )  # fmt: skip
    planned = _planned(spec, tmp_path, monkeypatch)
    roles = [(name, args[0], process) for name, args, process in planned]
    assert roles == [
        ("producer-0-confluent", "kafka-producer", 0),
        ("producer-1-aiokafka", "kafka-producer", 1),
        ("consumer-2-kafka-group", "kafka-group-consumer", 2),
        ("consumer-3-kafka-group", "kafka-group-consumer", 3),
        ("consumer-4-aiokafka", "kafka-reader", 4),
    ]
    assert {_option(args, "--bootstrap") for _, args, _ in planned} == {"kafka:1"}
    assert [_option(args, "--kafka-client") for _, args, _ in planned[:2]] == [
        "confluent", "aiokafka",
    ]  # fmt: skip
    assert {_option(args, "--group") for _, args, _ in planned[2:4]} == {KAFKA_GROUP}


def test_the_mixed_workload_runs_both_kinds_side_by_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = WorkloadSpec(
        "grpc:1", "zk:1", ["t"], 3, producers=3, group_consumers=2, client=MIXED,
        kafka_bootstrap="kafka:1",
    )  # fmt: skip
    planned = _planned(spec, tmp_path, monkeypatch)
    seen = [
        (args[0], _option(args, "--bootstrap"), args.count(KAFKA_GROUP)) for _, args, _ in planned
    ]
    assert seen == [
        ("producer", "grpc:1", 0),
        ("kafka-producer", "kafka:1", 0),
        ("kafka-producer", "kafka:1", 0),
        ("consumer", "grpc:1", 0),  # chaos-readers, minibroker's own group
        ("consumer", "grpc:1", 0),
        ("kafka-group-consumer", "kafka:1", 1),
        ("kafka-group-consumer", "kafka:1", 1),
        ("consumer", "grpc:1", 0),  # the gRPC assign reader
        ("kafka-reader", "kafka:1", 0),  # and the aiokafka one
    ]
    assert [process for _, _, process in planned] == list(range(9))


def test_the_grpc_workload_is_what_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    planned = _planned(WorkloadSpec("grpc:1", "zk:1", ["t"], 3), tmp_path, monkeypatch)
    assert [(name, args[0]) for name, args, _ in planned] == [
        ("producer-0", "producer"),
        ("producer-1", "producer"),
        ("producer-2", "producer"),
        ("consumer-3", "consumer"),
        ("consumer-4", "consumer"),
        ("consumer-5", "consumer"),
    ]
    assert not any("--kafka-client" in args for _, args, _ in planned)


def test_kafka_clients_need_the_listeners_and_the_plain_workload() -> None:
    with pytest.raises(ValueError, match="Kafka listeners"):
        WorkloadSpec("b", "z", ["t"], 3, client=KAFKA)
    with pytest.raises(ValueError, match="gRPC client only"):
        WorkloadSpec("b", "z", ["t"], 3, client=MIXED, kafka_bootstrap="k", workload=TRANSACTIONS)
    assert kafka_clients_problem(GRPC, TRANSACTIONS) is None
    assert kafka_clients_problem(KAFKA, "plain") is None
    assert "gRPC client only" in (kafka_clients_problem(MIXED, TRANSACTIONS) or "")
    assert "unknown client" in (kafka_clients_problem("jvm", "plain") or "")


def test_chaos_run_refuses_kafka_clients_with_transactions_before_anything_starts(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [
            sys.executable, "-m", "client.cli", "chaos", "run", "--client", "kafka",
            "--workload", "transactions", "--out", str(tmp_path / "run"),
        ],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--workload transactions runs through the gRPC client only" in done.stderr
    assert not (tmp_path / "run").exists()


# -- a group member's lines ----------------------------------------------------------------


def _metadata(generation: int, member: str = "m-1") -> bytes:
    return b"CGMDv2:" + struct.pack("=i", generation) + b"g\x00" + member.encode() + b"\x00\x01"


class _Consumer:
    """What a group member asks of confluent-kafka's Consumer, answered as told."""

    def __init__(self) -> None:
        self.generation = 1
        self.member = "m-1"
        self.commits: list[list[tuple[str, int, int]]] = []
        self.answer: Any = None
        """What the next commit reports (a list of partitions) or raises (an exception)."""
        self.report: Any = None
        """The member's ``on_commit``: an asynchronous commit reported at once here."""

    def consumer_group_metadata(self) -> bytes:
        return _metadata(self.generation, self.member)

    def commit(self, *, offsets: list[Any], asynchronous: bool) -> None:
        assert asynchronous  # a synchronous commit waits while no coordinator is known
        self.commits.append([(tp.topic, tp.partition, tp.offset) for tp in offsets])
        if isinstance(self.answer, Exception):
            raise self.answer
        self.report(None, offsets if self.answer is None else self.answer)


class _Message:
    def __init__(self, topic: str, partition: int, offset: int, value: bytes | None) -> None:
        self._at = (topic, partition, offset)
        self._value = value

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return self._at[0]

    def partition(self) -> int:
        return self._at[1]

    def offset(self) -> int:
        return self._at[2]

    def value(self) -> bytes | None:
        return self._value


def _member(tmp_path: Path) -> tuple[_GroupMember, _Consumer, HistoryRecorder]:
    args = argparse.Namespace(process=7, isolation_level="read_uncommitted", topics="t")
    history = HistoryRecorder(tmp_path / "7.jsonl", 7)
    consumer = _Consumer()
    member = _GroupMember(args, history, cast(confluent_kafka.Consumer, consumer))
    consumer.report = member.committed
    return member, consumer, history


def _tps(*partitions: int) -> list[confluent_kafka.TopicPartition]:
    return [confluent_kafka.TopicPartition("t", p) for p in partitions]


def _read(member: _GroupMember, partition: int, offset: int) -> None:
    message = _Message("t", partition, offset, f"p0-{offset}".encode())
    member._read(cast(confluent_kafka.Message, message))


def _lines(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "7.jsonl").read_text().splitlines()]


def test_reads_name_the_membership_and_commits_come_after_their_read_lines(
    tmp_path: Path,
) -> None:
    member, consumer, history = _member(tmp_path)
    with history:
        member._assigned(cast(confluent_kafka.Consumer, consumer), _tps(0, 1))
        _read(member, 0, 5)
        _read(member, 0, 6)
        _read(member, 1, 2)
        member.commit()
        member.commit()  # nothing read since: nothing committed
    lines = _lines(tmp_path)
    assert [list(line)[: len(GROUP_FIELDS)] for line in (lines[0], lines[4])] == [GROUP_FIELDS] * 2
    assigned, *reads, commit = lines
    assert assigned | {"time": 0} == {
        "time": 0, "process": 7, "type": "ok", "f": "assigned", "group": "g", "member": "m-1",
        "generation": 1, "partitions": [["t", 0], ["t", 1]],
    }  # fmt: skip
    assert [(r["type"], r["offset"], r["session"], r["group"], r["member"], r["generation"])
            for r in reads] == [
        ("read", 5, 1, "g", "m-1", 1), ("read", 6, 1, "g", "m-1", 1), ("read", 2, 1, "g", "m-1", 1)
    ]  # fmt: skip
    assert (commit["type"], commit["f"], commit["offsets"]) == (
        "ok", "commit_offsets", [["t", 0, 7], ["t", 1, 3]],
    )  # fmt: skip
    assert consumer.commits == [[("t", 0, 7), ("t", 1, 3)]]


def test_a_revocation_commits_what_was_read_then_ends_the_session(tmp_path: Path) -> None:
    member, consumer, history = _member(tmp_path)
    raw = cast(confluent_kafka.Consumer, consumer)
    with history:
        member._assigned(raw, _tps(0, 1))
        _read(member, 1, 9)
        member._revoked(raw, _tps(0, 1))
        consumer.generation = 2
        member._assigned(raw, _tps(0))
        _read(member, 0, 3)
        member._lost(raw, _tps(0))  # what it read is no longer its to commit
        consumer.generation, consumer.member = -1, ""  # librdkafka reset the membership
        member.commit()
    lines = _lines(tmp_path)
    steps = [(x.get("f", "read"), x["generation"], x.get("session")) for x in lines]
    assert steps == [
        ("assigned", 1, None),
        ("read", 1, 1),
        ("commit_offsets", 1, None),
        ("revoked", 1, None),
        ("assigned", 2, None),
        ("read", 2, 3),
        ("lost", 2, None),
    ]
    assert consumer.commits == [[("t", 1, 10)]]


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (confluent_kafka.KafkaError.ILLEGAL_GENERATION, "fail"),
        (confluent_kafka.KafkaError.UNKNOWN_MEMBER_ID, "fail"),
        (confluent_kafka.KafkaError.REBALANCE_IN_PROGRESS, "fail"),
        (confluent_kafka.KafkaError._TIMED_OUT, "info"),
        (confluent_kafka.KafkaError.NOT_COORDINATOR, "info"),
    ],
)
def test_a_commit_that_raised_is_fail_only_when_the_coordinator_refused_it(
    tmp_path: Path, code: int, kind: str
) -> None:
    member, consumer, history = _member(tmp_path)
    with history:
        member._assigned(cast(confluent_kafka.Consumer, consumer), _tps(0, 1))
        _read(member, 0, 1)
        _read(member, 1, 1)
        consumer.answer = confluent_kafka.KafkaException(confluent_kafka.KafkaError(code))
        member.commit()
    commit = _lines(tmp_path)[-1]
    assert (commit["type"], commit["offsets"]) == (kind, [["t", 0, 2], ["t", 1, 2]])


def test_a_commit_never_reported_is_unknown(tmp_path: Path) -> None:
    """The consumer closed before librdkafka reported a commit: ``info``."""
    member, consumer, history = _member(tmp_path)
    with history:
        member._assigned(cast(confluent_kafka.Consumer, consumer), _tps(0))
        _read(member, 0, 3)
        consumer.report = lambda error, partitions: None  # never reported
        member.commit()
        member.unreported()
    commit = _lines(tmp_path)[-1]
    assert (commit["type"], commit["f"], commit["offsets"]) == (
        "info", "commit_offsets", [["t", 0, 4]],
    )  # fmt: skip


def test_a_commit_reported_failed_as_a_whole(tmp_path: Path) -> None:
    member, consumer, history = _member(tmp_path)
    with history:
        member._assigned(cast(confluent_kafka.Consumer, consumer), _tps(0))
        _read(member, 0, 3)
        refused = confluent_kafka.KafkaError(confluent_kafka.KafkaError.UNKNOWN_MEMBER_ID)
        consumer.report = lambda error, partitions: member.committed(refused, partitions)
        member.commit()
    commit = _lines(tmp_path)[-1]
    assert (commit["type"], commit["offsets"]) == ("fail", [["t", 0, 4]])


def test_partitions_of_one_commit_with_different_outcomes_get_a_line_each(tmp_path: Path) -> None:
    member, consumer, history = _member(tmp_path)
    with history:
        member._assigned(cast(confluent_kafka.Consumer, consumer), _tps(0, 1, 2))
        for p in (0, 1, 2):
            _read(member, p, 4)
        refused = confluent_kafka.KafkaError(confluent_kafka.KafkaError.ILLEGAL_GENERATION)
        consumer.answer = [  # as librdkafka answers, each partition with its error; 2: none
            SimpleNamespace(topic="t", partition=0, offset=5, error=None),
            SimpleNamespace(topic="t", partition=1, offset=5, error=refused),
        ]
        member.commit()
    lines = _lines(tmp_path)
    commits = [(x["type"], x["offsets"]) for x in lines if x.get("f") == "commit_offsets"]
    assert sorted(commits) == [
        ("fail", [["t", 1, 5]]), ("info", [["t", 2, 5]]), ("ok", [["t", 0, 5]]),
    ]  # fmt: skip


# -- the Kafka listeners' addresses --------------------------------------------------------


def _cluster_json(path: Path, kafka_ports: dict[int, int | None]) -> None:
    brokers = {
        str(b): {"pid": 1, "port": 9090 + b, "host": "127.0.0.1", "kafka_port": port}
        for b, port in kafka_ports.items()
    }
    zookeeper = {"1": {"pid": 1, "port": 2181, "host": "127.0.0.1"}}
    path.mkdir(parents=True, exist_ok=True)
    (path / "cluster.json").write_text(
        json.dumps({"zookeeper_nodes": zookeeper, "brokers": brokers})
    )


def test_a_local_cluster_gives_its_kafka_listeners_or_none(tmp_path: Path) -> None:
    from chaos.local_backend import LocalBackend
    from deploy.local_cluster import LocalCluster

    _cluster_json(tmp_path / "with", {1: 19091, 2: 19092})
    _cluster_json(tmp_path / "without", {1: None, 2: None})
    with_listeners = LocalBackend(LocalCluster(tmp_path / "with"))
    assert with_listeners.kafka_bootstrap_servers() == "127.0.0.1:19091,127.0.0.1:19092"
    assert LocalBackend(LocalCluster(tmp_path / "without")).kafka_bootstrap_servers() is None


class _Container:
    def __init__(self, env: dict[str, str]) -> None:
        self.attrs = {
            "Config": {"Env": [f"{k}={v}" for k, v in env.items()]},
            "HostConfig": {
                "PortBindings": {
                    f"{v}/tcp": [{"HostIp": "127.0.0.1", "HostPort": v}]
                    for k, v in env.items()
                    if k.endswith("PORT") and v != "-1"
                }
            },
        }

    def reload(self) -> None:
        pass


def test_a_docker_cluster_gives_its_published_kafka_ports_or_none() -> None:
    from chaos.docker_backend import DockerBackend

    def backend(kafka_ports: list[str]) -> DockerBackend:
        made = DockerBackend.__new__(DockerBackend)  # no Docker engine: the containers faked
        made._brokers = {
            b: _Container({"MINIBROKER_PORT": str(9090 + b), "MINIBROKER_KAFKA_PORT": port})
            for b, port in enumerate(kafka_ports, start=1)
        }
        return made

    assert backend(["19091", "19092", "19093"]).kafka_bootstrap_servers() == (
        "127.0.0.1:19091,127.0.0.1:19092,127.0.0.1:19093"
    )
    assert backend(["-1", "-1", "-1"]).kafka_bootstrap_servers() is None  # the TLS compose


def test_a_run_of_kafka_clients_on_a_cluster_without_kafka_listeners_is_refused_up_front(
    tmp_path: Path,
) -> None:
    from chaos.backend import BackendUnavailableError
    from chaos.local_backend import LocalBackend
    from chaos.run_dir import RunDir
    from chaos.runner import RunSettings, _Run
    from deploy.local_cluster import LocalCluster

    _cluster_json(tmp_path / "cluster", {1: None})
    backend = LocalBackend(LocalCluster(tmp_path / "cluster"))
    for client, expected in ((GRPC, None), (KAFKA, "runs none")):
        run = _Run(
            RunSettings(out=tmp_path / client, client=client),
            RunDir.create(tmp_path / client),
            None,
        )
        run.backend = backend
        if expected is None:
            assert run._kafka_bootstrap() is None
            continue
        with pytest.raises(BackendUnavailableError, match=expected):
            run._kafka_bootstrap()
