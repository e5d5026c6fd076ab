"""``minibroker dump-log PATH``: print the batches of a segment file or a partition directory.

Like Kafka's ``kafka-dump-log.sh``: one line per batch (and per record with
``--print-data``), or with ``--json`` one JSON object per batch with the fields of
docs/cli.md. Damage is reported, never raised: a batch whose CRC fails is printed with
``crc_valid: false`` and the walk goes on; a torn or unframeable tail ends the segment with a
``torn_tail`` line saying where and why.
"""

from __future__ import annotations

import argparse
import base64
import json
import mmap
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from proto.errors import MinibrokerError
from proto.records.record_batch import (
    CorruptRecordError,
    Record,
    ScannedBatch,
    decode_batch,
    scan_batches,
)
from proto.topic_partition import TopicPartition


class DumpLogError(MinibrokerError):
    """The path is neither a segment file nor a partition directory."""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "dump-log",
        help="print the record batches of a segment file or partition directory",
        description=(
            "Print the record batches of a .log segment, or of every segment of a partition "
            "directory, in offset order. Corrupt batches and torn tails are reported."
        ),
    )
    parser.add_argument("path", type=Path, help="a .log segment file or a partition directory")
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per batch (and one for the cleaner, once it cleaned the partition)",
    )
    parser.add_argument(
        "--print-data", action="store_true", help="also print every record (key, value, headers)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    dump(args.path, out=sys.stdout, as_json=args.json, print_data=args.print_data)
    return 0


def segment_files(path: Path) -> list[Path]:
    """The segments to dump: the file itself, or a directory's ``*.log`` in offset order."""
    if path.is_dir():
        # 20-digit zero-padded base offsets sort lexically in offset order.
        return sorted(p for p in path.glob("*.log") if p.is_file())
    if path.is_file():
        return [path]
    raise DumpLogError(f"no such file or directory: {path}")


def dump(path: Path, *, out: IO[str], as_json: bool, print_data: bool) -> None:
    """Write the dump of ``path`` to ``out``."""
    segments = segment_files(path)
    if not segments:
        raise DumpLogError(f"no .log segment files in {path}")
    for segment in segments:
        if not as_json:
            out.write(f"Dumping {segment}\n")
        with _mapped(segment) as buf:
            _dump_segment(segment, buf, out=out, as_json=as_json, print_data=print_data)
    if path.is_dir():
        _dump_cleaner_state(path, out=out, as_json=as_json)


def _checkpointed_offset(path: Path, tp: TopicPartition) -> int | None:
    """``tp``'s offset in an offset checkpoint file (version, count, then ``topic partition
    offset`` lines: docs/storage.md, "Checkpoint files"); None if it has none."""
    try:
        lines = path.read_text().splitlines()[2:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) == 3 and fields[0] == tp.topic and fields[1] == str(tp.partition):
            return int(fields[2]) if fields[2].isdigit() else None
    return None


def _dump_cleaner_state(directory: Path, *, out: IO[str], as_json: bool) -> None:
    """Where the log cleaner's last cleaning of this partition ended (the data dir's
    ``cleaner-offset-checkpoint``) and the files of a cleaning under way, if any."""
    try:
        tp = TopicPartition.from_dir_name(directory.name)
    except ValueError:
        return
    checkpoint = directory.parent / "cleaner-offset-checkpoint"
    cleaned = _checkpointed_offset(checkpoint, tp)
    in_progress = sorted(
        p.name for p in directory.iterdir() if p.name.endswith((".cleaned", ".swap"))
    )
    if as_json:
        if cleaned is None and not in_progress:
            return  # one object per batch, and one for the cleaner only once it has a state
        state = {"cleaner": {"first_dirty_offset": cleaned, "in_progress": in_progress}}
        out.write(json.dumps(state) + "\n")
        return
    where = "never cleaned" if cleaned is None else f"cleaned up to offset {cleaned}"
    out.write(f"Cleaner: {where} ({checkpoint.name})")
    out.write(f"; cleaning under way: {', '.join(in_progress)}\n" if in_progress else "\n")


@contextmanager
def _mapped(segment: Path) -> Iterator[bytes | memoryview]:
    """The segment's bytes without reading a possibly 1 GiB file into memory."""
    with segment.open("rb") as f:
        if segment.stat().st_size == 0:
            yield b""  # an empty file cannot be mapped
            return
        with (
            mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
            memoryview(mapped) as view,
        ):
            yield view


def _dump_segment(
    segment: Path, buf: bytes | memoryview, *, out: IO[str], as_json: bool, print_data: bool
) -> None:
    scan = scan_batches(buf)
    for batch in scan:
        records = _records(buf, batch) if print_data else None
        if as_json:
            out.write(json.dumps(_batch_json(segment, batch, records)) + "\n")
        else:
            out.write(_batch_text(batch) + "\n")
            if isinstance(records, str):
                out.write(f"| records not decoded: {records}\n")
            elif records is not None:
                for record in records:
                    out.write(_record_text(record) + "\n")
    if scan.stop_problem is not None:
        remaining = len(buf) - scan.end_position
        if as_json:
            tail = {
                "segment": str(segment),
                "torn_tail": True,
                "position": scan.end_position,
                "remaining_bytes": remaining,
                "reason": scan.stop_problem,
            }
            out.write(json.dumps(tail) + "\n")
        else:
            out.write(
                f"Torn tail at position {scan.end_position} ({remaining} bytes not read): "
                f"{scan.stop_problem}\n"
            )


def _records(buf: bytes | memoryview, batch: ScannedBatch) -> list[Record] | str:
    """The batch's records, or the reason they cannot be decoded."""
    if not batch.crc_ok:
        return "CRC mismatch"
    try:
        return decode_batch(buf, batch.position).records
    except CorruptRecordError as err:
        return str(err)


def _batch_json(
    segment: Path, batch: ScannedBatch, records: list[Record] | str | None
) -> dict[str, Any]:
    h = batch.header
    obj: dict[str, Any] = {
        "segment": str(segment),
        "base_offset": h.base_offset,
        "last_offset": h.last_offset,
        "leader_epoch": h.partition_leader_epoch,
        "count": h.record_count,
        "crc_valid": batch.crc_ok,
        "position": batch.position,
        "size": h.size,
        "crc": h.crc,
        "producer_id": h.producer_id,
        "producer_epoch": h.producer_epoch,
        "base_sequence": h.base_sequence,
        "max_timestamp": h.max_timestamp,
        "compression": h.compression_name,
    }
    if batch.problem is not None:
        obj["problem"] = batch.problem
    if isinstance(records, str):
        obj["records_error"] = records
    elif records is not None:
        obj["records"] = [_record_json(r) for r in records]
    return obj


def _record_json(record: Record) -> dict[str, Any]:
    return {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": _show_bytes(record.key),
        "value": _show_bytes(record.value),
        "headers": [[k, _show_bytes(v)] for k, v in record.headers],
    }


def _show_bytes(data: bytes | None) -> str | dict[str, str] | None:
    """UTF-8 text where the bytes are valid UTF-8, else ``{"base64": ...}``."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def _batch_text(batch: ScannedBatch) -> str:
    h = batch.header
    text = (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} "
        f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
        f"partitionLeaderEpoch: {h.partition_leader_epoch} position: {batch.position} "
        f"CreateTime: {h.max_timestamp} size: {h.size} magic: {h.magic} "
        f"compresscodec: {h.compression_name} crc: {h.crc} isvalid: {batch.problem is None}"
    )
    if batch.problem is not None:
        text += f" problem: {batch.problem}"
    return text


def _record_text(record: Record) -> str:
    key = _show_bytes(record.key)
    value = _show_bytes(record.value)
    header_keys = [k for k, _ in record.headers]
    return (
        f"| offset: {record.offset} CreateTime: {record.timestamp} "
        f"key: {json.dumps(key)} payload: {json.dumps(value)} headerKeys: {header_keys}"
    )
