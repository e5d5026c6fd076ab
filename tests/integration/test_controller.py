"""The controller as it runs inside every broker process, with real faults.

Every broker runs a candidate; the one holding ``/controller`` acts. Tests kill -9, pause
(SIGSTOP) and stop (SIGTERM) broker processes and check the outcome in ZooKeeper, through
the brokers' Metadata and in the replicas' data: new leaders from the ISR with the leader
epoch one higher, controller failover with a higher controller epoch, fencing of a
controller that lost its session, offline partitions and unclean elections, topic
deletion, controlled shutdown under load, preferred replica election and reassignment.
"""

from __future__ import annotations

import json
import queue
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from kazoo.client import KazooClient

from proto.records.record_batch import Record, encode_batch
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.zk import znodes
from tests.cluster import Cluster, running_cluster
from tests.helpers import free_port_run, wait_for
from tests.load import AcksAllLoad, check_acked_records_survive

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SESSION_TIMEOUT_S = 2.0  # tests.cluster's zookeeper.session.timeout.ms
FAILOVER_MARGIN_S = 8.0
"""Session expiry is detected within the session timeout (ZooKeeper's tick granularity
adds a little); the rest is one watch, one pipelined write and the LeaderAndIsr round trip.
The margin is generous for a loaded 2-core CI machine."""


def describe(cluster: Cluster, broker_id: int, topic: str) -> pb.TopicMetadata:
    response = cluster.broker_stub(broker_id).Metadata(
        pb.MetadataRequest(topics=[topic]), timeout=5
    )
    [found] = [t for t in response.topics if t.name == topic]
    return found


def wait_for_state(
    cluster: Cluster, tp: TopicPartition, timeout: float, **expected: object
) -> znodes.PartitionState:
    def matches() -> znodes.PartitionState | None:
        current = cluster.state(tp)
        if current is None:
            return None
        for key, value in expected.items():
            actual = getattr(current, key)
            if (sorted(actual) if key == "isr" else actual) != value:
                return None
        return current

    found = wait_for(
        matches, timeout, message=lambda: f"{tp} state {cluster.state(tp)} to match {expected}"
    )
    assert found is not None
    return found


def produce_until_acked(cluster: Cluster, tp: TopicPartition, values: list[bytes]) -> int:
    """Produce acks=all to the current leader, retrying through leadership changes."""
    return cluster.produce_until_acked(tp, values)


def values(cluster: Cluster, broker_id: int, tp: TopicPartition) -> list[bytes | None]:
    return [v for _, v in cluster.replica_records(broker_id, tp)]


def live_brokers_known_to(cluster: Cluster, broker_id: int) -> set[int]:
    response = cluster.broker_stub(broker_id).Metadata(pb.MetadataRequest(), timeout=5)
    return {b.node_id for b in response.brokers}


def controller_known_to(cluster: Cluster, broker_id: int) -> int:
    return cluster.broker_stub(broker_id).Metadata(pb.MetadataRequest(), timeout=5).controller_id


def broker_log(cluster: Cluster, broker_id: int) -> str:
    return cluster.brokers[broker_id].log_path.read_text(errors="replace")


# -- live brokers ----------------------------------------------------------------------------


