"""``minibroker dump-log PATH``: print the batches of a segment file or a partition directory.

Like Kafka's ``kafka-dump-log.sh``: one line per batch (and per record with
``--print-data``), or with ``--json`` one JSON object per batch with the fields of
docs/cli.md. Damage is reported, never raised: a batch whose CRC fails is printed with
``crc_valid: false`` and the walk goes on; a torn or unframeable tail ends the segment with a
``torn_tail`` line saying where and why.

Transactions (docs/transactions.md): a batch says whether it is transactional and a control
batch; a marker record is shown as the marker it is; a segment's ``.txnindex`` (or such a
file given alone) is listed entry by entry, and so is a producer state snapshot
(``<offset>.snapshot``, docs/storage.md: one line per producer). ``--offsets-decoder`` and
``--transaction-log-decoder`` show the records of ``__consumer_offsets`` and
``__transaction_state`` decoded, as Kafka's flags of those names do.
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

from proto.coordinator.group_records import (
    GroupMetadataKey,
    GroupRecordError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from proto.coordinator.transaction_records import (
    TransactionRecordError,
    decode_transaction_key,
    decode_transaction_value,
)
from proto.errors import MinibrokerError
from proto.records.aborted_txn import AbortedTxnFormatError, decode_entries
from proto.records.control_records import ControlRecordError, decode_end_txn_marker
from proto.records.producer_snapshot import CorruptSnapshotError, decode_snapshot
from proto.records.record_batch import (
    CorruptRecordError,
    Record,
    ScannedBatch,
    decode_batch,
    scan_batches,
)
from proto.topic_partition import TopicPartition

TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"


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
    decoders = parser.add_mutually_exclusive_group()
    decoders.add_argument(
        "--offsets-decoder",
        action="store_const",
        const="offsets",
        dest="decoder",
        help="decode the records of __consumer_offsets (implies --print-data)",
    )
    decoders.add_argument(
        "--transaction-log-decoder",
        action="store_const",
        const="transactions",
        dest="decoder",
        help="decode the records of __transaction_state (implies --print-data)",
    )
    parser.set_defaults(run=run, decoder=None)


def run(args: argparse.Namespace) -> int:
    dump(
        args.path,
        out=sys.stdout,
        as_json=args.json,
        print_data=args.print_data or args.decoder is not None,
        decoder=args.decoder,
    )
    return 0


def segment_files(path: Path) -> list[Path]:
    """The segments to dump: the file itself, or a directory's ``*.log`` in offset order."""
    if path.is_dir():
        # 20-digit zero-padded base offsets sort lexically in offset order.
        return sorted(p for p in path.glob("*.log") if p.is_file())
    if path.is_file():
        return [path]
    raise DumpLogError(f"no such file or directory: {path}")


def dump(
    path: Path, *, out: IO[str], as_json: bool, print_data: bool, decoder: str | None = None
) -> None:
    """Write the dump of ``path`` to ``out``."""
    if path.is_file() and path.name.endswith(TXN_INDEX_SUFFIX):
        _dump_txn_index(path, out=out, as_json=as_json)
        return
    if path.is_file() and path.name.endswith(SNAPSHOT_SUFFIX):
        _dump_snapshot(path, out=out, as_json=as_json)
        return
    segments = segment_files(path)
    if not segments:
        raise DumpLogError(f"no .log segment files in {path}")
    for segment in segments:
        if not as_json:
            out.write(f"Dumping {segment}\n")
        with _mapped(segment) as buf:
            _dump_segment(
                segment, buf, out=out, as_json=as_json, print_data=print_data, decoder=decoder
            )
        txn_index = segment.with_suffix(TXN_INDEX_SUFFIX)
        if path.is_dir() and txn_index.is_file():
            _dump_txn_index(txn_index, out=out, as_json=as_json)
    if path.is_dir():
        for snapshot in sorted(p for p in path.glob("*" + SNAPSHOT_SUFFIX) if p.is_file()):
            _dump_snapshot(snapshot, out=out, as_json=as_json)
        _dump_cleaner_state(path, out=out, as_json=as_json)


