"""Consumer groups as an operator sees them (Kafka's ``ConsumerGroupCommand``).

Two kinds of group are shown side by side (docs/consumer-groups.md). A **zookeeper**
group is minibroker's own consumers' (:mod:`client.group`), whose members and offsets live
in ZooKeeper (docs/zookeeper.md)::

    /consumers/<g>/ids/<consumer-id>     ephemeral   a live member and its subscription
    /consumers/<g>/owners/<t>/<p>        ephemeral   the member reading <t>-<p>
    /consumers/<g>/offsets/<t>/<p>       persistent  the next offset the group will read

A **kafka** group is Kafka clients' (``subscribe()`` through the Kafka listener): its
members live in memory at its group coordinator, a broker
(``broker/coordinator/group_coordinator.py``), which every live broker is asked about
(:meth:`AdminClient.describe_consumer_groups`), and its offsets in ``__consumer_offsets``,
read and written at the coordinator (:meth:`AdminClient.fetch_group_offsets`,
:meth:`AdminClient.commit_group_offsets`).

- list: the groups of both kinds, each with its kind and state;
- describe: per partition, the committed offset, the log end offset (ListOffsets latest on
  the leader: the high watermark, the end a consumer can read to), the lag between them
  and the owner (its consumer id, and for a Kafka client its host and client id), as
  ``kafka-consumer-groups --describe`` prints them;
- delete: the committed offsets (all of ``/consumers/<g>``) of a group without live
  members, or those of some partitions (``--delete-offsets``): Kafka's DeleteGroups and
  OffsetDelete, asked of the group's coordinator (the brokers' code does the checks);
- reset: a plan of new offsets (earliest, latest, an offset, a shift, the current ones),
  written only with ``execute``, and only while the group has no live member of either
  kind: a running consumer would overwrite them with its next commit (Kafka: "Assignments
  can only be reset if the group is inactive"). A broker that cannot be asked might hold
  live members, so it also refuses the reset. An offset beyond the log end or below the
  log start is clamped to it with a warning, as Kafka's ``checkOffsetsRange`` does.

Reading ephemeral znodes races with members leaving: a child listed and gone before it is
read is skipped, never an error. Names read from ZooKeeper are hostile until checked: an
illegal group or topic name is reported (``ignoring ... znode ...: illegal name``) and
left out. The check for live members and the writes of a reset are separate requests, as
Kafka's are separate from a member joining: a consumer that starts in between wins.

:func:`describe_rows` and :func:`plan_reset` are the pure parts; :class:`ConsumerGroupService`
does the reading and writing through an :class:`~client.admin.AdminClient`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from client.admin import EARLIEST, LATEST, AdminClient, BrokerGroups, ConsumerGroupDescription
from client.group import group_name_problem
from client.metadata import ClientError
from proto.errors import error_name
from proto.topic_partition import TopicPartition, topic_name_problem
from proto.wire import minibroker_pb2 as pb
from proto.wire.minibroker_pb2 import ErrorCode
from proto.zk.znodes import (
    CONSUMERS_PATH,
    CommittedOffset,
    ZkDataError,
    consumer_ids_path,
    decode_consumer_subscription,
)

__all__ = [
    "KAFKA",
    "ZOOKEEPER",
    "ConsumerGroupService",
    "GroupDescription",
    "GroupListing",
    "Owner",
    "PartitionRow",
    "ResetSpec",
    "describe_rows",
    "plan_reset",
]

ZOOKEEPER = "zookeeper"
KAFKA = "kafka"

Warn = Callable[[str], None]


class Owner(NamedTuple):
    """A member, as ``--describe`` shows the owner of a partition."""

    consumer_id: str
    host: str | None = None
    """A Kafka client's address (``/127.0.0.1``); None for a ZooKeeper group's member."""
    client_id: str | None = None


class PartitionRow(NamedTuple):
    """One line of ``--describe``: a partition, or a member that has none (topic and
    partition None, as Kafka prints such a member)."""

    group: str
    topic: str | None
    partition: int | None
    current_offset: int | None
    """The committed offset (None: nothing committed)."""
    log_end_offset: int | None
    """The high watermark (None: the leader could not be asked)."""
    lag: int | None
    owner: Owner | None
    """The owning member (None: unowned)."""


class GroupListing(NamedTuple):
    """One line of ``--list``."""

    group: str
    kind: str
    """:data:`ZOOKEEPER` or :data:`KAFKA` (both, comma-separated, for a group id that both
    kinds of consumer use)."""
    state: str
    """A Kafka group's coordinator state (Empty, PreparingRebalance, CompletingRebalance,
    Stable); a ZooKeeper group is Stable while it has members, else Empty."""


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group as ZooKeeper and the brokers' group coordinators hold it."""

    group: str
    members: dict[str, frozenset[str]]
    """Live ZooKeeper member id -> subscribed topics (empty if its subscription is
    unreadable)."""
    owners: dict[TopicPartition, str]
    offsets: dict[TopicPartition, int]
    kafka: tuple[ConsumerGroupDescription, ...] = ()
    """The Kafka client group as each broker that holds it describes it, the one to show
    first (see :meth:`ConsumerGroupService.describe_group`)."""
    unanswered: tuple[str, ...] = ()
    """Brokers that could not be asked about Kafka client groups (why, one each)."""
    commits: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    """``offsets`` with each commit's metadata string and time."""

    @property
    def topics(self) -> set[str]:
        """Every topic the group reads or has read: subscribed, owned or committed."""
        subscribed = {t for topics in self.members.values() for t in topics}
        assigned = {tp.topic for tp in self.kafka_owners}
        return subscribed | assigned | {tp.topic for tp in (*self.owners, *self.offsets)}

    @property
    def kafka_group(self) -> ConsumerGroupDescription | None:
        """The Kafka client group to show: the first holding."""
        return self.kafka[0] if self.kafka else None

    @property
    def kafka_owners(self) -> dict[TopicPartition, Owner]:
        """The partitions the shown Kafka group's members are assigned."""
        group = self.kafka_group
        if group is None:
            return {}
        return {
            tp: Owner(m.member_id, m.host, m.client_id)
            for m in group.members
            for tp in m.partitions or ()
        }

    @property
    def active(self) -> bool:
        """Whether the group has a live member of either kind."""
        return bool(self.members) or any(g.active for g in self.kafka)


