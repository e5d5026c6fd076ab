"""Kafka's error codes as Python exceptions, shared by the broker and the client.

One root with flags (as aiokafka does): retry loops ask ``err.retriable`` and
``err.invalid_metadata`` instead of long isinstance chains. The broker raises these inside
request handling and turns them into the per-partition ``ErrorCode`` of the response; the
client turns a response's code back into the exception with :func:`for_code`.

::

    MinibrokerError                      root of everything minibroker raises on purpose
    ├── UsageError                       a command line's mistake found after parsing
    └── BrokerResponseError              carries an ErrorCode (.code) from the wire
        ├── OffsetOutOfRangeError
        ├── CorruptMessageError
        ├── UnknownTopicOrPartitionError     retriable, invalid_metadata
        ├── LeaderNotAvailableError          retriable, invalid_metadata
        ├── NotLeaderOrFollowerError         retriable, invalid_metadata
        ├── RequestTimedOutError             retriable
        ├── BrokerNotAvailableError          retriable, invalid_metadata
        ├── MessageTooLargeError
        ├── StaleControllerEpochError
        ├── InvalidTopicError
        ├── NotEnoughReplicasError           retriable
        ├── NotEnoughReplicasAfterAppendError retriable (the write may be in the log)
        ├── InvalidRequiredAcksError
        ├── InvalidRequestError
        ├── OutOfOrderSequenceError
        ├── DuplicateSequenceError
        ├── InvalidProducerEpochError        (a newer epoch of the producer id exists)
        ├── KafkaStorageError                retriable, invalid_metadata
        ├── FencedLeaderEpochError           retriable, invalid_metadata
        ├── UnknownLeaderEpochError          retriable
        ├── UnsupportedCompressionTypeError  (a codec the broker cannot decode)
        ├── InvalidRecordError               (a well-framed batch whose records break a rule)
        ├── InvalidTimestampError            (a producer set the LogAppendTime attribute)
        ├── UnknownProducerIdError           (a producer id no broker handed out)
        ├── InvalidTxnStateError             (a write that breaks the transaction's rules)
        ├── TransactionCoordinatorFencedError (a marker of a deposed coordinator)
        ├── ProducerFencedError              (a newer instance of the transactional id)
        └── (any other code)                 BrokerResponseError itself, flags from the table
"""

from __future__ import annotations

from proto.wire.minibroker_pb2 import ErrorCode


def error_name(code: int) -> str:
    """Kafka's name of an error code (``NOT_COORDINATOR``), ``ERROR_<code>`` for one this
    project has no name for."""
    try:
        return ErrorCode.Name(ErrorCode.ValueType(code))
    except ValueError:
        return f"ERROR_{code}"


class MinibrokerError(Exception):
    """Base of every error minibroker raises deliberately."""

    retriable: bool = False
    """The same request may succeed if sent again (after a backoff)."""
    invalid_metadata: bool = False
    """The client's view of leadership is stale: refresh metadata before retrying."""


class UsageError(MinibrokerError):
    """A mistake in a command line found after parsing (two topics, a bad combination of
    options), by any of the ``minibroker`` subcommands: the CLI shows it with the command's
    usage and exit status 2."""


class BrokerResponseError(MinibrokerError):
    """An error a broker reports with a Kafka ``ErrorCode``."""

    code: int = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str = "", *, code: int | None = None) -> None:
        if code is not None:
            self.code = code  # a generic instance for a code without a class of its own
        super().__init__(message or _DESCRIPTIONS.get(self.code, "unknown error"))

    @property
    def code_name(self) -> str:
        """The code's Kafka name, e.g. ``NOT_LEADER_OR_FOLLOWER``."""
        return error_name(self.code)

    def __str__(self) -> str:
        return f"{self.code_name}: {super().__str__()}"


