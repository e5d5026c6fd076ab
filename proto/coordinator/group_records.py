"""The records of ``__consumer_offsets``, as Kafka 2.8 writes them (its
``OffsetCommitKey``, ``OffsetCommitValue``, ``GroupMetadataKey`` and ``GroupMetadataValue``
schemas): docs/consumer-groups.md.

A key starts with its version: 0 or 1 is a committed offset's key (group, topic,
partition), 2 a group's key (group). A value starts with its own version: Kafka 2.8 writes
OffsetCommitValue v3 (with the leader epoch; v1 when the commit set an expire timestamp,
OffsetCommit v2-v4's retention) and GroupMetadataValue v3; every older version is read. A
null value (a tombstone) deletes the key: compaction then drops it.
"""

from __future__ import annotations

from dataclasses import dataclass

from proto.coordinator.struct_codec import StructError, StructReader, StructWriter

__all__ = [
    "GroupMetadataKey",
    "GroupMetadataValue",
    "GroupRecordError",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "StoredMember",
    "decode_group_metadata_value",
    "decode_key",
    "decode_offset_commit_value",
    "encode_group_metadata_key",
    "encode_group_metadata_value",
    "encode_offset_commit_key",
    "encode_offset_commit_value",
]

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3


class GroupRecordError(StructError):
    """A key or value of ``__consumer_offsets`` that does not decode."""


@dataclass(frozen=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


@dataclass(frozen=True)
class StoredMember:
    """One member of a stored generation: its subscription is its metadata for the
    generation's protocol, its assignment what the leader gave it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[StoredMember, ...]


def encode_offset_commit_key(key: OffsetCommitKey) -> bytes:
    w = StructWriter().int16(OFFSET_COMMIT_KEY_VERSION)
    return w.string(key.group).string(key.topic).int32(key.partition).data


def encode_group_metadata_key(key: GroupMetadataKey) -> bytes:
    return StructWriter().int16(GROUP_METADATA_KEY_VERSION).string(key.group).data


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey:
    """Either kind of key, by its version. GroupRecordError if it does not decode."""
    try:
        r = StructReader(data, "__consumer_offsets key")
        version = r.int16("version")
        key: OffsetCommitKey | GroupMetadataKey
        if version in (0, 1):
            key = OffsetCommitKey(r.string("group"), r.string("topic"), r.int32("partition"))
        elif version == GROUP_METADATA_KEY_VERSION:
            key = GroupMetadataKey(r.string("group"))
        else:
            raise GroupRecordError(f"__consumer_offsets key: unknown version {version}")
        r.done()
        return key
    except GroupRecordError:
        raise
    except StructError as err:
        raise GroupRecordError(str(err)) from None


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    if value.expire_timestamp != -1:
        w = StructWriter().int16(1).int64(value.offset).string(value.metadata)
        return w.int64(value.commit_timestamp).int64(value.expire_timestamp).data
    w = StructWriter().int16(3).int64(value.offset).int32(value.leader_epoch)
    return w.string(value.metadata).int64(value.commit_timestamp).data


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    """Versions 0-3. GroupRecordError if it does not decode."""
    try:
        r = StructReader(data, "offset commit value")
        version = r.int16("version")
        if not 0 <= version <= 3:
            raise GroupRecordError(f"offset commit value: unknown version {version}")
        offset = r.int64("offset")
        leader_epoch = r.int32("leader_epoch") if version >= 3 else -1
        metadata = r.string("metadata")
        commit_timestamp = r.int64("commit_timestamp")
        expire_timestamp = r.int64("expire_timestamp") if version == 1 else -1
        r.done()
        return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)
    except GroupRecordError:
        raise
    except StructError as err:
        raise GroupRecordError(str(err)) from None


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    w = StructWriter().int16(GROUP_METADATA_VALUE_VERSION)
    w.string(value.protocol_type).int32(value.generation).string(value.protocol)
    w.string(value.leader).int64(value.current_state_timestamp).int32(len(value.members))
    for m in value.members:
        w.string(m.member_id).string(m.group_instance_id).string(m.client_id)
        w.string(m.client_host).int32(m.rebalance_timeout_ms).int32(m.session_timeout_ms)
        w.bytes(m.subscription).bytes(m.assignment)
    return w.data


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    """Versions 0-3 (v0 has no rebalance timeout: the session timeout stands in for it, as
    in Kafka). GroupRecordError if it does not decode."""
    try:
        r = StructReader(data, "group metadata value")
        version = r.int16("version")
        if not 0 <= version <= 3:
            raise GroupRecordError(f"group metadata value: unknown version {version}")
        protocol_type = r.string("protocol_type")
        generation = r.int32("generation")
        protocol = r.nullable_string("protocol")
        leader = r.nullable_string("leader")
        state_timestamp = r.int64("current_state_timestamp") if version >= 2 else -1
        members = []
        for _ in range(r.count("members")):
            member_id = r.string("member_id")
            instance_id = r.nullable_string("group_instance_id") if version >= 3 else None
            client_id = r.string("client_id")
            client_host = r.string("client_host")
            rebalance_timeout = r.int32("rebalance_timeout") if version >= 1 else None
            session_timeout = r.int32("session_timeout")
            members.append(
                StoredMember(
                    member_id,
                    instance_id,
                    client_id,
                    client_host,
                    session_timeout if rebalance_timeout is None else rebalance_timeout,
                    session_timeout,
                    r.bytes("subscription"),
                    r.bytes("assignment"),
                )
            )
        r.done()
        return GroupMetadataValue(
            protocol_type, generation, protocol, leader, state_timestamp, tuple(members)
        )
    except GroupRecordError:
        raise
    except StructError as err:
        raise GroupRecordError(str(err)) from None
