"""The auto topic creation rules: what a Metadata request's missing topic is answered and
when it is written (the ZooKeeper writes are tested against a cluster in
tests/integration/test_auto_topic_creation.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from broker.auto_topic_creation import (
    AutoTopicCreator,
    metadata_error_of_create,
    refusal_before_create,
)
from proto.config.broker_config import BrokerConfig
from proto.wire import minibroker_pb2 as pb

TOPIC_ALREADY_EXISTS = 36


def config(**overrides: object) -> BrokerConfig:
    return BrokerConfig(broker_id=1, zookeeper_connect="zk:2181", log_dir=Path("/x"), **overrides)  # type: ignore[arg-type]


def test_the_broker_configs_default_as_kafka_does() -> None:
    c = config()
    assert c.auto_create_topics_enable is True
    assert (c.num_partitions, c.default_replication_factor) == (1, 1)
    parsed = BrokerConfig.from_properties(
        {
            "broker.id": "1",
            "zookeeper.connect": "zk:2181",
            "log.dirs": "/x",
            "auto.create.topics.enable": "false",
            "num.partitions": "3",
        }
    )
    assert parsed.auto_create_topics_enable is False
    assert parsed.num_partitions == 3
    assert parsed.to_properties()["auto.create.topics.enable"] == "false"


@pytest.mark.parametrize(
    ("name", "allowed", "expected"),
    [
        ("orders", True, None),
        ("orders", False, pb.UNKNOWN_TOPIC_OR_PARTITION),
        ("bad/name", True, pb.INVALID_TOPIC),
        ("bad/name", False, pb.INVALID_TOPIC),
        ("", True, pb.INVALID_TOPIC),
        ("x" * 250, True, pb.INVALID_TOPIC),
        ("__consumer_offsets", True, pb.UNKNOWN_TOPIC_OR_PARTITION),
        ("__transaction_state", True, pb.UNKNOWN_TOPIC_OR_PARTITION),
    ],
)
def test_refusal_before_create(name: str, allowed: bool, expected: int | None) -> None:
    assert refusal_before_create(name, allowed) == expected


@pytest.mark.parametrize(
    ("create_code", "metadata_code"),
    [
        (pb.NONE, pb.LEADER_NOT_AVAILABLE),
        (TOPIC_ALREADY_EXISTS, pb.LEADER_NOT_AVAILABLE),
        (pb.REQUEST_TIMED_OUT, pb.LEADER_NOT_AVAILABLE),
        (pb.INVALID_REPLICATION_FACTOR, pb.INVALID_REPLICATION_FACTOR),
        (pb.INVALID_TOPIC, pb.INVALID_TOPIC),
    ],
)
def test_a_create_outcome_as_a_metadata_answer(create_code: int, metadata_code: int) -> None:
    assert metadata_error_of_create(create_code) == metadata_code


class RecordingWriter:
    """Answers each topic with a preset code; ``release`` holds the writes until set."""

    def __init__(self, codes: Mapping[str, int] | None = None) -> None:
        self.codes = dict(codes or {})
        self.calls: list[list[str]] = []
        self.release = asyncio.Event()
        self.release.set()
        self.started = asyncio.Event()

    async def __call__(self, names: Sequence[str]) -> dict[str, tuple[int, str | None]]:
        self.calls.append(list(names))
        self.started.set()
        await self.release.wait()
        return {n: (self.codes.get(n, pb.NONE), None) for n in names}


def test_missing_topics_are_created_and_answered_leader_not_available() -> None:
    writer = RecordingWriter({"racy": TOPIC_ALREADY_EXISTS, "big": pb.INVALID_REPLICATION_FACTOR})
    creator = AutoTopicCreator(config(), writer)
    answers = asyncio.run(
        creator.answer_missing(["new", "racy", "big", "bad/name", "new"], allowed=True)
    )
    assert answers == {
        "new": pb.LEADER_NOT_AVAILABLE,
        "racy": pb.LEADER_NOT_AVAILABLE,
        "big": pb.INVALID_REPLICATION_FACTOR,
        "bad/name": pb.INVALID_TOPIC,
    }
    assert writer.calls == [["new", "racy", "big"]]


@pytest.mark.parametrize(("enabled", "allowed"), [(False, True), (True, False)])
def test_nothing_is_written_unless_both_the_broker_and_the_request_allow_it(
    enabled: bool, allowed: bool
) -> None:
    writer = RecordingWriter()
    creator = AutoTopicCreator(config(auto_create_topics_enable=enabled), writer)
    answers = asyncio.run(creator.answer_missing(["new"], allowed=allowed))
    assert answers == {"new": pb.UNKNOWN_TOPIC_OR_PARTITION}
    assert writer.calls == []


def test_a_topic_being_created_is_not_written_twice_by_one_broker() -> None:
    async def scenario() -> None:
        writer = RecordingWriter()
        writer.release.clear()
        creator = AutoTopicCreator(config(), writer)
        first = asyncio.create_task(creator.answer_missing(["t"], allowed=True))
        await writer.started.wait()
        assert await creator.answer_missing(["t"], allowed=True) == {
            "t": pb.UNKNOWN_TOPIC_OR_PARTITION
        }
        writer.release.set()
        assert await first == {"t": pb.LEADER_NOT_AVAILABLE}
        assert await creator.answer_missing(["t"], allowed=True) == {"t": pb.LEADER_NOT_AVAILABLE}
        assert writer.calls == [["t"], ["t"]]

    asyncio.run(scenario())


def test_a_failing_writer_is_an_unknown_server_error_not_a_crash() -> None:
    async def broken(names: Sequence[str]) -> dict[str, tuple[int, str | None]]:
        raise RuntimeError("boom")

    creator = AutoTopicCreator(config(), broken)
    assert asyncio.run(creator.answer_missing(["t"], allowed=True)) == {
        "t": pb.UNKNOWN_SERVER_ERROR
    }
    assert asyncio.run(creator.answer_missing(["t"], allowed=True)) == {
        "t": pb.UNKNOWN_SERVER_ERROR
    }
