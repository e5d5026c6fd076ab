"""A broker process: start-up, serving and clean shutdown (Kafka's ``KafkaServer``).

Start-up order matters: the cluster id is read (or made) in ZooKeeper first, so that a data
dir of another cluster is refused before its logs are touched; logs are loaded and
recovered, and the dynamic broker configs
(:mod:`broker.dynamic_config`) read, before the broker registers in ZooKeeper, because
registering is what makes the controller send it work; the gRPC port is bound (and checked)
before registering, because the registration advertises it; the controller candidate starts
last, once registered. Shutdown runs the other way: a controlled shutdown first (the
controller moves leadership away while the broker still serves), then stop serving, stop
watching config changes, stop replicating, stop the controller candidate, checkpoint and
close the logs (which writes the clean-shutdown marker last), then leave ZooKeeper.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from prometheus_client import CollectorRegistry

from broker.auto_topic_creation import AutoTopicCreator
from broker.broker_metrics import ReplicaManagerMetrics, RequestMetrics
from broker.controlled_shutdown import controlled_shutdown
from broker.coordinator.group_admin import GroupAdmin
from broker.coordinator.group_coordinator import GroupCoordinator
from broker.coordinator.group_metadata_manager import GroupMetadataManager
from broker.coordinator.producer_id_manager import ProducerIdManager
from broker.coordinator.transactions import Transactions
from broker.dynamic_config import DynamicConfigManager
from broker.grpc_listener.authorizer import GrpcAuthorizer
from broker.grpc_listener.control_service import ControlService
from broker.grpc_listener.request_timing import RequestTiming
from broker.grpc_listener.server_limits import grpc_server_limits
from broker.grpc_listener.services import BrokerService
from broker.grpc_listener.transaction_rpcs import TransactionRpcs
from broker.grpc_listener.undecodable_requests import UndecodableRequests
from broker.kafka_listener.acl_apis import AclApis
from broker.kafka_listener.admin_apis import AdminApis
from broker.kafka_listener.apis import KafkaWireApis
from broker.kafka_listener.config_apis import ConfigApis
from broker.kafka_listener.frame_reader import ListenerLimits
from broker.kafka_listener.group_apis import GroupApis
from broker.kafka_listener.partition_admin_apis import PartitionAdminApis
from broker.kafka_listener.quota_apis import QuotaApis
from broker.kafka_listener.sasl_authenticator import ListenerAuthenticator
from broker.kafka_listener.scram_apis import ScramApis
from broker.kafka_listener.server import KafkaListener
from broker.kafka_listener.throttling import Throttler
from broker.kafka_listener.transaction_apis import TransactionApis
from broker.log.log_manager import LogManager, LogManagerError
from broker.log.resource_limits import check_nofile_limit, check_partition_cap_fds
from broker.metadata_cache import MetadataCache
from broker.metrics_server import BrokerStateCollector, MetricsServer
from broker.quotas.client_quota_manager import ClientQuotas
from broker.replication.replica_manager import ReplicaManager
from broker.security.acl_authorizer import AclAuthorizer
from broker.topic_admin import NewTopic, TopicAdmin
from broker.transaction_requests import TransactionRequests
from broker.zk_client import BrokerZkClient, ZkDataError, ZkError
from controller.controller_metrics import ControllerMetrics
from controller.kafka_controller import KafkaController
from proto.config.broker_config import BrokerConfig
from proto.config.describe_configs import listener_configs
from proto.config.scram_credentials import read_scram_credential
from proto.errors import MinibrokerError
from proto.topic_partition import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, TopicPartition
from proto.transport.keepalive import SERVER_KEEPALIVE_OPTIONS
from proto.transport.scram import ScramCredential, ScramMechanism
from proto.transport.tls import TlsConfigError
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.zk.credentials import ZkCredentialsError

logger = logging.getLogger(__name__)

TOPIC_ALREADY_EXISTS = 36

SHUTDOWN_GRACE_S = 5.0
ZOOKEEPER_SESSION_FILE = ".zookeeper-session"
"""In the data dir, with ``test.zookeeper.session.export.enable``: ``<id hex> <password hex>``
of the broker's registration session."""


class BrokerStartupError(MinibrokerError):
    """The broker cannot start (port taken, data dir locked or foreign, ZooKeeper
    unreachable, broker id in use); the message says what to do. What had been started is
    stopped again before it is raised."""


