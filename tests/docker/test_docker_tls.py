"""End to end in Docker, the authenticated variant: `make up-tls`.

Its own compose project (``minibroker-test-tls``), image tag, free ports and TLS directory.
`make up-tls` makes a throw-away CA, certificates and the ZooKeeper digest with the image's
Python, and the brokers come up healthy speaking mutual TLS, with ZooKeeper ACLs under the
chroot ``/minibroker``. The host's CLI, given the generated ``admin.properties``, creates a
topic, produces with acks=all and consumes it back; without a certificate it cannot reach
a broker, and without the digest ZooKeeper refuses its writes. The Kafka protocol
listeners are SASL_SSL: kcat lists the cluster with the generated
``kafka-client.properties`` (the SCRAM user admin). `make down-volumes` removes the cluster
at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from proto.zk.znodes import broker_path, decode_broker_registration
from tests.docker.conftest import (
    REPO,
    UP_TIMEOUT_S,
    DockerCluster,
    _free_ports,
    _show_logs,
    kafka_port_env,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]

PROJECT = "minibroker-test-tls"
IMAGE = "minibroker-test-tls:latest"
LINES = 200


@pytest.fixture(scope="module")
def tls_cluster(
    docker_engine: None, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DockerCluster]:
    """`make up-tls` under the test project on free ports; `make down-volumes` at the end."""
    zk, *ports = _free_ports(7)
    ports, kafka_ports = ports[:3], ports[3:]
    tls_dir = tmp_path_factory.mktemp("docker-tls")
    env = {
        **os.environ,
        "MINIBROKER_PROJECT": PROJECT,
        "MINIBROKER_IMAGE": IMAGE,
        "MINIBROKER_ZOOKEEPER_PORT": str(zk),
        "MINIBROKER_PORT_1": str(ports[0]),
        "MINIBROKER_PORT_2": str(ports[1]),
        "MINIBROKER_PORT_3": str(ports[2]),
        # Published though no broker listens on them here (compose cannot drop a port).
        **kafka_port_env(kafka_ports),
        "MINIBROKER_UP_TIMEOUT": "300",
        "MINIBROKER_TLS_DIR": str(tls_dir),
    }
    for name in ("MINIBROKER_BOOTSTRAP", "MINIBROKER_ZOOKEEPER", "MINIBROKER_OVERRIDES",
                 "MINIBROKER_ZOOKEEPER_NODES", "MINIBROKER_COMMAND_CONFIG"):  # fmt: skip
        env.pop(name, None)
    cluster = DockerCluster(
        project=PROJECT,
        zookeeper=f"127.0.0.1:{zk}/minibroker",
        broker_ports={1: ports[0], 2: ports[1], 3: ports[2]},
        env=env,
        up_messages=[],
        kafka_ports={1: kafka_ports[0], 2: kafka_ports[1], 3: kafka_ports[2]},
    )
    cluster.compose("down-volumes")  # leftovers of an interrupted earlier run
    failed_before = request.session.testsfailed
    up = cluster.make("up-tls", timeout=UP_TIMEOUT_S)
    cluster.up_messages.append(up.stderr)
    try:
        if up.returncode != 0:
            pytest.fail(
                f"make up-tls failed (exit {up.returncode}):\n{up.stdout[-6000:]}\n"
                f"{up.stderr[-6000:]}"
            )
        assert "TLS + ZooKeeper ACLs" in up.stdout, up.stdout
        assert "SASL_SSL, SCRAM user admin" in up.stdout, up.stdout
        assert cluster.zookeeper in up.stdout, up.stdout
        yield cluster
    finally:
        if request.session.testsfailed > failed_before or up.returncode != 0:
            _show_logs(cluster, request)
        down = cluster.make("down-volumes")
        assert down.returncode == 0, f"make down-volumes failed:\n{down.stdout}\n{down.stderr}"


def cli(
    cluster: DockerCluster, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The host's CLI against the TLS cluster (``--command-config`` given by the caller)."""
    return subprocess.run(
        [sys.executable, "-m", "client.cli", *args, "--bootstrap-server", cluster.bootstrap],
        input=stdin,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in cluster.env.items() if k != "MINIBROKER_COMMAND_CONFIG"},
    )


def test_the_host_cli_works_with_the_generated_credentials_and_nothing_works_without(
    tls_cluster: DockerCluster,
) -> None:
    config = Path(tls_cluster.env["MINIBROKER_TLS_DIR"]) / "admin.properties"
    auth = ["--command-config", str(config)]
    zk = ["--zookeeper", tls_cluster.zookeeper]
    created = cli(tls_cluster, "topics", "create", "secure", "--replication-factor", "3",
                  *zk, *auth)  # fmt: skip
    assert created.returncode == 0, created.stderr
    lines = "".join(f"line-{i}\n" for i in range(LINES))
    produced = cli(tls_cluster, "produce", "secure", "--acks", "all", *auth, stdin=lines)
    assert produced.returncode == 0, produced.stderr
    consumed = cli(tls_cluster, "consume", "secure", "--from-beginning", "--max-messages",
                   str(LINES), "--timeout-ms", "20000", *auth)  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.split()) == sorted(lines.split())

    kafka_config = Path(tls_cluster.env["MINIBROKER_TLS_DIR"]) / "kafka-client.properties"
    kafka = f"127.0.0.1:{tls_cluster.kafka_ports[1]}"
    listed = subprocess.run(
        ["kcat", "-b", kafka, "-F", str(kafka_config), "-L", "-m", "20"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert "secure" in listed.stdout

    plaintext = cli(tls_cluster, "consume", "secure", "--from-beginning", "--timeout-ms", "3000")
    assert plaintext.returncode != 0
    assert "cannot reach" in plaintext.stderr

    outsider = KazooClient(hosts=tls_cluster.zookeeper)
    outsider.start(timeout=10)
    try:
        assert outsider.exists("/controller_epoch") is not None
        for broker_id in (1, 2, 3):
            data, _ = outsider.get(broker_path(broker_id))
            assert decode_broker_registration(data).kafka_endpoint is not None, data
            assert b'"KAFKA":"SASL_SSL"' in data, data
        with pytest.raises(NoAuthError):
            outsider.set("/controller_epoch", b"999")
        with pytest.raises(NoAuthError):
            outsider.create("/brokers/topics/evil", b"{}")
        # The SCRAM keys are the brokers' digest's alone to read (ZkData.sensitivePath).
        with pytest.raises(NoAuthError):
            outsider.get("/config/users/admin")
    finally:
        outsider.stop()
        outsider.close()
