"""Kafka 2.8's dynamic broker configs (``DynamicBrokerConfig.AllDynamicConfigs`` and
``DynamicConfig.Broker``), typed as ``KafkaConfig`` defines them, and the read-only broker
configs a Kafka user looks for in a broker's description.

Every dynamic config of Kafka 2.8 is accepted by AlterConfigs, IncrementalAlterConfigs and
``minibroker configs --alter --entity-type brokers``, its value typed and validated, stored
in ``/config/brokers/<id|<default>>`` and described with its source and synonyms. A broker
applies :data:`APPLIED_BROKER_CONFIGS` (the log defaults it implements); the others are
stored, described and logged as "stored, not applied" (``log.roll.ms``, ``log.cleaner.*``,
``num.io.threads``, ``max.connections``, the replication throttle rates, ...: they tune
threads, timing or machinery minibroker does not have, and change nothing a client sees).

Refused, with what is missing (INVALID_CONFIG, as the topic side refuses the same values):

- a value asking for behaviour minibroker lacks: ``log.message.timestamp.type=LogAppendTime``
  (the topic configs' rules, :func:`proto.config.topic_config_def.unsupported_reason`);
- the listener and security family (``listeners``, ``advertised.listeners``, ``ssl.*``,
  ``sasl.*``, ``listener.name.<l>.*``): minibroker does not rebind or re-key its listeners
  at run time; storing them would claim a TLS or listener change that never happens.

Kafka's own refusals are kept with Kafka's messages: a static-only config (``broker.id``,
``log.dirs``, ``log.retention.hours``, ``log.message.format.version``, ...) is "Cannot update
these configs dynamically", an SSL store config without a listener prefix "These security
configs can be dynamically updated only per-listener using the listener prefix", a per-broker
config at the cluster-wide default "Cannot update these configs at default cluster level,
broker id must be specified". A name Kafka 2.8 does not know is refused too (Kafka stores it
as a custom property; here a typo would be stored silently), with the closest known name.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping

from proto.config.broker_config import DEFAULT_MAX_BROKER_PARTITIONS
from proto.config.config_def import (
    BOOL,
    CLASS,
    DOUBLE,
    DOUBLE_MAX,
    INT,
    INT_MAX,
    LIST,
    LONG,
    LONG_MAX,
    PASSWORD,
    SHORT,
    STR,
    ConfigKey,
    ConfigType,
    ConfigValue,
    at_least,
    one_of,
    parse,
)
from proto.config.topic_config_def import (
    BROKER_LOG_CONFIGS,
    TOPIC_CONFIG_SYNONYMS,
    InvalidConfigError,
    unsupported_reason,
)
from proto.zk.znode_limits import JUTE_MAXBUFFER

__all__ = [
    "ALTERABLE_BROKER_CONFIGS",
    "APPLIED_BROKER_CONFIGS",
    "DYNAMIC_BROKER_CONFIG_KEYS",
    "PER_BROKER_CONFIGS",
    "STATIC_BROKER_CONFIG_KEYS",
    "broker_config_key",
    "validate_broker_config",
]

APPLIED_BROKER_CONFIGS = (
    "log.segment.bytes",
    "log.retention.ms",
    "log.retention.bytes",
    "log.index.interval.bytes",
    "log.flush.interval.messages",
    "message.max.bytes",
    "min.insync.replicas",
    "unclean.leader.election.enable",
    "compression.type",
    "log.cleanup.policy",
    "log.cleaner.min.cleanable.ratio",
    "log.cleaner.delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms",
)
"""The dynamic broker configs a running broker re-applies (the log defaults it implements)."""


def _k(
    name: str, kind: ConfigType, default: str | None, doc: str, check: object = None
) -> ConfigKey:
    return ConfigKey(name, kind, default, doc, check)  # type: ignore[arg-type]


# DynamicLogConfig.ReconfigurableConfigs: the broker-level synonyms of the topic configs,
# but log.message.format.version (it must first be supported by every broker).
_LOG_KEYS = {
    b: BROKER_LOG_CONFIGS[b]
    for b in TOPIC_CONFIG_SYNONYMS.values()
    if b != "log.message.format.version"
}

_OTHER_DYNAMIC = (
    # LogCleaner.ReconfigurableConfigs (message.max.bytes is among the log ones).
    _k("log.cleaner.threads", INT, "1", "The number of background threads to use for log "
       "cleaning", at_least(0)),
    _k("log.cleaner.dedupe.buffer.size", LONG, str(128 * 1024 * 1024), "The total memory "
       "used for log deduplication across all cleaner threads"),
    _k("log.cleaner.io.buffer.load.factor", DOUBLE, "0.9", "Log cleaner dedupe buffer load "
       "factor. The percentage full the dedupe buffer can become."),
    _k("log.cleaner.io.buffer.size", INT, str(512 * 1024), "The total memory used for log "
       "cleaner I/O buffers across all cleaner threads", at_least(0)),
    _k("log.cleaner.io.max.bytes.per.second", DOUBLE, DOUBLE_MAX, "The log cleaner will be "
       "throttled so that the sum of its read and write i/o will be less than this value on "
       "average"),
    _k("log.cleaner.backoff.ms", LONG, "15000", "The amount of time to sleep when there are "
       "no logs to clean", at_least(0)),
    # DynamicThreadPool.ReconfigurableConfigs.
    _k("num.io.threads", INT, "8", "The number of threads that the server uses for "
       "processing requests, which may include disk I/O", at_least(1)),
    _k("num.network.threads", INT, "3", "The number of threads that the server uses for "
       "receiving requests from the network and sending responses to the network",
       at_least(1)),
    _k("num.replica.fetchers", INT, "1", "Number of fetcher threads used to replicate "
       "messages from a source broker."),
    _k("num.recovery.threads.per.data.dir", INT, "1", "The number of threads per data "
       "directory to be used for log recovery at startup and flushing at shutdown",
       at_least(1)),
    _k("background.threads", INT, "10", "The number of threads to use for various "
       "background processing tasks", at_least(1)),
    _k("metric.reporters", LIST, "", "A list of classes to use as metrics reporters."),
    # SocketServer.ReconfigurableConfigs.
    _k("max.connections.per.ip", INT, INT_MAX, "The maximum number of connections we allow "
       "from each ip address.", at_least(0)),
    _k("max.connections.per.ip.overrides", STR, "", "A comma-separated list of per-ip or "
       "hostname overrides to the default maximum number of connections."),
    _k("max.connections", INT, INT_MAX, "The maximum number of connections we allow in the "
       "broker at any time.", at_least(0)),
    _k("max.connection.creation.rate", INT, INT_MAX, "The maximum connection creation rate "
       "we allow in the broker at any time.", at_least(0)),
    # DynamicConfig.Broker: only ever dynamic.
    _k("leader.replication.throttled.rate", LONG, LONG_MAX, "A long representing the upper "
       "bound (bytes/sec) on replication traffic for leaders enumerated in the property "
       "leader.replication.throttled.replicas (for each topic).", at_least(0)),
    _k("follower.replication.throttled.rate", LONG, LONG_MAX, "A long representing the "
       "upper bound (bytes/sec) on replication traffic for followers enumerated in the "
       "property follower.replication.throttled.replicas (for each topic).", at_least(0)),
    _k("replica.alter.log.dirs.io.max.bytes.per.second", LONG, LONG_MAX, "A long "
       "representing the upper bound (bytes/sec) on disk IO used for moving replica between "
       "log directories on the same broker.", at_least(0)),
)  # fmt: skip

_SSL_STORES = (
    _k("ssl.keystore.type", STR, "JKS", "The file format of the key store file."),
    _k("ssl.keystore.location", STR, None, "The location of the key store file."),
    _k("ssl.keystore.password", PASSWORD, None, "The store password for the key store file."),
    _k("ssl.key.password", PASSWORD, None, "The password of the private key in the key store."),
    _k("ssl.truststore.type", STR, "JKS", "The file format of the trust store file."),
    _k("ssl.truststore.location", STR, None, "The location of the trust store file."),
    _k("ssl.truststore.password", PASSWORD, None, "The password for the trust store file."),
    _k("ssl.keystore.certificate.chain", PASSWORD, None, "Certificate chain in PEM format."),
    _k("ssl.keystore.key", PASSWORD, None, "Private key in PEM format."),
    _k("ssl.truststore.certificates", PASSWORD, None, "Trusted certificates in PEM format."),
)
"""``SslConfigs.RECONFIGURABLE_CONFIGS``: dynamic only with a ``listener.name.<l>.`` prefix."""

_LISTENER_FAMILY = (
    _k("listeners", STR, None, "Listener List - Comma-separated list of URIs we will listen "
       "on and the listener names."),
    _k("advertised.listeners", STR, None, "Listeners to publish to ZooKeeper for clients to "
       "use, if different than the listeners config property."),
    _k("listener.security.protocol.map", STR, "PLAINTEXT:PLAINTEXT,SSL:SSL,"
       "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", "Map between listener names and "
       "security protocols."),
    _k("principal.builder.class", CLASS, None, "The fully qualified name of a class that "
       "implements the KafkaPrincipalBuilder interface."),
    _k("ssl.protocol", STR, "TLSv1.3", "The SSL protocol used to generate the SSLContext."),
    _k("ssl.provider", STR, None, "The name of the security provider used for SSL "
       "connections."),
    _k("ssl.cipher.suites", LIST, "", "A list of cipher suites."),
    _k("ssl.enabled.protocols", LIST, "TLSv1.2,TLSv1.3", "The list of protocols enabled for "
       "SSL connections."),
    _k("ssl.keymanager.algorithm", STR, "SunX509", "The algorithm used by key manager "
       "factory for SSL connections."),
    _k("ssl.trustmanager.algorithm", STR, "PKIX", "The algorithm used by trust manager "
       "factory for SSL connections."),
    _k("ssl.endpoint.identification.algorithm", STR, "https", "The endpoint identification "
       "algorithm to validate server hostname using server certificate."),
    _k("ssl.secure.random.implementation", STR, None, "The SecureRandom PRNG implementation "
       "to use for SSL cryptography operations."),
    _k("ssl.client.auth", STR, "none", "Configures kafka broker to request client "
       "authentication.", one_of("required", "requested", "none")),
    _k("ssl.engine.factory.class", CLASS, None, "The class of type "
       "org.apache.kafka.common.security.auth.SslEngineFactory to provide SSLEngine objects."),
    _k("sasl.mechanism.inter.broker.protocol", STR, "GSSAPI", "SASL mechanism used for "
       "inter-broker communication."),
    _k("sasl.jaas.config", PASSWORD, None, "JAAS login context parameters for SASL "
       "connections."),
    _k("sasl.enabled.mechanisms", LIST, "GSSAPI", "The list of SASL mechanisms enabled in "
       "the Kafka server."),
    _k("sasl.kerberos.service.name", STR, None, "The Kerberos principal name that Kafka runs "
       "as."),
    _k("sasl.kerberos.kinit.cmd", STR, "/usr/bin/kinit", "Kerberos kinit command path."),
    _k("sasl.kerberos.ticket.renew.window.factor", DOUBLE, "0.8", "Login thread will sleep "
       "until the specified window factor of time from last refresh to ticket's expiry."),
    _k("sasl.kerberos.ticket.renew.jitter", DOUBLE, "0.05", "Percentage of random jitter "
       "added to the renewal time."),
    _k("sasl.kerberos.min.time.before.relogin", LONG, "60000", "Login thread sleep time "
       "between refresh attempts."),
    _k("sasl.kerberos.principal.to.local.rules", LIST, "DEFAULT", "A list of rules for "
       "mapping from principal names to short names."),
    _k("sasl.login.refresh.window.factor", DOUBLE, "0.8", "Login refresh thread will sleep "
       "until the specified window factor relative to the credential's lifetime."),
    _k("sasl.login.refresh.window.jitter", DOUBLE, "0.05", "The maximum amount of random "
       "jitter relative to the credential's lifetime."),
    _k("sasl.login.refresh.min.period.seconds", SHORT, "60", "The desired minimum time for "
       "the login refresh thread to wait before refreshing a credential, in seconds."),
    _k("sasl.login.refresh.buffer.seconds", SHORT, "300", "The amount of buffer time before "
       "credential expiration to maintain when refreshing a credential, in seconds."),
)  # fmt: skip
"""``DynamicListenerConfig.ReconfigurableConfigs`` (but the connection limits): per broker."""

DYNAMIC_BROKER_CONFIG_KEYS: Mapping[str, ConfigKey] = {
    k.name: k for k in (*_LOG_KEYS.values(), *_OTHER_DYNAMIC, *_SSL_STORES, *_LISTENER_FAMILY)
}
"""Every broker config Kafka 2.8 updates without a restart, by name."""

PER_BROKER_CONFIGS = frozenset(k.name for k in (*_SSL_STORES, *_LISTENER_FAMILY))
"""Kafka's ``PerBrokerConfigs``: settable for one broker id only, never as the default."""

