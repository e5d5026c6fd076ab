"""The Kafka listener's partition admin APIs: CreatePartitions, ElectLeaders,
AlterPartitionReassignments, ListPartitionReassignments and DescribeLogDirs.

The first four write and read the controller's ZooKeeper paths through
:mod:`proto.zk.partition_admin`, the code under ``minibroker topics alter`` too, and the
controller acts (Kafka 2.x's ``ZkAdminManager`` and ZooKeeper-based admin tools):

- CreatePartitions: the topic's extended assignment
  (:func:`~proto.zk.partition_admin.add_partitions`), then, as Kafka's
  ``DelayedCreatePartitions``, a wait up to the request's timeout for every partition to
  have a leader in this broker's metadata (REQUEST_TIMED_OUT past it; the
  partitions are created anyway).
- ElectLeaders, preferred: ``/admin/preferred_replica_election``, then a wait for the
  preferred replicas to lead (Kafka's ``DelayedElectLeader``). Each partition is first
  judged from the metadata as Kafka's controller judges it (ELECTION_NOT_NEEDED when the
  preferred replica leads, PREFERRED_LEADER_NOT_AVAILABLE when it is down or out of the ISR).
- ElectLeaders, unclean: there is no znode for it in Kafka either; the controller elects
  (:meth:`controller.kafka_controller.KafkaController.elect_unclean_leaders`), so a broker
  that is not the controller answers NOT_CONTROLLER, as Kafka 2.8's does.
- AlterPartitionReassignments: the targets merged into ``/admin/reassign_partitions``
  after the checks of Kafka's ``KafkaController.validateReplicas``. Cancelling (null
  replicas) a running reassignment writes its original replicas (RS - AR of the version-2
  topic znode) as the target, which is what Kafka's controller does
  (``maybeBuildReassignment``): the controller stops the adding replicas and moves
  leadership back to an original replica first if an adding one leads
  (:mod:`controller.reassignment`). NO_REASSIGNMENT_IN_PROGRESS when the topic znode
  shows none. The answer waits, up to the request's timeout, until the controller has
  recorded each target in the topic znode (REQUEST_TIMED_OUT past it; the request stays),
  as Kafka's controller answers after its first write. A cancellation is written in one
  multi-op with a check that the topic znode it was decided from is unchanged, so it
  cannot cross the controller finishing the move (judged again if it does).
- ListPartitionReassignments: the partitions whose topic znode has adding or removing
  replicas, with RS, AR and RR exactly as the controller wrote them.

Any broker answers all of these but unclean elections (Kafka 2.8 routes them, and the
clients send them, to the controller; the znodes make that unnecessary here).

DescribeLogDirs is this broker's own: its one data dir (KAFKA_STORAGE_ERROR once offline)
with each log's size and lag, ``max(HW - LEO, 0)`` as Kafka's
``ReplicaManager.getLogEndOffsetLag`` (0 for a leader, -1 for a log with no partition).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence

from broker.kafka_listener.messages import Tree
from broker.kafka_listener.wire_request import Answer, KafkaRequest, ms, per_topic, session_of
from broker.metadata_cache import MetadataCache
from broker.partition_limits import POLICY_VIOLATION, PartitionBudget
from broker.replication.replica_manager import ReplicaManager
from broker.request_handlers import denied_topics
from broker.security.acl_authorizer import AclAuthorizer
from broker.zk_client import BrokerZkClient, ZkError
from controller.reassignment import reassign_to, validate_reassignment
from proto.errors import BrokerResponseError
from proto.replica_assignment import assign_new_partitions
from proto.topic_partition import TopicPartition, topic_name_problem
from proto.wire import minibroker_pb2 as pb
from proto.zk import partition_admin, znodes
from proto.zk.acl_bindings import AclOperation
from proto.zk.znode_limits import ZnodeTooLargeError, check_assignment_floor

logger = logging.getLogger(__name__)

__all__ = ["PARTITION_ADMIN_VERSIONS", "PartitionAdminApis", "UncleanElection"]

DESCRIBE_LOG_DIRS, CREATE_PARTITIONS, ELECT_LEADERS = 35, 37, 43
ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 45, 46
PARTITION_ADMIN_VERSIONS: dict[int, tuple[int, int]] = {
    DESCRIBE_LOG_DIRS: (1, 2),
    CREATE_PARTITIONS: (0, 3),
    ELECT_LEADERS: (0, 2),
    ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    LIST_PARTITION_REASSIGNMENTS: (0, 0),
}
"""Kafka 2.8's highs. DescribeLogDirs 3 adds a top-level error code and 4 the dir's total
and usable bytes (Kafka 3.x); kio has no schema for DescribeLogDirs 0."""

PREFERRED, UNCLEAN = 0, 1
NO_REASSIGNMENT_IN_PROGRESS = 85
INVALID_OFFSET_LAG = -1
_JUDGE_ATTEMPTS = 10
_POLL_S = 0.05

UncleanElection = Callable[
    [Sequence[TopicPartition]], Awaitable[dict[TopicPartition, tuple[int, str | None]]] | None
]
"""The controller's unclean election: None when this broker is not the controller, else
an awaitable of each partition's (error code, message) once the controller has decided."""


