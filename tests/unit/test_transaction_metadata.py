"""A transactional id's state machine (broker/coordinator/transaction_metadata.py), as
Kafka's ``TransactionMetadata`` behaves."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.coordinator.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    PRODUCER_FENCED,
    TransactionMetadata,
    TransactionStateError,
    TxnTransit,
)
from proto.coordinator.transaction_records import (
    TransactionState,
    decode_transaction_value,
    encode_transaction_value,
)
from proto.topic_partition import TopicPartition

S = TransactionState
A, B = TopicPartition("a", 0), TopicPartition("b", 1)


def fresh() -> TransactionMetadata:
    """What InitProducerId makes for a new transactional id before its first bump."""
    return TransactionMetadata("t1", producer_id=4000, producer_epoch=NO_PRODUCER_EPOCH,
                               timeout_ms=60000, update_timestamp_ms=0)  # fmt: skip


def apply(meta: TransactionMetadata, transit: TxnTransit | int) -> TxnTransit:
    assert isinstance(transit, TxnTransit), transit
    meta.complete(transit)
    return transit


def initialised() -> TransactionMetadata:
    meta = fresh()
    apply(meta, meta.prepare_increment_producer_epoch(60000, None, now_ms=10))
    return meta


def test_the_first_init_gives_epoch_0_and_the_next_one_fences_it() -> None:
    meta = initialised()
    assert (meta.producer_epoch, meta.state, meta.start_timestamp_ms) == (0, S.EMPTY, -1)
    apply(meta, meta.prepare_increment_producer_epoch(30000, None, now_ms=20))
    assert meta.producer_epoch == 1
    assert meta.last_producer_epoch == NO_PRODUCER_EPOCH
    assert meta.timeout_ms == 30000


def test_a_retried_init_with_the_previous_epoch_gets_the_same_epoch() -> None:
    meta = initialised()
    apply(meta, meta.prepare_increment_producer_epoch(60000, 0, now_ms=20))
    assert (meta.producer_epoch, meta.last_producer_epoch) == (1, 0)
    # The answer was lost; the producer retries naming epoch 0 again.
    apply(meta, meta.prepare_increment_producer_epoch(60000, 0, now_ms=30))
    assert (meta.producer_epoch, meta.last_producer_epoch) == (1, 0)
    # A producer naming an epoch that is neither is a zombie.
    assert meta.prepare_increment_producer_epoch(60000, 7, now_ms=40) == PRODUCER_FENCED
    assert meta.pending is None


def test_a_transaction_commits_through_prepare_and_complete() -> None:
    meta = initialised()
    apply(meta, meta.prepare_add_partitions(frozenset({A}), now_ms=100))
    assert (meta.state, meta.start_timestamp_ms, meta.partitions) == (S.ONGOING, 100, {A})
    apply(meta, meta.prepare_add_partitions(frozenset({B}), now_ms=150))
    assert meta.start_timestamp_ms == 100  # the transaction started at its first partition
    assert meta.partitions == {A, B}
    prepared = apply(meta, meta.prepare_abort_or_commit(S.PREPARE_COMMIT, now_ms=200))
    assert prepared.partitions == frozenset({A, B})  # the markers go to these
    apply(meta, meta.prepare_complete(now_ms=250))
    assert (meta.state, meta.partitions, meta.update_timestamp_ms) == (
        S.COMPLETE_COMMIT,
        set(),
        250,
    )
    # The next transaction starts at its own first partition.
    apply(meta, meta.prepare_add_partitions(frozenset({B}), now_ms=300))
    assert (meta.state, meta.start_timestamp_ms) == (S.ONGOING, 300)


def test_an_abort_completes_as_complete_abort() -> None:
    meta = initialised()
    apply(meta, meta.prepare_add_partitions(frozenset({A}), now_ms=100))
    apply(meta, meta.prepare_abort_or_commit(S.PREPARE_ABORT, now_ms=200))
    apply(meta, meta.prepare_complete(now_ms=250))
    assert meta.state == S.COMPLETE_ABORT


def test_nothing_may_be_prepared_while_a_change_is_pending() -> None:
    meta = initialised()
    meta.prepare_add_partitions(frozenset({A}), now_ms=100)
    with pytest.raises(TransactionStateError, match="Ongoing is pending"):
        meta.prepare_add_partitions(frozenset({B}), now_ms=110)
    meta.abandon()
    assert meta.state == S.EMPTY
    apply(meta, meta.prepare_add_partitions(frozenset({B}), now_ms=120))
    assert meta.partitions == {B}


@pytest.mark.parametrize(
    ("state", "target"),
    [
        (S.EMPTY, S.PREPARE_COMMIT),
        (S.COMPLETE_COMMIT, S.PREPARE_ABORT),
        (S.PREPARE_COMMIT, S.ONGOING),
        (S.PREPARE_ABORT, S.EMPTY),
    ],
)
def test_forbidden_transitions_are_refused(
    state: TransactionState, target: TransactionState
) -> None:
    meta = initialised()
    meta.state = state
    prepare: Callable[[], object] = {
        S.ONGOING: lambda: meta.prepare_add_partitions(frozenset({A}), now_ms=1),
        S.EMPTY: lambda: meta.prepare_increment_producer_epoch(100, None, now_ms=1),
    }.get(target, lambda: meta.prepare_abort_or_commit(target, now_ms=1))
    with pytest.raises(TransactionStateError, match="cannot go to"):
        prepare()
    assert meta.pending is None


def test_a_completion_that_is_not_the_prepared_change_is_refused() -> None:
    meta = initialised()
    transit = meta.prepare_add_partitions(frozenset({A}), now_ms=100)
    meta.abandon()
    with pytest.raises(TransactionStateError, match="not the pending change"):
        meta.complete(transit)
    other = initialised()
    other.prepare_add_partitions(frozenset({A}), now_ms=100)
    forged = TxnTransit(4000, 4000, 5, -1, 60000, S.ONGOING, frozenset({A}), 100, 100)
    with pytest.raises(TransactionStateError, match="same producer"):
        other.complete(forged)


def test_a_fence_aborts_the_ongoing_transaction_with_the_bumped_epoch() -> None:
    meta = initialised()
    apply(meta, meta.prepare_add_partitions(frozenset({A}), now_ms=100))
    fence = meta.prepare_fence_producer_epoch()
    assert (fence.state, fence.producer_epoch) == (S.PREPARE_EPOCH_FENCE, 1)
    meta.start_fenced_abort(fence)
    abort = apply(meta, meta.prepare_abort_or_commit(S.PREPARE_ABORT, now_ms=200))
    assert (abort.producer_epoch, meta.producer_epoch) == (1, 1)
    apply(meta, meta.prepare_complete(now_ms=300))
    assert meta.state == S.COMPLETE_ABORT
    # The new instance's retry bumps once more: the zombie's epoch 0 is two behind.
    apply(meta, meta.prepare_increment_producer_epoch(60000, None, now_ms=400))
    assert meta.producer_epoch == 2


def test_a_failed_fence_is_not_bumped_twice() -> None:
    meta = initialised()
    apply(meta, meta.prepare_add_partitions(frozenset({A}), now_ms=100))
    meta.start_fenced_abort(meta.prepare_fence_producer_epoch())
    meta.prepare_abort_or_commit(S.PREPARE_ABORT, now_ms=200)
    meta.abandon(failed_fence=True)  # the abort's append failed
    fence = meta.prepare_fence_producer_epoch()
    assert fence.producer_epoch == meta.producer_epoch == 1


def test_a_producer_id_rotates_to_epoch_0_when_the_epoch_is_exhausted() -> None:
    meta = initialised()
    meta.producer_epoch = 32766
    assert meta.epoch_exhausted
    with pytest.raises(TransactionStateError, match="no epochs left"):
        meta.prepare_increment_producer_epoch(60000, None, now_ms=1)
    apply(meta, meta.prepare_producer_id_rotation(5000, 60000, now_ms=2, record_last_epoch=True))
    assert (meta.producer_id, meta.producer_epoch, meta.last_producer_epoch) == (5000, 0, 32766)
    assert meta.last_producer_id == 4000


def test_expiry_and_dead() -> None:
    assert initialised().expiration_allowed
    meta = initialised()
    apply(meta, meta.prepare_add_partitions(frozenset({A}), now_ms=100))
    assert not meta.expiration_allowed
    assert meta.has_pending_transaction
    with pytest.raises(TransactionStateError, match="cannot go to Dead"):
        meta.prepare_dead()
    other = initialised()
    dead = other.prepare_dead()
    with pytest.raises(TransactionStateError, match="never completed"):
        other.complete(dead)


def test_a_loaded_value_restores_the_state() -> None:
    meta = initialised()
    transit = apply(meta, meta.prepare_add_partitions(frozenset({A, B}), now_ms=100))
    value = decode_transaction_value(encode_transaction_value(transit.log_value()))
    loaded = TransactionMetadata.from_log("t1", value)
    assert (loaded.state, loaded.partitions, loaded.producer_epoch) == (S.ONGOING, {A, B}, 0)
    assert (loaded.start_timestamp_ms, loaded.update_timestamp_ms) == (100, 100)
    apply(loaded, loaded.prepare_abort_or_commit(S.PREPARE_COMMIT, now_ms=200))
    apply(loaded, loaded.prepare_complete(now_ms=300))
    assert loaded.state == S.COMPLETE_COMMIT


steps = st.lists(
    st.sampled_from(["init", "add", "commit", "abort", "complete", "fence", "fail"]), max_size=40
)


@given(steps)
def test_any_sequence_of_requests_keeps_the_invariants(names: list[str]) -> None:
    """Whatever the coordinator is asked, in any order, each change is either refused
    before anything is pending or applied whole, and an idle id holds no partitions."""
    meta = initialised()
    for name in names:
        epoch_before = meta.producer_epoch
        try:
            if name == "init":
                transit: TxnTransit | int = meta.prepare_increment_producer_epoch(1, None, 5)
            elif name == "add":
                transit = meta.prepare_add_partitions(frozenset({A}), 5)
            elif name in ("commit", "abort"):
                state = S.PREPARE_COMMIT if name == "commit" else S.PREPARE_ABORT
                transit = meta.prepare_abort_or_commit(state, 5)
            elif name == "complete":
                if meta.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                    continue
                transit = meta.prepare_complete(5)
            elif name == "fence":
                if meta.state != S.ONGOING:
                    continue
                meta.start_fenced_abort(meta.prepare_fence_producer_epoch())
                transit = meta.prepare_abort_or_commit(S.PREPARE_ABORT, 5)
            else:
                if meta.state != S.ONGOING:
                    continue
                meta.prepare_abort_or_commit(S.PREPARE_ABORT, 5)
                meta.abandon()
                continue
        except TransactionStateError:
            assert meta.pending is None
            continue
        assert isinstance(transit, TxnTransit)
        meta.complete(transit)
        assert meta.pending is None
        assert meta.producer_epoch >= epoch_before
        if meta.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            assert not meta.partitions
