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
(``/config/users/<u>/clients/<c>``) is set with Kafka's AdminClient
(``alter_client_quotas``), which this command does not take.
"""

from __future__ import annotations

import argparse

from client.cli.common import admin_client, connections
from client.metadata import ClientError
from proto.zk.client_quota_admin import QuotaAlteration
from proto.zk.client_quota_configs import (
    CLIENT_ID,
    USER,
    FilterComponent,
    QuotaEntity,
)

__all__ = ["QUOTA_ENTITY_TYPES", "run_quota_configs"]

QUOTA_ENTITY_TYPES = {"clients": CLIENT_ID, "users": USER}
_EXACT, _DEFAULT, _SPECIFIED = 0, 1, 2


async def run_quota_configs(
    args: argparse.Namespace, add: dict[str, str] | None, delete: list[str]
) -> int:
    """``--describe`` or ``--alter`` of a clients or users entity; ``add`` and ``delete``
    are the parsed ``--add-config`` and ``--delete-config`` (None and [] to describe)."""
    entity_type = QUOTA_ENTITY_TYPES[args.entity_type]
    name: str | None = args.entity_name
    async with connections(args) as conns, admin_client(args, conns) as admin:
        if add is None:
            if args.entity_default:
                component = FilterComponent(entity_type, _DEFAULT)
            elif name is not None:
                component = FilterComponent(entity_type, _EXACT, name)
            else:
                component = FilterComponent(entity_type, _SPECIFIED)
            found = await admin.describe_client_quotas([component], strict=True)
            for entity, values in found.items():
                listed = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
                print(f"Quota configs for {entity.describe()} are {listed}")
            return 0
        if name is None and not args.entity_default:
            raise ClientError("--alter needs --entity-name or --entity-default")
        entity = QuotaEntity.of([(entity_type, None if args.entity_default else name)])
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
