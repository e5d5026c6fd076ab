"""The broker's side of a controlled shutdown (Kafka's ``KafkaServer.controlledShutdown``).

Before a clean stop, the broker asks the controller to move leadership off it. The
controller elects another ISR member for each partition the broker leads, takes it out of
every ISR and stops its replicas, so producers see one retriable NOT_LEADER_OR_FOLLOWER
and find the new leader, instead of timing out against a broker that is going away. Once
the controller answers that nothing remains, the broker fences what it led and stops its
fetchers itself (``ReplicaManager.leaderships_handed_over``): the controller's StopReplica
may arrive after the broker has stopped taking calls, while sessions opened earlier stay
open through the server's shutdown grace.
The answer lists the partitions it still leads (no other ISR member could take them);
the broker asks again after ``controlled.shutdown.retry.backoff.ms``, at most
``controlled.shutdown.max.retries`` times, and then shuts down anyway, as Kafka does. If
ZooKeeper does not answer within the session timeout it gives up at once: no controller
could write the new leaders either.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from broker.zk_client import BrokerZkClient, ZkError
from proto.config.broker_config import BrokerConfig
from proto.transport.tls import TlsConfig, aio_channel
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc

__all__ = ["controlled_shutdown"]

logger = logging.getLogger(__name__)


async def controlled_shutdown(
    config: BrokerConfig, zk: BrokerZkClient, broker_epoch: int, tls: TlsConfig | None = None
) -> bool:
    """Ask the controller until it has moved every leadership off this broker; True if
    it did, False if the retries ran out (the broker then stops uncontrolled). ``tls``: the
    broker's certificate, which the controller checks names this broker."""
    attempts = config.controlled_shutdown_max_retries + 1
    timeout_s = config.request_timeout_ms / 1000
    # Past the session timeout ZooKeeper has expired the session: waiting longer for it
    # is pointless, and no controller can act without ZooKeeper either.
    zk_timeout_s = min(timeout_s, config.zookeeper_session_timeout_ms / 1000)
    for attempt in range(1, attempts + 1):
        outcome = await _attempt(config.broker_id, zk, broker_epoch, zk_timeout_s, timeout_s, tls)
        logger.info(
            "controlled shutdown event=controlled_shutdown_attempt broker=%d attempt=%d/%d "
            "outcome=%s",
            config.broker_id,
            attempt,
            attempts,
            outcome,
        )
        if outcome == "done":
            return True
        if outcome.startswith("zookeeper_unreachable"):
            break
        if attempt < attempts:
            await asyncio.sleep(config.controlled_shutdown_retry_backoff_ms / 1000)
    logger.warning(
        "controlled shutdown failed event=controlled_shutdown_failed broker=%d attempts=%d: "
        "shutting down without moving leadership first",
        config.broker_id,
        attempts,
    )
    return False


async def _attempt(
    broker_id: int,
    zk: BrokerZkClient,
    broker_epoch: int,
    zk_timeout_s: float,
    timeout_s: float,
    tls: TlsConfig | None,
) -> str:
    """One ControlledShutdown round trip; "done" or why not."""
    try:
        async with asyncio.timeout(zk_timeout_s):
            controller_id = await zk.get_controller_id()
        if controller_id is None:
            return "no_controller"
        async with asyncio.timeout(zk_timeout_s):
            address = await zk.get_broker_address(controller_id)
    except (ZkError, TimeoutError) as e:
        return f"zookeeper_unreachable:{type(e).__name__}"
    if address is None:
        return f"controller_{controller_id}_not_registered"
    host, port = address
    request = pb.ControlledShutdownRequest(broker_id=broker_id, broker_epoch=broker_epoch)
    try:
        async with aio_channel(f"{host}:{port}", tls) as channel:
            response = await pb_grpc.ControlStub(channel).ControlledShutdown(
                request, timeout=timeout_s
            )
    except grpc.aio.AioRpcError as e:
        return f"controller_{controller_id}_unreachable:{e.code().name}"
    if response.error_code != pb.NONE:
        return f"error:{pb.ErrorCode.Name(response.error_code)}:{response.error_message}"
    if response.remaining_partitions:
        remaining = ",".join(
            f"{p.topic_name}-{p.partition_index}" for p in response.remaining_partitions
        )
        return f"still_leads:{remaining}"
    return "done"
