"""Client quotas as Kafka 2.x keeps them in ZooKeeper (KIP-13, KIP-55, KIP-546): the
entities, their znodes and the checks an alteration must pass. Pure functions, no I/O;
:mod:`proto.zk.client_quota_admin` reads and writes the znodes with them.

An entity is a user, a client id, or a user and a client id, either of which may be the
default (``<default>``)::

    /config/clients/<client-id>                  client-id quotas (and <default>)
    /config/users/<user>                         user quotas (and <default>)
    /config/users/<user>/clients/<client-id>     user and client-id quotas (either <default>)

Names are sanitized (Kafka's ``Sanitizer``: URL encoding, so ``/`` becomes ``%2F`` and a
name is always one path segment), and the content is a config entity's JSON,
``{"version":1,"config":{"producer_byte_rate":"1024"}}``, values as strings. A change is
announced by ``{"version":2,"entity_path":"clients/<client-id>"}`` under
``/config/changes``, like any config change.
"""

from __future__ import annotations

import math
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from proto.errors import MinibrokerError
from proto.zk.znodes import CONFIG_CLIENTS_PATH, CONFIG_USERS_PATH, DEFAULT_BROKER_ENTITY

__all__ = [
    "CLIENT_ID",
    "CONSUMER_BYTE_RATE",
    "CONTROLLER_MUTATION_RATE",
    "DEFAULT_ENTITY",
    "PRODUCER_BYTE_RATE",
    "QUOTA_CONFIG_TYPES",
    "REQUEST_PERCENTAGE",
    "USER",
    "FilterComponent",
    "QuotaEntity",
    "QuotaRequestError",
    "apply_quota_ops",
    "desanitize",
    "filter_entities",
    "quota_values",
    "sanitize",
]

PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
REQUEST_PERCENTAGE: Final = "request_percentage"
CONTROLLER_MUTATION_RATE: Final = "controller_mutation_rate"
QUOTA_CONFIG_TYPES: Final[Mapping[str, type]] = {
    PRODUCER_BYTE_RATE: int,
    CONSUMER_BYTE_RATE: int,
    REQUEST_PERCENTAGE: float,
    CONTROLLER_MUTATION_RATE: float,
}
"""Kafka 2.8's ``QuotaConfigs`` of users and clients: the byte rates are LONGs (bytes per
second), the others DOUBLEs. ``controller_mutation_rate`` (KIP-599) is stored and described
but not enforced: every topic mutation here goes through ZooKeeper, unthrottled."""

USER: Final = "user"
CLIENT_ID: Final = "client-id"
"""The entity types of the Kafka protocol (``ClientQuotaEntity.USER``, ``CLIENT_ID``)."""
DEFAULT_ENTITY: Final = DEFAULT_BROKER_ENTITY
"""``<default>``: Kafka's ``ConfigEntityName.Default``, never a sanitized name."""
_EPSILON = 1e-6


