"""One member of a confluent-kafka consumer group, as a process of its own so a test can
SIGKILL it: ``python -m tests.kafka_group_member BOOTSTRAP GROUP TOPIC [CLIENT_ID]``
(:class:`GroupMember` runs one and collects what it says).

Prints one JSON object per line on stdout: ``{"assigned": [partitions]}`` after every
rebalance, ``{"p": partition, "o": offset, "v": value}`` per record read. Commits
synchronously after each batch it reads, so that what it read and committed is settled
when it dies. SIGTERM closes the consumer (it leaves the group) and ends the process.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from types import FrameType

import confluent_kafka


class GroupMember:
    """A ``tests.kafka_group_member`` process and what it has said so far."""

    def __init__(self, bootstrap: str, group: str, topic: str, client_id: str = "rdkafka") -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.kafka_group_member", bootstrap, group, topic, client_id],
            stdout=subprocess.PIPE,
            stderr=None,  # the test's own: pytest shows it when the test fails
            text=True,
        )
        self.assigned: list[int] = []
        self.records: list[tuple[int, int, str]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            said = json.loads(line)
            with self._lock:
                if "assigned" in said:
                    self.assigned = said["assigned"]
                else:
                    self.records.append((said["p"], said["o"], said["v"]))

    def snapshot(self) -> tuple[list[int], list[tuple[int, int, str]]]:
        with self._lock:
            return list(self.assigned), list(self.records)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)
        self._reader.join(timeout=10)
        self._close()

    def _close(self) -> None:
        if self.process.stdout is not None:
            self.process.stdout.close()

    def stop(self) -> None:
        """SIGTERM: the member closes its consumer, leaving the group (SIGKILL after 10 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._reader.join(timeout=10)
        self._close()


def main(bootstrap: str, group: str, topic: str, client_id: str = "rdkafka") -> None:
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
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
    while not stopping.is_set():
        batch = consumer.consume(200, timeout=0.2)
        for m in batch:
            if m.error() is not None:
                print(f"error: {m.error()}", file=sys.stderr, flush=True)
        read = [m for m in batch if m.error() is None]
        for m in read:
            say({"p": m.partition(), "o": m.offset(), "v": (m.value() or b"").decode()})
        if read:
            consumer.commit(asynchronous=False)
    consumer.close()


if __name__ == "__main__":
    main(*sys.argv[1:5])
