"""A broker's configuration, under Kafka's property names (``server.properties``).

Users who know Kafka recognise every key: ``broker.id``, ``zookeeper.connect``,
``log.dirs``, ``replica.lag.time.max.ms``, ``min.insync.replicas``,
``unclean.leader.election.enable`` and so on, with Kafka 2.4's defaults (the last release
before 2.5 raised ``replica.lag.time.max.ms`` and ``zookeeper.session.timeout.ms``;
docs/replication.md keeps the older, snappier values). Two keys are ours:

- ``replication.truncation.mode``: ``leader-epoch`` (default, KIP-101/KIP-279) or
  ``high-watermark`` (pre-0.11 truncation, to reproduce its data loss and divergence);
- ``test.follower.hw.update.delay.ms`` and ``test.zookeeper.session.export.enable``: test
  and chaos only (see the fields' docstrings).

Build a config with :meth:`BrokerConfig.from_properties` (strings, as from a properties
file or ``--override key=value`` flags, see :func:`parse_overrides`), which rejects unknown
keys with a suggestion, or construct :class:`BrokerConfig` directly in code; both validate
every value and raise ``ValueError("invalid value for <name>: ...")`` naming the Kafka
property. The log-level defaults (``log.segment.bytes``, ``log.retention.*``, ...) become
:attr:`BrokerConfig.default_log_config`; a topic's overrides from ``/config/topics/<t>``
are applied over it by :meth:`BrokerConfig.topic_config`.
"""

from __future__ import annotations

import difflib
import enum
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from proto.config.kafka_listener_security import (
    KAFKA_LISTENER_PREFIX,
    KafkaListenerSecurity,
    listener_protocols,
)
from proto.config.log_config import LogConfig, check_range
from proto.transport.tls import TlsConfig
from proto.zk.credentials import ZkCredentials, read_digest_file
from proto.zk.session import split_zookeeper_connect
from proto.zk.znode_limits import JUTE_MAXBUFFER

__all__ = [
    "BROKER_PROPERTIES",
    "DEFAULT_MAX_BROKER_PARTITIONS",
    "LOG_PROPERTIES",
    "PROPERTY_KINDS",
    "TOPIC_PROPERTIES",
    "BrokerConfig",
    "TopicConfig",
    "TruncationMode",
    "connection_overrides",
    "parse_overrides",
]

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1
DEFAULT_MAX_BROKER_PARTITIONS = 1000
"""``max.broker.partitions``' default (docs/zookeeper.md#partition-limits)."""


class TruncationMode(enum.StrEnum):
    """``replication.truncation.mode``: how a replica truncates on becoming a follower."""

    LEADER_EPOCH = "leader-epoch"
    """Ask the leader OffsetsForLeaderEpoch and truncate to its answer (Kafka >= 2.0)."""
    HIGH_WATERMARK = "high-watermark"
    """Truncate to the own (checkpointed) high watermark (Kafka < 0.11; loses data)."""


_INT64_MAX = 2**63 - 1
AUTHORIZER_CLASS_NAMES = (
    "",
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
)
"""``authorizer.class.name`` values: none, Kafka 2.8's ACL authorizer, or its predecessor's
name (the same semantics here)."""
_INTEGER = re.compile(r"-?[0-9]+")


LOG_PROPERTIES = (
    "log.segment.bytes",
    "log.retention.ms",
    "log.retention.minutes",
    "log.retention.hours",
    "log.retention.bytes",
    "log.index.interval.bytes",
    "log.flush.interval.messages",
    "compression.type",
    "log.cleanup.policy",
    "log.cleaner.min.cleanable.ratio",
    "log.cleaner.delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms",
)
"""Broker-level defaults of the per-log settings, handed to :meth:`LogConfig.from_properties`
(``message.max.bytes`` is a :class:`BrokerConfig` field and also feeds the LogConfig)."""

TOPIC_PROPERTIES = (
    "segment.bytes",
    "index.interval.bytes",
    "retention.ms",
    "retention.bytes",
    "flush.messages",
    "max.message.bytes",
    "min.insync.replicas",
    "unclean.leader.election.enable",
    "compression.type",
    "cleanup.policy",
    "min.cleanable.dirty.ratio",
    "delete.retention.ms",
    "min.compaction.lag.ms",
    "max.compaction.lag.ms",
)
"""The topic-level overrides (``/config/topics/<t>``) this broker applies."""


@dataclass(frozen=True, slots=True)
class _Property:
    name: str
    """The Kafka property name."""
    field: str
    """The BrokerConfig field."""
    kind: str
    """int, float, bool, str, optstr (may be empty), path or mode."""
    low: int = 0
    high: int = _INT64_MAX


