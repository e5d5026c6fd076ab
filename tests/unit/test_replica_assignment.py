"""replica_assignment: the design notes' placement rule (docs/replication.md) and its errors."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proto.errors import BrokerResponseError
from proto.replica_assignment import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    assign_new_partitions,
    assign_replicas,
    check_replica_list,
    validate_replica_assignment,
)
from proto.wire.minibroker_pb2 import ErrorCode

# -- assign_replicas -------------------------------------------------------------------------


def test_partition_i_starts_at_broker_i_mod_n() -> None:
    assert assign_replicas(5, 3, [1, 2, 3]) == {
        0: [1, 2, 3],
        1: [2, 3, 1],
        2: [3, 1, 2],
        3: [1, 2, 3],
        4: [2, 3, 1],
    }


def test_brokers_are_sorted_and_deduplicated_first() -> None:
    # The rule is over the *sorted* broker list, whatever order ZooKeeper lists them in.
    assert assign_replicas(3, 2, [30, 10, 20, 10]) == {0: [10, 20], 1: [20, 30], 2: [30, 10]}


def test_non_contiguous_broker_ids() -> None:
    assert assign_replicas(4, 1, [7, 2, 5]) == {0: [2], 1: [5], 2: [7], 3: [2]}


def test_replication_factor_equal_to_broker_count() -> None:
    assignment = assign_replicas(3, 3, [0, 1, 2])
    assert all(sorted(replicas) == [0, 1, 2] for replicas in assignment.values())


def test_replication_factor_larger_than_brokers_is_refused() -> None:
    with pytest.raises(
        InvalidReplicationFactorError, match="replication factor 4 larger than available brokers 3"
    ) as info:
        assign_replicas(1, 4, [1, 2, 3])
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, BrokerResponseError)
    assert info.value.code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_no_live_brokers() -> None:
    with pytest.raises(InvalidReplicationFactorError, match="larger than available brokers 0"):
        assign_replicas(1, 1, [])


@pytest.mark.parametrize("partitions", [0, -1])
def test_fewer_than_one_partition_is_refused(partitions: int) -> None:
    with pytest.raises(InvalidPartitionsError, match="must be larger than 0") as info:
        assign_replicas(partitions, 1, [1])
    assert info.value.code == ErrorCode.INVALID_PARTITIONS
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("rf", [0, -2])
def test_replication_factor_below_one_is_refused(rf: int) -> None:
    with pytest.raises(InvalidReplicationFactorError, match="must be larger than 0"):
        assign_replicas(1, rf, [1, 2])


brokers_st = st.sets(st.integers(min_value=0, max_value=1000), min_size=1, max_size=12)


@given(data=st.data(), brokers=brokers_st, partitions=st.integers(min_value=1, max_value=60))
def test_every_partition_gets_rf_distinct_live_brokers(
    data: st.DataObject, brokers: set[int], partitions: int
) -> None:
    rf = data.draw(st.integers(min_value=1, max_value=len(brokers)))
    assignment = assign_replicas(partitions, rf, list(brokers))
    assert sorted(assignment) == list(range(partitions))
    for replicas in assignment.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= brokers
    # A valid assignment by the validator's rules too.
    assert validate_replica_assignment(assignment, brokers) == assignment


@given(data=st.data(), brokers=brokers_st, partitions=st.integers(min_value=1, max_value=60))
def test_preferred_leaders_and_replicas_spread_evenly(
    data: st.DataObject, brokers: set[int], partitions: int
) -> None:
    rf = data.draw(st.integers(min_value=1, max_value=len(brokers)))
    n = len(brokers)
    assignment = assign_replicas(partitions, rf, list(brokers))
    leaders = Counter(replicas[0] for replicas in assignment.values())
    counts = [leaders.get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1
    assert set(counts) <= {partitions // n, -(-partitions // n)}
    replicas_per_broker = Counter(b for replicas in assignment.values() for b in replicas)
    held = [replicas_per_broker.get(b, 0) for b in brokers]
    assert max(held) - min(held) <= rf
    if partitions % n == 0:
        assert set(counts) == {partitions // n}
        assert set(held) == {partitions * rf // n}


@given(data=st.data(), brokers=brokers_st, partitions=st.integers(min_value=1, max_value=30))
def test_replica_j_of_partition_i_is_broker_i_plus_j_mod_n(
    data: st.DataObject, brokers: set[int], partitions: int
) -> None:
    rf = data.draw(st.integers(min_value=1, max_value=len(brokers)))
    ordered = sorted(brokers)
    assignment = assign_replicas(partitions, rf, list(brokers))
    for i, replicas in assignment.items():
        for j, broker in enumerate(replicas):
            assert broker == ordered[(i + j) % len(ordered)]


# -- validate_replica_assignment -------------------------------------------------------------


def test_valid_assignment_is_returned_in_partition_order() -> None:
    assert validate_replica_assignment({1: (2, 3), 0: [3, 1]}, {1, 2, 3}) == {
        0: [3, 1],
        1: [2, 3],
    }


def test_duplicate_replica_is_refused() -> None:
    with pytest.raises(InvalidReplicaAssignmentError, match=r"names broker\(s\) 2 more than once"):
        validate_replica_assignment({0: [1, 2], 1: [2, 2]}, {1, 2})


def test_different_replication_factors_are_refused() -> None:
    with pytest.raises(InvalidReplicaAssignmentError, match="same number of replicas") as info:
        validate_replica_assignment({0: [1, 2], 1: [1]}, {1, 2})
    assert info.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT


@pytest.mark.parametrize("partitions", [[1, 2], [0, 2], [0, 1, 3]])
def test_partitions_must_be_contiguous_from_zero(partitions: list[int]) -> None:
    with pytest.raises(InvalidPartitionsError, match="consecutive from 0"):
        validate_replica_assignment({p: [1] for p in partitions}, {1})


def test_empty_assignment_is_refused() -> None:
    with pytest.raises(InvalidPartitionsError, match="no partitions"):
        validate_replica_assignment({}, {1})


def test_empty_replica_list_is_refused() -> None:
    with pytest.raises(InvalidReplicaAssignmentError, match="partition 0 is empty"):
        validate_replica_assignment({0: []}, {1})


def test_unknown_broker_is_refused() -> None:
    with pytest.raises(InvalidReplicaAssignmentError, match=r"broker\(s\) 9 that are not live"):
        validate_replica_assignment({0: [1, 9]}, {1, 2})


def test_negative_broker_id_is_refused() -> None:
    with pytest.raises(InvalidReplicaAssignmentError, match="invalid broker id"):
        check_replica_list([1, -1], "target")


def test_error_message_carries_the_kafka_code_name() -> None:
    err = InvalidReplicationFactorError("replication factor 4 larger than available brokers 3")
    assert str(err) == (
        "INVALID_REPLICATION_FACTOR: replication factor 4 larger than available brokers 3"
    )


# -- assign_new_partitions (topics alter --partitions) ---------------------------------------


@given(
    st.integers(min_value=1, max_value=20),
    st.integers(min_value=1, max_value=20),
    st.integers(min_value=1, max_value=5),
    st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=6, unique=True),
)
def test_grown_topic_is_placed_as_if_created_with_the_new_count(
    current: int, added: int, rf: int, brokers: list[int]
) -> None:
    rf = min(rf, len(brokers))
    existing = assign_replicas(current, rf, brokers)
    new = assign_new_partitions("t", existing, current + added, brokers)
    assert {**existing, **new} == assign_replicas(current + added, rf, brokers)
    assert sorted(new) == list(range(current, current + added))


def test_adding_partitions_continues_the_round_robin() -> None:
    existing = {0: [1, 2], 1: [2, 3], 2: [3, 1]}
    assert assign_new_partitions("t", existing, 5, [1, 2, 3]) == {3: [1, 2], 4: [2, 3]}


@pytest.mark.parametrize("total", [3, 2, 0])
def test_fewer_or_as_many_partitions_are_refused_with_kafkas_message(total: int) -> None:
    wanted = (
        "INVALID_PARTITIONS: The number of partitions for a topic can only be increased. "
        f"Topic orders currently has 3 partitions, {total} would not be an increase."
    )
    with pytest.raises(InvalidPartitionsError) as refused:
        assign_new_partitions("orders", {0: [1], 1: [2], 2: [3]}, total, [1, 2, 3])
    assert str(refused.value) == wanted


def test_adding_partitions_needs_as_many_live_brokers_as_the_replication_factor() -> None:
    with pytest.raises(InvalidReplicationFactorError, match="larger than available brokers 2"):
        assign_new_partitions("t", {0: [1, 2, 3]}, 2, [1, 2])


def test_given_assignments_for_new_partitions_are_used_in_partition_order() -> None:
    added = assign_new_partitions("t", {0: [1, 2]}, 3, [1, 2, 3], [[3, 1], [2, 3]])
    assert added == {1: [3, 1], 2: [2, 3]}


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ([[1, 9]], "Unknown broker(s) in replica assignment: 9."),
        ([[1, 2], [2, 3]], "Increasing the number of partitions by 1 but 2 assignments provided."),
        ([[1, 1]], "names broker(s) 1 more than once"),
        ([[1]], "partition 0 has 2 while partition 1 has 1"),
        ([[]], "replica list of partition 1 is empty"),
    ],
)
def test_given_assignments_are_refused_as_kafka_refuses_them(
    given: list[list[int]], message: str
) -> None:
    """CreatePartitions' ``assignments`` (Kafka's ``ZkAdminManager.createPartitions`` and
    ``AdminZkClient.validateReplicaAssignment``): INVALID_REPLICA_ASSIGNMENT each time."""
    with pytest.raises(InvalidReplicaAssignmentError) as refused:
        assign_new_partitions("t", {0: [1, 2]}, 2, [1, 2, 3], given)
    assert refused.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert message in str(refused.value)
