"""proto.zk.znodes: Kafka's ZooKeeper paths and the exact JSON of every znode
(docs/zookeeper.md)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from proto.topic_partition import TopicPartition
from proto.zk import znodes
from proto.zk.znodes import (
    LEADER_NONE,
    BrokerRegistration,
    CommittedOffset,
    PartitionState,
    PartitionStateData,
    ProducerIdBlock,
    ZkDataError,
    broker_config_path,
    broker_path,
    config_change_path,
    consumer_ids_path,
    consumer_offset_path,
    consumer_owner_path,
    decode_broker_registration,
    decode_committed_offset,
    decode_config_change,
    decode_consumer_offset,
    decode_consumer_subscription,
    decode_controller,
    decode_controller_epoch,
    decode_isr_change_notification,
    decode_partition_state,
    decode_preferred_replica_election,
    decode_producer_id_block,
    decode_reassign_partitions,
    decode_topic_assignment,
    decode_topic_config,
    delete_topic_path,
    encode_broker_registration,
    encode_config_change,
    encode_consumer_offset,
    encode_consumer_subscription,
    encode_controller,
    encode_controller_epoch,
    encode_isr_change_notification,
    encode_partition_state,
    encode_preferred_replica_election,
    encode_producer_id_block,
    encode_reassign_partitions,
    encode_topic_assignment,
    encode_topic_config,
    format_endpoint,
    partition_state_path,
    topic_config_path,
    topic_path,
)

TP = TopicPartition("orders", 0)

# -- paths -----------------------------------------------------------------------------------


def test_paths_are_kafkas() -> None:
    assert broker_path(3) == "/brokers/ids/3"
    assert topic_path("orders") == "/brokers/topics/orders"
    assert partition_state_path(TP) == "/brokers/topics/orders/partitions/0/state"
    assert topic_config_path("orders") == "/config/topics/orders"
    assert delete_topic_path("orders") == "/admin/delete_topics/orders"
    assert consumer_ids_path("g") == "/consumers/g/ids"
    assert consumer_ids_path("g", "g_host-1") == "/consumers/g/ids/g_host-1"
    assert consumer_owner_path("g", TP) == "/consumers/g/owners/orders/0"
    assert consumer_offset_path("g", TP) == "/consumers/g/offsets/orders/0"


@pytest.mark.parametrize("topic", ["", ".", "..", "a/b", "a b", "ü", "x" * 250])
def test_paths_refuse_names_that_are_not_one_path_segment(topic: str) -> None:
    with pytest.raises(ValueError, match="illegal topic name"):
        topic_path(topic)
    with pytest.raises(ValueError, match="illegal topic name"):
        partition_state_path(TopicPartition(topic, 0))


def test_paths_refuse_negative_ids() -> None:
    with pytest.raises(ValueError, match="broker id"):
        broker_path(-1)
    with pytest.raises(ValueError, match="partition"):
        partition_state_path(TopicPartition("t", -1))


# -- /brokers/ids/<id> -----------------------------------------------------------------------


def test_broker_registration_exact_json() -> None:
    data = encode_broker_registration("10.0.0.5", 9091, 1603451234567)
    assert data == (
        b'{"version":1,"host":"10.0.0.5","port":9091,"timestamp":"1603451234567",'
        b'"endpoints":["GRPC://10.0.0.5:9091"]}'
    )
    assert decode_broker_registration(data) == BrokerRegistration("10.0.0.5", 9091, 1603451234567)


def test_broker_registration_ipv6_endpoint() -> None:
    assert format_endpoint("::1", 9091) == "GRPC://[::1]:9091"
    data = encode_broker_registration("::1", 9091, 1)
    assert decode_broker_registration(data) == BrokerRegistration("::1", 9091, 1)


def test_broker_registration_decodes_kafka_v4_and_v1() -> None:
    v4 = (
        b'{"version":4,"host":"h1","port":9092,"jmx_port":-1,"timestamp":"1603451234567",'
        b'"endpoints":["PLAINTEXT://h1:9092","GRPC://h1:9191"],'
        b'"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"rack":"r1"}'
    )
    assert decode_broker_registration(v4) == BrokerRegistration("h1", 9191, 1603451234567)
    v1 = b'{"jmx_port":-1,"timestamp":"1525741823119","version":1,"host":"hadoop1","port":9092}'
    assert decode_broker_registration(v1) == BrokerRegistration("hadoop1", 9092, 1525741823119)


def test_broker_registration_with_a_kafka_listener_is_kafkas_v4_json() -> None:
    data = encode_broker_registration("10.0.0.5", 9091, 1603451234567, kafka_port=19091)
    assert data == (
        b'{"version":4,"host":"10.0.0.5","port":9091,"timestamp":"1603451234567",'
        b'"endpoints":["GRPC://10.0.0.5:9091","KAFKA://10.0.0.5:19091"],'
        b'"listener_security_protocol_map":{"GRPC":"PLAINTEXT","KAFKA":"PLAINTEXT"}}'
    )
    assert decode_broker_registration(data) == BrokerRegistration(
        "10.0.0.5", 9091, 1603451234567, kafka_endpoint=("10.0.0.5", 19091)
    )


def test_broker_registration_of_a_tls_broker_maps_grpc_to_ssl() -> None:
    data = encode_broker_registration("b1", 9091, 1, kafka_port=19091, grpc_security_protocol="SSL")
    assert json.loads(data)["listener_security_protocol_map"] == {
        "GRPC": "SSL",
        "KAFKA": "PLAINTEXT",
    }
    data = encode_broker_registration(
        "b1",
        9091,
        1,
        kafka_port=19091,
        grpc_security_protocol="SSL",
        kafka_security_protocol="SASL_SSL",
    )
    assert json.loads(data)["listener_security_protocol_map"] == {
        "GRPC": "SSL",
        "KAFKA": "SASL_SSL",
    }
    # Without a Kafka listener the map (and the security protocol) is not written at all.
    assert encode_broker_registration(
        "b1", 9091, 1, grpc_security_protocol="SSL"
    ) == encode_broker_registration("b1", 9091, 1)


def test_broker_registration_with_a_kafka_listener_on_ipv6() -> None:
    data = encode_broker_registration("::1", 9091, 1, kafka_port=19091)
    assert json.loads(data)["endpoints"] == ["GRPC://[::1]:9091", "KAFKA://[::1]:19091"]
    assert decode_broker_registration(data) == BrokerRegistration(
        "::1", 9091, 1, kafka_endpoint=("::1", 19091)
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kafka_port": 0}, "1-65535"),
        ({"kafka_port": 65536}, "1-65535"),
        ({"kafka_port": 19091, "grpc_security_protocol": "SASL_SSL"}, "security protocol"),
        ({"kafka_port": 19091, "kafka_security_protocol": "SASL"}, "security protocol"),
    ],
)
def test_broker_registration_refuses_what_no_listener_has(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        encode_broker_registration("h", 9091, 1, **kwargs)  # type: ignore[arg-type]


def test_broker_registration_decodes_kafka_2_8_v5_with_other_listeners() -> None:
    """As Kafka 2.8 writes it (BrokerIdZNode.encode, version 5: features, the protocol map,
    a rack): no GRPC and no KAFKA endpoint, so host/port and no Kafka listener of ours."""
    v5 = (
        b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT",'
        b'"SSL":"SSL","INTERNAL":"PLAINTEXT"},"endpoints":["PLAINTEXT://kafka-1.example.com:9092",'
        b'"SSL://kafka-1.example.com:9093","INTERNAL://10.0.0.7:19092"],"rack":"eu-west-1a",'
        b'"jmx_port":9999,"host":"kafka-1.example.com","timestamp":"1625140800000","port":9092,'
        b'"version":5}'
    )
    assert decode_broker_registration(v5) == BrokerRegistration(
        "kafka-1.example.com", 9092, 1625140800000, kafka_endpoint=None
    )
    # A broker of ours among Kafka's listeners, the KAFKA endpoint before the GRPC one.
    ours = (
        b'{"version":5,"host":null,"port":-1,"features":{},"timestamp":"7",'
        b'"endpoints":["SSL://h:9093","KAFKA://h:19091","GRPC://h:9091"],'
        b'"listener_security_protocol_map":{"SSL":"SSL","KAFKA":"PLAINTEXT","GRPC":"SSL"}}'
    )
    assert decode_broker_registration(ours) == BrokerRegistration("h", 9091, 7, ("h", 19091))


@pytest.mark.parametrize(
    "endpoint",
    ["KAFKA://h", "KAFKA://:19091", "KAFKA://h:0", "KAFKA://h:65536", "KAFKA://[::1]", "KAFKA:h:1"],
)
def test_broker_registration_with_a_malformed_kafka_endpoint_is_malformed(endpoint: str) -> None:
    data = json.dumps(
        {"version": 4, "host": "h", "port": 9091, "endpoints": ["GRPC://h:9091", endpoint]}
    ).encode()
    with pytest.raises(ZkDataError, match="endpoint"):
        decode_broker_registration(data)


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[1]",
        b'{"host":"h","port":1}',
        b'{"version":9,"host":"h","port":1}',
        b'{"version":1,"host":null,"port":-1,"endpoints":["PLAINTEXT://h:1"]}',
        b'{"version":1,"host":"h","port":"1"}',
        b'{"version":1,"host":"h","port":1,"timestamp":123}',
        b'{"version":1,"endpoints":["nonsense"]}',
    ],
)
def test_broker_registration_malformed(data: bytes) -> None:
    with pytest.raises(ZkDataError):
        decode_broker_registration(data)


# -- /brokers/topics/<t> ---------------------------------------------------------------------


def test_topic_assignment_exact_json() -> None:
    data = encode_topic_assignment({1: [2, 3, 1], 0: [1, 2, 3], 10: [3, 1, 2]})
    assert data == (
        b'{"version":2,"partitions":{"0":[1,2,3],"1":[2,3,1],"10":[3,1,2]},'
        b'"adding_replicas":{},"removing_replicas":{}}'
    )
    assert decode_topic_assignment(data) == {0: [1, 2, 3], 1: [2, 3, 1], 10: [3, 1, 2]}


def test_topic_assignment_keeps_a_reassignments_adding_and_removing_replicas() -> None:
    """Kafka 2.4+'s version 2 (KIP-455): RS = TRS + ORS, AR and RR per partition."""
    moving = znodes.ReplicaAssignment((2, 3, 4, 1), adding_replicas=(4,), removing_replicas=(1,))
    data = encode_topic_assignment({0: moving, 1: [1, 2]})
    assert data == (
        b'{"version":2,"partitions":{"0":[2,3,4,1],"1":[1,2]},'
        b'"adding_replicas":{"0":[4]},"removing_replicas":{"0":[1]}}'
    )
    decoded = znodes.decode_topic_replica_assignment(data)
    assert decoded == {0: moving, 1: znodes.ReplicaAssignment((1, 2))}
    assert decoded[0].origin_replicas == (2, 3, 1)
    assert decoded[0].target_replicas == (2, 3, 4)
    assert decoded[0].is_being_reassigned
    assert not decoded[1].is_being_reassigned
    assert decode_topic_assignment(data) == {0: [2, 3, 4, 1], 1: [1, 2]}


