"""The records every workload producer writes, whatever client it writes them with
(:mod:`chaos.workload`'s gRPC producers, :mod:`chaos.kafka_workload`'s Kafka ones): one
definition of the value scheme the audit relies on (docs/audit.md: values unique in the
history)."""

from __future__ import annotations

import argparse
import random

__all__ = ["record_for"]


def record_for(
    args: argparse.Namespace, keys: random.Random, n: int
) -> tuple[str | None, str | None]:
    """The ``n``-th record's key and value: a unique value, without a key unless the topics
    are compacted (``--keys``); then every ``--tombstone-every``-th is a tombstone (a null
    value, told apart in the history by its key and offset)."""
    value = f"p{args.process}-{n}"
    if not args.keys:
        return None, value
    key = f"k{keys.randrange(args.keys)}"
    if args.tombstone_every and n % args.tombstone_every == args.tombstone_every - 1:
        return key, None
    return key, value
