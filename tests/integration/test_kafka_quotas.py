"""Client quotas through Kafka's clients: AlterClientQuotas and DescribeClientQuotas
(kio's encoding of Kafka's schemas, as a client library sends them, and kafka-python's
own request classes), ``minibroker configs`` on the same znodes, and producers and
consumers over their quotas throttled (confluent-kafka's ``throttle_cb``, kafka-python's
throttle handling)."""

from __future__ import annotations

import datetime
import json
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from kazoo.client import KazooClient
from kio.schema.alter_client_quotas.v1 import request as alter_v1
from kio.schema.describe_client_quotas.v1 import request as describe_v1
from kio.schema.metadata.v12 import request as metadata_v12
from kio.static.primitive import f64, i8

from deploy.ports import free_port_block
from proto.records.record_batch import Record, encode_batch
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.zk.sync_client import read_registered_broker
from tests.cluster import Cluster, running_cluster
from tests.helpers import minibroker, wait_for
from tests.integration.test_kafka_listener import kafka_bootstrap, kafka_call
from tests.integration.test_metrics import scrape, value

with warnings.catch_warnings():  # kafka-python 3.0 loads its schemas with read_text
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(150),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:kafka"),
]

ALTER, DESCRIBE = 49, 48
NONE, UNSUPPORTED_VERSION, INVALID_REQUEST = 0, 35, 42
QUICK_WINDOWS = {"kafka.port": "0", "quota.window.num": "2", "quota.window.size.seconds": "1"}
"""Two 1-second samples: a client is measured over 1 s at least, so a test throttles it
after a second's worth of its quota instead of ten."""


def alter(bootstrap: str, entries: list[Any], validate_only: bool = False) -> Any:
    body = alter_v1.AlterClientQuotasRequest(entries=tuple(entries), validate_only=validate_only)
    return kafka_call(bootstrap, ALTER, 1, body)


def entry(parts: Sequence[tuple[str, str | None]], ops: Sequence[tuple[str, float | None]]) -> Any:
    return alter_v1.EntryData(
        entity=tuple(alter_v1.EntityData(entity_type=t, entity_name=n) for t, n in parts),
        ops=tuple(
            alter_v1.OpData(key=k, value=f64(0.0 if v is None else float(v)), remove=v is None)
            for k, v in ops
        ),
    )


def describe(bootstrap: str, components: list[tuple[str, int, str | None]], strict: bool) -> Any:
    body = describe_v1.DescribeClientQuotasRequest(
        components=tuple(
            describe_v1.ComponentData(entity_type=t, match_type=i8(m), match=n)
            for t, m, n in components
        ),
        strict=strict,
    )
    return kafka_call(bootstrap, DESCRIBE, 1, body)


