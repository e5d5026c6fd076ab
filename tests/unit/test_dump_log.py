"""`minibroker dump-log` reports batches, bad CRCs and torn tails without raising."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from broker.log.log import Log
from client.cli.main import main
from proto.config.log_config import LogConfig
from proto.records.compression import codec_named
from proto.records.record_batch import Record, encode_batch


def _write_log(directory: Path, batches: int = 3) -> Log:
    log = Log.open(directory, LogConfig())
    for i in range(batches):
        records = [
            Record(key=f"k{i}".encode(), value=f"value-{i}-{j}".encode(), timestamp=1000 + j)
            for j in range(2)
        ]
        log.append_as_leader(encode_batch(records), leader_epoch=i // 2)
    log.flush()
    return log


def _dump_json(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict[str, Any]]:
    assert main(["dump-log", str(path), "--json", *extra]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_json_lists_every_batch_with_design_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _write_log(tmp_path / "orders-0")
    segment = log.segments[0].log_path
    log.close()
    lines = _dump_json(segment, capsys)
    assert [(b["base_offset"], b["last_offset"], b["leader_epoch"], b["count"]) for b in lines] == [
        (0, 1, 0, 2),
        (2, 3, 0, 2),
        (4, 5, 1, 2),
    ]
    assert all(b["crc_valid"] for b in lines)
    assert lines[0]["position"] == 0
    assert lines[1]["position"] == lines[0]["size"]
    assert "records" not in lines[0]


def test_print_data_shows_records_as_text_or_base64(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    batch = encode_batch(
        [
            Record(key=None, value=b"hello", timestamp=5, headers=(("h", b"v"),)),
            Record(key=b"\xff\xfe", value=None, timestamp=6),
        ]
    )
    log.append_as_leader(batch, leader_epoch=3)
    log.close()
    (line,) = _dump_json(tmp_path / "t-0", capsys, "--print-data")
    assert line["records"] == [
        {"offset": 0, "timestamp": 5, "key": None, "value": "hello", "headers": [["h", "v"]]},
        {"offset": 1, "timestamp": 6, "key": {"base64": "//4="}, "value": None, "headers": []},
    ]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_a_compressed_batch_shows_its_codec_and_its_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], codec: str
) -> None:
    segment = tmp_path / "c-0" / "00000000000000000000.log"
    segment.parent.mkdir()
    records = [Record(key=b"k", value=f"value {i}".encode() * 20, timestamp=i) for i in range(50)]
    segment.write_bytes(encode_batch(records, compression=codec_named(codec)))
    (line,) = _dump_json(segment, capsys, "--print-data")
    assert line["compression"] == codec
    assert line["count"] == 50
    assert [r["value"] for r in line["records"]] == [f"value {i}" * 20 for i in range(50)]
    assert [r["offset"] for r in line["records"]] == list(range(50))


def test_bad_crc_is_reported_and_the_walk_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _write_log(tmp_path / "p-0")
    segment = log.segments[0].log_path
    log.close()
    first = _dump_json(segment, capsys)
    data = bytearray(segment.read_bytes())
    data[first[1]["position"] + 70] ^= 0xFF  # a byte inside batch 2's records
    segment.write_bytes(bytes(data))
    lines = _dump_json(segment, capsys, "--print-data")
    assert [b["crc_valid"] for b in lines] == [True, False, True]
    assert lines[1]["records_error"] == "CRC mismatch"
    assert "CRC" in lines[1]["problem"]


def test_torn_tail_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _write_log(tmp_path / "p-0")
    segment = log.segments[0].log_path
    log.close()
    size = segment.stat().st_size
    with segment.open("r+b") as f:
        f.truncate(size - 10)
    lines = _dump_json(segment, capsys)
    assert [b.get("base_offset") for b in lines[:2]] == [0, 2]
    tail = lines[2]
    assert tail["torn_tail"] is True
    assert tail["position"] == lines[1]["position"] + lines[1]["size"]
    assert tail["remaining_bytes"] == size - 10 - tail["position"]


def test_text_output_of_a_partition_directory_covers_every_segment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = Log.open(tmp_path / "p-0", LogConfig(segment_bytes=200))
    for i in range(4):
        log.append_as_leader(encode_batch([Record(None, b"x" * 60, timestamp=i)]), leader_epoch=0)
    log.close()
    assert main(["dump-log", str(tmp_path / "p-0"), "--print-data"]) == 0
    out = capsys.readouterr().out
    segments = list((tmp_path / "p-0").glob("*.log"))
    snapshots = list((tmp_path / "p-0").glob("*.snapshot"))  # one at each roll, the last two
    assert len(segments) > 1
    assert len(snapshots) == 2
    assert out.count("Dumping ") == len(segments) + len(snapshots)
    assert out.count("baseOffset: ") == 4
    assert 'payload: "xxxx' in out


def test_missing_path_is_one_line_and_exit_1(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "client.cli", "dump-log", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert (
        proc.stderr.strip()
        == f"minibroker dump-log: no such file or directory: {tmp_path / 'nope'}"
    )
    assert "Traceback" not in proc.stderr


def _transactional_log(directory: Path) -> Log:
    """Producer 7 writes two records and aborts; what a follower's log holds after that."""
    from proto.records.control_records import ControlType, EndTxnMarker, encode_marker_batch
    from proto.records.record_batch import TRANSACTIONAL_FLAG_MASK

    log = Log.open(directory, LogConfig())
    data = encode_batch(
        [Record(b"k", b"v", 1000), Record(b"k", b"w", 1001)],
        producer_id=7,
        producer_epoch=1,
        base_sequence=0,
        flags=TRANSACTIONAL_FLAG_MASK,
    )
    log.append_as_follower(data)
    marker = encode_marker_batch(
        EndTxnMarker(ControlType.ABORT, 3), producer_id=7, producer_epoch=1, timestamp=1002
    )
    log.append_as_follower((2).to_bytes(8, "big") + marker[8:])
    log.flush()
    return log


