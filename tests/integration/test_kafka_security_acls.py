"""SASL and ACLs together (docs/security.md): a SASL_SSL Kafka listener with SCRAM on a
broker with Kafka's ``AclAuthorizer`` and ``allow.everyone.if.no.acl.found=false``, as
``cluster up --tls`` runs it. A SCRAM user without ACLs is refused Metadata of a named topic
and Produce (TOPIC_AUTHORIZATION_FAILED) with confluent-kafka (in a subprocess) and
kafka-python; ``minibroker acls --producer`` lets her produce; a Deny beats her Allow; the
super user ``User:admin`` is never refused. And the SCRAM keys in ``/config/users`` are the
brokers' digest's alone to read (Kafka's ``ZkData.sensitivePath``), whoever writes them.
(A certificate's principal on gRPC: tests/integration/test_acls.py.)"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from tests.helpers import minibroker, wait_for
from tests.integration.test_kafka_security import (
    Secured,
    _cluster,
    add_scram_user,
    confluent,
    librdkafka,
)
from tests.integration.test_tls import DIGEST

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:kafka"),
]

TOPIC = "ledger"
ALICE, ADMIN = ("alice", "alice-secret"), ("admin", "admin-secret")
REFUSED = "TOPIC_AUTHORIZATION_FAILED"


@pytest.fixture
def sasl_acls(zk_connect: str, tmp_path: Path) -> Iterator[Secured]:
    """One broker: SASL_SSL with SCRAM, ACLs on; super users the broker, the harness's own
    client certificate (it reads metadata over gRPC) and the SCRAM user admin."""
    listener = {
        "listener.security.protocol.map": "GRPC:SSL,KAFKA:SASL_SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": "User:CN=broker-1;User:CN=client;User:admin",
    }
    for secured in _cluster(zk_connect, tmp_path, listener):
        # The tools' digest with zookeeper.set.acl, as cluster up --tls's admin.properties.
        command_config = tmp_path / "admin-set-acl.properties"
        command_config.write_text(
            f"zookeeper.set.acl=true\nzookeeper.auth.digest.file={tmp_path / 'zookeeper-digest'}\n"
        )
        yield dataclasses.replace(secured, command_config=command_config)


def acls(secured: Secured, *args: str) -> None:
    done = minibroker(
        "acls",
        "--zookeeper",
        secured.cluster.brokers[1].spec.zookeeper_connect,
        "--command-config",
        str(secured.command_config),
        *args,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def confluent_produce(secured: Secured, user: tuple[str, str]) -> str | None:
    result = confluent(librdkafka(secured, "SCRAM-SHA-256", *user), "produce", TOPIC)
    error: str | None = result["error"]
    return error


def confluent_metadata(secured: Secured, user: tuple[str, str]) -> str | None:
    result = confluent(librdkafka(secured, "SCRAM-SHA-512", *user), "topic_metadata", TOPIC)
    error: str | None = result["error"]
    return error


def kafka_python_produce(secured: Secured, user: tuple[str, str]) -> str | None:
    """One record from a new kafka-python producer: None, or the error's class name (its
    Metadata comes first: a topic it may not Describe fails there, before any Produce)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka
        import kafka.errors
    producer = kafka.KafkaProducer(
        bootstrap_servers=secured.bootstrap,
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username=user[0],
        sasl_plain_password=user[1],
        ssl_cafile=str(secured.certs.ca),
        max_block_ms=20_000,
        request_timeout_ms=15_000,
        retries=0,
    )
    try:
        producer.send(TOPIC, b"v", partition=0).get(timeout=30)
    except kafka.errors.KafkaError as err:
        return type(err).__name__
    finally:
        producer.close(timeout=5)
    return None


