"""The log cleaner on real logs on disk: what it keeps, what it removes, and that a kill at
any step of a swap recovers to a valid log (the old segments or the cleaned one)."""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.log.compaction import CleanStats, build_offset_map, clean_batches
from broker.log.log import Log
from broker.log.log_cleaner import _batches, clean_log, dirty_ratio
from broker.log.log_segment import LogSegment
from broker.log.segment_swap import (
    commit_swap,
    finish_swap,
    write_cleaned_segment,
    write_cleaned_txn_index,
)
from proto.config.log_config import LogConfig
from proto.records.compression import Codec
from proto.records.record_batch import Record, decode_batch, encode_batch, validate_batches

SEGMENT_BYTES = 300
CAPACITY = 10_000


def open_log(path: Path, **config: int) -> Log:
    return Log.open(path / "table-0", LogConfig(segment_bytes=SEGMENT_BYTES, **config))  # type: ignore[arg-type]


def write(log: Log, rows: Sequence[tuple[bytes, bytes | None]], codec: int = 0, **kw: int) -> None:
    records = [Record(k, v, 1000 + i) for i, (k, v) in enumerate(rows)]
    log.append_as_leader(encode_batch(records, compression=codec, **kw), 0)


def batches(log: Log) -> list[tuple[int, int, int]]:
    """(base offset, last offset, record count) of every batch."""
    data = log.read(log.log_start_offset, 10**8, min_one_batch=True).records
    return [(h.base_offset, h.last_offset, h.record_count) for h in validate_batches(data)]


def contents(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    data = log.read(log.log_start_offset, 10**8).records
    out = []
    position = 0
    while position < len(data):
        decoded = decode_batch(data, position)
        out += [(r.offset, r.key, r.value) for r in decoded.records]
        position += decoded.header.size
    return out


def covers_every_offset(log: Log) -> bool:
    spans = batches(log)
    return all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans)) and (
        spans[-1][1] + 1 == log.log_end_offset
    )


Row = tuple[int, bytes | None, bytes | None]


def latest(rows: list[Row]) -> dict[bytes | None, tuple[int, bytes | None]]:
    return {key: (offset, value) for offset, key, value in rows}


def fill(log: Log, rounds: int = 12) -> None:
    """Keys k0..k4 written over and over, in batches of 1-3 records, some compressed."""
    n = 0
    for i in range(rounds):
        rows = [(b"k%d" % ((n + j) % 5), b"v%d" % (n + j)) for j in range(1 + i % 3)]
        n += len(rows)
        write(log, rows, codec=(Codec.NONE, Codec.LZ4, Codec.ZSTD)[i % 3])
    log.roll()


def test_cleaning_keeps_the_latest_value_of_each_key_at_its_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log)
    before = contents(log)
    assert len(log.segments) > 3
    result = clean_log(
        log, first_dirty=0, limit_offset=log.log_end_offset, now_ms=0, capacity=CAPACITY
    )
    assert result is not None
    assert result.end_offset == log.segments[-1].base_offset
    after = contents(log)
    assert latest(after) == latest(before)
    assert len(after) == 5  # one record per key survives, the rest were superseded
    assert set(after) <= set(before)  # offsets and values unchanged
    assert covers_every_offset(log)  # removed batches left placeholders
    assert log.log_end_offset == before[-1][0] + 1
    log.close()
    reopened = open_log(tmp_path)  # recovery accepts what the cleaner wrote
    assert contents(reopened) == after
    assert covers_every_offset(reopened)
    reopened.close()


def test_the_active_segment_and_records_above_the_high_watermark_stay(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log)
    write(log, [(b"k0", b"newest")])  # the active segment
    hw = log.segments[2].base_offset
    before = contents(log)
    clean_log(log, first_dirty=0, limit_offset=hw, now_ms=0, capacity=CAPACITY)
    after = contents(log)
    assert [r for r in after if r[0] >= hw] == [r for r in before if r[0] >= hw]
    assert covers_every_offset(log)
    log.close()


