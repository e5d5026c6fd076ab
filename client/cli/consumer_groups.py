"""``minibroker consumer-groups --list | --describe | --reset-offsets | --delete |
--delete-offsets`` (Kafka's
``kafka-consumer-groups.sh``; the groups, minibroker's own ZooKeeper groups and the Kafka
clients' groups of the brokers' coordinators, are :mod:`client.consumer_groups`).

::

    minibroker consumer-groups --list          # GROUP TYPE STATE
    minibroker consumer-groups --describe --group billing
    minibroker consumer-groups --describe --group billing --members   # or --state
    minibroker consumer-groups --describe --group billing --commits   # metadata, commit time
    minibroker consumer-groups --delete --group billing    # only while nobody consumes
    minibroker consumer-groups --delete-offsets --group billing --topic orders:0,1 --topic audit
    minibroker consumer-groups --reset-offsets --group billing --topic orders --to-earliest
    minibroker consumer-groups --reset-offsets --group billing --topic orders:0,2 \\
        --to-offset 100 --execute

``--reset-offsets`` prints the plan and changes nothing unless ``--execute`` is given, as
Kafka does; it is refused while the group has live members of either kind.
``--delete`` and ``--delete-offsets`` are the brokers' DeleteGroups and OffsetDelete, asked
of the group's coordinator, which does the checks (the same code as for Kafka's clients).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from client.cli.common import (
    add_bootstrap_option,
    add_zookeeper_option,
    admin_client,
    connections,
    run_async,
)
from client.consumer_groups import (
    ConsumerGroupService,
    GroupDescription,
    GroupListing,
    PartitionRow,
    ResetSpec,
)
from client.metadata import ClientError
from proto.errors import error_name
from proto.topic_partition import TopicPartition
from proto.wire.minibroker_pb2 import ErrorCode


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "consumer-groups",
        help="list and describe consumer groups, reset their offsets",
        description="List and describe consumer groups (lag per partition), reset their "
        "committed offsets (as kafka-consumer-groups.sh).",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument(
        "--list", action="store_true", help="list the groups: ZooKeeper's and Kafka clients'"
    )
    action.add_argument(
        "--describe", action="store_true", help="offsets, lag and owners (host, client id)"
    )
    action.add_argument(
        "--reset-offsets", action="store_true", help="plan (or with --execute, write) new offsets"
    )
    action.add_argument(
        "--delete", action="store_true", help="delete a group without members, and its offsets"
    )
    action.add_argument(
        "--delete-offsets",
        action="store_true",
        help="delete the group's committed offsets of the --topic partitions (not of a topic "
        "a live member subscribes to)",
    )
    parser.add_argument("--group", help="the consumer group")
    view = parser.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="with --describe: one line per member")
    view.add_argument(
        "--state",
        action="store_true",
        help="with --describe: the group's coordinator, assignor, state and member count",
    )
    view.add_argument(
        "--commits",
        action="store_true",
        help="with --describe: each committed offset's commit time and metadata string",
    )
    parser.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="TOPIC[:P,P]",
        help="reset (or delete the offsets of) this topic, or only the partitions listed; "
        "repeatable",
    )
    parser.add_argument(
        "--all-topics", action="store_true", help="reset every topic the group has offsets for"
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--to-earliest", action="store_true", help="the log start offset")
    target.add_argument("--to-latest", action="store_true", help="the log end offset")
    target.add_argument("--to-current", action="store_true", help="the committed offset")
    target.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped to the log)")
    target.add_argument("--shift-by", type=int, metavar="N", help="the committed offset + N")
    run = parser.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", help="write the new offsets")
    run.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
    add_bootstrap_option(parser)
    add_zookeeper_option(parser, "the groups")
    parser.set_defaults(run=lambda a: run_async(_run(a)))


def _warn(line: str) -> None:
    print(f"minibroker consumer-groups: {line}", file=sys.stderr)


async def _run(args: argparse.Namespace) -> int:
    if (args.describe or args.reset_offsets or args.delete or args.delete_offsets) and not (
        args.group
    ):
        raise ClientError("--describe, --delete, --delete-offsets and --reset-offsets need --group")
    if args.delete_offsets and not args.topic:
        raise ClientError("--delete-offsets needs --topic")
    if (args.members or args.state or args.commits) and not args.describe:
        raise ClientError("--members, --state and --commits go with --describe")
    async with connections(args) as conns, admin_client(args, conns) as admin:
        service = ConsumerGroupService(admin, _warn)
        if args.list:
            print("\n".join(format_listing(await service.list_groups())))
            return 0
        if args.delete:
            await service.delete_group(args.group)
            # Kafka's ConsumerGroupCommand, word for word.
            print(f"Deletion of requested consumer groups ('{args.group}') was successful.")
            return 0
        if args.delete_offsets:
            return await _delete_offsets(service, args.group, args.topic)
        if args.describe:
            description = await service.describe_group(args.group)
            status = describe_status(description)
            if status:
                print(f"{status}\n")
            if args.state:
                print("\n".join(format_state(description)))
            elif args.members:
                print("\n".join(format_members(description)))
            elif args.commits:
                print("\n".join(format_commits(description)))
            else:
                print("\n".join(format_table(await service.describe_rows(description))))
            return 0
        spec = _reset_spec(args)
        topics = parse_topic_options(args.topic)
        if bool(topics) == bool(args.all_topics):
            raise ClientError("--reset-offsets needs --topic or --all-topics (one of them)")
        plan, warnings = await service.plan_reset(args.group, topics, args.all_topics, spec)
        for warning in warnings:
            print(warning, file=sys.stderr)
        if args.execute:
            await service.execute_reset(args.group, plan)
        elif not args.dry_run:
            print(
                "WARN: No action will be performed as the --execute option is missing "
                "(add --execute to write these offsets, --dry-run to only print them).",
                file=sys.stderr,
            )
    print("\n".join(format_plan(args.group, plan)))
    return 0


async def _delete_offsets(service: ConsumerGroupService, group: str, topics: list[str]) -> int:
    """Kafka's ``--delete-offsets`` output: a line for the group's answer, then TOPIC
    PARTITION STATUS per partition. Exit status 1 if anything was refused (Kafka's tool
    exits 0 and leaves it to the reader)."""
    code, partitions = await service.delete_offsets(group, parse_topic_options(topics))
    if code != ErrorCode.NONE and code not in _PARTITION_LEVEL:
        why = _GROUP_ERRORS.get(code, "Encounter some unknown error: {name}")
        raise ClientError(why.format(g=group, name=error_name(code)))
    refused = code != ErrorCode.NONE or any(partitions.values())
    if refused:
        _warn("Encounter some partition level error, see the follow-up details:")
    else:
        print(f"Request succeed for deleting offsets with topic {', '.join(topics)} group {group}")
    print("\n".join(format_offset_deletion(partitions)))
    return 1 if refused else 0


_PARTITION_LEVEL = {
    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.INVALID_TOPIC,
}
_GROUP_ERRORS: dict[int, str] = {
    ErrorCode.INVALID_GROUP_ID: "'{g}' is not valid.",
    ErrorCode.GROUP_ID_NOT_FOUND: "'{g}' does not exist.",
    ErrorCode.NON_EMPTY_GROUP: (
        "Deleting offsets of a consumer group '{g}' is forbidden if the group is not empty."
    ),
}
"""Kafka's ``ConsumerGroupCommand`` messages for a group's error of ``--delete-offsets``."""

_PARTITION_ERRORS: dict[int, str] = {
    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC: (
        "Deleting offsets of a topic is forbidden while the consumer group is actively "
        "subscribed to it."
    ),
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    ErrorCode.INVALID_TOPIC: "The request attempted to perform an operation on an invalid topic.",
}
"""Kafka's exception messages of the partition errors of OffsetDelete."""


