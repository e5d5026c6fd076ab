"""The consumer's bookkeeping without a cluster: positions and offset resets
(SubscriptionState), decoding fetched batches, config validation and API misuse."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from client.consumer import (
    Consumer,
    ConsumerConfig,
    SubscriptionState,
    records_from_fetch,
)
from client.metadata import BrokerConnections, ClientError
from proto.records.record_batch import Record, encode_batch
from proto.topic_partition import TopicPartition

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
T2 = TopicPartition("t", 2)


# -- SubscriptionState ---------------------------------------------------------------------


def test_new_partitions_wait_for_the_default_reset() -> None:
    state = SubscriptionState("earliest")
    state.assign([T1, T0])
    assert state.assigned() == [T0, T1]
    assert state.position(T0) is None
    assert state.pending_resets() == {T0: "earliest", T1: "earliest"}
    assert state.awaiting_committed() == [T0, T1]
    assert state.positions() == {}


def test_seek_overrides_a_pending_reset() -> None:
    state = SubscriptionState("latest")
    state.assign([T0, T1])
    state.seek(T0, 42)
    assert state.position(T0) == 42
    assert state.pending_resets() == {T1: "latest"}
    assert state.positions() == {T0: 42}


def test_seek_to_beginning_then_end_last_request_wins() -> None:
    state = SubscriptionState("latest")
    state.assign([T0])
    state.seek(T0, 7)
    state.request_reset(T0, "earliest")
    assert state.position(T0) is None
    assert state.pending_resets() == {T0: "earliest"}
    assert state.awaiting_committed() == []  # an explicit reset skips the committed offset
    state.request_reset(T0, "latest")
    assert state.pending_resets() == {T0: "latest"}


def test_out_of_range_resets_per_the_default_policy() -> None:
    state = SubscriptionState("earliest")
    state.assign([T0])
    state.seek(T0, 1_000_000)
    state.request_reset(T0)  # what the consumer does on OFFSET_OUT_OF_RANGE
    assert state.pending_resets() == {T0: "earliest"}


def test_a_reset_answer_applies_only_if_nothing_changed_meanwhile() -> None:
    state = SubscriptionState("latest")
    state.assign([T0, T1, T2])
    state.request_reset(T2, "earliest")
    assert state.complete_reset(T0, "latest", 10)
    assert state.position(T0) == 10
    state.seek(T1, 5)  # the application seeks while the ListOffsets is in flight
    assert not state.complete_reset(T1, "latest", 99)
    assert state.position(T1) == 5
    assert not state.complete_reset(T2, "latest", 99)  # asked for earliest since
    assert state.complete_reset(T2, "earliest", 3)
    assert not state.complete_reset(TopicPartition("t", 9), "latest", 1)  # unassigned


def test_reassignment_keeps_kept_positions_and_takes_given_ones() -> None:
    state = SubscriptionState("latest")
    state.assign([T0, T1])
    state.seek(T0, 10)
    state.seek(T1, 20)
    state.assign([T1, T2], {T2: 7})
    assert state.assigned() == [T1, T2]
    assert state.positions() == {T1: 20, T2: 7}
    with pytest.raises(KeyError):
        state.position(T0)
    state.assign([T0])
    assert state.position(T0) is None  # dropped before: its old position is forgotten


def test_committed_offsets_start_a_group_assignment() -> None:
    state = SubscriptionState("earliest")
    state.assign([])
    state.assign([T0, T1], {T0: 100, T1: None})
    assert state.positions() == {T0: 100}
    assert state.pending_resets() == {T1: "earliest"}


def test_seek_checks_its_arguments() -> None:
    state = SubscriptionState()
    state.assign([T0])
    with pytest.raises(KeyError):
        state.seek(T1, 0)
    with pytest.raises(ValueError, match="offset must be >= 0"):
        state.seek(T0, -1)
    with pytest.raises(KeyError):
        state.request_reset(T1)
    with pytest.raises(ValueError, match="unknown offset reset policy"):
        SubscriptionState("smallest")


# -- records_from_fetch --------------------------------------------------------------------


def batch(base_offset: int, values: list[bytes], *, timestamp: int = 1000) -> bytes:
    return encode_batch(
        [Record(key=b"k" + v, value=v, timestamp=timestamp + i) for i, v in enumerate(values)],
        base_offset=base_offset,
    )


def test_records_before_the_fetch_offset_inside_a_batch_are_skipped() -> None:
    data = batch(10, [b"a", b"b", b"c"]) + batch(13, [b"d", b"e"])
    records, next_offset = records_from_fetch(T0, 11, data)
    assert [(r.offset, r.value) for r in records] == [
        (11, b"b"),
        (12, b"c"),
        (13, b"d"),
        (14, b"e"),
    ]
    assert next_offset == 15
    first = records[0]
    assert (first.topic, first.partition, first.key, first.timestamp) == ("t", 0, b"kb", 1001)
    assert first.tp == T0


def test_batches_wholly_before_the_fetch_offset_are_skipped() -> None:
    data = batch(0, [b"old"]) + batch(1, [b"new"])
    records, next_offset = records_from_fetch(T0, 1, data)
    assert [r.value for r in records] == [b"new"]
    assert next_offset == 2


def test_no_data_leaves_the_offset_where_it_was() -> None:
    assert records_from_fetch(T0, 5, b"") == ([], 5)


def test_a_partial_batch_at_the_end_is_left_for_the_next_fetch() -> None:
    whole = batch(0, [b"a"])
    records, next_offset = records_from_fetch(T0, 0, whole + batch(1, [b"b"])[:30])
    assert [r.value for r in records] == [b"a"]
    assert next_offset == 1


def test_a_corrupt_batch_raises() -> None:
    data = bytearray(batch(0, [b"a", b"b"]))
    data[-1] ^= 0xFF
    with pytest.raises(ValueError, match="CRC mismatch"):
        records_from_fetch(T0, 0, bytes(data))


# -- config and API misuse -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"auto_offset_reset": "smallest"}, "auto_offset_reset must be one of"),
        ({"group_id": "bad/group"}, "illegal group name"),
        ({"group_id": ""}, "group name is empty"),
        ({"max_poll_records": 0}, "max_poll_records must be positive"),
        ({"fetch_max_wait_ms": -1}, "fetch_max_wait_ms must be >= 0"),
    ],
)
def test_config_refuses_what_kafka_refuses(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ClientError, match=message):
        ConsumerConfig(**kwargs)  # type: ignore[arg-type]


def run_with_consumer(
    config: ConsumerConfig, zk: str | None, body: Callable[[Consumer], None]
) -> None:
    """Run ``body`` on a consumer of an unreachable cluster (it must not need one)."""

    async def main() -> None:
        async with (
            BrokerConnections([("127.0.0.1", 1)]) as connections,
            Consumer(connections, config, zookeeper_connect=zk) as consumer,
        ):
            body(consumer)

    asyncio.run(main())


def test_subscribe_needs_a_group_and_zookeeper() -> None:
    def without_group(consumer: Consumer) -> None:
        with pytest.raises(ClientError, match="needs a group"):
            consumer.subscribe(["t"])

    def without_zookeeper(consumer: Consumer) -> None:
        with pytest.raises(ClientError, match="needs ZooKeeper"):
            consumer.subscribe(["t"])

    run_with_consumer(ConsumerConfig(), "127.0.0.1:2181", without_group)
    run_with_consumer(ConsumerConfig(group_id="g"), None, without_zookeeper)


def test_assign_and_subscribe_exclude_each_other_and_names_are_checked() -> None:
    def body(consumer: Consumer) -> None:
        with pytest.raises(ClientError, match="illegal topic name"):
            consumer.assign([TopicPartition("a b", 0)])
        with pytest.raises(ClientError, match="illegal topic name"):
            consumer.subscribe(["a:b"])
        consumer.assign([T0])
        with pytest.raises(ClientError, match="cannot follow assign"):
            consumer.subscribe(["t"])
        assert consumer.assignment() == {T0}

    run_with_consumer(ConsumerConfig(group_id="g"), "127.0.0.1:2181", body)


def test_seek_needs_an_assigned_partition() -> None:
    def body(consumer: Consumer) -> None:
        consumer.assign([T0])
        consumer.seek(T0, 3)
        with pytest.raises(ClientError, match="not assigned"):
            consumer.seek(T1, 3)
        with pytest.raises(ClientError, match="not assigned"):
            consumer.seek_to_beginning([T1])
        with pytest.raises(ClientError, match="offset must be >= 0"):
            consumer.seek(T0, -5)

    run_with_consumer(ConsumerConfig(), None, body)


def test_poll_without_partitions_and_after_close() -> None:
    async def main() -> None:
        async with BrokerConnections([("127.0.0.1", 1)]) as connections:
            consumer = Consumer(connections)
            with pytest.raises(ClientError, match="call subscribe\\(\\) or assign\\(\\)"):
                await consumer.poll(0)
            await consumer.close()
            await consumer.close()  # idempotent
            with pytest.raises(ClientError, match="closed"):
                await consumer.poll(0)

    asyncio.run(main())


def test_an_unreachable_cluster_is_reported_on_first_contact() -> None:
    async def main() -> None:
        async with (
            BrokerConnections([("127.0.0.1", 1)], request_timeout_s=1) as connections,
            Consumer(connections) as consumer,
        ):
            consumer.assign([T0])
            with pytest.raises(ClientError, match="cannot reach any broker"):
                await consumer.poll(100)

    asyncio.run(main())
