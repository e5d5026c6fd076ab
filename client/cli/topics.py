"""``minibroker topics create|list|describe|alter|delete`` (Kafka's ``kafka-topics.sh``) and
``topics delete-records`` (Kafka's ``kafka-delete-records.sh``).

``alter`` adds partitions (``--partitions N``, more than there are): the admin client
writes the extended assignment and the controller brings the new partitions online.
``describe`` prints each topic's non-default configs on its topic line, as Kafka does.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping

from client.cli.common import (
    add_bootstrap_option,
    add_topic_argument,
    add_zookeeper_option,
    admin_client,
    connections,
    run_async,
)
from client.metadata import ClientError, MetadataClient, TopicMetadata
from client.record_deletion import delete_records
from proto.config.broker_config import parse_overrides
from proto.topic_partition import TopicPartition
from proto.wire.minibroker_pb2 import ErrorCode


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "topics",
        help="create, list, describe, alter and delete topics",
        description="Create, list, describe, alter (add partitions) and delete topics (as "
        "Kafka's kafka-topics.sh); delete the records of partitions below an offset (as "
        "kafka-delete-records.sh).",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = actions.add_parser("create", help="create a topic")
    add_topic_argument(create)
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
    add_topic_argument(describe, required=False, help="one topic (default: all)")
    describe.set_defaults(run=lambda a: run_async(_describe(a)))

    alter = actions.add_parser("alter", help="add partitions to a topic")
    add_topic_argument(alter)
    alter.add_argument("--partitions", type=int, required=True, help="the new number of partitions")
    alter.set_defaults(run=lambda a: run_async(_alter(a)))

    delete = actions.add_parser("delete", help="delete a topic and its data on every broker")
    add_topic_argument(delete)
    delete.set_defaults(run=lambda a: run_async(_delete(a)))

    records = actions.add_parser(
        "delete-records",
        help="delete the records below an offset (the partition's new log start offset)",
    )
    add_topic_argument(records)
    records.add_argument(
        "--partition",
        type=int,
        action="append",
        metavar="P",
        help="a partition (repeatable; default: every partition of the topic)",
    )
    records.add_argument(
        "--offset",
        type=int,
        required=True,
        help="the new log start offset: the records below it go (-1: the high watermark)",
    )
    records.add_argument(
        "--timeout-ms",
        type=int,
        default=30_000,
        help="how long the leaders wait for their followers to follow (default 30000)",
    )
    records.set_defaults(run=lambda a: run_async(_delete_records(a)))

    for sub in (create, listing, describe, alter, delete, records):
        add_bootstrap_option(sub)
        add_zookeeper_option(sub, "creating, altering and deleting topics, and their configs")


async def _create(args: argparse.Namespace) -> int:
    config = parse_overrides(args.config)
    async with connections(args) as conns, admin_client(args, conns) as admin:
        if args.if_not_exists and args.topic in await admin.list_topics():
            return 0
        await admin.create_topic(args.topic, args.partitions, args.replication_factor, config)
    print(f"Created topic {args.topic}.")
    return 0


async def _list(args: argparse.Namespace) -> int:
    async with connections(args) as conns, admin_client(args, conns) as admin:
        for name in sorted(await admin.list_topics()):
            print(name)
    return 0


async def _describe(args: argparse.Namespace) -> int:
    names = [args.topic] if args.topic else None
    async with connections(args) as conns, admin_client(args, conns) as admin:
        topics = await admin.describe_topics(names)
        try:
            configs: Mapping[str, Mapping[str, str]] | None = await admin.topic_configs(
                t.name for t in topics
            )
        except ClientError as e:
            print(f"minibroker topics describe: configs not shown: {e}", file=sys.stderr)
            configs = None
    for topic in sorted(topics, key=lambda t: t.name):
        topic_configs = None if configs is None else configs.get(topic.name, {})
        print(describe_lines(topic, topic_configs))
    return 0


async def _alter(args: argparse.Namespace) -> int:
    async with connections(args) as conns, admin_client(args, conns) as admin:
        await admin.create_partitions(args.topic, args.partitions)
    print(
        "WARNING: If partitions are increased for a topic that has a key, the partition "
        "logic or ordering of the messages will be affected"
    )
    print("Adding partitions succeeded!")
    return 0


def describe_lines(topic: TopicMetadata, configs: Mapping[str, str] | None = None) -> str:
    """Kafka's describe layout: one topic line (with the topic's config overrides, when
    known), then one line per partition."""
    partitions = [topic.partitions[p] for p in sorted(topic.partitions)]
    rf = len(partitions[0].replicas) if partitions else 0
    head = f"Topic: {topic.name}\tPartitionCount: {len(partitions)}\tReplicationFactor: {rf}"
    if configs is not None:
        head += "\tConfigs: " + ",".join(f"{k}={v}" for k, v in sorted(configs.items()))
    lines = [head]
    for p in partitions:
        leader = "none" if p.leader < 0 else str(p.leader)
        lines.append(
            f"\tTopic: {topic.name}\tPartition: {p.tp.partition}\tLeader: {leader}"
            f"\tReplicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
        )
    return "\n".join(lines)


async def _delete(args: argparse.Namespace) -> int:
    async with connections(args) as conns, admin_client(args, conns) as admin:
        await admin.delete_topic(args.topic)
    print(f"Deleted topic {args.topic}.")
    return 0


async def _delete_records(args: argparse.Namespace) -> int:
    """Kafka's ``kafka-delete-records.sh`` output: one line per partition, its low watermark
    (the smallest log start offset over its replicas) or the error; exit 1 on any error."""
    async with connections(args) as conns:
        partitions = args.partition
        if not partitions:
            cluster = await MetadataClient(conns).refresh([args.topic])
            topic = cluster.topics.get(args.topic)
            if topic is None or topic.error_code != ErrorCode.NONE:
                raise ClientError(f"topic {args.topic!r} does not exist")
            partitions = sorted(topic.partitions)
        offsets = {TopicPartition(args.topic, p): args.offset for p in partitions}
        print("Executing records delete operation")
        result = await delete_records(conns, offsets, args.timeout_ms)
    print("Records delete operation completed:")
    for tp in sorted(offsets):
        if tp in result.low_watermarks:
            print(f"partition: {tp}\tlow_watermark: {result.low_watermarks[tp]}")
        else:
            print(f"partition: {tp}\terror: {result.errors.get(tp, 'no answer')}")
    return 1 if result.errors else 0
