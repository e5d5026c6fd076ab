"""Property: recovery keeps exactly the longest valid prefix of whole batches.

A log is written by the Log (several epochs, several segments), closed, damaged (a
truncation at any byte of any segment, a single byte flipped anywhere, index files removed
or mangled, the epoch checkpoint removed) and opened again. Validity is defined here,
independently of broker code, from the v2 spec: a batch counts if it is whole, its length
is sane, its magic is 2, its CRC-32C holds, its base offset continues the previous batch's
(the first one starts at the first segment's base offset) and its partition leader epoch
is not below the previous batch's. Recovery must keep exactly the batches up to the first
one that does not count (and the segments before it), never raise, and leave an index that
follows Kafka's rule and an epoch cache holding exactly the epoch changes of what is left.
"""

from __future__ import annotations

import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.epoch_entry import EpochEntry
from broker.log.log import Log
from proto.config.log_config import LogConfig
from proto.records.record_batch import Record, encode_batch

HEADER = struct.Struct(">qiibIhiqqqhii")


@dataclass(frozen=True)
class Spec:
    batches: list[tuple[int, int, int]]  # (records, value size, epoch)
    segment_bytes: int
    index_interval: int


@st.composite
def specs(draw: st.DrawFn) -> Spec:
    count = draw(st.integers(1, 25))
    epoch = draw(st.integers(0, 3))
    batches = []
    for _ in range(count):
        if draw(st.integers(0, 4)) == 0:
            epoch += draw(st.integers(1, 300))  # > 255: multi-byte epochs
        batches.append((draw(st.integers(1, 4)), draw(st.integers(0, 300)), epoch))
    return Spec(
        batches,
        segment_bytes=draw(st.sampled_from([1500, 3000, 10**6])),  # a batch is < 1400 bytes
        index_interval=draw(st.sampled_from([0, 150, 4096])),
    )


def write_log(directory: Path, spec: Spec) -> LogConfig:
    config = LogConfig(segment_bytes=spec.segment_bytes, index_interval_bytes=spec.index_interval)
    log = Log.open(directory, config)
    for i, (count, size, epoch) in enumerate(spec.batches):
        records = [Record(b"k%d" % j, bytes([i % 256]) * size, 1000 * i + j) for j in range(count)]
        log.append_as_leader(encode_batch(records), epoch)
    log.close()
    return config


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


# -- the independent model -------------------------------------------------------------------


@dataclass(frozen=True)
class ModelBatch:
    segment: int  # base offset of its segment
    position: int
    size: int
    base_offset: int
    last_offset: int
    epoch: int


def batch_is_valid(data: bytes, pos: int) -> tuple[int, int, int, int] | None:
    """(size, base offset, last offset, epoch) of a valid-looking batch at pos, else None."""
    if len(data) - pos < HEADER.size:
        return None
    base, length, epoch, magic, crc, _, last_delta, *_ = HEADER.unpack_from(data, pos)
    size = length + 12
    if length < 49 or pos + size > len(data) or magic != 2:
        return None
    if crc32c.crc32c(data[pos + 21 : pos + size]) != crc:
        return None
    return size, base, base + last_delta, epoch


def longest_valid_prefix(
    files: list[tuple[int, bytes]],
) -> tuple[dict[int, bytes], list[ModelBatch]]:
    """The segments (base -> bytes) and batches recovery must keep."""
    kept: dict[int, bytes] = {}
    batches: list[ModelBatch] = []
    expected: int | None = None
    previous_epoch: int | None = None
    for base, data in files:
        if expected is not None and base != expected:
            break
        expected = base
        pos = 0
        while pos < len(data):
            found = batch_is_valid(data, pos)
            if found is None:
                break
            size, first, last, epoch = found
            if first != expected or (previous_epoch is not None and epoch < previous_epoch):
                break
            batches.append(ModelBatch(base, pos, size, first, last, epoch))
            expected, previous_epoch = last + 1, epoch
            pos += size
        kept[base] = data[:pos]
        if pos < len(data):
            break
    return kept, batches


def epoch_changes(batches: list[ModelBatch]) -> list[EpochEntry]:
    entries: list[EpochEntry] = []
    for batch in batches:
        if batch.epoch >= 0 and (not entries or entries[-1].epoch != batch.epoch):
            entries.append(EpochEntry(batch.epoch, batch.base_offset))
    return entries


def kafka_index(batches: list[ModelBatch], segment: int, interval: int) -> bytes:
    """Kafka's rule: a batch starting more than `interval` bytes after the last indexed
    position gets an entry (last offset relative to the segment, position)."""
    out = b""
    last = 0
    for batch in batches:
        if batch.segment == segment and batch.position - last > interval:
            out += struct.pack(">ii", batch.last_offset - segment, batch.position)
            last = batch.position
    return out


