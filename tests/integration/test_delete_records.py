"""DeleteRecords (KIP-107) from Kafka's admin clients against real brokers: the leader's
log start offset moves, the followers follow it, ListOffsets earliest answers it on the
leader and on the next leader after a SIGKILL, a restarted broker keeps it
(``log-start-offset-checkpoint``), and the errors are Kafka's."""

from __future__ import annotations

import datetime
import importlib
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from broker.log.checkpoints import LOG_START_OFFSET_CHECKPOINT
from proto.topic_partition import TopicPartition
from proto.zk.sync_client import read_registered_broker
from tests.cluster import Cluster, running_cluster
from tests.helpers import minibroker, wait_for
from tests.integration.test_kafka_listener import kafka_bootstrap, kafka_call

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

OVERRIDES = {
    "kafka.port": "0",
    # A SIGKILLed broker must find the log start offset on disk when it comes back.
    "log.flush.start.offset.checkpoint.interval.ms": "200",
}


def confluent_admin(cluster: Cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap(cluster), "socket.timeout.ms": 20000})


def kafka_address(cluster: Cluster, broker_id: int) -> str:
    registered = read_registered_broker(cluster.zk, broker_id)
    assert registered is not None
    assert registered.kafka_endpoint is not None
    host, port = registered.kafka_endpoint
    return f"{host}:{port}"


def watermarks(cluster: Cluster, tp: TopicPartition) -> tuple[int, int]:
    """(ListOffsets earliest, latest) from the partition's leader, as librdkafka asks."""
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": kafka_bootstrap(cluster), "group.id": "watermarks"}
    )
    try:
        low, high = consumer.get_watermark_offsets(
            confluent_kafka.TopicPartition(tp.topic, tp.partition), timeout=10
        )
        return int(low), int(high)
    finally:
        consumer.close()


def delete(admin: AdminClient, topic: str, partition: int, offset: int) -> Any:
    (future,) = admin.delete_records(
        [confluent_kafka.TopicPartition(topic, partition, offset)],
        request_timeout=30,
        operation_timeout=20,
    ).values()
    return future.result(timeout=40)


def error_name(admin: AdminClient, topic: str, partition: int, offset: int) -> str:
    with pytest.raises(confluent_kafka.KafkaException) as raised:
        delete(admin, topic, partition, offset)
    return str(raised.value.args[0].name())


