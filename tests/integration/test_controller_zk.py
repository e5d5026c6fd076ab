"""ControllerZkClient against a real ZooKeeper: the election and its epoch, re-election when
``/controller`` goes away (resignation, the winner's session closing, a real session
expiry), KAFKA-6082 fencing of a replaced controller's writes, conditional partition-state
writes, reads, and watches that fire again after a fire, after a ZooKeeper restart and in a
new session.

Each test runs its coroutine on uvloop (the broker's loop) in a chroot of its own, and
observes ZooKeeper through the fixture's plain kazoo client. Waits have deadlines; nothing
sleeps for a fixed time.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest
import uvloop
from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

from controller.controller_zk import (
    MULTI_GROUP,
    ControllerMovedError,
    ControllerZkClient,
    LiveBroker,
)
from deploy.zookeeper import ZooKeeperConfig, ZooKeeperServer
from proto.topic_partition import TopicPartition
from proto.zk.znodes import (
    PartitionState,
    PartitionStateData,
    encode_broker_registration,
    encode_isr_change_notification,
    encode_partition_state,
    encode_preferred_replica_election,
    encode_reassign_partitions,
    encode_topic_assignment,
    encode_topic_config,
)
from tests.helpers import close_session_from_another_client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

T = TypeVar("T")
WAIT_S = 15.0
RECONNECT_WAIT_S = 30.0
"""After a ZooKeeper restart: one unanswered connect attempt may cost half a session."""
TP0 = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)
STATE0 = PartitionStateData(leader=1, leader_epoch=0, isr=(1, 2), controller_epoch=1)
STATE1 = PartitionStateData(leader=2, leader_epoch=0, isr=(2, 1), controller_epoch=1)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a test coroutine on uvloop, as the broker does (pytest-asyncio is not used)."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def candidate(connect: str, broker_id: int, **kwargs: Any) -> ControllerZkClient:
    return ControllerZkClient(connect, broker_id=broker_id, **kwargs)


class Fires:
    """A watch callback that counts its calls and remembers the thread they ran on."""

    def __init__(self) -> None:
        self.count = 0
        self.threads: set[int] = set()
        self._changed = asyncio.Event()

    def __call__(self) -> None:
        self.count += 1
        self.threads.add(threading.get_ident())
        self._changed.set()

    async def more_than(self, seen: int, wait_s: float = WAIT_S) -> int:
        """Wait (with a deadline) until called more than ``seen`` times; the new count."""
        async with asyncio.timeout(wait_s):
            while self.count <= seen:
                self._changed.clear()
                await self._changed.wait()
        return self.count


async def zk(client: KazooClient, method: str, *args: Any, **kwargs: Any) -> Any:
    """A blocking call of the test's own kazoo client, off the loop."""
    return await asyncio.to_thread(getattr(client, method), *args, **kwargs)


async def create_topic(client: KazooClient, topic: str, assignment: dict[int, list[int]]) -> None:
    await zk(
        client,
        "create",
        f"/brokers/topics/{topic}",
        encode_topic_assignment(assignment),
        makepath=True,
    )


async def expire_session_for_real(
    owner: ControllerZkClient, connect: str, lost: asyncio.Event
) -> None:
    """Close ``owner``'s session from another client until ``owner`` reports it lost."""
    session = owner.session_id
    async with asyncio.timeout(WAIT_S):
        while not lost.is_set():
            credentials = owner._client.client_id  # the password: only a thief needs it
            if credentials is not None and credentials[0] == session:
                await asyncio.to_thread(close_session_from_another_client, connect, credentials)
            try:
                await asyncio.wait_for(lost.wait(), 3.0)
            except TimeoutError:
                continue


def snapshot(client: KazooClient, paths: list[str]) -> dict[str, tuple[bytes, int] | None]:
    """Content and version of each path (None if missing), to prove nothing changed."""
    result: dict[str, tuple[bytes, int] | None] = {}
    for path in paths:
        stat = client.exists(path)
        result[path] = None if stat is None else (client.get(path)[0], stat.version)
    return result


# -- election --------------------------------------------------------------------------------


