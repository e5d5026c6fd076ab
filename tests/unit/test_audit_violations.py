"""From a run of violation items to a violation with a sentence a person can act on."""

from __future__ import annotations

import base64

import pytest

from chaos.audit.model import GROUP_KINDS, KINDS, PartitionSummary, ReplicaSummary
from chaos.audit.transactions import TRANSACTION_KINDS
from chaos.audit.violations import Finding, describe, show_value


def _shown(text: str, length: int | None = None) -> dict[str, object]:
    data = text.encode()
    return {"b64": base64.b64encode(data[:48]).decode(), "len": length or len(data)}


def _part() -> PartitionSummary:
    replicas = [
        ReplicaSummary(b, 0, 20, 20, 4, 20, [(0, 0), (1, 10)], [(0, 0), (2, 10)]) for b in (1, 2)
    ]
    return PartitionSummary("orders", 2, replicas, committed_end=20, log_start_offset=0)


def test_values_are_quoted_cut_and_null() -> None:
    assert show_value(_shown("m1")) == "'m1'"
    assert show_value(_shown("x" * 60)) == "'" + "x" * 40 + "...'"
    assert show_value(_shown("abc", length=500)) == "'abc...'"
    assert show_value({}) == "null"
    assert show_value(None) == "null"


FINDINGS = {
    "lost_ack": Finding(
        "lost_ack",
        (1, 2),
        20,
        24,
        5,
        key={"reason": "beyond_leo", "moved": False},
        first={"value": _shown("v20"), "line": 21},
        last={"value": _shown("v24")},
        t_min=1_700_000_000.0,
    ),
    "divergence": Finding(
        "divergence",
        (1, 2),
        10,
        10,
        1,
        first={
            "committed_end": 20,
            "versions": [
                {"broker": 1, "epoch": 0, "value": _shown("a")},
                {"broker": 2, "epoch": 1, "value": _shown("b")},
            ],
        },
    ),
    "duplicate": Finding(
        "duplicate",
        (1, 2),
        7,
        7,
        1,
        key={"copies": 2},
        first={"value": _shown("d"), "offsets": [7, 12]},
    ),
    "resent": Finding(
        "resent",
        (1, 2),
        7,
        7,
        1,
        key={"rule": "value", "copies": 2},
        first={"value": _shown("p1-941"), "offsets": [7, 12], "writers": [[1, 0, 156], [1, 1, 0]]},
    ),
    "gap": Finding(
        "gap",
        (2,),
        5,
        9,
        5,
        key={"what": "gap"},
        first={"segment": 10, "position": 0, "previous_end": 4, "base_offset": 10},
    ),
    "crc": Finding(
        "crc",
        (3,),
        10,
        14,
        5,
        key={"what": "crc"},
        first={"segment": 0, "position": 300, "problem": "CRC mismatch (stored 0x1, computed 0x2)"},
    ),
    "epoch_cache": Finding("epoch_cache", (1,), 10, 10, 2),
    "hw_above_leo": Finding("hw_above_leo", (2,), 20, 24, 5, first={"hw": 25, "leo": 20}),
    "phantom": Finding(
        "phantom",
        (1, 2),
        3,
        3,
        1,
        key={"reason": "failed"},
        first={"value": _shown("x"), "failed_line": 9},
    ),
    "inconsistent_read": Finding(
        "inconsistent_read",
        (1, 2),
        20,
        20,
        1,
        key={"reason": "beyond_leo", "process": 7, "moved": False},
        first={"value": _shown("v20"), "line": 88, "session": 2},
        last={"value": _shown("v20")},
        t_min=1_700_000_000.0,
    ),
    "nonmonotonic_poll": Finding(
        "nonmonotonic_poll",
        (1, 2),
        10,
        14,
        1,
        key={"what": "backwards", "process": 7, "session": 0},
        first={"previous": 14, "offset": 10, "previous_line": 40, "line": 41},
        last={"previous": 14, "offset": 10, "previous_line": 40, "line": 41},
        t_min=1_700_000_000.0,
    ),
    "poll_skip": Finding(
        "poll_skip",
        (1, 2),
        10,
        12,
        3,
        key={"process": 7, "session": 1},
        first={"previous": 9, "offset": 13, "previous_line": 50, "line": 51, "committed_end": 20},
        last={"previous": 9, "offset": 13, "previous_line": 50, "line": 51, "committed_end": 20},
        t_min=1_700_000_000.0,
    ),
    "compaction_lost_latest": Finding(
        "compaction_lost_latest",
        (2,),
        17,
        17,
        1,
        first={
            "key": _shown("k3"),
            "value": _shown("v17"),
            "line": 30,
            "older": 2,
            "held": 4,
            "acked": True,
        },
        t_min=1_700_000_000.0,
    ),
    "compaction_moved": Finding(
        "compaction_moved",
        (1,),
        12,
        12,
        1,
        first={"key": _shown("k1"), "value": _shown("v12"), "moved_to": 11},
    ),
    "tombstone_dropped_early": Finding(
        "tombstone_dropped_early",
        (3,),
        15,
        15,
        1,
        key={"reason": "stale"},
        first={"key": _shown("k2"), "line": 40, "visible": 6},
    ),
}

