"""Consumer groups' committed offsets and metadata in ``__consumer_offsets`` (Kafka's
``GroupMetadataManager``): docs/consumer-groups.md.

A group lives in partition ``abs(hash(group id)) % offsets.topic.num.partitions`` of the
internal topic (:func:`proto.coordinator.placement.partition_for`), and the leader of that
partition is its coordinator. Every OffsetCommit is a record keyed by (group, topic,
partition), every new generation a record keyed by the group holding its members and their
assignments; a null value (tombstone) deletes either, and the topic is compacted, so the
log keeps the latest of each key. Records are appended with acks=all and become visible
(OffsetFetch answers them) only once every in-sync replica has them: an acknowledged
commit survives the loss of its coordinator.

When this broker becomes leader of a partition of the topic it reads the partition from
its log start to its end (:mod:`broker.coordinator.internal_topic`), off the event loop; until
the load is done its groups' requests are answered COORDINATOR_LOAD_IN_PROGRESS, which
Kafka's clients retry. The groups found are handed to the coordinator, members and
assignments included, so a group whose coordinator moved carries on at the new one
without a rebalance if its members heartbeat in time. When the broker stops leading the
partition its groups are dropped (their members, told NOT_COORDINATOR, look the
coordinator up again).

Two commits of one partition of one group may be acknowledged out of order (both wait
for the ISR and wake together): the cache keeps the one written later in the log, as a
reload would, whatever order the acknowledgements come in.

A transaction's offsets (TxnOffsetCommit, KIP-98) are written as the producer's
transactional batch and held pending, per producer id, until the transaction's marker
reaches the group's partition: a commit marker makes them the group's offsets (unless a
commit written later in the log already replaced one), an abort drops them. A load does
the same with the batches and markers it reads, and a marker written while the partition
is loading is applied once the load is done (unless the load read it). OffsetFetch with
``require_stable`` answers UNSTABLE_OFFSET_COMMIT for a partition with pending offsets.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass

from broker.coordinator.internal_topic import (
    COORDINATOR_LOAD_IN_PROGRESS,
    InternalTopicPartitions,
    coordinator_error,
)
from broker.metadata_cache import MetadataCache
from broker.replication.replica_manager import MarkerAppend, ReplicaManager
from proto.config.broker_config import BrokerConfig
from proto.coordinator.group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from proto.records.control_records import ControlType
from proto.records.record_batch import Record
from proto.topic_partition import OFFSETS_TOPIC, TopicPartition
from proto.wire import minibroker_pb2 as pb

logger = logging.getLogger(__name__)

__all__ = [
    "COORDINATOR_LOAD_IN_PROGRESS",
    "CommittedOffset",
    "GroupMetadataManager",
    "StoredGroup",
    "commit_error",
]

INVALID_COMMIT_OFFSET_SIZE = 28

OffsetsTopicCreator = Callable[[], Awaitable[int]]
"""Makes ``__consumer_offsets`` with its settings if it does not exist: the CreateTopics
error code (NONE or TOPIC_ALREADY_EXISTS when it is there)."""


def commit_error(code: int) -> int:
    """What a client is told when appending its commit (or its group) failed with ``code``
    (Kafka's ``GroupMetadataManager.storeOffsets`` mapping): the partition's troubles become
    coordinator errors, on which Kafka's clients look the coordinator up again or retry."""
    if code in (pb.MESSAGE_TOO_LARGE, 18, 4):  # RECORD_LIST_TOO_LARGE, INVALID_FETCH_SIZE
        return INVALID_COMMIT_OFFSET_SIZE
    return coordinator_error(code)


@dataclass(frozen=True)
class CommittedOffset:
    """One committed offset of a group, as OffsetFetch answers it."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int = -1
    """Set only by OffsetCommit v2-v4's ``retention_time_ms`` (Kafka's v1 value record)."""
    record_offset: int = -1
    """Where its record is in ``__consumer_offsets`` (-1 before it is written)."""


@dataclass
class StoredGroup:
    """What the log holds of one group: its offsets, its last generation, and the offsets
    of open transactions (by producer id)."""

    offsets: dict[TopicPartition, CommittedOffset] = dataclasses.field(default_factory=dict)
    metadata: GroupMetadataValue | None = None
    metadata_offset: int = -1
    pending: dict[int, dict[TopicPartition, CommittedOffset]] = dataclasses.field(
        default_factory=dict
    )

    def is_empty(self) -> bool:
        return self.metadata is None and not self.offsets and not self.pending

    def complete_transaction(self, producer_id: int, committed: bool) -> int:
        """Apply (``committed``) or drop a producer's pending offsets: how many applied."""
        applied = 0
        for tp, offset in self.pending.pop(producer_id, {}).items():
            known = self.offsets.get(tp)
            newer = known is None or known.record_offset < offset.record_offset
            if committed and offset.record_offset >= 0 and newer:
                self.offsets[tp] = offset
                applied += 1
        return applied