class OffsetOutOfRangeError(BrokerResponseError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


class CorruptMessageError(BrokerResponseError):
    code = ErrorCode.CORRUPT_MESSAGE


class UnknownTopicOrPartitionError(BrokerResponseError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    retriable = True
    invalid_metadata = True


class LeaderNotAvailableError(BrokerResponseError):
    code = ErrorCode.LEADER_NOT_AVAILABLE
    retriable = True
    invalid_metadata = True


class NotLeaderOrFollowerError(BrokerResponseError):
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    retriable = True
    invalid_metadata = True


class RequestTimedOutError(BrokerResponseError):
    code = ErrorCode.REQUEST_TIMED_OUT
    retriable = True


class BrokerNotAvailableError(BrokerResponseError):
    code = ErrorCode.BROKER_NOT_AVAILABLE
    retriable = True
    invalid_metadata = True


class MessageTooLargeError(BrokerResponseError):
    code = ErrorCode.MESSAGE_TOO_LARGE


class StaleControllerEpochError(BrokerResponseError):
    code = ErrorCode.STALE_CONTROLLER_EPOCH


class InvalidTopicError(BrokerResponseError):
    code = ErrorCode.INVALID_TOPIC


class NotEnoughReplicasError(BrokerResponseError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS
    retriable = True


class NotEnoughReplicasAfterAppendError(BrokerResponseError):
    """The leader appended the batch but the ISR shrank below min.insync.replicas.

    Retrying may write the records twice (unless the producer is idempotent).
    """

    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    retriable = True


class InvalidRequiredAcksError(BrokerResponseError):
    code = ErrorCode.INVALID_REQUIRED_ACKS


class InvalidRequestError(BrokerResponseError):
    code = ErrorCode.INVALID_REQUEST


class OutOfOrderSequenceError(BrokerResponseError):
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE


class DuplicateSequenceError(BrokerResponseError):
    code = ErrorCode.DUPLICATE_SEQUENCE


class InvalidProducerEpochError(BrokerResponseError):
    """The batch's producer epoch is older than the one the partition has seen for its
    producer id: another producer with the same id has fenced this one."""

    code = ErrorCode.INVALID_PRODUCER_EPOCH


class KafkaStorageError(BrokerResponseError):
    code = ErrorCode.KAFKA_STORAGE_ERROR
    retriable = True
    invalid_metadata = True


class FencedLeaderEpochError(BrokerResponseError):
    """The requester's leader epoch is older than the broker's: refresh and retry."""

    code = ErrorCode.FENCED_LEADER_EPOCH
    retriable = True
    invalid_metadata = True


class UnknownLeaderEpochError(BrokerResponseError):
    """The requester's leader epoch is newer than the broker's: the broker will catch up."""

    code = ErrorCode.UNKNOWN_LEADER_EPOCH
    retriable = True


class UnsupportedCompressionTypeError(BrokerResponseError):
    """The batch is compressed with a codec this broker does not decode."""

    code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


class InvalidRecordError(BrokerResponseError):
    """A record of the batch breaks a rule (Kafka's ``InvalidRecordException``): control
    or transactional batches from a client, records that do not parse as the batch says."""

    code = ErrorCode.INVALID_RECORD


class InvalidTimestampError(BrokerResponseError):
    """A batch's timestamps break a rule (Kafka's ``InvalidTimestampException``): here, a
    producer that set the LogAppendTime attribute, which only a broker may set."""

    code = ErrorCode.INVALID_TIMESTAMP


class UnknownProducerIdError(BrokerResponseError):
    """A producer id no broker handed out (above every block reserved in
    ``/latest_producer_id_block``), or one the partition holds no state for."""

    code = ErrorCode.UNKNOWN_PRODUCER_ID


class InvalidTxnStateError(BrokerResponseError):
    """A write the producer's transaction forbids: a plain batch while its transaction is
    open, a marker for a transaction that is not there to end."""

    code = ErrorCode.INVALID_TXN_STATE


class TransactionCoordinatorFencedError(BrokerResponseError):
    """A marker from a coordinator older than the one that wrote the producer's last
    marker: a deposed coordinator's, refused so it cannot end a transaction twice."""

    code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class ProducerFencedError(BrokerResponseError):
    """A newer instance of the transactional id took over its producer id."""

    code = ErrorCode.PRODUCER_FENCED


_CLASSES: dict[int, type[BrokerResponseError]] = {
    cls.code: cls
    for cls in (
        OffsetOutOfRangeError,
        CorruptMessageError,
        UnknownTopicOrPartitionError,
        LeaderNotAvailableError,
        NotLeaderOrFollowerError,
        RequestTimedOutError,
        BrokerNotAvailableError,
        MessageTooLargeError,
        StaleControllerEpochError,
        InvalidTopicError,
        NotEnoughReplicasError,
        NotEnoughReplicasAfterAppendError,
        InvalidRequiredAcksError,
        InvalidRequestError,
        OutOfOrderSequenceError,
        DuplicateSequenceError,
        InvalidProducerEpochError,
        KafkaStorageError,
        FencedLeaderEpochError,
        UnknownLeaderEpochError,
        UnsupportedCompressionTypeError,
        InvalidRecordError,
        InvalidTimestampError,
        UnknownProducerIdError,
        InvalidTxnStateError,
        TransactionCoordinatorFencedError,
        ProducerFencedError,
    )
}

_DESCRIPTIONS: dict[int, str] = {
    ErrorCode.UNKNOWN_SERVER_ERROR: "the server failed unexpectedly while handling the request",
    ErrorCode.OFFSET_OUT_OF_RANGE: "the offset is outside the range the partition holds",
    ErrorCode.CORRUPT_MESSAGE: "a record batch failed validation (CRC, length, magic or count)",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "this broker does not host that topic-partition",
    ErrorCode.LEADER_NOT_AVAILABLE: "the partition has no leader right now (election under way)",
    ErrorCode.NOT_LEADER_OR_FOLLOWER: (
        "this broker is not the leader (or a replica) of that partition"
    ),
    ErrorCode.REQUEST_TIMED_OUT: "the request timed out",
    ErrorCode.BROKER_NOT_AVAILABLE: "the broker is not available",
    ErrorCode.MESSAGE_TOO_LARGE: "a record batch is larger than message.max.bytes",
    ErrorCode.STALE_CONTROLLER_EPOCH: "the request came from a controller that has been replaced",
    ErrorCode.INVALID_TOPIC: "the topic name is invalid",
    ErrorCode.NOT_ENOUGH_REPLICAS: "fewer in-sync replicas than min.insync.replicas",
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: (
        "written to the leader, but the ISR fell below min.insync.replicas"
    ),
    ErrorCode.INVALID_REQUIRED_ACKS: "acks must be 0, 1 or -1 (all)",
    ErrorCode.INVALID_REQUEST: "the request is malformed",
    ErrorCode.OUT_OF_ORDER_SEQUENCE: "the producer's sequence number has a gap",
    ErrorCode.DUPLICATE_SEQUENCE: "the producer's batch was already written",
    ErrorCode.INVALID_PRODUCER_EPOCH: "the producer was fenced by a newer epoch of its producer id",
    ErrorCode.UNKNOWN_PRODUCER_ID: (
        "no broker handed out this producer id, or the partition holds no state for it"
    ),
    ErrorCode.KAFKA_STORAGE_ERROR: "the broker could not read or write its log directory",
    ErrorCode.FENCED_LEADER_EPOCH: "the leader epoch in the request is older than the broker's",
    ErrorCode.UNKNOWN_LEADER_EPOCH: "the leader epoch in the request is newer than the broker's",
    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE: "the broker does not support that compression codec",
    ErrorCode.INVALID_RECORD: "a record of the batch is invalid",
    ErrorCode.INVALID_TIMESTAMP: "a timestamp of the batch is invalid (or its type is not the "
    "producer's to set)",
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "no ACL allows this principal that on the topic",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "no ACL allows this principal that on the group",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "no ACL allows this principal that on the cluster",
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: (
        "no ACL allows this principal that on the transactional id"
    ),
    ErrorCode.INVALID_TXN_STATE: "the producer attempted a transactional operation in an "
    "invalid state",
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: "the producer id is not the transactional id's",
    ErrorCode.INVALID_TRANSACTION_TIMEOUT: "the transaction timeout is larger than "
    "transaction.max.timeout.ms",
    ErrorCode.CONCURRENT_TRANSACTIONS: "the coordinator is still completing the transactional "
    "id's previous transaction",
    ErrorCode.TRANSACTION_COORDINATOR_FENCED: "a newer transaction coordinator has written "
    "to this producer's partitions",
    ErrorCode.PRODUCER_FENCED: "a newer instance of the transactional id has fenced this one",
}

# Kafka's flags for the codes that have no class of their own.
_RETRIABLE_CODES = frozenset(
    {
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        ErrorCode.ELECTION_NOT_NEEDED,
        ErrorCode.CONCURRENT_TRANSACTIONS,
    }
)


def for_code(code: int, message: str = "") -> BrokerResponseError | None:
    """The exception for a response's error code, or None for ``NONE``."""
    if code == ErrorCode.NONE:
        return None
    cls = _CLASSES.get(code)
    if cls is not None:
        return cls(message)
    err = BrokerResponseError(message, code=code)
    if code in _RETRIABLE_CODES:
        err.retriable = True
    return err