SAYS = {
    "compaction_lost_latest": "broker 2's replica of this compacted partition lacks the record at "
    "offset 17, key 'k3' = 'v17' (acknowledged, history line 30, 2023-11-14 22:13:20.000 UTC), "
    "acknowledged there, although it holds no later record of the key and no tombstone explains "
    "it (2 older records of the key gone too). Its latest record there is the older one at "
    "offset 4",
    "compaction_moved": "On broker 1, the record of offset 12, key 'k1' = 'v12', is at offset 11",
    "tombstone_dropped_early": "broker 3 dropped the tombstone at offset 15 (key 'k2', "
    "acknowledged, history line 40) while it still holds the key's older record at offset 6",
    "lost_ack": "5 records acknowledged at offsets 20..24 ('v20' .. 'v24') (history line 21, "
    "2023-11-14 22:13:20.000 UTC) are in no replica's log: every replica ends before them "
    "(broker 1 at 20, broker 2 at 20)",
    "divergence": "brokers 1 and 2 hold different records at offset 10, below the committed end "
    "20: at offset 10 broker 1 'a' (epoch 0), broker 2 'b' (epoch 1)",
    "duplicate": "'d' appears 2 times, at offsets 7 and 12, on brokers 1 and 2",
    "resent": "'p1-941' appears 2 times, at offsets 7 and 12, on brokers 1 and 2, written by "
    "two producer sessions (producer 1 epoch 0 sequence 156, producer 1 epoch 1 sequence 0)",
    "gap": "broker 2's log has no batch for offsets 5..9 (5 offsets): the batch before ends at 4 "
    "and the next (segment 00000000000000000010.log, position 0) starts at 10",
    "crc": "broker 3: the batch at offsets 10..14 (5 records) fails its CRC (at position "
    "300 of segment 00000000000000000000.log: CRC mismatch",
    "epoch_cache": "broker 1's leader-epoch-checkpoint contradicts its batches from offset 10: "
    "the file says [2@10], the batches' leader epochs say [0@0, 1@10]",
    "hw_above_leo": "broker 2's replication-offset-checkpoint says the high watermark is 25 but "
    "its log ends at 20",
    "phantom": "'x' at offset 3 is committed although the history says its write failed "
    "(history line 9)",
    "inconsistent_read": "process 7 read 'v20' at offset 20 (history line 88, consumer session 2, "
    "2023-11-14 22:13:20.000 UTC), but the log does not reach that offset: every replica ends "
    "before it (broker 1 at 20, broker 2 at 20)",
    "nonmonotonic_poll": "process 7 (consumer session 0) read offset 10 right after offset 14 "
    "(history lines 40 and 41, 2023-11-14 22:13:20.000 UTC): its position went back and it read "
    "offsets 10..14 again",
    "poll_skip": "process 7 (consumer session 1) read offset 13 right after offset 9 (history "
    "lines 50 and 51, 2023-11-14 22:13:20.000 UTC): it skipped 3 committed records at offsets "
    "10..12, which the log holds below the committed end 20",
}