def format_offset_deletion(partitions: Mapping[TopicPartition, int]) -> list[str]:
    """``--delete-offsets``' table, as Kafka's: TOPIC PARTITION STATUS (``Successful`` or
    ``Error: <why>``; a topic no broker knows is partition ``Not Provided``)."""
    rows = []
    for tp, code in sorted(partitions.items()):
        where = str(tp.partition) if tp.partition >= 0 else "Not Provided"
        why = _PARTITION_ERRORS.get(code, error_name(code))
        rows.append((tp.topic, where, "Successful" if code == ErrorCode.NONE else f"Error: {why}"))
    return _columns(("TOPIC", "PARTITION", "STATUS"), rows)


def _reset_spec(args: argparse.Namespace) -> ResetSpec:
    if args.to_earliest:
        return ResetSpec("earliest")
    if args.to_latest:
        return ResetSpec("latest")
    if args.to_current:
        return ResetSpec("current")
    if args.to_offset is not None:
        return ResetSpec("offset", args.to_offset)
    if args.shift_by is not None:
        return ResetSpec("shift", args.shift_by)
    raise ClientError(
        "--reset-offsets needs one of --to-earliest, --to-latest, --to-current, "
        "--to-offset N, --shift-by N"
    )


def parse_topic_options(options: Sequence[str]) -> dict[str, list[int] | None]:
    """``["orders", "audit:0,2"]`` -> ``{"orders": None, "audit": [0, 2]}`` (Kafka's
    ``--topic`` of ``--reset-offsets``: all partitions, or those listed)."""
    topics: dict[str, list[int] | None] = {}
    for option in options:
        topic, sep, listed = option.partition(":")
        if not sep:
            topics[topic] = None
            continue
        partitions = [p.strip() for p in listed.split(",") if p.strip()]
        if not partitions or not all(p.isascii() and p.isdigit() for p in partitions):
            raise ClientError(f"--topic {option!r}: expected TOPIC or TOPIC:P,P,...")
        previous = topics.get(topic, [])
        topics[topic] = None if previous is None else sorted({*previous, *map(int, partitions)})
    return topics