def described(response: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    assert response.error_code == NONE, response.error_message
    return {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {
            v.key: v.value for v in entry.values
        }
        for entry in response.entries
    }


def wait_applied(cluster: Cluster, entity_path: str) -> None:
    """Until every broker logged that it applied the quotas of ``entity_path`` (they read
    them from ZooKeeper when notified)."""
    for broker_id, broker in cluster.brokers.items():
        log_path = broker.log_path
        assert log_path is not None
        line = f"event=quotas_updated broker={broker_id} entity={entity_path} "

        def applied(path: Path = log_path, line: str = line) -> bool:
            return line in path.read_text(errors="replace")

        wait_for(applied, 20, message=f"broker did not apply the quotas of {entity_path}")


def grpc_bootstrap(cluster: Cluster) -> str:
    addresses = []
    for broker_id in cluster.live():
        registered = read_registered_broker(cluster.zk, broker_id)
        assert registered is not None
        addresses.append(f"{registered.host}:{registered.port}")
    return ",".join(addresses)


def kafka_python_describe(bootstrap: str, client_id: str) -> dict[str, float]:
    """DescribeClientQuotas sent by kafka-python's own client (its request classes and
    connection; its admin client has no method for it)."""
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        request = DescribeClientQuotasRequest[1](
            components=[("client-id", 0, client_id)], strict=True
        )

        async def send() -> Any:
            return await admin._manager.send(request)

        response = admin._manager.run(send)
    finally:
        admin.close()
    assert response.error_code == NONE
    [found] = response.entries
    assert [(e.entity_type, e.entity_name) for e in found.entity] == [("client-id", client_id)]
    return {v.key: v.value for v in found.values}


def kafka_python_alter(bootstrap: str, client_id: str, key: str, value: float) -> int:
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        request = AlterClientQuotasRequest[1](
            entries=[([("client-id", client_id)], [(key, value, False)])], validate_only=False
        )

        async def send() -> Any:
            return await admin._manager.send(request)

        response = admin._manager.run(send)
    finally:
        admin.close()
    [result] = response.entries
    return int(result.error_code)


def test_quotas_are_altered_and_described_through_the_kafka_api_and_the_cli(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(
        zk_client, zk_connect, tmp_path, broker_ids=(1, 2), overrides={"kafka.port": "0"}
    ) as cluster:
        bootstrap = kafka_bootstrap(cluster)
        app = [("client-id", "app/1")]

        # validate_only checks and stores nothing
        response = alter(bootstrap, [entry(app, [("producer_byte_rate", 1024.0)])], True)
        assert [e.error_code for e in response.entries] == [NONE]
        assert described(describe(bootstrap, [], strict=False)) == {}

        response = alter(
            bootstrap,
            [
                entry(app, [("producer_byte_rate", 1024.0), ("request_percentage", 12.5)]),
                entry([("user", None)], [("consumer_byte_rate", 2048.0)]),
                entry([("user", "alice"), ("client-id", None)], [("producer_byte_rate", 10.0)]),
                entry([("client-id", "bad")], [("retention.ms", 1.0)]),
                entry([("client-id", "bad")], [("producer_byte_rate", 1.5)]),
                entry([("client-id", "")], [("producer_byte_rate", 1.0)]),
                entry([("group", "g")], [("producer_byte_rate", 1.0)]),
            ],
        )
        codes = [(e.error_code, e.error_message) for e in response.entries]
        assert codes[:3] == [(NONE, None)] * 3
        assert [c for c, _ in codes[3:]] == [INVALID_REQUEST] * 4
        assert codes[3][1] == "Invalid configuration key retention.ms"
        assert codes[4][1] == "Configuration producer_byte_rate must be a LONG value"
        assert codes[5][1] == "Empty client-id not supported"

        # Kafka's znodes, names sanitized, and a change notification per entity
        data, _ = zk_client.get("/config/clients/app%2F1")
        assert json.loads(data) == {
            "version": 1,
            "config": {"producer_byte_rate": "1024", "request_percentage": "12.5"},
        }
        data, _ = zk_client.get("/config/users/alice/clients/<default>")
        assert json.loads(data)["config"] == {"producer_byte_rate": "10"}
        changes = [
            json.loads(zk_client.get(f"/config/changes/{c}")[0])["entity_path"]
            for c in sorted(zk_client.get_children("/config/changes"))
        ]
        assert changes[-3:] == [
            "clients/app%2F1",
            "users/<default>",
            "users/alice/clients/<default>",
        ]

        everything = described(describe(bootstrap, [], strict=False))
        assert everything == {
            (("client-id", "app/1"),): {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
            (("user", None),): {"consumer_byte_rate": 2048.0},
            (("user", "alice"), ("client-id", None)): {"producer_byte_rate": 10.0},
        }
        # strict: only entities with nothing but the filtered parts; the default match
        assert described(describe(bootstrap, [("user", 1, None)], strict=True)) == {
            (("user", None),): {"consumer_byte_rate": 2048.0}
        }
        assert set(described(describe(bootstrap, [("user", 2, None)], strict=False))) == {
            (("user", None),),
            (("user", "alice"), ("client-id", None)),
        }
        refused = describe(bootstrap, [("group", 2, None)], strict=False)
        assert refused.error_code == UNSUPPORTED_VERSION
        assert refused.error_message == "Custom entity type 'group' not supported"
        refused = describe(bootstrap, [("user", 2, None), ("user", 1, None)], strict=False)
        assert refused.error_code == INVALID_REQUEST

        # a second client, kafka-python, reads and writes the same quotas
        assert kafka_python_describe(bootstrap, "app/1") == {
            "producer_byte_rate": 1024.0,
            "request_percentage": 12.5,
        }
        assert kafka_python_alter(bootstrap, "app/1", "consumer_byte_rate", 4096.0) == NONE
        assert kafka_python_alter(bootstrap, "app/1", "nonsense", 1.0) == INVALID_REQUEST

        # the command line: the same code, the same answers
        env = {"MINIBROKER_ZOOKEEPER": zk_connect, "MINIBROKER_BOOTSTRAP": grpc_bootstrap(cluster)}
        shown = minibroker(
            "configs", "--describe", "--entity-type", "clients", "--entity-name", "app/1", env=env
        )
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.splitlines() == [
            "Quota configs for client-id 'app/1' are consumer_byte_rate=4096.0, "
            "producer_byte_rate=1024.0, request_percentage=12.5"
        ]
        done = minibroker(
            "configs", "--alter", "--entity-type", "clients", "--entity-default",
            "--add-config", "producer_byte_rate=500", env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "Completed updating config for entity: the default client-id."
        done = minibroker(
            "configs", "--alter", "--entity-type", "users", "--entity-name", "bob",
            "--add-config", "producer_byte_rate=7.5", env=env,
        )  # fmt: skip
        assert done.returncode != 0
        assert "Configuration producer_byte_rate must be a LONG value" in done.stderr
        assert described(describe(bootstrap, [("client-id", 1, None)], strict=True)) == {
            (("client-id", None),): {"producer_byte_rate": 500.0}
        }
        done = minibroker(
            "configs", "--alter", "--entity-type", "clients", "--entity-name", "app/1",
            "--delete-config", "producer_byte_rate,request_percentage,consumer_byte_rate",
            env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert described(describe(bootstrap, [("client-id", 0, "app/1")], strict=True)) == {}


def test_a_producer_over_its_byte_rate_is_throttled_near_its_quota(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    metrics_port = free_port_block(1)
    overrides = {**QUICK_WINDOWS, "metrics.prometheus.port": str(metrics_port)}
    with running_cluster(
        zk_client, zk_connect, tmp_path, broker_ids=(1,), overrides=overrides
    ) as cluster:
        cluster.create_topic("metered", {0: [1]})
        bootstrap = kafka_bootstrap(cluster)
        quota = 50_000
        response = alter(
            bootstrap, [entry([("client-id", "metered-app")], [("producer_byte_rate", quota)])]
        )
        assert [e.error_code for e in response.entries] == [NONE]
        wait_applied(cluster, "/config/clients/metered-app")

        throttles: list[int] = []
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": "metered-app",
                "acks": 1,
                "linger.ms": 5,
                "batch.size": 16384,
                "message.timeout.ms": 60_000,
                "throttle_cb": lambda event: throttles.append(int(event.throttle_time * 1000)),
            }
        )
        try:
            payload = b"x" * 1000
            total = 300_000
            started = time.monotonic()
            for _ in range(total // len(payload)):
                while True:
                    try:
                        producer.produce("metered", payload, partition=0)
                        break
                    except BufferError:
                        producer.poll(0.1)
                producer.poll(0)
            assert producer.flush(60) == 0
            elapsed = time.monotonic() - started
            deadline = time.monotonic() + 10
            while not throttles and time.monotonic() < deadline:
                producer.poll(0.1)  # throttle_cb is served by poll()
        finally:
            del producer
        assert max(throttles, default=0) > 0, f"no throttle_cb, {elapsed:.1f} s"
        # Measured over at least 1 s and throttled past the quota: 300 KB at 50 KB/s takes
        # about 5 s (the first second's burst is free); without the quota, well under one.
        assert elapsed >= (total - 2 * quota) / quota * 0.8, elapsed
        assert total / elapsed <= quota * 2, total / elapsed
        # the quota's metrics, as Kafka's JMX exporter names kafka.server:type=Produce
        samples = scrape(metrics_port)
        tags = {"user": "", "client_id": "metered-app"}
        assert value(samples, "kafka_server_produce_byte_rate", **tags) > 0
        assert value(samples, "kafka_server_produce_throttle_time", **tags) > 0

        # kafka-python's producer reads the throttle time too (and waits it out itself)
        throttle_max = 0.0
        py_producer = kafka.KafkaProducer(
            bootstrap_servers=bootstrap, client_id="metered-app", acks=1, linger_ms=5,
            request_timeout_ms=30_000,
        )  # fmt: skip
        try:
            for _ in range(200):
                py_producer.send("metered", payload, partition=0)
            py_producer.flush(timeout=60)
            for group in py_producer.metrics().values():
                throttle_max = max(throttle_max, float(group.get("throttle-time-max", 0.0)))
        finally:
            py_producer.close(timeout=10)
        assert throttle_max > 0


def test_a_consumer_over_its_byte_rate_is_throttled_and_still_reads_everything(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(
        zk_client, zk_connect, tmp_path, broker_ids=(1,), overrides=QUICK_WINDOWS
    ) as cluster:
        cluster.create_topic("slowread", {0: [1]})
        bootstrap = kafka_bootstrap(cluster)
        # Small batches: a fetch answers at least one whole batch, and one larger than the
        # quota allows in a window (here 40 KB) would be throttled every time, as in Kafka.
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "acks": 1, "batch.size": 4096, "linger.ms": 0}
        )
        try:
            for i in range(200):
                producer.produce("slowread", b"y" * 1000, str(i).encode(), partition=0)
            assert producer.flush(30) == 0
        finally:
            del producer
        quota = 40_000
        response = alter(
            bootstrap, [entry([("user", None)], [("consumer_byte_rate", quota)])]
        )  # every client of the listener is the user ANONYMOUS: the default user applies
        assert [e.error_code for e in response.entries] == [NONE]
        wait_applied(cluster, "/config/users/<default>")

        throttles: list[int] = []
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "unused",
                "client.id": "reader",
                "enable.auto.commit": False,
                "fetch.max.bytes": 1_000_000,
                "throttle_cb": lambda event: throttles.append(int(event.throttle_time * 1000)),
            }
        )
        try:
            consumer.assign([confluent_kafka.TopicPartition("slowread", 0, 0)])
            keys: list[bytes | None] = []
            started = time.monotonic()
            deadline = started + 60
            while len(keys) < 200 and time.monotonic() < deadline:
                for m in consumer.consume(100, timeout=0.5):
                    assert m.error() is None, m.error()
                    keys.append(m.key())
            elapsed = time.monotonic() - started
            deadline = time.monotonic() + 10
            while not throttles and time.monotonic() < deadline:
                assert consumer.poll(0.1) is None  # throttle_cb is served by poll()
        finally:
            consumer.close()
        assert keys == [str(i).encode() for i in range(200)]
        assert max(throttles, default=0) > 0, f"no throttle_cb, {elapsed:.1f} s"
        # about 200 KB at 40 KB/s, the first second's worth free: near 4 s, not a blink
        assert elapsed >= (200_000 - 2 * quota) / quota * 0.8, elapsed


def test_the_grpc_door_throttles_clients_but_never_followers(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(
        zk_client, zk_connect, tmp_path, broker_ids=(1, 2), overrides=QUICK_WINDOWS
    ) as cluster:
        cluster.create_topic("grpc-metered", {0: [1, 2]})
        tp = TopicPartition("grpc-metered", 0)
        cluster.wait_for_isr(tp, {1, 2})
        bootstrap = kafka_bootstrap(cluster)
        quota = 50_000
        response = alter(
            bootstrap,
            [
                entry([("client-id", "grpc-app")], [("producer_byte_rate", quota)]),
                # every fetcher's client id: a follower would fall out of the ISR if throttled
                entry([("client-id", None)], [("consumer_byte_rate", 10_000.0)]),
            ],
        )
        assert [e.error_code for e in response.entries] == [NONE, NONE]
        wait_applied(cluster, "/config/clients/grpc-app")
        wait_applied(cluster, "/config/clients/<default>")
        leader = cluster.leader_serving(tp)
        assert leader is not None

        batch = encode_batch([Record(key=None, value=b"z" * 20_000, timestamp=0)])
        throttles = []
        started = time.monotonic()
        for _ in range(8):
            request = pb.ProduceRequest(acks=-1, timeout_ms=10_000, client_id="grpc-app")
            request.topics.add(name=tp.topic).partitions.add(index=0, records=batch)
            answer = cluster.broker_stub(leader).Produce(request, timeout=30)
            assert answer.responses[0].partitions[0].error_code == pb.NONE
            throttles.append(answer.throttle_time_ms)
        elapsed = time.monotonic() - started
        # 160 KB at 50 KB/s, the first second's worth free: the answers wait about 2 s
        assert max(throttles) > 0, throttles
        assert elapsed >= (8 * 20_000 - 2 * quota) / quota * 0.8, elapsed
        # the followers fetched all of it at once, unthrottled (acks=all was met each time)
        cluster.wait_for_isr(tp, {1, 2})

        fetch = pb.FetchRequest(replica_id=-1, max_wait_ms=0, max_bytes=1 << 20, client_id="x")
        fetch.topics.add(topic=tp.topic).partitions.add(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20
        )
        fetched = cluster.broker_stub(leader).Fetch(fetch, timeout=30)
        assert fetched.responses[0].partitions[0].records  # a whole batch, at least
        # one 20 KB batch, over what 10 KB/s allows in the (one) window: (20 - 10) / 10 s
        assert 900 <= fetched.throttle_time_ms <= 1100, fetched.throttle_time_ms


def test_request_time_quota_throttles_any_api_and_bad_znodes_are_ignored(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    with running_cluster(
        zk_client, zk_connect, tmp_path, broker_ids=(1,), overrides=QUICK_WINDOWS
    ) as cluster:
        bootstrap = kafka_bootstrap(cluster)
        # Hand-written znodes a broker must survive: not JSON, not a number, a bad name.
        zk_client.create("/config/clients/garbage", b"{not json", makepath=True)
        zk_client.create(
            "/config/clients/nan", b'{"version":1,"config":{"request_percentage":"x"}}'
        )
        for path in ("clients/garbage", "clients/nan", "clients/a b", "users/u/clients"):
            zk_client.create(
                "/config/changes/config_change_",
                json.dumps({"version": 2, "entity_path": path}).encode(),
                sequence=True,
                makepath=True,
            )
        # kafka_call's client id is "t"; a millionth of a percent of one thread's time
        response = alter(bootstrap, [entry([("client-id", "t")], [("request_percentage", 1e-6)])])
        assert [e.error_code for e in response.entries] == [NONE]
        wait_applied(cluster, "/config/clients/t")
        body = metadata_v12.MetadataRequest(
            topics=None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        answer = kafka_call(bootstrap, 3, 12, body)
        # Kafka caps a request-time throttle at one quota window (1 s here)
        assert answer.throttle_time == datetime.timedelta(milliseconds=1000)
        # any API: DescribeClientQuotas is answered, throttled as well
        found = describe(bootstrap, [("client-id", 0, "t")], strict=True)
        assert found.throttle_time == datetime.timedelta(milliseconds=1000)
        assert described(found) == {(("client-id", "t"),): {"request_percentage": 1e-6}}
        log_path = cluster.brokers[1].log_path
        assert log_path is not None
        text = log_path.read_text(errors="replace")
        for event in ("bad_quota_entity_ignored", "bad_quota_ignored", "bad_config_change"):
            assert f"event={event} " in text, event