@pytest.mark.parametrize(
    "kind", [k for k in KINDS if k not in TRANSACTION_KINDS and k not in GROUP_KINDS]
)
def test_every_kind_gets_its_sentence(kind: str) -> None:
    part = _part()
    part.replicas[0].checkpoint_epochs = [(2, 10)]
    violation = describe(FINDINGS[kind], part)
    assert (violation.kind, violation.topic, violation.partition) == (kind, "orders", 2)
    assert (violation.offset, violation.last_offset) == (FINDINGS[kind].start, FINDINGS[kind].end)
    assert violation.brokers == FINDINGS[kind].brokers
    assert SAYS[kind] in violation.detail
    assert violation.detail.endswith(".")


def test_a_lost_ack_replaced_by_a_newer_epoch_names_who_still_holds_it() -> None:
    finding = Finding(
        "lost_ack",
        (1, 2),
        1,
        1,
        1,
        key={"reason": "replaced", "still_held": [1], "moved": False, "held_epoch": 1},
        first={"value": _shown("m1"), "held": _shown("m2"), "line": 2},
        last={"value": _shown("m1")},
    )
    detail = describe(finding, _part()).detail
    assert (
        "'m1' acknowledged at offset 1 is not in the log: it holds 'm2' (leader epoch 1)" in detail
    )
    assert (
        "broker 1 still holds the acknowledged record there under an older leader epoch" in detail
    )


def test_a_lost_ack_in_a_partition_no_data_dir_holds_says_so() -> None:
    part = PartitionSummary("ghost", 4, [], committed_end=0, log_start_offset=0)
    finding = Finding(
        "lost_ack", (), 0, 0, 1, key={"reason": "beyond_leo"}, first={"value": _shown("g0")}
    )
    assert "no data dir given holds ghost-4" in describe(finding, part).detail


def _shown_bytes(data: bytes, length: int | None = None) -> dict[str, object]:
    return {"b64": base64.b64encode(data[:48]).decode(), "len": length or len(data)}


def test_audit_values_are_shown_safely_in_hex_or_escaped_and_cut() -> None:
    binary = bytes(range(255, 155, -1))  # not UTF-8, as `perf produce`'s random payload
    shown = show_value(_shown_bytes(binary))
    assert shown == "0x" + binary[:20].hex() + "... (100 bytes)"
    assert show_value(_shown_bytes(b"\xff\x00")) == "0xff00 (2 bytes)"
    escaped = show_value(_shown_bytes(b"ok\x1b[2J\x00\n"))
    assert escaped == "'ok\\x1b[2J\\x00\\n'"
    assert escaped.isprintable()
    # The first bytes of a long value may end inside a character: still text.
    cut = "é" * 40
    assert show_value(_shown_bytes(cut.encode()[:47] + b"", length=80)) == "'" + "é" * 23 + "...'"


def test_audit_duplicate_of_one_value_stored_a_thousand_times_lists_a_few_offsets() -> None:
    finding = Finding(
        "duplicate",
        (1,),
        0,
        0,
        1,
        key={"rule": "value", "copies": 100_000, "delta": 1},
        first={"value": _shown_bytes(bytes(100) + b"\xff"), "offsets": list(range(10))},
    )
    detail = describe(finding, _part()).detail
    assert "appears 100000 times, at offsets 0, 1, 2, 3, 4, ... (100000 in all)" in detail
    assert len(detail) < 500
    assert detail.isprintable()


