"""Client quotas on a broker: Kafka 2.8's ``ClientQuotaManager`` (produce and fetch byte
rates, KIP-13), ``ClientRequestQuotaManager`` (request time, KIP-124) and their default
quota callback (the resolution order of KIP-55).

Each manager keeps, per *quota id*, a :class:`~broker.quotas.rate.Rate` of what the
clients of that id did, and the quota that applies. The quota id is the level at which a
client's quota is defined, so that every client sharing one quota shares one rate: a user
quota set for ``alice`` is one rate for all of alice's client ids. The most specific quota
defined wins, in this order (KIP-55)::

    1. /config/users/<user>/clients/<client-id>
    2. /config/users/<user>/clients/<default>
    3. /config/users/<user>
    4. /config/users/<default>/clients/<client-id>
    5. /config/users/<default>/clients/<default>
    6. /config/users/<default>
    7. /config/clients/<client-id>
    8. /config/clients/<default>

Recording a value checks the rate against its quota after adding it (Kafka's
``Sensor.record``): a client over its quota gets a throttle time
(:func:`~broker.quotas.rate.throttle_time_ms`; a request-time throttle is capped at one
window, as Kafka caps it), and the listener mutes its connection for that long after the
answer (KIP-219). No quota anywhere: nothing is recorded (Kafka's ``quotasEnabled``).

The Kafka listener has no authentication, so every client there is the user
``ANONYMOUS`` (Kafka's principal of an unauthenticated PLAINTEXT connection): user quotas
apply through ``<default>`` and ``ANONYMOUS``. Everything runs on the broker's event loop.
"""

from __future__ import annotations

import enum
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.quotas.rate import QuotaViolation, Rate, throttle_time_ms
from proto.process.event_log import log_event
from proto.zk.client_quota_admin import read_all_quota_entities, read_quota_entity
from proto.zk.client_quota_configs import (
    CONSUMER_BYTE_RATE,
    DEFAULT_ENTITY,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaEntity,
)
from proto.zk.session import ZooKeeperClient

__all__ = [
    "ANONYMOUS",
    "ClientQuotaManager",
    "ClientQuotas",
    "QuotaType",
]

log = logging.getLogger(__name__)

ANONYMOUS = "ANONYMOUS"
"""The user of an unauthenticated connection (Kafka's ``KafkaPrincipal.ANONYMOUS``); an
authenticated one's is its principal's name (``alice`` for ``User:alice``)."""
INACTIVE_SENSOR_EXPIRATION_MS = 3600 * 1000
"""A quota id not recorded for this long is forgotten (Kafka's
``InactiveSensorExpirationTimeSeconds``)."""
_THROTTLE_TIME_SAMPLES, _THROTTLE_TIME_WINDOW_MS = 2, 30_000
"""Kafka's default ``MetricConfig``, over which the ``throttle-time`` average is kept."""
NANOS_TO_PERCENTAGE_PER_SECOND = 100.0 / 1e9


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class QuotaType(enum.Enum):
    """What a manager measures: its metric group (Kafka's ``QuotaType``) and config key."""

    PRODUCE = ("Produce", PRODUCER_BYTE_RATE, "byte-rate")
    FETCH = ("Fetch", CONSUMER_BYTE_RATE, "byte-rate")
    REQUEST = ("Request", REQUEST_PERCENTAGE, "request-time")

    def __init__(self, group: str, config_key: str, metric: str) -> None:
        self.group = group
        self.config_key = config_key
        self.metric = metric


_CLIENT_ID, _USER, _USER_CLIENT_ID = 1, 2, 4
"""Kafka's ``QuotaTypes``: the levels at which quotas have been defined since start-up."""


@dataclass(slots=True)
class _Sensors:
    """One quota id's rate and throttle times (Kafka's ``ClientSensors``)."""

    rate: Rate
    throttle_times: Rate = field(
        default_factory=lambda: Rate(_THROTTLE_TIME_SAMPLES, _THROTTLE_TIME_WINDOW_MS)
    )
    last_record_ms: int = 0


