"""ControllerBrokerRequestBatch: the exact requests built for each broker, and their order."""

from __future__ import annotations

from collections.abc import Iterable

from controller.request_batch import (
    ALL_LIVE_BROKERS,
    EPOCH_DURING_DELETE,
    LEADER_DURING_DELETE,
    BrokerRequest,
    ControllerBrokerRequestBatch,
    LiveBroker,
    PartitionLeadership,
    request_kind,
)
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.zk.znodes import PartitionState

CONTROLLER_ID, CONTROLLER_EPOCH = 9, 8
TP0, TP1, TP2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


def live(*ids: int) -> dict[int, LiveBroker]:
    return {i: LiveBroker(i, f"h{i}", 9000 + i, epoch=100 + i) for i in ids}


LIVE = live(1, 2, 3)


def state(leader: int, isr: Iterable[int], *, epoch: int = 3, zk: int = 4) -> PartitionState:
    return PartitionState(leader, epoch, tuple(isr), controller_epoch=7, zk_version=zk)


def endpoint(i: int) -> pb.BrokerEndpoint:
    return pb.BrokerEndpoint(node_id=i, host=f"h{i}", port=9000 + i)


def lai_state(
    tp: TopicPartition, s: PartitionState, replicas: list[int], is_new: bool = False
) -> pb.LeaderAndIsrPartitionState:
    return pb.LeaderAndIsrPartitionState(
        topic_name=tp.topic,
        partition_index=tp.partition,
        controller_epoch=s.controller_epoch,
        leader=s.leader,
        leader_epoch=s.leader_epoch,
        isr=s.isr,
        zk_version=s.zk_version,
        replicas=replicas,
        is_new=is_new,
    )


def um_state(
    tp: TopicPartition, s: PartitionState, replicas: list[int], offline: Iterable[int] = ()
) -> pb.UpdateMetadataPartitionState:
    return pb.UpdateMetadataPartitionState(
        topic_name=tp.topic,
        partition_index=tp.partition,
        controller_epoch=s.controller_epoch,
        leader=s.leader,
        leader_epoch=s.leader_epoch,
        isr=s.isr,
        zk_version=s.zk_version,
        replicas=replicas,
        offline_replicas=offline,
    )


def lai(
    broker: int, states: list[pb.LeaderAndIsrPartitionState], leaders: Iterable[int]
) -> BrokerRequest:
    return BrokerRequest(
        broker,
        pb.LeaderAndIsrRequest(
            controller_id=CONTROLLER_ID,
            controller_epoch=CONTROLLER_EPOCH,
            broker_epoch=100 + broker,
            partition_states=states,
            live_leaders=[endpoint(i) for i in leaders],
        ),
    )


def um(
    broker: int, states: list[pb.UpdateMetadataPartitionState], brokers: Iterable[int] = (1, 2, 3)
) -> BrokerRequest:
    return BrokerRequest(
        broker,
        pb.UpdateMetadataRequest(
            controller_id=CONTROLLER_ID,
            controller_epoch=CONTROLLER_EPOCH,
            broker_epoch=100 + broker,
            partition_states=states,
            live_brokers=[endpoint(i) for i in brokers],
        ),
    )


def build(
    batch: ControllerBrokerRequestBatch, brokers: dict[int, LiveBroker] = LIVE
) -> list[BrokerRequest]:
    return batch.build(CONTROLLER_ID, CONTROLLER_EPOCH, brokers)


def test_new_partition_leader_and_isr_to_replicas_then_update_metadata_to_all() -> None:
    batch = ControllerBrokerRequestBatch()
    s = state(1, [1, 2], epoch=0, zk=0)
    batch.add_leader_and_isr([1, 2], TP0, s, [1, 2], is_new=True)
    new = [lai_state(TP0, s, [1, 2], is_new=True)]
    metadata = [um_state(TP0, s, [1, 2])]
    assert build(batch) == [
        lai(1, new, leaders=[1]),
        lai(2, new, leaders=[1]),
        um(1, metadata),
        um(2, metadata),
        um(3, metadata),  # not a replica, but clients may ask it where the leader is
    ]


