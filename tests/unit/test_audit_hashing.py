"""The audit's value hashes (chaos.audit.hashing): a function of the bytes alone, wherever
they lie, and null apart from every string."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.audit.hashing import NULL, combine, hash_bytes, hash_spans


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=70), min_size=1, max_size=20), st.binary(max_size=9))
def test_a_string_hashes_the_same_wherever_it_lies(values: list[bytes], prefix: bytes) -> None:
    # The strings laid end to end after a prefix (every alignment), then hashed in place.
    data = prefix + b"".join(values)
    starts = np.cumsum([len(prefix)] + [len(v) for v in values[:-1]]).astype(np.int64)
    lengths = np.array([len(v) for v in values], dtype=np.int64)
    in_place = hash_spans(np.frombuffer(data, dtype=np.uint8), starts, lengths)
    alone = np.array([hash_bytes([v])[0] for v in values], dtype=np.uint64)
    assert in_place.tolist() == alone.tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=2, max_size=50, unique=True))
def test_distinct_strings_hash_apart_and_never_to_null(values: list[bytes]) -> None:
    hashes = hash_bytes(values)
    assert len(set(hashes.tolist())) == len(values)
    assert NULL not in hashes.tolist()


def test_null_values_hash_to_null_and_the_empty_string_does_not() -> None:
    assert hash_bytes([None, b"", None]).tolist()[::2] == [NULL, NULL]
    assert hash_bytes([b""])[0] != NULL


def test_strings_differing_in_one_bit_of_any_byte_hash_apart() -> None:
    base = bytes(range(33))
    variants = [base] + [
        base[:i] + bytes([base[i] ^ (1 << bit)]) + base[i + 1 :]
        for i in range(len(base))
        for bit in range(8)
    ]
    assert len(set(hash_bytes(variants).tolist())) == len(variants)


def test_combine_depends_on_every_column_and_their_order() -> None:
    a = np.array([1, 2, 3], dtype=np.int64)
    b = np.array([3, 2, 1], dtype=np.int64)
    assert combine(a, b).tolist() != combine(b, a).tolist()
    assert len(set(combine(a, b).tolist())) == 3