def test_first_candidate_wins_with_epoch_1_and_the_second_gets_none(
    zk_connect: str, zk_client: KazooClient
) -> None:
    async def scenario() -> None:
        async with candidate(zk_connect, 1) as first, candidate(zk_connect, 2) as second:
            # Both stand at once: exactly one wins, with the first epoch.
            outcomes = await asyncio.gather(first.try_elect(), second.try_elect())
            assert sorted(outcomes, key=str) == [1, None]
            winner, loser = (first, second) if outcomes[0] == 1 else (second, first)
            assert (winner.epoch, loser.epoch) == (1, None)

            data, stat = await zk(zk_client, "get", "/controller")
            registration = json.loads(data)
            assert set(registration) == {"version", "brokerid", "timestamp"}
            assert registration["version"] == 1
            assert registration["brokerid"] == winner.broker_id
            assert re.fullmatch(r"[0-9]{13}", registration["timestamp"])
            assert stat.ephemeralOwner == winner.session_id
            epoch_data, epoch_stat = await zk(zk_client, "get", "/controller_epoch")
            assert epoch_data == b"1"  # created with 0, so the first controller has epoch 1
            assert winner.epoch_zk_version == epoch_stat.version
            assert await winner.controller_epoch() == (1, epoch_stat.version)

            # Standing again changes nothing: the loser still loses, the winner keeps epoch 1.
            assert await loser.try_elect() is None
            assert await winner.try_elect() == 1
            assert await loser.controller_id() == winner.broker_id
            assert (await zk(zk_client, "get", "/controller_epoch"))[0] == b"1"

            # An election cancelled after its multi was applied leaves /controller ours
            # with no epoch kept: standing again gives it up and wins a fresh epoch, rather
            # than blocking every candidate forever.
            winner._epoch = winner._epoch_zk_version = None
            assert await winner.try_elect() == 2
            assert (await zk(zk_client, "get", "/controller_epoch"))[0] == b"2"

    run(scenario())


def test_resignation_and_the_winner_closing_fire_the_losers_watch_and_it_wins_the_next_epoch(
    zk_connect: str, zk_client: KazooClient
) -> None:
    async def scenario() -> None:
        async with candidate(zk_connect, 1) as a, candidate(zk_connect, 2) as b:
            assert await a.try_elect() == 1
            a_fires, b_fires = Fires(), Fires()
            await a.watch_controller(a_fires)
            await b.watch_controller(b_fires)
            assert await b.try_elect() is None

            await a.resign()
            assert a.epoch is None
            await b_fires.more_than(0)
            assert await b.try_elect() == 2
            assert b.epoch == 2
            assert await a.try_elect() is None
            with pytest.raises(ControllerMovedError, match="not the elected controller"):
                await a.delete_admin_node("/admin/reassign_partitions")

            # resign() never deletes another broker's /controller.
            await a.resign()
            assert await a.controller_id() == 2

            seen = a_fires.count
            await b.close()  # the winner's session ends: its ephemeral /controller with it
            await a_fires.more_than(seen)
            assert await a.try_elect() == 3
            assert (await zk(zk_client, "get", "/controller_epoch"))[0] == b"3"

            # Callbacks ran on the event loop's thread, never on kazoo's.
            assert a_fires.threads == b_fires.threads == {threading.get_ident()}

    run(scenario())