def check_recovered(directory: Path, config: LogConfig, files: list[tuple[int, bytes]]) -> None:
    kept, batches = longest_valid_prefix(files)
    log = Log.open(directory, config)  # recovery point 0: every segment is checked
    try:
        end = batches[-1].last_offset + 1 if batches else files[0][0]
        assert log.log_end_offset == end
        assert log.recovery_point == end
        on_disk = {int(p.stem): p.read_bytes() for p in segment_files(directory)}
        assert on_disk == kept
        assert log.read(log.log_start_offset, 10**9).records == b"".join(kept.values())
        for base in kept:
            index = (directory / f"{base:020d}.index").read_bytes()
            assert index == kafka_index(batches, base, config.index_interval_bytes)
            for relative, position in struct.iter_unpack(">ii", index):
                at = [b for b in batches if b.segment == base and b.position == position]
                assert len(at) == 1
                assert at[0].last_offset == base + relative
        assert log.epoch_cache.entries() == epoch_changes(batches)
        # Reads of every offset find the batch holding it.
        for batch in batches[:: max(len(batches) // 5, 1)]:
            found = log.read(batch.base_offset, 1)
            assert found.first_offset == batch.base_offset
        # The log takes appends again.
        latest = log.latest_epoch or 0
        log.append_as_leader(encode_batch([Record(None, b"after", 1)]), latest)
        assert log.log_end_offset == end + 1
    finally:
        log.close()


def read_files(directory: Path) -> list[tuple[int, bytes]]:
    return [(int(p.stem), p.read_bytes()) for p in segment_files(directory)]


# -- properties ------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(spec=specs(), data=st.data())
def test_recovery_after_truncation_or_byte_flip(spec: Spec, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "topic-0"
        config = write_log(directory, spec)
        paths = segment_files(directory)
        path = data.draw(st.sampled_from(paths), label="segment")
        content = bytearray(path.read_bytes())
        position = data.draw(st.integers(0, len(content) - 1), label="position")
        if data.draw(st.booleans(), label="truncate"):
            del content[position:]
        else:
            content[position] ^= data.draw(st.integers(1, 255), label="xor")
        path.write_bytes(content)
        if data.draw(st.booleans(), label="drop epoch checkpoint"):
            (directory / "leader-epoch-checkpoint").unlink()
        check_recovered(directory, config, read_files(directory))


@settings(max_examples=100, deadline=None)
@given(spec=specs(), data=st.data())
def test_recovery_rebuilds_damaged_indexes(spec: Spec, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "topic-0"
        config = write_log(directory, spec)
        original = read_files(directory)
        for path in sorted(directory.glob("*.index")):
            damage = data.draw(
                st.sampled_from(["none", "delete", "truncate", "flip", "garbage"]), label="damage"
            )
            content = bytearray(path.read_bytes())
            if damage == "delete":
                path.unlink()
            elif damage == "truncate" and content:
                del content[data.draw(st.integers(0, len(content) - 1)) :]
                path.write_bytes(content)
            elif damage == "flip" and content:
                content[data.draw(st.integers(0, len(content) - 1))] ^= data.draw(
                    st.integers(1, 255)
                )
                path.write_bytes(content)
            elif damage == "garbage":
                path.write_bytes(data.draw(st.binary(max_size=40)))
        check_recovered(directory, config, original)  # all valid: nothing may be cut


def test_recovery_of_an_unrecovered_segment_with_a_wrong_index_entry(tmp_path: Path) -> None:
    # Below the recovery point Kafka trusts an index that passes its sanity check; a
    # plausible but wrong entry must not make reads return the wrong batches.
    directory = tmp_path / "topic-0"
    config = LogConfig(index_interval_bytes=0)
    log = Log.open(directory, config)
    for i in range(10):
        log.append_as_leader(encode_batch([Record(None, b"v%d" % i, i)]), 0)
    expected = log.read(0, 10**9).records
    log.close()
    index_path = directory / f"{0:020d}.index"
    entries = list(struct.iter_unpack(">ii", index_path.read_bytes()))
    relative, position = entries[3]
    entries[3] = (relative, position + 1)  # still increasing, but not a batch boundary
    index_path.write_bytes(b"".join(struct.pack(">ii", *e) for e in entries))
    log = Log.open(directory, config, recovery_point=10, clean_shutdown=True)
    for offset in range(10):
        found = log.read(offset, 1)
        assert found.first_offset == offset
    assert log.read(0, 10**9).records == expected
    log.close()
