"""Which control requests a broker believes, given what ZooKeeper holds."""

from __future__ import annotations

import pytest

from broker.replication.control_request_checks import (
    EPOCH_DURING_DELETE,
    NO_EPOCH,
    StopReplicaFacts,
    broker_epoch_refusal,
    controller_epoch_refusal,
    leader_and_isr_refusal,
    stop_replica_refusal,
    update_metadata_controller_refusal,
    update_metadata_endpoint_refusal,
    update_metadata_leader_refusal,
    update_metadata_replicas_refusal,
)
from proto.topic_partition import TopicPartition
from proto.wire.minibroker_pb2 import ErrorCode
from proto.zk.znodes import BrokerInfo, BrokerRegistration, PartitionState

TP = TopicPartition("t", 0)
STATE = PartitionState(leader=1, leader_epoch=5, isr=(1, 2, 3), controller_epoch=2, zk_version=7)


def test_unknown_broker_epoch_is_refused_unless_the_upgrade_setting_allows_it() -> None:
    refusal = broker_epoch_refusal(-1, 100, accept_unknown=False)
    assert refusal is not None
    assert refusal.code == ErrorCode.STALE_BROKER_EPOCH
    assert "control.request.unknown.broker.epoch.enable" in refusal.message
    assert broker_epoch_refusal(-1, 100, accept_unknown=True) is None


def test_broker_epoch_of_an_earlier_incarnation_is_stale_and_a_current_one_is_fine() -> None:
    stale = broker_epoch_refusal(99, 100, accept_unknown=True)
    assert stale is not None
    assert stale.code == ErrorCode.STALE_BROKER_EPOCH
    assert broker_epoch_refusal(100, 100, accept_unknown=False) is None
    assert broker_epoch_refusal(101, 100, accept_unknown=False) is None  # as Kafka


def test_controller_epoch_older_than_seen_is_stale() -> None:
    refusal = controller_epoch_refusal(3, 4, None)
    assert refusal is not None
    assert refusal.code == ErrorCode.STALE_CONTROLLER_EPOCH


def test_controller_epoch_beyond_zookeeper_is_never_adopted() -> None:
    refusal = controller_epoch_refusal(2**31 - 1, 4, 5)
    assert refusal is not None
    assert refusal.code == ErrorCode.STALE_CONTROLLER_EPOCH
    assert "/controller_epoch" in refusal.message
    assert controller_epoch_refusal(6, 4, None) is not None  # nobody was ever elected


def test_controller_epoch_up_to_zookeepers_is_adopted() -> None:
    assert controller_epoch_refusal(5, 4, 5) is None
    assert controller_epoch_refusal(4, 4, None) is None  # the same controller again


def test_leader_and_isr_beyond_the_state_znode_is_refused() -> None:
    refusal = leader_and_isr_refusal(TP, 2, 2**31 - 1, STATE)
    assert refusal is not None
    assert refusal.code == ErrorCode.INVALID_REQUEST
    assert "beyond" in refusal.message
    assert leader_and_isr_refusal(TP, 1, 6, STATE) is not None


def test_leader_and_isr_at_the_znodes_epoch_must_name_its_leader() -> None:
    refusal = leader_and_isr_refusal(TP, 2, 5, STATE)
    assert refusal is not None
    assert refusal.code == ErrorCode.INVALID_REQUEST
    assert leader_and_isr_refusal(TP, 1, 5, STATE) is None


def test_leader_and_isr_older_than_the_znode_is_left_to_the_epoch_fencing() -> None:
    # The controller has moved on already; the broker's own epoch check decides (Kafka).
    assert leader_and_isr_refusal(TP, 3, 4, STATE) is None