def test_a_replaced_controllers_fenced_writes_fail_with_controller_moved_and_change_nothing(
    zk_connect: str, zk_client: KazooClient
) -> None:
    """KAFKA-6082: the old controller has not noticed yet that /controller moved (its watch
    event is still on the way, or it is paused); the epoch check stops its writes."""

    async def scenario() -> None:
        async with candidate(zk_connect, 1) as old, candidate(zk_connect, 2) as new:
            await create_topic(zk_client, "orders", {0: [1, 2], 1: [2, 1]})
            await zk(
                zk_client, "create", "/config/topics/orders", encode_topic_config({}), makepath=True
            )
            await zk(zk_client, "create", "/admin/delete_topics/orders", makepath=True)
            await zk(zk_client, "create", "/admin/preferred_replica_election", b"{}", makepath=True)
            note = await zk(
                zk_client,
                "create",
                "/isr_change_notification/isr_change_",
                encode_isr_change_notification([TP0]),
                sequence=True,
                makepath=True,
            )
            assert await old.try_elect() == 1
            assert await old.create_partition_states({TP0: STATE0}) == {TP0: 0}

            # /controller goes away behind the old controller's back; the other one wins.
            await zk(zk_client, "delete", "/controller")
            assert await new.try_elect() == 2
            assert old.epoch == 1  # it still believes it leads

            paths = [
                "/brokers/topics/orders",
                "/brokers/topics/orders/partitions/0/state",
                "/brokers/topics/orders/partitions/1",
                "/config/topics/orders",
                "/admin/delete_topics/orders",
                "/admin/preferred_replica_election",
                note,
            ]
            before = await asyncio.to_thread(snapshot, zk_client, paths)
            shrunk = PartitionStateData(leader=1, leader_epoch=1, isr=(1,), controller_epoch=1)
            attempts = [
                old.update_partition_states({TP0: (shrunk, 0)}),
                old.create_partition_states({TP1: STATE1}),
                old.set_topic_assignment("orders", {0: [2, 1], 1: [2, 1]}),
                old.delete_topic_znodes("orders"),
                old.delete_admin_node("/admin/preferred_replica_election"),
                old.delete_isr_change_notifications([note.rsplit("/", 1)[1]]),
            ]
            for attempt in attempts:
                with pytest.raises(ControllerMovedError, match="another controller was elected"):
                    await attempt
            assert await asyncio.to_thread(snapshot, zk_client, paths) == before

            # The new controller's writes go through.
            newer = PartitionStateData(leader=2, leader_epoch=1, isr=(2,), controller_epoch=2)
            assert await new.update_partition_states({TP0: (newer, 0)}) == {TP0: 1}

    run(scenario())


def test_real_session_expiry_fires_session_lost_lets_the_other_candidate_win_and_rearms_watches(
    zk_connect: str, zk_client: KazooClient
) -> None:
    async def scenario() -> None:
        async with (
            candidate(zk_connect, 1, session_timeout_ms=4000) as a,
            candidate(zk_connect, 2) as b,
        ):
            lost = asyncio.Event()
            lost_epochs: list[int | None] = []

            def on_lost() -> None:
                lost_epochs.append(a.epoch)
                lost.set()

            a.on_session_lost(on_lost)
            assert await a.try_elect() == 1
            old_session = a.session_id
            b_fires, a_brokers = Fires(), Fires()
            await b.watch_controller(b_fires)
            await a.watch_brokers(a_brokers)

            await expire_session_for_real(a, zk_connect, lost)
            assert lost_epochs == [None]  # the epoch is forgotten before the callback runs
            with pytest.raises(ControllerMovedError):
                await a.update_partition_states({TP0: (STATE0, 0)})

            await b_fires.more_than(0)
            assert await b.try_elect() == 2

            # kazoo opened a new session by itself; the watch came back in it and was
            # called once, since nobody reports what changed while the session was gone.
            seen = await a_brokers.more_than(0)
            assert a.connected
            assert a.session_id not in (None, old_session)
            await zk(
                zk_client,
                "create",
                "/brokers/ids/7",
                encode_broker_registration("h", 1, 1),
                makepath=True,
            )
            await a_brokers.more_than(seen)
            assert set(await a.live_brokers()) == {7}
            assert await a.try_elect() is None

    run(scenario())


# -- watches ---------------------------------------------------------------------------------


@pytest.fixture
def own_zookeeper() -> Iterator[ZooKeeperServer]:
    """A ZooKeeper this test may kill and restart (the session one must stay up)."""
    server = ZooKeeperServer(ZooKeeperConfig())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.timeout(90)