def test_update_metadata_tells_every_broker_each_registered_kafka_listener(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    """A registration naming a Kafka protocol listener reaches every broker's
    metadata through the controller's UpdateMetadata, and leaves it with the registration.
    Broker 7 is registered the way a broker with a Kafka listener registers itself, with no
    process behind it (as one frozen or gone before its session expired)."""
    grpc_port = free_port_run(2)
    registration = znodes.encode_broker_registration(
        "127.0.0.1", grpc_port, int(time.time() * 1000), kafka_port=grpc_port + 1
    )
    with running_cluster(zk_client, zk_connect, tmp_path, broker_ids=(1, 2)) as cluster:

        def kafka_listeners(broker_id: int) -> dict[int, tuple[str, int]]:
            response = cluster.broker_stub(broker_id).Metadata(pb.MetadataRequest(), timeout=5)
            return {b.node_id: (b.kafka_host, b.kafka_port) for b in response.brokers}

        cluster.wait_for_controller()
        zk_client.create(znodes.broker_path(7), registration, ephemeral=True)
        expected = {1: ("", 0), 2: ("", 0), 7: ("127.0.0.1", grpc_port + 1)}
        wait_for(
            lambda: all(kafka_listeners(b) == expected for b in (1, 2)),
            FAILOVER_MARGIN_S,
            message=lambda: (
                f"{expected} in every broker's metadata: {[kafka_listeners(b) for b in (1, 2)]}"
            ),
        )
        zk_client.delete(znodes.broker_path(7))
        wait_for(
            lambda: all(7 not in kafka_listeners(b) for b in (1, 2)),
            FAILOVER_MARGIN_S,
            message="broker 7 gone from every broker's metadata",
        )


# -- creation, describe, deletion -------------------------------------------------------------


def test_topic_create_describe_and_delete(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    topic = "lifecycle"
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        controller = cluster.wait_for_controller()
        assert cluster.controller_epoch() == 1
        cluster.create_topic(topic, {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
        for p, leader in ((0, 1), (1, 2), (2, 3)):
            tp = TopicPartition(topic, p)
            state = cluster.state(tp)
            assert state is not None
            assert (state.leader, state.leader_epoch, state.controller_epoch) == (leader, 0, 1)
            cluster.wait_for_isr(tp, {1, 2, 3})  # a loaded follower may drop out and rejoin
            assert produce_until_acked(cluster, tp, [b"a", b"b"]) == 0

        expected = [
            (0, 1, [1, 2, 3], [1, 2, 3]),
            (1, 2, [2, 3, 1], [1, 2, 3]),
            (2, 3, [3, 1, 2], [1, 2, 3]),
        ]

        def cached(broker_id: int) -> list[tuple[int, int, list[int], list[int]]]:
            meta = describe(cluster, broker_id, topic)
            assert meta.error_code == pb.NONE
            return [
                (p.partition_index, p.leader_id, list(p.replica_nodes), sorted(p.isr_nodes))
                for p in sorted(meta.partitions, key=lambda p: p.partition_index)
            ]

        # Every broker answers Metadata from its cache (ISR changes reach it late).
        wait_for(
            lambda: all(cached(b) == expected for b in (1, 2, 3)),
            10,
            message=lambda: (
                f"every broker's metadata to be {expected}: {[cached(b) for b in (1, 2, 3)]}"
            ),
        )
        dirs = [
            cluster.partition_dir(b, TopicPartition(topic, p)) for b in (1, 2, 3) for p in range(3)
        ]
        wait_for(lambda: all(d.exists() for d in dirs), 10, message="replica dirs on every broker")

        zk_client.create(znodes.delete_topic_path(topic), makepath=True)
        wait_for(
            lambda: not zk_client.exists(znodes.topic_path(topic)),
            20,
            message="the topic znodes to be deleted",
        )
        wait_for(lambda: not any(d.exists() for d in dirs), 10, message="replica dirs deleted")
        assert not zk_client.exists(znodes.delete_topic_path(topic))
        assert not zk_client.exists(znodes.topic_config_path(topic))
        for broker_id in (1, 2, 3):
            assert describe(cluster, broker_id, topic).error_code == pb.UNKNOWN_TOPIC_OR_PARTITION
        assert cluster.controller_id() == controller


def test_deletion_waits_for_a_dead_replica_and_finishes_when_it_returns(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    tp = TopicPartition("doomed", 0)
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        cluster.create_topic(tp.topic, {0: [1, 2]})
        produce_until_acked(cluster, tp, [b"x"])
        wait_for(lambda: values(cluster, 2, tp) == [b"x"], 10, message="replicated")
        cluster.brokers[2].kill()
        wait_for_state(cluster, tp, SESSION_TIMEOUT_S + FAILOVER_MARGIN_S, isr=[1])

        zk_client.create(znodes.delete_topic_path(tp.topic), makepath=True)
        wait_for(
            lambda: not cluster.partition_dir(1, tp).exists(), 20, message="deleted on broker 1"
        )
        assert zk_client.exists(znodes.topic_path(tp.topic)), "deleted before 2 returned"
        assert cluster.partition_dir(2, tp).exists()

        cluster.brokers[2].start(zk_client)
        wait_for(
            lambda: not zk_client.exists(znodes.topic_path(tp.topic)),
            20,
            message="the deletion to complete once broker 2 is back",
        )
        wait_for(lambda: not cluster.partition_dir(2, tp).exists(), 10, message="2's copy gone")


# -- broker failure -------------------------------------------------------------------------


def test_leader_kill_9_under_acks_all_load_elects_from_isr_and_loses_nothing(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    tp = TopicPartition("failover", 0)
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        cluster.create_topic(tp.topic, {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
        before = cluster.state(tp)
        assert before is not None
        assert before.leader == 1
        with AcksAllLoad(cluster, [tp]) as load:
            load.wait_for_more_acks(200)
            killed_at = time.monotonic()
            cluster.brokers[1].kill()
            after = wait_for_state(
                cluster, tp, SESSION_TIMEOUT_S + FAILOVER_MARGIN_S, leader_epoch=1
            )
            elected_after = time.monotonic() - killed_at
            wait_for(
                lambda: load.report.acked_after(killed_at + elected_after),
                20,
                message="acks from the new leader",
            )
        report = load.report
        assert not report.fatal, report.fatal
        assert after.leader in (2, 3)
        # The controller wrote ISR [2, 3]; the new leader may already have shrunk it.
        assert after.leader in after.isr
        assert set(after.isr) <= {2, 3}
        assert {a.leader for a in report.acked_after(killed_at + elected_after)} == {after.leader}
        check_acked_records_survive(cluster, report)
        # The surviving replicas agree byte for byte once the load is over.
        other = 5 - after.leader
        wait_for(
            lambda: values(cluster, other, tp) == values(cluster, after.leader, tp),
            20,
            message="the follower to match the new leader",
        )


def test_controller_kill_9_moves_the_controller_and_the_new_one_handles_a_failure(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    topic = "handover"
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        first = cluster.wait_for_controller()
        first_epoch = cluster.controller_epoch()
        s0, s1 = sorted(set(cluster.brokers) - {first})
        # Each survivor leads one partition; the first controller follows both.
        cluster.create_topic(topic, {0: [s0, s1, first], 1: [s1, s0, first]})
        tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        for tp in tps:
            produce_until_acked(cluster, tp, [b"before"])

        cluster.brokers[first].kill()
        second = cluster.wait_for_controller([s0, s1], SESSION_TIMEOUT_S + FAILOVER_MARGIN_S)
        assert cluster.controller_epoch() == first_epoch + 1
        for tp in tps:  # the dead broker left every ISR
            wait_for_state(cluster, tp, SESSION_TIMEOUT_S + FAILOVER_MARGIN_S, isr=[s0, s1])

        # The new controller handles the next failure: the other survivor dies.
        victim = s1 if second == s0 else s0
        led = tps[0] if victim == s0 else tps[1]
        before = cluster.state(led)
        assert before is not None
        cluster.brokers[victim].kill()
        after = wait_for_state(
            cluster, led, SESSION_TIMEOUT_S + FAILOVER_MARGIN_S, leader=second, isr=[second]
        )
        assert after.leader_epoch == before.leader_epoch + 1
        assert after.controller_epoch == first_epoch + 1
        produce_until_acked(cluster, led, [b"after"])
        assert [v for _, v in cluster.consume_all(second, led)] == [b"before", b"after"]


def test_paused_controller_is_replaced_and_fenced_when_it_resumes(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    topic = "fenced"
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        old = cluster.wait_for_controller()
        old_epoch = cluster.controller_epoch()
        o0, o1 = sorted(set(cluster.brokers) - {old})
        cluster.create_topic(topic, {0: [o0, o1, old], 1: [o1, o0, old]})

        cluster.brokers[old].pause()
        new = cluster.wait_for_controller([o0, o1], SESSION_TIMEOUT_S + FAILOVER_MARGIN_S)
        new_epoch = cluster.controller_epoch()
        assert new_epoch == old_epoch + 1
        # While the old one is frozen, the new one handles a broker failure.
        victim = o1 if new == o0 else o0
        tp = TopicPartition(topic, 0 if victim == o0 else 1)
        wait_for_state(
            cluster, tp, SESSION_TIMEOUT_S + FAILOVER_MARGIN_S, leader=victim, isr=[o0, o1]
        )
        cluster.brokers[victim].kill()
        wait_for_state(cluster, tp, SESSION_TIMEOUT_S + FAILOVER_MARGIN_S, leader=new, isr=[new])

        log_before_resume = len(broker_log(cluster, old))
        cluster.brokers[old].resume()
        # It learns that its session expired, resigns and stays a standby; the state it
        # would have overwritten is untouched and no broker took its stale requests.
        wait_for(
            lambda: "event=resigned" in broker_log(cluster, old),
            SESSION_TIMEOUT_S + FAILOVER_MARGIN_S,
            message="the old controller to resign",
        )
        assert cluster.controller_id() == new
        assert cluster.controller_epoch() == new_epoch
        state = cluster.state(tp)
        assert state is not None
        assert (state.leader, state.controller_epoch) == (new, new_epoch)
        after_resume = broker_log(cluster, old)[log_before_resume:]
        for acted in ("event=elected", "event=partition_state_changed", "event=partition_created"):
            assert acted not in after_resume, after_resume

        # A request carrying the old epoch is refused by every broker, once each has heard
        # from the new controller (the resumed one re-registers first).
        wait_for(
            lambda: all(controller_known_to(cluster, b) == new for b in cluster.live()),
            SESSION_TIMEOUT_S + FAILOVER_MARGIN_S,
            message="every broker to know the new controller",
        )
        stale = pb.UpdateMetadataRequest(controller_id=old, controller_epoch=old_epoch)
        for broker_id in cluster.live():
            stale.broker_epoch = zk_client.exists(znodes.broker_path(broker_id)).czxid
            answer = cluster.control_stub(broker_id).UpdateMetadata(stale, timeout=5)
            assert answer.error_code == pb.STALE_CONTROLLER_EPOCH

        # The cluster keeps working under the new controller.
        produce_until_acked(cluster, tp, [b"still-served"])


# -- offline partitions and unclean election --------------------------------------------------


def test_all_replicas_down_goes_offline_and_an_isr_member_brings_it_back(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    tp = TopicPartition("offline", 0)
    timeout = SESSION_TIMEOUT_S + FAILOVER_MARGIN_S
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        cluster.create_topic(tp.topic, {0: [1, 2]})
        produce_until_acked(cluster, tp, [b"kept"])

        cluster.brokers[1].kill()
        wait_for_state(cluster, tp, timeout, leader=2, leader_epoch=1, isr=[2])
        cluster.brokers[2].kill()
        wait_for_state(cluster, tp, timeout, leader=-1, leader_epoch=2, isr=[2])
        wait_for(
            lambda: describe(cluster, 3, tp.topic).partitions[0].leader_id == -1,
            10,
            message="broker 3's metadata to show the partition offline",
        )

        # Broker 1 is not in the ISR: its return does not bring the partition back.
        cluster.brokers[1].start(zk_client)
        wait_for(
            lambda: 1 in live_brokers_known_to(cluster, 3),
            timeout,
            message="broker 3 to learn from the controller that 1 is back",
        )
        offline = cluster.state(tp)
        assert offline is not None
        assert offline.leader == -1

        cluster.brokers[2].start(zk_client)
        back = wait_for_state(cluster, tp, timeout, leader=2, leader_epoch=3)
        # The controller elects 2 with ISR [2]: 1 was out of the ISR when the partition went
        # offline. The state znode alone cannot show that: broker 1 is caught up (it holds
        # what 2 holds), so leader 2 may already have added it back (same leader epoch, a
        # leader-written ISR change) by the time the znode is read. The controller's own
        # line says what it wrote.
        assert set(back.isr) <= {1, 2}
        elected = f"partition={tp} leader=2 leader_epoch=3 isr=[2] "
        wait_for(
            lambda: any(
                "event=partition_state_changed" in line and elected in line
                for b in cluster.brokers
                for line in broker_log(cluster, b).splitlines()
            ),
            10,
            message="the controller's log line for electing 2 with ISR [2]",
        )
        produce_until_acked(cluster, tp, [b"back"])
        assert [v for _, v in cluster.consume_all(2, tp)] == [b"kept", b"back"]
        cluster.wait_for_isr(tp, {1, 2})


def test_unclean_election_restores_availability_and_loses_what_only_the_isr_had(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    tp = TopicPartition("unclean", 0)
    timeout = SESSION_TIMEOUT_S + FAILOVER_MARGIN_S
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        cluster.create_topic(tp.topic, {0: [1, 2]}, {"unclean.leader.election.enable": "true"})
        produce_until_acked(cluster, tp, [b"m0"])
        wait_for(lambda: values(cluster, 2, tp) == [b"m0"], 10, message="m0 on both")

        cluster.brokers[2].kill()
        wait_for_state(cluster, tp, timeout, leader=1, isr=[1])
        assert produce_until_acked(cluster, tp, [b"m1"]) == 1  # acknowledged by 1 alone
        cluster.brokers[1].kill()
        wait_for_state(cluster, tp, timeout, leader=-1, isr=[1])

        # Broker 2 never had m1; with unclean election it leads anyway.
        cluster.brokers[2].start(zk_client)
        elected = wait_for_state(cluster, tp, timeout, leader=2, isr=[2])
        assert produce_until_acked(cluster, tp, [b"m2"]) == 1  # offset 1 again
        cluster.brokers[1].start(zk_client)
        cluster.wait_for_isr(tp, {1, 2})
        # The cost: m1 was acknowledged and is gone from both replicas (leader epochs keep
        # the replicas identical; they cannot bring back what the new leader never had).
        wait_for(lambda: values(cluster, 1, tp) == [b"m0", b"m2"], 10, message="1 follows 2")
        assert values(cluster, 2, tp) == [b"m0", b"m2"]
        assert elected.leader_epoch >= 3
        assert "event=unclean_leader_election" in "".join(
            broker_log(cluster, b) for b in cluster.brokers
        )


# -- controlled shutdown ----------------------------------------------------------------------


def test_controlled_shutdown_of_each_broker_under_load_gives_only_retriable_errors(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    topic = "rolling"
    tps = [TopicPartition(topic, p) for p in range(3)]
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        cluster.create_topic(
            topic, {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}, {"min.insync.replicas": "2"}
        )
        with AcksAllLoad(cluster, tps, prefix="rolling") as load:
            for broker_id in (1, 2, 3):
                led = [tp for tp in tps if (s := cluster.state(tp)) and s.leader == broker_id]
                load.wait_for_more_acks(50)
                assert cluster.brokers[broker_id].stop() == 0
                # Leadership was moved while it was still up: the controller, not its
                # death, made the change, and it was clean (another ISR member).
                text = broker_log(cluster, broker_id)
                assert "event=controlled_shutdown_attempt" in text
                assert "outcome=done" in text
                for tp in led:
                    state = cluster.state(tp)
                    assert state is not None
                    assert state.leader not in (broker_id, -1)
                cluster.brokers[broker_id].start(zk_client)
                for tp in tps:
                    cluster.wait_for_isr(tp, {1, 2, 3}, timeout=30)
            load.wait_for_more_acks(100)
        report = load.report
        assert not report.fatal, report.fatal
        check_acked_records_survive(cluster, report)


class _ProduceSession:
    """A producer's ProduceSession stream, one request answered at a time."""

    def __init__(self, stub: pb_grpc.BrokerStub) -> None:
        self._requests: queue.Queue[pb.ProduceRequest | None] = queue.Queue()
        self._call: Any = stub.ProduceSession(iter(self._requests.get, None), timeout=90)
        self._correlation_id = 0

    def produce(self, tp: TopicPartition, value: bytes) -> pb.PartitionProduceResponse:
        """acks=all; raises grpc.RpcError if the stream ends before the answer."""
        self._correlation_id += 1
        request = pb.ProduceRequest(acks=-1, timeout_ms=60_000, correlation_id=self._correlation_id)
        batch = encode_batch([Record(key=None, value=value, timestamp=int(time.time() * 1000))])
        request.topics.add(name=tp.topic).partitions.add(index=tp.partition, records=batch)
        self._requests.put(request)
        response: pb.ProduceResponse = next(self._call)
        assert response.correlation_id == self._correlation_id
        return response.responses[0].partitions[0]

    def close(self) -> None:
        self._requests.put(None)
        self._call.cancel()


def test_controlled_shutdown_of_a_leader_refuses_writes_on_its_open_sessions_at_once(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    """The leaving leader answers a write on a produce session opened before its SIGTERM
    with a retriable NOT_LEADER_OR_FOLLOWER once the controller has moved the leadership,
    so that its producer goes to the new leader. Appending the write instead would wait for
    followers that have moved to the new leader, until the gRPC server's shutdown grace
    ends the session with the write unanswered: every producer of its partitions would
    stall for those 5 s after each controlled shutdown (no request timeout is short
    enough)."""
    topic = "handover"
    tp = TopicPartition(topic, 0)
    with running_cluster(zk_client, zk_connect, tmp_path) as cluster:
        cluster.create_topic(topic, {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
        cluster.wait_for_isr(tp, {1, 2, 3}, timeout=30)
        assert cluster.leader_serving(tp) == 1
        session = _ProduceSession(cluster.broker_stub(1))
        answers: list[int] = []
        with ThreadPoolExecutor(1) as pool:
            try:
                answers.append(session.produce(tp, b"before").error_code)
                stopping = pool.submit(cluster.brokers[1].stop)
                deadline = time.monotonic() + 60
                # Acknowledged while broker 1 still leads, then refused: never unanswered.
                while answers[-1] == pb.NONE and time.monotonic() < deadline:
                    try:
                        answers.append(session.produce(tp, b"v%d" % len(answers)).error_code)
                    except grpc.RpcError as e:
                        raise AssertionError(
                            f"the session ended with a write unanswered ({e.code()}) after "
                            f"{len(answers)} answers: the leaving leader waited for followers "
                            "that follow the new leader"
                        ) from None
            finally:
                session.close()
            assert stopping.result() == 0
        assert answers[0] == pb.NONE
        assert answers[-1] == pb.NOT_LEADER_OR_FOLLOWER, answers[-3:]
        state = cluster.state(tp)
        assert state is not None
        assert state.leader in (2, 3)


# -- preferred replica election and reassignment ----------------------------------------------


def test_preferred_replica_election_gives_leadership_back(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    tp = TopicPartition("preferred", 0)
    with running_cluster(
        zk_client, zk_connect, tmp_path, overrides={"auto.leader.rebalance.enable": "false"}
    ) as cluster:
        cluster.create_topic(tp.topic, {0: [1, 2, 3]})
        produce_until_acked(cluster, tp, [b"a"])
        cluster.brokers[1].kill()
        wait_for_state(cluster, tp, SESSION_TIMEOUT_S + FAILOVER_MARGIN_S, leader=2)
        cluster.brokers[1].start(zk_client)
        cluster.wait_for_isr(tp, {1, 2, 3})
        assert cluster.state(tp).leader == 2  # type: ignore[union-attr]

        zk_client.create(
            znodes.PREFERRED_REPLICA_ELECTION_PATH,
            znodes.encode_preferred_replica_election([tp]),
            makepath=True,
        )
        back = wait_for_state(cluster, tp, 20, leader=1)
        assert back.leader_epoch == 2  # the failure, then this election (ISR growth: no bump)
        wait_for(
            lambda: not zk_client.exists(znodes.PREFERRED_REPLICA_ELECTION_PATH),
            10,
            message="the request to be deleted",
        )
        cluster.wait_for_leader(tp, [1])
        wait_for(
            lambda: [v for _, v in cluster.consume_all(1, tp)] == [b"a"],
            10,
            message="the new leader's HW to cover the record",
        )


def test_auto_leader_rebalance_moves_leadership_to_the_preferred_replica(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    tp = TopicPartition("rebalanced", 0)
    overrides = {
        "auto.leader.rebalance.enable": "true",
        "leader.imbalance.check.interval.seconds": "1",
    }
    with running_cluster(zk_client, zk_connect, tmp_path, overrides=overrides) as cluster:
        cluster.create_topic(tp.topic, {0: [1, 2]})
        cluster.brokers[1].kill()
        wait_for_state(cluster, tp, SESSION_TIMEOUT_S + FAILOVER_MARGIN_S, leader=2)
        cluster.brokers[1].start(zk_client)
        # Broker 1 prefers one partition and leads none: 100 % > 10 %.
        wait_for_state(cluster, tp, 30, leader=1)
        cluster.wait_for_leader(tp, [1])


def test_reassignment_from_1_2_3_to_2_3_4(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    tp = TopicPartition("moving", 0)
    with running_cluster(zk_client, zk_connect, tmp_path, (1, 2, 3, 4)) as cluster:
        cluster.create_topic(tp.topic, {0: [1, 2, 3]})
        before = [f"before-{i}".encode() for i in range(100)]
        produce_until_acked(cluster, tp, before)
        with AcksAllLoad(cluster, [tp], prefix="during") as load:
            load.wait_for_more_acks(20)
            zk_client.create(
                znodes.REASSIGN_PARTITIONS_PATH,
                znodes.encode_reassign_partitions({tp: [2, 3, 4]}),
                makepath=True,
            )
            wait_for(
                lambda: not zk_client.exists(znodes.REASSIGN_PARTITIONS_PATH),
                30,
                message="the reassignment to complete",
            )
            load.wait_for_more_acks(20)
        assignment = json.loads(zk_client.get(znodes.topic_path(tp.topic))[0])
        assert assignment == {
            "version": 2,
            "partitions": {"0": [2, 3, 4]},
            "adding_replicas": {},
            "removing_replicas": {},
        }
        state = cluster.state(tp)
        assert state is not None
        assert state.leader == 2
        cluster.wait_for_isr(tp, {2, 3, 4})
        wait_for(lambda: not cluster.partition_dir(1, tp).exists(), 10, message="1's copy gone")
        report = load.report
        assert not report.fatal, report.fatal
        check_acked_records_survive(cluster, report)
        wait_for(
            lambda: values(cluster, 4, tp) == values(cluster, 2, tp),
            20,
            message="the new replica to hold everything",
        )
        assert values(cluster, 4, tp)[:100] == before
        wait_for(
            lambda: all(
                list(describe(cluster, b, tp.topic).partitions[0].replica_nodes) == [2, 3, 4]
                for b in (2, 3, 4)
            ),
            10,
            message="every broker's metadata to show the replicas [2, 3, 4]",
        )


def test_a_new_controller_resumes_a_reassignment_and_cancels_it(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    """[c, o0, o1] -> [c, o0, s] with s killed before it catches up: the topic znode
    keeps RS, AR = [s] and RR = [o1]. The controller c is killed too: its successor loads
    the reassignment from the topic znode and leaves it running. Writing the original
    replicas as the target (what AlterPartitionReassignments with null replicas does)
    cancels it: RS = [c, o0, o1] with no adding/removing replicas, and every record
    acknowledged with acks=all under load survives."""
    tp = TopicPartition("resumed", 0)
    with running_cluster(zk_client, zk_connect, tmp_path, (1, 2, 3, 4)) as cluster:
        c = cluster.wait_for_controller()
        o0, o1, s = sorted({1, 2, 3, 4} - {c})
        cluster.create_topic(tp.topic, {0: [c, o0, o1]})
        cluster.wait_for_isr(tp, {c, o0, o1})
        produce_until_acked(cluster, tp, [f"before-{i}".encode() for i in range(50)])

        def topic_znode() -> znodes.ReplicaAssignment:
            return znodes.decode_topic_replica_assignment(
                zk_client.get(znodes.topic_path(tp.topic))[0]
            )[0]

        running = znodes.ReplicaAssignment((c, o0, s, o1), (s,), (o1,))
        with AcksAllLoad(cluster, [tp], prefix="during") as load:
            load.wait_for_more_acks(20)
            cluster.brokers[s].pause()  # registered still: the target is valid
            zk_client.create(
                znodes.REASSIGN_PARTITIONS_PATH,
                znodes.encode_reassign_partitions({tp: [c, o0, s]}),
                makepath=True,
            )
            wait_for(lambda: topic_znode() == running, 30, message="the reassignment written")
            cluster.brokers[s].kill()
            cluster.brokers[c].kill()
            new = cluster.wait_for_controller(
                accept=[o0, o1], timeout=SESSION_TIMEOUT_S + FAILOVER_MARGIN_S
            )
            wait_for_state(
                cluster, tp, SESSION_TIMEOUT_S + FAILOVER_MARGIN_S, leader=o0, isr=sorted([o0, o1])
            )
            load.wait_for_more_acks(20)
            assert topic_znode() == running  # resumed, not finished and not forgotten
            assert zk_client.exists(znodes.REASSIGN_PARTITIONS_PATH)

            original = list(running.origin_replicas)
            assert original == [c, o0, o1]
            zk_client.set(
                znodes.REASSIGN_PARTITIONS_PATH,
                znodes.encode_reassign_partitions({tp: original}),
            )
            wait_for(
                lambda: not zk_client.exists(znodes.REASSIGN_PARTITIONS_PATH),
                30,
                message=f"controller {new} to cancel the reassignment",
            )
            assert topic_znode() == znodes.ReplicaAssignment((c, o0, o1))
            load.wait_for_more_acks(20)
        state = cluster.state(tp)
        assert state is not None
        assert (state.leader, sorted(state.isr)) == (o0, sorted([o0, o1]))
        report = load.report
        assert not report.fatal, report.fatal
        check_acked_records_survive(cluster, report)
        cluster.brokers[c].start(zk_client)
        cluster.wait_for_isr(tp, {c, o0, o1}, timeout=60)
        wait_for(
            lambda: values(cluster, c, tp) == values(cluster, o0, tp),
            30,
            message="the restarted original replica to hold everything",
        )