def test_topic_assignment_version_1_has_no_reassignment() -> None:
    old = b'{"version":1,"partitions":{"0":[1,2]}}'
    assert znodes.decode_topic_replica_assignment(old) == {0: znodes.ReplicaAssignment((1, 2))}


def test_topic_assignment_decodes_kafka_v2_and_v3() -> None:
    v3 = (
        b'{"version":3,"topic_id":"abc","partitions":{"1":[2,1],"0":[1,2]},'
        b'"adding_replicas":{},"removing_replicas":{}}'
    )
    assert decode_topic_assignment(v3) == {0: [1, 2], 1: [2, 1]}


@pytest.mark.parametrize(
    "data",
    [
        b'{"version":1,"partitions":{"x":[1]}}',
        b'{"version":1,"partitions":{"0":[true]}}',
        b'{"version":1,"partitions":[]}',
        b'{"version":1}',
    ],
)
def test_topic_assignment_malformed(data: bytes) -> None:
    with pytest.raises(ZkDataError):
        decode_topic_assignment(data)


@pytest.mark.parametrize(
    "changes",
    [
        b'"adding_replicas":{"0":[9]}',  # not a replica
        b'"removing_replicas":{"0":[9]}',
        b'"adding_replicas":{"1":[1]}',  # no such partition
        b'"adding_replicas":{"x":[1]}',
        b'"adding_replicas":[]',
        b'"adding_replicas":{"0":[true]}',
        b'"adding_replicas":{"0":[2]},"removing_replicas":{"0":[2]}',  # both
        b'"adding_replicas":{"0":[1,2,3]}',  # no original replica left
        b'"removing_replicas":{"0":[1,2,3]}',  # no target replica left
        b'"adding_replicas":{"0":[2,2]}',
    ],
)
def test_topic_assignment_hostile_reassignment_sets_are_refused(changes: bytes) -> None:
    data = b'{"version":2,"partitions":{"0":[1,2,3]},' + changes + b"}"
    with pytest.raises(ZkDataError):
        znodes.decode_topic_replica_assignment(data)