class PartitionAdminApis:
    """The handlers of :data:`PARTITION_ADMIN_VERSIONS`, by API key."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        cache: MetadataCache,
        zk: BrokerZkClient,
        unclean_election: UncleanElection,
        authorizer: AclAuthorizer | None = None,
    ) -> None:
        self.replica_manager = replica_manager
        self.authorizer = authorizer or AclAuthorizer(
            replica_manager.broker_id, None, enabled=False
        )
        """CreatePartitions needs Alter on the topic (the Cluster's APIs are checked by
        :func:`broker.kafka_listener.acl_apis.cluster_checked`)."""
        self.cache = cache
        self.zk = zk
        self.unclean_election = unclean_election
        self.handlers: dict[int, Callable[[KafkaRequest], Awaitable[Answer]]] = {
            DESCRIBE_LOG_DIRS: self.describe_log_dirs,
            CREATE_PARTITIONS: self.create_partitions,
            ELECT_LEADERS: self.elect_leaders,
            ALTER_PARTITION_REASSIGNMENTS: self.alter_partition_reassignments,
            LIST_PARTITION_REASSIGNMENTS: self.list_partition_reassignments,
        }

    # -- CreatePartitions ------------------------------------------------------------------

    async def create_partitions(self, request: KafkaRequest) -> Answer:
        return self._create_partitions(request)

    async def _create_partitions(self, request: KafkaRequest) -> Tree:
        body = request.body
        names = [t.name for t in body.topics]
        outcomes: dict[str, tuple[int, str | None]] = {}
        grown: dict[str, int] = {}
        config = self.replica_manager.config
        budget = PartitionBudget.of(
            config.max_partitions, config.max_broker_partitions, self.cache.all_replicas()
        )
        denied = denied_topics(self.authorizer, session_of(request), AclOperation.ALTER, names)
        for topic in body.topics:
            name = topic.name
            if names.count(name) > 1:
                outcomes[name] = (pb.INVALID_REQUEST, "Duplicate topic in request.")
                continue
            if name in denied:
                outcomes[name] = (pb.TOPIC_AUTHORIZATION_FAILED, "no Alter on the topic")
                continue
            given = (
                None
                if topic.assignments is None
                else [list(a.broker_ids) for a in topic.assignments]
            )
            outcomes[name] = await self._add_partitions(
                name, topic.count, given, body.validate_only, budget
            )
            if outcomes[name][0] == pb.NONE and not body.validate_only:
                grown[name] = topic.count
        timeout_ms = ms(body.timeout)
        if grown and timeout_ms > 0:
            led = await self._wait(timeout_ms, lambda: self._led(grown) >= set(grown))
            if not led:
                for name in grown.keys() - self._led(grown):
                    outcomes[name] = (
                        pb.REQUEST_TIMED_OUT,
                        f"the partitions of {name} were created but not all have a leader yet",
                    )
        return {
            "results": [
                {"name": name, "error_code": code, "error_message": message}
                for name, (code, message) in outcomes.items()
            ]
        }

    async def _add_partitions(
        self,
        name: str,
        count: int,
        given: list[list[int]] | None,
        validate_only: bool,
        budget: PartitionBudget,
    ) -> tuple[int, str | None]:
        """Grow one topic, within the partition limits (:mod:`broker.partition_limits`),
        checked before the new partitions are placed, and ``zookeeper.jute.maxbuffer``."""
        if topic_name_problem(name) is not None:  # no such znode can exist, as Kafka finds
            return pb.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
        limit = self.replica_manager.config.zookeeper_jute_maxbuffer
        what = f"topic '{name}'"
        try:
            live = sorted(await self.zk.get_live_brokers())

            def grow(existing: dict[int, list[int]]) -> dict[int, list[int]]:
                factor = len(existing.get(0, ()))
                if given is None and existing and count > len(existing):
                    budget.precheck(what, count - len(existing), factor, live)
                    check_assignment_floor(znodes.topic_path(name), count, factor, limit)
                added = assign_new_partitions(name, existing, count, live, given)
                budget.check(what, added)
                return added

            added = await partition_admin.add_partitions(
                self.zk, name, grow, validate_only=validate_only
            )
            budget.add(added)
        except BrokerResponseError as err:
            return int(err.code), str(err)
        except ZnodeTooLargeError as err:  # before ZkError: never "unavailable"
            return POLICY_VIOLATION, str(err)
        except znodes.ZkDataError as err:
            return pb.UNKNOWN_SERVER_ERROR, f"topic {name} has a malformed assignment: {err}"
        except ZkError as err:
            return pb.REQUEST_TIMED_OUT, f"ZooKeeper unavailable: {err}"
        if not validate_only:
            logger.info(
                "event=partitions_created broker=%d topic=%s added=%s via=kafka_listener",
                self.replica_manager.broker_id,
                name,
                added,
            )
        return pb.NONE, None

    def _led(self, grown: dict[str, int]) -> set[str]:
        live = {b.broker_id for b in self.cache.brokers()}
        return {
            name
            for name, count in grown.items()
            if len(partitions := self.cache.partitions_of(name)) >= count
            and all(p.leader in live for p in partitions.values())
        }

    # -- ElectLeaders ----------------------------------------------------------------------

    async def elect_leaders(self, request: KafkaRequest) -> Answer:
        return self._elect_leaders(request)

    async def _elect_leaders(self, request: KafkaRequest) -> Tree:
        body = request.body
        election_type = getattr(body, "election_type", PREFERRED)
        asked = body.topic_partitions
        if asked is None:
            tps = sorted(
                TopicPartition(t, p)
                for t in self.cache.topics()
                for p in self.cache.partitions_of(t)
            )
        else:
            tps = list(
                dict.fromkeys(TopicPartition(t.topic, p) for t in asked for p in t.partitions)
            )
        results: dict[TopicPartition, tuple[int, str | None]]
        if election_type not in (PREFERRED, UNCLEAN):
            results = {
                tp: (pb.INVALID_REQUEST, f"unknown election type {election_type}") for tp in tps
            }
            return _election_answer(results, pb.INVALID_REQUEST)
        if election_type == PREFERRED:
            results = await self._elect_preferred(tps, ms(body.timeout))
        else:
            elected = self.unclean_election(tps)
            if elected is None:
                return _election_answer({tp: (pb.NOT_CONTROLLER, None) for tp in tps}, pb.NONE)
            try:
                results = await elected
            except BrokerResponseError as err:  # the controller moved or stopped meanwhile
                return _election_answer({tp: (int(err.code), str(err)) for tp in tps}, pb.NONE)
            waiting = [tp for tp, (code, _) in results.items() if code == pb.NONE]
            results.update(await self._await_leaders(waiting, None, ms(body.timeout)))
        if asked is None:  # Kafka leaves out what needed no election when all were asked
            results = {tp: r for tp, r in results.items() if r[0] != pb.ELECTION_NOT_NEEDED}
        return _election_answer(results, pb.NONE)

    async def _elect_preferred(
        self, tps: Sequence[TopicPartition], timeout_ms: int
    ) -> dict[TopicPartition, tuple[int, str | None]]:
        """Kafka's controller's judgement of each partition, then the znode and the wait.
        Leader and ISR are read from the state znodes, as the controller's election reads
        them: this broker's metadata learns of an ISR change only after the controller."""
        results: dict[TopicPartition, tuple[int, str | None]] = {}
        live = {b.broker_id for b in self.cache.brokers()}
        electable: list[TopicPartition] = []
        known = [tp for tp in tps if self.cache.partition(tp) is not None]
        try:
            states = await self.zk.get_partition_states(known) if known else {}
            deleted = {
                t
                for t in {tp.topic for tp in known}
                if await self.zk.is_topic_marked_for_deletion(t)
            }
        except (ZkError, znodes.ZkDataError) as err:
            return {tp: (pb.REQUEST_TIMED_OUT, f"ZooKeeper: {err}") for tp in tps}
        for tp in tps:
            info = self.cache.partition(tp)
            state = states.get(tp)
            if info is None or not info.replicas or state is None:
                results[tp] = (pb.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            elif tp.topic in deleted:
                results[tp] = (pb.INVALID_TOPIC, "The topic is being deleted")
            elif state.leader == info.replicas[0]:
                results[tp] = (pb.ELECTION_NOT_NEEDED, None)
            elif info.replicas[0] not in live or info.replicas[0] not in state.isr:
                why = "not live" if info.replicas[0] not in live else "not in the ISR"
                results[tp] = (
                    pb.PREFERRED_LEADER_NOT_AVAILABLE,
                    f"Failed to elect leader for partition {tp} under strategy "
                    f"PreferredReplicaPartitionLeaderElectionStrategy: preferred replica "
                    f"{info.replicas[0]} is {why}",
                )
            else:
                electable.append(tp)
        if not electable:
            return results
        try:
            requested = await partition_admin.request_preferred_replica_election(
                self.zk, electable, timeout_ms / 1000
            )
        except ZkError as err:
            results.update({tp: (pb.REQUEST_TIMED_OUT, f"ZooKeeper: {err}") for tp in electable})
            return results
        if not requested:
            message = "a preferred replica election is still in progress"
            results.update({tp: (pb.REQUEST_TIMED_OUT, message) for tp in electable})
            return results
        logger.info(
            "event=preferred_replica_election_requested broker=%d partitions=%s",
            self.replica_manager.broker_id,
            [str(tp) for tp in electable],
        )
        results.update(await self._await_leaders(electable, "preferred", timeout_ms))
        return results

    async def _await_leaders(
        self, tps: Collection[TopicPartition], which: str | None, timeout_ms: int
    ) -> dict[TopicPartition, tuple[int, str | None]]:
        """Kafka's ``DelayedElectLeader``: NONE for each partition whose new leader
        (its preferred replica, or any live one) has reached this broker's metadata,
        REQUEST_TIMED_OUT for the others once ``timeout_ms`` passes."""

        def elected() -> set[TopicPartition]:
            live = {b.broker_id for b in self.cache.brokers()}
            done = set()
            for tp in tps:
                info = self.cache.partition(tp)
                if info is None:
                    continue
                if (which == "preferred" and info.replicas and info.leader == info.replicas[0]) or (
                    which is None and info.leader in live
                ):
                    done.add(tp)
            return done

        await self._wait(timeout_ms, lambda: elected() >= set(tps))
        finished = elected()
        return {
            tp: (pb.NONE, None)
            if tp in finished
            else (pb.REQUEST_TIMED_OUT, "the election has not reached this broker yet")
            for tp in tps
        }

    # -- partition reassignments -----------------------------------------------------------

    async def alter_partition_reassignments(self, request: KafkaRequest) -> Answer:
        return self._alter_partition_reassignments(request)

    async def _alter_partition_reassignments(self, request: KafkaRequest) -> Tree:
        asked = [
            (TopicPartition(t.name, p.partition_index), p.replicas)
            for t in request.body.topics
            for p in t.partitions
        ]
        results: dict[TopicPartition, tuple[int, str | None]] = {}
        targets: dict[TopicPartition, list[int]] = {}
        cancelled: list[TopicPartition] = []
        try:
            live = set(await self.zk.get_live_brokers())
            for _ in range(_JUDGE_ATTEMPTS):
                results, targets, cancelled = {}, {}, []
                assignments: dict[str, tuple[dict[int, znodes.ReplicaAssignment], int] | None]
                assignments = {}
                for tp, replicas in asked:
                    if tp.topic not in assignments:
                        assignments[tp.topic] = await self._assignment(tp.topic)
                    read = assignments[tp.topic]
                    current = None if read is None else read[0].get(tp.partition)
                    results[tp] = self._judge_reassignment(tp, replicas, current, live)
                    if results[tp][0] != pb.NONE or current is None:
                        continue
                    if replicas is None:  # Kafka's maybeBuildReassignment(None): back to ORS
                        targets[tp] = list(current.origin_replicas)
                        cancelled.append(tp)
                    else:
                        targets[tp] = list(replicas)
                if not targets:
                    break
                # A cancellation is decided from the topic znode as read: written only if
                # it has not changed since (the move may have finished meanwhile).
                versions = {
                    tp.topic: read[1]
                    for tp in cancelled
                    if (read := assignments[tp.topic]) is not None
                }
                if await partition_admin.request_reassignments(
                    self.zk, targets, unless_changed=versions
                ):
                    break
            else:
                raise BrokerResponseError(
                    "the reassigned topics kept changing; retry", code=pb.INVALID_REQUEST
                )
        except (ZkError, znodes.ZkDataError) as err:
            return {
                "error_code": pb.REQUEST_TIMED_OUT,
                "error_message": f"ZooKeeper: {err}",
                "responses": [],
            }
        except BrokerResponseError as err:
            return {"error_code": int(err.code), "error_message": str(err), "responses": []}
        if targets:
            logger.info(
                "event=reassignment_requested broker=%d targets=%s cancelled=%s",
                self.replica_manager.broker_id,
                {str(tp): r for tp, r in targets.items()},
                [str(tp) for tp in cancelled],
            )
            for tp in await self._await_recorded(targets, ms(request.body.timeout)):
                results[tp] = (
                    pb.REQUEST_TIMED_OUT,
                    "the reassignment is requested, but the controller has not recorded it yet",
                )
        answers = [
            (
                tp,
                {"partition_index": tp.partition, "error_code": code, "error_message": message},
            )
            for tp, (code, message) in results.items()
        ]
        return {
            "error_code": pb.NONE,
            "error_message": None,
            "responses": per_topic(answers, "name", "partitions"),
        }

    async def _await_recorded(
        self, targets: dict[TopicPartition, list[int]], timeout_ms: int
    ) -> set[TopicPartition]:
        """Wait, up to ``timeout_ms``, until the controller has recorded each target in
        the topic znode (RS, AR and RR written, or the move already done), as Kafka's
        controller answers only after its first write: a ListPartitionReassignments right
        after the answer then shows the move. Returns the partitions still unrecorded."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        waiting = dict(targets)
        while True:
            for topic in sorted({tp.topic for tp in waiting}):
                try:
                    assignment = await partition_admin.read_topic_assignment(self.zk, topic)
                except znodes.ZkDataError:
                    assignment = None
                except ZkError:
                    return set(waiting)
                for tp in [tp for tp in waiting if tp.topic == topic]:
                    current = (assignment or {}).get(tp.partition)
                    if current is None or reassign_to(current, waiting[tp]) == current:
                        del waiting[tp]  # recorded (or the topic is gone: nothing to wait for)
            if not waiting or loop.time() >= deadline:
                return set(waiting)
            await asyncio.sleep(_POLL_S)

    async def _assignment(
        self, topic: str
    ) -> tuple[dict[int, znodes.ReplicaAssignment], int] | None:
        """The topic's assignment with its adding and removing replicas, and the znode's
        version; None if it does not exist or is queued for deletion."""
        if topic_name_problem(topic) is not None:
            return None
        if await self.zk.is_topic_marked_for_deletion(topic):
            return None
        return await partition_admin.read_topic_assignment_and_version(self.zk, topic)

    @staticmethod
    def _judge_reassignment(
        tp: TopicPartition,
        replicas: Sequence[int] | None,
        current: znodes.ReplicaAssignment | None,
        live: set[int],
    ) -> tuple[int, str | None]:
        # In Kafka's order (KafkaController.processApiPartitionReassignment): the list is
        # checked first, then whether there is a reassignment to cancel, then the partition.
        if replicas is None:
            if current is None or not current.is_being_reassigned:
                return NO_REASSIGNMENT_IN_PROGRESS, f"no reassignment of {tp} is in progress"
            return pb.NONE, None
        try:
            # New replicas must be live; they are counted from the original replicas, so
            # replacing a running reassignment does not keep its dead adding replicas.
            validate_reassignment(current.origin_replicas if current else [], replicas, live)
        except BrokerResponseError as err:
            return int(err.code), str(err)
        if current is None:
            return pb.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
        return pb.NONE, None

    async def list_partition_reassignments(self, request: KafkaRequest) -> Answer:
        return self._list_partition_reassignments(request)

    async def _list_partition_reassignments(self, request: KafkaRequest) -> Tree:
        asked = request.body.topics
        wanted = (
            None
            if asked is None
            else {TopicPartition(t.name, p) for t in asked for p in t.partition_indexes}
        )
        try:
            ongoing = await partition_admin.read_ongoing_reassignments(
                self.zk, None if wanted is None else {tp.topic for tp in wanted}
            )
        except ZkError as err:
            return {
                "error_code": pb.REQUEST_TIMED_OUT,
                "error_message": f"ZooKeeper: {err}",
                "topics": [],
            }
        answers: list[tuple[TopicPartition, Tree]] = [
            (
                tp,
                {
                    "partition_index": tp.partition,
                    "replicas": list(full.replicas),
                    "adding_replicas": list(full.adding_replicas),
                    "removing_replicas": list(full.removing_replicas),
                },
            )
            for tp, full in sorted(ongoing.items())
            if wanted is None or tp in wanted
        ]
        return {
            "error_code": pb.NONE,
            "error_message": None,
            "topics": per_topic(answers, "name", "partitions"),
        }

    # -- DescribeLogDirs -------------------------------------------------------------------

    async def describe_log_dirs(self, request: KafkaRequest) -> Answer:
        return self._describe_log_dirs(request)

    async def _describe_log_dirs(self, request: KafkaRequest) -> Tree:
        manager = self.replica_manager
        log_dir = str(manager.log_manager.data_dir.resolve())
        if manager.log_dir_failure is not None:
            return {
                "results": [
                    {"error_code": pb.KAFKA_STORAGE_ERROR, "log_dir": log_dir, "topics": []}
                ]
            }
        asked = request.body.topics
        wanted = (
            None
            if asked is None
            else {TopicPartition(t.topic, p) for t in asked for p in t.partitions}
        )
        answers: list[tuple[TopicPartition, Tree]] = []
        for tp, log in sorted(manager.log_manager.all_logs().items()):
            if wanted is not None and tp not in wanted:
                continue
            partition = manager.partitions.get(tp)
            lag = (
                INVALID_OFFSET_LAG
                if partition is None
                else max(partition.high_watermark - log.log_end_offset, 0)
            )
            answers.append(
                (
                    tp,
                    {
                        "partition_index": tp.partition,
                        "partition_size": log.size_in_bytes,
                        "offset_lag": lag,
                        "is_future_key": False,
                    },
                )
            )
        return {
            "results": [
                {
                    "error_code": pb.NONE,
                    "log_dir": log_dir,
                    "topics": per_topic(answers, "name", "partitions"),
                }
            ]
        }

    # -- helpers ---------------------------------------------------------------------------

    @staticmethod
    async def _wait(timeout_ms: int, done: Callable[[], bool]) -> bool:
        """Poll ``done()`` until it holds or ``timeout_ms`` passes; its last answer."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while not done():
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(_POLL_S)
        return True


def _election_answer(results: dict[TopicPartition, tuple[int, str | None]], top_level: int) -> Tree:
    answers = [
        (tp, {"partition_id": tp.partition, "error_code": code, "error_message": message})
        for tp, (code, message) in results.items()
    ]
    return {
        "error_code": top_level,
        "replica_election_results": per_topic(answers, "topic", "partition_result"),
    }
