"""The controller believes a ControlledShutdown only at the broker's registered epoch: -1
(unknown) and any other epoch would let anyone move every leadership off a broker."""

from __future__ import annotations

import asyncio
import logging

import pytest

from controller.kafka_controller import KafkaController, _ControlledShutdown
from controller.request_batch import LiveBroker
from proto.errors import BrokerResponseError
from proto.topic_partition import TopicPartition
from proto.wire.minibroker_pb2 import ErrorCode

REGISTERED_EPOCH = 4242


@pytest.mark.parametrize(
    "broker_epoch", [-1, 0, REGISTERED_EPOCH - 1, REGISTERED_EPOCH + 1, 2**63 - 1]
)
def test_controlled_shutdown_at_any_other_epoch_is_refused_with_one_log_line(
    broker_epoch: int, caplog: pytest.LogCaptureFixture
) -> None:
    async def run() -> None:
        controller = KafkaController(1, "127.0.0.1:1")
        controller._ctx.live_brokers[2] = LiveBroker(2, "localhost", 9092, epoch=REGISTERED_EPOCH)
        reply: asyncio.Future[list[TopicPartition]] = asyncio.get_running_loop().create_future()
        with caplog.at_level(logging.WARNING):
            await controller._on_controlled_shutdown(_ControlledShutdown(2, broker_epoch, reply))
        with pytest.raises(BrokerResponseError) as refused:
            reply.result()
        assert refused.value.code == ErrorCode.STALE_BROKER_EPOCH
        assert str(REGISTERED_EPOCH) in str(refused.value)
        assert controller._ctx.shutting_down_brokers == set()

    asyncio.run(run())
    lines = [
        r.getMessage() for r in caplog.records if "refused_controlled_shutdown" in r.getMessage()
    ]
    assert len(lines) == 1
    assert f"broker_epoch={broker_epoch}" in lines[0]
    assert f"registered_epoch={REGISTERED_EPOCH}" in lines[0]