def test_topic_assignment_repeating_a_replica_is_refused() -> None:
    with pytest.raises(ZkDataError, match="repeat"):
        decode_topic_assignment(b'{"version":2,"partitions":{"0":[1,1]}}')


# -- partition state -------------------------------------------------------------------------


def test_partition_state_exact_json() -> None:
    state = PartitionStateData(leader=1, leader_epoch=4, isr=(1, 2, 3), controller_epoch=2)
    data = encode_partition_state(state)
    assert data == b'{"controller_epoch":2,"leader":1,"version":1,"leader_epoch":4,"isr":[1,2,3]}'
    assert decode_partition_state(data) == state


def test_partition_state_with_version() -> None:
    data = PartitionStateData(LEADER_NONE, 7, (2,), 3)
    state = PartitionState.from_data(data, zk_version=12)
    assert state == PartitionState(-1, 7, (2,), 3, 12)
    assert state.data == data
    assert encode_partition_state(state) == encode_partition_state(data)  # no version inside


def test_partition_state_decodes_kafka_examples() -> None:
    # Key order does not matter; HEAD's leader_recovery_state is ignored.
    text = b'{"isr":[3,0,1],"leader":3,"version":1,"leader_epoch":0,"controller_epoch":1}'
    assert decode_partition_state(text) == PartitionStateData(3, 0, (3, 0, 1), 1)
    head = (
        b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1],'
        b'"leader_recovery_state":1}'
    )
    assert decode_partition_state(head).isr == (1,)


