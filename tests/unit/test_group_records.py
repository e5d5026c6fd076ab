"""The records of ``__consumer_offsets`` (proto/coordinator/group_records.py) and the
placement of a key on a partition (proto/coordinator/placement.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proto.coordinator.group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    GroupRecordError,
    OffsetCommitKey,
    OffsetCommitValue,
    StoredMember,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from proto.coordinator.placement import java_string_hash, partition_for
from proto.errors import MinibrokerError

names = st.text(max_size=40)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


def test_an_offset_commit_key_is_version_1_group_topic_partition() -> None:
    # version 1 | "g" (len 1) | "t" (len 1) | partition 2
    expected = bytes.fromhex("000100016700017400000002")
    assert encode_offset_commit_key(OffsetCommitKey("g", "t", 2)) == expected
    assert decode_key(expected) == OffsetCommitKey("g", "t", 2)
    # version 0 has the same fields
    assert decode_key(bytes.fromhex("000000016700017400000002")) == OffsetCommitKey("g", "t", 2)


def test_a_group_key_is_version_2_and_the_group() -> None:
    expected = bytes.fromhex("000200026162")
    assert encode_group_metadata_key(GroupMetadataKey("ab")) == expected
    assert decode_key(expected) == GroupMetadataKey("ab")


def test_an_offset_commit_value_is_version_3_with_the_leader_epoch() -> None:
    # version 3 | offset 5 | leader epoch 7 | metadata "m" | commit timestamp 9
    expected = bytes.fromhex("000300000000000000050000000700016d0000000000000009")
    value = OffsetCommitValue(5, 7, "m", 9)
    assert encode_offset_commit_value(value) == expected
    assert decode_offset_commit_value(expected) == value


def test_older_offset_commit_values_are_read() -> None:
    v0 = bytes.fromhex("0000000000000000000500000000000000000009")
    assert decode_offset_commit_value(v0) == OffsetCommitValue(5, -1, "", 9, -1)
    v1 = bytes.fromhex("0001000000000000000500000000000000000009000000000000000b")
    assert decode_offset_commit_value(v1) == OffsetCommitValue(5, -1, "", 9, 11)
    v2 = bytes.fromhex("0002000000000000000500000000000000000009")
    assert decode_offset_commit_value(v2) == OffsetCommitValue(5, -1, "", 9, -1)
    # An expire timestamp (OffsetCommit v2-v4's retention) is written as v1.
    assert encode_offset_commit_value(OffsetCommitValue(5, -1, "", 9, 11)) == v1


def test_a_version_0_group_value_takes_the_session_timeout_for_the_rebalance_timeout() -> None:
    # v0: protocol type "c" | generation 1 | protocol "r" | leader "m" | one member:
    # id "m" | client id "c" | host "h" | session timeout 10 | subscription "s" | assignment ""
    data = bytes.fromhex(
        "0000" "000163" "00000001" "000172" "00016d" "00000001"
        "00016d" "000163" "000168" "0000000a" "0000000173" "00000000"
    )  # fmt: skip
    value = decode_group_metadata_value(data)
    assert value == GroupMetadataValue(
        "c", 1, "r", "m", -1, (StoredMember("m", None, "c", "h", 10, 10, b"s", b""),)
    )


members = st.builds(
    StoredMember,
    names,
    st.none() | names,
    names,
    names,
    int32,
    int32,
    st.binary(max_size=50),
    st.binary(max_size=50),
)


@given(names, names, int32)
def test_offset_commit_keys_round_trip(group: str, topic: str, partition: int) -> None:
    key = OffsetCommitKey(group, topic, partition)
    assert decode_key(encode_offset_commit_key(key)) == key


@given(st.builds(OffsetCommitValue, int64, int32, names, int64))
def test_offset_commit_values_round_trip(value: OffsetCommitValue) -> None:
    assert decode_offset_commit_value(encode_offset_commit_value(value)) == value


@given(
    st.builds(
        GroupMetadataValue,
        names,
        int32,
        st.none() | names,
        st.none() | names,
        int64,
        st.lists(members, max_size=4).map(tuple),
    )
)
def test_group_metadata_values_round_trip(value: GroupMetadataValue) -> None:
    assert decode_group_metadata_value(encode_group_metadata_value(value)) == value


@pytest.mark.parametrize(
    "data",
    [
        b"",
        bytes.fromhex("0003"),  # unknown key version
        bytes.fromhex("0001000167"),  # truncated
        bytes.fromhex("0002000161ff"),  # a byte after the end
        bytes.fromhex("00020001ff"),  # not UTF-8
        bytes.fromhex("0002ffff"),  # a null group
    ],
)
def test_keys_that_do_not_decode_are_refused(data: bytes) -> None:
    with pytest.raises(GroupRecordError):
        decode_key(data)


@pytest.mark.parametrize(
    "data",
    [bytes.fromhex("0004" + "00" * 30), bytes.fromhex("000300000000")],
)
def test_values_that_do_not_decode_are_refused(data: bytes) -> None:
    with pytest.raises(GroupRecordError):
        decode_offset_commit_value(data)
    with pytest.raises(GroupRecordError):
        decode_group_metadata_value(data)


def test_a_group_value_with_more_members_than_bytes_is_refused() -> None:
    data = bytes.fromhex("0003000000000001ffffffff00000000000000007fffffff")
    with pytest.raises(GroupRecordError, match="members"):
        decode_group_metadata_value(data)
    assert issubclass(GroupRecordError, MinibrokerError)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("polygenelubricants", -(2**31)),
        ("\U0001f600", 31 * 0xD83D + 0xDE00),  # the surrogate pair, as Java hashes it
    ],
)
def test_keys_hash_as_java_strings_do(key: str, expected: int) -> None:
    assert java_string_hash(key) == expected


def test_a_key_is_placed_as_kafka_places_it() -> None:
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("a", 1) == 0
    with pytest.raises(ValueError, match="partitions"):
        partition_for("a", 0)


@given(st.text(max_size=30), st.integers(1, 1000))
def test_placement_is_in_range(key: str, partitions: int) -> None:
    assert 0 <= partition_for(key, partitions) < partitions
