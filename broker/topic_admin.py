"""Topic administration for CreateTopics and DeleteTopics on the Kafka listener, and for the
topics a Metadata request creates on either door (Kafka 2.x's ``ZkAdminManager``): a broker
that receives one writes the controller's ZooKeeper paths, as ``minibroker topics`` does,
and the controller acts.

Create writes ``/config/topics/<t>`` first and then ``/brokers/topics/<t>``, which the
controller watches (so the topic never exists without its config); delete creates
``/admin/delete_topics/<t>``. Both may wait, up to the request's timeout, for the outcome to
reach this broker's metadata, as Kafka's ``DelayedCreatePartitions`` and
``DelayedDeleteTopics`` do; past it the answer is REQUEST_TIMED_OUT and the work goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kazoo.exceptions import NodeExistsError, NoNodeError

from broker.metadata_cache import MetadataCache
from broker.partition_limits import POLICY_VIOLATION, PartitionBudget
from broker.zk_client import BrokerZkClient, ZkError
from proto.config.broker_config import BrokerConfig
from proto.config.describe_configs import (
    BrokerLayers,
    DescribedConfig,
    describe_topic,
    static_broker_properties,
)
from proto.config.topic_config_def import check_topic_config
from proto.errors import BrokerResponseError
from proto.replica_assignment import assign_replicas, validate_replica_assignment
from proto.topic_partition import topic_name_problem
from proto.wire import minibroker_pb2 as pb
from proto.zk import znodes
from proto.zk.znode_limits import ZnodeTooLargeError, check_assignment_floor, check_create

logger = logging.getLogger(__name__)

__all__ = ["NewTopic", "TopicAdmin", "TopicOutcome"]

TOPIC_ALREADY_EXISTS = 36
INVALID_CONFIG = 40
_POLL_S = 0.05


@dataclass(frozen=True)
class NewTopic:
    """One topic of a CreateTopics request; -1 partitions or replication factor: the
    broker's ``num.partitions`` / ``default.replication.factor`` (KIP-464)."""

    name: str
    num_partitions: int
    replication_factor: int
    assignment: Mapping[int, Sequence[int]]
    configs: Mapping[str, str | None]
    """None: a null value, which Kafka refuses (INVALID_REQUEST)."""


@dataclass(frozen=True)
class TopicOutcome:
    error_code: int
    error_message: str | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: tuple[DescribedConfig, ...] | None = None
    """The new topic's configs, as CreateTopics v5 answers them (KIP-525)."""