def test_tombstones_stay_until_delete_retention_has_passed(tmp_path: Path) -> None:
    log = open_log(tmp_path, delete_retention_ms=1000)
    fill(log)
    write(log, [(b"k1", None), (b"k2", None)])
    tombstones = log.log_end_offset - 2
    log.roll()
    for i in range(6):
        write(log, [(b"k3", b"later %d " % i * 8)])
        log.roll()
    end = log.segments[-1].base_offset
    clean_log(log, first_dirty=0, limit_offset=end, now_ms=0, capacity=CAPACITY)
    kept = latest(contents(log))
    assert kept[b"k1"][1] is None  # a first cleaning keeps every tombstone
    assert kept[b"k2"][1] is None
    # Now clean, the tombstones go once their segment is older than the horizon (the
    # newest clean segment's modification time) less delete.retention.ms.
    for segment in log.segments[:-1]:
        held = segment.base_offset <= tombstones < segment.next_offset
        os.utime(segment.log_path, (100, 100) if held else (200, 200))
    write(log, [(b"k4", b"dirty")])
    log.roll()
    result = clean_log(
        log, first_dirty=end, limit_offset=log.log_end_offset, now_ms=0, capacity=CAPACITY
    )
    assert result is not None
    assert result.stats.tombstones_removed == 2
    kept = latest(contents(log))
    assert b"k1" not in kept
    assert b"k2" not in kept
    assert kept[b"k4"][1] == b"dirty"
    assert covers_every_offset(log)
    log.close()


def test_a_producers_last_batch_stays_as_an_empty_batch(tmp_path: Path) -> None:
    """Its records superseded, the batch keeps its producer id and sequence, so the
    producer's next batch still continues its sequence after a restart."""
    log = open_log(tmp_path)
    write(log, [(b"k0", b"1"), (b"k1", b"2")], producer_id=7, producer_epoch=0, base_sequence=0)
    fill(log)  # supersedes both
    result = clean_log(
        log, first_dirty=0, limit_offset=log.log_end_offset, now_ms=0, capacity=CAPACITY
    )
    assert result is not None
    first = batches(log)[0]
    assert first == (0, 1, 0)  # empty, its offsets kept
    log.close()
    reopened = open_log(tmp_path)
    entry = reopened.producer_state.entry(7)
    assert entry is not None
    assert entry.last_sequence == 1
    write(reopened, [(b"k0", b"3")], producer_id=7, producer_epoch=0, base_sequence=2)
    reopened.close()


def test_the_dirty_ratio_counts_whole_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log)
    segments = log.segments
    end = segments[-1].base_offset
    assert dirty_ratio(segments, 0, end) == 1.0
    middle = segments[2].base_offset
    clean = sum(s.size for s in segments[:2])
    total = sum(s.size for s in segments[:-1])
    assert dirty_ratio(segments, middle, end) == pytest.approx((total - clean) / total)
    log.close()


def _cleaned_copy(
    tmp_path: Path,
) -> tuple[Path, int, list[int], list[tuple[int, bytes | None, bytes | None]]]:
    """A closed log whose first two segments have their cleaned copy written as
    ``.cleaned`` files (step 1 done): its directory, the copy's base, the old bases, and
    the log's records before."""
    log = open_log(tmp_path)
    fill(log)
    original = contents(log)
    group = _write_cleaned_group(log)
    log.close()
    return log.directory, group[0].base_offset, [s.base_offset for s in group], original


def _write_cleaned_group(log: Log) -> list[LogSegment]:
    """Clean the log's first two segments into ``.cleaned`` files (step 1 of a swap, no
    swap); return them."""
    group = list(log.segments[:2])
    offset_map, _ = build_offset_map(
        _batches(log.segments[:-1], lambda _: None), 0, log.segments[-1].base_offset, CAPACITY
    )
    out = clean_batches(
        _batches(group, lambda _: None),
        offset_map,
        retain_tombstones=True,
        producer_last_offsets=frozenset(),
        stats=CleanStats(),
    )
    write_cleaned_segment(
        log.directory, group[0].base_offset, out, index_interval_bytes=4096, modified_ms=0
    )
    return group


