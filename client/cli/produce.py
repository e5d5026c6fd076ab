"""``minibroker produce TOPIC``: one record per stdin line (Kafka's console producer).

The whole line is the value, unless ``--key-separator`` splits it into key and value at
its first occurrence (Kafka's ``--property parse.key=true`` with ``key.separator``, default
a tab, is accepted too). The brokers are asked for metadata first, so that a cluster that
is not running is reported at once rather than after ``max_block_ms``. Records are batched
and sent as the producer does for any client; at the end every record has been
acknowledged or the command says, on one line, how many failed and why, and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from typing import BinaryIO

from client.cli.common import (
    acks_argument,
    add_bootstrap_option,
    add_compression_type_option,
    add_topic_argument,
    boolean_property,
    check_reachable,
    connections,
    property_argument,
    run_async,
)
from client.metadata import ClientError
from client.producer import FutureRecordMetadata, Producer, ProducerConfig
from client.producer_config import DEFAULT_BATCH_SIZE
from proto.errors import UsageError

_READ_CHUNK = 1 << 16
PROPERTIES = ("parse.key", "key.separator")
"""Kafka's console producer properties accepted by ``--property``."""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "produce",
        help="send stdin lines as records",
        description="Send one record per line of stdin (the line is the value).",
    )
    add_topic_argument(parser)
    add_bootstrap_option(parser)
    parser.add_argument("--acks", type=acks_argument, default=-1, help="all (default), 1 or 0")
    parser.add_argument(
        "--key-separator",
        default=None,
        help="split each line at the first occurrence into key and value",
    )
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        type=property_argument(PROPERTIES),
        metavar="KEY=VALUE",
        help="as Kafka's console producer: parse.key=true, key.separator=SEP (default a tab)",
    )
    parser.add_argument("--partition", type=int, default=None, help="send every record here")
    parser.add_argument("--linger-ms", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    add_compression_type_option(parser)
    parser.add_argument(
        "--delivery-timeout-ms",
        type=int,
        default=60_000,
        help="give up on a record after this long (default 60000)",
    )
    parser.add_argument(
        "--transactional-id",
        default=None,
        help="send as this transactional producer (fencing any earlier one with the id): "
        "the records become visible to read_committed consumers when their transaction "
        "commits, all of the input in one transaction unless --transaction-records",
    )
    parser.add_argument(
        "--transaction-records",
        type=int,
        default=None,
        metavar="N",
        help="with --transactional-id: commit a transaction every N records",
    )
    parser.set_defaults(run=lambda a: run_async(produce(a, sys.stdin.buffer)))


class _Outcome:
    """Counts acknowledgements without keeping every future alive."""

    def __init__(self) -> None:
        self.sent = 0
        self.acked = 0
        self.failed = 0
        self.first_error: BaseException | None = None
        self.pending: set[FutureRecordMetadata] = set()

    def track(self, future: FutureRecordMetadata) -> None:
        self.sent += 1
        self.pending.add(future)
        future.add_done_callback(self._done)

    def _done(self, future: FutureRecordMetadata) -> None:
        self.pending.discard(future)
        if future.cancelled():
            self.failed += 1
        elif future.exception() is not None:
            self.failed += 1
            self.first_error = self.first_error or future.exception()
        else:
            self.acked += 1


def key_separator(args: argparse.Namespace) -> str | None:
    """Where lines split into key and value: ``--key-separator``, or with ``--property
    parse.key=true`` the ``key.separator`` property (a tab by default, as Kafka's); None:
    the whole line is the value. Raises UsageError for an empty or conflicting one."""
    properties = dict(args.property)
    separator: str | None = args.key_separator
    if boolean_property(properties, "parse.key"):
        by_property = properties.get("key.separator", "\t")
        if separator is not None and separator != by_property:
            raise UsageError(
                f"--key-separator {separator!r} and --property key.separator="
                f"{by_property!r} disagree"
            )
        separator = by_property
    if separator == "":
        raise UsageError("the key separator must not be empty")
    return separator


async def produce(args: argparse.Namespace, stdin: BinaryIO) -> int:
    if args.transaction_records is not None and (
        args.transactional_id is None or args.transaction_records < 1
    ):
        raise UsageError("--transaction-records needs --transactional-id and N >= 1")
    text_separator = key_separator(args)
    separator = text_separator.encode() if text_separator is not None else None
    config = ProducerConfig(
        acks=args.acks,
        linger_ms=args.linger_ms,
        batch_size=args.batch_size,
        compression_type=args.compression_type,
        delivery_timeout_ms=args.delivery_timeout_ms,
        request_timeout_ms=min(30_000, max(1, args.delivery_timeout_ms - args.linger_ms)),
        transactional_id=args.transactional_id,
    )
    outcome = _Outcome()
    loop = asyncio.get_running_loop()
    async with connections(args) as conns:
        await check_reachable(conns, [args.topic])
        producer = Producer(conns, config)
        await producer.start()
        transactions = _Transactions(producer, args.transaction_records)
        try:
            rest = b""
            transactions.begin()
            while True:
                chunk = await loop.run_in_executor(None, _read, stdin)
                if not chunk:
                    break
                *lines, rest = (rest + chunk).split(b"\n")
                for line in lines:
                    await _send_line(producer, args, line, separator, outcome)
                    await transactions.sent(outcome)
                if outcome.first_error is not None and isinstance(outcome.first_error, ClientError):
                    break  # e.g. unknown topic: every further record would fail the same way
            if rest:
                await _send_line(producer, args, rest, separator, outcome)
            await transactions.end(outcome)
        except BaseException:
            await transactions.abort()
            raise
        finally:
            await producer.close()
    if outcome.pending:
        await asyncio.gather(*outcome.pending, return_exceptions=True)
    if outcome.failed:
        raise ClientError(
            f"{outcome.failed} of {outcome.sent} records were not acknowledged: "
            f"{outcome.first_error}"
        )
    return 0


class _Transactions:
    """``--transactional-id``: the input in transactions of ``every`` records (None: one),
    each committed once its records are sent; a failed record aborts its transaction and
    ends the run."""

    def __init__(self, producer: Producer, every: int | None) -> None:
        self.producer = producer
        self.every = every
        self.open = False
        self.in_current = 0
        self.committed = 0

    def begin(self) -> None:
        if self.producer.config.transactional_id is not None:
            self.producer.begin_transaction()
            self.open = True
            self.in_current = 0

    async def sent(self, outcome: _Outcome) -> None:
        if not self.open:
            return
        self.in_current += 1
        if self.every is not None and self.in_current >= self.every:
            await self.end(outcome)
            self.begin()

    async def end(self, outcome: _Outcome) -> None:
        if not self.open:
            return
        await self.producer.flush()
        if outcome.failed:
            await self.abort()
            return
        self.open = False
        await self.producer.commit_transaction()
        self.committed += 1

    async def abort(self) -> None:
        if self.open:
            self.open = False
            with contextlib.suppress(ClientError):
                await self.producer.abort_transaction()


def _read(stdin: BinaryIO) -> bytes:
    read1 = getattr(stdin, "read1", None)
    return bytes(read1(_READ_CHUNK) if read1 is not None else stdin.read(_READ_CHUNK))


async def _send_line(
    producer: Producer,
    args: argparse.Namespace,
    line: bytes,
    separator: bytes | None,
    outcome: _Outcome,
) -> None:
    if line.endswith(b"\r"):
        line = line[:-1]
    key: bytes | None = None
    value = line
    if separator is not None:
        key, found, value = line.partition(separator)
        if not found:
            raise ClientError(
                f"line {outcome.sent + 1} has no key separator {separator.decode()!r}"
            )
    future = await producer.send(args.topic, value, key=key, partition=args.partition)
    outcome.track(future)
