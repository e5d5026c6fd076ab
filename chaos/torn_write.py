"""A torn write: the tail of an active segment cut mid-batch, as a power loss leaves it.

Only for a broker that is down: its next start must find the torn tail, recover (truncate
it, docs/storage.md) and fetch the lost records again from the leader. The cut is made in the
last segment (the active one) of a partition chosen with the given random source: the file
is shortened to a point strictly inside its last batch. Runnable as a program so the docker
backend can cut a stopped container's volume from a helper container::

    python -m chaos.torn_write /data --seed 7
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import NamedTuple

from proto.records.record_batch import scan_batches
from proto.topic_partition import TopicPartition

__all__ = ["TornWrite", "tear_active_segment"]


class TornWrite(NamedTuple):
    """Where a segment was cut."""

    partition: str
    segment: str
    batch_offset: int
    """Base offset of the batch the cut went through."""
    kept_bytes: int
    cut_bytes: int

    def __str__(self) -> str:
        return (
            f"{self.partition}/{self.segment}: cut {self.cut_bytes} bytes inside the batch at "
            f"offset {self.batch_offset}"
        )


def tear_active_segment(data_dir: Path, rng: random.Random) -> TornWrite | None:
    """Cut the active segment of one partition of ``data_dir`` mid-batch; None if no
    partition holds a batch of more than one byte."""
    candidates: list[tuple[Path, int, int, int]] = []
    for partition_dir in sorted(p for p in data_dir.iterdir() if p.is_dir()):
        try:
            TopicPartition.from_dir_name(partition_dir.name)
        except ValueError:
            continue
        segments = sorted(partition_dir.glob("*.log"))
        if not segments:
            continue
        active = segments[-1]
        last = None
        for batch in scan_batches(active.read_bytes()):
            last = batch
        if last is not None and last.header.size > 1:
            candidates.append((active, last.position, last.header.size, last.header.base_offset))
    if not candidates:
        return None
    segment, position, size, base_offset = rng.choice(candidates)
    keep = position + rng.randint(1, size - 1)
    original = segment.stat().st_size
    with segment.open("r+b") as f:
        f.truncate(keep)
    return TornWrite(segment.parent.name, segment.name, base_offset, keep, original - keep)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="cut one active segment mid-batch")
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torn = tear_active_segment(args.data_dir, random.Random(args.seed))
    print(torn if torn is not None else "nothing to tear")
    return 0


if __name__ == "__main__":
    sys.exit(main())