class ClientQuotaManager:
    """One kind of quota (see the module docstring). ``user`` arguments are sanitized user
    names, as the quota ids and znodes hold them; client ids are as the client sent them."""

    def __init__(
        self,
        quota_type: QuotaType,
        *,
        samples: int = 11,
        window_ms: int = 1000,
        clock_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self.quota_type = quota_type
        self.samples = samples
        self.window_ms = window_ms
        self._clock_ms = clock_ms
        self._quotas: dict[QuotaEntity, float] = {}
        """The quotas defined, by entity (Kafka's ``overriddenQuotas``)."""
        self._levels = 0
        self._sensors: dict[tuple[str, str], _Sensors] = {}
        self._next_purge_ms = 0
        self.max_throttle_ms = window_ms if quota_type is QuotaType.REQUEST else None
        """Kafka caps a request-time throttle at one window (``ClientRequestQuotaManager``)."""

    @property
    def quotas_enabled(self) -> bool:
        """Whether any quota of this kind was ever defined since start-up (Kafka's
        ``quotasEnabled``: it stays true once set, until a restart)."""
        return self._levels != 0

    def update_quota(self, entity: QuotaEntity, bound: float | None) -> None:
        """Define (or, with None, remove) the entity's quota (Kafka's ``updateQuota``)."""
        if entity.user is not None:
            self._levels |= _USER_CLIENT_ID if entity.client_id is not None else _USER
        else:
            self._levels |= _CLIENT_ID
        if bound is None:
            self._quotas.pop(entity, None)
        else:
            self._quotas[entity] = bound

    def quota_id(self, user: str, client_id: str) -> tuple[str, str]:
        """The (user, client id) tags of the rate this client is measured by, ``""`` for a
        part its quota does not depend on (Kafka's ``DefaultQuotaCallback.quotaMetricTags``)."""
        levels = self._levels
        if levels in (0, _CLIENT_ID):
            return "", client_id
        if levels == _USER:
            return user, ""
        if levels == _USER_CLIENT_ID:
            return user, client_id
        defined = self._quotas
        if QuotaEntity(user, client_id) in defined or QuotaEntity(user, DEFAULT_ENTITY) in defined:
            return user, client_id
        if QuotaEntity(user, None) in defined:
            return user, ""
        if (
            QuotaEntity(DEFAULT_ENTITY, client_id) in defined
            or QuotaEntity(DEFAULT_ENTITY, DEFAULT_ENTITY) in defined
        ):
            return user, client_id
        if QuotaEntity(DEFAULT_ENTITY, None) in defined:
            return user, ""
        return "", client_id

    def quota_limit(self, quota_id: tuple[str, str]) -> float | None:
        """The quota of a quota id, None if none applies (Kafka's
        ``DefaultQuotaCallback.quotaLimit``)."""
        user, client_id = quota_id
        get = self._quotas.get
        if user and client_id:
            for entity in (
                QuotaEntity(user, client_id),
                QuotaEntity(user, DEFAULT_ENTITY),
                QuotaEntity(DEFAULT_ENTITY, client_id),
                QuotaEntity(DEFAULT_ENTITY, DEFAULT_ENTITY),
            ):
                if (bound := get(entity)) is not None:
                    return bound
            return None
        if user:
            found = get(QuotaEntity(user, None))
            return found if found is not None else get(QuotaEntity(DEFAULT_ENTITY, None))
        if client_id:
            found = get(QuotaEntity(None, client_id))
            return found if found is not None else get(QuotaEntity(None, DEFAULT_ENTITY))
        return None

    def quota(self, user: str, client_id: str) -> float | None:
        """The quota that applies to this client, None if none does."""
        return self.quota_limit(self.quota_id(user, client_id))

    def record(self, user: str, client_id: str, value: float, now_ms: int | None = None) -> int:
        """Record ``value`` for this client and return how long to throttle it, 0 if it is
        within its quota (Kafka's ``maybeRecordAndGetThrottleTimeMs``)."""
        if not self.quotas_enabled:
            return 0
        now = self._clock_ms() if now_ms is None else now_ms
        quota_id = self.quota_id(user, client_id)
        sensors = self._sensors_of(quota_id, now)
        sensors.rate.record(value, now)
        bound = self.quota_limit(quota_id)
        if bound is None:
            return 0
        observed = sensors.rate.measure(now)
        if observed <= bound:
            return 0
        throttle = throttle_time_ms(QuotaViolation(observed, bound), sensors.rate, now)
        if self.max_throttle_ms is not None:
            throttle = min(throttle, self.max_throttle_ms)
        return max(throttle, 0)

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int | None = None) -> None:
        """Take back a value recorded (Kafka's ``unrecordQuotaSensor``: a throttled fetch
        is answered empty, so its bytes were not sent)."""
        if self.quotas_enabled:
            now = self._clock_ms() if now_ms is None else now_ms
            self._sensors_of(self.quota_id(user, client_id), now).rate.record(-value, now)

    def max_value_in_window(self, user: str, client_id: str) -> float:
        """The most one request may take without being throttled whatever came before it
        (Kafka's ``getMaxValueInQuotaWindow``: a fetch's ``max_bytes`` is capped by it)."""
        if not self.quotas_enabled:
            return math.inf
        bound = self.quota(user, client_id)
        if bound is None:
            return math.inf
        return bound * (self.samples - 1) * self.window_ms / 1000

    def throttled(self, user: str, client_id: str, throttle_ms: int) -> None:
        """Count a throttle for the ``throttle-time`` metric (Kafka's ``throttle``; the
        muting itself is the listener's)."""
        if throttle_ms > 0:
            now = self._clock_ms()
            self._sensors_of(self.quota_id(user, client_id), now).throttle_times.record(
                throttle_ms, now
            )

    def _sensors_of(self, quota_id: tuple[str, str], now_ms: int) -> _Sensors:
        if now_ms >= self._next_purge_ms:
            self._purge(now_ms)
        sensors = self._sensors.get(quota_id)
        if sensors is None:
            sensors = self._sensors[quota_id] = _Sensors(Rate(self.samples, self.window_ms))
        sensors.last_record_ms = now_ms
        return sensors

    def _purge(self, now_ms: int) -> None:
        self._next_purge_ms = now_ms + 60_000
        expired = [
            key
            for key, sensors in self._sensors.items()
            if now_ms - sensors.last_record_ms >= INACTIVE_SENSOR_EXPIRATION_MS
        ]
        for key in expired:
            del self._sensors[key]

    def metrics(self) -> Iterator[tuple[tuple[str, str], float, float]]:
        """Per quota id: its rate and its average throttle time (NaN when not throttled in
        the last minute, as Kafka's ``Avg``)."""
        now = self._clock_ms()
        for quota_id, sensors in sorted(self._sensors.items()):
            throttles = sensors.throttle_times
            total = throttles.total(now)
            count = throttles.event_count(now)
            yield quota_id, sensors.rate.measure(now), (total / count if count else math.nan)


