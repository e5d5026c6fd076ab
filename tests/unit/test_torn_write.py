"""A torn write cuts an active segment inside its last batch; recovery drops just that batch."""

from __future__ import annotations

import random
from pathlib import Path

from broker.log.log import Log
from chaos.torn_write import tear_active_segment
from proto.config.log_config import LogConfig
from proto.records.record_batch import Record, encode_batch, scan_batches


def _log_with_batches(data_dir: Path, batches: int) -> Path:
    log = Log.open(data_dir / "t-0", LogConfig())
    for i in range(batches):
        log.append_as_leader(encode_batch([Record(None, f"v{i}".encode(), i)]), 0)
    log.close()
    return data_dir / "t-0"


def test_the_cut_falls_strictly_inside_the_last_batch_and_recovery_drops_only_it(
    tmp_path: Path,
) -> None:
    partition = _log_with_batches(tmp_path, 5)
    segment = next(partition.glob("*.log"))
    before = list(scan_batches(segment.read_bytes()))
    torn = tear_active_segment(tmp_path, random.Random(3))
    assert torn is not None
    assert torn.partition == "t-0"
    assert torn.batch_offset == 4
    last = before[-1]
    assert last.position < torn.kept_bytes < last.position + last.header.size
    assert segment.stat().st_size == torn.kept_bytes
    recovered = Log.open(partition, LogConfig(), recovery_point=0, clean_shutdown=False)
    assert recovered.log_end_offset == 4
    recovered.close()


def test_nothing_to_tear_in_an_empty_data_dir(tmp_path: Path) -> None:
    (tmp_path / "not-a-partition").mkdir()
    assert tear_active_segment(tmp_path, random.Random(1)) is None