@pytest.mark.parametrize(
    "data",
    [
        b'{"controller_epoch":1,"leader":1,"version":1,"isr":[1]}',
        b'{"controller_epoch":1,"leader":"1","version":1,"leader_epoch":0,"isr":[1]}',
        b'{"controller_epoch":1,"leader":1,"version":2,"leader_epoch":0,"isr":[1]}',
        b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":1}',
        b"\xff",
    ],
)
def test_partition_state_malformed(data: bytes) -> None:
    with pytest.raises(ZkDataError):
        decode_partition_state(data)


# -- controller ------------------------------------------------------------------------------


def test_controller_exact_json() -> None:
    data = encode_controller(2, 1603451234567)
    assert data == b'{"version":1,"brokerid":2,"timestamp":"1603451234567"}'
    assert decode_controller(data) == 2
    assert decode_controller(b"5") == 5  # the bare id of Kafka before 0.8.2


def test_controller_epoch_is_bare_text() -> None:
    assert encode_controller_epoch(5) == b"5"
    assert decode_controller_epoch(b"5") == 5
    assert decode_controller_epoch(b"5\n") == 5
    with pytest.raises(ZkDataError):
        decode_controller_epoch(b'{"epoch":5}')


# -- notifications and admin -----------------------------------------------------------------


