"""``minibroker cluster ...`` as a user runs it: subprocesses against real processes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import cluster_up_on_free_ports, free_port_run, minibroker, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def kafka_ports(cluster_dir: Path) -> dict[int, int | None]:
    """Each broker's Kafka protocol port as cluster.json records it."""
    brokers = json.loads((cluster_dir / "cluster.json").read_text())["brokers"]
    return {int(b): entry.get("kafka_port") for b, entry in brokers.items()}


def test_cluster_up_status_kill_start_stop_down(cluster_dir: Path) -> None:
    base, printed = cluster_up_on_free_ports(cluster_dir)
    data = ["--data-dir", str(cluster_dir)]
    assert f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}" in printed
    kafka = f"127.0.0.1:{base + 4},127.0.0.1:{base + 5},127.0.0.1:{base + 6}"
    assert f"kafka bootstrap:   {kafka}" in printed
    assert kafka_ports(cluster_dir) == {1: base + 4, 2: base + 5, 3: base + 6}
    assert (cluster_dir / "logs" / "broker-1.log").exists()

    status = minibroker("cluster", "status", *data)
    assert status.returncode == 0, status.stderr
    assert "Controller: " in status.stdout
    assert status.stdout.count("yes") == 3
    assert f"Kafka bootstrap servers: {kafka}\n" in status.stdout

    # `make run` then the README's `cluster up`: the second up has nothing to do.
    again = minibroker("cluster", "up", *data, "--base-port", str(base))
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stdout
    assert f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}" in again.stdout

    assert minibroker("cluster", "kill", "2", *data).returncode == 0
    after_kill = minibroker("cluster", "status", *data).stdout
    assert "not running" in after_kill
    partly = minibroker("cluster", "up", *data, "--base-port", str(base))
    assert partly.returncode == 1
    assert "already running" in partly.stderr
    assert "`minibroker cluster start 2`" in partly.stderr
    assert "Traceback" not in partly.stderr
    assert minibroker("cluster", "start", "2", *data).returncode == 0
    assert kafka_ports(cluster_dir)[2] == base + 5  # a restart keeps the broker's ports
    assert minibroker("cluster", "stop", "3", *data).returncode == 0
    stopped = minibroker("cluster", "status", *data).stdout
    assert stopped.count("not running") == 1

    # Kafka users' spelling of restarting ZooKeeper: `cluster start zookeeper`.
    killed = minibroker("cluster", "kill", "zookeeper", *data)
    assert killed.returncode == 0, killed.stderr
    assert "ZooKeeper node 1 killed" in killed.stdout
    restarted = minibroker("cluster", "start", "zookeeper", *data)
    assert restarted.returncode == 0, restarted.stderr
    assert "ZooKeeper node 1 started" in restarted.stdout

    no_such = minibroker("cluster", "kill", "7", *data)
    assert no_such.returncode == 1
    assert "not part of this cluster" in no_such.stderr

    down = minibroker("cluster", "down", *data)
    assert down.returncode == 0, down.stderr
    assert not (cluster_dir / "cluster.json").exists()
    gone = minibroker("cluster", "status", *data)
    assert gone.returncode == 1
    assert "no cluster" in gone.stderr


def test_cluster_up_refuses_a_taken_port_with_one_line(cluster_dir: Path) -> None:
    base = free_port_run(7)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", base + 1))
        squatter.listen()
        result = minibroker(
            "cluster", "up", "--data-dir", str(cluster_dir),
            "--base-port", str(base), "--zookeeper-port", str(base + 3),
            "--kafka-base-port", str(base + 4),
        )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert f"broker 2 port {base + 1} already in use" in result.stderr
    assert not (cluster_dir / "cluster.json").exists()


