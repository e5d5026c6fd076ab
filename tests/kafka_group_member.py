"""One member of a confluent-kafka consumer group, as a process of its own so a test can
SIGKILL it: ``python -m tests.kafka_group_member BOOTSTRAP GROUP TOPIC``.

Prints one JSON object per line on stdout: ``{"assigned": [partitions]}`` after every
rebalance, ``{"p": partition, "o": offset, "v": value}`` per record read. Commits
synchronously after each batch it reads, so that what it read and committed is settled
when it dies.
"""

from __future__ import annotations

import json
import sys

import confluent_kafka


def main(bootstrap: str, group: str, topic: str) -> None:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 3000,
            "heartbeat.interval.ms": 300,
        }
    )

    def say(obj: object) -> None:
        print(json.dumps(obj), flush=True)

    def assigned(_: confluent_kafka.Consumer, tps: list[confluent_kafka.TopicPartition]) -> None:
        say({"assigned": sorted(tp.partition for tp in tps)})  # the eager protocol: all of it

    def revoked(_: confluent_kafka.Consumer, tps: list[confluent_kafka.TopicPartition]) -> None:
        say({"assigned": []})

    consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)
    while True:
        batch = consumer.consume(200, timeout=0.2)
        for m in batch:
            if m.error() is not None:
                print(f"error: {m.error()}", file=sys.stderr, flush=True)
        read = [m for m in batch if m.error() is None]
        for m in read:
            say({"p": m.partition(), "o": m.offset(), "v": (m.value() or b"").decode()})
        if read:
            consumer.commit(asynchronous=False)


if __name__ == "__main__":
    main(*sys.argv[1:4])
