"""What a chaos run asks of the cluster: before it starts, whether a cluster it was given
runs the truncation mode asked for and can be struck as the nemeses asked for need; between
faults, topics made, ISRs whole, every transaction ended (a last stable offset at its high
watermark); at the end, a final read.

These talk to the cluster as a client would (the admin client, a consumer, Kafka's
DescribeConfigs on a broker's Kafka listener), to ZooKeeper (the state znodes, the brokers'
registrations) and to the backend, never to a broker's internals.
"""

from __future__ import annotations

import asyncio
import io
import socket
import struct
import time
from collections.abc import Mapping, Sequence

from kazoo.client import KazooClient
from kio.schema.describe_configs.v1 import request as describe_configs_v1
from kio.schema.describe_configs.v1 import response as describe_configs_v1_response
from kio.schema.request_header.v1.header import RequestHeader
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32

from chaos.backend import BackendUnavailableError, ClusterBackend
from chaos.history_recorder import HistoryRecorder
from client.admin import LATEST, AdminClient
from client.consumer import Consumer, ConsumerConfig
from client.metadata import BrokerConnections, ClientError
from proto.errors import MinibrokerError
from proto.topic_partition import TopicPartition
from proto.zk import znodes
from proto.zk.sync_client import kazoo_client, read_partition_state

__all__ = [
    "DEFAULT_TRUNCATION_MODE",
    "SESSION_EXPORT",
    "TRUNCATION_MODE",
    "BrokerConfigsUnknownError",
    "broker_configs",
    "create_topics",
    "final_read",
    "given_cluster_truncation_mode",
    "require_exported_sessions",
    "under_replicated",
    "unexported_sessions",
    "unstable_partitions",
    "wait_for_full_isr",
]

TRUNCATION_MODE = "replication.truncation.mode"
SESSION_EXPORT = "test.zookeeper.session.export.enable"
DEFAULT_TRUNCATION_MODE = "leader-epoch"
"""The broker's default, and ``chaos run --truncation-mode``'s."""
DESCRIBE_TIMEOUT_S = 10.0
SESSION_EXPORT_WAIT_S = 10.0
"""How long the check waits for the brokers that do not export their session yet, when
others already do (a broker exports it right after it registers, so a cluster the run has
just started may be a moment behind)."""
_DESCRIBE_CONFIGS = 32
_BROKER_RESOURCE = 4


class BrokerConfigsUnknownError(MinibrokerError):
    """A broker's effective configs could not be read: no Kafka listener, a secured one, a
    broker that did not answer. The message says which and why."""


# -- before a run: the cluster given ----------------------------------------------------------


def broker_configs(
    kafka_bootstrap: str | None,
    broker_ids: Sequence[int],
    names: Sequence[str],
    *,
    timeout_s: float = DESCRIBE_TIMEOUT_S,
) -> dict[int, dict[str, str | None]]:
    """Each broker's effective value of each of ``names``: what it answers Kafka's
    DescribeConfigs for its own broker resource (the properties it started with, under the
    dynamic ``/config/brokers`` layers), as ``kafka-configs --describe --bootstrap-server``
    shows it. A broker answers only for its own id (Kafka's ``getBrokerId``), so every
    listener of ``kafka_bootstrap`` is asked about every broker not yet answered for.

    A static property such as ``replication.truncation.mode`` exists nowhere else: neither
    the broker's registration nor ``/config/brokers`` holds it. Raises
    BrokerConfigsUnknownError naming the brokers that could not be read, and why.
    """
    if not kafka_bootstrap:
        raise BrokerConfigsUnknownError("its brokers run no Kafka listener (kafka.port)")
    found: dict[int, dict[str, str | None]] = {}
    problems: list[str] = []
    for address in kafka_bootstrap.split(","):
        pending = [b for b in broker_ids if b not in found]
        if not pending:
            break
        try:
            response = _describe_brokers(address, pending, names, timeout_s)
        except (OSError, ValueError, struct.error) as e:
            # A TLS or SASL listener closes on a plaintext request; kio raises ValueError
            # (or a struct error) on an answer that is not one.
            problems.append(f"{address}: {e or type(e).__name__}")
            continue
        for result in response.results:
            if result.error_code == 0 and result.resource_name.isdigit():
                found[int(result.resource_name)] = {c.name: c.value for c in result.configs}
    missing = [b for b in broker_ids if b not in found]
    if missing:
        why = "; ".join(problems) or "no listener answered for them"
        raise BrokerConfigsUnknownError(
            f"DescribeConfigs answered nothing for brokers {missing} ({why})"
        )
    return found


