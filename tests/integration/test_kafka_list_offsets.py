"""ListOffsets by timestamp and by KIP-734's max timestamp, through two Kafka clients: the
found record's own offset and timestamp, and -3 refused as Kafka refuses it below v7."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import pytest
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient
from kio.schema.list_offsets.v6 import request as list_offsets_v6

from broker.kafka_listener.messages import build
from broker.request_handlers import UNSUPPORTED_VERSION
from proto.topic_partition import TopicPartition
from tests.cluster import running_cluster
from tests.integration.test_kafka_listener import KAFKA_PORT_FREE, kafka_bootstrap, kafka_call

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

OffsetSpec: Any = confluent_kafka.admin.OffsetSpec  # type: ignore[attr-defined]  # re-exported

TOPIC = "times"
TIMESTAMPS = [1_000_000, 5_000_000, 2_000_000, 9_000_000, 7_000_000, 9_000_000]
"""At offsets 0..5: the largest timestamp first at offset 3, again at 5."""


# kafka-python 3.0 calls importlib.resources' legacy API when imported (its own warning).
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_offsets_for_times_answer_the_found_records_timestamp_and_max_timestamp(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    import kafka

    with running_cluster(
        zk_client, zk_connect, tmp_path, (1,), overrides=KAFKA_PORT_FREE
    ) as cluster:
        cluster.create_topic(TOPIC, {0: [1]})
        cluster.wait_for_leader(TopicPartition(TOPIC, 0))
        bootstrap = kafka_bootstrap(cluster)
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        for i, ts in enumerate(TIMESTAMPS):
            producer.produce(TOPIC, value=b"r%d" % i, partition=0, timestamp=ts)
            assert producer.flush(30) == 0  # one batch per record: the search is per record
        del producer

        admin = AdminClient({"bootstrap.servers": bootstrap})
        tp = confluent_kafka.TopicPartition(TOPIC, 0)

        def admin_lookup(spec: Any, admin: AdminClient = admin) -> tuple[int, int]:
            info = admin.list_offsets({tp: spec}, request_timeout=20)[tp].result(timeout=30)
            return info.offset, info.timestamp

        # Asked for 3000000: the first record at or after it is offset 1, stamped 5000000.
        assert admin_lookup(OffsetSpec.for_timestamp(3_000_000)) == (1, 5_000_000)
        assert admin_lookup(OffsetSpec.for_timestamp(9_000_001)) == (-1, -1)
        assert admin_lookup(OffsetSpec.max_timestamp()) == (3, 9_000_000)
        assert admin_lookup(OffsetSpec.earliest())[0] == 0
        assert admin_lookup(OffsetSpec.latest())[0] == len(TIMESTAMPS)
        del admin

        consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=20000)
        try:
            found = consumer.offsets_for_times({kafka.TopicPartition(TOPIC, 0): 3_000_000})
            answer = found[kafka.TopicPartition(TOPIC, 0)]
            assert answer is not None
            assert (answer.offset, answer.timestamp) == (1, 5_000_000)
            none = consumer.offsets_for_times({kafka.TopicPartition(TOPIC, 0): 9_000_001})
            assert none[kafka.TopicPartition(TOPIC, 0)] is None
        finally:
            consumer.close()

        # Before v7 -3 is no spec: refused for the partition, as Kafka refuses it.
        old = build(
            list_offsets_v6.ListOffsetsRequest,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": TOPIC,
                        "partitions": [
                            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -3}
                        ],
                    }
                ],
            },
        )
        refused = kafka_call(bootstrap, 2, 6, old).topics[0].partitions[0]
        assert (refused.error_code, refused.offset) == (UNSUPPORTED_VERSION, -1)