def test_isr_change_notification_exact_json() -> None:
    tps = [TopicPartition("orders", 0), TopicPartition("orders", 1), TopicPartition("audit", 3)]
    data = encode_isr_change_notification(tps)
    assert data == (
        b'{"version":1,"partitions":[{"topic":"orders","partition":0},'
        b'{"topic":"orders","partition":1},{"topic":"audit","partition":3}]}'
    )
    assert decode_isr_change_notification(data) == tps


def test_preferred_replica_election_exact_json() -> None:
    data = encode_preferred_replica_election([TP])
    assert data == b'{"version":1,"partitions":[{"topic":"orders","partition":0}]}'
    assert decode_preferred_replica_election(data) == [TP]


def test_reassign_partitions_exact_json() -> None:
    data = encode_reassign_partitions({TopicPartition("b", 1): [3, 1], TP: [1, 2]})
    assert data == (
        b'{"version":1,"partitions":[{"topic":"b","partition":1,"replicas":[3,1]},'
        b'{"topic":"orders","partition":0,"replicas":[1,2]}]}'
    )
    assert decode_reassign_partitions(data) == {TopicPartition("b", 1): [3, 1], TP: [1, 2]}


def test_topic_config_exact_json() -> None:
    data = encode_topic_config({"retention.ms": "1000", "min.insync.replicas": "2"})
    assert data == b'{"version":1,"config":{"min.insync.replicas":"2","retention.ms":"1000"}}'
    assert decode_topic_config(data) == {"min.insync.replicas": "2", "retention.ms": "1000"}
    assert decode_topic_config(b'{"version":1,"config":{}}') == {}
    with pytest.raises(ZkDataError, match="config value"):
        decode_topic_config(b'{"version":1,"config":{"min.insync.replicas":2}}')


def test_producer_id_block_exact_json() -> None:
    block = ProducerIdBlock(broker=1, block_start=0, block_end=999)
    data = encode_producer_id_block(block)
    assert data == b'{"version":1,"broker":1,"block_start":"0","block_end":"999"}'
    assert decode_producer_id_block(data) == block
    with pytest.raises(ZkDataError, match="block_start"):
        decode_producer_id_block(b'{"version":1,"broker":1,"block_start":0,"block_end":"9"}')


def test_consumer_znodes() -> None:
    data = encode_consumer_subscription({"orders": 1}, 1525741823119)
    assert data == (
        b'{"version":1,"subscription":{"orders":1},"pattern":"static","timestamp":"1525741823119"}'
    )
    assert decode_consumer_subscription(data) == {"orders": 1}
    assert encode_consumer_offset(42) == b"42"
    assert decode_consumer_offset(b"42") == 42


def test_a_committed_offset_with_metadata_is_json_and_without_it_stays_decimal_text() -> None:
    assert encode_consumer_offset(42, "") == b"42"
    data = encode_consumer_offset(42, "state-store:7 é")
    assert json.loads(data) == {"version": 1, "offset": 42, "metadata": "state-store:7 é"}
    assert decode_committed_offset(data, 1234) == CommittedOffset(42, "state-store:7 é", 1234)
    assert decode_consumer_offset(data) == 42
    assert decode_committed_offset(b" 7\n") == CommittedOffset(7, "", -1)
    # A metadata-less JSON form (written by another tool) reads as no metadata.
    assert decode_committed_offset(b'{"version":1,"offset":3}') == CommittedOffset(3)


