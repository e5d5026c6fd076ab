"""Client quotas on the Kafka listener: what Kafka 2.8's ``KafkaApis`` records for each
request and how it answers a client over its quota (KIP-13, KIP-124, KIP-219).

- Produce: the request's size goes to the produce byte rate; its request time to the
  request quota, except with ``acks=0`` (Kafka does not enforce that one there). Both
  are recorded when the request is read and appended, so the connection is muted before
  a pipelining producer's next request is read.
- Fetch: the request time, then the response's size to the fetch byte rate. A throttled
  fetch is answered empty (its bytes taken back from the rate), and a fetch's
  ``max_bytes`` never exceeds what the quota allows in a whole window
  (``getMaxValueInQuotaWindow``), so one response cannot throttle a consumer for long.
- Every other API: its request time.

The throttle time is the larger of the two (when both apply) and goes into the response's
``throttle_time_ms``; the response is sent at once, and the listener then reads nothing
more from that connection for that long (KIP-219's muted channel; see
:mod:`broker.kafka_listener.server`).

Request time is approximated as Kafka's request-handler time is measured: the time the
broker's event loop spends running the request's handler and its answer (decoding,
appending, reading the log, encoding), waits excluded (an acks=all wait for the ISR, a
fetch's long poll), as a percentage of one second per second.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Awaitable, Generator
from typing import Any

from broker.kafka_listener.messages import Tree
from broker.kafka_listener.request_codec import encode_response
from broker.kafka_listener.wire_request import KafkaRequest
from broker.quotas.client_quota_manager import (
    ANONYMOUS,
    NANOS_TO_PERCENTAGE_PER_SECOND,
    ClientQuotaManager,
    ClientQuotas,
)
from proto.zk.client_quota_configs import sanitize

__all__ = ["Throttler", "TimedAnswer"]

PRODUCE, FETCH = 0, 1
THROTTLE_TIME = "throttle_time"
"""kio's name of every response's ``ThrottleTimeMs`` (an int of milliseconds in a tree)."""


@functools.cache
def _user(principal: str) -> str:
    """The quota user of a connection's principal: its name, sanitized (Kafka's
    ``session.sanitizedUser``); ``ANONYMOUS`` on a listener that authenticates no one."""
    return sanitize(principal.removeprefix("User:") or ANONYMOUS)


class TimedAnswer:
    """Awaits an answer and counts the time its steps run on the event loop (``ns``), the
    time it waits for others excluded."""

    def __init__(self, answer: Awaitable[Tree | None]) -> None:
        self._answer = answer
        self.ns = 0

    def __await__(self) -> Generator[Any, Any, Tree | None]:
        steps = self._answer.__await__()
        value: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter_ns()
            try:
                yielded = steps.throw(error) if error is not None else steps.send(value)
            except StopIteration as stop:
                self.ns += time.perf_counter_ns() - started
                result: Tree | None = stop.value
                return result
            except BaseException:
                self.ns += time.perf_counter_ns() - started
                raise
            self.ns += time.perf_counter_ns() - started
            try:
                value, error = (yield yielded), None
            except BaseException as e:  # a cancellation, thrown into the answer
                value, error = None, e


class Throttler:
    """Records each request against the client quotas and makes its response frame."""

    def __init__(self, quotas: ClientQuotas) -> None:
        self.quotas = quotas

    @property
    def active(self) -> bool:
        """Whether any quota was defined since start-up (else nothing is recorded)."""
        return any(manager.quotas_enabled for manager in self.quotas.managers)

    def adjust(self, request: KafkaRequest) -> KafkaRequest:
        """A fetch's ``max_bytes`` capped by the client's fetch quota over a whole window."""
        if request.api_key != FETCH or not self.quotas.fetch.quotas_enabled:
            return request
        user = _user(request.principal)
        cap = self.quotas.fetch.max_value_in_window(user, request.client_id or "")
        max_bytes = getattr(request.body, "max_bytes", None)
        if max_bytes is None or cap >= max_bytes:
            return request
        body = dataclasses.replace(request.body, max_bytes=max(int(cap), 1))
        return dataclasses.replace(request, body=body)

    def on_stage(self, request: KafkaRequest, request_size: int, stage_ns: int) -> int:
        """A Produce's throttle time, known once its stage has run (its bytes and the
        append are the work, the answer only waits for the acks): recorded now, so that
        the connection is muted before the client's next pipelined request is read, as
        Kafka's one-request-at-a-time channel would be. 0 for other APIs (their answer
        is :meth:`respond`'s to record)."""
        if request.api_key != PRODUCE:
            return 0
        client_id = request.client_id or ""
        user = _user(request.principal)
        quotas = self.quotas
        bandwidth = quotas.produce.record(user, client_id, request_size)
        acks = getattr(request.body, "acks", 1)
        share = stage_ns * NANOS_TO_PERCENTAGE_PER_SECOND
        timing = 0 if acks == 0 else quotas.request.record(user, client_id, share)
        return self._throttle(user, client_id, (quotas.produce, bandwidth), timing)

    def respond(
        self,
        request: KafkaRequest,
        schema: type[Any],
        tree: Tree | None,
        handler_ns: int,
        staged_throttle_ms: int,
    ) -> tuple[bytes | None, int]:
        """The response frame (None for an ``acks=0`` produce) and how long to mute the
        connection after it, 0 if not at all. ``staged_throttle_ms`` is what
        :meth:`on_stage` decided."""
        client_id = request.client_id or ""
        user = _user(request.principal)
        quotas = self.quotas
        share = handler_ns * NANOS_TO_PERCENTAGE_PER_SECOND
        if request.api_key == PRODUCE:
            throttle = staged_throttle_ms
        elif request.api_key == FETCH and tree is not None:
            timing = quotas.request.record(user, client_id, share)
            frame = encode_response(schema, request.correlation_id, tree)
            size = len(frame) - 4
            bandwidth = quotas.fetch.record(user, client_id, size)
            throttle = self._throttle(user, client_id, (quotas.fetch, bandwidth), timing)
            if throttle <= 0:
                return frame, 0
            quotas.fetch.unrecord(user, client_id, size)
            tree = {
                "error_code": 0,
                "session_id": tree.get("session_id", 0),
                "responses": [],
            }
        else:
            timing = quotas.request.record(user, client_id, share)
            throttle = self._throttle(user, client_id, None, timing)
        if tree is None:
            return None, throttle
        if throttle > 0:
            tree = {**tree, THROTTLE_TIME: throttle}
        return encode_response(schema, request.correlation_id, tree), throttle

    def _throttle(
        self,
        user: str,
        client_id: str,
        bandwidth: tuple[ClientQuotaManager, int] | None,
        timing: int,
    ) -> int:
        """The larger throttle time, counted in its manager's ``throttle-time``."""
        if bandwidth is not None and bandwidth[1] > timing:
            bandwidth[0].throttled(user, client_id, bandwidth[1])
            return bandwidth[1]
        self.quotas.request.throttled(user, client_id, timing)
        return timing
