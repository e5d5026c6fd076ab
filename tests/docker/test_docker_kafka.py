"""End to end in Docker: Kafka's own tools against `make up`'s Kafka protocol listeners.

Every broker container runs the Kafka listener on 127.0.0.1:<its Kafka port> and publishes
that port under the same number, so kcat on the host bootstraps from broker 1 and reaches
all three at the addresses Metadata returns. Inside the network, the entrypoint's peer
forwarders give the same addresses: from broker 1's container, broker 2's Kafka address
answers ApiVersions.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

import pytest

from tests.docker.conftest import DockerCluster, minibroker
from tests.helpers import assert_keyed_lines_read_in_order, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]

PARTITIONS = 3
LINES = 500
KCAT_TIMEOUT_S = 120
METADATA_TIMEOUT_S = 60

# ApiVersions v0 (the request every Kafka client sends first) to one address, with nothing
# but the interpreter: the image has no Kafka client. Prints the response's error code.
_API_VERSIONS_V0 = """
import socket, struct, sys
host, port = sys.argv[1], int(sys.argv[2])
client = b"docker-test"
body = struct.pack(">hhih", 18, 0, 7, len(client)) + client
with socket.create_connection((host, port), timeout=10) as sock:
    sock.sendall(struct.pack(">i", len(body)) + body)
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = sock.recv(65536)
        if not chunk:
            sys.exit("connection closed after %d bytes" % len(data))
        data += chunk
correlation_id, error_code = struct.unpack(">ih", data[4:10])
assert correlation_id == 7, correlation_id
print(error_code)
"""


def kcat(cluster: DockerCluster, *args: str, stdin: str | None = None) -> str:
    """kcat on the host, bootstrapped from broker 1's published Kafka port only: the other
    brokers must be reached through the addresses Metadata names."""
    done = subprocess.run(
        ["kcat", "-b", f"127.0.0.1:{cluster.kafka_ports[1]}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=KCAT_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"kcat {' '.join(args)} exited {done.returncode}: {done.stderr}"
    return done.stdout


def test_kcat_on_the_host_lists_the_published_kafka_addresses_and_produces_and_consumes(
    docker_cluster: DockerCluster,
) -> None:
    cluster = docker_cluster
    topic = f"kcat-{uuid.uuid4().hex[:8]}"
    minibroker("topics", "create", topic, "--partitions", str(PARTITIONS),
               "--replication-factor", "3", "--bootstrap-server", cluster.bootstrap,
               "--zookeeper", cluster.zookeeper)  # fmt: skip

    def led_everywhere() -> dict[str, Any] | None:
        """kcat's metadata once every partition of the topic has a leader."""
        listing: dict[str, Any] = json.loads(kcat(cluster, "-L", "-J", "-t", topic))
        (described,) = listing["topics"]
        partitions = described.get("partitions", [])
        if len(partitions) == PARTITIONS and all(p["leader"] > 0 for p in partitions):
            return listing
        return None

    listing = wait_for(led_everywhere, METADATA_TIMEOUT_S, 0.5, f"{topic} led on kcat's view")
    assert listing is not None
    assert {b["id"]: b["name"] for b in listing["brokers"]} == {
        broker_id: f"127.0.0.1:{port}" for broker_id, port in cluster.kafka_ports.items()
    }

    lines = [f"key-{i % 17}:value-{i}" for i in range(LINES)]
    kcat(cluster, "-P", "-t", topic, "-K", ":", "-X", "acks=all", stdin="\n".join(lines) + "\n")
    out = kcat(cluster, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-K", ":",
               "-f", "%k:%s\n")  # fmt: skip
    assert_keyed_lines_read_in_order(lines, out.splitlines())


def test_a_peers_kafka_address_answers_inside_a_broker_container(
    docker_cluster: DockerCluster,
) -> None:
    """The Kafka addresses Metadata names work inside the network too (peer forwarders)."""
    done = subprocess.run(
        ["docker", "exec", docker_cluster.container(1), "/opt/minibroker/bin/python", "-c",
         _API_VERSIONS_V0, "127.0.0.1", str(docker_cluster.kafka_ports[2])],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0", done.stdout