def test_control_batches_markers_and_the_transaction_index_are_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _transactional_log(tmp_path / "t-0").close()
    dumped = _dump_json(tmp_path / "t-0", capsys, "--print-data")
    data, marker, aborted = dumped
    assert (data["is_transactional"], data["is_control"]) == (True, False)
    assert (marker["is_transactional"], marker["is_control"]) == (True, True)
    assert marker["records"][0]["end_txn_marker"] == {"type": "ABORT", "coordinator_epoch": 3}
    assert aborted["txn_index"].endswith("00000000000000000000.txnindex")
    expected = {"producer_id": 7, "first_offset": 0, "last_offset": 2, "last_stable_offset": 3}
    assert {k: aborted[k] for k in expected} == expected
    # As text, as Kafka's tool prints them; and the index file alone.
    assert main(["dump-log", str(tmp_path / "t-0"), "--print-data"]) == 0
    text = capsys.readouterr().out
    assert "isTransactional: true isControl: true" in text
    assert "endTxnMarker: ABORT coordinatorEpoch: 3" in text
    assert "producerId: 7 firstOffset: 0 lastOffset: 2 lastStableOffset: 3" in text
    index = tmp_path / "t-0" / "00000000000000000000.txnindex"
    assert main(["dump-log", str(index)]) == 0
    assert "lastStableOffset: 3" in capsys.readouterr().out
    index.write_bytes(b"\x00" * 5)
    assert main(["dump-log", str(index)]) == 0
    assert "Corrupt transaction index: size 5" in capsys.readouterr().out


def test_a_producer_snapshot_is_shown_producer_by_producer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _transactional_log(tmp_path / "t-0")
    log.snapshot_producer_state()  # as a clean shutdown writes it, at the log end (3)
    log.close()
    snapshot = tmp_path / "t-0" / "00000000000000000003.snapshot"
    dumped = _dump_json(snapshot, capsys)
    assert dumped == [
        {
            "producer_snapshot": str(snapshot),
            "producer_id": 7,
            "epoch": 1,
            "coordinator_epoch": 3,
            "txn_first_offset": -1,
            "batches": [
                {"first_sequence": 0, "last_sequence": 1, "base_offset": 0, "last_offset": 1}
            ],
        }
    ]
    assert main(["dump-log", str(tmp_path / "t-0")]) == 0
    text = capsys.readouterr().out
    assert "lastMarkerOffset: 2" in text
    assert "producerId: 7 producerEpoch: 1 coordinatorEpoch: 3 currentTxnFirstOffset: None" in text
    snapshot.write_bytes(b"\x00\x01torn")
    assert main(["dump-log", str(snapshot)]) == 0
    assert "Corrupt producer snapshot" in capsys.readouterr().out


def test_the_offsets_and_transaction_log_decoders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from proto.coordinator.group_records import (
        OffsetCommitKey,
        OffsetCommitValue,
        encode_offset_commit_key,
        encode_offset_commit_value,
    )
    from proto.coordinator.transaction_records import (
        TransactionLogValue,
        TransactionState,
        encode_transaction_key,
        encode_transaction_value,
    )
    from proto.topic_partition import TopicPartition

    offsets = Log.open(tmp_path / "__consumer_offsets-0", LogConfig())
    key = encode_offset_commit_key(OffsetCommitKey("billing", "orders", 2))
    value = encode_offset_commit_value(OffsetCommitValue(42, 5, "meta", 1700))
    offsets.append_as_leader(encode_batch([Record(key, value, 1), Record(key, None, 2)]), 0)
    offsets.close()
    [batch] = _dump_json(tmp_path / "__consumer_offsets-0", capsys, "--offsets-decoder")
    assert batch["records"][0]["decoded"] == {
        "key": "offset_commit::group=billing,partition=orders-2",
        "value": "offset=42,leaderEpoch=5,metadata=meta,commitTimestamp=1700",
    }
    assert batch["records"][1]["decoded"]["value"] == "<DELETE>"
    txns = Log.open(tmp_path / "__transaction_state-0", LogConfig())
    state = TransactionLogValue(
        9, 2, 60000, TransactionState.ONGOING, frozenset({TopicPartition("t", 0)}), 5, 4
    )
    txn_record = Record(encode_transaction_key("app-1"), encode_transaction_value(state), 1)
    txns.append_as_leader(encode_batch([txn_record, Record(b"\x00\x09", b"x", 2)]), 0)
    txns.close()
    assert (
        main(["dump-log", str(tmp_path / "__transaction_state-0"), "--transaction-log-decoder"])
        == 0
    )
    text = capsys.readouterr().out
    assert (
        "key: transaction_metadata::transactionalId=app-1 payload: producerId:9,producerEpoch:2,"
        "state=Ongoing,partitions=[t-0],txnLastUpdateTimestamp=5,txnTimeoutMs=60000"
    ) in text
    assert "not decoded: __transaction_state key" in text  # garbage is reported, not raised
