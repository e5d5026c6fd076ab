"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554) on the Kafka
listener, over :mod:`proto.config.scram_credentials`, the same code as ``minibroker configs
--entity-type users --add-config 'SCRAM-SHA-256=[password=...]'``. Any broker answers, as
in Kafka 2.7's ZooKeeper mode; the credentials are read from ZooKeeper at each SCRAM
authentication, so every broker uses a change at once."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from broker.kafka_listener.messages import Tree
from broker.kafka_listener.wire_request import Answer, KafkaRequest
from proto.config.scram_credentials import (
    ScramAlteration,
    ScramError,
    alter_scram_credentials,
    describe_scram_credentials,
)
from proto.transport.scram import ScramCredential, ScramMechanism
from proto.zk.session import ZkError, ZooKeeperClient

__all__ = ["SCRAM_VERSIONS", "ScramApis"]

log = logging.getLogger(__name__)

DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51
SCRAM_VERSIONS: dict[int, tuple[int, int]] = {
    DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
}
UNKNOWN_SERVER_ERROR = -1


class ScramApis:
    """The SCRAM credential handlers, by API key."""

    def __init__(self, zk: ZooKeeperClient, broker_id: int) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.handlers: dict[int, Callable[[KafkaRequest], Awaitable[Answer]]] = {
            DESCRIBE_USER_SCRAM_CREDENTIALS: self.describe_user_scram_credentials,
            ALTER_USER_SCRAM_CREDENTIALS: self.alter_user_scram_credentials,
        }

    async def describe_user_scram_credentials(self, request: KafkaRequest) -> Answer:
        return self._describe(request)

    async def _describe(self, request: KafkaRequest) -> Tree:
        users = request.body.users
        try:
            found = await describe_scram_credentials(
                self.zk, None if users is None else [u.name for u in users]
            )
        except ZkError as e:
            log.warning(
                "scram event=describe_user_scram_credentials_failed broker=%d error=%r",
                self.broker_id,
                str(e),
            )
            return {"error_code": UNKNOWN_SERVER_ERROR, "error_message": str(e), "results": []}
        results = []
        for user, infos in found.items():
            if isinstance(infos, ScramError):
                results.append(
                    {
                        "user": user,
                        "error_code": infos.code,
                        "error_message": infos.message,
                        "credential_infos": [],
                    }
                )
                continue
            results.append(
                {
                    "user": user,
                    "error_code": 0,
                    "error_message": None,
                    "credential_infos": [{"mechanism": m, "iterations": i} for m, i in infos],
                }
            )
        return {"error_code": 0, "error_message": None, "results": results}

    async def alter_user_scram_credentials(self, request: KafkaRequest) -> Answer:
        return self._alter(request)

    async def _alter(self, request: KafkaRequest) -> Tree:
        body = request.body
        alterations = [ScramAlteration(d.name, d.mechanism) for d in body.deletions]
        for u in body.upsertions:
            mechanism = ScramMechanism.by_type(u.mechanism)
            credential = None
            if mechanism is not None:
                credential = ScramCredential.from_salted_password(
                    mechanism, bytes(u.salted_password), bytes(u.salt), u.iterations
                )
            alterations.append(ScramAlteration(u.name, u.mechanism, credential or _INVALID))
        try:
            errors = await alter_scram_credentials(self.zk, alterations)
        except ZkError as e:
            users = {a.user for a in alterations}
            return {
                "results": [
                    {"user": u, "error_code": UNKNOWN_SERVER_ERROR, "error_message": str(e)}
                    for u in sorted(users)
                ]
            }
        return {
            "results": [
                {
                    "user": user,
                    "error_code": 0 if error is None else error.code,
                    "error_message": None if error is None else error.message,
                }
                for user, error in errors.items()
            ]
        }


_INVALID = ScramCredential(b"", b"", b"", 0)
"""An upsertion of an unknown mechanism: refused as such before its credential matters."""