_REFUSED_FAMILY = PER_BROKER_CONFIGS

ALTERABLE_BROKER_CONFIGS = frozenset(DYNAMIC_BROKER_CONFIG_KEYS) - _REFUSED_FAMILY
"""The dynamic configs minibroker takes (the others are refused: described read-only)."""

STATIC_BROKER_CONFIG_KEYS: Mapping[str, ConfigKey] = {
    k.name: k
    for k in (
        _k("delete.topic.enable", BOOL, "true", "Enables delete topic. Delete topic through "
           "the admin tool will have no effect if this config is turned off"),
        _k("log.cleaner.enable", BOOL, "true", "Enable the log cleaner process to run on the "
           "server. Should be enabled if using any topics with a cleanup.policy=compact "
           "including the internal offsets topic."),
        _k("inter.broker.protocol.version", STR, "2.8-IV1", "Specify which version of the "
           "inter-broker protocol will be used."),
        _k("broker.rack", STR, None, "Rack of the broker. This will be used in rack aware "
           "replication assignment for fault tolerance."),
        _k("offsets.topic.replication.factor", SHORT, "3", "The replication factor for the "
           "offsets topic (set higher to ensure availability). Internal topic creation will "
           "fail until the cluster size meets this replication factor requirement.",
           at_least(1)),
        _k("offsets.topic.num.partitions", INT, "50", "The number of partitions for the "
           "offset commit topic (should not change after deployment).", at_least(1)),
        _k("offsets.topic.segment.bytes", INT, "104857600", "The offsets topic segment bytes "
           "should be kept relatively small in order to facilitate faster log compaction and "
           "cache loads.", at_least(1)),
        _k("offsets.commit.timeout.ms", INT, "5000", "Offset commit will be delayed until all "
           "replicas for the offsets topic receive the commit or this timeout is reached.",
           at_least(1)),
        _k("offsets.retention.minutes", INT, "10080", "After a consumer group loses all its "
           "consumers (i.e. becomes empty) its offsets will be kept for this retention "
           "period before getting discarded.", at_least(1)),
        _k("offsets.retention.check.interval.ms", LONG, "600000", "Frequency at which to "
           "check for stale offsets", at_least(1)),
        _k("transaction.state.log.num.partitions", INT, "50", "The number of partitions for "
           "the transaction topic (should not change after deployment).", at_least(1)),
        _k("transaction.state.log.replication.factor", SHORT, "3", "The replication factor "
           "for the transaction topic (set higher to ensure availability). Internal topic "
           "creation will fail until the cluster size meets this replication factor "
           "requirement.", at_least(1)),
        _k("transaction.state.log.segment.bytes", INT, "104857600", "The transaction topic "
           "segment bytes should be kept relatively small in order to facilitate faster log "
           "compaction and cache loads", at_least(1)),
        _k("transaction.state.log.min.isr", INT, "2", "Overridden min.insync.replicas config "
           "for the transaction topic.", at_least(1)),
        _k("transaction.max.timeout.ms", INT, "900000", "The maximum allowed timeout for "
           "transactions. If a client's requested transaction time exceed this, then the "
           "broker will return an error in InitProducerIdRequest.", at_least(1)),
        _k("transactional.id.expiration.ms", INT, "604800000", "The time in ms that the "
           "transaction coordinator will wait without receiving any transaction status "
           "updates for the current transaction before expiring its transactional id.",
           at_least(1)),
        _k("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, "10000", "The "
           "interval at which to rollback transactions that have timed out", at_least(1)),
        _k("transaction.remove.expired.transaction.cleanup.interval.ms", INT, "3600000",
           "The interval at which to remove transactions that have expired due to "
           "transactional.id.expiration.ms passing", at_least(1)),
        _k("log.dir", STR, None, "The directory in which the log data is kept (supplemental "
           "for log.dirs property)"),
        _k("log.message.format.version", STR, "2.8-IV1", "Specify the message format version "
           "the broker will use to append messages to the logs."),
        _k("log.retention.minutes", INT, None, "The number of minutes to keep a log file "
           "before deleting it (in minutes), secondary to log.retention.ms property"),
        _k("log.retention.hours", INT, "168", "The number of hours to keep a log file before "
           "deleting it (in hours), tertiary to log.retention.ms property"),
        _k("log.roll.hours", INT, "168", "The maximum time before a new log segment is rolled "
           "out (in hours), secondary to log.roll.ms property", at_least(1)),
        _k("log.roll.jitter.hours", INT, "0", "The maximum jitter to subtract from "
           "logRollTimeMillis (in hours), secondary to log.roll.jitter.ms property",
           at_least(0)),
        _k("log.flush.scheduler.interval.ms", LONG, LONG_MAX, "The frequency in ms that the "
           "log flusher checks whether any log needs to be flushed to disk"),
        # KIP-578's limits (not in any Kafka release) and ZooKeeper's packet limit, which
        # Kafka reads from the JVM's jute.maxbuffer: docs/zookeeper.md.
        _k("max.partitions", INT, INT_MAX, "The maximum number of partitions in the cluster. "
           "CreateTopics, CreatePartitions and auto topic creation that would exceed it are "
           "refused with POLICY_VIOLATION.", at_least(1)),
        _k("max.broker.partitions", INT, str(DEFAULT_MAX_BROKER_PARTITIONS), "The maximum "
           "number of partition replicas one broker may host. A request whose assignment "
           "would exceed it on any broker is refused with POLICY_VIOLATION.", at_least(1)),
        _k("zookeeper.jute.maxbuffer", INT, str(JUTE_MAXBUFFER), "The largest ZooKeeper "
           "request, in bytes, the broker sends (ZooKeeper's jute.maxbuffer). A larger write "
           "is refused with POLICY_VIOLATION instead of being sent: the server would drop "
           "the session.", at_least(1024)),
        # The resource limits of the listeners (docs/resource-limits.md).
        _k("connections.max.idle.ms", LONG, "600000", "Idle connections timeout: the server "
           "socket processor threads close the connections that idle more than this"),
        _k("queued.max.request.bytes", LONG, "209715200", "The number of queued bytes allowed "
           "before no more requests are read (minibroker's default: two "
           "socket.request.max.bytes; -1 for no limit)"),
        _k("group.max.size", INT, INT_MAX, "The maximum number of consumers that a single "
           "consumer group can accommodate.", at_least(1)),
        _k("socket.request.read.timeout.ms", INT, "30000", "minibroker's own: how long a "
           "request may take to arrive once its size has; a half-sent request's connection is "
           "closed after it", at_least(1)),
        _k("connections.handshake.timeout.ms", INT, "10000", "minibroker's own: how long a "
           "gRPC connection may take to complete its TLS and HTTP/2 handshake", at_least(1)),
        _k("group.max.protocol.metadata.bytes", INT, "1048576", "minibroker's own: the "
           "protocol metadata one group member may give in a JoinGroup, all its protocols "
           "together", at_least(0)),
    )
}  # fmt: skip
"""Read-only broker configs of Kafka 2.8 that mean something here, beyond minibroker's own
properties (:data:`proto.config.broker_config.BROKER_PROPERTIES`), and the definitions of
the resource limits (minibroker's own among them, marked so) for their descriptions."""

