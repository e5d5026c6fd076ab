"""SCRAM credentials in ZooKeeper, as Kafka 2.x keeps them (docs/security.md).

A user's credentials are keys of its config entity ``/config/users/<sanitized user>``
(beside its client quotas), one per mechanism, in ``ScramCredentialUtils``' format::

    {"version":1,"config":{"SCRAM-SHA-256":"salt=...,stored_key=...,server_key=...,iterations=4096"}}

and every change is announced under ``/config/changes`` (``users/<user>``), as Kafka's
``AdminZkClient.changeConfigs`` does. The one implementation behind the Kafka listener's
DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554, Kafka 2.7's
``ZkAdminManager``), ``minibroker configs --entity-type users --add-config
'SCRAM-SHA-256=[password=...]'``, and the brokers' SCRAM authentication, which reads the
credential of each exchange from here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from proto.transport.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanism,
    format_credential,
    parse_credential,
)
from proto.zk.client_quota_configs import desanitize, sanitize
from proto.zk.session import ZooKeeperClient
from proto.zk.znodes import (
    CONFIG_CHANGE_PREFIX,
    CONFIG_CHANGES_PATH,
    CONFIG_USERS_PATH,
    ZkDataError,
    decode_topic_config,
    encode_config_change,
    encode_topic_config,
)

__all__ = [
    "ScramAlteration",
    "ScramError",
    "alter_scram_credentials",
    "describe_scram_credentials",
    "read_scram_credential",
]

log = logging.getLogger(__name__)

UNSUPPORTED_SASL_MECHANISM = 33
RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL = 91, 92, 93
_ATTEMPTS = 10


@dataclass(frozen=True, slots=True)
class ScramError:
    """A per-user error, as Kafka answers it (code and message)."""

    code: int
    message: str


@dataclass(frozen=True, slots=True)
class ScramAlteration:
    """One upsertion (``credential`` set) or deletion (None) of a user's credential."""

    user: str
    mechanism_type: int
    """KIP-554's mechanism type (1: SCRAM-SHA-256, 2: SCRAM-SHA-512); others are refused."""
    credential: ScramCredential | None = None


def _path(user: str) -> str:
    return f"{CONFIG_USERS_PATH}/{sanitize(user)}"


async def _read(zk: ZooKeeperClient, user: str) -> tuple[dict[str, str], int | None]:
    try:
        data, stat = await zk.request("get", _path(user))
    except NoNodeError:
        return {}, None
    if not data:
        return {}, int(stat.version)
    return decode_topic_config(bytes(data)), int(stat.version)


async def read_scram_credential(
    zk: ZooKeeperClient, user: str, mechanism: ScramMechanism
) -> ScramCredential | None:
    """The user's credential for ``mechanism``; None when it has none, or when what is
    stored cannot be read (logged: anyone with the digest may write there)."""
    try:
        config, _ = await _read(zk, user)
        text = config.get(mechanism.mechanism_name)
        return None if text is None else parse_credential(text)
    except (ZkDataError, ValueError) as err:
        log.warning(
            "scram event=bad_scram_credential_ignored user=%r mechanism=%s error=%r",
            user,
            mechanism.mechanism_name,
            str(err),
        )
        return None


def _infos(config: Mapping[str, str]) -> list[tuple[int, int]]:
    infos = []
    for mechanism in ScramMechanism:
        text = config.get(mechanism.mechanism_name)
        if text is None:
            continue
        try:
            infos.append((mechanism.value, parse_credential(text).iterations))
        except ValueError:
            continue
    return infos


