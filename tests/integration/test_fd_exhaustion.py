"""A broker run out of file descriptors by a connection flood keeps its log dir online.

Broker 1 runs with a low ``RLIMIT_NOFILE``. Bare connections with half-sent frames to its
Kafka listener use its descriptors up, so its next high-watermark checkpoint (every 200 ms
here) fails with EMFILE. That is a process resource running out, not a failed disk: the
broker reports it (``event=resource_exhausted``) and writes the checkpoint again on the
next period. Once the flood ends, the dir is online, the broker is still in the ISR, and
produce and fetch work on both listeners.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from proto.topic_partition import TopicPartition
from proto.wire.minibroker_pb2 import ErrorCode
from proto.zk.sync_client import read_registered_broker
from tests.cluster import Cluster
from tests.helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

NOFILE_LIMIT = 400
"""Room for the broker to start (about half of it), little for a flood to fill."""
FLOOD_MAX = NOFILE_LIMIT + 100
TP = TopicPartition("fd-flood", 0)
HALF_FRAME = (4096).to_bytes(4, "big") + b"\x00\x12"
"""A frame length announcing 4 kB, then two bytes of it: the broker holds the connection."""


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def kafka_address(cluster: Cluster, broker_id: int) -> tuple[str, int]:
    registered = read_registered_broker(cluster.zk, broker_id)
    assert registered is not None
    endpoint = registered.kafka_endpoint
    assert endpoint is not None, f"broker {broker_id} registered no Kafka listener"
    return endpoint[0], endpoint[1]


@contextmanager
def flood(address: tuple[str, int], log_path: Path) -> Iterator[list[socket.socket]]:
    """Connections with half-sent frames until the broker reports running out (or, before
    the fix, takes its dir offline); all closed on exit."""
    held: list[socket.socket] = []

    def ran_out() -> bool:
        text = log_path.read_text(errors="replace")
        return "event=resource_exhausted" in text or "event=log_dir_offline" in text

    try:
        while len(held) < FLOOD_MAX and not ran_out():
            for _ in range(20):
                sock = socket.create_connection(address, timeout=5)
                sock.sendall(HALF_FRAME)
                held.append(sock)
        wait_for(ran_out, 15, message="the broker to meet EMFILE in a checkpoint")
        yield held
    finally:
        for sock in held:
            sock.close()


def kcat(bootstrap: str, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["kcat", "-b", bootstrap, "-m", "10", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=40,
        check=False,
    )
    assert done.returncode == 0, f"kcat {' '.join(args)} failed: {done.stderr}"
    return done.stdout


def test_a_connection_flood_to_emfile_leaves_the_log_dir_online(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    cluster = Cluster(zk_client, zk_connect, tmp_path, (1, 2), overrides={"kafka.port": "0"})
    cluster.brokers[1].spec.nofile_limit = NOFILE_LIMIT
    try:
        cluster.start()
        log_path = cluster.brokers[1].log_path
        assert "event=nofile_limit_low" in log_path.read_text()  # 400 < the budget
        cluster.create_topic(TP.topic, {0: [1, 2]})
        cluster.wait_for_isr(TP, {1, 2})
        assert cluster.produce(1, TP, [b"before"]).error_code == ErrorCode.NONE
        pid = cluster.brokers[1].pid
        assert pid is not None
        baseline = open_fds(pid)
        assert baseline < NOFILE_LIMIT - 50, f"the broker starts with {baseline} descriptors"

        with flood(kafka_address(cluster, 1), log_path) as held:
            assert held
        text = log_path.read_text(errors="replace")
        assert "event=log_dir_offline" not in text
        assert "where=high_watermark_checkpoint" in text
        wait_for(lambda: open_fds(pid) < baseline + 20, 20, message="the flood's sockets closed")

        # Still a replica in the ISR, the leader, and serving on both listeners.
        cluster.wait_for_isr(TP, {1, 2})
        assert cluster.leader_serving(TP) == 1
        wait_for(
            lambda: cluster.produce(1, TP, [b"after"]).error_code == ErrorCode.NONE,
            20,
            message="a produce after the flood",
        )
        values = [value for _, value in cluster.consume_all(1, TP)]
        assert values[0] == b"before"
        assert b"after" in values
        host, port = kafka_address(cluster, 1)
        bootstrap = f"{host}:{port}"
        kcat(bootstrap, "-P", "-t", TP.topic, "-p", "0", stdin="by-kcat\n")
        consumed = kcat(bootstrap, "-C", "-t", TP.topic, "-p", "0", "-o", "beginning", "-e")
        assert "by-kcat" in consumed.splitlines()
        assert "event=log_dir_offline" not in log_path.read_text(errors="replace")
        assert cluster.brokers[1].is_running
    finally:
        cluster.stop_all()