def refusals(secured: Secured) -> list[str]:
    return [line for line in secured.log().splitlines() if "event=acl_denied" in line]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_scram_user_needs_acls_a_deny_beats_her_allow_and_the_super_user_needs_none(
    sasl_acls: Secured,
) -> None:
    add_scram_user(sasl_acls, *ALICE)
    add_scram_user(sasl_acls, *ADMIN)
    sasl_acls.cluster.create_topic(TOPIC, {0: [1]})

    # No ACL: Metadata of the topic is refused, and so the produce (both clients).
    assert confluent_metadata(sasl_acls, ALICE) == REFUSED
    assert confluent_produce(sasl_acls, ALICE) == REFUSED
    assert kafka_python_produce(sasl_acls, ALICE) == "TopicAuthorizationFailedError"
    logged = refusals(sasl_acls)
    assert any(
        "principal=User:alice" in line and "operation=Describe" in line for line in logged
    ), logged

    # Describe alone: Metadata answers, the Produce itself is refused (no Write).
    acls(sasl_acls, "--add", "--allow-principal", "User:alice", "--operation", "Describe",
         "--topic", TOPIC)  # fmt: skip
    wait_for(lambda: confluent_metadata(sasl_acls, ALICE) is None, 30, message="Describe seen")
    assert confluent_produce(sasl_acls, ALICE) == REFUSED
    assert kafka_python_produce(sasl_acls, ALICE) == "TopicAuthorizationFailedError"
    assert any(
        "principal=User:alice" in line and "operation=Write" in line and f"Topic:{TOPIC}" in line
        for line in refusals(sasl_acls)
    )

    # kafka-acls' --producer: Write, Describe and Create on the topic.
    acls(sasl_acls, "--add", "--allow-principal", "User:alice", "--producer", "--topic", TOPIC)
    wait_for(lambda: confluent_produce(sasl_acls, ALICE) is None, 30, message="Write seen")
    assert kafka_python_produce(sasl_acls, ALICE) is None

    # A Deny beats her Allow.
    acls(sasl_acls, "--add", "--deny-principal", "User:alice", "--operation", "Write",
         "--topic", TOPIC)  # fmt: skip
    wait_for(lambda: confluent_produce(sasl_acls, ALICE) == REFUSED, 30, message="Deny seen")
    assert kafka_python_produce(sasl_acls, ALICE) == "TopicAuthorizationFailedError"

    # A super user is never refused, not even by a Deny of everything to everyone.
    acls(sasl_acls, "--add", "--deny-principal", "User:*", "--operation", "All", "--topic", TOPIC)
    wait_for(lambda: confluent_metadata(sasl_acls, ALICE) == REFUSED, 30, message="Deny All")
    assert confluent_metadata(sasl_acls, ADMIN) is None
    assert confluent_produce(sasl_acls, ADMIN) is None
    assert kafka_python_produce(sasl_acls, ADMIN) is None
    assert not any("principal=User:admin" in line for line in refusals(sasl_acls))


def test_scram_keys_are_readable_only_with_the_brokers_digest(sasl_acls: Secured) -> None:
    """Written by ``minibroker configs`` (alice) and by a broker's AlterUserScramCredentials
    (carol), the credentials are NoAuth to a client without the digest; the broker, which
    has it, still authenticates both."""
    add_scram_user(sasl_acls, *ALICE)
    add_scram_user(sasl_acls, *ADMIN)
    admin = librdkafka(sasl_acls, "SCRAM-SHA-256", *ADMIN)
    assert confluent(admin, "scram")["altered"]["carol"] == "ok"
    connect = sasl_acls.cluster.brokers[1].spec.zookeeper_connect
    outsider = KazooClient(hosts=connect)
    outsider.start(timeout=10)
    try:
        for user in ("alice", "carol", "admin"):
            with pytest.raises(NoAuthError):
                outsider.get(f"/config/users/{user}")
        with pytest.raises(NoAuthError):
            outsider.get_children("/config/users")
        # Other config znodes stay the world's to read (Kafka's secure ACL).
        assert outsider.exists("/config/topics") is not None
        outsider.get_children("/config/topics")
    finally:
        outsider.stop()
        outsider.close()
    insider = sasl_acls.cluster.zk  # the brokers' digest
    for user in ("alice", "carol"):
        acl_list, _ = insider.get_acls(f"/config/users/{user}")
        assert [(a.perms, a.id.scheme, a.id.id.split(":")[0]) for a in acl_list] == [
            (31, "digest", DIGEST.split(":")[0])
        ], acl_list
    # The broker reads the keys with its digest: both users authenticate (the listing of
    # every topic answers, without the topics they may not Describe).
    for mechanism, credentials in (
        ("SCRAM-SHA-512", ALICE),
        ("SCRAM-SHA-256", ("carol", "carol-secret")),
    ):
        result: dict[str, Any] = confluent(
            librdkafka(sasl_acls, mechanism, *credentials), "metadata"
        )
        assert result["topics"] is not None, result
    log = sasl_acls.log()
    assert "principal='User:alice' mechanism=SCRAM-SHA-512" in log
    assert "principal='User:carol' mechanism=SCRAM-SHA-256" in log
