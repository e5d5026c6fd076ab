"""The rate and throttle maths of client quotas, checked against Kafka's own numbers
(``ClientQuotaManagerTest``, ``RateTest``)."""

from __future__ import annotations

import pytest

from broker.quotas.rate import QuotaViolation, Rate, throttle_time_ms


def test_a_new_rate_is_measured_over_samples_minus_one_whole_windows() -> None:
    rate = Rate(samples=11, window_ms=1000)
    rate.record(500, now_ms=0)
    # 500 bytes at once are not 500 bytes a millisecond: at least 10 windows are counted.
    assert rate.window_size_ms(0) == 10_000
    assert rate.measure(0) == pytest.approx(50.0)


def test_the_window_grows_past_the_minimum_with_time() -> None:
    rate = Rate(samples=11, window_ms=1000)
    for second in range(12):
        rate.record(100, now_ms=second * 1000)
    # 11 samples kept: the oldest starts at 1 s; from there to 11.5 s is 10.5 s.
    assert rate.window_size_ms(11_500) == 10_500
    assert rate.measure(11_500) == pytest.approx(1100 / 10.5)


def test_windows_older_than_all_samples_are_reset() -> None:
    rate = Rate(samples=3, window_ms=1000)
    rate.record(1000, now_ms=0)
    assert rate.measure(2999) == pytest.approx(1000 / 2.999)
    assert rate.total(3000) == 0


def test_a_value_recorded_then_taken_back_leaves_the_rate_as_it_was() -> None:
    rate = Rate()
    rate.record(300, now_ms=0)
    rate.record(700, now_ms=10)
    rate.record(-700, now_ms=20)
    assert rate.total(20) == 300


def test_throttle_time_is_kafkas_formula() -> None:
    """X = (O - T) / T * W: Kafka's ClientQuotaManagerTest has a client at 400 bytes/s
    over 10 s with a quota of 500: after another 2300 bytes O = 630 (6300 over 10 s),
    so X = (630 - 500) / 500 * 10000 = 2600 ms."""
    rate = Rate(samples=11, window_ms=1000)
    for second in range(10):
        rate.record(400, now_ms=second * 1000)
    rate.record(2300, now_ms=9000)
    observed = rate.measure(9000)
    assert observed == pytest.approx(630.0)
    assert throttle_time_ms(QuotaViolation(observed, 500.0), rate, 9000) == 2600


def test_throttle_time_rounds_half_up() -> None:
    rate = Rate(samples=3, window_ms=1)
    rate.record(1, now_ms=0)
    # window 2 ms; (5 - 4) / 4 * 2 = 0.5 -> 1, as Java's Math.round (Python's round: 0)
    assert throttle_time_ms(QuotaViolation(5.0, 4.0), rate, 0) == 1


def test_a_rate_refuses_a_config_without_samples() -> None:
    with pytest.raises(ValueError, match="samples"):
        Rate(samples=0)
