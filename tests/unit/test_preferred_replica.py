"""preferred_replica: Kafka's leader.imbalance.per.broker.percentage check."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.leader_election import preferred_replica_leader_election
from controller.preferred_replica import (
    DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE,
    BrokerLeaderImbalance,
    leader_imbalance,
    partitions_to_rebalance,
)
from proto.replica_assignment import assign_replicas
from proto.topic_partition import TopicPartition
from proto.zk.znodes import LEADER_NONE, PartitionStateData


def tp(partition: int, topic: str = "t") -> TopicPartition:
    return TopicPartition(topic, partition)


def led_by(leader: int, isr: tuple[int, ...] = (1, 2, 3)) -> PartitionStateData:
    return PartitionStateData(leader, 1, isr, 1)


def test_default_percentage_is_kafkas() -> None:
    assert DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE == 10


def test_balanced_cluster_needs_nothing() -> None:
    assignments = {tp(p): r for p, r in assign_replicas(6, 3, [1, 2, 3]).items()}
    states = {t: led_by(r[0]) for t, r in assignments.items()}
    assert partitions_to_rebalance(assignments, states, {1, 2, 3}) == []
    assert all(i.ratio == 0 for i in leader_imbalance(assignments, states).values())


def test_rolling_restart_leaves_broker_without_leadership() -> None:
    """Broker 1 restarted: its partitions moved to 2 and stay there until the check."""
    assignments = {tp(p): r for p, r in assign_replicas(6, 3, [1, 2, 3]).items()}
    states = {t: led_by(2 if r[0] == 1 else r[0]) for t, r in assignments.items()}
    imbalance = leader_imbalance(assignments, states)
    assert imbalance[1] == BrokerLeaderImbalance(1, (tp(0), tp(3)), (tp(0), tp(3)))
    assert imbalance[1].ratio == 1.0
    assert imbalance[2].ratio == 0.0
    assert partitions_to_rebalance(assignments, states, {1, 2, 3}) == [tp(0), tp(3)]


def ten_partitions_preferring_broker_1(
    not_led: int,
) -> tuple[dict[TopicPartition, list[int]], dict[TopicPartition, PartitionStateData]]:
    assignments = {tp(p): [1, 2] for p in range(10)}
    states = {tp(p): led_by(2 if p < not_led else 1, (1, 2)) for p in range(10)}
    return assignments, states


def test_exactly_at_the_threshold_does_not_trigger() -> None:
    # 1 of 10 is 10 %: Kafka's test is strictly greater than.
    assignments, states = ten_partitions_preferring_broker_1(1)
    assert leader_imbalance(assignments, states)[1].ratio == pytest.approx(0.1)
    assert partitions_to_rebalance(assignments, states, {1, 2}, 10) == []


def test_above_the_threshold_triggers_all_of_the_brokers_partitions() -> None:
    assignments, states = ten_partitions_preferring_broker_1(2)
    assert partitions_to_rebalance(assignments, states, {1, 2}, 10) == [tp(0), tp(1)]
    # A higher percentage tolerates it.
    assert partitions_to_rebalance(assignments, states, {1, 2}, 20) == []
    assert partitions_to_rebalance(assignments, states, {1, 2}, 19) == [tp(0), tp(1)]


def test_zero_percentage_rebalances_any_drift() -> None:
    assignments, states = ten_partitions_preferring_broker_1(1)
    assert partitions_to_rebalance(assignments, states, {1, 2}, 0) == [tp(0)]


def test_leaderless_partition_counts_as_not_led() -> None:
    assignments = {tp(0): [1, 2], tp(1): [1, 2]}
    states = {tp(0): led_by(LEADER_NONE, (1,)), tp(1): led_by(1, (1, 2))}
    assert leader_imbalance(assignments, states)[1].not_led == (tp(0),)
    # Broker 1 is in the ISR and live: the preferred election can revive the partition.
    assert partitions_to_rebalance(assignments, states, {1, 2}) == [tp(0)]


def test_partition_without_state_counts_only_in_the_denominator() -> None:
    assignments = {tp(0): [1, 2], tp(1): [1, 2]}
    imbalance = leader_imbalance(assignments, {tp(0): led_by(2)})
    assert imbalance[1] == BrokerLeaderImbalance(1, (tp(0), tp(1)), (tp(0),))
    assert imbalance[1].ratio == 0.5


def test_only_partitions_whose_preferred_replica_can_lead_are_returned() -> None:
    assignments = {tp(0): [1, 2], tp(1): [1, 2], tp(2): [1, 2]}
    states = {
        tp(0): led_by(2, (1, 2)),  # eligible
        tp(1): led_by(2, (2,)),  # broker 1 is behind: not in the ISR
        tp(2): led_by(1, (1, 2)),
    }
    assert partitions_to_rebalance(assignments, states, {1, 2}) == [tp(0)]
    # Broker 1 down: nothing it could take back.
    assert partitions_to_rebalance(assignments, states, {2}) == []


def test_imbalance_is_per_broker() -> None:
    # Broker 1: 1 of 20 not led (5 %, fine). Broker 2: 1 of 2 not led (50 %).
    assignments = {tp(p): [1, 2] for p in range(20)} | {tp(p, "u"): [2, 1] for p in range(2)}
    states = {t: led_by(1, (1, 2)) for t in assignments}
    states[tp(0)] = led_by(2, (1, 2))
    assert partitions_to_rebalance(assignments, states, {1, 2}) == [tp(0, "u"), tp(1, "u")]


def test_topics_being_deleted_and_running_reassignments_are_left_alone() -> None:
    assignments = {tp(0): [1, 2], tp(0, "gone"): [1, 2]}
    states = {t: led_by(2, (1, 2)) for t in assignments}
    assert partitions_to_rebalance(assignments, states, {1, 2}, topics_being_deleted={"gone"}) == [
        tp(0)
    ]
    assert partitions_to_rebalance(assignments, states, {1, 2}, reassignment_in_progress=True) == []


def test_negative_percentage_is_refused() -> None:
    with pytest.raises(ValueError, match="percentage"):
        partitions_to_rebalance({}, {}, set(), -1)


@st.composite
def clusters(
    draw: st.DrawFn,
) -> tuple[dict[TopicPartition, list[int]], dict[TopicPartition, PartitionStateData], set[int]]:
    brokers = list(range(draw(st.integers(min_value=1, max_value=5))))
    rf = draw(st.integers(min_value=1, max_value=len(brokers)))
    raw = assign_replicas(draw(st.integers(min_value=1, max_value=30)), rf, brokers)
    assignments = {tp(p): r for p, r in raw.items()}
    states = {}
    for t, replicas in assignments.items():
        isr = tuple(draw(st.sets(st.sampled_from(replicas), min_size=1)))
        leader = draw(st.sampled_from([*isr, LEADER_NONE]))
        states[t] = PartitionStateData(leader, 0, isr, 1)
    live = draw(st.sets(st.sampled_from(brokers)))
    return assignments, states, live


@given(cluster=clusters(), percentage=st.integers(min_value=0, max_value=100))
def test_every_returned_partition_is_imbalanced_and_electable(
    cluster: tuple[
        dict[TopicPartition, list[int]], dict[TopicPartition, PartitionStateData], set[int]
    ],
    percentage: int,
) -> None:
    assignments, states, live = cluster
    chosen = partitions_to_rebalance(assignments, states, live, percentage)
    imbalance = leader_imbalance(assignments, states)
    assert chosen == sorted(set(chosen))
    for t in chosen:
        preferred = assignments[t][0]
        assert states[t].leader != preferred
        assert imbalance[preferred].exceeds(percentage)
        assert imbalance[preferred].ratio > percentage / 100
        result = preferred_replica_leader_election(assignments[t], states[t].isr, live)
        assert result.leader == preferred
    # And nothing electable was left out on a broker above the threshold.
    for broker, info in imbalance.items():
        if info.exceeds(percentage):
            for t in info.not_led:
                if broker in live and broker in states[t].isr:
                    assert t in chosen