def test_leader_and_isr_without_state_znode_is_refused() -> None:
    refusal = leader_and_isr_refusal(TP, 1, 0, None)
    assert refusal is not None
    assert refusal.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def facts(
    assignment: tuple[int, ...] | None = (1, 2, 3),
    marked: bool = False,
    local: int | None = 5,
    state: PartitionState = STATE,
) -> StopReplicaFacts:
    return StopReplicaFacts(assignment, marked, state if assignment else None, local)


OUT_OF_ISR = PartitionState(leader=2, leader_epoch=5, isr=(2, 3), controller_epoch=2, zk_version=8)
"""Broker 1 after a controlled shutdown took it out of the ISR."""


@pytest.mark.parametrize("delete", [True, False])
def test_stop_replica_for_topic_deletion_needs_zookeeper_to_delete_the_topic(
    delete: bool,
) -> None:
    refusal = stop_replica_refusal(1, TP, EPOCH_DURING_DELETE, delete, facts())
    assert refusal is not None
    assert refusal.code == ErrorCode.INVALID_REQUEST
    assert stop_replica_refusal(1, TP, EPOCH_DURING_DELETE, delete, facts(marked=True)) is None
    assert stop_replica_refusal(1, TP, EPOCH_DURING_DELETE, delete, facts(None)) is None


def test_stop_replica_deletes_only_a_replica_zookeeper_no_longer_assigns_here() -> None:
    refusal = stop_replica_refusal(1, TP, 5, True, facts())
    assert refusal is not None
    assert "still assigns" in refusal.message
    assert stop_replica_refusal(1, TP, NO_EPOCH, True, facts()) is not None
    # Reassigned away ([1,2,3] -> [2,3,4]): the controller wrote the new assignment first.
    assert stop_replica_refusal(1, TP, 5, True, facts((2, 3, 4))) is None


def test_stop_replica_without_delete_follows_kip_570() -> None:
    older = stop_replica_refusal(1, TP, 4, False, facts(local=5, state=OUT_OF_ISR))
    assert older is not None
    assert older.code == ErrorCode.FENCED_LEADER_EPOCH
    assert stop_replica_refusal(1, TP, 5, False, facts(local=5, state=OUT_OF_ISR)) is None
    assert stop_replica_refusal(1, TP, 5, False, facts(local=4, state=OUT_OF_ISR)) is None
    assert stop_replica_refusal(1, TP, NO_EPOCH, False, facts(local=5, state=OUT_OF_ISR)) is None


@pytest.mark.parametrize(("broker", "role"), [(1, "leader"), (2, "in the ISR")])
def test_stop_replica_without_delete_of_a_replica_zookeeper_has_serving_is_refused(
    broker: int, role: str
) -> None:
    refusal = stop_replica_refusal(broker, TP, 5, False, facts())
    assert refusal is not None
    assert refusal.code == ErrorCode.INVALID_REQUEST
    assert f"ZooKeeper has broker {broker} {role}" in refusal.message
    # No leader (offline, its last ISR member kept): stopping harms nothing that serves.
    offline = PartitionState(leader=-1, leader_epoch=6, isr=(1,), controller_epoch=2, zk_version=9)
    assert stop_replica_refusal(1, TP, 6, False, facts(state=offline)) is None
    # Not assigned here (a reassignment moved it away): nothing to keep.
    assert stop_replica_refusal(2, TP, 5, False, facts(assignment=(1, 3, 4))) is None


def test_stop_replica_beyond_the_state_znode_is_refused() -> None:
    refusal = stop_replica_refusal(1, TP, 2**31 - 1, False, facts())
    assert refusal is not None
    assert refusal.code == ErrorCode.INVALID_REQUEST


