"""``minibroker consume TOPIC``: print records, one value per line (Kafka's console consumer).

Where to start: the group's committed offset with ``--group`` (else ``--from-beginning``
or the end); ``--partition P --offset O`` reads one partition from an offset. It stops after
``--max-messages`` records, or after ``--timeout-ms`` without a new record, and reports
how many it processed on stderr, as Kafka's tool does.
"""

from __future__ import annotations

import argparse
import sys
from typing import BinaryIO

from broker.topic_partition import TopicPartition
from client.cli_common import (
    add_bootstrap_option,
    add_zookeeper_option,
    connections,
    run_async,
)
from client.consumer import Consumer, ConsumerConfig, ConsumerRecord
from client.metadata import ClientError

_POLL_MS = 500


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "consume",
        help="print records of a topic",
        description="Print the records of a topic, one value per line.",
    )
    parser.add_argument("topic")
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
    parser.add_argument("--print-key", action="store_true", help="print the key before the value")
    parser.add_argument("--print-offset", action="store_true", help="print partition:offset first")
    parser.set_defaults(run=lambda a: run_async(consume(a, sys.stdout.buffer)))


async def consume(args: argparse.Namespace, out: BinaryIO) -> int:
    if args.offset is not None and args.partition is None:
        raise ClientError("--offset needs --partition")
    if args.max_messages is not None and args.max_messages < 1:
        raise ClientError("--max-messages must be at least 1")
    config = ConsumerConfig(
        group_id=args.group,
        auto_offset_reset="earliest" if args.from_beginning else "latest",
    )
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
            _seek(consumer, tp, args.offset)
        elif args.group is not None:
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


def _seek(consumer: Consumer, tp: TopicPartition, offset: str | None) -> None:
    if offset is None or offset == "latest":
        consumer.seek_to_end([tp])
    elif offset == "earliest":
        consumer.seek_to_beginning([tp])
    elif offset.isdigit():
        consumer.seek(tp, int(offset))
    else:
        raise ClientError(f"--offset must be a number, 'earliest' or 'latest', got {offset!r}")


def _format(record: ConsumerRecord, args: argparse.Namespace) -> bytes:
    fields: list[bytes] = []
    if args.print_offset:
        fields.append(f"{record.partition}:{record.offset}".encode())
    if args.print_key:
        fields.append(b"null" if record.key is None else record.key)
    fields.append(b"null" if record.value is None else record.value)
    return b"\t".join(fields) + b"\n"