@pytest.mark.parametrize(
    "data",
    [
        b'{"version":2,"offset":1,"metadata":""}',
        b'{"version":1,"offset":-1,"metadata":""}',
        b'{"version":1,"offset":"1","metadata":""}',
        b'{"version":1,"offset":1,"metadata":7}',
        b'{"version":1,"metadata":"x"}',
        b"{not json",
        b"-3",
        b"x",
    ],
)
def test_a_malformed_committed_offset_in_either_form_is_an_error(data: bytes) -> None:
    with pytest.raises(ZkDataError):
        decode_committed_offset(data)


def test_encoders_write_compact_json_readable_by_any_parser() -> None:
    for data in (
        encode_broker_registration("h", 1, 2),
        encode_partition_state(PartitionStateData(1, 0, (1,), 1)),
        encode_isr_change_notification([TP]),
    ):
        assert b" " not in data
        assert json.loads(data)["version"] == 1
    assert json.loads(encode_topic_assignment({0: [1]}))["version"] == 2


@pytest.mark.parametrize("topic", ["../../x", "/abs", "..", "a b", ""])
@pytest.mark.parametrize(
    "decode",
    [
        znodes.decode_isr_change_notification,
        znodes.decode_preferred_replica_election,
        znodes.decode_reassign_partitions,
    ],
)
def test_topic_names_inside_znode_content_pass_the_topic_name_rule(
    topic: str, decode: Callable[[bytes], object]
) -> None:
    entry = {"topic": topic, "partition": 0, "replicas": [1]}
    data = json.dumps({"version": 1, "partitions": [entry]}).encode()
    with pytest.raises(znodes.ZkDataError):
        decode(data)


def test_negative_partitions_inside_znode_content_are_malformed() -> None:
    data = json.dumps({"version": 1, "partitions": [{"topic": "t", "partition": -1}]}).encode()
    with pytest.raises(znodes.ZkDataError, match=">= 0"):
        znodes.decode_isr_change_notification(data)


# -- dynamic configs ---------------------------------------------------------------------------


def test_config_change_notification_exact_json_and_entity_paths() -> None:
    assert encode_config_change("topics/orders") == b'{"version":2,"entity_path":"topics/orders"}'
    assert decode_config_change(b'{"version":2,"entity_path":"brokers/<default>"}') == (
        "brokers",
        "<default>",
    )
    assert decode_config_change(b'{"version":2,"entity_path":"brokers/3"}') == ("brokers", "3")
    # Kafka < 0.10.1 wrote version 1: entity_type and entity_name.
    v1 = b'{"version":1,"entity_type":"topics","entity_name":"t"}'
    assert decode_config_change(v1) == ("topics", "t")
    assert broker_config_path("<default>") == "/config/brokers/<default>"
    assert broker_config_path(2) == "/config/brokers/2"
    assert (
        config_change_path("config_change_0000000007") == "/config/changes/config_change_0000000007"
    )


@pytest.mark.parametrize(
    "entity_path",
    ["topics/bad name", "topics/..", "topics/a/../../controller", "users/a/b", "brokers/x", "t"],
)
def test_config_change_with_a_hostile_entity_path_is_malformed(entity_path: str) -> None:
    data = json.dumps({"version": 2, "entity_path": entity_path}).encode()
    with pytest.raises(ZkDataError):
        decode_config_change(data)


def test_config_change_path_refuses_other_names() -> None:
    for bad in ("config_change_", "config_change_1/../../x", "other_1", "../controller"):
        with pytest.raises(ValueError, match="not a config change"):
            config_change_path(bad)