def _delete_old(directory: Path, bases: list[int], count: int) -> None:
    for base in bases[:count]:
        (directory / f"{base:020d}.log").unlink()
        (directory / f"{base:020d}.index").unlink()


@pytest.mark.parametrize(
    "step",
    [
        "cleaned written",
        "index renamed to swap",
        "swap committed",
        "first old segment deleted",
        "old segments deleted",
        "index renamed to its final name",
        "swap finished",
    ],
)
def test_a_kill_at_any_step_of_a_swap_recovers_a_valid_log(tmp_path: Path, step: str) -> None:
    pristine = tmp_path / "pristine"
    directory, base, old, original = _cleaned_copy(pristine)
    name = f"{base:020d}"
    if step == "index renamed to swap":
        os.replace(directory / f"{name}.index.cleaned", directory / f"{name}.index.swap")
    elif step != "cleaned written":
        commit_swap(directory, base)
    if step in ("first old segment deleted",):
        _delete_old(directory, old, 1)
    if step in ("old segments deleted", "index renamed to its final name", "swap finished"):
        _delete_old(directory, old, len(old))
    if step == "index renamed to its final name":
        os.replace(directory / f"{name}.index.swap", directory / f"{name}.index")
    if step == "swap finished":
        finish_swap(directory, base)
    recovered = open_log(pristine)
    got = contents(recovered)
    assert covers_every_offset(recovered)
    assert latest(got) == latest(original)
    if step in ("cleaned written", "index renamed to swap"):
        assert got == original  # not committed: the old segments stay
    else:
        assert len(got) < len(original)  # committed: the cleaned copy replaced them
    assert not [p for p in directory.iterdir() if p.suffix in (".cleaned", ".swap")]
    recovered.close()
    shutil.rmtree(pristine)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 6), st.booleans()), min_size=1, max_size=4),
        min_size=2,
        max_size=25,
    )
)
def test_any_history_keeps_each_keys_latest_record(
    tmp_path_factory: pytest.TempPathFactory, history: list[list[tuple[int, bool]]]
) -> None:
    log = open_log(tmp_path_factory.mktemp("any"))
    n = 0
    for rows in history:
        write(
            log,
            [(b"k%d" % k, None if dead else b"v%d" % (n + i)) for i, (k, dead) in enumerate(rows)],
        )
        n += len(rows)
    log.roll()
    before = contents(log)
    clean_log(log, first_dirty=0, limit_offset=log.log_end_offset, now_ms=0, capacity=CAPACITY)
    after = contents(log)
    assert latest(after) == latest(before)  # tombstones included (a first cleaning)
    assert len(after) == len(latest(before))
    assert covers_every_offset(log)
    log.close()


def test_a_read_inside_a_placeholder_starts_at_the_offset_asked(tmp_path: Path) -> None:
    """A follower that fetched part of the batches a placeholder now stands for continues at
    its own log end: the leader answers the placeholder's part from there on."""
    leader = open_log(tmp_path / "leader")
    follower = open_log(tmp_path / "follower")
    fill(leader)
    copied = leader.read(0, 10**6, max_offset=4).records  # the follower's first fetch
    follower.append_as_follower(copied)
    middle = follower.log_end_offset
    assert 0 < middle < 4
    clean_log(
        leader, first_dirty=0, limit_offset=leader.log_end_offset, now_ms=0, capacity=CAPACITY
    )
    first = batches(leader)[0]
    assert first[0] < middle <= first[1]  # the follower's end falls inside a placeholder
    fetched = leader.read(middle, 200)
    assert fetched.first_offset == middle
    follower.append_as_follower(fetched.records)
    while follower.log_end_offset < leader.log_end_offset:  # the fetcher goes on
        follower.append_as_follower(leader.read(follower.log_end_offset, 200).records)
    assert covers_every_offset(follower)
    assert latest(contents(follower)) == latest(contents(leader))
    leader.close()
    follower.close()


