"""The one structured-log format: ``<component> event=<name> key=value ...``."""

from __future__ import annotations

import logging

import pytest

from proto.process.event_log import capped, event_line, format_value, log_event
from proto.topic_partition import TopicPartition


def test_a_line_names_the_component_and_event_then_the_fields_in_order() -> None:
    line = event_line("controller", "elected", {"broker": 1, "epoch": 4, "isr": [1, 2]})
    assert line == "controller event=elected broker=1 epoch=4 isr=[1,2]"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (3, "3"),
        (None, "None"),
        ("plain", "plain"),
        ("two words", '"two words"'),
        ("a=b", '"a=b"'),
        ("", '""'),
        ('say "hi"', '"say \\"hi\\""'),
        ("line\nbreak", '"line\\nbreak"'),
        ([1, 2, 3], "[1,2,3]"),
        ((1, 2), "[1,2]"),
        ({3, 1}, "[1,3]"),
        (TopicPartition("orders", 2), "orders-2"),
        (ValueError("bad value"), '"bad value"'),
        (TimeoutError(), "TimeoutError"),
    ],
)
def test_every_value_is_one_token(value: object, text: str) -> None:
    assert format_value(value) == text


def test_log_event_carries_the_event_and_fields_and_formats_nothing_when_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("test_event_log")
    with caplog.at_level(logging.INFO, logger="test_event_log"):
        log_event(logger, logging.DEBUG, "x", "hidden", cost=object())
        log_event(logger, logging.WARNING, "replica_fetcher", "truncated", tp="t-0", to=5)
    [record] = caplog.records
    assert record.getMessage() == "replica_fetcher event=truncated tp=t-0 to=5"
    assert record.event == "truncated"  # type: ignore[attr-defined]
    assert record.event_fields == {"tp": "t-0", "to": 5}  # type: ignore[attr-defined]
    assert (
        record.funcName
        == "test_log_event_carries_the_event_and_fields_and_formats_nothing_when_off"
    )


def test_log_event_attaches_the_exception_being_handled(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test_event_log")
    with caplog.at_level(logging.ERROR, logger="test_event_log"):
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            log_event(logger, logging.ERROR, "controller", "event_failed", exc_info=True)
    [record] = caplog.records
    assert record.exc_info is not None
    assert record.exc_info[0] is RuntimeError


def test_a_long_list_is_capped_with_a_count_of_what_was_left_out() -> None:
    names = [f"t-{i}" for i in range(120)]
    assert capped(names[:50]) == names[:50]
    assert capped(names) == [*names[:50], "+70"]
    assert format_value(capped(names, limit=2)) == "[t-0,t-1,+118]"