def _dump_snapshot(path: Path, *, out: IO[str], as_json: bool) -> None:
    """The producers of a producer state snapshot, one line each (as Kafka's tool lists a
    ``.snapshot``, with every cached batch rather than the last)."""
    try:
        snapshot = decode_snapshot(path.read_bytes())
    except CorruptSnapshotError as err:
        if as_json:
            out.write(json.dumps({"producer_snapshot": str(path), "problem": str(err)}) + "\n")
        else:
            out.write(f"Dumping {path}\nCorrupt producer snapshot: {err}\n")
        return
    if not as_json:
        out.write(f"Dumping {path}\nlastMarkerOffset: {snapshot.last_marker_offset}\n")
    for e in snapshot.entries:
        batches = [
            {"first_sequence": f, "last_sequence": last_seq, "base_offset": b, "last_offset": o}
            for f, last_seq, b, o in e.batches
        ]
        if as_json:
            fields = {**e._asdict(), "batches": batches}
            out.write(json.dumps({"producer_snapshot": str(path), **fields}) + "\n")
            continue
        last = e.batches[-1] if e.batches else (-1, -1, -1, -1)
        txn = e.txn_first_offset if e.txn_first_offset >= 0 else "None"
        out.write(
            f"producerId: {e.producer_id} producerEpoch: {e.epoch} "
            f"coordinatorEpoch: {e.coordinator_epoch} currentTxnFirstOffset: {txn} "
            f"firstSequence: {last[0]} lastSequence: {last[1]} lastOffset: {last[3]} "
            f"cachedBatches: {len(e.batches)}\n"
        )


def _dump_txn_index(path: Path, *, out: IO[str], as_json: bool) -> None:
    """The aborted transactions of a ``.txnindex`` file, as Kafka's tool lists them."""
    try:
        entries = decode_entries(path.read_bytes())
    except AbortedTxnFormatError as err:
        if as_json:
            out.write(json.dumps({"txn_index": str(path), "problem": str(err)}) + "\n")
        else:
            out.write(f"Dumping {path}\nCorrupt transaction index: {err}\n")
        return
    if not as_json:
        out.write(f"Dumping {path}\n")
    for txn in entries:
        if as_json:
            out.write(json.dumps({"txn_index": str(path), **txn._asdict()}) + "\n")
        else:
            out.write(
                f"version: 0 producerId: {txn.producer_id} firstOffset: {txn.first_offset} "
                f"lastOffset: {txn.last_offset} lastStableOffset: {txn.last_stable_offset}\n"
            )


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
    segment: Path,
    buf: bytes | memoryview,
    *,
    out: IO[str],
    as_json: bool,
    print_data: bool,
    decoder: str | None,
) -> None:
    scan = scan_batches(buf)
    for batch in scan:
        records = _records(buf, batch) if print_data else None
        control = batch.header.is_control
        if as_json:
            out.write(json.dumps(_batch_json(segment, batch, records, decoder)) + "\n")
        else:
            out.write(_batch_text(batch) + "\n")
            if isinstance(records, str):
                out.write(f"| records not decoded: {records}\n")
            elif records is not None:
                for record in records:
                    out.write(_record_text(record, control, decoder) + "\n")
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
    segment: Path,
    batch: ScannedBatch,
    records: list[Record] | str | None,
    decoder: str | None = None,
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
        "is_transactional": h.is_transactional,
        "is_control": h.is_control,
    }
    if batch.problem is not None:
        obj["problem"] = batch.problem
    if isinstance(records, str):
        obj["records_error"] = records
    elif records is not None:
        obj["records"] = [_record_json(r, h.is_control, decoder) for r in records]
    return obj


