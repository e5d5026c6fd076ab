"""From a run of violation items to a violation with a sentence a person can act on."""

from __future__ import annotations

import base64

import pytest

from chaos.audit.model import KINDS, PartitionSummary, ReplicaSummary
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
}

SAYS = {
    "lost_ack": "5 records acknowledged at offsets 20..24 ('v20' .. 'v24') (history line 21, "
    "2023-11-14 22:13:20.000 UTC) are in no replica's log: every replica ends before them "
    "(broker 1 at 20, broker 2 at 20)",
    "divergence": "brokers 1 and 2 hold different records at offset 10, below the committed end "
    "20: at offset 10 broker 1 'a' (epoch 0), broker 2 'b' (epoch 1)",
    "duplicate": "'d' appears 2 times, at offsets 7 and 12, on brokers 1 and 2",
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
}


@pytest.mark.parametrize("kind", KINDS)
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