def test_confluent_kafka_deletes_records_followed_by_replicas_and_kept_over_restarts(
    zk_client: Any, zk_connect: str, tmp_path: Path
) -> None:
    tp = TopicPartition("purged", 0)
    with running_cluster(zk_client, zk_connect, tmp_path, overrides=OVERRIDES) as cluster:
        cluster.create_topic("purged", {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
        for i in range(3):
            assert cluster.produce(1, tp, [b"r%d-%d" % (i, j) for j in range(4)]).error_code == 0
        admin = confluent_admin(cluster)
        try:
            assert watermarks(cluster, tp) == (0, 12)
            # Inside the second batch (offsets 4-7): the log start offset need not be a
            # batch boundary.
            assert delete(admin, "purged", 0, 6).low_watermark == 6
            assert watermarks(cluster, tp) == (6, 12)
            # A lower offset deletes nothing more; the low watermark stays.
            assert delete(admin, "purged", 0, 2).low_watermark == 6

            # Kafka's errors: above the high watermark, an unknown topic or partition.
            assert error_name(admin, "purged", 0, 13) == "OFFSET_OUT_OF_RANGE"
            # librdkafka finds an unknown partition in its metadata and answers it locally.
            assert error_name(admin, "never-created", 0, 1) == "_NOENT"
            assert error_name(admin, "purged", 5, 1) == "_NOENT"

            # Consumers start at the log start offset; below it is out of range.
            consumer = confluent_kafka.Consumer(
                {
                    "bootstrap.servers": kafka_bootstrap(cluster),
                    "group.id": "readers",
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                }
            )
            try:
                consumer.assign([confluent_kafka.TopicPartition("purged", 0)])
                seen: list[int] = []

                def read_all() -> bool:
                    message = consumer.poll(0.5)
                    if message is not None and message.error() is None:
                        offset = message.offset()
                        assert offset is not None
                        seen.append(offset)
                    return len(seen) >= 6

                wait_for(read_all, timeout=30, message="the records above the log start")
                assert seen == list(range(6, 12))
            finally:
                consumer.close()

            # The followers followed (the answer waited for them): the next leader after
            # a SIGKILL of this one answers the same earliest offset.
            leader = cluster.wait_for_leader(tp)
            cluster.brokers[leader].kill()
            successor = cluster.wait_for_leader(tp, accept={1, 2, 3} - {leader}, timeout=40)
            assert successor != leader

            def earliest_on_the_successor() -> bool:
                try:
                    return watermarks(cluster, tp)[0] == 6
                except confluent_kafka.KafkaException:
                    return False

            wait_for(earliest_on_the_successor, timeout=30, message="earliest 6 on the successor")
            # The killed broker comes back with the checkpointed log start offset.
            checkpoint = cluster.brokers[leader].spec.data_dir / LOG_START_OFFSET_CHECKPOINT
            assert "purged 0 6" in checkpoint.read_text().splitlines()
            cluster.start(leader)
            cluster.wait_for_isr(tp, {1, 2, 3}, timeout=40)
            cluster.brokers[successor].stop()
            cluster.wait_for_leader(tp, accept={1, 2, 3} - {successor}, timeout=40)
            wait_for(
                lambda: watermarks(cluster, tp) == (6, 12),
                timeout=30,
                message="earliest 6 after the restarts",
            )
        finally:
            del admin  # its threads stop before the brokers do


def test_the_answer_waits_for_a_live_follower_and_times_out_without_it(
    zk_client: Any, zk_connect: str, tmp_path: Path
) -> None:
    tp = TopicPartition("slow", 0)
    overrides = {**OVERRIDES, "zookeeper.session.timeout.ms": "30000"}
    with running_cluster(zk_client, zk_connect, tmp_path, overrides=overrides) as cluster:
        cluster.create_topic("slow", {0: [1, 2, 3]})
        assert cluster.produce(1, tp, [b"v%d" % i for i in range(5)]).error_code == 0
        admin = confluent_admin(cluster)
        try:
            # A paused follower is still registered (alive) but sends no fetch: the leader
            # deletes, the answer waits for it and times out (Kafka's DelayedDeleteRecords).
            cluster.brokers[3].pause()
            (future,) = admin.delete_records(
                [confluent_kafka.TopicPartition("slow", 0, 3)],
                request_timeout=30,
                operation_timeout=1,
            ).values()
            with pytest.raises(confluent_kafka.KafkaException, match="REQUEST_TIMED_OUT"):
                future.result(timeout=40)
            assert watermarks(cluster, tp) == (3, 5)  # deleted on the leader all the same
            cluster.brokers[3].resume()
            assert delete(admin, "slow", 0, 3).low_watermark == 3
        finally:
            del admin


# kafka-python 3.0 calls importlib.resources' legacy API when imported (its own warning).
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_kafka_python_deletes_up_to_the_high_watermark_and_gets_kafkas_errors(
    zk_client: Any, zk_connect: str, tmp_path: Path
) -> None:
    import kafka  # kafka-python
    import kafka.errors

    tp = TopicPartition("trimmed", 1)
    with running_cluster(zk_client, zk_connect, tmp_path, overrides=OVERRIDES) as cluster:
        cluster.create_topic("trimmed", {0: [2, 3, 1], 1: [3, 1, 2]})
        assert cluster.produce(3, tp, [b"x%d" % i for i in range(7)]).error_code == 0
        admin = kafka.KafkaAdminClient(
            bootstrap_servers=kafka_bootstrap(cluster).split(","), request_timeout_ms=30000
        )
        try:
            # -1: everything below the high watermark.
            result = admin.delete_records({kafka.TopicPartition("trimmed", 1): -1}, 20000)
            (answer,) = result.values()
            assert answer["low_watermark"] == 7
            assert answer["error_code"] == 0
            assert watermarks(cluster, tp) == (7, 7)
            with pytest.raises(kafka.errors.OffsetOutOfRangeError):
                admin.delete_records({kafka.TopicPartition("trimmed", 0): 1}, 20000)
            # Sent to a broker named by the caller (no metadata lookup, no retry), the
            # broker's own answers: an unknown partition, a partition it does not lead.
            with pytest.raises(kafka.errors.UnknownTopicOrPartitionError):
                admin.delete_records(
                    {kafka.TopicPartition("trimmed", 7): 1}, 20000, partition_leader_id=1
                )
            with pytest.raises(kafka.errors.NotLeaderForPartitionError):
                admin.delete_records(
                    {kafka.TopicPartition("trimmed", 1): 7}, 20000, partition_leader_id=1
                )
        finally:
            admin.close()
        # Every version Kafka 2.8 serves, v0 and the flexible v2, in one raw request.
        for version in (0, 2):
            request_module = importlib.import_module(
                f"kio.schema.delete_records.v{version}.request"
            )
            topic = request_module.DeleteRecordsTopic(
                name="trimmed",
                partitions=(
                    request_module.DeleteRecordsPartition(partition_index=1, offset=7),
                    request_module.DeleteRecordsPartition(partition_index=0, offset=-1),
                    request_module.DeleteRecordsPartition(partition_index=9, offset=0),
                ),
            )
            body = request_module.DeleteRecordsRequest(
                topics=(topic,), timeout=datetime.timedelta(seconds=10)
            )
            address = kafka_address(cluster, 3)
            response = kafka_call(address, 21, version, body)
            (answer,) = response.topics
            assert answer.name == "trimmed"
            assert [
                (p.partition_index, p.error_code, p.low_watermark) for p in answer.partitions
            ] == [
                (1, ErrorCode.none, 7),
                (0, ErrorCode.not_leader_or_follower, -1),  # led by broker 2
                (9, ErrorCode.unknown_topic_or_partition, -1),
            ]


def test_the_command_line_and_kafkas_clients_delete_through_the_same_broker_code(
    zk_client: Any, zk_connect: str, tmp_path: Path
) -> None:
    """``minibroker topics delete-records`` (gRPC DeleteRecords) and AdminClient (the Kafka
    listener) move the same log start offsets, and each sees what the other did."""
    with running_cluster(zk_client, zk_connect, tmp_path, overrides=OVERRIDES) as cluster:
        cluster.create_topic("both", {0: [1, 2, 3], 1: [2, 3, 1]})
        for p in (0, 1):
            tp = TopicPartition("both", p)
            leader = cluster.wait_for_leader(tp)
            assert cluster.produce(leader, tp, [b"b%d" % i for i in range(6)]).error_code == 0
        env = {
            "MINIBROKER_BOOTSTRAP": ",".join(b.address for b in cluster.brokers.values()),
            "MINIBROKER_ZOOKEEPER": zk_connect,
            "MINIBROKER_DATA_DIR": str(tmp_path / "no-local-cluster"),
        }

        def cli(*args: str) -> tuple[int, str, str]:
            done = minibroker("topics", "delete-records", "both", *args, env=env, timeout=60)
            return done.returncode, done.stdout, done.stderr

        code, out, err = cli("--partition", "0", "--offset", "4")
        assert code == 0, err
        assert out.splitlines() == [
            "Executing records delete operation",
            "Records delete operation completed:",
            "partition: both-0\tlow_watermark: 4",
        ]
        assert watermarks(cluster, TopicPartition("both", 0)) == (4, 6)

        admin = confluent_admin(cluster)
        try:
            assert delete(admin, "both", 1, 2).low_watermark == 2
            # Every partition, to the high watermark; the Kafka client sees the result.
            code, out, err = cli("--offset", "-1")
            assert code == 0, err
            assert out.splitlines()[2:] == [
                "partition: both-0\tlow_watermark: 6",
                "partition: both-1\tlow_watermark: 6",
            ]
            assert watermarks(cluster, TopicPartition("both", 1)) == (6, 6)
            # A lower offset from the Kafka side: nothing moves back, the same low watermark.
            assert delete(admin, "both", 0, 1).low_watermark == 6
        finally:
            del admin

        code, out, _ = cli("--partition", "0", "--partition", "5", "--offset", "7")
        assert code == 1
        lines = out.splitlines()[2:]
        assert lines[0].startswith("partition: both-0\terror: OFFSET_OUT_OF_RANGE: ")
        assert "above the high watermark 6" in lines[0]
        assert lines[1].startswith("partition: both-5\terror: UNKNOWN_TOPIC_OR_PARTITION")
        done = minibroker(
            "topics", "delete-records", "no-such-topic", "--offset", "1", env=env, timeout=60
        )
        assert done.returncode == 1
        assert "topic 'no-such-topic' does not exist" in done.stderr
        assert "Traceback" not in done.stderr
