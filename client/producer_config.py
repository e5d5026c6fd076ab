"""The producer's settings and what its API hands back: :class:`ProducerConfig` (named as
Kafka's producer configs), the ``acks`` values, :class:`RecordMetadata` (what an acknowledged
record's future holds) and the errors only the producer raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from client.metadata import ClientError
from proto.records.compression import CODEC_NAMES, Codec
from proto.records.record_batch import HEADER_SIZE
from proto.topic_partition import TopicPartition

__all__ = [
    "ACKS_ALL",
    "COMPRESSION_TYPES",
    "DEFAULT_BATCH_SIZE",
    "DeliveryTimeoutError",
    "ProducerClosedError",
    "ProducerConfig",
    "RecordMetadata",
    "RecordRange",
    "RecordTooLargeError",
    "parse_acks",
]

ACKS_ALL = -1
"""``acks=all``: the whole ISR has the records before they are acknowledged."""
_INT32_MAX = 2**31 - 1
MAX_IDEMPOTENT_IN_FLIGHT = 5
"""Kafka's bound on in-flight requests with idempotence: the batches a broker remembers per
producer to answer a retry with its original offset (proto producer state keeps 5 too)."""


# -- errors ----------------------------------------------------------------------------------


class ProducerClosedError(ClientError):
    """The producer was closed before the record could be delivered."""


class DeliveryTimeoutError(ClientError):
    """``delivery_timeout_ms`` passed before the record could even be sent (Kafka's
    TimeoutException "Expiring N record(s)")."""

    retriable = True


class InDoubtBatchError(ClientError):
    """The record may have been written, but its producer id was reset before the outcome
    was known; it is not sent again under the new id, where the broker could not tell it
    from a new record and would store it twice (:mod:`client.sender`). Read the partition
    to learn whether it is there."""


class RecordTooLargeError(ClientError):
    """A record larger than ``max_request_size`` (Kafka's RecordTooLargeException)."""


# -- config ----------------------------------------------------------------------------------


def parse_acks(value: str | int) -> int:
    """``"all"``, ``"-1"``, ``"1"``, ``"0"`` (or the ints) -> -1, 1 or 0."""
    text = str(value).strip().lower()
    if text == "all":
        return ACKS_ALL
    if text in ("-1", "0", "1"):
        return int(text)
    raise ClientError(f"acks must be 0, 1 or all (-1), got {value!r}")


DEFAULT_BATCH_SIZE = 262144
"""``batch.size``'s default (see :attr:`ProducerConfig.batch_size`)."""

COMPRESSION_TYPES = tuple(CODEC_NAMES[codec] for codec in Codec)
"""``compression.type``'s values, as Kafka's producer takes them: none, gzip, snappy, lz4,
zstd (the topic-level ``uncompressed`` and ``producer`` are not producer values)."""
_CODECS = {name: Codec(value) for value, name in CODEC_NAMES.items()}


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """The producer's settings, named as Kafka's (``batch.size`` -> ``batch_size``).

    Raises ClientError for a value Kafka would refuse too.
    """

    acks: int = ACKS_ALL
    """0, 1 or -1 (all); :func:`parse_acks` reads ``"all"``."""
    batch_size: int = DEFAULT_BATCH_SIZE
    """Upper bound of one partition's batch in bytes (a larger record gets a batch of its own); 0
    sends every record alone. It counts the records *uncompressed*, with
    ``compression_type`` too: a compressed batch holds up to ``batch_size`` bytes of records
    before compression and is smaller on the wire. Kafka's producer instead estimates the
    compressed size as records arrive and fills a batch until the estimate reaches
    ``batch.size``, so its compressed batches hold more records; this rule is simpler (the
    size is exact arithmetic per record, no estimate to correct) and means a compressed
    batch is ``batch_size`` divided by the compression ratio on the wire (raise
    ``batch_size`` to send more records per batch). 256 KiB, not Kafka's 16 KiB: a Produce
    request costs the brokers a few hundred microseconds of CPU whatever it carries (Python
    gRPC), so a saturating producer needs about 1,000 records per request; with 16 KiB
    (about 150 100-byte records) ``perf produce`` made 35,000 records/s on 2 cores, with 256
    KiB it makes several hundred thousand (``bench/RESULTS.md``). A producer that does not
    saturate is unaffected: it sends what it has."""
    linger_ms: int = 0
    """How long a batch that is not full waits for more records before it is sent. With 0
    (the default, as in Kafka before 4.0), Nagle's rule: a partition with nothing in flight
    sends at once, and the records that come while one of its batches is in flight gather
    until the answer comes. At low rates each record leaves at once (the lowest latency);
    under load each request carries a round trip's worth of records, as it must when a
    request costs the brokers as much as here. Above 0, Kafka's rule: a batch waits up to
    ``linger_ms`` (sent at once when full)."""
    retries: int = _INT32_MAX
    """How often a batch is resent after a retriable error; ``delivery_timeout_ms`` is the
    bound that matters with the default."""
    retry_backoff_ms: int = 100
    """Pause before a batch is resent, and between metadata refreshes."""
    request_timeout_ms: int = 30000
    """How long one Produce request may take (also the broker's acks=all wait)."""
    delivery_timeout_ms: int = 120000
    """From ``send`` to the final outcome: after this a record fails with its last error.
    At least ``linger_ms + request_timeout_ms``."""
    enable_idempotence: bool | None = None
    """Producer id + sequence numbers, so retries cannot duplicate or reorder records.
    None (the default): on, unless ``acks`` is 0 or 1 or ``retries`` is 0 (Kafka 3's rule);
    True with acks 0/1 is an error. Resolved to a bool when the config is built."""
    max_request_size: int = 1048576
    """Largest Produce request; a record that cannot fit alone is refused by ``send``."""
    buffer_memory: int = 33554432
    """Bytes of records waiting to be acknowledged before ``send`` blocks."""
    max_block_ms: int = 60000
    """How long ``send`` and ``start`` may block: buffer full, metadata, producer id."""
    max_in_flight_requests_per_connection: int = 5
    """Batches of one partition sent and not yet answered, with idempotence (at most 5, as
    Kafka allows: the broker remembers the last 5 batches of a producer to recognise a
    retry). The produce session keeps their order on the way and the broker's sequence
    checks refuse any batch whose predecessor is missing, so retries never reorder records.
    Without idempotence a partition has one batch in flight whatever this says: Kafka lets
    records reorder there when a batch is retried; this producer does not."""
    client_id: str = "minibroker-producer"
    compression_type: str = "none"
    """``compression.type``: the codec of every batch this producer sends, one of
    :data:`COMPRESSION_TYPES` (none, gzip, snappy, lz4, zstd; any case, stored lower-case),
    written as Kafka's Java producer frames it (``proto.records.compression``). The records
    are encoded plain as they are appended, exactly as without a codec, and a batch's
    records section is compressed once, when the batch is first drained to be sent;
    retries, including one under a new producer id or sequence, resend those compressed
    bytes with a new header. See ``batch_size`` for what bounds a compressed batch.

    The compression runs on the event loop, as Kafka's producer compresses on the thread
    that calls ``send``. Measured on this project's 2-core machine (the fastest of 15), a
    1 MiB batch of 100-byte JSON-like records (``perf produce --payload json``) seals in
    2.0 ms with lz4, 2.3 ms with snappy, 5.5 ms with zstd and 25 ms with gzip (1000-byte
    records: 1.8, 2.2, 3.6 and 48 ms; random bytes: 1.7, 1.4, 5.9 and 30 ms), the default
    256 KiB batch a quarter of that; appending the 2,400 records of such a batch with
    ``send`` costs the loop about 9 ms. So lz4 and snappy cost next to nothing per record,
    zstd about a tenth more and gzip (level 6, as Kafka's) more than half again; a batch
    blocks the loop for its seal, once. A worker thread would free the loop for that time,
    but the hand-off costs more than lz4, snappy or zstd save: with the loop busy encoding
    records, as it is under load, a 256 KiB batch given to a thread came back after a
    median 2.3 ms (lz4) to 5 ms (gzip), the thread waiting for the interpreter lock to start
    and to finish, and the batches of one partition would then need ordering again on
    their way to the broker, which checks their sequence numbers. So the loop
    compresses."""

    transactional_id: str | None = None
    """``transactional.id``: a transactional producer (``init_transactions``, then
    ``begin_transaction`` ... ``commit_transaction`` or ``abort_transaction``); its
    records of a transaction become visible to read_committed consumers together, or not at
    all. Needs idempotence (acks=all); a second producer with the same id fences this one
    (docs/transactions.md)."""
    transaction_timeout_ms: int = 60000
    """``transaction.timeout.ms``: a transaction open longer is aborted by its
    coordinator (at most the brokers' ``transaction.max.timeout.ms``)."""

    def __post_init__(self) -> None:
        if self.transactional_id is not None:
            if not self.transactional_id:
                raise ClientError("transactional_id must not be empty")
            if self.enable_idempotence is False or self.acks != ACKS_ALL:
                raise ClientError(
                    "a transactional producer needs idempotence: acks=all (-1) and "
                    "enable_idempotence not False"
                )
            if self.transaction_timeout_ms < 1:
                raise ClientError("transaction_timeout_ms must be at least 1")
        if isinstance(self.acks, bool) or self.acks not in (0, 1, ACKS_ALL):
            raise ClientError(f"acks must be 0, 1 or all (-1), got {self.acks!r}")
        for name, minimum in (
            ("batch_size", 0),
            ("linger_ms", 0),
            ("retries", 0),
            ("retry_backoff_ms", 0),
            ("request_timeout_ms", 1),
            ("delivery_timeout_ms", 1),
            ("max_request_size", HEADER_SIZE + 7),
            ("buffer_memory", 1),
            ("max_block_ms", 0),
            ("max_in_flight_requests_per_connection", 1),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ClientError(f"{name} must be an integer >= {minimum}, got {value!r}")
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            raise ClientError(
                f"delivery_timeout_ms ({self.delivery_timeout_ms}) must be at least "
                f"linger_ms + request_timeout_ms ({self.linger_ms + self.request_timeout_ms})"
            )
        idempotent = self.enable_idempotence
        if idempotent is None:
            idempotent = self.acks == ACKS_ALL and self.retries > 0
        elif idempotent and self.acks != ACKS_ALL:
            raise ClientError(
                f"enable_idempotence requires acks=all (-1), got acks={self.acks}; "
                "set acks=all or disable idempotence"
            )
        elif idempotent and self.retries == 0:
            raise ClientError("enable_idempotence requires retries > 0")
        if idempotent and self.max_in_flight_requests_per_connection > MAX_IDEMPOTENT_IN_FLIGHT:
            raise ClientError(
                "max_in_flight_requests_per_connection must be at most "
                f"{MAX_IDEMPOTENT_IN_FLIGHT} with enable_idempotence, got "
                f"{self.max_in_flight_requests_per_connection}"
            )
        object.__setattr__(self, "enable_idempotence", idempotent)
        codec = (
            _CODECS.get(self.compression_type.strip().lower())
            if isinstance(self.compression_type, str)
            else None
        )
        if codec is None:
            raise ClientError(
                f"compression_type (compression.type) must be one of "
                f"{', '.join(COMPRESSION_TYPES)}, got {self.compression_type!r}"
            )
        object.__setattr__(self, "compression_type", CODEC_NAMES[codec])

    @property
    def compression_codec(self) -> Codec:
        """The :class:`~proto.records.compression.Codec` of ``compression_type``."""
        return _CODECS[self.compression_type]

    @property
    def in_flight_per_partition(self) -> int:
        """Batches of one partition allowed in flight (see
        :attr:`max_in_flight_requests_per_connection`)."""
        return self.max_in_flight_requests_per_connection if self.enable_idempotence else 1

    @property
    def idempotent(self) -> bool:
        return bool(self.enable_idempotence)


# -- acknowledgements ------------------------------------------------------------------------


class RecordMetadata(NamedTuple):
    """Where an acknowledged record was written.

    A NamedTuple rather than a frozen dataclass: the producer makes one per record, and a
    frozen dataclass costs four times as much to build (``object.__setattr__`` per field)."""

    topic: str
    partition: int
    offset: int
    """-1 with acks=0, and for a batch the broker reported as DUPLICATE_SEQUENCE (written
    earlier, offset not known)."""
    timestamp: int
    """The record's CreateTime in ms, or the broker's LogAppendTime if the topic uses it."""

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class RecordRange:
    """Where a run of records given to ``Producer.send_many`` was written: ``count``
    consecutive records from ``offset`` on, in the order they were given (one per batch
    the run went into, not one per record)."""

    topic: str
    partition: int
    offset: int
    """Offset of the first record; -1 as in :attr:`RecordMetadata.offset`."""
    count: int
    timestamp: int
    """CreateTime of the records (one per ``send_many`` call), or the LogAppendTime."""

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)