class ClientQuotas(Collector):
    """The three managers of a broker (Kafka's ``QuotaManagers``), the quota configs they
    are kept in step with (Kafka's ``QuotaConfigHandler``), and their metrics, as Kafka's
    JMX exporter names ``kafka.server:type=Produce|Fetch|Request,user=,client-id=``:
    ``kafka_server_produce_byte_rate``, ``kafka_server_fetch_byte_rate``,
    ``kafka_server_request_request_time`` and ``kafka_server_<type>_throttle_time``."""

    def __init__(
        self,
        *,
        samples: int = 11,
        window_ms: int = 1000,
        clock_ms: Callable[[], int] = _now_ms,
        broker_id: int = -1,
    ) -> None:
        self.broker_id = broker_id
        self.produce = ClientQuotaManager(
            QuotaType.PRODUCE, samples=samples, window_ms=window_ms, clock_ms=clock_ms
        )
        self.fetch = ClientQuotaManager(
            QuotaType.FETCH, samples=samples, window_ms=window_ms, clock_ms=clock_ms
        )
        self.request = ClientQuotaManager(
            QuotaType.REQUEST, samples=samples, window_ms=window_ms, clock_ms=clock_ms
        )
        self._configs: dict[QuotaEntity, dict[str, float]] = {}

    @property
    def managers(self) -> tuple[ClientQuotaManager, ...]:
        return self.produce, self.fetch, self.request

    def update(self, entity: QuotaEntity, config: Mapping[str, str]) -> None:
        """Apply an entity's configs as read from ZooKeeper (Kafka's
        ``QuotaConfigHandler.updateQuotaConfig``): each of its three quotas is set, or
        removed where the config has none. A value that is not a positive number (a
        hand-written znode) leaves the entity's quotas as they were, with a log line."""
        bounds: dict[str, float] = {}
        for manager in self.managers:
            text = config.get(manager.quota_type.config_key)
            if text is None:
                continue
            try:
                bound = float(text)
            except ValueError:
                bound = math.nan
            if not math.isfinite(bound) or bound <= 0:
                self._event(
                    logging.ERROR,
                    "bad_quota_ignored",
                    entity=entity.path,
                    key=manager.quota_type.config_key,
                    value=repr(text),
                )
                return
            bounds[manager.quota_type.config_key] = bound
        for manager in self.managers:
            manager.update_quota(entity, bounds.get(manager.quota_type.config_key))
        if bounds or self._configs.get(entity):
            self._event(
                logging.INFO,
                "quotas_updated",
                entity=entity.path,
                config=",".join(f"{k}={v:g}" for k, v in sorted(bounds.items())) or "none",
            )
        self._configs[entity] = bounds

    async def load_all(self, zk: ZooKeeperClient) -> None:
        """Apply every quota entity in ZooKeeper (at start-up, before serving)."""
        for entity, config in (await read_all_quota_entities(zk)).items():
            self.update(entity, config)

    async def reload(self, zk: ZooKeeperClient, entity_type: str, name: str) -> None:
        """Apply the entity a change notification names (``clients``/``users``, the rest of
        its path) as it now is in ZooKeeper."""
        try:
            entity = QuotaEntity.from_entity_path(entity_type, name)
            config = await read_quota_entity(zk, entity)
        except ValueError as e:  # ZkDataError too
            self._event(logging.ERROR, "bad_quota_entity_ignored", entity=name, error=str(e))
            return
        self.update(entity, config)

    def collect(self) -> Iterator[Metric]:
        for manager in self.managers:
            group = manager.quota_type.group.lower()
            metric = manager.quota_type.metric.replace("-", "_")
            rate = GaugeMetricFamily(
                f"kafka_server_{group}_{metric}",
                f"{manager.quota_type.metric} per user/client-id (Kafka's "
                f"kafka.server:type={manager.quota_type.group})",
                labels=["user", "client_id"],
            )
            throttle = GaugeMetricFamily(
                f"kafka_server_{group}_throttle_time",
                "Average throttle time (ms) per user/client-id",
                labels=["user", "client_id"],
            )
            for (user, client_id), value, throttle_ms in manager.metrics():
                rate.add_metric([user, client_id], value)
                throttle.add_metric([user, client_id], throttle_ms)
            yield rate
            yield throttle

    def _event(self, level: int, event: str, **fields: object) -> None:
        log_event(log, level, "client_quotas", event, **{"broker": self.broker_id, **fields})