@dataclass(frozen=True, slots=True)
class ResetSpec:
    """Where ``--reset-offsets`` moves each partition."""

    kind: str
    """``earliest``, ``latest``, ``offset`` (to ``value``), ``shift`` (by ``value``) or
    ``current`` (the committed offset, else the log end)."""
    value: int = 0


def describe_rows(
    group: str,
    partitions: Iterable[TopicPartition],
    committed: Mapping[TopicPartition, int],
    log_end: Mapping[TopicPartition, int],
    owners: Mapping[TopicPartition, Owner],
    idle: Iterable[Owner] = (),
) -> list[PartitionRow]:
    """One row per partition, sorted, then one per ``idle`` member (a member without
    partitions); LAG = LOG-END-OFFSET - CURRENT-OFFSET where both are known (not clamped
    at 0, as in Kafka: a negative lag shows a log truncated below a commit)."""
    rows = []
    for tp in sorted(set(partitions)):
        current, end = committed.get(tp), log_end.get(tp)
        lag = None if current is None or end is None else end - current
        rows.append(PartitionRow(group, tp.topic, tp.partition, current, end, lag, owners.get(tp)))
    rows.extend(PartitionRow(group, None, None, None, None, None, o) for o in idle)
    return rows


def plan_reset(
    partitions: Iterable[TopicPartition],
    spec: ResetSpec,
    committed: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
) -> tuple[dict[TopicPartition, int], list[str]]:
    """The new offset of each partition, and the warnings of those that had to be clamped.

    ``offset`` and ``shift`` targets outside [log start, log end] are clamped to the
    nearest end, with Kafka's warning (``checkOffsetsRange``). ``shift`` needs a committed
    offset (ClientError otherwise, as Kafka's "Cannot shift offset"). Every partition
    must have its earliest and latest offsets.
    """
    plan: dict[TopicPartition, int] = {}
    warnings: list[str] = []
    for tp in sorted(set(partitions)):
        start, end = earliest[tp], latest[tp]
        if spec.kind == "earliest":
            plan[tp] = start
            continue
        if spec.kind == "latest":
            plan[tp] = end
            continue
        if spec.kind == "current":
            plan[tp] = committed.get(tp, end)
            continue
        if spec.kind == "offset":
            wanted = spec.value
        elif spec.kind == "shift":
            if tp not in committed:
                raise ClientError(
                    f"Cannot shift offset for partition {tp} since there is no current "
                    "committed offset"
                )
            wanted = committed[tp] + spec.value
        else:
            raise ValueError(f"unknown reset kind {spec.kind!r}")
        if wanted > end:
            warnings.append(
                f"WARN: New offset ({wanted}) is higher than latest offset for topic partition "
                f"{tp}. Value will be set to {end}"
            )
            wanted = end
        elif wanted < start:
            warnings.append(
                f"WARN: New offset ({wanted}) is lower than earliest offset for topic partition "
                f"{tp}. Value will be set to {start}"
            )
            wanted = start
        plan[tp] = wanted
    return plan, warnings