_PROPERTIES = (
    _Property("broker.id", "broker_id", "int", 0, _INT32_MAX),
    _Property("host", "host", "str"),
    _Property("port", "port", "int", 0, 65535),
    _Property("kafka.port", "kafka_port", "int", -1, 65535),
    _Property(
        "group.initial.rebalance.delay.ms", "group_initial_rebalance_delay_ms", "int", 0, _INT32_MAX
    ),
    _Property("group.min.session.timeout.ms", "group_min_session_timeout_ms", "int", 0, _INT32_MAX),
    _Property("group.max.session.timeout.ms", "group_max_session_timeout_ms", "int", 0, _INT32_MAX),
    _Property("metrics.prometheus.port", "metrics_prometheus_port", "int", -1, 65535),
    _Property("metrics.prometheus.host", "metrics_prometheus_host", "optstr"),
    _Property("ssl.keystore.location", "ssl_keystore_location", "optstr"),
    _Property("ssl.truststore.location", "ssl_truststore_location", "optstr"),
    _Property("ssl.client.auth", "ssl_client_auth", "str"),
    _Property("ssl.principal.mapping.rules", "ssl_principal_mapping_rules", "str"),
    _Property("listener.security.protocol.map", "listener_security_protocol_map", "optstr"),
    _Property("sasl.enabled.mechanisms", "sasl_enabled_mechanisms", "optstr"),
    _Property("sasl.jaas.config", "sasl_jaas_config", "optstr"),
    _Property("super.users", "super_users", "optstr"),
    _Property("authorizer.class.name", "authorizer_class_name", "optstr"),
    _Property("allow.everyone.if.no.acl.found", "allow_everyone_if_no_acl_found", "bool"),
    _Property("zookeeper.set.acl", "zookeeper_set_acl", "bool"),
    _Property("zookeeper.auth.digest.file", "zookeeper_auth_digest_file", "optstr"),
    _Property("zookeeper.connect", "zookeeper_connect", "str"),
    _Property("log.dirs", "log_dir", "path"),
    _Property("zookeeper.session.timeout.ms", "zookeeper_session_timeout_ms", "int", 1, _INT32_MAX),
    _Property(
        "zookeeper.connection.timeout.ms", "zookeeper_connection_timeout_ms", "int", 1, _INT32_MAX
    ),
    _Property("zookeeper.jute.maxbuffer", "zookeeper_jute_maxbuffer", "int", 1024, _INT32_MAX),
    _Property("replica.lag.time.max.ms", "replica_lag_time_max_ms", "int", 1),
    _Property("min.insync.replicas", "min_insync_replicas", "int", 1, _INT32_MAX),
    _Property("default.replication.factor", "default_replication_factor", "int", 1, _INT32_MAX),
    _Property("num.partitions", "num_partitions", "int", 1, _INT32_MAX),
    _Property(
        "num.recovery.threads.per.data.dir", "num_recovery_threads_per_data_dir", "int", 1, 64
    ),
    _Property("max.partitions", "max_partitions", "int", 1, _INT32_MAX),
    _Property("max.broker.partitions", "max_broker_partitions", "int", 1, _INT32_MAX),
    _Property("log.segment.open.files.max", "log_segment_open_files_max", "int", -1, _INT32_MAX),
    _Property("auto.create.topics.enable", "auto_create_topics_enable", "bool"),
    _Property("unclean.leader.election.enable", "unclean_leader_election_enable", "bool"),
    _Property("replication.truncation.mode", "replication_truncation_mode", "mode"),
    _Property("replica.fetch.wait.max.ms", "replica_fetch_wait_max_ms", "int", 0, _INT32_MAX),
    _Property("replica.fetch.min.bytes", "replica_fetch_min_bytes", "int", 0, _INT32_MAX),
    _Property("replica.fetch.max.bytes", "replica_fetch_max_bytes", "int", 0, _INT32_MAX),
    _Property(
        "replica.fetch.response.max.bytes", "replica_fetch_response_max_bytes", "int", 0, _INT32_MAX
    ),
    _Property("replica.fetch.backoff.ms", "replica_fetch_backoff_ms", "int", 0, _INT32_MAX),
    _Property(
        "replica.high.watermark.checkpoint.interval.ms",
        "replica_high_watermark_checkpoint_interval_ms",
        "int",
        1,
    ),
    _Property(
        "log.flush.offset.checkpoint.interval.ms",
        "log_flush_offset_checkpoint_interval_ms",
        "int",
        1,
        _INT32_MAX,
    ),
    _Property(
        "log.flush.start.offset.checkpoint.interval.ms",
        "log_flush_start_offset_checkpoint_interval_ms",
        "int",
        1,
        _INT32_MAX,
    ),
    _Property("log.retention.check.interval.ms", "log_retention_check_interval_ms", "int", 1),
    _Property("log.cleaner.enable", "log_cleaner_enable", "bool"),
    _Property("log.cleaner.backoff.ms", "log_cleaner_backoff_ms", "int", 0),
    _Property("log.cleaner.dedupe.buffer.size", "log_cleaner_dedupe_buffer_size", "int", 1024),
    _Property(
        "log.cleaner.io.max.bytes.per.second", "log_cleaner_io_max_bytes_per_second", "float"
    ),
    _Property("message.max.bytes", "message_max_bytes", "int", 0, _INT32_MAX),
    _Property("socket.request.max.bytes", "socket_request_max_bytes", "int", 1024, _INT32_MAX),
    _Property("max.connections", "max_connections", "int", 0, _INT32_MAX),
    _Property("max.connections.per.ip", "max_connections_per_ip", "int", 0, _INT32_MAX),
    _Property("max.connections.per.ip.overrides", "max_connections_per_ip_overrides", "optstr"),
    _Property("connections.max.idle.ms", "connections_max_idle_ms", "int", 1),
    _Property("queued.max.request.bytes", "queued_max_request_bytes", "int", -1),
    _Property(
        "socket.request.read.timeout.ms", "socket_request_read_timeout_ms", "int", 1, _INT32_MAX
    ),
    _Property(
        "connections.handshake.timeout.ms", "connections_handshake_timeout_ms", "int", 1, _INT32_MAX
    ),
    _Property("group.max.size", "group_max_size", "int", 1, _INT32_MAX),
    _Property("offsets.topic.num.partitions", "offsets_topic_num_partitions", "int", 1, _INT32_MAX),
    _Property(
        "offsets.topic.replication.factor", "offsets_topic_replication_factor", "int", 1, 32767
    ),
    _Property("offsets.topic.segment.bytes", "offsets_topic_segment_bytes", "int", 14, _INT32_MAX),
    _Property("offsets.commit.timeout.ms", "offsets_commit_timeout_ms", "int", 1, _INT32_MAX),
    _Property("offsets.retention.minutes", "offsets_retention_minutes", "int", 1, _INT32_MAX),
    _Property(
        "offsets.retention.check.interval.ms", "offsets_retention_check_interval_ms", "int", 1
    ),
    _Property(
        "transaction.state.log.num.partitions",
        "transaction_state_log_num_partitions",
        "int",
        1,
        _INT32_MAX,
    ),
    _Property(
        "transaction.state.log.replication.factor",
        "transaction_state_log_replication_factor",
        "int",
        1,
        32767,
    ),
    _Property(
        "transaction.state.log.segment.bytes",
        "transaction_state_log_segment_bytes",
        "int",
        14,
        _INT32_MAX,
    ),
    _Property(
        "transaction.state.log.min.isr", "transaction_state_log_min_isr", "int", 1, _INT32_MAX
    ),
    _Property("transaction.max.timeout.ms", "transaction_max_timeout_ms", "int", 1, _INT32_MAX),
    _Property(
        "transactional.id.expiration.ms", "transactional_id_expiration_ms", "int", 1, _INT32_MAX
    ),
    _Property(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "transaction_abort_timed_out_transaction_cleanup_interval_ms",
        "int",
        1,
        _INT32_MAX,
    ),
    _Property(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "transaction_remove_expired_transaction_cleanup_interval_ms",
        "int",
        1,
        _INT32_MAX,
    ),
    _Property(
        "group.max.protocol.metadata.bytes",
        "group_max_protocol_metadata_bytes",
        "int",
        0,
        _INT32_MAX,
    ),
    _Property("quota.window.num", "quota_window_num", "int", 1),
    _Property("quota.window.size.seconds", "quota_window_size_seconds", "int", 1),
    _Property("auto.leader.rebalance.enable", "auto_leader_rebalance_enable", "bool"),
    _Property(
        "leader.imbalance.check.interval.seconds",
        "leader_imbalance_check_interval_seconds",
        "int",
        1,
    ),
    _Property(
        "leader.imbalance.per.broker.percentage",
        "leader_imbalance_per_broker_percentage",
        "int",
        0,
        100,
    ),
    _Property("controlled.shutdown.enable", "controlled_shutdown_enable", "bool"),
    _Property(
        "controlled.shutdown.max.retries", "controlled_shutdown_max_retries", "int", 0, _INT32_MAX
    ),
    _Property(
        "controlled.shutdown.retry.backoff.ms", "controlled_shutdown_retry_backoff_ms", "int"
    ),
    _Property("request.timeout.ms", "request_timeout_ms", "int", 1, _INT32_MAX),
    _Property(
        "control.request.unknown.broker.epoch.enable",
        "control_request_unknown_broker_epoch_enable",
        "bool",
    ),
    _Property(
        "test.follower.hw.update.delay.ms", "test_follower_hw_update_delay_ms", "int", 0, _INT32_MAX
    ),
    _Property(
        "test.zookeeper.session.export.enable", "test_zookeeper_session_export_enable", "bool"
    ),
)
SSL_CLIENT_AUTH_VALUES = ("none", "requested", "required")
_BY_NAME = {prop.name: prop for prop in _PROPERTIES}
BROKER_PROPERTIES = (*_BY_NAME, *LOG_PROPERTIES)
"""Every broker property name this broker knows (besides the ``log.dir`` alias)."""
PROPERTY_KINDS = MappingProxyType({p.name: (p.kind, p.high) for p in _PROPERTIES})
"""Property -> (kind: int, bool, str, optstr, path or mode; highest integer), for describing."""
_REQUIRED = ("broker.id", "zookeeper.connect", "log.dirs")
_ALIASES = {"log.dir": "log.dirs"}
"""Kafka's ``log.dir`` is the single-dir spelling; ``log.dirs`` wins when both are given."""


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """A topic's effective settings: the broker defaults with its overrides applied."""

    log_config: LogConfig
    min_insync_replicas: int
    """Fewest in-sync replicas for an acks=all produce to be accepted."""
    unclean_leader_election_enable: bool
    """Whether an out-of-sync replica may become leader when no ISR member is alive."""


