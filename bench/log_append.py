"""Log append throughput against plain file writes of the same bytes, in one run.

The plain baseline writes each batch with one unbuffered ``write`` (the Log's segment makes
one ``pwritev`` per append), so the ratio isolates what the Log adds: validation
(header parse, CRC32C, and broker.log.log_validator's walk over every record: here runs of
records of one layout, checked a column at a time), stamping base offset and leader epoch
(a 16-byte buffer before the rest of the batch in that ``pwritev``), index and epoch-cache
bookkeeping; with fsync, also the index file's fsync.
Both runs use the same directory (so the same disk) and alternate, best of ``rounds``.
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import tempfile
import time
import timeit
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker.log.log import Log
from broker.log.log_validator import validate_client_batches
from proto.config.log_config import LogConfig
from proto.records.record_batch import Record, encode_batch, validate_batches

BATCH_BYTES = 16 * 1024
"""Kafka's default batch.size, the replication bench's batches."""
PRODUCER_BATCH_BYTES = 256 * 1024
"""minibroker's producer default batch.size (client/producer_config.py): what a producer on
its defaults sends when it is busy."""
RECORD_VALUE_BYTES = 100


@dataclass(frozen=True)
class AppendResult:
    """MB/s of the Log and of plain writes for one fsync policy."""

    label: str
    batches: int
    batch_bytes: int
    log_mb_s: float
    plain_mb_s: float

    @property
    def ratio(self) -> float:
        return self.log_mb_s / self.plain_mb_s


def make_batch(
    value_bytes: Callable[[], int] = lambda: RECORD_VALUE_BYTES, batch_bytes: int = BATCH_BYTES
) -> bytes:
    """A v2 batch of records of 100-byte values (or of ``value_bytes()`` each), as close to
    ``batch_bytes`` as whole records allow."""
    records: list[Record] = []
    size = 0
    while True:
        record = Record(key=None, value=os.urandom(value_bytes()), timestamp=0)
        size += len(record.value or b"") + 7  # at least this; encode_batch decides
        records.append(record)
        if size > batch_bytes and len(encode_batch(records)) > batch_bytes:
            while len(batch := encode_batch(records)) > batch_bytes:
                del records[-max(1, (len(batch) - batch_bytes) // 120) :]
            return batch


@dataclass(frozen=True)
class ValidatorCost:
    """µs per record of the leader's record checks (broker.log.log_validator), per batch kind."""

    one_layout_us: float
    """A batch of 100-byte values: runs of one layout, checked a column at a time."""
    varied_us: float
    """A batch of 50- to 150-byte values: the records are walked one by one."""


def validator_cost(rounds: int = 7, number: int = 500) -> ValidatorCost:
    """The validator alone (header checks excluded), best of ``rounds`` timeit runs."""
    sizes = random.Random(11)
    costs = []
    for batch in (make_batch(), make_batch(lambda: sizes.randint(50, 150))):
        headers = validate_batches(batch)
        count = sum(header.record_count for header in headers)
        check = functools.partial(validate_client_batches, batch, headers)
        seconds = min(timeit.repeat(check, number=number, repeat=rounds))
        costs.append(seconds / number / count * 1e6)
    return ValidatorCost(*costs)


def _plain(directory: Path, batch: bytes, batches: int, fsync_every: int | None) -> float:
    path = directory / "plain.bin"
    start = time.perf_counter()
    with path.open("wb", buffering=0) as f:
        for i in range(1, batches + 1):
            f.write(batch)
            if fsync_every and i % fsync_every == 0:
                os.fsync(f.fileno())
    elapsed = time.perf_counter() - start
    path.unlink()
    return elapsed


def _log(directory: Path, batch: bytes, batches: int, fsync_every: int | None) -> float:
    log_dir = directory / "bench-0"
    log = Log.open(log_dir, LogConfig())
    start = time.perf_counter()
    for i in range(1, batches + 1):
        log.append_as_leader(batch, leader_epoch=0)
        if fsync_every and i % fsync_every == 0:
            log.flush()
    elapsed = time.perf_counter() - start
    log.close()
    shutil.rmtree(log_dir)
    return elapsed


def _best(run: Callable[[], float], rounds: int) -> float:
    return min(run() for _ in range(rounds))


def measure(
    work_dir: Path,
    *,
    batches: int = 8000,
    rounds: int = 3,
    fsync_every: int | None = None,
    batch_bytes: int = BATCH_BYTES,
) -> AppendResult:
    batch = make_batch(batch_bytes=batch_bytes)
    total_mb = len(batch) * batches / 1e6
    directory = Path(tempfile.mkdtemp(prefix="log-append-", dir=work_dir))
    try:
        plain_s: list[float] = []
        log_s: list[float] = []
        for _ in range(rounds):  # alternate so drift in the machine hits both alike
            plain_s.append(_plain(directory, batch, batches, fsync_every))
            log_s.append(_log(directory, batch, batches, fsync_every))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    label = "no fsync" if fsync_every is None else f"fsync every {fsync_every} batches"
    return AppendResult(label, batches, len(batch), total_mb / min(log_s), total_mb / min(plain_s))