def test_an_abandoned_swap_leaves_the_dirty_section_dirty(tmp_path: Path) -> None:
    """A truncation while the cleaner works makes its swap give up, and the checkpoint it
    returns stays where the cleaning started, so the next one maps the section again."""
    log = open_log(tmp_path)
    fill(log)
    end = log.log_end_offset

    def truncate_meanwhile(_: int) -> None:
        if log.log_end_offset == end:
            log.truncate_to(end - 1)

    result = clean_log(
        log, first_dirty=0, limit_offset=end, now_ms=0, capacity=CAPACITY,
        throttle=truncate_meanwhile,
    )  # fmt: skip
    assert result is not None
    assert result.groups_abandoned == 1
    assert result.end_offset == 0
    assert covers_every_offset(log)
    log.close()


def test_aborted_records_go_committed_ones_are_compacted_and_markers_outlive_their_data(
    tmp_path: Path,
) -> None:
    """Kafka 2.8's cleaner: an aborted transaction's records go (they replace nothing), a
    committed one's are compacted as any; a marker stays while a batch of its transaction
    is in the log when a cleaning reads it, then until delete.retention.ms has passed, and
    an abort's index entry goes with its marker."""
    from proto.records.control_records import ControlType, EndTxnMarker, encode_marker_batch
    from proto.records.record_batch import TRANSACTIONAL_FLAG_MASK

    log = open_log(tmp_path, delete_retention_ms=0)
    write(log, [(b"k0", b"committed")])  # offset 0, plain

    def follow(data: bytes) -> None:  # as the leader of epoch 0 stamped it
        stamped = log.log_end_offset.to_bytes(8, "big") + data[8:12] + (0).to_bytes(4, "big")
        log.append_as_follower(stamped + data[16:])

    for seq, (value, kind) in enumerate(
        ((b"aborted", ControlType.ABORT), (b"t", ControlType.COMMIT))
    ):
        follow(
            encode_batch(
                [Record(b"k0", value, 2000), Record(b"only-" + value, value, 2000)],
                producer_id=7,
                producer_epoch=0,
                base_sequence=2 * seq,
                flags=TRANSACTIONAL_FLAG_MASK,
            )
        )
        follow(
            encode_marker_batch(EndTxnMarker(kind, 0), producer_id=7, producer_epoch=0, timestamp=1)
        )
    # offsets: 0 plain k0; 1-2 aborted (k0, only-aborted); 3 abort; 4-5 committed (k0,
    # only-t); 6 commit
    fill(log)
    assert log.collect_aborted_transactions(0, log.log_end_offset)[0].first_offset == 1
    first = clean_log(
        log, first_dirty=0, limit_offset=log.log_end_offset, now_ms=0, capacity=CAPACITY
    )
    assert first is not None
    assert first.stats.aborted_removed == 2
    kept = {r[0]: r[1:] for r in contents(log) if r[0] <= 6}
    assert 1 not in kept
    assert 2 not in kept
    assert 4 not in kept  # committed k0, superseded by fill's later k0
    assert kept[5] == (b"only-t", b"t")  # committed, its key's latest: kept
    assert 3 in kept
    assert 6 in kept
    assert log.collect_aborted_transactions(0, log.log_end_offset) != []
    assert covers_every_offset(log)
    # The next cleaning reads no batch of the aborted transaction: its marker and its
    # index entry go (delete.retention.ms 0); the commit stays while offset 5 does.
    fill(log)  # something dirty again
    second = clean_log(
        log, first_dirty=first.end_offset, limit_offset=log.log_end_offset, now_ms=0,
        capacity=CAPACITY,
    )  # fmt: skip
    assert second is not None
    kept = {r[0]: r[1:] for r in contents(log) if r[0] <= 6}
    assert 3 not in kept
    assert 6 in kept
    assert log.collect_aborted_transactions(0, log.log_end_offset) == []
    assert covers_every_offset(log)
    log.close()
    reopened = open_log(tmp_path, delete_retention_ms=0)
    assert reopened.first_unstable_offset is None  # no transaction reopened
    assert {r[0] for r in contents(reopened) if r[0] <= 6} == set(kept)
    reopened.close()


