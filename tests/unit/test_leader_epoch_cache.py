"""LeaderEpochFileCache behaves as Kafka's 2.1+ cache (KIP-101, KIP-279, KAFKA-7415)."""

from __future__ import annotations

import itertools
import logging
import os
import random
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from broker.log import checkpoints
from broker.log.checkpoints import CheckpointError
from broker.log.leader_epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochFileCache,
)

E = EpochEntry


class WriteCounter:
    """Counts checkpoint writes by wrapping the module's atomic_write_text."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = checkpoints.atomic_write_text

        def counting(path: Path, text: str) -> None:
            self.count += 1
            real(path, text)

        monkeypatch.setattr(checkpoints, "atomic_write_text", counting)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / checkpoints.LEADER_EPOCH_CHECKPOINT


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> WriteCounter:
    return WriteCounter(monkeypatch)


def cache_with(path: Path, *entries: EpochEntry) -> LeaderEpochFileCache:
    cache = LeaderEpochFileCache(path)
    for entry in entries:
        cache.assign(entry.epoch, entry.start_offset)
    assert cache.entries() == list(entries)
    return cache


# -- empty cache --------------------------------------------------------------------------


def test_empty_cache_knows_nothing_and_creates_no_file(path: Path) -> None:
    cache = LeaderEpochFileCache(path)
    assert cache.entries() == []
    assert cache.latest_epoch() is None
    assert cache.latest_entry() is None
    assert cache.earliest_entry() is None
    assert cache.epoch_for_offset(0) is None
    assert cache.end_offset_for(0, 10) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert not path.exists()


def test_sentinels_are_kafkas() -> None:
    assert (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET) == (-1, -1)


# -- assign -------------------------------------------------------------------------------


def test_assign_records_a_new_epoch_and_writes_the_checkpoint(
    path: Path, writes: WriteCounter
) -> None:
    cache = LeaderEpochFileCache(path)
    cache.assign(0, 0)
    cache.assign(1, 57)
    assert cache.entries() == [E(0, 0), E(1, 57)]
    assert (cache.latest_epoch(), cache.latest_entry(), cache.earliest_entry()) == (
        1,
        E(1, 57),
        E(0, 0),
    )
    assert path.read_bytes() == b"0\n2\n0 0\n1 57\n"
    assert writes.count == 2


def test_same_epoch_at_a_later_offset_is_a_no_op_without_a_write(
    path: Path, writes: WriteCounter
) -> None:
    # The hot path: every batch of the current epoch calls assign.
    cache = cache_with(path, E(2, 6))
    assert writes.count == 1
    cache.assign(2, 7)
    cache.assign(2, 6)
    cache.assign(2, 1000)
    assert cache.entries() == [E(2, 6)]
    assert writes.count == 1


def test_same_epoch_at_an_earlier_offset_moves_the_start_back(path: Path) -> None:
    cache = cache_with(path, E(1, 0), E(5, 10))
    cache.assign(5, 8)
    assert cache.entries() == [E(1, 0), E(5, 8)]


def test_assign_removes_the_tail_that_would_break_monotonicity(path: Path) -> None:
    # Kafka's shouldTruncateIfMatchingEpochButEarlierStartingOffset.
    cache = cache_with(path, E(5, 11), E(6, 12), E(7, 13))
    cache.assign(7, 12)
    assert cache.entries() == [E(5, 11), E(7, 12)]
    assert LeaderEpochFileCache(path).entries() == [E(5, 11), E(7, 12)]


def test_new_epoch_at_the_same_offset_replaces_the_empty_epoch(path: Path) -> None:
    # Two elections without an append in between: epoch 1 never wrote anything.
    cache = cache_with(path, E(0, 0), E(1, 5))
    cache.assign(2, 5)
    assert cache.entries() == [E(0, 0), E(2, 5)]


def test_older_epoch_at_a_later_offset_drops_newer_epochs(path: Path) -> None:
    # Faithful 2.1+ behaviour (reference appendix, invariant 3 caveat): a follower whose
    # cache ends in an empty epoch 5 receives epoch-4 batches at offset 100.
    cache = cache_with(path, E(0, 0), E(4, 90), E(5, 100))
    cache.assign(4, 100)
    assert cache.entries() == [E(0, 0), E(4, 100)]


def test_new_leader_records_its_epoch_at_the_log_end_before_any_append(path: Path) -> None:
    # KAFKA-7415: makeLeader assigns (newEpoch, LEO); the first append in the epoch then
    # starts exactly there and changes nothing.
    cache = cache_with(path, E(0, 0))
    cache.assign(1, 1)  # becomes leader at LEO 1
    cache.assign(1, 1)  # first batch of the new epoch
    assert cache.entries() == [E(0, 0), E(1, 1)]
    assert cache.end_offset_for(0, 1) == (0, 1)


@pytest.mark.parametrize(("epoch", "offset"), [(-1, 0), (0, -1), (-5, -5)])
def test_negative_assign_raises_and_changes_nothing(
    path: Path, writes: WriteCounter, epoch: int, offset: int
) -> None:
    cache = cache_with(path, E(1, 1))
    with pytest.raises(ValueError, match="invalid leader epoch entry"):
        cache.assign(epoch, offset)
    assert cache.entries() == [E(1, 1)]
    assert writes.count == 1


def test_a_failed_write_leaves_the_cache_as_the_file(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = cache_with(path, E(0, 0), E(1, 5))

    def failing_write(target: Path, text: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoints, "atomic_write_text", failing_write)
    with pytest.raises(OSError, match="No space"):
        cache.assign(2, 9)
    with pytest.raises(OSError, match="No space"):
        cache.truncate_from_end(5)
    with pytest.raises(OSError, match="No space"):
        cache.truncate_from_start(3)
    with pytest.raises(OSError, match="No space"):
        cache.clear_and_flush()
    monkeypatch.undo()
    assert cache.entries() == [E(0, 0), E(1, 5)]
    assert LeaderEpochFileCache(path).entries() == cache.entries()


# -- end_offset_for -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (UNDEFINED_EPOCH, (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)),  # KAFKA-6857
        (0, (0, 13)),
        (1, (0, 13)),  # no entry for 1: the largest epoch below, ending where 2 starts
        (2, (2, 17)),
        (3, (2, 17)),
        (4, (4, 20)),  # the latest epoch ends at the log end offset
        (5, (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)),  # above every cached epoch
        (99, (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)),
    ],
)
def test_end_offset_for(path: Path, requested: int, expected: tuple[int, int]) -> None:
    cache = cache_with(path, E(0, 10), E(2, 13), E(4, 17))
    assert cache.end_offset_for(requested, log_end_offset=20) == expected


def test_end_offset_for_an_epoch_below_the_first_echoes_it_with_the_first_start(
    path: Path,
) -> None:
    # Kafka 2.1+ code (shouldReturnFirstEpochIfRequestedEpochLessThanFirstEpoch); 2.0.0
    # answered (-1, -1) here and its doc comment still says so.
    cache = cache_with(path, E(5, 11), E(6, 12), E(7, 13))
    assert cache.end_offset_for(4, log_end_offset=14) == (4, 11)
    assert cache.end_offset_for(0, log_end_offset=14) == (0, 11)


def test_end_offset_for_the_only_epoch_is_the_log_end(path: Path) -> None:
    cache = cache_with(path, E(3, 0))
    assert cache.end_offset_for(3, 42) == (3, 42)
    assert cache.end_offset_for(2, 42) == (2, 0)
    assert cache.end_offset_for(4, 42) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def test_kip_279_truncation_loop_worked_example(tmp_path: Path) -> None:
    # Reference §3: leader 0@0, 2@10, 4@15; follower 0@0, 1@8, 3@11 with LEO 14.
    leader = cache_with(tmp_path / "leader", E(0, 0), E(2, 10), E(4, 15))
    follower = cache_with(tmp_path / "follower", E(0, 0), E(1, 8), E(3, 11))
    leader_leo, follower_leo = 20, 14

    leader_epoch, leader_end = leader.end_offset_for(3, leader_leo)
    assert (leader_epoch, leader_end) == (2, 15)
    own_epoch, own_end = follower.end_offset_for(leader_epoch, follower_leo)
    assert (own_epoch, own_end) == (1, 11)  # never saw epoch 2: truncate to 11 and ask again
    follower_leo = min(own_end, follower_leo)
    follower.truncate_from_end(follower_leo)
    assert follower.entries() == [E(0, 0), E(1, 8)]

    leader_epoch, leader_end = leader.end_offset_for(follower.latest_epoch() or 0, leader_leo)
    assert (leader_epoch, leader_end) == (0, 10)
    own_epoch, own_end = follower.end_offset_for(leader_epoch, follower_leo)
    assert (own_epoch, own_end) == (0, 8)  # same epoch: done
    follower_leo = min(leader_end, own_end, follower_leo)
    follower.truncate_from_end(follower_leo)
    assert (follower_leo, follower.entries()) == (8, [E(0, 0)])


# -- truncation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("end_offset", "expected"),
    [
        (11, [E(0, 0), E(1, 5), E(2, 10)]),  # past the latest start: nothing to do
        (10, [E(0, 0), E(1, 5)]),
        (6, [E(0, 0), E(1, 5)]),
        (5, [E(0, 0)]),
        (1, [E(0, 0)]),
        (0, []),
        (-1, [E(0, 0), E(1, 5), E(2, 10)]),  # undefined offset: ignored
    ],
)
def test_truncate_from_end(path: Path, end_offset: int, expected: list[EpochEntry]) -> None:
    cache = cache_with(path, E(0, 0), E(1, 5), E(2, 10))
    cache.truncate_from_end(end_offset)
    assert cache.entries() == expected
    assert LeaderEpochFileCache(path).entries() == expected


def test_truncate_from_end_writes_only_when_it_removes(path: Path, writes: WriteCounter) -> None:
    cache = cache_with(path, E(0, 0), E(1, 5))
    cache.truncate_from_end(6)
    cache.truncate_from_end(-1)
    assert writes.count == 2
    cache.truncate_from_end(5)
    assert writes.count == 3


@pytest.mark.parametrize(
    ("start_offset", "expected"),
    [
        (7, [E(1, 7), E(2, 10)]),  # the reference example
        (0, [E(0, 0), E(1, 5), E(2, 10)]),  # an entry exactly at the start survives
        (5, [E(1, 5), E(2, 10)]),
        (4, [E(0, 4), E(1, 5), E(2, 10)]),
        (10, [E(2, 10)]),
        (12, [E(2, 12)]),  # the latest epoch now starts at the new log start
        (-1, [E(0, 0), E(1, 5), E(2, 10)]),
    ],
)
def test_truncate_from_start(path: Path, start_offset: int, expected: list[EpochEntry]) -> None:
    cache = cache_with(path, E(0, 0), E(1, 5), E(2, 10))
    cache.truncate_from_start(start_offset)
    assert cache.entries() == expected
    assert LeaderEpochFileCache(path).entries() == expected


def test_truncate_from_start_below_the_first_entry_changes_nothing(
    path: Path, writes: WriteCounter
) -> None:
    cache = cache_with(path, E(3, 20), E(4, 30))
    cache.truncate_from_start(19)
    cache.truncate_from_start(20)  # exactly at the first entry: same content, no rewrite
    assert cache.entries() == [E(3, 20), E(4, 30)]
    assert writes.count == 2


def test_clear_and_flush_writes_an_empty_checkpoint(path: Path) -> None:
    cache = cache_with(path, E(0, 0), E(1, 5))
    cache.clear_and_flush()
    assert cache.entries() == []
    assert cache.latest_epoch() is None
    assert path.read_bytes() == b"0\n0\n"
    assert LeaderEpochFileCache(path).entries() == []
    cache.assign(3, 40)  # truncateFullyAndStartAt(40), then the next leader append
    assert cache.entries() == [E(3, 40)]


# -- epoch_for_offset ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offset", "epoch"), [(0, None), (4, None), (5, 1), (9, 1), (10, 3), (10**12, 3)]
)
def test_epoch_for_offset(path: Path, offset: int, epoch: int | None) -> None:
    cache = cache_with(path, E(1, 5), E(3, 10))
    assert cache.epoch_for_offset(offset) == epoch


# -- persistence --------------------------------------------------------------------------


def test_entries_survive_a_restart(path: Path) -> None:
    cache = cache_with(path, E(0, 0), E(1, 57), E(4, 90))
    reloaded = LeaderEpochFileCache(path)
    assert reloaded.entries() == cache.entries()
    assert reloaded.end_offset_for(1, 100) == (1, 90)
    assert reloaded.checkpoint_path == path


def test_a_kafka_written_checkpoint_loads(path: Path) -> None:
    path.write_bytes(b"0\n2\n0 0\n1 57\n")
    assert LeaderEpochFileCache(path).entries() == [E(0, 0), E(1, 57)]


def test_non_monotonic_file_is_repaired_on_load_as_kafka_does(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Kafka loads by re-assigning each entry: 1@20 drops 2@10.
    path.write_bytes(b"0\n3\n0 0\n2 10\n1 20\n")
    with caplog.at_level(logging.WARNING, logger="broker.log.leader_epoch_cache"):
        cache = LeaderEpochFileCache(path)
    assert cache.entries() == [E(0, 0), E(1, 20)]
    assert "non-monotonic" in caplog.text
    assert path.read_bytes() == b"0\n3\n0 0\n2 10\n1 20\n"  # loading never writes


def test_corrupt_checkpoint_raises_on_load(path: Path) -> None:
    path.write_bytes(b"0\n2\n0 0\n")
    with pytest.raises(CheckpointError, match="line 4"):
        LeaderEpochFileCache(path)


# -- concurrency --------------------------------------------------------------------------


def test_concurrent_callers_keep_memory_and_file_consistent(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # ordering is under test, not durability
    cache = LeaderEpochFileCache(path)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(60):
                op = rng.randrange(4)
                if op < 2:
                    cache.assign(rng.randrange(20), rng.randrange(200))
                elif op == 2:
                    cache.truncate_from_end(rng.randrange(200))
                else:
                    cache.truncate_from_start(rng.randrange(50))
                _assert_strictly_increasing(cache.entries())
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert LeaderEpochFileCache(path).entries() == cache.entries()


# -- properties ---------------------------------------------------------------------------


def _assert_strictly_increasing(entries: list[EpochEntry]) -> None:
    for before, after in itertools.pairwise(entries):
        assert before.epoch < after.epoch, entries
        assert before.start_offset < after.start_offset, entries


_epochs = st.integers(0, 12)
_offsets = st.integers(0, 60)


class EpochCacheMachine(RuleBasedStateMachine):
    """Random assign/truncate sequences keep the cache monotonic and equal to its file."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        self.path = Path(self.dir.name) / checkpoints.LEADER_EPOCH_CHECKPOINT
        self.cache = LeaderEpochFileCache(self.path)

    def teardown(self) -> None:
        self.dir.cleanup()

    @rule(epoch=_epochs, offset=_offsets)
    def assign(self, epoch: int, offset: int) -> None:
        before = self.cache.entries()
        self.cache.assign(epoch, offset)
        after = self.cache.entries()
        if before and before[-1].epoch == epoch and offset >= before[-1].start_offset:
            assert after == before
        else:
            assert after[-1] == E(epoch, offset)
            # Only a tail is replaced: what stays is a prefix of what was there.
            assert after[:-1] == before[: len(after) - 1]

    @rule(offset=_offsets)
    def truncate_from_end(self, offset: int) -> None:
        before = self.cache.entries()
        self.cache.truncate_from_end(offset)
        assert self.cache.entries() == [e for e in before if e.start_offset < offset]

    @rule(offset=_offsets)
    def truncate_from_start(self, offset: int) -> None:
        before = self.cache.entries()
        self.cache.truncate_from_start(offset)
        after = self.cache.entries()
        assert [e for e in after if e.start_offset > offset] == [
            e for e in before if e.start_offset > offset
        ]
        if any(e.start_offset <= offset for e in before):
            covering = [e for e in before if e.start_offset <= offset][-1]
            assert after[0] == E(covering.epoch, offset)
        else:
            assert after == before

    @precondition(lambda self: self.cache.latest_epoch() is not None)
    @rule(leo_delta=st.integers(0, 10), epoch=st.integers(-1, 14))
    def end_offset_for(self, leo_delta: int, epoch: int) -> None:
        entries = self.cache.entries()
        leo = entries[-1].start_offset + leo_delta
        answer_epoch, answer_offset = self.cache.end_offset_for(epoch, leo)
        if answer_offset == UNDEFINED_EPOCH_OFFSET:
            assert answer_epoch == UNDEFINED_EPOCH
            assert epoch == UNDEFINED_EPOCH or epoch > entries[-1].epoch
        else:
            # The answer never points past the log end, nor at an epoch above the request.
            assert answer_epoch <= epoch
            assert answer_offset <= leo

    @rule()
    def clear_and_flush(self) -> None:
        self.cache.clear_and_flush()
        assert self.cache.entries() == []

    @invariant()
    def strictly_increasing(self) -> None:
        _assert_strictly_increasing(self.cache.entries())

    @invariant()
    def file_matches_memory(self) -> None:
        assert LeaderEpochFileCache(self.path).entries() == self.cache.entries()


def test_random_operation_sequences_keep_the_cache_monotonic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # keeps hundreds of rewrites fast
    run_state_machine_as_test(
        EpochCacheMachine,
        settings=settings(max_examples=60, stateful_step_count=25, deadline=None),
    )