def _describe_brokers(
    address: str, broker_ids: Sequence[int], names: Sequence[str], timeout_s: float
) -> describe_configs_v1_response.DescribeConfigsResponse:
    """One DescribeConfigs v1 (the oldest the brokers serve, unflexible) over a connection
    of its own: a tool's single question needs no client library."""
    request = describe_configs_v1.DescribeConfigsRequest(
        resources=tuple(
            describe_configs_v1.DescribeConfigsResource(
                resource_type=i8(_BROKER_RESOURCE),
                resource_name=str(broker_id),
                configuration_keys=tuple(names),
            )
            for broker_id in broker_ids
        )
    )
    header = RequestHeader(
        request_api_key=i16(_DESCRIBE_CONFIGS),
        request_api_version=i16(1),
        correlation_id=i32(1),
        client_id="minibroker-chaos",
    )
    out = io.BytesIO()
    entity_writer(RequestHeader)(out, header)
    entity_writer(describe_configs_v1.DescribeConfigsRequest)(out, request)
    frame = out.getvalue()
    host, _, port = address.strip().rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        (size,) = struct.unpack(">i", _receive(sock, 4))
        answer = _receive(sock, size)
    schema = describe_configs_v1_response.DescribeConfigsResponse
    _, header_size = entity_reader(schema.__header_schema__)(answer, 0)
    response, _ = entity_reader(schema)(answer, header_size)
    return response


