"""Client quota resolution (KIP-55's order) and throttling, as Kafka's
``ClientQuotaManagerTest`` and ``ClientRequestQuotaManagerTest`` check them."""

from __future__ import annotations

import math

import pytest

from broker.quotas.client_quota_manager import ClientQuotaManager, ClientQuotas, QuotaType
from proto.zk.client_quota_configs import DEFAULT_ENTITY as D
from proto.zk.client_quota_configs import QuotaEntity


class Clock:
    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> int:
        return self.ms


LEVELS = [
    (QuotaEntity("u", "c"), 1.0),
    (QuotaEntity("u", D), 2.0),
    (QuotaEntity("u", None), 3.0),
    (QuotaEntity(D, "c"), 4.0),
    (QuotaEntity(D, D), 5.0),
    (QuotaEntity(D, None), 6.0),
    (QuotaEntity(None, "c"), 7.0),
    (QuotaEntity(None, D), 8.0),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_the_most_specific_quota_defined_wins_in_kip_55_order(level: int) -> None:
    manager = ClientQuotaManager(QuotaType.PRODUCE)
    for entity, bound in LEVELS[level:]:
        manager.update_quota(entity, bound)
    assert manager.quota("u", "c") == LEVELS[level][1]


def test_clients_sharing_a_user_quota_share_one_rate() -> None:
    manager = ClientQuotaManager(QuotaType.PRODUCE)
    manager.update_quota(QuotaEntity("u", None), 100.0)
    manager.update_quota(QuotaEntity(None, "c1"), 1000.0)  # two levels: the full walk
    assert manager.quota_id("u", "c1") == ("u", "")
    assert manager.quota_id("u", "c2") == ("u", "")
    assert manager.quota_id("v", "c1") == ("", "c1")
    assert manager.quota("v", "c2") is None


def test_removing_a_quota_falls_back_to_the_next_level() -> None:
    manager = ClientQuotaManager(QuotaType.FETCH)
    manager.update_quota(QuotaEntity(None, "c"), 10.0)
    manager.update_quota(QuotaEntity(None, D), 20.0)
    assert manager.quota("ANONYMOUS", "c") == 10.0
    manager.update_quota(QuotaEntity(None, "c"), None)
    assert manager.quota("ANONYMOUS", "c") == 20.0


def test_nothing_is_recorded_before_any_quota_is_defined() -> None:
    clock = Clock()
    manager = ClientQuotaManager(QuotaType.PRODUCE, clock_ms=clock)
    assert not manager.quotas_enabled
    assert manager.record("u", "c", 10**9) == 0
    assert list(manager.metrics()) == []
    assert manager.max_value_in_window("u", "c") == math.inf


def test_a_client_over_its_byte_rate_is_throttled_as_kafka_does() -> None:
    """Kafka's ClientQuotaManagerTest.testQuotaViolation: 400 bytes/s for 10 s under a
    quota of 500 is not throttled; 2300 more bytes give (630 - 500) / 500 * 10 s."""
    clock = Clock()
    manager = ClientQuotaManager(QuotaType.PRODUCE, clock_ms=clock)
    manager.update_quota(QuotaEntity(None, "unknown"), 500.0)
    for _ in range(10):
        assert manager.record("ANONYMOUS", "unknown", 400) == 0
        clock.ms += 1000
    clock.ms -= 1000
    assert manager.record("ANONYMOUS", "unknown", 2300) == 2600
    manager.throttled("ANONYMOUS", "unknown", 2600)
    [(quota_id, rate, throttle)] = list(manager.metrics())
    assert quota_id == ("", "unknown")
    assert rate == pytest.approx(630.0)
    assert throttle == 2600


def test_a_request_time_throttle_is_capped_at_one_window() -> None:
    clock = Clock()
    manager = ClientQuotaManager(QuotaType.REQUEST, clock_ms=clock)
    manager.update_quota(QuotaEntity(None, D), 1.0)
    # 1 s of handler time is 100 % of a second: far over a 1 % quota
    assert manager.record("ANONYMOUS", "c", 100.0) == 1000


def test_a_fetch_taken_back_does_not_count() -> None:
    clock = Clock()
    manager = ClientQuotaManager(QuotaType.FETCH, clock_ms=clock)
    manager.update_quota(QuotaEntity(None, "c"), 100.0)
    assert manager.record("ANONYMOUS", "c", 5000) > 0
    manager.unrecord("ANONYMOUS", "c", 5000)
    assert manager.record("ANONYMOUS", "c", 500) == 0


def test_max_value_in_window_is_the_quota_over_whole_windows() -> None:
    manager = ClientQuotaManager(QuotaType.FETCH, samples=11, window_ms=1000)
    manager.update_quota(QuotaEntity(None, "c"), 100.0)
    assert manager.max_value_in_window("ANONYMOUS", "c") == 1000.0


def test_client_quotas_apply_an_entitys_three_quotas_and_remove_the_missing_ones() -> None:
    quotas = ClientQuotas()
    entity = QuotaEntity(None, "c")
    quotas.update(entity, {"producer_byte_rate": "1024", "request_percentage": "50.5"})
    assert quotas.produce.quota("ANONYMOUS", "c") == 1024.0
    assert quotas.request.quota("ANONYMOUS", "c") == 50.5
    assert quotas.fetch.quota("ANONYMOUS", "c") is None
    quotas.update(entity, {"consumer_byte_rate": "10"})
    assert quotas.produce.quota("ANONYMOUS", "c") is None
    assert quotas.fetch.quota("ANONYMOUS", "c") == 10.0


@pytest.mark.parametrize("bad", ["ten", "-1", "0", "nan", "inf"])
def test_a_hand_written_bad_quota_leaves_the_entity_as_it_was(bad: str) -> None:
    quotas = ClientQuotas()
    entity = QuotaEntity(None, "c")
    quotas.update(entity, {"producer_byte_rate": "1024"})
    quotas.update(entity, {"producer_byte_rate": "2048", "consumer_byte_rate": bad})
    assert quotas.produce.quota("ANONYMOUS", "c") == 1024.0
    assert quotas.fetch.quota("ANONYMOUS", "c") is None


def test_metrics_are_named_as_kafkas_jmx_exporter_names_them() -> None:
    clock = Clock()
    quotas = ClientQuotas(clock_ms=clock)
    quotas.update(QuotaEntity(None, "c"), {"producer_byte_rate": "100"})
    quotas.produce.record("ANONYMOUS", "c", 50)
    names = {family.name: family for family in quotas.collect()}
    assert set(names) == {
        "kafka_server_produce_byte_rate",
        "kafka_server_produce_throttle_time",
        "kafka_server_fetch_byte_rate",
        "kafka_server_fetch_throttle_time",
        "kafka_server_request_request_time",
        "kafka_server_request_throttle_time",
    }
    [sample] = names["kafka_server_produce_byte_rate"].samples
    assert sample.labels == {"user": "", "client_id": "c"}
    assert sample.value == pytest.approx(5.0)