async def describe_scram_credentials(
    zk: ZooKeeperClient, users: Iterable[str] | None
) -> dict[str, list[tuple[int, int]] | ScramError]:
    """Per user, its credentials as (mechanism type, iterations), or the error Kafka
    answers for it; ``users`` None or empty: every user that has one."""
    wanted = list(users or [])
    result: dict[str, list[tuple[int, int]] | ScramError] = {}
    if not wanted:
        try:
            children = sorted(await zk.request("get_children", CONFIG_USERS_PATH))
        except NoNodeError:
            children = []
        for child in children:
            user = desanitize(child)
            try:
                infos = _infos((await _read(zk, user))[0])
            except ZkDataError:
                continue
            if infos:
                result[user] = infos
        return result
    seen: set[str] = set()
    for user in wanted:
        if user in seen:
            result[user] = ScramError(
                DUPLICATE_RESOURCE,
                "Cannot describe SCRAM credentials for the same user twice in a single request",
            )
            continue
        seen.add(user)
        try:
            infos = _infos((await _read(zk, user))[0]) if user else []
        except ZkDataError:
            infos = []
        result[user] = infos or ScramError(
            RESOURCE_NOT_FOUND, "Attempt to describe a user credential that does not exist"
        )
    return result


def _check(alteration: ScramAlteration) -> ScramError | None:
    if not alteration.user:
        return ScramError(UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if ScramMechanism.by_type(alteration.mechanism_type) is None:
        return ScramError(UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    credential = alteration.credential
    if credential is not None:
        if credential.iterations < MIN_ITERATIONS:
            return ScramError(UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        if credential.iterations > MAX_ITERATIONS:
            return ScramError(UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        if not credential.salt:
            return ScramError(UNACCEPTABLE_CREDENTIAL, "Salt must not be empty")
    return None


async def alter_scram_credentials(
    zk: ZooKeeperClient, alterations: Iterable[ScramAlteration]
) -> dict[str, ScramError | None]:
    """Apply the alterations, grouped by user; per user None or the first error (a user
    with any error is left unchanged, as Kafka's). A user named in two alterations of one
    mechanism is DUPLICATE_RESOURCE; deleting a credential that does not exist is
    RESOURCE_NOT_FOUND."""
    by_user: dict[str, list[ScramAlteration]] = {}
    errors: dict[str, ScramError | None] = {}
    for alteration in alterations:
        by_user.setdefault(alteration.user, []).append(alteration)
    for user, mine in by_user.items():
        mechanisms = [a.mechanism_type for a in mine]
        if len(set(mechanisms)) != len(mechanisms):
            errors[user] = ScramError(
                DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request",
            )
            continue
        errors[user] = next((e for a in mine if (e := _check(a)) is not None), None)
        if errors[user] is None:
            errors[user] = await _write(zk, user, mine)
    return errors


async def _write(
    zk: ZooKeeperClient, user: str, alterations: list[ScramAlteration]
) -> ScramError | None:
    path = _path(user)
    for _ in range(_ATTEMPTS):
        try:
            config, version = await _read(zk, user)
        except ZkDataError as err:
            return ScramError(UNACCEPTABLE_CREDENTIAL, f"{path} holds no config entity: {err}")
        for alteration in alterations:
            mechanism = ScramMechanism.by_type(alteration.mechanism_type)
            assert mechanism is not None
            if alteration.credential is None:
                if config.pop(mechanism.mechanism_name, None) is None:
                    return ScramError(
                        RESOURCE_NOT_FOUND,
                        "Attempt to delete a user credential that does not exist",
                    )
            else:
                config[mechanism.mechanism_name] = format_credential(alteration.credential)
        data = encode_topic_config(config)
        try:
            if version is None:
                await zk.request("create", path, data, makepath=True)
            else:
                await zk.request("set", path, data, version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue
        break
    else:
        return ScramError(UNACCEPTABLE_CREDENTIAL, f"the credentials of {user} kept changing")
    await zk.request(
        "create",
        f"{CONFIG_CHANGES_PATH}/{CONFIG_CHANGE_PREFIX}",
        encode_config_change(f"users/{sanitize(user)}"),
        sequence=True,
        makepath=True,
    )
    log.info(
        "scram event=scram_credentials_altered user=%r mechanisms=%s",
        user,
        ",".join(f"{'-' if a.credential is None else '+'}{a.mechanism_type}" for a in alterations),
    )
    return None