class TopicAdmin:
    """CreateTopics and DeleteTopics through ZooKeeper."""

    def __init__(self, config: BrokerConfig, zk: BrokerZkClient, cache: MetadataCache) -> None:
        self.config = config
        self.zk = zk
        self.cache = cache

    async def create_topics(
        self, topics: Sequence[NewTopic], timeout_ms: int, validate_only: bool
    ) -> dict[str, TopicOutcome]:
        outcomes: dict[str, TopicOutcome] = {}
        created: dict[str, int] = {}
        existing: list[str] | None = None
        budget = PartitionBudget.of(
            self.config.max_partitions,
            self.config.max_broker_partitions,
            self.cache.all_replicas(),
        )
        for topic in topics:
            try:
                if existing is None:  # read once a request; topics it creates are added
                    existing = await self._children(znodes.BROKER_TOPICS_PATH)
                outcome = await self._create(topic, existing, validate_only, budget)
            except BrokerResponseError as err:
                outcome = TopicOutcome(int(err.code), str(err))
            except ZnodeTooLargeError as err:  # before ZkError: never "unavailable"
                outcome = TopicOutcome(POLICY_VIOLATION, str(err))
            except ZkError as err:
                outcome = TopicOutcome(pb.REQUEST_TIMED_OUT, f"ZooKeeper unavailable: {err}")
            outcomes[topic.name] = outcome
            if outcome.error_code == pb.NONE and not validate_only:
                created[topic.name] = outcome.num_partitions
        if created and timeout_ms > 0:
            ready = await self._wait(timeout_ms, set(created), lambda: self._led(created))
            for name in created:
                if name not in ready:
                    outcomes[name] = TopicOutcome(
                        pb.REQUEST_TIMED_OUT,
                        f"topic {name} was created but its partitions have no leader yet",
                    )
        return outcomes

    async def _create(
        self, topic: NewTopic, existing: list[str], validate_only: bool, budget: PartitionBudget
    ) -> TopicOutcome:
        """Check and write one topic; ``existing`` (the topics in ZooKeeper) gains it, and
        ``budget`` (the partition limits) its partitions. A topic past the limits or too
        large for one znode is refused before its assignment is computed (see
        :mod:`broker.partition_limits`)."""
        name = topic.name
        problem = topic_name_problem(name)
        if problem is not None:
            return TopicOutcome(pb.INVALID_TOPIC, problem)
        nulls = [k for k, v in topic.configs.items() if v is None]
        if nulls:
            return TopicOutcome(
                pb.INVALID_REQUEST,
                f"Null value not supported for topic configs : {','.join(nulls)}",
            )
        try:
            configs = check_topic_config(
                {k: v for k, v in topic.configs.items() if v is not None}, self.config
            )
        except ValueError as err:  # Kafka: InvalidConfigurationException, for bad values too
            return TopicOutcome(INVALID_CONFIG, str(err))
        live = sorted(b.broker_id for b in self.cache.brokers())
        if not live:
            live = sorted(await self.zk.get_live_brokers())
        if topic.assignment:
            if topic.num_partitions != -1 or topic.replication_factor != -1:
                return TopicOutcome(
                    pb.INVALID_REQUEST,
                    "give either a replica assignment or partitions and a replication factor",
                )
            assignment = validate_replica_assignment(topic.assignment, live)
        else:
            partitions = (
                self.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
            )
            factor = (
                self.config.default_replication_factor
                if topic.replication_factor == -1
                else topic.replication_factor
            )
            budget.precheck(f"topic '{name}'", partitions, factor, live)
            check_assignment_floor(
                znodes.topic_path(name), partitions, factor, self.config.zookeeper_jute_maxbuffer
            )
            assignment = assign_replicas(partitions, factor, live)
        for other in existing:
            if other == name:
                return TopicOutcome(TOPIC_ALREADY_EXISTS, f"topic '{name}' already exists")
            if other.replace(".", "_") == name.replace(".", "_"):
                return TopicOutcome(
                    pb.INVALID_TOPIC,
                    f"topic '{name}' collides with existing topic '{other}' "
                    "(names that differ only in '.' and '_' are not allowed)",
                )
        budget.admit(f"topic '{name}'", assignment)
        assignment_data = znodes.encode_topic_assignment(assignment)
        check_create(znodes.topic_path(name), assignment_data, self.config.zookeeper_jute_maxbuffer)
        layers = BrokerLayers(
            dynamic_broker=await self.zk.get_broker_config(self.config.broker_id),
            dynamic_default=await self.zk.get_broker_config(znodes.DEFAULT_BROKER_ENTITY),
            static=static_broker_properties(self.config),
        )
        outcome = TopicOutcome(
            pb.NONE,
            None,
            len(assignment),
            len(assignment[0]),
            tuple(describe_topic(configs, layers)),
        )
        if validate_only:
            return outcome
        if configs:
            data = znodes.encode_topic_config(configs)
            path = znodes.topic_config_path(name)
            try:
                await self.zk.request("create", path, data, makepath=True)
            except NodeExistsError:
                await self.zk.request("set", path, data)
        try:
            await self.zk.request("create", znodes.topic_path(name), assignment_data, makepath=True)
        except NodeExistsError:
            return TopicOutcome(TOPIC_ALREADY_EXISTS, f"topic '{name}' already exists")
        existing.append(name)
        logger.info(
            "event=topic_created broker=%d topic=%s partitions=%d replication_factor=%d "
            "via=kafka_listener",
            self.config.broker_id,
            name,
            outcome.num_partitions,
            outcome.replication_factor,
        )
        return outcome

    def _led(self, created: Mapping[str, int]) -> set[str]:
        """The created topics whose partitions all have a live leader in the cache."""
        live = {b.broker_id for b in self.cache.brokers()}
        ready = set()
        for name, count in created.items():
            partitions = self.cache.partitions_of(name)
            if len(partitions) == count and all(p.leader in live for p in partitions.values()):
                ready.add(name)
        return ready

    async def delete_topics(self, names: Sequence[str], timeout_ms: int) -> dict[str, int]:
        codes: dict[str, int] = {}
        marked: list[str] = []
        for name in names:
            if topic_name_problem(name) is not None:
                codes[name] = pb.INVALID_TOPIC
                continue
            try:
                if await self.zk.get_topic_assignment(name) is None:
                    codes[name] = pb.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                with contextlib.suppress(NodeExistsError):  # marked already: the same deletion
                    await self.zk.request(
                        "create", znodes.delete_topic_path(name), b"", makepath=True
                    )
            except ZkError:
                codes[name] = pb.REQUEST_TIMED_OUT
                continue
            codes[name] = pb.NONE
            marked.append(name)
        if marked and timeout_ms > 0:
            gone = await self._wait(
                timeout_ms,
                set(marked),
                lambda: {n for n in marked if not self.cache.partitions_of(n)},
            )
            for name in marked:
                if name not in gone:
                    codes[name] = pb.REQUEST_TIMED_OUT
        return codes

    async def _children(self, path: str) -> list[str]:
        try:
            children: list[str] = await self.zk.request("get_children", path)
        except NoNodeError:
            return []
        return children

    async def _wait(
        self, timeout_ms: int, expected: set[str], done: Callable[[], set[str]]
    ) -> set[str]:
        """Poll ``done()`` (the names whose outcome has reached this broker's metadata)
        until it holds ``expected`` or the timeout passes; returns its last answer."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            finished = done()
            if finished >= expected or loop.time() >= deadline:
                return finished
            await asyncio.sleep(_POLL_S)
