"""confluent-kafka (librdkafka) against a secured Kafka listener, in a process of its own
(a librdkafka crash or hang must not take the test run with it): ``python -m
tests.confluent_security_client '<config json>' <action> [topic]`` prints one JSON line.

Actions: ``roundtrip`` (produce one record to ``topic`` and read it back), ``metadata``
(list the topics: the authentication error, if any, is printed), ``scram`` (AdminClient's
alter_user_scram_credentials for alice and bob, then describe_user_scram_credentials),
``produce`` (one record to partition 0 of ``topic``: its delivery error's name or None) and
``topic_metadata`` (Metadata of ``topic`` alone: the topic's error name or None)."""

from __future__ import annotations

import json
import sys
import uuid
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)


def roundtrip(config: dict[str, Any], topic: str) -> dict[str, Any]:
    value = uuid.uuid4().hex.encode()
    producer = confluent_kafka.Producer(config)
    producer.produce(topic, value)
    left = producer.flush(30)
    consumer = confluent_kafka.Consumer(
        {**config, "group.id": "g-" + value.decode(), "auto.offset.reset": "earliest"}
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    seen: list[str] = []
    for _ in range(60):
        message = consumer.poll(0.5)
        if message is None or message.error():
            continue
        seen.append((message.value() or b"").decode())
        if message.value() == value:
            break
    consumer.close()
    return {"unflushed": left, "found": value.decode() in seen}


def metadata(config: dict[str, Any]) -> dict[str, Any]:
    errors: list[str] = []

    def on_error(err: confluent_kafka.KafkaError) -> None:
        errors.append(f"{err.name()}: {err.str()}")

    admin = AdminClient({**config, "error_cb": on_error})  # type: ignore[dict-item]
    try:
        topics = sorted(admin.list_topics(timeout=8).topics)
    except confluent_kafka.KafkaException as e:
        admin.poll(1)  # the error callbacks are served by poll
        return {"topics": None, "errors": [*errors, str(e)]}
    return {"topics": topics, "errors": errors}


def produce(config: dict[str, Any], topic: str) -> dict[str, Any]:
    errors: list[str | None] = []

    def delivered(err: confluent_kafka.KafkaError | None, _: Any) -> None:
        errors.append(None if err is None else err.name())

    producer = confluent_kafka.Producer({**config, "message.timeout.ms": 20000})
    producer.produce(topic, uuid.uuid4().hex.encode(), partition=0, on_delivery=delivered)
    left = producer.flush(30)
    return {"unflushed": left, "error": errors[0] if errors else "NOT_DELIVERED"}


def topic_metadata(config: dict[str, Any], topic: str) -> dict[str, Any]:
    admin = AdminClient(config)
    found = admin.list_topics(topic=topic, timeout=15).topics[topic]
    return {"error": None if found.error is None else found.error.name()}


def scram(config: dict[str, Any]) -> dict[str, Any]:
    admin = AdminClient(config)
    sha256, sha512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
    alterations = [
        UserScramCredentialUpsertion("carol", ScramCredentialInfo(sha256, 8192), b"carol-secret"),
        UserScramCredentialUpsertion("carol", ScramCredentialInfo(sha512, 4096), b"carol-secret"),
        UserScramCredentialDeletion("nobody", sha256),
        UserScramCredentialUpsertion("dave", ScramCredentialInfo(sha256, 100), b"x"),
    ]
    altered: dict[str, str] = {}
    futures = admin.alter_user_scram_credentials(alterations)
    for user, future in futures.items():
        try:
            future.result(timeout=20)
            altered[user] = "ok"
        except confluent_kafka.KafkaException as e:
            altered[user] = e.args[0].name()
    described: dict[str, Any] = {}
    described_futures = admin.describe_user_scram_credentials(["carol", "nobody"])
    assert isinstance(described_futures, dict)
    for user, future in described_futures.items():
        try:
            description = future.result(timeout=20)
            described[user] = sorted(
                [str(i.mechanism.name), i.iterations] for i in description.scram_credential_infos
            )
        except confluent_kafka.KafkaException as e:
            described[user] = e.args[0].name()
    return {"altered": altered, "described": described}


def main() -> None:
    config = json.loads(sys.argv[1])
    action = sys.argv[2]
    if action == "roundtrip":
        result = roundtrip(config, sys.argv[3])
    elif action == "metadata":
        result = metadata(config)
    elif action == "produce":
        result = produce(config, sys.argv[3])
    elif action == "topic_metadata":
        result = topic_metadata(config, sys.argv[3])
    else:
        result = scram(config)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
