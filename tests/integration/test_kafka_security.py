"""The Kafka listener authenticated, with Kafka's own clients (docs/security.md).

A TLS broker (mutual TLS on gRPC, the ZooKeeper digest) whose Kafka listener is SASL_SSL
with PLAIN (the JAAS users of its config), SCRAM-SHA-256 and SCRAM-SHA-512 (credentials in
``/config/users/<u>``, written by ``minibroker configs`` and by AlterUserScramCredentials):
each mechanism with at least two of kcat, confluent-kafka (in a subprocess), aiokafka and
kafka-python; a wrong password is SASL_AUTHENTICATION_FAILED and the client neither crashes
nor hangs; a request before authentication, or no authentication at all, closes the
connection. Then an SSL listener whose principal is the client certificate's subject
mapped by ``ssl.principal.mapping.rules``.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import socket
import ssl
import struct
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiokafka
import aiokafka.errors
import pytest
from aiokafka.helpers import create_ssl_context
from kazoo.client import KazooClient
from kio.index import load_response_schema
from kio.schema.alter_user_scram_credentials.v0 import request as alter_v0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.describe_user_scram_credentials.v0 import request as describe_v0
from kio.schema.metadata.v12.request import MetadataRequest
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i32

from deploy.ports import free_port_block
from deploy.tls_certs import ClusterCertificates, generate
from proto.transport.scram import ScramMechanism, salted_password
from proto.transport.tls import TlsConfig
from tests.cluster import Cluster, running_cluster
from tests.helpers import minibroker, wait_for
from tests.integration.test_kafka_listener import kafka_bootstrap
from tests.integration.test_kafka_quotas import wait_applied
from tests.integration.test_metrics import scrape, value
from tests.integration.test_tls import DIGEST, digest_client

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:kafka"),
]

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" '
    'user_paula="paula-secret";'
)
SASL_AUTHENTICATION_FAILED = 58


@dataclass
class Secured:
    cluster: Cluster
    certs: ClusterCertificates
    bootstrap: str
    command_config: Path
    """``zookeeper.auth.digest.file`` for ``minibroker configs``."""

    def log(self) -> str:
        return self.cluster.brokers[1].log_path.read_text()


def _cluster(zk_connect: str, tmp_path: Path, listener: dict[str, str]) -> Iterator[Secured]:
    certs = generate(tmp_path / "tls", (1,), clients=("client", "Alice"))
    digest_file = tmp_path / "zookeeper-digest"
    digest_file.write_text(DIGEST + "\n")
    acl = {"zookeeper.set.acl": "true", "zookeeper.auth.digest.file": str(digest_file)}
    props = {**certs.broker_properties(1, (1,)), **acl, "kafka.port": "0", **listener}
    command_config = tmp_path / "admin.properties"
    command_config.write_text(f"zookeeper.auth.digest.file={digest_file}\n")
    connect = zk_connect + "/secure"
    client = TlsConfig.from_files(certs.ca, certs.client)
    with (
        digest_client(connect) as zk,
        running_cluster(zk, connect, tmp_path, (1,), broker_overrides={1: props}, tls=client) as c,
    ):
        yield Secured(c, certs, kafka_bootstrap(c), command_config)


@pytest.fixture
def sasl_ssl(zk_connect: str, tmp_path: Path) -> Iterator[Secured]:
    yield from _cluster(
        zk_connect,
        tmp_path,
        {
            "listener.security.protocol.map": "GRPC:SSL,KAFKA:SASL_SSL",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.kafka.plain.sasl.jaas.config": JAAS,
        },
    )


def add_scram_user(secured: Secured, user: str, password: str) -> None:
    zookeeper = secured.cluster.brokers[1].spec.zookeeper_connect
    done = minibroker(
        "configs",
        "--zookeeper",
        zookeeper,
        "--command-config",
        str(secured.command_config),
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        user,
        "--add-config",
        f"SCRAM-SHA-256=[iterations=8192,password={password}],SCRAM-SHA-512=[password={password}]",
    )
    assert done.returncode == 0, done.stderr
    assert f"Completed updating config for user {user}." in done.stdout


def librdkafka(secured: Secured, mechanism: str, user: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": secured.bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(secured.certs.ca),
    }


def confluent(config: dict[str, Any], action: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.confluent_security_client",
            json.dumps(config),
            action,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, f"confluent-kafka crashed: {done.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def kcat(
    secured: Secured, mechanism: str, user: str, password: str, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "kcat",
            "-b",
            secured.bootstrap,
            "-X",
            "security.protocol=SASL_SSL",
            "-X",
            f"sasl.mechanisms={mechanism}",
            "-X",
            f"sasl.username={user}",
            "-X",
            f"sasl.password={password}",
            "-X",
            f"ssl.ca.location={secured.certs.ca}",
            *args,
        ],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def kcat_roundtrip(secured: Secured, mechanism: str, user: str, password: str) -> None:
    topic = f"kcat-{mechanism.lower()}"
    value = uuid.uuid4().hex
    produced = kcat(secured, mechanism, user, password, "-P", "-t", topic, stdin=value + "\n")
    assert produced.returncode == 0, produced.stderr
    read = kcat(secured, mechanism, user, password, "-C", "-t", topic, "-o", "beginning", "-e")
    assert read.returncode == 0, read.stderr
    assert value in read.stdout.split()


async def aiokafka_roundtrip(secured: Secured, mechanism: str, user: str, password: str) -> None:
    settings: dict[str, Any] = {
        "bootstrap_servers": secured.bootstrap,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": password,
        "ssl_context": create_ssl_context(cafile=str(secured.certs.ca)),
    }
    topic = f"aiokafka-{mechanism.lower()}"
    value = uuid.uuid4().bytes
    producer = aiokafka.AIOKafkaProducer(**settings, request_timeout_ms=15000)
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, partition=0)
    finally:
        await producer.stop()
    consumer = aiokafka.AIOKafkaConsumer(**settings, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tp = aiokafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        found = await consumer.getmany(tp, timeout_ms=10000)
        assert value in [r.value for r in found.get(tp, [])]
    finally:
        await consumer.stop()


def kafka_python_roundtrip(secured: Secured, mechanism: str, user: str, password: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka
    settings: dict[str, Any] = {
        "bootstrap_servers": secured.bootstrap,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": password,
        "ssl_cafile": str(secured.certs.ca),
    }
    topic = f"kafka-python-{mechanism.lower()}"
    value = uuid.uuid4().bytes
    producer = kafka.KafkaProducer(**settings)
    try:
        producer.send(topic, value, partition=0).get(timeout=30)
    finally:
        producer.close(timeout=5)
    consumer = kafka.KafkaConsumer(**settings, auto_offset_reset="earliest")
    try:
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        found = consumer.poll(timeout_ms=10000)
        assert value in [r.value for r in found.get(tp, [])]
    finally:
        consumer.close()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_sasl_ssl_plain_and_scram_with_kafka_clients(sasl_ssl: Secured) -> None:
    add_scram_user(sasl_ssl, "alice", "alice-secret")
    # PLAIN: the JAAS users; kcat and aiokafka.
    kcat_roundtrip(sasl_ssl, "PLAIN", "paula", "paula-secret")
    asyncio.run(aiokafka_roundtrip(sasl_ssl, "PLAIN", "admin", "admin-secret"))
    # SCRAM-SHA-256: kcat, confluent-kafka and kafka-python.
    kcat_roundtrip(sasl_ssl, "SCRAM-SHA-256", "alice", "alice-secret")
    config = librdkafka(sasl_ssl, "SCRAM-SHA-256", "alice", "alice-secret")
    assert confluent(config, "roundtrip", "confluent-256") == {"unflushed": 0, "found": True}
    kafka_python_roundtrip(sasl_ssl, "SCRAM-SHA-256", "alice", "alice-secret")
    # SCRAM-SHA-512: confluent-kafka and aiokafka.
    config = librdkafka(sasl_ssl, "SCRAM-SHA-512", "alice", "alice-secret")
    assert confluent(config, "roundtrip", "confluent-512") == {"unflushed": 0, "found": True}
    asyncio.run(aiokafka_roundtrip(sasl_ssl, "SCRAM-SHA-512", "alice", "alice-secret"))
    log = sasl_ssl.log()
    for principal, mechanism in (
        ("paula", "PLAIN"),
        ("admin", "PLAIN"),
        ("alice", "SCRAM-SHA-256"),
        ("alice", "SCRAM-SHA-512"),
    ):
        assert re.search(
            rf"event=kafka_authenticated .*principal='User:{principal}' mechanism={mechanism}", log
        ), f"no authentication of {principal} with {mechanism} in the broker's log"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_wrong_password_is_sasl_authentication_failed_without_a_hang(
    sasl_ssl: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    add_scram_user(sasl_ssl, "alice", "alice-secret")
    started = time.monotonic()
    for mechanism, user in (
        ("SCRAM-SHA-256", "alice"),
        ("PLAIN", "paula"),
        ("SCRAM-SHA-512", "eve"),
    ):
        result = confluent(librdkafka(sasl_ssl, mechanism, user, "wrong"), "metadata")
        assert result["topics"] is None
        assert any("Authentication failed" in e for e in result["errors"]), result
        refused = kcat(sasl_ssl, mechanism, user, "wrong", "-L", "-m", "5")
        assert refused.returncode != 0
        assert "Authentication failed" in refused.stderr, refused.stderr

    async def aiokafka_wrong() -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=sasl_ssl.bootstrap,
            security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-256",
            sasl_plain_username="alice",
            sasl_plain_password="wrong",
            ssl_context=create_ssl_context(cafile=str(sasl_ssl.certs.ca)),
        )
        with pytest.raises(aiokafka.errors.KafkaError):
            await asyncio.wait_for(producer.start(), 30)
        await producer.stop()

    asyncio.run(aiokafka_wrong())
    # aiokafka logs the broker's answer and fails to bootstrap.
    assert "[Error 58] SaslAuthenticationFailed: Authentication failed" in caplog.text
    assert time.monotonic() - started < 150
    assert "authentication failed (SCRAM-SHA-256)" in sasl_ssl.log()
    # The broker still serves the right password.
    kcat_roundtrip(sasl_ssl, "SCRAM-SHA-256", "alice", "alice-secret")


def frame(api_key: int, version: int, body: Any, correlation_id: int = 7) -> bytes:
    schema = type(body)
    header_schema = schema.__header_schema__
    out = io.BytesIO()
    header = header_schema(
        request_api_key=api_key,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id="raw",
    )
    entity_writer(header_schema)(out, header)
    entity_writer(schema)(out, body)
    data = out.getvalue()
    return struct.pack(">i", len(data)) + data


def tls_socket(secured: Secured) -> ssl.SSLSocket:
    host, port = secured.bootstrap.split(",")[0].rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(secured.certs.ca))
    raw = socket.create_connection((host, int(port)), timeout=15)
    return context.wrap_socket(raw, server_hostname=host)


def read_response(sock: socket.socket, api_key: int, version: int) -> Any:
    head = _recv(sock, 4)
    (size,) = struct.unpack(">i", head)
    data = _recv(sock, size)
    schema = load_response_schema(api_key, version)
    _, header_size = entity_reader(schema.__header_schema__)(data, 0)
    response, _ = entity_reader(schema)(data, header_size)
    return response


def _recv(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def closed(sock: ssl.SSLSocket) -> bool:
    try:
        return sock.recv(1) == b""
    except (ConnectionError, ssl.SSLError):
        return True


def test_before_authentication_only_the_sasl_apis_are_served(sasl_ssl: Secured) -> None:
    with tls_socket(sasl_ssl) as sock:
        sock.sendall(
            frame(
                18, 3, ApiVersionsRequest(client_software_name="raw", client_software_version="1")
            )
        )
        versions = read_response(sock, 18, 3)
        listed = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert listed[17] == (0, 1)
        assert listed[36] == (0, 2)
        sock.sendall(
            frame(
                3,
                12,
                MetadataRequest(
                    topics=None,
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                ),
            )
        )
        assert closed(sock)
    assert "unexpected Kafka request of API 3 during SASL handshake" in sasl_ssl.log()
    # No authentication at all: closed when the deadline passes.
    with tls_socket(sasl_ssl) as sock:
        sock.settimeout(30)
        started = time.monotonic()
        assert closed(sock)
        assert 5 < time.monotonic() - started < 25
    wait_for(lambda: "no authentication within" in sasl_ssl.log(), 10)


def test_scram_credentials_through_the_kafka_apis(sasl_ssl: Secured) -> None:
    add_scram_user(sasl_ssl, "alice", "alice-secret")
    admin = librdkafka(sasl_ssl, "SCRAM-SHA-512", "alice", "alice-secret")
    result = confluent(admin, "scram")
    assert result["altered"] == {
        "carol": "ok",
        "nobody": "RESOURCE_NOT_FOUND",
        "dave": "UNACCEPTABLE_CREDENTIAL",
    }
    assert result["described"] == {
        "carol": [["SCRAM_SHA_256", 8192], ["SCRAM_SHA_512", 4096]],
        "nobody": "RESOURCE_NOT_FOUND",
    }
    # carol's credential, set by the Kafka API, authenticates.
    kcat_roundtrip(sasl_ssl, "SCRAM-SHA-256", "carol", "carol-secret")
    # A raw AlterUserScramCredentials and DescribeUserScramCredentials (kio's encoding).
    salt = b"0123456789abcdef"
    upsert = alter_v0.ScramCredentialUpsertion(
        name="erin",
        mechanism=i8(ScramMechanism.SCRAM_SHA_256.value),
        iterations=i32(4096),
        salt=salt,
        salted_password=salted_password(ScramMechanism.SCRAM_SHA_256, "erin-secret", salt, 4096),
    )
    with tls_socket(sasl_ssl) as sock:
        _authenticate_plain(sock, "admin", "admin-secret")
        sock.sendall(
            frame(
                51, 0, alter_v0.AlterUserScramCredentialsRequest(deletions=(), upsertions=(upsert,))
            )
        )
        altered = read_response(sock, 51, 0)
        assert [(r.user, r.error_code.value) for r in altered.results] == [("erin", 0)]
        sock.sendall(frame(50, 0, describe_v0.DescribeUserScramCredentialsRequest(users=None)))
        described = read_response(sock, 50, 0)
        assert described.error_code.value == 0
        users = {
            r.user: [(c.mechanism, c.iterations) for c in r.credential_infos]
            for r in described.results
        }
        assert users["erin"] == [(1, 4096)]
        assert users["alice"] == [(1, 8192), (2, 4096)]
    kcat_roundtrip(sasl_ssl, "SCRAM-SHA-256", "erin", "erin-secret")
    shown = minibroker(
        "configs",
        "--zookeeper",
        sasl_ssl.cluster.brokers[1].spec.zookeeper_connect,
        "--command-config",
        str(sasl_ssl.command_config),
        "--describe",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
    )
    assert shown.returncode == 0, shown.stderr
    assert (
        "SCRAM credential configs for user-principal 'alice' are "
        "SCRAM-SHA-256=iterations=8192,SCRAM-SHA-512=iterations=4096"
    ) in shown.stdout
    raw = sasl_ssl.cluster.zk.get("/config/users/alice")[0]
    config = json.loads(raw)["config"]
    assert re.fullmatch(
        r"salt=[A-Za-z0-9+/=]+,stored_key=[A-Za-z0-9+/=]+,server_key=[A-Za-z0-9+/=]+,iterations=8192",
        config["SCRAM-SHA-256"],
    )
    changes = sasl_ssl.cluster.zk.get_children("/config/changes")
    bodies = [json.loads(sasl_ssl.cluster.zk.get(f"/config/changes/{c}")[0]) for c in changes]
    assert {"version": 2, "entity_path": "users/alice"} in bodies


def _authenticate_plain(sock: ssl.SSLSocket, user: str, password: str) -> None:
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    sock.sendall(frame(17, 1, SaslHandshakeRequest(mechanism="PLAIN")))
    handshake = read_response(sock, 17, 1)
    assert handshake.error_code.value == 0
    token = b"\0" + user.encode() + b"\0" + password.encode()
    sock.sendall(frame(36, 2, SaslAuthenticateRequest(auth_bytes=token)))
    answer = read_response(sock, 36, 2)
    assert answer.error_code.value == 0, answer.error_message


@pytest.fixture
def ssl_listener(zk_connect: str, tmp_path: Path) -> Iterator[Secured]:
    yield from _cluster(
        zk_connect,
        tmp_path,
        {
            "listener.security.protocol.map": "KAFKA:SSL",
            "ssl.principal.mapping.rules": "RULE:^CN=([a-zA-Z]+)$/$1/L,DEFAULT",
        },
    )


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_an_ssl_listener_takes_the_principal_from_the_client_certificate(
    ssl_listener: Secured,
) -> None:
    certs = ssl_listener.certs
    alice = certs.directory / "Alice.pem"
    config = {
        "bootstrap.servers": ssl_listener.bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs.ca),
        "ssl.certificate.location": str(alice),
        "ssl.key.location": str(alice),
    }
    assert confluent(config, "roundtrip", "mtls") == {"unflushed": 0, "found": True}
    value = uuid.uuid4().hex
    ssl_args = [
        "-X",
        "security.protocol=SSL",
        "-X",
        f"ssl.ca.location={certs.ca}",
        "-X",
        f"ssl.certificate.location={alice}",
        "-X",
        f"ssl.key.location={alice}",
    ]
    produced = subprocess.run(
        ["kcat", "-b", ssl_listener.bootstrap, *ssl_args, "-P", "-t", "mtls-kcat"],
        input=value + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert produced.returncode == 0, produced.stderr
    wait_for(lambda: "principal='User:alice'" in ssl_listener.log(), 10)
    # Without a client certificate the handshake fails (ssl.client.auth=required).
    no_cert = confluent(
        {k: v for k, v in config.items() if "certificate" not in k and "key" not in k}, "metadata"
    )
    assert no_cert["topics"] is None


@pytest.fixture
def sasl_plaintext(zk_client: KazooClient, zk_connect: str, tmp_path: Path) -> Iterator[Secured]:
    props = {
        "kafka.port": "0",
        "quota.window.num": "2",
        "quota.window.size.seconds": "1",
        "metrics.prometheus.port": str(free_port_block(1)),
        "listener.security.protocol.map": "KAFKA:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.jaas.config": JAAS,
    }
    command_config = tmp_path / "empty.properties"
    command_config.write_text("")
    with running_cluster(zk_client, zk_connect, tmp_path, (1,), overrides=props) as cluster:
        yield Secured(
            cluster, ClusterCertificates(tmp_path), kafka_bootstrap(cluster), command_config
        )


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_sasl_plaintext_with_kafka_python_kcat_and_the_unwrapped_v0_exchange(
    sasl_plaintext: Secured,
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka
    bootstrap = sasl_plaintext.bootstrap
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="paula",
        sasl_plain_password="paula-secret",
    )
    try:
        producer.send("plain-text", b"v", partition=0).get(timeout=30)
    finally:
        producer.close(timeout=5)
    add_scram_user(sasl_plaintext, "alice", "alice-secret")
    sasl = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=SCRAM-SHA-512"]
    read = subprocess.run(
        ["kcat", "-b", bootstrap, *sasl, "-X", "sasl.username=alice", "-X",
         "sasl.password=alice-secret", "-C", "-t", "plain-text", "-o", "beginning", "-e"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert read.returncode == 0, read.stderr
    assert read.stdout.split() == ["v"]
    # SaslHandshake v0: the PLAIN token as a bare frame, answered by a bare (empty) frame,
    # then requests as usual.
    from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest

    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=15) as sock:
        sock.sendall(frame(17, 0, SaslHandshakeRequest(mechanism="PLAIN")))
        assert read_response(sock, 17, 0).error_code.value == 0
        token = b"\0paula\0paula-secret"
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert _recv(sock, 4) == b"\0\0\0\0"
        sock.sendall(frame(18, 3, ApiVersionsRequest(client_software_name="raw",
                                                    client_software_version="1")))  # fmt: skip
        assert read_response(sock, 18, 3).error_code.value == 0
    wait_for(lambda: sasl_plaintext.log().count("principal='User:paula' mechanism=PLAIN") >= 2, 10)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_user_quota_applies_to_the_authenticated_user(sasl_plaintext: Secured) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka
    quota = 50_000
    done = minibroker(
        "configs", "--zookeeper", sasl_plaintext.cluster.brokers[1].spec.zookeeper_connect,
        "--alter", "--entity-type", "users", "--entity-name", "paula",
        "--add-config", f"producer_byte_rate={quota}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    wait_applied(sasl_plaintext.cluster, "/config/users/paula")
    throttle_max = 0.0
    producer = kafka.KafkaProducer(
        bootstrap_servers=sasl_plaintext.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="paula",
        sasl_plain_password="paula-secret",
        client_id="paulas-app",
        acks=1,
        linger_ms=5,
    )
    try:
        for _ in range(200):
            producer.send("metered", b"x" * 1000, partition=0)
        producer.flush(timeout=60)
        for group in producer.metrics().values():
            throttle_max = max(throttle_max, float(group.get("throttle-time-max", 0.0)))
    finally:
        producer.close(timeout=10)
    assert throttle_max > 0
    port = int(sasl_plaintext.cluster.brokers[1].spec.overrides["metrics.prometheus.port"])
    samples = scrape(port)
    tags = {"user": "paula", "client_id": ""}  # the quota is the user's: its metrics too
    assert value(samples, "kafka_server_produce_throttle_time", **tags) > 0