@dataclass(frozen=True)
class BrokerConfig:
    """One broker's settings. Fields mirror the Kafka properties (``.`` becomes ``_``)."""

    broker_id: int
    """``broker.id`` (required): this broker's id, also stored in ``meta.properties``."""
    zookeeper_connect: str
    """``zookeeper.connect`` (required): ``host:port[,host:port...][/chroot]``."""
    log_dir: Path
    """``log.dirs`` (required; ``log.dir`` also accepted): the one data directory."""
    host: str = "127.0.0.1"
    """``host``: address the gRPC server binds and registers in ``/brokers/ids/<id>``."""
    port: int = 9091
    """``port``: the gRPC port; 0 binds a free one (the broker registers the bound port)."""
    kafka_port: int = -1
    """``kafka.port``: a second listener, on ``host``, that speaks Kafka's own binary protocol
    over TCP, so that Kafka's clients (kcat, aiokafka, confluent-kafka) work unchanged; -1
    (the default) runs none, 0 binds a free port. The bound port is registered as the
    broker's ``KAFKA://`` endpoint in ``/brokers/ids/<id>`` and reaches every broker in
    UpdateMetadata. minibroker's own property: Kafka names its listeners in ``listeners``."""
    group_initial_rebalance_delay_ms: int = 3000
    """``group.initial.rebalance.delay.ms``: how long the Kafka listener's group coordinator
    lets members gather before an empty group's first generation (Kafka's default)."""
    group_min_session_timeout_ms: int = 6000
    """``group.min.session.timeout.ms``: the shortest session a group member may ask for."""
    group_max_session_timeout_ms: int = 1_800_000
    """``group.max.session.timeout.ms``: the longest session a group member may ask for."""
    metrics_prometheus_port: int = -1
    """``metrics.prometheus.port``: serve Prometheus metrics at ``http://host:port/metrics``;
    -1 (the default) serves none, 0 a free port (logged at start-up). minibroker's own
    property: Kafka exports JMX and leaves Prometheus to an agent."""
    metrics_prometheus_host: str = ""
    """``metrics.prometheus.host``: the address the metrics endpoint binds; empty (the
    default): ``host``. ``0.0.0.0`` where a scraper on another host or container must reach
    it while ``host`` is a loopback address (the Docker cluster)."""
    ssl_keystore_location: str = ""
    """``ssl.keystore.location``: a PEM file with this broker's certificate chain and private
    key. Set, the broker's one listener is SSL (Kafka's ``listeners=SSL://...``) and it speaks
    TLS to the other brokers too, presenting this certificate (see :mod:`proto.transport.tls`)."""
    ssl_truststore_location: str = ""
    """``ssl.truststore.location``: a PEM file of the CA certificates peers must chain to."""
    ssl_client_auth: str = "none"
    """``ssl.client.auth``: ``required`` (a client without a certificate the truststore
    accepts is refused in the handshake), ``requested`` or ``none``."""
    ssl_principal_mapping_rules: str = "DEFAULT"
    """``ssl.principal.mapping.rules``: the name a client certificate's subject maps to on
    an SSL Kafka listener (Kafka's rules, :mod:`proto.transport.ssl_principal`)."""
    listener_security_protocol_map: str = ""
    """``listener.security.protocol.map``: ``KAFKA:<protocol>`` sets the Kafka listener's
    security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL); ``GRPC:`` may only say
    what ``ssl.keystore.location`` makes it. Empty: ``KAFKA:PLAINTEXT``. See
    :mod:`proto.config.kafka_listener_security` and docs/security.md."""
    sasl_enabled_mechanisms: str = ""
    """``sasl.enabled.mechanisms``: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (a SASL listener
    needs one; Kafka's default GSSAPI is not served)."""
    sasl_jaas_config: str = ""
    """``sasl.jaas.config``: PLAIN's users as ``user_<name>="<password>"`` options of a
    PlainLoginModule entry, unless ``listener.name.kafka.plain.sasl.jaas.config`` is set."""
    listener_properties: Mapping[str, str] = field(default_factory=dict, hash=False)
    """The ``listener.name.kafka.*`` properties as given."""
    super_users: str = ""
    """``super.users``: ``User:CN=broker-1;User:CN=broker-2;...``, the principals that may
    act as brokers (control requests, replica fetches), as with Kafka's authorizer. With TLS,
    every other principal may produce, fetch and read metadata, not more."""
    authorizer_class_name: str = ""
    """``authorizer.class.name``: ``kafka.security.authorizer.AclAuthorizer`` turns on ACLs
    on both listeners (docs/security.md); empty (the default): no ACL is checked, as in
    Kafka without an authorizer."""
    allow_everyone_if_no_acl_found: bool = False
    """``allow.everyone.if.no.acl.found``: with the authorizer, a resource no ACL covers is
    open to everyone (Kafka's default: closed to all but ``super.users``)."""
    zookeeper_set_acl: bool = False
    """``zookeeper.set.acl``: create every znode with the secure ACL (the brokers' digest may
    change it, the world may read it; ``/consumers`` stays open), so that nobody without the
    credentials can write ``/controller_epoch``, ``/brokers`` or ``/admin``. Needs
    ``zookeeper.auth.digest.file``."""
    zookeeper_auth_digest_file: str = ""
    """``zookeeper.auth.digest.file``: a file holding ``user:password``, the ZooKeeper digest
    identity every broker of the cluster authenticates its sessions with (minibroker's own
    property: Kafka authenticates to ZooKeeper with SASL through a JAAS file, or mTLS)."""
    zookeeper_session_timeout_ms: int = 6000
    zookeeper_connection_timeout_ms: int | None = None
    """How long to wait for the first ZooKeeper connection; None: the session timeout."""
    zookeeper_jute_maxbuffer: int = JUTE_MAXBUFFER
    """``zookeeper.jute.maxbuffer``: the longest ZooKeeper write this broker sends, in bytes
    (ZooKeeper's ``jute.maxbuffer``, default 1048575, which Kafka takes from the JVM system
    property of that name); a longer one is refused (POLICY_VIOLATION) instead of sent,
    because the server would drop the session. Never above the servers' own limit."""
    replica_lag_time_max_ms: int = 10_000
    """A follower that has not caught up for this long leaves the ISR (docs/replication.md)."""
    min_insync_replicas: int = 1
    default_replication_factor: int = 1
    """``default.replication.factor``: the replicas of a topic created without a factor
    (CreateTopics with -1, KIP-464) or created automatically."""
    num_partitions: int = 1
    """``num.partitions``: the partitions of a topic created without a count or created
    automatically."""
    num_recovery_threads_per_data_dir: int = 1
    """``num.recovery.threads.per.data.dir``: threads that load the logs at startup and
    flush and close them at shutdown (Kafka's default, 1; a broker hosting thousands of
    partitions restarts faster with more: docs/storage.md)."""
    max_partitions: int = _INT32_MAX
    """``max.partitions`` (KIP-578): the most partitions the cluster may hold; CreateTopics,
    CreatePartitions and auto topic creation that would pass it are refused
    (POLICY_VIOLATION). The default sets no cluster-wide limit."""
    log_segment_open_files_max: int = -1
    """``log.segment.open.files.max`` (minibroker's own: Kafka keeps every segment file
    open): the most segment ``.log`` files the broker keeps open at once, the least
    recently used idle one being closed to open another (docs/storage.md#file-descriptors).
    -1 (or 0): half the soft ``RLIMIT_NOFILE``, the other half left to sockets."""
    max_broker_partitions: int = DEFAULT_MAX_BROKER_PARTITIONS
    """``max.broker.partitions`` (KIP-578): the most partition replicas one broker may host;
    a request whose assignment would pass it on any broker is refused (POLICY_VIOLATION).
    The default is what one broker on two cores serves (docs/zookeeper.md#partition-limits),
    not a descriptor budget: partitions share a bounded pool of open segment files."""
    auto_create_topics_enable: bool = True
    """``auto.create.topics.enable``: a Metadata request that names a missing topic and
    allows it (Kafka clients' producers do; consumers with ``allow.auto.create.topics``)
    creates it with ``num.partitions`` and ``default.replication.factor``, as Kafka's
    brokers do by default."""
    unclean_leader_election_enable: bool = False
    replication_truncation_mode: TruncationMode = TruncationMode.LEADER_EPOCH
    replica_fetch_wait_max_ms: int = 500
    """Longest a follower's fetch waits at the leader for ``replica.fetch.min.bytes``."""
    replica_fetch_min_bytes: int = 1
    replica_fetch_max_bytes: int = 1_048_576
    """Per partition, per fetch (at least one batch is always returned, KIP-74)."""
    replica_fetch_response_max_bytes: int = 10_485_760
    """Per fetch response, all partitions together."""
    replica_fetch_backoff_ms: int = 1000
    """Pause before retrying a follower fetch that failed."""
    replica_high_watermark_checkpoint_interval_ms: int = 5000
    log_flush_offset_checkpoint_interval_ms: int = 60_000
    log_flush_start_offset_checkpoint_interval_ms: int = 60_000
    log_retention_check_interval_ms: int = 300_000
    log_cleaner_enable: bool = True
    """``log.cleaner.enable``: run the log cleaner for the logs whose ``cleanup.policy``
    includes ``compact`` (Kafka's default, true)."""
    log_cleaner_backoff_ms: int = 15_000
    """``log.cleaner.backoff.ms``: how long the cleaner sleeps when no log needs cleaning."""
    log_cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024
    """``log.cleaner.dedupe.buffer.size``: the offset map's memory, 24 bytes a key."""
    log_cleaner_io_max_bytes_per_second: float = 1.7976931348623157e308
    """``log.cleaner.io.max.bytes.per.second``: the cleaner's reads and writes together."""
    message_max_bytes: int = 1_048_588
    socket_request_max_bytes: int = 104_857_600
    """The largest request the broker accepts; gRPC refuses larger ones with
    RESOURCE_EXHAUSTED before they reach a handler."""
    """Largest record batch accepted (also the default ``max.message.bytes`` of topics)."""
    max_connections: int = _INT32_MAX
    """``max.connections``: the Kafka listener's connections at most; at the limit it
    accepts no more until one closes (the kernel's backlog holds the next), as Kafka's
    acceptor waits (docs/resource-limits.md)."""
    max_connections_per_ip: int = _INT32_MAX
    """``max.connections.per.ip``: connections from one address at most; one more is
    closed as soon as it is accepted."""
    max_connections_per_ip_overrides: str = ""
    """``max.connections.per.ip.overrides``: ``host:count,...`` (an IP address or a host
    name, resolved at start-up) over ``max.connections.per.ip``."""
    connections_max_idle_ms: int = 600_000
    """``connections.max.idle.ms``: a Kafka connection that sent nothing and is owed
    nothing for this long is closed; on gRPC, ``grpc.max_connection_idle_ms``."""
    queued_max_request_bytes: int = 209_715_200
    """``queued.max.request.bytes`` (KIP-72): the bytes of requests read and not yet staged,
    all Kafka connections together; a request waits for room before its body is read. -1:
    unbounded (Kafka's default). minibroker's default is two ``socket.request.max.bytes``:
    one largest request can be read while another is handled, and a flood of large frames
    holds at most this much (docs/resource-limits.md)."""
    socket_request_read_timeout_ms: int = 30_000
    """``socket.request.read.timeout.ms`` (minibroker's own): how long a Kafka request may
    take to arrive once its size did (and the memory pool had room for it); a half-sent
    frame is closed after it. The default is Kafka clients' ``request.timeout.ms``: by then
    the client has given the request up."""
    connections_handshake_timeout_ms: int = 10_000
    """``connections.handshake.timeout.ms`` (minibroker's own): how long a gRPC connection
    may take to finish its TLS and HTTP/2 handshake (``grpc.server_handshake_timeout_ms``)
    before it is closed; gRPC's own is 120 s."""
    offsets_topic_num_partitions: int = 50
    """``offsets.topic.num.partitions``: the partitions of ``__consumer_offsets``, made when
    a client first looks for a group coordinator (docs/consumer-groups.md). Fixed once the
    topic exists: a group's partition is the hash of its id modulo this count."""
    offsets_topic_replication_factor: int = 3
    """``offsets.topic.replication.factor``: the replicas of ``__consumer_offsets``; while
    fewer brokers are alive the topic is not made and FindCoordinator answers
    COORDINATOR_NOT_AVAILABLE, as Kafka's does."""
    offsets_topic_segment_bytes: int = 104_857_600
    """``offsets.topic.segment.bytes``: ``segment.bytes`` of ``__consumer_offsets``."""
    offsets_commit_timeout_ms: int = 5000
    """``offsets.commit.timeout.ms``: how long an offset commit waits for every in-sync
    replica of its ``__consumer_offsets`` partition before it fails (REQUEST_TIMED_OUT)."""
    offsets_retention_minutes: int = 10_080
    """``offsets.retention.minutes``: a group's committed offsets are dropped this long
    after the group became empty (KIP-211), or after the commit for a consumer that
    ``assign()``s and has no group."""
    offsets_retention_check_interval_ms: int = 600_000
    """``offsets.retention.check.interval.ms``: how often expired offsets are looked for."""
    transaction_state_log_num_partitions: int = 50
    """``transaction.state.log.num.partitions``: the partitions of ``__transaction_state``
    (docs/transactions.md); a transactional id's partition is the hash of the id modulo
    this count, so it is fixed once the topic exists."""
    transaction_state_log_replication_factor: int = 3
    """``transaction.state.log.replication.factor``: the replicas of ``__transaction_state``."""
    transaction_state_log_segment_bytes: int = 104_857_600
    """``transaction.state.log.segment.bytes``: ``segment.bytes`` of ``__transaction_state``."""
    transaction_state_log_min_isr: int = 2
    """``transaction.state.log.min.isr``: ``min.insync.replicas`` of ``__transaction_state``."""
    transaction_max_timeout_ms: int = 900_000
    """``transaction.max.timeout.ms``: the longest ``transaction.timeout.ms`` a producer may
    ask for (INVALID_TRANSACTION_TIMEOUT above it)."""
    transactional_id_expiration_ms: int = 604_800_000
    """``transactional.id.expiration.ms``: an idle transactional id is forgotten this long
    after its last transaction ended."""
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    """``transaction.abort.timed.out.transaction.cleanup.interval.ms``: how often the
    coordinator looks for transactions open past their timeout, to abort them."""
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    """``transaction.remove.expired.transaction.cleanup.interval.ms``: how often expired
    transactional ids are looked for."""
    group_max_size: int = _INT32_MAX
    """``group.max.size`` (KIP-389): members of one consumer group at most; a new member
    past it gets GROUP_MAX_SIZE_REACHED."""
    group_max_protocol_metadata_bytes: int = 1_048_576
    """``group.max.protocol.metadata.bytes`` (minibroker's own): the protocol metadata a
    group member may give in its JoinGroup, all its protocols together; more is refused
    INVALID_REQUEST. The coordinator keeps it and hands every member's to the leader."""
    quota_window_num: int = 11
    """Samples a client quota's rate is kept over (Kafka's ``quota.window.num``)."""
    quota_window_size_seconds: int = 1
    """The length of each sample (Kafka's ``quota.window.size.seconds``)."""
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    controlled_shutdown_enable: bool = True
    controlled_shutdown_max_retries: int = 3
    controlled_shutdown_retry_backoff_ms: int = 5000
    request_timeout_ms: int = 30_000
    """Timeout of the broker's own requests (to the controller, to other brokers)."""
    control_request_unknown_broker_epoch_enable: bool = False
    """Upgrade setting: accept LeaderAndIsr, UpdateMetadata and StopReplica whose
    ``broker_epoch`` is -1 (unknown), as controllers from before KIP-380 (Kafka < 2.2) sent
    them. Off, such a request is refused STALE_BROKER_EPOCH: with -1 anyone could skip the
    check that a request is meant for this incarnation of the broker."""
    test_follower_hw_update_delay_ms: int = 0
    """Test only (the §8 tests and ``chaos scenario hw-data-loss``): a follower applies a
    fetched leader HW this long after the fetch, so those scenarios can hold its HW behind the
    leader's; never set it outside tests."""
    test_zookeeper_session_export_enable: bool = False
    """Test and chaos only: write the registration session's id and password to
    ``<log.dirs>/.zookeeper-session`` (mode 0600) each time the broker registers, so that the
    chaos tool's ``zk-expire`` nemesis can end that session for real without killing the
    broker (as Jepsen does). Whoever reads the file can expire the broker's session."""
    log_properties: Mapping[str, str] = field(default_factory=dict, hash=False)
    """The ``log.*`` defaults as given (see LOG_PROPERTIES), turned into default_log_config."""
    default_log_config: LogConfig = field(init=False)
    """The LogConfig of a topic without overrides."""

    def __post_init__(self) -> None:
        # Frozen: normalise through object.__setattr__, once, at construction.
        set_ = object.__setattr__
        if self.zookeeper_connection_timeout_ms is None:
            set_(self, "zookeeper_connection_timeout_ms", self.zookeeper_session_timeout_ms)
        for prop in _PROPERTIES:
            _check_value(prop, getattr(self, prop.field))
        split_zookeeper_connect(self.zookeeper_connect)
        if not self.host.strip():
            raise ValueError("invalid value for host: must not be empty")
        if self.kafka_port > 0 and self.kafka_port == self.port:
            raise ValueError(
                f"invalid value for kafka.port: {self.kafka_port} is also the gRPC port "
                "(both listeners bind host)"
            )
        if self.ssl_client_auth not in SSL_CLIENT_AUTH_VALUES:
            raise ValueError(
                f"invalid value for ssl.client.auth: {self.ssl_client_auth!r} "
                f"(one of {', '.join(SSL_CLIENT_AUTH_VALUES)})"
            )
        if bool(self.ssl_keystore_location) != bool(self.ssl_truststore_location):
            raise ValueError(
                "ssl.keystore.location and ssl.truststore.location go together: a TLS broker "
                "presents its certificate and checks its peers'"
            )
        if self.authorizer_class_name not in AUTHORIZER_CLASS_NAMES:
            raise ValueError(
                f"invalid value for authorizer.class.name: {self.authorizer_class_name!r} "
                f"(empty, or {' or '.join(n for n in AUTHORIZER_CLASS_NAMES if n)})"
            )
        if self.zookeeper_set_acl and not self.zookeeper_auth_digest_file:
            raise ValueError("zookeeper.set.acl=true needs zookeeper.auth.digest.file")
        if self.ssl_client_auth != "none" and not self.ssl_keystore_location:
            raise ValueError(f"ssl.client.auth={self.ssl_client_auth} needs ssl.keystore.location")
        if self.queued_max_request_bytes == 0:
            raise ValueError(
                "invalid value for queued.max.request.bytes: 0 (-1 for unbounded, or a size)"
            )
        overrides = connection_overrides(self.max_connections_per_ip_overrides)
        if self.max_connections_per_ip == 0 and not overrides:
            # KafkaConfig.validateValues: 0 admits only the hosts the overrides name.
            raise ValueError(
                "max.connections.per.ip can be set to zero only if "
                "max.connections.per.ip.overrides property is set."
            )
        if self.replica_fetch_wait_max_ms > self.replica_lag_time_max_ms:
            # As Kafka's KafkaConfig.validateValues: a follower whose fetch waits longer than
            # the lag limit would drop out of the ISR while idle.
            raise ValueError(
                f"invalid value for replica.fetch.wait.max.ms: {self.replica_fetch_wait_max_ms} "
                f"must not exceed replica.lag.time.max.ms ({self.replica_lag_time_max_ms})"
            )
        set_(self, "listener_properties", MappingProxyType(dict(self.listener_properties)))
        protocols = listener_protocols(self.listener_security_protocol_map)
        grpc = "SSL" if self.ssl_keystore_location else "PLAINTEXT"
        if protocols.get("GRPC", grpc) != grpc:
            raise ValueError(
                f"invalid value for listener.security.protocol.map: GRPC:{protocols['GRPC']}; "
                f"the gRPC listener is {grpc}, as ssl.keystore.location makes it"
            )
        if self.kafka_port >= 0:
            self.kafka_listener_security()  # checks it
        elif self.listener_properties:
            raise ValueError(
                f"{next(iter(self.listener_properties))} is set but kafka.port is -1 (no "
                "Kafka listener)"
            )
        unknown = sorted(set(self.log_properties) - set(LOG_PROPERTIES))
        if unknown:
            raise ValueError(f"unknown log property {unknown[0]!r}{_suggest(unknown[0])}")
        log_properties = MappingProxyType(dict(self.log_properties))
        set_(self, "log_properties", log_properties)
        set_(
            self,
            "default_log_config",
            LogConfig.from_properties(
                {**log_properties, "message.max.bytes": str(self.message_max_bytes)}
            ),
        )

    @property
    def acls_enabled(self) -> bool:
        """Whether ``authorizer.class.name`` names the ACL authorizer."""
        return bool(self.authorizer_class_name)

    @property
    def tls_enabled(self) -> bool:
        return bool(self.ssl_keystore_location)

    @property
    def kafka_security_protocol(self) -> str:
        """The Kafka listener's security protocol (``KAFKA`` in the protocol map)."""
        return listener_protocols(self.listener_security_protocol_map).get("KAFKA", "PLAINTEXT")

    def kafka_listener_security(self) -> KafkaListenerSecurity:
        """The Kafka listener's protocol, mechanisms and users, checked (ValueError)."""
        return KafkaListenerSecurity.from_properties(
            self.kafka_security_protocol,
            sasl_enabled_mechanisms=self.sasl_enabled_mechanisms,
            sasl_jaas_config=self.sasl_jaas_config,
            ssl_client_auth=self.ssl_client_auth,
            ssl_principal_mapping_rules=self.ssl_principal_mapping_rules,
            listener_properties=self.listener_properties,
            tls_enabled=self.tls_enabled,
        )

    @property
    def super_user_principals(self) -> frozenset[str]:
        """``super.users`` as a set of principals (Kafka separates them with ``;``)."""
        return frozenset(p.strip() for p in self.super_users.split(";") if p.strip())

    def tls(self) -> TlsConfig | None:
        """The broker's TLS material (read from its files), or None for PLAINTEXT. Raises
        TlsConfigError for a file that cannot be read or holds no usable PEM."""
        if not self.tls_enabled:
            return None
        return TlsConfig.from_files(self.ssl_truststore_location, self.ssl_keystore_location)

    def zookeeper_credentials(self) -> ZkCredentials | None:
        """The digest of ``zookeeper.auth.digest.file`` (read now), or None without one.
        Raises ZkCredentialsError for a file that cannot be read or is malformed."""
        if not self.zookeeper_auth_digest_file:
            return None
        return read_digest_file(self.zookeeper_auth_digest_file, set_acl=self.zookeeper_set_acl)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> BrokerConfig:
        """Parse Kafka properties (string values) into a validated config.

        ``broker.id``, ``zookeeper.connect`` and ``log.dirs`` are required. Integers are
        decimal, booleans ``true``/``false`` (any case), surrounding whitespace is ignored.
        Raises ValueError naming the property for a missing key, an unknown key (with the
        closest known one), a value of the wrong type or out of range, or ``log.dirs``
        listing more than one directory.
        """
        values: dict[str, object] = {}
        log_properties: dict[str, str] = {}
        listener_properties: dict[str, str] = {}
        for given_name, raw in properties.items():
            name = given_name.strip()
            if name in _ALIASES:
                if _ALIASES[name] in properties:
                    continue
                name = _ALIASES[name]
            text = raw.strip()
            if name in LOG_PROPERTIES:
                log_properties[name] = text
                continue
            if name.startswith("listener.name."):
                if not name.startswith(KAFKA_LISTENER_PREFIX):
                    raise ValueError(
                        f"unknown broker property {name!r}: the Kafka listener's name is "
                        f"KAFKA, its properties start with {KAFKA_LISTENER_PREFIX!r}"
                    )
                listener_properties[name] = text
                continue
            prop = _BY_NAME.get(name)
            if prop is None:
                raise ValueError(f"unknown broker property {name!r}{_suggest(name)}")
            values[prop.field] = _parse_value(prop, text)
        missing = [name for name in _REQUIRED if _BY_NAME[name].field not in values]
        if missing:
            raise ValueError(f"missing required broker properties: {', '.join(missing)}")
        return cls(
            **values,  # type: ignore[arg-type]
            log_properties=log_properties,
            listener_properties=listener_properties,
        )

    def to_properties(self) -> dict[str, str]:
        """The config as Kafka properties, every key included (logged at startup, as Kafka
        logs its ``KafkaConfig values``); ``from_properties`` of the result is equal."""
        result = {}
        for prop in _PROPERTIES:
            value = getattr(self, prop.field)
            if isinstance(value, bool):
                result[prop.name] = "true" if value else "false"
            else:
                result[prop.name] = str(value)
        result.update(self.log_properties)
        result.update(self.listener_properties)
        return result

    def topic_config(self, overrides: Mapping[str, str], *, strict: bool = False) -> TopicConfig:
        """The effective settings of a topic with ``overrides`` (``/config/topics/<t>``).

        Topic-level names (TOPIC_PROPERTIES: ``segment.bytes``, ``retention.ms``,
        ``min.insync.replicas``, ...) override the broker defaults. Other keys are Kafka topic
        configs this broker does not implement (``cleanup.policy``, ...): ignored with a log
        line, or with ``strict`` (for validating a new topic's config) a ValueError with the
        closest known key. A bad value of a known key is always a ValueError.
        """
        known: dict[str, str] = {}
        for name, value in overrides.items():
            if name in TOPIC_PROPERTIES:
                known[name] = value
            elif strict:
                raise ValueError(
                    f"unknown topic property {name!r}{_suggest(name, TOPIC_PROPERTIES)}"
                )
            else:
                log.info("ignoring unsupported topic config %s=%s", name, value)
        log_config = LogConfig.from_properties(known, defaults=self.default_log_config)
        min_isr = self.min_insync_replicas
        if "min.insync.replicas" in known:
            min_isr = _parse_int("min.insync.replicas", known["min.insync.replicas"].strip())
            check_range("min.insync.replicas", min_isr, 1, _INT32_MAX)
        unclean = self.unclean_leader_election_enable
        if "unclean.leader.election.enable" in known:
            unclean = _parse_bool(
                "unclean.leader.election.enable", known["unclean.leader.election.enable"].strip()
            )
        return TopicConfig(log_config, min_isr, unclean)


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    """``["key=value", ...]`` (the ``--override`` flags) -> ``{key: value}``.

    Splits at the first ``=`` (values may contain ``=``), strips whitespace around key and
    value; a later flag for the same key wins, as with Kafka's ``--override``. Raises
    ValueError for an item without ``=`` or with an empty key.
    """
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"--override {item!r}: expected key=value, e.g. broker.id=1")
        if not key:
            raise ValueError(f"--override {item!r}: the property name before '=' is empty")
        result[key] = value.strip()
    return result