class QuotaRequestError(MinibrokerError, ValueError):
    """A request Kafka refuses: ``code`` is its error (INVALID_REQUEST, UNSUPPORTED_VERSION)."""

    def __init__(self, message: str, code: int = 42) -> None:
        super().__init__(message)
        self.code = code


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: Java's ``URLEncoder`` (UTF-8), with ``*`` as ``%2A``
    and a space as ``%20`` (``~`` too is encoded, as Java does)."""
    return urllib.parse.quote(name, safe="-_.").replace("~", "%7E")


def desanitize(name: str) -> str:
    """Kafka's ``Sanitizer.desanitize`` (``URLDecoder``: ``+`` is a space)."""
    return urllib.parse.unquote_plus(name, errors="strict")


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A quota entity by its sanitized names: None where the entity has no such part,
    :data:`DEFAULT_ENTITY` for the default user or client id."""

    user: str | None = None
    client_id: str | None = None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise QuotaRequestError("Invalid empty client quota entity")

    @classmethod
    def of(cls, parts: Iterable[tuple[str, str | None]]) -> QuotaEntity:
        """From the protocol's ``(entity_type, name)`` pairs, a None name being the default
        (Kafka's ``parseAndSanitizeQuotaEntity``). QuotaRequestError as Kafka refuses them."""
        user: str | None = None
        client_id: str | None = None
        seen = False
        for entity_type, name in parts:
            seen = True
            sanitized = DEFAULT_ENTITY if name is None else sanitize(name)
            if entity_type == USER:
                user = sanitized
            elif entity_type == CLIENT_ID:
                client_id = sanitized
            elif entity_type == "ip":
                raise QuotaRequestError("IP quotas (KIP-612) are not supported")
            else:
                raise QuotaRequestError(f"Unhandled client quota entity type: {entity_type}")
            if name is not None and not name:
                raise QuotaRequestError(f"Empty {entity_type} not supported")
        if not seen:
            raise QuotaRequestError("Invalid empty client quota entity")
        return cls(user, client_id)

    def sort_key(self) -> tuple[str, str]:
        """Clients first, then users, then users with clients (``""`` sorts first)."""
        return (self.user or "", self.client_id or "")

    def parts(self) -> list[tuple[str, str | None]]:
        """The protocol's ``(entity_type, name)`` pairs, None for a default."""
        found: list[tuple[str, str | None]] = []
        if self.user is not None:
            found.append((USER, _name(self.user)))
        if self.client_id is not None:
            found.append((CLIENT_ID, _name(self.client_id)))
        return found

    @property
    def config_type(self) -> str:
        """``users`` or ``clients``: where the entity's znode lives."""
        return "clients" if self.user is None else "users"

    @property
    def entity_name(self) -> str:
        """The znode's path below ``/config/<type>``, as the change notification names it."""
        if self.user is None:
            assert self.client_id is not None
            return self.client_id
        if self.client_id is None:
            return self.user
        return f"{self.user}/clients/{self.client_id}"

    @property
    def path(self) -> str:
        root = CONFIG_CLIENTS_PATH if self.user is None else CONFIG_USERS_PATH
        return f"{root}/{self.entity_name}"

    @classmethod
    def from_entity_path(cls, entity_type: str, name: str) -> QuotaEntity:
        """The entity a change notification names (``clients``, ``<c>``) or (``users``,
        ``<u>[/clients/<c>]``); ValueError for anything else."""
        parts = name.split("/")
        if entity_type == "clients" and len(parts) == 1:
            return cls(None, parts[0])
        if entity_type == "users" and len(parts) == 1:
            return cls(parts[0], None)
        if entity_type == "users" and len(parts) == 3 and parts[1] == "clients":
            return cls(parts[0], parts[2])
        raise ValueError(f"not a quota entity: {entity_type}/{name}")

    def describe(self) -> str:
        """As Kafka's ``kafka-configs`` names it: ``user-principal 'alice', client-id 'app'``."""
        words = []
        if self.user is not None:
            words.append(
                "the default user-principal"
                if self.user == DEFAULT_ENTITY
                else f"user-principal '{_name(self.user)}'"
            )
        if self.client_id is not None:
            words.append(
                "the default client-id"
                if self.client_id == DEFAULT_ENTITY
                else f"client-id '{_name(self.client_id)}'"
            )
        return ", ".join(words)


def _name(sanitized: str) -> str | None:
    return None if sanitized == DEFAULT_ENTITY else desanitize(sanitized)


def apply_quota_ops(
    current: Mapping[str, str], ops: Iterable[tuple[str, float | None]]
) -> dict[str, str]:
    """The entity's configs after ``ops`` (key, value; None removes), as Kafka 2.8's
    ``ZkAdminManager.alterClientQuotas`` applies them: an unknown key is refused, a LONG
    must be a whole number (within 1e-6) and is stored as one. Other keys already there
    (a user's SCRAM credentials) are kept. Unlike Kafka 2.8, a value that is not a
    positive finite number is refused too (Kafka's KRaft controller refuses it; ZooKeeper
    mode would store a quota of 0 that throttles forever)."""
    props = dict(current)
    for key, value in ops:
        if value is None:
            props.pop(key, None)
            continue
        kind = QUOTA_CONFIG_TYPES.get(key)
        if kind is None:
            raise QuotaRequestError(f"Invalid configuration key {key}")
        if not math.isfinite(value) or value <= 0:
            raise QuotaRequestError(f"Configuration {key} must be a positive number: {value}")
        if kind is int:
            whole = int(value + _EPSILON)
            if abs(whole - value) > _EPSILON:
                raise QuotaRequestError(f"Configuration {key} must be a LONG value")
            props[key] = str(whole)
        else:
            props[key] = repr(float(value))
    return props


def quota_values(props: Mapping[str, str]) -> dict[str, float]:
    """The quota configs among an entity's configs, as numbers (DescribeClientQuotas'
    values). A value that is not a number (a hand-written znode) is left out."""
    values: dict[str, float] = {}
    for key, text in props.items():
        if key not in QUOTA_CONFIG_TYPES:
            continue
        try:
            value = float(text)
        except ValueError:
            continue
        if math.isfinite(value):
            values[key] = value
    return values


@dataclass(frozen=True, slots=True)
class FilterComponent:
    """One component of DescribeClientQuotas' filter (Kafka's ``ClientQuotaFilterComponent``):
    ``match_type`` 0 is the entity ``match`` exactly, 1 the default, 2 any named entity."""

    entity_type: str
    match_type: int
    match: str | None = None


_EXACT, _DEFAULT, _SPECIFIED = 0, 1, 2
_ANY: Final = object()


def filter_entities(
    entities: Mapping[QuotaEntity, Mapping[str, float]],
    components: Iterable[FilterComponent],
    strict: bool,
) -> dict[QuotaEntity, dict[str, float]]:
    """Kafka 2.8's ``describeClientQuotas``: the entities with quota values that match
    every component; with ``strict``, only entities with no part the filter leaves out.
    QuotaRequestError for a filter Kafka refuses."""
    wanted: dict[str, object] = {}
    for c in components:
        if c.entity_type == "":
            raise QuotaRequestError("Unexpected empty filter component entity type")
        if c.entity_type not in (USER, CLIENT_ID):
            raise QuotaRequestError(f"Custom entity type '{c.entity_type}' not supported", code=35)
        if c.entity_type in wanted:
            kind = "user" if c.entity_type == USER else "client"
            raise QuotaRequestError(f"Duplicate {kind} filter component entity type")
        if c.match_type == _EXACT:
            if c.match is None:
                raise QuotaRequestError("an exact match needs a name")
            wanted[c.entity_type] = sanitize(c.match)
        elif c.match_type == _DEFAULT:
            wanted[c.entity_type] = DEFAULT_ENTITY
        elif c.match_type == _SPECIFIED:
            wanted[c.entity_type] = _ANY
        else:
            raise QuotaRequestError(f"Unexpected match type: {c.match_type}")

    def matches(entity_type: str, name: str | None) -> bool:
        if entity_type not in wanted:
            return name is None or not strict
        want = wanted[entity_type]
        if want is _ANY:
            return name is not None
        return name == want

    return {
        entity: dict(values)
        for entity, values in sorted(entities.items(), key=lambda e: e[0].sort_key())
        if values and matches(USER, entity.user) and matches(CLIENT_ID, entity.client_id)
    }
