"""A broker process: start-up, serving and clean shutdown (Kafka's ``KafkaServer``).

Start-up order matters: logs are loaded and recovered before the broker registers in
ZooKeeper, because registering is what makes the controller send it work; the gRPC port is
bound (and checked) before registering, because the registration advertises it. Shutdown
runs the other way: stop serving, stop replicating, checkpoint and close the logs (which
writes the clean-shutdown marker last), then leave ZooKeeper.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

from broker.config import BrokerConfig
from broker.log_manager import LogManager
from broker.metadata_cache import MetadataCache
from broker.replica_manager import ReplicaManager
from broker.server import BrokerService, ControlService
from broker.zk_client import BrokerZkClient
from proto import minibroker_pb2_grpc as pb_grpc

logger = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 5.0


class PortInUseError(OSError):
    """The broker's port is taken (gRPC reports a failed bind by returning port 0)."""


class BrokerServer:
    """One broker: logs, replica manager, gRPC services and its ZooKeeper registration."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.executor = ThreadPoolExecutor(
            max_workers=4, thread_name_prefix=f"broker-{config.broker_id}-io"
        )
        self.log_manager = LogManager(
            Path(config.log_dir), config.default_log_config, config.broker_id
        )
        self.zk = BrokerZkClient.from_config(config)
        self.metadata_cache = MetadataCache()
        self.replica_manager = ReplicaManager(
            config, self.log_manager, self.zk, self.metadata_cache, self.executor
        )
        self.port: int | None = None
        self._grpc: grpc.aio.Server | None = None
        self._stopped = asyncio.Event()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.executor, self.log_manager.startup)
        await self.zk.start()
        await self.replica_manager.start()
        self._grpc = grpc.aio.server(
            options=[
                # A restarted broker must not silently share its port with a stale one.
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", self.config.socket_request_max_bytes),
                ("grpc.max_send_message_length", self.config.socket_request_max_bytes),
            ]
        )
        pb_grpc.add_BrokerServicer_to_server(
            BrokerService(self.replica_manager, self.metadata_cache), self._grpc
        )
        pb_grpc.add_ControlServicer_to_server(ControlService(self.replica_manager), self._grpc)
        address = f"{self.config.host}:{self.config.port}"
        self.port = self._grpc.add_insecure_port(address)
        if self.port == 0:
            raise PortInUseError(f"broker {self.broker_id}: cannot listen on {address} (in use?)")
        await self._grpc.start()
        self.zk.on_session_lost(self.replica_manager.on_session_lost)
        self.zk.on_session_established(self._register)
        await self._register()
        logger.info(
            "broker started event=started broker=%d port=%d data_dir=%s zookeeper=%s",
            self.broker_id,
            self.port,
            self.config.log_dir,
            self.config.zookeeper_connect,
        )

    async def _register(self) -> None:
        assert self.port is not None
        # After a SIGKILL the previous incarnation's ephemeral registration lives on until
        # its session times out: wait that long for it rather than refusing to start.
        epoch = await self.zk.register_broker(
            self.broker_id,
            self.config.host,
            self.port,
            wait_for_stale_s=self.config.zookeeper_session_timeout_ms * 2 / 1000,
        )
        self.replica_manager.broker_epoch = epoch
        logger.info("registered event=registered broker=%d broker_epoch=%d", self.broker_id, epoch)

    async def stop(self) -> None:
        """Clean shutdown: checkpoints written, the registration removed."""
        logger.info("broker stopping event=stopping broker=%d", self.broker_id)
        if self._grpc is not None:
            await self._grpc.stop(SHUTDOWN_GRACE_S)
        await self.replica_manager.shutdown()
        await asyncio.get_running_loop().run_in_executor(self.executor, self.log_manager.shutdown)
        try:
            await self.zk.deregister_broker(self.broker_id)
        finally:
            await self.zk.close()
        self.executor.shutdown(wait=True)
        logger.info("broker stopped event=stopped broker=%d", self.broker_id)
        self._stopped.set()

    async def run_until_signalled(self) -> None:
        """Serve until SIGTERM or SIGINT, then shut down cleanly."""
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await self.start()
        await stop.wait()
        await self.stop()