def test_cluster_up_tls_is_authenticated_and_the_cli_finds_its_credentials(
    cluster_dir: Path,
) -> None:
    """`cluster up --tls`: the CLI's defaults (the cluster's admin.properties) work for every
    command; a client without the certificate cannot reach the brokers; the ZooKeeper chroot
    refuses writes without the digest. The Kafka listeners are SASL_SSL with the generated
    SCRAM user admin, whose settings kcat reads from tls/kafka-client.properties. ACLs are
    on: the admin needs none, another SCRAM user one (``minibroker acls``)."""
    base = free_port_run(7)
    data = ["--data-dir", str(cluster_dir)]
    up = minibroker(
        "cluster", "up", *data, "--tls", "--base-port", str(base),
        "--zookeeper-port", str(base + 3), "--kafka-base-port", str(base + 4),
    )  # fmt: skip
    assert up.returncode == 0, up.stderr
    assert "TLS + ZooKeeper ACLs" in up.stdout
    assert f"127.0.0.1:{base + 3}/minibroker" in up.stdout
    assert "SASL_SSL, SCRAM user admin" in up.stdout
    assert kafka_ports(cluster_dir) == {1: base + 4, 2: base + 5, 3: base + 6}
    kafka_config = cluster_dir / "tls" / "kafka-client.properties"
    assert "security.protocol=SASL_SSL" in kafka_config.read_text()
    ca = cluster_dir / "tls" / "ca.pem"
    kafka_bootstrap = f"127.0.0.1:{base + 4}"
    listed = subprocess.run(
        ["kcat", "-b", kafka_bootstrap, "-F", str(kafka_config), "-L", "-m", "10"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert "3 brokers" in listed.stdout
    anonymous = subprocess.run(
        ["kcat", "-b", kafka_bootstrap, "-L", "-m", "5"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert anonymous.returncode != 0
    created = minibroker("topics", "create", "orders", "--replication-factor", "3", *data)
    assert created.returncode == 0, created.stderr
    produced = minibroker("produce", "orders", "--acks", "all", *data, input_text="a\nb\nc\n")
    assert produced.returncode == 0, produced.stderr
    consumed = minibroker(
        "consume", "orders", "--from-beginning", "--max-messages", "3", "--timeout-ms", "10000",
        *data,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.split()) == ["a", "b", "c"]
    read = subprocess.run(
        ["kcat", "-b", kafka_bootstrap, "-F", str(kafka_config), "-C", "-t", "orders", "-e",
         "-o", "beginning"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert read.returncode == 0, read.stderr
    assert sorted(read.stdout.split()) == ["a", "b", "c"]
    # ACLs are on: the admins are super users, another SCRAM user needs an ACL.
    alice_added = minibroker(
        "configs", "--alter", "--entity-type", "users", "--entity-name", "alice",
        "--add-config", "SCRAM-SHA-256=[password=alice-secret]", *data,
    )  # fmt: skip
    assert alice_added.returncode == 0, alice_added.stderr
    alice = ["kcat", "-b", kafka_bootstrap, "-X", "security.protocol=SASL_SSL",
             "-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", "sasl.username=alice",
             "-X", "sasl.password=alice-secret", "-X", f"ssl.ca.location={ca}",
             "-C", "-t", "orders", "-e", "-o", "beginning"]  # fmt: skip
    alice_refused = subprocess.run(alice, capture_output=True, text=True, timeout=60, check=False)
    assert "Topic authorization failed" in alice_refused.stderr, alice_refused.stderr
    granted = minibroker(
        "acls", "--add", "--allow-principal", "User:alice", "--consumer", "--topic", "orders",
        "--group", "billing", *data,
    )  # fmt: skip
    assert granted.returncode == 0, granted.stderr

    def alice_reads() -> bool:
        done = subprocess.run(alice, capture_output=True, text=True, timeout=60, check=False)
        return sorted(done.stdout.split()) == ["a", "b", "c"]

    wait_for(alice_reads, 30, message="alice's ACL seen")
    status = minibroker("cluster", "status", *data)
    assert "Topics: 1" in status.stdout, status.stdout

    plaintext = cluster_dir.parent / "plaintext.properties"
    plaintext.write_text("security.protocol=PLAINTEXT\n")
    refused = minibroker(
        "consume", "orders", "--from-beginning", "--timeout-ms", "3000",
        "--command-config", str(plaintext), *data,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "cannot reach" in refused.stderr
    assert "Traceback" not in refused.stderr
    # With the certificate but without the digest, no topic can be created in the chroot.
    tls_dir = cluster_dir / "tls"
    no_digest = cluster_dir.parent / "no-digest.properties"
    no_digest.write_text(
        f"security.protocol=SSL\nssl.truststore.location={tls_dir / 'ca.pem'}\n"
        f"ssl.keystore.location={tls_dir / 'admin.pem'}\n"
    )
    denied = minibroker("topics", "create", "other", "--command-config", str(no_digest), *data)
    assert denied.returncode != 0
    assert "NoAuth" in denied.stderr, denied.stderr
    assert "Traceback" not in denied.stderr


_IN_PROCESS_CLUSTER = """
import sys
from pathlib import Path
from deploy.local_cluster import LocalCluster
base = int(sys.argv[2])
cluster = LocalCluster(Path(sys.argv[1]))
cluster.up(1, base_port=base, zookeeper_port=base + 1, kafka_base_port=base + 2)
cluster.kill(1)
cluster.start(1)
cluster.down()
"""


def test_an_interpreter_driving_a_cluster_reaps_every_process_it_started(
    cluster_dir: Path,
) -> None:
    """The chaos runner drives clusters in its own process, acting on them by pid: the
    processes it started, killed or stopped must be reaped through their Popen, which
    otherwise warns at exit that each "is still running" (90 such lines after `make test`)."""
    base = free_port_run(3)
    done = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", _IN_PROCESS_CLUSTER,
         str(cluster_dir), str(base)],
        capture_output=True,
        text=True,
        timeout=150,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ResourceWarning" not in done.stderr, done.stderr[-3000:]
