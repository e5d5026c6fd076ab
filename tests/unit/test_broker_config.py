"""BrokerConfig: Kafka property names and defaults, validation, topic overrides, --override."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from proto.config.broker_config import (
    LOG_PROPERTIES,
    TOPIC_PROPERTIES,
    BrokerConfig,
    TruncationMode,
    parse_overrides,
)
from proto.config.log_config import LogConfig
from proto.zk.session import split_zookeeper_connect

REQUIRED = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181", "log.dirs": "/data/b1"}


def config(**extra: str) -> BrokerConfig:
    return BrokerConfig.from_properties({**REQUIRED, **extra})


def test_defaults_are_kafkas_and_design_md() -> None:
    c = config()
    assert c.broker_id == 1
    assert c.zookeeper_connect == "127.0.0.1:2181"
    assert c.log_dir == Path("/data/b1")
    assert c.host == "127.0.0.1"
    assert c.port == 9091
    assert c.kafka_port == -1  # no Kafka listener
    assert c.zookeeper_session_timeout_ms == 6000
    assert c.zookeeper_connection_timeout_ms == 6000  # defaults to the session timeout
    assert c.replica_lag_time_max_ms == 10_000
    assert c.min_insync_replicas == 1
    assert c.default_replication_factor == 1
    assert c.num_partitions == 1
    assert c.unclean_leader_election_enable is False
    assert c.replication_truncation_mode is TruncationMode.LEADER_EPOCH
    assert c.replica_fetch_wait_max_ms == 500
    assert c.replica_fetch_min_bytes == 1
    assert c.replica_fetch_max_bytes == 1_048_576
    assert c.replica_fetch_response_max_bytes == 10_485_760
    assert c.replica_fetch_backoff_ms == 1000
    assert c.replica_high_watermark_checkpoint_interval_ms == 5000
    assert c.log_flush_offset_checkpoint_interval_ms == 60_000
    assert c.log_flush_start_offset_checkpoint_interval_ms == 60_000
    assert c.log_retention_check_interval_ms == 300_000
    assert c.message_max_bytes == 1_048_588
    assert c.auto_leader_rebalance_enable is True
    assert c.leader_imbalance_check_interval_seconds == 300
    assert c.leader_imbalance_per_broker_percentage == 10
    assert c.controlled_shutdown_enable is True
    assert c.controlled_shutdown_max_retries == 3
    assert c.controlled_shutdown_retry_backoff_ms == 5000
    assert c.request_timeout_ms == 30_000
    assert c.test_follower_hw_update_delay_ms == 0
    assert c.default_log_config == LogConfig()


def test_every_field_has_a_property() -> None:
    # to_properties covers every Kafka key; the table and the dataclass stay in step.
    names = set(config().to_properties())
    derived = {"log_properties", "listener_properties", "default_log_config"}
    assert len(names) == len([f for f in dataclasses.fields(BrokerConfig) if f.name not in derived])


def test_parses_types_and_whitespace() -> None:
    c = config(
        **{
            "port": " 9095 ",
            "unclean.leader.election.enable": "TRUE",
            "auto.leader.rebalance.enable": "False",
            "replication.truncation.mode": "high-watermark",
            "zookeeper.connection.timeout.ms": "2500",
            "test.follower.hw.update.delay.ms": "3000",
        }
    )
    assert c.port == 9095
    assert c.unclean_leader_election_enable is True
    assert c.auto_leader_rebalance_enable is False
    assert c.replication_truncation_mode is TruncationMode.HIGH_WATERMARK
    assert c.zookeeper_connection_timeout_ms == 2500
    assert c.test_follower_hw_update_delay_ms == 3000


def test_kafka_port_is_off_a_free_port_or_a_port() -> None:
    assert config(**{"kafka.port": "-1"}).kafka_port == -1
    assert config(**{"kafka.port": "0", "port": "0"}).kafka_port == 0  # both free ports: fine
    c = config(**{"kafka.port": " 19091 "})
    assert c.kafka_port == 19091
    assert c.to_properties()["kafka.port"] == "19091"
    assert BrokerConfig.from_properties(c.to_properties()) == c


def test_an_authenticated_broker_refuses_the_plaintext_kafka_listener() -> None:
    tls = {"ssl.keystore.location": "/k.pem", "ssl.truststore.location": "/t.pem"}
    with pytest.raises(ValueError, match=r"kafka\.port: this broker is authenticated"):
        config(**tls, **{"kafka.port": "0"})
    with pytest.raises(ValueError, match=r"kafka\.port: this broker is authenticated"):
        config(**tls, **{"kafka.port": "0", "listener.security.protocol.map": "KAFKA:PLAINTEXT"})
    with pytest.raises(ValueError, match=r"in the clear"):
        config(
            **tls,
            **{
                "kafka.port": "0",
                "listener.security.protocol.map": "KAFKA:SASL_PLAINTEXT",
                "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            },
        )
    assert config(**tls).kafka_port == -1
    c = config(**tls, **{"kafka.port": "0", "listener.security.protocol.map": "KAFKA:SSL"})
    assert c.kafka_security_protocol == "SSL"


_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="a-secret" user_admin="a-secret" user_alice="al\\"ice";'
)


def test_the_kafka_listener_security_under_kafka_names() -> None:
    tls = {"ssl.keystore.location": "/k.pem", "ssl.truststore.location": "/t.pem"}
    c = config(
        **tls,
        **{
            "kafka.port": "0",
            "ssl.client.auth": "required",
            "listener.security.protocol.map": "GRPC:SSL,kafka:SASL_SSL",
            "sasl.enabled.mechanisms": "PLAIN, SCRAM-SHA-512",
            "listener.name.kafka.plain.sasl.jaas.config": _JAAS,
        },
    )
    security = c.kafka_listener_security()
    assert (security.protocol, security.mechanisms) == ("SASL_SSL", ("PLAIN", "SCRAM-SHA-512"))
    assert dict(security.plain_users) == {"admin": "a-secret", "alice": 'al"ice'}
    assert security.client_auth == "none"  # Kafka: ssl.client.auth needs the listener prefix
    assert BrokerConfig.from_properties(c.to_properties()) == c
    with pytest.raises(ValueError, match=r"sasl\.enabled\.mechanisms"):
        config(**{"kafka.port": "0", "listener.security.protocol.map": "KAFKA:SASL_PLAINTEXT"})
    with pytest.raises(ValueError, match=r"GSSAPI"):
        config(
            **{
                "kafka.port": "0",
                "listener.security.protocol.map": "KAFKA:SASL_PLAINTEXT",
                "sasl.enabled.mechanisms": "GSSAPI",
            }
        )
    with pytest.raises(ValueError, match=r"jaas"):
        config(
            **{
                "kafka.port": "0",
                "listener.security.protocol.map": "KAFKA:SASL_PLAINTEXT",
                "sasl.enabled.mechanisms": "PLAIN",
            }
        )
    plain = config(
        **{
            "kafka.port": "0",
            "listener.security.protocol.map": "KAFKA:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.jaas.config": _JAAS,
        }
    )
    assert plain.kafka_listener_security().plain_users["admin"] == "a-secret"
    with pytest.raises(ValueError, match=r"needs the broker's ssl\.keystore"):
        config(**{"kafka.port": "0", "listener.security.protocol.map": "KAFKA:SSL"})
    with pytest.raises(ValueError, match=r"GRPC:SSL"):
        config(**{"kafka.port": "0", "listener.security.protocol.map": "GRPC:SSL"})
    with pytest.raises(ValueError, match=r"KAFKA"):
        config(**{"listener.name.sasl_ssl.plain.sasl.jaas.config": _JAAS})
    with pytest.raises(ValueError, match=r"unknown broker property"):
        config(**{"kafka.port": "0", "listener.name.kafka.ssl.keystore.location": "/k"})
    with pytest.raises(ValueError, match=r"ssl\.principal\.mapping\.rules"):
        config(
            **tls,
            **{
                "kafka.port": "0",
                "listener.security.protocol.map": "KAFKA:SSL",
                "ssl.principal.mapping.rules": "RULE:x",
            },
        )


def test_group_coordinator_properties_have_kafkas_defaults() -> None:
    c = config()
    assert c.group_initial_rebalance_delay_ms == 3000
    assert (c.group_min_session_timeout_ms, c.group_max_session_timeout_ms) == (6000, 1_800_000)
    assert config(**{"group.initial.rebalance.delay.ms": "0"}).group_initial_rebalance_delay_ms == 0


def test_log_properties_become_the_default_log_config() -> None:
    c = config(
        **{
            "log.segment.bytes": "1024",
            "log.retention.hours": "1",
            "log.retention.bytes": "4096",
            "log.index.interval.bytes": "128",
            "log.flush.interval.messages": "1",
            "message.max.bytes": "2000",
        }
    )
    assert c.default_log_config == LogConfig(
        segment_bytes=1024,
        retention_ms=3_600_000,
        retention_bytes=4096,
        index_interval_bytes=128,
        flush_interval_messages=1,
        max_message_bytes=2000,
    )
    assert dict(c.log_properties)["log.segment.bytes"] == "1024"
    assert set(c.log_properties) <= set(LOG_PROPERTIES)


def test_log_retention_ms_beats_hours() -> None:
    c = config(**{"log.retention.hours": "1", "log.retention.ms": "5000"})
    assert c.default_log_config.retention_ms == 5000


def test_log_dir_alias_and_log_dirs_wins() -> None:
    props = {"broker.id": "1", "zookeeper.connect": "zk:2181", "log.dir": "/a"}
    assert BrokerConfig.from_properties(props).log_dir == Path("/a")
    assert BrokerConfig.from_properties({**props, "log.dirs": "/b"}).log_dir == Path("/b")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("port", "abc", "invalid value for port: 'abc' is not an integer"),
        ("port", "70000", r"invalid value for port: 70000 \(must be in \[0, 65535\]\)"),
        ("kafka.port", "-2", r"invalid value for kafka\.port: -2 \(must be in \[-1, 65535\]\)"),
        ("kafka.port", "65536", r"invalid value for kafka\.port: 65536"),
        ("kafka.port", "9091", r"invalid value for kafka\.port: 9091 is also the gRPC port"),
        ("broker.id", "-1", "invalid value for broker.id: -1"),
        ("min.insync.replicas", "0", "invalid value for min.insync.replicas: 0"),
        ("replica.lag.time.max.ms", "1.5", "invalid value for replica.lag.time.max.ms"),
        ("unclean.leader.election.enable", "yes", "is not true or false"),
        ("replication.truncation.mode", "hw", "'leader-epoch' or 'high-watermark'"),
        ("leader.imbalance.per.broker.percentage", "101", "must be in \\[0, 100\\]"),
        ("log.dirs", "/a,/b", "exactly one data directory"),
        ("log.dirs", " ", "exactly one data directory"),
        ("zookeeper.connect", "", "must not be empty"),
        ("zookeeper.connect", "/chroot", "names no host"),
        ("zookeeper.connect", "zk:abc", "bad host"),
        ("zookeeper.connect", "zk:2181/chroot/", "bad chroot"),
        ("host", "  ", "invalid value for host"),
        ("log.segment.bytes", "10", "invalid value for log.segment.bytes"),
        ("log.retention.ms", "x", "invalid value for log.retention.ms"),
        ("replica.fetch.wait.max.ms", "20000", "must not exceed replica.lag.time.max.ms"),
    ],
)
def test_invalid_values_name_the_property(key: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config(**{key: value})


def test_unknown_key_suggests_the_closest() -> None:
    with pytest.raises(ValueError, match=r"unknown broker property 'replica\.lag\.time\.max' "):
        config(**{"replica.lag.time.max": "1"})
    with pytest.raises(ValueError, match=r"did you mean 'min\.insync\.replicas'\?"):
        config(**{"min.isr.replicas": "2"})
    with pytest.raises(ValueError, match=r"unknown broker property 'num\.network\.threads'"):
        config(**{"num.network.threads": "3"})


def test_missing_required_keys() -> None:
    with pytest.raises(
        ValueError, match=r"missing required broker properties: broker.id, log.dirs"
    ):
        BrokerConfig.from_properties({"zookeeper.connect": "zk:2181"})


def test_direct_construction_is_validated_too() -> None:
    c = BrokerConfig(broker_id=2, zookeeper_connect="zk:2181", log_dir=Path("/d"))
    assert c.port == 9091
    assert c.zookeeper_connection_timeout_ms == 6000
    with pytest.raises(ValueError, match=r"invalid value for min\.insync\.replicas: 0"):
        BrokerConfig(
            broker_id=2, zookeeper_connect="zk:2181", log_dir=Path("/d"), min_insync_replicas=0
        )
    with pytest.raises(ValueError, match=r"unknown log property 'log\.segment\.byte'"):
        BrokerConfig(
            broker_id=2,
            zookeeper_connect="zk:2181",
            log_dir=Path("/d"),
            log_properties={"log.segment.byte": "1"},
        )


def test_frozen() -> None:
    c = config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.port = 1  # type: ignore[misc]


def test_to_properties_round_trips() -> None:
    c = config(**{"log.segment.bytes": "2048", "unclean.leader.election.enable": "true"})
    props = c.to_properties()
    assert props["unclean.leader.election.enable"] == "true"
    assert props["replication.truncation.mode"] == "leader-epoch"
    assert props["log.dirs"] == "/data/b1"
    assert BrokerConfig.from_properties(props) == c


# -- topic overrides -------------------------------------------------------------------------


def test_topic_config_without_overrides_is_the_broker_default() -> None:
    c = config(**{"min.insync.replicas": "2", "log.segment.bytes": "4096"})
    topic = c.topic_config({})
    assert topic.log_config == c.default_log_config
    assert topic.min_insync_replicas == 2
    assert topic.unclean_leader_election_enable is False


def test_topic_overrides_apply_over_broker_defaults() -> None:
    c = config(**{"log.segment.bytes": "4096", "log.retention.bytes": "100000"})
    topic = c.topic_config(
        {
            "segment.bytes": "2048",
            "retention.ms": "1000",
            "min.insync.replicas": "2",
            "unclean.leader.election.enable": "true",
            "max.message.bytes": "500",
            "compression.type": "zstd",
        }
    )
    assert topic.log_config.compression_type == "zstd"
    assert topic.log_config.segment_bytes == 2048
    assert topic.log_config.retention_ms == 1000
    assert topic.log_config.retention_bytes == 100000  # the broker default stays
    assert topic.log_config.max_message_bytes == 500
    assert topic.min_insync_replicas == 2
    assert topic.unclean_leader_election_enable is True


def test_topic_config_ignores_unsupported_keys_unless_strict() -> None:
    c = config()
    overrides = {"segment.ms": "1000", "log.segment.bytes": "20"}
    assert c.topic_config(overrides) == c.topic_config({})  # broker-level names do not apply
    with pytest.raises(ValueError, match=r"unknown topic property 'segment.ms'"):
        c.topic_config(overrides, strict=True)
    compacted = c.topic_config({"cleanup.policy": "compact,delete"}).log_config
    assert compacted.cleanup_policy == ("compact", "delete")
    assert compacted.compact
    assert compacted.delete
    with pytest.raises(ValueError, match=r"did you mean 'retention\.ms'\?"):
        c.topic_config({"retention.msx": "1"}, strict=True)
    assert "min.insync.replicas" in TOPIC_PROPERTIES


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("min.insync.replicas", "0"),
        ("min.insync.replicas", "two"),
        ("unclean.leader.election.enable", "1"),
        ("segment.bytes", "-5"),
        ("compression.type", "brotli"),
    ],
)
def test_topic_config_bad_values_raise(key: str, value: str) -> None:
    with pytest.raises(ValueError, match=f"invalid value for {key}"):
        config().topic_config({key: value})


# -- --override ------------------------------------------------------------------------------


def test_parse_overrides() -> None:
    assert parse_overrides(["broker.id=1", " port = 9092 ", "x=a=b", "broker.id=2", "e="]) == {
        "broker.id": "2",
        "port": "9092",
        "x": "a=b",
        "e": "",
    }
    assert parse_overrides([]) == {}


@pytest.mark.parametrize(
    ("item", "message"),
    [("broker.id", "expected key=value"), ("=5", "property name before '=' is empty")],
)
def test_parse_overrides_errors(item: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_overrides([item])


def test_overrides_feed_from_properties() -> None:
    c = BrokerConfig.from_properties(
        parse_overrides(["broker.id=3", "zookeeper.connect=zk:2181/mb", "log.dirs=/d"])
    )
    assert (c.broker_id, c.zookeeper_connect) == (3, "zk:2181/mb")


@pytest.mark.parametrize(
    ("connect", "expected"),
    [
        ("127.0.0.1:2181", ("127.0.0.1:2181", None)),
        ("a:1,b:2/kafka", ("a:1,b:2", "/kafka")),
        ("a:1/t-abc/nested", ("a:1", "/t-abc/nested")),
        ("a:1/", ("a:1", None)),
        ("zk", ("zk", None)),
        ("[::1]:2181/x", ("[::1]:2181", "/x")),
    ],
)
def test_split_zookeeper_connect(connect: str, expected: tuple[str, str | None]) -> None:
    assert split_zookeeper_connect(connect) == expected


def test_the_jaas_configs_are_described_as_passwords() -> None:
    from proto.config.config_def import ConfigType
    from proto.config.describe_configs import broker_config_type

    assert broker_config_type("sasl.jaas.config") is ConfigType.PASSWORD
    assert broker_config_type("listener.name.kafka.plain.sasl.jaas.config") is ConfigType.PASSWORD