def describe_status(description: GroupDescription) -> str | None:
    """The line Kafka's ``--describe`` prints above the table, if any."""
    kafka = description.kafka_group
    if not description.active:
        return f"Consumer group '{description.group}' has no active members."
    if kafka is not None and kafka.state in ("PreparingRebalance", "CompletingRebalance"):
        return f"Warning: Consumer group '{description.group}' is rebalancing."
    return None


def format_state(description: GroupDescription) -> list[str]:
    """``--describe --state``, as Kafka's: GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE
    #MEMBERS. A ZooKeeper group has no coordinator (its members assign among themselves,
    by range)."""
    header = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
    kafka = description.kafka_group
    if kafka is not None and (kafka.active or not description.members):
        where = f"{kafka.coordinator_address or '-'} ({kafka.coordinator_id})"
        row = (
            description.group,
            where,
            kafka.protocol or "-",
            kafka.state,
            str(len(kafka.members)),
        )
    else:
        state = "Stable" if description.members else "Empty"
        row = (description.group, "-", "range", state, str(len(description.members)))
    return _columns(header, [row])


def format_members(description: GroupDescription) -> list[str]:
    """``--describe --members``, as Kafka's: GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS,
    the ZooKeeper members first."""
    header = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
    owned: dict[str, int] = {}
    for member in description.owners.values():
        owned[member] = owned.get(member, 0) + 1
    rows = [
        (description.group, member, "-", "-", str(owned.get(member, 0)))
        for member in sorted(description.members)
    ]
    kafka = description.kafka_group
    for m in kafka.members if kafka is not None else ():
        count = "-" if m.partitions is None else str(len(m.partitions))
        rows.append((description.group, m.member_id, m.host or "-", m.client_id or "-", count))
    return _columns(header, rows)


def format_commits(description: GroupDescription) -> list[str]:
    """``--describe --commits``: GROUP TOPIC PARTITION CURRENT-OFFSET COMMITTED-AT (UTC, from
    ZooKeeper's clock) METADATA (OffsetCommit's string, last as it may hold spaces)."""
    header = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "COMMITTED-AT", "METADATA")
    rows = [
        (
            description.group,
            tp.topic,
            str(tp.partition),
            str(c.offset),
            _utc(c.commit_timestamp_ms),
            _printable(c.metadata) or "-",
        )
        for tp, c in sorted(description.commits.items())
    ]
    return _columns(header, rows)


def _printable(text: str) -> str:
    """``text`` with what a terminal would not show escaped (librdkafka commits the C string's
    terminating NUL with the metadata: shown as ``\\x00``)."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


def _utc(timestamp_ms: int) -> str:
    if timestamp_ms < 0:
        return "-"
    moment = datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{timestamp_ms % 1000:03d}Z"


def format_listing(listings: Sequence[GroupListing]) -> list[str]:
    """``--list``: GROUP TYPE STATE (TYPE: zookeeper or kafka)."""
    return _columns(("GROUP", "TYPE", "STATE"), [tuple(g) for g in listings])


def format_table(rows: Sequence[PartitionRow]) -> list[str]:
    """Kafka's ``--describe`` table, columns as wide as their widest cell."""
    header = (
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    )
    cells = [
        (
            r.group,
            r.topic or "-",
            _or_dash(r.partition),
            _or_dash(r.current_offset),
            _or_dash(r.log_end_offset),
            _or_dash(r.lag),
            (r.owner.consumer_id or "-") if r.owner else "-",
            (r.owner.host or "-") if r.owner else "-",
            (r.owner.client_id or "-") if r.owner else "-",
        )
        for r in rows
    ]
    return _columns(header, cells)


def format_plan(group: str, plan: Mapping[TopicPartition, int]) -> list[str]:
    """Kafka's reset plan: GROUP TOPIC PARTITION NEW-OFFSET."""
    cells = [(group, tp.topic, str(tp.partition), str(o)) for tp, o in sorted(plan.items())]
    return _columns(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), cells)


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _columns(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    return [
        " ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]