def test_one_leader_and_isr_per_broker_with_only_its_partitions_and_their_leaders() -> None:
    batch = ControllerBrokerRequestBatch()
    s0, s1, s2 = state(1, [1, 2]), state(2, [2, 3]), state(3, [3, 1])
    batch.add_leader_and_isr([1, 2], TP0, s0, [1, 2])
    batch.add_leader_and_isr([2, 3], TP1, s1, [2, 3])
    batch.add_leader_and_isr([3, 1], TP2, s2, [3, 1])
    requests = build(batch)
    assert requests[:3] == [
        lai(1, [lai_state(TP0, s0, [1, 2]), lai_state(TP2, s2, [3, 1])], leaders=[1, 3]),
        lai(2, [lai_state(TP0, s0, [1, 2]), lai_state(TP1, s1, [2, 3])], leaders=[1, 2]),
        lai(3, [lai_state(TP1, s1, [2, 3]), lai_state(TP2, s2, [3, 1])], leaders=[2, 3]),
    ]
    metadata = [um_state(TP0, s0, [1, 2]), um_state(TP1, s1, [2, 3]), um_state(TP2, s2, [3, 1])]
    assert requests[3:] == [um(1, metadata), um(2, metadata), um(3, metadata)]


def test_dead_brokers_get_nothing_are_not_named_and_are_offline_replicas() -> None:
    batch = ControllerBrokerRequestBatch()
    # Broker 3 died: partition 0 keeps leader 1; partition 1 lost its only ISR member.
    s0, s1 = state(1, [1, 2]), state(-1, [3])
    batch.add_leader_and_isr([1, 2, 3], TP0, s0, [1, 2, 3])
    batch.add_leader_and_isr([2, 3], TP1, s1, [3, 2])
    alive = live(1, 2)
    assert build(batch, alive) == [
        lai(1, [lai_state(TP0, s0, [1, 2, 3])], leaders=[1]),
        lai(2, [lai_state(TP0, s0, [1, 2, 3]), lai_state(TP1, s1, [3, 2])], leaders=[1]),
        *(
            um(
                b,
                [um_state(TP0, s0, [1, 2, 3], offline=[3]), um_state(TP1, s1, [3, 2], [3])],
                brokers=[1, 2],
            )
            for b in (1, 2)
        ),
    ]


def test_leader_not_live_is_not_named_in_live_leaders() -> None:
    batch = ControllerBrokerRequestBatch()
    s = state(3, [3, 1])  # the znode still names 3, which ZooKeeper no longer lists
    batch.add_leader_and_isr([1], TP0, s, [3, 1])
    request = build(batch, live(1, 2))[0]
    assert request == lai(1, [lai_state(TP0, s, [3, 1])], leaders=[])


def test_update_metadata_without_partitions_carries_the_live_brokers() -> None:
    batch = ControllerBrokerRequestBatch()
    batch.add_update_metadata([1, 2, 4])  # 4 is not live: dropped
    assert build(batch) == [um(1, []), um(2, [])]


def test_update_metadata_recipients_get_the_partitions_named_for_them() -> None:
    batch = ControllerBrokerRequestBatch()
    s0, s1, s2 = state(1, [1]), state(2, [2]), state(3, [3])
    batch.add_update_metadata([1], {TP0: PartitionLeadership(s0, [1])})
    batch.add_update_metadata([1, 2], {TP1: PartitionLeadership(s1, [2])})
    batch.add_update_metadata(ALL_LIVE_BROKERS, {TP2: PartitionLeadership(s2, [3])})
    assert build(batch) == [
        um(1, [um_state(TP0, s0, [1]), um_state(TP1, s1, [2]), um_state(TP2, s2, [3])]),
        um(2, [um_state(TP1, s1, [2]), um_state(TP2, s2, [3])]),
        um(3, [um_state(TP2, s2, [3])]),
    ]


def test_topic_being_deleted_goes_out_with_leader_during_delete() -> None:
    batch = ControllerBrokerRequestBatch()
    s = state(1, [1, 2])
    batch.add_update_metadata(
        ALL_LIVE_BROKERS, {TP0: PartitionLeadership(s, [1, 2])}, deleting=True
    )
    deleted = um_state(TP0, s, [1, 2])
    deleted.leader = LEADER_DURING_DELETE
    assert LEADER_DURING_DELETE == -2
    assert build(batch) == [um(1, [deleted]), um(2, [deleted]), um(3, [deleted])]