def _receive(sock: socket.socket, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("the listener closed the connection")
        data += chunk
    return bytes(data)


def given_cluster_truncation_mode(
    backend: ClusterBackend,
    asked: str | None,
    *,
    data_dir: object = None,
    project: str | None = None,
) -> tuple[str | None, str]:
    """The ``replication.truncation.mode`` a cluster the run was given runs (the one in
    ``data_dir``, or the compose ``project``), and a line saying so.

    The run cannot change a running cluster's static properties, so a cluster in another
    mode than ``asked`` is refused (BackendUnavailableError saying which mode it runs and
    how to get a cluster in the other); ``chaos run --truncation-mode`` was silently not
    applied before. A mode that cannot be read (a secured Kafka listener, none) is (None,
    a line saying so) when nothing or the default was asked, and refused when another
    mode was. ``asked`` None (no ``--truncation-mode``): whichever mode the cluster runs,
    if every broker runs the same.
    """
    given = f"--data-dir {data_dir}" if data_dir is not None else f"--project {project}"
    broker_ids = backend.broker_ids()
    try:
        configs = broker_configs(backend.kafka_bootstrap_servers(), broker_ids, [TRUNCATION_MODE])
    except BrokerConfigsUnknownError as e:
        if asked not in (None, DEFAULT_TRUNCATION_MODE):
            raise BackendUnavailableError(
                f"--truncation-mode {asked}: cannot read the {TRUNCATION_MODE} of the cluster "
                f"{given} ({e}); {_how_to_start(backend, asked)}"
            ) from None
        return None, (
            f"the {TRUNCATION_MODE} of the cluster {given} is unknown ({e}): the run judges "
            "it without knowing it"
        )
    modes = {b: configs[b].get(TRUNCATION_MODE) or DEFAULT_TRUNCATION_MODE for b in broker_ids}
    if asked is None and len(set(modes.values())) == 1:
        asked = modes[broker_ids[0]]
    other = {b: mode for b, mode in modes.items() if mode != asked}
    if other:
        runs = ", ".join(
            f"{mode} on broker{'s' if len(bs) > 1 else ''} {', '.join(map(str, bs))}"
            for mode, bs in _by_value(modes).items()
        )
        default = " (the default)" if asked in (None, DEFAULT_TRUNCATION_MODE) else ""
        asked = asked or DEFAULT_TRUNCATION_MODE
        raise BackendUnavailableError(
            f"the cluster {given} runs {TRUNCATION_MODE} {runs}, and the run asks for "
            f"{asked}{default}: a cluster given keeps its own settings. "
            + (
                f"Run with --truncation-mode {modes[broker_ids[0]]}, or "
                if len(set(modes.values())) == 1
                else ""
            )
            + _how_to_start(backend, asked)
        )
    return asked, f"the cluster {given} runs {TRUNCATION_MODE} {asked} on every broker"


def _how_to_start(backend: ClusterBackend, mode: str) -> str:
    """How to get a cluster in ``mode``, on ``backend``."""
    if backend.name == "docker":
        start = f'MINIBROKER_OVERRIDES="{TRUNCATION_MODE}={mode}" make up'
    else:
        start = f"minibroker cluster up --data-dir DIR --override {TRUNCATION_MODE}={mode}"
    return (
        f"start a cluster in {mode} mode ({start}), or leave out --data-dir and --project "
        "and chaos run starts its own"
    )


def _by_value(values: Mapping[int, str]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for key, value in sorted(values.items()):
        grouped.setdefault(value, []).append(key)
    return grouped


def unexported_sessions(
    backend: ClusterBackend, *, wait_s: float = SESSION_EXPORT_WAIT_S
) -> dict[int, str]:
    """The brokers that do not export the ZooKeeper session their registration is held by
    (``test.zookeeper.session.export.enable``), with why; empty when every one does.

    A nemesis that ends a session (``zk-expire``, ``cascade``) needs the very session that
    holds ``/brokers/ids/<id>``: an export left behind by an earlier start with the
    property is another, closed session, and ending it would strike nothing. A broker
    exports its session right after it registers, so while some brokers export theirs the
    others are waited for, ``wait_s`` at most; when none does, nothing is waited for.
    """
    broker_ids = backend.broker_ids()
    deadline = time.monotonic() + wait_s
    if all(backend.zookeeper_session(b) is None for b in broker_ids):
        return dict.fromkeys(broker_ids, "exports no session")
    with kazoo_client(backend.zookeeper_connect()) as zk:
        while True:
            missing: dict[int, str] = {}
            for broker_id in broker_ids:
                exported = backend.zookeeper_session(broker_id)
                stat = zk.exists(znodes.broker_path(broker_id))
                if exported is None:
                    missing[broker_id] = "exports no session"
                elif stat is None:
                    missing[broker_id] = "is not registered"
                elif int(stat.ephemeralOwner) != exported[0]:
                    missing[broker_id] = (
                        f"exports session 0x{exported[0]:x}, not 0x{int(stat.ephemeralOwner):x} "
                        "that holds its registration"
                    )
            if not missing or time.monotonic() >= deadline:
                return missing
            time.sleep(0.2)


def require_exported_sessions(backend: ClusterBackend, nemesis: str) -> None:
    """BackendUnavailableError unless every broker exports its registration's session
    (:func:`unexported_sessions`), saying how to start a cluster whose brokers do."""
    missing = unexported_sessions(backend)
    if not missing:
        return
    which = "; ".join(f"broker {b} {why}" for b, why in sorted(missing.items()))
    if backend.name == "docker":
        start = f'MINIBROKER_OVERRIDES="{SESSION_EXPORT}=true" make up'
    else:
        start = f"minibroker cluster up --data-dir DIR --override {SESSION_EXPORT}=true"
    raise BackendUnavailableError(
        f"{nemesis} ends brokers' ZooKeeper sessions, which needs each broker to export its "
        f"own ({SESSION_EXPORT}=true; chaos run sets it on the clusters it starts): {which}. "
        f"Start the cluster with it ({start}), or leave out --data-dir and --project and "
        "chaos run starts its own"
    )


async def create_topics(
    bootstrap: str,
    zookeeper: str,
    topics: Sequence[str],
    partitions: int,
    replication_factor: int,
    config: Mapping[str, str],
) -> None:
    """Create the workload's topics and wait until every partition has a leader."""
    async with (
        BrokerConnections.from_bootstrap(bootstrap) as connections,
        AdminClient(connections, zookeeper, wait_timeout_s=60) as admin,
    ):
        for topic in topics:
            await admin.create_topic(topic, partitions, replication_factor, dict(config))


def under_replicated(zk: KazooClient, tps: Sequence[TopicPartition]) -> dict[TopicPartition, str]:
    """The partitions whose ISR is not their whole replica set (or that have no leader),
    with what they lack."""
    problems: dict[TopicPartition, str] = {}
    assignments: dict[str, dict[int, list[int]]] = {}
    for tp in tps:
        if tp.topic not in assignments:
            data, _ = zk.get(znodes.topic_path(tp.topic))
            assignments[tp.topic] = znodes.decode_topic_assignment(data)
        replicas = assignments[tp.topic].get(tp.partition, [])
        state = read_partition_state(zk, tp)
        if state is None:
            problems[tp] = "no state"
        elif state.leader < 0:
            problems[tp] = "no leader"
        elif set(state.isr) != set(replicas):
            problems[tp] = f"ISR {sorted(state.isr)} of {sorted(replicas)}"
    return problems


def wait_for_full_isr(
    zk: KazooClient, tps: Sequence[TopicPartition], timeout_s: float
) -> dict[TopicPartition, str]:
    """Wait until every partition has its whole replica set in sync; returns what is still
    missing at the deadline (empty: all whole)."""
    deadline = time.monotonic() + timeout_s
    while True:
        missing = under_replicated(zk, tps)
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(0.25)


async def unstable_partitions(
    bootstrap: str, zookeeper: str, tps: Sequence[TopicPartition]
) -> dict[TopicPartition, str]:
    """The partitions whose last stable offset (where a read_committed consumer's end is,
    ListOffsets read_committed) is below their high watermark: a transaction is still
    open on them, or its marker is not written yet. With what each lacks."""
    async with (
        BrokerConnections.from_bootstrap(bootstrap) as connections,
        AdminClient(connections, zookeeper) as admin,
    ):
        ends = await admin.list_offsets(tps, LATEST)
    problems = {tp: f"no high watermark: {why}" for tp, why in ends.errors.items()}
    config = ConsumerConfig(isolation_level="read_committed")
    async with (
        BrokerConnections.from_bootstrap(bootstrap) as connections,
        Consumer(connections, config) as consumer,
    ):
        consumer.assign(sorted(ends.offsets))
        consumer.seek_to_end()
        for tp, high_watermark in sorted(ends.offsets.items()):
            try:
                stable = await consumer.position(tp)
            except ClientError as e:
                problems[tp] = f"no last stable offset: {e}"
                continue
            if stable < high_watermark:
                problems[tp] = f"last stable offset {stable} < high watermark {high_watermark}"
    return problems


async def final_read(
    bootstrap: str,
    zookeeper: str,
    tps: Sequence[TopicPartition],
    history: HistoryRecorder,
    timeout_s: float,
) -> tuple[int, dict[TopicPartition, str]]:
    """Read every partition once from its log start to its high watermark, recording each
    record as a ``read``; returns the records read and the partitions it could not finish."""
    async with (
        BrokerConnections.from_bootstrap(bootstrap) as connections,
        AdminClient(connections, zookeeper) as admin,
    ):
        ends = await admin.list_offsets(tps, LATEST)
        unfinished = {tp: f"no high watermark: {why}" for tp, why in ends.errors.items()}
        targets = {tp: end for tp, end in ends.offsets.items() if end > 0}
    config = ConsumerConfig(auto_offset_reset="earliest", fetch_max_wait_ms=100)
    read = 0
    async with (
        BrokerConnections.from_bootstrap(bootstrap) as connections,
        Consumer(connections, config) as consumer,
    ):
        consumer.assign(sorted(targets))
        consumer.seek_to_beginning()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        remaining = dict(targets)
        while remaining and loop.time() < deadline:
            for r in await consumer.poll(timeout_ms=500):
                value = None if r.value is None else r.value.decode("utf-8", "replace")
                history.read(r.topic, r.partition, r.offset, value)
                read += 1
            for tp in list(remaining):
                if await consumer.position(tp) >= remaining[tp]:
                    del remaining[tp]
        unfinished.update({tp: f"read stopped short of {end}" for tp, end in remaining.items()})
    return read, unfinished