def test_update_metadata_leader_is_believed_only_as_the_state_znode_names_it() -> None:
    def refused(leader: int, epoch: int, state: PartitionState | None, marked: bool = False) -> int:
        refusal = update_metadata_leader_refusal(
            TP, leader, epoch, state, marked_for_deletion=marked
        )
        return ErrorCode.NONE if refusal is None else refusal.code

    assert refused(1, 5, STATE) == ErrorCode.NONE
    assert refused(9, 5, STATE) == ErrorCode.INVALID_REQUEST  # broker 9 at the znode's epoch
    assert refused(9, 6, STATE) == ErrorCode.INVALID_REQUEST  # beyond the znode
    assert refused(1, 2**31 - 1, STATE) == ErrorCode.INVALID_REQUEST
    assert refused(9, 4, STATE) == ErrorCode.NONE  # late: the caller caches the znode's leader
    assert refused(1, 0, None) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_update_metadata_deletion_marker_needs_zookeeper_to_delete_the_topic() -> None:
    refusal = update_metadata_leader_refusal(TP, -2, 5, STATE, marked_for_deletion=False)
    assert refusal is not None
    assert refusal.code == ErrorCode.INVALID_REQUEST
    assert "/admin/delete_topics" in refusal.message
    assert update_metadata_leader_refusal(TP, -2, 5, STATE, marked_for_deletion=True) is None
    assert update_metadata_leader_refusal(TP, -2, 5, None, marked_for_deletion=False) is None


REGISTRATION = BrokerRegistration("b1.local", 9001, 0, kafka_endpoint=("b1.local", 9092))


@pytest.mark.parametrize(
    "endpoint",
    [
        BrokerInfo(1, "evil.example", 1, kafka_endpoint=("b1.local", 9092)),
        BrokerInfo(1, "b1.local", 9001, kafka_endpoint=("evil.example", 1)),
        BrokerInfo(1, "b1.local", 9002, kafka_endpoint=("b1.local", 9092)),
        BrokerInfo(1, "b1.local", 9001),  # the Kafka listener hidden
    ],
)
def test_update_metadata_endpoint_must_be_the_registrations(endpoint: BrokerInfo) -> None:
    refusal = update_metadata_endpoint_refusal(endpoint, REGISTRATION)
    assert refusal is not None
    assert refusal.code == ErrorCode.INVALID_REQUEST
    assert "b1.local:9001" in refusal.message  # names what ZooKeeper holds


def test_update_metadata_endpoint_of_the_registration_or_no_registration() -> None:
    same = BrokerInfo(1, "b1.local", 9001, kafka_endpoint=("b1.local", 9092))
    assert update_metadata_endpoint_refusal(same, REGISTRATION) is None
    unregistered = update_metadata_endpoint_refusal(BrokerInfo(9, "evil.example", 1), None)
    assert unregistered is not None
    assert "broker 9" in unregistered.message
    assert "not registered" in unregistered.message


def test_update_metadata_controller_is_believed_only_as_slash_controller_names_it() -> None:
    assert update_metadata_controller_refusal(2, 2) is None
    other = update_metadata_controller_refusal(3, 2)
    assert other is not None
    assert "/controller in ZooKeeper names broker 2" in other.message
    none = update_metadata_controller_refusal(3, None)
    assert none is not None
    assert "no controller" in none.message


@pytest.mark.parametrize(
    ("replicas", "offline", "fragment"),
    [
        ([1, 2, 3], [], None),
        ([1, 2, 3], [3], None),  # offline: the controller's to say (a failed log dir)
        ([1, 2, 3], [3, 9], "offline replicas [9] are not replicas of it"),
        ([1, 9], [], "ZooKeeper assigns [1, 2, 3]"),
        ([3, 2, 1], [], "ZooKeeper assigns [1, 2, 3]"),  # the order is the preference
    ],
)
def test_update_metadata_replicas_are_the_assignment_and_offline_among_them(
    replicas: list[int], offline: list[int], fragment: str | None
) -> None:
    refusal = update_metadata_replicas_refusal(TP, replicas, offline, [1, 2, 3])
    if fragment is None:
        assert refusal is None
    else:
        assert refusal is not None
        assert fragment in refusal.message
    unknown = update_metadata_replicas_refusal(TP, [1], [], None)
    assert unknown is not None
    assert unknown.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
