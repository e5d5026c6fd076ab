"""``minibroker topics create|list|describe|delete`` (Kafka's ``kafka-topics.sh``)."""

from __future__ import annotations

import argparse

from broker.config import parse_overrides
from client.admin import AdminClient
from client.cli_common import (
    add_bootstrap_option,
    add_zookeeper_option,
    connections,
    run_async,
)
from client.metadata import TopicMetadata


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "topics",
        help="create, list, describe and delete topics",
        description="Create, list, describe and delete topics (as Kafka's kafka-topics.sh).",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = actions.add_parser("create", help="create a topic")
    create.add_argument("topic")
    create.add_argument("--partitions", type=int, default=1, help="default 1")
    create.add_argument("--replication-factor", type=int, default=1, help="default 1")
    create.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config override, e.g. min.insync.replicas=2 (repeatable)",
    )
    create.add_argument(
        "--if-not-exists", action="store_true", help="succeed if the topic already exists"
    )
    create.set_defaults(run=lambda a: run_async(_create(a)))

    listing = actions.add_parser("list", help="list the topics")
    listing.set_defaults(run=lambda a: run_async(_list(a)))

    describe = actions.add_parser("describe", help="partitions, leaders, replicas and ISRs")
    describe.add_argument("topic", nargs="?", help="one topic (default: all)")
    describe.set_defaults(run=lambda a: run_async(_describe(a)))

    delete = actions.add_parser("delete", help="delete a topic and its data on every broker")
    delete.add_argument("topic")
    delete.set_defaults(run=lambda a: run_async(_delete(a)))

    for sub in (create, listing, describe, delete):
        add_bootstrap_option(sub)
        add_zookeeper_option(sub, "creating and deleting topics")


async def _create(args: argparse.Namespace) -> int:
    config = parse_overrides(args.config)
    async with connections(args) as conns, AdminClient(conns, args.zookeeper) as admin:
        if args.if_not_exists and args.topic in await admin.list_topics():
            return 0
        await admin.create_topic(args.topic, args.partitions, args.replication_factor, config)
    print(f"Created topic {args.topic}.")
    return 0


async def _list(args: argparse.Namespace) -> int:
    async with connections(args) as conns, AdminClient(conns, args.zookeeper) as admin:
        for name in sorted(await admin.list_topics()):
            print(name)
    return 0


async def _describe(args: argparse.Namespace) -> int:
    names = [args.topic] if args.topic else None
    async with connections(args) as conns, AdminClient(conns, args.zookeeper) as admin:
        topics = await admin.describe_topics(names)
    for topic in sorted(topics, key=lambda t: t.name):
        print(describe_lines(topic))
    return 0


def describe_lines(topic: TopicMetadata) -> str:
    """Kafka's describe layout: one topic line, then one line per partition."""
    partitions = [topic.partitions[p] for p in sorted(topic.partitions)]
    rf = len(partitions[0].replicas) if partitions else 0
    lines = [f"Topic: {topic.name}\tPartitionCount: {len(partitions)}\tReplicationFactor: {rf}"]
    for p in partitions:
        leader = "none" if p.leader < 0 else str(p.leader)
        lines.append(
            f"\tTopic: {topic.name}\tPartition: {p.tp.partition}\tLeader: {leader}"
            f"\tReplicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
        )
    return "\n".join(lines)


async def _delete(args: argparse.Namespace) -> int:
    async with connections(args) as conns, AdminClient(conns, args.zookeeper) as admin:
        await admin.delete_topic(args.topic)
    print(f"Deleted topic {args.topic}.")
    return 0
