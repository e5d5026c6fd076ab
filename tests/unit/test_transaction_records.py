"""The records of ``__transaction_state`` (proto/coordinator/transaction_records.py)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proto.coordinator.transaction_records import (
    TransactionLogValue,
    TransactionRecordError,
    TransactionState,
    decode_transaction_key,
    decode_transaction_value,
    encode_transaction_key,
    encode_transaction_value,
)
from proto.errors import MinibrokerError
from proto.topic_partition import TopicPartition

int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


def test_a_key_is_version_0_and_the_transactional_id() -> None:
    expected = bytes.fromhex("0000" + "0003" + b"txn".hex())
    assert encode_transaction_key("txn") == expected
    assert decode_transaction_key(expected) == "txn"


def test_an_ongoing_value_has_its_partitions_grouped_by_topic() -> None:
    value = TransactionLogValue(
        producer_id=1000,
        producer_epoch=2,
        transaction_timeout_ms=60000,
        state=TransactionState.ONGOING,
        partitions=frozenset({TopicPartition("t", 1), TopicPartition("t", 0)}),
        last_update_timestamp_ms=7,
        start_timestamp_ms=5,
    )
    expected = bytes.fromhex(
        "0000"  # version 0
        "00000000000003e8"  # producer id 1000
        "0002"  # epoch
        "0000ea60"  # timeout 60000
        "01"  # Ongoing
        "00000001"
        "0001" + b"t".hex() + "00000002"
        "00000000"
        "00000001"  # [t: [0, 1]]
        "0000000000000007"  # last update
        "0000000000000005"  # start
    )
    assert encode_transaction_value(value) == expected
    assert decode_transaction_value(expected) == value


def test_an_empty_value_writes_a_null_partition_array() -> None:
    value = TransactionLogValue(5, 0, 100, TransactionState.EMPTY, frozenset(), 1, -1)
    data = encode_transaction_value(value)
    assert data[2 + 8 + 2 + 4 + 1 :][:4] == b"\xff\xff\xff\xff"
    assert decode_transaction_value(data) == value


def test_an_empty_value_with_partitions_is_refused() -> None:
    with pytest.raises(TransactionRecordError, match="Empty"):
        encode_transaction_value(
            TransactionLogValue(
                5, 0, 100, TransactionState.EMPTY, frozenset({TopicPartition("t", 0)}), 1, -1
            )
        )


def test_unknown_versions_and_states_are_errors() -> None:
    with pytest.raises(TransactionRecordError, match="unknown version 1"):
        decode_transaction_key(bytes.fromhex("00010001") + b"x")
    good = encode_transaction_value(
        TransactionLogValue(5, 0, 100, TransactionState.DEAD, frozenset(), 1, 1)
    )
    with pytest.raises(TransactionRecordError, match="unknown version 3"):
        decode_transaction_value(b"\x00\x03" + good[2:])
    bad_state = bytearray(good)
    bad_state[2 + 8 + 2 + 4] = 9
    with pytest.raises(TransactionRecordError, match="unknown transaction status 9"):
        decode_transaction_value(bytes(bad_state))


@given(st.binary(max_size=80))
def test_garbage_never_decodes_into_anything_but_a_record_error(data: bytes) -> None:
    assert issubclass(TransactionRecordError, MinibrokerError)
    for decode in (decode_transaction_key, decode_transaction_value):
        with contextlib.suppress(TransactionRecordError):  # anything else fails the test
            decode(data)


values = st.builds(
    TransactionLogValue,
    producer_id=int64,
    producer_epoch=int16,
    transaction_timeout_ms=int32,
    state=st.sampled_from([s for s in TransactionState if s != TransactionState.EMPTY]),
    partitions=st.frozensets(
        st.builds(TopicPartition, st.text(max_size=10), st.integers(0, 2**31 - 1)), max_size=8
    ),
    last_update_timestamp_ms=int64,
    start_timestamp_ms=int64,
)


@given(values, st.text(max_size=30))
def test_every_value_and_key_round_trips(value: TransactionLogValue, txn_id: str) -> None:
    assert decode_transaction_value(encode_transaction_value(value)) == value
    assert decode_transaction_key(encode_transaction_key(txn_id)) == txn_id


def test_a_truncated_value_says_which_field_is_missing() -> None:
    data = encode_transaction_value(
        TransactionLogValue(5, 0, 100, TransactionState.ONGOING, frozenset(), 1, 1)
    )
    with pytest.raises(TransactionRecordError, match="transaction_start_timestamp_ms"):
        decode_transaction_value(data[:-3])


def test_states_have_kafkas_names() -> None:
    assert TransactionState.PREPARE_EPOCH_FENCE.kafka_name == "PrepareEpochFence"
    assert TransactionState.COMPLETE_COMMIT.kafka_name == "CompleteCommit"
    assert TransactionState.EMPTY.kafka_name == "Empty"
