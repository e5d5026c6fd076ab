"""What Kafka's own clients tell the chaos workload, as history outcomes: pure functions, so
that the mapping the audit relies on is tested without a cluster (:mod:`chaos.kafka_workload`
runs the clients).

- :func:`delivery_outcome`: a producer's delivery report (librdkafka's, or an aiokafka
  future's). ``ok`` only for a report without error that names its offset; any error is
  ``info``. librdkafka knows whether a failed message was ever sent
  (``rd_kafka_message_status``: NOT_PERSISTED, POSSIBLY_PERSISTED), but confluent-kafka's
  Python binding does not expose it, so a timed-out message (``_MSG_TIMED_OUT``), a
  transport error or a broker error after the retries may all hide a write. ``fail`` is
  never a delivery report: only ``produce()`` (``send()``) raising, before anything was
  queued, certainly wrote nothing.
- :func:`commit_outcome`: an OffsetCommit's, per partition. ``fail`` only for the group
  coordinator's refusals, which it answers before storing anything (Kafka's
  ``GroupCoordinator.handleCommitOffsets`` checks the member, the generation and the
  group's state before it appends); ``info`` for every other error (a timeout, a lost
  connection, a coordinator that moved: it may have been stored).
- :func:`parse_group_metadata`: the generation a confluent-kafka consumer is in, which
  its API shows only inside the serialized ``consumer_group_metadata()``.
"""

from __future__ import annotations

import struct
from typing import Literal, NamedTuple

__all__ = [
    "CERTAIN_COMMIT_REFUSALS",
    "GroupMetadata",
    "Outcome",
    "commit_outcome",
    "delivery_outcome",
    "parse_group_metadata",
]

Outcome = Literal["ok", "fail", "info"]

ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
FENCED_INSTANCE_ID = 82
CERTAIN_COMMIT_REFUSALS = frozenset(
    {ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID}
)
"""Kafka's error codes (librdkafka's are the same numbers) with which a group coordinator
refuses an OffsetCommit before storing any of it."""


def delivery_outcome(error: object | None, offset: int | None) -> Outcome:
    """A delivery report's outcome: ``error`` is the report's error (None: none), ``offset``
    the offset it names (None or negative: none). ``ok`` needs both an acknowledgement and
    its offset (an acknowledged write without an offset cannot be checked: ``info``)."""
    if error is None and offset is not None and offset >= 0:
        return "ok"
    return "info"


def commit_outcome(error_code: int | None) -> Outcome:
    """An OffsetCommit's outcome for a partition: ``error_code`` is the partition's (or the
    whole request's) error code, None when it has none."""
    if error_code is None or error_code == 0:
        return "ok"
    if error_code in CERTAIN_COMMIT_REFUSALS:
        return "fail"
    return "info"


class GroupMetadata(NamedTuple):
    """A consumer's group membership, as librdkafka serializes it."""

    group: str
    generation: int
    """The generation id of the member's last join (-1 before it has joined)."""
    member: str
    """The member id the coordinator gave it (empty before it has joined): the same as
    ``Consumer.memberid()``."""
    group_instance_id: str | None = None
    """Its static membership id (None: a dynamic member)."""


_MAGIC = b"CGMDv2:"
_GENERATION = struct.Struct("=i")
"""librdkafka copies the int32 in host byte order (little-endian on x86 and arm64)."""


def parse_group_metadata(data: bytes) -> GroupMetadata:
    """``confluent_kafka.Consumer.consumer_group_metadata()``: the bytes of librdkafka's
    ``rd_kafka_consumer_group_metadata_write``, which are ``CGMDv2:``, the generation id
    (int32, host byte order), the group id and the member id (each NUL-terminated), then a
    byte that is 1 when there is no group instance id and 0 when one (NUL-terminated)
    follows. Raises ValueError for anything else."""
    if not data.startswith(_MAGIC):
        raise ValueError(f"not librdkafka's group metadata (no {_MAGIC!r} magic): {data[:16]!r}")
    at = len(_MAGIC)
    if len(data) < at + _GENERATION.size:
        raise ValueError(f"group metadata cut short before its generation: {data!r}")
    (generation,) = _GENERATION.unpack_from(data, at)
    at += _GENERATION.size
    strings = []
    for what in ("group id", "member id"):
        end = data.find(b"\0", at)
        if end < 0:
            raise ValueError(f"group metadata without a NUL after its {what}: {data!r}")
        strings.append(data[at:end].decode("utf-8"))
        at = end + 1
    if at >= len(data):
        raise ValueError(f"group metadata cut short before its instance id flag: {data!r}")
    instance: str | None = None
    if data[at] == 0:
        end = data.find(b"\0", at + 1)
        if end < 0:
            raise ValueError(f"group metadata without a NUL after its instance id: {data!r}")
        instance = data[at + 1 : end].decode("utf-8")
        at = end + 1
    elif data[at] == 1:
        at += 1
    else:
        raise ValueError(f"group metadata with an instance id flag of {data[at]}: {data!r}")
    if at != len(data):
        raise ValueError(f"group metadata with {len(data) - at} bytes left over: {data!r}")
    return GroupMetadata(strings[0], generation, strings[1], instance)