def test_watches_fire_after_every_change_and_survive_a_zookeeper_restart(
    own_zookeeper: ZooKeeperServer,
) -> None:
    # The server is named twice. kazoo waits session_timeout / len(hosts) for the answer to
    # a connect attempt, and an attempt that lands while the restarted server is still
    # starting can go unanswered: with one entry it would wait a whole session timeout and
    # reconnect just after the session expired (seen under load), with two it retries in time.
    server = own_zookeeper.connect_string
    connect = f"{server},{server}/cluster"

    async def scenario() -> None:
        observer = KazooClient(
            hosts=connect, timeout=20.0, connection_retry=KazooRetry(max_tries=-1, max_delay=1.0)
        )
        async with candidate(connect, 1, session_timeout_ms=15000) as controller:
            await zk(observer, "start", timeout=10)
            try:
                assert await controller.try_elect() == 1
                brokers, reassignment, notes = Fires(), Fires(), Fires()
                await controller.watch_brokers(brokers)
                await controller.watch_reassignment(reassignment)
                # Its parent does not exist yet: the watch waits for it to appear.
                await controller.watch_isr_change_notifications(notes)

                # Each fire re-arms: every change is reported.
                for broker_id in (1, 2):
                    seen = brokers.count
                    data = encode_broker_registration("h", 9090 + broker_id, 1)
                    await zk(observer, "create", f"/brokers/ids/{broker_id}", data, makepath=True)
                    await brokers.more_than(seen)
                request = encode_reassign_partitions({TP0: [2, 1]})
                for change in ("create", "set", "delete"):
                    seen = reassignment.count
                    path = "/admin/reassign_partitions"
                    args = (path,) if change == "delete" else (path, request)
                    await zk(
                        observer,
                        change,
                        *args,
                        **({"makepath": True} if change == "create" else {}),
                    )
                    await reassignment.more_than(seen)
                seen = notes.count
                await zk(
                    observer,
                    "create",
                    "/isr_change_notification/isr_change_",
                    encode_isr_change_notification([TP0]),
                    sequence=True,
                    makepath=True,
                )
                await notes.more_than(seen)

                # Crash and restart ZooKeeper: the session survives, kazoo drops the watches.
                session = controller.session_id
                counts = (brokers.count, reassignment.count, notes.count)
                await asyncio.to_thread(own_zookeeper.kill)
                await asyncio.to_thread(own_zookeeper.start)
                # Reconnected: each watch is called once, since changes made meanwhile
                # would not be reported.
                await brokers.more_than(counts[0], wait_s=RECONNECT_WAIT_S)
                await reassignment.more_than(counts[1], wait_s=RECONNECT_WAIT_S)
                await notes.more_than(counts[2], wait_s=RECONNECT_WAIT_S)
                assert controller.session_id == session
                assert controller.epoch == 1

                # And they are set again: later changes fire them.
                seen = brokers.count
                await zk(
                    observer, "create", "/brokers/ids/3", encode_broker_registration("h", 3, 1)
                )
                await brokers.more_than(seen)
                seen = reassignment.count
                await zk(observer, "create", "/admin/reassign_partitions", request)
                await reassignment.more_than(seen)
                # The session survived, so the epoch still fences writes in our favour.
                await create_topic(observer, "orders", {0: [1, 2]})
                assert await controller.create_partition_states({TP0: STATE0}) == {TP0: 0}

                # A cancelled watch stays quiet.
                watch = await controller.watch_topics(Fires())
                watch.cancel()
                assert not watch.active
            finally:
                await zk(observer, "stop")
                await zk(observer, "close")

    run(scenario())


# -- partition states ------------------------------------------------------------------------


