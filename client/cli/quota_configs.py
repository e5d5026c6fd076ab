"""``minibroker configs --entity-type clients|users`` (Kafka's ``kafka-configs.sh`` for
client quotas)::

    minibroker configs --alter --entity-type clients --entity-name app \\
        --add-config producer_byte_rate=1024,consumer_byte_rate=2048
    minibroker configs --alter --entity-type users --entity-default \\
        --add-config request_percentage=50
    minibroker configs --describe --entity-type clients

Through :mod:`proto.zk.client_quota_admin`, the code of the Kafka listener's
DescribeClientQuotas and AlterClientQuotas, so both give the same answers; every broker
applies a change without a restart. A user and client-id pair
(``/config/users/<u>/clients/<c>``) is named as Kafka's ``kafka-configs`` names it, one
name (or ``--entity-default``) per ``--entity-type``, in order::

    minibroker configs --alter --entity-type users --entity-name alice \
        --entity-type clients --entity-default --add-config producer_byte_rate=1024
    minibroker configs --describe --entity-type users --entity-name alice --entity-type clients

A describe matches only entities with exactly the types given (Kafka's
``ClientQuotaFilter.containsOnly``); a type without a name matches any named entity.

A user's SCRAM credentials are set and deleted as with Kafka's ``kafka-configs``
(:mod:`proto.config.scram_credentials`; the password never leaves this process, only the
salted credential is written)::

    minibroker configs --alter --entity-type users --entity-name alice \
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'
    minibroker configs --alter --entity-type users --entity-name alice --delete-config SCRAM-SHA-512
    minibroker configs --describe --entity-type users --entity-name alice
"""

from __future__ import annotations

import argparse

from client.admin import AdminClient
from client.cli.common import admin_client, connections
from client.metadata import ClientError
from proto.config.scram_credentials import ScramAlteration, ScramError
from proto.transport.scram import DEFAULT_ITERATIONS, ScramCredential, ScramMechanism
from proto.zk.client_quota_admin import QuotaAlteration
from proto.zk.client_quota_configs import (
    CLIENT_ID,
    USER,
    FilterComponent,
    QuotaEntity,
    QuotaRequestError,
)

__all__ = ["QUOTA_ENTITY_TYPES", "run_quota_configs"]

QUOTA_ENTITY_TYPES = {"clients": CLIENT_ID, "users": USER}
_EXACT, _DEFAULT, _SPECIFIED = 0, 1, 2


async def run_quota_configs(
    args: argparse.Namespace,
    parts: list[tuple[str, str | None, bool]],
    add: dict[str, str] | None,
    delete: list[str],
) -> int:
    """``--describe`` or ``--alter`` of a clients, users or user and client-id entity;
    ``parts``: ``(entity type, name, named)`` per ``--entity-type`` (a None name with
    ``named`` is the default); ``add`` and ``delete`` are the parsed ``--add-config`` and
    ``--delete-config`` (None and [] to describe)."""
    async with connections(args) as conns, admin_client(args, conns) as admin:
        if add is None:
            components = [
                FilterComponent(QUOTA_ENTITY_TYPES[kind], _EXACT, name)
                if name is not None
                else FilterComponent(QUOTA_ENTITY_TYPES[kind], _DEFAULT if named else _SPECIFIED)
                for kind, name, named in parts
            ]
            found = await admin.describe_client_quotas(components, strict=True)
            for entity, values in found.items():
                listed = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
                print(f"Quota configs for {entity.describe()} are {listed}")
            if [kind for kind, _, _ in parts] == ["users"] and parts[0][1] is not None:
                await _describe_scram(admin, parts[0][1])
            return 0
        if not all(named for _, _, named in parts):
            raise ClientError("--alter needs --entity-name or --entity-default")
        try:
            entity = QuotaEntity.of([(QUOTA_ENTITY_TYPES[kind], name) for kind, name, _ in parts])
        except QuotaRequestError as e:
            raise ClientError(str(e)) from None
        scram = [k for k in [*add, *delete] if ScramMechanism.by_name(k) is not None]
        if scram:
            if entity.user is None or entity.client_id is not None or not entity.user:
                raise ClientError("SCRAM credentials are set for --entity-type users alone")
            await _alter_scram(admin, entity.user, add, delete)
            add = {k: v for k, v in add.items() if k not in scram}
            delete = [k for k in delete if k not in scram]
            if not add and not delete:
                print(f"Completed updating config for user {entity.user}.")
                return 0
        ops: list[tuple[str, float | None]] = [(key, None) for key in delete]
        for key, text in add.items():
            try:
                ops.append((key, float(text)))
            except ValueError:
                raise ClientError(f"--add-config {key}={text}: not a number") from None
        [error] = await admin.alter_client_quotas([QuotaAlteration(entity, ops)])
        if error is not None:
            raise ClientError(str(error))
    print(f"Completed updating config for entity: {entity.describe()}.")
    return 0


async def _alter_scram(
    admin: AdminClient, user: str, add: dict[str, str], delete: list[str]
) -> None:
    """``SCRAM-SHA-256=[iterations=8192,password=...]`` to add, ``SCRAM-SHA-256`` to
    delete (Kafka's ``ConfigCommand`` syntax)."""
    alterations: list[ScramAlteration] = []
    for key in delete:
        mechanism = ScramMechanism.by_name(key)
        if mechanism is not None:
            alterations.append(ScramAlteration(user, mechanism.value))
    for key, text in add.items():
        mechanism = ScramMechanism.by_name(key)
        if mechanism is None:
            continue
        options = dict(part.partition("=")[::2] for part in text.split(",") if part)
        password = options.pop("password", "")
        iterations_text = options.pop("iterations", str(DEFAULT_ITERATIONS))
        if not password or options or not iterations_text.isdigit():
            raise ClientError(
                f"--add-config {key}=[...]: expected [iterations=N,]password=P (Kafka's form)"
            )
        credential = ScramCredential.from_password(mechanism, password, int(iterations_text))
        alterations.append(ScramAlteration(user, mechanism.value, credential))
    errors = await admin.alter_scram_credentials(alterations)
    error = errors.get(user)
    if error is not None:
        raise ClientError(f"SCRAM credentials of {user}: {error.message}")


async def _describe_scram(admin: AdminClient, user: str) -> None:
    found = await admin.describe_scram_credentials([user])
    infos = found.get(user)
    if infos is None or isinstance(infos, ScramError) or not infos:
        return
    listed = ",".join(
        f"{mechanism.mechanism_name}=iterations={iterations}"
        for m, iterations in infos
        if (mechanism := ScramMechanism.by_type(m)) is not None
    )
    print(f"SCRAM credential configs for user-principal '{user}' are {listed}")