class ConsumerGroupService:
    """Lists, describes and resets consumer groups through ``admin`` (its ZooKeeper session
    for ZooKeeper groups and offsets, its brokers for Kafka client groups and log offsets).
    ``warn`` receives one line per thing skipped (an illegal name, a malformed znode, a
    broker that did not answer)."""

    def __init__(self, admin: AdminClient, warn: Warn) -> None:
        self._admin = admin
        self._warn = warn

    async def list_groups(self) -> list[GroupListing]:
        """The groups of both kinds, sorted: those under ``/consumers`` (illegal names
        reported and skipped) and those the brokers' coordinators hold. A group with
        committed offsets but no ``ids`` znode was committed by Kafka clients: a kafka
        group, Empty (its coordinator forgets it once its last member leaves)."""
        everything = await self._admin.list_consumer_groups()
        for why in everything.errors.values():
            self._warn(f"cannot list the Kafka client groups of {why}")
        listings = []
        zk_groups = set()
        for child in sorted(await self._admin.zk_children(CONSUMERS_PATH)):
            problem = group_name_problem(child)
            if problem is not None:
                self._warn(f"ignoring consumer group znode {CONSUMERS_PATH}/{child!r}: {problem}")
                continue
            zk_groups.add(child)
        held = _kafka_protocol_groups(everything, zk_groups)
        ordered = sorted(zk_groups)
        # Asked of ZooKeeper for all groups at once, not one round trip after another.
        membership = dict(
            zip(ordered, await asyncio.gather(*map(self._zk_membership, ordered)), strict=True)
        )
        for group in sorted(zk_groups | set(held.groups)):
            kafka = held.groups.get(group)
            kinds, state = [], "Empty"
            has_ids, has_members = membership.get(group, (False, False))
            if has_ids:
                kinds.append(ZOOKEEPER)
                if has_members:
                    state = "Stable"
            if kafka is not None or not kinds:
                kinds.append(KAFKA)
            if kafka is not None and state == "Empty":
                active = [g for g in kafka if g.active]
                state = (active or kafka)[0].state
            listings.append(GroupListing(group, ",".join(kinds), state))
        return listings

    async def _zk_membership(self, group: str) -> tuple[bool, bool]:
        """Whether ``group`` has an ``ids`` znode (it is a ZooKeeper group) and members."""
        ids = consumer_ids_path(group)
        if not await self._admin.zk_exists(ids):
            return False, False
        return True, bool(await self._admin.zk_children(ids))

    async def describe_group(self, group: str) -> GroupDescription:
        """The group's live members (of both kinds), owners and committed offsets.
        ClientError for an illegal name or a group that exists in neither kind.

        A Kafka client group is held by its coordinator, and for a while also by its
        previous coordinator after a coordinator move (until its members' sessions there
        expire): the holding shown first is one with members, its coordinator's if it has
        members, with a warning naming the other brokers that hold it with members."""
        root = _group_root(group)
        in_zookeeper = await self._admin.zk_exists(root)
        held = _kafka_protocol_groups(
            await self._admin.describe_consumer_groups([group]), [group] if in_zookeeper else []
        )
        unanswered = tuple(held.errors.values())
        for why in unanswered:
            self._warn(f"cannot ask {why} about group '{group}'")
        kafka = sorted(held.groups.get(group, []), key=lambda g: not g.active)
        busy = [g for g in kafka if g.active]
        if len(busy) > 1:
            others = ", ".join(str(g.broker_id) for g in busy[1:])
            self._warn(
                f"group '{group}' has members at broker {busy[0].broker_id} and at broker(s) "
                f"{others} (its coordinator moved); showing broker {busy[0].broker_id}'s"
            )
        if not in_zookeeper:
            if not kafka:
                raise ClientError(f"Consumer group '{group}' does not exist.")
            commits = await self._committed(group)
            offsets = {tp: c.offset for tp, c in commits.items()}
            return GroupDescription(group, {}, {}, offsets, tuple(kafka), unanswered, commits)
        members: dict[str, frozenset[str]] = {}
        ids_path = consumer_ids_path(group)
        for member in sorted(await self._admin.zk_children(ids_path)):
            data = await self._admin.zk_get(f"{ids_path}/{member}")
            if data is None:
                continue  # left between the listing and the read
            try:
                members[member] = frozenset(decode_consumer_subscription(data))
            except ZkDataError as e:
                self._warn(f"member {member} of group '{group}' has a malformed subscription: {e}")
                members[member] = frozenset()
        owners = {
            tp: data.decode("utf-8", "replace")
            for tp, data in (await self._partition_znodes(f"{root}/owners")).items()
        }
        commits = await self._committed(group)
        offsets = {tp: c.offset for tp, c in commits.items()}
        return GroupDescription(group, members, owners, offsets, tuple(kafka), unanswered, commits)

    async def _committed(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        """The group's committed offsets as its coordinator answers them (FetchGroupOffsets:
        ``__consumer_offsets``, then ZooKeeper for what was never committed there). A
        malformed one is shown without a current offset (docs/zookeeper.md); a reset
        overwrites it."""
        response = await self._admin.fetch_group_offsets(group)
        if response.error_code != ErrorCode.NONE:
            raise ClientError(
                f"cannot read the offsets of group '{group}': {error_name(response.error_code)}"
            )
        commits: dict[TopicPartition, CommittedOffset] = {}
        for o in response.offsets:
            tp = TopicPartition(o.topic, o.partition)
            if o.error_code != ErrorCode.NONE:
                self._warn(
                    f"ignoring the committed offset of {tp} in group '{group}': "
                    f"{error_name(o.error_code)}"
                )
            elif o.offset >= 0:
                commits[tp] = CommittedOffset(o.offset, o.metadata, o.commit_timestamp_ms)
        return commits

    async def describe_rows(self, description: GroupDescription) -> list[PartitionRow]:
        """:func:`describe_rows` for every partition of the group's topics (the log end
        offsets asked of the leaders; unknown where no leader answers), owned by the
        ZooKeeper owners and the Kafka members' assignments."""
        owners = {tp: Owner(member) for tp, member in description.owners.items()}
        owners.update(description.kafka_owners)
        partitions = set(description.offsets) | set(owners)
        partitions |= set(await self._admin_partitions(description.topics, strict=False))
        result = await self._admin.list_offsets(partitions, LATEST)
        kafka = description.kafka_group
        idle = [
            Owner(m.member_id, m.host, m.client_id)
            for m in (kafka.members if kafka is not None else ())
            if not m.partitions
        ]
        return describe_rows(
            description.group, partitions, description.offsets, result.offsets, owners, idle
        )

    async def plan_reset(
        self, group: str, topics: Mapping[str, list[int] | None], all_topics: bool, spec: ResetSpec
    ) -> tuple[dict[TopicPartition, int], list[str]]:
        """The reset plan of the named partitions (``topics``: topic -> partitions, None for
        all) or, with ``all_topics``, of every topic the group has committed offsets for.
        Refuses (ClientError) while the group has live members, and for partitions whose
        offsets no leader gives."""
        description = await self.describe_group(group)
        _check_inactive(description)
        if all_topics:
            wanted: set[TopicPartition] = set(
                await self._admin_partitions({tp.topic for tp in description.offsets}, strict=True)
            )
        else:
            wanted = set()
            for topic, chosen in topics.items():
                existing = await self._admin_partitions([topic], strict=True)
                if chosen is None:
                    wanted |= set(existing)
                    continue
                missing = sorted(p for p in chosen if TopicPartition(topic, p) not in existing)
                if missing:
                    raise ClientError(
                        f"topic '{topic}' has no partition {', '.join(map(str, missing))}"
                    )
                wanted |= {TopicPartition(topic, p) for p in chosen}
        if not wanted:
            raise ClientError(f"no partitions to reset in group '{group}'")
        earliest, latest = await asyncio.gather(
            self._admin.list_offsets(wanted, EARLIEST), self._admin.list_offsets(wanted, LATEST)
        )
        failed = {**earliest.errors, **latest.errors}
        if failed:
            tp, why = sorted(failed.items())[0]
            raise ClientError(f"cannot find the offsets of {tp}: {why}")
        return plan_reset(wanted, spec, description.offsets, earliest.offsets, latest.offsets)

    async def execute_reset(self, group: str, plan: Mapping[TopicPartition, int]) -> None:
        """Write ``plan`` as the group's committed offsets, after checking once more that
        no member has joined meanwhile."""
        _check_inactive(await self.describe_group(group))
        if await self._admin.zk_exists(consumer_ids_path(group)):
            # minibroker's own ZooKeeper consumers read their offsets from ZooKeeper.
            await self._admin.commit_consumer_offsets(group, plan)
            return
        response = await self._admin.commit_group_offsets(group, plan)
        failed = [o for o in response.offsets if o.error_code != ErrorCode.NONE]
        if failed:
            first = failed[0]
            raise ClientError(
                f"cannot reset the offset of {first.topic}-{first.partition} in group "
                f"'{group}': {error_name(first.error_code)}"
            )

    async def delete_group(self, group: str) -> None:
        """Delete a group without live members of either kind, and its committed offsets
        (all of ``/consumers/<g>``): the DeleteGroups RPC at the group's coordinator, the
        brokers' DeleteGroups (``broker/coordinator/group_admin.py``), which checks for
        members. ClientError with Kafka's error name (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND)."""
        _group_root(group)
        request = pb.DeleteGroupsRequest(groups=[group])
        response = await self._admin.at_group_coordinator(
            group,
            lambda stub, timeout: stub.DeleteGroups(request, timeout=timeout),
            lambda r: r.results[0].error_code if r.results else ErrorCode.INVALID_REQUEST,
        )
        code = response.results[0].error_code
        if code != ErrorCode.NONE:
            raise ClientError(f"Group '{group}' could not be deleted due to: {error_name(code)}")

    async def delete_offsets(
        self, group: str, topics: Mapping[str, list[int] | None]
    ) -> tuple[int, dict[TopicPartition, int]]:
        """Delete the group's committed offsets of ``topics`` (topic -> partitions, None for
        all of them; Kafka's ``--delete-offsets``): the DeleteGroupOffsets RPC at the
        group's coordinator, the brokers' OffsetDelete. The group's error code (NONE, or
        INVALID_GROUP_ID, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP) and each partition's
        (GROUP_SUBSCRIBED_TO_TOPIC for a topic a live member subscribes to); a topic no
        broker knows is partition -1, UNKNOWN_TOPIC_OR_PARTITION, as Kafka's tool shows it."""
        _group_root(group)
        codes: dict[TopicPartition, int] = {}
        wanted: list[TopicPartition] = []
        whole = sorted(t for t, chosen in topics.items() if chosen is None)
        known = {t.name: t for t in await self._admin.describe_topics(None)} if whole else {}
        for topic, chosen in topics.items():
            if chosen is not None:
                wanted += [TopicPartition(topic, p) for p in chosen]
            elif topic in known:
                wanted += [TopicPartition(topic, p) for p in sorted(known[topic].partitions)]
            else:
                codes[TopicPartition(topic, -1)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        request = pb.DeleteGroupOffsetsRequest(group_id=group)
        for topic in dict.fromkeys(tp.topic for tp in wanted):
            request.topics.add(
                name=topic, partitions=[tp.partition for tp in wanted if tp.topic == topic]
            )
        response = await self._admin.at_group_coordinator(
            group,
            lambda stub, timeout: stub.DeleteGroupOffsets(request, timeout=timeout),
            lambda r: r.error_code,
        )
        for t in response.topics:
            for p in t.partitions:
                codes[TopicPartition(t.name, p.partition_index)] = p.error_code
        return response.error_code, codes

    async def _admin_partitions(
        self, topics: Iterable[str], *, strict: bool
    ) -> list[TopicPartition]:
        """The partitions of ``topics`` as the brokers' metadata lists them; a topic no
        broker knows is an error with ``strict``, else left out."""
        names = sorted(set(topics))
        if not names:
            return []
        if strict:
            described = await self._admin.describe_topics(names)
        else:
            described = [t for t in await self._admin.describe_topics(None) if t.name in names]
        return [TopicPartition(t.name, p) for t in described for p in sorted(t.partitions)]

    async def _partition_znodes(self, parent: str) -> dict[TopicPartition, bytes]:
        """``<parent>/<t>/<p>`` -> data, skipping znodes that vanish while being read,
        illegal topic names and non-numeric partitions (reported)."""
        found: dict[TopicPartition, bytes] = {}
        for topic in sorted(await self._admin.zk_children(parent)):
            problem = topic_name_problem(topic)
            if problem is not None:
                self._warn(f"ignoring znode {parent}/{topic!r}: illegal name: {problem}")
                continue
            for child in sorted(await self._admin.zk_children(f"{parent}/{topic}")):
                if not (child.isascii() and child.isdigit()):
                    self._warn(f"ignoring znode {parent}/{topic}/{child!r}: not a partition")
                    continue
                data = await self._admin.zk_get(f"{parent}/{topic}/{child}")
                if data is not None:
                    found[TopicPartition(topic, int(child))] = data
        return found


def _kafka_protocol_groups(held: BrokerGroups, zookeeper_groups: Collection[str]) -> BrokerGroups:
    """The brokers' answers about Kafka client groups. A broker also answers, with
    protocol type "", the groups it knows from ZooKeeper alone (a ZooKeeper group, offsets
    nobody consumes: ``broker/coordinator/group_admin.py``), which this service reads from
    ZooKeeper itself and shows with their kind: those are left out. A group with protocol
    type "" that ZooKeeper does not hold is a Kafka client's that only ``assign()``s and
    commits to ``__consumer_offsets`` (Kafka's "simple" group): kept."""
    groups = {
        group_id: kept
        for group_id, holdings in held.groups.items()
        if (kept := [g for g in holdings if g.protocol_type or group_id not in zookeeper_groups])
    }
    return BrokerGroups(groups, held.errors)


def _group_root(group: str) -> str:
    problem = group_name_problem(group)
    if problem is not None:
        raise ClientError(f"illegal group name: {problem}")
    return f"{CONSUMERS_PATH}/{group}"


def _check_inactive(description: GroupDescription) -> None:
    """ClientError unless the group has no live member of either kind, and every broker
    could be asked (one that was not might hold the group's live Kafka members)."""
    if description.members:
        members = ", ".join(sorted(description.members))
        raise ClientError(
            f"Assignments can only be reset if the group '{description.group}' is inactive, "
            f"but it has {len(description.members)} active member(s): {members}"
        )
    for held in description.kafka:
        if held.active:
            # Kafka's ConsumerGroupCommand message, word for word.
            raise ClientError(
                f"Assignments can only be reset if the group '{description.group}' is "
                f"inactive, but the current state is {held.state}."
            )
    if description.unanswered:
        raise ClientError(
            f"cannot tell whether group '{description.group}' has live members: "
            f"{description.unanswered[0]}; the offsets were not changed"
        )
