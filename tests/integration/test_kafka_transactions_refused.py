"""Transactional producers fail at once, naming transactions, with each Kafka client:
minibroker has no transaction coordinator, and a client that retried forever (librdkafka
did, for INVALID_REQUEST) would hang its application. Each client runs under a deadline;
librdkafka in a subprocess, so that a hang or a crash fails the test instead of pytest."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from broker.kafka_listener.messages import build
from broker.request_handlers import TRANSACTIONAL_ID_AUTHORIZATION_FAILED
from deploy.zookeeper import ZooKeeperServer
from tests.cluster import Cluster, running_cluster
from tests.helpers import chrooted_client
from tests.integration.test_kafka_listener import KAFKA_PORT_FREE, kafka_bootstrap, kafka_call

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

FAIL_WITHIN_S = 15.0
"""A fatal error comes back in one round trip; this leaves room for a slow, shared machine
while staying far below the clients' own retry horizons (librdkafka retried forever)."""


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with (
        chrooted_client(zookeeper) as zk,
        running_cluster(
            zk,
            f"{zookeeper.connect_string}{zk.chroot}",
            tmp_path_factory.mktemp("txn"),
            (1,),
            overrides=KAFKA_PORT_FREE,
        ) as running,
    ):
        yield running


LIBRDKAFKA_SCRIPT = textwrap.dedent(
    """
    import sys, confluent_kafka
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": sys.argv[1], "transactional.id": "txn-librdkafka"}
    )
    try:
        producer.init_transactions(60)
    except confluent_kafka.KafkaException as err:
        error = err.args[0]
        print(f"fatal={error.fatal()} code={error.name()} message={error.str()}")
    else:
        print("init_transactions succeeded")
    """
)


def test_librdkafka_init_transactions_fails_at_once_naming_transactions(cluster: Cluster) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", LIBRDKAFKA_SCRIPT, kafka_bootstrap(cluster)],
        capture_output=True,
        text=True,
        timeout=FAIL_WITHIN_S * 2,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 0, f"the librdkafka process crashed: {done.stderr}"
    assert "fatal=True code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in done.stdout, done.stdout
    assert "transactions are not supported by this broker" in done.stdout
    assert elapsed < FAIL_WITHIN_S, f"init_transactions took {elapsed:.1f} s"


def test_aiokafka_transactional_producer_start_fails_at_once(cluster: Cluster) -> None:
    import aiokafka
    from aiokafka.errors import TransactionalIdAuthorizationFailed

    async def start() -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=kafka_bootstrap(cluster),
            transactional_id="txn-aiokafka",
            request_timeout_ms=10000,
        )
        try:
            async with asyncio.timeout(FAIL_WITHIN_S):
                await producer.start()
        finally:
            await producer.stop()

    started = time.monotonic()
    with pytest.raises(TransactionalIdAuthorizationFailed, match=r"TransactionalId.*txn-aiokafka"):
        asyncio.run(start())
    assert time.monotonic() - started < FAIL_WITHIN_S


# kafka-python 3.0 calls importlib.resources' legacy API when imported (its own warning).
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_kafka_python_init_transactions_fails_at_once(cluster: Cluster) -> None:
    import kafka
    from kafka.errors import TransactionalIdAuthorizationFailedError

    producer = kafka.KafkaProducer(
        bootstrap_servers=kafka_bootstrap(cluster),
        transactional_id="txn-kafka-python",
        max_block_ms=int(FAIL_WITHIN_S * 4 * 1000),
        request_timeout_ms=10000,
    )
    try:
        started = time.monotonic()
        with pytest.raises(TransactionalIdAuthorizationFailedError, match="TransactionalId"):
            producer.init_transactions()
        elapsed = time.monotonic() - started
        assert elapsed < FAIL_WITHIN_S, f"init_transactions took {elapsed:.1f} s"
    finally:
        producer.close(timeout=10)


def test_init_producer_id_with_a_transactional_id_is_refused_with_the_fatal_code(
    cluster: Cluster,
) -> None:
    """Clients ask FindCoordinator first; a client that goes straight to InitProducerId
    (the protocol allows it) gets the same fatal answer."""
    from kio.schema.init_producer_id.v4 import request as init_v4

    body = build(
        init_v4.InitProducerIdRequest,
        {
            "transactional_id": "txn-raw",
            "transaction_timeout": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    response = kafka_call(kafka_bootstrap(cluster), 22, 4, body)
    assert response.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert response.producer_id == -1
