"""``minibroker consume TOPIC``: print records, one value per line (Kafka's console consumer).

Where to start: the group's committed offset with ``--group`` (else ``--from-beginning``
or the end); ``--partition P`` reads one partition, from ``--offset O`` (a number,
``earliest`` or ``latest``), else from the beginning with ``--from-beginning``, else from
the end. It stops after ``--max-messages`` records, or after ``--timeout-ms`` without a new
record (a topic the cluster does not know is given up on within that time too, before
any group is joined), and
reports how many it processed on stderr, as Kafka's tool does. Kafka's ``--property
print.key=true``, ``print.offset=true`` and ``key.separator=SEP`` (between key and value,
a tab by default) are accepted.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import BinaryIO

from client.cli.common import (
    add_bootstrap_option,
    add_topic_argument,
    add_zookeeper_option,
    boolean_property,
    connections,
    property_argument,
    run_async,
)
from client.consumer import Consumer, ConsumerConfig, ConsumerRecord
from client.consumer_config import ISOLATION_LEVELS
from client.metadata import ClientError
from proto.errors import UsageError
from proto.topic_partition import TopicPartition

_POLL_MS = 500
PROPERTIES = ("print.key", "print.offset", "key.separator")
"""Kafka's console consumer properties accepted by ``--property``."""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "consume",
        help="print records of a topic",
        description="Print the records of a topic, one value per line.",
    )
    add_topic_argument(parser)
    add_bootstrap_option(parser)
    add_zookeeper_option(parser, "--group")
    parser.add_argument("--from-beginning", action="store_true", help="start at the earliest")
    parser.add_argument("--group", default=None, help="consume as a member of this group")
    parser.add_argument("--max-messages", type=int, default=None, help="stop after N records")
    parser.add_argument(
        "--timeout-ms", type=int, default=None, help="stop after this long without a record"
    )
    parser.add_argument("--partition", type=int, default=None, help="read only this partition")
    parser.add_argument(
        "--offset",
        default=None,
        help="with --partition: an offset, 'earliest' or 'latest'",
    )
    parser.add_argument(
        "--isolation-level",
        choices=ISOLATION_LEVELS,
        default="read_uncommitted",
        help="read_committed: only committed transactions' records, up to the last stable "
        "offset (Kafka's isolation.level; default read_uncommitted)",
    )
    parser.add_argument("--print-key", action="store_true", help="print the key before the value")
    parser.add_argument("--print-offset", action="store_true", help="print partition:offset first")
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        type=property_argument(PROPERTIES),
        metavar="KEY=VALUE",
        help="as Kafka's console consumer: print.key=true, print.offset=true, "
        "key.separator=SEP (between key and value, default a tab)",
    )
    parser.set_defaults(run=lambda a: run_async(consume(a, sys.stdout.buffer)))


def _apply_properties(args: argparse.Namespace) -> None:
    """Fold ``--property`` into the options it stands for (``print_key``, ``print_offset``,
    ``key_separator``)."""
    properties = dict(args.property)
    for name in ("print.key", "print.offset"):
        flag = boolean_property(properties, name)
        if flag is not None:
            setattr(args, name.replace(".", "_"), flag)
    args.key_separator = properties.get("key.separator", "\t")


async def consume(args: argparse.Namespace, out: BinaryIO) -> int:
    _apply_properties(args)
    if args.offset is not None and args.partition is None:
        raise UsageError("--offset needs --partition")
    if args.offset is not None and args.from_beginning:
        raise UsageError("--from-beginning and --offset cannot be given together")
    if args.max_messages is not None and args.max_messages < 1:
        raise UsageError("--max-messages must be at least 1")
    if args.timeout_ms is not None and args.timeout_ms < 1:
        raise UsageError("--timeout-ms must be at least 1")
    start = args.offset or ("earliest" if args.from_beginning else "latest")
    if start not in ("earliest", "latest") and not start.isdigit():
        raise UsageError(f"--offset must be a number, 'earliest' or 'latest', got {start!r}")
    config = ConsumerConfig(
        group_id=args.group,
        auto_offset_reset="earliest" if args.from_beginning else "latest",
        isolation_level=args.isolation_level,
    )
    if args.timeout_ms is not None and args.timeout_ms < config.default_api_timeout_ms:
        # An unknown topic is given up on within --timeout-ms too.
        config = dataclasses.replace(config, default_api_timeout_ms=args.timeout_ms)
    processed = 0
    async with (
        connections(args) as conns,
        Consumer(conns, config, args.zookeeper if args.group else None) as consumer,
    ):
        if args.partition is not None:
            tp = TopicPartition(args.topic, args.partition)
            known = await consumer.partitions_for(args.topic)
            if tp not in known:
                raise ClientError(
                    f"partition {args.partition} out of range: topic '{args.topic}' has "
                    f"{len(known)} partition(s)"
                )
            consumer.assign([tp])
            _seek(consumer, tp, start)
        elif args.group is not None:
            # The topic must exist before the group is joined, as without --group: a typo
            # is an error naming it, and leaves no group behind in ZooKeeper.
            await consumer.partitions_for(args.topic)
            consumer.subscribe([args.topic])
        else:
            consumer.assign(await consumer.partitions_for(args.topic))
        idle_ms = 0
        try:
            while args.max_messages is None or processed < args.max_messages:
                remaining = None if args.max_messages is None else args.max_messages - processed
                wait = _POLL_MS if args.timeout_ms is None else min(_POLL_MS, args.timeout_ms)
                records = await consumer.poll(timeout_ms=wait, max_records=remaining)
                if not records:
                    idle_ms += wait
                    if args.timeout_ms is not None and idle_ms >= args.timeout_ms:
                        break
                    continue
                idle_ms = 0
                for record in records:
                    out.write(_format(record, args))
                out.flush()
                processed += len(records)
        finally:
            print(f"Processed a total of {processed} messages", file=sys.stderr)
    return 0


def _seek(consumer: Consumer, tp: TopicPartition, start: str) -> None:
    if start == "latest":
        consumer.seek_to_end([tp])
    elif start == "earliest":
        consumer.seek_to_beginning([tp])
    else:
        consumer.seek(tp, int(start))


def _format(record: ConsumerRecord, args: argparse.Namespace) -> bytes:
    fields: list[bytes] = []
    if args.print_offset:
        fields.append(f"{record.partition}:{record.offset}".encode())
    value = b"null" if record.value is None else record.value
    if args.print_key:
        key = b"null" if record.key is None else record.key
        value = key + args.key_separator.encode() + value
    fields.append(value)
    return b"\t".join(fields) + b"\n"
