"""Fuzzing the record-batch decoder, the leader's validator and the log's append path.

The invariant of docs/storage.md: a batch the broker could not serve is never stored.
Whatever bytes a producer sends, the leader's append either refuses them with a clear error and
leaves the segment files byte for byte as they were, or stores batches that every reader
(follower, consumer, audit) decodes. The decoder meets only its own error, never an
IndexError or a struct.error, whatever it is handed.

Inputs come from :mod:`tests.fuzz` (random and mutated batches, the poison corpus); the
example count from the Hypothesis profile (``make fuzz`` for a long run).
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

from broker.log.log import Log
from proto.config.log_config import LogConfig
from proto.errors import BrokerResponseError
from proto.records.record_batch import (
    CorruptRecordError,
    decode_batch,
    scan_batches,
    validate_batches,
)
from proto.wire.minibroker_pb2 import ErrorCode
from tests.fuzz import good_batches, hostile_batches, restamp_crc
from tests.poison_batches import POISONS, Poison

MESSAGE_MAX_BYTES = 4096


@contextmanager
def scratch_log() -> Iterator[Log]:
    """A log in its own temp dir: Hypothesis runs every example of a test in one call, so
    a pytest ``tmp_path`` would be shared by all of them."""
    with tempfile.TemporaryDirectory(prefix="fuzz-log-") as root:
        log = Log.open(Path(root) / "fuzz-0", LogConfig(max_message_bytes=MESSAGE_MAX_BYTES))
        try:
            yield log
        finally:
            log.close()


def segment_bytes(log: Log) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.directory.iterdir()) if p.is_file()}


def decode_log(log: Log) -> int:
    """Decode every stored batch as a consumer would; return the records found."""
    data = log.read(log.log_start_offset, 1 << 30).records if log.log_end_offset else b""
    found, pos = 0, 0
    while pos < len(data):
        batch = decode_batch(data, pos)
        assert [r.offset for r in batch.records] == list(
            range(batch.header.base_offset, batch.header.next_offset)
        )
        found += len(batch.records)
        pos += batch.header.size
    return found


Refusal = CorruptRecordError | BrokerResponseError
T = TypeVar("T")


def attempt(action: Callable[[], T]) -> T | Refusal:
    """What ``action`` returns, or the clear error it refuses its input with. Any other
    exception escapes and fails the test."""
    try:
        return action()
    except (CorruptRecordError, BrokerResponseError) as e:
        return e


def refusal(action: Callable[[], object]) -> Refusal | None:
    outcome = attempt(action)
    return outcome if isinstance(outcome, Refusal) else None


@given(data=hostile_batches())
@example(data=b"")
def test_decoder_meets_only_its_own_error(data: bytes) -> None:
    """Framing, CRC and record decoding raise CorruptRecordError and nothing else."""
    if refusal(lambda: validate_batches(data)) is not None:
        return
    pos = 0
    for header in validate_batches(data):
        error = refusal(functools.partial(decode_batch, data, pos))
        assert error is None or (isinstance(error, CorruptRecordError) and error.reason)
        pos += header.size
    error = refusal(lambda: list(scan_batches(data)))
    assert error is None or (isinstance(error, CorruptRecordError) and error.reason)


def test_mutations_of_good_batches_pass_the_crc_only_when_restamped() -> None:
    """The strategies reach the record walk: a re-stamped mutation passes the CRC check."""
    batch = bytearray(good_batches()[1])
    batch[-1] ^= 0x55
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_batches(bytes(batch))
    assert validate_batches(restamp_crc(bytes(batch)))


@given(batches=st.lists(hostile_batches(), min_size=1, max_size=8))
def test_leader_append_stores_only_servable_batches(batches: list[bytes]) -> None:
    """Each produced buffer is refused with a clear error and the files stay as they were,
    or appended whole; at the end every stored batch decodes."""
    with scratch_log() as log:
        appended = 0
        for data in batches:
            before = segment_bytes(log)
            leo = log.log_end_offset
            outcome = attempt(functools.partial(log.append_as_leader, data, leader_epoch=0))
            if isinstance(outcome, Refusal):
                event(f"refused: {type(outcome).__name__}")
                assert str(outcome)
                assert segment_bytes(log) == before
                assert log.log_end_offset == leo
                continue
            event("appended")
            if not outcome.duplicate:
                appended += log.log_end_offset - leo
        assert decode_log(log) == appended


@pytest.mark.parametrize("poison", POISONS, ids=lambda p: p.name)
def test_poison_corpus_is_refused_and_leaves_the_files(poison: Poison) -> None:
    """The regression corpus: every batch the issue named is refused with its code and
    message, and the log keeps only what it held."""
    with scratch_log() as log:
        log.append_as_leader(good_batches()[0], leader_epoch=0)
        before = segment_bytes(log)
        error = refusal(lambda: log.append_as_leader(poison.batch, leader_epoch=0))
        assert error is not None
        code = error.code if isinstance(error, BrokerResponseError) else ErrorCode.CORRUPT_MESSAGE
        assert (code, poison.fragment in str(error).lower()) == (poison.code, True)
        assert segment_bytes(log) == before
        assert decode_log(log) == 1