class PortInUseError(BrokerStartupError):
    """The broker's port is taken (or cannot be bound for another reason)."""


class BrokerServer:
    """One broker: logs, replica manager, gRPC services and its ZooKeeper registration."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        try:
            self.tls = config.tls()
            """The broker's certificate and truststore (None: PLAINTEXT), read once."""
            config.zookeeper_credentials()  # read again by each ZooKeeper client: fail here
        except (TlsConfigError, ZkCredentialsError) as err:
            raise BrokerStartupError(f"broker {config.broker_id}: {err}") from err
        self.executor = ThreadPoolExecutor(
            max_workers=4, thread_name_prefix=f"broker-{config.broker_id}-io"
        )
        self.log_manager = LogManager(
            Path(config.log_dir),
            config.default_log_config,
            config.broker_id,
            background=self.executor.submit,
            recovery_threads=config.num_recovery_threads_per_data_dir,
            max_open_segment_files=(
                config.log_segment_open_files_max if config.log_segment_open_files_max > 0 else None
            ),
        )
        self.zk = BrokerZkClient.from_config(config)
        self.metadata_cache = MetadataCache()
        self.metrics_registry = CollectorRegistry(auto_describe=True)
        """Every metric of this broker (``metrics.prometheus.port`` serves it)."""
        self.replica_manager = ReplicaManager(
            config,
            self.log_manager,
            self.zk,
            self.metadata_cache,
            self.executor,
            metrics=ReplicaManagerMetrics(self.metrics_registry),
            tls=self.tls,
        )
        issued = self.replica_manager.issued_producer_ids
        self.producer_id_manager = ProducerIdManager(
            config.broker_id, self.zk, on_block_reserved=lambda b: issued.raise_bound(b.block_end)
        )
        self.controller = KafkaController.from_config(
            config, ControllerMetrics(self.metrics_registry), self.tls
        )
        self.authorizer = AclAuthorizer(
            config.broker_id,
            self.zk,
            enabled=config.acls_enabled,
            super_users=config.super_user_principals,
            allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found,
            tls_enabled=self.tls is not None,
        )
        """ACLs on both listeners with ``authorizer.class.name`` (docs/security.md)."""
        self._authorizer = GrpcAuthorizer(self.authorizer)
        self.metrics_registry.register(BrokerStateCollector(self.replica_manager, self.controller))
        self._request_metrics = RequestMetrics(self.metrics_registry)
        self.client_quotas = ClientQuotas(
            samples=config.quota_window_num,
            window_ms=config.quota_window_size_seconds * 1000,
            broker_id=config.broker_id,
        )
        """Client quotas (Kafka's ``QuotaManagers``), enforced on the Kafka listener."""
        self.metrics_registry.register(self.client_quotas)
        self._metrics_server: MetricsServer | None = None
        self.metrics_port: int | None = None
        """The bound metrics port, with ``metrics.prometheus.port`` >= 0."""
        self.dynamic_config = DynamicConfigManager(
            config,
            self.zk,
            self.replica_manager,
            self.controller,
            client_quotas=self.client_quotas,
        )
        self.port: int | None = None
        self.kafka_port: int | None = None
        """The bound Kafka protocol port, None without a Kafka listener."""
        self._controller_started = False
        self._grpc: grpc.aio.Server | None = None
        self._kafka_listener: KafkaListener | None = None
        self.group_store = GroupMetadataManager(
            config,
            self.replica_manager,
            self.metadata_cache,
            self.executor,
            self._create_offsets_topic,
        )
        """The groups' offsets and generations in ``__consumer_offsets``."""
        self.transactions = Transactions(
            config,
            self.replica_manager,
            self.metadata_cache,
            self.executor,
            self._create_transaction_topic,
            self.producer_id_manager,
            self.tls,
        )
        """The transaction coordinator (docs/transactions.md)."""
        self.group_coordinator = GroupCoordinator(
            config.broker_id,
            store=self.group_store,
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            max_size=config.group_max_size,
            max_protocol_metadata_bytes=config.group_max_protocol_metadata_bytes,
        )
        """The consumer groups of the Kafka listener's clients (``subscribe()``)."""
        self.group_admin = GroupAdmin(self.group_coordinator, self.metadata_cache, self.zk)
        """ListGroups, DescribeGroups, DeleteGroups, OffsetDelete: both doors'."""
        self.transaction_requests = TransactionRequests(
            self.transactions.coordinator,
            self.metadata_cache,
            self.authorizer,
            self.group_admin,
            self.group_store.partition_of,
        )
        """The transaction requests, checked as both doors serve them."""
        self.topic_admin = TopicAdmin(config, self.zk, self.metadata_cache)
        self.auto_topic_creator = AutoTopicCreator(config, self._create_with_defaults)
        """Creates the missing topics of Metadata requests, on both listeners."""
        self._replica_manager_started = False
        self._stopped = asyncio.Event()
        self.cluster_id = ""
        """``/cluster/id`` (made by the first broker of the cluster), known once started."""

    async def _create_with_defaults(
        self, names: Sequence[str]
    ) -> dict[str, tuple[int, str | None]]:
        """Write ``names`` as CreateTopics does with -1 partitions and replication factor
        (``num.partitions``, ``default.replication.factor``), not waiting for leaders."""
        outcomes = await self.topic_admin.create_topics(
            [NewTopic(name, -1, -1, {}, {}) for name in names], timeout_ms=0, validate_only=False
        )
        return {name: (o.error_code, o.error_message) for name, o in outcomes.items()}

    async def _create_offsets_topic(self) -> int:
        """Make ``__consumer_offsets`` with Kafka's settings for it (compacted, its own
        partitions, replication factor and segment size)."""
        config = self.config
        return await self._create_internal_topic(
            NewTopic(
                OFFSETS_TOPIC,
                config.offsets_topic_num_partitions,
                config.offsets_topic_replication_factor,
                {},
                {
                    "cleanup.policy": "compact",
                    "compression.type": "producer",
                    "segment.bytes": str(config.offsets_topic_segment_bytes),
                },
            )
        )

    async def _create_transaction_topic(self) -> int:
        """Make ``__transaction_state`` with Kafka's settings for it (compacted, without
        compression or unclean elections)."""
        config = self.config
        return await self._create_internal_topic(
            NewTopic(
                TRANSACTION_STATE_TOPIC,
                config.transaction_state_log_num_partitions,
                config.transaction_state_log_replication_factor,
                {},
                {
                    "cleanup.policy": "compact",
                    "compression.type": "uncompressed",
                    "min.insync.replicas": str(config.transaction_state_log_min_isr),
                    "segment.bytes": str(config.transaction_state_log_segment_bytes),
                    "unclean.leader.election.enable": "false",
                },
            )
        )

    async def _create_internal_topic(self, topic: NewTopic) -> int:
        """Write a coordinator's topic, not waiting for leaders: the CreateTopics error
        code (NONE, or TOPIC_ALREADY_EXISTS when another broker made it first)."""
        outcomes = await self.topic_admin.create_topics([topic], timeout_ms=0, validate_only=False)
        outcome = outcomes[topic.name]
        if outcome.error_code not in (pb.NONE, TOPIC_ALREADY_EXISTS):
            logger.warning(
                "event=internal_topic_not_created broker=%d topic=%s partitions=%d "
                "replication_factor=%d error_code=%d message=%r",
                self.broker_id,
                topic.name,
                topic.num_partitions,
                topic.replication_factor,
                outcome.error_code,
                outcome.error_message,
            )
        return outcome.error_code

    async def start(self) -> None:
        """Load the logs, connect to ZooKeeper, serve gRPC, register.

        On failure everything started so far is stopped again (the logs are closed cleanly:
        they were recovered and nothing was appended yet) and the error is raised; the
        failures a person can fix (port taken, data dir locked or foreign, ZooKeeper
        unreachable, broker id in use) as BrokerStartupError.
        """
        try:
            await self._start()
        except BaseException as err:
            await self._abandon_start()
            if isinstance(err, LogManagerError | ZkError | ZkDataError):
                raise BrokerStartupError(f"broker {self.broker_id}: {err}") from err
            raise

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        await self.zk.start()
        if self.config.zookeeper_set_acl:
            await self.zk.create_top_level_paths()
        # The cluster's id before any log is touched (Kafka's order): a data dir of another
        # cluster is refused by the log manager with InconsistentClusterIdError.
        self.cluster_id = await self.zk.get_or_create_cluster_id()
        await loop.run_in_executor(
            self.executor, functools.partial(self.log_manager.startup, cluster_id=self.cluster_id)
        )
        segment_files = self.log_manager.segment_files.max_open
        check_nofile_limit(
            sum(len(log_.segments) for log_ in self.log_manager.all_logs().values()),
            logger,
            "broker",
            max_open_segment_files=segment_files,
        )
        check_partition_cap_fds(
            self.config.max_broker_partitions,
            logger,
            "broker",
            max_open_segment_files=segment_files,
        )
        # Dynamic broker configs apply before anything is hosted (Kafka reads them right
        # after connecting to ZooKeeper).
        await self.dynamic_config.start()
        # ACLs before either listener serves: no request is decided on an empty cache.
        await self.authorizer.start()
        await self.replica_manager.start()
        self._replica_manager_started = True
        self.transactions.start()
        self._grpc = grpc.aio.server(
            interceptors=[
                RequestTiming(self._request_metrics),
                UndecodableRequests(self.broker_id),
            ],
            options=[
                *SERVER_KEEPALIVE_OPTIONS,
                # A restarted broker must not silently share its port with a stale one.
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", self.config.socket_request_max_bytes),
                ("grpc.max_send_message_length", self.config.socket_request_max_bytes),
                *grpc_server_limits(self.config),
            ],
        )
        pb_grpc.add_BrokerServicer_to_server(
            BrokerService(
                self.replica_manager,
                self.metadata_cache,
                self.producer_id_manager,
                group_coordinator=self.group_coordinator,
                group_admin=self.group_admin,
                producer_id_timeout_ms=self.config.zookeeper_session_timeout_ms,
                authorizer=self._authorizer,
                auto_topic_creator=self.auto_topic_creator,
                request_metrics=self._request_metrics,
                cluster_id=self.cluster_id,
                client_quotas=self.client_quotas,
                transaction_rpcs=TransactionRpcs(
                    self.transaction_requests, self.metadata_cache, self.group_store
                ),
            ),
            self._grpc,
        )
        pb_grpc.add_ControlServicer_to_server(
            ControlService(self.replica_manager, self.controller, self._authorizer), self._grpc
        )
        address = f"{self.config.host}:{self.config.port}"
        try:
            # grpcio >= 1.60 raises RuntimeError on a failed bind; older ones return 0.
            if self.tls is None:
                self.port = self._grpc.add_insecure_port(address)
            else:
                required = self.config.ssl_client_auth == "required"
                self.port = self._grpc.add_secure_port(
                    address, self.tls.server_credentials(require_client_auth=required)
                )
        except RuntimeError:
            self.port = 0
        if self.port == 0:
            raise PortInUseError(
                f"broker {self.broker_id} cannot listen on {address}: "
                f"{_bind_problem(self.config.host, self.config.port)}"
            )
        await self._grpc.start()
        await self._serve_kafka()
        self._serve_metrics()
        self.zk.on_session_lost(self.replica_manager.on_session_lost)
        self.zk.on_session_established(self._register)
        await self._register()
        # After registering, as Kafka does: a controller elected here finds itself alive.
        self._controller_started = True
        await self.controller.start()
        logger.info(
            "broker started event=started broker=%d port=%d kafka_port=%s security_protocol=%s "
            "metrics_port=%s data_dir=%s zookeeper=%s",
            self.broker_id,
            self.port,
            self.kafka_port,
            "PLAINTEXT" if self.tls is None else f"SSL/{self.config.ssl_client_auth}",
            self.metrics_port,
            self.config.log_dir,
            self.config.zookeeper_connect,
        )

    def _unclean_election(
        self, partitions: Sequence[TopicPartition]
    ) -> Awaitable[dict[TopicPartition, tuple[int, str | None]]] | None:
        """ElectLeaders' unclean elections go to this broker's controller, if it is the
        active one (None otherwise: the client is told NOT_CONTROLLER, as by Kafka)."""
        if not self.controller.is_active:
            return None
        return self.controller.elect_unclean_leaders(partitions)

    async def _serve_kafka(self) -> None:
        """With ``kafka.port``, bind the Kafka protocol listener before registering: the
        registration advertises it beside the gRPC one."""
        port = self.config.kafka_port
        if port < 0:
            return
        transaction_apis = TransactionApis(self.transaction_requests, self.metadata_cache)
        listener = KafkaListener(
            self.broker_id,
            KafkaWireApis(
                self.replica_manager,
                self.metadata_cache,
                self.producer_id_manager,
                group_apis=GroupApis(
                    self.group_coordinator,
                    self.metadata_cache,
                    self.zk,
                    self.group_admin,
                    self.authorizer,
                    transaction_apis,
                ),
                transaction_apis=transaction_apis,
                admin_apis=AdminApis(self.topic_admin, self.broker_id, self.authorizer),
                config_apis=ConfigApis(
                    self.config, self.zk, self._listener_configs, self.authorizer
                ),
                partition_admin_apis=PartitionAdminApis(
                    self.replica_manager,
                    self.metadata_cache,
                    self.zk,
                    self._unclean_election,
                    self.authorizer,
                ),
                quota_apis=QuotaApis(self.zk, self.broker_id),
                scram_apis=ScramApis(self.zk, self.broker_id),
                producer_id_timeout_ms=self.config.zookeeper_session_timeout_ms,
                cluster_id=self.cluster_id,
                auto_topic_creator=self.auto_topic_creator,
                authorizer=self.authorizer,
                acl_apis=AclApis(self.authorizer, self.zk),
            ).handlers,
            max_request_bytes=self.config.socket_request_max_bytes,
            observe=self._request_metrics.observe,
            throttler=Throttler(self.client_quotas),
            authenticator=self._kafka_authenticator(),
            limits=ListenerLimits.from_config(self.config),
        )
        try:
            self.kafka_port = await listener.start(self.config.host, port)
        except OSError as err:
            raise PortInUseError(
                f"broker {self.broker_id} cannot listen for Kafka clients on "
                f"{self.config.host}:{port}: {err.strerror or err} (pick another kafka.port)"
            ) from err
        self._kafka_listener = listener
        self.group_coordinator.start()

    def _kafka_authenticator(self) -> ListenerAuthenticator | None:
        """The Kafka listener's SSL or SASL (docs/security.md); None for PLAINTEXT."""
        security = self.config.kafka_listener_security()
        if security.protocol == "PLAINTEXT":
            return None

        async def scram_credential(user: str, mechanism: ScramMechanism) -> ScramCredential | None:
            return await read_scram_credential(self.zk, user, mechanism)

        return ListenerAuthenticator(
            self.broker_id,
            security,
            scram_credential=scram_credential,
            keystore=self.config.ssl_keystore_location,
            truststore=self.config.ssl_truststore_location,
            timeout_s=self.config.connections_handshake_timeout_ms / 1000,
        )

    def _listener_configs(self) -> dict[str, str]:
        """``listeners`` and ``advertised.listeners`` as DescribeConfigs shows them: the
        endpoints this broker bound and registers."""
        if self.port is None:
            return {}
        return listener_configs(
            self.config.host,
            self.port,
            self.kafka_port,
            self.tls is not None,
            self.config.kafka_security_protocol,
        )

    async def _stop_kafka(self) -> None:
        if self._kafka_listener is not None:
            await self._kafka_listener.stop()
            self._kafka_listener = None
            await self.group_coordinator.stop()

    def _serve_metrics(self) -> None:
        """Bind the Prometheus endpoint before registering, so a taken port is an error at
        start-up rather than a broker serving without its metrics."""
        port = self.config.metrics_prometheus_port
        if port < 0:
            return
        host = self.config.metrics_prometheus_host or self.config.host
        server = MetricsServer(self.metrics_registry, host, port, asyncio.get_running_loop())
        try:
            self.metrics_port = server.start()
        except OSError as err:
            raise PortInUseError(
                f"broker {self.broker_id} cannot serve metrics on {host}:{port}: "
                f"{err.strerror or err}"
            ) from err
        self._metrics_server = server

    async def _stop_metrics(self) -> None:
        if self._metrics_server is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._metrics_server.stop)
            self._metrics_server = None

    async def _register(self) -> None:
        assert self.port is not None
        # After a SIGKILL the previous incarnation's ephemeral registration lives on until
        # its session times out: wait that long for it rather than refusing to start.
        epoch = await self.zk.register_broker(
            self.broker_id,
            self.config.host,
            self.port,
            kafka_port=self.kafka_port,
            grpc_security_protocol="PLAINTEXT" if self.tls is None else "SSL",
            kafka_security_protocol=self.config.kafka_security_protocol,
            wait_for_stale_s=self.config.zookeeper_session_timeout_ms * 2 / 1000,
        )
        self.replica_manager.broker_epoch = epoch
        logger.info("registered event=registered broker=%d broker_epoch=%d", self.broker_id, epoch)
        if self.config.test_zookeeper_session_export_enable:
            await asyncio.get_running_loop().run_in_executor(self.executor, self._export_session)

    def _export_session(self) -> None:
        """``test.zookeeper.session.export.enable``: the session a chaos tool may expire."""
        credentials = self.zk.session_credentials()
        if credentials is None:
            return
        session_id, password = credentials
        path = self.config.log_dir / ZOOKEEPER_SESSION_FILE
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{session_id:x} {password.hex()}\n")
        os.replace(tmp, path)

    async def stop(self) -> None:
        """Clean shutdown: checkpoints written, the registration removed."""
        logger.info("broker stopping event=stopping broker=%d", self.broker_id)
        if (
            self.config.controlled_shutdown_enable
            and self._controller_started
            and await controlled_shutdown(
                self.config, self.zk, self.replica_manager.broker_epoch, self.tls
            )
        ):
            # Before the server's grace: clients with a session open are answered
            # NOT_LEADER_OR_FOLLOWER and go to the new leaders now.
            await self.replica_manager.leaderships_handed_over()
        await self._stop_kafka()
        if self._grpc is not None:
            await self._grpc.stop(SHUTDOWN_GRACE_S)
        await self._stop_metrics()
        await self.dynamic_config.stop()
        await self.authorizer.stop()
        await self.group_store.stop()
        await self.transactions.stop()
        await self.replica_manager.shutdown()
        await self.controller.stop()
        await asyncio.get_running_loop().run_in_executor(self.executor, self.log_manager.shutdown)
        await self._deregister()
        self.executor.shutdown(wait=True)
        logger.info("broker stopped event=stopped broker=%d", self.broker_id)
        self._stopped.set()

    async def _deregister(self) -> None:
        """Delete the registration and close the session, for at most the session timeout.

        ZooKeeper operations retry until the session expires, which a client cut off from
        ZooKeeper never learns: without a bound, SIGTERM would hang for as long as
        ZooKeeper is unreachable. Past the session timeout the server has expired the
        session and deleted the registration anyway.
        """
        timeout_s = self.config.zookeeper_session_timeout_ms / 1000
        try:
            async with asyncio.timeout(timeout_s):
                await self.zk.deregister_broker(self.broker_id)
        except TimeoutError:
            logger.warning(
                "ZooKeeper unreachable at shutdown event=deregister_timeout broker=%d "
                "timeout_s=%.1f: the registration goes when the session expires",
                self.broker_id,
                timeout_s,
            )
        finally:
            await self.zk.close()

    async def _abandon_start(self) -> None:
        """Undo a partial start. The replica manager is only shut down if it started: before
        it read the HW checkpoint, its shutdown would overwrite that file with nothing."""
        await self._stop_kafka()
        if self._grpc is not None:
            await self._grpc.stop(None)
        await self._stop_metrics()
        if self._controller_started:
            await self.controller.stop()
        await self.dynamic_config.stop()
        await self.authorizer.stop()
        await self.group_store.stop()
        await self.transactions.stop()
        if self._replica_manager_started:
            await self.replica_manager.shutdown()
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self.executor, self.log_manager.shutdown)
        except Exception:
            logger.exception("closing the logs failed broker=%d", self.broker_id)
        await self.zk.close()
        self.executor.shutdown(wait=True)

    async def run_until_signalled(self) -> None:
        """Serve until SIGTERM or SIGINT, then shut down cleanly."""
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await self.start()
        await stop.wait()
        await self.stop()


def _bind_problem(host: str, port: int) -> str:
    """Why ``host:port`` cannot be bound, in words: gRPC only says that binding failed."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as err:
        return f"cannot resolve {host}: {err}"
    family, kind, proto, _, sockaddr = infos[0]
    with socket.socket(family, kind, proto) as probe:
        try:
            probe.bind(sockaddr)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return "the port is already in use by another process (pick another --port)"
            return str(err)
    return "gRPC could not bind it (it may have been freed since)"