_LISTENER_PREFIX = re.compile(r"listener\.name\.[^.]*\.(.*)")
_TOPIC_NAME = {b: t for t, b in TOPIC_CONFIG_SYNONYMS.items()}


def broker_config_key(name: str) -> ConfigKey | None:
    """The definition of broker config ``name`` (dynamic or one of the read-only ones
    described here), or None."""
    return DYNAMIC_BROKER_CONFIG_KEYS.get(name) or STATIC_BROKER_CONFIG_KEYS.get(name)


def validate_broker_config(
    configs: Mapping[str, str], *, read_only: frozenset[str], per_broker: bool
) -> dict[str, ConfigValue]:
    """Kafka's ``DynamicBrokerConfig.validateConfigs`` on ``configs`` (stripped names and
    values): their parsed values. ``read_only``: the static-only names this broker knows.

    Raises ValueError (INVALID_REQUEST) with Kafka's message for a static-only config, an SSL
    store config without a listener prefix, a per-broker config at the default, an unknown
    name; ConfigValueError for a value of the wrong type or out of range; InvalidConfigError
    (INVALID_CONFIG) for what minibroker lacks (see the module docstring).
    """
    static = sorted(n for n in configs if n in read_only and n not in DYNAMIC_BROKER_CONFIG_KEYS)
    if static:
        raise ValueError(f"Cannot update these configs dynamically: {', '.join(static)}")
    stores = sorted(n for n in configs if n in {k.name for k in _SSL_STORES})
    if stores:
        raise ValueError(
            "These security configs can be dynamically updated only per-listener using the "
            f"listener prefix: {', '.join(stores)}"
        )
    for name in configs:
        if name not in DYNAMIC_BROKER_CONFIG_KEYS and not _LISTENER_PREFIX.fullmatch(name):
            close = difflib.get_close_matches(name, DYNAMIC_BROKER_CONFIG_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown broker config {name!r}{hint}")
    parsed: dict[str, ConfigValue] = {}
    for name, text in configs.items():
        base = _LISTENER_PREFIX.fullmatch(name)
        key = DYNAMIC_BROKER_CONFIG_KEYS.get(base.group(1) if base else name)
        parsed[name] = parse(key, text) if key is not None else text
    if not per_broker:
        only_per_broker = sorted(
            n
            for n in configs
            if n in PER_BROKER_CONFIGS or _LISTENER_PREFIX.fullmatch(n) is not None
        )
        if only_per_broker:
            raise ValueError(
                "Cannot update these configs at default cluster level, broker id must be "
                f"specified: {', '.join(only_per_broker)}"
            )
    listeners = sorted(
        n for n in configs if n in _REFUSED_FAMILY or _LISTENER_PREFIX.fullmatch(n) is not None
    )
    if listeners:
        raise InvalidConfigError(
            "minibroker does not reconfigure its listeners, TLS or SASL at run time: "
            f"{', '.join(listeners)} can only be set in the broker's properties"
        )
    for name in sorted(n for n in parsed if n in _TOPIC_NAME):
        missing = unsupported_reason({_TOPIC_NAME[name]: parsed[name]})
        if missing is not None:
            raise InvalidConfigError(f"{missing} (broker config {name}={configs[name]})")
    return parsed
