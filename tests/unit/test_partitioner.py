"""Partitioner: Kafka's murmur2 exactly, keyed placement, KIP-480 sticky partitions."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.partitioner import Partitioner, murmur2, partition_for_key, to_positive
from proto.topic_partition import TopicPartition

# Kafka's UtilsTest.testMurmur2 (clients/src/test/java/org/apache/kafka/common/utils).
KAFKA_UTILS_TEST = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}
# Values Akka's Kafka-compatible sharding test takes from Kafka's Utils.murmur2.
KAFKA_IMPL_VECTORS = {
    b"1": -1993445489,
    b"12": 126087238,
    b"123": -267702483,
    b"1234": -1614185708,
    b"12345": -1188365604,
}


@pytest.mark.parametrize(
    ("data", "expected"), sorted({**KAFKA_UTILS_TEST, **KAFKA_IMPL_VECTORS}.items())
)
def test_murmur2_matches_kafkas_utils(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_murmur2_of_empty_input() -> None:
    # Only the seed and the length (0) go in: 0x9747b28c mixed by the final avalanche.
    assert murmur2(b"") == 275646681


def test_murmur2_treats_bytes_as_unsigned() -> None:
    # Java reads `data[i] & 0xff`: a high byte must not be sign-extended into the word.
    assert murmur2(b"\xff\xff\xff\xff") != murmur2(b"\x7f\xff\xff\xff")
    assert -(2**31) <= murmur2(bytes(range(128, 256))) < 2**31


@given(st.binary(max_size=64))
def test_murmur2_is_a_signed_32_bit_int(data: bytes) -> None:
    assert -(2**31) <= murmur2(data) < 2**31


def test_to_positive_clears_the_sign_bit_as_kafka_does() -> None:
    assert to_positive(-790332482) == 1357151166
    assert to_positive(-(2**31)) == 0  # where abs() would stay negative in Java
    assert to_positive(5) == 5


def test_partition_for_key_is_to_positive_murmur2_mod_n() -> None:
    # toPositive(murmur2("foobar")) = 1357151166
    assert partition_for_key(b"foobar", 10) == 6
    assert partition_for_key(b"foobar", 50) == 16
    assert partition_for_key(b"21", 3) == to_positive(-973932308) % 3
    with pytest.raises(ValueError, match="num_partitions"):
        partition_for_key(b"x", 0)


def test_explicit_partition_wins_over_key_and_stickiness() -> None:
    partitioner = Partitioner(random.Random(1))
    assert partitioner.partition("t", b"foobar", 10, [0, 1], partition=9) == 9
    assert partitioner.partition("t", None, 10, [0, 1], partition=3) == 3


def test_keyed_records_ignore_availability() -> None:
    # A key keeps its partition while that partition is offline (ordering per key).
    partitioner = Partitioner(random.Random(1))
    assert partitioner.partition("t", b"foobar", 10, available=[0]) == 6


FULL = 16384
"""A batch as large as batch.size."""


def test_keyless_records_stick_to_one_partition_until_its_batch_closes() -> None:
    partitioner = Partitioner(random.Random(7))
    first = partitioner.partition("t", None, 6, available=range(6))
    assert all(partitioner.partition("t", None, 6, range(6)) == first for _ in range(50))
    partitioner.on_batch_closed(TopicPartition("t", first), FULL, FULL)
    second = partitioner.partition("t", None, 6, range(6))
    assert second != first
    assert all(partitioner.partition("t", None, 6, range(6)) == second for _ in range(50))


def test_closing_a_batch_of_another_partition_does_not_move_the_sticky_one() -> None:
    partitioner = Partitioner(random.Random(3))
    sticky = partitioner.partition("t", None, 4, range(4))
    partitioner.on_batch_closed(TopicPartition("t", (sticky + 1) % 4), FULL, FULL)
    partitioner.on_batch_closed(TopicPartition("other", sticky), FULL, FULL)
    assert partitioner.partition("t", None, 4, range(4)) == sticky


def test_sticky_partition_is_per_topic() -> None:
    partitioner = Partitioner(random.Random(5))
    a = partitioner.partition("a", None, 100, range(100))
    b = partitioner.partition("b", None, 100, range(100))
    partitioner.on_batch_closed(TopicPartition("a", a), FULL, FULL)
    assert partitioner.partition("b", None, 100, range(100)) == b


def test_new_sticky_partition_has_a_leader_and_differs_from_the_previous() -> None:
    partitioner = Partitioner(random.Random(11))
    available = [1, 4]
    previous = partitioner.partition("t", None, 6, available)
    for _ in range(100):
        assert previous in available
        partitioner.on_batch_closed(TopicPartition("t", previous), FULL, FULL)
        chosen = partitioner.partition("t", None, 6, available)
        assert chosen != previous
        previous = chosen


def test_single_available_partition_is_chosen_again() -> None:
    partitioner = Partitioner(random.Random(2))
    assert partitioner.partition("t", None, 6, [3]) == 3
    partitioner.on_batch_closed(TopicPartition("t", 3), FULL, FULL)
    assert partitioner.partition("t", None, 6, [3]) == 3


def test_no_available_partition_falls_back_to_any() -> None:
    partitioner = Partitioner(random.Random(2))
    assert 0 <= partitioner.partition("t", None, 6, []) < 6


def test_sticky_partition_that_loses_its_leader_is_replaced() -> None:
    partitioner = Partitioner(random.Random(4))
    sticky = partitioner.partition("t", None, 3, [0, 1, 2])
    others = [p for p in range(3) if p != sticky]
    assert partitioner.partition("t", None, 3, others) in others


def test_sticky_choice_spreads_over_partitions() -> None:
    partitioner = Partitioner(random.Random(9))
    seen = set()
    for _ in range(200):
        p = partitioner.partition("t", None, 5, range(5))
        seen.add(p)
        partitioner.on_batch_closed(TopicPartition("t", p), FULL, FULL)
    assert seen == set(range(5))


def test_batches_taken_before_they_fill_move_the_sticky_partition_on_after_batch_size_bytes() -> (
    None
):
    """KIP-794: the sender taking small batches (linger.ms 0) does not move the sticky
    partition at every batch; batch.size bytes of them do."""
    partitioner = Partitioner(random.Random(8))
    sticky = partitioner.partition("t", None, 6, range(6))
    for _ in range(15):
        partitioner.on_batch_closed(TopicPartition("t", sticky), 1000, FULL)
        assert partitioner.partition("t", None, 6, range(6)) == sticky
    partitioner.on_batch_closed(TopicPartition("t", sticky), 1384, FULL)  # 16,384 in all
    moved = partitioner.partition("t", None, 6, range(6))
    assert moved != sticky
    partitioner.on_batch_closed(TopicPartition("t", moved), 1000, FULL)  # counted afresh
    assert partitioner.partition("t", None, 6, range(6)) == moved


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=50), st.integers(1, 100))
def test_remembered_key_hashes_give_partition_for_key(keys: list[bytes], n: int) -> None:
    partitioner = Partitioner()
    for _ in range(2):  # the second pass answers from the remembered hashes
        for key in keys:
            assert partitioner.partition("t", key, n, []) == partition_for_key(key, n)


def test_the_key_hash_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import client.partitioner as module

    monkeypatch.setattr(module, "KEY_HASH_CACHE_SIZE", 4)
    partitioner = Partitioner()
    for i in range(10):
        key = b"key-%d" % i
        assert partitioner.partition_for_key(key, 7) == partition_for_key(key, 7)
        assert len(partitioner._key_hashes) <= 4
    with pytest.raises(ValueError, match="num_partitions must be >= 1"):
        partitioner.partition_for_key(b"key-9", 0)
