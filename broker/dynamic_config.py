"""Config changes while the broker runs (Kafka's ``DynamicConfigManager``, its
``ZkNodeChangeNotificationListener`` and the topic and broker config handlers).

``minibroker configs --alter`` (Kafka's ``kafka-configs``, ``AdminZkClient.changeConfigs``)
writes an entity's new configs to ``/config/topics/<t>`` or ``/config/brokers/<id>`` /
``/config/brokers/<default>``, then a sequential notification
``/config/changes/config_change_<seq>`` holding ``{"version":2,"entity_path":"topics/<t>"}``.
Every broker watches ``/config/changes`` and, for each notification newer than the last it
processed, in sequence order, re-reads the entity it names:

- ``topics/<t>``: the topic's overrides over this broker's current defaults go to the
  partitions of ``<t>`` hosted here (:meth:`ReplicaManager.update_topic_config`): the
  ``Log``'s settings and ``min.insync.replicas``. ``unclean.leader.election.enable`` is read
  by the controller at each election.
- ``brokers/<default>`` or ``brokers/<own id>``: the effective broker config is computed
  again (:func:`~proto.config.dynamic_broker_config.effective_broker_config`; the configs it
  does not apply are logged "stored, not applied"); the replica manager
  creates new partitions with it, each hosted topic's config is computed again (its
  defaults changed) and the controller candidate takes its ``unclean.leader.election.enable``
  default. Other brokers' entities are skipped.
- ``clients/<c>``, ``users/<u>`` or ``users/<u>/clients/<c>``: the entity's client quotas
  are read again and applied (:class:`~broker.quotas.client_quota_manager.ClientQuotas`).

ZooKeeper is anyone's to write: a malformed notification or entity, or an invalid value, is
logged and skipped, and the broker keeps what it had (Kafka logs "these configs will be
ignored"). Each broker deletes the notifications older than 15 minutes it sees (Kafka's
``changeExpirationMs`` and ``purgeObsoleteNotifications``).

:meth:`DynamicConfigManager.start` runs before the broker registers, so before it hosts any
partition: it sets the watch, marks the notifications already there as seen and then reads
the broker entities, so that a change made meanwhile is either read or notified later.
Everything runs on the broker's event loop; one task processes the notifications.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping

from broker.quotas.client_quota_manager import ClientQuotas
from broker.replication.replica_manager import ReplicaManager
from broker.zk_client import BrokerZkClient
from controller.kafka_controller import KafkaController
from proto.config.broker_config import BrokerConfig
from proto.config.dynamic_broker_config import effective_broker_config, not_applied
from proto.process.event_log import log_event
from proto.zk.session import ZkError, ZkWatch
from proto.zk.znodes import (
    CONFIG_CHANGE_PREFIX,
    DEFAULT_BROKER_ENTITY,
    ZkDataError,
    decode_config_change,
)

__all__ = ["CHANGE_EXPIRATION_MS", "DynamicConfigManager"]

log = logging.getLogger(__name__)

CHANGE_EXPIRATION_MS = 15 * 60 * 1000
"""Notifications older than this are deleted (Kafka's ``changeExpirationMs``)."""
_RETRY_BACKOFF_S = 1.0
"""Pause before processing again after ZooKeeper failed (a reconnect also triggers it)."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class DynamicConfigManager:
    """Applies ``/config/changes`` notifications to this broker (see the module docstring).

    Create, ``await start()`` after the ZooKeeper session is open and before registering;
    ``await stop()`` before closing the session.
    """

    def __init__(
        self,
        static: BrokerConfig,
        zk: BrokerZkClient,
        replica_manager: ReplicaManager,
        controller: KafkaController | None = None,
        *,
        client_quotas: ClientQuotas | None = None,
        change_expiration_ms: int = CHANGE_EXPIRATION_MS,
        clock_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self.static = static
        """The broker's properties as it was started with them."""
        self.config = static
        """The effective config: ``static`` with the dynamic broker configs applied."""
        self._zk = zk
        self._replica_manager = replica_manager
        self._controller = controller
        self._client_quotas = client_quotas
        self._change_expiration_ms = change_expiration_ms
        self._clock_ms = clock_ms
        self._layers: dict[str, dict[str, str]] = {DEFAULT_BROKER_ENTITY: {}, self._own: {}}
        """The dynamic broker configs in force, by entity (cluster default, this broker)."""
        self._last_sequence = -1
        self._wake = asyncio.Event()
        self._watch: ZkWatch | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def _own(self) -> str:
        return str(self.static.broker_id)

    async def start(self) -> None:
        """Watch ``/config/changes``, mark what is there as seen, apply the dynamic broker
        configs, then process notifications in the background. Raises ZkError if ZooKeeper
        fails meanwhile."""
        self._watch = await self._zk.watch_config_changes(self._wake.set)
        names = await self._zk.config_change_names()
        if names:
            self._last_sequence = _sequence(names[-1])
        await self._reload_broker_configs()
        if self._client_quotas is not None:
            await self._client_quotas.load_all(self._zk)
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"broker-{self.static.broker_id}-dynamic-config"
        )

    async def stop(self) -> None:
        """Stop watching and processing. Idempotent."""
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._process_notifications()
            except ZkError as e:
                self._event(logging.WARNING, "config_changes_failed", error=repr(e))
                await asyncio.sleep(_RETRY_BACKOFF_S)
                self._wake.set()
            except Exception:
                log.exception("dynamic_config event=config_changes_failed")
                await asyncio.sleep(_RETRY_BACKOFF_S)

    async def _process_notifications(self) -> None:
        """Kafka's ``processNotifications``: the new ones in sequence order, then purge the
        expired ones."""
        now = self._clock_ms()
        for name in await self._zk.config_change_names():
            found = await self._zk.get_config_change(name)
            if found is None:
                continue  # purged by another broker meanwhile
            data, created_ms = found
            sequence = _sequence(name)
            if sequence > self._last_sequence:
                await self._process(name, data)
                self._last_sequence = sequence
            if now - created_ms > self._change_expiration_ms:
                await self._zk.delete_config_change(name)

    async def _process(self, name: str, data: bytes) -> None:
        try:
            entity_type, entity = decode_config_change(data)
        except ZkDataError as e:
            self._event(logging.WARNING, "bad_config_change", notification=name, error=str(e))
            return
        if entity_type == "topics":
            await self._update_topic(entity)
        elif entity_type in ("clients", "users"):
            if self._client_quotas is not None:
                await self._client_quotas.reload(self._zk, entity_type, entity)
        elif entity in self._layers:
            await self._reload_broker_configs()
            for topic in sorted({tp.topic for tp in self._replica_manager.partitions}):
                await self._update_topic(topic)

    async def _update_topic(self, topic: str) -> None:
        """Kafka's ``TopicConfigHandler.processConfigChanges``."""
        if not any(tp.topic == topic for tp in self._replica_manager.partitions):
            return  # not hosted here: a partition created later reads its config itself
        try:
            overrides = await self._zk.get_topic_config(topic)
            topic_config = self.config.topic_config(overrides)
        except ValueError as e:  # ZkDataError too
            self._event(logging.ERROR, "bad_topic_config_ignored", topic=topic, error=str(e))
            return
        updated = self._replica_manager.update_topic_config(topic, topic_config)
        self._event(
            logging.INFO,
            "topic_config_updated",
            topic=topic,
            partitions=len(updated),
            config=_describe(overrides),
        )

    async def _reload_broker_configs(self) -> None:
        """Kafka's ``BrokerConfigHandler``: read both broker entities, keep each one's
        previous content if the new one is invalid, and apply the result."""
        for entity in self._layers:
            try:
                layer = await self._zk.get_broker_config(entity)
                effective_broker_config(self.static, layer, {})
            except ValueError as e:  # ZkDataError too
                self._event(logging.ERROR, "bad_broker_config_ignored", entity=entity, error=str(e))
                continue
            if layer != self._layers[entity]:
                self._layers[entity] = layer
                self._event(
                    logging.INFO, "broker_config_updated", entity=entity, config=_describe(layer)
                )
                ignored = not_applied(layer)
                if ignored:
                    self._event(
                        logging.INFO,
                        "broker_config_not_applied",
                        entity=entity,
                        configs=",".join(ignored),
                        note="stored, not applied",
                    )
        self.config = effective_broker_config(
            self.static, self._layers[DEFAULT_BROKER_ENTITY], self._layers[self._own]
        )
        self._replica_manager.reconfigure(self.config)
        if self._controller is not None:
            self._controller.reconfigure(self.config)

    def _event(self, level: int, event: str, **fields: object) -> None:
        """One line: ``dynamic_config event=<e> broker=<id> key=value ...``."""
        log_event(
            log, level, "dynamic_config", event, **{"broker": self.static.broker_id, **fields}
        )


def _sequence(name: str) -> int:
    return int(name.removeprefix(CONFIG_CHANGE_PREFIX))


def _describe(config: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(config.items())) or "none"