def test_nothing_at_or_past_an_open_transaction_is_cleaned(tmp_path: Path) -> None:
    """Its outcome is not known yet: the cleaner stops at the first unstable offset."""
    from proto.records.record_batch import TRANSACTIONAL_FLAG_MASK

    log = open_log(tmp_path)
    fill(log, rounds=4)
    unstable = log.log_end_offset
    log.append_as_follower(
        unstable.to_bytes(8, "big")
        + encode_batch(
            [Record(b"k0", b"open", 2000)],
            producer_id=9,
            producer_epoch=0,
            base_sequence=0,
            flags=TRANSACTIONAL_FLAG_MASK,
        )[8:]
    )
    fill(log, rounds=8)
    assert log.first_unstable_offset == unstable
    before = [r for r in contents(log) if r[0] >= unstable]
    result = clean_log(
        log, first_dirty=0, limit_offset=log.log_end_offset, now_ms=0, capacity=CAPACITY
    )
    assert result is not None
    assert result.end_offset <= unstable
    assert [r for r in contents(log) if r[0] >= unstable] == before
    log.close()


@pytest.mark.parametrize("step", ["swap committed", "old segments deleted", "swap finished"])
def test_a_swap_keeps_the_aborts_of_the_segments_it_replaces_whatever_step_a_kill_hits(
    tmp_path: Path, step: str
) -> None:
    """The cleaned segment holds the markers of the old ones: their aborts travel with it
    through the swap's files, as a replay from the latest producer snapshot (past the
    cleaned group) would not write them back."""
    from proto.records.control_records import ControlType, EndTxnMarker, encode_marker_batch
    from proto.records.record_batch import TRANSACTIONAL_FLAG_MASK

    log = open_log(tmp_path)

    def follow(data: bytes) -> None:
        log.append_as_follower(log.log_end_offset.to_bytes(8, "big") + data[8:])

    follow(
        encode_batch(
            [Record(b"k0", b"aborted", 2000)],
            producer_id=7,
            producer_epoch=0,
            base_sequence=0,
            flags=TRANSACTIONAL_FLAG_MASK,
        )
    )
    follow(
        encode_marker_batch(
            EndTxnMarker(ControlType.ABORT, 0), producer_id=7, producer_epoch=0, timestamp=1
        )
    )
    fill(log)
    aborts = log.collect_aborted_transactions(0, log.log_end_offset)
    assert aborts
    assert log.segments[0].txn_index.entries() == aborts
    group = _write_cleaned_group(log)
    base = group[0].base_offset
    write_cleaned_txn_index(log.directory, base, [t for s in group for t in s.txn_index.entries()])
    directory = log.directory
    old = [s.base_offset for s in group]
    log.close()
    snapshots = sorted(directory.glob("*.snapshot"))
    assert snapshots
    assert int(snapshots[0].name.split(".")[0]) > group[-1].base_offset  # past the group
    commit_swap(directory, base)
    if step != "swap committed":
        _delete_old(directory, old, len(old))
        for b in old:
            (directory / f"{b:020d}.txnindex").unlink(missing_ok=True)
    if step == "swap finished":
        finish_swap(directory, base)
    recovered = open_log(tmp_path)
    try:
        assert recovered.collect_aborted_transactions(0, recovered.log_end_offset) == aborts
        assert not [p for p in directory.iterdir() if p.suffix in (".cleaned", ".swap")]
    finally:
        recovered.close()