def test_partition_state_writes_are_conditional_and_never_overwrite_a_newer_state(
    zk_connect: str, zk_client: KazooClient
) -> None:
    async def scenario() -> None:
        async with candidate(zk_connect, 1) as controller:
            await create_topic(zk_client, "orders", {0: [1, 2], 1: [2, 1]})
            assert await controller.try_elect() == 1
            created = await controller.create_partition_states({TP0: STATE0, TP1: STATE1})
            assert created == {TP0: 0, TP1: 0}
            data, _ = await zk(zk_client, "get", "/brokers/topics/orders/partitions/0/state")
            assert (
                data
                == b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2]}'
            )
            assert (await zk(zk_client, "get", "/brokers/topics/orders/partitions/0"))[0] == b""
            # Created again with the same content: a resent create, counted as done. Other
            # content, or a topic that does not exist: not created.
            gone = TopicPartition("gone", 0)
            assert await controller.create_partition_states(
                {TP0: STATE0, TP1: STATE0, gone: STATE0}
            ) == {
                TP0: 0,
                TP1: None,
                gone: None,
            }

            # A leader shrank the ISR of partition 1 meanwhile (version 0 -> 1).
            shrunk = PartitionStateData(leader=2, leader_epoch=0, isr=(2,), controller_epoch=1)
            await zk(
                zk_client,
                "set",
                "/brokers/topics/orders/partitions/1/state",
                encode_partition_state(shrunk),
                0,
            )

            new0 = PartitionStateData(leader=2, leader_epoch=1, isr=(2,), controller_epoch=1)
            new1 = PartitionStateData(leader=1, leader_epoch=1, isr=(1,), controller_epoch=1)
            missing = TopicPartition("orders", 9)
            written = await controller.update_partition_states(
                {TP0: (new0, 0), TP1: (new1, 0), missing: (new1, 0)}
            )
            assert written == {TP0: 1, TP1: None, missing: None}
            states = await controller.partition_states([TP0, TP1, missing])
            assert states == {
                TP0: PartitionState.from_data(new0, 1),
                TP1: PartitionState.from_data(shrunk, 1),  # the stale write did not overwrite
            }
            # Our own write sent again at its old version (a lost reply): done, same version.
            assert await controller.update_partition_states({TP0: (new0, 0)}) == {TP0: 1}
            assert await controller.update_partition_states({}) == {}

    run(scenario())


def test_grouped_state_writes_give_each_partition_its_own_result(
    zk_connect: str, zk_client: KazooClient
) -> None:
    """Hundreds of state znodes go as one multi per MULTI_GROUP partitions; a conflict in a
    group (an existing state of other content, a state that moved on) fails that multi, and
    its partitions are sent again one by one: only the conflicting one is refused."""
    n = 2 * MULTI_GROUP + 50

    async def scenario() -> None:
        async with candidate(zk_connect, 1) as controller:
            await create_topic(zk_client, "wide", {p: [1, 2] for p in range(n)})
            assert await controller.try_elect() == 1
            tps = [TopicPartition("wide", p) for p in range(n)]
            clash = tps[MULTI_GROUP + 7]  # in the second group
            await zk(
                zk_client,
                "create",
                f"/brokers/topics/wide/partitions/{clash.partition}/state",
                encode_partition_state(STATE1),
                makepath=True,
            )
            created = await controller.create_partition_states({tp: STATE0 for tp in tps})
            assert created == {tp: None if tp == clash else 0 for tp in tps}
            states = await controller.partition_states(tps)
            assert states[clash] == PartitionState.from_data(STATE1, 0)
            assert all(
                states[tp] == PartitionState.from_data(STATE0, 0) for tp in tps if tp != clash
            )

            moved = tps[2 * MULTI_GROUP + 3]  # in the last group
            shrunk = PartitionStateData(leader=1, leader_epoch=0, isr=(1,), controller_epoch=1)
            await zk(
                zk_client,
                "set",
                f"/brokers/topics/wide/partitions/{moved.partition}/state",
                encode_partition_state(shrunk),
                0,
            )
            newer = PartitionStateData(leader=2, leader_epoch=1, isr=(2,), controller_epoch=1)
            written = await controller.update_partition_states(
                {tp: (newer, 0) for tp in tps if tp != clash}
            )
            assert written == {tp: None if tp == moved else 1 for tp in tps if tp != clash}
            after = await controller.partition_states(tps)
            assert after[moved] == PartitionState.from_data(shrunk, 1)
            assert after[tps[0]] == PartitionState.from_data(newer, 1)

    run(scenario())


# -- reads and the other fenced writes -------------------------------------------------------


