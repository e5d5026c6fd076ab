"""ZooKeeper paths and znode contents, in Kafka's exact layout (docs/zookeeper.md).

Pure functions, no I/O: the broker's :mod:`broker.zk_client` and the controller both encode
and decode znodes here, so there is one definition of every path and JSON shape::

    /brokers/ids/<id>                            ephemeral   broker registration
    /brokers/topics/<t>                          persistent  replica assignment
    /brokers/topics/<t>/partitions/<p>/state     persistent  leader, leader epoch, ISR
    /controller                                  ephemeral   the active controller
    /controller_epoch                            persistent  the bare integer, as text
    /isr_change_notification/isr_change_<seq>    sequential  partitions whose ISR changed
    /config/topics/<t>                           persistent  per-topic config overrides
    /config/brokers/<id> or /config/brokers/<default>
                                                 persistent  dynamic broker configs
    /config/clients/<c>, /config/users/<u>, /config/users/<u>/clients/<c>
                                                 persistent  client quotas (sanitized names)
    /config/changes/config_change_<seq>          sequential  "entity <path> changed"
    /admin/delete_topics/<t>                     persistent  marker, no data
    /admin/reassign_partitions                   persistent  target assignments
    /admin/preferred_replica_election            persistent  partitions to re-elect
    /latest_producer_id_block                    persistent  last reserved producer id block
    /cluster/id                                  persistent  the cluster id, made once
    /consumers/<g>/ids/<c>                       ephemeral   consumer subscription
    /consumers/<g>/owners/<t>/<p>                ephemeral   owning consumer id (text)
    /consumers/<g>/offsets/<t>/<p>               persistent  committed offset (text or JSON)

Encoders write compact JSON (Kafka's ``Json.encodeAsBytes``) with the keys in the order
docs/zookeeper.md lists them; Kafka readers do not care about key order. Decoders accept what Kafka
2.x writes too (broker registration versions 1-5, topic assignment versions 1-3, unknown
extra keys), and raise :class:`ZkDataError` for anything malformed.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from proto.errors import MinibrokerError
from proto.topic_partition import TopicPartition, topic_name_problem

__all__ = [
    "ADMIN_DELETE_TOPICS_PATH",
    "BROKER_IDS_PATH",
    "BROKER_TOPICS_PATH",
    "CLUSTER_ID_PATH",
    "CONFIG_BROKERS_PATH",
    "CONFIG_CHANGES_PATH",
    "CONFIG_CHANGE_PREFIX",
    "CONFIG_CLIENTS_PATH",
    "CONFIG_TOPICS_PATH",
    "CONFIG_USERS_PATH",
    "CONSUMERS_PATH",
    "CONTROLLER_EPOCH_PATH",
    "CONTROLLER_PATH",
    "DEFAULT_BROKER_ENTITY",
    "ENDPOINT_SCHEME",
    "ISR_CHANGE_NOTIFICATION_PATH",
    "ISR_CHANGE_PREFIX",
    "KAFKA_ENDPOINT_SCHEME",
    "LATEST_PRODUCER_ID_BLOCK_PATH",
    "LEADER_DURING_DELETE",
    "LEADER_NONE",
    "LOG_DIR_EVENT_NOTIFICATION_PATH",
    "LOG_DIR_EVENT_PREFIX",
    "LOG_DIR_FAILURE_EVENT",
    "PERSISTENT_PATHS",
    "PREFERRED_REPLICA_ELECTION_PATH",
    "REASSIGN_PARTITIONS_PATH",
    "SECURITY_PROTOCOLS",
    "SENSITIVE_ROOT_PATHS",
    "BrokerInfo",
    "BrokerRegistration",
    "CommittedOffset",
    "PartitionState",
    "PartitionStateData",
    "ProducerIdBlock",
    "ReplicaAssignment",
    "ZkDataError",
    "broker_config_path",
    "broker_path",
    "check_admin_path",
    "config_change_path",
    "consumer_group_path",
    "consumer_ids_path",
    "consumer_offset_path",
    "consumer_offsets_path",
    "consumer_owner_path",
    "decode_broker_registration",
    "decode_cluster_id",
    "decode_committed_offset",
    "decode_config_change",
    "decode_config_entity_path",
    "decode_consumer_offset",
    "decode_consumer_subscription",
    "decode_controller",
    "decode_controller_epoch",
    "decode_isr_change_notification",
    "decode_log_dir_event_notification",
    "decode_partition_state",
    "decode_preferred_replica_election",
    "decode_producer_id_block",
    "decode_reassign_partitions",
    "decode_topic_assignment",
    "decode_topic_config",
    "decode_topic_replica_assignment",
    "delete_topic_path",
    "encode_broker_registration",
    "encode_cluster_id",
    "encode_config_change",
    "encode_config_entity_path",
    "encode_consumer_offset",
    "encode_consumer_subscription",
    "encode_controller",
    "encode_controller_epoch",
    "encode_isr_change_notification",
    "encode_log_dir_event_notification",
    "encode_partition_state",
    "encode_preferred_replica_election",
    "encode_producer_id_block",
    "encode_reassign_partitions",
    "encode_topic_assignment",
    "encode_topic_config",
    "format_endpoint",
    "is_cluster_id",
    "is_sensitive_path",
    "isr_change_notification_path",
    "log_dir_event_notification_path",
    "new_cluster_id",
    "partition_state_path",
    "partitions_path",
    "topic_config_path",
    "topic_path",
]

LEADER_NONE = -1
"""``leader`` of a partition without a leader (Kafka's ``LeaderAndIsr.NoLeader``)."""
LEADER_DURING_DELETE = -2
"""Kafka's marker leader for a partition whose topic is being deleted."""
ENDPOINT_SCHEME = "GRPC"
"""The listener name in a broker registration's ``endpoints`` (Kafka's ``PLAINTEXT``)."""
KAFKA_ENDPOINT_SCHEME = "KAFKA"
"""The listener name of a broker's Kafka protocol listener (``kafka.port``)."""
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
"""The values of ``listener_security_protocol_map`` a broker here writes (Kafka's
``SecurityProtocol`` names; the gRPC listener's is PLAINTEXT or SSL)."""

BROKER_IDS_PATH = "/brokers/ids"
BROKER_TOPICS_PATH = "/brokers/topics"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
ISR_CHANGE_NOTIFICATION_PATH = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
"""Name prefix of the sequential notification znodes; ZooKeeper appends 10 digits."""
LOG_DIR_EVENT_NOTIFICATION_PATH = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
"""Name prefix of a broker's log-dir failure notifications; ZooKeeper appends 10 digits."""
LOG_DIR_FAILURE_EVENT = 1
"""Kafka's ``LogDirEventNotificationHandler.LogDirFailureEvent``."""
CONFIG_TOPICS_PATH = "/config/topics"
CONFIG_BROKERS_PATH = "/config/brokers"
CONFIG_CHANGES_PATH = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
CONFIG_CLIENTS_PATH = "/config/clients"
CONFIG_USERS_PATH = "/config/users"
"""Name prefix of the sequential change notifications; ZooKeeper appends 10 digits."""
DEFAULT_BROKER_ENTITY = "<default>"
"""The broker entity of the cluster-wide defaults (Kafka's ``ConfigEntityName.Default``)."""
ADMIN_DELETE_TOPICS_PATH = "/admin/delete_topics"
REASSIGN_PARTITIONS_PATH = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION_PATH = "/admin/preferred_replica_election"
LATEST_PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
CLUSTER_ID_PATH = "/cluster/id"
CONSUMERS_PATH = "/consumers"
PERSISTENT_PATHS = (
    CONSUMERS_PATH,
    BROKER_IDS_PATH,
    BROKER_TOPICS_PATH,
    CONFIG_CHANGES_PATH,
    CONFIG_TOPICS_PATH,
    CONFIG_BROKERS_PATH,
    CONFIG_CLIENTS_PATH,
    CONFIG_USERS_PATH,
    ADMIN_DELETE_TOPICS_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
)
"""The parents every broker makes sure of at start-up with ``zookeeper.set.acl`` (Kafka's
``ZkData.PersistentZkPaths``), so that each carries the secure ACL before anyone without
the credentials could create it (``/consumers`` the open one)."""
SENSITIVE_ROOT_PATHS = (CONFIG_USERS_PATH,)
"""The subtrees whose znodes hold secrets (Kafka's ``ZkData.SensitiveRootPaths``): a user's
config entity holds its SCRAM keys, and a stored key lets one pose as a broker to that
user. With ``zookeeper.set.acl`` they are the brokers' digest's alone, not the world's to
read (:func:`is_sensitive_path`). Kafka's list also has ``/config/brokers`` (its encrypted
dynamic passwords) and ``/delegation_token``, which hold no secrets here."""


def is_sensitive_path(path: str) -> bool:
    """``path`` (relative to the chroot) is one of :data:`SENSITIVE_ROOT_PATHS` or below one
    (Kafka's ``ZkData.sensitivePath``)."""
    return any(path == root or path.startswith(root + "/") for root in SENSITIVE_ROOT_PATHS)


_JSON_SEPARATORS = (",", ":")
_INTEGER = re.compile(r"-?[0-9]+")


class ZkDataError(MinibrokerError, ValueError):
    """A znode whose content is not what Kafka writes there (bad JSON, missing or mistyped
    field). :mod:`broker.zk_client` re-raises it with the znode's path in the message."""


# -- paths -----------------------------------------------------------------------------------


def _name(kind: str, name: str) -> str:
    """A topic or group name, checked to be safe as one path segment (Kafka's legal chars)."""
    problem = topic_name_problem(name, kind)
    if problem is not None:
        raise ValueError(f"illegal {kind} name: {problem}")
    return name


def _partition(partition: int) -> int:
    if partition < 0:
        raise ValueError(f"partition must be >= 0, got {partition}")
    return partition


def broker_path(broker_id: int) -> str:
    """``/brokers/ids/<id>``: a live broker's ephemeral registration."""
    if broker_id < 0:
        raise ValueError(f"broker id must be >= 0, got {broker_id}")
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    """``/brokers/topics/<t>``: the topic's replica assignment."""
    return f"{BROKER_TOPICS_PATH}/{_name('topic', topic)}"


def partitions_path(topic: str) -> str:
    """``/brokers/topics/<t>/partitions``: parent of the partitions' state znodes."""
    return f"{topic_path(topic)}/partitions"


def partition_state_path(tp: TopicPartition) -> str:
    """``/brokers/topics/<t>/partitions/<p>/state``: leader, leader epoch and ISR."""
    return f"{partitions_path(tp.topic)}/{_partition(tp.partition)}/state"


def topic_config_path(topic: str) -> str:
    """``/config/topics/<t>``: the topic's config overrides."""
    return f"{CONFIG_TOPICS_PATH}/{_name('topic', topic)}"


def broker_config_path(entity: int | str) -> str:
    """``/config/brokers/<id>`` (one broker's dynamic configs) or ``/config/brokers/<default>``
    (the cluster-wide defaults): ``entity`` is a broker id or :data:`DEFAULT_BROKER_ENTITY`."""
    return f"{CONFIG_BROKERS_PATH}/{_broker_entity(entity)}"


def _broker_entity(entity: int | str) -> str:
    if entity == DEFAULT_BROKER_ENTITY:
        return DEFAULT_BROKER_ENTITY
    text = str(entity)
    if isinstance(entity, bool) or not (text.isascii() and text.isdigit()):
        raise ValueError(
            f"a broker config entity is a broker id or {DEFAULT_BROKER_ENTITY}, got {entity!r}"
        )
    return str(int(text))


def config_change_path(name: str) -> str:
    """``/config/changes/<name>`` for a child name such as ``config_change_0000000042``;
    ValueError for anything else, so a hostile child name cannot reach another znode."""
    suffix = name.removeprefix(CONFIG_CHANGE_PREFIX)
    if suffix == name or not suffix.isascii() or not suffix.isdigit():
        raise ValueError(f"not a config change notification name: {name!r}")
    return f"{CONFIG_CHANGES_PATH}/{name}"


def delete_topic_path(topic: str) -> str:
    """``/admin/delete_topics/<t>``: marks the topic for deletion."""
    return f"{ADMIN_DELETE_TOPICS_PATH}/{_name('topic', topic)}"


def consumer_group_path(group: str) -> str:
    """``/consumers/<g>``: everything ZooKeeper holds of a consumer group."""
    return f"{CONSUMERS_PATH}/{_name('group', group)}"


def consumer_ids_path(group: str, consumer_id: str | None = None) -> str:
    """``/consumers/<g>/ids`` or ``/consumers/<g>/ids/<c>``: the group's live members."""
    path = f"{CONSUMERS_PATH}/{_name('group', group)}/ids"
    return path if consumer_id is None else f"{path}/{_name('consumer id', consumer_id)}"


def consumer_owner_path(group: str, tp: TopicPartition) -> str:
    """``/consumers/<g>/owners/<t>/<p>``: which member consumes the partition."""
    return (
        f"{CONSUMERS_PATH}/{_name('group', group)}/owners/"
        f"{_name('topic', tp.topic)}/{_partition(tp.partition)}"
    )


def consumer_offsets_path(group: str, topic: str | None = None) -> str:
    """``/consumers/<g>/offsets`` or ``/consumers/<g>/offsets/<t>``: a group's committed
    offsets, by topic and then partition."""
    path = f"{CONSUMERS_PATH}/{_name('group', group)}/offsets"
    return path if topic is None else f"{path}/{_name('topic', topic)}"


def consumer_offset_path(group: str, tp: TopicPartition) -> str:
    """``/consumers/<g>/offsets/<t>/<p>``: the group's committed offset."""
    return (
        f"{CONSUMERS_PATH}/{_name('group', group)}/offsets/"
        f"{_name('topic', tp.topic)}/{_partition(tp.partition)}"
    )


# -- JSON helpers ----------------------------------------------------------------------------


def _dumps(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, separators=_JSON_SEPARATORS, ensure_ascii=False).encode("utf-8")


def _loads_object(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ZkDataError(f"not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise ZkDataError(f"expected a JSON object, got {type(value).__name__}")
    return value


def _field(obj: Mapping[str, Any], key: str) -> Any:
    if key not in obj:
        raise ZkDataError(f"missing field {key!r}")
    return obj[key]


def _int(value: Any, what: str) -> int:
    # bool is an int subclass in Python; JSON true/false is never a valid id or epoch.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ZkDataError(f"{what} must be an integer, got {value!r}")
    return value


def _int_text(value: Any, what: str) -> int:
    """An integer carried as a JSON string, as Kafka writes timestamps and block bounds."""
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value)
    raise ZkDataError(f"{what} must be a string of digits, got {value!r}")


def _int_list(value: Any, what: str) -> list[int]:
    if not isinstance(value, list):
        raise ZkDataError(f"{what} must be a list of integers, got {value!r}")
    return [_int(item, what) for item in value]


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ZkDataError(f"{what} must be a string, got {value!r}")
    return value


def _topic_partition(entry: Mapping[str, Any]) -> TopicPartition:
    """A ``{"topic": T, "partition": P}`` entry of a znode's content. Names inside znode
    content are as hostile as the znodes' own names: the one topic-name rule applies."""
    topic = _str(_field(entry, "topic"), "topic")
    problem = topic_name_problem(topic)
    if problem is not None:
        raise ZkDataError(problem)
    partition = _int(_field(entry, "partition"), "partition")
    if partition < 0:
        raise ZkDataError(f"partition of topic {topic!r} is {partition}, must be >= 0")
    return TopicPartition(topic, partition)


def _version(obj: Mapping[str, Any], supported: range) -> int:
    version = _int(_field(obj, "version"), "version")
    if version not in supported:
        raise ZkDataError(
            f"unsupported version {version} (supported: {supported.start}-{supported.stop - 1})"
        )
    return version


def _partition_list(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    return [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]


def _decode_partition_list(obj: Mapping[str, Any]) -> list[TopicPartition]:
    entries = _field(obj, "partitions")
    if not isinstance(entries, list):
        raise ZkDataError(f"partitions must be a list, got {entries!r}")
    result = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise ZkDataError(f"partition entry must be an object, got {entry!r}")
        result.append(_topic_partition(entry))
    return result


def _decode_text_int(data: bytes, what: str) -> int:
    text = data.decode("utf-8", errors="replace").strip()
    if not _INTEGER.fullmatch(text):
        raise ZkDataError(f"{what} must be an integer as text, got {text!r}")
    return int(text)


# -- /brokers/ids/<id> -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """What a live broker publishes in ``/brokers/ids/<id>``."""

    host: str
    """Where clients and other brokers reach its gRPC server."""
    port: int
    timestamp_ms: int | None
    """When it registered (epoch ms); None if the znode had no timestamp."""
    kafka_endpoint: tuple[str, int] | None = None
    """(host, port) of its Kafka protocol listener, the ``KAFKA://`` endpoint; None when
    it runs none."""


@dataclass(frozen=True)
class BrokerInfo:
    """A live broker's advertised endpoints: gRPC at ``host:port``, and its Kafka protocol
    listener's if it runs one."""

    broker_id: int
    host: str
    port: int
    # Keyword-only so that subclasses (the controller's LiveBroker) may add fields
    # without defaults after it.
    kafka_endpoint: tuple[str, int] | None = field(default=None, kw_only=True)
    """(host, port) of its Kafka protocol listener (``kafka.port``); None when it runs none."""


def format_endpoint(host: str, port: int, scheme: str = ENDPOINT_SCHEME) -> str:
    """``GRPC://host:port``, with an IPv6 host in brackets (Kafka's ``Utils.formatAddress``)."""
    address = f"[{host}]" if ":" in host else host
    return f"{scheme}://{address}:{port}"


def encode_broker_registration(
    host: str,
    port: int,
    timestamp_ms: int,
    *,
    kafka_port: int | None = None,
    grpc_security_protocol: str = "PLAINTEXT",
    kafka_security_protocol: str = "PLAINTEXT",
) -> bytes:
    """``{"version":1,"host":..,"port":..,"timestamp":"<ms>","endpoints":["GRPC://host:port"]}``

    With ``kafka_port`` (the broker's bound Kafka protocol listener, on ``host`` too), as
    Kafka writes a broker with two listeners: ``"endpoints":["GRPC://host:port",
    "KAFKA://host:kafka_port"]`` and ``"listener_security_protocol_map":{"GRPC":
    grpc_security_protocol,"KAFKA":"PLAINTEXT"}``, under version 4, the version that
    introduced that map (Kafka 0.10.2, KIP-103). ``grpc_security_protocol`` is ``SSL`` for
    a TLS broker; without ``kafka_port`` it is not written. ``kafka_security_protocol``
    is the Kafka listener's (``SASL_SSL``...), as Kafka registers its listeners with the
    protocol map. ValueError for a port outside 1-65535 or an unknown security protocol.
    """
    for protocol, known in (
        (grpc_security_protocol, SECURITY_PROTOCOLS[:2]),
        (kafka_security_protocol, SECURITY_PROTOCOLS),
    ):
        if protocol not in known:
            raise ValueError(f"unknown security protocol {protocol!r} (one of {', '.join(known)})")
    registration: dict[str, Any] = {
        "version": 1,
        "host": host,
        "port": port,
        "timestamp": str(timestamp_ms),
        "endpoints": [format_endpoint(host, port)],
    }
    if kafka_port is not None:
        if not 0 < kafka_port < 65536:
            raise ValueError(f"a registered Kafka port is in 1-65535, got {kafka_port}")
        registration["version"] = 4
        registration["endpoints"].append(format_endpoint(host, kafka_port, KAFKA_ENDPOINT_SCHEME))
        registration["listener_security_protocol_map"] = {
            ENDPOINT_SCHEME: grpc_security_protocol,
            KAFKA_ENDPOINT_SCHEME: kafka_security_protocol,
        }
    return _dumps(registration)


_ENDPOINT = re.compile(r"([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:/\[\]]*):([0-9]+)")


def decode_broker_registration(data: bytes) -> BrokerRegistration:
    """Our registration, or Kafka's versions 1-5: the ``GRPC://`` endpoint wins, else the
    ``host``/``port`` fields (Kafka leaves them null/-1 when it has no PLAINTEXT listener);
    the ``KAFKA://`` endpoint, if any, is the Kafka protocol listener. Every endpoint must
    be ``NAME://host:port``, as Kafka's ``EndPoint.createEndPoint`` demands, and a KAFKA
    one must name a host and a port in 1-65535: a client is sent there."""
    obj = _loads_object(data)
    _version(obj, range(1, 6))
    timestamp = obj.get("timestamp")
    timestamp_ms = None if timestamp is None else _int_text(timestamp, "timestamp")
    endpoints = obj.get("endpoints", [])
    if not isinstance(endpoints, list):
        raise ZkDataError(f"endpoints must be a list, got {endpoints!r}")
    grpc: tuple[str, int] | None = None
    kafka: tuple[str, int] | None = None
    for endpoint in endpoints:
        match = _ENDPOINT.fullmatch(_str(endpoint, "endpoint"))
        if match is None:
            raise ZkDataError(f"malformed endpoint {endpoint!r}")
        scheme, address = match.group(1), (match.group(2).strip("[]"), int(match.group(3)))
        if scheme == ENDPOINT_SCHEME and grpc is None:
            grpc = address
        elif scheme == KAFKA_ENDPOINT_SCHEME and kafka is None:
            if not address[0] or not 0 < address[1] < 65536:
                raise ZkDataError(f"malformed {KAFKA_ENDPOINT_SCHEME} endpoint {endpoint!r}")
            kafka = address
    if grpc is not None:
        return BrokerRegistration(grpc[0], grpc[1], timestamp_ms, kafka)
    host = obj.get("host")
    port = obj.get("port")
    if not isinstance(host, str) or not host or isinstance(port, bool) or not isinstance(port, int):
        raise ZkDataError(f"no {ENDPOINT_SCHEME} endpoint and no host/port")
    return BrokerRegistration(host, port, timestamp_ms, kafka)


# -- /brokers/topics/<t> ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """One partition's entry of ``/brokers/topics/<t>`` (Kafka's ``ReplicaAssignment``).

    While a reassignment runs, ``replicas`` is the full set RS = TRS + ORS (target replicas
    first), ``adding_replicas`` AR = TRS - ORS and ``removing_replicas`` RR = ORS - TRS
    (KIP-455); both are empty otherwise. The original replicas are RS - AR, the target
    ones RS - RR: the znode is the only place the original replicas are kept, which is
    what lets a reassignment be cancelled."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def origin_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)


def encode_topic_assignment(
    assignment: Mapping[int, Iterable[int] | ReplicaAssignment],
) -> bytes:
    """``{"version":2,"partitions":{"0":[1,2,3],...},"adding_replicas":{..},
    "removing_replicas":{..}}`` (Kafka 2.4+), partitions in numeric order; each replica
    list keeps its order (the first replica is the preferred leader). A partition appears
    in ``adding_replicas``/``removing_replicas`` only while it is being reassigned."""
    full = {
        p: a if isinstance(a, ReplicaAssignment) else ReplicaAssignment(tuple(a))
        for p, a in assignment.items()
    }
    order = sorted(full)
    return _dumps(
        {
            "version": 2,
            "partitions": {str(p): list(full[p].replicas) for p in order},
            "adding_replicas": {
                str(p): list(full[p].adding_replicas) for p in order if full[p].adding_replicas
            },
            "removing_replicas": {
                str(p): list(full[p].removing_replicas) for p in order if full[p].removing_replicas
            },
        }
    )


def decode_topic_assignment(data: bytes) -> dict[int, list[int]]:
    """Partition -> replicas in assignment order (RS: during a reassignment, the target
    and the original replicas); see :func:`decode_topic_replica_assignment`."""
    return {p: list(a.replicas) for p, a in decode_topic_replica_assignment(data).items()}


def decode_topic_replica_assignment(data: bytes) -> dict[int, ReplicaAssignment]:
    """Partition -> :class:`ReplicaAssignment`; accepts Kafka's versions 1-3 (version 1
    has no ``adding_replicas``/``removing_replicas``; version 3's ``topic_id`` is
    ignored). The sets are checked as the controller relies on them: replicas distinct,
    adding and removing disjoint subsets of them, and neither the original nor the target
    replicas empty."""
    obj = _loads_object(data)
    _version(obj, range(1, 4))
    partitions = _field(obj, "partitions")
    if not isinstance(partitions, dict):
        raise ZkDataError(f"partitions must be an object, got {partitions!r}")
    replicas: dict[int, list[int]] = {}
    for key, value in partitions.items():
        if not (key.isascii() and key.isdigit()):
            raise ZkDataError(f"partition id must be a non-negative integer, got {key!r}")
        replicas[int(key)] = _int_list(value, f"replicas of partition {key}")
    changes: dict[str, dict[int, list[int]]] = {}
    for name in ("adding_replicas", "removing_replicas"):
        value = obj.get(name)
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise ZkDataError(f"{name} must be an object, got {value!r}")
        changes[name] = {}
        for key, sub in value.items():
            if not (key.isascii() and key.isdigit()) or int(key) not in replicas:
                raise ZkDataError(f"{name} names partition {key!r}, which is not assigned")
            changes[name][int(key)] = _int_list(sub, f"{name} of partition {key}")
    result: dict[int, ReplicaAssignment] = {}
    for partition in sorted(replicas):
        rs = replicas[partition]
        adding = changes["adding_replicas"].get(partition, [])
        removing = changes["removing_replicas"].get(partition, [])
        if len(set(rs)) != len(rs) or len(set(adding)) != len(adding):
            raise ZkDataError(f"replicas of partition {partition} repeat a broker")
        if len(set(removing)) != len(removing):
            raise ZkDataError(f"removing_replicas of partition {partition} repeat a broker")
        if not set(adding) <= set(rs) or not set(removing) <= set(rs):
            raise ZkDataError(
                f"adding {adding} and removing {removing} of partition {partition} must be "
                f"among its replicas {rs}"
            )
        if set(adding) & set(removing):
            raise ZkDataError(f"partition {partition} both adds and removes a replica")
        if rs and (set(rs) <= set(adding) or set(rs) <= set(removing)):
            raise ZkDataError(f"partition {partition} would have no original or no target replica")
        result[partition] = ReplicaAssignment(tuple(rs), tuple(adding), tuple(removing))
    return result


# -- /brokers/topics/<t>/partitions/<p>/state ------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionStateData:
    """The content of a partition's state znode (Kafka's ``LeaderIsrAndControllerEpoch``
    without the zkVersion): what a conditional update writes."""

    leader: int
    """Broker id of the leader, or LEADER_NONE (-1) when the partition is offline."""
    leader_epoch: int
    """Bumped by the controller at every leader change; fences stale leaders."""
    isr: tuple[int, ...]
    """The in-sync replicas, leader included."""
    controller_epoch: int
    """Epoch of the controller that made the leadership decision behind this state."""


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition's state znode as read: its content and its version."""

    leader: int
    """Broker id of the leader, or LEADER_NONE (-1) when the partition is offline."""
    leader_epoch: int
    """Bumped by the controller at every leader change; fences stale leaders."""
    isr: tuple[int, ...]
    """The in-sync replicas, leader included."""
    controller_epoch: int
    """Epoch of the controller that made the leadership decision behind this state."""
    zk_version: int
    """The znode's ``stat.version``: the expected version of the next conditional update."""

    @property
    def data(self) -> PartitionStateData:
        """The content without the version."""
        return PartitionStateData(self.leader, self.leader_epoch, self.isr, self.controller_epoch)

    @classmethod
    def from_data(cls, data: PartitionStateData, zk_version: int) -> PartitionState:
        return cls(data.leader, data.leader_epoch, data.isr, data.controller_epoch, zk_version)


def encode_partition_state(state: PartitionStateData | PartitionState) -> bytes:
    """``{"controller_epoch":N,"leader":B,"version":1,"leader_epoch":E,"isr":[...]}``"""
    return _dumps(
        {
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "version": 1,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
        }
    )


def decode_partition_state(data: bytes) -> PartitionStateData:
    """The state znode's content (HEAD's optional ``leader_recovery_state`` is ignored)."""
    obj = _loads_object(data)
    _version(obj, range(1, 2))
    return PartitionStateData(
        leader=_int(_field(obj, "leader"), "leader"),
        leader_epoch=_int(_field(obj, "leader_epoch"), "leader_epoch"),
        isr=tuple(_int_list(_field(obj, "isr"), "isr")),
        controller_epoch=_int(_field(obj, "controller_epoch"), "controller_epoch"),
    )


# -- /controller and /controller_epoch -------------------------------------------------------


def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    """``{"version":1,"brokerid":B,"timestamp":"<ms>"}``"""
    return _dumps({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})


def decode_controller(data: bytes) -> int:
    """The controller's broker id (also from the bare integer of Kafka before 0.8.2)."""
    text = data.decode("utf-8", errors="replace").strip()
    if _INTEGER.fullmatch(text):
        return int(text)
    obj = _loads_object(data)
    _version(obj, range(1, 2))
    return _int(_field(obj, "brokerid"), "brokerid")


def encode_controller_epoch(epoch: int) -> bytes:
    """The bare integer as text, e.g. ``5`` (not JSON)."""
    return str(epoch).encode("ascii")


def decode_controller_epoch(data: bytes) -> int:
    return _decode_text_int(data, "controller epoch")


# -- /isr_change_notification and /admin/preferred_replica_election --------------------------


def encode_isr_change_notification(partitions: Iterable[TopicPartition]) -> bytes:
    """``{"version":1,"partitions":[{"topic":..,"partition":..}]}``, in the order given."""
    return _dumps({"version": 1, "partitions": _partition_list(partitions)})


def decode_isr_change_notification(data: bytes) -> list[TopicPartition]:
    obj = _loads_object(data)
    _version(obj, range(1, 2))
    return _decode_partition_list(obj)


def encode_log_dir_event_notification(broker_id: int) -> bytes:
    """``{"version":1,"broker":<id>,"event":1}``: the broker's log dir failed (Kafka's
    ``LogDirEventNotificationZNode``)."""
    return _dumps({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT})


def decode_log_dir_event_notification(data: bytes) -> int:
    """The broker id of a log-dir failure notification."""
    obj = _loads_object(data)
    _version(obj, range(1, 2))
    event = _int(_field(obj, "event"), "event")
    if event != LOG_DIR_FAILURE_EVENT:
        raise ZkDataError(f"unknown log dir event {event}")
    return _int(_field(obj, "broker"), "broker")


def encode_preferred_replica_election(partitions: Iterable[TopicPartition]) -> bytes:
    """``{"version":1,"partitions":[{"topic":..,"partition":..}]}``, as Kafka's tool writes."""
    return _dumps({"version": 1, "partitions": _partition_list(partitions)})


def decode_preferred_replica_election(data: bytes) -> list[TopicPartition]:
    obj = _loads_object(data)
    _version(obj, range(1, 2))
    return _decode_partition_list(obj)


# -- /admin/reassign_partitions --------------------------------------------------------------


def encode_reassign_partitions(assignment: Mapping[TopicPartition, Iterable[int]]) -> bytes:
    """``{"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[...]}]}``"""
    entries = [
        {"topic": tp.topic, "partition": tp.partition, "replicas": list(assignment[tp])}
        for tp in sorted(assignment)
    ]
    return _dumps({"version": 1, "partitions": entries})


def decode_reassign_partitions(data: bytes) -> dict[TopicPartition, list[int]]:
    obj = _loads_object(data)
    _version(obj, range(1, 2))
    entries = _field(obj, "partitions")
    if not isinstance(entries, list):
        raise ZkDataError(f"partitions must be a list, got {entries!r}")
    result: dict[TopicPartition, list[int]] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise ZkDataError(f"partition entry must be an object, got {entry!r}")
        tp = _topic_partition(entry)
        result[tp] = _int_list(_field(entry, "replicas"), f"replicas of {tp}")
    return result


# -- /config/topics/<t>, /config/brokers/<id> ------------------------------------------------


def encode_topic_config(config: Mapping[str, str]) -> bytes:
    """``{"version":1,"config":{"min.insync.replicas":"2",...}}``; values are strings. A
    broker entity's dynamic configs (``/config/brokers/...``) have the same form."""
    return _dumps({"version": 1, "config": {key: str(config[key]) for key in sorted(config)}})


def decode_topic_config(data: bytes) -> dict[str, str]:
    obj = _loads_object(data)
    _version(obj, range(1, 2))
    config = _field(obj, "config")
    if not isinstance(config, dict):
        raise ZkDataError(f"config must be an object, got {config!r}")
    return {key: _str(value, f"config value of {key!r}") for key, value in config.items()}


# -- /config/changes/config_change_<seq> ----------------------------------------------------


def encode_config_entity_path(entity_type: str, name: int | str) -> str:
    """``topics/<t>``, ``brokers/<id>``, ``brokers/<default>``, ``clients/<c>``,
    ``users/<u>`` or ``users/<u>/clients/<c>``: a config entity as a change notification
    names it. ValueError for another type or an illegal name."""
    if entity_type == "topics":
        return f"topics/{_name('topic', str(name))}"
    if entity_type == "brokers":
        return f"brokers/{_broker_entity(name)}"
    if entity_type in ("clients", "users"):
        return f"{entity_type}/{_quota_entity(entity_type, str(name))}"
    raise ValueError(f"unknown config entity type {entity_type!r}")


_SANITIZED = re.compile(r"[A-Za-z0-9._%-]+")
"""A name as Kafka's ``Sanitizer.sanitize`` writes it (URL encoding): one path segment."""


def _quota_entity(entity_type: str, name: str) -> str:
    """``<c>`` for clients; ``<u>`` or ``<u>/clients/<c>`` for users: sanitized names (see
    :mod:`proto.zk.client_quota_configs`) or ``<default>``."""
    parts = name.split("/")
    if entity_type == "users" and len(parts) == 3 and parts[1] == "clients":
        parts = [parts[0], parts[2]]
    elif len(parts) != 1:
        raise ValueError(f"not a {entity_type} config entity: {name!r}")
    for part in parts:
        if part != DEFAULT_BROKER_ENTITY and (
            part in (".", "..") or not _SANITIZED.fullmatch(part)
        ):
            raise ValueError(f"not a sanitized {entity_type} entity name: {part!r}")
    return name


def decode_config_entity_path(entity_path: str) -> tuple[str, str]:
    """``topics/<t>`` -> ``("topics", t)``; ``brokers/<id>`` and ``brokers/<default>`` ->
    ``("brokers", id or "<default>")``; ``clients/...`` and ``users/...`` -> the type and
    the rest of the path, sanitized names as they are. ZkDataError for another entity
    type or an illegal name: notifications are written by anyone, and the name becomes a
    path."""
    entity_type, sep, name = entity_path.partition("/")
    if not sep:
        raise ZkDataError(f"entity_path must be <type>/<name>, got {entity_path!r}")
    try:
        return entity_type, encode_config_entity_path(entity_type, name).partition("/")[2]
    except ValueError as e:
        raise ZkDataError(f"entity_path {entity_path!r}: {e}") from None


def encode_config_change(entity_path: str) -> bytes:
    """``{"version":2,"entity_path":"topics/orders"}`` (Kafka's ``ConfigEntityChangeNotification``
    version 2, as ``AdminZkClient.changeConfigs`` writes it)."""
    decode_config_entity_path(entity_path)
    return _dumps({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes) -> tuple[str, str]:
    """The changed entity as ``(entity_type, name)``. Version 1 (``entity_type`` and
    ``entity_name`` fields, Kafka < 0.10.1) is read too."""
    obj = _loads_object(data)
    if _version(obj, range(1, 3)) == 1:
        entity_type = _str(_field(obj, "entity_type"), "entity_type")
        entity_path = f"{entity_type}/{_str(_field(obj, 'entity_name'), 'entity_name')}"
    else:
        entity_path = _str(_field(obj, "entity_path"), "entity_path")
    return decode_config_entity_path(entity_path)


# -- /latest_producer_id_block ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """A range of producer ids reserved by one broker (inclusive bounds)."""

    broker: int
    """The broker that reserved the block."""
    block_start: int
    block_end: int


def encode_producer_id_block(block: ProducerIdBlock) -> bytes:
    """``{"version":1,"broker":B,"block_start":"0","block_end":"999"}`` (bounds as strings)."""
    return _dumps(
        {
            "version": 1,
            "broker": block.broker,
            "block_start": str(block.block_start),
            "block_end": str(block.block_end),
        }
    )


def decode_producer_id_block(data: bytes) -> ProducerIdBlock:
    obj = _loads_object(data)
    _version(obj, range(1, 2))
    return ProducerIdBlock(
        broker=_int(_field(obj, "broker"), "broker"),
        block_start=_int_text(_field(obj, "block_start"), "block_start"),
        block_end=_int_text(_field(obj, "block_end"), "block_end"),
    )


# -- /cluster/id ------------------------------------------------------------------------------

_CLUSTER_ID = re.compile(r"[A-Za-z0-9_-]{1,255}")
"""What a cluster id may hold here: Kafka generates 22 characters of url-safe base64; the
id is also written into ``meta.properties`` and shown to clients, so nothing else (a line
break, a ``=``) is let through from a znode."""


def is_cluster_id(text: str) -> bool:
    """Whether ``text`` may be a cluster id (in ``/cluster/id`` and ``meta.properties``)."""
    return _CLUSTER_ID.fullmatch(text) is not None


def new_cluster_id() -> str:
    """A random UUID as 22 characters of url-safe base64 without padding, never starting
    with ``-`` (Kafka's ``Uuid.randomUuid().toString()``, which avoids ids a command line
    would read as an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


def encode_cluster_id(cluster_id: str) -> bytes:
    """``{"version":"1","id":"<id>"}`` (the version a string, as Kafka writes it)."""
    if not _CLUSTER_ID.fullmatch(cluster_id):
        raise ValueError(f"illegal cluster id {cluster_id!r}")
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    """The id (Kafka reads only ``id``; a version other than 1 is refused here)."""
    obj = _loads_object(data)
    version = _field(obj, "version")
    if version not in ("1", 1):
        raise ZkDataError(f"unsupported cluster id version {version!r} (supported: 1)")
    cluster_id = _str(_field(obj, "id"), "id")
    if not _CLUSTER_ID.fullmatch(cluster_id):
        raise ZkDataError(f"illegal cluster id {cluster_id!r}: 1-255 of A-Z a-z 0-9 _ -")
    return cluster_id


# -- /consumers/<g>/... ----------------------------------------------------------------------


def encode_consumer_subscription(topics: Mapping[str, int], timestamp_ms: int) -> bytes:
    """``{"version":1,"subscription":{"t":1},"pattern":"static","timestamp":"<ms>"}``: topic
    -> number of consumer threads, as Kafka's ZooKeeper consumer wrote it."""
    subscription = {topic: topics[topic] for topic in sorted(topics)}
    return _dumps(
        {
            "version": 1,
            "subscription": subscription,
            "pattern": "static",
            "timestamp": str(timestamp_ms),
        }
    )


def decode_consumer_subscription(data: bytes) -> dict[str, int]:
    obj = _loads_object(data)
    _version(obj, range(1, 2))
    subscription = _field(obj, "subscription")
    if not isinstance(subscription, dict):
        raise ZkDataError(f"subscription must be an object, got {subscription!r}")
    return {
        topic: _int(count, f"thread count of {topic!r}") for topic, count in subscription.items()
    }


class CommittedOffset(NamedTuple):
    """A group's committed offset of one partition, as ``/consumers/<g>/offsets/<t>/<p>``
    keeps it."""

    offset: int
    """The next offset the group will read."""
    metadata: str = ""
    """OffsetCommit's metadata string ("" when none was given)."""
    commit_timestamp_ms: int = -1
    """When it was committed: the znode's mtime (ZooKeeper's clock); -1 unknown."""


def encode_consumer_offset(offset: int, metadata: str = "") -> bytes:
    """The committed offset as decimal text, e.g. ``42``, as Kafka's ZooKeeper consumer
    wrote it; with a metadata string, ``{"version":1,"offset":42,"metadata":"..."}``.
    ValueError for a negative offset (an offset is a position in a log; Kafka's OffsetFetch
    uses -1 for "none")."""
    if offset < 0:
        raise ValueError(f"a committed offset is >= 0, got {offset}")
    if not metadata:
        return str(offset).encode("ascii")
    return _dumps({"version": 1, "offset": offset, "metadata": metadata})


def decode_committed_offset(data: bytes, commit_timestamp_ms: int = -1) -> CommittedOffset:
    """Either form of :func:`encode_consumer_offset` (decimal text with surrounding
    whitespace, or the JSON object); ZkDataError for anything else, a negative offset
    included (see :func:`proto.zk.znode_reads.consumer_offset_read` for what a reader does
    then)."""
    if data.lstrip()[:1] == b"{":
        obj = _loads_object(data)
        _version(obj, range(1, 2))
        offset = _int(_field(obj, "offset"), "offset")
        metadata = _str(obj.get("metadata", ""), "metadata")
    else:
        offset, metadata = _decode_text_int(data, "offset"), ""
    if offset < 0:
        raise ZkDataError(f"offset must be >= 0, got {offset}")
    return CommittedOffset(offset, metadata, commit_timestamp_ms)


def decode_consumer_offset(data: bytes) -> int:
    """The offset alone of :func:`decode_committed_offset`."""
    return decode_committed_offset(data).offset


def isr_change_notification_path(name: str) -> str:
    """``/isr_change_notification/<name>`` for a child name such as ``isr_change_0000000042``.

    Raises ValueError for anything else, so a bad name cannot reach another znode.
    """
    suffix = name.removeprefix(ISR_CHANGE_PREFIX)
    if suffix == name or not suffix.isascii() or not suffix.isdigit():
        raise ValueError(f"not an ISR change notification name: {name!r}")
    return f"{ISR_CHANGE_NOTIFICATION_PATH}/{name}"


def check_admin_path(path: str) -> str:
    """``path`` if it is one of the admin request znodes the controller deletes when done
    (``/admin/reassign_partitions``, ``/admin/preferred_replica_election`` or
    ``/admin/delete_topics/<t>``); ValueError otherwise."""
    if path in (REASSIGN_PARTITIONS_PATH, PREFERRED_REPLICA_ELECTION_PATH):
        return path
    parent, _, topic = path.rpartition("/")
    if parent == ADMIN_DELETE_TOPICS_PATH and topic_name_problem(topic) is None:
        return path
    raise ValueError(f"not an admin request znode: {path!r}")


def log_dir_event_notification_path(name: str) -> str:
    """``/log_dir_event_notification/<name>`` for a child name such as
    ``log_dir_event_0000000007``; ValueError for anything else."""
    suffix = name.removeprefix(LOG_DIR_EVENT_PREFIX)
    if suffix == name or not suffix.isascii() or not suffix.isdigit():
        raise ValueError(f"not a log dir event notification name: {name!r}")
    return f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{name}"