def _record_json(
    record: Record, control: bool = False, decoder: str | None = None
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": _show_bytes(record.key),
        "value": _show_bytes(record.value),
        "headers": [[k, _show_bytes(v)] for k, v in record.headers],
    }
    if control:
        obj["end_txn_marker"] = _marker(record)
    elif decoder is not None:
        obj["decoded"] = _decoded(record, decoder)
    return obj


def _marker(record: Record) -> dict[str, Any] | str:
    """A control record as the marker it holds, or why it holds none."""
    try:
        marker = decode_end_txn_marker(record)
    except ControlRecordError as err:
        return str(err)
    return {"type": marker.control_type.name, "coordinator_epoch": marker.coordinator_epoch}


def _decoded(record: Record, decoder: str) -> dict[str, Any]:
    """The record of an internal topic decoded: its key and value as Kafka's
    ``--offsets-decoder`` and ``--transaction-log-decoder`` print them (a null value is
    ``<DELETE>``), or the error that stopped the decoding."""
    try:
        if record.key is None:
            return {"error": "no key"}
        if decoder == "transactions":
            txn_id = decode_transaction_key(record.key)
            if record.value is None:
                return {
                    "key": f"transaction_metadata::transactionalId={txn_id}",
                    "value": "<DELETE>",
                }
            value = decode_transaction_value(record.value)
            return {
                "key": f"transaction_metadata::transactionalId={txn_id}",
                "value": (
                    f"producerId:{value.producer_id},producerEpoch:{value.producer_epoch},"
                    f"state={value.state.kafka_name},"
                    f"partitions=[{','.join(str(tp) for tp in sorted(value.partitions))}],"
                    f"txnLastUpdateTimestamp={value.last_update_timestamp_ms},"
                    f"txnTimeoutMs={value.transaction_timeout_ms}"
                ),
            }
        key = decode_key(record.key)
        if isinstance(key, GroupMetadataKey):
            shown = f"group_metadata::group={key.group}"
            if record.value is None:
                return {"key": shown, "value": "<DELETE>"}
            group = decode_group_metadata_value(record.value)
            members = ",".join(m.member_id for m in group.members)
            return {
                "key": shown,
                "value": (
                    f"protocolType:{group.protocol_type},generation:{group.generation},"
                    f"protocol:{group.protocol},leader:{group.leader},members:[{members}]"
                ),
            }
        shown = f"offset_commit::group={key.group},partition={key.topic}-{key.partition}"
        if record.value is None:
            return {"key": shown, "value": "<DELETE>"}
        offset = decode_offset_commit_value(record.value)
        return {
            "key": shown,
            "value": (
                f"offset={offset.offset},leaderEpoch={offset.leader_epoch},"
                f"metadata={offset.metadata},commitTimestamp={offset.commit_timestamp}"
            ),
        }
    except (GroupRecordError, TransactionRecordError) as err:
        return {"error": str(err)}


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
        f"compresscodec: {h.compression_name} crc: {h.crc} isvalid: {batch.problem is None} "
        f"isTransactional: {str(h.is_transactional).lower()} "
        f"isControl: {str(h.is_control).lower()}"
    )
    if batch.problem is not None:
        text += f" problem: {batch.problem}"
    return text


def _record_text(record: Record, control: bool = False, decoder: str | None = None) -> str:
    start = f"| offset: {record.offset} CreateTime: {record.timestamp} "
    if control:
        marker = _marker(record)
        if isinstance(marker, str):
            return start + f"endTxnMarker: not a marker ({marker})"
        return start + (
            f"endTxnMarker: {marker['type']} coordinatorEpoch: {marker['coordinator_epoch']}"
        )
    if decoder is not None:
        decoded = _decoded(record, decoder)
        if "error" in decoded:
            return start + f"not decoded: {decoded['error']}"
        return start + f"key: {decoded['key']} payload: {decoded['value']}"
    key = _show_bytes(record.key)
    value = _show_bytes(record.value)
    header_keys = [k for k, _ in record.headers]
    return start + f"key: {json.dumps(key)} payload: {json.dumps(value)} headerKeys: {header_keys}"