class GroupMetadataManager:
    """The ``__consumer_offsets`` partitions this broker leads and the groups in them."""

    def __init__(
        self,
        config: BrokerConfig,
        replica_manager: ReplicaManager,
        metadata_cache: MetadataCache,
        executor: Executor | None,
        create_topic: OffsetsTopicCreator,
        *,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.replica_manager = replica_manager
        self.metadata_cache = metadata_cache
        self.executor = executor
        self.clock_ms = clock_ms
        self.groups: dict[str, StoredGroup] = {}
        """The groups of the loaded partitions."""
        self._loading: dict[int, dict[str, StoredGroup]] = {}
        """Per partition being loaded: what its records said so far."""
        self.on_group_loaded: Callable[[str, GroupMetadataValue], None] = lambda g, v: None
        """Set by the coordinator: a group with a stored generation was loaded."""
        self.on_group_unloaded: Callable[[str], None] = lambda g: None
        """Set by the coordinator: a group's partition is no longer led here."""
        self._producer_groups: dict[int, set[str]] = {}
        """Producer id -> the groups (loaded or loading) holding its pending offsets."""
        self._load_read_to: dict[int, int] = {}
        """Per partition being loaded: the offset after the last batch its load read."""
        self._markers_while_loading: dict[int, list[tuple[int, int, bool]]] = {}
        """Per partition being loaded: (marker offset, producer id, committed) written
        since the load began."""
        replica_manager.marker_listeners.append(self._on_marker_written)
        self.partitions = InternalTopicPartitions(
            OFFSETS_TOPIC,
            self.broker_id,
            replica_manager,
            metadata_cache,
            executor,
            partitions=config.offsets_topic_num_partitions,
            create_topic=create_topic,
            apply=self._apply_record,
            unload=self._unload_groups,
            loaded=self._install_loaded,
            append_timeout_ms=lambda: self.config.offsets_commit_timeout_ms,
            apply_marker=self._apply_marker,
        )

    # -- placement -----------------------------------------------------------------------------

    @property
    def partition_count(self) -> int:
        return self.partitions.partition_count

    def partition_of(self, key: str) -> int:
        return self.partitions.partition_of(key)

    def topic_exists(self) -> bool:
        return self.partitions.topic_exists()

    async def ensure_topic(self) -> int:
        return await self.partitions.ensure_topic()

    def refusal(self, group_id: str) -> int | None:
        """NOT_COORDINATOR unless this broker leads the group's partition,
        COORDINATOR_LOAD_IN_PROGRESS while it loads it, else None."""
        return self.partitions.refusal(self.partition_of(group_id))

    def loaded_partitions(self) -> list[int]:
        return self.partitions.loaded_partitions()

    # -- loading -------------------------------------------------------------------------------

    def _unload_groups(self, partition: int) -> int:
        loading = self._loading.pop(partition, {})
        self._load_read_to.pop(partition, None)
        self._markers_while_loading.pop(partition, None)
        gone = [g for g in self.groups if self.partition_of(g) == partition]
        for group_id in gone:
            del self.groups[group_id]
            self.on_group_unloaded(group_id)
        for group_id in (*gone, *loading):
            self._forget_producers(group_id)
        return len(gone)

    def _install_loaded(self, partition: int) -> int:
        found = self._loading.pop(partition, {})
        read_to = self._load_read_to.pop(partition, 0)
        for group_id, stored in found.items():
            self.groups[group_id] = stored
            if stored.metadata is not None:
                self.on_group_loaded(group_id, stored.metadata)
        for offset, producer_id, committed in self._markers_while_loading.pop(partition, []):
            if offset >= read_to:  # the load did not read it
                self._complete_transaction(partition, producer_id, committed, self.groups)
        return len(found)

    def _forget_producers(self, group_id: str) -> None:
        for producer_id in [p for p, gs in self._producer_groups.items() if group_id in gs]:
            self._unlink_producer(producer_id, group_id)

    def _unlink_producer(self, producer_id: int, group_id: str) -> None:
        groups = self._producer_groups.get(producer_id)
        if groups is not None:
            groups.discard(group_id)
            if not groups:
                del self._producer_groups[producer_id]

    def _apply_marker(self, partition: int, producer_id: int, committed: bool, offset: int) -> None:
        self._load_read_to[partition] = offset + 1
        found = self._loading.setdefault(partition, {})
        self._complete_transaction(partition, producer_id, committed, found)

    def _complete_transaction(
        self,
        partition: int,
        producer_id: int,
        committed: bool,
        groups: dict[str, StoredGroup],
    ) -> None:
        """A producer's marker reached ``partition``: its pending offsets in the groups of
        the partition (among ``groups``) are applied or dropped."""
        for group_id in sorted(self._producer_groups.get(producer_id, ())):
            if self.partition_of(group_id) != partition:
                continue
            stored = groups.get(group_id)
            self._unlink_producer(producer_id, group_id)
            if stored is None:
                continue
            applied = stored.complete_transaction(producer_id, committed)
            logger.info(
                "event=txn_offsets_completed broker=%d group=%s producer_id=%d "
                "committed=%s applied=%d",
                self.broker_id,
                group_id,
                producer_id,
                committed,
                applied,
            )
            if stored.is_empty() and groups.get(group_id) is stored:
                del groups[group_id]

    def _on_marker_written(self, tp: TopicPartition, marker: MarkerAppend, offset: int) -> None:
        """The replica manager's listener: a marker written (and replicated) here."""
        if tp.topic != OFFSETS_TOPIC:
            return
        committed = marker.marker.control_type is ControlType.COMMIT
        refusal = self.partitions.refusal(tp.partition)
        if refusal == COORDINATOR_LOAD_IN_PROGRESS:
            self._markers_while_loading.setdefault(tp.partition, []).append(
                (offset, marker.producer_id, committed)
            )
        elif refusal is None:
            self._complete_transaction(tp.partition, marker.producer_id, committed, self.groups)

    def _apply_record(self, partition: int, record: Record, producer_id: int) -> None:
        self._load_read_to[partition] = record.offset + 1
        found = self._loading.setdefault(partition, {})
        if record.key is None:
            logger.warning(
                "event=offsets_record_without_key broker=%d tp=%s-%d offset=%d",
                self.broker_id,
                OFFSETS_TOPIC,
                partition,
                record.offset,
            )
            return
        try:
            key = decode_key(record.key)
            if isinstance(key, OffsetCommitKey):
                stored = found.setdefault(key.group, StoredGroup())
                committed = TopicPartition(key.topic, key.partition)
                offsets = stored.offsets
                if producer_id >= 0:  # a transaction's: pending until its marker
                    offsets = stored.pending.setdefault(producer_id, {})
                    self._producer_groups.setdefault(producer_id, set()).add(key.group)
                if record.value is None:
                    offsets.pop(committed, None)
                else:
                    value = decode_offset_commit_value(record.value)
                    offsets[committed] = _committed(value, record.offset)
            else:
                stored = found.setdefault(key.group, StoredGroup())
                stored.metadata = (
                    None if record.value is None else decode_group_metadata_value(record.value)
                )
                stored.metadata_offset = record.offset
            if stored.is_empty():
                del found[key.group]
        except ValueError as err:
            logger.error(
                "event=offsets_record_unreadable broker=%d tp=%s-%d offset=%d error=%r",
                self.broker_id,
                OFFSETS_TOPIC,
                partition,
                record.offset,
                str(err),
            )

    # -- reads ---------------------------------------------------------------------------------

    def committed(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        stored = self.groups.get(group_id)
        return {} if stored is None else dict(stored.offsets)

    def stored_metadata(self, group_id: str) -> GroupMetadataValue | None:
        stored = self.groups.get(group_id)
        return None if stored is None else stored.metadata

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        """The partitions with offsets of an open transaction (OffsetFetch's
        UNSTABLE_OFFSET_COMMIT when ``require_stable``)."""
        stored = self.groups.get(group_id)
        if stored is None:
            return set()
        return {tp for offsets in stored.pending.values() for tp in offsets}

    def holds(self, group_id: str) -> bool:
        """Whether the log holds anything of the group (offsets or a generation)."""
        return group_id in self.groups

    # -- writes --------------------------------------------------------------------------------

    async def store_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, CommittedOffset]
    ) -> dict[TopicPartition, int]:
        """Append the commits as one batch and wait for the ISR; each partition's error
        code (the same for all: they are one batch)."""
        now = self.clock_ms()
        code, base_offset = await self._append(group_id, _commit_records(group_id, offsets, now))
        if code == pb.NONE and base_offset >= 0:
            stored = self.groups.setdefault(group_id, StoredGroup())
            for index, (tp, c) in enumerate(offsets.items()):
                record_offset = base_offset + index
                known = stored.offsets.get(tp)
                if known is None or known.record_offset < record_offset:
                    stored.offsets[tp] = dataclasses.replace(
                        c, commit_timestamp_ms=now, record_offset=record_offset
                    )
        return dict.fromkeys(offsets, code)

    async def store_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets: Mapping[TopicPartition, CommittedOffset],
    ) -> dict[TopicPartition, int]:
        """TxnOffsetCommit's write (Kafka's ``storeOffsets`` for a producer): the commits as
        the producer's transactional batch, pending until its transaction's marker; each
        partition's error code. A fenced epoch is INVALID_PRODUCER_EPOCH (the partition's
        producer state refuses the batch), and nothing is held pending then."""
        now = self.clock_ms()
        stored = self.groups.setdefault(group_id, StoredGroup())
        pending = stored.pending.setdefault(producer_id, {})
        held = {tp: dataclasses.replace(c, commit_timestamp_ms=now) for tp, c in offsets.items()}
        pending.update(held)
        self._producer_groups.setdefault(producer_id, set()).add(group_id)
        code, base_offset = await self._append(
            group_id, _commit_records(group_id, offsets, now), (producer_id, producer_epoch)
        )
        stored = self.groups.get(group_id) or StoredGroup()
        pending = stored.pending.get(producer_id, {})
        for index, (tp, c) in enumerate(held.items()):
            if pending.get(tp) is not c:
                continue  # completed, replaced or unloaded meanwhile
            if code == pb.NONE and base_offset >= 0:
                pending[tp] = dataclasses.replace(c, record_offset=base_offset + index)
            else:
                del pending[tp]
        if not pending and stored.pending.get(producer_id) is pending:
            del stored.pending[producer_id]
            self._unlink_producer(producer_id, group_id)
            if stored.is_empty() and self.groups.get(group_id) is stored:
                del self.groups[group_id]
        return dict.fromkeys(offsets, code)

    async def store_group(self, group_id: str, value: GroupMetadataValue) -> int:
        """Append the group's generation (members and assignments) and wait for the ISR."""
        record = Record(
            encode_group_metadata_key(GroupMetadataKey(group_id)),
            encode_group_metadata_value(value),
            self.clock_ms(),
        )
        code, base_offset = await self._append(group_id, [record])
        if code == pb.NONE and base_offset >= 0:
            stored = self.groups.setdefault(group_id, StoredGroup())
            if stored.metadata_offset < base_offset:
                stored.metadata, stored.metadata_offset = value, base_offset
        return code

    async def delete(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> int:
        """Tombstones for the group's offsets of ``partitions`` (None: all of them and its
        generation, the whole group)."""
        stored = self.groups.get(group_id)
        if stored is None:
            return pb.NONE
        tps = (
            list(stored.offsets)
            if partitions is None
            else [tp for tp in partitions if tp in stored.offsets]
        )
        now = self.clock_ms()
        records = [
            Record(
                encode_offset_commit_key(OffsetCommitKey(group_id, tp.topic, tp.partition)),
                None,
                now,
            )
            for tp in tps
        ]
        if partitions is None and stored.metadata is not None:
            records.append(Record(encode_group_metadata_key(GroupMetadataKey(group_id)), None, now))
        code: int = pb.NONE
        if records:
            code, _ = await self._append(group_id, records)
        if code == pb.NONE:
            for tp in tps:
                stored.offsets.pop(tp, None)
                for pending in stored.pending.values():
                    pending.pop(tp, None)
            if partitions is None:
                self._forget_producers(group_id)
                # A group whose offsets alone were deleted stays, Empty, until deleted
                # itself (Kafka keeps it until its next expiry pass).
                self.groups.pop(group_id, None)
        logger.info(
            "event=group_offsets_deleted broker=%d group=%s partitions=%d whole_group=%s "
            "error_code=%d",
            self.broker_id,
            group_id,
            len(tps),
            partitions is None,
            code,
        )
        return code

    async def _append(
        self, group_id: str, records: list[Record], producer: tuple[int, int] | None = None
    ) -> tuple[int, int]:
        """(error code for the client, base offset of the appended batch)."""
        appended = await self.partitions.append(self.partition_of(group_id), records, producer)
        if appended.error_code != pb.NONE:
            return commit_error(appended.error_code), -1
        if not appended.still_owned:
            # The partition moved while the write waited: the new leader's load decides
            # whether it survived (it was acknowledged by the ISR, so it did).
            return pb.NONE, -1
        return pb.NONE, appended.base_offset

    async def stop(self) -> None:
        await self.partitions.stop()


def _commit_records(
    group_id: str, offsets: Mapping[TopicPartition, CommittedOffset], now: int
) -> list[Record]:
    return [
        Record(
            encode_offset_commit_key(OffsetCommitKey(group_id, tp.topic, tp.partition)),
            encode_offset_commit_value(
                OffsetCommitValue(c.offset, c.leader_epoch, c.metadata, now, c.expire_timestamp_ms)
            ),
            now,
        )
        for tp, c in offsets.items()
    ]


def _committed(value: OffsetCommitValue, record_offset: int) -> CommittedOffset:
    return CommittedOffset(
        value.offset,
        value.leader_epoch,
        value.metadata,
        value.commit_timestamp,
        value.expire_timestamp,
        record_offset,
    )
