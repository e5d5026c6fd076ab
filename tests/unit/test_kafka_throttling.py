"""What the Kafka listener records for each request and how it answers a client over its
quota (``broker.kafka_listener.throttling``): Kafka 2.8's ``KafkaApis`` choices."""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any

from kio.schema.fetch.v12 import request as fetch_request
from kio.schema.fetch.v12 import response as fetch_response
from kio.schema.produce.v9 import response as produce_response
from kio.schema.types import BrokerId
from kio.serial import entity_reader
from kio.static.primitive import i8, i32, i32Timedelta

from broker.kafka_listener.throttling import Throttler, TimedAnswer
from broker.kafka_listener.wire_request import KafkaRequest
from broker.quotas.client_quota_manager import ClientQuotas
from proto.zk.client_quota_configs import QuotaEntity


def _decode(schema: type[Any], frame: bytes) -> Any:
    frame = frame[4:]  # the size
    _, header_size = entity_reader(schema.__header_schema__)(frame, 0)
    body, _ = entity_reader(schema)(frame, header_size)
    return body


def _request(api_key: int, body: Any = None, client_id: str = "c") -> KafkaRequest:
    return KafkaRequest(api_key, 12, 7, client_id, body)


def test_a_timed_answer_counts_its_own_steps_not_its_waits() -> None:
    async def answer() -> dict[str, int]:
        busy_until = time.perf_counter() + 0.02
        while time.perf_counter() < busy_until:  # work on the loop
            pass
        await asyncio.sleep(0.2)  # a wait (an acks=all wait, a long poll)
        return {"x": 1}

    async def main() -> tuple[object, int]:
        timed = TimedAnswer(answer())
        return await timed, timed.ns

    tree, ns = asyncio.run(main())
    assert tree == {"x": 1}
    assert 15_000_000 <= ns < 150_000_000


def test_without_quotas_nothing_is_recorded() -> None:
    quotas = ClientQuotas()
    throttler = Throttler(quotas)
    assert not throttler.active
    assert throttler.on_stage(_request(0), 10**9, 10**9) == 0


def test_a_throttled_fetch_is_answered_empty_and_its_bytes_taken_back() -> None:
    quotas = ClientQuotas(samples=2, window_ms=1000)
    quotas.update(QuotaEntity(None, "c"), {"consumer_byte_rate": "100"})
    throttler = Throttler(quotas)
    request = _request(1)  # its body is not read when answering
    tree = {
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                "topic": "t",
                "partitions": [{"partition_index": 0, "high_watermark": 5, "records": b"r" * 5000}],
            }
        ],
    }
    frame, throttle = throttler.respond(request, fetch_response.FetchResponse, tree, 0, 0)
    assert frame is not None
    assert throttle > 0
    answer = _decode(fetch_response.FetchResponse, frame)
    assert answer.responses == ()
    assert answer.throttle_time.total_seconds() * 1000 == throttle
    # taken back: a small fetch right after is within the quota
    small = {"error_code": 0, "session_id": 0, "responses": []}
    frame, throttle = throttler.respond(request, fetch_response.FetchResponse, small, 0, 0)
    assert throttle == 0


def test_a_fetch_asks_for_no_more_than_the_quota_allows_in_a_window() -> None:
    quotas = ClientQuotas(samples=11, window_ms=1000)
    quotas.update(QuotaEntity(None, "c"), {"consumer_byte_rate": "100"})
    body = fetch_request.FetchRequest(
        replica_id=BrokerId(-1),
        max_wait=i32Timedelta.parse(datetime.timedelta(0)),
        min_bytes=i32(1),
        max_bytes=i32(1 << 20),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(),
        forgotten_topics_data=(),
        rack_id="",
    )
    adjusted = Throttler(quotas).adjust(_request(1, body))
    assert adjusted.body.max_bytes == 1000


def test_a_produce_throttle_is_decided_when_it_is_staged() -> None:
    # A clock that stands still: the rate's window is measured up to "now", so a
    # millisecond between the two stages would change the throttle by one.
    quotas = ClientQuotas(samples=2, window_ms=1000, clock_ms=lambda: 1_000_000)
    quotas.update(QuotaEntity(None, "c"), {"producer_byte_rate": "1000"})
    throttler = Throttler(quotas)

    class Body:
        acks = 1

    request = _request(0, Body())
    assert throttler.on_stage(request, 500, 0) == 0
    staged = throttler.on_stage(request, 5000, 0)
    assert staged == 4500  # (5500 - 1000) / 1000 * 1 s
    frame, throttle = throttler.respond(
        request, produce_response.ProduceResponse, {"responses": []}, 0, staged
    )
    assert throttle == staged
    assert frame is not None
    answer = _decode(produce_response.ProduceResponse, frame)
    assert answer.throttle_time.total_seconds() * 1000 == staged


def test_an_authenticated_connection_is_measured_as_its_principal_s_user() -> None:
    quotas = ClientQuotas(samples=2, window_ms=1000)
    quotas.update(QuotaEntity("alice", None), {"producer_byte_rate": "100"})
    throttler = Throttler(quotas)
    alice = KafkaRequest(0, 9, 7, "c", None, principal="User:alice")
    anonymous = KafkaRequest(0, 9, 7, "c", None)
    assert throttler.on_stage(anonymous, 10_000, 0) == 0
    assert throttler.on_stage(alice, 10_000, 0) > 0