def test_stop_replica_last_and_delete_stays_set() -> None:
    batch = ControllerBrokerRequestBatch()
    s = state(2, [2])
    batch.add_stop_replica([1], TP0, delete=True, leader_epoch=EPOCH_DURING_DELETE)
    batch.add_stop_replica([1, 3], TP0, delete=False, leader_epoch=4)
    batch.add_stop_replica([1], TP1, delete=False, leader_epoch=5)
    batch.add_leader_and_isr([2], TP1, s, [2, 1])
    requests = build(batch)
    assert [(r.broker_id, request_kind(r.request)) for r in requests] == [
        (2, "LeaderAndIsr"),
        (1, "UpdateMetadata"),
        (2, "UpdateMetadata"),
        (3, "UpdateMetadata"),
        (1, "StopReplica"),
        (3, "StopReplica"),
    ]

    def stop(tp: TopicPartition, epoch: int, delete: bool) -> pb.StopReplicaPartitionState:
        return pb.StopReplicaPartitionState(
            topic_name=tp.topic,
            partition_index=tp.partition,
            leader_epoch=epoch,
            delete_partition=delete,
        )

    assert requests[4].request == pb.StopReplicaRequest(
        controller_id=CONTROLLER_ID,
        controller_epoch=CONTROLLER_EPOCH,
        broker_epoch=101,
        partition_states=[stop(TP0, 4, True), stop(TP1, 5, False)],
    )
    assert requests[5].request == pb.StopReplicaRequest(
        controller_id=CONTROLLER_ID,
        controller_epoch=CONTROLLER_EPOCH,
        broker_epoch=103,
        partition_states=[stop(TP0, 4, False)],
    )


def test_stop_replica_to_a_dead_broker_is_not_built() -> None:
    batch = ControllerBrokerRequestBatch()
    batch.add_stop_replica([3], TP0, delete=False, leader_epoch=1)
    assert build(batch, live(1, 2)) == []


def test_later_state_replaces_earlier_and_is_new_stays_set() -> None:
    batch = ControllerBrokerRequestBatch()
    created, elected = state(1, [1, 2], epoch=0, zk=0), state(2, [2], epoch=1, zk=1)
    batch.add_leader_and_isr([1, 2], TP0, created, [1, 2], is_new=True)
    batch.add_leader_and_isr([2], TP0, elected, [1, 2])
    assert build(batch) == [
        lai(1, [lai_state(TP0, created, [1, 2], is_new=True)], leaders=[1]),
        lai(2, [lai_state(TP0, elected, [1, 2], is_new=True)], leaders=[2]),
        *(um(b, [um_state(TP0, elected, [1, 2])]) for b in (1, 2, 3)),
    ]


def test_reassignment_replica_sets_are_carried() -> None:
    batch = ControllerBrokerRequestBatch()
    s = state(1, [1, 2, 3])
    batch.add_leader_and_isr([4], TP0, s, [2, 3, 4, 1], adding_replicas=[4], removing_replicas=[1])
    request = build(batch, live(1, 2, 3, 4))[0].request
    assert isinstance(request, pb.LeaderAndIsrRequest)
    assert list(request.partition_states[0].adding_replicas) == [4]
    assert list(request.partition_states[0].removing_replicas) == [1]
    assert list(request.partition_states[0].replicas) == [2, 3, 4, 1]


def test_negative_broker_ids_are_ignored() -> None:
    batch = ControllerBrokerRequestBatch()
    batch.add_stop_replica([-1], TP0, delete=False, leader_epoch=1)
    batch.add_update_metadata([-1])
    assert batch.is_empty
    assert build(batch) == []


def test_build_does_not_consume_the_batch() -> None:
    assert ControllerBrokerRequestBatch().is_empty
    batch = ControllerBrokerRequestBatch()
    batch.add_leader_and_isr([1], TP0, state(1, [1]), [1])
    assert not batch.is_empty
    assert build(batch) == build(batch)
    assert len(build(batch)) == 4


def test_each_brokers_kafka_listener_goes_out_with_its_endpoint() -> None:
    brokers = live(1, 2)
    brokers[1] = LiveBroker(1, "h1", 9001, epoch=101, kafka_endpoint=("h1", 19001))
    batch = ControllerBrokerRequestBatch()
    batch.add_leader_and_isr([2], TP0, state(1, [1, 2]), [1, 2])
    leader_and_isr, *update_metadata = (r.request for r in build(batch, brokers))
    assert isinstance(leader_and_isr, pb.LeaderAndIsrRequest)
    assert list(leader_and_isr.live_leaders) == [
        pb.BrokerEndpoint(node_id=1, host="h1", port=9001, kafka_host="h1", kafka_port=19001)
    ]
    for request in update_metadata:
        assert isinstance(request, pb.UpdateMetadataRequest)
        assert [(b.kafka_host, b.kafka_port) for b in request.live_brokers] == [
            ("h1", 19001),
            ("", 0),  # broker 2 has no Kafka listener
        ]
