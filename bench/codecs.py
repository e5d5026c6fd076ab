"""The record codecs (proto/records/compression.py) against the other bindings of each codec.

Input: about 800 KB of realistic records, JSON order events with random ids and prices
(compressible as real topics are, not all-equal bytes), encoded once. For each codec,
minibroker's ``compress`` and bounded ``decompress`` (an 8 MiB limit) against the other
Python bindings that could have been chosen: python-lz4's frame functions on their
defaults, cramjam's unbounded ``decompress`` (gzip, snappy, zstd). Best of ``rounds`` timings of
``repeat`` calls each, in this one process, so the ratios mean something on a shared machine.

Run: ``python -m bench.codecs``.
"""

from __future__ import annotations

import functools
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cramjam
import lz4.frame

from proto.records.compression import Codec, compress, decompress

RECORDS = 10_000
LIMIT = 8 * 1024 * 1024
WORDS = [
    "order",
    "user",
    "item",
    "price",
    "qty",
    "status",
    "shipped",
    "pending",
    "paid",
    "eur",
    "usd",
    "warehouse",
]


def sample(n: int = RECORDS) -> bytes:
    rng = random.Random(1)
    return b"".join(
        json.dumps(
            {
                "id": i,
                "user": f"u{rng.randrange(10_000)}",
                "item": rng.choice(WORDS),
                "price": round(rng.random() * 100, 2),
                "status": rng.choice(WORDS),
            }
        ).encode()
        for i in range(n)
    )


@dataclass(frozen=True)
class CodecRow:
    library: str
    codec: str
    ratio: float
    """compressed bytes / input bytes"""
    compress_mb_s: float
    decompress_mb_s: float


def _best_s(call: Callable[[], object], rounds: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(repeat):
            call()
        best = min(best, (time.perf_counter() - started) / repeat)
    return best


def measure(rounds: int = 5, repeat: int = 10) -> tuple[int, list[CodecRow]]:
    data = sample()
    mb = len(data) / 1e6

    def row(
        library: str, codec: str, pack: Callable[[], bytes], unpack: Callable[[bytes], object]
    ) -> CodecRow:
        packed = pack()
        return CodecRow(
            library,
            codec,
            len(packed) / len(data),
            mb / _best_s(pack, rounds, repeat),
            mb / _best_s(lambda: unpack(packed), rounds, repeat),
        )

    rows = []
    for codec in (Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD):
        name = codec.name.lower()
        ours = functools.partial(compress, codec, data)
        bounded = functools.partial(decompress, codec, limit=LIMIT)
        rows.append(row("minibroker (bounded)", name, ours, bounded))
        if codec != Codec.LZ4:
            module = getattr(cramjam, name)
            theirs = functools.partial(_cramjam_compress, module, data)
            rows.append(row("cramjam, unbounded", name, theirs, module.decompress))
    rows.append(
        row(
            "python-lz4 frame defaults",
            "lz4",
            functools.partial(lz4.frame.compress, data),
            lz4.frame.decompress,
        )
    )
    return len(data), rows


def _cramjam_compress(module: Any, data: bytes) -> bytes:
    return bytes(module.compress(data))


def main() -> None:
    size, rows = measure()
    print(f"input {size:,} bytes")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