def test_reads_and_admin_deletes(zk_connect: str, zk_client: KazooClient) -> None:
    async def scenario() -> None:
        async with candidate(zk_connect, 1) as controller:
            assert await controller.live_brokers() == {}
            assert await controller.topics() == set()
            assert await controller.topic_assignment("orders") is None
            assert await controller.isr_change_notifications() == []
            assert await controller.topics_to_delete() == set()
            assert await controller.reassign_request() is None
            assert await controller.preferred_replica_election_request() is None
            assert await controller.controller_id() is None
            assert await controller.controller_epoch() is None

            data = encode_broker_registration("10.0.0.3", 9093, 1, kafka_port=19093)
            await zk(zk_client, "create", "/brokers/ids/3", data, ephemeral=True, makepath=True)
            await zk(zk_client, "create", "/brokers/ids/9", b"{garbage", ephemeral=True)
            await create_topic(zk_client, "orders", {0: [1, 2], 1: [2, 1]})
            await create_topic(zk_client, "audit", {0: [3]})
            await zk(zk_client, "create", "/brokers/topics/bad", b"[]")
            await zk(
                zk_client, "create", "/config/topics/audit", encode_topic_config({}), makepath=True
            )
            await zk(zk_client, "create", "/admin/delete_topics/audit", makepath=True)
            notes = [
                await zk(
                    zk_client,
                    "create",
                    "/isr_change_notification/isr_change_",
                    payload,
                    sequence=True,
                    makepath=True,
                )
                for payload in (encode_isr_change_notification([TP0, TP1]), b"not json")
            ]
            names = [note.rsplit("/", 1)[1] for note in notes]
            request = encode_reassign_partitions({TP0: [2, 1]})
            await zk(zk_client, "create", "/admin/reassign_partitions", request)
            election = encode_preferred_replica_election([TP1])
            await zk(zk_client, "create", "/admin/preferred_replica_election", election)

            _, stat = await zk(zk_client, "get", "/brokers/ids/3")
            brokers = await controller.live_brokers()
            assert list(brokers) == [3]  # the malformed registration is left out
            assert isinstance(brokers[3], LiveBroker)
            assert (brokers[3].host, brokers[3].port, brokers[3].broker_epoch) == (
                "10.0.0.3",
                9093,
                stat.czxid,
            )
            assert brokers[3].kafka_endpoint == ("10.0.0.3", 19093)
            assert await controller.topics() == {"orders", "audit", "bad"}
            assert await controller.topic_assignment("orders") == {0: [1, 2], 1: [2, 1]}
            assert await controller.topic_assignments(["orders", "audit", "bad", "none"]) == {
                "orders": {0: [1, 2], 1: [2, 1]},
                "audit": {0: [3]},
            }
            assert await controller.isr_change_notifications() == [
                (names[0], [TP0, TP1]),
                (names[1], []),
            ]
            assert await controller.topics_to_delete() == {"audit"}
            assert await controller.reassign_request() == {TP0: [2, 1]}
            assert await controller.preferred_replica_election_request() == {TP1}

            # Writes need the epoch; bad names and paths are refused before any request.
            with pytest.raises(ControllerMovedError):
                await controller.delete_isr_change_notifications(names)
            assert await controller.try_elect() == 1
            with pytest.raises(ValueError, match="not an ISR change notification"):
                await controller.delete_isr_change_notifications(["../controller"])
            with pytest.raises(ValueError, match="not an admin request"):
                await controller.delete_admin_node("/controller")

            await controller.delete_isr_change_notifications([*names, "isr_change_0000009999"])
            assert await controller.isr_change_notifications() == []
            for path in ("/admin/reassign_partitions", "/admin/preferred_replica_election"):
                await controller.delete_admin_node(path)
                await controller.delete_admin_node(path)  # already gone: fine
            assert await controller.reassign_request() is None

            version = await controller.set_topic_assignment("orders", {0: [2, 1], 1: [2, 1]})
            assert version == 1
            assert await controller.topic_assignment("orders") == {0: [2, 1], 1: [2, 1]}
            assert (
                await controller.set_topic_assignment("orders", {0: [1]}, expected_version=0)
                is None
            )
            assert await controller.set_topic_assignment("none", {0: [1]}) is None

            assert await controller.create_partition_states({TopicPartition("audit", 0): STATE0})
            await controller.delete_topic_znodes("audit")
            for path in (
                "/brokers/topics/audit",
                "/config/topics/audit",
                "/admin/delete_topics/audit",
            ):
                assert await zk(zk_client, "exists", path) is None
            assert await controller.topics() == {"orders", "bad"}
            await controller.delete_topic_znodes("audit")  # nothing left: fine

    run(scenario())