def test_log_dir_event_notification_is_kafkas_json() -> None:
    data = znodes.encode_log_dir_event_notification(3)
    assert json.loads(data) == {"version": 1, "broker": 3, "event": 1}
    assert znodes.decode_log_dir_event_notification(data) == 3
    with pytest.raises(znodes.ZkDataError, match="unknown log dir event 2"):
        znodes.decode_log_dir_event_notification(b'{"version":1,"broker":3,"event":2}')
    assert (
        znodes.log_dir_event_notification_path("log_dir_event_0000000007")
        == "/log_dir_event_notification/log_dir_event_0000000007"
    )
    for bad in ("log_dir_event_", "log_dir_event_../x", "isr_change_0000000001", "../x"):
        with pytest.raises(ValueError, match="not a log dir event notification name"):
            znodes.log_dir_event_notification_path(bad)


def test_cluster_id_is_kafkas_json_and_a_22_character_url_safe_uuid() -> None:
    made = {znodes.new_cluster_id() for _ in range(200)}
    assert len(made) == 200
    for cluster_id in made:
        assert len(cluster_id) == 22
        assert znodes.is_cluster_id(cluster_id)
        assert not cluster_id.startswith("-")
    data = znodes.encode_cluster_id("kN3pVvD8QpqFSYt1OXeVHQ")
    assert data == b'{"version":"1","id":"kN3pVvD8QpqFSYt1OXeVHQ"}'
    assert znodes.decode_cluster_id(data) == "kN3pVvD8QpqFSYt1OXeVHQ"
    assert znodes.decode_cluster_id(b'{"version":1,"id":"x_y-z"}') == "x_y-z"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'{"version":"2","id":"abc"}', "unsupported cluster id version"),
        (b'{"version":"1"}', "missing field 'id'"),
        (b'{"version":"1","id":""}', "illegal cluster id"),
        (b'{"version":"1","id":"a\\nbroker.id=2"}', "illegal cluster id"),
        (b'{"version":"1","id":7}', "id must be a string"),
        (b"[]", "expected a JSON object"),
    ],
)
def test_a_malformed_cluster_id_is_refused(data: bytes, reason: str) -> None:
    with pytest.raises(znodes.ZkDataError, match=reason):
        znodes.decode_cluster_id(data)


@pytest.mark.parametrize(
    ("path", "sensitive"),
    [
        ("/config/users", True),
        ("/config/users/alice", True),
        ("/config/users/alice/clients/app", True),
        ("/config/usersx", False),
        ("/config/clients/app", False),
        ("/config/topics/orders", False),
        ("/brokers/ids/1", False),
    ],
)
def test_the_sensitive_paths_are_kafkas_config_users_subtree(path: str, sensitive: bool) -> None:
    assert znodes.is_sensitive_path(path) is sensitive


def test_with_set_acl_a_sensitive_znode_is_the_digests_alone_and_others_the_worlds_to_read() -> (
    None
):
    from kazoo.security import OPEN_ACL_UNSAFE

    from proto.zk.credentials import SENSITIVE_ACL, ZkCredentials
    from proto.zk.session import ZooKeeperClient

    secure = ZooKeeperClient("127.0.0.1:2181", broker_id=1, credentials=ZkCredentials("u:p"))
    assert secure._acl_for("/config/users/alice") == SENSITIVE_ACL
    assert all(acl.id.scheme == "auth" for acl in SENSITIVE_ACL)
    assert secure._acl_for("/config/topics/orders") is None  # kazoo's default: SECURE_ACL
    assert secure._acl_for("/consumers/g") == list(OPEN_ACL_UNSAFE)
    digest_only = ZkCredentials("u:p", set_acl=False)
    unset = ZooKeeperClient("127.0.0.1:2181", broker_id=1, credentials=digest_only)
    assert unset._acl_for("/config/users/alice") is None
