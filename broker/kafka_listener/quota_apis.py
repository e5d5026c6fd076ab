"""DescribeClientQuotas and AlterClientQuotas (KIP-546) on the Kafka listener, over
:mod:`proto.zk.client_quota_admin`, the same code as ``minibroker configs --entity-type
clients|users``. Any broker answers, as in Kafka 2.x's ZooKeeper mode; every broker
applies an alteration through ``/config/changes`` (:mod:`broker.dynamic_config`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from broker.kafka_listener.messages import Tree
from broker.kafka_listener.wire_request import Answer, KafkaRequest
from proto.process.event_log import log_event
from proto.zk.client_quota_admin import (
    QuotaAlteration,
    alter_client_quotas,
    describe_client_quotas,
)
from proto.zk.client_quota_configs import FilterComponent, QuotaEntity, QuotaRequestError
from proto.zk.session import ZkError, ZooKeeperClient

__all__ = ["QUOTA_VERSIONS", "QuotaApis"]

log = logging.getLogger(__name__)

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
QUOTA_VERSIONS: dict[int, tuple[int, int]] = {
    DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ALTER_CLIENT_QUOTAS: (0, 1),
}
"""Kafka 2.8's versions (v1 is v0 in the flexible encoding)."""
UNKNOWN_SERVER_ERROR = -1


class QuotaApis:
    """The client quota handlers, by API key."""

    def __init__(self, zk: ZooKeeperClient, broker_id: int) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.handlers: dict[int, Callable[[KafkaRequest], Awaitable[Answer]]] = {
            DESCRIBE_CLIENT_QUOTAS: self.describe_client_quotas,
            ALTER_CLIENT_QUOTAS: self.alter_client_quotas,
        }

    async def describe_client_quotas(self, request: KafkaRequest) -> Answer:
        return self._describe(request)

    async def _describe(self, request: KafkaRequest) -> Tree:
        body = request.body
        components = [
            FilterComponent(c.entity_type, c.match_type, c.match) for c in body.components
        ]
        try:
            found = await describe_client_quotas(self.zk, components, body.strict)
        except QuotaRequestError as e:
            return {"error_code": e.code, "error_message": str(e), "entries": None}
        except ZkError as e:
            self._failed("describe_client_quotas_failed", e)
            return {"error_code": UNKNOWN_SERVER_ERROR, "error_message": str(e), "entries": None}
        return {
            "error_code": 0,
            "error_message": None,
            "entries": [
                {
                    "entity": [{"entity_type": t, "entity_name": n} for t, n in entity.parts()],
                    "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
                }
                for entity, values in found.items()
            ],
        }

    async def alter_client_quotas(self, request: KafkaRequest) -> Answer:
        return self._alter(request)

    async def _alter(self, request: KafkaRequest) -> Tree:
        body = request.body
        answers: list[dict[str, object]] = []
        alterations: list[QuotaAlteration] = []
        positions: list[int] = []
        for entry in body.entries:
            parts = [(e.entity_type, e.entity_name) for e in entry.entity]
            answer: dict[str, object] = {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in parts],
                "error_code": 0,
                "error_message": None,
            }
            answers.append(answer)
            try:
                entity = QuotaEntity.of(parts)
            except QuotaRequestError as e:
                answer.update(error_code=e.code, error_message=str(e))
                continue
            ops = [(op.key, None if op.remove else float(op.value)) for op in entry.ops]
            alterations.append(QuotaAlteration(entity, ops))
            positions.append(len(answers) - 1)
        try:
            errors = await alter_client_quotas(self.zk, alterations, body.validate_only)
        except ZkError as e:
            self._failed("alter_client_quotas_failed", e)
            errors = [QuotaRequestError(str(e), UNKNOWN_SERVER_ERROR)] * len(alterations)
        for position, error in zip(positions, errors, strict=True):
            if error is not None:
                answers[position].update(error_code=error.code, error_message=str(error))
        return {"entries": answers}

    def _failed(self, event: str, error: Exception) -> None:
        log_event(
            log,
            logging.WARNING,
            "kafka_quota_apis",
            event,
            broker=self.broker_id,
            error=repr(error),
        )