# -- parsing and checking --------------------------------------------------------------------


def connection_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides`` (``host:count,host:count``; an IPv6 address
    keeps its colons: the count is after the last one) as host -> count. Raises ValueError
    for an item without a count or with a negative or non-integer one."""
    result: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, colon, count = item.rpartition(":")
        if not colon or not host.strip():
            raise ValueError(
                f"invalid value for max.connections.per.ip.overrides: {item!r} is not host:count"
            )
        try:
            number = int(count.strip())
        except ValueError:
            number = -1
        if not 0 <= number <= _INT32_MAX:
            raise ValueError(
                f"invalid value for max.connections.per.ip.overrides: {item!r} "
                "(the count is an integer in 0..2147483647)"
            )
        result[host.strip()] = number
    return result


def _suggest(name: str, candidates: Iterable[str] | None = None) -> str:
    pool = list(candidates) if candidates is not None else [*_BY_NAME, *LOG_PROPERTIES]
    close = difflib.get_close_matches(name, pool, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _parse_int(name: str, text: str) -> int:
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"invalid value for {name}: {text!r} is not an integer")
    return int(text)


def _parse_bool(name: str, text: str) -> bool:
    lowered = text.lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"invalid value for {name}: {text!r} is not true or false")
    return lowered == "true"


def _parse_mode(name: str, text: str) -> TruncationMode:
    try:
        return TruncationMode(text)
    except ValueError:
        choices = " or ".join(repr(mode.value) for mode in TruncationMode)
        raise ValueError(f"invalid value for {name}: {text!r} (must be {choices})") from None


def _parse_value(prop: _Property, text: str) -> object:
    if prop.kind == "int":
        return _parse_int(prop.name, text)
    if prop.kind == "float":
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"invalid value for {prop.name}: {text!r} is not a number") from None
    if prop.kind == "bool":
        return _parse_bool(prop.name, text)
    if prop.kind == "mode":
        return _parse_mode(prop.name, text)
    if prop.kind == "path":
        dirs = [part.strip() for part in text.split(",") if part.strip()]
        if len(dirs) != 1:
            raise ValueError(
                f"invalid value for {prop.name}: {text!r} (exactly one data directory is supported)"
            )
        return Path(dirs[0])
    return text


def _check_value(prop: _Property, value: object) -> None:
    if prop.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"invalid value for {prop.name}: {value!r} is not an integer")
        check_range(prop.name, value, prop.low, prop.high)
    elif prop.kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValueError(f"invalid value for {prop.name}: {value!r} (must be above 0)")
    elif prop.kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"invalid value for {prop.name}: {value!r} is not true or false")
    elif prop.kind == "str":
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"invalid value for {prop.name}: {value!r} (must not be empty)")
    elif prop.kind == "optstr":
        if not isinstance(value, str):
            raise ValueError(f"invalid value for {prop.name}: {value!r} is not a string")
    elif prop.kind == "path" and not isinstance(value, Path):
        raise ValueError(f"invalid value for {prop.name}: {value!r} is not a Path")
    elif prop.kind == "mode" and not isinstance(value, TruncationMode):
        raise ValueError(f"invalid value for {prop.name}: {value!r} is not a TruncationMode")
