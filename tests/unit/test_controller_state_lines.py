"""The controller's state-change lines: one per partition for a small change, one line of
counts (the partitions' lines at DEBUG) for a large one, as Kafka logs them at TRACE."""

from __future__ import annotations

import logging

import pytest

from controller.kafka_controller import KafkaController
from proto.topic_partition import TopicPartition
from proto.zk.znodes import PartitionState


def _controller_with(changed: dict[TopicPartition, int]) -> KafkaController:
    controller = KafkaController(1, "127.0.0.1:1")
    for tp, leader in changed.items():
        controller._ctx.partition_states[tp] = PartitionState(leader, 7, (leader,), 3, 1)
    return controller


def _lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


def test_a_small_change_logs_each_partition_with_its_leader_and_epoch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    changed = {TopicPartition("t", p): 2 for p in range(3)}
    controller = _controller_with(changed)
    with caplog.at_level(logging.INFO):
        controller._log_states_changed(set(changed))
    info = _lines(caplog, logging.INFO)
    assert len(info) == 3
    assert all("event=partition_state_changed" in line for line in info)
    assert "partition=t-0 leader=2 leader_epoch=7" in info[0]


def test_a_large_change_is_one_line_of_counts_and_its_partitions_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    changed = {TopicPartition("t", p): 1 + p % 3 for p in range(150)}
    controller = _controller_with(changed)
    with caplog.at_level(logging.DEBUG):
        controller._log_states_changed(set(changed))
    (summary,) = _lines(caplog, logging.INFO)
    assert "event=partition_states_changed" in summary
    assert "partitions=150 leaders=[1:50,2:50,3:50]" in summary
    debug = [line for line in _lines(caplog, logging.DEBUG) if "partition_state_changed" in line]
    assert len(debug) == 150
