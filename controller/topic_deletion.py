"""Topic deletion, as Kafka's ``TopicDeletionManager`` does it.

An admin asks by creating ``/admin/delete_topics/<topic>``. The controller then

1. marks the topic's partitions deleted in every broker's metadata (UpdateMetadata with
   the leader ``LEADER_DURING_DELETE``), so clients stop using them;
2. sends StopReplica(delete) to every live replica that has not confirmed yet;
3. once every replica of every partition confirmed, deletes the topic's znodes and forgets
   the topic.

A replica on a dead broker is *ineligible*: the deletion waits for it (its log would
survive otherwise) and resumes when the broker registers again. Failed answers are
retried after a backoff. All of it runs on the controller's event loop, one event at a
time: the StopReplica answers come back as a :class:`TopicDeletionStopped` event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from controller.controller_context import ControllerContext
from controller.controller_zk import ControllerZkClient
from controller.request_batch import (
    ALL_LIVE_BROKERS,
    EPOCH_DURING_DELETE,
    ControllerBrokerRequestBatch,
    PartitionLeadership,
    SentRequest,
)
from proto.topic_partition import TopicPartition
from proto.wire import minibroker_pb2 as pb
from proto.zk.znodes import delete_topic_path

__all__ = [
    "TOPIC_DELETION_RETRY_BACKOFF_S",
    "DeletionHost",
    "TopicDeletion",
    "TopicDeletionManager",
    "TopicDeletionStopped",
]

TOPIC_DELETION_RETRY_BACKOFF_S = 1.0
"""Pause before StopReplica(delete) is sent again to replicas that failed it."""


@dataclass(frozen=True, slots=True)
class TopicDeletion:
    """Controller event: ``/admin/delete_topics`` changed, or a deletion may resume."""


@dataclass(frozen=True, slots=True)
class TopicDeletionStopped:
    """Controller event: the replicas sent StopReplica(delete) for ``topic`` answered:
    ``deleted`` confirmed, ``failed`` did not."""

    topic: str
    epoch: int
    deleted: tuple[int, ...]
    failed: tuple[int, ...]


class DeletionHost(Protocol):
    """What the deletion manager uses of the controller (``KafkaController``)."""

    @property
    def context(self) -> ControllerContext: ...

    @property
    def zk(self) -> ControllerZkClient: ...

    def leaderships(
        self, tps: Iterable[TopicPartition]
    ) -> dict[TopicPartition, PartitionLeadership]:
        """The partitions' current leadership, for UpdateMetadata."""
        ...

    def send(self, batch: ControllerBrokerRequestBatch) -> list[SentRequest]:
        """Queue the batch's requests; returns them with their answers' futures."""
        ...

    def put(self, event: TopicDeletion | TopicDeletionStopped) -> None:
        """Queue an event for the controller's event loop."""
        ...

    def background(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run ``coroutine`` as a task the controller cancels when it resigns."""
        ...

    def unwatch_topics(self, topics: Iterable[str]) -> None:
        """Stop watching the topics' assignment znodes."""
        ...

    def log(self, level: int, event: str, *, exc_info: object = False, **fields: object) -> None:
        """One structured log line (see proto.process.event_log)."""
        ...


class TopicDeletionManager:
    """The controller's topic deletions in progress (Kafka's ``TopicDeletionManager``).

    The topics being deleted are the context's ``topics_being_deleted`` (loaded again by a
    new controller from ``/admin/delete_topics``); what this object adds, which replicas
    have confirmed and which deletions await answers, is rebuilt by sending StopReplica
    again, so :meth:`reset` simply forgets it on resignation.
    """

    def __init__(self, host: DeletionHost) -> None:
        self._host = host
        self._in_flight: set[str] = set()
        """Topics whose StopReplica(delete) answers are awaited."""
        self._confirmed: dict[str, set[int]] = {}
        """Topic -> the brokers whose replicas confirmed the deletion."""

    def reset(self) -> None:
        """Forget everything (the controller resigned)."""
        self._in_flight.clear()
        self._confirmed.clear()

    async def on_topic_deletion(self) -> None:
        """Start or resume deleting every topic under ``/admin/delete_topics``."""
        host = self._host
        ctx = host.context
        requested = await host.zk.topics_to_delete()
        for topic in sorted(requested - ctx.all_topics):
            # Nothing to delete (never existed, or already gone): just drop the request.
            host.log(logging.INFO, "topic_deletion_unknown_topic", topic=topic)
            await host.zk.delete_admin_node(delete_topic_path(topic))
        for topic in sorted(requested & ctx.all_topics):
            if topic not in ctx.topics_being_deleted:
                ctx.topics_being_deleted.add(topic)
                host.log(logging.INFO, "topic_deletion_started", topic=topic)
            self.resume(topic)

    def resume(self, topic: str) -> None:
        """Mark the partitions deleted everywhere and send StopReplica(delete) to every live
        replica that has not confirmed yet; the answers come back as a
        :class:`TopicDeletionStopped` event."""
        host = self._host
        ctx = host.context
        if topic in self._in_flight:
            return
        tps = ctx.partitions_of_topic(topic)
        confirmed = self._confirmed.setdefault(topic, set())
        replicas = sorted({r for tp in tps for r in ctx.assignments[tp]} - confirmed)
        offline = [r for r in replicas if r not in ctx.live_brokers]
        targets = [r for r in replicas if r in ctx.live_brokers]
        if offline:
            host.log(logging.INFO, "topic_deletion_ineligible", topic=topic, offline=offline)
        batch = ControllerBrokerRequestBatch()
        batch.add_update_metadata(ALL_LIVE_BROKERS, host.leaderships(tps), deleting=True)
        for tp in tps:
            batch.add_stop_replica(
                [r for r in ctx.assignments[tp] if r in targets], tp, True, EPOCH_DURING_DELETE
            )
        sent = [s for s in host.send(batch) if isinstance(s.request, pb.StopReplicaRequest)]
        if not sent:
            return
        self._in_flight.add(topic)
        epoch = ctx.epoch

        async def collect() -> None:
            done, failed = [], []
            for item in sent:
                try:
                    response = await item.response
                except Exception:
                    failed.append(item.broker_id)
                    continue
                if response.error_code or any(e.error_code for e in response.partition_errors):
                    failed.append(item.broker_id)
                else:
                    done.append(item.broker_id)
            host.put(TopicDeletionStopped(topic, epoch, tuple(done), tuple(failed)))

        host.background(collect())

    async def on_replicas_stopped(self, event: TopicDeletionStopped) -> None:
        """Record the confirmations; retry the failures after a backoff; once every
        replica confirmed, delete the topic's znodes and forget it."""
        host = self._host
        ctx = host.context
        if event.epoch != ctx.epoch or event.topic not in ctx.topics_being_deleted:
            return
        self._in_flight.discard(event.topic)
        confirmed = self._confirmed.setdefault(event.topic, set())
        confirmed.update(event.deleted)
        if event.failed:
            host.log(
                logging.WARNING,
                "topic_deletion_replicas_failed",
                topic=event.topic,
                brokers=list(event.failed),
            )

            async def retry() -> None:
                await asyncio.sleep(TOPIC_DELETION_RETRY_BACKOFF_S)
                host.put(TopicDeletion())

            host.background(retry())
            return
        replicas = {r for tp in ctx.partitions_of_topic(event.topic) for r in ctx.assignments[tp]}
        if not replicas <= confirmed:
            return  # a dead replica still holds it: resumed when that broker registers
        await host.zk.delete_topic_znodes(event.topic)
        ctx.remove_topic(event.topic)
        host.unwatch_topics([event.topic])
        self._confirmed.pop(event.topic, None)
        host.log(logging.INFO, "topic_deleted", topic=event.topic)