def test_audit_duplicate_write_names_the_producer_and_its_sequences() -> None:
    one = Finding(
        "duplicate",
        (1, 2),
        7,
        7,
        1,
        key={"rule": "write", "copies": 2, "delta": 5, "producer_id": 4, "producer_epoch": 0},
        first={"value": _shown("v7"), "offsets": [7, 12], "sequence": 7},
    )
    assert describe(one, _part()).detail.startswith(
        "The write of producer 4 (epoch 0) with sequence 7 ('v7') is stored 2 times, at "
        "offsets 7 and 12, on brokers 1 and 2. The broker appended a retried batch again"
    )
    run = Finding(
        "duplicate",
        (1, 2),
        7,
        9,
        3,
        key={"rule": "write", "copies": 2, "delta": 5, "producer_id": 4, "producer_epoch": 0},
        first={"value": _shown("v7"), "offsets": [7, 12], "sequence": 7},
        last={"value": _shown("v9"), "offsets": [9, 14], "sequence": 9},
    )
    assert (
        "3 writes of producer 4 (epoch 0), sequences 7..9 ('v7' .. 'v9'), are stored 2 times: "
        "at offsets 7..9 and again 5 offsets later (first at 7 and 12)"
    ) in describe(run, _part()).detail


def test_an_inconsistent_read_of_a_replaced_record_names_both_values_and_the_old_copy() -> None:
    finding = Finding(
        "inconsistent_read",
        (1, 2),
        10,
        11,
        2,
        key={
            "reason": "replaced",
            "process": 3,
            "still_held": [1],
            "moved": True,
            "held_epoch": 4,
        },
        first={"value": _shown("s10"), "held": _shown("n10"), "line": 5, "moved_to": 12},
        last={"value": _shown("s11"), "held": _shown("n11"), "line": 6, "moved_to": 13},
    )
    detail = describe(finding, _part()).detail
    assert (
        "process 3 read 2 records at offsets 10..11 ('s10' .. 's11') (history line 5 first"
        in detail
    )
    assert "but the log holds 'n10' there from offset 10 (leader epoch 4)" in detail
    assert "broker 1 still holds what was read there under an older leader epoch" in detail
    assert "The value read is at offset 12 of the log instead (the first of the run)" in detail


def test_nonmonotonic_polls_repeated_once_or_backwards_several_times_say_so() -> None:
    repeat = Finding(
        "nonmonotonic_poll",
        (1,),
        7,
        7,
        1,
        key={"what": "repeated", "process": 2, "session": 5},
        first={"previous": 7, "offset": 7, "previous_line": 8, "line": 9},
    )
    assert "process 2 (consumer session 5) read offset 7 twice in a row (history lines 8 and 9" in (
        describe(repeat, _part()).detail
    )
    backwards = Finding(
        "nonmonotonic_poll",
        (1,),
        3,
        9,
        2,
        key={"what": "backwards", "process": 2, "session": 0},
        first={"previous": 9, "offset": 3, "previous_line": 8, "line": 9},
        last={"previous": 9, "offset": 5, "previous_line": 20, "line": 21},
    )
    assert (
        "process 2 (consumer session 0) went back 2 times over offsets 3..9, first reading "
        "offset 3 right after offset 9"
    ) in describe(backwards, _part()).detail


def test_an_inconsistent_read_of_one_offset_read_twice_says_how_many_times() -> None:
    finding = Finding(
        "inconsistent_read",
        (1, 2),
        20,
        20,
        2,
        key={"reason": "beyond_leo", "process": 7, "moved": False},
        first={"value": _shown("v20"), "line": 88, "session": 0},
        last={"value": _shown("v20"), "line": 95, "session": 1},
    )
    detail = describe(finding, _part()).detail
    assert "process 7 read 'v20' at offset 20 2 times (history line 88 first" in detail
    assert "every replica ends before it (broker 1 at 20" in detail
