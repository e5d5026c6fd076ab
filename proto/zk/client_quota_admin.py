"""Reading and altering client quotas in ZooKeeper (Kafka 2.8's ``ZkAdminManager``
``describeClientQuotas`` and ``alterClientQuotas`` over ``AdminZkClient``): the one
implementation behind the Kafka listener's DescribeClientQuotas and AlterClientQuotas
and ``minibroker configs --entity-type clients|users``. The brokers read the same znodes
to enforce the quotas (``broker.quotas``). The entities and the checks are
:mod:`proto.zk.client_quota_configs`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from proto.zk.client_quota_configs import (
    FilterComponent,
    QuotaEntity,
    QuotaRequestError,
    apply_quota_ops,
    filter_entities,
    quota_values,
)
from proto.zk.session import ZooKeeperClient
from proto.zk.znodes import (
    CONFIG_CHANGE_PREFIX,
    CONFIG_CHANGES_PATH,
    CONFIG_CLIENTS_PATH,
    CONFIG_USERS_PATH,
    ZkDataError,
    decode_topic_config,
    encode_config_change,
    encode_config_entity_path,
    encode_topic_config,
)

__all__ = [
    "QuotaAlteration",
    "alter_client_quotas",
    "describe_client_quotas",
    "read_all_quota_entities",
    "read_quota_entity",
]

log = logging.getLogger(__name__)

_CONDITIONAL_WRITE_ATTEMPTS = 10
INVALID_REQUEST = 42


@dataclass(frozen=True, slots=True)
class QuotaAlteration:
    """One entry of AlterClientQuotas: the entity and its ops (key, value; None removes)."""

    entity: QuotaEntity
    ops: Sequence[tuple[str, float | None]]


async def _read(zk: ZooKeeperClient, path: str) -> tuple[dict[str, str], int | None]:
    """An entity's configs and znode version; ``({}, None)`` if there is no znode."""
    try:
        data, stat = await zk.request("get", path)
    except NoNodeError:
        return {}, None
    if not data:  # a parent made by makepath for /config/users/<u>/clients/<c>
        return {}, int(stat.version)
    return decode_topic_config(bytes(data)), int(stat.version)


async def read_quota_entity(zk: ZooKeeperClient, entity: QuotaEntity) -> dict[str, str]:
    """The entity's configs, ``{}`` if it has none; ZkDataError if its znode is malformed."""
    try:
        return (await _read(zk, entity.path))[0]
    except ZkDataError as e:
        raise ZkDataError(f"{entity.path}: {e}") from None


async def _children(zk: ZooKeeperClient, path: str) -> list[str]:
    try:
        return sorted(await zk.request("get_children", path))
    except NoNodeError:
        return []


async def read_all_quota_entities(
    zk: ZooKeeperClient,
) -> dict[QuotaEntity, dict[str, str]]:
    """Every client, user and user-and-client entity's configs (Kafka's
    ``fetchAllEntityConfigs`` and ``fetchAllChildEntityConfigs``). A child that is not a
    sanitized name, or a znode that is not a config entity, is logged and left out:
    anyone may write there."""
    entities: list[QuotaEntity] = []
    for name in await _children(zk, CONFIG_CLIENTS_PATH):
        entities += _entity("clients", name)
    for user in await _children(zk, CONFIG_USERS_PATH):
        found_user = _entity("users", user)
        if not found_user:
            continue  # not a legal user name: its children are not read either
        entities += found_user
        for client in await _children(zk, f"{CONFIG_USERS_PATH}/{user}/clients"):
            entities += _entity("users", f"{user}/clients/{client}")
    found: dict[QuotaEntity, dict[str, str]] = {}
    for entity in entities:
        try:
            config, version = await _read(zk, entity.path)
        except ZkDataError as e:
            log.warning(
                "client_quotas event=bad_quota_entity_ignored path=%s error=%r", entity.path, str(e)
            )
            continue
        if version is not None:
            found[entity] = config
    return found


def _entity(entity_type: str, name: str) -> list[QuotaEntity]:
    try:
        encode_config_entity_path(entity_type, name)
        return [QuotaEntity.from_entity_path(entity_type, name)]
    except ValueError:
        log.warning(
            "client_quotas event=bad_quota_entity_name_ignored path=/config/%s/%s",
            entity_type,
            name,
        )
        return []


async def describe_client_quotas(
    zk: ZooKeeperClient, components: Iterable[FilterComponent], strict: bool
) -> dict[QuotaEntity, dict[str, float]]:
    """The quota values of the entities that match the filter (see
    :func:`~proto.zk.client_quota_configs.filter_entities`); QuotaRequestError for a filter
    Kafka refuses."""
    components = list(components)
    filter_entities({}, components, strict)  # refuse a bad filter before reading anything
    entities = await read_all_quota_entities(zk)
    values = {entity: quota_values(config) for entity, config in entities.items()}
    return filter_entities(values, components, strict)


async def alter_client_quotas(
    zk: ZooKeeperClient,
    alterations: Iterable[QuotaAlteration],
    validate_only: bool = False,
) -> list[QuotaRequestError | None]:
    """Apply each alteration (unless ``validate_only``) and announce it under
    ``/config/changes`` (Kafka's ``AdminZkClient.changeConfigs``); per alteration, None or
    the error Kafka would answer. The entity znode is written conditionally on the version
    read, so concurrent alterations of one entity do not undo each other."""
    results: list[QuotaRequestError | None] = []
    for alteration in alterations:
        try:
            await _alter(zk, alteration, validate_only)
        except QuotaRequestError as e:
            results.append(e)
        else:
            results.append(None)
    return results


async def _alter(zk: ZooKeeperClient, alteration: QuotaAlteration, validate_only: bool) -> None:
    entity = alteration.entity
    for _ in range(_CONDITIONAL_WRITE_ATTEMPTS):
        try:
            current, version = await _read(zk, entity.path)
        except ZkDataError as e:
            raise QuotaRequestError(f"{entity.path} holds no config entity: {e}") from None
        updated = apply_quota_ops(current, alteration.ops)
        if validate_only:
            return
        data = encode_topic_config(updated)
        try:
            if version is None:
                await zk.request("create", entity.path, data, makepath=True)
            else:
                await zk.request("set", entity.path, data, version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue  # another alteration won: apply ours to its result
        break
    else:
        raise QuotaRequestError(f"the quotas of {entity.describe()} kept changing; retry")
    await zk.request(
        "create",
        f"{CONFIG_CHANGES_PATH}/{CONFIG_CHANGE_PREFIX}",
        encode_config_change(encode_config_entity_path(entity.config_type, entity.entity_name)),
        sequence=True,
        makepath=True,
    )
    log.info(
        "client_quotas event=client_quotas_altered entity=%s config=%s",
        entity.path,
        _describe(updated),
    )


def _describe(config: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(config.items())) or "none"
